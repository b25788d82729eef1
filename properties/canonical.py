"""The canonical form of a model state for exhaustive checking: what makes a finite configuration's state
space finite, and which states count as one.

The model's states carry an absolute clock and ghost counters that only grow, so two states that behave
alike forever are still different values: the same idle group at 10 s and at 15 s, or after three
deliveries and after four. An exhaustive search needs one representative of each class of states that
behave alike. :func:`canonical` maps a state to that representative (the exploration keeps the real state,
and deduplicates on the canonical one's fingerprint):

* **Time is relative to ``now``.** Every timestamp of the state (timer deadlines, ``lastPullTimestamp``,
  ``lastLockTimestamp``, the broker's lock table, channel heartbeats, message store times, when a listener
  began, the ghost's "when did a margin break") is shifted so that ``now`` becomes ``CLOCK_ORIGIN``. Every
  decision of the model compares a timestamp with ``now`` or adds a constant delay to ``now``, so shifting all
  of them by the same amount changes nothing the model or a property can see.
* **Old times are clamped, per kind.** A past time that a rule compares with ``now`` against a window (pull
  expiry 120 s, channel expiry 120 s, lock lifetimes 30 s and 60 s, the consume timeout, 5.x's minInterval)
  is clamped at that window plus 1 ms (``_Shift.within``); a ready time in the past is "ready now"
  (``_Shift.ready``); every other time is clamped at ``clamp_ms`` (600 s by default, longer than every
  window: the longest is the 150 s Stall). A comparison of a clamped time with ``now`` then gives what the
  unclamped one gives. What a clamp can hide: two past times both older than their clamp compare equal. The
  one property that compares two past times is INV-12's "a margin broke within 30 s before the older
  listener began"; it can only be affected when a listener has run for longer than ``clamp_ms``. The
  sentinel ``-1`` ("never") is kept as it is.
* **Values no rule reads are dropped**: where the model writes a literal ``0`` that is not a time (a produced
  message's ``sent_back_at``, a stopped client's ``lastRebalanceTimestamp``, a concurrent pq's
  ``lastLockTimestamp``, an unregistered channel's heartbeat, a queued request's ``begin``), and the store
  times unless an admin reset searches by timestamp.
* **Counters no property reads are dropped**: ``Ghost.deliveries``, ``Ghost.redeliveries`` and the per-cause
  redelivery counts are summaries for reports; every invariant reads the ledgers (bitmasks of offsets)
  instead, which stay.
* The ghost history is already outside equality (``state.History``).

The relative clock does not apply to ``CONSUME_FROM_TIMESTAMP``: the configured timestamp is absolute, and
the store times it is compared with must stay absolute (:func:`time_is_relative`). Such configurations are
bounded by a logical-time horizon instead (``properties/exhaustive.py``).

Soundness of the whole abstraction is tested as a one-step bisimulation on the states of random campaign walks
and of every directed start of the campaign (``tests/test_check.py``): a state and its canonical form enable
the same actions in the same order, their successors have equal canonical forms, and every property gives the
same verdict on both. A canonical form that forgets ``lastPullTimestamp`` fails that test.
"""

from __future__ import annotations

import hashlib
import io
import pickle
import typing
from collections.abc import Callable
from typing import Any

from rmqspec.spec.broker import CHANNEL_EXPIRED_TIMEOUT
from rmqspec.spec.config import FROM_TIMESTAMP, Config
from rmqspec.spec.orderly import BROKER_LOCK_MAX_LIVE_TIME, CLIENT_LOCK_MAX_LIVE_TIME
from rmqspec.spec.pull import PULL_MAX_IDLE_TIME
from rmqspec.spec.rebalance import REBALANCE_MIN_INTERVAL
from rmqspec.spec.state import (
    PULL_READY,
    Broker,
    BrokerQueue,
    Client,
    ConsumeRequest,
    Ghost,
    Message,
    OffsetFix,
    OffsetUpdate,
    ProcessQueue,
    State,
)

