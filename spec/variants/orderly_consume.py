"""Planted bugs of orderly consumption (``spec/orderly_consume.py``): the orderly loop, its commit and the
orderly removal."""

from __future__ import annotations

from rmqspec.spec.state import Client, ConsumeRequest, ProcessQueue, State
from rmqspec.spec.state import put_at as _put
from rmqspec.spec.variants import Variant, planted


@planted("orderly_commit_returns_last_key", breaks=("R6.4",), refuted_by=("INV-3",))
class OrderlyCommitReturnsLastKey(Variant):
    """ProcessQueue.commit returns the largest consumed key, not key + 1: the last message comes again."""

    def _orderly_commit_offset(self, top: int) -> int:
        return top


@planted("orderly_suspend_commits", breaks=("R8.6",), refuted_by=("INV-3",))
class OrderlySuspendCommits(Variant):
    """SUSPEND_CURRENT_QUEUE_A_MOMENT commits the batch it should put back."""

    def _suspend_puts_batch_back(self) -> bool:
        return False


@planted("orderly_removal_ignores_consume_lock", breaks=("R8.8",), refuted_by=("INV-12",))
class OrderlyRemovalIgnoresConsumeLock(Variant):
    """RMQ-09 (1): the orderly removal persists, removes the offset and unlocks the broker lock at once,
    without the consume lock, while a listener of the pq may still run."""

    def _remove_orderly(self, s: State, i: int, q: int, pq: ProcessQueue, uid: int, cause: str) -> tuple[State, bool]:
        s = self._persist_one(s, i, q, uid, cause)
        cl = s.clients[i]
        return self._unlock_oneway(s._replace(clients=_put(s.clients, i, self._remove_offset(cl, q))), i, q), True


@planted("unlock_delay_never_scheduled", breaks=("R8.8",), refuted_by=("INV-26",))
class UnlockDelayNeverScheduled(Variant):
    """4.9.8's orderly removal of a pq that still caches messages schedules no unlockDelay task: the broker lock of
    the queue is never released and its next owner waits for the 60 s expiry."""

    def _unlock_delay(self, s: State, i: int, q: int) -> State:
        return s


@planted("orderly_ignores_lock_expiry", breaks=("R8.5",), refuted_by=("INV-12b",))
class OrderlyIgnoresLockExpiry(Variant):
    """RMQ-10's plant: the orderly loop never finds its client lock expired (isLockExpired unchecked)."""

    def _lock_expired(self, pq: ProcessQueue, now: int) -> bool:
        return False


@planted("orderly_no_queue_monitor", breaks=("R8.5",), refuted_by=("INV-12",))
class OrderlyNoQueueMonitor(Variant):
    """ConsumeRequest.run does not take the MessageQueueLock: two runs of one queue overlap."""

    def _may_start(self, cl: Client, r: ConsumeRequest, now: int) -> bool:
        return r.ready_at <= now
