"""The sixth held-out set's client half (docs/held_out.md, "The sixth set: written apart from the search"): consumer-
offset bugs of another RocketMQ client's history, each planted by what the buggy code did as its fix shows it (the
registry's ``citation``), overriding one helper of the model. Written apart from the search: nothing about the search
or its properties was read to choose or plant them, and their catch figures have not been seen
(``HeldOutBug.figures_seen`` False): a change of the search may be judged on them."""

from __future__ import annotations

from rmqspec.spec.actions import FinishConsume
from rmqspec.spec.state import PULL_DROPPED, BrokerQueue, OffsetUpdate, ProcessQueue, State
from rmqspec.spec.state import put_at as _put
from rmqspec.spec.variants import Variant
from rmqspec.spec.variants.held_out import HeldOutBug, held_out

# figures_seen of every bug of this module: their catch figures were read when the sixth set judged INV-27 and INV-28
# (docs/held_out.md, "The sixth set, measured"), so they judge no later change of the search or the properties
_FIGURES_SEEN = True

# msgCount is an AtomicU64 in rocketmq-rust's ProcessQueue: fetch_sub wraps around below 0
_U64 = 1 << 64


@held_out(
    "removal_count_triangular",
    HeldOutBug(
        "ProcessQueue.remove_message lowers msg_count inside its per-message loop by the running count of messages "
        "removed so far (1 + 2 + ... + N for N messages found, and the running count again for each one not found): "
        "a consume batch of two or more uncounts more messages than it removes, and msg_count, an unsigned atomic, "
        "wraps around below 0 to a huge value, so flow control (pullThresholdForQueue) holds the queue's pulls back "
        "for good while the pq is cached",
        ("R6.3", "R6.5"),
        "mxsm/rocketmq-rust commit 799777b25 ('fix(consumer): correct ProcessQueue remove_message accounting', "
        "pull request #9063: 'The msg_count fetch_sub was called inside the per-message loop, causing cumulative "
        "over-subtraction (1+2+...+N instead of N)'; the loop came with PR #980 '[ISSUE #972] Supports client "
        "clusting consume' (commit a94311c65, 2024-09-20) and main lost it in the ProcessQueue refactor of PR #5975, "
        "commit 25c76ae6d, 2026-01-31)",
        ("INV-1",),
        _FIGURES_SEEN,
    ),
)
class RemovalCountTriangular(Variant):
    """removeMessage of a non-empty tree subtracts, per offset given, the number of messages removed so far; the
    unsigned count wraps below 0; msgSize is zeroed when that count ends at 0. The returned offset is unchanged."""

    def _remove_message(self, pq: ProcessQueue, offsets: list[int], queue: BrokerQueue) -> tuple[ProcessQueue, int]:
        t, result = super()._remove_message(pq, offsets, queue)
        if pq.tree == 0:
            return t, result  # an empty tree returns -1 and changes nothing
        tree, removed, count = pq.tree, 0, pq.msg_count
        for o in offsets:
            if tree >> o & 1:
                tree &= ~(1 << o)
                removed += 1
            count = (count - removed) % _U64  # fetch_sub(removed_cnt) on every pass of the loop
        return t._replace(msg_count=count, msg_size=0 if count == 0 else t.msg_size), result


@held_out(
    "sent_back_kept_in_pq",
    HeldOutBug(
        "processConsumeResult of a CLUSTERING consumer splits the failed messages off the batch and puts the ones "
        "whose CONSUMER_SEND_MSG_BACK succeeded back into the removal list only when some other send-back failed: "
        "when every failed message was sent back, they stay in the pq although their retry copies are on the broker, "
        "so the offset removeMessage returns stops at the first of them for as long as the pq lives (each later "
        "commit of the queue lands there), msgCount keeps them, and the next owner of the queue delivers them again",
        ("R7.3", "R6.3"),
        "mxsm/rocketmq-rust: ConsumeMessageConcurrentlyService::process_consume_result's 'if "
        "!msg_back_failed.is_empty() { consume_request.msgs.append(&mut msg_back_success); ... }', from PR #980 "
        "'[ISSUE #972] Supports client clusting consume' (commit a94311c65, 2024-09-20) until PR #6507 '[ISSUE "
        "#6506] Refactor consume message concurrency handling to improve task management and shutdown process' "
        "(commit 80b0d8d22, 2026-02-24), which pushes every sent-back message back onto consume_request.msgs",
        ("INV-24c",),  # a property written after this set's figures were read (docs/held_out.md)
        _FIGURES_SEEN,
    ),
)
class SentBackKeptInPq(Variant):
    """CLUSTERING, no send-back of the batch failed: removeMessage is given only the acked prefix; the messages sent
    back stay in the pq. A batch with a failed send-back is removed as before."""

    def _finish_consume(self, s: State, a: FinishConsume) -> State:
        t = super()._finish_consume(s, a)  # enabled as before
        if self.orderly or not self.clustering:
            return t
        i = a.client
        cl = s.clients[i]
        r = next(r for r in cl.consuming if r.rid == a.rid)
        pq = cl.pqs[r.queue]
        if pq is None or pq.uid != r.pq_uid or pq.pull_state == PULL_DROPPED or t.clients[i].seq != cl.seq:
            return t  # dropped (no processConsumeResult), or a send-back failed: the sent ones are appended
        failed = self._failed_by_answer(r.msgs, a.ack_index)
        sent = {
            o
            for j, (o, _) in enumerate(failed)
            if (pq.tree >> o & 1 or not self.skips_cleaned) and s.broker.up and not a.send_back_fails >> j & 1
        }
        if not sent:
            return t
        queue = s.broker.queues[r.queue]
        kept, offset = self._remove_message(pq, [o for o, _ in r.msgs if o not in sent], queue)
        after = t.clients[i]
        updates = tuple(u for u in after.offset_updates if u.rid != r.rid)
        if offset >= 0:
            updates = (*updates, OffsetUpdate(r.rid, r.queue, r.pq_uid, offset))
        after = after._replace(pqs=_put(after.pqs, r.queue, kept), offset_updates=updates)
        return t._replace(clients=_put(t.clients, i, after))
