"""Queue allocation as pure functions of (strategy, my id, sorted queues, sorted consumer ids).

Each consumer runs the same function on its own view of the consumer list (the CLUSTERING allocation,
RebalanceMixin._rebalance_topic), so whether the group's queues are partitioned depends on whether the views agree
(INV-13) and on the strategy: AVG, AVG_BY_CIRCLE and CONSISTENT_HASH (with at least one virtual node) partition any
queue list; CONFIG, MACHINE_ROOM and CONSISTENT_HASH with no virtual node need not (``ALLOCATION_ANOMALIES`` in
``spec.anomalies``). The functions are memoised: a model run asks the same question often.

Two entry points:

- :func:`allocate_queues` is the whole of R11.0-R11.6: a :class:`Strategy` (one of RocketMQ's six
  ``AllocateMessageQueueStrategy`` classes with its constructor arguments) applied to
  :class:`MessageQueue` values. RocketMQ's exceptions are raised as :class:`AllocationError`
  subclasses named after the Java class, with RocketMQ's messages.
- :func:`allocate` is the index form of AVG, AVG_BY_CIRCLE and CONSISTENT_HASH over the queues'
  text forms, which the symbolic contracts of ``properties/symbolic.py`` check.

:func:`strategy_for` and :func:`model_queues` turn a :class:`Config` into those arguments for the
model's one broker: the queue of index ``q`` is ``MessageQueue(topic, broker_name, q)`` for a topic
queue and ``MessageQueue(%RETRY%<group>, broker_name, 0)`` for the retry queue.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_left
from dataclasses import dataclass
from functools import cache
from typing import ClassVar, NamedTuple

from rmqspec.spec.config import (
    AVG,
    AVG_BY_CIRCLE,
    CONFIG,
    CONSISTENT_HASH,
    MACHINE_ROOM,
    MACHINE_ROOM_NEARBY,
    STRATEGIES,
    Config,
)


def client_id(index: int) -> str:
    """The clientId of consumer ``index``: ``<ip>@<instanceName>`` (R11.0)."""
    return f"10.0.0.{index + 1}@c{index}"


def mq_text(topic: str, broker_name: str, queue_id: int) -> str:
    """MessageQueue#toString, the key consistent hashing routes on (R11.3)."""
    return f"MessageQueue [topic={topic}, brokerName={broker_name}, queueId={queue_id}]"


class MessageQueue(NamedTuple):
    """``org.apache.rocketmq.common.message.MessageQueue``. Tuple order is ``MessageQueue#compareTo``
    (topic, brokerName, queueId) for names in the Basic Multilingual Plane (§0.3)."""

    topic: str
    broker_name: str
    queue_id: int

    def __str__(self) -> str:
        return mq_text(self.topic, self.broker_name, self.queue_id)


class AllocationError(Exception):
    """An exception RocketMQ's allocation throws; ``str()`` is RocketMQ's message. The rebalance
    catches it, logs it and leaves the topic as it is for that round (step 5 of the CLUSTERING allocation and an
    allocation failure in the rebalance, RebalanceMixin._rebalance_topic)."""

    java_class: ClassVar[str] = "java.lang.RuntimeException"


class IllegalArgumentError(AllocationError, ValueError):
    """``java.lang.IllegalArgumentException``."""

    java_class = "java.lang.IllegalArgumentException"


class NullPointerError(AllocationError, TypeError):
    """``java.lang.NullPointerException``."""

    java_class = "java.lang.NullPointerException"


@dataclass(frozen=True, slots=True)
class RoomResolver:
    """``AllocateMachineRoomNearby.MachineRoomResolver`` as a finite table (R11.6).

    ``brokers`` maps a broker name to its room (every queue of a broker is in the broker's room) and
    ``consumers`` a clientId to its room; a name the table does not list answers ``None``, Java's
    null. Java's interface may look at the whole MessageQueue; a table by broker name is the usual
    deployment (one broker per room) and all the model needs.
    """

    brokers: tuple[tuple[str, str], ...] = ()
    consumers: tuple[tuple[str, str], ...] = ()

    def broker_deploy_in(self, mq: MessageQueue) -> str | None:
        return next((room for name, room in self.brokers if name == mq.broker_name), None)

    def consumer_deploy_in(self, cid: str) -> str | None:
        return next((room for name, room in self.consumers if name == cid), None)


