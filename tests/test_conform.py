"""``rmqspec conform`` and ``rmqspec serve-reference``: the live oracle finds what it should, shrinks
it, replays it, and survives systems under test that crash, hang or talk nonsense."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rmqspec.cli import EXIT_BAD_INPUT, EXIT_OK, EXIT_SUT_FAILED, EXIT_VIOLATION, main
from rmqspec.conform import protocol as p
from rmqspec.conform.driver import (
    Divergence,
    ScriptError,
    Session,
    SutBroke,
    conform,
    read_script,
    replay,
    replay_script,
)
from rmqspec.conform.reference_adapter import PLANTS, ReferenceAdapter

SERVE = f"{sys.executable} -m rmqspec.cli serve-reference"
MISBEHAVING = f"{sys.executable} {Path(__file__).parent / 'data' / 'adapters' / 'misbehaving_adapter.py'}"

# The op at which each planted bug must show, and the longest shrunk script accepted: every plant
# needs at most a handle, one or two set-up requests, the faulty request and an observation.
PLANT_SHOWS_AT = {
    "remove_returns_highest_plus_one": {"pq.remove"},
    "update_ignores_increase_only": {"store.clone"},
    "read_error_code_as_minus_two": {"store.read", "pullFromWhere"},
    "persist_all_keeps_unused": {"store.clone"},
    "allocate_sorts_cid_all": {"allocate"},
    "orderly_commit_returns_last_key": {"pq.commit"},
    "young_queue_not_found": {"com.query"},
    "declares_5x_behaves_4_9_8": {"store.read", "pullFromWhere", "com.query"},
    "config_null_as_empty": {"allocate"},
    "success_without_header_as_not_found": {"store.read", "pullFromWhere"},
    "acc_count_without_overflow": {"pq.state"},
    "negative_batch_takes_nothing": {"pq.take"},
    "load_ignores_bak": {"store.load", "store.clone"},
    "store_two_bugs": {"store.clone"},
}
PLANT_VERSION = {"declares_5x_behaves_4_9_8": "5.x"}  # the others are wrong in 4.9.8 terms
# The components each hunt is restricted to (--components), which keeps it short: with seeds 0-2 every
# plant is found within 9 examples this way, and within 160 (median 28) with all components on.
PLANT_COMPONENTS = {
    "remove_returns_highest_plus_one": ("processQueue",),
    "update_ignores_increase_only": ("remoteOffsetStore", "localOffsetStore"),
    "read_error_code_as_minus_two": ("remoteOffsetStore",),
    "persist_all_keeps_unused": ("remoteOffsetStore",),
    "allocate_sorts_cid_all": ("allocate",),
    "orderly_commit_returns_last_key": ("processQueue", "processQueue.orderly"),
    "young_queue_not_found": ("consumerOffsetManager",),
    "declares_5x_behaves_4_9_8": ("remoteOffsetStore", "pullFromWhere", "consumerOffsetManager"),
    "config_null_as_empty": ("allocate",),
    "success_without_header_as_not_found": ("remoteOffsetStore",),
    "acc_count_without_overflow": ("processQueue",),
    "negative_batch_takes_nothing": ("processQueue", "processQueue.orderly"),
    "load_ignores_bak": ("localOffsetStore",),
    "store_two_bugs": ("remoteOffsetStore",),
}
MAX_SHRUNK_STEPS = 5
# A .bak holds the offsets only after a second write, and then the main file must be damaged and
# the store loaded and observed: new, update, persist, persist, damage, load, clone.
MAX_SHRUNK_STEPS_FOR = {"load_ignores_bak": 7}
# Generation budget for a hunt; generous because Hypothesis mixes integer constants of the loaded
# modules into its draws, so the example that finds a plant moves with what the process imported.
PLANT_EXAMPLES = 400


def test_every_plant_has_an_expected_divergence() -> None:
    assert set(PLANT_SHOWS_AT) == set(PLANT_COMPONENTS) == set(PLANTS)


@pytest.mark.parametrize("version", p.VERSIONS)
def test_serve_reference_conforms_to_the_reference(version: str, tmp_path: Path) -> None:
    result = conform(f"{SERVE} --version {version}", tmp_path, examples=60, steps=40, seed=1)
    assert result.valid, result.to_json()
    assert result.version == version
    assert result.examples >= 60
    assert result.requests > 40 * 10  # the sequences are not trivially short
    assert set(result.components) == set(p.COMPONENTS)
    # Every operation was exercised with a successful outcome, so a pass says something about each.
    assert set(p.OPS) <= set(result.outcomes), sorted(set(p.OPS) - set(result.outcomes))


@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_conform_finds_and_shrinks_each_planted_divergence(plant: str, tmp_path: Path) -> None:
    serve = f"{SERVE} --version {PLANT_VERSION.get(plant, '4.9.8')}"
    result = conform(f"{serve} --plant {plant}", tmp_path, examples=PLANT_EXAMPLES, components=PLANT_COMPONENTS[plant])
    finding = result.finding
    assert isinstance(finding, Divergence), f"{plant} not found in {result.examples} examples"
    assert finding.request["op"] in PLANT_SHOWS_AT[plant]
    assert len(finding.script) <= MAX_SHRUNK_STEPS_FOR.get(plant, MAX_SHRUNK_STEPS), finding.script
    # The saved script reproduces the divergence, and the correct reference passes it.
    assert result.script_path is not None
    again = replay_script(f"{serve} --plant {plant}", result.script_path, tmp_path / "again")
    assert isinstance(again.finding, Divergence) and again.finding.request == finding.request
    assert replay_script(serve, result.script_path, tmp_path / "correct").valid


def test_shrunk_script_is_one_minimal(tmp_path: Path) -> None:
    """Dropping any single request of the shrunk script loses the divergence."""
    command = f"{SERVE} --plant orderly_commit_returns_last_key"
    result = conform(
        command, tmp_path, examples=PLANT_EXAMPLES, components=PLANT_COMPONENTS["orderly_commit_returns_last_key"]
    )
    assert isinstance(result.finding, Divergence)
    script = result.finding.script
    session = Session(command, 10.0, tmp_path / "minimal")
    try:
        assert isinstance(replay(session, script), Divergence)
        for i in range(len(script)):
            found = replay(session, script[:i] + script[i + 1 :])
            assert found is None or found.signature != result.finding.signature or len(found.script) > len(script) - 1
    finally:
        session.close()


def test_same_seed_sends_the_same_requests(tmp_path: Path) -> None:
    command, components = f"{SERVE} --plant update_ignores_increase_only", ("remoteOffsetStore", "localOffsetStore")
    first = conform(command, tmp_path / "a", examples=PLANT_EXAMPLES, seed=5, components=components)
    second = conform(command, tmp_path / "b", examples=PLANT_EXAMPLES, seed=5, components=components)
    assert first.finding is not None and second.finding is not None
    assert first.finding.script == second.finding.script
    assert first.examples == second.examples


@pytest.mark.parametrize(
    ("mode", "kind", "phrase"),
    [
        ("crash", "crashed", "exit status 3"),
        ("hang", "hung", "no reply within 1 s"),
        ("garbage", "garbage", "not JSON"),
        ("wrong-id", "wrong-id", "a request it was not asked"),
        ("bad-reply", "bad-reply", "reply.ok must be true or false"),
    ],
)
def test_misbehaving_sut_gets_a_report_naming_the_request(mode: str, kind: str, phrase: str, tmp_path: Path) -> None:
    result = conform(f"{MISBEHAVING} {mode} 3", tmp_path, examples=10, timeout=1.0, shrink_seconds=5)
    finding = result.finding
    assert isinstance(finding, SutBroke)
    assert finding.failure.kind == kind
    assert phrase in str(finding.failure)
    assert finding.failure.request is not None and finding.failure.request["op"] == finding.script[-1]["op"]
    # The misbehaviour comes after three good answers in a fresh process: the shrunk script keeps four.
    assert len(finding.script) == 4
    if mode == "crash":
        assert "simulated crash" in finding.failure.stderr_tail


def test_sut_that_never_answers_hello_is_reported_not_waited_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["conform", "--sut", f"{MISBEHAVING} silent-start 0", "--timeout", "1", "--out", str(tmp_path)])
    assert code == EXIT_SUT_FAILED
    err = capsys.readouterr().err
    assert "hung" in err and '"op":"hello"' in err and "Traceback" not in err


def test_sut_command_that_does_not_exist_is_a_sut_failure(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["conform", "--sut", "/nonexistent/adapter --flag", "--out", str(tmp_path)])
    assert code == EXIT_SUT_FAILED
    assert "could not be started" in capsys.readouterr().err


def test_cli_exit_codes_and_json_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["conform", "--examples", "30", "--out", str(tmp_path / "ok"), "--json"]
    assert main([*args, "--sut", SERVE]) == EXIT_OK
    report = json.loads(capsys.readouterr().out)
    assert report["valid"] is True and report["divergence"] is None and report["sutFailure"] is None

    # All components on: the plant must be found among everything else the SUT is asked.
    bad = ["conform", "--examples", str(PLANT_EXAMPLES), "--out", str(tmp_path / "bad"), "--json"]
    assert main([*bad, "--sut", f"{SERVE} --plant persist_all_keeps_unused"]) == EXIT_VIOLATION
    report = json.loads(capsys.readouterr().out)
    assert report["valid"] is False and report["divergence"]["rules"].startswith("R1.12, R2.7")
    assert Path(report["script"]).exists()
    assert main(["conform", "--sut", SERVE, "--replay", report["script"], "--out", str(tmp_path / "r")]) == EXIT_OK


def test_unreadable_script_names_the_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    script = tmp_path / "bad.jsonl"
    script.write_text('{"format": "rmqspec-conform-script", "version": 1}\n{"op": "pq.new", "args": {}}\n')
    assert main(["conform", "--sut", SERVE, "--replay", str(script), "--out", str(tmp_path)]) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "line 2" in err and "args.pq" in err
    script.write_text('{"format": "something-else"}\n')
    with pytest.raises(ValueError, match="line 1"):
        read_script(str(script))
    script.write_text('{"format": "rmqspec-conform-script", "version": 1}\n{not json\n')
    with pytest.raises(ValueError, match="line 2: not JSON"):
        read_script(str(script))


def test_components_option_restricts_the_requests(tmp_path: Path) -> None:
    result = conform(SERVE, tmp_path, examples=20, components=("allocate",))
    assert result.components == ("allocate",)
    with pytest.raises(ValueError, match="does not declare"):
        conform(f"{MISBEHAVING} crash 100", tmp_path / "x", components=("nonsense",))
    with pytest.raises(ValueError, match="needs an offset store"):
        conform(SERVE, tmp_path / "y", components=("pullFromWhere",))


def test_serve_reference_answers_garbage_with_a_protocol_error() -> None:
    lines = ["not json", "[1]", json.dumps({"id": 1, "op": "pq.state", "args": {"pq": "missing"}}), ""]
    done = subprocess.run(
        [sys.executable, "-m", "rmqspec.cli", "serve-reference"],
        input="\n".join(lines),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    replies = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["ok"] for r in replies] == [False, False, False]
    assert all(r["error"]["type"] == "ProtocolError" for r in replies)
    assert replies[2]["id"] == 1 and "missing" in replies[2]["error"]["message"]


def test_reference_adapter_reports_the_broker_requests_a_call_caused() -> None:
    adapter = ReferenceAdapter()
    queue = p.mq("T", "broker-a", 0)
    adapter.handle("store.new", {"store": "s", "kind": "remote", "group": "G"})
    read = adapter.handle(
        "store.read", {"store": "s", "mq": queue, "type": "READ_FROM_STORE", "answers": [{"offset": 7}]}
    )
    assert read["result"] == {"offset": 7}
    assert read["sent"] == [
        {"code": p.QUERY_CONSUMER_OFFSET, "brokerName": "broker-a", "topic": "T", "queueId": 0, "group": "G"}
    ]
    timeout = adapter.handle("store.read", {"store": "s", "mq": queue, "type": "READ_FROM_STORE", "answers": []})
    assert timeout["result"] == {"offset": -2}  # no answer left is a timeout: R2.3's -2
    persist = adapter.handle("store.persistAll", {"store": "s", "mqs": [queue]})
    assert persist["sent"][0]["code"] == p.UPDATE_CONSUMER_OFFSET and persist["sent"][0]["offset"] == 7
    adapter.close()


def test_normalise_ignores_order_of_broker_requests_and_error_messages() -> None:
    a = {"ok": True, "result": {}, "sent": [{"code": "X", "queueId": 1}, {"code": "X", "queueId": 0}]}
    b = {"ok": True, "result": {}, "sent": [{"code": "X", "queueId": 0}, {"code": "X", "queueId": 1}]}
    assert p.normalise(a) == p.normalise(b)
    e1 = {"ok": False, "error": {"type": "IllegalArgumentException", "message": "one"}}
    e2 = {"ok": False, "error": {"type": "IllegalArgumentException", "message": "two"}}
    e3 = {"ok": False, "error": {"type": "NullPointerException", "message": "one"}}
    assert p.normalise(e1) == p.normalise(e2) != p.normalise(e3)


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        ([], "must be a JSON object"),
        ({"id": 2, "ok": True}, "not asked"),
        ({"id": 1, "ok": "yes"}, "must be true or false"),
        ({"id": 1, "ok": False, "error": {}}, "error.type"),
        ({"id": 1, "ok": True, "result": 3}, "result must be an object"),
        ({"id": 1, "ok": True, "sent": [{}]}, "each with a code"),
    ],
)
def test_check_reply_rejects_malformed_replies(reply: object, message: str) -> None:
    with pytest.raises(p.ProtocolError, match=message):
        p.check_reply(reply, 1)


def test_check_hello_rejects_unknown_components_and_versions() -> None:
    good = {"protocol": 1, "version": "4.9.8", "components": ["allocate"], "strategies": ["AVG"]}
    assert p.check_hello(good)[1] == ("allocate",)
    with pytest.raises(p.ProtocolError, match="components"):
        p.check_hello({**good, "components": ["allocate", "teleport"]})
    with pytest.raises(p.ProtocolError, match="version"):
        p.check_hello({**good, "version": "3.2"})
    with pytest.raises(p.ProtocolError, match="pullFromWhere needs an offset store"):
        p.check_hello({**good, "components": ["pullFromWhere"]})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lines=st.lists(
        st.one_of(
            st.text(max_size=40),
            st.builds(
                json.dumps,
                st.recursive(
                    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                    lambda inner: (
                        st.lists(inner, max_size=3)
                        | st.dictionaries(st.sampled_from(["op", "args", "pq", "store", "x"]), inner, max_size=3)
                    ),
                    max_leaves=8,
                ),
            ),
            st.builds(
                lambda op, args: json.dumps({"op": op, "args": args}),
                st.sampled_from(sorted(p.OPS)),
                st.dictionaries(
                    st.sampled_from(["pq", "store", "com", "mq"]), st.text(max_size=3) | st.integers(), max_size=2
                ),
            ),
        ),
        max_size=5,
    ),
    header=st.booleans(),
)
def test_reading_a_malformed_script_never_raises_anything_but_script_error(
    lines: list[str], header: bool, tmp_path: Path
) -> None:
    script = tmp_path / "fuzz.jsonl"
    first = ['{"format": "rmqspec-conform-script", "version": 1}'] if header else []
    script.write_text("\n".join(first + lines) + "\n", encoding="utf-8")
    try:
        requests = read_script(str(script))
    except ScriptError as e:
        assert str(script) in str(e)
    else:
        assert all(r["op"] in p.OPS or r["op"] in p.CONTROL_OPS for r in requests)


@pytest.mark.skipif(shutil.which("java") is None, reason="needs a JDK (java on PATH)")
def test_java_example_adapter_conforms(tmp_path: Path) -> None:
    """docs/examples/RmqspecAdapter.java, the template for a foreign adapter, passes conform."""
    adapter = Path(__file__).parent.parent / "docs" / "examples" / "RmqspecAdapter.java"
    result = conform(f"java {adapter}", tmp_path, examples=30, timeout=60.0)
    assert result.valid, result.to_json()
    assert result.components == ("allocate", "processQueue")
    assert result.requests > 300
