"""Consumption: ``ConsumeMessageConcurrentlyService``, send-back, the DLQ and ``cleanExpiredMsg``.

RocketMQ classes: ``ConsumeMessageConcurrentlyService`` (``submitConsumeRequest``, ``ConsumeRequest#run``,
``processConsumeResult``, ``sendMessageBack`` and the local resubmit after a failed send-back; R7.1-R7.4), the
broker's ``SendMessageProcessor#consumerSendMsgBack`` (retry schedule or ``%DLQ%``, R7.5, the delay levels
(broker_rules.retry_delay_ms), R7.8), ``ProcessQueue#removeMessage`` (R6.3) and ``ProcessQueue#cleanExpiredMsg``
(R6.8). The retry topic's subscription (R7.8) is decided here; the broker's registration of the retry queue and
``ScheduleMessageService``'s delivery to it apply it (``broker.py``). The actions ``StartConsume``, ``FinishConsume``
and ``ApplyConsumeOffset`` are handled here for both services: an orderly consumer's go to ``orderly_consume.py``.

Its actions, before the class: ``CleanExpiredMsg``, ``StartConsume``, ``FinishConsume``,
``ApplyConsumeOffset``.

Its properties, after the class: INV-1 (a pq's msgCount and msgSize), INV-2 (the memory offset never passes
an unhandled message), INV-2b (a consume result commits what removeMessage owes), INV-5 (a dropped pq is inert),
INV-22c (each redelivery inside its cause's extent), INV-23 (no message outlives its cleanExpireMsg run), INV-10
(retry delays and the DLQ threshold), INV-24 (a send-back has a cause), INV-24b (a message given up as sent back has
its copy), INV-24c (a consume result takes its batch out of the pq) and INV-28 (a new consume request counts each
message's attempts).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from rmqspec.spec import broker_rules as br
from rmqspec.spec.enabling import ActionNotEnabled
from rmqspec.spec.property_types import ActionProperty, Invariant
from rmqspec.spec.state import (
    PULL_DROPPED,
    Broker,
    BrokerQueue,
    Client,
    ConsumeRequest,
    Event,
    History,
    Message,
    OffsetUpdate,
    ProcessQueue,
    Scheduled,
    State,
    pq_key,
    step_events,
)
from rmqspec.spec.state import bit_offsets as _bits
from rmqspec.spec.state import lowest_offset as _low
from rmqspec.spec.state import put_at as _put

if TYPE_CHECKING:
    from rmqspec.spec.actions import Action
    from rmqspec.spec.model import Model

# The redelivery cause counted when a message is delivered again outside the extent of every cause the run shows
# (INV-22c reports it)
NO_REDELIVERY_CAUSE: Final = "no-cause"
SEND_BACK_RESUBMIT_DELAY: Final = 5_000  # local resubmit after a failed send-back (R7.3)
# cleanExpiredMsg (R6.8): at most this many messages per pq and run, each sent back at this delay level
CLEAN_EXPIRED_MAX_LOOPS: Final = 16
CLEAN_EXPIRED_DELAY_LEVEL: Final = 3
CLEAN_EXPIRE_MSG_TASK: Final = "cleanExpireMsg"  # the task's name for TaskDies (faults.BACKGROUND_TASKS)


# Consume statuses of the concurrent listener (R7.3).
CONSUME_SUCCESS = "CONSUME_SUCCESS"
RECONSUME_LATER = "RECONSUME_LATER"


# Actions of consumption, each handled by its transition ``_<snake_case name>`` below
@dataclass(frozen=True, slots=True)
class CleanExpiredMsg:
    """The concurrent consume service's cleanExpireMsg timer fires (every consumeTimeout): each pq of the table
    sends back and removes its first messages whose listener started more than consumeTimeout ago (R6.8)."""

    client: int


@dataclass(frozen=True, slots=True)
class StartConsume:
    client: int
    rid: int


@dataclass(frozen=True, slots=True)
class FinishConsume:
    """``ack_index`` as the listener set it (-1 fails the whole batch); ``send_back_fails`` is a
    bitmask over the failed messages whose send-back fails (budgeted). Orderly: ``status`` is
    ORDERLY_SUCCESS or SUSPEND_CURRENT_QUEUE_A_MOMENT, ``ack_index`` is -1, and ``send_back_fails``
    ranges over the batch's messages at maxReconsumeTimes, whose forwarding send fails."""

    client: int
    rid: int
    status: str
    ack_index: int
    send_back_fails: int


@dataclass(frozen=True, slots=True)
class ApplyConsumeOffset:
    client: int
    rid: int


