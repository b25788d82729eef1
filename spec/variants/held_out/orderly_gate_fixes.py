"""The seventh held-out set's orderly half (docs/held_out.md, "The seventh set: written apart from the search"): two
bugs of the Java client's orderly consumer from RocketMQ's pre-Apache history (2014, 2015), each in a gate that asks
whether a queue is locked, each planted by what the buggy code did as its fix commit shows it (the registry's
``citation``). Written apart from the search: nothing about the search or its properties was read to choose or plant
them, and their catch figures were read once, when the set was measured (``HeldOutBug.figures_seen`` True)."""

from __future__ import annotations

from rmqspec.spec.pull import PULL_DELAY_WHEN_EXCEPTION, SendPull
from rmqspec.spec.state import PULL_IN_FLIGHT, PULL_READY, ConsumeRequest, ProcessQueue, State
from rmqspec.spec.state import put_at as _put
from rmqspec.spec.variants import Variant
from rmqspec.spec.variants.held_out import HeldOutBug, held_out

# figures_seen of every bug of this module: their catch figures were read when the seventh set judged INV-29 and the
# guided search's Thompson-sampling bandit (docs/held_out.md, "The seventh set, measured"), so they judge no later
# change of the search or the properties
_FIGURES_SEEN = True


@held_out(
    "orderly_run_lock_check_or",
    HeldOutBug(
        "ConsumeRequest.run of the orderly service lets a CLUSTERING run into its consume loop when the pq is locked "
        "OR its lock is not expired (`isLocked() || !isLockExpired()`), where it must need both: a pq whose lock "
        "lockAll or lock(mq) has just taken away (locked false, lastLockTimestamp recent) or a locked pq whose lock "
        "is older "
        "than 30 s passes the run's check; the loop's own checks then stop it and ask tryLockLaterAndReconsume(10 ms) "
        "where the run's check asks tryLockLaterAndReconsume(100 ms), so such a queue retries its lock ten times as "
        "often, and a loop without those checks would consume without a valid lock",
        ("R8.5",),
        "apache/rocketmq commit 9b1b931a32 (2014-06-11, 'fix 锁有效判断条件', fix the condition for a valid lock: "
        "ConsumeMessageOrderlyService.ConsumeRequest.run's `BROADCASTING || this.processQueue.isLocked() || "
        "!this.processQueue.isLockExpired()` became `BROADCASTING || (this.processQueue.isLocked() && "
        "!this.processQueue.isLockExpired())`; the loop below already checked isLocked and isLockExpired)",
        (),
        _FIGURES_SEEN,
    ),
)
class OrderlyRunLockCheckOr(Variant):
    """CLUSTERING: a run whose pq is live goes into the loop when the pq is locked or its lock is younger than 30 s;
    only a pq neither locked nor recently locked is sent to tryLockLaterAndReconsume(100). The loop's checks are
    4.9.8's (they were there in 2014 too)."""

    def _orderly_run(self, s: State, i: int, r: ConsumeRequest) -> State:
        pq = s.clients[i].pqs[r.queue]
        if (
            self.clustering
            and pq is not None
            and self._orderly_live(pq, r.pq_uid)
            and (pq.locked or not self._lock_expired(pq, s.now))
        ):
            return self._orderly_iterate(s, i, r.queue, pq.uid, r.rid, s.now)
        return super()._orderly_run(s, i, r)


@held_out(
    "unlocked_orderly_pull_goes_on",
    HeldOutBug(
        "pullMessage of an orderly consumer whose pq is not locked puts the PullRequest off by "
        "executePullRequestLater and then, with no return after it, goes on and sends the pull anyway: the queue is "
        "pulled without its broker lock (from nextOffset, without the re-read of the first locked pull), and the "
        "PullRequest is now twice in the pull loop (the delayed copy, and the one the sent pull's callback re-queues), "
        "so the pq has two pull loops from then on, each fetching the same offsets",
        ("R5.1", "R8.4"),
        "apache/rocketmq commit 479f3e7308 (2015-10-21, '修复买卖家问题， 代码逻辑错误', fixing the buyer-seller "
        "(精卫) consumption problem, a code logic error: DefaultMQPushConsumerImpl.pullMessage's orderly branch, "
        "`else { this.executePullRequestLater(pullRequest, PullTimeDelayMillsWhenException); }` for a pq not locked, "
        "gained the `return;` after the call)",
        ("INV-20",),
        _FIGURES_SEEN,
    ),
)
class UnlockedOrderlyPullGoesOn(Variant):
    """Step 6 of an orderly pullMessage (the lock gate, ClientLocksMixin._orderly_pull_gate): a pq not locked is not
    held back; the pull is sent at nextOffset (previouslyLocked stays false, so the first locked pull still re-reads),
    and the delayed copy of the PullRequest leaves the pq's pull ready again one pull delay later while the sent
    pull is in flight (a second loop, as the planted ``pull_request_requeued`` has one). The model's
    pullTimeDelayMillsWhenException is the consumer's 1 s (docs/rules.md, "Constants")."""

    def _orderly_pull_gate(self, s: State, i: int, q: int, pq: ProcessQueue) -> tuple[State, ProcessQueue, bool]:
        if not pq.locked:
            return s, pq, True  # executePullRequestLater, then no return: the pull goes on
        return super()._orderly_pull_gate(s, i, q, pq)

    def _send_pull(self, s: State, a: SendPull) -> State:
        t = super()._send_pull(s, a)  # enabled exactly when the correct pull is
        if not self.orderly:
            return t
        before = s.clients[a.client].pqs[a.queue]
        after = t.clients[a.client].pqs[a.queue]
        if before is None or before.locked or before.dropped or after is None or after.uid != before.uid:
            return t
        if after.pull_state != PULL_IN_FLIGHT:
            return t  # not sent (no broker reachable): delayed as by the correct gate
        cl = t.clients[a.client]
        delayed = after._replace(pull_state=PULL_READY, pull_ready_at=s.now + PULL_DELAY_WHEN_EXCEPTION)
        return t._replace(clients=_put(t.clients, a.client, cl._replace(pqs=_put(cl.pqs, a.queue, delayed))))
