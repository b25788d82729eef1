"""The client side of the broker locks of orderly consumption.

RocketMQ classes: ``RebalanceImpl#lock``, ``#lockAll`` (the lockMQPeriodically timer), ``#unlock``,
``#unlockAll`` (R8.2, R8.3, R8.9), the pull gate of a locked pq (``DefaultMQPushConsumerImpl#pullMessage``
step 6: the first locked pull re-reads the offset; the gate is ``PullMixin._send_pull``, the re-read
``RebalanceMixin._compute_pull_from_where``) and 4.9.8's ``unlockDelay`` task (scheduled by the orderly removal,
``OrderlyConsumeMixin._remove_orderly``). The lock a rebalance takes before it adds an orderly queue is
``RebalanceMixin._locks_before_add``. The broker's ``RebalanceLockManager`` itself is ``orderly.py``
(``orderly.try_lock_batch``); the consume loop that relies on these locks is ``orderly_consume.py``
(``OrderlyConsumeMixin``).

Orderly BROADCASTING's locks (R8.9) are decided here and applied by the rebalance (``rebalance.py``) and
shutdown (``consumer_process.py``); the lockAll timer (R8.3) is what a ``Stall`` (``faults.py``) delays.

Its actions, before the class: ``LockAll``, ``DelayedUnlock``.

Its properties, after the class: INV-11 (the broker grants no live lock twice), INV-12a (no two consumers
both believe a queue locked), INV-19 (the first locked pull starts at a real position), INV-26 (a queue let go
is unlocked at the broker) and INV-34 (a lock call's answer and its stamps follow the broker's table). What INV-12a
tolerates is ``anomalies.py`` (``ORDERLY_LOCK_TABLE_LOST``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rmqspec.spec import orderly as lk
from rmqspec.spec.consumer_process import Shutdown
from rmqspec.spec.enabling import ActionNotEnabled
from rmqspec.spec.property_types import ActionProperty, Invariant
from rmqspec.spec.pull import PULL_DELAY_WHEN_EXCEPTION, SendPull
from rmqspec.spec.state import PULL_DROPPED, Client, ProcessQueue, State, pq_key
from rmqspec.spec.state import put_at as _put

if TYPE_CHECKING:
    from rmqspec.spec.actions import Action
    from rmqspec.spec.model import Model


# Actions of the client locks, each handled by its transition ``_<snake_case name>`` below
@dataclass(frozen=True, slots=True)
class LockAll:
    """The orderly consumer's lockMQPeriodically timer fires: ``lockAll`` (R8.2, R8.3)."""

    client: int


@dataclass(frozen=True, slots=True)
class DelayedUnlock:
    """orderly consume loop, 4.9.8: unlockDelay's task, 20 s after an orderly removal that left
    messages in the pq: a oneway UNLOCK_BATCH_MQ for ``queue`` (the orderly removal,
    OrderlyConsumeMixin._remove_orderly)."""

    client: int
    queue: int


