"""The fifth held-out set (docs/held_out.md, "The fifth set"): consumer-offset bugs found through later fix commits of
the Java client and of the C++ client, each planted by what the buggy code did as its fix describes it (the
registry's ``citation``), overriding one helper of the model. Written apart from the search: nothing about the search
or its properties was read to choose or plant them; their catch figures have since been read
(``HeldOutBug.figures_seen`` True, docs/held_out.md, "The fifth set, measured")."""

from __future__ import annotations

from rmqspec.spec import orderly as lk
from rmqspec.spec.actions import FinishConsume
from rmqspec.spec.admin_reset import ClientResetWake
from rmqspec.spec.orderly_consume import TRY_LOCK_LATER_AT_RUN, TRY_LOCK_LATER_IN_LOOP
from rmqspec.spec.state import Broker, Client, ConsumeRequest, Message, ProcessQueue, State
from rmqspec.spec.state import put_at as _put
from rmqspec.spec.variants import Variant
from rmqspec.spec.variants.held_out import HeldOutBug, held_out

# figures_seen of every bug of this module: their catch figures have been read (docs/held_out.md, "The fifth set,
# measured"), so they no longer judge a change of the search or the properties: the next one needs a sixth set
_FIGURES_SEEN = True


@held_out(
    "local_remove_offset_noop",
    HeldOutBug(
        "LocalFileOffsetStore.removeOffset is an empty method: a BROADCASTING consumer that removes a queue's "
        "offset (the OFFSET_ILLEGAL fix's persist-then-remove, a pull-expired pq's removal) keeps the queue's memory "
        "entry, which later persistAll runs write again and the next positioning of the queue starts from",
        ("R1.14", "R5.7"),
        "apache/rocketmq commit 8d248a24d5 (2024-01-12, 'Fix LocalFileOffsetStore removeOffset': the empty "
        "removeOffset(mq) gained offsetTable.remove(mq)), part of #7745 '[ISSUE #7740] Optimize "
        "LocalFileOffsetStore' (apache/rocketmq#7740, a BROADCASTING consumer that cannot fix an illegal offset)",
        ("INV-36",),  # a property written after this set's figures were read (docs/held_out.md)
        _FIGURES_SEEN,
    ),
)
class LocalRemoveOffsetNoop(Variant):
    """removeOffset(mq) of the local file store changes nothing; the remote store's is unchanged."""

    def _remove_offset(self, cl: Client, q: int) -> Client:
        if self.clustering:
            return super()._remove_offset(cl, q)
        return cl


@held_out(
    "send_back_failure_keeps_times",
    HeldOutBug(
        "a message whose CONSUMER_SEND_MSG_BACK failed is consumed again locally (submitConsumeRequestLater) with "
        "the reconsumeTimes it had: the failed send-back is not counted, so the listener sees the same retry count "
        "again and again and a message that keeps failing while the broker refuses send-backs is never counted "
        "towards maxReconsumeTimes on the client",
        ("R7.3", "R7.4"),
        "apache/rocketmq-client-cpp PR #210 'fix(consumer): send back error when consuming failed.' (commit "
        "04781a4, 2020-01-02: the local retry list of ConsumeMessageConcurrentlyService::ConsumeRequest gained "
        "msgs[i].setReconsumeTimes(msgs[i].getReconsumeTimes() + 1), as the Java client does, and the send-back "
        "went to the queue's broker instead of the message's store host)",
        ("INV-28",),
        _FIGURES_SEEN,
    ),
)
class SendBackFailureKeepsTimes(Variant):
    """The consume request resubmitted for the messages whose send-back failed carries their old reconsumeTimes."""

    def _finish_consume(self, s: State, a: FinishConsume) -> State:
        t = super()._finish_consume(s, a)
        if self.orderly:
            return t
        before, after = s.clients[a.client], t.clients[a.client]
        if after.seq == before.seq or not after.requests:
            return t
        resubmitted = after.requests[-1]
        if resubmitted.rid != before.seq:
            return t
        old = _old_times(before, a.rid)
        msgs = tuple((o, old.get(o, times)) for o, times in resubmitted.msgs)
        requests = (*after.requests[:-1], resubmitted._replace(msgs=msgs))
        return t._replace(clients=_put(t.clients, a.client, after._replace(requests=requests)))


def _old_times(cl: Client, rid: int) -> dict[int, int]:
    """offset -> reconsumeTimes of the messages of the running request ``rid`` (the listener's batch)."""
    r: ConsumeRequest = next(r for r in cl.consuming if r.rid == rid)
    return dict(r.msgs)


