"""Named safety properties of the model: state invariants and action properties.

A state invariant is checked on every reachable state; an action property on every step
``(state, action, state')``. Each has an id (INV-n as in semantics §13, INV-n+ for ours), one
sentence, the rules it rests on, and why it matters. A check returns ``None`` when it holds and a
short description of the counterexample otherwise. ``ALLOWED_ANOMALIES`` lists, per consumption
mode, what at-least-once delivery tolerates and why, in the spirit of Jepsen's allowed error types;
each is tolerated only with the cause the ghost shows in the run (a fault, or the specific race a
RocketMQ design choice allows), never by its category alone (docs/spec.md §4.3; redeliveries are
counted per cause in ``Ghost.redelivery_causes``).
``ALLOCATION_ANOMALIES`` adds, per allocation strategy, the ownership gaps and overlaps that the
strategy itself produces; ``allowed_anomalies(config)`` is the whole list for one configuration.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import NamedTuple

from rmqspec.spec import broker_rules as br
from rmqspec.spec import orderly as lk
from rmqspec.spec.actions import (
    Action,
    AdminReset,  # admin reset
    ApplyConsumeOffset,
    BrokerCrash,
    BrokerReceive,  # admin reset
    BrokerRestart,
    CleanExpiredMsg,
    ClientResetWake,  # the 4.9.8 client-side admin reset
    CorruptLocalOffsetFile,
    CorruptOffsetFile,
    FinishConsume,
    FixOffsetIllegal,
    OffsetFileWriteLands,
    PersistOffsets,
    Rebalance,
    RebalanceQueryError,
    ReceivePull,
    SendPull,
    SlaveSync,
    StartConsume,
)
from rmqspec.spec.admin_reset import RESET_APPLY_CAUSES
from rmqspec.spec.allocation import AllocationError, NullPointerError, allocate_queues, machine_room_eligible
from rmqspec.spec.concurrent_consume import CLEAN_EXPIRED_DELAY_LEVEL
from rmqspec.spec.config import CLUSTERING, CONFIG, CONSISTENT_HASH, MACHINE_ROOM, MACHINE_ROOM_NEARBY, Config
from rmqspec.spec.model import Model
from rmqspec.spec.pull import PULL_MAX_IDLE_TIME
from rmqspec.spec.rebalance import POSITIONED_WITHOUT_OFFSET
from rmqspec.spec.state import PULL_DROPPED, PULL_IN_FLIGHT, Commit, State, pq_key
from rmqspec.spec.state import bit_offsets as _bits


class Invariant(NamedTuple):
    id: str
    name: str
    claim: str
    rules: str
    why: str
    check: Callable[[Model, State], str | None]


class ActionProperty(NamedTuple):
    id: str
    name: str
    claim: str
    rules: str
    why: str
    check: Callable[[Model, State, Action, State], str | None]


class Violation(NamedTuple):
    id: str
    name: str
    detail: str


ALLOWED_ANOMALIES: dict[str, dict[str, str]] = {
    "CLUSTERING": {
        "duplicate-delivery": "At-least-once (S4; R6.3, R2.6, R9.4), each redelivery with its cause counted in "
        "Ghost.redelivery_causes: the same pq consuming a message again (a failed send-back, R7.3), or a new pq "
        "resuming at the last landed commit (INV-15) below what an earlier owner delivered. A pq pulling again "
        "what it consumed has no cause (INV-22).",
        "broker-offset-decrease-by-another-owner": "The broker is last-writer-wins (R3.2): a commit lands below "
        "the current value only in the race the ghost shows, a pq that never read that value (Ghost.readers: "
        "overlapping owners, or a commit computed while its pq owned the queue landing after ownership moved; "
        "INV-8r, S5). A pq that read the value and commits below it, or undercuts itself (INV-8), is a bug.",
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
# virtual node, and MACHINE_ROOM_NEARBY around one of them (R11.6) partition every queue list: none.
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

# orderly consume loop: what INV-12 tolerates, for orderly CLUSTERING consumers only (docs/spec.md §18.3).
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


# --- state invariants -------------------------------------------------------------------------
def _pq_accounting(m: Model, s: State) -> str | None:
    for i, cl in enumerate(s.clients):
        for q, pq in enumerate(cl.pqs):
            if pq is None:
                continue
            count = pq.tree.bit_count() + pq.consuming_tree.bit_count()  # R6.5: both maps count
            if pq.msg_count != count:
                return f"client {i} queue {q}: msgCount={pq.msg_count} but the tree holds {count}"
            queue = s.broker.queues[q]
            size = sum(br.body_size(queue.messages[o]) for o in _bits(pq.tree) + _bits(pq.consuming_tree))
            if pq.msg_size != size:
                return f"client {i} queue {q}: msgSize={pq.msg_size} but the bodies sum to {size}"
    return None


def _commit_below_unprocessed(m: Model, s: State) -> str | None:
    for i, cl in enumerate(s.clients):
        base = m._ledger(i) * m.q_count
        for q, pq in enumerate(cl.pqs):
            mem = cl.mem[q]
            if pq is None or mem is None or pq.dropped or not (pq.tree | pq.consuming_tree):
                continue
            unprocessed = (pq.tree | pq.consuming_tree) & ~(s.ghost.handled[base + q] | s.ghost.skipped[base + q])
            if unprocessed and mem > _low(unprocessed):
                return f"client {i} queue {q}: offset {mem} passes unprocessed message {_low(unprocessed)}"
    return None


def _broker_answers(m: Model, s: State) -> str | None:
    b = s.broker
    for q in range(m.q_count):
        answer = m._query_consumer_offset(b, q)
        if answer is not None and answer < 0:
            return f"queue {q}: QUERY_CONSUMER_OFFSET answers SUCCESS({answer})"
        if b.offsets[q] is not None and answer != b.offsets[q] and b.offsets[q] >= 0:  # type: ignore[operator]
            return f"queue {q}: stored {b.offsets[q]} but answered {answer}"
    return None


def _committed(m: Model, s: State) -> list[tuple[int, int, int]]:
    """(ledger, queue, committed offset) for every committed position the group resumes from."""
    if m.clustering:
        out = [(0, q, o) for q, o in enumerate(s.broker.offsets) if o is not None]
        if s.slave is not None:  # slaves: a restart while the master is down resumes from the slave's table
            out += [(0, q, o) for q, o in enumerate(s.slave.offsets) if o is not None]
        return out
    return [(i, q, o) for i, cl in enumerate(s.clients) for q, o in enumerate(cl.file) if o is not None]


def _at_least_once(m: Model, s: State) -> str | None:
    g = s.ghost
    for ledger, q, offset in _committed(m, s):
        if offset <= 0:
            continue
        idx = ledger * m.q_count + q
        low = s.broker.queues[q].min_offset
        owed = ((1 << offset) - 1) & ~((1 << low) - 1)
        missing = owed & ~(g.handled[idx] | g.skipped[idx])
        if missing:
            who = "the group" if m.clustering else f"client {ledger}"
            return f"queue {q}: committed {offset} but {who} never handled offset {_low(missing)}"
    return None


def _committed_in_range(m: Model, s: State) -> str | None:
    for ledger, q, offset in _committed(m, s):
        high = s.broker.queues[q].max_offset
        if not 0 <= offset <= high:
            where = "broker" if m.clustering else f"client {ledger} file"
            return f"queue {q}: {where} offset {offset} outside [0, {high}]"
    return None


def _views_agree(m: Model, s: State) -> tuple[int, ...] | None:
    """The common consumer list when every running consumer last rebalanced completely on the
    list of exactly the running consumers, which the broker also holds; else None."""
    if not m.clustering or not s.broker.up:
        return None
    running = tuple(i for i, cl in enumerate(s.clients) if cl.running)
    if not running or set(running) != s.broker.registered:
        return None
    members = tuple(sorted(running, key=lambda j: m.cids[j]))
    named = tuple(m.identity[j] for j in members)  # a view names clientIds (RMQ-11)
    if any(s.clients[i].view != named or s.clients[i].rebalance_requested for i in running):
        return None
    return members


def _listed(m: Model, client: int, q: int) -> bool:
    """CONFIG: does ``client``'s configured list name queue ``q`` (R11.4)?"""
    lists = m.config.allocate_config_queues
    return lists is not None and q in lists[client]


