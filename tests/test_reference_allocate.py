"""Claims about the reference allocation strategies (R11.0–R11.6; INV-13; RMQ-11).

The expected values marked "from Java" were produced by running the rocketmq-all-4.9.8 classes
(``AllocateMessageQueueConsistentHash`` and ``ConsistentHashRouter``) on the same inputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, find, given, settings
from hypothesis import strategies as st

from rmqspec.reference.allocate import (
    STRATEGIES_BY_NAME,
    AbstractAllocateMessageQueueStrategy,
    AllocateMachineRoomNearby,
    AllocateMessageQueueAveragely,
    AllocateMessageQueueAveragelyByCircle,
    AllocateMessageQueueByConfig,
    AllocateMessageQueueByMachineRoom,
    AllocateMessageQueueConsistentHash,
    AllocateMessageQueueStrategy,
    ConsistentHashRouter,
    IllegalArgumentError,
    NullPointerError,
    java_split,
    md5_hash,
    strategy_by_name,
)
from rmqspec.reference.message_queue import MessageQueue

GROUP = "G"


def mqs(n: int, topic: str = "T", broker: str = "b0") -> list[MessageQueue]:
    return [MessageQueue(topic, broker, q) for q in range(n)]


def cids(c: int) -> list[str]:
    return [f"c{i}" for i in range(c)]


def queue_ids(allocation: Sequence[MessageQueue]) -> list[int]:
    return [mq.queue_id for mq in allocation]


def allocate_all(
    strategy: AllocateMessageQueueStrategy, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]
) -> dict[str, list[MessageQueue]]:
    """What every member of the group computes, each with the same inputs (R9.3)."""
    return {cid: strategy.allocate(GROUP, cid, mq_all, cid_all) for cid in cid_all}


def partition_violations(
    strategy: AllocateMessageQueueStrategy, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]
) -> list[str]:
    """INV-13 checker: why the members' allocations are not a partition of ``mq_all`` (empty if they are)."""
    problems: list[str] = []
    owner: dict[MessageQueue, str] = {}
    # One computation per member, so duplicated ids (RMQ-11) each count.
    for cid in cid_all:
        for mq in strategy.allocate(GROUP, cid, mq_all, cid_all):
            if mq not in mq_all:
                problems.append(f"{cid} got {mq}, which is not in mqAll")
            elif mq in owner:
                problems.append(f"{mq} given to both {owner[mq]} and {cid}")
            else:
                owner[mq] = cid
    problems.extend(f"{mq} given to nobody" for mq in mq_all if mq not in owner)
    return problems


def avg_shape_violations(
    strategy: AllocateMessageQueueStrategy, mq_all: Sequence[MessageQueue], cid_all: Sequence[str]
) -> list[str]:
    """INV-13 for AVG: member i gets the i-th contiguous block, ceil(n/c) long if i < n % c, else floor."""
    n, c = len(mq_all), len(cid_all)
    problems: list[str] = []
    start = 0
    for i, cid in enumerate(cid_all):
        size = n // c + (1 if i < n % c else 0)
        expected = list(mq_all[start : start + size])
        got = strategy.allocate(GROUP, cid, mq_all, cid_all)
        if got != expected:
            problems.append(f"{cid} (index {i}) got {queue_ids(got)}, expected block {queue_ids(expected)}")
        start += size
    return problems


@dataclass(frozen=True)
class RoomBeforeHash:
    """A MachineRoomResolver: the room is the text before '#' in the broker name or client id ("" if none)."""

    def broker_deploy_in(self, message_queue: MessageQueue) -> str | None:
        return message_queue.broker_name.partition("#")[0] if "#" in message_queue.broker_name else ""

    def consumer_deploy_in(self, client_id: str) -> str | None:
        return client_id.partition("#")[0] if "#" in client_id else ""