# The clock of every canonical state. Past times are clamped to at most ``clamp_ms`` before it, so with the
# default clamp no canonical time is negative and the "never" sentinel -1 cannot collide with one.
CLOCK_ORIGIN = 1_000_000

# The default clamp: longer than every window a past time is compared against (the longest is the 150 s
# Stall, then the 120 s pull and channel expiries) with a margin, and shorter than CLOCK_ORIGIN.
DEFAULT_CLAMP_MS = 600_000


def time_is_relative(config: Config) -> bool:
    """Whether :func:`canonical` may shift the clock: not when an absolute timestamp of the configuration
    (``consume_timestamp``, R10.3) is compared with the store times."""
    return config.consume_from_where != FROM_TIMESTAMP


def _at(cls: type, *names: str) -> tuple[int, ...]:
    """The positions of ``names`` among the fields of the record type ``cls``."""
    fields: tuple[str, ...] = cls._fields  # type: ignore[attr-defined]
    return tuple(fields.index(n) for n in names)


# field positions the canonical key rewrites (a record's key is the plain tuple of its fields, some replaced)
_M_STORE, _M_RECONSUME, _M_SENT = _at(Message, "store_time", "reconsume_times", "sent_back_at")
(_Q_MESSAGES,) = _at(BrokerQueue, "messages")
_B_QUEUES, _B_NEXT_FLUSH, _B_SCHEDULED, _B_DLQ, _B_LOCKS, _B_REGISTERED, _B_HEARTBEAT, _B_NEXT_SYNC = _at(
    Broker, "queues", "next_flush", "scheduled", "dlq", "locks", "registered", "heartbeat_at", "next_sync"
)
_P_READY, _P_STATE, _P_LAST_LOCK, _P_LAST_PULL, _P_CONSUME_STARTED = _at(
    ProcessQueue, "pull_ready_at", "pull_state", "last_lock", "last_pull", "consume_started"
)
_R_READY, _R_BEGIN = _at(ConsumeRequest, "ready_at", "begin")
(_U_BEGIN,) = _at(OffsetUpdate, "begin")
(_F_DUE,) = _at(OffsetFix, "due")
_C_TIMERS = _at(
    Client, "next_persist", "next_rebalance", "next_heartbeat", "next_lock_all", "reset_wake", "stalled_until",
    "next_clean",
)  # fmt: skip
(
    _C_PQS, _C_REQUESTS, _C_CONSUMING, _C_UPDATES, _C_FIXES, _C_RELOCKS, _C_UNLOCKS, _C_LAST_REBALANCE, _C_RUNNING,
    _C_ORPHANED,
) = _at(
    Client, "pqs", "requests", "consuming", "offset_updates", "offset_fixes", "relocks", "unlocks", "last_rebalance",
    "running", "orphaned",
)  # fmt: skip
_G_DELIVERIES, _G_REDELIVERIES, _G_CAUSES, _G_LOCK_LOST, _G_STALLED, _G_STALE_UNLOCKS = _at(
    Ghost, "deliveries", "redeliveries", "redelivery_causes", "lock_table_lost_at", "stalled_at", "stale_unlocks"
)
_S_NOW, _S_BROKER, _S_CLIENTS, _S_GHOST, _S_HISTORY, _S_SLAVE = _at(
    State, "now", "broker", "clients", "ghost", "history", "slave"
)


