"""Queue allocation as pure functions of (strategy, my id, sorted queues, sorted consumer ids).

Each consumer runs the same function on its own view of the consumer list (R9.3), so whether the
group's queues are partitioned depends only on whether the views agree (INV-13). The functions work
on queue indices and client-id strings and are memoised: a model run asks the same question often.
"""

from __future__ import annotations

import hashlib
from bisect import bisect_left
from functools import cache

from rmqspec.spec.config import AVG, AVG_BY_CIRCLE, CONSISTENT_HASH


def client_id(index: int) -> str:
    """The clientId of consumer ``index``: ``<ip>@<instanceName>`` (semantics §0.3)."""
    return f"10.0.0.{index + 1}@c{index}"


def mq_text(topic: str, broker_name: str, queue_id: int) -> str:
    """MessageQueue#toString, the key consistent hashing routes on (R11.3)."""
    return f"MessageQueue [topic={topic}, brokerName={broker_name}, queueId={queue_id}]"


def _md5_prefix(key: str) -> int:
    """The default ConsistentHashRouter hash: the first 4 bytes of MD5, unsigned big-endian."""
    return int.from_bytes(hashlib.md5(key.encode("utf-8")).digest()[:4], "big")


@cache
def allocate(
    strategy: str,
    current: str,
    mq_all: tuple[str, ...],
    cid_all: tuple[str, ...],
    virtual_node_cnt: int = 10,
    avg_blocks_overlap: bool = False,
) -> tuple[int, ...]:
    """Indices into ``mq_all`` that ``current`` takes. ``mq_all`` holds the queues' text forms in
    MessageQueue order and ``cid_all`` is sorted, as RebalanceImpl passes them (R9.3 step 4).

    A consumer missing from ``cid_all`` gets nothing (R11.0). ``avg_blocks_overlap`` is a planted
    bug (config.MUTATIONS) that INV-13's checks must refute.
    """
    if current not in cid_all or not mq_all:
        return ()
    n, c, i = len(mq_all), len(cid_all), cid_all.index(current)
    if strategy == AVG:  # R11.1: contiguous blocks, the first n mod c one larger
        mod = n % c
        if n <= c:
            size = 1
        elif mod > 0 and i < mod:
            size = n // c + 1
        else:
            size = n // c
        start = i * size if (mod > 0 and i < mod) else i * size + mod
        if avg_blocks_overlap and start > 0:
            start -= 1
        return tuple((start + k) % n for k in range(min(size, n - start)))
    if strategy == AVG_BY_CIRCLE:  # R11.2: deal round-robin
        return tuple(j for j in range(i, n) if j % c == i)
    if strategy == CONSISTENT_HASH:  # R11.3: ring of virtual nodes "<cid>-<r>"
        ring: dict[int, str] = {}
        for cid in cid_all:
            for r in range(virtual_node_cnt):
                ring[_md5_prefix(f"{cid}-{r}")] = cid
        keys = sorted(ring)
        owned = []
        for j, text in enumerate(mq_all):
            k = bisect_left(keys, _md5_prefix(text))
            if ring[keys[k % len(keys)]] == current:
                owned.append(j)
        return tuple(owned)
    raise ValueError(f"strategy: got {strategy!r}; accepted: {AVG}, {AVG_BY_CIRCLE}, {CONSISTENT_HASH}")