class ConcurrentConsumeMixin:
    """``Model``'s transitions and helpers for consumption; see the module docstring."""

    # --- ConsumeRequest, processConsumeResult, send-back (R7.1-R7.8) ------------------------------
    def _start_consume(self: Model, s: State, a: StartConsume) -> State:
        """StartConsume(client, rid). Enabled: running and the request's time has come. Effect:
        ConsumeRequest.run (R7.2): a request of a dropped pq returns at once; otherwise the
        listener receives the messages (a delivery, recorded in the ghost ledger)."""
        i = a.client
        cl = s.clients[i]
        k = next((k for k, r in enumerate(cl.requests) if r.rid == a.rid), None)
        if not cl.running or k is None or not self._may_start(cl, cl.requests[k], s.now):
            raise ActionNotEnabled(a, "no such ready consume request, or its queue's run is in progress")
        r = cl.requests[k]
        cl = cl._replace(requests=cl.requests[:k] + cl.requests[k + 1 :])
        s = s._replace(clients=_put(s.clients, i, cl))
        if self.orderly:  # orderly consume loop (the orderly loop, OrderlyConsumeMixin._orderly_iterate)
            return self._orderly_run(s, i, r)
        pq = cl.pqs[r.queue]
        if pq is None or pq.uid != r.pq_uid or pq.pull_state == PULL_DROPPED:
            return s
        pq = self._stamp_consume_start(pq, r.msgs, s.now)
        cl = cl._replace(consuming=(*cl.consuming, r), pqs=_put(cl.pqs, r.queue, pq))
        return self._deliver(s._replace(clients=_put(s.clients, i, cl)), i, r.queue, r.msgs)

    def _stamp_consume_start(
        self: Model, pq: ProcessQueue, msgs: tuple[tuple[int, int], ...], now: int
    ) -> ProcessQueue:
        """ConsumeRequest.run stamps CONSUME_START_TIME on each message just before the listener (R7.2 step 3),
        which cleanExpiredMsg reads on the tree's first message (R6.8). A message no longer in the tree (the
        cleaner removed it, and a resubmitted request runs it again) is not recorded: nothing reads it."""
        stamps = dict(pq.consume_started)
        for o, _ in msgs:
            if pq.tree >> o & 1:
                stamps[o] = now
        return pq._replace(consume_started=tuple(sorted(stamps.items())))

    def _deliver(self: Model, s: State, i: int, q: int, msgs: tuple[tuple[int, int], ...]) -> State:
        """The listener receives ``msgs``: ghost deliveries (a redelivery if seen before) and history."""
        g = s.ghost
        idx = self._ledger(i) * self.q_count + q
        cq = i * self.q_count + q
        delivered, mine = g.delivered[idx], g.listened[cq]
        redeliveries = g.redeliveries
        causes = dict(g.redelivery_causes)
        hist = s.history
        ledger = self._ledger(i)
        # A listener that outlived a Shutdown holds these, never to be committed (the shutdown order,
        # ConsumerProcessMixin._shutdown; docs/spec.md, "What is real, ranked").
        orphaned = {
            o
            for j, other in enumerate(s.clients)
            if self._ledger(j) == ledger
            for r in other.orphaned
            if r.queue == q
            for o, _ in r.msgs
        }
        for o, times in msgs:
            if delivered >> o & 1:
                redeliveries += 1
                if mine >> o & 1:
                    cause = "local-retry"
                elif o in orphaned:
                    cause = "beside-orphaned-listener"
                else:
                    cause = self._resume_cause(s, i, q, o)
                causes[cause] = causes.get(cause, 0) + 1
            delivered |= 1 << o
            mine |= 1 << o
            hist = History(Event(s.now, "deliver", i, q, o, f"reconsumeTimes={times}"), hist)
        g = g._replace(
            delivered=_put(g.delivered, idx, delivered),
            listened=_put(g.listened, cq, mine),
            deliveries=g.deliveries + len(msgs),
            redeliveries=redeliveries,
            redelivery_causes=tuple(sorted(causes.items())),
        )
        return s._replace(ghost=g, history=hist)

    def _resume_cause(self: Model, s: State, i: int, q: int, o: int) -> str:
        """The redelivery cause of offset ``o``, which the current pq of (``i``, ``q``) had not delivered itself but
        another pq of the ledger had, if ``o`` lies in that cause's extent; ``NO_REDELIVERY_CAUSE`` otherwise (INV-22c).

        Both causes are a resume: the pq started at the position computePullFromWhere gave it (Ghost.starts: the last
        landed commit, a replica's value, or consumeFromWhere's position after a cause INV-9a accepted;
        RebalanceMixin._compute_pull_from_where) and pulls only from there on (the pull-status handling,
        PullMixin._receive_pull), so a message below its start is outside every cause. At or above it:
        ``beside-dropped-pq-listener`` when a running listener of a pq no longer live in its table (dropped by a
        rebalance, pull expiry or OFFSET_ILLEGAL: what drops a pq, PullMixin) still holds ``o``: its
        processConsumeResult will be skipped (R7.3), so the message was never handled, and the new pq (on the same
        consumer, re-created in the same rebalance, or on another) delivers it again; otherwise ``resumed-at-<how>``:
        ``o`` lay in the unpersisted window behind the resume, delivered before but not committed where the new pq
        read its start."""
        pq = s.clients[i].pqs[q]
        start = None if pq is None else self.start_of(s, pq_key(i, pq.uid))
        if start is None or o < start[0]:
            return NO_REDELIVERY_CAUSE
        ledger = self._ledger(i)
        for j, other in enumerate(s.clients):
            if self._ledger(j) != ledger:
                continue
            live = other.pqs[q]
            for r in other.consuming:
                if r.queue != q or all(k != o for k, _ in r.msgs):
                    continue
                if live is None or live.uid != r.pq_uid or live.pull_state == PULL_DROPPED or live.dropped:
                    return "beside-dropped-pq-listener"
        return "resumed-at-" + start[1]

    def _finish_choices(self: Model, s: State, i: int, r: ConsumeRequest) -> list[Action]:
        if self.orderly:
            return self._orderly_finish_choices(s, i, r)
        n = len(r.msgs)
        outcomes = [(CONSUME_SUCCESS, n - 1)]
        outcomes += [(CONSUME_SUCCESS, k) for k in range(-1, n - 1)]  # a batch acked in part, or not at all
        outcomes.append((RECONSUME_LATER, -1))
        out: list[Action] = []
        for status, ack in outcomes:
            out.append(FinishConsume(i, r.rid, status, ack, 0))
            failed = n - 1 - ack
            if failed and self.clustering and s.broker.up and s.budget.send_back_failures > 0:
                sendable = self._sendable(s.clients[i], r, r.msgs[ack + 1 :])
                out.extend(
                    FinishConsume(i, r.rid, status, ack, mask)
                    for mask in range(1, 1 << failed)
                    if mask.bit_count() <= s.budget.send_back_failures and not mask & ~sendable
                )
        return out

    def _sendable(self: Model, cl: Client, r: ConsumeRequest, failed: tuple[tuple[int, int], ...]) -> int:
        """Bit j set: processConsumeResult would send failed message j back (CLUSTERING, R7.3). 5.x skips a
        message no longer in its pq, which cleanExpiredMsg sent back and removed (R6.8, containsMessage)."""
        mask = (1 << len(failed)) - 1
        pq = cl.pqs[r.queue]
        if not self.skips_cleaned or pq is None or pq.uid != r.pq_uid:
            return mask
        for j, (o, _) in enumerate(failed):
            if not pq.tree >> o & 1:
                mask &= ~(1 << j)
        return mask

    def _finish_consume(self: Model, s: State, a: FinishConsume) -> State:
        """FinishConsume(client, rid, status, ack_index, send_back_fails). Enabled: running, the
        listener of that request is running, and the parameters are a possible listener answer
        (ack_index in [-1, n-1], -1 for RECONSUME_LATER) and send-back failures within budget (none
        forced when the broker is reachable; all of them when it is down). Effect:
        processConsumeResult (R7.3), skipped when the pq was dropped meanwhile (R7.2): acked
        messages are done; each failed one is sent back (R7.4, R7.5: to %DLQ% once reconsumeTimes
        reaches the maximum, else scheduled at delay level 3 + reconsumeTimes) or, in
        BROADCASTING, dropped. Messages whose send-back failed stay in the pq and are resubmitted
        locally after 5 s with reconsumeTimes + 1. The rest leave the pq (removeMessage, R6.3);
        its result is applied by ApplyConsumeOffset. An orderly consumer's listener: ``_orderly_finish``."""
        if self.orderly:
            return self._orderly_finish(s, a)
        i = a.client
        cl, k = self._running_listener(s, a)
        r = cl.consuming[k]
        n = len(r.msgs)
        ack = a.ack_index
        valid_ack = (a.status == CONSUME_SUCCESS and -1 <= ack <= n - 1) or (a.status == RECONSUME_LATER and ack == -1)
        failed = self._failed_by_answer(r.msgs, ack) if valid_ack else ()
        fails = a.send_back_fails
        if (
            not valid_ack
            or fails < 0
            or fails >> len(failed)
            or (fails and (not self.clustering or not s.broker.up or fails.bit_count() > s.budget.send_back_failures))
            or fails & ~self._sendable(cl, r, failed)
        ):
            raise ActionNotEnabled(a, "not a possible listener answer or send-back fault")
        cl = cl._replace(consuming=cl.consuming[:k] + cl.consuming[k + 1 :])
        q = r.queue
        pq = cl.pqs[q]
        if pq is None or pq.uid != r.pq_uid or pq.pull_state == PULL_DROPPED:  # dropped: skip processConsumeResult
            return s._replace(clients=_put(s.clients, i, cl))
        g = s.ghost
        idx = self._ledger(i) * self.q_count + q
        handled, skipped = g.handled[idx], g.skipped[idx]
        for o, _ in r.msgs[: ack + 1]:
            handled |= 1 << o
        b = s.broker
        back_failed: list[tuple[int, int]] = []
        queue = b.queues[q]
        dropped_failures = 0
        for j, (o, times) in enumerate(failed):
            if not self.clustering:  # BROADCASTING drops failures (R7.3): a declared skip
                skipped |= 1 << o
                dropped_failures |= 1 << o
            elif self.skips_cleaned and not pq.tree >> o & 1:
                continue  # 5.x: cleanExpiredMsg already sent it back and removed it (R7.3, R6.8)
            elif not b.up or fails >> j & 1:
                back_failed.append((o, times + 1))
            else:
                b = self._send_back(b, queue.messages[o], s.now)
                handled |= 1 << o
        g = g._replace(handled=_put(g.handled, idx, handled), skipped=_put(g.skipped, idx, skipped))
        if dropped_failures:
            g = g._replace(skips=(*g.skips, (idx, "failure-dropped", dropped_failures)))
        budget = s.budget
        if fails:
            budget = budget._replace(send_back_failures=budget.send_back_failures - fails.bit_count())
        removed = self._removed_after_consume(r.msgs, {o for o, _ in back_failed})
        pq, offset = self._remove_message(pq, removed, queue)
        if offset >= 0:
            cl = cl._replace(offset_updates=(*cl.offset_updates, OffsetUpdate(r.rid, q, r.pq_uid, offset)))
        if back_failed:
            cl = cl._replace(
                requests=(
                    *cl.requests,
                    ConsumeRequest(cl.seq, q, r.pq_uid, tuple(back_failed), s.now + SEND_BACK_RESUBMIT_DELAY),
                ),
                seq=cl.seq + 1,
            )
        cl = cl._replace(pqs=_put(cl.pqs, q, pq))
        return s._replace(clients=_put(s.clients, i, cl), broker=b, ghost=g, budget=budget)

    def _failed_by_answer(self: Model, msgs: tuple[tuple[int, int], ...], ack: int) -> tuple[tuple[int, int], ...]:
        """The messages of a request that processConsumeResult treats as failed: those past ackIndex (R7.3; -1 on
        RECONSUME_LATER fails them all)."""
        return msgs[ack + 1 :]

    def _removed_after_consume(self: Model, msgs: tuple[tuple[int, int], ...], back_failed: set[int]) -> list[int]:
        """The offsets processConsumeResult removes from the pq: all the batch's but those whose send-back
        failed, which are consumed again later (R7.3)."""
        return [o for o, _ in msgs if o not in back_failed]

    def _apply_consume_offset(self: Model, s: State, a: ApplyConsumeOffset) -> State:
        """ApplyConsumeOffset(client, rid). Enabled: running and that request's removeMessage result
        is pending. Effect: the end of processConsumeResult (R7.3): unless the pq was dropped in the
        meantime, updateOffset(mq, offset, increaseOnly=true). It is a separate step because
        other consume threads and the rebalance interleave between removeMessage and
        updateOffset; increaseOnly is what keeps a slower thread's lower result from winning.
        Orderly: ``_orderly_apply``."""
        if self.orderly:
            return self._orderly_apply(s, a)
        i = a.client
        cl, u = self._take_offset_update(s, a)
        if self._offset_update_applies(cl.pqs[u.queue], u.pq_uid):
            cl = cl._replace(mem=_put(cl.mem, u.queue, self._updated(cl.mem[u.queue], u.offset, True)))
        return s._replace(clients=_put(s.clients, i, cl))

    def _offset_update_applies(self: Model, pq: ProcessQueue | None, uid: int) -> bool:
        """Does processConsumeResult's updateOffset run for the pq ``uid``? Only while it is the table's pq and
        not dropped (R7.3; orderly the orderly commit (OrderlyConsumeMixin._orderly_finish), which also reads the pq's
        dropped flag: ``_orderly_live``)."""
        if self.orderly:
            return self._orderly_live(pq, uid)
        return pq is not None and pq.uid == uid and pq.pull_state != PULL_DROPPED

    def _running_listener(self: Model, s: State, a: FinishConsume) -> tuple[Client, int]:
        """The client and the index in ``consuming`` of request ``a.rid``'s running listener."""
        cl = s.clients[a.client]
        k = next((k for k, r in enumerate(cl.consuming) if r.rid == a.rid), None)
        if not cl.running or k is None:
            raise ActionNotEnabled(a, "no running listener for this request")
        return cl, k

    def _take_offset_update(self: Model, s: State, a: ApplyConsumeOffset) -> tuple[Client, OffsetUpdate]:
        """The client without request ``a.rid``'s pending OffsetUpdate, and that update."""
        cl = s.clients[a.client]
        k = next((k for k, u in enumerate(cl.offset_updates) if u.rid == a.rid), None)
        if not cl.running or k is None:
            raise ActionNotEnabled(a, "no pending offset update for this request")
        return cl._replace(offset_updates=cl.offset_updates[:k] + cl.offset_updates[k + 1 :]), cl.offset_updates[k]

    def _send_back(self: Model, b: Broker, original: Message, now: int, delay_level: int = 0) -> Broker:
        """CONSUMER_SEND_MSG_BACK on the broker (R7.5): the broker looks the message up by its
        commit-log offset, so the stored reconsumeTimes counts, not the client's local copy (which
        a failed send-back raised). At reconsumeTimes >= max the message goes to %DLQ%<group>;
        otherwise to SCHEDULE_TOPIC at ``delay_level``, where 0 (processConsumeResult's default) lets the
        broker choose 3 + reconsumeTimes (R7.5 step 6; cleanExpiredMsg asks 3, R6.8), reaching %RETRY%<group>
        with reconsumeTimes + 1 (the delay levels, broker_rules.retry_delay_ms)."""
        times = original.reconsume_times
        at_max = self._goes_to_dlq(times)
        msg = original._replace(reconsume_times=times + 1, store_time=now, sent_back_at=now)  # R7.5 step 7
        if at_max:
            return b._replace(dlq=(*b.dlq, msg))
        delay = br.retry_delay_ms(times) if delay_level == 0 else br.delay_level_ms(delay_level)
        entry = Scheduled(now + delay, msg)
        scheduled = tuple(sorted((*b.scheduled, entry), key=lambda e: e.due))
        return b._replace(scheduled=scheduled)

    def _goes_to_dlq(self: Model, times: int) -> bool:
        """Does the broker route a sent-back message with reconsumeTimes ``times`` to %DLQ%<group>? At
        reconsumeTimes >= maxReconsumeTimes (R7.5)."""
        return times >= self.max_reconsume

    def _remove_message(
        self: Model, pq: ProcessQueue, offsets: list[int], queue: BrokerQueue
    ) -> tuple[ProcessQueue, int]:
        """ProcessQueue.removeMessage (R6.3): the offset to commit is the lowest offset still held,
        or queueOffsetMax + 1 when the tree empties; -1 when the tree was already empty."""
        if pq.tree == 0:
            return pq, -1
        tree, taken, size = pq.tree, 0, pq.msg_size
        for o in offsets:
            if tree >> o & 1:
                tree &= ~(1 << o)
                taken += 1
                size -= br.body_size(queue.messages[o])
        count = self._msg_count_after_removal(pq.msg_count, taken)
        if count == 0:
            size = 0
        result = self._offset_still_held(tree, offsets) if tree else self._offset_when_tree_empties(pq)
        started = pq.consume_started
        if started:  # the stamps of messages that left the tree (R6.8)
            started = tuple(e for e in started if tree >> e[0] & 1)
        return pq._replace(tree=tree, msg_count=count, msg_size=size, consume_started=started), result

    def _msg_count_after_removal(self: Model, count: int, taken: int) -> int:
        """removeMessage's msgCount: less the ``taken`` messages that were in the tree (R6.3)."""
        return count - taken

    def _offset_still_held(self: Model, tree: int, offsets: list[int]) -> int:
        """removeMessage's result while the tree still holds messages: its lowest offset (R6.3)."""
        return _low(tree)

    def _offset_when_tree_empties(self: Model, pq: ProcessQueue) -> int:
        """removeMessage's result when the tree empties: queueOffsetMax + 1 (R6.3)."""
        return pq.queue_offset_max + 1

    # --- cleanExpiredMsg (R6.8) -------------------------------------------------------------------
    def _clean_expired_msg(self: Model, s: State, a: CleanExpiredMsg) -> State:
        """CleanExpiredMsg(client) (a timer). Enabled: running and the cleanExpireMsg timer due: a concurrent
        consumer's ConsumeMessageConcurrentlyService.start schedules it at a fixed rate of consumeTimeout, first
        after one period; the orderly service never does, and cleanExpiredMsg returns at once for an orderly
        consumer (R6.8). Effect: the next run one period later, then cleanExpireMsg: ProcessQueue.cleanExpiredMsg
        of every pq of processQueueTable (in queue order; the pqs are independent, so another order changes only
        the order of their retry copies). Per pq, at most min(16, |msgTreeMap|) times: the tree's first message
        is taken only if its CONSUME_START_TIME is set (its listener started, R7.2 step 3) and more than
        consumeTimeout ago, else the pass stops; sendMessageBack(msg, 3) (CONSUMER_SEND_MSG_BACK to its store
        host at delay level 3, else the producer fall-back, R7.4); then, as it is still the first key,
        removeMessage([msg]), whose result is dropped: no updateOffset here (R6.3). The next removeMessage or
        correctTagsOffset of the pq commits past it while its listener may still run; that listener's result
        goes through processConsumeResult later (R7.3: 4.9.8 sends a failure back a second time, 5.x skips a
        message no longer in its pq).
        The broker schedules the copy at level 3 (10 s) whatever its reconsumeTimes, or dead-letters it at
        reconsumeTimes >= max (R7.5 step 6). CLUSTERING: the message is handled, its copy being durable.
        BROADCASTING (cleanExpiredMsg has no mode check): the copy is made alike, but it reaches %RETRY%<group>,
        which no BROADCASTING consumer subscribes to (R7.8; the model's BROADCASTING broker has no retry queue,
        so DeliverScheduled drops it there), so this consumer drops the message, a declared skip
        "expired-to-unsubscribed-retry-topic". The send-back fails only while the broker is down: each attempt
        throws (the producer fall-back too), is logged, and the message stays (the loop takes the same first
        message again, so the pass ends)."""
        i = a.client
        cl = s.clients[i]
        if not cl.running or cl.next_clean is None or cl.next_clean > s.now:
            raise ActionNotEnabled(a, "cleanExpireMsg not due")
        s = s._replace(clients=_put(s.clients, i, cl._replace(next_clean=self._next_clean_run(cl.next_clean))))
        for q in range(self.q_count):
            pq = s.clients[i].pqs[q]
            if pq is not None and pq.consume_started:
                s = self._clean_expired_pq(s, i, q, pq)
        return s

    def _next_clean_run(self: Model, due: int) -> int | None:
        """When the cleanExpireMsg task runs next after its run due at ``due``: one period later
        (scheduleAtFixedRate(consumeTimeout), R6.8)."""
        return due + self.consume_timeout

    def _clean_expired_pq(self: Model, s: State, i: int, q: int, pq: ProcessQueue) -> State:
        """ProcessQueue.cleanExpiredMsg of one pq (R6.8; ``_clean_expired_msg``)."""
        b, g, hist = s.broker, s.ghost, s.history
        queue = b.queues[q]
        idx = self._ledger(i) * self.q_count + q
        handled, skipped, dropped = g.handled[idx], g.skipped[idx], 0
        for _ in range(min(CLEAN_EXPIRED_MAX_LOOPS, pq.tree.bit_count())):
            o = _low(pq.tree)
            started = next((t for k, t in pq.consume_started if k == o), None)
            if started is None or s.now - started <= self.consume_timeout or not b.up:
                break
            b, cause = self._send_back_expired(b, queue.messages[o], s.now)
            if cause == "expired-sent-back":
                handled |= 1 << o
            elif cause == "expired-to-unsubscribed-retry-topic":
                skipped |= 1 << o
                dropped |= 1 << o
            pq, _ = self._remove_message(pq, [o], queue)
            hist = History(Event(s.now, cause, i, q, o, f"consume started at {started}"), hist)
        if hist is s.history:
            return s
        g = g._replace(handled=_put(g.handled, idx, handled), skipped=_put(g.skipped, idx, skipped))
        if dropped:
            g = g._replace(skips=(*g.skips, (idx, "expired-to-unsubscribed-retry-topic", dropped)))
        cl = s.clients[i]
        return s._replace(
            clients=_put(s.clients, i, cl._replace(pqs=_put(cl.pqs, q, pq))), broker=b, ghost=g, history=hist
        )

    def _send_back_expired(self: Model, b: Broker, msg: Message, now: int) -> tuple[Broker, str]:
        """cleanExpiredMsg's ``sendMessageBack(msg, 3)`` (R6.8) and the history event it makes: CLUSTERING's
        retry topic redelivers the message ("expired-sent-back"); BROADCASTING's is not subscribed, so the
        message is dropped ("expired-to-unsubscribed-retry-topic")."""
        b = self._send_back(b, msg, now, CLEAN_EXPIRED_DELAY_LEVEL)
        return b, "expired-sent-back" if self.clustering else "expired-to-unsubscribed-retry-topic"

    def _ledger(self: Model, client: int) -> int:
        return 0 if self.clustering else client

    def _unsubscribed_bits(self: Model, queue: BrokerQueue) -> int:
        """Offsets of a topic queue whose tag the group does not subscribe to: never owed."""
        sub = self.config.subscription
        if sub is None:
            return 0
        return sum(1 << o for o, m in enumerate(queue.messages) if m.tag not in sub)


