"""What at-least-once delivery tolerates, per configuration: the allowed anomalies of the properties.

``ALLOWED_ANOMALIES`` lists, per consumption mode, what at-least-once delivery tolerates and why, in the
spirit of Jepsen's allowed error types; each is tolerated only with the cause the ghost shows in the run (a
fault, or the specific race a RocketMQ design choice allows), never by its category alone (docs/spec.md,
"Allowed anomalies, each with its cause"; redeliveries are counted per cause in ``Ghost.redelivery_causes``).
``ALLOCATION_ANOMALIES`` adds, per allocation strategy, the ownership gaps and overlaps that the strategy itself
produces (INV-13a, INV-13b), ``DUPLICATE_CLIENT_ID_ANOMALIES`` what two consumers sharing one clientId make of them, and
``SLAVE_ANOMALIES`` and the orderly ones what a slave and orderly consumption add; ``allowed_anomalies(config)`` is the
whole list for one configuration. Imports nothing of the model, so that every concern module's properties may read it.
"""

from __future__ import annotations

from functools import cache

from rmqspec.spec.config import CLUSTERING, CONFIG, CONSISTENT_HASH, MACHINE_ROOM, MACHINE_ROOM_NEARBY, Config

ALLOWED_ANOMALIES: dict[str, dict[str, str]] = {
    "CLUSTERING": {
        "duplicate-delivery": "At-least-once (S4; R6.3, R2.6, R9.4), each redelivery with its cause counted in "
        "Ghost.redelivery_causes: the same pq consuming a message again (a failed send-back, R7.3), a new pq "
        "delivering what a dropped pq's running listener still holds (its result is skipped, R7.3, R6.7; "
        "beside-dropped-pq-listener), or a new pq resuming at the last landed commit (INV-15) below what an "
        "earlier owner delivered; both resume causes only at or above the new pq's start (INV-22c). A pq pulling "
        "again what it consumed has no cause (INV-22).",
        "broker-offset-decrease-by-another-owner": "The broker is last-writer-wins (R3.2): a commit lands below "
        "the current value only in the race the ghost shows, a pq that never read that value (Ghost.readers: "
        "overlapping owners, or a commit computed while its pq owned the queue landing after ownership moved; "
        "INV-8r, S5), committing a value it could have committed: at or above its own start (Ghost.starts, R10.1). "
        "A pq that read the value and commits below it, commits below its own start, or undercuts itself (INV-8), "
        "is a bug.",
        "double-ownership-while-views-differ": "Each consumer allocates from its own view of the "
        "consumer list; concurrent consumption does not lock, so queues may be owned twice or not "
        "at all until the views agree (S7; known-bugs §3, apache/rocketmq#2837).",
        "positioning-skip": "A group with no stored offset starts at maxOffset (LAST on an old queue) or at a "
        "timestamp, and the messages before it are not owed (R10.4), only on its first start on the queue or "
        "when a fault the run shows removed the offset (INV-9a; the skip is then that fault's harm).",
    },
    "BROADCASTING": {
        "duplicate-delivery": "A consumer that crashes replays from its local file, last written up to "
        "5 s earlier (R4.1, R1.12): its new pq resumes at the file's offset (resumed-at-stored-offset).",
        "failure-dropped": "BROADCASTING drops messages whose listener failed; there is no retry (R7.3, S13).",
        "expired-to-unsubscribed-retry-topic": "cleanExpiredMsg sends a message whose listener outlived "
        "consumeTimeout back to %RETRY%<group>, which no BROADCASTING consumer subscribes to, and removes it "
        "(R6.8, R7.8); recorded with that cause in Ghost.skips.",
        "positioning-skip": "As in CLUSTERING (R10.4, INV-9a), per consumer and its offset file.",
    },
}


# CLUSTERING, per allocation strategy: what the strategy itself leaves unpartitioned, so that INV-13a
# and INV-13b tolerate it even once the views agree. Each entry covers exactly the queues it names;
# every other overlap or gap is still reported. AVG, AVG_BY_CIRCLE, CONSISTENT_HASH with at least one
# virtual node, and MACHINE_ROOM_NEARBY around one of them (MACHINE_ROOM_NEARBY, allocation.allocate_queues) partition
# every queue list: none.
ALLOCATION_ANOMALIES: dict[str, dict[str, str]] = {
    CONFIG: {
        "double-ownership-by-configuration": "AllocateMessageQueueByConfig returns each consumer's own "
        "configured list and never looks at the other members (R11.4): a queue listed for two running "
        "consumers is owned by both for good. Tolerated only for a queue both owners' lists name.",
        "unowned-by-configuration": "A queue that no running consumer's list names is owned by nobody (R11.4); "
        "that includes %RETRY%<group>, whose pq a rebalance drops unless the list names it (R9.4 Phase A). "
        "Tolerated only for such queues.",
    },
    MACHINE_ROOM: {
        "unowned-outside-consumeridcs": "AllocateMessageQueueByMachineRoom deals only the queues of brokers "
        "named '<room>@<name>' with the room in consumeridcs; the others go to nobody (R11.5). Tolerated only "
        "for such queues: the model's one broker is dealt in full (INV-13b holds) or not at all. The slices "
        "are disjoint, so double ownership is never tolerated.",
    },
    CONSISTENT_HASH: {
        "unowned-with-no-virtual-nodes": "virtualNodeCnt = 0 is accepted and leaves the hash ring empty: "
        "routeNode answers null and no consumer gets any queue (R11.3). Only with virtual_node_cnt = 0, "
        "also as MACHINE_ROOM_NEARBY's inner strategy.",
    },
}