# --- R11.0: check() ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("current_cid", "mq_all", "cid_all", "message"),
    [
        ("", mqs(1), ["c0"], "currentCID is empty"),
        (None, mqs(1), ["c0"], "currentCID is empty"),
        ("", [], [], "currentCID is empty"),  # the cid is checked first
        ("c0", [], ["c0"], "mqAll is null or mqAll empty"),
        ("c0", None, ["c0"], "mqAll is null or mqAll empty"),
        ("c0", mqs(1), [], "cidAll is null or cidAll empty"),
        ("c0", mqs(1), None, "cidAll is null or cidAll empty"),
    ],
)
def test_check_rejects_null_or_empty_arguments_with_rocketmq_messages(
    current_cid: str | None,
    mq_all: list[MessageQueue] | None,
    cid_all: list[str] | None,
    message: str,
) -> None:
    with pytest.raises(IllegalArgumentError) as raised:
        AllocateMessageQueueAveragely().check(GROUP, current_cid, mq_all, cid_all)
    assert str(raised.value) == message


def test_illegal_argument_error_is_a_value_error() -> None:
    assert issubclass(IllegalArgumentError, ValueError)


def test_check_accepts_a_whitespace_only_cid() -> None:
    assert AllocateMessageQueueAveragely().check(GROUP, " ", mqs(1), [" "]) is True


def test_check_returns_false_when_current_cid_is_not_in_cid_all() -> None:
    assert AllocateMessageQueueAveragely().check(GROUP, "stranger", mqs(2), cids(2)) is False


@pytest.mark.parametrize(
    "strategy",
    [
        AllocateMessageQueueAveragely(),
        AllocateMessageQueueAveragelyByCircle(),
        AllocateMessageQueueConsistentHash(),
        AllocateMessageQueueByMachineRoom({"r1"}),
        AllocateMachineRoomNearby(AllocateMessageQueueAveragely(), RoomBeforeHash()),
    ],
    ids=lambda s: s.get_name(),
)
def test_a_consumer_not_in_cid_all_gets_nothing(strategy: AllocateMessageQueueStrategy) -> None:
    assert strategy.allocate(GROUP, "stranger", mqs(4, broker="r1#b0"), ["r1#c0", "r1#c1"]) == []


def test_strategies_that_validate_raise_on_empty_mq_all() -> None:
    validating: list[AbstractAllocateMessageQueueStrategy] = [
        AllocateMessageQueueAveragely(),
        AllocateMessageQueueAveragelyByCircle(),
        AllocateMessageQueueConsistentHash(),
        AllocateMessageQueueByMachineRoom({"r1"}),
    ]
    for strategy in validating:
        with pytest.raises(IllegalArgumentError, match=r"^mqAll is null or mqAll empty$"):
            strategy.allocate(GROUP, "c0", [], ["c0"])


# --- R11.1: AVG -------------------------------------------------------------------------------------


def test_avg_gives_first_n_mod_c_consumers_one_extra_queue() -> None:
    got = allocate_all(AllocateMessageQueueAveragely(), mqs(8), cids(3))
    assert {cid: queue_ids(a) for cid, a in got.items()} == {
        "c0": [0, 1, 2],
        "c1": [3, 4, 5],
        "c2": [6, 7],
    }


def test_avg_gives_equal_contiguous_blocks_when_c_divides_n() -> None:
    got = allocate_all(AllocateMessageQueueAveragely(), mqs(6), cids(3))
    assert [queue_ids(a) for a in got.values()] == [[0, 1], [2, 3], [4, 5]]


def test_avg_gives_one_queue_each_when_n_equals_c() -> None:
    got = allocate_all(AllocateMessageQueueAveragely(), mqs(3), cids(3))
    assert [queue_ids(a) for a in got.values()] == [[0], [1], [2]]


def test_avg_leaves_consumers_at_index_n_and_above_idle_when_n_below_c() -> None:
    got = allocate_all(AllocateMessageQueueAveragely(), mqs(3), cids(5))
    assert [queue_ids(a) for a in got.values()] == [[0], [1], [2], [], []]