class ClientLocksMixin:
    """``Model``'s transitions and helpers for the client side of the broker locks; see the module docstring."""

    def _lock(self: Model, s: State, i: int, queues: tuple[int, ...], lock_all: bool) -> tuple[State, frozenset[int]]:
        """LOCK_BATCH_MQ, synchronous (R8.2): ``lock(mq)`` for one queue or ``lockAll`` for every queue
        in the pq table. The broker runs tryLockBatch (the broker lock table, orderly.try_lock_batch). Every granted
        queue with a pq gets ``locked := true, lastLockTimestamp := now``; ``lockAll`` also sets ``locked := false`` on
        the denied ones. A down broker is an exception: nothing granted, nothing changed."""
        b = s.broker
        if not b.up:
            return s, frozenset()
        locks, granted = self._try_lock_batch(b.locks, queues, self.identity[i], s.now)
        cl = s.clients[i]
        pqs = list(cl.pqs)
        for q in queues:
            pq = pqs[q]
            if pq is None:
                continue
            if q in granted:
                pqs[q] = pq._replace(locked=True, last_lock=s.now)
            elif lock_all:
                pqs[q] = pq._replace(locked=False)
        return s._replace(
            broker=b._replace(locks=locks), clients=_put(s.clients, i, cl._replace(pqs=tuple(pqs)))
        ), granted

    def _try_lock_batch(
        self: Model, table: lk.LockTable, queues: tuple[int, ...], client: int, now: int
    ) -> tuple[lk.LockTable, frozenset[int]]:
        """The broker's RebalanceLockManager.tryLockBatch (the broker lock table (orderly.try_lock_batch),
        ``orderly.try_lock_batch``)."""
        return lk.try_lock_batch(table, queues, client, now)

    def _unlock_all(self: Model, s: State, i: int) -> State:
        """``unlockAll(oneway=false)`` (R8.2): UNLOCK_BATCH_MQ, synchronous, for every queue in the pq
        table; each pq gets ``locked := false``. A down broker is an exception, logged."""
        cl = s.clients[i]
        owned = self._lock_batch_queues(cl)
        if not owned or not s.broker.up:
            return s
        s = self._note_stale_unlock(s, i, owned)
        b = s.broker._replace(locks=lk.unlock_batch(s.broker.locks, owned, self.identity[i]))
        pqs = tuple(pq._replace(locked=False) if pq is not None and q in owned else pq for q, pq in enumerate(cl.pqs))
        return s._replace(broker=b, clients=_put(s.clients, i, cl._replace(pqs=pqs)))

    def _lock_batch_queues(self: Model, cl: Client) -> tuple[int, ...]:
        """The queues lockAll / unlockAll put in their batch (R8.2): every key of the pq table in 4.9.8;
        only pqs not dropped in 5.x (``buildProcessQueueTableByBrokerName``)."""
        skip = self.config.lock_all_skips_dropped
        return tuple(
            q
            for q, pq in enumerate(cl.pqs)
            if pq is not None and not (skip and (pq.dropped or pq.pull_state == PULL_DROPPED))
        )

    def _lock_all(self: Model, s: State, a: LockAll) -> State:
        """LockAll(client). Enabled: running, an orderly CLUSTERING consumer, and its
        lockMQPeriodically timer due (first 1 s after start, then every 20 s; R8.3). Effect:
        ``lockAll`` over the queues of the pq table (R8.2; 5.x leaves out dropped pqs), nothing when
        it is empty."""
        i = a.client
        cl = s.clients[i]
        if not cl.running or cl.next_lock_all is None or cl.next_lock_all > s.now:
            raise ActionNotEnabled(a, "lockAll timer not due")
        s = s._replace(clients=_put(s.clients, i, cl._replace(next_lock_all=cl.next_lock_all + lk.LOCK_ALL_INTERVAL)))
        owned = self._lock_batch_queues(cl)
        if not owned:
            return s
        s, _ = self._lock(s, i, owned, True)
        return s

    def _orderly_pull_gate(self: Model, s: State, i: int, q: int, pq: ProcessQueue) -> tuple[State, ProcessQueue, bool]:
        """Step 6 of an orderly consumer's pullMessage (``PullMixin._send_pull``), for ``pq`` as steps 1-5
        left it: a pq not locked waits 3 s; the first pull of a locked pq re-reads the offset
        (computePullFromWhereWithException, computePullFromWhere (RebalanceMixin._compute_pull_from_where): CLUSTERING
        asks the broker, so a handover resumes at the previous owner's last landed commit) and marks the request
        previouslyLocked; a failed read waits 3 s. Returns the state, the pq, and whether the pull goes on (when it does
        not, the state already holds the delayed pq).

        An unreachable broker is a failed read (readOffset gives -2, readOffset,
        RebalanceMixin._compute_pull_from_where). 5.x throws on it and waits 3 s; 4.9.8's
        computePullFromWhereWithException returns -1 (computePullFromWhere, RebalanceMixin._compute_pull_from_where),
        which pullMessage takes as the next offset without a check, marking the request previouslyLocked: the pull at -1
        then gets OFFSET_ILLEGAL and the offset is reset to minOffset (INV-19)."""
        if pq.locked and pq.previously_locked:
            return s, pq, True
        start: int | None = None
        if pq.locked:
            before = s.clients[i].mem[q]
            s, start = self._compute_pull_from_where(s, i, q, pq.uid, False)
            if s.clients[i].mem[q] != before:  # ghost for INV-8: the re-read overwrote memory (increaseOnly=false)
                s = s._replace(ghost=s.ghost._replace(raised_by_tags=s.ghost.raised_by_tags | {pq_key(i, pq.uid)}))
            if start is None and self.clustering and not s.broker.up and not self.config.read_error_throws:
                start = -1  # 4.9.8: the failed read's -1 becomes nextOffset
        cl = s.clients[i]
        if start is None or (start < 0 and self.config.read_error_throws):
            pq = pq._replace(pull_ready_at=s.now + PULL_DELAY_WHEN_EXCEPTION)
            return s._replace(clients=_put(s.clients, i, cl._replace(pqs=_put(cl.pqs, q, pq)))), pq, False
        return s, pq._replace(next_offset=start, previously_locked=True), True

    def _delayed_unlock(self: Model, s: State, a: DelayedUnlock) -> State:
        """DelayedUnlock(client, queue) (a timer, 4.9.8). Enabled: running and an unlockDelay task of
        ``queue`` is due. Effect: ``unlock(mq, oneway=true)`` (R8.2, the orderly removal,
        OrderlyConsumeMixin._remove_orderly), whatever the table holds for mq now: if the client re-created a pq for the
        queue within those 20 s, its fresh broker lock is released and another consumer can lock the queue while this
        one still believes it holds it (a 4.9.8 bug, docs/spec.md, section orderly_consume; the ghost notes it for
        INV-12a/INV-12)."""
        i = a.client
        cl = s.clients[i]
        k = next((k for k, (q, due) in enumerate(cl.unlocks) if q == a.queue and due <= s.now), None)
        if not cl.running or k is None:
            raise ActionNotEnabled(a, "no unlockDelay task due for this queue")
        s = s._replace(clients=_put(s.clients, i, cl._replace(unlocks=cl.unlocks[:k] + cl.unlocks[k + 1 :])))
        return self._unlock_oneway(s, i, a.queue, late=True)

    def _per_q_int(self: Model, values: tuple[int, ...]) -> tuple[int, ...]:
        return values if values else (-1,) * self.q_count

    def _unlock_oneway(self: Model, s: State, i: int, q: int, late: bool = False) -> State:
        """``unlock(mq, oneway=true)`` (R8.2): applied when sent if the broker is up, lost if not. The
        model lets it act at once rather than queue behind commits on the connection; Java's broker
        runs lock requests and commits on different executors, so either order is possible."""
        if not s.broker.up:
            return s
        s = self._note_stale_unlock(s, i, (q,), late)
        return s._replace(broker=s.broker._replace(locks=lk.unlock_batch(s.broker.locks, (q,), self.identity[i])))

    def _note_stale_unlock(self: Model, s: State, i: int, queues: tuple[int, ...], late: bool = False) -> State:
        """Ghost for INV-12a/INV-12: an unlock by client ``i``'s clientId that releases a lock a running
        client with that clientId still relies on (a live belief, or a listener running on the queue).
        RocketMQ's own code does this in three ways, which the default checker tolerates: a ``late`` unlock
        of the client's own lock (4.9.8's unlockDelay after the queue came back, 5.x's forced removal under a
        running listener), and any unlock by a sharer of a duplicate clientId. An ordinary unlock of a lock
        the client itself still relies on is not noted: that is a bug INV-12 must report (RMQ-09 (1))."""
        if not s.broker.locks:
            return s
        me = self.identity[i]
        stale = list(self._per_q_int(s.ghost.stale_unlocks))
        noted = False
        for q in queues:
            if lk.holder(s.broker.locks, q, s.now) != me:
                continue
            for j, cl in enumerate(s.clients):
                if not cl.running or self.identity[j] != me or (j == i and not late):
                    continue
                pq = cl.pqs[q]
                believes = pq is not None and not pq.dropped and pq.locked
                believes = believes and not lk.client_lock_expired(pq.last_lock, s.now)  # type: ignore[union-attr]
                listening = any(r.queue == q for r in cl.consuming)
                if believes or listening:
                    stale[q] = s.now
                    noted = True
        return s._replace(ghost=s.ghost._replace(stale_unlocks=tuple(stale))) if noted else s


