"""Branch coverage of the model (``spec/``): which branches a campaign or the test suite executed.

A *branch* is what coverage.py calls one: an arc from a line with more than one possible next line
(an ``if``, ``elif``, ``for``, ``while``, a ``match`` case, ...) to one of them, so both the taken
and the not-taken side of every enabling condition and every effect of every transition in
``spec/*.py`` count, and so do the branches of the invariants, the allocation strategies and the
configuration's checks. The planted bugs, ``spec/variants/``, are not the model and are not measured (a
helper a variant overrides is measured as the correct model runs it). *Reached* means executed at least
once in the measured runs: it says the search got there, not that anything was verified there
(docs/campaign.md, "Branch coverage").

- :class:`ArcCollector` records the arcs executed in ``spec/`` while it is active (coverage.py,
  ``branch=True``, restricted to the ``spec/*.py`` files, no data file); a campaign unit wraps its run in
  one and returns the arcs with its row (``encode_arcs``), and the driver unions them.
- :func:`analyze` turns a union of arcs into a :class:`SpecCoverage`: per file, branches in total,
  reached, excluded (``rmqspec.coverage_exclusions``: unreachable by design, each with its reason)
  and reachable; the unreached branches with their source lines; and the exclusion entries that no
  longer match the source as written (*stale*: not applied, so they hide nothing).
- ``rmqspec coverage`` prints it (:func:`describe`), from a campaign's ``coverage.json``, from the
  test suite's (``RMQSPEC_COVERAGE=1 pytest`` writes ``rmqspec-out/test-coverage.json``: tests/conftest.py,
  :class:`SuiteMeasurement`), or after running a campaign itself.

Line numbers are those of the ``spec/`` source the arcs were measured on: every measurement carries
:func:`spec_digest`, and arcs measured on other source are not mixed in.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
import warnings
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import rmqspec.spec

SPEC_DIR = Path(rmqspec.spec.__file__).resolve().parent  # spec/, through the src/rmqspec/spec symlink
FORMAT = "rmqspec-spec-coverage"
# spec/ branch coverage is measured in every 7th unit (docs/campaign.md, "Branch coverage"): coverage.py's
# tracer makes a measured run 2.7x slower (lockstep; 3.3x model-only), so measuring all of them would cost
# the campaign more than half its runs, while one in 7 costs about a quarter, (6 + 2.7) / 7 = 1.24, and
# still measures a few hundred runs of a default campaign. 7 is coprime with the 6 swarm profiles, so the
# measured runs cycle through all of them.
COVERAGE_EVERY = 7
# What is measured: the correct model, spec/*.py. spec/variants/ holds the planted bugs (Config.mutations), which
# override helpers of the correct model; their code is not the model's, so it is neither measured nor counted.
_INCLUDE = [str(SPEC_DIR / "*.py")]
_OMIT = [str(SPEC_DIR / "variants" / "*")]

Arc = tuple[int, int]


def spec_files() -> list[Path]:
    """The model's source files, ``spec/*.py``, in name order."""
    return sorted(SPEC_DIR.glob("*.py"))


def spec_digest() -> str:
    """16 hex digits of SHA-256 over the names and contents of ``spec/*.py``: arcs (line numbers) are
    comparable only between measurements with the same digest."""
    h = hashlib.sha256()
    for path in spec_files():
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


_LOADED_DIGEST: str | None = None


def loaded_digest() -> str:
    """:func:`spec_digest` as of this process's first call: the source its running code was most likely
    loaded from (a process imports ``spec/`` once; an edit afterwards changes the files, not the code).
    A measurement is tagged with it, and the analysis ignores measurements whose tag is not the
    digest of the source it analyses."""
    global _LOADED_DIGEST
    if _LOADED_DIGEST is None:
        _LOADED_DIGEST = spec_digest()
    return _LOADED_DIGEST


