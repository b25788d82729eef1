"""The reference adapter answers as the 4.9.8 classes do at the edges of their inputs (
§17), and conform's generator reaches those edges, drawing only what it can shrink back to."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest

from rmqspec.conform import protocol as p
from rmqspec.conform.driver import Session, conform, drawable
from rmqspec.conform.reference_adapter import ReferenceAdapter
from rmqspec.reference.allocate import md5_hash

SERVE = f"{sys.executable} -m rmqspec.cli serve-reference"
MQ = p.mq("T", "broker-a", 0)
ALLOCATE_MQS = [p.mq("T", "broker-a", q) for q in range(8)]


@pytest.fixture
def adapter() -> Iterator[ReferenceAdapter]:
    served = ReferenceAdapter()
    yield served
    served.close()


def _allocate(adapter: ReferenceAdapter, **args: Any) -> dict[str, Any]:
    return adapter.handle("allocate", {"consumerGroup": "G", "mqAll": ALLOCATE_MQS, **args})


def test_config_without_a_list_answers_null_and_nearby_around_it_throws(adapter: ReferenceAdapter) -> None:
    config = _allocate(adapter, strategy="CONFIG", currentCID="a", cidAll=["a"], messageQueueList=None)
    assert config == {"ok": True, "result": {"queues": None}, "sent": []}
    rooms = {"brokerRooms": {"broker-a": "r1"}, "consumerRooms": {"a": "r1"}}
    nearby = _allocate(adapter, strategy="MACHINE_ROOM_NEARBY", inner="CONFIG", currentCID="a", cidAll=["a"], **rooms)
    assert nearby["error"]["type"] == "NullPointerException"
    listed = _allocate(
        adapter,
        strategy="MACHINE_ROOM_NEARBY",
        inner="CONFIG",
        messageQueueList=[MQ],
        currentCID="a",
        cidAll=["a"],
        **rooms,
    )
    assert listed["result"]["queues"] == [MQ]


@pytest.mark.parametrize("version", p.VERSIONS)
def test_success_reply_without_a_header_fails_the_read_not_finds_nothing(version: str) -> None:
    adapter = ReferenceAdapter(version)
    adapter.handle("store.new", {"store": "s", "kind": "remote", "group": "G"})
    read = adapter.handle(
        "store.read", {"store": "s", "mq": MQ, "type": "READ_FROM_STORE", "answers": [{"responseCode": p.SUCCESS}]}
    )
    assert read["result"] == {"offset": -2}  # NullPointerException is caught as any exception: -2 (R2.3)
    pull = adapter.handle(
        "pullFromWhere",
        {
            "store": "s",
            "mq": MQ,
            "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
            "answers": [{"responseCode": p.QUERY_NOT_FOUND}, {"responseCode": p.SUCCESS}],
        },
    )
    assert pull["error"]["type"] == "MQClientException"  # maxOffset wraps every exception
    adapter.close()


def test_negative_batch_size_throws_and_changes_nothing(adapter: ReferenceAdapter) -> None:
    adapter.handle("pq.new", {"pq": "q"})
    adapter.handle("pq.put", {"pq": "q", "msgs": [{"queueOffset": 1, "bodySize": 1}]})
    before = adapter.handle("pq.state", {"pq": "q"})
    assert adapter.handle("pq.take", {"pq": "q", "batchSize": -1})["error"]["type"] == "IllegalArgumentException"
    assert adapter.handle("pq.state", {"pq": "q"}) == before
    assert adapter.handle("pq.take", {"pq": "q", "batchSize": 0})["result"] == {"offsets": []}


def test_null_client_id_hashes_as_null_and_breaks_the_ring_unless_last(adapter: ReferenceAdapter) -> None:
    nodes = 3
    ring = sorted((md5_hash(f"{cid}-{i}"), cid) for cid in ("a", "null") for i in range(nodes))

    def owner(mq: dict[str, Any]) -> str:
        key = md5_hash(f"MessageQueue [topic={mq['topic']}, brokerName={mq['brokerName']}, queueId={mq['queueId']}]")
        return next((cid for h, cid in ring if h >= key), ring[0][1])

    expected = [mq for mq in ALLOCATE_MQS if owner(mq) == "a"]
    assert 0 < len(expected) < len(ALLOCATE_MQS)  # both nodes own something: the test can tell
    last = _allocate(adapter, strategy="CONSISTENT_HASH", virtualNodeCnt=nodes, currentCID="a", cidAll=["a", None])
    assert last["result"]["queues"] == expected
    first = _allocate(adapter, strategy="CONSISTENT_HASH", virtualNodeCnt=nodes, currentCID="a", cidAll=[None, "a"])
    assert first["error"]["type"] == "NullPointerException"
    empty_ring = _allocate(adapter, strategy="CONSISTENT_HASH", virtualNodeCnt=0, currentCID="a", cidAll=[None, "a"])
    assert empty_ring["result"]["queues"] == []


def test_message_accumulation_overflows_as_a_java_long(adapter: ReferenceAdapter) -> None:
    adapter.handle("pq.new", {"pq": "q"})
    adapter.handle("pq.put", {"pq": "q", "msgs": [{"queueOffset": 1, "bodySize": 0, "maxOffset": 5}]})
    assert adapter.handle("pq.state", {"pq": "q"})["result"]["msgAccCnt"] == 4
    # 2^63 - 1 - (-1) wraps to -2^63: not positive, so msgAccCnt keeps 4
    adapter.handle("pq.put", {"pq": "q", "msgs": [{"queueOffset": -1, "bodySize": 0, "maxOffset": 2**63 - 1}]})
    state = adapter.handle("pq.state", {"pq": "q"})["result"]
    assert state["msgAccCnt"] == 4
    assert state["maxSpan"] == 2  # 1 - (-1)
    adapter.handle("pq.put", {"pq": "q", "msgs": [{"queueOffset": 2**63 - 1, "bodySize": 0}]})
    assert adapter.handle("pq.state", {"pq": "q"})["result"]["maxSpan"] == -(2**63)  # 2^63 - 1 - (-1) wraps


def test_consume_timestamp_is_floored_to_whole_seconds(adapter: ReferenceAdapter) -> None:
    adapter.handle("store.new", {"store": "s", "kind": "remote", "group": "G"})
    reply = adapter.handle(
        "pullFromWhere",
        {
            "store": "s",
            "mq": MQ,
            "consumeFromWhere": "CONSUME_FROM_TIMESTAMP",
            "consumeTimestamp": 7_999,
            "answers": [{"responseCode": p.QUERY_NOT_FOUND}, {"offset": 3}],
        },
    )
    search = [s for s in reply["sent"] if s["code"] == p.SEARCH_OFFSET_BY_TIMESTAMP]
    assert search and search[0]["timestamp"] == 7_000


@pytest.mark.parametrize(("damage", "loaded"), [("missing", [5]), ("empty", [5]), ("truncated", [5]), ("corrupt", [5])])
def test_damaged_offsets_file_falls_back_to_its_bak(damage: str, loaded: list[int], adapter: ReferenceAdapter) -> None:
    adapter.handle("store.new", {"store": "s", "kind": "local", "group": "G", "clientId": "c"})
    for offset in (5, 9):  # the second write moves the first to offsets.json.bak
        adapter.handle("store.update", {"store": "s", "mq": MQ, "offset": offset, "increaseOnly": False})
        adapter.handle("store.persistAll", {"store": "s", "mqs": [MQ]})
    assert adapter.handle("store.damage", {"store": "s", "file": "offsets", "damage": damage})["ok"]
    adapter.handle("store.new", {"store": "t", "kind": "local", "group": "G", "clientId": "c"})
    adapter.handle("store.load", {"store": "t"})
    table = adapter.handle("store.clone", {"store": "t", "topic": None})["result"]["table"]
    assert [row["offset"] for row in table] == loaded


def test_both_files_corrupt_makes_load_throw(adapter: ReferenceAdapter) -> None:
    adapter.handle("store.new", {"store": "s", "kind": "local", "group": "G", "clientId": "c"})
    for which in p.DAMAGED_FILES:
        adapter.handle("store.damage", {"store": "s", "file": which, "damage": "corrupt"})
    assert adapter.handle("store.load", {"store": "s"})["error"]["type"] == "MQClientException"
    adapter.handle("store.new", {"store": "r", "kind": "remote", "group": "G"})
    wrong = adapter.handle("store.damage", {"store": "r", "file": "offsets", "damage": "corrupt"})
    assert wrong["error"]["type"] == "ProtocolError"


# --- the generator reaches the edges -------------------------------------------------------------
@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """Every request of one run against the reference over all components."""
    seen: list[dict[str, Any]] = []
    original = Session.exchange

    def exchange(self: Session, op: str, args: dict[str, Any]) -> dict[str, Any]:
        seen.append({"op": op, "args": args})
        return original(self, op, args)

    Session.exchange = exchange  # type: ignore[method-assign]
    try:
        result = conform(SERVE, tmp_path_factory.mktemp("generated"), examples=120, steps=40, seed=3)
    finally:
        Session.exchange = original  # type: ignore[method-assign]
    assert result.valid, result.to_json()
    return seen


def test_every_generated_request_is_drawable(generated: list[dict[str, Any]]) -> None:
    undrawable = [r for r in generated if not drawable(r)]
    assert not undrawable, undrawable[:3]


def _values(requests: list[dict[str, Any]], key: str) -> Iterator[Any]:
    def walk(value: Any) -> Iterator[Any]:
        if isinstance(value, dict):
            for k, v in value.items():
                if k == key:
                    yield v
                yield from walk(v)
        elif isinstance(value, list):
            for v in value:
                yield from walk(v)

    for request in requests:
        yield from walk(request["args"])


def test_generator_reaches_the_edges(generated: list[dict[str, Any]]) -> None:
    allocations = [r["args"] for r in generated if r["op"] == "allocate"]
    assert any(a["strategy"] == "CONFIG" and a.get("messageQueueList") is None for a in allocations)
    assert any(a["strategy"] == "MACHINE_ROOM_NEARBY" and a.get("inner") == "CONFIG" for a in allocations)
    assert any(a["strategy"] == "MACHINE_ROOM_NEARBY" and isinstance(a.get("inner"), dict) for a in allocations)
    assert any(a["strategy"] == "CONSISTENT_HASH" and None in a["cidAll"] for a in allocations)
    assert p.SUCCESS in set(_values(generated, "responseCode"))
    assert any(b < 0 for b in _values([r for r in generated if r["op"] == "pq.take"], "batchSize"))
    offsets = set(_values(generated, "offset")) | set(_values(generated, "queueOffset"))
    assert any(o < 0 for o in offsets) and any(o > 2**53 for o in offsets)
    assert any(m > 2**53 for m in _values([r for r in generated if r["op"] == "pq.put"], "maxOffset"))
    damages = {(r["args"]["file"], r["args"]["damage"]) for r in generated if r["op"] == "store.damage"}
    # Hypothesis's mutations repeat values, so one run need not draw every kind of damage; the
    # adapter tests above take each kind through a load.
    assert {f for f, _ in damages} == set(p.DAMAGED_FILES) and len({d for _, d in damages}) >= 2
    stamps = list(_values([r for r in generated if r["op"] == "pullFromWhere"], "consumeTimestamp"))
    assert stamps and all(t % 1000 == 0 for t in stamps) and len(set(stamps)) > 1