def test_avg_with_a_duplicated_client_id_doubles_one_slice_and_orphans_another() -> None:
    # RMQ-11's sequence: both clients called X compute index 0.
    strategy = AllocateMessageQueueAveragely()
    cid_all = ["X", "X", "Y"]
    assert queue_ids(strategy.allocate(GROUP, "X", mqs(6), cid_all)) == [0, 1]
    assert queue_ids(strategy.allocate(GROUP, "Y", mqs(6), cid_all)) == [4, 5]
    assert partition_violations(strategy, mqs(6), cid_all) == [
        f"{MessageQueue('T', 'b0', 0)} given to both X and X",
        f"{MessageQueue('T', 'b0', 1)} given to both X and X",
        f"{MessageQueue('T', 'b0', 2)} given to nobody",
        f"{MessageQueue('T', 'b0', 3)} given to nobody",
    ]


# --- R11.2: AVG_BY_CIRCLE ---------------------------------------------------------------------------


def test_avg_by_circle_deals_queues_round_robin() -> None:
    got = allocate_all(AllocateMessageQueueAveragelyByCircle(), mqs(8), cids(3))
    assert [queue_ids(a) for a in got.values()] == [[0, 3, 6], [1, 4, 7], [2, 5]]


def test_avg_by_circle_leaves_consumers_at_index_n_and_above_idle_when_n_below_c() -> None:
    got = allocate_all(AllocateMessageQueueAveragelyByCircle(), mqs(2), cids(4))
    assert [queue_ids(a) for a in got.values()] == [[0], [1], [], []]


# --- R11.3: CONSISTENT_HASH -------------------------------------------------------------------------


def test_md5_hash_is_the_first_four_digest_bytes_as_an_unsigned_big_endian_number() -> None:
    # md5("a") = 0cc175b9..., md5("b") = 92eb5ffe... (high bit set: must stay positive).
    assert md5_hash("a") == 0x0CC175B9 == 214005177
    assert md5_hash("b") == 0x92EB5FFE == 2464899070
    assert md5_hash("MessageQueue [topic=T, brokerName=b0, queueId=0]") == 3520181902  # from Java


def test_consistent_hash_defaults_to_ten_virtual_nodes() -> None:
    assert AllocateMessageQueueConsistentHash().virtual_node_cnt == 10


@pytest.mark.parametrize(
    ("virtual_node_cnt", "expected"),
    [
        (10, {"c0": [3, 4, 6, 7], "c1": [0, 1, 2], "c2": [5]}),
        (1, {"c0": [1, 3, 5, 6, 7], "c1": [0, 4], "c2": [2]}),
    ],
)
def test_consistent_hash_with_md5_matches_rocketmq_4_9_8(virtual_node_cnt: int, expected: dict[str, list[int]]) -> None:
    got = allocate_all(AllocateMessageQueueConsistentHash(virtual_node_cnt), mqs(8), cids(3))
    assert {cid: queue_ids(a) for cid, a in got.items()} == expected  # from Java


def test_consistent_hash_rejects_a_negative_virtual_node_count() -> None:
    with pytest.raises(IllegalArgumentError) as raised:
        AllocateMessageQueueConsistentHash(-1)
    assert str(raised.value) == "illegal virtualNodeCnt :-1"


def test_consistent_hash_with_zero_virtual_nodes_assigns_nothing_to_anybody() -> None:
    got = allocate_all(AllocateMessageQueueConsistentHash(0), mqs(5), cids(3))
    assert got == {"c0": [], "c1": [], "c2": []}


def test_consistent_hash_ring_keys_are_cid_dash_replica_index() -> None:
    seen: list[str] = []

    def recording_hash(key: str) -> int:
        seen.append(key)
        return md5_hash(key)

    ConsistentHashRouter(["c0", "c1"], 3, recording_hash)
    assert seen == ["c0-0", "c0-1", "c0-2", "c1-0", "c1-1", "c1-2"]


def test_consistent_hash_numbers_replicas_of_a_duplicate_cid_on_from_the_first_copy() -> None:
    seen: list[str] = []

    def recording_hash(key: str) -> int:
        seen.append(key)
        return md5_hash(key)

    router = ConsistentHashRouter(["a", "a", "b"], 2, recording_hash)
    assert seen == ["a-0", "a-1", "a-2", "a-3", "b-0", "b-1"]
    assert router.get_existing_replicas("a") == 4