class ArcCollector:
    """Records the arcs executed in ``spec/`` while active: ``with ArcCollector() as c: ...; c.arcs``.

    ``arcs`` maps a file name (``model.py``) to its executed arcs, or is ``None`` when coverage.py
    cannot be imported (an executor without it): the run is then simply not measured. Nested inside
    another coverage.py measurement (the test suite under ``RMQSPEC_COVERAGE=1``), the outer one is
    paused meanwhile; a :class:`SuiteMeasurement` gets these arcs at the end instead. The caches of
    ``spec/`` are emptied first (:func:`clear_spec_caches`), so the arcs are those of the run alone,
    whatever ran before it."""

    def __init__(self) -> None:
        self.arcs: dict[str, list[Arc]] | None = None
        self.digest = loaded_digest()
        self._cov: Any = None

    def __enter__(self) -> ArcCollector:
        try:
            import coverage
        except ImportError:
            return self
        self._cov = coverage.Coverage(branch=True, data_file=None, config_file=False, include=_INCLUDE, omit=_OMIT)
        clear_spec_caches()
        self._cov.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None) -> None:
        if self._cov is None:
            return
        self._cov.stop()
        data = self._cov.get_data()
        self.arcs = {Path(f).name: sorted(data.arcs(f) or ()) for f in sorted(data.measured_files())}
        self._cov = None
        if _SUITE is not None:  # the outer measurement was paused meanwhile: it gets these arcs instead
            _SUITE.add(self.arcs)


class SuiteMeasurement:
    """The test suite's measurement (tests/conftest.py, ``RMQSPEC_COVERAGE=1``): the arcs of ``spec/``
    executed in the pytest process from :meth:`start` to :meth:`finish`, which writes them as a coverage
    document (``rmqspec coverage --from FILE``). Arcs of an :class:`ArcCollector` nested inside are
    added to it; code run in other processes (the Spark workers of a campaign test) is not measured."""

    def __init__(self) -> None:
        import coverage

        self._cov = coverage.Coverage(branch=True, data_file=None, config_file=False, include=_INCLUDE, omit=_OMIT)
        self._extra: dict[str, set[Arc]] = {}
        self.digest = loaded_digest()

    def add(self, arcs: Mapping[str, Iterable[Arc]]) -> None:
        for name, pairs in arcs.items():
            self._extra.setdefault(name, set()).update(pairs)

    def start(self) -> None:
        global _SUITE
        _SUITE = self
        self._cov.start()

    def finish(self, path: Path, source: str, tests: int) -> dict[str, Any]:
        """Stop, analyse, write the document to ``path`` and return it."""
        global _SUITE
        self._cov.stop()
        _SUITE = None
        with warnings.catch_warnings():  # "no data collected" when nested collectors took every arc
            warnings.simplefilter("ignore")
            data = self._cov.get_data()
        arcs = {Path(f).name: set(data.arcs(f) or ()) for f in data.measured_files()}
        for name, pairs in self._extra.items():
            arcs.setdefault(name, set()).update(pairs)
        if self.digest != spec_digest():
            raise CoverageFileError(f"{path}: not written: spec/ changed while the suite ran (line numbers differ)")
        document = coverage_document(analyze(arcs), source=source, runs=tests, measured=tests)
        write_document(path, document)
        return document


_SUITE: SuiteMeasurement | None = None


def clear_spec_caches() -> None:
    """Empty the ``functools.cache`` of every function of ``spec/`` loaded in this process. They are pure
    (the allocation strategies, the tolerated anomalies of a configuration), so this changes no result;
    without it a measured run would not execute, hence not show, the branches behind a cache entry an
    earlier run in the same worker filled, and what a run shows would depend on its worker's history."""
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith("rmqspec.spec."):
            continue
        for value in list(vars(module).values()):
            if getattr(value, "__module__", None) == name and callable(getattr(value, "cache_clear", None)):
                value.cache_clear()


def encode_arcs(arcs: Mapping[str, Iterable[Arc]]) -> dict[str, list[int]]:
    """Compact JSON form of arcs: per file, one flat list ``[from1, to1, from2, to2, ...]``."""
    return {name: [n for arc in sorted(set(pairs)) for n in arc] for name, pairs in sorted(arcs.items())}


def decode_arcs(encoded: Mapping[str, Sequence[int]]) -> dict[str, set[Arc]]:
    return {name: set(zip(flat[0::2], flat[1::2], strict=True)) for name, flat in encoded.items()}


def union_arcs(measurements: Iterable[Mapping[str, Sequence[int]]]) -> dict[str, set[Arc]]:
    union: dict[str, set[Arc]] = {}
    for encoded in measurements:
        for name, arcs in decode_arcs(encoded).items():
            union.setdefault(name, set()).update(arcs)
    return union


