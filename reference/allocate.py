"""RocketMQ's queue allocation strategies (R11.0–R11.6), for the reference side.

Each consumer of a CLUSTERING group runs the group's strategy on its own, with the same sorted
``mq_all`` and ``cid_all`` (R9.3), and keeps what the strategy hands back. The group is partitioned
correctly only if every member's answer fits with the others (INV-13); RMQ-11 lists the ways that
fails. The classes below mirror the Java classes of RocketMQ 4.9.8 one for one, under the same names
(snake_case for methods), so a RocketMQ developer can find each rule where they expect it. Java's
``null`` arguments are accepted where Java tests for them (``check``) and Java's exceptions are
mirrored by :class:`IllegalArgumentError` and :class:`NullPointerError`.

Source read: ``client/.../consumer/rebalance/*.java`` and ``common/.../consistenthash/*.java`` at tag
``rocketmq-all-4.9.8``.
"""

from __future__ import annotations

import bisect
import hashlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Sequence
from typing import Protocol

from rmqspec.reference.message_queue import MessageQueue

__all__ = [
    "STRATEGIES_BY_NAME",
    "AbstractAllocateMessageQueueStrategy",
    "AllocateMachineRoomNearby",
    "AllocateMessageQueueAveragely",
    "AllocateMessageQueueAveragelyByCircle",
    "AllocateMessageQueueByConfig",
    "AllocateMessageQueueByMachineRoom",
    "AllocateMessageQueueConsistentHash",
    "AllocateMessageQueueStrategy",
    "ConsistentHashRouter",
    "HashFunction",
    "IllegalArgumentError",
    "MachineRoomResolver",
    "NullPointerError",
    "java_split",
    "md5_hash",
    "strategy_by_name",
]


class IllegalArgumentError(ValueError):
    """Stands in for Java's ``IllegalArgumentException``; messages are RocketMQ's own."""


class NullPointerError(TypeError):
    """Stands in for Java's ``NullPointerException`` where RocketMQ throws one (R11.5, R11.6)."""


class AllocateMessageQueueStrategy(ABC):
    """The strategy interface, ``org.apache.rocketmq.client.consumer.AllocateMessageQueueStrategy`` (§11).

    ``allocate`` returns the queues ``current_cid`` should own (``None`` only from CONFIG with no list,
    as Java's null); ``get_name`` is the name RocketMQ
    reports for the strategy.
    """

    @abstractmethod
    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue] | None: ...

    @abstractmethod
    def get_name(self) -> str: ...


class AbstractAllocateMessageQueueStrategy(AllocateMessageQueueStrategy):
    """R11.0, ``AbstractAllocateMessageQueueStrategy#check`` (4.9.4+): shared argument validation."""

    def check(
        self,
        consumer_group: str,
        current_cid: str | None,
        mq_all: Sequence[MessageQueue] | None,
        cid_all: Sequence[str] | None,
    ) -> bool:
        """Raise on null/empty arguments; return False when ``current_cid`` is not in ``cid_all``.

        Java's ``StringUtils.isEmpty`` is used, so a whitespace-only id passes. The False case is the
        one Java logs as "[BUG] ... not in cidAll"; callers then return an empty allocation, which
        makes the rebalance drop every queue of the topic (R9.4).
        """
        if not current_cid:
            raise IllegalArgumentError("currentCID is empty")
        if not mq_all:
            raise IllegalArgumentError("mqAll is null or mqAll empty")
        if not cid_all:
            raise IllegalArgumentError("cidAll is null or cidAll empty")
        return current_cid in cid_all


class AllocateMessageQueueAveragely(AbstractAllocateMessageQueueStrategy):
    """R11.1, ``AllocateMessageQueueAveragely`` ("AVG"): one contiguous block per consumer.

    The first ``n mod c`` consumers get ``n // c + 1`` queues, the rest ``n // c``; when ``n <= c``
    the first ``n`` consumers get one queue each and the others none.
    """

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        if not self.check(consumer_group, current_cid, mq_all, cid_all):
            return []
        n, c = len(mq_all), len(cid_all)
        index = cid_all.index(current_cid)  # first occurrence, like List#indexOf
        mod = n % c
        has_extra = mod > 0 and index < mod
        if n <= c:
            average_size = 1
        elif has_extra:
            average_size = n // c + 1
        else:
            average_size = n // c
        start_index = index * average_size if has_extra else index * average_size + mod
        # A non-positive range (index >= n when n < c) yields nothing.
        range_ = min(average_size, n - start_index)
        return [mq_all[(start_index + k) % n] for k in range(range_)]

    def get_name(self) -> str:
        return "AVG"