@held_out(
    "client_reset_wake_throws",
    HeldOutBug(
        "MQClientInstance.resetOffset's second loop iterates with the exhausted iterator of its first loop (itr.next() "
        "under iterator.hasNext()): once the 10 s sleep is over it throws NoSuchElementException whenever "
        "processQueueTable has a key, so no queue's updateConsumeOffset, persist or removal runs; the finally's "
        "resume() unpauses the consumer with the reset's dropped pqs still in the table and the old offsets in memory",
        ("R3.10a",),
        "apache/rocketmq commit 1132af05f6 (2016-06-23, 'Issue #50 消费位点重置，导致消息大量重复', "
        "RocketMQ's internal issue #50, a consume-offset reset causing mass redelivery: "
        "MQClientInstance.resetOffset's 'MessageQueue mq = itr.next()' in the loop over 'iterator' became "
        "'iterator.next()')",
        (),
        _FIGURES_SEEN,
    ),
)
class ClientResetWakeThrows(Variant):
    """ClientResetWake with any key in processQueueTable: nothing of resetOffset's steps 4-5 but resume()."""

    def _client_reset_wake(self, s: State, a: ClientResetWake) -> State:
        t = super()._client_reset_wake(s, a)  # enabled as before
        cl = s.clients[a.client]
        if not cl.reset_held and all(pq is None for pq in cl.pqs):
            return t  # an empty table: the loop never calls next()
        cl = cl._replace(paused=False, reset_table=(), reset_wake=None, rebalance_requested=True)
        return s._replace(clients=_put(s.clients, a.client, cl))


@held_out(
    "rebalance_every_ten_seconds",
    HeldOutBug(
        "the rebalance timer runs every 10 s where the Java client's RebalanceService waits 20 s: queues move between "
        "consumers twice as often while a group's membership settles, each move a removal and a new positioning",
        ("R4.2",),
        "apache/rocketmq-client-go PR #350 'fix: pull timeout and suspend time is not consistent with java' (commit "
        "75c75c1, 2020-01-02, closes #349: _RebalanceInterval = 10 * time.Second became 20 * time.Second)",
        ("INV-27",),
        _FIGURES_SEEN,
    ),
)
class RebalanceEveryTenSeconds(Variant):
    """RebalanceService waits 10 s after a run, not 20 s."""

    def _next_rebalance_run(self, now: int) -> int | None:
        nxt = super()._next_rebalance_run(now)
        return None if nxt is None else now + 10_000


@held_out(
    "memory_offset_read_as_absent",
    HeldOutBug(
        "RemoteBrokerOffsetStore.readOffset(mq, READ_FROM_MEMORY) returns its value only on the branch that fetched "
        "it from the broker: an offset found in memory falls through to 'return -1', so every pull reads 'no offset' "
        "and carries no piggy-backed commit; the broker's offset moves only by the 5 s persist timer and the removal's "
        "persist",
        ("R5.2", "R1.4"),
        "apache/rocketmq commit 670022983b (2013-08-12, '#4 修复从内存读取Offset的逻辑问题', fixing the read of the "
        "offset from memory: RemoteBrokerOffsetStore.readOffset's 'return offset.get()' moved out of the 'null == "
        "offset' block, a week before commit f1af103db9 made each pull carry the memory offset)",
        ("INV-14",),
        _FIGURES_SEEN,
    ),
)
class MemoryOffsetReadAsAbsent(Variant):
    """readOffset(mq, READ_FROM_MEMORY) of the remote store answers -1 when memory has the offset."""

    def _piggyback_offset(self, cl: Client, q: int, pq: ProcessQueue) -> int:
        return -1


@held_out(
    "server_reset_table_not_written",
    HeldOutBug(
        "the 5.x server-side reset (assignResetOffset) records the target only in resetOffsetTable and leaves the "
        "committed offset table as it was: the pull that takes the pending entry moves the consumer to the target, "
        "but every read of the table until the next commit lands (a restart's or a new owner's positioning, the "
        "group's lag) still sees the old offset, and a queue whose pending entry is never taken keeps it for good",
        ("R3.10b",),
        "mxsm/rocketmq-rust issue #9607 '[Bug] Consumer offset reset loses the target position' (fix PR #9608 'Fix "
        "consumer offset reset persistence': persist each server-side reset target in both the transient reset table "
        "and the committed consumer offset table, as Apache RocketMQ's ConsumerOffsetManager.assignResetOffset does)",
        (),
        _FIGURES_SEEN,
    ),
)
class ServerResetTableNotWritten(Variant):
    """assignResetOffset of the 5.x reset writes resetOffsetTable only; the old method's write is unchanged."""

    def _admin_write(self, s: State, q: int, target: int) -> State:
        if self.config.server_side_reset:
            return s
        return super()._admin_write(s, q, target)