# --- analysis -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Branch:
    """One branch of ``spec/<file>``: the arc ``source -> target`` (``target`` < 0: leaving the function)."""

    file: str
    source: int
    target: int
    function: str  # qualified name of the enclosing function ("" at module level)
    source_text: str
    target_text: str

    @property
    def where(self) -> str:
        return f"spec/{self.file}:{self.source}->{self.target if self.target > 0 else 'exit'}"

    def to_json(self) -> dict[str, Any]:
        return {
            "where": self.where,
            "file": f"spec/{self.file}",
            "from": self.source,
            "to": self.target,
            "function": self.function,
            "source": self.source_text,
            "target": self.target_text,
        }


@dataclass
class FileFigures:
    branches: int = 0
    reached: int = 0
    excluded: int = 0

    @property
    def reachable(self) -> int:
        return self.branches - self.excluded

    @property
    def percent(self) -> float:
        return round(100.0 * self.reached / self.reachable, 1) if self.reachable else 100.0

    def to_json(self) -> dict[str, Any]:
        return {
            "branches": self.branches,
            "reached": self.reached,
            "excluded": self.excluded,
            "reachable": self.reachable,
            "percent": self.percent,
        }


@dataclass
class SpecCoverage:
    """The branch coverage of ``spec/`` for one union of arcs."""

    digest: str
    files: dict[str, FileFigures]
    reached: list[Branch]
    unreached: list[Branch]
    excluded: list[tuple[Branch, Any]]  # (branch, its Exclusion)
    stale: list[tuple[Any, str]]  # (Exclusion, why it is not applied)
    excluded_but_reached: list[tuple[Branch, Any]]
    arcs: dict[str, set[Arc]] = field(default_factory=dict)

    @property
    def totals(self) -> FileFigures:
        return FileFigures(
            sum(f.branches for f in self.files.values()),
            sum(f.reached for f in self.files.values()),
            sum(f.excluded for f in self.files.values()),
        )

    def excluded_by_category(self) -> dict[str, int]:
        return dict(sorted(Counter(e.category for _, e in self.excluded).items()))

    def to_json(self) -> dict[str, Any]:
        return {
            "digest": self.digest,
            "totals": self.totals.to_json(),
            "files": {f"spec/{name}": figures.to_json() for name, figures in self.files.items()},
            "excluded_by_category": self.excluded_by_category(),
            "unreached": [b.to_json() for b in self.unreached],
            "excluded": [{**b.to_json(), "category": e.category, "reason": e.reason} for b, e in self.excluded],
            "excluded_but_reached": [
                {**b.to_json(), "category": e.category, "reason": e.reason} for b, e in self.excluded_but_reached
            ],
            "stale_exclusions": [{**e.to_json(), "problem": why} for e, why in self.stale],
        }


def branch_universe(arcs: Mapping[str, Iterable[Arc]]) -> tuple[list[Branch], set[tuple[str, Arc]]]:
    """Every branch of ``spec/*.py`` (from coverage.py's static analysis of the source), and which of
    them ``arcs`` executed, as ``(file name, arc)``."""
    import coverage

    paths = spec_files()
    cov = coverage.Coverage(branch=True, data_file=None, config_file=False, include=_INCLUDE, omit=_OMIT)
    data = cov.get_data()
    data.add_arcs({str(p): set(arcs.get(p.name, ())) for p in paths})
    with tempfile.TemporaryDirectory(prefix="rmqspec-coverage-") as tmp:
        out = Path(tmp) / "coverage.json"
        cov.json_report(morfs=[str(p) for p in paths], outfile=str(out))
        report = json.loads(out.read_text(encoding="utf-8"))
    by_name = {Path(name).name: entry for name, entry in report["files"].items()}
    branches: list[Branch] = []
    executed: set[tuple[str, Arc]] = set()
    for path in paths:
        entry = by_name.get(path.name)
        if entry is None:
            continue
        lines = path.read_text(encoding="utf-8").splitlines()
        owner: dict[Arc, tuple[int, str]] = {}
        for name, region in entry.get("functions", {}).items():
            for pair in region["executed_branches"] + region["missing_branches"]:
                arc = (pair[0], pair[1])
                if arc not in owner or region["start_line"] > owner[arc][0]:  # the innermost function
                    owner[arc] = (region["start_line"], name)
        done = {(p[0], p[1]) for p in entry["executed_branches"]}
        for pair in sorted(entry["executed_branches"] + entry["missing_branches"]):
            arc = (pair[0], pair[1])
            branches.append(
                Branch(
                    path.name,
                    arc[0],
                    arc[1],
                    owner.get(arc, (0, ""))[1],
                    _text(lines, arc[0]),
                    _text(lines, arc[1]) if arc[1] > 0 else "exit",
                )
            )
            if arc in done:
                executed.add((path.name, arc))
    return branches, executed


