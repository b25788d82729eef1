"""The fourth held-out set (docs/held_out.md, "The fourth set"): consumer-offset bugs found through the fix commits of
RocketMQ's pre-Apache history (2013-2016, the internal issue numbers of the imported Alibaba repository) and of the Go
client, each planted by what the buggy code did as its fix describes it (the registry's ``citation``), overriding one
helper of the model. Written apart from the search: nothing about the search or its properties was read to choose or
plant them, and their catch figures have not been seen (``HeldOutBug.figures_seen`` False)."""

from __future__ import annotations

from rmqspec.spec import broker_rules as br
from rmqspec.spec.broker import BrokerReceive
from rmqspec.spec.config import FROM_FIRST, FROM_TIMESTAMP
from rmqspec.spec.model import Model
from rmqspec.spec.pull import PULL_DELAY_WHEN_EXCEPTION
from rmqspec.spec.state import (
    Broker,
    BrokerQueue,
    Client,
    Commit,
    ConsumeRequest,
    ProcessQueue,
    PullResult,
    State,
    pq_key,
)
from rmqspec.spec.state import put_at as _put
from rmqspec.spec.variants import Variant
from rmqspec.spec.variants.held_out import HeldOutBug, held_out

# figures_seen of every bug of this module: their catch figures have been read (docs/held_out.md, "The fourth set,
# measured"), so they no longer judge a change of the search or the properties: the next one needs a fifth set
_FIGURES_SEEN = True


@held_out(
    "young_queue_zero_from_disk",
    HeldOutBug(
        "QUERY_CONSUMER_OFFSET answers 0 to a group with no offset whenever the queue was never truncated (minOffset "
        "<= 0), without asking whether message 0 is still in memory: a new group set to CONSUME_FROM_LAST_OFFSET (or "
        "a timestamp) on a queue whose history is on disk starts at 0 and consumes the whole retained backlog",
        ("R3.5", "R10.4"),
        "apache/rocketmq commit ccdfc0c339 (2014-10-04, '优化最新位点消费：当消息的最小位点为0而且该消息落在内存中，"
        "才从0位点开始消费', consume-from-latest: start at offset 0 only when the queue's minimum offset is 0 and "
        "that message is in memory; before it the broker answered 0 for any minOffset <= 0); the narrower rule left "
        "is RMQ-15",
        ("INV-37",),  # a property written after this set's figures were read (docs/held_out.md)
        _FIGURES_SEEN,
    ),
)
class YoungQueueZeroFromDisk(Variant):
    """The offset query's answer without the checkInDiskByConsumeOffset / checkInMemByConsumeOffset test."""

    def _query_consumer_offset(self, b: Broker, q: int) -> int | None:
        stored = b.offsets[q]
        if stored is not None and stored >= 0:
            return stored
        return 0 if b.queues[q].min_offset <= 0 else br.QUERY_NOT_FOUND


