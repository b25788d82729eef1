"""Planted bugs of the broker locks (``spec/client_locks.py``): the lock table's grant and the client's lock calls."""

from __future__ import annotations

from rmqspec.spec import orderly as lk
from rmqspec.spec.state import State
from rmqspec.spec.variants import Variant, planted


@planted("lock_ignores_holder", breaks=("R8.1",), refuted_by=("INV-11",))
class LockIgnoresHolder(Variant):
    """tryLockBatch grants every queue asked for, also one another client holds unexpired."""

    def _try_lock_batch(
        self, table: lk.LockTable, queues: tuple[int, ...], client: int, now: int
    ) -> tuple[lk.LockTable, frozenset[int]]:
        entries = list(table)
        for q in queues:
            entries[q] = (client, now)
        return tuple(entries), frozenset(queues)


@planted("lock_all_keeps_denied_locked", breaks=("R8.2",), refuted_by=("INV-34",))
class LockAllKeepsDeniedLocked(Variant):
    """lockAll stamps the pqs of the granted queues locked but leaves those the broker refused as they were, where
    4.9.8 unlocks them: a pq whose lock another client took goes on believing it locked until its lock time lapses."""

    def _lock(self, s: State, i: int, queues: tuple[int, ...], lock_all: bool) -> tuple[State, frozenset[int]]:
        return super()._lock(s, i, queues, False)