class AllocateMessageQueueAveragelyByCircle(AbstractAllocateMessageQueueStrategy):
    """R11.2, ``AllocateMessageQueueAveragelyByCircle`` ("AVG_BY_CIRCLE"): queues dealt round-robin.

    Consumer ``i`` gets queues ``i, i + c, i + 2c, ...``.
    """

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        if not self.check(consumer_group, current_cid, mq_all, cid_all):
            return []
        index = cid_all.index(current_cid)
        c = len(cid_all)
        return [mq_all[j] for j in range(index, len(mq_all)) if j % c == index]

    def get_name(self) -> str:
        return "AVG_BY_CIRCLE"


HashFunction = Callable[[str], int]
"""``org.apache.rocketmq.common.consistenthash.HashFunction``: a string key to a (Java long) hash."""


def md5_hash(key: str) -> int:
    """R11.3 default hash, ``ConsistentHashRouter.MD5Hash#hash``.

    The first 4 bytes of the MD5 digest of the key, read as an unsigned big-endian 32-bit number.
    Java encodes the key with the platform default charset; UTF-8 is assumed here (it is the
    default on Linux and, from Java 18, everywhere; the usual defaults all agree on ASCII ids).
    """
    digest = hashlib.md5(key.encode("utf-8"), usedforsecurity=False).digest()
    return int.from_bytes(digest[:4], "big")


class ConsistentHashRouter:
    """R11.3 ring, ``org.apache.rocketmq.common.consistenthash.ConsistentHashRouter``.

    Specialised to the one use RocketMQ makes of it: physical nodes are consumer ids (``ClientNode``
    keys), and a virtual node's key is ``"<cid>-<replicaIndex>"`` (``VirtualNode#getKey``).
    """

    def __init__(self, p_nodes: Sequence[str], v_node_count: int, hash_function: HashFunction = md5_hash):
        self._hash_function = hash_function
        # Java's TreeMap<Long, VirtualNode>: hash -> (physical cid, replica index).
        self._ring: dict[int, tuple[str, int]] = {}
        self._sorted_keys: list[int] = []
        for p_node in p_nodes:
            self.add_node(p_node, v_node_count)

    def add_node(self, p_node: str, v_node_count: int) -> None:
        """``#addNode``: put ``v_node_count`` virtual nodes of ``p_node`` on the ring.

        Numbering starts at the number of ring entries ``p_node`` already owns, so a duplicate cid
        continues where the first copy stopped (less any entries lost to collisions). A hash
        collision overwrites the earlier entry, as ``TreeMap#put`` does.
        """
        if v_node_count < 0:
            raise IllegalArgumentError(f"illegal virtual node counts :{v_node_count}")
        existing_replicas = self.get_existing_replicas(p_node)
        for i in range(v_node_count):
            replica_index = i + existing_replicas
            h = self._hash_function(f"{p_node}-{replica_index}")
            if h not in self._ring:
                bisect.insort(self._sorted_keys, h)
            self._ring[h] = (p_node, replica_index)

    def route_node(self, object_key: str) -> str | None:
        """``#routeNode``: the owner of the first ring entry at or after ``hash(key)``, wrapping round.

        ``None`` when the ring is empty (``v = 0``).
        """
        if not self._sorted_keys:
            return None
        pos = bisect.bisect_left(self._sorted_keys, self._hash_function(object_key))
        node_hash = self._sorted_keys[pos] if pos < len(self._sorted_keys) else self._sorted_keys[0]
        return self._ring[node_hash][0]

    def get_existing_replicas(self, p_node: str) -> int:
        """``#getExistingReplicas``: how many ring entries currently belong to ``p_node``."""
        return sum(1 for owner, _ in self._ring.values() if owner == p_node)

    def ring_keys(self) -> list[str]:
        """The virtual-node keys on the ring, in ring order (for tests and tracing)."""
        return [f"{owner}-{replica}" for owner, replica in (self._ring[h] for h in self._sorted_keys)]


