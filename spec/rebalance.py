"""Rebalance: ``RebalanceService``, ``RebalanceImpl`` and where a new pq starts (``computePullFromWhere``).

RocketMQ classes: ``RebalanceService`` (the 20 s wait, 5.x's paced loop; R4.2), ``RebalanceImpl``
(``doRebalance``, ``rebalanceByTopic``, ``updateProcessQueueTableInRebalance``: the consumer list, allocation
by ``allocation.py``, removal and creation of pqs; R9.1-R9.7), ``RebalancePushImpl#computePullFromWhere`` and
``consumeFromWhere`` (R10.1, R10.4; the broker's offset query, R2.3, the slave routing (SlaveMixin), the offset query's
answer (broker_rules.query_consumer_offset)), and the orderly branches of removal and creation (locks, R8.4, the orderly
removal, OrderlyConsumeMixin._remove_orderly).

Rules decided here and applied elsewhere: Phase A's removal of a pull-expired pq (R9.4) uses
``PullMixin.pull_expired`` (``pull.py``); the remote store's readOffset (R2.3) is also the first locked pull's
re-read (``client_locks.py``, ``PullMixin._send_pull``); where a group with no offset starts (R10.4) is what the
ghost's ``missing_offset_cause`` (``ghost.py``) explains; what triggers a rebalance (R9.7) includes the broker's
NOTIFY_CONSUMER_IDS_CHANGED (``broker.py``); lock before add (R8.4) calls ``ClientLocksMixin._lock``.

Its actions, before the class: ``Rebalance``, ``RebalanceQueryError``.

Its properties, after the class: INV-13a and INV-13b (once every view agrees, each queue has exactly one
owner, up to the strategy's own gaps and overlaps in ``anomalies.py``), INV-15 (a queue taken over resumes
at the last landed commit), INV-9a (a pq positioned without a stored offset on a queue the group had
committed on shows why the offset was missing), INV-30 (a change of the group's consumer list wakes the rebalance of
every listed consumer), INV-33 (a pq positioned at the offset it read leaves that offset in memory), INV-36 (a pq
that leaves the table has its offset persisted and its memory entry removed) and INV-37 (a new pq starts where
computePullFromWhere's rule says).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from rmqspec.spec import broker_rules as br
from rmqspec.spec.allocation import AllocationError, NullPointerError, allocate_queues, machine_room_eligible
from rmqspec.spec.anomalies import _tolerated
from rmqspec.spec.broker import ExpireChannel
from rmqspec.spec.config import CONFIG, FROM_FIRST, FROM_TIMESTAMP
from rmqspec.spec.enabling import ActionNotEnabled
from rmqspec.spec.property_types import ActionProperty, Invariant
from rmqspec.spec.state import (
    PULL_READY,
    Broker,
    Client,
    Event,
    History,
    ProcessQueue,
    State,
    pq_key,
    step_events,
)
from rmqspec.spec.state import bit_offsets as _bits
from rmqspec.spec.state import put_at as _put

if TYPE_CHECKING:
    from rmqspec.spec.actions import Action
    from rmqspec.spec.model import Model

# Rebalance timers (R4.2; docs/rules.md, "Constants").
REBALANCE_WAIT: Final = 20_000  # RebalanceService waitInterval (R4.2)
REBALANCE_MIN_INTERVAL: Final = 1_000  # 5.x rocketmq.client.rebalance.minInterval, also the unbalanced wait (R4.2)
NEW_PULL_DISPATCH_DELAY: Final = 500  # 5.x dispatchPullRequest(pullRequestList, 500) for new pqs (R9.4)
# How a pq's position was found when the group had no stored offset (Ghost.starts): consumeFromWhere
# decided (R10.4), or the broker answered 0 for a young queue with no entry (the offset query's answer,
# broker_rules.query_consumer_offset). On a queue the group had committed on, each needs a cause the run shows (INV-9a,
# Model.missing_offset_cause).
POSITIONED_WITHOUT_OFFSET: Final = frozenset(
    {"consume-from-first", "consume-from-last", "consume-from-timestamp", "young-queue-zero"}
)


# Actions of rebalance, each handled by its transition ``_<snake_case name>`` below
@dataclass(frozen=True, slots=True)
class Rebalance:
    client: int


@dataclass(frozen=True, slots=True)
class RebalanceQueryError:
    """``Rebalance(client)`` during which the broker answers the QUERY_CONSUMER_OFFSET for ``queue``
    with an error code other than QUERY_NOT_FOUND (SYSTEM_ERROR: the request processor threw).
    Budgeted (``Config.query_errors``); spent only if the rebalance does query ``queue``."""

    client: int
    queue: int


class RebalanceMixin:
    """``Model``'s transitions and helpers for rebalancing; see the module docstring."""

    def _rebalance(self: Model, s: State, a: Rebalance) -> State:
        """Rebalance(client). Enabled: running, and the 20 s wait is over or a rebalance was
        requested (start, notification). Effect: ``doRebalance`` for the topic and, in CLUSTERING,
        the retry topic (R9.1). BROADCASTING takes every queue (R9.2). CLUSTERING asks the broker (its
        slave while the master is down) for the consumer list; if it cannot (no broker) nothing changes,
        else it allocates with
        the configured strategy over the sorted lists (R9.3, R11) and updates the pq table (R9.4)."""
        if not self._rebalance_due(s, a.client):
            raise ActionNotEnabled(a, "no rebalance due or requested")
        return self._do_rebalance(s, a.client, None)

    def _rebalance_query_error(self: Model, s: State, a: RebalanceQueryError) -> State:
        """RebalanceQueryError(client, queue) (budgeted). Enabled: CLUSTERING, a rebalance is due
        as for Rebalance, the broker is up with a consumer of the group registered, ``queue`` has no
        pq, and ``query_errors`` budget is left. Effect: Rebalance(client), except that if Phase B
        asks the broker for ``queue``'s offset, the QUERY_CONSUMER_OFFSET answer is SYSTEM_ERROR
        (the processor threw), which costs one unit of budget. readOffset maps it by version (R2.3):
        4.9.8 reads it as -1, no offset, and positions the queue by consumeFromWhere (R10.1), past
        a stored offset [RMQ-14]; 5.x reads it as -2, computePullFromWhereWithException throws and
        the rebalance leaves the queue without a pq this round (R10.1, R9.4)."""
        i, q = a.client, a.queue
        listing = self._list_source(s)
        if (
            not self.clustering
            or not 0 <= q < self.q_count
            or not self._rebalance_due(s, i)
            or s.budget.query_errors <= 0
            or listing is None
            or not listing.registered
            or s.clients[i].pqs[q] is not None
        ):
            raise ActionNotEnabled(a, "no rebalance due, no query of that queue possible, or budget used up")
        return self._do_rebalance(s, i, q)

    def _rebalance_due(self: Model, s: State, i: int) -> bool:
        cl = s.clients[i]
        if "RebalanceService" in cl.dead_tasks:  # faults: the thread is gone; nothing wakes it
            return False
        if self.paced and s.now < cl.last_rebalance + REBALANCE_MIN_INTERVAL:
            return False  # 5.x: a wake-up within minInterval of the last rebalance waits out the rest (R4.2)
        return cl.running and (cl.rebalance_requested or (cl.next_rebalance is not None and cl.next_rebalance <= s.now))

    def _do_rebalance(self: Model, s: State, i: int, fault: int | None, without_self: bool = False) -> State:
        """doRebalance (R9.1); ``fault`` is the queue whose offset query fails, if any; ``without_self``:
        the broker's consumer lists lack this consumer's clientId (RebalanceWithoutSelf). The next wait is
        20 s; 5.x waits only minInterval (1 s) when the result was not balanced (R4.2)."""
        cl = s.clients[i]
        wait = self._next_rebalance_run(s.now)
        cl = cl._replace(next_rebalance=wait, rebalance_requested=False)
        if self.paced:
            cl = cl._replace(last_rebalance=s.now)
        s = s._replace(clients=_put(s.clients, i, cl))
        s, balanced = self._rebalance_topics(s, i, fault, without_self)
        if balanced or wait is None or not self.paced:
            return s
        cl = s.clients[i]
        return s._replace(clients=_put(s.clients, i, cl._replace(next_rebalance=s.now + REBALANCE_MIN_INTERVAL)))

    def _next_rebalance_run(self: Model, now: int) -> int | None:
        """When RebalanceService runs again after a run: it waits 20 s, woken early by rebalanceImmediately
        (R4.2)."""
        return now + REBALANCE_WAIT

    def _rebalance_topics(self: Model, s: State, i: int, fault: int | None, without_self: bool) -> tuple[State, bool]:
        """rebalanceByTopic for each subscribed topic; also returns 5.x's ``balanced``: every topic's allocation
        equals its working queues (pqs in the table, not dropped), a null consumer list counting as balanced
        and a throwing allocation as not (5.3.3 RebalanceImpl#rebalanceByTopic, R4.2)."""
        if not self.clustering:
            s, _ = self._rebalance_topic(s, i, self.topic_queues, set(self.topic_queues), fault)
            return s, not self.paced or self._working(s, i, self.topic_queues) == set(self.topic_queues)
        listing = self._list_source(s)
        if listing is None or not listing.registered:
            # findConsumerIdList gets an error (no broker, or no consumer registered: SYSTEM_ERROR)
            # and answers null: existing pqs are kept (R9.3 steps 2-3).
            return s, True
        me = self.cids[i]
        topics = [self.topic_queues]
        if self.retry_queue is not None:
            topics.append((self.retry_queue,))
        lists, complete, thrown, balanced = set(), True, 0, True
        for queues in topics:
            # findConsumerIdList per topic: the heartbeat of an earlier topic's change may have
            # registered this consumer in between (R9.3, R9.6).
            listed = self._list_source(s).registered  # type: ignore[union-attr]
            if without_self:
                listed = frozenset(j for j in listed if self.cids[j] != me)
                if not listed:  # an empty list is answered "no consumer for this group": null (R9.3 step 3)
                    thrown += 1
                    continue
            members = tuple(sorted(listed, key=lambda j: self.cids[j]))
            cid_all = tuple(self.cids[j] for j in members)
            try:
                allocated = allocate_queues(self.strategies[i], me, tuple(self.mqs[q] for q in queues), cid_all)
            except AllocationError:
                thrown += 1  # logged; this topic is left as it is this round (R9.3 step 5, R11.7)
                balanced = False
                continue
            mine = {self.queue_index[mq] for mq in allocated}
            errors = s.budget.query_errors
            s, placed = self._rebalance_topic(s, i, queues, mine, fault)
            if s.budget.query_errors != errors:
                fault = None  # the query error strikes once; a CONFIG list can ask again in the next topic
            lists.add(tuple(self.identity[j] for j in members))  # a view names clientIds (RMQ-11)
            complete = complete and placed
            # a CONFIG list naming the retry queue in the topic's pass is never balanced: getWorkingMessageQueue
            # looks only at the topic's own queues
            balanced = balanced and (not self.paced or mine == self._working(s, i, queues))
        if thrown == len(topics):
            return s, balanced  # no topic was allocated: the view stays
        view = lists.pop() if complete and not thrown and len(lists) == 1 else None
        cl = s.clients[i]
        return s._replace(clients=_put(s.clients, i, cl._replace(view=view))), balanced

    @staticmethod
    def _working(s: State, i: int, topic_queues: tuple[int, ...]) -> set[int]:
        """5.x getWorkingMessageQueue: the topic's queues with a pq in the table that is not dropped."""
        pqs = s.clients[i].pqs
        return {q for q in topic_queues if (pq := pqs[q]) is not None and not pq.dropped}

    def _rebalance_topic(
        self: Model, s: State, i: int, topic_queues: tuple[int, ...], mine: set[int], fault: int | None
    ) -> tuple[State, bool]:
        """rebalanceByTopic's tail: update the pq table and, if it changed, messageQueueChanged,
        whose heartbeat registers the consumer with the broker (R9.6 step 3, R9.7)."""
        before = self._pq_uids(s.clients[i])
        s, complete = self._update_process_queue_table(s, i, topic_queues, mine, fault)
        # "changed": a pq added or removed; an orderly removal that was refused only marks its pq dropped (the orderly
        # removal, OrderlyConsumeMixin._remove_orderly)
        if self._pq_uids(s.clients[i]) != before:
            s = self._register(s, i)
        return s, complete

    @staticmethod
    def _pq_uids(cl: Client) -> tuple[int | None, ...]:
        return tuple(None if pq is None else pq.uid for pq in cl.pqs)

    def _update_process_queue_table(
        self: Model, s: State, i: int, topic_queues: tuple[int, ...], mine: set[int], fault: int | None
    ) -> tuple[State, bool]:
        """updateProcessQueueTableInRebalance (R9.4), push consumer.

        Phase A drops each pq no longer allocated, or pull-expired (the expiry predicates, PullMixin.pull_expired):
        ``persist`` then ``removeOffset`` (R9.5); an orderly CLUSTERING consumer's removal may be refused and the pq
        stays in the table, dropped (the orderly removal, OrderlyConsumeMixin._remove_orderly), which keeps Phase B from
        re-creating it. Phase B creates a pq for each new queue: ``removeDirtyOffset``, then ``computePullFromWhere``
        (R10.1); a queue whose start cannot be computed is skipped this round. Returns the new state and whether every
        allocated queue now has a pq."""
        for q in topic_queues:
            pq = s.clients[i].pqs[q]
            if pq is None or (q in mine and not self.pull_expired(s, pq)):
                continue
            if self.orderly_removal:  # orderly consume loop: the orderly removal (OrderlyConsumeMixin._remove_orderly);
                # a refused removal keeps the pq, dropped
                pq = pq._replace(dropped=True)
                cl = s.clients[i]
                s = s._replace(clients=_put(s.clients, i, cl._replace(pqs=_put(cl.pqs, q, pq))))
                s, removed = self._remove_orderly(s, i, q, pq, pq.uid, "rebalance-removal")
                if removed:
                    cl = s.clients[i]
                    s = s._replace(clients=_put(s.clients, i, self._detach(cl, q, pq)))
                continue
            s = self._persist_one(s, i, q, pq.uid, "rebalance-removal")
            cl = s.clients[i]
            cl = self._remove_offset(self._detach(cl, q, pq), q)
            s = s._replace(clients=_put(s.clients, i, cl))
        complete = True
        for q in sorted(mine, key=self.mqs.__getitem__):
            if s.clients[i].pqs[q] is not None:
                complete = complete and not s.clients[i].pqs[q].dropped  # type: ignore[union-attr]
                continue
            if self._locks_before_add():  # orderly: lock(mq) first, else skip (R8.4)
                s, granted = self._lock(s, i, (q,), False)
                if q not in granted:
                    complete = False
                    continue
            cl = s.clients[i]
            s = s._replace(clients=_put(s.clients, i, self._remove_offset(cl, q)))  # removeDirtyOffset
            s, start = self._compute_pull_from_where(s, i, q, s.clients[i].seq, fault == q)
            if start is None or start < 0:
                complete = False
                continue
            cl = s.clients[i]
            first_pull = s.now + (NEW_PULL_DISPATCH_DELAY if self.paced else 0)
            pq = ProcessQueue(
                cl.seq, 0, 0, 0, 0, self._first_pull_offset(start), PULL_READY, first_pull, last_pull=s.now
            )
            if self.orderly:  # orderly: pq.locked := true; lastLockTimestamp is its creation (R8.4)
                pq = pq._replace(locked=True, last_lock=s.now)
            cl = cl._replace(pqs=_put(cl.pqs, q, pq), seq=cl.seq + 1)
            s = s._replace(clients=_put(s.clients, i, cl))
        return s, complete

    def _first_pull_offset(self: Model, start: int) -> int:
        """The new PullRequest's nextOffset: the position computePullFromWhere returned (R9.4 Phase B, R10.1)."""
        return start

    def _locks_before_add(self: Model) -> bool:
        """Does Phase B take the broker lock, ``lock(mq)``, before it adds a queue (orderly; R8.4, orderly
        BROADCASTING's locks, ClientLocksMixin)?"""
        return self.lock_on_add

    def _compute_pull_from_where(
        self: Model, s: State, i: int, q: int, uid: int, query_fails: bool
    ) -> tuple[State, int | None]:
        """computePullFromWhereWithException (R10.1) after ``readOffset(READ_FROM_STORE)``.

        CLUSTERING reads the broker (R2.3, the offset query's answer, broker_rules.query_consumer_offset): a found
        offset seeds memory with ``updateOffset(mq, o, false)``; QUERY_NOT_FOUND gives -1. BROADCASTING reads the local
        file (R1.11). With -1, consumeFromWhere decides (R10.4): LAST gives maxOffset (0 for a retry topic), FIRST gives
        0, TIMESTAMP searches (maxOffset for a retry topic). The offsets a first-start position jumps over are recorded
        as declared skips (INV-9). ``None`` means the broker could not be asked (an exception: the queue is skipped this
        round).

        ``query_fails``: the broker answers SYSTEM_ERROR (RebalanceQueryError). 4.9.8 reads that as
        -1 like QUERY_NOT_FOUND; 5.x as -2, a failed read (R2.3), on which 5.x throws where 4.9.8
        returns -1 (R10.1); the caller skips the queue on both (R9.4).

        ``uid``: the pq positioned (the next uid for a pq Phase B creates). The ghost records how its
        position was found (``Ghost.starts``) and, for a position consumeFromWhere chose, why there was no
        stored offset (``missing_offset_cause``).
        """
        cl = s.clients[i]
        b = s.broker
        asked = b if b.up else s.slave  # slaves: the lookup falls back to the slave while the master is down
        # (the slave routing, SlaveMixin)
        stored: int | None
        if self.clustering:
            if asked is None:
                return s, None
            if query_fails:
                s = s._replace(budget=s.budget._replace(query_errors=s.budget.query_errors - 1))
                if not self.config.broker_error_reads_as_no_offset:
                    return s, None if self.config.read_error_throws else -1  # readOffset gave -2
                stored = None  # 4.9.8: MQBrokerException reads as -1, "no offset" [RMQ-14]
            else:
                stored = self._query_consumer_offset(asked, q)
        else:
            stored = cl.file[q]
        if stored is not None:
            cl = cl._replace(mem=_put(cl.mem, q, self._seeded_offset(stored)))  # updateOffset(mq, o, false)
            s = s._replace(clients=_put(s.clients, i, cl))
            if self._resumes_at_stored(stored):
                how = "stored-offset"
                if self.clustering and asked is not None and asked.offsets[q] is None:
                    how = "young-queue-zero"  # no entry: the broker answers 0 for a young queue (the offset query's
                    # answer, broker_rules.query_consumer_offset)
                elif self.clustering and asked is s.slave:
                    how = "stored-offset-on-slave"
                return self._positioned(s, i, q, uid, stored, how, False, query_fails), stored
        cfw = self.config.consume_from_where
        is_retry = q == self.retry_queue
        if cfw == FROM_FIRST or (is_retry and cfw != FROM_TIMESTAMP):
            start, how, skip = 0, "consume-from-first", False
        elif not b.up:  # GET_MAX_OFFSET / SEARCH_OFFSET_BY_TIMESTAMP go to the master only: MQClientException
            return s, None
        elif cfw == FROM_TIMESTAMP and not is_retry:
            start, how, skip = (
                br.search_offset(b.queues[q], self.config.consume_timestamp),
                "consume-from-timestamp",
                True,
            )
        else:
            start, how, skip = self._max_offset_answer(b, q), "consume-from-last", True
        mem = self._memory_without_stored_offset(cl.mem[q], start)
        if mem != cl.mem[q]:
            s = s._replace(clients=_put(s.clients, i, cl._replace(mem=_put(cl.mem, q, mem))))
        return self._positioned(s, i, q, uid, start, how, skip, query_fails), start

    def _max_offset_answer(self: Model, b: Broker, q: int) -> int:
        """GET_MAX_OFFSET's answer from the master for queue ``q``: its consume queue's max offset, one past its last
        message (R10.1)."""
        return b.queues[q].max_offset

    def _memory_without_stored_offset(self: Model, mem: int | None, start: int) -> int | None:
        """The memory offset after computePullFromWhere chose ``start`` by consumeFromWhere: unchanged. With no
        stored offset (-1) there is no ``updateOffset`` (R10.1), so memory holds nothing until the pq's first
        removeMessage result (ConcurrentConsumeMixin._remove_message, updateOffset's increaseOnly rule,
        PullMixin._updated)."""
        return mem

    def _seeded_offset(self: Model, stored: int) -> int:
        """What computePullFromWhere's ``updateOffset(mq, o, increaseOnly=false)`` puts in memory: the offset
        read (R10.1, updateOffset's increaseOnly rule, PullMixin._updated)."""
        return stored

    def _resumes_at_stored(self: Model, stored: int) -> bool:
        """Does computePullFromWhere start at the offset read? Yes unless it is -1 (none): then
        consumeFromWhere decides (R10.1, R10.4)."""
        return stored >= 0

    def _positioned(
        self: Model, s: State, i: int, q: int, uid: int, start: int, how: str, skip: bool, query_error: bool
    ) -> State:
        """Ghost of a position found for pq ``uid``: ``Ghost.starts``; for a position consumeFromWhere
        chose, the cause of the missing offset in the history event; the offsets a forward position
        jumps over that nobody handled are declared skipped with that cause (``Ghost.skips``). A new
        pq's own ledgers (``received``, ``listened``) start empty."""
        g = s.ghost
        idx = self._ledger(i) * self.q_count + q
        key = pq_key(i, uid)
        g = g._replace(starts=(*(e for e in g.starts if e[0] != key), (key, start, how)))
        if how == "stored-offset" and self.clustering:  # it read the master's current value
            readers = g.readers or (frozenset(),) * self.q_count
            g = g._replace(readers=_put(readers, q, readers[q] | {key}))
        cause = how
        if how in POSITIONED_WITHOUT_OFFSET:
            cause = f"{how}: {self.missing_offset_cause(s, i, q, query_error) or 'no cause'}"
        if skip and start > 0:
            below = (1 << start) - 1
            jumped = below & ~(g.handled[idx] | g.skipped[idx]) & ~((1 << s.broker.queues[q].min_offset) - 1)
            g = g._replace(skipped=_put(g.skipped, idx, g.skipped[idx] | below))
            if jumped:
                g = g._replace(skips=(*g.skips, (idx, cause, jumped)))
        if uid == s.clients[i].seq:
            cq = i * self.q_count + q
            if g.received[cq] or g.listened[cq]:
                g = g._replace(received=_put(g.received, cq, 0), listened=_put(g.listened, cq, 0))
        return s._replace(ghost=g, history=History(Event(s.now, "position", i, q, start, cause), s.history))