@held_out(
    "new_lock_entry_not_granted",
    HeldOutBug(
        "RebalanceLockManager.tryLockBatch, on a queue of the group with no lock entry yet, creates the entry for the "
        "requesting client and continues to the next queue without adding it to the locked set: the first lock of "
        "each queue is refused although the broker now holds it for that client, so an orderly consumer's rebalance "
        "adds no pq for a queue never locked before and waits for its next rebalance (or lockAll) to be granted it",
        ("R8.1", "R8.4"),
        "apache/rocketmq commit acdf30bf25 (2013-12-25, '#317 新生成lockEntry时继续往下执行，去掉continue.', "
        "RocketMQ's internal issue #317: carry on when a new lockEntry is created, the 'continue' removed), undoing "
        "the 'continue' that commit 937d2ff9e1 had put after the new entry the same morning",
        (),
        _FIGURES_SEEN,
    ),
)
class NewLockEntryNotGranted(Variant):
    """tryLockBatch grants no queue whose entry it had to create; the entry is created for the client."""

    def _try_lock_batch(
        self, table: lk.LockTable, queues: tuple[int, ...], client: int, now: int
    ) -> tuple[lk.LockTable, frozenset[int]]:
        new, granted = super()._try_lock_batch(table, queues, client, now)
        fresh = frozenset(q for q in queues if table[q] is None)
        return new, granted - fresh


@held_out(
    "retry_delay_stops_growing",
    HeldOutBug(
        "the concurrent consumer picks the retry's delay level itself when the listener leaves it at 0: level 3 for a "
        "message never consumed again and level 4 (3 + 3 / 3) for every later failure, where the broker's rule is 3 + "
        "reconsumeTimes: from the third failure on a message is retried every 30 s instead of after a growing delay",
        ("R7.5",),
        "apache/rocketmq commit b964b730ce (2013-07-13, 'fixed #131 消息重试DelayLevel设定逻辑放置到服务器', "
        "RocketMQ's internal issue #131: the retry's delay level decided by the broker, 3 + reconsumeTimes when "
        "the request asks 0; before it ConsumeMessageConcurrentlyService sent 'delayLevel = 3; if (reconsumeTimes > 0) "
        "delayLevel += delayLevel / 3')",
        ("INV-10",),
        _FIGURES_SEEN,
    ),
)
class RetryDelayStopsGrowing(Variant):
    """A send-back that leaves the delay level to the broker (0) asks level 3, or 4 once the message was retried."""

    def _send_back(self, b: Broker, original: Message, now: int, delay_level: int = 0) -> Broker:
        if delay_level == 0:
            delay_level = 3 if original.reconsume_times <= 0 else 3 + 3 // 3
        return super()._send_back(b, original, now, delay_level)


@held_out(
    "broadcast_orderly_checks_lock",
    HeldOutBug(
        "the orderly consume service of a BROADCASTING consumer checks the broker lock as a CLUSTERING one does: "
        "ConsumeRequest.run and its loop consume only while the pq is locked and its lock is younger than 30 s, and "
        "otherwise lock the queue at the broker again (tryLockLaterAndReconsume); a BROADCASTING consumer has no "
        "lockAll timer to renew the lock, so every 30 s its queue stops until a relock is granted, and a queue another "
        "consumer of the group holds is not consumed at all",
        ("R8.5", "R8.9"),
        "apache/rocketmq commit 15e0f78154 (2014-01-09, '#331 如果是广播消费，则不需要进行锁判断，也无需定时去 broker "
        "更新锁状态', RocketMQ's internal issue #331: a BROADCASTING consumer needs no lock check and no periodic lock "
        "renewal at the broker; ConsumeMessageOrderlyService.ConsumeRequest.run gained the BROADCASTING exemption, "
        "start() and shutdown() the CLUSTERING condition of lockMQPeriodically and unlockAllMQ)",
        (),
        _FIGURES_SEEN,
    ),
)
class BroadcastOrderlyChecksLock(Variant):
    """The orderly loop's lock check (locked, not isLockExpired) applies in BROADCASTING too."""

    def _orderly_run(self, s: State, i: int, r: ConsumeRequest) -> State:
        pq = s.clients[i].pqs[r.queue]
        if self.clustering or pq is None or not self._orderly_live(pq, r.pq_uid):
            return super()._orderly_run(s, i, r)
        if not (pq.locked and not self._lock_expired(pq, s.now)):
            return self._relock_later(s, i, pq.uid, r.queue, TRY_LOCK_LATER_AT_RUN)
        return super()._orderly_run(s, i, r)

    def _orderly_iterate(self, s: State, i: int, q: int, uid: int, rid: int, begin: int) -> State:
        pq = s.clients[i].pqs[q]
        if self.clustering or pq is None or not self._orderly_live(pq, uid):
            return super()._orderly_iterate(s, i, q, uid, rid, begin)
        if not pq.locked or self._lock_expired(pq, s.now):
            return self._relock_later(s, i, uid, q, TRY_LOCK_LATER_IN_LOOP)
        return super()._orderly_iterate(s, i, q, uid, rid, begin)