class AllocateMessageQueueConsistentHash(AbstractAllocateMessageQueueStrategy):
    """R11.3, ``AllocateMessageQueueConsistentHash`` ("CONSISTENT_HASH").

    Every cid is put on a hash ring with ``virtual_node_cnt`` virtual nodes (default 10); each queue
    goes to the ring owner of ``str(mq)``. ``virtual_node_cnt = 0`` is accepted and leaves the ring
    empty, so nobody gets any queue.
    """

    def __init__(self, virtual_node_cnt: int = 10, custom_hash_function: HashFunction | None = None):
        if virtual_node_cnt < 0:
            raise IllegalArgumentError(f"illegal virtualNodeCnt :{virtual_node_cnt}")
        self.virtual_node_cnt = virtual_node_cnt
        self.custom_hash_function = custom_hash_function

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        if not self.check(consumer_group, current_cid, mq_all, cid_all):
            return []
        hash_function = md5_hash if self.custom_hash_function is None else self.custom_hash_function
        router = ConsistentHashRouter(cid_all, self.virtual_node_cnt, hash_function)
        return [mq for mq in mq_all if router.route_node(str(mq)) == current_cid]

    def get_name(self) -> str:
        return "CONSISTENT_HASH"


class AllocateMessageQueueByConfig(AbstractAllocateMessageQueueStrategy):
    """R11.4, ``AllocateMessageQueueByConfig`` ("CONFIG"): the configured list, whatever the inputs.

    It never calls ``check``, so nothing is validated. Java returns its own list, ``null`` when none
    was set (Java's edge): so does this one (the rebalance treats null as empty, R11.7; an enclosing
    MACHINE_ROOM_NEARBY throws on it, R11.6). A copy is returned so callers cannot alter the
    configuration.
    """

    def __init__(self, message_queue_list: Sequence[MessageQueue] | None = None):
        self.message_queue_list: list[MessageQueue] | None = (
            None if message_queue_list is None else list(message_queue_list)
        )

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue] | None:
        return None if self.message_queue_list is None else list(self.message_queue_list)

    def get_name(self) -> str:
        return "CONFIG"


def java_split(text: str, separator: str) -> list[str]:
    """Java's ``String#split`` for a literal, non-empty separator (limit 0).

    Unlike Python's ``str.split``, trailing empty strings are dropped: ``"a@b@"`` gives
    ``["a", "b"]``, ``"a@"`` gives ``["a"]`` and ``"@"`` gives ``[]``. Leading empty strings stay, and
    a string without the separator (even ``""``) comes back whole.
    """
    if separator not in text:
        return [text]
    parts = text.split(separator)
    while parts and parts[-1] == "":
        parts.pop()
    return parts


class AllocateMessageQueueByMachineRoom(AbstractAllocateMessageQueueStrategy):
    """R11.5, ``AllocateMessageQueueByMachineRoom`` ("MACHINE_ROOM").

    Only queues whose broker name is ``"<room>@<rest>"`` (exactly two parts under Java's split) with
    ``<room>`` in ``consumeridcs`` are eligible; those are split into ``c`` equal slices, and the
    first ``rem`` consumers each get one of the leftover queues. Other queues go to nobody.
    """

    def __init__(self, consumeridcs: Collection[str] | None = None):
        self.consumeridcs: frozenset[str] | None = None if consumeridcs is None else frozenset(consumeridcs)

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        if not self.check(consumer_group, current_cid, mq_all, cid_all):
            return []
        current_index = cid_all.index(current_cid)
        premq_all: list[MessageQueue] = []
        for mq in mq_all:
            parts = java_split(mq.broker_name, "@")
            # Java tests the part count first, so an unset set fails only on a "<room>@<x>" broker.
            if len(parts) == 2:
                if self.consumeridcs is None:
                    raise NullPointerError("consumeridcs is null")
                if parts[0] in self.consumeridcs:
                    premq_all.append(mq)
        c = len(cid_all)
        # Java calls the quotient "mod".
        mod, rem = divmod(len(premq_all), c)
        start_index = mod * current_index
        result = list(premq_all[start_index : start_index + mod])
        if rem > current_index:
            result.append(premq_all[current_index + mod * c])
        return result

    def get_name(self) -> str:
        return "MACHINE_ROOM"


class MachineRoomResolver(Protocol):
    """``AllocateMachineRoomNearby.MachineRoomResolver``: which room a broker's queue or a consumer is in.

    Java documents that neither method may return null; an empty or null answer makes the strategy
    throw (R11.6).
    """

    def broker_deploy_in(self, message_queue: MessageQueue) -> str | None: ...

    def consumer_deploy_in(self, client_id: str) -> str | None: ...