# Properties of rebalance: ownership once the views agree (INV-13a, INV-13b), where a new pq starts (INV-15, INV-9a)
def _views_agree(m: Model, s: State) -> tuple[int, ...] | None:
    """The common consumer list when every running consumer last rebalanced completely on the
    list of exactly the running consumers, which the broker also holds; else None."""
    if not m.clustering or not s.broker.up:
        return None
    running = tuple(i for i, cl in enumerate(s.clients) if cl.running)
    if not running or set(running) != s.broker.registered:
        return None
    members = tuple(sorted(running, key=lambda j: m.cids[j]))
    named = tuple(m.identity[j] for j in members)  # a view names clientIds (RMQ-11)
    if any(s.clients[i].view != named or s.clients[i].rebalance_requested for i in running):
        return None
    return members


def _listed(m: Model, client: int, q: int) -> bool:
    """CONFIG: does ``client``'s configured list name queue ``q`` (``allocation.allocate_queues``)?"""
    lists = m.config.allocate_config_queues
    return lists is not None and q in lists[client]


def _nobody_is_dealt(m: Model, members: tuple[int, ...], q: int) -> bool:
    """Whether an allocation anomaly of the configuration leaves queue ``q`` to nobody."""
    tolerated = _tolerated(m.config)
    if "unowned-with-no-virtual-nodes" in tolerated:
        return True
    if "unowned-by-configuration" in tolerated and not any(_listed(m, i, q) for i in members):
        return True
    if "unowned-outside-consumeridcs" in tolerated:
        try:
            return not machine_room_eligible(m.mqs[q].broker_name, m.config.consumeridcs)
        except NullPointerError:  # every rebalance throws (R11.7): nobody is dealt anything
            return True
    return False


