"""The eleventh held-out set (docs/held_out.md, "The eleventh set: written apart from the search"): consumer-offset
bugs of apache/rocketmq-client-go's push consumer in its first v2 releases, each a place where the Go code did
something other than the Java client it follows until a later commit made it do what Java does. Planted by what the
code did before its fix (the registry's ``citation``), overriding helpers of the model. Written apart from the search:
nothing about the search or its properties was read to choose or plant them, and their catch figures were read once,
when the set was measured (``HeldOutBug.figures_seen`` True)."""

from __future__ import annotations

from rmqspec.spec.actions import FinishConsume, ReceivePull
from rmqspec.spec.state import (
    PULL_DROPPED,
    Broker,
    Client,
    ConsumeRequest,
    Message,
    ProcessQueue,
    State,
)
from rmqspec.spec.state import put_at as _put
from rmqspec.spec.variants import Variant
from rmqspec.spec.variants.held_out import HeldOutBug, held_out

# figures_seen of every bug of this module: their catch figures were read when the eleventh set judged INV-35
# (docs/held_out.md, "The eleventh set, measured"), so they judge no later change of the search or the properties
_FIGURES_SEEN = True


@held_out(
    "pull_expired_queue_kept_dropped",
    HeldOutBug(
        "the rebalance's pq-table update drops a pull-expired pq of a queue still allocated to the consumer (dropped, "
        "persist, removeOffset) but deletes the queue from the allocated set instead of the pq from "
        "processQueueTable: the dropped pq stays in the table, so no new pq is created for the queue, this round or "
        "any later one (each round finds it pull-expired again and drops it again); the queue is pulled and "
        "consumed by nobody for as long as the consumer keeps it, and what its last pulls cached is never consumed "
        "or committed",
        ("R9.4", "R6.6"),
        "apache/rocketmq-client-go PR #309 'feat(consumer): advance code' (commit c9b9f93, 2019-11-25, 'be "
        "consistent with java'): `defaultConsumer.updateProcessQueueTable`'s `else if pq.isPullExpired() && "
        "dc.cType == _PushConsume` branch set `pq.dropped = true`, ran `removeUnnecessaryMessageQueue` and then "
        "`delete(mqSet, mq)` where the fix has `dc.processQueueTable.Delete(key)`, as Java's "
        "updateProcessQueueTableInRebalance removes the pq (`it.remove()`); the branch was so from the push "
        "consumer's first version (PR #47, commit cc1dfb2, 2019-04-26) through the 2.0.0-alpha1 and 2.0.0-alpha2 "
        "releases (2019-07-19)",
        ("LIV-1", "LIV-3/4"),
        _FIGURES_SEEN,
    ),
)
class PullExpiredQueueKeptDropped(Variant):
    """Phase A, for a pq whose queue is still allocated and which is pull-expired: dropped, persist(mq),
    removeOffset(mq), and left in the table, so Phase B does not replace it. A concurrent consumer's pq is marked
    dropped with its PullRequest discarded (``PULL_DROPPED``), which keeps its consume requests and results inert; a
    late pull reply leaves it so. An orderly CLUSTERING consumer's pq goes through the orderly removal and is never
    taken out of the table. A queue no longer allocated is removed as before."""

    def _update_process_queue_table(
        self, s: State, i: int, topic_queues: tuple[int, ...], mine: set[int], fault: int | None
    ) -> tuple[State, bool]:
        for q in topic_queues:
            pq = s.clients[i].pqs[q]
            if pq is None or q not in mine or not self.pull_expired(s, pq):
                continue
            # pq.dropped = true; removeUnnecessaryMessageQueue(mq, pq); delete(mqSet, mq): the pq stays in the table
            if self.orderly_removal:
                pq = pq._replace(dropped=True)
                cl = s.clients[i]
                s = s._replace(clients=_put(s.clients, i, cl._replace(pqs=_put(cl.pqs, q, pq))))
                s, _ = self._remove_orderly(s, i, q, pq, pq.uid, "rebalance-removal")
                continue
            s = self._persist_one(s, i, q, pq.uid, "rebalance-removal")
            cl = s.clients[i]
            dropped = pq._replace(dropped=True, pull_state=PULL_DROPPED)
            cl = self._remove_offset(cl._replace(pqs=_put(cl.pqs, q, dropped)), q)
            s = s._replace(clients=_put(s.clients, i, cl))
        # the rest of the update as before, with the kept pqs hidden from it: the correct Phase A would take them out
        # (pull-expired) and Phase B would then replace them
        cl = s.clients[i]
        kept = {q: pq for q in topic_queues if q in mine and (pq := cl.pqs[q]) is not None and pq.dropped}
        hidden: tuple[ProcessQueue | None, ...] = cl.pqs
        for q in kept:
            hidden = _put(hidden, q, None)
        s = s._replace(clients=_put(s.clients, i, cl._replace(pqs=hidden)))
        s, complete = super()._update_process_queue_table(s, i, topic_queues, mine - set(kept), fault)
        cl = s.clients[i]
        pqs = cl.pqs
        for q, pq in kept.items():
            pqs = _put(pqs, q, pq)
        return s._replace(clients=_put(s.clients, i, cl._replace(pqs=pqs))), complete and not kept

    def _receive_pull(self, s: State, a: ReceivePull) -> State:
        t = super()._receive_pull(s, a)
        if self.orderly:
            return t
        cl = t.clients[a.client]
        for q, pq in enumerate(cl.pqs):
            if pq is not None and pq.uid == a.pq_uid and pq.dropped and pq.pull_state != PULL_DROPPED:
                # pullMessage returns at once for a dropped pq: its PullRequest is not run again
                cl = cl._replace(pqs=_put(cl.pqs, q, pq._replace(pull_state=PULL_DROPPED)))
                return t._replace(clients=_put(t.clients, a.client, cl))
        return t


