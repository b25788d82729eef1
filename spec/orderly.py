"""Orderly consumption's lock rules (docs/rules.md, "Orderly consumption"): the broker's RebalanceLockManager and the
client's lock validity, as pure functions over the model's lock table.

The broker lock table's rule (R8.1) is decided here; the client's lock calls that apply it are
``ClientLocksMixin`` (``client_locks.py``), and a broker crash empties the table (``BrokerMixin._broker_crash``).

The table is ``Broker.locks``: per queue index, ``(client, lastUpdateTimestamp)`` or None. A client is
named by its index (its clientId is ``client_id(index)``, one per consumer process slot, the CLUSTERING allocation
(RebalanceMixin._rebalance_topic))."""

from __future__ import annotations

from typing import Final

# Timing margins (docs/rules.md, "Constants"; the lockAll timer, ClientLocksMixin._lock_all): client
# renewal 20 s < client validity 30 s < broker expiry 60 s.
BROKER_LOCK_MAX_LIVE_TIME: Final = 60_000  # rocketmq.broker.rebalance.lockMaxLiveTime (R8.1)
CLIENT_LOCK_MAX_LIVE_TIME: Final = 30_000  # rocketmq.client.rebalance.lockMaxLiveTime (the expiry predicates,
# PullMixin.pull_expired)
LOCK_ALL_FIRST_DELAY: Final = 1_000  # lockMQPeriodically first run (the lockAll timer, ClientLocksMixin._lock_all)
LOCK_ALL_INTERVAL: Final = 20_000  # rocketmq.client.rebalance.lockInterval (the lockAll timer,
# ClientLocksMixin._lock_all)

LockTable = tuple[tuple[int, int] | None, ...]


def broker_lock_expired(entry: tuple[int, int], now: int) -> bool:
    """LockEntry.isExpired: ``now - lastUpdateTimestamp > 60 s`` (R8.1)."""
    return now - entry[1] > BROKER_LOCK_MAX_LIVE_TIME


def holder(table: LockTable, q: int, now: int) -> int | None:
    """The client holding a non-expired broker lock on ``q``, if any."""
    entry = table[q] if q < len(table) else None
    if entry is None or broker_lock_expired(entry, now):
        return None
    return entry[0]


def try_lock_batch(
    table: LockTable, queues: tuple[int, ...], client: int, now: int
) -> tuple[LockTable, frozenset[int]]:
    """RebalanceLockManager.tryLockBatch (R8.1): each queue held by ``client`` unexpired is refreshed;
    a queue with no entry or an expired one (anyone's) is handed to ``client``; any other is denied.
    Returns the new table and the granted queues."""
    entries = list(table)
    granted = set()
    for q in queues:
        entry = entries[q]
        if entry is None or entry[0] == client or broker_lock_expired(entry, now):
            entries[q] = (client, now)
            granted.add(q)
    return tuple(entries), frozenset(granted)


def unlock_batch(table: LockTable, queues: tuple[int, ...], client: int) -> LockTable:
    """RebalanceLockManager.unlockBatch (R8.1): removes only the entries ``client`` holds, expired or
    not (the entry's clientId is compared, not its age)."""
    return tuple(None if q in queues and e is not None and e[0] == client else e for q, e in enumerate(table))


def client_lock_expired(last_lock: int, now: int) -> bool:
    """ProcessQueue.isLockExpired: ``now - lastLockTimestamp > 30 s`` (the expiry predicates,
    PullMixin.pull_expired)."""
    return now - last_lock > CLIENT_LOCK_MAX_LIVE_TIME
