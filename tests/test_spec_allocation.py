"""The model's allocation (``spec/allocation.py``) against the reference's (``reference/allocate.py``),
the Config fields of CONFIG, MACHINE_ROOM and MACHINE_ROOM_NEARBY, and the allocation anomalies that
INV-13a/13b tolerate (``spec.anomalies.ALLOCATION_ANOMALIES``), shown not to be vacuous.

Semantics R11.0-R11.7; the RocketMQ 4.9.8 classes are ``client/.../consumer/rebalance/*.java`` and
``common/.../consistenthash/ConsistentHashRouter.java``.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from rmqspec.properties.explore import explore
from rmqspec.properties.serialize import config_from_json, config_to_json
from rmqspec.reference import allocate as ref
from rmqspec.reference.message_queue import MessageQueue as RefMQ
from rmqspec.refinement.allocation import TableMachineRoomResolver
from rmqspec.spec import anomalies as an
from rmqspec.spec.allocation import (
    AllocationError,
    IllegalArgumentError,
    MessageQueue,
    NullPointerError,
    RoomResolver,
    Strategy,
    allocate_queues,
    client_id,
    strategy_for,
)
from rmqspec.spec.anomalies import allowed_anomalies
from rmqspec.spec.config import (
    AVG,
    AVG_BY_CIRCLE,
    CONFIG,
    CONSISTENT_HASH,
    MACHINE_ROOM,
    MACHINE_ROOM_NEARBY,
    STRATEGIES,
    Config,
    ConfigError,
)
from rmqspec.spec.invariants import check_state
from rmqspec.spec.model import Model
from rmqspec.spec.rebalance import _views_agree
from rmqspec.spec.state import PULL_READY, ProcessQueue, State

GROUP = "G"


# --- the spec against the reference, outcome by outcome -------------------------------------------


def to_reference(strategy: Strategy) -> ref.AllocateMessageQueueStrategy:
    """The reference object a RocketMQ user would build for the same strategy and arguments."""
    if strategy.name == AVG:
        return ref.AllocateMessageQueueAveragely()
    if strategy.name == AVG_BY_CIRCLE:
        return ref.AllocateMessageQueueAveragelyByCircle()
    if strategy.name == CONSISTENT_HASH:
        return ref.AllocateMessageQueueConsistentHash(strategy.virtual_node_cnt)
    if strategy.name == CONFIG:
        listed = strategy.message_queue_list
        return ref.AllocateMessageQueueByConfig(None if listed is None else [RefMQ(*mq) for mq in listed])
    if strategy.name == MACHINE_ROOM:
        return ref.AllocateMessageQueueByMachineRoom(strategy.consumeridcs)
    assert strategy.inner is not None and strategy.resolver is not None
    resolver = TableMachineRoomResolver(dict(strategy.resolver.brokers), dict(strategy.resolver.consumers))
    return ref.AllocateMachineRoomNearby(to_reference(strategy.inner), resolver)


Outcome = tuple[str, Any]


def spec_outcome(strategy: Strategy, current: str, mq_all: list[MessageQueue], cid_all: list[str]) -> Outcome:
    try:
        return "allocated", allocate_queues(strategy, current, tuple(mq_all), tuple(cid_all))
    except AllocationError as e:
        return type(e).__name__, str(e)


def reference_outcome(strategy: Strategy, current: str, mq_all: list[MessageQueue], cid_all: list[str]) -> Outcome:
    try:
        got = to_reference(strategy).allocate(GROUP, current, [RefMQ(*mq) for mq in mq_all], list(cid_all))
        # CONFIG's null (no list) is what the rebalance takes for an empty allocation (R11.7), as the spec does
        return "allocated", tuple(MessageQueue(mq.topic, mq.broker_name, mq.queue_id) for mq in got or ())
    except (ref.IllegalArgumentError, ref.NullPointerError) as e:
        return type(e).__name__, str(e)


BROKERS = ("b0", "r1@b0", "r2@b1", "r1@b@", "r3@b", "@b", "r1@", "r1@b@c")
ROOMS = ("r1", "r2", "r3")
CIDS = ("10.0.0.1@c0", "10.0.0.2@c1", "10.0.0.3@c2", "a", "b")

mq_lists = st.lists(
    st.builds(MessageQueue, st.sampled_from(("T", "%RETRY%G")), st.sampled_from(BROKERS), st.integers(0, 5)),
    max_size=10,
    unique=True,
).map(sorted)
# Duplicate clientIds happen when two processes share one (RMQ-11); the broker lists both.
cid_lists = st.lists(st.sampled_from(CIDS), max_size=5).map(sorted)


def strategies(depth: int = 0) -> st.SearchStrategy[Strategy]:
    """Every class with arguments a user can pass: null lists and sets, rooms the resolver does not
    know or answers empty, any virtual node count >= 0, and (once) a nested MACHINE_ROOM_NEARBY."""
    plain = st.one_of(
        st.sampled_from((Strategy(AVG), Strategy(AVG_BY_CIRCLE))),
        st.builds(Strategy, st.just(CONSISTENT_HASH), virtual_node_cnt=st.integers(0, 12)),
        st.builds(
            Strategy,
            st.just(CONFIG),
            message_queue_list=st.none() | mq_lists.map(tuple),
        ),
        st.builds(
            Strategy,
            st.just(MACHINE_ROOM),
            consumeridcs=st.none() | st.frozensets(st.sampled_from((*ROOMS, "")), min_size=1),
        ),
    )
    if depth > 0:
        return plain
    nearby = st.builds(Strategy, st.just(MACHINE_ROOM_NEARBY), inner=strategies(depth + 1), resolver=resolvers())
    return plain | nearby


@st.composite
def resolvers(draw: st.DrawFn) -> RoomResolver:
    """A room for every broker and consumer; one time in five, one name the resolver answers null
    (unlisted) or empty for."""
    brokers = {b: draw(st.sampled_from(ROOMS)) for b in BROKERS}
    consumers = {c: draw(st.sampled_from(ROOMS)) for c in CIDS}
    if draw(st.integers(0, 4)) == 0:
        table = draw(st.sampled_from((brokers, consumers)))
        key = draw(st.sampled_from(sorted(table)))
        if draw(st.booleans()):
            del table[key]
        else:
            table[key] = ""
    return RoomResolver(tuple(brokers.items()), tuple(consumers.items()))


SETTINGS = settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None)


@SETTINGS
@given(strategy=strategies(), mq_all=mq_lists, cid_all=cid_lists, data=st.data())
@example(strategy=Strategy(AVG), mq_all=[], cid_all=["a"], data=None)
def test_spec_allocation_agrees_with_reference_allocate_on_random_inputs_for_all_six_strategies(
    strategy: Strategy, mq_all: list[MessageQueue], cid_all: list[str], data: st.DataObject | None
) -> None:
    current = "a" if data is None else data.draw(st.sampled_from([*cid_all, "", "stranger"]), label="current")
    expected = reference_outcome(strategy, current, mq_all, cid_all)
    got = spec_outcome(strategy, current, mq_all, cid_all)
    event(f"{strategy.name}: {got[0] if got[0] != 'allocated' else 'allocated ' + str(bool(got[1]))}")
    assert got == expected
    assert strategy.java_name == to_reference(strategy).get_name()


ERROR_CASES: dict[str, tuple[Strategy, str, list[MessageQueue], list[str], Outcome]] = {
    "R11.0 empty currentCID": (
        Strategy(MACHINE_ROOM, consumeridcs=frozenset()),
        "",
        [MessageQueue("T", "b0", 0)],
        ["a"],
        ("IllegalArgumentError", "currentCID is empty"),
    ),
    "R11.0 empty mqAll": (
        Strategy(AVG_BY_CIRCLE),
        "a",
        [],
        ["a"],
        ("IllegalArgumentError", "mqAll is null or mqAll empty"),
    ),
    "R11.0 empty cidAll": (
        Strategy(CONSISTENT_HASH),
        "a",
        [MessageQueue("T", "b0", 0)],
        [],
        ("IllegalArgumentError", "cidAll is null or cidAll empty"),
    ),
    "R11.5 consumeridcs never set": (
        Strategy(MACHINE_ROOM),
        "a",
        [MessageQueue("T", "b0", 0), MessageQueue("T", "r1@b0", 0)],
        ["a"],
        ("NullPointerError", "consumeridcs is null"),
    ),
    "R11.6 broker without a room": (
        Strategy(MACHINE_ROOM_NEARBY, inner=Strategy(AVG), resolver=RoomResolver((), (("a", "r1"),))),
        "a",
        [MessageQueue("T", "b0", 1)],
        ["a"],
        ("IllegalArgumentError", "Machine room is null for mq MessageQueue [topic=T, brokerName=b0, queueId=1]"),
    ),
    "R11.6 consumer with an empty room": (
        Strategy(
            MACHINE_ROOM_NEARBY, inner=Strategy(AVG), resolver=RoomResolver((("b0", "r1"),), (("a", "r1"), ("b", "")))
        ),
        "a",
        [MessageQueue("T", "b0", 1)],
        ["a", "b"],
        ("IllegalArgumentError", "Machine room is null for consumer id b"),
    ),
}


@pytest.mark.parametrize("case", list(ERROR_CASES))
def test_spec_raises_the_reference_exception_class_and_rocketmq_message(case: str) -> None:
    strategy, current, mq_all, cid_all, expected = ERROR_CASES[case]
    assert spec_outcome(strategy, current, mq_all, cid_all) == expected
    assert reference_outcome(strategy, current, mq_all, cid_all) == expected


def test_error_classes_name_the_java_exceptions() -> None:
    assert IllegalArgumentError.java_class == "java.lang.IllegalArgumentException"
    assert NullPointerError.java_class == "java.lang.NullPointerException"
    assert issubclass(IllegalArgumentError, ValueError) and issubclass(NullPointerError, TypeError)


def test_constructors_throw_as_rocketmq_and_the_reference_do() -> None:
    with pytest.raises(IllegalArgumentError, match=r"^illegal virtualNodeCnt :-1$"):
        Strategy(CONSISTENT_HASH, virtual_node_cnt=-1)
    with pytest.raises(ref.IllegalArgumentError, match=r"^illegal virtualNodeCnt :-1$"):
        ref.AllocateMessageQueueConsistentHash(-1)
    with pytest.raises(NullPointerError, match=r"^allocateMessageQueueStrategy is null$"):
        Strategy(MACHINE_ROOM_NEARBY, resolver=RoomResolver())
    with pytest.raises(NullPointerError, match=r"^machineRoomResolver is null$"):
        Strategy(MACHINE_ROOM_NEARBY, inner=Strategy(AVG))
    with pytest.raises(ValueError, match=r"^strategy: got 'RANDOM'; accepted: AVG, "):
        Strategy("RANDOM")


def test_a_consumer_missing_from_cid_all_gets_nothing_except_from_config() -> None:
    mqs, cids = (MessageQueue("T", "r1@b", 0), MessageQueue("T", "r1@b", 1)), ("a", "b")
    resolver = RoomResolver((("r1@b", "r1"),), (("a", "r1"), ("b", "r1"), ("x", "r1")))
    for strategy in (
        Strategy(AVG),
        Strategy(AVG_BY_CIRCLE),
        Strategy(CONSISTENT_HASH),
        Strategy(MACHINE_ROOM, consumeridcs=frozenset({"r1"})),
        Strategy(MACHINE_ROOM_NEARBY, inner=Strategy(AVG), resolver=resolver),
    ):
        assert allocate_queues(strategy, "x", mqs, cids) == (), strategy.name
    # R11.4: CONFIG calls no check(): it returns its list whatever the inputs, even empty ones.
    assert allocate_queues(Strategy(CONFIG, message_queue_list=mqs[1:]), "x", mqs, cids) == mqs[1:]
    assert allocate_queues(Strategy(CONFIG, message_queue_list=mqs[1:]), "", (), ()) == mqs[1:]
    assert allocate_queues(Strategy(CONFIG), "a", mqs, cids) == ()  # a null list: nothing


def test_consistent_hash_with_zero_virtual_nodes_gives_nobody_anything() -> None:
    """R11.3: v = 0 is accepted; the ring is empty, routeNode answers null, the result is empty."""
    mqs = tuple(MessageQueue("T", "b", q) for q in range(5))
    cids = ("a", "b")
    for cid in cids:
        assert allocate_queues(Strategy(CONSISTENT_HASH, virtual_node_cnt=0), cid, mqs, cids) == ()


def test_machine_room_nearby_fails_the_queues_over_to_everybody_when_the_broker_room_is_empty() -> None:
    """R11.6 with the model's one broker: its room's consumers share it; if none is left, all do."""
    config = Config(
        strategy=MACHINE_ROOM_NEARBY,
        nearby_inner=AVG,
        broker_room="r1",
        consumer_rooms=("r1", "r2", "r2"),
        consumers=3,
    )
    mqs = tuple(MessageQueue("T", "broker-a", q) for q in range(4))
    cids = tuple(client_id(i) for i in range(3))
    got = [allocate_queues(strategy_for(config, i), cids[i], mqs, cids) for i in range(3)]
    assert got == [mqs, (), ()]
    got = [allocate_queues(strategy_for(config, i), cids[i], mqs, cids[1:]) for i in (1, 2)]
    assert got == [mqs[:2], mqs[2:]]


@settings(max_examples=200, deadline=None, database=None)
@given(mq_all=mq_lists.filter(bool), cid_all=cid_lists.filter(bool).map(lambda c: sorted(set(c))))
def test_machine_room_partitions_exactly_the_eligible_queues_rmq11_2477(
    mq_all: list[MessageQueue], cid_all: list[str]
) -> None:
    """R11.5 as fixed for apache/rocketmq#2477 (RMQ-11, in 4.8.0): the slices are cut from the filtered
    list, so the consumers' results are disjoint and cover exactly the "<room>@<name>" queues of listed
    rooms. (With one broker the model cannot show the old bug: its broker is dealt in full or not at all.)"""
    strategy = Strategy(MACHINE_ROOM, consumeridcs=frozenset({"r1", "r2"}))
    taken = [mq for cid in cid_all for mq in allocate_queues(strategy, cid, tuple(mq_all), tuple(cid_all))]
    eligible = [mq for mq in mq_all if mq.broker_name in ("r1@b0", "r2@b1", "r1@b@")]
    assert sorted(taken) == eligible


# --- Config fields ----------------------------------------------------------------------------------

BAD_CONFIGS: list[tuple[dict[str, Any], str]] = [
    ({"strategy": "RANDOM"}, "strategy: got 'RANDOM'; accepted: AVG, AVG_BY_CIRCLE, CONSISTENT_HASH, CONFIG, "),
    ({"virtual_node_cnt": -1}, "virtual_node_cnt: got -1; accepted: an integer from 0 to 1000"),
    ({"broker_name": ""}, "broker_name: got ''; accepted: a non-empty name ('<room>@<name>' for MACHINE_ROOM)"),
    ({"allocate_config_queues": ((0,), (1,))}, "allocate_config_queues: got ((0,), (1,)); accepted: None unless "),
    (
        {"strategy": CONFIG},
        "allocate_config_queues: got None; accepted: for strategy CONFIG, one tuple per consumer (2) ",
    ),
    ({"strategy": CONFIG, "allocate_config_queues": ((0,),)}, "of distinct queue indices from 0 to 4; 4 is the retry"),
    ({"strategy": CONFIG, "allocate_config_queues": ((0,), (5,))}, "allocate_config_queues: got ((0,), (5,))"),
    ({"strategy": CONFIG, "allocate_config_queues": ((0, 0), ())}, "allocate_config_queues: got ((0, 0), ())"),
    ({"strategy": CONFIG, "allocate_config_queues": ([0], ())}, "allocate_config_queues: got ([0], ())"),
    ({"strategy": CONFIG, "allocate_config_queues": ((True,), ())}, "allocate_config_queues: got ((True,), ())"),
    (
        {"strategy": CONFIG, "mode": "BROADCASTING", "allocate_config_queues": ((4,), ())},
        "of distinct queue indices from 0 to 3",
    ),
    (
        {"consumeridcs": ("r1",)},
        "consumeridcs: got ('r1',); accepted: None unless strategy is MACHINE_ROOM (it is AVG)",
    ),
    ({"strategy": MACHINE_ROOM, "consumeridcs": "r1"}, "consumeridcs: got 'r1'; accepted: for strategy MACHINE_ROOM, "),
    ({"strategy": MACHINE_ROOM_NEARBY, "consumer_rooms": ("a", "b"), "broker_room": "a"}, "nearby_inner: got None; "),
    (
        {"strategy": MACHINE_ROOM_NEARBY, "nearby_inner": CONFIG, "consumer_rooms": ("a", "b"), "broker_room": "a"},
        "nearby_inner: got 'CONFIG'; accepted: for strategy MACHINE_ROOM_NEARBY, AVG, AVG_BY_CIRCLE, CONSISTENT_HASH",
    ),
    (
        {"strategy": MACHINE_ROOM_NEARBY, "nearby_inner": AVG, "consumer_rooms": ("a",), "broker_room": "a"},
        "consumer_rooms: got ('a',); accepted: for strategy MACHINE_ROOM_NEARBY, one non-empty room name per "
        "consumer (2)",
    ),
    (
        {"strategy": MACHINE_ROOM_NEARBY, "nearby_inner": AVG, "consumer_rooms": ("a", ""), "broker_room": "a"},
        "consumer_rooms: got ('a', '')",
    ),
    (
        {"strategy": MACHINE_ROOM_NEARBY, "nearby_inner": AVG, "consumer_rooms": ("a", "b")},
        "broker_room: got None; accepted: for strategy MACHINE_ROOM_NEARBY, a non-empty room name",
    ),
    ({"nearby_inner": AVG}, "nearby_inner: got 'AVG'; accepted: None unless strategy is MACHINE_ROOM_NEARBY"),
    ({"consumer_rooms": ("a", "b")}, "consumer_rooms: got ('a', 'b'); accepted: None unless strategy is MACHINE_ROOM_"),
    ({"broker_room": "a"}, "broker_room: got 'a'; accepted: None unless strategy is MACHINE_ROOM_NEARBY (it is AVG)"),
]


@pytest.mark.parametrize(("overrides", "message"), BAD_CONFIGS, ids=[m[:40] for _, m in BAD_CONFIGS])
def test_each_bad_allocation_setting_is_a_config_error_naming_the_field_and_what_is_accepted(
    overrides: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        Config(**overrides)
    assert message in str(raised.value)


def test_machine_room_broker_names_zero_virtual_nodes_and_unset_consumeridcs_are_accepted() -> None:
    Config(strategy=MACHINE_ROOM, broker_name="r1@broker-a", consumeridcs=("r1",))
    Config(strategy=MACHINE_ROOM, broker_name="r1@broker-a")  # consumeridcs never set (R11.5)
    Config(strategy=CONSISTENT_HASH, virtual_node_cnt=0)  # accepted by RocketMQ (R11.3)


ROUND_TRIP = [
    Config(strategy=CONFIG, consumers=3, allocate_config_queues=((0, 4), (), (1, 2, 3))),
    Config(strategy=MACHINE_ROOM, broker_name="r1@b", consumeridcs=("r1", "r2")),
    Config(strategy=MACHINE_ROOM_NEARBY, nearby_inner=AVG_BY_CIRCLE, broker_room="r1", consumer_rooms=("r1", "r2")),
]


@pytest.mark.parametrize("config", ROUND_TRIP, ids=lambda c: c.strategy)
def test_new_config_fields_survive_a_json_round_trip(config: Config) -> None:
    assert config_from_json(json.loads(json.dumps(config_to_json(config)))) == config


def test_the_model_and_the_reference_accept_every_strategy_name() -> None:
    assert STRATEGIES == (AVG, AVG_BY_CIRCLE, CONSISTENT_HASH, CONFIG, MACHINE_ROOM, MACHINE_ROOM_NEARBY)


# --- allocation anomalies: what INV-13a/13b tolerate, and that they still bite ----------------------

CONFIG_OVERLAP = Config(strategy=CONFIG, consumers=2, queues=3, allocate_config_queues=((0, 1), (1, 2)))
ROOM_OUTSIDE = Config(strategy=MACHINE_ROOM, consumers=2, broker_name="r2@broker-a", consumeridcs=("r1",))
ROOM_INSIDE = Config(strategy=MACHINE_ROOM, consumers=2, broker_name="r1@broker-a", consumeridcs=("r1",))
NO_VIRTUAL_NODES = Config(strategy=CONSISTENT_HASH, consumers=2, virtual_node_cnt=0)
NEARBY = Config(strategy=MACHINE_ROOM_NEARBY, nearby_inner=AVG, broker_room="r1", consumer_rooms=("r1", "r2"))


def test_allowed_anomalies_add_exactly_each_strategys_own_gaps_and_overlaps() -> None:
    base = set(an.ALLOWED_ANOMALIES["CLUSTERING"])
    extra = {
        CONFIG_OVERLAP: {"double-ownership-by-configuration", "unowned-by-configuration"},
        ROOM_OUTSIDE: {"unowned-outside-consumeridcs"},
        ROOM_INSIDE: {"unowned-outside-consumeridcs"},
        NO_VIRTUAL_NODES: {"unowned-with-no-virtual-nodes"},
        Config(strategy=CONSISTENT_HASH): set(),
        NEARBY: set(),
        Config(): set(),
        Config(strategy=AVG_BY_CIRCLE): set(),
    }
    for config, anomalies in extra.items():
        assert set(allowed_anomalies(config)) == base | anomalies, config.strategy
    broadcasting = Config(mode="BROADCASTING", strategy=CONFIG, allocate_config_queues=((0,), (1,)))
    assert set(allowed_anomalies(broadcasting)) == set(an.ALLOWED_ANOMALIES["BROADCASTING"])
    for reasons in an.ALLOCATION_ANOMALIES.values():
        assert all("R11." in why for why in reasons.values())


def agreed_states(config: Config, seeds: int = 30, steps: int = 250) -> Iterator[tuple[Model, State]]:
    """States of seeded random walks in which every running consumer's view agrees (INV-13 applies)."""
    model = Model(config)
    for seed in range(seeds):
        rng = random.Random(seed)
        state = model.initial()
        for _ in range(steps):
            enabled = model.enabled(state)
            if not enabled:
                break
            state = model.step(state, rng.choice(enabled))
            if _views_agree(model, state) is not None:
                yield model, state


