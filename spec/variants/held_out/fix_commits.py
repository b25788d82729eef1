"""The third held-out set (docs/held_out.md, "The third set"): consumer-offset bugs found through the fix commits and
pull requests of RocketMQ's Java client and broker, its Go and C++ clients and ali-ons (the Node.js client), each
planted by what the buggy code did as its fix describes it (the registry's ``citation``), overriding one helper of the
model. Written apart from the search: nothing about the search or its properties was read to choose or plant them;
their catch figures have since been read (``HeldOutBug.figures_seen`` True)."""

from __future__ import annotations

from rmqspec.spec import broker_rules as br
from rmqspec.spec.concurrent_consume import FinishConsume
from rmqspec.spec.orderly_consume import SUSPEND_CURRENT_QUEUE_A_MOMENT
from rmqspec.spec.pull import ReceivePull
from rmqspec.spec.state import PULL_DROPPED, PULL_READY, PullInFlight, PullResult, State
from rmqspec.spec.state import bit_offsets as _bits
from rmqspec.spec.state import put_at as _put
from rmqspec.spec.variants import Variant
from rmqspec.spec.variants.held_out import HeldOutBug, held_out

# figures_seen of every bug of this module: their catch figures were measured and read (docs/held_out.md, "The third
# set, measured"), so they no longer judge the next change of the search or the properties
_FIGURES_SEEN = True

# SubscriptionGroupConfig.retryMaxTimes, the group's limit a broker applies to a client older than V3_4_9
# (the broker's send-back, ConcurrentConsumeMixin._goes_to_dlq)
_GROUP_RETRY_MAX_TIMES = 16


@held_out(
    "shutdown_persists_empty_table",
    HeldOutBug(
        "shutdown clears the pq table before persistConsumerOffset, so persistAll gets an empty set and persists "
        "nothing: what the consumer consumed since the last timer persist is never committed, and its queues' next "
        "owner (or its own restart) consumes it again",
        ("R4.4", "R2.7", "R1.12"),
        "ali-sdk/ali-ons#10 'fix: persist consumer offset issue' (commit bd2de4e, 2017-10-09: close() cleared "
        "_processQueueTable before persistConsumerOffset, whose key set was then empty)",
        ("INV-25",),  # a property written after this set's figures were read (docs/held_out.md)
        _FIGURES_SEEN,
    ),
)
class ShutdownPersistsEmptyTable(Variant):
    """The shutdown's persistAll(keys(processQueueTable)) runs on a table already cleared: it does nothing."""

    def _persist_all(self, s: State, i: int, cause: str) -> State:
        if cause == "shutdown":
            return s  # persistAll of an empty set returns at once (ConsumerProcessMixin._persist_all)
        return super()._persist_all(s, i, cause)


@held_out(
    "offset_not_found_read_as_error",
    HeldOutBug(
        "5.x: queryConsumerOffset throws OffsetNotFoundException for PULL_NOT_FOUND (19) instead of QUERY_NOT_FOUND "
        "(22), so the broker's 'no offset' answer is an MQBrokerException, readOffset gives -2 (a failed read) and "
        "computePullFromWhere throws: a queue the group has no offset for is skipped at every rebalance and never "
        "consumed",
        ("R2.3", "R10.1", "R10.4"),
        "apache/rocketmq#4504 'Fix the offset not found and add some tests' (commit 13ffac8926, 2022-06-24; "
        "rocketmq-all-5.0.0-ALPHA shipped the wrong code); the same mistake in apache/rocketmq-client-go#886 "
        "'[feat] fix query not found' (commit ffd7241)",
        ("LIV-1",),
        _FIGURES_SEEN,
    ),
)
class OffsetNotFoundReadAsError(Variant):
    """5.x readOffset takes QUERY_NOT_FOUND for a failed read (-2) rather than 'no offset' (-1)."""

    def _compute_pull_from_where(
        self, s: State, i: int, q: int, uid: int, query_fails: bool
    ) -> tuple[State, int | None]:
        if not self.clustering or query_fails or self.config.broker_error_reads_as_no_offset:
            return super()._compute_pull_from_where(s, i, q, uid, query_fails)
        asked = s.broker if s.broker.up else s.slave
        if asked is None or self._query_consumer_offset(asked, q) is not br.QUERY_NOT_FOUND:
            return super()._compute_pull_from_where(s, i, q, uid, query_fails)
        # MQBrokerException(QUERY_NOT_FOUND) -> readOffset -2 -> computePullFromWhereWithException throws
        # (RebalanceMixin._compute_pull_from_where)
        return s, None if self.config.read_error_throws else -1


