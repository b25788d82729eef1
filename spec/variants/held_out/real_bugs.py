"""The held-out variants: real consumer-offset bugs of RocketMQ and its clients, each planted by what the buggy
code did as its report describes it (the registry's ``citation``), overriding one helper of the model."""

from __future__ import annotations

from rmqspec.spec import broker_rules as br
from rmqspec.spec.concurrent_consume import FinishConsume, StartConsume
from rmqspec.spec.config import FROM_FIRST, FROM_TIMESTAMP
from rmqspec.spec.enabling import ActionNotEnabled
from rmqspec.spec.pull import ReceivePull
from rmqspec.spec.rebalance import Rebalance, RebalanceQueryError
from rmqspec.spec.state import PULL_DROPPED, Client, Commit, History, ProcessQueue, PullResult, State
from rmqspec.spec.state import Event as HistoryEvent
from rmqspec.spec.state import bit_offsets as _bits
from rmqspec.spec.state import lowest_offset as _low
from rmqspec.spec.state import put_at as _put
from rmqspec.spec.variants import Variant
from rmqspec.spec.variants.held_out import HeldOutBug, held_out


@held_out(
    "local_offset_bak_never_written",
    HeldOutBug(
        "BROADCASTING: writing offsets.json never refreshes offsets.json.bak (the write of the previous content is "
        "guarded by an inverted error check), so after the main file turns unreadable the consumer restarts from a "
        "stale or empty .bak",
        ("R1.15", "R1.16"),
        "apache/rocketmq-client-go#572 'when is store offset.json.bak file'",
        ("INV-6d",),  # a property written after this set's figures were read (docs/held_out.md)
        True,  # figures_seen: the first set's catch figures were used by search work
    ),
)
class LocalOffsetBakNeverWritten(Variant):
    """MixAll.string2File's counterpart writes the new main file but never copies the previous one to .bak."""

    def _write_file(self, cl: Client, file: tuple[int | None, ...]) -> Client:
        if self.track_file_bak:
            cl = cl._replace(file_main_unreadable=False)
        return cl._replace(file=file)


@held_out(
    "clean_expired_unstarted",
    HeldOutBug(
        "cleanExpiredMsg reads a missing CONSUME_START_TIME as 0, so a cached message whose listener never started "
        "counts as expired: it is sent back to the retry topic and removed from the pq before it was consumed",
        ("R6.8", "R7.2"),
        "apache/rocketmq-client-go#1034 'Message maybe cleaned by cleanExpiredMsg service, while the message has "
        "not been consumed.'",
        ("INV-24",),  # a property written after this set's figures were read (docs/held_out.md)
        True,  # figures_seen: the first set's catch figures were used by search work
    ),
)
class CleanExpiredUnstarted(Variant):
    """ProcessQueue.cleanExpiredMsg takes a message without a consume-start stamp as started at time 0."""

    def _clean_expired_pq(self, s: State, i: int, q: int, pq: ProcessQueue) -> State:
        started = {o for o, _ in pq.consume_started}
        unstarted = tuple((o, 0) for o in _bits(pq.tree) if o not in started)
        if not unstarted:
            return super()._clean_expired_pq(s, i, q, pq)
        read_as_zero = pq._replace(consume_started=tuple(sorted((*pq.consume_started, *unstarted))))
        t = super()._clean_expired_pq(s, i, q, read_as_zero)
        if t is s:
            return s
        # the missing stamps were read as 0, not written: the pq keeps only the stamps it had
        cl = t.clients[i]
        after = cl.pqs[q]
        assert after is not None
        kept = tuple(e for e in after.consume_started if e[0] in started)
        return t._replace(
            clients=_put(t.clients, i, cl._replace(pqs=_put(cl.pqs, q, after._replace(consume_started=kept))))
        )


@held_out(
    "lock_all_keeps_lock_time",
    HeldOutBug(
        "orderly: the periodic lockAll marks every granted pq locked but does not renew its lastLockTimestamp, so "
        "the client-side lock of a queue held for good expires 30 s after it was taken and the orderly loop stops "
        "consuming it until a single-queue lock renews it",
        ("R8.2", "R8.3", "R8.5"),
        "apache/rocketmq-client-go#1080 'lockAll函数没有正常续约LastLockTime导致consumeMessageOrderly函数报错the "
        "message queue lock expired, so consume later'",
        ("INV-34",),
        True,  # figures_seen: the first set's catch figures were used by search work
    ),
)
class LockAllKeepsLockTime(Variant):
    """lockAll sets ``locked`` on the granted pqs and leaves their ``lastLockTimestamp`` as it was."""

    def _lock(self, s: State, i: int, queues: tuple[int, ...], lock_all: bool) -> tuple[State, frozenset[int]]:
        t, granted = super()._lock(s, i, queues, lock_all)
        if not lock_all or not granted:
            return t, granted
        before, cl = s.clients[i].pqs, t.clients[i]
        pqs = tuple(
            pq._replace(last_lock=old.last_lock)
            if pq is not None and old is not None and pq.uid == old.uid and q in granted
            else pq
            for q, (pq, old) in enumerate(zip(cl.pqs, before, strict=True))
        )
        return t._replace(clients=_put(t.clients, i, cl._replace(pqs=pqs))), granted