# Properties of the locks (INV-11, INV-12a, INV-19, INV-26, INV-34)
def _broker_lock_exclusive(m: Model, s: State, a: Action, t: State) -> str | None:
    """INV-11 as a step property: an entry of the lock table changes hands only when its holder's lock
    had expired (60 s without renewal), was released, or was lost with the broker."""
    before, after = s.broker.locks, t.broker.locks
    if before == after or not after:
        return None
    for q, entry in enumerate(after):
        if entry is None or entry == before[q]:
            continue
        held_by = lk.holder(before, q, t.now)
        if held_by is not None and held_by != entry[0]:
            return f"queue {q}: client {entry[0]} was granted the lock client {held_by} holds ({before[q]})"
    return None


BROKER_LOCK_EXCLUSIVE = ActionProperty(
    "INV-11",
    "broker_lock_exclusive",
    "The broker never grants a queue's lock to a client while another client holds it unexpired "
    "(renewed within the last 60 s), so at most one client holds a live lock on a queue.",
    "R8.1, R8.2",
    "Orderly consumption rests on this lock: two holders consume one queue at once, out of order.",
    _broker_lock_exclusive,
)


def _lock_belief_exclusive(m: Model, s: State) -> str | None:
    """INV-12a: two running clients never both see a queue as theirs to consume orderly, i.e. a pq
    with ``locked`` and not ``isLockExpired()`` (the test that step 1 of the orderly loop,
    ``OrderlyConsumeMixin._orderly_iterate``, makes before each run), except where one belief predates a broker
    crash that emptied the lock table (allowed anomaly)."""
    if not m.lock_renewal:
        return None
    stale = m._per_q_int(s.ghost.stale_unlocks)
    for q in range(m.q_count):
        lost = max(s.ghost.lock_table_lost_at, stale[q]) if m.tolerate_stale_unlock else s.ghost.lock_table_lost_at
        believers = [
            (i, pq.last_lock)
            for i, cl in enumerate(s.clients)
            if cl.running
            and (pq := cl.pqs[q]) is not None
            and not pq.dropped
            and pq.locked
            and not lk.client_lock_expired(pq.last_lock, s.now)
        ]
        fresh = [i for i, last in believers if last > lost]
        if m.tolerate_shared_client_id:  # sharers of one clientId hold one lock (DUPLICATE_CLIENT_ID_ANOMALIES)
            fresh = list({m.identity[i]: i for i in fresh}.values())
        if len(fresh) > 1:
            return f"queue {q}: clients {fresh} all hold a live lock (locked, renewed within 30 s) at {s.now}"
    return None