class _Shift:
    """Maps the absolute times of one state to canonical ones, building each record's canonical key: the
    plain tuple of its fields with the times shifted and clamped and the unread values dropped (a plain tuple
    equals, and hashes as, the record of the same fields). Each kind of time is clamped at the longest window
    any rule or property compares it with (the constants name the rule); the others at ``clamp_ms``."""

    __slots__ = ("consume_timeout", "delta", "floor", "now", "orderly", "paced", "store_times")

    def __init__(self, now: int, clamp_ms: int, config: Config) -> None:
        self.delta = CLOCK_ORIGIN - now
        self.floor = CLOCK_ORIGIN - clamp_ms
        self.paced = config.rebalance_paced
        self.orderly = config.orderly
        # store times are read by the admin reset's searchOffset (R3.10a) and the timestamp lookup (R10.3);
        # otherwise only when a message enters the retry queue, which the step's own states show
        self.store_times = config.admin_resets > 0
        self.consume_timeout = config.consume_timeout

    def t(self, when: int) -> int:
        shifted = when + self.delta
        return shifted if shifted > self.floor else self.floor

    def within(self, when: int, window: int) -> int:
        """A past time that matters only while it is at most ``window`` old: clamped at ``window + 1``."""
        shifted = when + self.delta
        floor = CLOCK_ORIGIN - window - 1
        return shifted if shifted > floor else floor

    def ready(self, when: int) -> int:
        """A time something becomes ready at: every time at or before now means "ready now"."""
        shifted = when + self.delta
        return shifted if shifted > CLOCK_ORIGIN else CLOCK_ORIGIN

    def opt(self, when: int | None) -> int | None:
        return None if when is None else self.t(when)

    def ghost_time(self, when: int) -> int:
        return when if when < 0 else self.t(when)  # -1: never

    def scheduled(self, m: Message) -> tuple[object, ...]:
        # a scheduled copy's sent_back_at is what INV-10 checks its due against when it is delivered (R7.5)
        k: list[object] = list(m)
        k[_M_STORE] = self.t(m.store_time)
        k[_M_SENT] = self.t(m.sent_back_at)
        return tuple(k)

    def stored(self, m: Message) -> tuple[object, ...]:
        # a message in a queue or the DLQ: its times are read only by a timestamp search (see store_times)
        k: list[object] = list(m)
        if self.store_times:
            k[_M_STORE] = self.t(m.store_time)
            k[_M_SENT] = self.t(m.sent_back_at) if m.reconsume_times else 0
        else:
            k[_M_STORE] = k[_M_SENT] = 0
        return tuple(k)

    def queue(self, q: BrokerQueue) -> tuple[object, ...]:
        if not q.messages:
            return q
        k: list[object] = list(q)
        k[_Q_MESSAGES] = tuple([self.stored(m) for m in q.messages])
        return tuple(k)

    def broker(self, b: Broker) -> tuple[object, ...]:
        k: list[object] = list(b)
        k[_B_QUEUES] = tuple([self.queue(q) for q in b.queues])
        k[_B_NEXT_FLUSH] = self.opt(b.next_flush)
        k[_B_SCHEDULED] = tuple([(self.t(x.due), self.scheduled(x.message)) for x in b.scheduled])
        k[_B_DLQ] = tuple([self.stored(m) for m in b.dlq])
        # the broker's lock table: a lock expires 60 s after its lastUpdateTimestamp (R8.1)
        k[_B_LOCKS] = tuple(
            [None if lk is None else (lk[0], self.within(lk[1], BROKER_LOCK_MAX_LIVE_TIME)) for lk in b.locks]
        )
        # a channel's lastUpdateTimestamp is read only while the channel is registered, against the 120 s
        # idle-channel scan; the model writes the literal 0 when it goes (R4.3)
        registered = b.registered
        k[_B_HEARTBEAT] = tuple(
            [self.within(x, CHANNEL_EXPIRED_TIMEOUT) if i in registered else 0 for i, x in enumerate(b.heartbeat_at)]
        )
        k[_B_NEXT_SYNC] = self.opt(b.next_sync)
        return tuple(k)

    def pq(self, pq: ProcessQueue | None) -> tuple[object, ...] | None:
        if pq is None:
            return None
        k: list[object] = list(pq)
        # the PullRequest's delay is read only while it waits in the executor (R5.1)
        k[_P_READY] = self.ready(pq.pull_ready_at) if pq.pull_state == PULL_READY else 0
        # lastLockTimestamp: read by orderly rules only, against the 30 s isLockExpired (R6.6) and the 20 s
        # forced removal (R8.8)
        k[_P_LAST_LOCK] = self.within(pq.last_lock, CLIENT_LOCK_MAX_LIVE_TIME) if self.orderly else 0
        k[_P_LAST_PULL] = self.within(pq.last_pull, PULL_MAX_IDLE_TIME)  # isPullExpired, 120 s (R6.6)
        # CONSUME_START_TIME against consumeTimeout (R6.8)
        if pq.consume_started:
            k[_P_CONSUME_STARTED] = tuple([(o, self.within(w, self.consume_timeout)) for o, w in pq.consume_started])
        return tuple(k)

    # ``begin`` (when an orderly run began, R8.5) is a time only while the run's listener runs; a submitted
    # request and a concurrent consumer's carry the literal 0 (a resubmitted one keeps its old value, unread)
    def request(self, r: ConsumeRequest, running: bool) -> tuple[object, ...]:
        k: list[object] = list(r)
        if not running:  # ready_at: when the consume executor may run it; any past time is "now"
            k[_R_READY] = self.ready(r.ready_at)
            k[_R_BEGIN] = 0
        # a running orderly listener's ready_at is when it was called, which INV-12 compares with when a margin
        # broke; a running concurrent listener's is unread (its start time is the pq's consume_started)
        elif self.orderly:
            k[_R_READY] = self.t(r.ready_at)
            k[_R_BEGIN] = self.t(r.begin)
        else:
            k[_R_READY] = k[_R_BEGIN] = 0
        return tuple(k)

    def update(self, u: OffsetUpdate) -> tuple[object, ...]:
        if not self.orderly:
            return u
        k: list[object] = list(u)
        k[_U_BEGIN] = self.t(u.begin)
        return tuple(k)

    def fix(self, f: OffsetFix) -> tuple[object, ...]:
        k: list[object] = list(f)
        k[_F_DUE] = self.t(f.due)
        return tuple(k)

    def client(self, c: Client) -> tuple[object, ...]:
        k: list[object] = list(c)
        k[_C_PQS] = tuple([self.pq(pq) for pq in c.pqs])
        if c.requests:
            k[_C_REQUESTS] = tuple([self.request(r, False) for r in c.requests])
        if c.consuming:
            k[_C_CONSUMING] = tuple([self.request(r, True) for r in c.consuming])
        if c.offset_updates:
            k[_C_UPDATES] = tuple([self.update(u) for u in c.offset_updates])
        for i in _C_TIMERS:
            when = k[i]
            if when is not None:
                k[i] = self.t(when)  # type: ignore[arg-type]
        if c.offset_fixes:
            k[_C_FIXES] = tuple([self.fix(f) for f in c.offset_fixes])
        if c.relocks:
            k[_C_RELOCKS] = tuple([(uid, q, self.t(due)) for uid, q, due in c.relocks])
        if c.unlocks:
            k[_C_UNLOCKS] = tuple([(q, self.t(due)) for q, due in c.unlocks])
        # read only by 5.x's paced rebalance loop of a running client, against minInterval; otherwise the
        # literal 0 the model writes at a 4.9.8 start and at every stop (R4.2)
        k[_C_LAST_REBALANCE] = self.within(c.last_rebalance, REBALANCE_MIN_INTERVAL) if self.paced and c.running else 0
        if c.orphaned:
            k[_C_ORPHANED] = tuple([self.request(r, True) for r in c.orphaned])
        return tuple(k)

    def ghost(self, g: Ghost) -> tuple[object, ...]:
        k: list[object] = list(g)
        k[_G_DELIVERIES] = k[_G_REDELIVERIES] = 0
        k[_G_CAUSES] = ()
        k[_G_LOCK_LOST] = self.ghost_time(g.lock_table_lost_at)
        if g.stalled_at:
            k[_G_STALLED] = tuple([self.ghost_time(x) for x in g.stalled_at])
        if g.stale_unlocks:
            k[_G_STALE_UNLOCKS] = tuple([self.ghost_time(x) for x in g.stale_unlocks])
        return tuple(k)


