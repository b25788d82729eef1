"""docs/spec.md's map, concern sections and planted-bug table agree with the code, so they cannot rot.

The map (the table under "Map: RocketMQ concern, module, actions, properties, planted bugs") has one row per module
of ``spec/``: its actions, the properties it defines and the planted bugs of ``spec/variants/<module>.py``. Those
columns are read from the code here: an action is a member of ``actions.Action`` defined in the module, a property a
record of ``invariants.INVARIANTS`` or ``ACTION_PROPERTIES`` whose check the module defines, a planted bug a variant
of ``variants.VARIANTS`` defined in ``spec/variants/<module>.py``.
"""

from __future__ import annotations

import re
import typing
from collections import defaultdict
from pathlib import Path

from rmqspec.spec import actions, invariants
from rmqspec.spec.model import Model
from rmqspec.spec.variants import VARIANTS

DOC = Path(__file__).resolve().parent.parent / "docs" / "spec.md"
MAP_TITLE = "## Map: RocketMQ concern, module, actions, properties, planted bugs"
PLANTED_TITLE = "## Planted bugs: `spec/variants/`"


def _module(qualified: str) -> str:
    return qualified.rsplit(".", 1)[-1]


def _section(text: str, title: str) -> str:
    start = text.index(title + "\n")
    end = text.find("\n## ", start + len(title))
    return text[start : end if end >= 0 else len(text)]


def _table_rows(section: str) -> list[list[str]]:
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| ---")]
    return [[cell.strip() for cell in row.strip().strip("|").split("|")] for row in rows[1:]]


def _names(cell: str) -> list[str]:
    return re.findall(r"`(\w+)`", cell)


def _ids(cell: str) -> list[str]:
    return re.findall(r"\b(?:INV|LIV)-\w+", cell)


def code_actions() -> dict[str, list[str]]:
    out: dict[str, list[str]] = defaultdict(list)
    for action in typing.get_args(actions.Action):
        out[_module(action.__module__)].append(action.__name__)
    return out


def code_properties() -> dict[str, set[str]]:
    out: dict[str, set[str]] = defaultdict(set)
    for prop in (*invariants.INVARIANTS, *invariants.ACTION_PROPERTIES):
        out[_module(prop.check.__module__)].add(prop.id)
    return out


def code_variants() -> dict[str, set[str]]:
    out: dict[str, set[str]] = defaultdict(set)
    for name, cls in VARIANTS.items():
        out[_module(cls.__module__)].add(name)
    return out


def doc_map() -> dict[str, list[str]]:
    """module -> its map row's cells (concern, module, actions, properties, planted bugs)."""
    rows = _table_rows(_section(DOC.read_text(encoding="utf-8"), MAP_TITLE))
    out = {}
    for row in rows:
        match = re.match(r"`spec/(\w+)\.py`", row[1])
        assert match, row
        out[match.group(1)] = row
    return out


def test_the_map_lists_each_modules_properties() -> None:
    rows = doc_map()
    shown = {module: set(_ids(row[3])) for module, row in rows.items() if _ids(row[3])}
    assert shown == dict(code_properties())


def test_the_map_lists_each_modules_planted_bugs() -> None:
    rows = doc_map()
    shown = {module: set(_names(row[4])) for module, row in rows.items() if _names(row[4])}
    assert shown == dict(code_variants())


def test_the_map_lists_each_modules_actions() -> None:
    rows = doc_map()
    shown = {module: _names(row[2]) for module, row in rows.items() if _names(row[2])}
    assert shown == dict(code_actions())


def test_the_map_and_the_concern_sections_follow_the_order_of_models_bases() -> None:
    concerns = [_module(base.__module__) for base in Model.__bases__]
    text = DOC.read_text(encoding="utf-8")
    headed = re.findall(r"^## (\w+): `spec/\1\.py`", text, flags=re.MULTILINE)
    assert headed[: len(concerns)] == concerns
    assert list(doc_map())[: len(concerns)] == concerns


def test_each_concern_section_names_its_planted_bugs() -> None:
    text = DOC.read_text(encoding="utf-8")
    for module, names in code_variants().items():
        section = _section(text, next(h for h in text.splitlines() if h.startswith(f"## {module}: `spec/{module}.py`")))
        line = next(line for line in section.splitlines() if line.startswith("**Planted bugs**"))
        assert f"`spec/variants/{module}.py`" in line
        assert set(_names(line.split(":", 1)[1])) == names, module


def test_the_planted_bug_table_lists_every_variant_with_its_module_rules_and_refuting_properties() -> None:
    rows = _table_rows(_section(DOC.read_text(encoding="utf-8"), PLANTED_TITLE))
    shown = {}
    for row in rows:
        name, module, _bug, breaks, refuted_by = row[:5]
        shown[name.strip("`")] = (module, tuple(breaks.split(", ")), tuple(refuted_by.split(", ")))
    expected = {
        name: (f"`spec/variants/{_module(cls.__module__)}.py`", cls.breaks, cls.refuted_by)
        for name, cls in VARIANTS.items()
    }
    assert shown == expected
