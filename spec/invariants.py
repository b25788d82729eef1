"""Named safety properties of the model: state invariants and action properties.

A state invariant is checked on every reachable state; an action property on every step
``(state, action, state')``. Each has an id (INV-n as in semantics §13, INV-n+ for ours), one
sentence, the rules it rests on, and why it matters. A check returns ``None`` when it holds and a
short description of the counterexample otherwise. ``ALLOWED_ANOMALIES`` lists, per consumption
mode, what at-least-once delivery tolerates and why, in the spirit of Jepsen's allowed error types:
those are never reported as violations (duplicate deliveries are counted in the ghost).
``ALLOCATION_ANOMALIES`` adds, per allocation strategy, the ownership gaps and overlaps that the
strategy itself produces; ``allowed_anomalies(config)`` is the whole list for one configuration.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import NamedTuple

from rmqspec.spec import broker_rules as br
from rmqspec.spec.actions import (
    Action,
    ApplyConsumeOffset,
    BrokerCrash,
    BrokerRestart,
    FinishConsume,
    PersistOffsets,
    Rebalance,
    RebalanceQueryError,
    ReceivePull,
    SendPull,
    StartConsume,
)
from rmqspec.spec.allocation import NullPointerError, machine_room_eligible
from rmqspec.spec.config import CLUSTERING, CONFIG, CONSISTENT_HASH, MACHINE_ROOM, MACHINE_ROOM_NEARBY, Config
from rmqspec.spec.model import Model
from rmqspec.spec.state import State


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
        "duplicate-delivery": "At-least-once: results of a dropped pq are discarded, commits are the lowest "
        "in-flight offset sent every 5 s oneway, and a new owner may read the broker before the old "
        "owner's last commit lands (semantics S4; R6.3, R2.6, R9.4).",
        "broker-offset-decrease-by-another-owner": "The broker is last-writer-wins (R3.2): a stale or "
        "overlapping owner's late commit may lower the offset (S5). Only a decrease by the same pq "
        "that wrote the value is a bug (INV-8).",
        "double-ownership-while-views-differ": "Each consumer allocates from its own view of the "
        "consumer list; concurrent consumption does not lock, so queues may be owned twice or not "
        "at all until the views agree (S7; known-bugs §3, apache/rocketmq#2837).",
        "positioning-skip": "A group with no stored offset starts at maxOffset (LAST on an old queue) "
        "or at a timestamp; the messages before it are not owed (R10.4).",
    },
    "BROADCASTING": {
        "duplicate-delivery": "A consumer that crashes replays from its local file, last written up to "
        "5 s earlier (R4.1, R1.12).",
        "failure-dropped": "BROADCASTING drops messages whose listener failed; there is no retry (R7.3, S13).",
        "positioning-skip": "As in CLUSTERING (R10.4), per consumer.",
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


def allowed_anomalies(config: Config) -> dict[str, str]:
    """Everything ``config`` tolerates: its mode's ``ALLOWED_ANOMALIES`` and, in CLUSTERING, the
    ``ALLOCATION_ANOMALIES`` of its strategy (of the inner one for MACHINE_ROOM_NEARBY)."""
    out = dict(ALLOWED_ANOMALIES[config.mode])
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
            count = pq.tree.bit_count()
            if pq.msg_count != count:
                return f"client {i} queue {q}: msgCount={pq.msg_count} but the tree holds {count}"
            queue = s.broker.queues[q]
            size = sum(br.body_size(queue.messages[o]) for o in _bits(pq.tree))
            if pq.msg_size != size:
                return f"client {i} queue {q}: msgSize={pq.msg_size} but the bodies sum to {size}"
    return None


def _commit_below_unprocessed(m: Model, s: State) -> str | None:
    for i, cl in enumerate(s.clients):
        base = m._ledger(i) * m.q_count
        for q, pq in enumerate(cl.pqs):
            mem = cl.mem[q]
            if pq is None or mem is None or not pq.tree:
                continue
            unprocessed = pq.tree & ~s.ghost.handled[base + q]
            if unprocessed and mem > _low(unprocessed):
                return f"client {i} queue {q}: offset {mem} passes unprocessed message {_low(unprocessed)}"
    return None


def _broker_answers(m: Model, s: State) -> str | None:
    b = s.broker
    for q in range(m.q_count):
        answer = br.query_consumer_offset(
            b.offsets[q], b.queues[q], m.m_answers_minus_one, m.config.young_queue_needs_head_in_memory
        )
        if answer is not None and answer < 0:
            return f"queue {q}: QUERY_CONSUMER_OFFSET answers SUCCESS({answer})"
        if b.offsets[q] is not None and answer != b.offsets[q] and b.offsets[q] >= 0:  # type: ignore[operator]
            return f"queue {q}: stored {b.offsets[q]} but answered {answer}"
    return None


def _committed(m: Model, s: State) -> list[tuple[int, int, int]]:
    """(ledger, queue, committed offset) for every committed position the group resumes from."""
    if m.clustering:
        return [(0, q, o) for q, o in enumerate(s.broker.offsets) if o is not None]
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
    if any(s.clients[i].view != members or s.clients[i].rebalance_requested for i in running):
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


def _exclusive_ownership(m: Model, s: State) -> str | None:
    if _views_agree(m, s) is None:
        return None
    shared = "double-ownership-by-configuration" in _tolerated(m.config)
    owner: dict[int, int] = {}
    for i, cl in enumerate(s.clients):
        for q, pq in enumerate(cl.pqs):
            if pq is not None:
                if q in owner:
                    if shared and _listed(m, owner[q], q) and _listed(m, i, q):
                        continue  # both are configured with it (R11.4)
                    return f"queue {q} owned by clients {owner[q]} and {i} although all views agree"
                owner[q] = i
    return None


def _full_coverage(m: Model, s: State) -> str | None:
    members = _views_agree(m, s)
    if members is None:
        return None
    owned = {q for cl in s.clients for q, pq in enumerate(cl.pqs) if pq is not None}
    missing = [q for q in range(m.q_count) if q not in owned and not _nobody_is_dealt(m, members, q)]
    return f"queues {missing} owned by nobody although all views agree" if missing else None


# --- action properties ------------------------------------------------------------------------
def _retry_accounting(m: Model, s: State, a: Action, t: State) -> str | None:
    # Checked on the messages a step adds; the broker never changes them afterwards.
    before, after = s.broker, t.broker
    limit = m.max_reconsume
    # A scheduled copy is due exactly at its delay; it may reach the retry queue later (the broker
    # was down when it fell due), never earlier.
    added = [(e.message, e.due, True) for e in after.scheduled if e not in before.scheduled]
    if m.retry_queue is not None:
        old, new = before.queues[m.retry_queue].messages, after.queues[m.retry_queue].messages
        added += [(x, x.store_time, False) for x in new[len(old) :]]
    for msg, due, exact in added:
        k = msg.reconsume_times
        if not 1 <= k <= limit:
            return f"retry message {msg.origin} has reconsumeTimes={k}, outside 1..{limit}"
        expected = msg.sent_back_at + br.retry_delay_ms(k - 1)
        if due < expected or (exact and due != expected):
            return f"retry message {msg.origin} (reconsumeTimes={k}) due at {due}, expected {expected}"
    for msg in after.dlq[len(before.dlq) :]:  # routed on the stored count, stored with +1 (R7.5)
        if msg.reconsume_times != limit + 1:
            return f"DLQ message {msg.origin} has reconsumeTimes={msg.reconsume_times}, expected {limit + 1}"
    return None


def _increase_only(m: Model, s: State, a: Action, t: State) -> str | None:
    if not isinstance(a, (ApplyConsumeOffset, ReceivePull)):
        return None
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
    if pq is not None and pq.uid == r.pq_uid:
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
    if not owned:
        return None
    extra = sorted(q for q, v in enumerate(cl.mem) if v is not None and q not in owned)
    return f"client {a.client}: after persistAll memory still holds unowned queues {extra}" if extra else None


def _local_file_grows(m: Model, s: State, a: Action, t: State) -> str | None:
    if m.clustering:
        return None
    for i, (old, new) in enumerate(zip(s.clients, t.clients, strict=True)):
        lost = [q for q in range(m.q_count) if old.file[q] is not None and new.file[q] is None]
        if lost:
            return f"client {i}: the offset file lost entries for queues {lost}"
    return None


def _broker_decrease_attributed(m: Model, s: State, a: Action, t: State) -> str | None:
    if isinstance(a, (BrokerCrash, BrokerRestart)):
        return None  # failover to the flushed file is a declared cause
    for q in range(m.q_count):
        old, new = s.broker.offsets[q], t.broker.offsets[q]
        if old is None or new is None or new >= old:
            continue
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
    mem = before.mem[a.queue]
    expected = (mem if mem is not None else -1) if m.clustering else 0
    if req.commit_offset != expected or req.commit_flag != (m.clustering and expected > 0):  # type: ignore[union-attr]
        return f"client {a.client} queue {a.queue}: piggy-backed {req!r}, memory offset was {mem}"
    return None


def _resume_at_stored(m: Model, s: State, a: Action, t: State) -> str | None:
    if not m.clustering or not isinstance(a, Rebalance | RebalanceQueryError):
        return None
    before, after = s.clients[a.client], t.clients[a.client]
    b = s.broker
    for q in range(m.q_count):
        new, old = after.pqs[q], before.pqs[q]
        if new is None or (old is not None and old.uid == new.uid):
            continue
        stored = b.offsets[q]
        if stored is not None and stored >= 0 and new.next_offset != stored:
            return f"client {a.client} queue {q}: resumed at {new.next_offset}, last landed commit is {stored}"
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
        "A retry message with reconsumeTimes k (1 <= k <= max) is due at delay level 3+(k-1) after its send-back; "
        "a message enters the DLQ exactly when its stored reconsumeTimes reaches maxReconsumeTimes.",
        "R7.4-R7.7",
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
        "INV-8",
        "broker_decrease_attributed",
        "A broker offset falls only through failover or a commit from a different pq than wrote it.",
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


def _bits(mask: int) -> list[int]:
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


def _low(mask: int) -> int:
    return (mask & -mask).bit_length() - 1
