"""Orderly consumption: ``ConsumeMessageOrderlyService``'s loop over the locks of ``client_locks.py``.

RocketMQ classes: ``ConsumeMessageOrderlyService`` (``ConsumeRequest#run``, the loop under the
MessageQueueLock, ``processConsumeResult``, ``tryLockLaterAndReconsume``, ``submitConsumeRequestLater``;
R8.5-R8.7), ``ProcessQueue#takeMessages``, ``#commit``, ``#makeMessageToConsumeAgain`` (R6.4) and the orderly
removal of an unnecessary queue, which schedules 4.9.8's delayed unlock (R8.8). How the client takes, renews
and releases the broker locks is ``client_locks.py`` (``ClientLocksMixin``);
the broker's lock table ``orderly.py``.

Its action, before the class: ``TryLockLater``.

Its properties, after the class: INV-12 (one orderly listener per queue), INV-12b (a listener runs only under
a valid lock) and INV-3 (the orderly commit point). What INV-12 tolerates is ``anomalies.py``
(``ORDERLY_SHUTDOWN_OVERLAP``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from rmqspec.spec import broker_rules as br
from rmqspec.spec import orderly as lk
from rmqspec.spec.client_locks import DelayedUnlock
from rmqspec.spec.concurrent_consume import ApplyConsumeOffset, FinishConsume, StartConsume
from rmqspec.spec.enabling import ActionNotEnabled
from rmqspec.spec.property_types import ActionProperty, Invariant
from rmqspec.spec.state import (
    PULL_DROPPED,
    Broker,
    Client,
    ConsumeRequest,
    Message,
    OffsetUpdate,
    ProcessQueue,
    State,
)
from rmqspec.spec.state import bit_offsets as _bits
from rmqspec.spec.state import lowest_offset as _low
from rmqspec.spec.state import put_at as _put

if TYPE_CHECKING:
    from rmqspec.spec.actions import Action
    from rmqspec.spec.model import Model

# orderly consume loop (R8.5-R8.8)
TRY_LOCK_LATER_AT_RUN: Final = 100  # ConsumeRequest.run finds the pq not locked: tryLockLaterAndReconsume(100)
TRY_LOCK_LATER_IN_LOOP: Final = 10  # the loop finds it not locked or expired: tryLockLaterAndReconsume(10)
RESUBMIT_AFTER_LOCK: Final = 10  # tryLockLaterAndReconsume: lockOneMQ granted
RESUBMIT_AFTER_LOCK_DENIED: Final = 3_000  # tryLockLaterAndReconsume: lockOneMQ refused
MAX_TIME_CONSUME_CONTINUOUSLY: Final = 60_000  # rocketmq.client.maxTimeConsumeContinuously
SUBMIT_LATER_AFTER_LONG_RUN: Final = 10  # the loop yields after a long run: submitConsumeRequestLater(10)
SUSPEND_CURRENT_QUEUE_TIME: Final = 1_000  # suspendCurrentQueueTimeMillis, within the [10, 30 000] clamp
UNLOCK_DELAY_TIME: Final = 20_000  # rocketmq.client.unlockDelayTimeMills; 5.x's forced-removal age (R8.8)


# ConsumeOrderlyStatus (R8.6); an exception or null counts as SUSPEND. COMMIT and ROLLBACK act as
# SUCCESS with autoCommit (the default), so the model offers the two distinct answers.
ORDERLY_SUCCESS = "SUCCESS"
SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"
# With autoCommit = false (Config.orderly_auto_commit) the listener also answers COMMIT and ROLLBACK (R8.6).
ORDERLY_COMMIT = "COMMIT"
ORDERLY_ROLLBACK = "ROLLBACK"


# Actions of orderly consumption, each handled by its transition ``_<snake_case name>`` below
@dataclass(frozen=True, slots=True)
class TryLockLater:
    """orderly consume loop: the earliest due tryLockLaterAndReconsume task of pq ``pq_uid`` runs:
    lock(mq), then a ConsumeRequest 10 ms later if granted, 3 s if not (R8.5)."""

    client: int
    pq_uid: int


class OrderlyConsumeMixin:
    """``Model``'s transitions and helpers for orderly consumption; see the module docstring."""

    # --- the orderly consume loop (R6.4, R8.5-R8.8) -----------------------------------------------
    def _orderly_timers_enabled(self: Model, s: State, i: int, cl: Client) -> list[Action]:
        out: list[Action] = []
        uids = dict.fromkeys(uid for uid, _, due in cl.relocks if due <= s.now)
        out.extend(TryLockLater(i, uid) for uid in uids)
        queues = dict.fromkeys(q for q, due in cl.unlocks if due <= s.now)
        out.extend(DelayedUnlock(i, q) for q in queues)
        return out

    def _may_start(self: Model, cl: Client, r: ConsumeRequest, now: int) -> bool:
        """A submitted request may run once its time has come; an orderly run of a live pq also needs its
        queue's MessageQueueLock, which a run of the same client holds from its first take to its end (R8.5)."""
        if r.ready_at > now:
            return False
        if not self.orderly or not self._orderly_live(cl.pqs[r.queue], r.pq_uid):
            return True  # a dropped pq's request returns before it takes the monitor
        return all(x.queue != r.queue for x in cl.consuming) and all(u.queue != r.queue for u in cl.offset_updates)

    @staticmethod
    def _orderly_live(pq: ProcessQueue | None, uid: int) -> bool:
        """Is ``uid`` the table's pq and not dropped (what drops a pq, PullMixin)? A pq that left the table is
        dropped."""
        return pq is not None and pq.uid == uid and not pq.dropped and pq.pull_state != PULL_DROPPED

    def _submit_orderly_request(self: Model, cl: Client, q: int, uid: int, ready_at: int) -> Client:
        """submitConsumeRequest / submitConsumeRequestLater (lock before add (RebalanceMixin._locks_before_add), R8.5):
        a ConsumeRequest names only (pq, mq); the run takes its messages from the pq."""
        request = ConsumeRequest(cl.seq, q, uid, (), ready_at)
        return cl._replace(requests=(*cl.requests, request), seq=cl.seq + 1)

    def _relock_later(self: Model, s: State, i: int, uid: int, q: int, delay: int) -> State:
        """tryLockLaterAndReconsume(delay) (R8.5): a task on the service's scheduler."""
        cl = s.clients[i]
        return s._replace(clients=_put(s.clients, i, cl._replace(relocks=(*cl.relocks, (uid, q, s.now + delay)))))

    def _orderly_run(self: Model, s: State, i: int, r: ConsumeRequest) -> State:
        """ConsumeRequest.run of the orderly service (R8.5 step 1): a dropped pq returns; CLUSTERING
        needs ``locked`` and not ``isLockExpired()`` (30 s), else it tries to lock again in 100 ms;
        then the loop starts (beginTime = now)."""
        q = r.queue
        pq = s.clients[i].pqs[q]
        if not self._orderly_live(pq, r.pq_uid) or pq is None:
            return s
        if self.clustering and not (pq.locked and not self._lock_expired(pq, s.now)):
            return self._relock_later(s, i, pq.uid, q, TRY_LOCK_LATER_AT_RUN)
        return self._orderly_iterate(s, i, q, pq.uid, r.rid, s.now)

    def _lock_expired(self: Model, pq: ProcessQueue, now: int) -> bool:
        """ProcessQueue.isLockExpired (the expiry predicates, PullMixin.pull_expired), which the orderly loop checks
        (R8.5)."""
        return lk.client_lock_expired(pq.last_lock, now)

    def _orderly_iterate(self: Model, s: State, i: int, q: int, uid: int, rid: int, begin: int) -> State:
        """One pass of the orderly loop up to the listener call (R8.5 step 2): stop if dropped; in
        CLUSTERING, not locked or lock expired: try to lock again in 10 ms and stop; after 60 s of
        continuous consumption resubmit in 10 ms and stop; takeMessages(consumeMessageBatchMaxSize)
        (R6.4): none left clears ``consuming`` and stops; otherwise the listener receives them."""
        cl = s.clients[i]
        pq = cl.pqs[q]
        if not self._orderly_live(pq, uid) or pq is None:
            return s
        if self.clustering and (not pq.locked or self._lock_expired(pq, s.now)):
            return self._relock_later(s, i, uid, q, TRY_LOCK_LATER_IN_LOOP)
        if s.now - begin > MAX_TIME_CONSUME_CONTINUOUSLY:
            cl = self._submit_orderly_request(cl, q, uid, s.now + SUBMIT_LATER_AFTER_LONG_RUN)
            return s._replace(clients=_put(s.clients, i, cl))
        taken = _bits(pq.tree)[: self.config.consume_batch_size]
        if not taken:
            pq = pq._replace(consuming=False)
            return s._replace(clients=_put(s.clients, i, cl._replace(pqs=_put(cl.pqs, q, pq))))
        mask = sum(1 << o for o in taken)
        local = dict(pq.retry_times)
        queue = s.broker.queues[q]
        msgs = tuple((o, local.get(o, queue.messages[o].reconsume_times)) for o in taken)
        pq = pq._replace(tree=pq.tree & ~mask, consuming_tree=pq.consuming_tree | mask)
        listener = ConsumeRequest(rid, q, uid, msgs, s.now, begin)
        cl = cl._replace(pqs=_put(cl.pqs, q, pq), consuming=(*cl.consuming, listener))
        return self._deliver(s._replace(clients=_put(s.clients, i, cl)), i, q, msgs)

    def _orderly_finish_choices(self: Model, s: State, i: int, r: ConsumeRequest) -> list[Action]:
        out: list[Action] = [
            FinishConsume(i, r.rid, ORDERLY_SUCCESS, -1, 0),
            FinishConsume(i, r.rid, SUSPEND_CURRENT_QUEUE_A_MOMENT, -1, 0),
        ]
        if not self.config.orderly_auto_commit:  # R8.6: the two answers that mean something only then
            out += [FinishConsume(i, r.rid, ORDERLY_COMMIT, -1, 0), FinishConsume(i, r.rid, ORDERLY_ROLLBACK, -1, 0)]
        at_max = sum(1 for _, times in r.msgs if times >= self.max_reconsume)
        if at_max and s.broker.up and s.budget.send_back_failures > 0:
            out.extend(
                FinishConsume(i, r.rid, SUSPEND_CURRENT_QUEUE_A_MOMENT, -1, mask)
                for mask in range(1, 1 << at_max)
                if mask.bit_count() <= s.budget.send_back_failures
            )
        return out

    def _orderly_finish(self: Model, s: State, a: FinishConsume) -> State:
        """FinishConsume(client, rid, status, -1, send_back_fails), orderly. Enabled: that listener is
        running; ``status`` is SUCCESS or SUSPEND_CURRENT_QUEUE_A_MOMENT (an exception or null is a
        suspend); ``send_back_fails`` names at-max messages whose forwarding fails (budgeted; all fail
        when the broker is down). Effect: the listener returns (the consume lock is released) and
        processConsumeResult runs with autoCommit (R8.6) on the pq object, dropped or not:
        SUCCESS commits (``commit()``, R6.4). SUSPEND runs checkReconsumeTimes (R8.7): a message at
        maxReconsumeTimes is sent to %RETRY%<group> and the broker routes it to %DLQ%<group> (R7.6);
        any other message, or one whose send failed, counts one more local reconsume and suspends the
        batch: makeMessageToConsumeAgain puts the whole batch back in the tree and a new request runs
        after 1 s (suspendCurrentQueueTimeMillis); the run ends. A batch with every message forwarded
        commits. A commit leaves an OffsetUpdate for ApplyConsumeOffset.

        With ``Config.orderly_auto_commit`` false (R8.6): SUCCESS commits nothing (the batch stays in
        consumingMsgOrderlyTreeMap) and the loop goes on; COMMIT runs ``commit()``, which commits everything
        taken since the last commit; ROLLBACK runs ``rollback()``, which puts all of that back in the tree,
        and resubmits after 1 s; a SUSPEND whose batch was all forwarded commits nothing and goes on. A pq
        that left the table is committed as its batch alone (the model keeps no consuming map of it; its
        commit is never applied)."""
        i = a.client
        cl, k = self._running_listener(s, a)
        r = cl.consuming[k]
        at_max = [o for o, times in r.msgs if times >= self.max_reconsume]
        fails = a.send_back_fails
        auto = self.config.orderly_auto_commit
        answers = [ORDERLY_SUCCESS, SUSPEND_CURRENT_QUEUE_A_MOMENT]
        if not auto:
            answers += [ORDERLY_COMMIT, ORDERLY_ROLLBACK]
        if (
            a.status not in answers
            or a.ack_index != -1
            or fails < 0
            or fails >> len(at_max)
            or (fails and (a.status != SUSPEND_CURRENT_QUEUE_A_MOMENT or not s.broker.up))
            or fails.bit_count() > s.budget.send_back_failures
        ):
            raise ActionNotEnabled(a, "not a possible orderly listener answer or forwarding fault")
        cl = cl._replace(consuming=cl.consuming[:k] + cl.consuming[k + 1 :])
        q = r.queue
        pq = cl.pqs[q]
        on_pq = pq is not None and pq.uid == r.pq_uid  # the pq object is still in the table (maybe dropped)
        g = s.ghost
        idx = self._ledger(i) * self.q_count + q
        handled = g.handled[idx]
        b, budget = s.broker, s.budget
        batch = [o for o, _ in r.msgs]
        if a.status == ORDERLY_ROLLBACK:  # autoCommit false: rollback(), then submitConsumeRequestLater (R8.6)
            if on_pq and pq is not None:
                pq = pq._replace(tree=pq.tree | pq.consuming_tree, consuming_tree=0)
                cl = cl._replace(pqs=_put(cl.pqs, q, pq))
            cl = self._submit_orderly_request(cl, q, r.pq_uid, s.now + SUSPEND_CURRENT_QUEUE_TIME)
            return s._replace(clients=_put(s.clients, i, cl))
        if a.status in (ORDERLY_SUCCESS, ORDERLY_COMMIT):
            handled |= sum(1 << o for o in batch)
            suspend = False
        else:
            suspend, raised, j = False, {}, 0
            for o, times in r.msgs:
                if times >= self.max_reconsume:
                    failed = not b.up or fails >> j & 1
                    j += 1
                    if not failed:
                        b = self._forward_to_dlq(b, b.queues[q].messages[o], times, s.now)
                        handled |= 1 << o
                        continue
                suspend = True
                raised[o] = times + 1
            budget = budget._replace(send_back_failures=budget.send_back_failures - fails.bit_count())
            if suspend and self._suspend_puts_batch_back():
                if on_pq and pq is not None:  # makeMessageToConsumeAgain (R6.4); local reconsumeTimes (R8.7)
                    mask = sum(1 << o for o in batch)
                    times_of = dict(pq.retry_times) | raised
                    pq = pq._replace(
                        tree=pq.tree | mask,
                        consuming_tree=pq.consuming_tree & ~mask,
                        retry_times=tuple(sorted(times_of.items())),
                    )
                    cl = cl._replace(pqs=_put(cl.pqs, q, pq))
                cl = self._submit_orderly_request(cl, q, r.pq_uid, s.now + SUSPEND_CURRENT_QUEUE_TIME)
                g = g._replace(handled=_put(g.handled, idx, handled))
                return s._replace(clients=_put(s.clients, i, cl), broker=b, ghost=g, budget=budget)
        if not auto and a.status != ORDERLY_COMMIT:  # nothing committed: the loop takes the next batch (R8.6)
            g = g._replace(handled=_put(g.handled, idx, handled))
            s = s._replace(clients=_put(s.clients, i, cl), broker=b, ghost=g, budget=budget)
            return self._orderly_iterate(s, i, q, r.pq_uid, r.rid, r.begin)
        # commit() (R6.4) on the pq object; one that left the table has the batch in its consuming map
        taken = _bits(pq.consuming_tree) if not auto and on_pq and pq is not None and pq.consuming_tree else batch
        top = max(taken)
        offset = self._orderly_commit_offset(top)
        if not on_pq:  # the detached pq's msgCount falls; a late reply's correctTagsOffset reads it (what drops a pq,
            # PullMixin)
            pulls = tuple(
                p._replace(dropped_count=p.dropped_count - len(taken), dropped_empty=p.dropped_count == len(taken))
                if p.pq_uid == r.pq_uid
                else p
                for p in cl.pulls
            )
            cl = cl._replace(pulls=pulls)
        if on_pq and pq is not None:
            queue = b.queues[q]
            count = pq.msg_count - pq.consuming_tree.bit_count()
            bodies = sum(br.body_size(queue.messages[o]) for o in _bits(pq.consuming_tree))
            done = set(taken)
            pq = pq._replace(
                consuming_tree=0,
                msg_count=count,
                msg_size=0 if count == 0 else pq.msg_size - bodies,
                retry_times=tuple(e for e in pq.retry_times if e[0] not in done),
            )
            cl = cl._replace(pqs=_put(cl.pqs, q, pq))
        update = OffsetUpdate(r.rid, q, r.pq_uid, offset, r.begin)
        cl = cl._replace(offset_updates=(*cl.offset_updates, update))
        g = g._replace(handled=_put(g.handled, idx, handled))
        return s._replace(clients=_put(s.clients, i, cl), broker=b, ghost=g, budget=budget)

    def _suspend_puts_batch_back(self: Model) -> bool:
        """Does SUSPEND_CURRENT_QUEUE_A_MOMENT put the batch back in the tree, uncommitted (R8.6)? Yes."""
        return True

    def _orderly_commit_offset(self: Model, top: int) -> int:
        """ProcessQueue.commit's result: the largest consumed key + 1 (R6.4)."""
        return top + 1

    def _forward_to_dlq(self: Model, b: Broker, original: Message, times: int, now: int) -> Broker:
        """ConsumeMessageOrderlyService.sendMessageBack (R8.7): the producer sends a copy to
        %RETRY%<group> with RECONSUME_TIME = reconsumeTimes (5.1.1+: + 1) and MAX_RECONSUME_TIMES =
        max; the broker sees reconsumeTimes >= max and stores it in %DLQ%<group> (R7.6)."""
        counted = times + 1 if self.config.orderly_forward_counts_the_send else times
        return b._replace(dlq=(*b.dlq, original._replace(reconsume_times=counted, store_time=now, sent_back_at=now)))

    def _orderly_apply(self: Model, s: State, a: ApplyConsumeOffset) -> State:
        """ApplyConsumeOffset(client, rid), orderly. Enabled: that run's commit is pending. Effect: the
        end of processConsumeResult (R8.6): unless the pq was dropped, updateOffset(mq, commitOffset,
        increaseOnly=false); then the loop's next pass (R8.5), which may call the listener again."""
        i = a.client
        cl, u = self._take_offset_update(s, a)
        if self._offset_update_applies(cl.pqs[u.queue], u.pq_uid):
            cl = cl._replace(mem=_put(cl.mem, u.queue, self._updated(cl.mem[u.queue], u.offset, False)))
        s = s._replace(clients=_put(s.clients, i, cl))
        return self._orderly_iterate(s, i, u.queue, u.pq_uid, u.rid, u.begin)

    def _try_lock_later(self: Model, s: State, a: TryLockLater) -> State:
        """TryLockLater(client, pq_uid) (a timer). Enabled: running, and a tryLockLaterAndReconsume
        task of that pq is due (the earliest due runs). Effect (R8.5): lockOneMQ, i.e. lock(mq) (the client lock calls,
        ClientLocksMixin._lock), which refreshes whatever pq the table holds for mq; then submitConsumeRequestLater for
        the task's pq: 10 ms if the lock was granted, 3 s if not."""
        i = a.client
        cl = s.clients[i]
        due = [(t, k) for k, (uid, _, t) in enumerate(cl.relocks) if uid == a.pq_uid and t <= s.now]
        if not cl.running or not due:
            raise ActionNotEnabled(a, "no tryLockLaterAndReconsume task due for this pq")
        k = min(due)[1]
        uid, q, _ = cl.relocks[k]
        s = s._replace(clients=_put(s.clients, i, cl._replace(relocks=cl.relocks[:k] + cl.relocks[k + 1 :])))
        s, granted = self._lock(s, i, (q,), False)
        delay = RESUBMIT_AFTER_LOCK if q in granted else RESUBMIT_AFTER_LOCK_DENIED
        return s._replace(clients=_put(s.clients, i, self._submit_orderly_request(s.clients[i], q, uid, s.now + delay)))

    def _remove_orderly(
        self: Model, s: State, i: int, q: int, pq: ProcessQueue, uid: int, cause: str
    ) -> tuple[State, bool]:
        """removeUnnecessaryMessageQueue of an orderly CLUSTERING consumer for ``pq``, already dropped
        (R8.8). The consume lock is free when no listener of this pq runs (R8.5 step 3). Returns the
        state and whether the pq may leave the table; the caller takes it out.

        4.9.8: persist(mq) and removeOffset(mq) first; then, with the consume lock, unlockDelay: the
        broker unlock is sent 20 s later if the tree still caches messages, at once otherwise; without
        it the removal is refused. 5.x (5.2.0): persist(mq); with the write lock, or forced once the
        pq's lastLockTimestamp is more than 20 s old: persist again, removeOffset, unlock at once;
        otherwise refused, the memory offset kept."""
        free = all(r.pq_uid != pq.uid for r in s.clients[i].consuming)
        s = self._persist_one(s, i, q, uid, cause)
        if self.config.orderly_removal_waits_for_consume_lock:
            cl = s.clients[i]
            s = s._replace(clients=_put(s.clients, i, self._remove_offset(cl, q)))
            if not free:
                return s, False
            if pq.tree:
                return self._unlock_delay(s, i, q), True
            return self._unlock_oneway(s, i, q), True
        if not (free or s.now > pq.last_lock + UNLOCK_DELAY_TIME):
            return s, False
        s = self._persist_one(s, i, q, uid, cause)
        cl = s.clients[i]
        s = s._replace(clients=_put(s.clients, i, self._remove_offset(cl, q)))
        return self._unlock_oneway(s, i, q, late=not free), True  # forced: the listener may still run

    def _unlock_delay(self: Model, s: State, i: int, q: int) -> State:
        """4.9.8's unlockDelay for a removed pq that still caches messages: the oneway broker unlock of ``q`` is
        scheduled 20 s from now (``DelayedUnlock``, ClientLocksMixin)."""
        cl = s.clients[i]
        return s._replace(
            clients=_put(s.clients, i, cl._replace(unlocks=(*cl.unlocks, (q, s.now + UNLOCK_DELAY_TIME))))
        )

    def _detach(self: Model, cl: Client, q: int, pq: ProcessQueue) -> Client:
        """processQueueTable.remove(mq) of a dropped ``pq``. A pull of it still in flight remembers what
        its late reply reads: msgCount == 0 for correctTagsOffset (what drops a pq, PullMixin) and, orderly,
        ``consuming`` for putMessage's dispatch (putMessage, PullMixin._receive_pull)."""
        pulls = tuple(
            p._replace(
                dropped_empty=pq.msg_count == 0,
                dropped_consuming=pq.consuming,
                dropped_count=pq.msg_count if self.orderly else 0,
            )
            if p.pq_uid == pq.uid
            else p
            for p in cl.pulls
        )
        return cl._replace(pqs=_put(cl.pqs, q, None), pulls=pulls)


