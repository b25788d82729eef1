"""``rmqspec conform`` as a daily tool: known differences are reported and not failed, several
distinct findings are collected, unsupported operations and fields are respected, shrinking keeps
the finding's signature and draws only what the generator draws, and odd option combinations do not
crash."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from rmqspec.cli import EXIT_BAD_INPUT, EXIT_OK, EXIT_VIOLATION, main
from rmqspec.conform import driver
from rmqspec.conform import protocol as p
from rmqspec.conform.driver import (
    Divergence,
    KnownDifferences,
    KnownError,
    Session,
    conform,
    drawable,
    replay,
    replay_script,
    shrink,
)
from rmqspec.conform.reference_adapter import ReferenceAdapter

SERVE = f"{sys.executable} -m rmqspec.cli serve-reference"
PARTIAL = f"{sys.executable} {Path(__file__).parent / 'data' / 'adapters' / 'partial_adapter.py'}"
# Two bugs of different signatures: a missing ProcessQueue field, and increaseOnly ignored.
TWO_BUGS = f"{PARTIAL} --plant update_ignores_increase_only --drop pq.state:msgAccCnt"
TWO_COMPONENTS = ("processQueue", "remoteOffsetStore")
MISSING_FIELD = ("divergence", "pq.state msgAccCnt:reference-only")


def _known(tmp_path: Path, *entries: dict[str, str]) -> Path:
    path = tmp_path / "known.jsonl"
    lines = [{"format": "rmqspec-conform-known", "version": 1}, *entries]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return path


# --- known differences and several findings ------------------------------------------------------
def test_max_findings_collects_distinct_signatures_each_in_its_own_script(tmp_path: Path) -> None:
    result = conform(TWO_BUGS, tmp_path, examples=200, components=TWO_COMPONENTS, max_findings=2)
    signatures = {f.signature for f in result.findings}
    assert len(signatures) == 2 and MISSING_FIELD in signatures, signatures
    assert len(set(result.script_paths)) == 2
    for finding, path in zip(result.findings, result.script_paths, strict=True):
        again = replay_script(TWO_BUGS, path, tmp_path / Path(path).stem)
        assert again.finding is not None and again.finding.signature == finding.signature


def test_one_finding_is_the_default(tmp_path: Path) -> None:
    result = conform(TWO_BUGS, tmp_path, examples=200, components=TWO_COMPONENTS)
    assert len(result.findings) == 1


def test_known_difference_is_reported_and_the_run_goes_on_to_a_new_one(tmp_path: Path) -> None:
    known = KnownDifferences.read(str(_known(tmp_path, {"op": "pq.state", "difference": "result:msgAccCnt"})))
    # seed 1: the known difference shows in sequences before the one that finds the new bug (with
    # seed 0 the very first sequence finds the new bug, and the run ends before any known one)
    result = conform(TWO_BUGS, tmp_path / "run", examples=200, seed=1, components=TWO_COMPONENTS, known=known)
    assert result.known.get(MISSING_FIELD[1], 0) > 0 and result.examples > 1
    assert [f.request["op"] for f in result.findings] == ["store.clone"]


def test_a_run_with_only_known_differences_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sut = f"{PARTIAL} --drop pq.state:msgAccCnt"
    args = ["conform", "--sut", sut, "--components", "processQueue", "--examples", "20", "--json"]
    assert main([*args, "--out", str(tmp_path / "a")]) == EXIT_VIOLATION
    capsys.readouterr()
    known = _known(tmp_path, {"op": "pq.state", "difference": "*", "note": "no msgAccCnt in our client"})
    assert main([*args, "--out", str(tmp_path / "b"), "--known", str(known)]) == EXIT_OK
    report = json.loads(capsys.readouterr().out)
    assert report["valid"] and report["known"][0]["op"] == "pq.state" and report["known"][0]["count"] > 0


@pytest.mark.parametrize(
    ("content", "phrase"),
    [
        ("", "empty"),
        ('{"format": "other"}\n', "line 1: expected a header"),
        ('{"format": "rmqspec-conform-known", "version": 1}\n{"op": "pq.nope", "difference": "*"}\n', "line 2: op"),
        ('{"format": "rmqspec-conform-known", "version": 1}\n\n{"op": "pq.state"}\n', "line 3: difference"),
        ('{"format": "rmqspec-conform-known", "version": 1}\n{"op": "pq.state", "x": 1}\n', "line 2: unknown field"),
        ('{"format": "rmqspec-conform-known", "version": 1}\n{"op": x}\n', "line 2: not JSON"),
    ],
)
def test_malformed_known_file_is_bad_input_naming_file_and_line(
    content: str, phrase: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "known.jsonl"
    path.write_text(content)
    with pytest.raises(KnownError, match=phrase):
        KnownDifferences.read(str(path))
    assert main(["conform", "--sut", SERVE, "--known", str(path), "--out", str(tmp_path)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert str(path) in err and phrase in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


# --- unsupported operations and fields -----------------------------------------------------------
def test_undeclared_missing_field_diverges_but_a_declared_one_is_not_compared(tmp_path: Path) -> None:
    missing = conform(f"{PARTIAL} --drop pq.state:msgAccCnt", tmp_path / "a", examples=20, components=("processQueue",))
    assert missing.finding is not None and missing.finding.signature == MISSING_FIELD
    declared = conform(
        f"{PARTIAL} --drop pq.state:msgAccCnt --declare", tmp_path / "b", examples=20, components=("processQueue",)
    )
    assert declared.valid, declared.to_json()
    assert declared.unsupported_fields == {"pq.state": ["msgAccCnt"]}
    assert declared.to_json()["unsupported"]["fields"] == {"pq.state": ["msgAccCnt"]}


def test_declared_field_hides_nothing_else(tmp_path: Path) -> None:
    sut = f"{PARTIAL} --plant remove_returns_highest_plus_one --drop pq.state:msgAccCnt --declare"
    result = conform(sut, tmp_path, examples=200, components=("processQueue",))
    assert isinstance(result.finding, Divergence) and result.finding.request["op"] == "pq.remove"


def test_unsupported_operation_is_not_generated_again(tmp_path: Path) -> None:
    sut = f"{PARTIAL} --unsupported pq.take"
    result = conform(sut, tmp_path, examples=40, components=("processQueue.orderly",))
    assert result.valid, result.to_json()
    assert set(result.unsupported_ops) == {"pq.take"}
    assert result.outcomes.get("pq.take", 0) + result.outcomes.get("pq.take:IllegalArgumentException", 0) == 1
    assert any(op.startswith("pq.commit") for op in result.outcomes)  # the rest of the component still runs


def test_unsupported_creator_drops_its_family_and_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sut = f"{PARTIAL} --unsupported com.new"
    args = ["conform", "--sut", sut, "--components", "consumerOffsetManager,allocate", "--examples", "20"]
    assert main([*args, "--out", str(tmp_path)]) == EXIT_OK
    out = capsys.readouterr().out
    assert "com.new: this client has no com.new" in out and "not generated" in out


def test_malformed_unsupported_reply_is_a_protocol_failure() -> None:
    with pytest.raises(p.ProtocolError, match="unsupported"):
        p.check_reply({"id": 1, "unsupported": "yes"}, 1)
    with pytest.raises(p.ProtocolError, match="unsupportedFields"):
        p.check_reply({"id": 1, "ok": True, "result": {}, "unsupportedFields": "msgAccCnt"}, 1)
    assert p.check_reply({"id": 1, "unsupported": {}}, 1)


# --- shrinking keeps the finding -----------------------------------------------------------------
def test_difference_kinds_tell_findings_apart() -> None:
    ok = p.normalise({"ok": True, "result": {"offset": -1}})
    assert p.difference(p.normalise({"ok": True, "result": {"offset": -2}}), ok) == "result:offset"
    thrown = p.normalise({"ok": False, "error": {"type": "NullPointerException"}})
    assert p.difference(thrown, ok) == "outcome:NullPointerException/ok"
    sent = p.normalise({"ok": True, "result": {"offset": -1}, "sent": [{"code": "X"}]})
    assert p.difference(sent, ok) == "sent"


def test_shrinker_keeps_the_signature_and_draws_only_drawable_values(tmp_path: Path) -> None:
    """A broker error code read as -2: simplifying the answer's code to 0 (SUCCESS without a header)
    also reads -2 (a different finding: no plant needed there), so only the same signature counts."""
    command = f"{SERVE} --plant read_error_code_as_minus_two"
    result = conform(command, tmp_path, examples=400, components=("remoteOffsetStore",))
    assert isinstance(result.finding, Divergence)
    assert all(drawable(r) for r in result.finding.script)
    session = Session(command, 10.0, tmp_path / "again")
    try:
        again = replay(session, result.finding.script)
        assert again is not None and again.signature == result.finding.signature
    finally:
        session.close()


def test_shrink_rejects_a_shorter_script_that_diverges_differently(monkeypatch: pytest.MonkeyPatch) -> None:
    """Planted: every shorter script diverges on the same op but as another kind of difference (as an
    error code simplified to SUCCESS did); the shrinker must keep the original finding."""
    mq = p.mq("T", "broker-a", 0)
    script = [
        {"op": "store.new", "args": {"store": "s0", "kind": "remote", "group": "G"}},
        {"op": "store.update", "args": {"store": "s0", "mq": mq, "offset": 3, "increaseOnly": False}},
        {"op": "store.read", "args": {"store": "s0", "mq": mq, "type": "READ_FROM_STORE", "answers": []}},
    ]
    original = Divergence(script[-1], {}, {}, script, "result:offset")

    def replay_differently(
        session: object, candidate: list[dict[str, object]], fresh_process: bool = False
    ) -> Divergence:
        kind = "result:offset" if len(candidate) == len(script) else "outcome:NullPointerException/ok"
        return Divergence(script[-1], {}, {}, candidate, kind)

    monkeypatch.setattr(driver, "replay", replay_differently)
    shrunk, stats = shrink(None, original, 5.0)  # type: ignore[arg-type]
    assert shrunk.signature == original.signature and len(shrunk.script) == len(script) and stats.replays > 0


@pytest.mark.parametrize(
    "request_",
    [
        {"op": "store.read", "args": {"answers": [{"responseCode": 11}]}},  # half of 22: never drawn
        {"op": "store.update", "args": {"offset": 2**62}},  # half of 2^63 - 1
        {"op": "pullFromWhere", "args": {"answers": [], "consumeTimestamp": 1500}},  # not whole seconds
        {"op": "pq.take", "args": {"batchSize": -2}},
        {"op": "com.query", "args": {"queueId": 0, "minOffset": 3, "maxOffset": 1}},
        {"op": "allocate", "args": {"strategy": "AVG", "currentCID": "10.0.0.1@c0", "mqAll": [], "cidAll": []}},
        {"op": "allocate", "args": {"strategy": "AVG", "currentCID": None, "mqAll": [], "cidAll": [None]}},
    ],
)
def test_drawable_rejects_values_the_generator_never_draws(request_: dict[str, object]) -> None:
    assert not drawable(request_)  # type: ignore[arg-type]


# --- robustness ---------------------------------------------------------------------------------
def test_orderly_component_alone_runs_with_its_process_queues(tmp_path: Path) -> None:
    result = conform(SERVE, tmp_path, examples=10, components=("processQueue.orderly",))
    assert result.valid and result.examples == 10
    assert result.components == ("processQueue", "processQueue.orderly")
    with pytest.raises(p.ProtocolError, match=r"processQueue\.orderly needs processQueue"):
        p.check_hello({"protocol": 1, "version": "4.9.8", "components": ["processQueue.orderly"]})


def test_nested_machine_room_nearby_replays_without_recursing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mqs = [p.mq("T", "broker-a", 0), p.mq("T", "room1@b", 0)]
    base = {"consumerGroup": "G", "currentCID": "a", "mqAll": mqs, "cidAll": ["a", "b"]}
    rooms = {"brokerRooms": {"broker-a": "room1", "room1@b": "room2"}, "consumerRooms": {"a": "room1", "b": "room2"}}
    nested = {"strategy": "MACHINE_ROOM_NEARBY", "inner": "AVG", **rooms}
    adapter = ReferenceAdapter()
    reply = adapter.handle("allocate", {**base, "strategy": "MACHINE_ROOM_NEARBY", "inner": nested, **rooms})
    assert reply["ok"] and reply["result"]["queues"] == [mqs[0]]
    self_nested = adapter.handle(
        "allocate", {**base, "strategy": "MACHINE_ROOM_NEARBY", "inner": "MACHINE_ROOM_NEARBY"}
    )
    assert self_nested["error"]["type"] == "ProtocolError"
    adapter.close()
    script = tmp_path / "nested.jsonl"
    request = {"op": "allocate", "args": {**base, "strategy": "MACHINE_ROOM_NEARBY", "inner": "MACHINE_ROOM_NEARBY"}}
    script.write_text('{"format": "rmqspec-conform-script", "version": 1}\n' + json.dumps(request) + "\n")
    assert main(["conform", "--sut", SERVE, "--replay", str(script), "--out", str(tmp_path / "o")]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "line 2" in err and "inner" in err and "Recursion" not in err


@pytest.mark.parametrize("components", ["processQueue", "consumerOffsetManager", "allocate"])
def test_examples_reported_are_the_examples_asked_for(
    components: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["conform", "--sut", SERVE, "--components", components, "--examples", "50", "--json"]
    assert main([*args, "--out", str(tmp_path)]) == EXIT_OK
    assert json.loads(capsys.readouterr().out)["examples"] == 50


def test_bench_conform_prints_both_rates_their_ratio_and_memory() -> None:
    from rmqspec.bench_conform import run_bench_conform

    lines = list(run_bench_conform(sequences=3, steps=5, one_core=False))
    text = "\n".join(lines)
    for phrase in ("RSS at start", "RSS at end", "generated (conform)", "pure replay of the same", "ratio", "target"):
        assert phrase in text, text
    assert "diverged" not in text
