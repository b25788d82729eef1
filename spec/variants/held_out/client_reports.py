"""The second held-out set (docs/held_out.md, "The second set"): consumer-offset bugs reported against the RocketMQ
Java client, its Go and C++ clients and rocketmq-spring, each planted by what the buggy code did as its report
describes it (the registry's ``citation``), overriding one helper of the model. Written apart from the search:
their catch figures were read after a change of the search (``HeldOutBug.figures_seen`` True)."""

from __future__ import annotations

from dataclasses import replace

from rmqspec.spec import broker_rules as br
from rmqspec.spec.concurrent_consume import RECONSUME_LATER, FinishConsume
from rmqspec.spec.config import FROM_FIRST, FROM_TIMESTAMP, V4_9_8
from rmqspec.spec.consumer_process import Start
from rmqspec.spec.pull import ReceivePull
from rmqspec.spec.state import Broker, Message, Scheduled, State, pq_key
from rmqspec.spec.state import put_at as _put
from rmqspec.spec.variants import Variant
from rmqspec.spec.variants.held_out import HeldOutBug, held_out

# figures_seen of every bug of this module: their catch figures were measured and read after a change of the search
# (docs/held_out.md, "The second set, measured"), so they no longer judge the next one
_FIGURES_SEEN = True


@held_out(
    "local_persist_one_noop",
    HeldOutBug(
        "BROADCASTING: LocalFileOffsetStore.persist(mq) does nothing, so the writes of one queue's offset (the "
        "OFFSET_ILLEGAL fix, a removal at rebalance) never reach offsets.json; the OFFSET_ILLEGAL fix removes the "
        "pq, the next rebalance reads the file's old illegal offset again, and the queue goes round the correction "
        "for ever",
        ("R1.13", "R5.7"),
        "apache/rocketmq#7740 '[Bug] BROADCASTING DefaultMQPushConsumer can't fix illegal pull offset' (fix: commit "
        "99bb415db4, #7745 'Optimize LocalFileOffsetStore', which gave persist(mq) a body)",
        ("INV-36",),  # a property written after this set's figures were read (docs/held_out.md)
        _FIGURES_SEEN,
    ),
)
class LocalPersistOneNoop(Variant):
    """LocalFileOffsetStore.persist(mq) is an empty method; the remote store's persist is unchanged."""

    def _persist_one(self, s: State, i: int, q: int, uid: int, cause: str) -> State:
        if self.clustering:
            return super()._persist_one(s, i, q, uid, cause)
        return s


@held_out(
    "local_offset_dir_per_start",
    HeldOutBug(
        "BROADCASTING: every start of the consumer gets a new instance name, so LocalFileOffsetStore reads and writes "
        "offsets.json under a new directory: a restarted consumer finds no stored offsets and positions every queue "
        "by consumeFromWhere, whatever its previous run consumed",
        ("R1.9", "R1.11"),
        "apache/rocketmq-spring#458 'Broadcast Mode Problem' (the local offset store generates a different folder, "
        "suffixed with a timestamp, at each start; after a restart the last saved file is not read)",
        ("INV-6b",),
        _FIGURES_SEEN,
    ),
)
class LocalOffsetDirPerStart(Variant):
    """Start of a BROADCASTING consumer loads an empty offsets.json (a new directory), not the previous one's."""

    def _start(self, s: State, a: Start) -> State:
        if self.clustering or s.clients[a.client].running:
            return super()._start(s, a)
        cl = s.clients[a.client]
        none_q: tuple[int | None, ...] = (None,) * self.q_count
        fresh = cl._replace(file=none_q, file_bak=none_q if self.track_file_bak else None, file_main_unreadable=False)
        return super()._start(s._replace(clients=_put(s.clients, a.client, fresh)), a)


@held_out(
    "local_offset_load_no_bak",
    HeldOutBug(
        "BROADCASTING: LocalFileOffsetStore.load parses offsets.json and throws when it is unreadable, with no "
        "fallback to offsets.json.bak, so a consumer whose main file was corrupted cannot start at all",
        ("R1.9", "R1.16"),
        "apache/rocketmq commit 33fef52706 (2014-07-15, 'fixed #471 修复广播消费方式，因为机器本地offset文件损坏，"
        "导致无法正常启动的问题', RocketMQ's internal issue #471: a BROADCASTING consumer could not start because its "
        "local offset file was damaged; the fix reads offsets.json.bak)",
        ("LIV-1",),
        _FIGURES_SEEN,
    ),
)
class LocalOffsetLoadNoBak(Variant):
    """DefaultMQPushConsumerImpl.start fails while offsets.json is unreadable: offsetStore.load() throws before any
    service starts, so the process runs no consumer (the state stays as it was: not running)."""

    def _start(self, s: State, a: Start) -> State:
        cl = s.clients[a.client]
        if not self.clustering and not cl.running and cl.file_main_unreadable:
            return s  # readLocalOffset throws MQClientException: start() fails, nothing is scheduled or registered
        return super()._start(s, a)