LOCK_BELIEF_EXCLUSIVE = Invariant(
    "INV-12a",
    "lock_belief_exclusive",
    "No two running orderly CLUSTERING consumers both hold a pq that is locked and not lock-expired "
    "(lastLockTimestamp within 30 s) for one queue, unless the broker lost its lock table since.",
    "R6.6, R8.1-R8.5",
    "It is the test the orderly consume loop makes before it calls the listener (R8.5 step 1): two "
    "believers consume one queue at once and out of order (INV-12).",
    _lock_belief_exclusive,
)


def _first_locked_pull_valid(m: Model, s: State, a: Action, t: State) -> str | None:
    """INV-19: the offset re-read of an orderly consumer's first locked pull (step 6 of pullMessage,
    PullMixin._send_pull) is a real position, never the -1 of a failed read."""
    if not isinstance(a, SendPull) or not m.orderly:
        return None
    before, after = s.clients[a.client].pqs[a.queue], t.clients[a.client].pqs[a.queue]
    if before is None or after is None or before.previously_locked or not after.previously_locked:
        return None
    if after.next_offset < 0:
        return f"client {a.client} queue {a.queue}: the first locked pull set nextOffset {after.next_offset}"
    return None


FIRST_LOCKED_PULL_POSITIONS_VALIDLY = ActionProperty(
    "INV-19",
    "first_locked_pull_positions_validly",
    "An orderly consumer's first pull after its lock re-reads the offset and starts at a real position "
    "(>= 0), or waits when the read fails.",
    "R5.1 step 6, R2.3, R10.1",
    "4.9.8 takes a failed read's -1 as nextOffset: the pull gets OFFSET_ILLEGAL and the committed offset "
    "is reset to minOffset, replaying the retained queue (docs/spec.md, section client_locks).",
    _first_locked_pull_valid,
)