def _nobody_is_dealt(m: Model, members: tuple[int, ...], q: int) -> bool:
    """Whether an allocation anomaly of the configuration leaves queue ``q`` to nobody."""
    tolerated = _tolerated(m.config)
    if "unowned-with-no-virtual-nodes" in tolerated:
        return True
    if "unowned-by-configuration" in tolerated and not any(_listed(m, i, q) for i in members):
        return True
    if "unowned-outside-consumeridcs" in tolerated:
        try:
            return not machine_room_eligible(m.mqs[q].broker_name, m.config.consumeridcs)
        except NullPointerError:  # every rebalance throws (R11.7): nobody is dealt anything
            return True
    return False


def _dealt(m: Model, members: tuple[int, ...], q: int) -> bool:
    """Does some member's own allocation, computed from the agreed list, name queue ``q``?"""
    queues = (q,) if q == m.retry_queue else m.topic_queues
    cid_all = tuple(m.cids[j] for j in members)
    for i in members:
        try:
            mine = allocate_queues(m.strategies[i], m.cids[i], tuple(m.mqs[k] for k in queues), cid_all)
        except AllocationError:
            continue
        if m.mqs[q] in mine:
            return True
    return False


def _exclusive_ownership(m: Model, s: State) -> str | None:
    if _views_agree(m, s) is None:
        return None
    shared = "double-ownership-by-configuration" in _tolerated(m.config)
    owner: dict[int, int] = {}
    for i, cl in enumerate(s.clients):
        for q, pq in enumerate(cl.pqs):
            if pq is not None and not pq.dropped:  # a dropped pq left in the table owns nothing (R8.8)
                if q in owner:
                    if shared and _listed(m, owner[q], q) and _listed(m, i, q):
                        continue  # both are configured with it (R11.4)
                    if m.identity[owner[q]] == m.identity[i]:
                        continue  # one clientId, one slice (DUPLICATE_CLIENT_ID_ANOMALIES)
                    return f"queue {q} owned by clients {owner[q]} and {i} although all views agree"
                owner[q] = i
    return None


def _full_coverage(m: Model, s: State) -> str | None:
    members = _views_agree(m, s)
    if members is None:
        return None
    owned = {q for cl in s.clients for q, pq in enumerate(cl.pqs) if pq is not None and not pq.dropped}
    missing = [q for q in range(m.q_count) if q not in owned and not _nobody_is_dealt(m, members, q)]
    if m.config.duplicate_client_id:  # the orphaned slice (DUPLICATE_CLIENT_ID_ANOMALIES)
        missing = [q for q in missing if _dealt(m, members, q)]
    return f"queues {missing} owned by nobody although all views agree" if missing else None


# --- action properties ------------------------------------------------------------------------
def _retry_accounting(m: Model, s: State, a: Action, t: State) -> str | None:
    # Checked on the messages a step adds; the broker never changes them afterwards.
    before, after = s.broker, t.broker
    limit = m.max_reconsume
    # A scheduled copy is due exactly at its delay; it may reach the retry queue later (the broker
    # was down when it fell due), never earlier. cleanExpiredMsg asks for level 3 itself (R6.8): its copy is
    # checked against that level when scheduled, and against the schedule's due when delivered.
    added = [(e.message, e.due, True) for e in after.scheduled if e not in before.scheduled]
    cleaned = isinstance(a, CleanExpiredMsg)
    left = [e for e in before.scheduled if e not in after.scheduled]
    if m.retry_queue is not None:
        old, new = before.queues[m.retry_queue].messages, after.queues[m.retry_queue].messages
        added += [(x, x.store_time, False) for x in new[len(old) :]]
    for msg, due, exact in added:
        k = msg.reconsume_times
        if not 1 <= k <= limit:
            return f"retry message {msg.origin} has reconsumeTimes={k}, outside 1..{limit}"
        expected = msg.sent_back_at + br.retry_delay_ms(k - 1)
        if cleaned and exact:
            expected = msg.sent_back_at + br.delay_level_ms(CLEAN_EXPIRED_DELAY_LEVEL)
        if not exact:  # a delivery: its delay was checked when it was scheduled
            origin = next((e for e in left if e.message._replace(store_time=msg.store_time) == msg), None)
            expected = expected if origin is None else origin.due
        if due < expected or (exact and due != expected):
            return f"retry message {msg.origin} (reconsumeTimes={k}) due at {due}, expected {expected}"
    for msg in after.dlq[len(before.dlq) :]:  # routed on the stored count, stored with +1 (R7.5)
        if m.orderly:  # forwarded at or past the limit, counted once more from 5.2.0 (R8.7)
            least = limit + 1 if m.config.orderly_forward_counts_the_send else limit
            if msg.reconsume_times < least:
                return f"DLQ message {msg.origin} has reconsumeTimes={msg.reconsume_times}, expected >= {least}"
        elif msg.reconsume_times != limit + 1:
            return f"DLQ message {msg.origin} has reconsumeTimes={msg.reconsume_times}, expected {limit + 1}"
    return None


def _increase_only(m: Model, s: State, a: Action, t: State) -> str | None:
    if not isinstance(a, (ApplyConsumeOffset, ReceivePull)) or (m.orderly and isinstance(a, ApplyConsumeOffset)):
        return None  # the orderly commit is increaseOnly=false (R8.6); INV-3 checks its value
    before, after = s.clients[a.client].mem, t.clients[a.client].mem
    for q in range(m.q_count):
        old, new = before[q], after[q]
        if old is not None and new is not None and new < old:
            return f"client {a.client} queue {q}: increaseOnly update lowered {old} to {new}"
    return None


def _dropped_pq_inert(m: Model, s: State, a: Action, t: State) -> str | None:
    if not isinstance(a, (FinishConsume, StartConsume, ApplyConsumeOffset)):
        return None
    cl = s.clients[a.client]
    reqs = (
        cl.offset_updates
        if isinstance(a, ApplyConsumeOffset)
        else cl.consuming
        if isinstance(a, FinishConsume)
        else cl.requests
    )
    r = next(r for r in reqs if r.rid == a.rid)
    pq = cl.pqs[r.queue]
    if pq is not None and pq.uid == r.pq_uid and pq.pull_state != PULL_DROPPED and not pq.dropped:
        return None
    if t.clients[a.client].mem != cl.mem or t.broker.offsets != s.broker.offsets:
        return f"client {a.client}: the result of dropped pq {r.pq_uid} (queue {r.queue}) changed an offset"
    if t.ghost.delivered != s.ghost.delivered:
        return f"client {a.client}: a consume request of dropped pq {r.pq_uid} reached the listener"
    return None


def _persist_all_prunes(m: Model, s: State, a: Action, t: State) -> str | None:
    if not m.clustering or not isinstance(a, PersistOffsets):
        return None
    cl = t.clients[a.client]
    owned = {q for q, pq in enumerate(cl.pqs) if pq is not None}
    owned |= {q for q, _ in cl.reset_held}  # admin reset: a sleeping reset's dropped pqs are still table keys
    if not owned:
        return None
    extra = sorted(q for q, v in enumerate(cl.mem) if v is not None and q not in owned)
    return f"client {a.client}: after persistAll memory still holds unowned queues {extra}" if extra else None