def test_consistent_hash_duplicate_cids_both_take_the_same_queues() -> None:
    strategy = AllocateMessageQueueConsistentHash(1)
    cid_all = ["a", "a", "b"]
    assert queue_ids(strategy.allocate(GROUP, "a", mqs(8), cid_all)) == [1, 3, 4, 5, 6, 7]  # from Java
    assert queue_ids(strategy.allocate(GROUP, "b", mqs(8), cid_all)) == [0, 2]  # from Java


def test_consistent_hash_collision_overwrites_and_replica_count_restarts_from_survivors() -> None:
    # Every key hashes to 7: each put replaces the last, so "a" owns one entry when its duplicate is
    # added and numbering resumes at 1 (Java gives the same key sequence), and "b" ends up owning the ring.
    seen: list[str] = []

    def constant_hash(key: str) -> int:
        seen.append(key)
        return 7

    router = ConsistentHashRouter(["a", "a", "b"], 2, constant_hash)
    assert seen == ["a-0", "a-1", "a-1", "a-2", "b-0", "b-1"]
    assert router.ring_keys() == ["b-1"]
    strategy = AllocateMessageQueueConsistentHash(2, lambda key: 7)
    assert strategy.allocate(GROUP, "a", mqs(3), ["a", "b"]) == []
    assert strategy.allocate(GROUP, "b", mqs(3), ["a", "b"]) == mqs(3)


def test_consistent_hash_routes_to_first_ring_entry_at_or_after_the_hash_wrapping_round() -> None:
    queues = mqs(4)
    table = {"a-0": 100, "b-0": 200} | {str(mq): h for mq, h in zip(queues, [50, 100, 150, 250], strict=True)}
    strategy = AllocateMessageQueueConsistentHash(1, table.__getitem__)
    # 50 -> a (100); 100 -> a (equal counts); 150 -> b (200); 250 -> past the end, wraps to a.
    assert queue_ids(strategy.allocate(GROUP, "a", queues, ["a", "b"])) == [0, 1, 3]
    assert queue_ids(strategy.allocate(GROUP, "b", queues, ["a", "b"])) == [2]


def test_consistent_hash_routes_on_the_java_text_form_of_the_queue() -> None:
    seen: list[str] = []

    def recording_hash(key: str) -> int:
        seen.append(key)
        return 0

    AllocateMessageQueueConsistentHash(1, recording_hash).allocate(GROUP, "a", [MessageQueue("T", "b", 3)], ["a"])
    assert seen == ["a-0", "MessageQueue [topic=T, brokerName=b, queueId=3]"]


# --- R11.4: CONFIG ----------------------------------------------------------------------------------


def test_config_returns_the_configured_queues_whatever_the_inputs() -> None:
    configured = [MessageQueue("T", "b9", 9), MessageQueue("T", "b0", 0)]
    strategy = AllocateMessageQueueByConfig(configured)
    assert strategy.get_name() == "CONFIG"
    assert strategy.allocate(GROUP, "c0", mqs(3), cids(2)) == configured
    # No check(): empty or foreign inputs are not rejected.
    assert strategy.allocate(GROUP, "", [], []) == configured
    assert strategy.allocate(GROUP, "stranger", mqs(1), ["c0"]) == configured


def test_config_without_a_list_answers_null_as_java_does() -> None:
    assert AllocateMessageQueueByConfig().allocate(GROUP, "c0", mqs(3), ["c0"]) is None


def test_machine_room_nearby_around_config_without_a_list_throws_npe() -> None:
    class OneRoom:
        def broker_deploy_in(self, mq: object) -> str:
            return "room1"

        def consumer_deploy_in(self, cid: str) -> str:
            return "room1"

    nearby = AllocateMachineRoomNearby(AllocateMessageQueueByConfig(), OneRoom())  # type: ignore[arg-type]
    with pytest.raises(NullPointerError):
        nearby.allocate(GROUP, "c0", mqs(3), ["c0"])