# Properties of orderly consumption (INV-12, INV-12b, INV-3)
def _single_orderly_listener(m: Model, s: State) -> str | None:
    """INV-12: at any instant at most one orderly listener runs per queue in the whole group (CLUSTERING;
    a BROADCASTING member owns its own progress). Two listeners of one client are never tolerated (the
    MessageQueueLock is local). Two clients' overlap is tolerated only when a timing margin broke (a
    broker crash emptied the lock table, or a consumer stalled) at most 30 s before the older listener
    began, or after: the margins of the lockAll timer (ClientLocksMixin._lock_all) then no longer hold, which the
    property list the project started from put outside INV-12's claim.

    A listener that outlived its consumer's ``Shutdown`` is not in ``consuming`` but in ``Client.orphaned``:
    ``unlockAll`` released its queue at the broker while it ran on (ORDERLY_SHUTDOWN_OVERLAP, step 1 of the shutdown
    order (ConsumerProcessMixin._shutdown), orderly BROADCASTING's locks (ClientLocksMixin)), so an overlap with it is
    that design's, with the orphan in the state as the cause; each message the next owner delivers beside it counts as
    the redelivery cause ``beside-orphaned-listener``. The overlap among the other listeners is checked as before."""
    if not m.orderly:
        return None
    for q in range(m.q_count):
        running = [
            (r.ready_at, i) for i, cl in enumerate(s.clients) if cl.running for r in cl.consuming if r.queue == q
        ]
        if len(running) < 2:
            continue
        clients = [i for _, i in running]
        if len(set(clients)) < len(clients):
            return f"queue {q}: client {clients} runs two orderly listeners at once at {s.now}"
        if not m.clustering:
            continue
        if m.tolerate_shared_client_id and len({m.identity[i] for i in clients}) == 1:
            continue  # the sharers of one clientId hold one lock (DUPLICATE_CLIENT_ID_ANOMALIES)
        broken = -1
        if m.tolerate_broken_margins:  # a broker crash, or a stall of one of these clients
            stalls = s.ghost.stalled_at
            broken = max([s.ghost.lock_table_lost_at, *(stalls[i] for i in clients if stalls)])
        if m.tolerate_stale_unlock:
            broken = max(broken, m._per_q_int(s.ghost.stale_unlocks)[q])
        if broken >= 0 and broken >= min(running)[0] - lk.CLIENT_LOCK_MAX_LIVE_TIME:
            continue
        return f"queue {q}: clients {sorted(clients)} run the orderly listener at once at {s.now}, nothing tolerated"
    return None