def file_write_race(s: State, a: Action, i: int) -> frozenset[int]:
    """The queues whose offsets.json entry the step ``a`` undoes as a lost update of client ``i``'s file: ``a``
    is a lagging persistAll's write (OffsetFileWriteLands) and another writer changed the entry between that
    persistAll's read and this write (docs/spec.md §18.3). The declared cause ``file-write-race``."""
    if not isinstance(a, OffsetFileWriteLands) or a.client != i:
        return frozenset()
    cl = s.clients[i]
    if cl.file_write_pending is None:
        return frozenset()
    read, content = cl.file_write_pending
    return frozenset(q for q, value in enumerate(cl.file) if value != read[q] and value != content[q])


def _local_file_grows(m: Model, s: State, a: Action, t: State) -> str | None:
    """INV-6b: no write of offsets.json drops a queue's entry (the 4.9.8 merge keeps what it read), except an
    entry a lagging persistAll never read because another writer added it meanwhile (``file_write_race``)."""
    if m.clustering or isinstance(a, CorruptLocalOffsetFile):  # an unreadable main falls back to .bak (R1.16)
        return None
    for i, (old, new) in enumerate(zip(s.clients, t.clients, strict=True)):
        raced = file_write_race(s, a, i)
        lost = [q for q in range(m.q_count) if old.file[q] is not None and new.file[q] is None and q not in raced]
        if lost:
            return f"client {i}: the offset file lost entries for queues {lost}"
    return None


def local_file_lowering(s: State, a: Action, i: int, q: int) -> bool:
    """Whether step ``a`` writes client ``i``'s offsets.json entry of queue ``q`` with increaseOnly false by design
    (INV-6c): the 4.9.8 client reset's wake for a queue of its table (the admin's target, R3.10a), or the
    OFFSET_ILLEGAL correction of that queue (nextBeginOffset, R5.7): the 4.9.8 task, or 5.x at once in the
    callback of a pull answered OFFSET_ILLEGAL."""
    if getattr(a, "client", None) != i:
        return False
    cl = s.clients[i]
    if isinstance(a, ClientResetWake):
        return any(target == q for target, _ in cl.reset_table)
    if isinstance(a, FixOffsetIllegal):
        return a.queue == q
    if isinstance(a, ReceivePull):
        return any(
            p.pq_uid == a.pq_uid and p.queue == q and p.result is not None and p.result.status == br.OFFSET_ILLEGAL
            for p in cl.pulls
        )
    return False


def _local_file_falls_caused(m: Model, s: State, a: Action, t: State) -> str | None:
    """INV-6c: a BROADCASTING consumer's offsets.json entry falls only where the step shows why: a lost update
    of its unlocked writers (``file_write_race``), a reset or an OFFSET_ILLEGAL correction of that queue
    (``local_file_lowering``), or the fall-back to .bak of an unreadable main (R1.16)."""
    if m.clustering or isinstance(a, CorruptLocalOffsetFile):
        return None
    for i, (old, new) in enumerate(zip(s.clients, t.clients, strict=True)):
        if old.file == new.file:
            continue
        raced = file_write_race(s, a, i)
        for q in range(m.q_count):
            before, after = old.file[q], new.file[q]
            if before is None or after is None or after >= before or q in raced:
                continue
            if not local_file_lowering(s, a, i, q):
                return f"client {i} queue {q}: offsets.json fell from {before} to {after}, no declared cause"
    return None


def _broker_decrease_attributed(m: Model, s: State, a: Action, t: State) -> str | None:
    if isinstance(a, (BrokerCrash, BrokerRestart, CorruptOffsetFile)):
        return None  # failover to the flushed file (or its .bak) is a declared cause
    for q in range(m.q_count):
        old, new = s.broker.offsets[q], t.broker.offsets[q]
        if old is None or new is None or new >= old:
            continue
        if _by_admin_reset(m, s, a, t, q):
            continue  # an admin reset is a declared cause (DECLARED_DECREASE_CAUSES)
        if _by_offset_illegal_fix(m, s, a, t, q):
            continue  # the OFFSET_ILLEGAL correction overwrites either way (R5.7, S5)
        if _by_orderly_overwrite(m, s, a, t, q):
            continue  # orderly consume loop: increaseOnly=false over a correctTagsOffset value (R8.6, R6.7)
        if _by_pool_reorder(m, s, a, t, q):
            continue  # the broker's request pools ran a later request of the connection first (§18)
        if t.ghost.last_writer[q] == s.ghost.last_writer[q]:
            return f"queue {q}: broker offset fell {old} -> {new}, written by the same pq"
    return None


def _piggyback_rule(m: Model, s: State, a: Action, t: State) -> str | None:
    if not isinstance(a, SendPull):
        return None
    before, after = s.clients[a.client], t.clients[a.client]
    if len(after.channel) == len(before.channel):
        return None  # the send failed: nothing reached the broker
    req = after.channel[-1]
    # An orderly consumer's first locked pull re-reads the offset into memory before it piggy-backs
    # (R5.1 step 6); SendPull changes memory in no other way, so the value sent is the one after.
    mem = (after if m.orderly else before).mem[a.queue]
    expected = (mem if mem is not None else -1) if m.clustering else 0
    # slaves: pullKernelImpl clears the flag for a slave's address (R5.3)
    flag = m.clustering and expected > 0 and not req.to_slave
    if req.commit_offset != expected or req.commit_flag != flag:  # type: ignore[union-attr]
        return f"client {a.client} queue {a.queue}: piggy-backed {req!r}, memory offset was {mem}"
    return None


def _resume_at_stored(m: Model, s: State, a: Action, t: State) -> str | None:
    if not m.clustering or not isinstance(a, Rebalance | RebalanceQueryError):
        return None
    before, after = s.clients[a.client], t.clients[a.client]
    b = s.broker if s.broker.up or s.slave is None else s.slave  # slaves: the broker the query went to (R2.4)
    for q in range(m.q_count):
        new, old = after.pqs[q], before.pqs[q]
        if new is None or (old is not None and old.uid == new.uid):
            continue
        stored = b.offsets[q]
        if stored is not None and stored >= 0 and new.next_offset != stored:
            return f"client {a.client} queue {q}: resumed at {new.next_offset}, last landed commit is {stored}"
    return None


# --- pull expiry, retention and OFFSET_ILLEGAL -----------------------------------------------------
def _allocation_throws(m: Model, i: int, queues: tuple[int, ...], members: frozenset[int]) -> bool:
    cid_all = tuple(sorted(m.cids[j] for j in members))
    try:
        allocate_queues(m.strategies[i], m.cids[i], tuple(m.mqs[q] for q in queues), cid_all)
    except AllocationError:
        return True
    return False


def _offset_illegal_fix_while_owned(m: Model, s: State, a: Action, t: State) -> str | None:
    if not isinstance(a, FixOffsetIllegal):
        return None
    cl = s.clients[a.client]
    fix = next(f for f in cl.offset_fixes if f.queue == a.queue and f.due <= s.now)
    pq = cl.pqs[a.queue]
    if not fix.live or (pq is not None and pq.uid == fix.pq_uid):
        return None
    now = "no pq" if pq is None else f"pq {pq.uid}"
    return (
        f"client {a.client} queue {a.queue}: the OFFSET_ILLEGAL correction to {fix.offset} for pq {fix.pq_uid} "
        f"ran after a rebalance removed it (the table holds {now}); it overwrote the offset as a non-owner"
    )


