"""``RebalanceLockManager``: the broker's table of orderly-consumption locks (R8.1).

Mirrors ``org.apache.rocketmq.broker.client.rebalance.RebalanceLockManager`` of 4.9.8: one
``LockEntry`` {clientId, lastUpdateTimestamp} per (group, mq), in memory only (a broker crash loses
it). An entry is expired when ``now - lastUpdateTimestamp > 60 s`` (``lockMaxLiveTime``).
``try_lock_batch`` refreshes the caller's live entries, creates missing ones and takes over expired
ones; ``unlock_batch`` removes the caller's entries. Nothing removes an entry when a client goes
away: it only expires.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from rmqspec.reference.message_queue import MessageQueue
from rmqspec.reference.scheduler import VirtualClock

REBALANCE_LOCK_MAX_LIVE_TIME: Final = 60_000  # rocketmq.broker.rebalance.lockMaxLiveTime (R8.1)


@dataclass
class LockEntry:
    client_id: str
    last_update_timestamp: int

    def is_expired(self, now: int) -> bool:
        return now - self.last_update_timestamp > REBALANCE_LOCK_MAX_LIVE_TIME

    def is_locked(self, client_id: str, now: int) -> bool:
        return self.client_id == client_id and not self.is_expired(now)


class RebalanceLockManager:
    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock
        self.mq_lock_table: dict[str, dict[MessageQueue, LockEntry]] = {}

    def _is_locked(self, group: str, mq: MessageQueue, client_id: str) -> bool:
        """``isLocked``: the caller holds a live entry, which is refreshed."""
        entry = self.mq_lock_table.get(group, {}).get(mq)
        now = self.clock.now()
        if entry is not None and entry.is_locked(client_id, now):
            entry.last_update_timestamp = now
            return True
        return False

    def try_lock_batch(self, group: str, mqs: set[MessageQueue], client_id: str) -> set[MessageQueue]:
        locked = {mq for mq in mqs if self._is_locked(group, mq, client_id)}
        not_locked = sorted(mqs - locked)
        if not_locked:
            group_value = self.mq_lock_table.setdefault(group, {})
            now = self.clock.now()
            for mq in not_locked:
                entry = group_value.get(mq)
                if entry is None:
                    entry = LockEntry(client_id, now)
                    group_value[mq] = entry
                if entry.is_locked(client_id, now):
                    entry.last_update_timestamp = now
                    locked.add(mq)
                elif entry.is_expired(now):
                    entry.client_id = client_id
                    entry.last_update_timestamp = now
                    locked.add(mq)
        return locked

    def unlock_batch(self, group: str, mqs: set[MessageQueue], client_id: str) -> None:
        group_value = self.mq_lock_table.get(group)
        if group_value is None:
            return
        for mq in mqs:
            entry = group_value.get(mq)
            if entry is not None and entry.client_id == client_id:
                del group_value[mq]

    def entry(self, group: str, mq: MessageQueue) -> LockEntry | None:
        """The entry of (group, mq), expired or not (for the abstraction)."""
        return self.mq_lock_table.get(group, {}).get(mq)