class CanonicalKeys:
    """The canonical key of a state: a plain tuple equal to ``canonical(state)`` (so of the same hash), built
    faster. It is memoised per sub-record: the successors of one state mostly share its broker, ghost and
    clients as the same objects (a step replaces what it changes), so with an unchanged clock each of those
    is keyed once. The memo holds the records it keys (an ``id`` is unique only while its object lives) and
    is emptied when the clock changes or it reaches ``MEMO_LIMIT`` records."""

    MEMO_LIMIT = 4096  # records; a state has a few dozen, so this spans many expansions at one clock

    def __init__(self, config: Config, relative_time: bool = True, clamp_ms: int = DEFAULT_CLAMP_MS) -> None:
        self.config = config
        self.relative_time = relative_time
        self.clamp_ms = clamp_ms
        self._now: int | None = None
        self._shift: _Shift | None = None
        self._memo: dict[int, tuple[object, tuple[object, ...]]] = {}

    def _renew(self, now: int) -> _Shift:
        """Forget every key (each was built for the old clock) and shift for ``now``."""
        self._memo.clear()
        self._now = now
        self._shift = _Shift(now, self.clamp_ms, self.config)
        return self._shift

    def _cached(self, record: tuple[object, ...], build: Callable[[Any], tuple[object, ...]]) -> tuple[object, ...]:
        hit = self._memo.get(id(record))
        if hit is not None and hit[0] is record:
            return hit[1]
        key = build(record)
        self._memo[id(record)] = (record, key)
        return key

    def key(self, state: State) -> tuple[object, ...]:
        """The canonical key of ``state`` (class docstring)."""
        k: list[object] = list(state)
        if not self.relative_time:
            g: list[object] = list(state.ghost)
            g[_G_DELIVERIES] = g[_G_REDELIVERIES] = 0
            g[_G_CAUSES] = ()
            k[_S_GHOST] = tuple(g)
            k[_S_HISTORY] = None
            return tuple(k)
        sh = self._shift
        if state.now != self._now or sh is None or len(self._memo) >= self.MEMO_LIMIT:
            sh = self._renew(state.now)
        cached = self._cached
        k[_S_NOW] = CLOCK_ORIGIN
        k[_S_BROKER] = cached(state.broker, sh.broker)
        k[_S_CLIENTS] = tuple([cached(c, sh.client) for c in state.clients])
        k[_S_GHOST] = cached(state.ghost, sh.ghost)
        k[_S_HISTORY] = None
        if state.slave is not None:
            k[_S_SLAVE] = cached(state.slave, sh.broker)
        return tuple(k)

    def fingerprint(self, state: State) -> int:
        """The 64-bit fingerprint of ``state``: the hash of its key (see :func:`fingerprint`)."""
        return hash(self.key(state))