def _lock_released_on_leave(m: Model, s: State, a: Action, t: State) -> str | None:
    """INV-26: an orderly CLUSTERING consumer that lets a queue go releases its broker lock, so the next owner need
    not wait for the lock's 60 s expiry. A pq leaving the table of a running client (a rebalance's removal, a
    pull-expired one, the OFFSET_ILLEGAL fix) leaves the broker lock of its queue released, or an unlockDelay task of
    that queue pending; a removal while a listener of the pq runs is exempt (the consume lock is taken, so the
    removal does not unlock: the orderly removal, OrderlyConsumeMixin._remove_orderly). A ``Shutdown`` leaves no
    lock in its clientId's name on a queue of its table (4.9.8: every key; 5.x: the pqs not dropped). A due
    ``DelayedUnlock`` releases its queue. Only while the broker is up before and after the step: a down broker
    loses the unlock, and its crash loses the table."""
    if not m.lock_renewal or not s.broker.up or not t.broker.up:
        return None
    locks = t.broker.locks
    if isinstance(a, DelayedUnlock):
        if lk.holder(locks, a.queue, t.now) == m.identity[a.client]:
            return f"client {a.client} queue {a.queue}: the unlockDelay task ran and the broker lock is still held"
        return None
    for i, (old, new) in enumerate(zip(s.clients, t.clients, strict=True)):
        if not old.running:
            continue
        me = m.identity[i]
        if not new.running:
            if not isinstance(a, Shutdown) or a.client != i:
                continue  # a crash: the lock expires
            skip = m.config.lock_all_skips_dropped
            kept = [
                q
                for q, pq in enumerate(old.pqs)
                if pq is not None and not (skip and pq.dropped) and lk.holder(locks, q, t.now) == me
            ]
            if kept:
                return f"client {i}: Shutdown left the broker locks of queues {kept} held in its name"
            continue
        for q, pq in enumerate(old.pqs):
            if pq is None or new.pqs[q] is not None or lk.holder(locks, q, t.now) != me:
                continue
            if any(r.pq_uid == pq.uid for r in old.consuming) or any(uq == q for uq, _ in new.unlocks):
                continue
            return f"client {i} queue {q}: pq {pq.uid} left the table and the broker lock stays held, no unlock pending"
    return None


LOCK_RELEASED_ON_LEAVE = ActionProperty(
    "INV-26",
    "lock_released_on_leave",
    "An orderly CLUSTERING consumer that removes a queue's pq (no listener of it running) or shuts down releases "
    "the queue's broker lock, at once or by a pending unlockDelay task.",
    "R8.8, R4.4, R8.2",
    "A lock left behind keeps the queue's next owner from consuming until the broker expires it, 60 s later.",
    _lock_released_on_leave,
)


