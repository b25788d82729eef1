"""Pull: ``PullMessageService``, the pull callback, pull expiry, flow control, retention and OFFSET_ILLEGAL.

RocketMQ classes: ``DefaultMQPushConsumerImpl#pullMessage`` and its ``PullCallback`` (flow control, the
piggy-backed commit, the reply's effects on the pq and the offset store; R5.1, R5.2, R5.7, R1.5, R6.2,
R6.7; the found messages go to ``ConcurrentConsumeMixin._start_consume``), ``PullAPIWrapper`` (R5.3),
``ProcessQueue#isPullExpired`` (R6.6) and the rebalance's removal of an expired pq (applied in
``RebalanceMixin._update_process_queue_table``), the commit log's retention (``minOffset`` rises; the broker's
answers are ``broker_rules.pull_result`` and ``broker_rules.query_consumer_offset``) and the OFFSET_ILLEGAL
correction (4.9.8's task 10 s later, 5.x at once; R5.7).

Rules decided here and applied elsewhere: updateOffset's increaseOnly (R1.5) is also applied by the
rebalance's seeding of the memory offset (``rebalance.py``) and the commits (``concurrent_consume.py``,
``orderly_consume.py``); the expiry predicates (R6.6) include ``isLockExpired``, which the client's locks
(``client_locks.py``, ``orderly.client_lock_expired``) and the orderly loop (``orderly_consume.py``) apply; a pq's
``dropped`` flag (R6.7) is set by the rebalance, the orderly removal, the reset and shutdown as well as here; the
OFFSET_ILLEGAL path (R5.7) is applied by the slave (``slave.py``) and the reset (``admin_reset.py``), and its
decrease of the broker's offset is a declared cause in ``committed_offset.py``.

Its actions, before the class: ``SendPull``, ``ReceivePull``, ``RetentionDelete``, ``FixOffsetIllegal``.

Its properties, after the class: INV-20 (one PullRequest per pq), INV-4 (increaseOnly updates never lower
the memory offset), INV-14 (the piggy-backed commit), LIV-3 (a pull-expired pq does not survive a
rebalance), INV-17 (the OFFSET_ILLEGAL correction runs while its pq is owned) and INV-22 (a pq never pulls
again what it consumed).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from rmqspec.spec import broker_rules as br
from rmqspec.spec.concurrent_consume import ApplyConsumeOffset
from rmqspec.spec.enabling import ActionNotEnabled
from rmqspec.spec.property_types import ActionProperty, Invariant
from rmqspec.spec.rebalance import Rebalance, RebalanceQueryError, _allocation_throws
from rmqspec.spec.state import (
    PULL_DROPPED,
    PULL_IN_FLIGHT,
    PULL_READY,
    BrokerQueue,
    Client,
    ConsumeRequest,
    OffsetFix,
    ProcessQueue,
    PullInFlight,
    PullRequestMsg,
    PullResult,
    State,
    pq_key,
)
from rmqspec.spec.state import bit_offsets as _bits
from rmqspec.spec.state import put_at as _put

if TYPE_CHECKING:
    from rmqspec.spec.actions import Action
    from rmqspec.spec.model import Model

# Pull timers (R5.1, R5.7; docs/rules.md, "Constants").
# pullTimeDelayMillsWhenException (R5.1, R5.7): the push impl's field says 3000, but its constructor overwrites it
# with the consumer's, whose ClientConfig default is 1000 (docs/rules.md, "Constants").
PULL_DELAY_WHEN_EXCEPTION: Final = 1_000
OFFSET_ILLEGAL_FIX_DELAY: Final = 10_000  # executeTaskLater of the 4.9.8 OFFSET_ILLEGAL task (R5.7)
PULL_MAX_IDLE_TIME: Final = 120_000  # rocketmq.client.pull.pullMaxIdleTime: isPullExpired (R6.6)


# Actions of the pull, retention and OFFSET_ILLEGAL, each handled by its transition ``_<snake_case name>`` below
@dataclass(frozen=True, slots=True)
class SendPull:
    client: int
    queue: int


@dataclass(frozen=True, slots=True)
class ReceivePull:
    client: int
    pq_uid: int


@dataclass(frozen=True, slots=True)
class RetentionDelete:
    """Commit-log retention deletes the oldest remaining message of ``queue``: minOffset rises by one.
    Budgeted (``Config.retention_deletes``)."""

    queue: int


@dataclass(frozen=True, slots=True)
class FixOffsetIllegal:
    """The 4.9.8 OFFSET_ILLEGAL task, 10 s after the pull result: updateOffset(increaseOnly=false),
    persist, removeProcessQueue (R5.7). A declared cause of a falling offset."""

    client: int
    queue: int


class PullMixin:
    """``Model``'s transitions and helpers for pulling; see the module docstring."""

    # --- the pull request and its reply (R5.1-R5.7) -----------------------------------------------
    def _send_pull(self: Model, s: State, a: SendPull) -> State:
        """SendPull(client, queue). Enabled: running; the queue's pq has a ready PullRequest and is
        not over pullThresholdForQueue (R5.1 holds a pull back only when msgCount > threshold). Flow
        control's 50 ms retries are folded: the retry that finds room is this step, and the retries
        before it, which only set lastPullTimestamp (R5.1 step 2 comes before step 5), are applied
        by Tick (``_flow_control_retries``), so a pq held by flow control never looks pull-expired
        (R6.6). Effect: PULL_MESSAGE at nextOffset
        with the piggy-backed commit: CLUSTERING sends the memory offset and sets the flag only
        when it is > 0 (R5.2). If the broker is down the
        send fails and the pull is retried after 1 s (R5.7). A pq that an orderly removal left dropped
        in the table only loses its PullRequest (R5.1 step 1)."""
        i, q = a.client, a.queue
        cl = s.clients[i]
        pq = cl.pqs[q] if cl.running and 0 <= q < self.q_count else None
        if (
            pq is None
            or pq.pull_state != PULL_READY
            or pq.pull_ready_at > s.now
            or (pq.msg_count > self.config.pull_threshold_for_queue and not pq.dropped)
        ):
            raise ActionNotEnabled(a, "no ready pull request under the flow-control threshold")
        if pq.dropped:  # orderly consume loop: R5.1 step 1, a dropped pq's PullRequest is discarded
            pq = pq._replace(pull_state=PULL_DROPPED)
            return s._replace(clients=_put(s.clients, i, cl._replace(pqs=_put(cl.pqs, q, pq))))
        pq = pq._replace(last_pull=s.now)  # R5.1 step 2
        if self.orderly:  # orderly: R5.1 step 6
            s, pq, ready = self._orderly_pull_gate(s, i, q, pq)
            if not ready:
                return s
            cl = s.clients[i]
        to_slave = not s.broker.up  # slaves: the route lacks the master, so any address of the name (R5.3)
        if to_slave and s.slave is None:
            pq = pq._replace(pull_ready_at=s.now + PULL_DELAY_WHEN_EXCEPTION)
            return s._replace(clients=_put(s.clients, i, cl._replace(pqs=_put(cl.pqs, q, pq))))
        commit_value = 0  # R5.2: only CLUSTERING reads the store (READ_FROM_MEMORY, -1 if absent)
        if self.clustering:
            commit_value = self._piggyback_offset(cl, q, pq)
        # pullKernelImpl clears COMMIT_OFFSET for a slave's address (R5.3)
        request = PullRequestMsg(q, pq.uid, pq.next_offset, commit_value > 0 and not to_slave, commit_value, to_slave)
        cl = cl._replace(
            pqs=_put(cl.pqs, q, pq._replace(pull_state=self._pull_state_once_sent())),
            pulls=(*cl.pulls, PullInFlight(q, pq.uid, pq.next_offset, -1, None, None, from_slave=to_slave)),
            channel=(*cl.channel, request),
        )
        return s._replace(clients=_put(s.clients, i, cl))

    def _piggyback_offset(self: Model, cl: Client, q: int, pq: ProcessQueue) -> int:
        """The commitOffset a CLUSTERING pull carries: ``readOffset(mq, READ_FROM_MEMORY)``, -1 if absent
        (R5.2)."""
        mem = cl.mem[q]
        return mem if mem is not None else -1

    def _pull_state_once_sent(self: Model) -> int:
        """Where a sent pull leaves its PullRequest: with the pull in flight, until the PullCallback re-queues
        it (R5.1)."""
        return PULL_IN_FLIGHT

    def _receive_pull(self: Model, s: State, a: ReceivePull) -> State:
        """ReceivePull(client, pq_uid). Enabled: running and the broker has processed that pull.
        Effect: the PullCallback (R5.7) with the result computed from the queue now, which models
        long polling (a held request is answered when a message arrives; the broker's pull handler
        (BrokerMixin._broker_receive) commits only once). FOUND: putMessage, submit consume requests in batches of
        consumeMessageBatchMaxSize, nextOffset := nextBeginOffset. NO_NEW_MSG / NO_MATCHED_MSG: nextOffset :=
        nextBeginOffset, then correctTagsOffset: if the pq holds nothing, updateOffset(nextOffset, increaseOnly). A
        broken connection (broker crashed meanwhile) or an error code is an exception: pull again after 1 s. A reply for
        a dropped pq changes nothing, except correctTagsOffset (R6.7)."""
        i = a.client
        cl = s.clients[i]
        found_at = next((k for k, p in enumerate(cl.pulls) if p.pq_uid == a.pq_uid and p.epoch != -1), None)
        if not cl.running or found_at is None:
            raise ActionNotEnabled(a, "no processed pull for this pq")
        pull = cl.pulls[found_at]
        cl = cl._replace(pulls=cl.pulls[:found_at] + cl.pulls[found_at + 1 :])
        s = s._replace(clients=_put(s.clients, i, cl))
        q = pull.queue
        pq = cl.pqs[q]
        live = pq is not None and pq.uid == pull.pq_uid
        failed = (
            (not pull.from_slave and (not s.broker.up or pull.epoch != s.broker.epoch))  # slaves: never crash
            or (pull.result is not None and pull.result.status == br.PULL_ERROR)
        )
        if failed:
            if live and pq is not None:
                pq = pq._replace(pull_state=PULL_READY, pull_ready_at=s.now + PULL_DELAY_WHEN_EXCEPTION)
                s = s._replace(clients=_put(s.clients, i, cl._replace(pqs=_put(cl.pqs, q, pq))))
            return s
        queue = s.broker.queues[q]
        result = pull.result if pull.result is not None else self._pull_result(s, q, pull.offset, pull.from_slave)
        if result.status == br.OFFSET_ILLEGAL:
            return self._offset_illegal(s, i, pull, result.next_begin)
        if not live or pq is None:
            if result.status == br.FOUND and self.orderly:  # putMessage on the detached pq; dispatch if idle
                if result.found and not pull.dropped_consuming:
                    cl = self._submit_orderly_request(cl, q, pull.pq_uid, s.now)
            elif result.status == br.FOUND:  # no dropped check here: requests are submitted (R5.7)
                cl = self._submit_consume_requests(cl, q, pull.pq_uid, result.found, queue, s.now)
            elif pull.dropped_empty:
                raised = self._updated(cl.mem[q], result.next_begin, True)
                current = cl.pqs[q]  # the shared entry now belongs to the table's pq (R6.7's exception)
                old = cl.mem[q]
                if self.orderly and (old is None or raised > old) and current is not None:  # "orderly-overwrite"
                    keys = s.ghost.raised_by_tags | {pq_key(i, current.uid)}
                    s = s._replace(ghost=s.ghost._replace(raised_by_tags=keys))
                cl = cl._replace(mem=_put(cl.mem, q, raised))
            return s._replace(clients=_put(s.clients, i, cl))
        if result.status == br.FOUND:
            tree, count, size, qmax = pq.tree, pq.msg_count, pq.msg_size, pq.queue_offset_max
            for o in result.found:  # ProcessQueue.putMessage (R6.2)
                if not tree >> o & 1:
                    tree |= 1 << o
                    count += 1
                    size += br.body_size(queue.messages[o])
                    qmax = o
            pq = pq._replace(tree=tree, msg_count=count, msg_size=size, queue_offset_max=qmax)
            g = s.ghost
            cq = i * self.q_count + q
            got = g.received[cq]
            for o in result.found:
                got |= 1 << o
            s = s._replace(ghost=g._replace(received=_put(g.received, cq, got)))
            if self.orderly:  # a replaced message is the stored one again; dispatchToConsume (R6.2, lock before add,
                # RebalanceMixin._locks_before_add)
                found = set(result.found)
                pq = pq._replace(retry_times=tuple(e for e in pq.retry_times if e[0] not in found))
                if result.found and not pq.consuming:
                    pq = pq._replace(consuming=True)
                    cl = self._submit_orderly_request(cl, q, pq.uid, s.now)
            else:
                if pq.consume_started:  # a replaced message object carries no CONSUME_START_TIME (R6.2,
                    # cleanExpiredMsg, ConcurrentConsumeMixin._clean_expired_msg)
                    found = set(result.found)
                    pq = pq._replace(consume_started=tuple(e for e in pq.consume_started if e[0] not in found))
                cl = self._submit_consume_requests(cl, q, pq.uid, result.found, queue, s.now)
        elif pq.msg_count == 0:  # correctTagsOffset
            raised = self._updated(cl.mem[q], result.next_begin, True)
            before = cl.mem[q]
            if self.orderly and (before is None or raised > before):  # ghost for INV-8's "orderly-overwrite"
                s = s._replace(ghost=s.ghost._replace(raised_by_tags=s.ghost.raised_by_tags | {pq_key(i, pq.uid)}))
            cl = cl._replace(mem=_put(cl.mem, q, raised))
        pq = pq._replace(next_offset=self._next_pull_offset(result), pull_state=PULL_READY, pull_ready_at=s.now)
        cl = cl._replace(pqs=_put(cl.pqs, q, pq))
        return s._replace(clients=_put(s.clients, i, cl))

    def _next_pull_offset(self: Model, result: PullResult) -> int:
        """The PullCallback's ``pullRequest.setNextOffset``: the reply's nextBeginOffset (R5.7)."""
        return result.next_begin

    def _submit_consume_requests(
        self: Model, cl: Client, q: int, uid: int, found: tuple[int, ...], queue: BrokerQueue, now: int
    ) -> Client:
        """submitConsumeRequest: consecutive chunks of consumeMessageBatchMaxSize (submitConsumeRequest,
        ConcurrentConsumeMixin._start_consume)."""
        requests = list(cl.requests)
        seq = cl.seq
        batch = self.config.consume_batch_size
        for k in range(0, len(found), batch):
            msgs = tuple((o, queue.messages[o].reconsume_times) for o in found[k : k + batch])
            requests.append(ConsumeRequest(seq, q, uid, msgs, now))
            seq += 1
        return cl._replace(requests=tuple(requests), seq=seq)

    def _updated(self: Model, old: int | None, value: int, increase_only: bool) -> int:
        """OffsetStore.updateOffset (R1.5): a new entry takes the value; increaseOnly keeps the max."""
        if old is None or not increase_only:
            return value
        return old if old >= value else value

    # --- pull expiry and flow control (R6.6; applied by RebalanceMixin._update_process_queue_table) ------------
    def pull_expired(self: Model, s: State, pq: ProcessQueue) -> bool:
        """ProcessQueue.isPullExpired (R6.6): no pullMessage run for more than 120 s. Phase A of the rebalance's pq
        table update (RebalanceMixin._update_process_queue_table) drops such a pq (push consumers) and Phase B
        re-creates it in the same pass. A pq held by flow control is never expired: its 50 ms retries keep
        lastPullTimestamp fresh, which every Tick applies (``_flow_control_retries``; docs/spec.md, "Pull expiry")."""
        return s.now - pq.last_pull > PULL_MAX_IDLE_TIME

    def flow_controlled(self: Model, pq: ProcessQueue, now: int) -> bool:
        """pullMessage would take this pq's PullRequest now and stop at flow control (R5.1 step 5): the
        request is runnable and msgCount > pullThresholdForQueue (a dropped pq's request is discarded
        first, step 1)."""
        return (
            pq.pull_state == PULL_READY
            and pq.pull_ready_at <= now
            and pq.msg_count > self.config.pull_threshold_for_queue
            and not pq.dropped
        )

    def _flow_control_retries(self: Model, s: State) -> State:
        """What pullMessage's flow-control retries did while the clock advanced to ``s.now`` (R5.1
        steps 2 and 5): a PullRequest held by flow control is run every 50 ms, and each run only sets
        lastPullTimestamp and re-queues itself 50 ms later. The retries of one Tick are folded into
        the last one, at the new time: ``last_pull := now`` (the last real retry ran less than 50 ms
        before), and the request stays runnable, so the run that finds room is the next SendPull.
        Nothing else of the state changes, so a per-50 ms step would only add no-op steps; this keeps
        the state finite and the behaviours the same: flow control alone never makes a pq
        pull-expired (R6.6, the rebalance's pq table update, RebalanceMixin._update_process_queue_table). A stalled JVM
        runs no retry."""
        clients = s.clients
        for i, cl in enumerate(clients):
            if not cl.running or self._stalled(s, cl):
                continue
            pqs = cl.pqs
            for q, pq in enumerate(pqs):
                if pq is not None and pq.last_pull != s.now and self.flow_controlled(pq, s.now):
                    pqs = _put(pqs, q, pq._replace(last_pull=s.now))
            if pqs is not cl.pqs:
                clients = _put(clients, i, cl._replace(pqs=pqs))
        return s if clients is s.clients else s._replace(clients=clients)

    # --- retention and OFFSET_ILLEGAL (R5.7; the statuses are broker_rules.pull_result) --------------------------
    def _retention_and_fix_enabled(self: Model, s: State) -> list[Action]:
        out: list[Action] = []
        b = s.broker
        if b.up and s.budget.retention_deletes > 0:
            out.extend(RetentionDelete(q) for q in self.topic_queues if b.queues[q].min_offset < b.queues[q].max_offset)
        for i, cl in enumerate(s.clients):
            if cl.running and not self._stalled(s, cl):
                due = dict.fromkeys(f.queue for f in cl.offset_fixes if f.due <= s.now)
                out.extend(FixOffsetIllegal(i, q) for q in due)
        return out

    def _retention_delete(self: Model, s: State, a: RetentionDelete) -> State:
        """RetentionDelete(queue) (budgeted). Enabled: the broker is up, ``queue`` is a topic queue
        holding a message at or above minOffset, and ``retention_deletes`` budget is left. Effect:
        commit-log retention deleted the file holding the queue's oldest remaining message, and the
        consume queue's minOffset rises by one (the pull statuses, broker_rules.pull_result). A pull below it now gets
        OFFSET_ILLEGAL with nextBeginOffset = minOffset (the pull statuses (broker_rules.pull_result), R5.7); with
        message 0 gone the queue is no longer young, so a group with no offset is told QUERY_NOT_FOUND (the offset
        query's answer, broker_rules.query_consumer_offset). Messages below minOffset are no longer owed (INV-9 counts
        from minOffset)."""
        q = a.queue
        b = s.broker
        queue = b.queues[q] if 0 <= q < self.config.queues else None
        if queue is None or not b.up or s.budget.retention_deletes <= 0 or queue.min_offset >= queue.max_offset:
            raise ActionNotEnabled(a, "broker down, no message left to delete, or retention budget used up")
        queue = queue._replace(min_offset=queue.min_offset + 1)
        return s._replace(
            broker=b._replace(queues=_put(b.queues, q, queue)),
            budget=s.budget._replace(retention_deletes=s.budget.retention_deletes - 1),
        )

    def _offset_illegal(self: Model, s: State, i: int, pull: PullInFlight, next_begin: int) -> State:
        """The PullCallback's OFFSET_ILLEGAL branch (R5.7), which runs whether or not the pq was
        dropped meanwhile: nextOffset := nextBeginOffset, pq.dropped := true (its PullRequest is not
        re-queued, PULL_DROPPED). 4.9.8 schedules the correction 10 s later (FixOffsetIllegal);
        5.2.0+ runs it at once, then rebalanceImmediately (``Config.offset_illegal_fixed_at_once``).
        5.2.0's updateAndFreezeOffset freezes the entry until the removeOffset of the same task: at
        this model's granularity (the task is one step) the freeze has no effect, except after a
        removeProcessQueue that finds no pq, which 5.2.0 leaves frozen; not modelled."""
        cl = s.clients[i]
        q = pull.queue
        pq = cl.pqs[q]
        live = pq is not None and pq.uid == pull.pq_uid and pq.pull_state != PULL_DROPPED
        if live and pq is not None:
            cl = cl._replace(pqs=_put(cl.pqs, q, pq._replace(next_offset=next_begin, pull_state=PULL_DROPPED)))
        if not self._offset_illegal_fixed_at_once():
            fix = OffsetFix(q, pull.pq_uid, next_begin, s.now + OFFSET_ILLEGAL_FIX_DELAY, live)
            cl = cl._replace(offset_fixes=(*cl.offset_fixes, fix))
            return s._replace(clients=_put(s.clients, i, cl))
        s = self._apply_offset_fix(s._replace(clients=_put(s.clients, i, cl)), i, q, next_begin)
        cl = s.clients[i]
        return s._replace(clients=_put(s.clients, i, cl._replace(rebalance_requested=True)))

    def _offset_illegal_fixed_at_once(self: Model) -> bool:
        """Does the OFFSET_ILLEGAL correction run in the PullCallback (5.2.0+) rather than 10 s later (4.9.8)?
        ``Config.offset_illegal_fixed_at_once`` (R5.7)."""
        return self.config.offset_illegal_fixed_at_once

    def _fix_offset_illegal(self: Model, s: State, a: FixOffsetIllegal) -> State:
        """FixOffsetIllegal(client, queue) (a timer, 4.9.8). Enabled: running and the OFFSET_ILLEGAL
        task of ``queue`` scheduled 10 s earlier is due (the earliest, if several). Effect: the task
        (R5.7): updateOffset(mq, nextOffset, increaseOnly=false), persist(mq), removeProcessQueue(mq),
        which removes *whatever pq the table now holds* for mq, drops it and runs
        removeUnnecessaryMessageQueue (persist, removeOffset). The queue waits for the next
        rebalance. A declared cause of a falling offset (commits with cause "offset-illegal-fix")."""
        i, q = a.client, a.queue
        cl = s.clients[i]
        k = next((k for k, f in enumerate(cl.offset_fixes) if f.queue == q and f.due <= s.now), None)
        if not cl.running or k is None:
            raise ActionNotEnabled(a, "no OFFSET_ILLEGAL task due for this queue")
        fix = cl.offset_fixes[k]
        cl = cl._replace(offset_fixes=cl.offset_fixes[:k] + cl.offset_fixes[k + 1 :])
        return self._apply_offset_fix(s._replace(clients=_put(s.clients, i, cl)), i, q, fix.offset)

    def _apply_offset_fix(self: Model, s: State, i: int, q: int, offset: int) -> State:
        """updateOffset(increaseOnly=false) (R1.5), persist(mq) (persist(mq) (ConsumerProcessMixin._persist_one) /
        persist(mq) (ConsumerProcessMixin._persist_one)), removeProcessQueue: of the pq in ``pqs``, or of the one a
        sleeping admin reset holds (``reset_held``, AdminResetMixin._client_reset_receive), which is still the table's
        entry for mq."""
        cl = s.clients[i]
        s = s._replace(clients=_put(s.clients, i, cl._replace(mem=_put(cl.mem, q, offset))))
        pq = cl.pqs[q]
        held = next((uid for hq, uid in cl.reset_held if hq == q), None) if pq is None else None
        table_uid = pq.uid if pq is not None else -1 if held is None else held  # the pq processQueueTable holds
        s = self._persist_one(s, i, q, table_uid, "offset-illegal-fix")
        if held is not None:
            # admin reset (AdminResetMixin._client_reset_receive): a sleeping reset's dropped pq is still the table's
            # entry for mq, so removeProcessQueue removes it (RebalanceImpl.java:434): removeUnnecessaryMessageQueue
            # persists and removes the memory offset (Phase A of RebalanceMixin's updateProcessQueueTableInRebalance);
            # the reset, woken, finds no pq of mq and does nothing for it
            cl = s.clients[i]
            cl = cl._replace(reset_held=tuple(h for h in cl.reset_held if h[0] != q), view=None)
            s = self._persist_one(s._replace(clients=_put(s.clients, i, cl)), i, q, -1, "offset-illegal-fix")
            return s._replace(clients=_put(s.clients, i, self._remove_offset(s.clients[i], q)))
        if pq is None:
            return s  # removeProcessQueue finds nothing: the memory entry stays until pruned (persistAll,
            # ConsumerProcessMixin._persist_all)
        cl = s.clients[i]._replace(pqs=_put(s.clients[i].pqs, q, None), view=None)
        s = s._replace(clients=_put(s.clients, i, cl))
        if self.orderly_removal:  # removeProcessQueue takes the pq out whatever the orderly removal answers
            s, _ = self._remove_orderly(s, i, q, pq._replace(dropped=True), -1, "offset-illegal-fix")
            cl = s.clients[i]
            return s._replace(clients=_put(s.clients, i, cl._replace(pulls=self._detach(cl, q, pq).pulls)))
        s = self._persist_one(s, i, q, -1, "offset-illegal-fix")
        cl = s.clients[i]
        cl = self._remove_offset(cl._replace(pulls=self._detach(cl, q, pq).pulls), q)
        return s._replace(clients=_put(s.clients, i, cl))