def test_config_result_does_not_alias_the_configuration() -> None:
    strategy = AllocateMessageQueueByConfig(mqs(2))
    strategy.allocate(GROUP, "c0", [], []).clear()
    assert strategy.allocate(GROUP, "c0", [], []) == mqs(2)


# --- R11.5: MACHINE_ROOM ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("a@b", ["a", "b"]),
        ("a@b@", ["a", "b"]),
        ("a@", ["a"]),
        ("a@@", ["a"]),
        ("@", []),
        ("@b", ["", "b"]),
        ("", [""]),
        ("ab", ["ab"]),
        ("a@b@c", ["a", "b", "c"]),
    ],
)
def test_java_split_drops_trailing_empty_strings_only(text: str, parts: list[str]) -> None:
    assert java_split(text, "@") == parts


def test_machine_room_takes_brokers_splitting_into_exactly_two_parts_with_a_listed_room() -> None:
    brokers = ["r1@b0", "r1@b1@", "r1@", "r1@b@c", "r2@b0", "@b0", "b0"]
    queues = [MessageQueue("T", b, 0) for b in brokers]
    strategy = AllocateMessageQueueByMachineRoom({"r1"})
    assert strategy.get_name() == "MACHINE_ROOM"
    # "a@b@" counts as two parts (trailing empty dropped); "a@" is one part; "a@b@c" is three.
    assert strategy.allocate(GROUP, "c0", queues, ["c0"]) == [queues[0], queues[1]]


def test_machine_room_deals_equal_slices_then_one_leftover_to_each_of_the_first_consumers() -> None:
    queues = mqs(5, broker="r1@b0") + mqs(2, broker="r9@b0")
    got = allocate_all(AllocateMessageQueueByMachineRoom({"r1"}), queues, cids(2))
    # 5 eligible over 2: slices of 2, and leftover queue 4 goes to c0. The r9 queues go to nobody.
    assert got == {"c0": [queues[0], queues[1], queues[4]], "c1": [queues[2], queues[3]]}


def test_machine_room_without_consumeridcs_raises_once_a_two_part_broker_is_seen() -> None:
    strategy = AllocateMessageQueueByMachineRoom()
    with pytest.raises(NullPointerError):
        strategy.allocate(GROUP, "c0", [MessageQueue("T", "plain", 0), MessageQueue("T", "r1@b", 0)], ["c0"])


def test_machine_room_without_consumeridcs_returns_nothing_when_no_broker_has_two_parts() -> None:
    # Java tests the part count before touching the null set, so no exception here.
    strategy = AllocateMessageQueueByMachineRoom()
    assert strategy.allocate(GROUP, "c0", [MessageQueue("T", "plain", 0)], ["c0"]) == []


# --- R11.6: MACHINE_ROOM_NEARBY ---------------------------------------------------------------------


def nearby(inner: AllocateMessageQueueStrategy | None = None) -> AllocateMachineRoomNearby:
    return AllocateMachineRoomNearby(inner or AllocateMessageQueueAveragely(), RoomBeforeHash())


def test_nearby_name_is_prefix_plus_inner_name() -> None:
    assert nearby().get_name() == "MACHINE_ROOM_NEARBY-AVG"
    assert nearby(AllocateMessageQueueAveragelyByCircle()).get_name() == "MACHINE_ROOM_NEARBY-AVG_BY_CIRCLE"


def test_nearby_constructor_rejects_missing_collaborators() -> None:
    with pytest.raises(NullPointerError, match=r"^allocateMessageQueueStrategy is null$"):
        AllocateMachineRoomNearby(None, RoomBeforeHash())
    with pytest.raises(NullPointerError, match=r"^machineRoomResolver is null$"):
        AllocateMachineRoomNearby(AllocateMessageQueueAveragely(), None)


def test_nearby_keeps_a_rooms_queues_among_that_rooms_consumers() -> None:
    room1, room2 = mqs(4, broker="r1#b"), mqs(2, broker="r2#b")
    cid_all = ["r1#c0", "r1#c1", "r2#c0"]
    got = allocate_all(nearby(), room1 + room2, cid_all)
    assert got == {"r1#c0": room1[:2], "r1#c1": room1[2:], "r2#c0": room2}