@held_out(
    "retry_queue_no_offset_skipped",
    HeldOutBug(
        "CONSUME_FROM_LAST_OFFSET: computePullFromWhere of a %RETRY% queue with no stored offset sets a local variable "
        "to 0 but returns -1, so the rebalance never adds the retry queue ('add a new mq failed') and the group never "
        "consumes its retries until an offset for it exists",
        ("R10.1", "R10.4"),
        "apache/rocketmq-client-go#530 (fix: PR #531 '[ISSUE #530] fix: initialize 0 for retry topic when "
        "ConsumeFromLastOffst', commit f904a3f)",
        ("LIV-1",),
        _FIGURES_SEEN,
    ),
)
class RetryQueueNoOffsetSkipped(Variant):
    """With LAST (or a value that behaves like it) and no offset, the retry queue gets no position: no pq."""

    def _compute_pull_from_where(
        self, s: State, i: int, q: int, uid: int, query_fails: bool
    ) -> tuple[State, int | None]:
        t, start = super()._compute_pull_from_where(s, i, q, uid, query_fails)
        if q != self.retry_queue or self.config.consume_from_where in (FROM_FIRST, FROM_TIMESTAMP) or start is None:
            return t, start
        last = t.ghost.starts[-1] if t.ghost.starts else None
        if last is None or last[0] != pq_key(i, uid) or last[2] != "consume-from-first":
            return t, start
        # no stored offset: the position consumeFromWhere gives is never returned; only the failed query's budget
        # (4.9.8 reads it as "no offset") is spent
        return s._replace(budget=t.budget), None


@held_out(
    "offset_illegal_fix_keeps_pq",
    HeldOutBug(
        "OFFSET_ILLEGAL: the fix 10 s later updates and persists the offset but deletes the pq from "
        "processQueueTable under the wrong key, so the dropped pq stays in the table without a pull loop; the "
        "rebalance keeps it until it is pull-expired (120 s) and only then places a new pq",
        ("R5.7", "R9.4"),
        "apache/rocketmq-client-go#520 '[v2.1.0-rc4][BUG]in the case of PullOffsetIllegal, it seems "
        "processQueueTable won't update correctly' (fix: PR #517, Delete(*request.mq)); the earlier fix of #414 had "
        "removed only the memory offset",
        (),
        _FIGURES_SEEN,
    ),
)
class OffsetIllegalFixKeepsPq(Variant):
    """The OFFSET_ILLEGAL task: updateOffset(increaseOnly=false) and persist(mq), but no removeProcessQueue."""

    def _apply_offset_fix(self, s: State, i: int, q: int, offset: int) -> State:
        cl = s.clients[i]
        s = s._replace(clients=_put(s.clients, i, cl._replace(mem=_put(cl.mem, q, offset))))
        pq = cl.pqs[q]
        return self._persist_one(s, i, q, -1 if pq is None else pq.uid, "offset-illegal-fix")


@held_out(
    "retry_messages_answered_later",
    HeldOutBug(
        "the consume callback is looked up by the message's topic, %RETRY%<group>, which has none, so every message "
        "of the retry queue is answered RECONSUME_LATER whatever the listener would say: it is sent back again until "
        "it reaches the DLQ",
        ("R7.3", "R7.5"),
        "apache/rocketmq-client-go#437 'fix(retry): can not consume the messages in the retry topic' (commit "
        "2c78dae: look the callback up by the RETRY_TOPIC property)",
        ("INV-24",),  # a property written after this set's figures were read (docs/held_out.md)
        _FIGURES_SEEN,
    ),
)
class RetryMessagesAnsweredLater(Variant):
    """processConsumeResult of a retry-queue request sees RECONSUME_LATER (ackIndex -1)."""

    def _finish_consume(self, s: State, a: FinishConsume) -> State:
        if self.orderly or self.retry_queue is None:
            return super()._finish_consume(s, a)
        r = next((r for r in s.clients[a.client].consuming if r.rid == a.rid), None)
        if r is None or r.queue != self.retry_queue or a.status == RECONSUME_LATER:
            return super()._finish_consume(s, a)
        return super()._finish_consume(s, replace(a, status=RECONSUME_LATER, ack_index=-1))


@held_out(
    "orderly_suspend_drops_batch",
    HeldOutBug(
        "orderly: on SUSPEND_CURRENT_QUEUE_A_MOMENT, makeMessageToConsumeAgain's putMessage skips the messages still "
        "in consumingMsgOrderlyTreeMap (it only keeps the count right) and the map is then cleared: the batch is in "
        "neither map, is never consumed again, and the next commit passes it",
        ("R8.6", "R6.4"),
        "apache/rocketmq-client-go#618 '[Master][Bug] Message lost when consumer failed in consumeOrderly' (a "
        "regression of PR #616 'putmessage should check msg in consumingMsgOrderlyTreeMap')",
        ("INV-1",),
        _FIGURES_SEEN,
    ),
)
class OrderlySuspendDropsBatch(Variant):
    """SUSPEND takes the batch out of the consuming map without putting it back in the tree (msgCount unchanged)."""

    def _orderly_finish(self, s: State, a: FinishConsume) -> State:
        t = super()._orderly_finish(s, a)
        r = next((r for r in s.clients[a.client].consuming if r.rid == a.rid), None)
        if r is None:
            return t
        before, cl = s.clients[a.client].pqs[r.queue], t.clients[a.client]
        after = cl.pqs[r.queue]
        if before is None or after is None or before.uid != after.uid:
            return t
        put_back = after.tree & ~before.tree & before.consuming_tree
        if not put_back:
            return t
        after = after._replace(tree=after.tree & ~put_back)
        return t._replace(clients=_put(t.clients, a.client, cl._replace(pqs=_put(cl.pqs, r.queue, after))))