@dataclass(frozen=True, slots=True)
class Strategy:
    """One ``AllocateMessageQueueStrategy`` object: the class (``name``, RocketMQ's ``getName`` for
    the five plain ones) and its constructor arguments or setters. Fields a class does not have are
    ignored. ``None`` stands for Java's null. Construction throws as the Java constructor does.

    - ``virtual_node_cnt``: CONSISTENT_HASH (``AllocateMessageQueueConsistentHash(int)``); < 0 throws.
    - ``message_queue_list``: CONFIG (``setMessageQueueList``).
    - ``consumeridcs``: MACHINE_ROOM (``setConsumeridcs``).
    - ``inner``, ``resolver``: MACHINE_ROOM_NEARBY (``AllocateMachineRoomNearby(strategy, resolver)``);
      either null throws.
    """

    name: str
    virtual_node_cnt: int = 10
    message_queue_list: tuple[MessageQueue, ...] | None = None
    consumeridcs: frozenset[str] | None = None
    inner: Strategy | None = None
    resolver: RoomResolver | None = None

    def __post_init__(self) -> None:
        if self.name not in STRATEGIES:
            raise ValueError(f"strategy: got {self.name!r}; accepted: {', '.join(STRATEGIES)}")
        if self.name == CONSISTENT_HASH and self.virtual_node_cnt < 0:
            raise IllegalArgumentError(f"illegal virtualNodeCnt :{self.virtual_node_cnt}")
        if self.name == MACHINE_ROOM_NEARBY:
            if self.inner is None:
                raise NullPointerError("allocateMessageQueueStrategy is null")
            if self.resolver is None:
                raise NullPointerError("machineRoomResolver is null")

    def indices(self, current: str, mq_all: tuple[str, ...], cid_all: tuple[str, ...]) -> tuple[int, ...]:
        """AVG, AVG_BY_CIRCLE and CONSISTENT_HASH: :func:`allocate` with this object's parameters."""
        return allocate(self.name, current, mq_all, cid_all, self.virtual_node_cnt)

    @property
    def java_name(self) -> str:
        """``getName()``: the plain name, or ``MACHINE_ROOM_NEARBY-<inner name>`` (R11.6)."""
        if self.name == MACHINE_ROOM_NEARBY and self.inner is not None:
            return f"{MACHINE_ROOM_NEARBY}-{self.inner.java_name}"
        return self.name


def _md5_prefix(key: str) -> int:
    """The default ConsistentHashRouter hash: the first 4 bytes of MD5, unsigned big-endian."""
    return int.from_bytes(hashlib.md5(key.encode("utf-8")).digest()[:4], "big")


def _check(current: str, mq_all: tuple[object, ...], cid_all: tuple[str, ...]) -> bool:
    """R11.0, ``AbstractAllocateMessageQueueStrategy#check``. Empty stands for null or empty too
    (the messages are the same). ``False`` (``current`` not listed) is logged as "[BUG] ... not in
    cidAll" by RocketMQ, and the strategy allocates nothing."""
    if not current:
        raise IllegalArgumentError("currentCID is empty")
    if not mq_all:
        raise IllegalArgumentError("mqAll is null or mqAll empty")
    if not cid_all:
        raise IllegalArgumentError("cidAll is null or cidAll empty")
    return current in cid_all