def test_nearby_shares_queues_of_rooms_without_consumers_among_all_consumers() -> None:
    room1, room3 = mqs(2, broker="r1#b"), mqs(4, broker="r3#b")
    cid_all = ["r1#c0", "r2#c0"]
    got = allocate_all(nearby(), room1 + room3, cid_all)
    # r1's queues stay in r1; r3 has no consumer, so AVG splits its queues over everyone.
    assert got == {"r1#c0": room1 + room3[:2], "r2#c0": room3[2:]}


def test_nearby_visits_consumerless_rooms_in_sorted_room_order() -> None:
    room_b, room_a = mqs(1, broker="rb#x"), mqs(1, broker="ra#x")
    got = nearby().allocate(GROUP, "r1#c0", room_b + room_a, ["r1#c0"])
    assert got == room_a + room_b


def test_nearby_rejects_a_queue_or_consumer_without_a_room() -> None:
    with pytest.raises(IllegalArgumentError) as raised:
        nearby().allocate(GROUP, "r1#c0", [MessageQueue("T", "b0", 1)], ["r1#c0"])
    assert str(raised.value) == "Machine room is null for mq MessageQueue [topic=T, brokerName=b0, queueId=1]"
    with pytest.raises(IllegalArgumentError) as raised:
        nearby().allocate(GROUP, "r1#c0", mqs(1, broker="r1#b"), ["c9", "r1#c0"])
    assert str(raised.value) == "Machine room is null for consumer id c9"


# --- registry ---------------------------------------------------------------------------------------


def test_registry_names_the_three_strategies_without_arguments_by_their_rocketmq_names() -> None:
    assert sorted(STRATEGIES_BY_NAME) == ["AVG", "AVG_BY_CIRCLE", "CONSISTENT_HASH"]
    for name in STRATEGIES_BY_NAME:
        assert strategy_by_name(name).get_name() == name


def test_registry_returns_a_fresh_instance_each_time() -> None:
    assert strategy_by_name("AVG") is not strategy_by_name("AVG")


def test_registry_rejects_unknown_names_listing_the_accepted_ones() -> None:
    with pytest.raises(ValueError, match="accepted names: AVG, AVG_BY_CIRCLE, CONSISTENT_HASH"):
        strategy_by_name("CONFIG")


# --- INV-13 properties ------------------------------------------------------------------------------

FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

cid_lists = st.lists(
    st.text(alphabet="abcXY0189@#.-", min_size=1, max_size=6), min_size=1, max_size=8, unique=True
).map(sorted)
mq_lists = st.lists(
    st.builds(
        MessageQueue,
        st.sampled_from(["T", "%RETRY%G"]),
        st.sampled_from(["b0", "b1", "broker-a"]),
        st.integers(min_value=0, max_value=15),
    ),
    min_size=1,
    max_size=24,
    unique=True,
).map(sorted)


@FAST
@given(mq_all=mq_lists, cid_all=cid_lists)
def test_avg_allocations_partition_mq_all(mq_all: list[MessageQueue], cid_all: list[str]) -> None:
    assert partition_violations(AllocateMessageQueueAveragely(), mq_all, cid_all) == []


@FAST
@given(mq_all=mq_lists, cid_all=cid_lists)
def test_avg_blocks_are_contiguous_with_the_larger_ones_first(mq_all: list[MessageQueue], cid_all: list[str]) -> None:
    assert avg_shape_violations(AllocateMessageQueueAveragely(), mq_all, cid_all) == []


@FAST
@given(mq_all=mq_lists, cid_all=cid_lists)
def test_avg_by_circle_allocations_partition_mq_all(mq_all: list[MessageQueue], cid_all: list[str]) -> None:
    assert partition_violations(AllocateMessageQueueAveragelyByCircle(), mq_all, cid_all) == []


@FAST
@given(mq_all=mq_lists, cid_all=cid_lists, virtual_node_cnt=st.integers(min_value=1, max_value=12))
def test_consistent_hash_allocations_partition_mq_all_for_any_positive_virtual_node_count(
    mq_all: list[MessageQueue], cid_all: list[str], virtual_node_cnt: int
) -> None:
    strategy = AllocateMessageQueueConsistentHash(virtual_node_cnt)
    assert partition_violations(strategy, mq_all, cid_all) == []