SINGLE_ORDERLY_LISTENER = Invariant(
    "INV-12",
    "single_orderly_listener",
    "At most one orderly listener runs per queue at any instant: never two in one client, and two clients "
    "only after a timing margin broke for them (broker crash, a stall of one of them) or a lock they relied "
    "on was released (ghost stale_unlocks) within 30 s before the older began.",
    "R8.1-R8.8",
    "Orderly consumption promises one consumer per queue in order; two listeners process the same "
    "messages concurrently and out of order (RMQ-09, RMQ-10).",
    _single_orderly_listener,
)


def _listener_holds_lock(m: Model, s: State, a: Action, t: State) -> str | None:
    """INV-12b: an orderly CLUSTERING listener is called only on a pq that is locked and whose lock is not
    expired (R8.5 steps 1-2), checked on the step that calls it."""
    if not (m.orderly and m.clustering and isinstance(a, (StartConsume, ApplyConsumeOffset))):
        return None
    before = {r.rid for r in s.clients[a.client].consuming}
    for r in t.clients[a.client].consuming:
        if r.rid in before:
            continue
        pq = t.clients[a.client].pqs[r.queue]
        if pq is None or not pq.locked or lk.client_lock_expired(pq.last_lock, t.now):
            last = None if pq is None else pq.last_lock
            return f"client {a.client} queue {r.queue}: listener called at {t.now}, lock taken at {last}"
    return None