# Properties of consumption, send-back and the DLQ (INV-1, INV-2, INV-2b, INV-5, INV-10)
def _pq_accounting(m: Model, s: State) -> str | None:
    for i, cl in enumerate(s.clients):
        for q, pq in enumerate(cl.pqs):
            if pq is None:
                continue
            count = pq.tree.bit_count() + pq.consuming_tree.bit_count()  # R6.5: both maps count
            if pq.msg_count != count:
                return f"client {i} queue {q}: msgCount={pq.msg_count} but the tree holds {count}"
            queue = s.broker.queues[q]
            size = sum(br.body_size(queue.messages[o]) for o in _bits(pq.tree) + _bits(pq.consuming_tree))
            if pq.msg_size != size:
                return f"client {i} queue {q}: msgSize={pq.msg_size} but the bodies sum to {size}"
    return None


PQ_ACCOUNTING = Invariant(
    "INV-1",
    "pq_accounting",
    "A ProcessQueue's msgCount and msgSize match the messages it holds.",
    "R6.2-R6.5",
    "Flow control and the commit watermark read these counters; drift stalls or over-pulls a queue.",
    _pq_accounting,
)


def _commit_below_unprocessed(m: Model, s: State) -> str | None:
    for i, cl in enumerate(s.clients):
        base = m._ledger(i) * m.q_count
        for q, pq in enumerate(cl.pqs):
            mem = cl.mem[q]
            if pq is None or mem is None or pq.dropped or not (pq.tree | pq.consuming_tree):
                continue
            unprocessed = (pq.tree | pq.consuming_tree) & ~(s.ghost.handled[base + q] | s.ghost.skipped[base + q])
            if unprocessed and mem > _low(unprocessed):
                return f"client {i} queue {q}: offset {mem} passes unprocessed message {_low(unprocessed)}"
    return None