@held_out(
    "orderly_removal_keeps_lock",
    HeldOutBug(
        "orderly CLUSTERING: removing a queue at rebalance persists and removes its offset but never sends the "
        "broker unlock, so the queue's new owner cannot lock it until the broker lock expires (60 s)",
        ("R8.8", "R8.2"),
        "apache/rocketmq-client-go#1220 'unlock unused queue when orderly consumer rebalance'",
        ("INV-26",),  # a property written after this set's figures were read (docs/held_out.md)
        True,  # figures_seen: the first set's catch figures were used by search work
    ),
)
class OrderlyRemovalKeepsLock(Variant):
    """removeUnnecessaryMessageQueue of an orderly pq sends no ``unlock(mq, oneway=true)`` (nor a delayed one)."""

    def _unlock_oneway(self, s: State, i: int, q: int, late: bool = False) -> State:
        return s


@held_out(
    "reset_rebalance_not_paused",
    HeldOutBug(
        "4.9.8 admin reset: suspend() pauses pulls but not the rebalance, so a rebalance that runs during the "
        "reset's 10 s sleep re-creates the queues the reset dropped from the broker's old offset and they consume "
        "from there, not from the reset target",
        ("R3.10a",),
        "apache/rocketmq-client-go#852 'bugfix rebalance is not paused after suspend and rebalance not triggered' "
        "(reset offset not work correctly)",
        (),
        True,  # figures_seen: the first set's catch figures were used by search work
    ),
)
class ResetRebalanceNotPaused(Variant):
    """doRebalance runs while the consumer is paused by a sleeping reset."""

    def _reset_rebalance(self, s: State, a: Rebalance | RebalanceQueryError) -> State:
        return self._reset_wrapped[type(a)](s, a)


@held_out(
    "commit_to_slave_while_master_up",
    HeldOutBug(
        "the broker address lookup of updateConsumeOffsetToBroker (findBrokerAddressInAdmin) may return the slave "
        "although the master is alive, so commits land on the slave, which never passes them to the master and "
        "is overwritten by the next offset sync: the master's committed offset stays behind",
        ("R2.5", "R3.8"),
        "apache/rocketmq#3603 'Fetch or Commit ConsumeOffset may not use master broker firstly'",
        ("LIV-2",),
        True,  # figures_seen: the first set's catch figures were used by search work
    ),
)
class CommitToSlaveWhileMasterUp(Variant):
    """updateConsumeOffsetToBroker sends to the slave whenever there is one, the master up or not."""

    def _send_commit(self, s: State, i: int, q: int, value: int, uid: int, cause: str) -> State:
        if s.slave is None or not s.broker.up:
            return super()._send_commit(s, i, q, value, uid, cause)
        cl = s.clients[i]
        cl = cl._replace(channel=(*cl.channel, Commit(q, value, uid, cause, to_slave=True)))
        return s._replace(
            clients=_put(s.clients, i, cl),
            history=History(HistoryEvent(s.now, "commit-sent", i, q, value, cause), s.history),
        )