class AllocateMachineRoomNearby(AbstractAllocateMessageQueueStrategy):
    """R11.6, ``AllocateMachineRoomNearby`` ("MACHINE_ROOM_NEARBY-" + inner name).

    Queues of a room that has live consumers go only to that room's consumers (through the inner
    strategy); queues of a room without consumers are shared by every consumer of the group.
    """

    def __init__(
        self,
        allocate_message_queue_strategy: AllocateMessageQueueStrategy | None,
        machine_room_resolver: MachineRoomResolver | None,
    ):
        if allocate_message_queue_strategy is None:
            raise NullPointerError("allocateMessageQueueStrategy is null")
        if machine_room_resolver is None:
            raise NullPointerError("machineRoomResolver is null")
        self.allocate_message_queue_strategy = allocate_message_queue_strategy
        self.machine_room_resolver = machine_room_resolver

    def allocate(
        self,
        consumer_group: str,
        current_cid: str,
        mq_all: Sequence[MessageQueue],
        cid_all: Sequence[str],
    ) -> list[MessageQueue]:
        if not self.check(consumer_group, current_cid, mq_all, cid_all):
            return []
        resolver = self.machine_room_resolver
        inner = self.allocate_message_queue_strategy

        # Java uses TreeMaps keyed by room; insertion order inside each room is kept.
        mr2mq: dict[str, list[MessageQueue]] = {}
        for mq in mq_all:
            broker_room = resolver.broker_deploy_in(mq)
            if not broker_room:
                raise IllegalArgumentError(f"Machine room is null for mq {mq}")
            mr2mq.setdefault(broker_room, []).append(mq)

        mr2c: dict[str, list[str]] = {}
        for cid in cid_all:
            consumer_room = resolver.consumer_deploy_in(cid)
            if not consumer_room:
                raise IllegalArgumentError(f"Machine room is null for consumer id {cid}")
            mr2c.setdefault(consumer_room, []).append(cid)

        allocate_results: list[MessageQueue] = []

        # 1. Queues in the current consumer's own room, shared only with that room's consumers.
        current_room = resolver.consumer_deploy_in(current_cid)
        mq_in_this_room = mr2mq.pop(current_room, None) if current_room is not None else None
        consumers_in_this_room = mr2c.get(current_room, []) if current_room is not None else []
        if mq_in_this_room:
            allocate_results.extend(
                _not_null(inner.allocate(consumer_group, current_cid, mq_in_this_room, consumers_in_this_room))
            )

        # 2. Rooms with queues but no live consumer: everyone shares them. Python's str order
        # matches Java's String#compareTo for BMP-only room names.
        for room in sorted(mr2mq):
            if room not in mr2c:
                allocate_results.extend(_not_null(inner.allocate(consumer_group, current_cid, mr2mq[room], cid_all)))

        return allocate_results

    def get_name(self) -> str:
        return "MACHINE_ROOM_NEARBY-" + self.allocate_message_queue_strategy.get_name()


def _not_null(queues: list[MessageQueue] | None) -> list[MessageQueue]:
    """``allocateResults.addAll(result)``: a ``null`` inner result (CONFIG with no list) throws
    ``NullPointerException`` (R11.6; Java's edge)."""
    if queues is None:
        raise NullPointerError("allocateResults.addAll(null): the inner strategy returned null")
    return queues


STRATEGIES_BY_NAME: dict[str, Callable[[], AllocateMessageQueueStrategy]] = {
    "AVG": AllocateMessageQueueAveragely,
    "AVG_BY_CIRCLE": AllocateMessageQueueAveragelyByCircle,
    "CONSISTENT_HASH": AllocateMessageQueueConsistentHash,
}
"""The strategies that need no argument, by RocketMQ name, each as a factory. CONFIG, MACHINE_ROOM and
MACHINE_ROOM_NEARBY are built with their constructor's arguments (a queue list, the consumer IDCs, an inner
strategy and a ``MachineRoomResolver``)."""


def strategy_by_name(name: str) -> AllocateMessageQueueStrategy:
    """A fresh strategy for a RocketMQ strategy name (``CONSISTENT_HASH`` with its default v = 10)."""
    try:
        factory = STRATEGIES_BY_NAME[name]
    except KeyError:
        accepted = ", ".join(sorted(STRATEGIES_BY_NAME))
        raise ValueError(f"unknown allocation strategy {name!r}; accepted names: {accepted}") from None
    return factory()