def _text(lines: list[str], number: int) -> str:
    return lines[number - 1].strip() if 0 < number <= len(lines) else ""


def analyze(arcs: Mapping[str, Iterable[Arc]], exclusions: Sequence[Any] | None = None) -> SpecCoverage:
    """Classify every branch of ``spec/`` as reached, excluded (by a matching, non-stale exclusion) or
    unreached; report exclusions that match another number of branches than they claim as stale."""
    if exclusions is None:
        from rmqspec.coverage_exclusions import EXCLUSIONS

        exclusions = EXCLUSIONS
    union = {name: set(pairs) for name, pairs in arcs.items()}
    branches, executed = branch_universe(union)
    matched: dict[Branch, Any] = {}
    stale: list[tuple[Any, str]] = []
    excluded_but_reached: list[tuple[Branch, Any]] = []
    for entry in exclusions:
        hits = [b for b in branches if entry.matches(b)]
        if len(hits) != entry.count:
            found = ", ".join(b.where for b in hits[:5]) + (" ..." if len(hits) > 5 else "")
            stale.append((entry, f"matches {len(hits)} branches, not {entry.count}" + (f": {found}" if hits else "")))
            continue
        for b in hits:
            if (b.file, (b.source, b.target)) in executed:
                excluded_but_reached.append((b, entry))
            else:
                matched.setdefault(b, entry)
    files = {p.name: FileFigures() for p in spec_files()}
    reached, unreached, excluded = [], [], []
    for b in branches:
        figures = files[b.file]
        figures.branches += 1
        if (b.file, (b.source, b.target)) in executed:
            figures.reached += 1
            reached.append(b)
        elif b in matched:
            figures.excluded += 1
            excluded.append((b, matched[b]))
        else:
            unreached.append(b)
    files = {name: f for name, f in files.items() if f.branches}
    return SpecCoverage(spec_digest(), files, reached, unreached, excluded, stale, excluded_but_reached, union)


def growth(measurements: Sequence[tuple[int, Mapping[str, Sequence[int]] | None]]) -> list[tuple[int, int]]:
    """Branches reached against runs: for each measured run ``n`` (1-based, in unit order, unmeasured
    runs counted too), the branches of ``spec/`` reached by the measured runs up to it."""
    branches, _ = branch_universe({})
    universe = {(b.file, (b.source, b.target)) for b in branches}
    first = _first_lines()
    seen: set[tuple[str, Arc]] = set()
    curve = []
    for n, encoded in measurements:
        if encoded is None:
            continue
        for name, arcs in decode_arcs(encoded).items():
            lines = first.get(name, {})
            for a, b in arcs:  # a measured arc names the lines run; a branch, its statements' first lines
                arc = (lines.get(a, a), -lines.get(-b, -b) if b < 0 else lines.get(b, b))
                if (name, arc) in universe:
                    seen.add((name, arc))
        curve.append((n, len(seen)))
    return curve


def _first_lines() -> dict[str, dict[int, int]]:
    """Per file of ``spec/``, each line of a statement that spans several lines mapped to its first line,
    as coverage.py's analysis reports branches (a measured arc may start or end on a later line)."""
    from coverage.python import PythonParser

    out: dict[str, dict[int, int]] = {}
    for path in spec_files():
        parser = PythonParser(filename=str(path))
        parser.parse_source()
        count = len(path.read_text(encoding="utf-8").splitlines())
        out[path.name] = {n: f for n in range(1, count + 1) if (f := parser.first_line(n)) != n}
    return out


# --- rows of a campaign, files on disk --------------------------------------------------------------


def campaign_measurements(rows: Sequence[Mapping[str, Any]]) -> tuple[list[tuple[int, Any]], int, int]:
    """``(run number, arcs or None)`` for each row in unit order, with arcs only where the row was
    measured on the current ``spec/`` source; and how many rows were measured, and on other source."""
    digest = spec_digest()
    out: list[tuple[int, Any]] = []
    measured = other = 0
    for n, row in enumerate(sorted(rows, key=lambda r: r["unit"]), 1):
        encoded = row.get("spec_arcs")
        if encoded is not None and row.get("spec_digest") != digest:
            other += 1
            encoded = None
        measured += encoded is not None
        out.append((n, encoded))
    return out, measured, other


