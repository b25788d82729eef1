"""The sixth held-out set's broker half (docs/held_out.md, "The sixth set: written apart from the search", "Broker
half"): consumer-offset bugs of the broker's side (its offset table and what cleans it), found through fix commits of
RocketMQ's broker, each planted by what the buggy code did as its fix describes it (the registry's ``citation``),
overriding one helper of the model. Written apart from the search: nothing about the search or its properties was
read to choose or plant them, and their catch figures have not been seen (``HeldOutBug.figures_seen`` False)."""

from __future__ import annotations

from rmqspec.spec.pull import RetentionDelete
from rmqspec.spec.state import State
from rmqspec.spec.variants import Variant
from rmqspec.spec.variants.held_out import HeldOutBug, held_out

# figures_seen of every bug of this module: no campaign, run, check or bench has been run with them planted, and
# whoever first uses their catch figures to change the search or the properties sets this to True in that change
_FIGURES_SEEN = False


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