@held_out(
    "orderly_new_pq_unlocked",
    HeldOutBug(
        "orderly: the rebalance takes the broker lock before it adds a queue, while the queue has no pq yet, and "
        "creates the new pq unlocked; pullMessage of an unlocked orderly pq only retries later, so the queue is not "
        "pulled until lockAll marks it locked (CLUSTERING, up to 20 s) and, in BROADCASTING, where no lockAll runs, "
        "never",
        ("R8.4", "R5.1", "R9.4"),
        "apache/rocketmq#5465 '4.9.x lock issue for DefaultMQPushConsumer order consume' (fix: PR #5466 'Fix order "
        "consumer's lock issue when first start', commit eeecef3506, pq.setLocked(true)); also reported as "
        "apache/rocketmq#2621, and as 'ORDERLY does not work with BROADCASTING' in apache/rocketmq-externals#109",
        (),
        _FIGURES_SEEN,
    ),
)
class OrderlyNewPqUnlocked(Variant):
    """updateProcessQueueTableInRebalance creates an orderly pq with locked = false (lastLockTimestamp: creation)."""

    def _update_process_queue_table(
        self, s: State, i: int, topic_queues: tuple[int, ...], mine: set[int], fault: int | None
    ) -> tuple[State, bool]:
        t, complete = super()._update_process_queue_table(s, i, topic_queues, mine, fault)
        if not self.orderly:
            return t, complete
        first_new = s.clients[i].seq
        cl = t.clients[i]
        pqs = tuple(
            pq._replace(locked=False) if pq is not None and pq.uid >= first_new and q in topic_queues else pq
            for q, pq in enumerate(cl.pqs)
        )
        if pqs == cl.pqs:
            return t, complete
        return t._replace(clients=_put(t.clients, i, cl._replace(pqs=pqs))), complete


@held_out(
    "consume_result_lost_to_npe",
    HeldOutBug(
        "ConsumeRequest.run dereferences the consume-hook context, null when no hook is registered, right after the "
        "listener returns: the NullPointerException ends the request before processConsumeResult, so nothing "
        "consumed is removed from the pq, sent back or committed (an orderly run leaves its batch in the consuming "
        "map and stops), and the offset never moves past the first message",
        ("R7.2", "R7.3", "R8.6"),
        "apache/rocketmq ROCKETMQ-35 'Consumer client can't persist consume offset table to Broker' (PR #32; fix: "
        "commit 85467dfd34, 2017-01-09, 'Reslove underlying NPE in ConsumeRequest', in both consume services)",
        ("INV-2b", "INV-24c"),  # written after this set's figures were read (docs/held_out.md)
        _FIGURES_SEEN,
    ),
)
class ConsumeResultLostToNpe(Variant):
    """The listener returns and its thread dies before processConsumeResult: the answer changes nothing."""

    def _finish_consume(self, s: State, a: FinishConsume) -> State:
        super()._finish_consume(s, a)  # the answer must be a possible one (raises ActionNotEnabled otherwise)
        cl, k = self._running_listener(s, a)
        cl = cl._replace(consuming=cl.consuming[:k] + cl.consuming[k + 1 :])
        return s._replace(clients=_put(s.clients, a.client, cl))


@held_out(
    "orderly_shutdown_keeps_locks",
    HeldOutBug(
        "orderly CLUSTERING: shutdown does not unlockAll, so the broker keeps the departed consumer's locks until "
        "they expire (60 s) and the consumers that the rebalance gives its queues cannot lock them meanwhile",
        ("R4.4", "R8.2", "R8.4"),
        "apache/rocketmq-client-go#1015 (commit 9bca88d, 'fix: unlock all queues when consumer shutdown in orderly "
        "model')",
        ("INV-26",),  # a property written after this set's figures were read (docs/held_out.md)
        _FIGURES_SEEN,
    ),
)
class OrderlyShutdownKeepsLocks(Variant):
    """ConsumeMessageOrderlyService.shutdown sends no unlockAll(false)."""

    def _unlock_all(self, s: State, i: int) -> State:
        return s


