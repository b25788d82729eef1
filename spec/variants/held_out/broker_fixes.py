"""The sixth held-out set's broker half (docs/held_out.md, "The sixth set: written apart from the search", "Broker
half"): consumer-offset bugs of the broker's side (its offset table and what cleans it, its answer to an offset
query, its delivery of sent-back messages), found through fix commits of RocketMQ's broker and of
mxsm/rocketmq-rust's, each planted by what the buggy code did as its fix describes it (the registry's ``citation``),
overriding one helper of the model. Written apart from the search: nothing about the search or its properties was
read to choose or plant them, and their catch figures have not been seen (``HeldOutBug.figures_seen`` False)."""

from __future__ import annotations

from rmqspec.spec.broker import DeliverScheduled
from rmqspec.spec.pull import RetentionDelete
from rmqspec.spec.state import State
from rmqspec.spec.variants import Variant
from rmqspec.spec.variants.held_out import HeldOutBug, held_out

# figures_seen of every bug of this module: their catch figures were read when the sixth set judged INV-27 and INV-28
# (docs/held_out.md, "The sixth set, measured"), so they judge no later change of the search or the properties
_FIGURES_SEEN = True


@held_out(
    "offset_scan_ignores_online_group",
    HeldOutBug(
        "the broker's periodic scanUnsubscribedTopic removes a topic@group key whose every offset is at or below its "
        "queue's minOffset (offsetBehindMuchThanData) without asking whether the group still subscribes to the topic "
        "online: a running group whose queues retention has overtaken, or whose queues are empty at offset 0, loses "
        "its committed offsets while it consumes, and the next positioning of those queues (a restart, a new owner "
        "after a rebalance) starts by consumeFromWhere instead of the group's offset",
        ("R3.9", "R10.4"),
        "apache/rocketmq commit e629a045c1 (2014-06-27, '定时清理消费端偏移量增加消费端链接状态校验', the scheduled "
        "cleanup of consumer offsets gains a check of the consumer's connection state: ConsumerOffsetManager."
        "scanUnsubscribedTopic removes a key only when ConsumerManager.findSubscriptionData(group, topic) is null, "
        "the group's consumers being offline, and its offsets are behind the data)",
        (),
        _FIGURES_SEEN,
    ),
)
class OffsetScanIgnoresOnlineGroup(Variant):
    """After a retention delete (the only action that raises a queue's minOffset), the broker's hourly offset scan
    runs: every topic@group key (the topic's, the retry topic's) whose stored offsets are all at or below their
    queues' minOffset is removed, the group online or not; the correct 4.9.8 broker never calls the scan (R3.9)."""

    def _retention_delete(self, s: State, a: RetentionDelete) -> State:
        t = super()._retention_delete(s, a)
        b = t.broker
        keys = [self.topic_queues] + ([(self.retry_queue,)] if self.retry_queue is not None else [])
        offsets = list(b.offsets)
        for queues in keys:
            stored = [(q, b.offsets[q]) for q in queues if b.offsets[q] is not None]
            if stored and all(o is not None and o <= b.queues[q].min_offset for q, o in stored):
                for q, _ in stored:
                    offsets[q] = None
        if tuple(offsets) == b.offsets:
            return t
        return t._replace(broker=b._replace(offsets=tuple(offsets)))


@held_out(
    "query_success_without_offset",
    HeldOutBug(
        "the broker's QUERY_CONSUMER_OFFSET handler answers SUCCESS without its response header, so the reply to a "
        "group that has an offset (or to a young queue's 0) carries no offset: the client's decode of the missing "
        "field throws, readOffset(READ_FROM_STORE) reads the exception as a failed read (-2), and the rebalance gives "
        "the queue no pq, every round, while the broker holds an offset for it; only a queue the broker answers "
        "QUERY_NOT_FOUND is positioned (by consumeFromWhere)",
        ("R3.5", "R2.3", "R10.1"),
        "mxsm/rocketmq-rust#746 ('Java Client can not consumer message', fixed by commit 4cff9d628 of 2024-07-09: "
        "ConsumerManageProcessor::query_consumer_offset returned `Some(response)` where it must return "
        "`Some(response.set_command_custom_header(response_header))`, so the offset it had looked up, or the young "
        "queue's 0, never reached the client)",
        ("LIV-1",),
        _FIGURES_SEEN,
    ),
)
class QuerySuccessWithoutOffset(Variant):
    """The broker answers a QUERY_CONSUMER_OFFSET it can answer with an offset (a stored one, or 0 for a young
    queue) with a bare SUCCESS: in the client, ``decodeCommandCustomHeader`` leaves the offset null and the unboxing in
    ``queryConsumerOffset`` throws, an exception that is no MQBrokerException, so readOffset returns -2 (readOffset,
    RebalanceMixin._compute_pull_from_where); computePullFromWhereWithException then returns -1 in 4.9.8 and throws
    in 5.x (computePullFromWhere), and the queue gets no pq this round (the rebalance's pq table update; an orderly
    re-read's -1 is the pull's next offset, as for any failed read). A QUERY_NOT_FOUND is answered as before (its
    code, not its header, is what the client reads)."""

    def _compute_pull_from_where(
        self, s: State, i: int, q: int, uid: int, query_fails: bool
    ) -> tuple[State, int | None]:
        asked = s.broker if s.broker.up else s.slave
        if not self.clustering or query_fails or asked is None or self._query_consumer_offset(asked, q) is None:
            return super()._compute_pull_from_where(s, i, q, uid, query_fails)
        return s, None if self.config.read_error_throws else -1  # readOffset gave -2: the header's offset is null


@held_out(
    "schedule_service_not_started",
    HeldOutBug(
        "the broker's start never starts its ScheduleMessageService, so a message sent back for a retry is stored in "
        "SCHEDULE_TOPIC_XXXX and never delivered to %RETRY%<group>: the consumer has committed past the original "
        "(the send-back succeeded), the retry topic never receives the copy, and the message is never consumed again",
        ("R7.5", "R7.7"),
        "mxsm/rocketmq-rust#2831 ('Broker start ScheduleMessageService's method not correct', fixed by commit "
        "e25d667cf of 2025-03-24, PR #2832: BrokerRuntime's start called change_transaction_check_service_status("
        "is_master) where it must call change_special_service_status(is_master), the only caller of "
        "change_schedule_service_status, so ScheduleMessageService::start was never reached)",
        ("INV-29",),
        _FIGURES_SEEN,
    ),
)
class ScheduleServiceNotStarted(Variant):
    """The delay-level timer never runs on the master: when a sent-back message's delay is due, nothing delivers it
    to the retry topic. It stays in SCHEDULE_TOPIC_XXXX, which nobody consumes; the model keeps that topic only as
    the list of pending deliveries, so the due entry leaves the list with no copy landing in %RETRY%<group> (as the
    correct model does for a BROADCASTING copy, which has no retry queue). Send-back itself, the DLQ decision and
    the delay chosen are unchanged (the broker's send-back, ConcurrentConsumeMixin._send_back); the delivery of step 8
    is what is missing (the delay levels, broker_rules.retry_delay_ms)."""

    def _deliver_scheduled(self, s: State, a: DeliverScheduled) -> State:
        t = super()._deliver_scheduled(s, a)  # enabled exactly when the correct timer is due
        if self.retry_queue is None:
            return t
        b = s.broker
        return s._replace(broker=b._replace(scheduled=b.scheduled[1:]))