def _pull_stalled_recreated(m: Model, s: State, a: Action, t: State) -> str | None:
    """LIV-3 as a step property: the liveness claim "re-created at the next rebalance" is checked at
    that rebalance. A rebalance that leaves the table alone (CLUSTERING with no consumer list, R9.3
    step 3; an allocation that throws, R9.3 step 5) is exempt, and so is an orderly removal that the
    running listener refuses (R8.8): the pq stays, dropped, and the next rebalance tries again."""
    if not isinstance(a, Rebalance | RebalanceQueryError):
        return None
    i = a.client
    if m.clustering and (not s.broker.up or not s.broker.registered):
        return None
    before, after = s.clients[i], t.clients[i]
    for q, pq in enumerate(before.pqs):
        if pq is None or s.now - pq.last_pull <= PULL_MAX_IDLE_TIME:
            continue
        kept = after.pqs[q]
        if kept is None or kept.uid != pq.uid or kept.dropped:
            continue  # gone, re-created, or an orderly removal refused while its listener runs (R8.8)
        queues = (q,) if q == m.retry_queue else m.topic_queues
        members = (s.broker.registered, t.broker.registered)
        if m.clustering and any(_allocation_throws(m, i, queues, r) for r in members):
            continue
        return f"client {i} queue {q}: pq {pq.uid} last pulled at {pq.last_pull} survived the rebalance at {s.now}"
    return None


# --- orderly consumption (R8) -----------------------------------------------------------------------
def _broker_lock_exclusive(m: Model, s: State, a: Action, t: State) -> str | None:
    """INV-11 as a step property: an entry of the lock table changes hands only when its holder's lock
    had expired (60 s without renewal), was released, or was lost with the broker."""
    before, after = s.broker.locks, t.broker.locks
    if before == after or not after:
        return None
    for q, entry in enumerate(after):
        if entry is None or entry == before[q]:
            continue
        held_by = lk.holder(before, q, t.now)
        if held_by is not None and held_by != entry[0]:
            return f"queue {q}: client {entry[0]} was granted the lock client {held_by} holds ({before[q]})"
    return None


def _lock_belief_exclusive(m: Model, s: State) -> str | None:
    """INV-12a: two running clients never both see a queue as theirs to consume orderly, i.e. a pq
    with ``locked`` and not ``isLockExpired()`` (the test R8.5 step 1 makes before each run), except
    where one belief predates a broker crash that emptied the lock table (allowed anomaly)."""
    if not m.lock_renewal:
        return None
    stale = m._per_q_int(s.ghost.stale_unlocks)
    for q in range(m.q_count):
        lost = max(s.ghost.lock_table_lost_at, stale[q]) if m.tolerate_stale_unlock else s.ghost.lock_table_lost_at
        believers = [
            (i, pq.last_lock)
            for i, cl in enumerate(s.clients)
            if cl.running
            and (pq := cl.pqs[q]) is not None
            and not pq.dropped
            and pq.locked
            and not lk.client_lock_expired(pq.last_lock, s.now)
        ]
        fresh = [i for i, last in believers if last > lost]
        if m.tolerate_shared_client_id:  # sharers of one clientId hold one lock (DUPLICATE_CLIENT_ID_ANOMALIES)
            fresh = list({m.identity[i]: i for i in fresh}.values())
        if len(fresh) > 1:
            return f"queue {q}: clients {fresh} all hold a live lock (locked, renewed within 30 s) at {s.now}"
    return None


def _single_pull_loop(m: Model, s: State) -> str | None:
    """INV-20: one PullRequest circulates per pq in the table (R5.1, R9.4): queued (PULL_READY) with no
    pull of it in flight, or exactly one pull in flight (PULL_IN_FLIGHT), or none when it was dropped."""
    for i, cl in enumerate(s.clients):
        if not cl.running:
            continue
        flying: dict[int, int] = {}
        for p in cl.pulls:
            flying[p.pq_uid] = flying.get(p.pq_uid, 0) + 1
        for q, pq in enumerate(cl.pqs):
            if pq is None:
                continue
            n = flying.get(pq.uid, 0)
            expected = 1 if pq.pull_state == PULL_IN_FLIGHT else 0
            if n != expected:
                return f"client {i} queue {q}: pq {pq.uid} is {pq.pull_state} with {n} pulls in flight"
        extra = [uid for uid, n in flying.items() if n > 1]
        if extra:
            return f"client {i}: pqs {extra} have more than one pull in flight"
    return None


# --- orderly consume loop (R6.4, R8.5-R8.8) ----------------------------------------------------------
def _single_orderly_listener(m: Model, s: State) -> str | None:
    """INV-12: at any instant at most one orderly listener runs per queue in the whole group (CLUSTERING;
    a BROADCASTING member owns its own progress). Two listeners of one client are never tolerated (the
    MessageQueueLock is local). Two clients' overlap is tolerated only when a timing margin broke (a
    broker crash emptied the lock table, or a consumer stalled) at most 30 s before the older listener
    began, or after: the margins of R8.3 then no longer hold, which semantics INV-12 puts outside the claim.

    A listener that outlived its consumer's ``Shutdown`` is not in ``consuming`` but in ``Client.orphaned``:
    ``unlockAll`` released its queue at the broker while it ran on (ORDERLY_SHUTDOWN_OVERLAP, R4.4 step 1,
    R8.9), so an overlap with it is that design's, with the orphan in the state as the cause; each message the
    next owner delivers beside it counts as the redelivery cause ``beside-orphaned-listener``. The overlap
    among the other listeners is checked as before."""
    if not m.orderly:
        return None
    for q in range(m.q_count):
        running = [
            (r.ready_at, i) for i, cl in enumerate(s.clients) if cl.running for r in cl.consuming if r.queue == q
        ]
        if len(running) < 2:
            continue
        clients = [i for _, i in running]
        if len(set(clients)) < len(clients):
            return f"queue {q}: client {clients} runs two orderly listeners at once at {s.now}"
        if not m.clustering:
            continue
        if m.tolerate_shared_client_id and len({m.identity[i] for i in clients}) == 1:
            continue  # the sharers of one clientId hold one lock (DUPLICATE_CLIENT_ID_ANOMALIES)
        broken = -1
        if m.tolerate_broken_margins:  # a broker crash, or a stall of one of these clients
            stalls = s.ghost.stalled_at
            broken = max([s.ghost.lock_table_lost_at, *(stalls[i] for i in clients if stalls)])
        if m.tolerate_stale_unlock:
            broken = max(broken, m._per_q_int(s.ghost.stale_unlocks)[q])
        if broken >= 0 and broken >= min(running)[0] - lk.CLIENT_LOCK_MAX_LIVE_TIME:
            continue
        return f"queue {q}: clients {sorted(clients)} run the orderly listener at once at {s.now}, nothing tolerated"
    return None


def _listener_holds_lock(m: Model, s: State, a: Action, t: State) -> str | None:
    """INV-12b: an orderly CLUSTERING listener is called only on a pq that is locked and whose lock is not
    expired (R8.5 steps 1-2), checked on the step that calls it."""
    if not (m.orderly and m.clustering and isinstance(a, (StartConsume, ApplyConsumeOffset))):
        return None
    before = {r.rid for r in s.clients[a.client].consuming}
    for r in t.clients[a.client].consuming:
        if r.rid in before:
            continue
        pq = t.clients[a.client].pqs[r.queue]
        if pq is None or not pq.locked or lk.client_lock_expired(pq.last_lock, t.now):
            last = None if pq is None else pq.last_lock
            return f"client {a.client} queue {r.queue}: listener called at {t.now}, lock taken at {last}"
    return None