@FAST
@given(mq_all=mq_lists, cid_all=cid_lists)
def test_registry_strategies_partition_mq_all(mq_all: list[MessageQueue], cid_all: list[str]) -> None:
    for name in STRATEGIES_BY_NAME:
        assert partition_violations(strategy_by_name(name), mq_all, cid_all) == [], name


@FAST
@given(
    rooms=st.lists(st.sampled_from(["r1", "r2", "r3"]), min_size=1, max_size=20),
    consumer_rooms=st.lists(st.sampled_from(["r1", "r2", "r4"]), min_size=1, max_size=6),
    inner_name=st.sampled_from(["AVG", "AVG_BY_CIRCLE"]),
)
def test_nearby_partitions_mq_all_when_its_inner_strategy_does(
    rooms: list[str], consumer_rooms: list[str], inner_name: str
) -> None:
    mq_all = sorted(MessageQueue("T", f"{room}#b", q) for q, room in enumerate(rooms))
    cid_all = sorted(f"{room}#c{i}" for i, room in enumerate(consumer_rooms))
    assert partition_violations(nearby(strategy_by_name(inner_name)), mq_all, cid_all) == []


@FAST
@given(
    rooms=st.lists(st.sampled_from(["r1", "r2", "r3"]), min_size=1, max_size=20),
    broker_suffix=st.sampled_from(["@b", "@b@", "@", "@b@c"]),
    cid_all=cid_lists,
)
def test_machine_room_partitions_its_eligible_queues(rooms: list[str], broker_suffix: str, cid_all: list[str]) -> None:
    mq_all = sorted(MessageQueue("T", room + broker_suffix, q) for q, room in enumerate(rooms))
    strategy = AllocateMessageQueueByMachineRoom({"r1", "r2"})
    # Under Java's split only "<room>@b" and "<room>@b@" have exactly two parts.
    two_parts = broker_suffix in ("@b", "@b@")
    eligible = [mq for mq in mq_all if two_parts and not mq.broker_name.startswith("r3")]
    got = allocate_all(strategy, mq_all, cid_all)
    assert sorted(mq for allocation in got.values() for mq in allocation) == eligible


# --- the INV-13 checker catches a planted bug -------------------------------------------------------


class OffByOneAveragely(AllocateMessageQueueAveragely):
    """A deliberately wrong AVG: every block starts one queue too late and nothing wraps round."""

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        correct = super().allocate(consumer_group, current_cid, mq_all, cid_all)
        if not correct:
            return []
        start = mq_all.index(correct[0]) + 1
        return list(mq_all[start : start + len(correct)])


def test_partition_checker_reports_the_planted_off_by_one() -> None:
    assert partition_violations(OffByOneAveragely(), mqs(5), cids(2)) == [
        f"{MessageQueue('T', 'b0', 0)} given to nobody",
    ]
    assert avg_shape_violations(OffByOneAveragely(), mqs(5), cids(2)) == [
        "c0 (index 0) got [1, 2, 3], expected block [0, 1, 2]",
        "c1 (index 1) got [4], expected block [3, 4]",
    ]


def test_partition_property_finds_and_shrinks_a_counterexample_to_the_planted_bug() -> None:
    mq_all, cid_all = find(
        st.tuples(mq_lists, cid_lists),
        lambda case: bool(partition_violations(OffByOneAveragely(), *case)),
        settings=settings(max_examples=200, database=None),
    )
    # The minimal failing group: one queue, one consumer, and the queue goes to nobody.
    assert len(mq_all) == 1
    assert len(cid_all) == 1


@FAST
@given(mq_all=mq_lists, cid_all=cid_lists)
def test_planted_off_by_one_always_orphans_the_first_queue(mq_all: list[MessageQueue], cid_all: list[str]) -> None:
    assert f"{mq_all[0]} given to nobody" in partition_violations(OffByOneAveragely(), mq_all, cid_all)