@held_out(
    "orderly_empty_tree_corrects_offset",
    HeldOutBug(
        "orderly: correctTagsOffset tests whether msgTreeMap is empty instead of msgCount == 0, so a NO_NEW_MSG / "
        "NO_MATCHED_MSG reply while the listener holds the taken batch raises the offset to nextBeginOffset past the "
        "messages being consumed, and the persist commits it",
        ("R6.7", "R8.6"),
        "apache/rocketmq-client-cpp#322 'Consume Offset been Updated Incorrectly with Orderly Push Consumer' (an "
        "orderly consumer holding a message in its callback saw the group's offset move to the latest)",
        ("INV-2",),
        _FIGURES_SEEN,
    ),
)
class OrderlyEmptyTreeCorrectsOffset(Variant):
    """The PullCallback's correctTagsOffset of an orderly pq reads the tree of untaken messages, not msgCount."""

    def _receive_pull(self, s: State, a: ReceivePull) -> State:
        t = super()._receive_pull(s, a)
        if not self.orderly:
            return t
        cl = s.clients[a.client]
        pull = next((p for p in cl.pulls if p.pq_uid == a.pq_uid and p.epoch != -1), None)
        if pull is None or (not pull.from_slave and (not s.broker.up or pull.epoch != s.broker.epoch)):
            return t
        q, pq = pull.queue, cl.pqs[pull.queue]
        if pq is None or pq.uid != pull.pq_uid or pq.msg_count == 0 or pq.tree != 0:
            return t  # not live, or the correct correctTagsOffset already ran (msgCount 0), or messages are cached
        result = pull.result if pull.result is not None else self._pull_result(s, q, pull.offset, pull.from_slave)
        if result.status not in (br.NO_NEW_MSG, br.NO_MATCHED_MSG):
            return t
        after = t.clients[a.client]
        old = after.mem[q]
        raised = self._updated(old, result.next_begin, True)
        g = t.ghost
        if old is None or raised > old:  # the ghost the correct correctTagsOffset keeps for an orderly raise
            g = g._replace(raised_by_tags=g.raised_by_tags | {pq_key(a.client, pq.uid)})
        return t._replace(clients=_put(t.clients, a.client, after._replace(mem=_put(after.mem, q, raised))), ghost=g)


@held_out(
    "orderly_forward_to_retry",
    HeldOutBug(
        "5.x orderly: the copy sent back at maxReconsumeTimes carries RECONSUME_TIME = reconsumeTimes, and the 5.x "
        "broker moves a retry message to the DLQ only when reconsumeTimes > max, so it goes to the retry topic "
        "(delay level 3 + reconsumeTimes) instead, comes back and is retried for ever",
        ("R8.7", "R7.6"),
        "apache/rocketmq#6163 (fix: commit 7cfffe7f48, #6164 '[ISSUE #6163] Fix the issue of infinite retry of order "
        "message')",
        ("INV-10",),
        _FIGURES_SEEN,
    ),
)
class OrderlyForwardToRetry(Variant):
    """5.x: ConsumeMessageOrderlyService.sendMessageBack's copy is scheduled for %RETRY%, not stored in %DLQ%."""

    def _forward_to_dlq(self, b: Broker, original: Message, times: int, now: int) -> Broker:
        if self.config.version == V4_9_8:
            return super()._forward_to_dlq(b, original, times, now)
        msg = original._replace(reconsume_times=times, store_time=now, sent_back_at=now)
        entry = Scheduled(now + br.retry_delay_ms(times), msg)
        return b._replace(scheduled=tuple(sorted((*b.scheduled, entry), key=lambda e: e.due)))


@held_out(
    "broadcast_orderly_locks_on_add",
    HeldOutBug(
        "5.x orderly BROADCASTING: the rebalance still takes the broker lock before it adds a queue, and skips the "
        "queue when the lock fails; BROADCASTING never renews or releases it, so a second consumer of the group "
        "cannot add a queue the first one locked until that lock expires (60 s)",
        ("R8.4", "R1.3"),
        "apache/rocketmq#8772 (fix: commit 2956f6d46b, #8774 '[ISSUE #8772] Remove lock mq step in broadcasting mode "
        "rebalancing')",
        (),
        _FIGURES_SEEN,
    ),
)
class BroadcastOrderlyLocksOnAdd(Variant):
    """5.x: an orderly BROADCASTING rebalance calls lock(mq) before adding a queue, as before the fix."""

    def _locks_before_add(self) -> bool:
        return self.orderly