def coverage_document(
    coverage: SpecCoverage, *, source: str, runs: int, measured: int, other_source: int = 0, curve: Any = None
) -> dict[str, Any]:
    """What ``coverage.json`` holds: the analysis, the arcs it came from, and where they came from."""
    return {
        "format": FORMAT,
        "version": 1,
        "source": source,
        "runs": runs,
        "measured_runs": measured,
        "measured_on_other_source": other_source,
        **coverage.to_json(),
        "growth": [list(p) for p in curve or ()],
        "arcs": encode_arcs(coverage.arcs),
    }


def campaign_document(rows: Sequence[Mapping[str, Any]], source: str) -> dict[str, Any]:
    """The coverage document of a campaign's rows: the union of the measured runs' arcs, analysed,
    with the growth curve (branches reached against runs)."""
    measurements, measured, other = campaign_measurements(rows)
    union = union_arcs(encoded for _, encoded in measurements if encoded is not None)
    return coverage_document(
        analyze(union),
        source=source,
        runs=len(rows),
        measured=measured,
        other_source=other,
        curve=growth(measurements),
    )


def summary_figures(document: Mapping[str, Any]) -> dict[str, Any]:
    """The flat figures summary.json carries (the lists stay in coverage.json)."""
    return {
        **document["totals"],
        "measured_runs": document["measured_runs"],
        "measured_on_other_source": document["measured_on_other_source"],
        "runs": document["runs"],
        "excluded_by_category": document["excluded_by_category"],
        "unreached": len(document["unreached"]),
        "stale_exclusions": len(document["stale_exclusions"]),
        "file": "coverage.json",
    }


class CoverageFileError(Exception):
    """A coverage.json that cannot be read (exit code 2); the message names the file and the field."""


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_str(v: Any) -> bool:
    return isinstance(v, str)


def _any(v: Any) -> bool:
    return True


def _is_str_or_null(v: Any) -> bool:
    return v is None or isinstance(v, str)


_FIGURES = {"branches": _is_int, "reached": _is_int, "excluded": _is_int, "reachable": _is_int, "percent": _is_number}
_BRANCH = {"where": _is_str, "function": _is_str_or_null, "source": _is_str, "target": _is_str}
# What coverage.json holds (coverage_document) and what describe() and reanalyze() read: each field's check, or,
# for a list or an object of records, the fields of each record. Optional fields: those an older file may lack.
_SCHEMA: dict[str, Any] = {
    "digest": _is_str,
    "source": _is_str,
    "runs": _is_int,
    "measured_runs": _is_int,
    "totals": _FIGURES,
    "files": ("object of", _FIGURES),
    "excluded_by_category": ("object of", _is_int),
    "unreached": ("array of", _BRANCH),
    "excluded_but_reached": ("array of", {**_BRANCH, "category": _is_str}),
    "stale_exclusions": ("array of", {**_BRANCH, "file": _is_str, "problem": _is_str, "where": _any, "target": _any}),
}
_OPTIONAL: dict[str, Any] = {
    "measured_on_other_source": _is_int,
    "note": _is_str,
    "growth": ("array of", lambda p: isinstance(p, list) and len(p) == 2 and all(map(_is_int, p))),
}


def _schema_problem(value: Any, rule: Any, at: str) -> str | None:
    """Where ``value`` breaks ``rule`` (a check, a record's checks, or ("array of"/"object of", rule)), or None."""
    if callable(rule):
        return None if rule(value) else at
    if isinstance(rule, dict):
        if not isinstance(value, dict):
            return at
        for key, sub in rule.items():
            problem = _schema_problem(value.get(key), sub, f"{at}.{key}")
            if problem is not None:
                return problem
        return None
    kind, sub = rule
    if kind == "array of":
        items = list(enumerate(value)) if isinstance(value, list) else None
    else:
        items = list(value.items()) if isinstance(value, dict) else None
    if items is None:
        return at
    path = "{}[{}]" if kind == "array of" else "{}.{}"
    return next((p for k, v in items if (p := _schema_problem(v, sub, path.format(at, k))) is not None), None)