LISTENER_HOLDS_LOCK = ActionProperty(
    "INV-12b",
    "listener_holds_lock",
    "An orderly CLUSTERING listener is called only on a pq that is locked and locked within the last 30 s.",
    "R8.5, R6.6",
    "The client-side validity check is what keeps a consumer whose renewals stopped from consuming after "
    "the broker could hand the queue over (RMQ-10).",
    _listener_holds_lock,
)


def _orderly_commit_point(m: Model, s: State, a: Action, t: State) -> str | None:
    """INV-3: an orderly commit is 1 + the largest offset of the batch it commits, and every offset of that
    batch was acknowledged or forwarded (FinishConsume); once applied, every offset below the memory offset
    was handled or is a declared skip (ApplyConsumeOffset)."""
    if not m.orderly:
        return None
    i = getattr(a, "client", -1)
    if isinstance(a, FinishConsume):
        r = next(r for r in s.clients[i].consuming if r.rid == a.rid)
        update = next((u for u in t.clients[i].offset_updates if u.rid == a.rid), None)
        if update is None:
            return None
        batch = [o for o, _ in r.msgs]
        pq = s.clients[i].pqs[r.queue]
        if not m.config.orderly_auto_commit and pq is not None and pq.uid == r.pq_uid and pq.consuming_tree:
            batch = _bits(pq.consuming_tree)  # autoCommit false: COMMIT commits everything taken since (R8.6)
        if update.offset != max(batch) + 1:
            return f"client {i} queue {r.queue}: batch {batch} commits {update.offset}, expected {max(batch) + 1}"
        idx = m._ledger(i) * m.q_count + r.queue
        open_ = [o for o in batch if not t.ghost.handled[idx] >> o & 1]
        if open_:
            return f"client {i} queue {r.queue}: commits {update.offset} over unhandled {open_}"
        return None
    if isinstance(a, ApplyConsumeOffset):
        u = next(u for u in s.clients[i].offset_updates if u.rid == a.rid)
        mem = t.clients[i].mem[u.queue]
        if mem is None or mem != u.offset or mem == s.clients[i].mem[u.queue]:
            return None  # not applied (dropped), or nothing changed
        idx = m._ledger(i) * m.q_count + u.queue
        low = t.broker.queues[u.queue].min_offset
        owed = ((1 << mem) - 1) & ~((1 << low) - 1)
        missing = owed & ~(t.ghost.handled[idx] | t.ghost.skipped[idx])
        if missing:
            return f"client {i} queue {u.queue}: memory offset {mem} passes unhandled offset {_low(missing)}"
    return None


ORDERLY_COMMIT_POINT = ActionProperty(
    "INV-3",
    "orderly_commit_point",
    "An orderly commit is 1 + the largest offset of its batch, every offset of the batch was acknowledged "
    "or forwarded, and the memory offset it sets passes only handled or skipped offsets.",
    "R6.4, R8.6, R8.7",
    "The orderly commit overwrites (increaseOnly=false): a wrong value is committed as is, and a commit "
    "over a suspended message loses it.",
    _orderly_commit_point,
)