COMMIT_BELOW_UNPROCESSED = Invariant(
    "INV-2",
    "commit_below_unprocessed",
    "A live pq's memory offset never passes a message it holds that nobody has handled.",
    "R6.3, R7.3",
    "The memory offset is what the next persist commits; passing unprocessed work loses it on a crash.",
    _commit_below_unprocessed,
)


def _live_pq(pq: ProcessQueue | None, uid: int) -> bool:
    """Is ``pq`` the table's pq ``uid`` and not dropped (processConsumeResult's ``isDropped`` check, R7.3)?"""
    return pq is not None and pq.uid == uid and pq.pull_state != PULL_DROPPED


def _commit_keeps_up_with_removal(m: Model, s: State, a: Action, t: State) -> str | None:
    # Read from the pq before and after the step, never from the model's removeMessage helpers (which a planted bug
    # overrides). The orderly service commits by its own rule (INV-3); a dropped pq's result is INV-5's.
    if m.orderly or not isinstance(a, (FinishConsume, ApplyConsumeOffset)):
        return None
    i = a.client
    before, after = s.clients[i], t.clients[i]
    if isinstance(a, ApplyConsumeOffset):
        u = next((u for u in before.offset_updates if u.rid == a.rid), None)
        if u is None or not _live_pq(before.pqs[u.queue], u.pq_uid):
            return None
        mem = after.mem[u.queue]
        # updateOffset(mq, offset, increaseOnly=true) leaves at least the offset (PullMixin._updated)
        if mem is None or mem < u.offset:
            return f"client {i} queue {u.queue}: updateOffset of {u.offset} left the memory offset at {mem}"
        return None
    r = next((r for r in before.consuming if r.rid == a.rid), None)
    if r is None or not _live_pq(before.pqs[r.queue], r.pq_uid):
        return None
    pq, left = before.pqs[r.queue], after.pqs[r.queue]
    if pq is None or left is None or not pq.tree:  # an empty tree answers -1: nothing to commit (R6.3)
        return None
    owed = _low(left.tree) if left.tree else pq.queue_offset_max + 1
    queued = next((u.offset for u in after.offset_updates if u.rid == a.rid), None)
    if queued is None:
        return f"client {i} queue {r.queue}: the result of request {a.rid} queued no offset; removeMessage owes {owed}"
    if queued < owed:
        held = f"the tree emptied at queueOffsetMax {owed - 1}"
        if left.tree:
            held = f"the lowest offset still held is {owed}"
        return f"client {i} queue {r.queue}: the result of request {a.rid} commits {queued}, but {held}"
    return None