# Properties of the pull (INV-20, INV-4, INV-14, LIV-3, INV-17, INV-22)
def _single_pull_loop(m: Model, s: State) -> str | None:
    """INV-20: one PullRequest circulates per pq in the table (R5.1, the rebalance's pq table update,
    RebalanceMixin._update_process_queue_table): queued (PULL_READY) with no pull of it in flight, or exactly one pull
    in flight (PULL_IN_FLIGHT), or none when it was dropped."""
    for i, cl in enumerate(s.clients):
        if not cl.running:
            continue
        flying: dict[int, int] = {}
        for p in cl.pulls:
            flying[p.pq_uid] = flying.get(p.pq_uid, 0) + 1
        for q, pq in enumerate(cl.pqs):
            if pq is None:
                continue
            n = flying.get(pq.uid, 0)
            expected = 1 if pq.pull_state == PULL_IN_FLIGHT else 0
            if n != expected:
                return f"client {i} queue {q}: pq {pq.uid} is {pq.pull_state} with {n} pulls in flight"
        extra = [uid for uid, n in flying.items() if n > 1]
        if extra:
            return f"client {i}: pqs {extra} have more than one pull in flight"
    return None


SINGLE_PULL_LOOP = Invariant(
    "INV-20",
    "single_pull_loop",
    "Every pq in the table has exactly one PullRequest: queued, or one pull in flight (none once dropped); "
    "no pq has two pulls in flight.",
    "R5.1, R5.7, R9.4",
    "Two pull loops for one queue fetch the same offsets twice and race their nextOffset and commits.",
    _single_pull_loop,
)


