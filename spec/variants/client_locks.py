"""Planted bugs of the broker locks (``spec/client_locks.py``): the lock table's grant."""

from __future__ import annotations

from rmqspec.spec import orderly as lk
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