COMMIT_KEEPS_UP_WITH_REMOVAL = ActionProperty(
    "INV-2b",
    "commit_keeps_up_with_removal",
    "A live pq's consume result commits at least what removeMessage owes, the lowest offset the pq still holds or, "
    "once its tree empties, queueOffsetMax + 1, and its updateOffset leaves the memory offset at least there.",
    "R6.3, R7.3, R1.5",
    "INV-2 bounds the memory offset from above; a commit that falls short of what the pq no longer holds delivers "
    "consumed messages again after the next restart or handover, which at-least-once allows and so never reports.",
    _commit_keeps_up_with_removal,
)


def _dropped_pq_inert(m: Model, s: State, a: Action, t: State) -> str | None:
    if not isinstance(a, (FinishConsume, StartConsume, ApplyConsumeOffset)):
        return None
    cl = s.clients[a.client]
    reqs = (
        cl.offset_updates
        if isinstance(a, ApplyConsumeOffset)
        else cl.consuming
        if isinstance(a, FinishConsume)
        else cl.requests
    )
    r = next(r for r in reqs if r.rid == a.rid)
    pq = cl.pqs[r.queue]
    if pq is not None and _live_pq(pq, r.pq_uid) and not pq.dropped:
        return None
    if t.clients[a.client].mem != cl.mem or t.broker.offsets != s.broker.offsets:
        return f"client {a.client}: the result of dropped pq {r.pq_uid} (queue {r.queue}) changed an offset"
    if t.ghost.delivered != s.ghost.delivered:
        return f"client {a.client}: a consume request of dropped pq {r.pq_uid} reached the listener"
    return None


