"""The eighth held-out set (docs/held_out.md, "The eighth set: written apart from the search"): bugs of
mxsm/rocketmq-rust's client, each a place where the Rust port of 4.9.8's consumer did something other than the Java
code it ports until a later commit made it do what Java does: the averaging allocation's arithmetic for a consumer
past the last queue, and the local offset store's read of offsets.json. Each is planted by what the code did before
its fix (the registry's ``citation``), overriding one helper of the model. Written apart from the search: nothing
about the search or its properties was read to choose or plant them, and their catch figures were read once, when
the set was measured (``HeldOutBug.figures_seen`` True)."""

from __future__ import annotations

from dataclasses import dataclass

from rmqspec.spec.allocation import AllocationError, Strategy, avg_block
from rmqspec.spec.config import AVG
from rmqspec.spec.state import State
from rmqspec.spec.state import put_at as _put
from rmqspec.spec.variants import Variant, with_avg_replaced
from rmqspec.spec.variants.held_out import HeldOutBug, held_out

# figures_seen of every bug of this module: their catch figures were read when the eighth set judged INV-30, INV-31
# and INV-32 (docs/held_out.md, "The eighth set, measured"), so they judge no later change of the search or the
# properties
_FIGURES_SEEN = True


@dataclass(frozen=True, slots=True)
class _UnderflowingAvg(Strategy):
    """AVG as rocketmq-rust wrote it before PR #1102: ``average_size.min(mq_all.len() - start_index)`` in ``usize``.
    A consumer whose block starts past the end (more consumers than queues, the consumer's index at least the queue
    count) underflows the subtraction and panics (or, wrapped, indexes past the end and panics): the allocation fails
    instead of answering nothing. Every other consumer gets what AVG gives."""

    def indices(self, current: str, mq_all: tuple[str, ...], cid_all: tuple[str, ...]) -> tuple[int, ...]:
        got = Strategy.indices(self, current, mq_all, cid_all)  # raises where AVG does (the validation)
        if current in cid_all:
            start, _ = avg_block(len(mq_all), len(cid_all), cid_all.index(current))
            if start > len(mq_all):
                raise AllocationError("attempt to subtract with overflow (allocate_message_queue_averagely)")
        return got


@held_out(
    "avg_overflow_past_last_queue",
    HeldOutBug(
        "AllocateMessageQueueAveragely computes the size of a consumer's block as min(averageSize, mqAll.size() - "
        "startIndex) in unsigned arithmetic: when there are more consumers than queues, a consumer whose block "
        "starts past the end (its index at least the queue count) underflows and the allocation panics instead of "
        "answering nothing, so that consumer's rebalance of the topic fails every round and keeps the pqs it had: a "
        "consumer pushed past the end by a joiner sorted before it keeps pulling and committing the queue the joiner "
        "now owns",
        ("R11.1", "R9.3"),
        'mxsm/rocketmq-rust issue #1101, PR #1102 \'fix "subtract with overflow" bug for '
        "allocate_message_queue_averagely' (commit 28b10d301, 2024-11-02): AllocateMessageQueueAveragely::allocate "
        "computed `let range = average_size.min(mq_all.len() - start_index);` with usize operands, which overflows "
        "when start_index > mq_all.len(); the fix computes the range only when mq_all.len() > start_index and "
        "allocates nothing otherwise, as Java's Math.min(averageSize, mqAll.size() - startIndex) does",
        ("LIV-1",),
        _FIGURES_SEEN,
    ),
)
class AvgOverflowPastLastQueue(Variant):
    """AVG (alone or as MACHINE_ROOM_NEARBY's inner strategy) raises for a consumer whose block starts past the last
    queue; the rebalance handles the failure as it handles any allocation exception (the topic left as it is this
    round)."""

    def _allocation_strategy(self, client: int) -> Strategy:
        return with_avg_replaced(super()._allocation_strategy(client), _UnderflowingAvg(AVG))


@held_out(
    "local_read_leaves_memory_empty",
    HeldOutBug(
        "BROADCASTING: LocalFileOffsetStore.readOffset(mq, READ_FROM_STORE) returns the offset it found in "
        "offsets.json without updateOffset(mq, offset, false): computePullFromWhere resumes the new pq at the stored "
        "offset, but the memory table holds no entry for the queue (removeDirtyOffset took it out just before) until "
        "the pq's first consumption, so a persistAll in between writes offsets.json without the queue and the "
        "progress read from the file is lost from it",
        ("R1.11", "R10.1"),
        "mxsm/rocketmq-rust: LocalFileOffsetStore::read_offset's ReadFromStore arm returned `offset.load(...)` "
        "without updating the offset table from the Rust client's broadcasting consumption of PR #1018 (issue "
        "#1009, commit 1f04940cf, 2024-09-30) until issue #7431, PR #7432 'Comprehensively improve rocketmq-client' "
        "(commit 9ee17fe15, 2026-06-13), which calls `self.update_offset(mq, offset, false)` on the offset read, as "
        "Java's LocalFileOffsetStore.readOffset does",
        ("INV-33",),
        _FIGURES_SEEN,
    ),
)
class LocalReadLeavesMemoryEmpty(Variant):
    """computePullFromWhere of a BROADCASTING consumer: an offset found in the local file positions the pq as before,
    but the memory offset is left as it was (no ``updateOffset``). CLUSTERING is unchanged."""

    def _compute_pull_from_where(
        self, s: State, i: int, q: int, uid: int, query_fails: bool
    ) -> tuple[State, int | None]:
        before = s.clients[i].mem[q]
        t, start = super()._compute_pull_from_where(s, i, q, uid, query_fails)
        if self.clustering or s.clients[i].file[q] is None:
            return t, start
        cl = t.clients[i]
        return t._replace(clients=_put(t.clients, i, cl._replace(mem=_put(cl.mem, q, before)))), start