def _dealt(m: Model, members: tuple[int, ...], q: int) -> bool:
    """Does some member's own allocation, computed from the agreed list, name queue ``q``?"""
    queues = (q,) if q == m.retry_queue else m.topic_queues
    cid_all = tuple(m.cids[j] for j in members)
    for i in members:
        try:
            mine = allocate_queues(m.strategies[i], m.cids[i], tuple(m.mqs[k] for k in queues), cid_all)
        except AllocationError:
            continue
        if m.mqs[q] in mine:
            return True
    return False


def _exclusive_ownership(m: Model, s: State) -> str | None:
    if _views_agree(m, s) is None:
        return None
    shared = "double-ownership-by-configuration" in _tolerated(m.config)
    owner: dict[int, int] = {}
    for i, cl in enumerate(s.clients):
        for q, pq in enumerate(cl.pqs):
            if pq is not None and not pq.dropped:  # a dropped pq left in the table owns nothing (the orderly removal,
                # OrderlyConsumeMixin._remove_orderly)
                if q in owner:
                    if shared and _listed(m, owner[q], q) and _listed(m, i, q):
                        continue  # both are configured with it (CONFIG, allocation.allocate_queues)
                    if m.identity[owner[q]] == m.identity[i]:
                        continue  # one clientId, one slice (DUPLICATE_CLIENT_ID_ANOMALIES)
                    return f"queue {q} owned by clients {owner[q]} and {i} although all views agree"
                owner[q] = i
    return None


