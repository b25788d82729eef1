"""Planted bugs of the pull (``spec/pull.py``): the request, its callback, updateOffset, pull expiry and the
OFFSET_ILLEGAL correction."""

from __future__ import annotations

from rmqspec.spec import broker_rules as br
from rmqspec.spec.state import PULL_READY, Client, ProcessQueue, PullResult, State
from rmqspec.spec.state import put_at as _put
from rmqspec.spec.variants import Variant, planted


@planted("piggyback_next_offset", breaks=("R5.2",), refuted_by=("INV-14",))
class PiggybackNextOffset(Variant):
    """The pull piggy-backs its pull cursor (nextOffset) instead of the offset store's memory value."""

    def _piggyback_offset(self, cl: Client, q: int, pq: ProcessQueue) -> int:
        return pq.next_offset


@planted("pull_request_requeued", breaks=("R5.1",), refuted_by=("INV-20",))
class PullRequestRequeued(Variant):
    """The pull thread re-queues the PullRequest it sent: two pull loops for one pq."""

    def _pull_state_once_sent(self) -> int:
        return PULL_READY


@planted("pull_cursor_one_behind", breaks=("R5.7",), refuted_by=("INV-22",))
class PullCursorOneBehind(Variant):
    """After FOUND the PullCallback sets nextOffset to nextBeginOffset - 1: the last message comes again."""

    def _next_pull_offset(self, result: PullResult) -> int:
        return result.next_begin - 1 if result.status == br.FOUND else result.next_begin


@planted("ignore_increase_only", breaks=("R1.5",), refuted_by=("INV-4", "INV-8"))
class IgnoreIncreaseOnly(Variant):
    """OffsetStore.updateOffset overwrites even when increaseOnly is true."""

    def _updated(self, old: int | None, value: int, increase_only: bool) -> int:
        return value


@planted("pull_expiry_ignored", breaks=("R6.6", "R9.4"), refuted_by=("LIV-3",))
class PullExpiryIgnored(Variant):
    """isPullExpired is never true: Phase A of the rebalance's pq table update
    (RebalanceMixin._update_process_queue_table) keeps a pq whose pulls stopped."""

    def pull_expired(self, s: State, pq: ProcessQueue) -> bool:
        return False


@planted("offset_illegal_fix_deferred", breaks=("R5.7",), refuted_by=("INV-17",))
class OffsetIllegalFixDeferred(Variant):
    """5.x runs the OFFSET_ILLEGAL correction 10 s later, as 4.9.8 does (its window comes back)."""

    def _offset_illegal_fixed_at_once(self) -> bool:
        return False


@planted("offset_fix_updates_after_removal", breaks=("R5.7", "R9.5"), refuted_by=("INV-36",))
class OffsetFixUpdatesAfterRemoval(Variant):
    """The OFFSET_ILLEGAL correction task runs its updateOffset last: persist(mq) and removeProcessQueue (persist,
    removeOffset) act on the stale memory offset, which is what reaches the broker or offsets.json, and the corrected
    offset is then put in memory for a queue that no longer has a pq. The next rebalance reads the stale offset back,
    and the queue is answered OFFSET_ILLEGAL again."""

    def _apply_offset_fix(self, s: State, i: int, q: int, offset: int) -> State:
        stale = s.clients[i].mem[q]
        s = super()._apply_offset_fix(s, i, q, offset if stale is None else stale)
        cl = s.clients[i]
        return s._replace(clients=_put(s.clients, i, cl._replace(mem=_put(cl.mem, q, offset))))
