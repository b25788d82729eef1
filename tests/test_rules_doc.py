"""The rules and known bugs the project cites are written down in it: ``docs/rules.md``, ``docs/known_bugs.md``.

Every rule id (``R5.7``, ``R3.10a``; the pattern is ``test_rule_homes.RULE_ID``, so a range ``R8.5-R8.8`` counts as
its two ends) and every known-bug id (``RMQ-14``) that a file of ``spec/``, ``reference/``, ``refinement/``,
``properties/``, ``src/`` or ``docs/`` cites must have an entry, a heading ``### <id> <title>``, in rules.md or
known_bugs.md. Each entry must name a class (``ClassName#method`` or a class name in code font) and a RocketMQ
source file with a line (``client/consumer/store/LocalFileOffsetStore.java:79``). And no file of the project may
name a path of a development machine: the project stands alone.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
from collections import defaultdict
from pathlib import Path
from types import ModuleType


def _sibling(name: str) -> ModuleType:
    """A module of tests/ (the suite imports in importlib mode, so test modules cannot import each other)."""
    spec = importlib.util.spec_from_file_location(f"_rules_doc_{name}", Path(__file__).with_name(f"{name}.py"))
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


RULE_ID: re.Pattern[str] = _sibling("test_rule_homes").RULE_ID  # the one rule-id pattern of the suite
ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "docs" / "rules.md"
KNOWN_BUGS = ROOT / "docs" / "known_bugs.md"
CITING_DIRS = ("spec", "reference", "refinement", "properties", "src", "docs")
TEXT_SUFFIXES = {".py", ".md", ".java", ".json", ".toml", ".txt", ".cfg", ".yaml", ".yml", ".jsonl", ".sh", ""}

BUG_ID = re.compile(r"\bRMQ-\d+\b")
HEADING = re.compile(r"^### (R\d+\.\d+[a-z]?|RMQ-\d+) \S", re.MULTILINE)
CLASS_NAME = re.compile(r"`[A-Z]\w*(?:\.[A-Z]\w*)*(?:#[\w<>]+)?`")
SOURCE_LINE = re.compile(r"`(?:client|broker|common|store|remoting|tools)/[\w/]+\.java:\d+`")
# Built from pieces so that this file does not itself name such a path.
MACHINE_PATH = re.compile("/" + "work/" + "|" + re.escape("..") + "/" + "shared")


def project_files(root: Path = ROOT) -> list[Path]:
    """The project's text files: git's (tracked, or new and not ignored), else all outside caches and the venv."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        paths = [root / p for p in out.split("\0") if p]
    except (OSError, subprocess.CalledProcessError):
        skip = {".git", ".venv", "__pycache__", ".pytest_cache", ".ruff_cache", ".hypothesis", ".mypy_cache"}
        paths = [p for p in root.rglob("*") if p.is_file() and not skip & set(p.relative_to(root).parts)]
    return [p for p in paths if p.is_file() and p.suffix in TEXT_SUFFIXES]


def _text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return None


def cited_ids(root: Path = ROOT) -> dict[str, list[str]]:
    """id -> the places (``file:line``) that cite it, in the citing directories, the two documents left out."""
    own = {root / "docs" / "rules.md", root / "docs" / "known_bugs.md"}
    out: dict[str, list[str]] = defaultdict(list)
    for path in project_files(root):
        rel = path.relative_to(root)
        if rel.parts[0] not in CITING_DIRS or path in own:
            continue
        text = _text(path)
        if text is None:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            for found in RULE_ID.findall(line) + BUG_ID.findall(line):
                out[found].append(f"{rel}:{n}")
    return out


def entries(path: Path) -> dict[str, str]:
    """id -> the text of its entry (its heading up to the next heading of any level)."""
    text = path.read_text(encoding="utf-8")
    out: dict[str, str] = {}
    for m in HEADING.finditer(text):
        rest = text[m.end() :]
        end = re.search(r"^#{1,3} ", rest, re.MULTILINE)
        assert m.group(1) not in out, f"{path.name}: two entries for {m.group(1)}"
        out[m.group(1)] = text[m.start() : m.end() + (end.start() if end else len(rest))]
    return out


def missing_entries(root: Path = ROOT) -> dict[str, list[str]]:
    rules = entries(root / "docs" / "rules.md")
    bugs = entries(root / "docs" / "known_bugs.md")
    return {
        i: places
        for i, places in cited_ids(root).items()
        if (i not in bugs if i.startswith("RMQ-") else i not in rules)
    }


def incomplete_entries(path: Path) -> list[str]:
    """The ids whose entry names no class or no source file with a line."""
    return [i for i, body in entries(path).items() if not CLASS_NAME.search(body) or not SOURCE_LINE.search(body)]


def machine_paths(root: Path = ROOT) -> list[str]:
    out = []
    for path in project_files(root):
        text = _text(path)
        if text is None:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if MACHINE_PATH.search(line):
                out.append(f"{path.relative_to(root)}:{n}")
    return out


def test_every_cited_rule_and_known_bug_has_an_entry() -> None:
    missing = missing_entries()
    listing = [f"{i}: cited at {', '.join(places[:3])}" for i, places in sorted(missing.items())]
    assert not missing, "ids cited with no entry in docs/rules.md or docs/known_bugs.md:\n" + "\n".join(listing)


def test_the_reader_finds_the_citations_and_the_entries() -> None:
    cited = cited_ids()
    assert len([i for i in cited if i.startswith("R")]) > 80
    assert len([i for i in cited if i.startswith("RMQ-")]) > 10
    assert any(p.startswith("spec/pull.py:") for p in cited["R5.7"])
    assert "R3.10a" in entries(RULES) and "RMQ-14" in entries(KNOWN_BUGS)


def test_every_entry_names_a_class_and_a_file_with_a_line() -> None:
    assert not incomplete_entries(RULES), incomplete_entries(RULES)
    assert not incomplete_entries(KNOWN_BUGS), incomplete_entries(KNOWN_BUGS)


def test_no_project_file_names_a_development_machine_path() -> None:
    found = machine_paths()
    assert not found, "paths of a development machine in:\n" + "\n".join(found)


def test_the_checks_fail_on_a_missing_or_bare_entry(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "spec").mkdir()
    (tmp_path / "docs" / "rules.md").write_text(
        "## Pull\n\n### R5.7 Pull statuses\n\n- **Where:** `DefaultMQPushConsumerImpl#pullMessage`, "
        "`client/impl/consumer/DefaultMQPushConsumerImpl.java:371`.\n\n### R5.2 The piggy-backed commit\n\n"
        "- **4.9.8:** no place named.\n",
        encoding="utf-8",
    )
    (tmp_path / "docs" / "known_bugs.md").write_text("# Known bugs\n", encoding="utf-8")
    (tmp_path / "spec" / "pull.py").write_text("# R5.7, R99.9 and RMQ-99\n", encoding="utf-8")
    (tmp_path / "docs" / "notes.md").write_text("see " + "/" + "work/elsewhere\n", encoding="utf-8")
    assert set(missing_entries(tmp_path)) == {"R99.9", "RMQ-99"}
    assert incomplete_entries(tmp_path / "docs" / "rules.md") == ["R5.2"]
    assert machine_paths(tmp_path) == ["docs/notes.md:1"]