@held_out(
    "orderly_suspend_counts_twice",
    HeldOutBug(
        "orderly: on SUSPEND_CURRENT_QUEUE_A_MOMENT the batch is put back with putMessage, which counts it again "
        "while it also stays in consumingMsgOrderlyTreeMap: msgCount grows by the batch at every suspend and never "
        "comes back down, so flow control holds the queue's pulls for good and correctTagsOffset never runs",
        ("R6.4", "R6.5", "R8.6"),
        "apache/rocketmq-client-go#615 '[Master][BUG] cachedMsgCount not correct when consumer failed in "
        "consumeOrderly' (fix: PR #616, commit 1d1959a, 'putmessage should check msg in consumingMsgOrderlyTreeMap')",
        ("INV-1",),
        _FIGURES_SEEN,
    ),
)
class OrderlySuspendCountsTwice(Variant):
    """SUSPEND puts the batch back in the tree with putMessage: the count grows, the consuming map keeps it."""

    def _orderly_finish(self, s: State, a: FinishConsume) -> State:
        t = super()._orderly_finish(s, a)
        r = next((r for r in s.clients[a.client].consuming if r.rid == a.rid), None)
        if r is None or a.status != SUSPEND_CURRENT_QUEUE_A_MOMENT:
            return t
        before, cl = s.clients[a.client].pqs[r.queue], t.clients[a.client]
        after = cl.pqs[r.queue]
        if before is None or after is None or before.uid != after.uid or before.uid != r.pq_uid:
            return t
        put_back = after.tree & ~before.tree & before.consuming_tree
        if not put_back:
            return t  # the batch was forwarded, or not put back
        queue = t.broker.queues[r.queue]
        offsets = _bits(put_back)
        after = after._replace(
            consuming_tree=after.consuming_tree | put_back,
            msg_count=after.msg_count + len(offsets),
            msg_size=after.msg_size + sum(br.body_size(queue.messages[o]) for o in offsets),
            queue_offset_max=offsets[-1],  # putMessage: the last new message's offset
        )
        return t._replace(clients=_put(t.clients, a.client, cl._replace(pqs=_put(cl.pqs, r.queue, after))))


@held_out(
    "tags_offset_skips_zero",
    HeldOutBug(
        "the NO_NEW_MSG / NO_MATCHED_MSG handling updates the consume offset only when nextBeginOffset > 0, so a pq "
        "positioned at 0 on an empty queue never records offset 0: nothing is persisted for the queue, the broker "
        "(or offsets.json) keeps no offset, and a restart positions it by consumeFromWhere again",
        ("R5.7", "R6.7"),
        "apache/rocketmq-client-cpp#489 'Fix negtive diff in-some-case' (commit c3e706d, 2025: "
        "'(getCacheMsgCount() == 0) && (nextBeginOffset > 0)' becomes '>= 0')",
        (),
        _FIGURES_SEEN,
    ),
)
class TagsOffsetSkipsZero(Variant):
    """correctTagsOffset is skipped when the reply's nextBeginOffset is 0."""

    def _receive_pull(self, s: State, a: ReceivePull) -> State:
        cl = s.clients[a.client]
        pull = next((p for p in cl.pulls if p.pq_uid == a.pq_uid and p.epoch != -1), None)
        t = super()._receive_pull(s, a)
        if pull is None:
            return t
        result = _reply(self, s, pull)
        if result.status not in (br.NO_NEW_MSG, br.NO_MATCHED_MSG) or result.next_begin != 0:
            return t
        q, after = pull.queue, t.clients[a.client]
        if after.mem[q] == cl.mem[q]:
            return t
        return t._replace(
            clients=_put(t.clients, a.client, after._replace(mem=_put(after.mem, q, cl.mem[q]))),
            ghost=t.ghost._replace(raised_by_tags=s.ghost.raised_by_tags),
        )


def _reply(m: Variant, s: State, pull: PullInFlight) -> PullResult:
    """The result a ReceivePull of ``pull`` handles (a held pull is answered from the queue now)."""
    return pull.result if pull.result is not None else m._pull_result(s, pull.queue, pull.offset, pull.from_slave)


