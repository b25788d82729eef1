"""Planted bugs of the rebalance (``spec/rebalance.py``): allocation, Phase B's lock, computePullFromWhere and
the RebalanceService timer."""

from __future__ import annotations

from dataclasses import dataclass

from rmqspec.spec.allocation import Strategy, allocate, avg_block
from rmqspec.spec.config import AVG
from rmqspec.spec.state import Broker
from rmqspec.spec.variants import Variant, planted, with_avg_replaced


@planted("resume_ignores_stored_offset", breaks=("R10.1",), refuted_by=("INV-15",))
class ResumeIgnoresStoredOffset(Variant):
    """computePullFromWhere ignores the offset it read and positions by consumeFromWhere."""

    def _resumes_at_stored(self, stored: int) -> bool:
        return False


@planted("resume_memory_one_behind", breaks=("R10.1", "R1.5"), refuted_by=("INV-8r", "INV-33"))
class ResumeMemoryOneBehind(Variant):
    """computePullFromWhere seeds memory one below the (positive) stored offset it resumes at."""

    def _seeded_offset(self, stored: int) -> int:
        return stored - 1 if stored > 0 else stored


@planted("position_seeds_memory_one_below", breaks=("R10.1", "R1.5"), refuted_by=("INV-8r",))
class PositionSeedsMemoryOneBelow(Variant):
    """computePullFromWhere seeds the memory offset one below a (positive) position that consumeFromWhere chose: the
    pq's first commit is a value below its own start, which it never read."""

    def _memory_without_stored_offset(self, mem: int | None, start: int) -> int | None:
        return start - 1 if start > 0 else mem


@planted("first_pull_one_below_position", breaks=("R9.4", "R10.1"), refuted_by=("INV-22c",))
class FirstPullOneBelowPosition(Variant):
    """Phase B's new PullRequest starts one below the (positive) position computePullFromWhere returned: the new pq
    delivers again a message below its start, which the group had committed."""

    def _first_pull_offset(self, start: int) -> int:
        return start - 1 if start > 0 else start


def overlapping_avg(current: str, mq_all: tuple[str, ...], cid_all: tuple[str, ...]) -> tuple[int, ...]:
    """AVG (allocation.allocate_queues) with every block but the first starting one queue early, its size unchanged
    (uncached, so that properties/symbolic.py can run it on symbolic values)."""
    allocate.__wrapped__(AVG, current, mq_all, cid_all)  # raises where AVG does (the strategies' validation,
    # allocation.allocate_queues)
    if current not in cid_all:
        return ()  # the strategies' validation (allocation.allocate_queues): not listed, nothing allocated
    n = len(mq_all)
    start, size = avg_block(n, len(cid_all), cid_all.index(current))
    if start > 0:
        start -= 1
    return tuple((start + k) % n for k in range(min(size, n - start)))


@dataclass(frozen=True, slots=True)
class _OverlappingAvg(Strategy):
    """AVG whose every block but the first starts one queue early, its size unchanged: neighbouring consumers
    share a queue and the last queue is nobody's."""

    def indices(self, current: str, mq_all: tuple[str, ...], cid_all: tuple[str, ...]) -> tuple[int, ...]:
        return overlapping_avg(current, mq_all, cid_all)


@planted("last_offset_one_before_max", breaks=("R10.1", "R10.4"), refuted_by=("INV-37",))
class LastOffsetOneBeforeMax(Variant):
    """CONSUME_FROM_LAST_OFFSET takes the max offset as the offset of the last message: a queue with no stored offset
    starts one below GET_MAX_OFFSET's answer, so a first start consumes the newest message that was there before it."""

    def _max_offset_answer(self, b: Broker, q: int) -> int:
        return max(0, super()._max_offset_answer(b, q) - 1)


@planted("avg_blocks_overlap", breaks=("R11.1",), refuted_by=("INV-13a", "INV-13b"))
class AvgBlocksOverlap(Variant):
    """AVG (alone or as MACHINE_ROOM_NEARBY's inner strategy) gives neighbouring consumers overlapping blocks."""

    def _allocation_strategy(self, client: int) -> Strategy:
        return with_avg_replaced(super()._allocation_strategy(client), _OverlappingAvg(AVG))


@planted("add_without_lock", breaks=("R8.4",), refuted_by=("INV-12a",))
class AddWithoutLock(Variant):
    """Orderly: Phase B adds a queue without taking its broker lock, ``lock(mq)``, first."""

    def _locks_before_add(self) -> bool:
        return False


@planted("rebalance_timer_stops", breaks=("R4.2",), refuted_by=("INV-27", "LIV-1"))
class RebalanceTimerStops(Variant):
    """RebalanceService is not re-armed after a run: only rebalanceImmediately wakes it (INV-27 sees the wait go,
    LIV-1 the messages left unconsumed)."""

    def _next_rebalance_run(self, now: int) -> int | None:
        return None