@cache
def allocate(
    strategy: str,
    current: str,
    mq_all: tuple[str, ...],
    cid_all: tuple[str, ...],
    virtual_node_cnt: int = 10,
) -> tuple[int, ...]:
    """Indices into ``mq_all`` that ``current`` takes, for AVG, AVG_BY_CIRCLE and CONSISTENT_HASH.
    ``mq_all`` holds the queues' text forms in MessageQueue order and ``cid_all`` is sorted, as
    RebalanceImpl passes them (step 4 of the CLUSTERING allocation, RebalanceMixin._rebalance_topic).

    Empty arguments raise :class:`IllegalArgumentError` and a consumer missing from ``cid_all``
    gets nothing (R11.0).
    """
    if strategy not in (AVG, AVG_BY_CIRCLE, CONSISTENT_HASH):
        raise ValueError(f"strategy: got {strategy!r}; accepted: {AVG}, {AVG_BY_CIRCLE}, {CONSISTENT_HASH}")
    if strategy == CONSISTENT_HASH and virtual_node_cnt < 0:
        raise IllegalArgumentError(f"illegal virtualNodeCnt :{virtual_node_cnt}")
    if not _check(current, mq_all, cid_all):
        return ()
    n, c, i = len(mq_all), len(cid_all), cid_all.index(current)  # first occurrence, as List#indexOf
    if strategy == AVG:
        start, size = avg_block(n, c, i)
        return tuple((start + k) % n for k in range(min(size, n - start)))
    if strategy == AVG_BY_CIRCLE:  # R11.2: deal round-robin
        return tuple(j for j in range(i, n) if j % c == i)
    # R11.3: a ring of virtual nodes "<cid>-<replica>". ConsistentHashRouter#addNode numbers a
    # node's replicas from the ring entries it already owns (so a duplicate cid continues where its
    # first copy stopped), and a hash collision replaces the earlier entry (TreeMap#put).
    ring: dict[int, str] = {}
    for cid in cid_all:
        existing = sum(1 for owner in ring.values() if owner == cid)
        for r in range(virtual_node_cnt):
            ring[_md5_prefix(f"{cid}-{r + existing}")] = cid
    if not ring:  # virtualNodeCnt = 0: routeNode answers null for every queue, nobody gets any
        return ()
    keys = sorted(ring)
    owned = []
    for j, text in enumerate(mq_all):
        k = bisect_left(keys, _md5_prefix(text))
        if ring[keys[k % len(keys)]] == current:
            owned.append(j)
    return tuple(owned)


def avg_block(n: int, c: int, i: int) -> tuple[int, int]:
    """R11.1, AVG: the start and size of the ``i``-th of ``c`` consumers' contiguous blocks of ``n`` queues,
    the first ``n mod c`` one larger (a start past the end allocates nothing)."""
    mod = n % c
    if n <= c:
        size = 1
    elif mod > 0 and i < mod:
        size = n // c + 1
    else:
        size = n // c
    return (i * size if (mod > 0 and i < mod) else i * size + mod), size


def java_split(text: str, separator: str) -> list[str]:
    """Java's ``String#split`` for a literal one-character separator, limit 0: trailing empty
    strings are dropped (``"a@b@"`` gives two parts, ``"a@"`` one, ``"@"`` none)."""
    if separator not in text:
        return [text]
    parts = text.split(separator)
    while parts and not parts[-1]:
        parts.pop()
    return parts


def machine_room_eligible(broker_name: str, consumeridcs: frozenset[str] | tuple[str, ...] | None) -> bool:
    """R11.5: does MACHINE_ROOM deal this broker's queues? Its name must split on '@' into exactly
    two parts, the first of them a listed room. A null ``consumeridcs`` throws (only) here."""
    parts = java_split(broker_name, "@")
    if len(parts) != 2:
        return False
    if consumeridcs is None:  # Java evaluates the length test first, then consumeridcs.contains
        raise NullPointerError("consumeridcs is null")
    return parts[0] in consumeridcs