def _rebuild(record: object, key: object) -> object:
    """``key``, a canonical key of ``record``, as records of ``record``'s types."""
    if key is None or type(key) is not tuple or not isinstance(record, tuple):
        return key
    parts = [_rebuild(r, k) for r, k in zip(record, key, strict=False)]
    if hasattr(record, "_fields"):
        return tuple.__new__(type(record), parts)
    return tuple(parts)


def canonical(state: State, config: Config, relative_time: bool = True, clamp_ms: int = DEFAULT_CLAMP_MS) -> State:
    """The representative of ``state``'s class (module docstring), as a State. With ``relative_time`` false
    only the counters are dropped and the history left out; times stay absolute."""
    key = CanonicalKeys(config, relative_time, clamp_ms).key(state)
    return typing.cast(State, _rebuild(state, key))


def fingerprint(state: State, config: Config, relative_time: bool = True, clamp_ms: int = DEFAULT_CLAMP_MS) -> int:
    """A fixed-width (64-bit) fingerprint of ``canonical(state)``: Python's hash of the value. Within one
    process it is deterministic, but not across processes: the strings inside (tags, causes) hash with a
    per-process salt unless PYTHONHASHSEED is fixed, and on Python 3.11 ``hash(None)`` is the address of
    ``None``, which address-space randomisation moves in every interpreter. A search spread over processes
    uses :func:`stable_fingerprint`. The chance of a collision among n states is about n^2 / 2^65: under 1e-5
    at ten million states."""
    return CanonicalKeys(config, relative_time, clamp_ms).fingerprint(state)