@held_out(
    "send_back_stub_reports_success",
    HeldOutBug(
        "the push consumer's sendMessageBack is a stub that sends nothing and reports success: every message whose "
        "listener fails (CLUSTERING) is taken out of the pq and committed as if the broker had taken its retry copy, "
        "so it is never delivered again, neither from the retry topic nor, past maxReconsumeTimes, from the DLQ; "
        "with nothing sent, no send-back can fail, even with the broker down",
        ("R7.3", "R7.4"),
        "apache/rocketmq-client-go PR #119 '[ISSUE #118]add messaage sendback. resolve #118' (commit 52f5a0c, "
        "2019-07-18): before it `pushConsumer.sendMessageBack(ctx, msg)` was `return true`, so "
        "`consumeMessageCurrently` appended nothing to `msgBackFailed` and went on to `pq.removeMessage(subMsgs...)` "
        "and `storage.update(mq, offset, true)`; the fix sends CONSUMER_SEND_MSG_BACK to the broker with the delay "
        "level and maxReconsumeTimes, as Java's processConsumeResult does through sendMessageBack; the stub was so "
        "from the push consumer's first version (PR #47, commit cc1dfb2, 2019-04-26) and in the 2.0.0-alpha1 release "
        "(2019-05-21)",
        ("INV-24b",),  # a property written after this set's figures were read (docs/held_out.md)
        _FIGURES_SEEN,
    ),
)
class SendBackStubReportsSuccess(Variant):
    """CONSUMER_SEND_MSG_BACK is never sent: ``_send_back`` leaves the broker as it is (no scheduled retry, no DLQ
    copy), and processConsumeResult takes every send-back for a success, so no send-back failure can be chosen and a
    broker that is down fails none (the request is never made). cleanExpiredMsg's send-back, the same client call, is
    a no-op too. The orderly consumer's forward to the DLQ is unchanged (the Go consumer had no orderly service
    then)."""

    def _send_back(self, b: Broker, original: Message, now: int, delay_level: int = 0) -> Broker:
        return b

    def _sendable(self, cl: Client, r: ConsumeRequest, failed: tuple[tuple[int, int], ...]) -> int:
        return 0 if not self.orderly else super()._sendable(cl, r, failed)

    def _finish_consume(self, s: State, a: FinishConsume) -> State:
        if self.orderly or not self.clustering or s.broker.up:
            return super()._finish_consume(s, a)
        # the stub returns true whether the broker is reachable or not: processConsumeResult runs as if it were
        t = super()._finish_consume(s._replace(broker=s.broker._replace(up=True)), a)
        return t._replace(broker=s.broker)


@held_out(
    "lock_all_renews_refused_locks",
    HeldOutBug(
        "lockAll stamps the pq of every queue the broker did not grant locked, with a fresh lock time, where it should "
        "unlock it; a failed LOCK_BATCH_MQ (the broker down or unreachable) grants nothing, so it renews every pq's "
        "lock: an orderly consumer goes on consuming queues whose broker lock another consumer holds, or which nobody "
        "holds while the broker is away, and its lock never expires while the lockAll timer runs",
        ("R8.2", "R8.3", "R8.5"),
        "apache/rocketmq-client-go PR #309 'feat(consumer): advance code' (commit c9b9f93, 2019-11-25, 'be "
        "consistent with java'): in `defaultConsumer.lockAll` the loop over the queues missing from the broker's "
        "`lockOKMQSet` set `pq.locked = true` and `pq.lastLockTime = time.Now()`, and `doLock` answered an empty set "
        "on a request error; the fix sets `pq.WithLock(false)`, as Java's lockAll unlocks the pqs of the refused "
        "queues (an exception there changes nothing); the loop was so from the first push consumer (PR #47, commit "
        "cc1dfb2, 2019-04-26), and the orderly consumer that runs lockAll came with PR #115 (commit b0162cd, "
        "2019-07-15) and shipped in the 2.0.0-alpha2 release (2019-07-19)",
        ("INV-34",),  # its broker-down clause, written after this set's figures were read (docs/held_out.md)
        _FIGURES_SEEN,
    ),
)
class LockAllRenewsRefusedLocks(Variant):
    """lockAll: the granted queues' pqs are stamped as before; every other pq of the batch is marked locked with
    lastLockTimestamp now, where the correct lockAll unlocks it; with the broker down nothing is granted, so every pq
    of the batch is renewed (the correct lockAll, whose request throws, changes nothing). The single ``lock(mq)`` is
    unchanged."""

    def _lock(self, s: State, i: int, queues: tuple[int, ...], lock_all: bool) -> tuple[State, frozenset[int]]:
        if not lock_all:
            return super()._lock(s, i, queues, lock_all)
        s, granted = super()._lock(s, i, queues, False)  # the granted ones stamped; the rest left for below
        cl = s.clients[i]
        pqs = cl.pqs
        for q in queues:
            pq = pqs[q]
            if pq is not None and q not in granted:
                pqs = _put(pqs, q, pq._replace(locked=True, last_lock=s.now))
        return s._replace(clients=_put(s.clients, i, cl._replace(pqs=pqs))), granted