@held_out(
    "rebalance_keeps_dirty_offset",
    HeldOutBug(
        "the rebalance adds a queue without removeDirtyOffset: a memory offset left from an earlier ownership (a "
        "dropped pq's late correctTagsOffset, an OFFSET_ILLEGAL fix that found no pq) survives whenever "
        "computePullFromWhere does not overwrite it (no stored offset), and the new pq's persists commit that stale "
        "value: the consume offset goes back",
        ("R9.4", "R9.5", "R6.7"),
        "apache/rocketmq commit c3f0c4b42b (2016-02-24, 'Issue #17 消费位点回退问题bugfix', RocketMQ's internal issue "
        "#17: consume offset rollback; the fix added removeDirtyOffset(mq) before computePullFromWhere)",
        (),
        _FIGURES_SEEN,
    ),
)
class RebalanceKeepsDirtyOffset(Variant):
    """Phase B of updateProcessQueueTableInRebalance does not remove the memory offset of a queue it adds."""

    def _update_process_queue_table(
        self, s: State, i: int, topic_queues: tuple[int, ...], mine: set[int], fault: int | None
    ) -> tuple[State, bool]:
        t, complete = super()._update_process_queue_table(s, i, topic_queues, mine, fault)
        before, cl = s.clients[i], t.clients[i]
        mem = cl.mem
        for q in mine:
            if before.pqs[q] is None and before.mem[q] is not None and mem[q] is None:
                mem = _put(mem, q, before.mem[q])  # no removeDirtyOffset, and no stored offset overwrote it
        if mem is cl.mem:
            return t, complete
        return t._replace(clients=_put(t.clients, i, cl._replace(mem=mem))), complete


@held_out(
    "send_back_limit_from_group",
    HeldOutBug(
        "the client announces a protocol version older than V3_4_9 in its requests, so the broker's "
        "CONSUMER_SEND_MSG_BACK ignores the request's maxReconsumeTimes and applies the group's retryMaxTimes (16): "
        "a consumer configured with fewer retries has its failed messages retried up to 16 times before the DLQ",
        ("R7.5", "R7.4"),
        "ali-sdk/ali-ons#73 'fix: retry should process by broker' (commit 56b917c, 2019-04-12: the request version "
        "78 became 121, V3_4_9, 'which supports setting the retry maxReconsumeTimes')",
        ("INV-10",),
        _FIGURES_SEEN,
    ),
)
class SendBackLimitFromGroup(Variant):
    """The broker routes a sent-back message to the DLQ at the group's retryMaxTimes, not the client's maximum."""

    def _goes_to_dlq(self, times: int) -> bool:
        return times >= _GROUP_RETRY_MAX_TIMES


@held_out(
    "offset_illegal_pulls_on",
    HeldOutBug(
        "OFFSET_ILLEGAL: the PullCallback overwrites the memory offset with the corrected one at once and pulls again "
        "from it with the same pq, neither dropping the pq nor waiting: results of requests already handed out keep "
        "landing on the corrected offset, and the correction is never persisted or followed by a removal",
        ("R5.7", "R6.7"),
        "apache/rocketmq commit ba2d1b7f83 (2014-05-01, '优化服务器纠正客户端Offset的逻辑', optimise the logic by "
        "which the server corrects the client's offset: drop the pq, wait 10 s 'so that the offset is not "
        "overwritten after the update', then correct, persist and remove the pq)",
        (),
        _FIGURES_SEEN,
    ),
)
class OffsetIllegalPullsOn(Variant):
    """The OFFSET_ILLEGAL branch: nextOffset := nextBeginOffset, updateOffset(increaseOnly=false), pull again now."""

    def _offset_illegal(self, s: State, i: int, pull: PullInFlight, next_begin: int) -> State:
        cl = s.clients[i]
        q = pull.queue
        cl = cl._replace(mem=_put(cl.mem, q, next_begin))  # no dropped check in the branch
        pq = cl.pqs[q]
        if pq is not None and pq.uid == pull.pq_uid and pq.pull_state != PULL_DROPPED:
            pq = pq._replace(next_offset=next_begin, pull_state=PULL_READY, pull_ready_at=s.now)
            cl = cl._replace(pqs=_put(cl.pqs, q, pq))
        return s._replace(clients=_put(s.clients, i, cl))
