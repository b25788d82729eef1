"""The thirteenth held-out set (docs/held_out.md, "The thirteenth set: written apart from the search"): consumer-offset
bugs of Apache RocketMQ found through its release notes (the "Bug" entries of 4.0.0 to 4.9.x and 5.0 to 5.3, the
JIRA-era ROCKETMQ-n issues they list) and the fix commits behind them, each planted by what the code did before its
fix (the registry's ``citation``), overriding helpers of the model. Written apart from the search: nothing about the
search or its properties was read to choose or plant them, and their catch figures have not been read
(``HeldOutBug.figures_seen`` False until they are)."""

from __future__ import annotations

from rmqspec.spec import broker_rules as br
from rmqspec.spec.state import BrokerQueue, PullResult, State
from rmqspec.spec.variants import Variant
from rmqspec.spec.variants.held_out import HeldOutBug, held_out

# figures_seen of every bug of this module: whoever first uses their catch figures to change the search or the
# properties sets it to True in the same change (docs/held_out.md, "The second set")
_FIGURES_SEEN = False


def java_string_hash(text: str) -> int:
    """``String.hashCode`` of Java as a signed 32-bit int: the tags code a consume-queue unit stores for a message with
    a single tag (``MessageExtBrokerInner.tagsString2tagsCode``), which the broker's tag filter compares."""
    h = 0
    for ch in text:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def _pull_passing_negative_codes(
    queue: BrokerQueue, offset: int, batch: int, subscription: tuple[str, ...]
) -> PullResult:
    """getMessage with 4.1.0's ExpressionMessageFilter for a tag subscription, then the client's second filter
    (R5.6): a unit matches at the broker when its tag is subscribed or its tags code is negative; the matched units
    count toward the batch and make the status FOUND; the client keeps only the messages whose tag it subscribed."""
    high = queue.max_offset
    if offset == high or offset < queue.min_offset or offset > high:
        return br.pull_result(queue, offset, batch, subscription)  # the bounds answers read no filter
    passed = 0
    kept: list[int] = []
    o = offset
    while o < high and passed < batch:
        tag = queue.messages[o].tag
        if tag in subscription:
            passed += 1
            kept.append(o)
        elif java_string_hash(tag) < 0:  # tagsCode < 0L: "matched", whatever the subscription
            passed += 1
        o += 1
    return PullResult(br.FOUND if passed else br.NO_MATCHED_MSG, tuple(kept), o)


@held_out(
    "negative_tags_code_passes_filter",
    HeldOutBug(
        "the broker's tag filter lets through every message whose tags code (the Java hashCode of its tag) is "
        "negative, whatever tags the group subscribed: a pull that scans only messages of other tags with such codes "
        "answers FOUND instead of NO_MATCHED_MSG, the client's second filter drops them and leaves the list empty, "
        "and an empty FOUND pulls again without correctTagsOffset, so the memory offset, and with it the committed "
        "offset, stays below them; a queue whose tail holds only such unsubscribed messages keeps its consume offset "
        "behind for as long as no subscribed message follows, its backlog never reaching zero, and whoever takes "
        "the queue next re-reads them; they also take places in the pull batch that subscribed messages would have "
        "had",
        ("R5.5", "R5.6", "R5.7"),
        "apache/rocketmq ROCKETMQ-284 'ExpressionMessageFilter will pass some message' (JIRA, 2017; listed in the "
        "4.2.0 release notes' Bug section as 'Make sure the sql filter is not conflict with old tag filter'), fixed "
        "by commit 254d432496 (2017-08-30, '[ROCKETMQ-284] ExpressionMessageFilter will pass some message.', "
        "closes apache/incubator-rocketmq#160) and 0c9495f245 ('[ROCKETMQ-284] Keep the tagscode transfer into "
        "MessageFilter is legal.'): ExpressionMessageFilter.isMatchedByConsumeQueue, which came with the SQL92 "
        "filter (ROCKETMQ-121, commit c0327797a8, released in 4.1.0-incubating), returned true for a tag-type "
        "subscription when 'tagsCode == null || tagsCode < 0L' (a negative code was taken for a consume-queue "
        "extension address), so every unit whose tag's hashCode is negative matched; the fix returns true only "
        "for a null code, and DefaultMessageStore.getMessage passes null for a code that really is an extension "
        "address",
        (),
        _FIGURES_SEEN,
    ),
)
class NegativeTagsCodePassesFilter(Variant):
    """The master's and the slave's pull answers (the store's filter is the same code on both) for a tag subscription:
    a unit whose tag has a negative ``String.hashCode`` matches at the broker as if subscribed, counts toward the pull
    batch and makes the answer FOUND; the client's own filter (R5.6, folded into the pull result) then keeps only the
    subscribed messages, so such an answer may be FOUND with nothing in it. A '*' subscription (the retry queue's,
    or ``subscription`` None) and every bounds answer are as before."""

    def _pull_result(self, s: State, q: int, offset: int, from_slave: bool = False) -> PullResult:
        sub = None if q == self.retry_queue else self.config.subscription
        if sub is None:
            return super()._pull_result(s, q, offset, from_slave)
        batch = min(self.config.pull_batch_size, br.MAX_TRANSFER_COUNT_ON_MESSAGE_IN_MEMORY)
        if from_slave and s.slave is not None:
            result = _pull_passing_negative_codes(s.slave.queues[q], offset, batch, sub)
            if result.status == br.OFFSET_ILLEGAL and not self.config.offset_check_in_slave:
                return PullResult(br.NO_MATCHED_MSG, (), offset)  # the slave's correction, as slave_pull_result
            return result
        return _pull_passing_negative_codes(s.broker.queues[q], offset, batch, sub)
