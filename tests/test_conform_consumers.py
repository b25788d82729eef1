"""Protocol version 2: ``rmqspec conform`` drives whole push consumers (the reference's own, through
``serve-reference``), reaches the states where offset bugs live, and finds and shrinks a planted
divergence of each consumer-level area."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from rmqspec.conform import protocol as p
from rmqspec.conform.consumer_reference import CONSUMER_PLANTS
from rmqspec.conform.consumers import REACHED
from rmqspec.conform.driver import Divergence, conform, replay_script
from rmqspec.conform.reference_adapter import ReferenceAdapter

SERVE = f"{sys.executable} -m rmqspec.cli serve-reference"
CONSUMERS = (p.PUSH_CONSUMER, p.PUSH_CONSUMER_ORDERLY)
T0 = p.mq("T", "broker-a", 0)
T1 = p.mq("T", "broker-a", 1)
RETRY = p.mq("%RETRY%G", "broker-a", 0)

# The request at which each planted divergence shows: the faulty request itself when what it sends
# differs, else the observation after it.
PLANT_SHOWS_AT = {
    "pull_commit_flag_at_zero": {"consumer.run"},
    "offset_illegal_fixed_at_once": {"pull.reply"},
    "rebalance_removal_skips_persist": {"consumer.run"},
    "send_back_failure_counts_as_sent": {"consumer.observe"},
    "dropped_pq_updates_offset": {"consumer.observe"},
    "persist_every_10s": {"consumer.observe", "consumer.run"},
    "lock_all_keeps_unlocked": {"consumer.observe"},
}
# A consumer-level finding needs a consumer made, listed and started, a rebalance, and the few steps
# of its area (a pull and its reply, a listener call and its answer, a timer): at most 13, the length of
# dropped_pq_updates_offset's: two listener calls of one FOUND batch, one answered before a second pull's
# OFFSET_ILLEGAL reply drops the pq and one after it, then the observation (no request of it can go).
MAX_SHRUNK_STEPS = 13
PLANT_EXAMPLES = 300


def test_every_consumer_plant_has_an_expected_divergence() -> None:
    assert set(PLANT_SHOWS_AT) == set(CONSUMER_PLANTS)


@pytest.mark.parametrize("version", p.VERSIONS)
def test_serve_reference_conforms_as_whole_consumers(version: str, tmp_path: Path) -> None:
    result = conform(f"{SERVE} --version {version}", tmp_path, examples=80, steps=40, seed=2, components=CONSUMERS)
    assert result.valid, result.to_json()
    assert set(result.components) == set(CONSUMERS)
    assert set(p.CONSUMER_OPS) <= set(result.outcomes), sorted(set(p.CONSUMER_OPS) - set(result.outcomes))
    # The generation is steered into the interesting states, and the run says how often it got there.
    assert set(result.reached) == set(REACHED)
    never = {name for name, n in result.reached.items() if n == 0}
    expected_never = {"offsetIllegalTaskRan"} if version == "5.x" else set()  # 5.x corrects at once
    assert never <= expected_never, never


@pytest.mark.parametrize("plant", sorted(CONSUMER_PLANTS))
def test_conform_finds_and_shrinks_each_consumer_plant(plant: str, tmp_path: Path) -> None:
    command = f"{SERVE} --plant {plant}"
    result = conform(command, tmp_path, examples=PLANT_EXAMPLES, components=CONSUMERS, shrink_seconds=60)
    finding = result.finding
    assert isinstance(finding, Divergence), f"{plant} not found in {result.examples} examples"
    assert finding.request["op"] in PLANT_SHOWS_AT[plant], finding.to_json()
    assert len(finding.script) <= MAX_SHRUNK_STEPS, finding.script
    assert result.script_path is not None
    again = replay_script(command, result.script_path, tmp_path / "again")
    assert isinstance(again.finding, Divergence) and again.finding.difference == finding.difference
    assert replay_script(SERVE, result.script_path, tmp_path / "correct").valid


def test_a_version_1_driver_gets_version_1_components() -> None:
    adapter = ReferenceAdapter()
    try:
        v1 = adapter.handle("hello", {"protocol": 1})["result"]
        v2 = adapter.handle("hello", {"protocol": 2})["result"]
    finally:
        adapter.close()
    assert v1["protocol"] == 1 and set(v1["components"]) == set(p.COMPONENTS_V1)
    assert v2["protocol"] == 2 and set(v2["components"]) == set(p.COMPONENTS)
    assert p.check_hello(v1)[1] == tuple(p.COMPONENTS_V1)


def test_consumer_components_need_protocol_2() -> None:
    with pytest.raises(p.ProtocolError, match="need protocol 2"):
        p.check_hello({"protocol": 1, "version": "4.9.8", "components": ["pushConsumer"]})
    with pytest.raises(p.ProtocolError, match=r"pushConsumer\.orderly needs pushConsumer"):
        p.check_hello({"protocol": 2, "version": "4.9.8", "components": ["pushConsumer.orderly"]})


class _Session:
    """The reference adapter, asked one request at a time; each reply checked to be ok."""

    def __init__(self) -> None:
        self.adapter = ReferenceAdapter()
        self.adapter.handle("reset", {})

    def __call__(self, op: str, **args: Any) -> dict[str, Any]:
        reply = self.adapter.handle(op, args)
        assert reply["ok"], reply
        return reply

    def view(self, consumer: str = "c0") -> dict[str, Any]:
        result: dict[str, Any] = self("consumer.observe", consumer=consumer)["result"]
        return result

    def pq(self, mq: dict[str, Any]) -> dict[str, Any]:
        return next(pq for pq in self.view()["pqs"] if pq["mq"] == mq)


@pytest.fixture
def started() -> Any:
    s = _Session()
    s("consumer.new", consumer="c0", clientId="10.0.0.1@1", group="G", topic="T", queues=2)
    s("cluster.consumers", group="G", clientIds=["10.0.0.1@1"])
    s("consumer.start", consumer="c0")
    queries = [{"offset": 5}, {"responseCode": 22}, {"responseCode": 22}]
    reply = s(
        "consumer.run",
        consumer="c0",
        task="rebalance",
        answers={"QUERY_CONSUMER_OFFSET": queries, "GET_MAX_OFFSET": [{"offset": 9}]},
    )
    assert [r["code"] for r in reply["sent"]] == [
        "QUERY_CONSUMER_OFFSET",
        "QUERY_CONSUMER_OFFSET",
        "GET_MAX_OFFSET",
        "QUERY_CONSUMER_OFFSET",
    ]
    yield s
    s.adapter.close()


def test_a_rebalance_starts_each_queue_where_the_broker_says(started: _Session) -> None:
    # a stored offset (5), no offset and LAST: the max offset (9), the retry queue from 0 (R10.1)
    assert [(pq["mq"], pq["nextOffset"]) for pq in started.view()["pqs"]] == [(RETRY, 0), (T0, 5), (T1, 9)]
    assert started.view()["offsets"] == [{"mq": T0, "offset": 5}]


def test_a_pull_piggybacks_the_memory_offset(started: _Session) -> None:
    sent = started("consumer.run", consumer="c0", task="pull", mq=T0)["sent"]
    assert sent == [
        {"brokerName": "broker-a", "code": "PULL_MESSAGE", "commitOffset": 5, "group": "G", "maxMsgNums": 32,
         "pull": 0, "queueId": 0, "queueOffset": 5, "sysFlag": 3, "topic": "T"}
    ]  # fmt: skip
    # the retry queue has no offset in memory: commitOffset -1 and the commit bit clear (R5.2)
    sent = started("consumer.run", consumer="c0", task="pull", mq=RETRY)["sent"]
    assert sent[0]["commitOffset"] == -1 and sent[0]["sysFlag"] & 1 == 0


def test_a_failed_send_back_keeps_the_message_and_the_offset(started: _Session) -> None:
    started("consumer.run", consumer="c0", task="pull", mq=T0)
    found = {"status": "FOUND", "nextBeginOffset": 8, "minOffset": 0, "maxOffset": 10, "msgs": [5, 6, 7]}
    started("pull.reply", consumer="c0", mq=T0, answer=found)
    call = started("consume.start", consumer="c0", mq=T0)["result"]["listener"]
    assert call == {"call": 0, "mq": T0, "msgs": [5]}
    failed = {"CONSUMER_SEND_MSG_BACK": [{"timeout": True}], "SEND_MESSAGE": [{"responseCode": 1}]}
    sent = started("consume.finish", consumer="c0", mq=T0, status="RECONSUME_LATER", answers=failed)["sent"]
    assert [r["code"] for r in sent] == ["CONSUMER_SEND_MSG_BACK", "SEND_MESSAGE"]
    assert started.pq(T0)["cached"] == [5, 6, 7]  # 5 holds the watermark (R7.3)
    assert started.view()["offsets"] == [{"mq": T0, "offset": 5}]
    assert {"task": "consume", "mq": T0, "due": 5000} in started.view()["tasks"]  # consumed again 5 s later


def test_offset_illegal_waits_ten_seconds_in_4_9_8(started: _Session) -> None:
    started("consumer.run", consumer="c0", task="pull", mq=T0)
    illegal = {"status": "OFFSET_ILLEGAL", "nextBeginOffset": 2, "minOffset": 2, "maxOffset": 10}
    started("pull.reply", consumer="c0", mq=T0, answer=illegal)
    assert started.pq(T0)["dropped"] and started.pq(T0)["nextOffset"] == 2
    assert {"task": "fixOffset", "mq": T0, "due": 10_000} in started.view()["tasks"]
    assert started("consumer.run", consumer="c0", task="fixOffset", mq=T0)["result"] == {"ran": False}
    started("time.advance", ms=10_000)
    sent = started("consumer.run", consumer="c0", task="fixOffset", mq=T0)["sent"]
    commit = {"brokerName": "broker-a", "code": "UPDATE_CONSUMER_OFFSET", "group": "G", "offset": 2, "oneway": True}
    # persisted by the task, then again as the pq is removed (R5.7, R9.5)
    assert sent == [{**commit, "queueId": 0, "topic": "T"}] * 2
    assert T0 not in started.view()["owned"]


def test_a_pull_reply_names_a_waiting_pull(started: _Session) -> None:
    reply = started.adapter.handle("pull.reply", {"consumer": "c0", "mq": T0, "answer": {"timeout": True}})
    assert not reply["ok"] and reply["error"]["type"] == "ProtocolError"
    assert "has no pull" in reply["error"]["message"]


def test_bench_conform_measures_the_consumer_components() -> None:
    from rmqspec.bench_conform import run_bench_conform

    lines = list(run_bench_conform(sequences=3, steps=10, one_core=False, components=CONSUMERS))
    assert "pushConsumer, pushConsumer.orderly" in lines[0]
    assert any("generated (conform)" in line and "requests/s" in line for line in lines)
    assert not any("diverged from itself" in line for line in lines)