def _sorted_sets(value: object) -> object:
    """A frozenset, or a tuple of frozensets, as sorted tuples: a frozenset's iteration order (and so its
    pickle) depends on how it was built, e.g. ``frozenset([3, 11])`` and ``frozenset([11, 3])``."""
    if type(value) is frozenset:
        return tuple(sorted(value))
    if type(value) is tuple and value and type(value[0]) is frozenset:
        return tuple(tuple(sorted(x)) for x in value)
    return value


def _as_tuple(value: tuple[object, ...]) -> tuple[object, ...]:
    return (tuple, (tuple(value),))


def _as_tuple_sorted(value: tuple[object, ...]) -> tuple[object, ...]:
    return (tuple, (tuple(_sorted_sets(x) for x in value),))


def _reducers() -> dict[type, object]:
    """How the stable fingerprint pickles each record type of a state: as a plain tuple of its fields (the
    type takes no part, as in ``hash``), frozensets sorted in the types that have them."""
    from rmqspec.spec import state as st

    out: dict[type, object] = {}
    for cls in vars(st).values():
        if isinstance(cls, type) and issubclass(cls, tuple) and hasattr(cls, "_fields"):
            hints = typing.get_type_hints(cls)
            has_sets = any("frozenset" in str(h) for h in hints.values())
            out[cls] = _as_tuple_sorted if has_sets else _as_tuple
    return out


_REDUCERS: dict[type, object] | None = None


_G_RAISED, _G_READERS = _at(Ghost, "raised_by_tags", "readers")
_STABLE_KEYS: dict[tuple[Config, bool, int], CanonicalKeys] = {}


def _portable(key: tuple[object, ...]) -> tuple[object, ...]:
    """``key`` with the frozensets of the broker and ghost keys as sorted tuples: a frozenset's iteration order,
    and so its pickle, depends on how it was built (records left whole are sorted by the reducers instead)."""
    k = list(key)
    for i in (_S_BROKER, _S_SLAVE):
        b = k[i]
        if type(b) is tuple:
            fields = list(b)
            fields[_B_REGISTERED] = tuple(sorted(b[_B_REGISTERED]))
            k[i] = tuple(fields)
    g = k[_S_GHOST]
    if type(g) is tuple:
        fields = list(g)
        fields[_G_RAISED] = tuple(sorted(g[_G_RAISED]))
        fields[_G_READERS] = tuple(tuple(sorted(x)) for x in g[_G_READERS])
        k[_S_GHOST] = tuple(fields)
    return tuple(k)


def stable_fingerprint(
    state: State, config: Config, relative_time: bool = True, clamp_ms: int = DEFAULT_CLAMP_MS
) -> int:
    """A 64-bit fingerprint of ``canonical(state)`` that every process computes alike (the Spark search's;
    :func:`fingerprint` is not portable): BLAKE2b (8 bytes) of the canonical key pickled without memo (so
    shared sub-values and equal copies give the same bytes), each record type as a plain tuple and each
    frozenset sorted. The key is memoised per configuration as in the search (:class:`CanonicalKeys`); the
    pickle and the digest cost about as much again as the key (docs/check.md, "On Spark")."""
    global _REDUCERS
    if _REDUCERS is None:
        _REDUCERS = _reducers()
    keys = _STABLE_KEYS.get((config, relative_time, clamp_ms))
    if keys is None:
        _STABLE_KEYS.clear()  # one configuration at a time: a search or a campaign unit
        keys = _STABLE_KEYS[(config, relative_time, clamp_ms)] = CanonicalKeys(config, relative_time, clamp_ms)
    buf = io.BytesIO()
    pickler = pickle.Pickler(buf, protocol=5)
    pickler.fast = True  # no memo: the bytes depend on the value only
    pickler.dispatch_table = _REDUCERS  # type: ignore[assignment]
    pickler.dump(_portable(keys.key(state)))
    return int.from_bytes(hashlib.blake2b(buf.getvalue(), digest_size=8).digest(), "little", signed=True)
