"""Every finding of a ``conform`` run, each once: a divergence is named by its fingerprint (the
operation, the path of each differing field and the shape of each difference, not the values), so two
bugs on one operation are two findings; ``--known`` entries accept a fingerprint or a field path with
value patterns, each with its reason, and version 1 files keep their meaning; shrinking keeps the
fingerprint."""

from __future__ import annotations

import json
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from rmqspec.cli import EXIT_BAD_INPUT, EXIT_OK, EXIT_VIOLATION, main
from rmqspec.conform import driver
from rmqspec.conform import fingerprint as fp
from rmqspec.conform import protocol as p
from rmqspec.conform.driver import (
    ConformResult,
    Divergence,
    KnownDifferences,
    KnownError,
    conform,
    replay_script,
    shrink,
)

SERVE = f"{sys.executable} -m rmqspec.cli serve-reference"
# Two bugs of store.clone in one adapter: an offset overwritten (increaseOnly ignored) and entries
# persistAll should have dropped kept.
TWO_BUGS = f"{SERVE} --plant store_two_bugs"
STORE = ("remoteOffsetStore",)
OFFSET_CHANGED = "table[*].offset:changed"  # update_ignores_increase_only, on any queue
KEPT_ENTRY = "table[*]:sut-only"  # persist_all_keeps_unused, on any queue
MAX_FINDINGS = 10
EXAMPLES = 200


def _kinds(result: ConformResult) -> set[str]:
    """The new differences of a run's findings, with any element key: which bugs it found."""
    return {f"{fp.any_element(d.path)}:{d.shape}" for f in result.findings for d in _new(f)}


def _kinds_of(finding: Any) -> set[str]:
    """One finding's new differences, with any element key."""
    return {f"{fp.any_element(d.path)}:{d.shape}" for d in _new(finding)}


def _new(finding: Any) -> tuple[fp.Difference, ...]:
    assert isinstance(finding, Divergence), finding
    return finding.new_differences