EXCLUSIVE_OWNERSHIP_WHEN_VIEWS_AGREE = Invariant(
    "INV-13a",
    "exclusive_ownership_when_views_agree",
    "Once every consumer allocated from the same consumer list, no queue has two owners "
    "(unless the strategy's ALLOCATION_ANOMALIES name that queue).",
    "R9.3, R11",
    "Double ownership is tolerated only while views differ; after agreement it means duplicate work forever.",
    _exclusive_ownership,
)


def _full_coverage(m: Model, s: State) -> str | None:
    members = _views_agree(m, s)
    if members is None:
        return None
    owned = {q for cl in s.clients for q, pq in enumerate(cl.pqs) if pq is not None and not pq.dropped}
    missing = [q for q in range(m.q_count) if q not in owned and not _nobody_is_dealt(m, members, q)]
    if m.config.duplicate_client_id:  # the orphaned slice (DUPLICATE_CLIENT_ID_ANOMALIES)
        missing = [q for q in missing if _dealt(m, members, q)]
    return f"queues {missing} owned by nobody although all views agree" if missing else None


FULL_COVERAGE_WHEN_VIEWS_AGREE = Invariant(
    "INV-13b",
    "full_coverage_when_views_agree",
    "Once every consumer allocated from the same consumer list, every queue has an owner "
    "(unless the strategy's ALLOCATION_ANOMALIES name that queue).",
    "R9.3, R9.4, R11",
    "An orphaned queue's backlog grows without bound (RMQ-11).",
    _full_coverage,
)