@cache
def allocate_queues(
    strategy: Strategy, current: str, mq_all: tuple[MessageQueue, ...], cid_all: tuple[str, ...]
) -> tuple[MessageQueue, ...]:
    """``strategy.allocate(group, currentCID, mqAll, cidAll)`` (R11.0-R11.6): the queues ``current``
    takes, in RocketMQ's result order. ``mq_all`` and ``cid_all`` are sorted, as RebalanceImpl
    passes them (step 4 of the CLUSTERING allocation, RebalanceMixin._rebalance_topic); an empty string or tuple stands
    for Java's null as well (R11.0 gives both the same message). Raises :class:`AllocationError` where RocketMQ throws.
    """
    name = strategy.name
    if name == CONFIG:  # R11.4: never calls check(); a null list is an empty allocation (an allocation failure in the
        # rebalance, RebalanceMixin._rebalance_topic)
        return strategy.message_queue_list or ()
    if name in (AVG, AVG_BY_CIRCLE, CONSISTENT_HASH):
        texts = tuple(str(mq) for mq in mq_all)
        got = strategy.indices(current, texts, cid_all)
        return tuple(mq_all[j] for j in got)
    if not _check(current, mq_all, cid_all):
        return ()
    if name == MACHINE_ROOM:  # R11.5: equal slices of the eligible queues, then one leftover each
        eligible = [mq for mq in mq_all if machine_room_eligible(mq.broker_name, strategy.consumeridcs)]
        c, i = len(cid_all), cid_all.index(current)
        size, rem = divmod(len(eligible), c)  # Java calls the quotient "mod"
        result = eligible[size * i : size * i + size]
        if rem > i:
            result.append(eligible[i + size * c])
        return tuple(result)
    # R11.6, MACHINE_ROOM_NEARBY: group by room (TreeMaps; Python's str order is Java's for names in
    # the Basic Multilingual Plane), the queues of my room among my room's consumers, then the
    # queues of every room without a live consumer among everybody.
    inner, resolver = strategy.inner, strategy.resolver
    assert inner is not None and resolver is not None  # Strategy's constructor throws otherwise
    mr2mq: dict[str, list[MessageQueue]] = {}
    for mq in mq_all:
        room = resolver.broker_deploy_in(mq)
        if not room:
            raise IllegalArgumentError(f"Machine room is null for mq {mq}")
        mr2mq.setdefault(room, []).append(mq)
    mr2c: dict[str, list[str]] = {}
    for cid in cid_all:
        room = resolver.consumer_deploy_in(cid)
        if not room:
            raise IllegalArgumentError(f"Machine room is null for consumer id {cid}")
        mr2c.setdefault(room, []).append(cid)
    my_room = resolver.consumer_deploy_in(current)
    assert my_room  # current is in cid_all (check), whose rooms were all found above
    out: list[MessageQueue] = []
    if inner.name == CONFIG and inner.message_queue_list is None and (my_room in mr2mq or set(mr2mq) - set(mr2c)):
        # allocateResults.addAll(null): CONFIG with no list answers null (Java's edge)
        raise NullPointerError("allocateResults.addAll(null): the inner strategy returned null")
    mine = mr2mq.pop(my_room, None)
    if mine:
        out.extend(allocate_queues(inner, current, tuple(mine), tuple(mr2c[my_room])))
    for room in sorted(mr2mq):
        if room not in mr2c:
            out.extend(allocate_queues(inner, current, tuple(mr2mq[room]), cid_all))
    return tuple(out)


# --- the model's arguments -----------------------------------------------------------------------
def model_queues(config: Config) -> tuple[MessageQueue, ...]:
    """The MessageQueue of every queue index of the model: the topic's, then (CLUSTERING) the retry
    topic's one queue. All are on the one broker ``config.broker_name``."""
    topic = tuple(MessageQueue(config.topic, config.broker_name, q) for q in range(config.queues))
    retry = (MessageQueue(config.retry_topic, config.broker_name, 0),) if config.has_retry_queue else ()
    return topic + retry


def strategy_for(config: Config, client: int) -> Strategy:
    """The strategy object consumer ``client`` is configured with.

    CONFIG lists differ per consumer (``allocate_config_queues[client]``); every other parameter is
    the group's. MACHINE_ROOM_NEARBY's resolver puts the broker in ``broker_room`` and consumer
    ``i`` (clientId ``client_id(i)``) in ``consumer_rooms[i]``.
    """
    queues = model_queues(config)

    def plain(name: str) -> Strategy:
        if name == CONFIG:
            lists = config.allocate_config_queues
            listed = None if lists is None else tuple(queues[q] for q in lists[client])
            return Strategy(CONFIG, message_queue_list=listed)
        if name == MACHINE_ROOM:
            idcs = None if config.consumeridcs is None else frozenset(config.consumeridcs)
            return Strategy(MACHINE_ROOM, consumeridcs=idcs)
        if name == CONSISTENT_HASH:
            return Strategy(CONSISTENT_HASH, virtual_node_cnt=config.virtual_node_cnt)
        return Strategy(name)

    if config.strategy != MACHINE_ROOM_NEARBY:
        return plain(config.strategy)
    assert config.nearby_inner is not None and config.broker_room is not None and config.consumer_rooms is not None
    resolver = RoomResolver(
        ((config.broker_name, config.broker_room),),
        tuple((client_id(i), room) for i, room in enumerate(config.consumer_rooms)),
    )
    return Strategy(MACHINE_ROOM_NEARBY, inner=plain(config.nearby_inner), resolver=resolver)