DROPPED_PQ_IS_INERT = ActionProperty(
    "INV-5",
    "dropped_pq_is_inert",
    "A dropped pq's consume requests reach no listener and its results change no offset.",
    "R6.7, R7.2, R7.3",
    "After a rebalance the old owner must not overwrite the new owner's progress (RMQ-05).",
    _dropped_pq_inert,
)


def _redelivery_within_cause(m: Model, s: State, a: Action, t: State) -> str | None:
    """INV-22c: the step counted no redelivery under ``NO_REDELIVERY_CAUSE`` (``_resume_cause``)."""
    before, after = dict(s.ghost.redelivery_causes), dict(t.ghost.redelivery_causes)
    if after.get(NO_REDELIVERY_CAUSE, 0) <= before.get(NO_REDELIVERY_CAUSE, 0):
        return None
    delivered = [(e.client, e.queue, e.offset) for e in step_events(s.history, t.history) if e.kind == "deliver"]
    for client, q, o in delivered:
        pq = t.clients[client].pqs[q]
        start = None if pq is None else m.start_of(t, pq_key(client, pq.uid))
        if pq is not None and start is not None and o < start[0]:
            return (
                f"client {client} queue {q}: pq {pq.uid} delivered offset {o} again, below its start {start[0]} "
                f"({start[1]}): outside the extent of every redelivery cause"
            )
    return f"{type(a).__name__}: a message delivered again outside the extent of every redelivery cause"


REDELIVERY_WITHIN_CAUSE = ActionProperty(
    "INV-22c",
    "redelivery_within_cause",
    "Every redelivery lies in the extent of the cause it is counted under: the same pq's retry, an orphaned "
    "listener's batch, or a resume: at or above the position the delivering pq started from (a dropped pq's "
    "running listener holding it, or the unpersisted window behind the resume).",
    "R5.7, R6.7, R7.3, R9.4, R10.1",
    "At-least-once delivery tolerates a duplicate only inside its cause's window; a pq delivering a message "
    "below where it resumed redelivers what the group had committed, which the per-cause counts would hide.",
    _redelivery_within_cause,
)


def _expired_start(pq: ProcessQueue) -> tuple[int, int] | None:
    """(offset, CONSUME_START_TIME) of the message heading ``pq``'s tree, if its listener has started (R6.8)."""
    if not pq.tree:
        return None
    o = _low(pq.tree)
    started = next((at for k, at in pq.consume_started if k == o), None)
    return None if started is None else (o, started)


def _expired_message_cleaned(m: Model, s: State, a: Action, t: State) -> str | None:
    """INV-23. The run: after a CleanExpiredMsg with the broker up, no pq of the client is headed by a message whose
    listener started more than consumeTimeout before the run, unless the run took its 16 from that pq. The missing run:
    a step that carries the clock past a held message's cleanup deadline (its listener's start plus twice
    consumeTimeout: it became eligible one period after the start, and the fixed-rate task runs within one more)
    while its running consumer has no cleanExpireMsg timer and no TaskDies killed it."""
    if not m.cleans_expired:
        return None
    timeout = m.consume_timeout
    if isinstance(a, CleanExpiredMsg):
        if not s.broker.up:
            return None  # the send-back throws, the message stays for the next run (R6.8, R7.4)
        before = s.clients[a.client]
        for q, pq in enumerate(t.clients[a.client].pqs):
            head = None if pq is None else _expired_start(pq)
            if pq is None or head is None or s.now - head[1] <= timeout:
                continue
            old = before.pqs[q]
            if old is not None and old.uid == pq.uid and (old.tree & ~pq.tree).bit_count() >= CLEAN_EXPIRED_MAX_LOOPS:
                continue  # this run's 16 passes were spent on the pq (R6.8)
            return (
                f"client {a.client} queue {q}: offset {head[0]}, whose listener started at {head[1]}, still heads "
                f"pq {pq.uid} after the cleanExpireMsg run at {s.now} (consumeTimeout {timeout})"
            )
        return None
    if t.now <= s.now:
        return None
    for i, cl in enumerate(t.clients):
        if not cl.running or cl.next_clean is not None or CLEAN_EXPIRE_MSG_TASK in cl.dead_tasks:
            continue
        for q, pq in enumerate(cl.pqs):
            head = None if pq is None else _expired_start(pq)
            if head is not None and s.now <= head[1] + 2 * timeout < t.now:
                return (
                    f"client {i} queue {q}: offset {head[0]}, whose listener started at {head[1]}, is held at {t.now}, "
                    f"past its cleanup deadline {head[1] + 2 * timeout}: no cleanExpireMsg task runs, and none died"
                )
    return None


EXPIRED_MESSAGE_CLEANED = ActionProperty(
    "INV-23",
    "expired_message_cleaned",
    "A concurrent consumer's message whose listener started more than consumeTimeout ago does not outlive its "
    "cleanup: the next cleanExpireMsg run with the broker up sends it back and removes it when it heads its pq "
    "(16 per pq and run), and that run is never missing unless TaskDies killed the task.",
    "R6.8, R7.4",
    "A listener stuck past consumeTimeout otherwise pins its message, and with it its queue's committed offset, "
    "for good: nothing else removes a message whose listener never returns.",
    _expired_message_cleaned,
)


def _retry_accounting(m: Model, s: State, a: Action, t: State) -> str | None:
    # Checked on the messages a step adds; the broker never changes them afterwards.
    before, after = s.broker, t.broker
    limit = m.max_reconsume
    # A scheduled copy is due exactly at its delay; it may reach the retry queue later (the broker
    # was down when it fell due), never earlier. cleanExpiredMsg asks for level 3 itself (R6.8): its copy is
    # checked against that level when scheduled, and against the schedule's due when delivered.
    added = [(e.message, e.due, True) for e in after.scheduled if e not in before.scheduled]
    cleaned = isinstance(a, CleanExpiredMsg)
    left = [e for e in before.scheduled if e not in after.scheduled]
    if m.retry_queue is not None:
        old, new = before.queues[m.retry_queue].messages, after.queues[m.retry_queue].messages
        added += [(x, x.store_time, False) for x in new[len(old) :]]
    for msg, due, exact in added:
        k = msg.reconsume_times
        if not 1 <= k <= limit:
            return f"retry message {msg.origin} has reconsumeTimes={k}, outside 1..{limit}"
        expected = msg.sent_back_at + br.retry_delay_ms(k - 1)
        if cleaned and exact:
            expected = msg.sent_back_at + br.delay_level_ms(CLEAN_EXPIRED_DELAY_LEVEL)
        if not exact:  # a delivery: its delay was checked when it was scheduled
            origin = next((e for e in left if e.message._replace(store_time=msg.store_time) == msg), None)
            expected = expected if origin is None else origin.due
        if due < expected or (exact and due != expected):
            return f"retry message {msg.origin} (reconsumeTimes={k}) due at {due}, expected {expected}"
    for msg in after.dlq[len(before.dlq) :]:  # routed on the stored count, stored with +1 (R7.5)
        if m.orderly:  # forwarded at or past the limit, counted once more from 5.2.0 (checkReconsumeTimes,
            # OrderlyConsumeMixin._orderly_finish)
            least = limit + 1 if m.config.orderly_forward_counts_the_send else limit
            if msg.reconsume_times < least:
                return f"DLQ message {msg.origin} has reconsumeTimes={msg.reconsume_times}, expected >= {least}"
        elif msg.reconsume_times != limit + 1:
            return f"DLQ message {msg.origin} has reconsumeTimes={msg.reconsume_times}, expected {limit + 1}"
    return None