@held_out(
    "no_correct_tags_offset",
    HeldOutBug(
        "the PullCallback does not run correctTagsOffset on NO_NEW_MSG / NO_MATCHED_MSG: a pq that holds nothing "
        "never moves its offset past messages the subscription filtered out, so they are never committed",
        ("R5.7", "R6.7"),
        "apache/rocketmq-client-go#559 '[ISSUE #555] when no msg or offset not match correct local offset.'",
        ("LIV-5",),
        True,  # figures_seen: the first set's catch figures were used by search work
    ),
)
class NoCorrectTagsOffset(Variant):
    """NO_NEW_MSG and NO_MATCHED_MSG only move the pull cursor; the memory offset is left as it was."""

    def _receive_pull(self, s: State, a: ReceivePull) -> State:
        cl = s.clients[a.client]
        pull = next((p for p in cl.pulls if p.pq_uid == a.pq_uid and p.epoch != -1), None)
        t = super()._receive_pull(s, a)
        if pull is None:
            return t
        result: PullResult = (
            pull.result if pull.result is not None else self._pull_result(s, pull.queue, pull.offset, pull.from_slave)
        )
        if result.status not in (br.NO_NEW_MSG, br.NO_MATCHED_MSG):
            return t
        q, after = pull.queue, t.clients[a.client]
        if after.mem[q] == cl.mem[q]:
            return t
        return t._replace(
            clients=_put(t.clients, a.client, after._replace(mem=_put(after.mem, q, cl.mem[q]))),
            ghost=t.ghost._replace(raised_by_tags=s.ghost.raised_by_tags),
        )


@held_out(
    "dropped_pq_request_consumed",
    HeldOutBug(
        "ConsumeRequest.run does not check whether its pq was dropped: the messages of a queue the rebalance "
        "removed are handed to the listener anyway, after the queue's next owner may have them too",
        ("R7.2", "R6.7"),
        "apache/rocketmq-client-go#574 'fix possible infinite loop after rebalance' (check whether the process "
        "queue is already dropped before starting next consume)",
        ("INV-5",),
        True,  # figures_seen: the first set's catch figures were used by search work
    ),
)
class DroppedPqRequestConsumed(Variant):
    """A concurrent consumer's ConsumeRequest of a dropped pq runs its listener."""

    def _start_consume(self, s: State, a: StartConsume) -> State:
        if self.orderly:
            return super()._start_consume(s, a)
        i = a.client
        cl = s.clients[i]
        k = next((k for k, r in enumerate(cl.requests) if r.rid == a.rid), None)
        if k is None:
            return super()._start_consume(s, a)
        r = cl.requests[k]
        pq = cl.pqs[r.queue]
        if pq is not None and pq.uid == r.pq_uid and pq.pull_state != PULL_DROPPED:
            return super()._start_consume(s, a)
        if not cl.running or not self._may_start(cl, r, s.now):
            raise ActionNotEnabled(a, "no such ready consume request")
        cl = cl._replace(requests=cl.requests[:k] + cl.requests[k + 1 :], consuming=(*cl.consuming, r))
        return self._deliver(s._replace(clients=_put(s.clients, i, cl)), i, r.queue, r.msgs)


@held_out(
    "query_error_reads_as_no_offset",
    HeldOutBug(
        "5.x: a failed offset read (the broker answers an error code) is taken as 'the group has no offset', as "
        "before the fix, so the queue is positioned by consumeFromWhere (LAST skips the backlog, FIRST replays "
        "it) instead of being skipped this round",
        ("R2.3", "R10.1"),
        "apache/rocketmq-client-go#832 'Client may submit wrong offset when network instability' (apache/rocketmq "
        "#2708)",
        ("INV-37",),  # a property written after this set's figures were read (docs/held_out.md)
        True,  # figures_seen: the first set's catch figures were used by search work
    ),
)
class QueryErrorReadsAsNoOffset(Variant):
    """computePullFromWhere in 5.x maps a failed readOffset to -1, "no offset"."""

    def _compute_pull_from_where(
        self, s: State, i: int, q: int, uid: int, query_fails: bool
    ) -> tuple[State, int | None]:
        b = s.broker
        if not (query_fails and self.clustering and not self.config.broker_error_reads_as_no_offset):
            return super()._compute_pull_from_where(s, i, q, uid, query_fails)
        if not b.up and s.slave is None:
            return super()._compute_pull_from_where(s, i, q, uid, query_fails)
        s = s._replace(budget=s.budget._replace(query_errors=s.budget.query_errors - 1))
        cfw = self.config.consume_from_where
        is_retry = q == self.retry_queue
        if cfw == FROM_FIRST or (is_retry and cfw != FROM_TIMESTAMP):
            return self._positioned(s, i, q, uid, 0, "consume-from-first", False, True), 0
        if not b.up:
            return s, None
        queue = b.queues[q]
        if cfw == FROM_TIMESTAMP and not is_retry:
            start = br.search_offset(queue, self.config.consume_timestamp)
            return self._positioned(s, i, q, uid, start, "consume-from-timestamp", True, True), start
        start = queue.max_offset
        return self._positioned(s, i, q, uid, start, "consume-from-last", True, True), start