def _increase_only(m: Model, s: State, a: Action, t: State) -> str | None:
    if not isinstance(a, (ApplyConsumeOffset, ReceivePull)) or (m.orderly and isinstance(a, ApplyConsumeOffset)):
        return None  # the orderly commit is increaseOnly=false (the orderly commit,
        # OrderlyConsumeMixin._orderly_finish); INV-3 checks its value
    before, after = s.clients[a.client].mem, t.clients[a.client].mem
    for q in range(m.q_count):
        old, new = before[q], after[q]
        if old is not None and new is not None and new < old:
            return f"client {a.client} queue {q}: increaseOnly update lowered {old} to {new}"
    return None


INCREASE_ONLY_NEVER_LOWERS = ActionProperty(
    "INV-4",
    "increase_only_never_lowers",
    "Offset updates driven by consumption (increaseOnly=true) never lower the memory offset.",
    "R1.5",
    "Consumption completes out of order; a lowered offset re-delivers finished work and masks INV-8.",
    _increase_only,
)


def _piggyback_rule(m: Model, s: State, a: Action, t: State) -> str | None:
    if not isinstance(a, SendPull):
        return None
    before, after = s.clients[a.client], t.clients[a.client]
    if len(after.channel) == len(before.channel):
        return None  # the send failed: nothing reached the broker
    req = after.channel[-1]
    # An orderly consumer's first locked pull re-reads the offset into memory before it piggy-backs
    # (R5.1 step 6); SendPull changes memory in no other way, so the value sent is the one after.
    mem = (after if m.orderly else before).mem[a.queue]
    expected = (mem if mem is not None else -1) if m.clustering else 0
    # slaves: pullKernelImpl clears the flag for a slave's address (R5.3)
    flag = m.clustering and expected > 0 and not req.to_slave
    if req.commit_offset != expected or req.commit_flag != flag:  # type: ignore[union-attr]
        return f"client {a.client} queue {a.queue}: piggy-backed {req!r}, memory offset was {mem}"
    return None