@held_out(
    "timestamp_searched_in_seconds",
    HeldOutBug(
        "CONSUME_FROM_TIMESTAMP: computePullFromWhere sends SEARCH_OFFSET_BY_TIMESTAMP the consumeTimestamp in "
        "seconds (t.Unix()) where the broker expects milliseconds, so the search looks a thousand times further back "
        "and a group with no offset starts at the queue's first readable message instead of at the timestamp: it "
        "consumes everything stored before the time it asked for",
        ("R10.1", "R10.3"),
        "apache/rocketmq-client-go PR #282 'fix(protocol): SearchOffsetByTimestamp protocol bug' (commit 92dfa3b, "
        "2019-11-04: 'use millis instead of seconds', searchOffsetByTimestamp(mq, t.Unix()*1000))",
        ("INV-37",),  # a property written after this set's figures were read (docs/held_out.md)
        _FIGURES_SEEN,
    ),
)
class TimestampSearchedInSeconds(Variant):
    """The TIMESTAMP position of a topic queue with no offset is searched for consumeTimestamp / 1000."""

    def _compute_pull_from_where(
        self, s: State, i: int, q: int, uid: int, query_fails: bool
    ) -> tuple[State, int | None]:
        t, start = super()._compute_pull_from_where(s, i, q, uid, query_fails)
        if start is None or self.config.consume_from_where != FROM_TIMESTAMP or q == self.retry_queue:
            return t, start
        last = t.ghost.starts[-1] if t.ghost.starts else None
        if last is None or last[0] != pq_key(i, uid) or last[2] != "consume-from-timestamp":
            return t, start
        wrong = br.search_offset(t.broker.queues[q], self.config.consume_timestamp // 1000)
        if wrong == start:
            return t, start
        # the same step with the other position: memory and budget as the correct step left them (no stored offset,
        # so nothing was seeded), the ghost and history recorded again for the position the search gave
        base = t._replace(ghost=s.ghost, history=s.history)
        return self._positioned(base, i, q, uid, wrong, "consume-from-timestamp", True, query_fails), wrong


@held_out(
    "removal_counts_absent_messages",
    HeldOutBug(
        "ProcessQueue.removeMessage lowers msgCount by the number of messages it is given, found in the tree or not: "
        "a message removed twice (cleanExpiredMsg took it out while its listener still ran, and the listener's "
        "processConsumeResult removes it again) is uncounted twice, so msgCount falls below what the pq holds and "
        "flow control (pullThresholdForQueue) no longer holds the queue's pulls back",
        ("R6.3", "R6.5"),
        "apache/rocketmq commit fa1eab5c6d (2013-12-18, 'fixed #302 从ProcessQueue中删除消息，也要判断是否有消息存在', "
        "RocketMQ's internal issue #302: removing a message from the ProcessQueue must check it is there; "
        "removeMessage did msgCount.addAndGet(-msgs.size()))",
        ("INV-1",),
        _FIGURES_SEEN,
    ),
)
class RemovalCountsAbsentMessages(Variant):
    """removeMessage of a non-empty tree subtracts every offset it is given from msgCount (msgSize as before)."""

    def _remove_message(self, pq: ProcessQueue, offsets: list[int], queue: BrokerQueue) -> tuple[ProcessQueue, int]:
        t, result = super()._remove_message(pq, offsets, queue)
        if pq.tree == 0:
            return t, result  # an empty tree returns -1 and changes nothing
        absent = sum(1 for o in set(offsets) if not pq.tree >> o & 1)
        if not absent:
            return t, result
        return t._replace(msg_count=t.msg_count - absent), result


@held_out(
    "flow_control_keeps_pull_time",
    HeldOutBug(
        "pullMessage stamps lastPullTimestamp only when a pull is actually sent, after the flow-control checks: a pq "
        "held back by pullThresholdForQueue (a slow listener, a full cache) for more than 120 s looks pull-idle, and "
        "the rebalance drops it and creates a new one from the committed offset, throwing away its cache and the "
        "results of the listeners still running: the messages are delivered again",
        ("R5.1", "R6.6", "R9.4"),
        "apache/rocketmq commit 11c9f96f15 (2014-06-11, '修复PullMessage过程中，"
        "对PullRequest增加时间戳的代码进行优化': setLastPullTimestamp moved from the send, after flow "
        "control returns, to the start of pullMessage), five weeks after the pull-idle removal came in (commit "
        "9e590d6ad9, 2014-05-02)",
        (),
        _FIGURES_SEEN,
    ),
)
class FlowControlKeepsPullTime(Variant):
    """Flow control's 50 ms retries do not stamp lastPullTimestamp."""

    def _flow_control_retries(self, s: State) -> State:
        return s


@held_out(
    "rebalance_removal_skips_persist",
    HeldOutBug(
        "removeUnnecessaryMessageQueue does not persist the offset of a queue the rebalance gives up before removing "
        "it: what the consumer consumed since the last 5 s persist never reaches the broker, and the queue's new owner "
        "starts at the older committed offset and consumes those messages again",
        ("R9.5", "R2.6"),
        "apache/rocketmq commit 169294184b (2013-07-03, 'fixed #93 rebalance完成后，"
        "需要把丢弃的队列offset上传到Broker', internal issue #93: after a rebalance the offsets of the "
        "dropped queues must be uploaded to the broker; the fix added OffsetStore.persist(mq) and called it in "
        "removeUnnecessaryMessageQueue)",
        ("INV-36",),  # a property written after this set's figures were read (docs/held_out.md)
        _FIGURES_SEEN,
    ),
)
class RebalanceRemovalSkipsPersist(Variant):
    """persist(mq) of the rebalance's removal (Phase A, and the orderly removal it calls) sends or writes nothing."""

    def _persist_one(self, s: State, i: int, q: int, uid: int, cause: str) -> State:
        if cause == "rebalance-removal":
            return s
        return super()._persist_one(s, i, q, uid, cause)


@held_out(
    "orderly_take_keeps_consuming",
    HeldOutBug(
        "orderly: ProcessQueue.takeMessages clears the consuming flag only when it finds the tree non-empty, so the "
        "loop that ends on an empty tree leaves consuming set; the next pull's putMessage then never returns true, no "
        "consume request is submitted for the new messages, and the queue stops being consumed for good",
        ("R6.4", "R8.4", "R8.5"),
        "apache/rocketmq commit 6f79c52cb0 (2013-08-29, '#230 修复从ProcessQueue取顺序消息，设置消费状态错误的问题', "
        "internal issue #230: taking orderly messages from the ProcessQueue set the consuming state wrongly; "
        "'consuming = false' moved out of the non-empty branch)",
        ("LIV-5",),
        _FIGURES_SEEN,
    ),
)
class OrderlyTakeKeepsConsuming(Variant):
    """The orderly loop's take on an empty tree ends the run but leaves pq.consuming true."""

    def _orderly_iterate(self, s: State, i: int, q: int, uid: int, rid: int, begin: int) -> State:
        t = super()._orderly_iterate(s, i, q, uid, rid, begin)
        before, after = s.clients[i].pqs[q], t.clients[i].pqs[q]
        if before is None or after is None or before.uid != uid or after.uid != uid:
            return t
        if before.tree or not before.consuming or after.consuming:
            return t  # not the empty take that clears the flag
        cl = t.clients[i]
        return t._replace(clients=_put(t.clients, i, cl._replace(pqs=_put(cl.pqs, q, after._replace(consuming=True)))))


@held_out(
    "consume_batches_skip_one",
    HeldOutBug(
        "submitting a pull's messages to the consume goroutines, the batch loop advances its index past each full "
        "batch and then once more (count = next and the loop's count++), so the message after every full batch is "
        "never handed to a listener: it stays in the pq, holds the queue's commit point below it, and the queue's "
        "offset never passes it",
        ("R7.1", "R6.3"),
        "apache/rocketmq-client-go#183 'Repeated consumption problem when changing consumeMessageBatchMaxSize' (commit "
        "370dbcd, 2019-09-15, '[ISSUE #183] add set consumeMessageBatchMaxSize and fixed count++ skip one message')",
        ("LIV-5",),
        _FIGURES_SEEN,
    ),
)
class ConsumeBatchesSkipOne(Variant):
    """consumeMessageCurrently's split: after a batch [k, k + size) that is not the last, the next starts at k + size
    + 1; a remainder that does not fill a batch is the last (Go: if count + size > len(msgs))."""

    def _submit_consume_requests(
        self, cl: Client, q: int, uid: int, found: tuple[int, ...], queue: BrokerQueue, now: int
    ) -> Client:
        requests = list(cl.requests)
        seq = cl.seq
        batch = self.config.consume_batch_size
        k = 0
        while k < len(found):
            if k + batch > len(found):
                chunk, k = found[k:], len(found)
            else:
                chunk, k = found[k : k + batch], k + batch
            k += 1  # the for loop's count++
            msgs = tuple((o, queue.messages[o].reconsume_times) for o in chunk)
            requests.append(ConsumeRequest(seq, q, uid, msgs, now))
            seq += 1
        return cl._replace(requests=tuple(requests), seq=seq)


@held_out(
    "retry_queue_from_last_max",
    HeldOutBug(
        "CONSUME_FROM_LAST_OFFSET positions a %RETRY% queue the group has no offset for at its max offset like any "
        "other queue, not at 0: the retry messages stored before the group's first positioning there (failures sent "
        "back while the queue had no committed offset) are skipped and never consumed again",
        ("R10.1", "R10.4"),
        "apache/rocketmq commit 568d98731e (2013-07-18, '#4 修复可能导致重试队列丢消息的问题', fix a possible loss of "
        "retry-queue messages: computePullFromWhere's CONSUME_FROM_LAST_OFFSET gained the %RETRY% case, 0 instead of "
        "Long.MAX_VALUE, which the broker's correction had turned into maxOffset)",
        ("INV-37",),  # a property written after this set's figures were read (docs/held_out.md)
        _FIGURES_SEEN,
    ),
)
class RetryQueueFromLastMax(Variant):
    """With LAST (or a value that behaves like it) and no offset, the retry queue is positioned at maxOffset."""

    def _compute_pull_from_where(
        self, s: State, i: int, q: int, uid: int, query_fails: bool
    ) -> tuple[State, int | None]:
        t, start = super()._compute_pull_from_where(s, i, q, uid, query_fails)
        if q != self.retry_queue or self.config.consume_from_where in (FROM_FIRST, FROM_TIMESTAMP) or start is None:
            return t, start
        last = t.ghost.starts[-1] if t.ghost.starts else None
        if last is None or last[0] != pq_key(i, uid) or last[2] != "consume-from-first":
            return t, start  # a stored offset (or a young queue's 0) decided
        if not s.broker.up:  # GET_MAX_OFFSET goes to the master only: MQClientException, the queue is skipped
            return s._replace(budget=t.budget), None
        wrong = s.broker.queues[q].max_offset
        base = t._replace(ghost=s.ghost, history=s.history)
        return self._positioned(base, i, q, uid, wrong, "consume-from-last", True, query_fails), wrong


@held_out(
    "orderly_first_pull_waits_for_broker",
    HeldOutBug(
        "orderly: the first pull of a newly locked pq re-reads the offset from the broker and, when the broker's "
        "offset is below the pull request's nextOffset, does not pull but retries later, again and again: while the "
        "broker's offset stays below (a restarted broker that had not flushed the last commit, a stale commit that "
        "landed late), nobody consumes the queue and it stays blocked",
        ("R5.1", "R8.4"),
        "apache/rocketmq commit effb0e74cd (2016-08-31, 'Issue #106 顺序消息拉消息死锁, pull 消息 block 的问题', "
        "internal issue #106: orderly pulls deadlocked, pulling blocked; the fix turned the 'brokerBusy' check into a "
        "log line and pulls from the broker's offset; the check came in with commit fe2382b19e of 2015-10-21)",
        ("LIV-5",),
        _FIGURES_SEEN,
    ),
)
class OrderlyFirstPullWaitsForBroker(Variant):
    """pullMessage's first locked pull: a re-read offset below nextOffset puts the pull off by
    pullTimeDelayMillsWhenException and leaves the request not yet previously-locked, so the next try re-reads."""

    def _orderly_pull_gate(self, s: State, i: int, q: int, pq: ProcessQueue) -> tuple[State, ProcessQueue, bool]:
        t, gated, ready = super()._orderly_pull_gate(s, i, q, pq)
        if not ready or not pq.locked or pq.previously_locked or gated.next_offset >= pq.next_offset:
            return t, gated, ready
        later = pq._replace(pull_ready_at=s.now + PULL_DELAY_WHEN_EXCEPTION)  # executePullRequestLater; return
        cl = t.clients[i]
        return t._replace(clients=_put(t.clients, i, cl._replace(pqs=_put(cl.pqs, q, later)))), later, False


def _commit_throws(m: Model, b: Broker, q: int) -> bool:
    """ConsumerOffsetManager.commitOffset's NullPointerException: the topic@group key already has a map (another
    queue of the same topic has an offset) but it has no entry for queue ``q``. The retry queue is the only queue of
    its own key."""
    same_key = m.topic_queues if q in m.topic_queues else (q,)
    return b.offsets[q] is None and any(b.offsets[k] is not None for k in same_key if k != q)


@held_out(
    "commit_of_new_queue_dropped",
    HeldOutBug(
        "the broker's commitOffset unboxes the stored offset of the queue to compare it with the new one, which is a "
        "NullPointerException for a queue that has no entry yet while its topic@group key has one: the first commit of "
        "every queue but the first of a topic fails, and so does each later one, so those queues never get a stored "
        "offset (an UPDATE_CONSUMER_OFFSET is dropped; a pull carrying the commit is answered with an error); the next "
        "start of the group positions them by consumeFromWhere again",
        ("R3.2", "R3.4", "R5.4"),
        "apache/rocketmq commit 7b29c79815 (2015-12-11, '... 2. offset失败提交', offset commits failing: "
        "ConsumerOffsetManager.commitOffset's 'long storeOffset = map.get(queueId)', added with a warning on lower "
        "commits by commit 87bca1d158 on 2015-12-02, became 'Long storeOffset = map.put(queueId, offset)')",
        ("LIV-2",),
        _FIGURES_SEEN,
    ),
)
class CommitOfNewQueueDropped(Variant):
    """On the master, a commit (oneway or piggy-backed) of a queue that has no entry in a key that has one throws: the
    commit is not stored, and a pull carrying it gets SYSTEM_ERROR (the client's exception path)."""

    def _broker_receive(self, s: State, a: BrokerReceive) -> State:
        item, rest, _ = self._take_request(s, a)
        carries = isinstance(item, Commit) or item.commit_flag
        pull_rejected = not isinstance(item, Commit) and not s.broker.registered  # SUBSCRIPTION_NOT_EXIST first
        if item.to_slave or not carries or not s.broker.up or pull_rejected:
            return super()._broker_receive(s, a)
        if not _commit_throws(self, s.broker, item.queue):
            return super()._broker_receive(s, a)
        cl = s.clients[a.client]._replace(channel=rest)
        if isinstance(item, Commit):
            return s._replace(clients=_put(s.clients, a.client, cl))  # the oneway request's handler threw
        # the broker's pull handler throws in commitOffset after the store read: an error response, which the
        # PullCallback takes as an exception (the pull-status handling, PullMixin._receive_pull)
        result = PullResult(br.PULL_ERROR, (), item.offset)
        epoch = s.broker.epoch
        pulls = tuple(
            p._replace(epoch=epoch, result=result) if p.pq_uid == item.pq_uid and p.epoch == -1 else p for p in cl.pulls
        )
        return s._replace(clients=_put(s.clients, a.client, cl._replace(pulls=pulls)))