def _known_file(tmp_path: Path, version: int, *entries: dict[str, Any], raw: str = "") -> Path:
    path = tmp_path / "known.jsonl"
    lines = [json.dumps({"format": "rmqspec-conform-known", "version": version})]
    lines += [json.dumps(entry) for entry in entries]
    path.write_text("\n".join(lines) + "\n" + raw, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def two_bugs(tmp_path_factory: pytest.TempPathFactory) -> ConformResult:
    out = tmp_path_factory.mktemp("two-bugs")
    return conform(TWO_BUGS, out, examples=EXAMPLES, components=STORE, max_findings=MAX_FINDINGS, shrink_seconds=10)


# --- the fingerprint ------------------------------------------------------------------------------
def test_a_fingerprint_names_paths_and_shapes_not_values() -> None:
    def observe(due: int, cached: list[int]) -> dict[str, Any]:
        mq = p.mq("T", "broker-a", 1)
        tasks = [{"task": "rebalance", "due": 20_000}, {"task": "pull", "mq": mq, "due": due}]
        return p.normalise({"ok": True, "result": {"tasks": tasks, "pqs": [{"mq": mq, "cached": cached}]}})

    one = fp.differences("consumer.observe", observe(1000, [1, 2]), observe(3000, [1, 2]))
    other = fp.differences("consumer.observe", observe(7000, [1, 2]), observe(5000, [1, 2]))
    assert fp.fingerprint("consumer.observe", one) == "consumer.observe tasks[pull *].due:changed"
    assert fp.fingerprint("consumer.observe", one) == fp.fingerprint("consumer.observe", other)
    assert [d.show() for d in one] == ["tasks[pull T/1].due: 1000 vs 3000"]
    both = fp.differences("consumer.observe", observe(1000, [1]), observe(3000, [1, 2]))
    assert fp.fingerprint("consumer.observe", both) == (
        "consumer.observe pqs[*].cached:changed, tasks[pull *].due:changed"
    )  # a list of offsets is one value: its length is a value too


def test_a_fingerprint_tells_the_shapes_apart() -> None:
    def clone(*rows: tuple[int, Any]) -> dict[str, Any]:
        table = [{"mq": p.mq("T", "broker-a" if q < 2 else "broker-b", q % 2), "offset": o} for q, o in rows]
        return p.normalise({"ok": True, "result": {"table": table}})

    parts = {d.part for d in fp.differences("store.clone", clone((0, 5), (1, 2)), clone((0, 3), (2, 1)))}
    assert parts == {"table[T/0].offset:changed", "table[T/1]:sut-only", "table[T/0@broker-b]:reference-only"}
    assert {d.part for d in fp.differences("store.clone", clone((0, "5")), clone((0, 5)))} == {"table[T/0].offset:type"}
    thrown = p.normalise({"ok": False, "error": {"type": "NullPointerException"}})
    ok = p.normalise({"ok": True, "result": {"offset": -1}})
    assert fp.fingerprint("store.read", fp.differences("store.read", thrown, ok)) == (
        "store.read outcome:NullPointerException/ok"
    )
    other = p.normalise({"ok": False, "error": {"type": "IllegalStateException"}})
    assert fp.fingerprint("store.read", fp.differences("store.read", thrown, other)) == (
        "store.read error:NullPointerException/IllegalStateException"
    )


def test_broker_requests_are_named_by_code_and_queue_and_equal_ones_are_no_difference() -> None:
    def update(offset: int) -> dict[str, Any]:
        return {
            "code": "UPDATE_CONSUMER_OFFSET",
            "brokerName": "broker-a",
            "topic": "T",
            "queueId": 1,
            "offset": offset,
        }

    sut = p.normalise({"ok": True, "result": {}, "sent": [update(3), update(5), {"code": "SEND_MESSAGE", "x": 1}]})
    reference = p.normalise({"ok": True, "result": {}, "sent": [update(5), {"code": "SEND_MESSAGE", "x": 2}]})
    assert {d.part for d in fp.differences("consume.finish", sut, reference)} == {
        "sent[UPDATE_CONSUMER_OFFSET T/1]:sut-only",
        "sent[SEND_MESSAGE].x:changed",
    }
    # a list of objects without an identity is named by index
    rows = p.normalise({"ok": True, "result": {"rows": [{"a": 1}, {"a": 2}]}})
    fewer = p.normalise({"ok": True, "result": {"rows": [{"a": 1}]}})
    assert {d.part for d in fp.differences("allocate", rows, fewer)} == {"rows[1]:sut-only"}


# --- two bugs on one operation, both found --------------------------------------------------------
def test_two_planted_differences_on_one_operation_are_both_reported_in_one_run(two_bugs: ConformResult) -> None:
    assert {f.request["op"] for f in two_bugs.findings} == {"store.clone"}
    assert {OFFSET_CHANGED, KEPT_ENTRY} <= _kinds(two_bugs), [f.fingerprint for f in two_bugs.findings]
    fingerprints = [f.fingerprint for f in two_bugs.findings]
    assert len(set(fingerprints)) == len(fingerprints) and 2 <= len(fingerprints) <= MAX_FINDINGS
    # the queue is no part of a fingerprint: two bugs are at most three findings (each alone, both at one request)
    # however many queues the run met them on
    assert len(fingerprints) <= 3, fingerprints
    assert len(two_bugs.counts) == len(fingerprints) and all(n >= 1 for n in two_bugs.counts)
    report = two_bugs.to_json()
    for entry, finding in zip(report["findings"], two_bugs.findings, strict=True):
        assert entry["fingerprint"] == finding.fingerprint and entry["count"] >= 1
        assert {f"{x['path']}:{x['shape']}" for x in entry["paths"]} == {d.part for d in _new(finding)}
        assert all("sut" in x or "reference" in x for x in entry["paths"])  # the values are reported


def test_the_report_lists_each_finding_with_its_count_and_shortest_script(two_bugs: ConformResult) -> None:
    text = driver.describe(two_bugs)
    for finding, count, path in zip(two_bugs.findings, two_bugs.counts, two_bugs.script_paths, strict=True):
        assert f"{count:4d}x {finding.fingerprint}" in text
        assert f"{finding.fingerprint} (found {count} time(s))" in text and f"saved to {path}" in text
        for d in _new(finding):
            assert f"store.clone {d.show()}" in text  # e.g. store.clone table[T/1].offset: 0 vs 3
    shared = [k for k in (KEPT_ENTRY, OFFSET_CHANGED) if sum(k in _kinds_of(f) for f in two_bugs.findings) > 1]
    for kind in shared:  # a difference in more than one finding (alone, and beside the other bug) is summed up
        assert f"store.clone {kind}: in " in text


def test_max_findings_bounds_the_distinct_fingerprints(tmp_path: Path) -> None:
    result = conform(TWO_BUGS, tmp_path, examples=EXAMPLES, components=STORE, max_findings=2, shrink_seconds=5)
    assert len({f.fingerprint for f in result.findings}) == len(result.findings) == 2


def test_shrinking_keeps_each_findings_fingerprint(two_bugs: ConformResult, tmp_path: Path) -> None:
    for number, (finding, path) in enumerate(zip(two_bugs.findings, two_bugs.script_paths, strict=True)):
        again = replay_script(TWO_BUGS, path, tmp_path / str(number))
        assert again.finding is not None and again.finding.fingerprint == finding.fingerprint


def test_shrink_rejects_a_shorter_script_with_the_same_kind_but_another_fingerprint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every shorter script diverges on the same op with the same coarse kind (``result:table``) but
    at another path: the shrinker must keep the original finding."""
    mq = p.mq("T", "broker-a", 1)
    script = [
        {"op": "store.new", "args": {"store": "s0", "kind": "remote", "group": "G"}},
        {"op": "store.update", "args": {"store": "s0", "mq": mq, "offset": 3, "increaseOnly": True}},
        {"op": "store.clone", "args": {"store": "s0", "topic": None}},
    ]

    def divergence(candidate: list[dict[str, Any]], sut: list[dict[str, Any]]) -> Divergence:
        mine = {"ok": True, "result": {"table": sut}}
        theirs = {"ok": True, "result": {"table": [{"mq": mq, "offset": 3}]}}
        differences = fp.differences("store.clone", p.normalise(mine), p.normalise(theirs))
        return Divergence(candidate[-1], mine, theirs, candidate, "result:table", differences)

    original = divergence(script, [{"mq": mq, "offset": 5}])
    assert original.fingerprint == "store.clone table[*].offset:changed"

    def replay_elsewhere(session: object, candidate: list[dict[str, Any]], fresh_process: bool = False) -> Divergence:
        if len(candidate) == len(script):
            return original
        return divergence(candidate, [])  # table[T/1]:reference-only, still "result:table"

    monkeypatch.setattr(driver, "replay", replay_elsewhere)
    shrunk, stats = shrink(None, original, 5.0)  # type: ignore[arg-type]
    assert stats.replays > 0 and len(shrunk.script) == len(script)
    assert shrunk.fingerprint == original.fingerprint and isinstance(shrunk, Divergence)
    assert shrunk.difference == divergence(script[:1], []).difference  # the coarse kind could not tell


# --- known differences ----------------------------------------------------------------------------
def test_accepting_one_fingerprint_leaves_the_other_bug_found(two_bugs: ConformResult, tmp_path: Path) -> None:
    accepted = next(
        f.fingerprint
        for f in two_bugs.findings
        if {f"{fp.any_element(d.path)}:{d.shape}" for d in _new(f)} == {OFFSET_CHANGED}
    )
    path = _known_file(tmp_path, 2, {"fingerprint": accepted, "reason": "we overwrite offsets on purpose"})
    result = conform(
        TWO_BUGS, tmp_path / "run", examples=EXAMPLES, components=STORE, max_findings=MAX_FINDINGS, shrink_seconds=5,
        known=KnownDifferences.read(str(path)),
    )  # fmt: skip
    assert accepted not in {f.fingerprint for f in result.findings}
    assert result.known.get(accepted, 0) > 0
    assert result.known_reasons[accepted] == (f"line 2: {accepted}: we overwrite offsets on purpose",)
    assert KEPT_ENTRY in _kinds(result)


def test_accepting_one_field_path_leaves_the_other_bug_found(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    entry = {"op": "store.clone", "path": "table[*].offset", "shape": "changed", "reason": "increaseOnly unsupported"}
    path = _known_file(tmp_path, 2, entry)
    args = ["conform", "--sut", TWO_BUGS, "--components", "remoteOffsetStore", "--examples", str(EXAMPLES)]
    args += ["--max-findings", str(MAX_FINDINGS), "--shrink-seconds", "5", "--known", str(path), "--json"]
    assert main([*args, "--out", str(tmp_path / "run")]) == EXIT_VIOLATION
    report = json.loads(capsys.readouterr().out)
    kinds = {f"{fp.any_element(x['path'])}:{x['shape']}" for f in report["findings"] for x in f["paths"]}
    assert kinds == {KEPT_ENTRY}, kinds
    assert report["known"] and all(".offset:changed" in k["fingerprint"] for k in report["known"])
    assert all("increaseOnly unsupported" in k["reasons"][0] for k in report["known"])
    # a finding with both bugs at once is named by the one not accepted; the accepted one is marked
    for finding in report["findings"]:
        assert all(x["known"] == x["path"].endswith(".offset") for x in finding["divergence"]["paths"])


def test_value_patterns_narrow_a_path_entry(tmp_path: Path) -> None:
    entries = [
        {"path": "table[*].offset", "sut": "-2|0", "reason": "we write 0 or -2 over a reset"},
        {"op": "store.read", "path": "outcome", "shape": "NullPointerException/ok", "reason": "a known NPE"},
    ]
    known = KnownDifferences.read(str(_known_file(tmp_path, 2, *entries)))
    ok = {"ok": True, "result": {"table": [{"mq": p.mq("T", "broker-a", 1), "offset": 3}]}}

    def accepted(op: str, sut: dict[str, Any], reference: dict[str, Any]) -> bool:
        mine, theirs = p.normalise(sut), p.normalise(reference)
        differences = fp.differences(op, mine, theirs)
        taken, _ = known.accept(op, p.difference(mine, theirs), differences)
        return len(taken) == len(differences)

    over = {"ok": True, "result": {"table": [{"mq": p.mq("T", "broker-a", 1), "offset": 0}]}}
    other = {"ok": True, "result": {"table": [{"mq": p.mq("T", "broker-a", 1), "offset": 7}]}}
    assert accepted("store.clone", over, ok) and not accepted("store.clone", other, ok)
    thrown = {"ok": False, "error": {"type": "NullPointerException", "message": "x"}}
    read = {"ok": True, "result": {"offset": -1}}
    assert accepted("store.read", thrown, read) and not accepted("pullFromWhere", thrown, read)


def test_a_version_1_known_file_keeps_its_meaning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _known_file(tmp_path, 1, {"op": "store.clone", "difference": "result:table", "note": "both on purpose"})
    args = ["conform", "--sut", TWO_BUGS, "--components", "remoteOffsetStore", "--examples", "40", "--json"]
    assert main([*args, "--out", str(tmp_path / "run"), "--known", str(path)]) == EXIT_OK
    report = json.loads(capsys.readouterr().out)
    assert report["valid"] and {k["op"] for k in report["known"]} == {"store.clone"}
    assert {KEPT_ENTRY, OFFSET_CHANGED} <= {
        f"{fp.any_element(part.rpartition(':')[0])}:{part.rpartition(':')[2]}"
        for k in report["known"]
        for part in k["fingerprint"].split(" ", 1)[1].split(", ")
    }  # one v1 entry accepted every difference of the operation, whatever its path
    assert all(k["reasons"] == ["line 2: store.clone result:table: both on purpose"] for k in report["known"])


@pytest.mark.parametrize(
    ("entry", "phrase"),
    [
        ({"fingerprint": "store.read offset:changed"}, "line 3: reason"),
        ({"fingerprint": "store.read offset:changed", "reason": " "}, "line 3: reason"),
        ({"path": "offset", "reason": 5}, "line 3: reason"),
        ({"fingerprint": "store.read offset:changed", "path": "offset", "reason": "r"}, "line 3: fingerprint or path"),
        ({"reason": "r"}, "line 3: fingerprint or path"),
        ({"fingerprint": "store.nope offset:changed", "reason": "r"}, "line 3: fingerprint"),
        ({"fingerprint": "store.read offset:moved", "reason": "r"}, "line 3: fingerprint"),
        ({"fingerprint": "store.read offset:changed", "sut": "1", "reason": "r"}, "line 3: sut"),
        ({"path": "tasks[pull *.due", "reason": "r"}, "line 3: path"),
        ({"path": "offset", "shape": "moved", "reason": "r"}, "line 3: shape"),
        ({"path": "offset", "sut": "(", "reason": "r"}, "line 3: sut"),
        ({"path": "offset", "reference": 5, "reason": "r"}, "line 3: reference"),
        ({"op": "pq.nope", "path": "offset", "reason": "r"}, "line 3: op"),
        ({"op": "store.read", "difference": "*", "note": "v1 fields"}, "line 3: unknown field 'difference'"),
    ],
)
def test_a_bad_version_2_entry_is_refused_naming_file_line_and_field(
    entry: dict[str, Any], phrase: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = {"fingerprint": "store.read offset:changed", "reason": "fine"}
    path = _known_file(tmp_path, 2, good, entry)
    with pytest.raises(KnownError, match=re.escape(phrase)):
        KnownDifferences.read(str(path))
    assert main(["conform", "--sut", SERVE, "--known", str(path), "--out", str(tmp_path / "out")]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert f"{path}: {phrase}" in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_known_file_of_an_unknown_version_is_refused(tmp_path: Path) -> None:
    with pytest.raises(KnownError, match=r"line 1: .*version 3; this rmqspec reads 1 and 2"):
        KnownDifferences.read(str(_known_file(tmp_path, 3)))


def test_junit_has_one_failing_case_per_finding(two_bugs: ConformResult, tmp_path: Path) -> None:
    from rmqspec import junit

    path = tmp_path / "r.xml"
    junit.write(str(path), "conform", junit.conform_cases(two_bugs), two_bugs.seconds)
    cases = ET.parse(path).getroot().findall("testsuite/testcase")
    failed = {c.get("name"): c for c in cases if c.find("failure") is not None}
    assert set(failed) == {f.fingerprint for f in two_bugs.findings}
    assert {c.get("classname") for c in failed.values()} == {"rmqspec.conform.remoteOffsetStore"}