PIGGYBACK_RULE = ActionProperty(
    "INV-14",
    "piggyback_rule",
    "A pull piggy-backs exactly the memory offset, flagged only in CLUSTERING when it is > 0.",
    "R5.2-R5.4",
    "The broker stores the piggy-backed value verbatim; a wrong one is a silent commit.",
    _piggyback_rule,
)


def _pull_stalled_recreated(m: Model, s: State, a: Action, t: State) -> str | None:
    """LIV-3 as a step property: the liveness claim "re-created at the next rebalance" is checked at
    that rebalance. A rebalance that leaves the table alone (CLUSTERING with no consumer list, the CLUSTERING allocation
    (RebalanceMixin._rebalance_topic) step 3; an allocation that throws, step 5 of the CLUSTERING allocation
    (RebalanceMixin._rebalance_topic)) is exempt, and so is an orderly removal that the running listener refuses (the
    orderly removal, OrderlyConsumeMixin._remove_orderly): the pq stays, dropped, and the next rebalance tries again."""
    if not isinstance(a, Rebalance | RebalanceQueryError):
        return None
    i = a.client
    if m.clustering and (not s.broker.up or not s.broker.registered):
        return None
    before, after = s.clients[i], t.clients[i]
    for q, pq in enumerate(before.pqs):
        if pq is None or s.now - pq.last_pull <= PULL_MAX_IDLE_TIME:
            continue
        kept = after.pqs[q]
        if kept is None or kept.uid != pq.uid or kept.dropped:
            continue  # gone, re-created, or an orderly removal refused while its listener runs (the orderly removal,
            # OrderlyConsumeMixin._remove_orderly)
        queues = (q,) if q == m.retry_queue else m.topic_queues
        members = (s.broker.registered, t.broker.registered)
        if m.clustering and any(_allocation_throws(m, i, queues, r) for r in members):
            continue
        return f"client {i} queue {q}: pq {pq.uid} last pulled at {pq.last_pull} survived the rebalance at {s.now}"
    return None