def _lock_answers_follow_the_table(m: Model, s: State, a: Action, t: State) -> str | None:
    # Read from the lock table before the step and the constants (orderly.py's expiry), never from the model's lock
    # helpers (which a planted bug overrides). Orderly CLUSTERING only: BROADCASTING's locks differ by version (R8.9).
    from rmqspec.spec.rebalance import Rebalance, RebalanceQueryError  # rebalance calls this module's helpers

    if not (m.orderly and m.clustering) or not isinstance(a, (LockAll, Rebalance, RebalanceQueryError)):
        return None
    i, b = a.client, s.broker
    if not s.clients[i].running:
        return None
    if isinstance(a, LockAll) and not b.up:
        # the master is down: lockAll finds no master address or its LOCK_BATCH_MQ throws, and the catch only logs
        # (RebalanceImpl#lockAll): no pq's lock flag or lock time changes
        cl, new = s.clients[i], t.clients[i]
        for q, pq in enumerate(cl.pqs):
            now = new.pqs[q]
            if pq is not None and now is not None and (now.locked, now.last_lock) != (pq.locked, pq.last_lock):
                return (
                    f"client {i}: lockAll ran with the broker down, whose request throws, but queue {q}'s pq went from "
                    f"locked={pq.locked} since {pq.last_lock} to locked={now.locked} since {now.last_lock}"
                )
        return None
    if not b.up:
        return None
    me = m.identity[i]
    before, after = b.locks, t.broker.locks
    if isinstance(a, LockAll):
        cl, new = s.clients[i], t.clients[i]
        if cl.next_lock_all == new.next_lock_all:
            return None  # not a run of the task
        skip = m.config.lock_all_skips_dropped  # 5.x leaves dropped pqs out of the batch (R8.2)
        asked = [
            q
            for q, pq in enumerate(cl.pqs)
            if pq is not None and not (skip and (pq.dropped or pq.pull_state == PULL_DROPPED))
        ]
        for q in asked:
            entry = before[q] if q < len(before) else None
            grantable = entry is None or entry[0] == me or lk.broker_lock_expired(entry, s.now)
            got = after[q] if q < len(after) else None
            pq = new.pqs[q]
            if grantable and got != (me, s.now):
                return f"client {i}: lockAll asked for queue {q}, free to it ({entry}), but the table holds {got}"
            if not grantable and got != entry:
                return f"client {i}: lockAll was refused queue {q} ({entry}), but the table changed to {got}"
            if pq is None:
                continue
            if grantable and not (pq.locked and pq.last_lock == s.now):
                return (
                    f"client {i}: lockAll was granted queue {q} at {s.now}, but its pq is "
                    f"locked={pq.locked} since {pq.last_lock}"
                )
            if not grantable and pq.locked:
                return f"client {i}: lockAll was refused queue {q} ({entry}), but its pq stays locked"
        return None
    # a queue a rebalance adds for an orderly consumer was locked first (lock before add,
    # RebalanceMixin._locks_before_add): the asker holds it from now
    old, new = s.clients[i], t.clients[i]
    for q, pq in enumerate(new.pqs):
        was = old.pqs[q]
        if pq is None or (was is not None and was.uid == pq.uid):
            continue
        got = after[q] if q < len(after) else None
        if got != (me, s.now):
            return f"client {i}: the rebalance added queue {q} without holding its broker lock (the table holds {got})"
    return None


LOCK_ANSWERS_FOLLOW_THE_TABLE = ActionProperty(
    "INV-34",
    "lock_answers_follow_the_table",
    "An orderly CLUSTERING consumer's lockAll is granted exactly the queues of its batch that the broker's table "
    "leaves free to it (no entry, its own, or expired after 60 s), each stamped in the table and in its pq (locked, "
    "the lock time now) while the refused ones' pqs are unlocked; with the broker down its request throws and no pq "
    "changes; a queue a rebalance adds was locked for it first.",
    "R8.1, R8.2, R8.3, R8.4",
    "INV-11 and INV-12a keep locks exclusive; a grant withheld or a lock time not renewed lets the client's lock "
    "expire while the broker's holds (30 s against 60 s), and the orderly loop stops consuming the queue it owns, "
    "which no safety property reports.",
    _lock_answers_follow_the_table,
)