def load_document(path: Path) -> dict[str, Any]:
    """A coverage.json, read by the one JSON reader (``rmqspec.jsonin``) and checked field by field against what
    ``coverage_document`` writes; raises CoverageFileError naming the file and the first bad field."""
    from rmqspec.jsonin import InputError, read_file

    try:
        document = read_file(path, "a coverage.json")
    except InputError as err:
        raise CoverageFileError(str(err)) from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise CoverageFileError(f"{path}: field 'format': expected {FORMAT!r} (a coverage.json written by rmqspec)")
    if not isinstance(document.get("arcs"), dict):
        raise CoverageFileError(f"{path}: field 'arcs': expected an object of spec/ files' arcs")
    for name, flat in document["arcs"].items():
        if not isinstance(flat, list) or len(flat) % 2 or not all(map(_is_int, flat)):
            raise CoverageFileError(f"{path}: field 'arcs.{name}': expected a flat list of line-number pairs")
    checks = [(k, rule) for k, rule in _SCHEMA.items()]
    checks += [(k, rule) for k, rule in _OPTIONAL.items() if k in document]
    for key, rule in checks:
        problem = _schema_problem(document.get(key), rule, key)
        if problem is not None:
            raise CoverageFileError(
                f"{path}: field {problem!r}: missing or of the wrong type (not a coverage.json written by rmqspec)"
            )
    return document


def reanalyze(document: dict[str, Any]) -> dict[str, Any]:
    """The document again, with the current exclusions, if its arcs were measured on the current
    ``spec/`` source; otherwise as saved (its line numbers refer to the source it was measured on)."""
    if document["digest"] != spec_digest():
        return {
            **document,
            "note": "spec/ has changed since this was measured: shown as saved, with the "
            "line numbers and exclusions of the source it was measured on",
        }
    coverage = analyze(decode_arcs(document["arcs"]))
    keep = {
        k: document[k]
        for k in ("source", "runs", "measured_runs", "measured_on_other_source", "growth")
        if k in document
    }
    return coverage_document(
        coverage,
        source=keep["source"],
        runs=keep["runs"],
        measured=keep["measured_runs"],
        other_source=keep.get("measured_on_other_source", 0),
        curve=keep.get("growth"),
    )


def write_document(path: Path, document: dict[str, Any]) -> None:
    from rmqspec.outfiles import write_atomic

    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(document, indent=1) + "\n")


# --- printing ------------------------------------------------------------------------------------


def describe(document: Mapping[str, Any], limit: int | None = None) -> str:
    """The per-file table, the excluded branches by category, every unreached branch as
    ``spec/file:line->line`` with its source line, and the stale exclusions."""
    totals = document["totals"]
    lines = [
        f"spec/ branch coverage: {document['source']}; {document['measured_runs']} of {document['runs']} runs "
        f"measured (spec digest {document['digest']})",
    ]
    if document.get("measured_on_other_source"):
        lines.append(f"  ({document['measured_on_other_source']} runs measured on other spec/ source: not counted)")
    if document.get("note"):
        lines.append(f"  note: {document['note']}")
    lines.append(f"{'file':<24}{'branches':>9}{'excluded':>9}{'reachable':>10}{'reached':>9}{'reached/reachable':>19}")
    for name, f in list(document["files"].items()) + [("total", totals)]:
        lines.append(
            f"{name:<24}{f['branches']:>9}{f['excluded']:>9}{f['reachable']:>10}{f['reached']:>9}{f['percent']:>18.1f}%"
        )
    by_category = document.get("excluded_by_category", {})
    if by_category:
        lines.append(
            "excluded (unreachable by a default campaign, rmqspec/coverage_exclusions.py): "
            + ", ".join(f"{category} {n}" for category, n in by_category.items())
        )
    unreached = document["unreached"]
    lines.append(f"unreached branches ({len(unreached)}):" if unreached else "unreached branches: none")
    shown = unreached if limit is None else unreached[:limit]
    for b in shown:
        lines.append(f"  {b['where']}  {b['function'] or '(module)'}: {b['source']}  ->  {b['target']}")
    if len(shown) < len(unreached):
        lines.append(f"  ... and {len(unreached) - len(shown)} more (--json lists them all)")
    stale = document.get("stale_exclusions", [])
    if stale:
        lines.append(f"STALE exclusions ({len(stale)}, not applied; fix rmqspec/coverage_exclusions.py):")
        for e in stale:
            lines.append(f"  spec/{e['file']} {e['function'] or '(module)'}: {e['source']!r}: {e['problem']}")
    reached_anyway = document.get("excluded_but_reached", [])
    if reached_anyway:
        lines.append(f"excluded branches that were reached here ({len(reached_anyway)}; counted as reached):")
        for b in reached_anyway[: limit or len(reached_anyway)]:
            lines.append(f"  {b['where']}  [{b['category']}] {b['source']}")
    return "\n".join(lines)