def _allocation_throws(m: Model, i: int, queues: tuple[int, ...], members: frozenset[int]) -> bool:
    cid_all = tuple(sorted(m.cids[j] for j in members))
    try:
        allocate_queues(m.strategies[i], m.cids[i], tuple(m.mqs[q] for q in queues), cid_all)
    except AllocationError:
        return True
    return False


def _resume_at_stored(m: Model, s: State, a: Action, t: State) -> str | None:
    if not m.clustering or not isinstance(a, Rebalance | RebalanceQueryError):
        return None
    before, after = s.clients[a.client], t.clients[a.client]
    b = s.broker if s.broker.up or s.slave is None else s.slave  # slaves: the broker the query went to (the slave
    # routing, SlaveMixin)
    for q in range(m.q_count):
        new, old = after.pqs[q], before.pqs[q]
        if new is None or (old is not None and old.uid == new.uid):
            continue
        stored = b.offsets[q]
        if stored is not None and stored >= 0 and new.next_offset != stored:
            return f"client {a.client} queue {q}: resumed at {new.next_offset}, last landed commit is {stored}"
    return None


RESUME_AT_LAST_LANDED_COMMIT = ActionProperty(
    "INV-15",
    "resume_at_last_landed_commit",
    "A queue taken over with a stored offset starts exactly at the last commit that reached the broker.",
    "R2.3, R9.4, R10.1",
    "So redelivery after a crash or handover is bounded by the work since that commit plus what was in "
    "flight; replaying from elsewhere (RMQ-14) is unbounded.",
    _resume_at_stored,
)


