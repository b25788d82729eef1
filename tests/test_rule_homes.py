"""Each rule id (docs/rules.md) has one home module in ``spec/``, so ``grep -rn R5.7 spec/`` lands in one module.

A rule id (``R5.7``, ``R3.10a``; a range ``R8.5-R8.8`` counts as its two ends) is *cited* by a module when it
appears in one of the module's comments or docstrings. ``spec/X.py`` and ``spec/variants/X.py`` are one module: a
planted bug lives beside the concern whose rule it breaks. Every other module names the home concern's class or
function instead of the id (e.g. "the pull-status handling, PullMixin._receive_pull").

What is not read: string literals that are not docstrings. They are behaviour, not commentary: the ``rules`` of
each ``Invariant``/``ActionProperty`` record and the ``breaks`` of each ``@planted`` variant are the data the trace,
JUnit and history reports print (a property rests on rules of several concerns by nature), the descriptions in
``config.MUTATIONS`` are each variant's user-visible description, and the texts of ``anomalies.py``, of
``ConfigError``, ``ActionNotEnabled`` and of violation details are shown to users. Rewriting them would change what
the tool prints, so they stay as they are and this test leaves them out.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections import defaultdict
from pathlib import Path

SPEC = Path(__file__).resolve().parent.parent / "spec"

RULE_ID = re.compile(r"(?<![\w.])R\d+\.\d+[a-z]?(?![\w.]\d)")


def _docstring_lines(tree: ast.Module) -> set[int]:
    """The first lines of the module's, classes' and functions' docstrings."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                out.add(first.lineno)
    return out


def module_of(path: Path, spec: Path) -> str:
    """The module a file of ``spec/`` belongs to: ``spec/variants/pull.py`` is ``pull``, as ``spec/pull.py`` is."""
    rel = path.relative_to(spec)
    if path.name == "__init__.py":
        return str(rel)
    return path.stem


def cited_rules(spec: Path = SPEC) -> dict[str, dict[str, list[str]]]:
    """rule id -> module -> the places (``file:line``) whose comments or docstrings cite it."""
    out: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for path in sorted(spec.rglob("*.py")):
        src = path.read_text(encoding="utf-8")
        docstrings = _docstring_lines(ast.parse(src))
        module = module_of(path, spec)
        for tok in tokenize.generate_tokens(io.StringIO(src).readline):
            if tok.type == tokenize.COMMENT or (tok.type == tokenize.STRING and tok.start[0] in docstrings):
                for k, line in enumerate(tok.string.split("\n")):
                    for rule in RULE_ID.findall(line):
                        out[rule][module].append(f"{path.relative_to(spec.parent)}:{tok.start[0] + k}")
    return out


def rules_in_several_modules(spec: Path = SPEC) -> dict[str, dict[str, list[str]]]:
    return {rule: dict(mods) for rule, mods in cited_rules(spec).items() if len(mods) > 1}


def test_each_rule_id_is_cited_in_one_concern_module() -> None:
    several = rules_in_several_modules()
    listing = [
        f"{rule}: " + "; ".join(f"{m} ({', '.join(places)})" for m, places in mods.items())
        for rule, mods in sorted(several.items())
    ]
    assert not several, "rule ids cited in more than one module of spec/:\n" + "\n".join(listing)


def test_rule_ids_are_found_in_comments_and_docstrings() -> None:
    cited = cited_rules()
    assert len(cited) > 60  # the reader finds the rules at all: the pattern and the tokenising work
    assert set(cited["R5.7"]) == {"pull"}
    assert set(cited["R3.10a"]) == {"admin_reset"}


def test_a_variant_counts_as_its_concern_module(tmp_path: Path) -> None:
    spec = tmp_path / "spec"
    (spec / "variants").mkdir(parents=True)
    (spec / "pull.py").write_text('"""The pull (R5.7)."""\n', encoding="utf-8")
    (spec / "variants" / "pull.py").write_text("# breaks R5.7\n", encoding="utf-8")
    (spec / "state.py").write_text(
        'X = "R5.7"  # the pull-status handling, PullMixin._receive_pull\n', encoding="utf-8"
    )
    assert rules_in_several_modules(spec) == {}
    (spec / "config.py").write_text("# see R5.7\n", encoding="utf-8")
    assert set(rules_in_several_modules(spec)["R5.7"]) == {"pull", "config"}
