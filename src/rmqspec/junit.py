"""JUnit XML reports for ``--junit FILE``: the checkers' and ``conform``'s results as test cases, so
a CI system shows each finding as a failed test.

One ``<testsuite>`` per command run, inside ``<testsuites>``. ``check-trace`` has a test case for
conformance and one per property of the model (every invariant and action property); ``check-history``
one per anomaly class (lost, duplicated, ...); ``conform`` one per finding (named by its fingerprint)
and one per component the run checked without a finding. A case
fails (``<failure message=... type=...>`` with the detail as text) when the report holds something
of its own; it is skipped (``<skipped message=...>``) when the run could not check it. The shape
follows the schema Jenkins, GitLab and GitHub's test reporters read.
"""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rmqspec.conform import protocol as p


@dataclass
class Case:
    """One test case: failed if ``failure`` is set (its first line is the message), skipped if
    ``skipped`` is."""

    name: str
    classname: str
    failure: str | None = None
    failure_type: str = "violation"
    skipped: str | None = None
    output: str = ""


def write(path: str, suite: str, cases: list[Case], seconds: float) -> None:
    """Write ``cases`` as one test suite named ``suite`` to ``path`` (atomically); OSError if it
    cannot be written."""
    root = ET.Element("testsuites", name="rmqspec")
    failures = sum(1 for c in cases if c.failure is not None)
    skipped = sum(1 for c in cases if c.skipped is not None and c.failure is None)
    element = ET.SubElement(
        root,
        "testsuite",
        name=suite,
        tests=str(len(cases)),
        failures=str(failures),
        errors="0",
        skipped=str(skipped),
        time=f"{seconds:.3f}",
    )
    for case in cases:
        node = ET.SubElement(element, "testcase", classname=case.classname, name=case.name, time="0")
        if case.failure is not None:
            failure = ET.SubElement(
                node, "failure", message=case.failure.split("\n", 1)[0][:500], type=case.failure_type
            )
            failure.text = case.failure
        elif case.skipped is not None:
            ET.SubElement(node, "skipped", message=case.skipped)
        if case.output:
            ET.SubElement(node, "system-out").text = case.output
    root.set("tests", str(len(cases)))
    root.set("failures", str(failures))
    tmp = Path(f"{path}.tmp")
    ET.ElementTree(root).write(tmp, encoding="utf-8", xml_declaration=True)
    os.replace(tmp, path)


def trace_cases(report: Any) -> list[Case]:
    """``check-trace``: conformance, then every property of the model (``report`` a TraceReport)."""
    d = report.divergence
    conformance = Case("conformance", "rmqspec.check-trace")
    if d is not None:
        conformance.failure = f"divergence at step {d.step} (line {d.line}): {d.kind}: {d.reason or d.field}"
        conformance.failure_type = "divergence"
    cases = [conformance]
    for prop, count in sorted(report.invariant_counts.items()):
        case = Case(prop, "rmqspec.check-trace.properties")
        if not report.invariants_checked:
            case.skipped = "--no-invariants"
        elif count:
            shown = [f"step {v.step}: {v.name}: {v.detail} ({v.rules})" for v in report.violations if v.id == prop]
            case.failure = f"{prop} violated {count} time(s)\n" + "\n".join(shown)
        cases.append(case)
    return cases


def history_cases(report: dict[str, Any], anomalies: tuple[str, ...]) -> list[Case]:
    """``check-history``: one case per anomaly (``report`` is check_history's report). A case fails
    when an anomaly of its kind is not tolerated; tolerated ones are counted in its output."""
    cases = []
    for name in anomalies:
        case = Case(name, "rmqspec.check-history")
        bad = {c: n for c, n in report["not_tolerated"].items() if c.split(":")[0] == name}
        tolerated = {c: v["count"] for c, v in report["tolerated"].items() if c.split(":")[0] == name}
        if name in ("double_owned", "unowned") and not report.get("ownership_checked", True):
            case.skipped = str(report.get("ownership_note", "ownership not checked"))
        if bad:
            entries = [e for e in report.get(name, []) if e.get("class") in bad][:5]
            case.failure = f"{sum(bad.values())} {name} not tolerated: {bad}\n" + "\n".join(map(str, entries))
            case.failure_type = name
        if tolerated:
            case.output = f"tolerated: {tolerated}"
        cases.append(case)
    return cases


def conform_cases(result: Any) -> list[Case]:
    """``conform``: one case per finding, named by its fingerprint (classname
    ``rmqspec.conform.<component>``, the component of the request it happened at; type
    ``divergence`` or ``sut-failure``), and one passing case per component the run checked that has
    no finding (``result`` a ConformResult)."""
    counts = result.counts + [1] * (len(result.findings) - len(result.counts))
    found: list[Case] = []
    failing: set[str] = set()
    for finding, path, count in zip(result.findings, result.script_paths, counts, strict=False):
        component = _component(finding.script)
        failing.add(component)
        case = Case(finding.fingerprint, f"rmqspec.conform.{component}")
        if hasattr(finding, "failure"):
            case.failure = f"{finding.fingerprint}: {finding.failure}".split("\n", 1)[0]
            case.failure_type = "sut-failure"
        else:
            shown = [f"{finding.request['op']} {d.show()}" for d in finding.new_differences]
            case.failure = f"{finding.fingerprint}: " + "; ".join(shown) + f" (found {count} time(s))\n"
            case.failure += f"request {p.encode(finding.request)}\nSUT {p.encode(finding.sut)}\n"
            case.failure += f"reference {p.encode(finding.reference)}"
            case.failure_type = "divergence"
        case.failure += f"\nscript: {path}"
        found.append(case)
    cases = []
    for component in result.components:
        if component in failing:
            continue
        case = Case(component, "rmqspec.conform")
        ops = sorted(op for op in result.unsupported_ops if p.OPS[op].component == component)
        known = [
            f"{fingerprint}: {n}"
            for fingerprint, n in sorted(result.known.items())
            if p.OPS[fingerprint.split(" ", 1)[0]].component == component
        ]
        notes = ([f"unsupported operations: {', '.join(ops)}"] if ops else []) + (
            [f"known differences: {'; '.join(known)}"] if known else []
        )
        case.output = "\n".join(notes)
        cases.append(case)
    return cases + found


def _component(script: list[dict[str, Any]]) -> str:
    """The component of a script's last request; a store operation belongs to the kind of store its
    handle was made as."""
    if not script:
        return "protocol"  # the SUT broke before any request: the handshake or a reset
    last = script[-1]
    if last["op"].startswith("store."):
        made = [r for r in script if r["op"] == "store.new" and r["args"].get("store") == last["args"].get("store")]
        if made:
            return p.component_of(made[-1]) or "protocol"
    return p.component_of(last) or "protocol"