PULL_STALLED_PQ_RECREATED = ActionProperty(
    "LIV-3",
    "pull_stalled_pq_recreated",
    "A rebalance that updates a topic's pq table drops every pull-expired pq of it (no pull for more than "
    "120 s): the queue gets a new pq or none.",
    "R6.6, R9.4",
    "A pull request lost or stuck would otherwise leave the queue owned but never consumed again.",
    _pull_stalled_recreated,
)


def _offset_illegal_fix_while_owned(m: Model, s: State, a: Action, t: State) -> str | None:
    if not isinstance(a, FixOffsetIllegal):
        return None
    cl = s.clients[a.client]
    fix = next(f for f in cl.offset_fixes if f.queue == a.queue and f.due <= s.now)
    pq = cl.pqs[a.queue]
    if not fix.live or (pq is not None and pq.uid == fix.pq_uid):
        return None
    now = "no pq" if pq is None else f"pq {pq.uid}"
    return (
        f"client {a.client} queue {a.queue}: the OFFSET_ILLEGAL correction to {fix.offset} for pq {fix.pq_uid} "
        f"ran after a rebalance removed it (the table holds {now}); it overwrote the offset as a non-owner"
    )


OFFSET_ILLEGAL_FIX_WHILE_OWNED = ActionProperty(
    "INV-17",
    "offset_illegal_fix_while_owned",
    "An OFFSET_ILLEGAL correction for a pq that was in the table when the result arrived runs while that "
    "pq is still there.",
    "R5.7, R9.4, S9",
    "4.9.8's 10 s window: a rebalance that takes the queue away meanwhile lets the correction overwrite the "
    "new owner's offset and drop whatever pq the table holds then (apache/rocketmq#7645 closed it in 5.2.0).",
    _offset_illegal_fix_while_owned,
)