def ownership(state: State) -> tuple[set[int], set[int]]:
    """(queues owned twice or more, queues owned by somebody)."""
    seen: set[int] = set()
    twice: set[int] = set()
    for cl in state.clients:
        for q, pq in enumerate(cl.pqs):
            if pq is not None:
                (twice if q in seen else seen).add(q)
    return twice, seen


@pytest.mark.parametrize(
    ("config", "overlap", "gap"),
    [
        (CONFIG_OVERLAP, "INV-13a", "INV-13b"),  # queue 1 twice; the retry queue (3) listed for nobody
        (ROOM_OUTSIDE, None, "INV-13b"),  # nothing is dealt
        (NO_VIRTUAL_NODES, None, "INV-13b"),
    ],
    ids=["CONFIG", "MACHINE_ROOM-outside", "CONSISTENT_HASH-v0"],
)
def test_tolerated_allocation_anomalies_occur_and_are_exactly_what_silences_inv13(
    config: Config, overlap: str | None, gap: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The correct model reaches agreed views with the strategy's own overlaps or gaps and reports
    nothing; with the strategy's allow-list entry removed, the same states violate INV-13a/13b."""
    reached: set[str] = set()
    for model, state in agreed_states(config):
        assert check_state(model, state) == []
        twice, owned = ownership(state)
        reached |= {"overlap"} if twice else set()
        reached |= {"gap"} if len(owned) < model.q_count else set()
    assert reached == {k for k, v in (("overlap", overlap), ("gap", gap)) if v}
    monkeypatch.setattr(an, "ALLOCATION_ANOMALIES", {})
    an._tolerated.cache_clear()
    try:
        found = {v.id for model, state in agreed_states(config, seeds=5) for v in check_state(model, state)}
    finally:
        an._tolerated.cache_clear()
    assert found == {p for p in (overlap, gap) if p}


def first_agreed(config: Config, running: int) -> tuple[Model, State]:
    return next((m, s) for m, s in agreed_states(config) if sum(cl.running for cl in s.clients) >= running)


def plant(state: State, client: int, q: int, owned: bool) -> State:
    cl = state.clients[client]
    pq = ProcessQueue(99, 0, 0, 0, 0, 0, PULL_READY, state.now) if owned else None
    cl = cl._replace(pqs=cl.pqs[:q] + (pq,) + cl.pqs[q + 1 :])
    return state._replace(clients=state.clients[:client] + (cl,) + state.clients[client + 1 :])


def test_machine_room_tolerates_the_undealt_broker_but_inv13a_still_catches_a_planted_overlap() -> None:
    model, state = first_agreed(ROOM_OUTSIDE, running=2)
    assert ownership(state) == (set(), set())  # R11.5: nothing of broker "r2@..." is dealt
    assert check_state(model, state) == []  # INV-13b tolerates it (unowned-outside-consumeridcs)
    doubled = plant(plant(state, 0, 1, True), 1, 1, True)
    assert [v.id for v in check_state(model, doubled)] == ["INV-13a"]


def test_machine_room_coverage_is_still_required_when_the_broker_is_in_a_listed_room() -> None:
    model, state = first_agreed(ROOM_INSIDE, running=2)
    assert check_state(model, state) == []
    owner = next(i for i, cl in enumerate(state.clients) if cl.pqs[0] is not None)
    assert [v.id for v in check_state(model, plant(state, owner, 0, False))] == ["INV-13b"]


def test_config_tolerates_only_what_the_lists_say() -> None:
    model, state = first_agreed(CONFIG_OVERLAP, running=2)
    assert ownership(state) == ({1}, {0, 1, 2})  # lists (0, 1) and (1, 2); the retry queue 3 is listed by none
    assert check_state(model, state) == []
    # Client 1 owning queue 0, which only client 0's list names: not an allowed overlap.
    assert [v.id for v in check_state(model, plant(state, 1, 0, True))] == ["INV-13a"]
    # Queue 2 is listed for client 1, so nobody owning it is not an allowed gap.
    assert [v.id for v in check_state(model, plant(state, 1, 2, False))] == ["INV-13b"]


def test_nearby_around_a_partitioning_strategy_tolerates_nothing_and_inv13a_refutes_overlapping_avg() -> None:
    """MACHINE_ROOM_NEARBY adds no allowance (R11.6 partitions when its inner strategy does): the
    planted AVG overlap inside it is refuted by INV-13a alone."""
    planted = Config(
        strategy=MACHINE_ROOM_NEARBY,
        nearby_inner=AVG,
        broker_room="r1",
        consumer_rooms=("r2", "r2", "r2"),
        consumers=3,
        mutations=frozenset({"avg_blocks_overlap"}),
    )
    result = explore(planted, 100, 300, watch=frozenset({"INV-13a"}))
    assert not result.valid
    assert {v.id for v in result.counterexamples[0].violations} == {"INV-13a"}
