"""``--junit FILE`` of check-trace, check-history and conform: well-formed JUnit XML with one test
case per property, anomaly, component or conform finding, failed exactly where the report holds a finding."""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from rmqspec import junit
from rmqspec.cli import EXIT_BAD_INPUT, EXIT_OK, EXIT_VIOLATION, main
from rmqspec.conform import protocol as p
from rmqspec.properties.history import ANOMALIES
from rmqspec.properties.trace import TraceReport, TraceViolation

TRACES = Path(__file__).parent / "data" / "traces"
SERVE = f"{sys.executable} -m rmqspec.cli serve-reference"
HEADER = {"format": "rmqspec-history", "version": 1, "mode": "CLUSTERING", "consumption": "concurrent"}
HEADER |= {"rocketmq": "4.9.8", "group": "G"}


def _suite(path: Path) -> tuple[ET.Element, dict[str, ET.Element]]:
    """The one testsuite of a report, checked for the JUnit shape, and its cases by name."""
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    suites = root.findall("testsuite")
    assert len(suites) == 1
    suite = suites[0]
    cases = suite.findall("testcase")
    assert all(c.get("name") and c.get("classname") and c.get("time") is not None for c in cases)
    failed = [c for c in cases if c.find("failure") is not None]
    skipped = [c for c in cases if c.find("skipped") is not None and c.find("failure") is None]
    assert int(suite.get("tests", "-1")) == len(cases) == int(root.get("tests", "-1"))
    assert int(suite.get("failures", "-1")) == len(failed) == int(root.get("failures", "-1"))
    assert int(suite.get("skipped", "-1")) == len(skipped) and suite.get("errors") == "0"
    for case in failed:
        failure = case.find("failure")
        assert failure is not None and failure.get("message") and failure.get("type") and failure.text
    by_name = {c.get("name", ""): c for c in cases}
    assert len(by_name) == len(cases)
    return suite, by_name


def _failed(cases: dict[str, ET.Element]) -> set[str]:
    return {name for name, c in cases.items() if c.find("failure") is not None}


def test_check_trace_junit_has_conformance_and_every_property(tmp_path: Path) -> None:
    out = tmp_path / "ok.xml"
    assert main(["check-trace", str(TRACES / "conforming.jsonl"), "--junit", str(out)]) == EXIT_OK
    _, cases = _suite(out)
    assert "conformance" in cases and len(cases) > 10 and not _failed(cases)
    bad = tmp_path / "bad.xml"
    assert main(["check-trace", str(TRACES / "divergent.jsonl"), "--junit", str(bad)]) == EXIT_VIOLATION
    _, cases = _suite(bad)
    assert _failed(cases) == {"conformance"}


def test_trace_property_violation_fails_that_property_only() -> None:
    report = TraceReport("p", {}, invariant_counts={"INV-1": 0, "INV-2": 2})
    report.violation_count = 2
    report.violations = [TraceViolation(3, "INV-2", "name", "detail", "R1.1")]
    cases = {c.name: c for c in junit.trace_cases(report)}
    assert cases["INV-2"].failure is not None and "step 3" in cases["INV-2"].failure
    assert cases["INV-1"].failure is None and cases["conformance"].failure is None


def _history(path: Path, events: list[dict[str, object]]) -> Path:
    path.write_text("\n".join(json.dumps(e) for e in [HEADER, *events]) + "\n")
    return path


def test_check_history_junit_fails_the_anomaly_found(tmp_path: Path) -> None:
    produce = [{"time": 1, "type": "produce", "topic": "T", "queue": 0, "offset": o} for o in range(2)]
    deliver = {"time": 2, "type": "deliver", "consumer": "a", "topic": "T", "queue": 0, "offset": 1}
    commit = {"time": 3, "type": "commit", "consumer": "a", "topic": "T", "queue": 0, "offset": 2}
    lost = _history(tmp_path / "lost.jsonl", [*produce, deliver, commit])  # offset 0 never delivered
    out = tmp_path / "lost.xml"
    assert main(["check-history", str(lost), "--junit", str(out)]) == EXIT_VIOLATION
    _, cases = _suite(out)
    assert set(cases) == set(ANOMALIES) and _failed(cases) == {"lost"}
    fine = _history(tmp_path / "fine.jsonl", produce[:1])
    assert main(["check-history", str(fine), "--junit", str(tmp_path / "fine.xml")]) == EXIT_OK
    assert not _failed(_suite(tmp_path / "fine.xml")[1])


def test_conform_junit_has_a_failing_case_per_finding_in_its_component(tmp_path: Path) -> None:
    out = tmp_path / "conform.xml"
    sut = f"{SERVE} --plant update_ignores_increase_only"
    args = ["conform", "--sut", sut, "--components", "allocate,remoteOffsetStore", "--examples", "400"]
    assert main([*args, "--out", str(tmp_path / "run"), "--junit", str(out)]) == EXIT_VIOLATION
    _, cases = _suite(out)
    [finding] = _failed(cases)  # named by its fingerprint
    assert set(cases) == {p.ALLOCATE, finding} and finding.startswith("store.clone table[")
    assert cases[finding].get("classname") == f"rmqspec.conform.{p.REMOTE_OFFSET_STORE}"
    failure = cases[finding].find("failure")
    assert failure is not None and failure.get("type") == "divergence" and "store.clone" in (failure.text or "")
    passing = tmp_path / "pass.xml"
    assert (
        main(["conform", "--sut", SERVE, "--examples", "10", "--out", str(tmp_path / "p"), "--junit", str(passing)])
        == 0
    )
    _, cases = _suite(passing)
    assert set(cases) == set(p.COMPONENTS) and not _failed(cases)


def test_unwritable_junit_path_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "no" / "such" / "dir" / "r.xml"
    assert main(["check-trace", str(TRACES / "conforming.jsonl"), "--junit", str(target)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert str(target) in err and "--junit" in err and len(err.strip().splitlines()) == 1