RETRY_ACCOUNTING = ActionProperty(
    "INV-10",
    "retry_accounting",
    "A retry message with reconsumeTimes k (1 <= k <= max) is due at delay level 3+(k-1) after its send-back "
    "(level 3 when cleanExpiredMsg sent it back); a message enters the DLQ exactly when its stored "
    "reconsumeTimes reaches maxReconsumeTimes.",
    "R7.4-R7.7, R6.8",
    "Retry timing and the DLQ threshold are what users tune and alert on; off-by-ones lose a retry.",
    _retry_accounting,
)


def _send_back_has_a_cause(m: Model, s: State, a: Action, t: State) -> str | None:
    # Checked from the action's own parameters and the state before the step, never from the model's helpers.
    # FinishConsume of the concurrent service: processConsumeResult (R7.3) sends back exactly the messages past
    # ackIndex (all of them on RECONSUME_LATER), in CLUSTERING only (BROADCASTING drops its failures), and nothing
    # when the pq was dropped while the listener ran (R7.2). A send-back that fails is resubmitted locally and sent
    # back by a later FinishConsume, so a step may send back fewer, never others. CleanExpiredMsg: cleanExpiredMsg
    # (R6.8) sends back only a message whose listener started (CONSUME_START_TIME set) more than consumeTimeout ago.
    if m.orderly or not isinstance(a, FinishConsume | CleanExpiredMsg):
        return None
    added = [e.message for e in t.broker.scheduled if e not in s.broker.scheduled]
    added += list(t.broker.dlq[len(s.broker.dlq) :])
    if not added:
        return None
    cl = s.clients[a.client]
    if isinstance(a, CleanExpiredMsg):
        expired = {
            s.broker.queues[q].messages[o].origin
            for q, pq in enumerate(cl.pqs)
            if pq is not None
            for o, started in pq.consume_started
            if s.now - started > m.consume_timeout
        }
        extra = [msg.origin for msg in added if msg.origin not in expired]
        if extra:
            return (
                f"client {a.client}: cleanExpiredMsg sent {extra[0]} back, whose listener had not run for more than "
                f"consumeTimeout ({m.consume_timeout} ms)"
            )
        return None
    r = next(r for r in cl.consuming if r.rid == a.rid)
    pq = cl.pqs[r.queue]
    if not m.clustering:
        return f"client {a.client} queue {r.queue}: a BROADCASTING consumer sent {added[0].origin} back"
    if pq is None or pq.uid != r.pq_uid or pq.pull_state == PULL_DROPPED:
        return f"client {a.client} queue {r.queue}: sent {added[0].origin} back for a request of a dropped pq"
    failed = r.msgs if a.status == RECONSUME_LATER else r.msgs[a.ack_index + 1 :]
    messages = s.broker.queues[r.queue].messages
    origins = {messages[o].origin for o, _ in failed}
    extra = [msg.origin for msg in added if msg.origin not in origins]
    if extra:
        answer = f"{a.status} ackIndex={a.ack_index} of {len(r.msgs)}"
        return f"client {a.client} queue {r.queue}: sent {extra[0]} back although the listener answered {answer}"
    return None


SEND_BACK_HAS_A_CAUSE = ActionProperty(
    "INV-24",
    "send_back_has_a_cause",
    "A concurrent consumer sends a message back only with its cause: its listener failed it (the messages past "
    "ackIndex of a live pq's request, in CLUSTERING) or it outlived consumeTimeout after its listener started "
    "(cleanExpiredMsg).",
    "R6.8, R7.2, R7.3",
    "A message sent back that nothing failed is consumed again and, at maxReconsumeTimes, ends in the DLQ; "
    "at-least-once allows the redelivery, so no delivery property sees it.",
    _send_back_has_a_cause,
)


def _copies_made(s: State, t: State) -> Counter[tuple[int, int]]:
    """The origins of the copies a step stored at the broker: entries new in the schedule (SCHEDULE_TOPIC_XXXX) and
    messages new in the DLQ, counted with multiplicity."""
    made = Counter(e.message.origin for e in (Counter(t.broker.scheduled) - Counter(s.broker.scheduled)).elements())
    made.update(msg.origin for msg in t.broker.dlq[len(s.broker.dlq) :])
    return made


def _send_back_leaves_a_copy(m: Model, s: State, a: Action, t: State) -> str | None:
    # The converse of INV-24, read from the pq before and after the step and from the broker, never from the model's
    # send-back helpers (which a planted bug overrides). Concurrent: processConsumeResult (R7.3) takes a failed message
    # out of the pq only once its CONSUMER_SEND_MSG_BACK succeeded (R7.5: the broker stores the copy in the schedule,
    # or at maxReconsumeTimes in the DLQ); one whose send-back failed stays and is resubmitted locally. So every
    # failed message of a live pq's request that leaves its tree in the step has its copy made in the step, the broker
    # up or not. cleanExpiredMsg (R6.8) removes a message only after its sendMessageBack(msg, 3) returned, in both
    # modes (BROADCASTING's copy goes to a retry topic nobody subscribes: stored all the same). Orderly: a SUSPEND
    # answer forwards each message at maxReconsumeTimes to the DLQ (checkReconsumeTimes) and counts it handled, while
    # the pq puts the whole batch back; so there the messages the step counts handled are the ones owed a DLQ copy.
    if not isinstance(a, FinishConsume | CleanExpiredMsg):
        return None
    before, after = s.clients[a.client], t.clients[a.client]
    owed: list[tuple[int, int]] = []  # (queue, offset)
    if isinstance(a, CleanExpiredMsg):
        for q, pq in enumerate(before.pqs):
            left = after.pqs[q]
            if pq is not None and left is not None and left.uid == pq.uid:
                owed += [(q, o) for o in _bits(pq.tree & ~left.tree)]
        what = "was removed by cleanExpiredMsg after its send-back"
    elif m.orderly:
        from rmqspec.spec.orderly_consume import SUSPEND_CURRENT_QUEUE_A_MOMENT  # the orderly service imports this one

        if a.status != SUSPEND_CURRENT_QUEUE_A_MOMENT:
            return None
        r = next(r for r in before.consuming if r.rid == a.rid)
        idx = m._ledger(a.client) * m.q_count + r.queue
        owed = [(r.queue, o) for o in _bits(t.ghost.handled[idx] & ~s.ghost.handled[idx])]
        what = "was counted forwarded to the DLQ by the SUSPEND answer"
    else:
        r = next(r for r in before.consuming if r.rid == a.rid)
        pq, left = before.pqs[r.queue], after.pqs[r.queue]
        if not m.clustering or not _live_pq(pq, r.pq_uid) or pq is None or left is None:
            return None  # BROADCASTING drops its failures (R7.3); a dropped pq's result is skipped (INV-5)
        failed = r.msgs if a.status == RECONSUME_LATER else r.msgs[a.ack_index + 1 :]
        gone = pq.tree & ~left.tree
        owed = [(r.queue, o) for o, _ in failed if gone >> o & 1]
        what = f"left the pq as sent back by the {a.status} answer (ackIndex={a.ack_index} of {len(r.msgs)})"
    if not owed:
        return None
    made = _copies_made(s, t)
    for q, o in owed:
        origin = s.broker.queues[q].messages[o].origin
        if made[origin] == 0:
            return (
                f"client {a.client} queue {q}: offset {o} (origin {origin}) {what}, but the broker stored no copy of "
                "it, neither in the schedule nor in the DLQ"
            )
        made[origin] -= 1
    return None