def new_positions(s: State, t: State) -> list[tuple[int, int, int, str]]:
    """(client, uid, start, how) of every position the step from ``s`` to ``t`` recorded (Ghost.starts)."""
    if t.ghost.starts == s.ghost.starts:
        return []
    before = set(s.ghost.starts)
    return [(key % 16, key // 16, start, how) for key, start, how in t.ghost.starts if (key, start, how) not in before]


def _positioning_caused(m: Model, s: State, a: Action, t: State) -> str | None:
    """INV-9a: a pq positioned without a stored offset (consumeFromWhere, or a young queue's 0) on a queue
    its group had committed on must show why the offset was missing (Model.missing_offset_cause): a
    fault that removed it, a 4.9.8 query error read as "no offset" (RMQ-14), a failover to a replica
    lacking it. Without one, LAST or TIMESTAMP skips the messages since the commit (a loss) and FIRST
    or the young queue's 0 replays what the group had passed (a rollback)."""
    for client, uid, start, how in new_positions(s, t):
        if how not in POSITIONED_WITHOUT_OFFSET:
            continue
        q = next(q for q, pq in enumerate(t.clients[client].pqs) if pq is not None and pq.uid == uid)
        query_error = isinstance(a, RebalanceQueryError) and a.queue == q
        if m.missing_offset_cause(s, client, q, query_error) is not None:
            continue
        idx = m._ledger(client) * m.q_count + q
        g, queue = s.ghost, s.broker.queues[q]
        jumped = ((1 << start) - 1) & ~(g.handled[idx] | g.skipped[idx]) & ~((1 << queue.min_offset) - 1)
        replayed = g.handled[idx] >> start << start
        if not (jumped or replayed):
            continue  # the position is where the group had got to: nothing skipped or replayed
        effect = f"skips {_bits(jumped)}" if jumped else f"replays {_bits(replayed)}"
        return (
            f"client {client} queue {q}: positioned at {start} by {how} although the group had committed on this "
            f"queue and no fault the run shows removed the offset; it {effect}"
        )
    return None


POSITIONING_CAUSED = ActionProperty(
    "INV-9a",
    "positioning_caused",
    "A pq positioned without a stored offset (consumeFromWhere, a young queue's 0) on a queue the group had "
    "committed on shows the cause of the missing offset: a fault that removed it, a 4.9.8 query error read "
    "as no offset, a failover to a replica lacking it. Only a group's first start on a queue is owed-free.",
    "R10.1, R10.4, R3.5, R3.6, R3.7, R2.3",
    "consumeFromWhere is for a group with no history: applied to a group that had committed it silently "
    "skips (LAST, TIMESTAMP) or replays (FIRST) the queue, and INV-9 would count the skip as declared.",
    _positioning_caused,
)


def _group_changes_wake_the_rebalance(m: Model, s: State, a: Action, t: State) -> str | None:
    # Read from the brokers' registrations before and after the step, never from the model's notify helper (which a
    # planted bug overrides). A master that is up, or the slave, whose list of the group's channels changed told every
    # channel it lists afterwards, joiner included: NOTIFY_CONSUMER_IDS_CHANGED on a register, an unregister or a
    # closed channel, which each running member answers with rebalanceImmediately (R9.7). The two changes that tell
    # nobody: the housekeeping scan's expiry of a channel whose process still runs (the idle-channel scan,
    # BrokerMixin._expire_channel), and a broker crash.
    if s.clients is t.clients and s.broker is t.broker and s.slave is t.slave:
        return None
    pairs = [("master", s.broker, t.broker)] if s.broker.up and t.broker.up else []
    if s.slave is not None and t.slave is not None:
        pairs.append(("slave", s.slave, t.slave))
    for where, before, after in pairs:
        if before.registered is after.registered:
            continue  # most steps leave the list as it was
        gained, lost = after.registered - before.registered, before.registered - after.registered
        if not gained and not lost:
            continue
        if not gained and isinstance(a, ExpireChannel) and s.clients[a.client].running:
            continue  # scanNotActiveChannel closes a silent channel and notifies nobody
        change = f"consumer {min(gained)} joined" if gained else f"consumer {min(lost)} left"
        for i in sorted(after.registered):
            cl = t.clients[i]
            if cl.running and not cl.rebalance_requested:
                step = type(a).__name__
                return f"{step}: {change} the group on the {where}, but consumer {i}'s rebalance was not woken"
    return None


GROUP_CHANGES_WAKE_THE_REBALANCE = ActionProperty(
    "INV-30",
    "group_changes_wake_the_rebalance",
    "When a broker's list of the group's consumers changes by a registration, an unregistration or a closed "
    "channel, every running consumer it lists afterwards has its rebalance woken (NOTIFY_CONSUMER_IDS_CHANGED); "
    "only the housekeeping expiry of a silent channel and a broker crash tell nobody.",
    "R9.7, R4.3",
    "A consumer that is not told waits for its 20 s timer: a joiner's queues stay with their old owners and a "
    "leaver's queues with nobody for that long, and at-least-once, which allows the delay, does not see it.",
    _group_changes_wake_the_rebalance,
)


# How a pq's position was found when readOffset(READ_FROM_STORE) returned an offset (Ghost.starts): the broker's
# stored offset (the master's or, while it is down, the slave's), the broker's 0 for a young queue, or the local file's
# entry (BROADCASTING, "stored-offset")
POSITIONED_BY_READ: Final = frozenset({"stored-offset", "stored-offset-on-slave", "young-queue-zero"})


def _positioning_seeds_memory(m: Model, s: State, a: Action, t: State) -> str | None:
    # Read from the positions the step recorded and the memory table after it, never from the model's seeding helper
    # (which a planted bug overrides).
    for client, uid, start, how in new_positions(s, t):
        if how not in POSITIONED_BY_READ:
            continue
        cl = t.clients[client]
        q = next((q for q, pq in enumerate(cl.pqs) if pq is not None and pq.uid == uid), None)
        if q is not None and cl.mem[q] != start:
            return (
                f"client {client} queue {q}: positioned at {start} by the offset it read ({how}), but the memory "
                f"offset is {cl.mem[q]}"
            )
    return None


POSITIONING_SEEDS_MEMORY = ActionProperty(
    "INV-33",
    "positioning_seeds_memory",
    "A pq positioned at the offset readOffset(READ_FROM_STORE) returned (the broker's, the slave's, a young queue's "
    "0, the local file's) leaves that offset in the client's memory table: readOffset's updateOffset(mq, offset, "
    "false).",
    "R1.11, R2.3, R10.1",
    "The memory table is what persistAll writes and what the next commit rises from: a queue positioned but missing "
    "from it is left out of offsets.json or its broker commit until the pq consumes, so a persist, a handover or a "
    "restart in between loses the offset the position came from.",
    _positioning_seeds_memory,
)


def _removal_persists_and_forgets(m: Model, s: State, a: Action, t: State) -> str | None:
    # Read from the pq tables, the memory tables, the local file and the step's commit events, never from the model's
    # persist or removeOffset helpers (which a planted bug overrides). A pq leaves a running consumer's table through
    # removeUnnecessaryMessageQueue (R9.5: the rebalance's Phase A, and removeProcessQueue after the OFFSET_ILLEGAL
    # fix), which first persists the queue's memory offset (persist(mq): a oneway commit, or the entry written to
    # offsets.json) and then removes the memory entry (removeOffset), unless the same step placed a new pq on the
    # queue, whose position seeds memory again. The OFFSET_ILLEGAL fix persists its corrected offset: the task's
    # (FixOffsetIllegal), or, where the pull reply runs the fix at once (a ReceivePull that takes the pq out), whatever
    # the reply corrected it to. A 4.9.8 admin reset's pq moved aside for its sleep (reset_held) is still the table's
    # entry, not removed.
    from rmqspec.spec.pull import FixOffsetIllegal, ReceivePull  # the pull module imports this one

    events = None
    for i, (before, after) in enumerate(zip(s.clients, t.clients, strict=True)):
        fix = a if isinstance(a, FixOffsetIllegal) and a.client == i else None
        if (fix is None and before.pqs == after.pqs) or not before.running or not after.running:
            continue
        held = {uid for _, uid in after.reset_held}
        gone = [
            q
            for q, pq in enumerate(before.pqs)
            if pq is not None and not _same_pq(pq, after.pqs[q]) and pq.uid not in held
        ]
        owed: dict[int, int | None] = {}  # queue -> the offset persisted (None: the one the pull reply corrected to)
        if fix is not None:
            owed[fix.queue] = next(f.offset for f in before.offset_fixes if f.queue == fix.queue and f.due <= s.now)
        for q in gone:
            if q in owed:
                continue
            if isinstance(a, ReceivePull) and a.client == i:
                owed[q] = None
            elif before.mem[q] is not None:
                owed[q] = before.mem[q]
        if not owed and not gone:
            continue
        if events is None:
            events = step_events(s.history, t.history)
        sent = [(e.queue, e.offset) for e in events if e.client == i and e.kind in ("commit-sent", "commit-lost")]
        for q, value in owed.items():
            if m.clustering:
                persisted = any(sq == q and (value is None or so == value) for sq, so in sent)
            else:
                persisted = after.file[q] is not None if value is None else after.file[q] == value
            if not persisted:
                what = "an offset" if value is None else f"offset {value}"
                where = "no commit of it was sent" if m.clustering else f"offsets.json holds {after.file[q]}"
                return f"client {i} queue {q}: the removal of its pq persisted no {what}: {where}"
        for q in gone:
            if after.pqs[q] is None and after.mem[q] is not None:
                return (
                    f"client {i} queue {q}: its pq left the table, but the memory offset {after.mem[q]} stays "
                    "(removeOffset did not run)"
                )
    return None


def _same_pq(pq: ProcessQueue, other: ProcessQueue | None) -> bool:
    return other is not None and other.uid == pq.uid


REMOVAL_PERSISTS_AND_FORGETS = ActionProperty(
    "INV-36",
    "removal_persists_and_forgets",
    "A pq that leaves a running consumer's table (the rebalance's removal, removeProcessQueue after the OFFSET_ILLEGAL "
    "fix) has its queue's memory offset persisted in the same step (a commit sent, or the entry written to "
    "offsets.json) and then removed from memory, unless the step placed a new pq on the queue; the OFFSET_ILLEGAL "
    "fix persists its corrected offset.",
    "R9.5, R2.6, R2.2, R1.13, R1.14, R5.7",
    "A removal is a handover: the next owner (or this consumer's next start, in BROADCASTING) resumes from what the "
    "removal persisted, so a removal that persists nothing or something stale redelivers or skips what the pq "
    "consumed; a memory entry left behind is persisted again later, over the new owner's commits.",
    _removal_persists_and_forgets,
)


def _rule_position(m: Model, s: State, t: State, i: int, q: int, query_failed: bool) -> tuple[int | None, str]:
    """Where computePullFromWhereWithException (R10.1, R10.4) positions client ``i``'s new pq on ``q``, read from the
    stores (the broker's table before the step, or, in BROADCASTING, the file after the step's own removals wrote
    it), and why; ``None``: the queue gets no position this round."""
    b = s.broker
    if m.clustering:
        asked = b if b.up else s.slave  # the offset query falls back to the slave while the master is down
        if asked is None:
            return None, "no broker answers the offset query"
        if query_failed and not m.config.broker_error_reads_as_no_offset:
            return None, "the offset query failed, a failed read"
        stored = (
            None
            if query_failed
            else br.query_consumer_offset(asked.offsets[q], asked.queues[q], m.config.young_queue_needs_head_in_memory)
        )
    else:
        stored = t.clients[i].file[q]
    if stored is not None and stored >= 0:
        return stored, "the offset read"
    cfw, is_retry = m.config.consume_from_where, q == m.retry_queue
    if cfw == FROM_FIRST or (is_retry and cfw != FROM_TIMESTAMP):
        return 0, f"no offset, {cfw}" + (" (a retry queue)" if is_retry else "")
    if not b.up:
        return None, "no offset, and the max-offset or timestamp lookup goes to the master, which is down"
    if cfw == FROM_TIMESTAMP and not is_retry:
        return br.search_offset(b.queues[q], m.config.consume_timestamp), f"no offset, {cfw}: the offset searched"
    return b.queues[q].max_offset, f"no offset, {cfw}: the max offset" + (" (a retry queue)" if is_retry else "")


def _position_follows_consume_from_where(m: Model, s: State, a: Action, t: State) -> str | None:
    # Each position the step recorded (Ghost.starts), against R10.1 restated from the stores and the configuration,
    # never from the model's positioning helpers (which a planted bug overrides). A RebalanceQueryError's error strikes
    # the first query of its queue: 4.9.8 positions the queue there by consumeFromWhere and no later query of it
    # follows in the step (it has a pq). In 5.x the failed read places no pq, and a CONFIG list, which deals its
    # queues whatever topic is balanced (AllocateMessageQueueByConfig), asks for the queue again in the retry topic's
    # pass, where the query succeeds: with CONFIG a 5.x position of that queue is judged as an ordinary read.
    failed = None
    if isinstance(a, RebalanceQueryError) and (m.config.broker_error_reads_as_no_offset or m.config.strategy != CONFIG):
        failed = (a.client, a.queue)
    for client, uid, start, how in new_positions(s, t):
        q = next((q for q, pq in enumerate(t.clients[client].pqs) if pq is not None and pq.uid == uid), None)
        if q is None:
            continue
        expected, why = _rule_position(m, s, t, client, q, failed == (client, q))
        if expected is None:
            return f"client {client} queue {q}: pq {uid} was positioned at {start} ({how}), but {why}: no position"
        if start != expected:
            return (
                f"client {client} queue {q}: pq {uid} was positioned at {start} ({how}), where {why} gives {expected}"
            )
    return None


POSITION_FOLLOWS_CONSUME_FROM_WHERE = ActionProperty(
    "INV-37",
    "position_follows_consume_from_where",
    "A new pq starts where computePullFromWhereWithException says: at the offset its store answers (the broker's "
    "stored offset, a young queue's 0, the local file's entry); with none, by consumeFromWhere (LAST: the max offset, "
    "a retry queue 0; FIRST: 0; TIMESTAMP: the offset searched for consumeTimestamp, a retry queue the max offset); "
    "and a queue whose read failed (5.x) or whose lookup needs the master while it is down gets no pq this round.",
    "R10.1, R10.3, R10.4, R3.5, R2.3",
    "Where a pq starts decides what the group skips or consumes again; INV-15 and INV-9a judge a position against "
    "the group's commits, and a position off the rule with no commit yet (a first start, a retry queue, a young "
    "queue) skips or replays messages no other property counts.",
    _position_follows_consume_from_where,
)