def _orderly_commit_point(m: Model, s: State, a: Action, t: State) -> str | None:
    """INV-3: an orderly commit is 1 + the largest offset of the batch it commits, and every offset of that
    batch was acknowledged or forwarded (FinishConsume); once applied, every offset below the memory offset
    was handled or is a declared skip (ApplyConsumeOffset)."""
    if not m.orderly:
        return None
    i = getattr(a, "client", -1)
    if isinstance(a, FinishConsume):
        r = next(r for r in s.clients[i].consuming if r.rid == a.rid)
        update = next((u for u in t.clients[i].offset_updates if u.rid == a.rid), None)
        if update is None:
            return None
        batch = [o for o, _ in r.msgs]
        pq = s.clients[i].pqs[r.queue]
        if not m.config.orderly_auto_commit and pq is not None and pq.uid == r.pq_uid and pq.consuming_tree:
            batch = _bits(pq.consuming_tree)  # autoCommit false: COMMIT commits everything taken since (R8.6)
        if update.offset != max(batch) + 1:
            return f"client {i} queue {r.queue}: batch {batch} commits {update.offset}, expected {max(batch) + 1}"
        idx = m._ledger(i) * m.q_count + r.queue
        open_ = [o for o in batch if not t.ghost.handled[idx] >> o & 1]
        if open_:
            return f"client {i} queue {r.queue}: commits {update.offset} over unhandled {open_}"
        return None
    if isinstance(a, ApplyConsumeOffset):
        u = next(u for u in s.clients[i].offset_updates if u.rid == a.rid)
        mem = t.clients[i].mem[u.queue]
        if mem is None or mem != u.offset or mem == s.clients[i].mem[u.queue]:
            return None  # not applied (dropped), or nothing changed
        idx = m._ledger(i) * m.q_count + u.queue
        low = t.broker.queues[u.queue].min_offset
        owed = ((1 << mem) - 1) & ~((1 << low) - 1)
        missing = owed & ~(t.ghost.handled[idx] | t.ghost.skipped[idx])
        if missing:
            return f"client {i} queue {u.queue}: memory offset {mem} passes unhandled offset {_low(missing)}"
    return None


# --- admin reset (R3.10a, R3.10b) ---------------------------------------------------------------------
class DecreaseCause(NamedTuple):
    """A declared cause of a falling broker offset (INV-8r): ``applies(model, before, action, after,
    queue)`` says whether this step's decrease of ``queue`` has that cause."""

    name: str
    rules: str
    why: str
    applies: Callable[[Model, State, Action, State, int], bool]


def _landed_commit(s: State, a: Action, q: int) -> tuple[int, str, int] | None:
    """(pq key, cause, value) of the commit of ``queue`` that BrokerReceive ``a`` lands, if any."""
    if not isinstance(a, BrokerReceive) or not 0 <= a.overtakes < len(s.clients[a.client].channel):
        return None
    item = s.clients[a.client].channel[a.overtakes]  # the request pools may run the second first (§18)
    if item.queue != q:
        return None
    if isinstance(item, Commit):
        return pq_key(a.client, item.pq_uid), item.cause, item.offset
    if item.commit_flag:
        return pq_key(a.client, item.pq_uid), "piggyback", item.commit_offset
    return None


def _by_failover(m: Model, s: State, a: Action, t: State, q: int) -> bool:
    """The restart's table is exactly what the broker's files hold: the last flush (a crash loses the
    window since, R3.6), or the flush before it when the main file is unreadable (R3.7)."""
    if isinstance(a, BrokerCrash):
        return t.broker.offsets[q] == s.broker.flushed[q]
    if isinstance(a, CorruptOffsetFile):
        return s.broker.bak is not None and t.broker.offsets[q] == s.broker.bak[q]
    return False


def _by_admin_reset(m: Model, s: State, a: Action, t: State, q: int) -> bool:
    if isinstance(a, AdminReset):
        return a.queue == q
    landed = _landed_commit(s, a, q)
    targets = s.ghost.reset_targets
    return landed is not None and landed[1] in RESET_APPLY_CAUSES and bool(targets and targets[q] >> landed[2] & 1)


def _by_stale_owner(m: Model, s: State, a: Action, t: State, q: int) -> bool:
    """The race of last-writer-wins (R3.2, S5): the landing commit comes from a pq other than the one that
    wrote the current value, and that pq did not read the current value as its start (Ghost.readers): the
    value it undercuts landed after its read, or it read another broker (a replica). The two owners
    overlapped, or the commit was computed while its pq still owned the queue and lands after ownership
    moved. A pq that read the value and then commits below it shows no race: its memory went below what
    it read (``stale_owner_race`` names the race for the report)."""
    return stale_owner_race(m, s, a, q) is not None


def stale_owner_race(m: Model, s: State, a: Action, q: int) -> str | None:
    """The race that lets the commit ``a`` lands on ``q`` lower the broker's offset, described; ``None``
    when there is none (``_by_stale_owner``)."""
    landed = _landed_commit(s, a, q)
    if landed is None or s.ghost.last_writer[q] == landed[0]:
        return None
    key, _, value = landed
    if s.ghost.readers and key in s.ghost.readers[q]:
        return None
    client, uid = key % 16, key // 16
    pq = s.clients[client].pqs[q]
    now_owner = "still owns the queue (overlapping owners)" if pq is not None and pq.uid == uid else "no longer owns it"
    start = m.start_of(s, key)
    read = "" if start is None else f"resumed at {start[0]} ({start[1]}), "
    return (
        f"pq {uid} of client {client} {read}commits {value} below {s.broker.offsets[q]}, which it never read "
        f"(landed after its start); it {now_owner}"
    )


def _by_pool_reorder(m: Model, s: State, a: Action, t: State, q: int) -> bool:
    """The broker's request pools (docs/spec.md §18): the landing request is the one that the request which
    landed the current value overtook on the same connection (Ghost.overtaken, set by BrokerReceive with
    overtakes=1 and cleared by every other change of the value). In send order it would have landed first."""
    if not isinstance(a, BrokerReceive) or not s.ghost.overtaken or _landed_commit(s, a, q) is None:
        return False
    marker = s.ghost.overtaken[q]
    return marker is not None and marker == (a.client, s.clients[a.client].channel[a.overtakes])


def _by_orderly_overwrite(m: Model, s: State, a: Action, t: State, q: int) -> bool:
    """A commit lands below the last one from a pq whose memory correctTagsOffset raised or the first
    locked pull's re-read overwrote (ghost raised_by_tags)."""
    landed = _landed_commit(s, a, q)
    return m.orderly and landed is not None and landed[0] in s.ghost.raised_by_tags


def _by_offset_illegal_fix(m: Model, s: State, a: Action, t: State, q: int) -> bool:
    landed = _landed_commit(s, a, q)
    return landed is not None and landed[1] == "offset-illegal-fix"


# The declared causes of a falling committed (master) offset, semantics INV-8 and known-bugs I3. The slave's
# table has its own property, INV-8s, whose extra cause is SlaveSync (R3.8).
DECLARED_DECREASE_CAUSES: tuple[DecreaseCause, ...] = (
    DecreaseCause(
        "failover",
        "R3.6, R3.7",
        "A restarted broker loads consumerOffset.json, flushed up to 5 s earlier, or its .bak, one flush older, "
        "when the main file is unreadable (CorruptOffsetFile): the new value must be exactly that file's.",
        _by_failover,
    ),
    DecreaseCause(
        "admin-reset",
        "R3.10a, R3.10b",
        "An admin reset moves offsets either way (forced): the admin's own write (4.9.8's old method, 5.x "
        "assignResetOffset) or a client's commit applying it (4.9.8 resetOffset's persist, 5.x's OFFSET_ILLEGAL "
        "adoption), carrying the reset's target.",
        _by_admin_reset,
    ),
    DecreaseCause(
        "stale-owner",
        "R3.2, S5",
        "Allowed anomaly 'broker-offset-decrease-by-another-owner' (ALLOWED_ANOMALIES): the broker is "
        "last-writer-wins and 4.9.8 lets a stale or overlapping owner's late commit land. Only the race counts: "
        "a commit from a pq other than the last writer, not below the position that pq resumed from (so the "
        "value it undercuts landed after that pq read its start).",
        _by_stale_owner,
    ),
    DecreaseCause(
        "offset-illegal-fix",
        "R5.7",
        "The OFFSET_ILLEGAL correction commits nextBeginOffset with increaseOnly=false, in either direction.",
        _by_offset_illegal_fix,
    ),
    DecreaseCause(
        "request-pool-reorder",
        "R3.2, R5.4",
        "4.9.8's broker runs each request on the thread pool of its code (NettyRemotingAbstract#processRequestCommand; "
        "BrokerController: PULL_MESSAGE on pullMessageExecutor, UPDATE_CONSUMER_OFFSET on consumerManageExecutor), "
        "and PullMessageProcessor commits a pull's piggy-back when the pull runs: a later commit of the queue from "
        "the same connection can land first, and the overtaken one then lands below it (docs/spec.md §18). Only "
        "the request that the current value's writer overtook (Ghost.overtaken), not any decrease by the same pq.",
        _by_pool_reorder,
    ),
    DecreaseCause(
        "orderly-overwrite",
        "R8.6, R6.7",
        "An orderly consumer writes its memory with increaseOnly=false (the commit, R8.6; the first locked pull's "
        "re-read of the broker, R5.1 step 6): a later commit can land below a value that correctTagsOffset "
        "(R6.7) or the re-read put there (ghost raised_by_tags). INV-3 checks every orderly commit value.",
        _by_orderly_overwrite,
    ),
)


