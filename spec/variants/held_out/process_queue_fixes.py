"""The eighth held-out set's ProcessQueue half (docs/held_out.md, "The eighth set: written apart from the search"): a
bug of the Java client's ProcessQueue.removeMessage from RocketMQ's pre-Apache history, fixed by a commit that gave
the process queue its queueOffsetMax. Planted by what the code did before its fix (the registry's ``citation``),
overriding one helper of the model. Written apart from the search: nothing about the search or its properties was read
to choose or plant it, and its catch figures were read once, when the set was measured (``HeldOutBug.figures_seen``
True)."""

from __future__ import annotations

from rmqspec.spec.state import ProcessQueue
from rmqspec.spec.variants import Variant
from rmqspec.spec.variants.held_out import HeldOutBug, held_out

# figures_seen of every bug of this module: their catch figures were read when the eighth set judged INV-30, INV-31
# and INV-32 (docs/held_out.md, "The eighth set, measured"), so they judge no later change of the search or the
# properties
_FIGURES_SEEN = True


@held_out(
    "emptied_tree_commits_last_key",
    HeldOutBug(
        "ProcessQueue.removeMessage answers, when its removal empties msgTreeMap, the largest offset the tree held "
        "just before the removal plus one, instead of queueOffsetMax + 1: when a concurrent listener removed the "
        "batch's highest message first, the one that empties the tree commits an offset below messages already "
        "consumed, so the queue's progress stays behind them until the next pulled messages are consumed, and a "
        "restart or a handover in between delivers them again",
        ("R6.3",),
        "apache/rocketmq commit 68a60424fc (2013-06-27, 'fixed #84 修复存储消费进度时，潜在的并发问题', RocketMQ's "
        "internal issue #84, a potential concurrency problem in storing the consume progress: ProcessQueue gained "
        "`queueOffsetMax`, set by putMessage, and removeMessage's initial `result = msgTreeMap.lastKey() + 1` became "
        "`result = this.queueOffsetMax + 1`)",
        ("INV-2b",),
        _FIGURES_SEEN,
    ),
)
class EmptiedTreeCommitsLastKey(Variant):
    """removeMessage's result when the tree empties: the highest offset of the tree before this removal, plus one
    (``msgTreeMap.lastKey() + 1``), where the correct model answers queueOffsetMax + 1."""

    def _offset_when_tree_empties(self, pq: ProcessQueue) -> int:
        return pq.tree.bit_length()  # the tree's last key before the removal, plus one