# faults: what two consumers sharing one clientId (Config.duplicate_client_id, RMQ-11) make of the partition
# and of orderly exclusivity; tolerated only between the consumers that share the id.
DUPLICATE_CLIENT_ID_ANOMALIES: dict[str, str] = {
    "double-ownership-by-duplicate-client-id": "Two consumers with one clientId find the same index in the sorted "
    "cidAll (indexOf) and take the same slice (R11.1-R11.3, RMQ-11). Tolerated for queues both sharers own.",
    "unowned-by-duplicate-client-id": "The slice of the index nobody finds as its own goes to nobody (RMQ-11). "
    "Tolerated for queues no running consumer's allocation names under the agreed list.",
    "orderly-lock-shared-by-duplicate-client-id": "The broker's lock table keys by clientId (R8.1): the sharers hold "
    "and refresh one lock, so both consume the queue (INV-12a, INV-12); tolerated between the sharers only. One "
    "sharer's unlock (removal, shutdown) releases the other's lock for a third consumer: that overlap is a stale "
    "unlock (ghost stale_unlocks), tolerated by Model.tolerate_stale_unlock.",
}


# slaves: what a deployment with a slave tolerates (CLUSTERING; a BROADCASTING consumer keeps its offsets locally).
SLAVE_ANOMALIES: dict[str, str] = {
    "failover-to-a-stale-replica": "While the master is down, offset queries go to the slave (R2.4), whose table is "
    "the master's as of the last SlaveSync (every 10 s, R3.8) plus the commits it took since: a queue taken over "
    "then resumes below the master's last landed commit and replays the difference (duplicates). RocketMQ does not "
    "promise replica monotonicity (known-bugs I11, RMQ-25); INV-15 compares with the broker that was asked.",
    "slave-commits-overwritten-by-sync": "Commits the slave took while the master was down are overwritten by the "
    "next SlaveSync once the master is back (R3.8, RMQ-25 (2), the maintainers' answer in apache/rocketmq#2513); "
    "INV-8s declares it unless Model.tolerate_slave_sync is off.",
}


# orderly consume loop: what INV-12 tolerates, for orderly CLUSTERING consumers only (docs/spec.md, "What is real,
# ranked").
ORDERLY_SHUTDOWN_OVERLAP = (
    "ConsumeMessageOrderlyService#shutdown runs shutdownNow, which only interrupts the consume threads, then "
    "unlockAll releases the consumer's queues at the broker (R4.4 step 1, R8.9). A listener that ignores the "
    "interrupt runs on (Client.orphaned) while another consumer locks the queue and consumes it: two listeners "
    "of one queue at once. Tolerated only for an overlap with such an orphan; its batch, never committed, is "
    "delivered again by the next owner."
)


# orderly: what INV-12a tolerates, for orderly CLUSTERING consumers only.
ORDERLY_LOCK_TABLE_LOST = (
    "RebalanceLockManager is broker memory (R8.1): a broker crash forgets every lock, so after the restart "
    "another consumer may lock a queue whose owner still sees its pq locked and unexpired for up to 30 s "
    "(R6.6) or until its next lockAll is refused (R8.2). Tolerated only for a belief older than the crash."
)


def allowed_anomalies(config: Config) -> dict[str, str]:
    """Everything ``config`` tolerates: its mode's ``ALLOWED_ANOMALIES`` and, in CLUSTERING, the
    ``ALLOCATION_ANOMALIES`` of its strategy (of the inner one for MACHINE_ROOM_NEARBY)."""
    out = dict(ALLOWED_ANOMALIES[config.mode])
    if config.orderly and config.mode == CLUSTERING:  # orderly
        out["orderly-lock-table-lost"] = ORDERLY_LOCK_TABLE_LOST
        out["orderly-listener-outlives-shutdown"] = ORDERLY_SHUTDOWN_OVERLAP
    if config.duplicate_client_id:  # faults (RMQ-11)
        out.update(DUPLICATE_CLIENT_ID_ANOMALIES)
    if config.slave and config.mode == CLUSTERING:  # slaves
        out.update(SLAVE_ANOMALIES)
    if config.mode == CLUSTERING:
        name = config.nearby_inner if config.strategy == MACHINE_ROOM_NEARBY else config.strategy
        for anomaly, why in ALLOCATION_ANOMALIES.get(name or "", {}).items():
            if anomaly != "unowned-with-no-virtual-nodes" or config.virtual_node_cnt == 0:
                out[anomaly] = why
    return out


@cache
def _tolerated(config: Config) -> frozenset[str]:
    return frozenset(allowed_anomalies(config))