def _no_repull_of_consumed(m: Model, s: State, a: Action, t: State) -> str | None:
    """INV-22: a pull result never brings a pq a message it had already received and no longer holds: its
    pull cursor only moves forward (R5.7: nextOffset := nextBeginOffset, at or past the offsets
    returned), and a position that moves back is a new pq (OFFSET_ILLEGAL's fix-up, an admin reset,
    a rebalance), whose redeliveries are counted per cause. A re-pull by the same pq is a rollback
    with no cause. A message it still holds is merged by putMessage (R6.2) and harmless."""
    if not isinstance(a, ReceivePull):
        return None
    cl, after = s.clients[a.client], t.clients[a.client]
    for q, pq in enumerate(after.pqs):
        old = cl.pqs[q]
        if pq is None or old is None or pq.uid != old.uid or pq.uid != a.pq_uid or pq.tree == old.tree:
            continue
        again = pq.tree & ~old.tree & s.ghost.received[a.client * m.q_count + q]
        if again:
            return (
                f"client {a.client} queue {q}: pq {pq.uid} pulled offsets {_bits(again)} again after consuming them "
                f"(its pull cursor moved back with no cause)"
            )
    return None


NO_REPULL_OF_CONSUMED = ActionProperty(
    "INV-22",
    "no_repull_of_consumed",
    "A pull result never brings a pq a message it had already received and no longer holds.",
    "R5.7, R6.2, R6.3",
    "The pull cursor only moves forward; a pq that pulls what it consumed redelivers with no cause (a "
    "rollback), which at-least-once would otherwise hide among the duplicates.",
    _no_repull_of_consumed,
)