@held_out(
    "slave_corrects_from_own_bounds",
    HeldOutBug(
        "a slave answers an out-of-range pull with OFFSET_MOVED computed from its own, possibly lagging, consume "
        "queue bounds, whatever offsetCheckInSlave says; the client adopts and commits that correction",
        ("R5.5", "R5.7"),
        "apache/rocketmq commits 0d73a28b50 and c467236fc5 (2015: the slave stops correcting offsets, "
        "offsetCheckInSlave), symptom in alibaba/rocketmq#395",
        ("INV-21",),
        True,  # figures_seen: the first set's catch figures were used by search work
    ),
)
class SlaveCorrectsFromOwnBounds(Variant):
    """getMessage on a slave corrects an illegal offset from the slave's bounds, as offsetCheckInSlave = true."""

    def _pull_result(self, s: State, q: int, offset: int, from_slave: bool = False) -> PullResult:
        if not (from_slave and s.slave is not None):
            return super()._pull_result(s, q, offset, from_slave)
        sub = None if q == self.retry_queue else self.config.subscription
        batch = min(self.config.pull_batch_size, br.MAX_TRANSFER_COUNT_ON_MESSAGE_IN_MEMORY)
        return br.slave_pull_result(s.slave.queues[q], offset, batch, sub, True)


@held_out(
    "broadcast_failure_kept_in_pq",
    HeldOutBug(
        "BROADCASTING: a message whose listener failed is logged as dropped but only the messages handled are "
        "removed from the pq, so the failed one stays in it, is never consumed again, and holds the queue's "
        "offset below it",
        ("R7.3", "R6.3"),
        "apache/rocketmq-client-go#977 'Offset updating for Broadcasting Consumer'",
        ("INV-24c",),  # a property written after this set's figures were read (docs/held_out.md)
        True,  # figures_seen: the first set's catch figures were used by search work
    ),
)
class BroadcastFailureKeptInPq(Variant):
    """processConsumeResult in BROADCASTING removes the acknowledged messages only; the failed ones stay cached."""

    def _finish_consume(self, s: State, a: FinishConsume) -> State:
        t = super()._finish_consume(s, a)
        if self.clustering or self.orderly or t.ghost is s.ghost:  # the ghost is untouched when the pq was dropped
            return t
        i = a.client
        r = next(r for r in s.clients[i].consuming if r.rid == a.rid)
        before, cl = s.clients[i].pqs[r.queue], t.clients[i]
        pq = cl.pqs[r.queue]
        kept = [o for o, _ in r.msgs[a.ack_index + 1 :] if before is not None and before.tree >> o & 1]
        if not kept or pq is None or before is None:
            return t
        queue = t.broker.queues[r.queue]
        tree = pq.tree | sum(1 << o for o in kept)
        stamps = tuple(sorted((*pq.consume_started, *(e for e in before.consume_started if e[0] in kept))))
        pq = pq._replace(
            tree=tree,
            msg_count=pq.msg_count + len(kept),
            msg_size=pq.msg_size + sum(br.body_size(queue.messages[o]) for o in kept),
            consume_started=stamps,
        )
        updates = tuple(u._replace(offset=_low(tree)) if u.rid == r.rid else u for u in cl.offset_updates)
        cl = cl._replace(pqs=_put(cl.pqs, r.queue, pq), offset_updates=updates)
        # not dropped after all: the declared skip of the failures is not made
        return t._replace(
            clients=_put(t.clients, i, cl), ghost=t.ghost._replace(skipped=s.ghost.skipped, skips=s.ghost.skips)
        )


@held_out(
    "orderly_first_pull_no_reread",
    HeldOutBug(
        "orderly: the first pull after the queue's broker lock is taken uses the nextOffset computed at rebalance "
        "time instead of reading the committed offset again, so it starts before the previous owner's last commit "
        "landed and consumes messages the previous owner already consumed",
        ("R8.4", "R10.1"),
        "apache/rocketmq commit ab573bd737 (2015-10-21: after the rebalance, the pull request must read the offset "
        "again once the broker lock is held; fixes out-of-order consumption for a buyer/seller trading system)",
        (),
        True,  # figures_seen: the first set's catch figures were used by search work
    ),
)
class OrderlyFirstPullNoReread(Variant):
    """pullMessage of a locked orderly pq never re-reads the offset on its first pull (no lockedFirst)."""

    def _orderly_pull_gate(self, s: State, i: int, q: int, pq: ProcessQueue) -> tuple[State, ProcessQueue, bool]:
        if pq.locked and not pq.previously_locked:
            return s, pq._replace(previously_locked=True), True
        return super()._orderly_pull_gate(s, i, q, pq)