SEND_BACK_LEAVES_A_COPY = ActionProperty(
    "INV-24b",
    "send_back_leaves_a_copy",
    "A message given up as sent back has its copy at the broker: a failed message that leaves a live pq's tree "
    "(CLUSTERING), a message cleanExpiredMsg removes, and an orderly message forwarded at maxReconsumeTimes each "
    "leave, in the same step, a copy in the schedule or the DLQ.",
    "R6.8, R7.3, R7.5, R8.7",
    "The copy is the message's only way to be consumed again: the pq lets it go and the commit passes it, and the "
    "ledger counts it handled, so a send-back that reports success without storing anything loses the message where "
    "no delivery or commit property looks.",
    _send_back_leaves_a_copy,
)


def _consume_result_removes_its_batch(m: Model, s: State, a: Action, t: State) -> str | None:
    # Read from the action's answer, the pq before and after the step and the broker's reachability, never from the
    # model's helpers. processConsumeResult (R7.3) of a live pq's request: in CLUSTERING the messages past ackIndex
    # are sent back, and those whose CONSUMER_SEND_MSG_BACK failed (the step's send_back_fails, or every one while the
    # broker is down) are resubmitted locally; then removeMessage (R6.3) takes every other message of the batch out of
    # the tree. BROADCASTING sends nothing back and removes the whole batch. A message the tree no longer held before
    # the step (cleanExpiredMsg took it) is no concern of this step.
    if m.orderly or not isinstance(a, FinishConsume):
        return None
    r = next(r for r in s.clients[a.client].consuming if r.rid == a.rid)
    pq, left = s.clients[a.client].pqs[r.queue], t.clients[a.client].pqs[r.queue]
    if not _live_pq(pq, r.pq_uid) or pq is None or left is None:
        return None
    first_failed = 0 if a.status == RECONSUME_LATER else a.ack_index + 1
    for k, (o, _) in enumerate(r.msgs):
        if not pq.tree >> o & 1:
            continue
        j = k - first_failed
        kept = m.clustering and j >= 0 and (not s.broker.up or a.send_back_fails >> j & 1 == 1)
        if bool(left.tree >> o & 1) != kept:
            answer = f"{a.status} ackIndex={a.ack_index} of {len(r.msgs)}"
            if kept:
                return (
                    f"client {a.client} queue {r.queue}: offset {o}, whose send-back failed, left pq {pq.uid} after "
                    f"the answer {answer}: nothing will consume it again"
                )
            return (
                f"client {a.client} queue {r.queue}: offset {o} stays in pq {pq.uid} after the answer {answer}, "
                "although it was acknowledged or sent back"
            )
    return None


CONSUME_RESULT_REMOVES_ITS_BATCH = ActionProperty(
    "INV-24c",
    "consume_result_removes_its_batch",
    "A live pq's consume result takes its batch out of the pq but the messages whose send-back failed (CLUSTERING: "
    "those the answer fails whose CONSUMER_SEND_MSG_BACK did not go through), which stay for the local resubmit.",
    "R6.3, R7.3",
    "A message acknowledged or sent back that stays in the tree holds the queue's commit below it for good and is "
    "never consumed again; one whose send-back failed that leaves the tree is lost behind the next commit. Neither "
    "shows as a duplicate or a regression.",
    _consume_result_removes_its_batch,
)


def _requests_count_attempts(m: Model, s: State, a: Action, t: State) -> str | None:
    """INV-28: a concurrent consumer's new ConsumeRequest hands each message with the reconsumeTimes it has had. A
    request of a pull's messages (submitConsumeRequest, PullMixin._submit_consume_requests) carries each stored
    message's count, the broker's own (a retry copy's counts its send-backs); a request resubmitted after a failed
    send-back (``submitConsumeRequestLater``, R7.3 step 3) carries each of its messages at one more than the run
    whose send-back failed, and only messages of that run. Read from the step: the requests it adds, the broker's
    queues and the run that finished."""
    if m.orderly:
        return None
    finished, finisher = None, -1
    if isinstance(a, FinishConsume):
        finished = next((r for r in s.clients[a.client].consuming if r.rid == a.rid), None)
        finisher = a.client
    for i, (before, after) in enumerate(zip(s.clients, t.clients, strict=True)):
        if before is after or after.requests == before.requests:
            continue
        known = {r.rid for r in before.requests} | {r.rid for r in before.consuming}
        for r in after.requests:
            if r.rid in known:
                continue
            if finished is not None and finisher == i:
                ran = dict(finished.msgs)
                for o, times in r.msgs:
                    if o not in ran or times != ran[o] + 1:
                        told = "not of the failed run" if o not in ran else f"{times}, after a run at {ran[o]}"
                        return (
                            f"client {i} queue {r.queue}: the local retry of request {finished.rid} hands offset "
                            f"{o} with reconsumeTimes {told}"
                        )
                continue
            stored = t.broker.queues[r.queue].messages
            for o, times in r.msgs:
                if o < len(stored) and times != stored[o].reconsume_times:
                    return (
                        f"client {i} queue {r.queue}: request {r.rid} hands offset {o} with reconsumeTimes {times}, "
                        f"the stored message has {stored[o].reconsume_times}"
                    )
    return None


REQUESTS_COUNT_ATTEMPTS = ActionProperty(
    "INV-28",
    "requests_count_attempts",
    "A concurrent consumer's new consume request hands each message with its reconsumeTimes: the stored count for a "
    "pull's messages, one more than the failed run's for a local retry after a failed send-back.",
    "R7.3, R7.5",
    "The listener decides by reconsumeTimes (give up, alert, skip), and the producer fall-back of a send-back "
    "stores that count and delays by it: a count that does not grow retries forever at the first delay and never "
    "reaches the DLQ.",
    _requests_count_attempts,
)
