"""Ghost bookkeeping: the facts the causal allow-list points to (docs/spec.md, "Allowed anomalies, each with its
cause").

No RocketMQ class: what the run did, kept for the properties (defined with each concern, registered by
``invariants.py``) and never read by a transition's enabling condition: which commits landed and from whom,
which values changed, which offsets a crash or a file write lost, where each pq was positioned
(``Ghost.starts``) and why a queue with a stored offset was positioned without it (readOffset
(RebalanceMixin._compute_pull_from_where), the slave routing (SlaveMixin), SlaveSync (SlaveMixin._slave_sync), the start
without an offset (RebalanceMixin._compute_pull_from_where); INV-9a)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rmqspec.spec.state import Event, Ghost, History, State
from rmqspec.spec.state import put_at as _put

if TYPE_CHECKING:
    from rmqspec.spec.model import Model


class GhostMixin:
    """``Model``'s ghost bookkeeping; see the module docstring."""

    def missing_offset_cause(self: Model, s: State, i: int, q: int, query_error: bool) -> str | None:
        """Why consumer ``i`` found no stored offset for queue ``q`` in ``s``: "first-start" when its
        ledger never had one land (the start without an offset (RebalanceMixin._compute_pull_from_where): the messages
        before the position are not owed); otherwise the fault that removed it (``Ghost.offset_lost``;
        "slave-only-commit": the group's only commits of it landed on the slave while the master was down, and a slave
        never syncs back, SlaveSync (SlaveMixin._slave_sync), RMQ-25), a 4.9.8 offset query that failed and reads as "no
        offset" (readOffset (RebalanceMixin._compute_pull_from_where), RMQ-14), or a failover to a slave whose table
        lacks it (the slave routing (SlaveMixin), SlaveSync (SlaveMixin._slave_sync)). ``None``: the group had committed
        on this queue and nothing the run shows removed the offset: a loss (INV-9a)."""
        idx = self._ledger(i) * self.q_count + q
        g = s.ghost
        if not g.committed >> idx & 1:
            return "first-start"
        if g.offset_lost and g.offset_lost[idx]:
            return g.offset_lost[idx]
        if query_error and self.clustering and self.config.broker_error_reads_as_no_offset:
            return "query-error"
        if self.clustering and not s.broker.up and s.slave is not None and s.slave.offsets[q] is None:
            return "failover-to-a-replica-lacking-the-offset"
        return None

    def _note_committed(self: Model, g: Ghost, idx: int) -> Ghost:
        """A commit of ledger index ``idx`` landed: the group has an offset there, and no fault has
        removed it since."""
        lost = g.offset_lost
        if lost and lost[idx]:
            lost = _put(lost, idx, "")
        return g._replace(committed=g.committed | 1 << idx, offset_lost=lost)

    def _value_changed(self: Model, g: Ghost, queues: range | tuple[int, ...]) -> Ghost:
        """The master's value of ``queues`` changed: nobody has read the new one yet (``Ghost.readers``), and
        no request overtaken by its writer is known yet (``Ghost.overtaken``; set again by ``_land_commit``)."""
        if g.overtaken and any(g.overtaken[q] is not None for q in queues):
            overtaken = list(g.overtaken)
            for q in queues:
                overtaken[q] = None
            g = g._replace(overtaken=tuple(overtaken))
        if not g.readers or not any(g.readers[q] for q in queues):
            return g
        readers = list(g.readers)
        for q in queues:
            readers[q] = frozenset()
        return g._replace(readers=tuple(readers))

    def _note_lost(
        self: Model,
        g: Ghost,
        before: tuple[int | None, ...],
        after: tuple[int | None, ...] | None,
        ledger: int,
        fault: str,
    ) -> Ghost:
        """``fault`` replaces the offset table ``before`` by ``after``: the entries it removes are lost."""
        if after is None:
            return g
        lost = list(g.offset_lost or ("",) * len(g.handled))
        changed = False
        for q, (old, new) in enumerate(zip(before, after, strict=True)):
            if old is not None and new is None:
                lost[ledger * self.q_count + q] = fault
                changed = True
        return g._replace(offset_lost=tuple(lost)) if changed else g

    def _file_written(self: Model, s: State, i: int) -> State:
        """BROADCASTING: consumer ``i``'s offsets.json was written (a "file-written" event) and now holds these
        entries (committed)."""
        g = s.ghost
        for q, value in enumerate(s.clients[i].file):
            idx = i * self.q_count + q
            if value is not None and (not g.committed >> idx & 1 or (g.offset_lost and g.offset_lost[idx])):
                g = self._note_committed(g, idx)
        return s._replace(ghost=g, history=History(Event(s.now, "file-written", i, -1, -1, ""), s.history))

    def start_of(self: Model, s: State, key: int) -> tuple[int, str] | None:
        """(start offset, how) of the pq with ``key`` (``pq_key``), if it was ever positioned."""
        for k, start, how in reversed(s.ghost.starts):
            if k == key:
                return start, how
        return None