# --- the causal allow-list: positions and redeliveries ----------------------------------------------------
def new_positions(s: State, t: State) -> list[tuple[int, int, int, str]]:
    """(client, uid, start, how) of every position the step from ``s`` to ``t`` recorded (Ghost.starts)."""
    if t.ghost.starts == s.ghost.starts:
        return []
    before = set(s.ghost.starts)
    return [(key % 16, key // 16, start, how) for key, start, how in t.ghost.starts if (key, start, how) not in before]


def _positioning_caused(m: Model, s: State, a: Action, t: State) -> str | None:
    """INV-9a: a pq positioned without a stored offset (consumeFromWhere, or a young queue's 0) on a queue
    its group had committed on must show why the offset was missing (Model.missing_offset_cause): a
    fault that removed it, a 4.9.8 query error read as "no offset" (RMQ-14), a failover to a replica
    lacking it. Without one, LAST or TIMESTAMP skips the messages since the commit (a loss) and FIRST
    or the young queue's 0 replays what the group had passed (a rollback)."""
    for client, uid, start, how in new_positions(s, t):
        if how not in POSITIONED_WITHOUT_OFFSET:
            continue
        q = next(q for q, pq in enumerate(t.clients[client].pqs) if pq is not None and pq.uid == uid)
        query_error = isinstance(a, RebalanceQueryError) and a.queue == q
        if m.missing_offset_cause(s, client, q, query_error) is not None:
            continue
        idx = m._ledger(client) * m.q_count + q
        g, queue = s.ghost, s.broker.queues[q]
        jumped = ((1 << start) - 1) & ~(g.handled[idx] | g.skipped[idx]) & ~((1 << queue.min_offset) - 1)
        replayed = g.handled[idx] >> start << start
        if not (jumped or replayed):
            continue  # the position is where the group had got to: nothing skipped or replayed
        effect = f"skips {_bits(jumped)}" if jumped else f"replays {_bits(replayed)}"
        return (
            f"client {client} queue {q}: positioned at {start} by {how} although the group had committed on this "
            f"queue and no fault the run shows removed the offset; it {effect}"
        )
    return None


def _no_repull_of_consumed(m: Model, s: State, a: Action, t: State) -> str | None:
    """INV-22: a pull result never brings a pq a message it had already received and no longer holds: its
    pull cursor only moves forward (R5.7: nextOffset := nextBeginOffset, at or past the offsets
    returned), and a position that moves back is a new pq (OFFSET_ILLEGAL's fix-up, an admin reset,
    a rebalance), whose redeliveries are counted per cause. A re-pull by the same pq is a rollback
    with no cause. A message it still holds is merged by putMessage (R6.2) and harmless."""
    if not isinstance(a, ReceivePull):
        return None
    cl, after = s.clients[a.client], t.clients[a.client]
    for q, pq in enumerate(after.pqs):
        old = cl.pqs[q]
        if pq is None or old is None or pq.uid != old.uid or pq.uid != a.pq_uid or pq.tree == old.tree:
            continue
        again = pq.tree & ~old.tree & s.ghost.received[a.client * m.q_count + q]
        if again:
            return (
                f"client {a.client} queue {q}: pq {pq.uid} pulled offsets {_bits(again)} again after consuming them "
                f"(its pull cursor moved back with no cause)"
            )
    return None


# --- slaves (R3.8, R5.5) ----------------------------------------------------------------------------------
def _slave_decrease_declared(m: Model, s: State, a: Action, t: State) -> str | None:
    if s.slave is None or t.slave is None:
        return None
    for q in range(m.q_count):
        old, new = s.slave.offsets[q], t.slave.offsets[q]
        if old is None or new is None or new >= old:
            continue
        if isinstance(a, SlaveSync):
            if m.tolerate_slave_sync:
                continue  # RMQ-25 (2): the master's older value wins (SLAVE_ANOMALIES)
            return f"queue {q}: SlaveSync lowered the slave's offset {old} -> {new} (the master's older value)"
        if _by_offset_illegal_fix(m, s, a, t, q):
            continue
        landed = _landed_commit(s, a, q)
        if landed is not None and landed[0] != s.ghost.slave_last_writer[q]:
            continue  # a stale or overlapping owner's late commit, as on the master (R3.2, S5)
        return f"queue {q}: the slave's offset fell {old} -> {new} by {type(a).__name__}, written by the same pq"
    return None


def _correction_from_master_bounds(m: Model, s: State, a: Action, t: State) -> str | None:
    if not isinstance(a, ReceivePull) or s.slave is None:
        return None
    pull = next((p for p in s.clients[a.client].pulls if p.pq_uid == a.pq_uid and p.epoch != -1), None)
    if pull is None or not pull.from_slave:
        return None
    result = pull.result if pull.result is not None else m._pull_result(s, pull.queue, pull.offset, True)
    if result.status != br.OFFSET_ILLEGAL:
        return None
    master = m._pull_result(s, pull.queue, pull.offset)
    if master.status == br.OFFSET_ILLEGAL and master.next_begin == result.next_begin:
        return None
    queue = s.broker.queues[pull.queue]
    return (
        f"client {a.client} queue {pull.queue}: the slave corrected offset {pull.offset} to {result.next_begin} from "
        f"its own bounds; the master's commit log holds [{queue.min_offset}, {queue.max_offset}) "
        f"({master.status} there)"
    )


def _committed_decrease_declared(m: Model, s: State, a: Action, t: State) -> str | None:
    if not m.clustering:
        return None
    for q in range(m.q_count):
        old, new = s.broker.offsets[q], t.broker.offsets[q]
        if old is None or new is None or new >= old:
            continue
        if not any(cause.applies(m, s, a, t, q) for cause in DECLARED_DECREASE_CAUSES):
            return f"queue {q}: broker offset fell {old} -> {new} by {type(a).__name__} with no declared cause"
    return None


def _reset_takes_effect(m: Model, s: State, a: Action, t: State) -> str | None:
    """INV-18: the first batch that a pq created after a completed reset receives starts at the target
    (minOffset if that is higher; the first subscribed offset from there). The model's ghost ends the
    expectation at that batch, at a later reset or broker crash, or when a commit from a pq that existed
    at completion lands (a stale owner; in 5.x the erasing pull's own piggy-back)."""
    if not isinstance(a, ReceivePull) or not s.ghost.reset_expect:
        return None
    pull = next((p for p in s.clients[a.client].pulls if p.pq_uid == a.pq_uid and p.epoch != -1), None)
    if pull is None:
        return None
    q = pull.queue
    entry = m._per_q(s.ghost.reset_expect)[q]
    if entry is None or m._per_q(t.ghost.reset_expect)[q] is not None:
        return None
    pq, before = t.clients[a.client].pqs[q], s.clients[a.client].pqs[q]
    if pq is None:
        return None
    new = pq.tree & ~(before.tree if before is not None and before.uid == pq.uid else 0)
    queue = t.broker.queues[q]
    expected = max(entry[0], queue.min_offset)
    unsubscribed = m._unsubscribed_bits(queue)
    while expected < queue.max_offset and unsubscribed >> expected & 1:
        expected += 1
    first = _low(new)
    # A batch below the current minOffset but not below the reset target was answered before
    # retention raised minOffset (RetentionDelete between the pull's answer and its receipt).
    if first != expected and not (entry[0] <= first < queue.min_offset):
        return (
            f"queue {q}: the reset to {entry[0]} completed, but the first batch of client {a.client}'s new pq "
            f"{a.pq_uid} starts at {first}"
        )
    return None


def _first_locked_pull_valid(m: Model, s: State, a: Action, t: State) -> str | None:
    """INV-19: the offset re-read of an orderly consumer's first locked pull (R5.1 step 6) is a real
    position, never the -1 of a failed read."""
    if not isinstance(a, SendPull) or not m.orderly:
        return None
    before, after = s.clients[a.client].pqs[a.queue], t.clients[a.client].pqs[a.queue]
    if before is None or after is None or before.previously_locked or not after.previously_locked:
        return None
    if after.next_offset < 0:
        return f"client {a.client} queue {a.queue}: the first locked pull set nextOffset {after.next_offset}"
    return None


INVARIANTS: tuple[Invariant, ...] = (
    Invariant(
        "INV-1",
        "pq_accounting",
        "A ProcessQueue's msgCount and msgSize match the messages it holds.",
        "R6.2-R6.5",
        "Flow control and the commit watermark read these counters; drift stalls or over-pulls a queue.",
        _pq_accounting,
    ),
    Invariant(
        "INV-2",
        "commit_below_unprocessed",
        "A live pq's memory offset never passes a message it holds that nobody has handled.",
        "R6.3, R7.3",
        "The memory offset is what the next persist commits; passing unprocessed work loses it on a crash.",
        _commit_below_unprocessed,
    ),
    Invariant(
        "INV-7",
        "broker_answers",
        "QUERY_CONSUMER_OFFSET answers a stored offset, 0 for a young queue, or NOT_FOUND; never a negative SUCCESS.",
        "R3.3, R3.5",
        "A negative start offset sends the client to OFFSET_ILLEGAL and minOffset (RMQ-14).",
        _broker_answers,
    ),
    Invariant(
        "INV-9",
        "at_least_once",
        "Every offset below a committed position was handled (success or send-back) or is a declared skip.",
        "R6.3, R7.3, R10.4",
        "This is the no-silent-loss guarantee itself: a committed offset is where every restart resumes.",
        _at_least_once,
    ),
    Invariant(
        "INV-16",
        "committed_in_range",
        "Every committed offset lies in [0, maxOffset].",
        "R3.2, R6.3",
        "The broker validates nothing (R3.2); an offset past maxOffset skips future messages.",
        _committed_in_range,
    ),
    # orderly consumption (R8)
    Invariant(
        "INV-12a",
        "lock_belief_exclusive",
        "No two running orderly CLUSTERING consumers both hold a pq that is locked and not lock-expired "
        "(lastLockTimestamp within 30 s) for one queue, unless the broker lost its lock table since.",
        "R6.6, R8.1-R8.5",
        "It is the test the orderly consume loop makes before it calls the listener (R8.5 step 1): two "
        "believers consume one queue at once and out of order (INV-12).",
        _lock_belief_exclusive,
    ),
    # orderly consume loop (R8.5-R8.8)
    Invariant(
        "INV-12",
        "single_orderly_listener",
        "At most one orderly listener runs per queue at any instant: never two in one client, and two clients "
        "only after a timing margin broke for them (broker crash, a stall of one of them) or a lock they relied "
        "on was released (ghost stale_unlocks) within 30 s before the older began.",
        "R8.1-R8.8",
        "Orderly consumption promises one consumer per queue in order; two listeners process the same "
        "messages concurrently and out of order (RMQ-09, RMQ-10).",
        _single_orderly_listener,
    ),
    Invariant(
        "INV-20",
        "single_pull_loop",
        "Every pq in the table has exactly one PullRequest: queued, or one pull in flight (none once dropped); "
        "no pq has two pulls in flight.",
        "R5.1, R5.7, R9.4",
        "Two pull loops for one queue fetch the same offsets twice and race their nextOffset and commits.",
        _single_pull_loop,
    ),
    Invariant(
        "INV-13a",
        "exclusive_ownership_when_views_agree",
        "Once every consumer allocated from the same consumer list, no queue has two owners "
        "(unless the strategy's ALLOCATION_ANOMALIES name that queue).",
        "R9.3, R11",
        "Double ownership is tolerated only while views differ; after agreement it means duplicate work forever.",
        _exclusive_ownership,
    ),
    Invariant(
        "INV-13b",
        "full_coverage_when_views_agree",
        "Once every consumer allocated from the same consumer list, every queue has an owner "
        "(unless the strategy's ALLOCATION_ANOMALIES name that queue).",
        "R9.3, R9.4, R11",
        "An orphaned queue's backlog grows without bound (RMQ-11).",
        _full_coverage,
    ),
)

ACTION_PROPERTIES: tuple[ActionProperty, ...] = (
    ActionProperty(
        "INV-10",
        "retry_accounting",
        "A retry message with reconsumeTimes k (1 <= k <= max) is due at delay level 3+(k-1) after its send-back "
        "(level 3 when cleanExpiredMsg sent it back); a message enters the DLQ exactly when its stored "
        "reconsumeTimes reaches maxReconsumeTimes.",
        "R7.4-R7.7, R6.8",
        "Retry timing and the DLQ threshold are what users tune and alert on; off-by-ones lose a retry.",
        _retry_accounting,
    ),
    ActionProperty(
        "INV-4",
        "increase_only_never_lowers",
        "Offset updates driven by consumption (increaseOnly=true) never lower the memory offset.",
        "R1.5",
        "Consumption completes out of order; a lowered offset re-delivers finished work and masks INV-8.",
        _increase_only,
    ),
    ActionProperty(
        "INV-5",
        "dropped_pq_is_inert",
        "A dropped pq's consume requests reach no listener and its results change no offset.",
        "R6.7, R7.2, R7.3",
        "After a rebalance the old owner must not overwrite the new owner's progress (RMQ-05).",
        _dropped_pq_inert,
    ),
    ActionProperty(
        "INV-6a",
        "persist_all_prunes_memory",
        "After a non-empty persistAll, the remote store's memory holds only owned queues.",
        "R2.7",
        "Unpruned entries of lost queues are re-sent later as stale commits over the new owner's.",
        _persist_all_prunes,
    ),
    ActionProperty(
        "INV-6b",
        "local_offset_file_only_grows",
        "The LocalFileOffsetStore file never loses a queue's entry (4.9.8 merge).",
        "R1.12, R1.14",
        "A queue temporarily not owned would restart from consumeFromWhere and skip or replay (RMQ-21).",
        _local_file_grows,
    ),
    ActionProperty(
        "INV-6c",
        "local_offset_file_falls_with_a_cause",
        "A BROADCASTING offsets.json entry falls only by a lost update of its unlocked writers, a reset or an "
        "OFFSET_ILLEGAL correction (docs/spec.md §18.3).",
        "R1.12, R1.13, R3.10a, R5.7",
        "The file is where a restarted broadcast consumer resumes: a fall replays what it had consumed.",
        _local_file_falls_caused,
    ),
    ActionProperty(
        "INV-8",
        "broker_decrease_attributed",
        "A broker offset falls only through failover, a commit from a different pq than wrote it, or a request "
        "that the current value's writer overtook in the broker's request pools (docs/spec.md §18).",
        "R3.2, R3.7",
        "Last-writer-wins makes stale-owner decreases legal; a pq undercutting itself is a client bug.",
        _broker_decrease_attributed,
    ),
    ActionProperty(
        "INV-14",
        "piggyback_rule",
        "A pull piggy-backs exactly the memory offset, flagged only in CLUSTERING when it is > 0.",
        "R5.2-R5.4",
        "The broker stores the piggy-backed value verbatim; a wrong one is a silent commit.",
        _piggyback_rule,
    ),
    ActionProperty(
        "INV-15",
        "resume_at_last_landed_commit",
        "A queue taken over with a stored offset starts exactly at the last commit that reached the broker.",
        "R2.3, R9.4, R10.1",
        "So redelivery after a crash or handover is bounded by the work since that commit plus what was in "
        "flight; replaying from elsewhere (RMQ-14) is unbounded.",
        _resume_at_stored,
    ),
    # pull expiry, retention and OFFSET_ILLEGAL
    ActionProperty(
        "LIV-3",
        "pull_stalled_pq_recreated",
        "A rebalance that updates a topic's pq table drops every pull-expired pq of it (no pull for more than "
        "120 s): the queue gets a new pq or none.",
        "R6.6, R9.4",
        "A pull request lost or stuck would otherwise leave the queue owned but never consumed again.",
        _pull_stalled_recreated,
    ),
    ActionProperty(
        "INV-17",
        "offset_illegal_fix_while_owned",
        "An OFFSET_ILLEGAL correction for a pq that was in the table when the result arrived runs while that "
        "pq is still there.",
        "R5.7, R9.4, S9",
        "4.9.8's 10 s window: a rebalance that takes the queue away meanwhile lets the correction overwrite the "
        "new owner's offset and drop whatever pq the table holds then (apache/rocketmq#7645 closed it in 5.2.0).",
        _offset_illegal_fix_while_owned,
    ),
    # orderly consumption (R8)
    ActionProperty(
        "INV-11",
        "broker_lock_exclusive",
        "The broker never grants a queue's lock to a client while another client holds it unexpired "
        "(renewed within the last 60 s), so at most one client holds a live lock on a queue.",
        "R8.1, R8.2",
        "Orderly consumption rests on this lock: two holders consume one queue at once, out of order.",
        _broker_lock_exclusive,
    ),
    ActionProperty(
        "INV-19",
        "first_locked_pull_positions_validly",
        "An orderly consumer's first pull after its lock re-reads the offset and starts at a real position "
        "(>= 0), or waits when the read fails.",
        "R5.1 step 6, R2.3, R10.1",
        "4.9.8 takes a failed read's -1 as nextOffset: the pull gets OFFSET_ILLEGAL and the committed offset "
        "is reset to minOffset, replaying the retained queue (docs/spec.md, orderly section).",
        _first_locked_pull_valid,
    ),
    # orderly consume loop (R8.5-R8.8)
    ActionProperty(
        "INV-12b",
        "listener_holds_lock",
        "An orderly CLUSTERING listener is called only on a pq that is locked and locked within the last 30 s.",
        "R8.5, R6.6",
        "The client-side validity check is what keeps a consumer whose renewals stopped from consuming after "
        "the broker could hand the queue over (RMQ-10).",
        _listener_holds_lock,
    ),
    ActionProperty(
        "INV-3",
        "orderly_commit_point",
        "An orderly commit is 1 + the largest offset of its batch, every offset of the batch was acknowledged "
        "or forwarded, and the memory offset it sets passes only handled or skipped offsets.",
        "R6.4, R8.6, R8.7",
        "The orderly commit overwrites (increaseOnly=false): a wrong value is committed as is, and a commit "
        "over a suspended message loses it.",
        _orderly_commit_point,
    ),
    # admin reset (R3.10a, R3.10b)
    ActionProperty(
        "INV-18",
        "reset_takes_effect",
        "After an admin reset completes (4.9.8: the resetting client resumes, or the admin's old-method write; "
        "5.x: the broker's assignResetOffset), the first batch a newly created pq of that queue receives starts "
        "at the reset offset (or minOffset if higher), unless a broker crash, a later reset, or a commit from a "
        "pq that existed at completion intervenes.",
        "R3.10a, R3.10b, R5.7, R9.4",
        "A reset that does not take effect silently replays or skips what the operator asked for (RMQ-26).",
        _reset_takes_effect,
    ),
    ActionProperty(
        "INV-8r",
        "committed_decrease_declared",
        "The broker's committed offset falls only with a cause in DECLARED_DECREASE_CAUSES (failover, admin "
        "reset, a stale owner's commit, the OFFSET_ILLEGAL fix-up, a request the broker's pools overtook).",
        "R3.2, R3.7, R3.10a, R3.10b, R5.7",
        "The broker never enforces monotonicity (R3.2), so every decrease must be explained by a declared cause "
        "(semantics INV-8, known-bugs I3).",
        _committed_decrease_declared,
    ),
    # the causal allow-list
    ActionProperty(
        "INV-9a",
        "positioning_caused",
        "A pq positioned without a stored offset (consumeFromWhere, a young queue's 0) on a queue the group had "
        "committed on shows the cause of the missing offset: a fault that removed it, a 4.9.8 query error read "
        "as no offset, a failover to a replica lacking it. Only a group's first start on a queue is owed-free.",
        "R10.1, R10.4, R3.5, R3.6, R3.7, R2.3",
        "consumeFromWhere is for a group with no history: applied to a group that had committed it silently "
        "skips (LAST, TIMESTAMP) or replays (FIRST) the queue, and INV-9 would count the skip as declared.",
        _positioning_caused,
    ),
    ActionProperty(
        "INV-22",
        "no_repull_of_consumed",
        "A pull result never brings a pq a message it had already received and no longer holds.",
        "R5.7, R6.2, R6.3",
        "The pull cursor only moves forward; a pq that pulls what it consumed redelivers with no cause (a "
        "rollback), which at-least-once would otherwise hide among the duplicates.",
        _no_repull_of_consumed,
    ),
    # slaves
    ActionProperty(
        "INV-8s",
        "slave_decrease_declared",
        "The slave's offset table falls only through SlaveSync copying the master (tolerated by default, "
        "RMQ-25 (2)), a commit from a different pq than wrote it, or the OFFSET_ILLEGAL fix-up.",
        "R3.4, R3.8, R5.7",
        "While the master is down the slave's table is where a restart or a handover resumes (R2.4); a decrease "
        "there replays work, and one by SlaveSync undoes what consumers committed during the outage.",
        _slave_decrease_declared,
    ),
    ActionProperty(
        "INV-21",
        "correction_from_master_bounds",
        "A pull served by a slave corrects the client's offset (OFFSET_ILLEGAL) only to the bound the master's "
        "commit log gives for it.",
        "R5.5, R5.7",
        "A lagging slave that corrects from its own bounds moves the consumer, and then its committed offset, "
        "backwards or forwards to a position the master never had (RMQ-17, known-bugs I4); offsetCheckInSlave "
        "= false exists to stop it.",
        _correction_from_master_bounds,
    ),
)


def check_state(model: Model, state: State) -> list[Violation]:
    """Every state invariant that fails in ``state``."""
    out = []
    for inv in INVARIANTS:
        detail = inv.check(model, state)
        if detail is not None:
            out.append(Violation(inv.id, inv.name, detail))
    return out


def check_step(model: Model, before: State, action: Action, after: State) -> list[Violation]:
    """Every action property that fails for the step ``before --action--> after``."""
    out = []
    for prop in ACTION_PROPERTIES:
        detail = prop.check(model, before, action, after)
        if detail is not None:
            out.append(Violation(prop.id, prop.name, detail))
    return out


def _low(mask: int) -> int:
    return (mask & -mask).bit_length() - 1
