"""Liveness at quiescence: once faults stop and timers run, the group catches up.

semantics.md §13 states four liveness properties (LIV-1..LIV-4) "under fair scheduling and eventually
stable membership". A random walk never stops perturbing, so they cannot be checked on its states.
This module checks them the way the issue puts it: *as checks at quiescence*. From any reachable
state, :func:`quiesce` stops every perturbation and runs only healing and progress actions, fairly and
deterministically, for a logical-time horizon derived from the configuration; :func:`check_quiescent`
then checks the state it ends in. Pure: no I/O, clock or randomness; the same state always quiesces to
the same state with the same steps (docs/spec.md §13).

What "faults stop" means here:

* no budgeted action runs (``actions.PERTURBING``: crashes, shutdowns, broker crashes, offset-query
  errors, retention deletes, admin resets), no ``Produce`` and no ``CoolQueueHead``;
* every listener answers ``CONSUME_SUCCESS`` for its whole batch (so no send-back, no send-back
  failure): messages already sent back or scheduled are still delivered and consumed;
* a crashed broker restarts (``BrokerRestart`` is healing), stale channels expire (``ExpireChannel``);
* stopped consumers (crashed or shut down) are restarted (``Start``) by default: "faults stop" is
  "every fault is repaired". With ``restart_clients=False`` they stay down and the survivors must take
  their queues over (LIV-1 then speaks of the running consumers only).

The schedule delivers what is on the wire first (``BrokerReceive``: the network is taken to be fast,
and a persist timer that outpaces a fair-but-slow network would grow a channel without bound), and
otherwise is *oldest-enabled-first*: among the allowed enabled actions it takes the one that has been
enabled continuously for longest (ties in ``Model.enabled`` order). ``Tick`` competes like any
other action, so an idle pull loop (a pull of an empty queue is answered at once in the model) cannot
starve time, and a continuously enabled action is taken after at most as many steps as there are
actions enabled before it: the schedule is weakly fair.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rmqspec.spec import actions as act
from rmqspec.spec.actions import CONSUME_SUCCESS, PERTURBING, Action
from rmqspec.spec.config import CLUSTERING
from rmqspec.spec.invariants import _dealt, _nobody_is_dealt, _tolerated, _views_agree, check_state, check_step
from rmqspec.spec.model import (
    FLUSH_FIRST_DELAY,
    HEARTBEAT_INTERVAL,
    OFFSET_ILLEGAL_FIX_DELAY,
    PERSIST_FIRST_DELAY,
    PERSIST_INTERVAL,
    PULL_MAX_IDLE_TIME,
    REBALANCE_WAIT,
    RESET_SLEEP,
    Model,
)
from rmqspec.spec.state import PULL_DROPPED, State

# Logical time every quiescence runs past the latest scheduled retry (docs/spec.md §13 "The bound"):
# a pq stalled just before quiescence expires after 120 s and is re-created at the rebalance after that
# (LIV-3, <= 20 s); a restarted consumer heartbeats within 30 s and every member then needs one more
# rebalance (<= 20 s) after the last notification; a 4.9.8 OFFSET_ILLEGAL correction or admin-reset
# sleep adds 10 s and then waits for a periodic rebalance (<= 20 s); the pulls that follow consume
# without time passing, and the last offset is then persisted (first run 10 s after a start, then every
# 5 s) and flushed by the broker (first run 10 s after a restart, then every 5 s). Everything is doubled.
HORIZON_MS = 2 * (
    PULL_MAX_IDLE_TIME
    + HEARTBEAT_INTERVAL
    + 2 * REBALANCE_WAIT
    + max(OFFSET_ILLEGAL_FIX_DELAY, RESET_SLEEP)
    + REBALANCE_WAIT
    + PERSIST_FIRST_DELAY
    + PERSIST_INTERVAL
    + FLUSH_FIRST_DELAY
)

# How long (logical ms) every check must hold, sampled at each clock advance, before quiescence stops
# early: one rebalance period plus one persist interval, so a periodic rebalance and a persist have
# both run on the settled state.
STABLE_MS = REBALANCE_WAIT + PERSIST_INTERVAL


@dataclass
class Quiescence:
    """The end of a quiescence: the state reached, the actions taken, and whether the horizon was
    reached within the step bound or the checks settled (``reached``); ``safety``: the first safety
    violations met on the way, as (id, detail)."""

    start: State
    state: State
    steps: list[Action]
    horizon: int  # the logical time the schedule ran to
    bound: int  # the step bound
    reached: bool
    safety: list[tuple[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class LivenessViolation:
    id: str
    detail: str


def horizon(model: Model, state: State) -> int:
    """The logical time quiescence runs to: the latest scheduled retry (or now), plus HORIZON_MS."""
    latest = max([state.now, *(e.due for e in state.broker.scheduled)])
    return latest + HORIZON_MS


def step_bound(model: Model, state: State, until: int) -> int:
    """A step bound that the horizon is reached well within for a correct model (figures in docs/spec.md
    §13): per logical second, every (client, queue) pair may run one idle pull round (3 steps) and
    each client and the broker a few timers; then every message, including each retry copy still to
    come, once through pull, consume and offset update, eight steps each, for every ledger."""
    c = model.config
    seconds = (until - state.now) // 1000 + 1
    per_second = (c.consumers + 1) * (model.q_count + 4) * 3
    messages = sum(len(q.messages) for q in state.broker.queues) + len(state.broker.scheduled)
    messages += sum(state.budget.produces)  # never produced here, but harmless headroom
    ledgers = c.consumers if c.mode != CLUSTERING else 1
    return seconds * per_second + 8 * ledgers * (messages + 1) * (model.max_reconsume + 2)


def allowed(action: Action, restart_clients: bool) -> bool:
    """Whether the quiescence schedule may take ``action`` ("faults stop", module docstring)."""
    if isinstance(action, (*PERTURBING, act.Produce, act.CoolQueueHead)):
        return False
    if isinstance(action, act.Start):
        return restart_clients
    if isinstance(action, act.FinishConsume):
        if action.status in (act.ORDERLY_SUCCESS, act.ORDERLY_COMMIT):  # the orderly listener succeeds (R8.6)
            return action.send_back_fails == 0
        return action.status == CONSUME_SUCCESS and action.send_back_fails == 0 and action.ack_index >= 0
    return True


def _full_success(model: Model, state: State, action: Action) -> bool:
    """A FinishConsume that acknowledges its whole batch."""
    if not isinstance(action, act.FinishConsume):
        return True
    if action.status == act.ORDERLY_SUCCESS:  # with autoCommit false only COMMIT moves the offset (R8.6)
        return model.config.orderly_auto_commit
    if action.status == act.ORDERLY_COMMIT:
        return True
    req = next((r for r in state.clients[action.client].consuming if r.rid == action.rid), None)
    return req is not None and action.ack_index == len(req.msgs) - 1


def quiesce(
    model: Model, state: State, restart_clients: bool = True, check_safety: bool = True, settle: bool = True
) -> Quiescence:
    """Run the healing schedule from ``state`` until the horizon or the step bound (module docstring).
    With ``settle`` it stops early once every liveness check has held at every clock advance for
    ``STABLE_MS`` of logical time (the checks are then checked once more on the final state by
    :func:`check_quiescent`). With ``check_safety`` every invariant and action property is checked on
    the way as well."""
    until = horizon(model, state)
    bound = step_bound(model, state, until)
    since: dict[Action, int] = {}
    taken: list[Action] = []
    safety: list[tuple[str, str]] = []
    start = state
    stable_since: int | None = None
    k = 0
    while state.now < until and k < bound:
        enabled = [a for a in model.enabled(state) if allowed(a, restart_clients) and _full_success(model, state, a)]
        if not enabled:
            break
        since = {a: since.get(a, k) for a in enabled}
        wire = [a for a in enabled if isinstance(a, act.BrokerReceive)]
        # the network first (each BrokerReceive shortens a channel), then the oldest enabled action;
        # min is stable: ties keep enabled() order
        action = wire[0] if wire else min(enabled, key=lambda a: since[a])
        after = model.step(state, action)
        if check_safety and not safety:
            found = check_step(model, state, action, after) + check_state(model, after)
            safety = [(v.id, v.detail) for v in found]
        taken.append(action)
        del since[action]
        state = after
        k += 1
        if settle and isinstance(action, act.Tick):
            if _failures(model, state, restart_clients):
                stable_since = None
            elif stable_since is None:
                stable_since = state.now
            elif state.now - stable_since >= STABLE_MS:
                return Quiescence(start, state, taken, until, bound, True, safety)
    reached = state.now >= until or not model.enabled(state)
    return Quiescence(start, state, taken, until, bound, reached, safety)


# --- the checks ------------------------------------------------------------------------------------
def _liv1_ownership(model: Model, s: State, restart_clients: bool) -> str | None:
    running = [i for i, cl in enumerate(s.clients) if cl.running]
    if not running:
        return None if not restart_clients else "no consumer is running"
    if not model.clustering:
        for i in running:
            missing = [q for q in model.topic_queues if s.clients[i].pqs[q] is None]
            if missing:
                return f"BROADCASTING client {i} owns no pq of queues {missing}"
        return None
    members = _views_agree(model, s)
    if members is None:
        everyone = tuple(sorted(running, key=lambda j: model.cids[j]))
        nothing_owned = all(pq is None for i in running for pq in s.clients[i].pqs)
        if nothing_owned and all(_nobody_is_dealt(model, everyone, q) for q in range(model.q_count)):
            return None  # ALLOCATION_ANOMALIES: e.g. MACHINE_ROOM's rebalance throws for good (R11.5, R11.7)
        if model.orderly and "double-ownership-by-configuration" in _tolerated(model.config):
            # An orderly consumer whose CONFIG list shares a queue with another never gets its lock
            # (R8.1, R8.4), so its rebalance never places every allocated queue and records no view;
            # ownership is then checked without agreement (below).
            members = everyone
    if members is None:
        views = {i: s.clients[i].view for i in running}
        return f"the views never agreed: registered {sorted(s.broker.registered)}, views {views}"
    shared = "double-ownership-by-configuration" in _tolerated(model.config)
    lists = model.config.allocate_config_queues
    for q in range(model.q_count):
        owners = [i for i in running if (pq := s.clients[i].pqs[q]) is not None and not pq.dropped]
        duplicate = model.config.duplicate_client_id  # RMQ-11: DUPLICATE_CLIENT_ID_ANOMALIES
        orphaned = duplicate and not _dealt(model, members, q)
        if not owners and not _nobody_is_dealt(model, members, q) and not orphaned:
            return f"queue {q} is owned by nobody"
        configured = shared and lists is not None and all(q in lists[i] for i in owners)
        sharers = duplicate and len({model.identity[i] for i in owners}) == 1
        if len(owners) > 1 and not configured and not sharers:
            return f"queue {q} is owned by clients {owners}"
    return None


def _liv2_offsets_reached(model: Model, s: State) -> str | None:
    b = s.broker
    for i, cl in enumerate(s.clients):
        if not cl.running:
            continue
        for q, pq in enumerate(cl.pqs):
            mem = cl.mem[q]
            if pq is None or mem is None:
                continue
            stored = b.offsets[q] if model.clustering else cl.file[q]
            if stored != mem:
                where = "broker" if model.clustering else "local file"
                return f"client {i} queue {q}: memory offset {mem} but the {where} holds {stored}"
    if model.clustering and b.up and b.flushed != b.offsets:
        return f"broker flushed {b.flushed} lags its table {b.offsets}"
    return None


def _liv5_consumed(model: Model, s: State) -> str | None:
    """Every message of an owned queue was handled (or is a declared skip) and the committed offset
    reached maxOffset (with autoCommit false, unless the listener holds messages it took but did not commit)."""
    g = s.ghost
    for i, cl in enumerate(s.clients):
        if not cl.running:
            continue
        ledger = model._ledger(i)
        for q, pq in enumerate(cl.pqs):
            if pq is None:
                continue
            queue = s.broker.queues[q]
            low, high = queue.min_offset, queue.max_offset
            owed = ((1 << high) - 1) & ~((1 << low) - 1)
            missing = owed & ~(g.handled[ledger * model.q_count + q] | g.skipped[ledger * model.q_count + q])
            if missing:
                first = (missing & -missing).bit_length() - 1
                return f"client {i} queue {q}: offset {first} of [{low}, {high}) was never consumed"
            committed = s.broker.offsets[q] if model.clustering else cl.file[q]
            if not model.config.orderly_auto_commit and pq.consuming_tree:
                # autoCommit false: the listener answered SUCCESS for what it took since its last COMMIT, which it
                # may never commit (R8.6): by its choice the offset stays where it was (INV-3 checks the commits)
                continue
            if high > 0 and committed != high:
                return f"client {i} queue {q}: committed {committed}, maxOffset {high}"
    return None


def _liv3_liv4_pulling(model: Model, s: State) -> str | None:
    for i, cl in enumerate(s.clients):
        if not cl.running:
            continue
        if cl.offset_fixes:
            return f"client {i}: OFFSET_ILLEGAL corrections still pending {[f.queue for f in cl.offset_fixes]}"
        for q, pq in enumerate(cl.pqs):
            if pq is None:
                continue
            if pq.dropped:
                return f"client {i} queue {q}: pq {pq.uid} is still in the table, dropped by an orderly removal (R8.8)"
            if pq.pull_state == PULL_DROPPED:
                return f"client {i} queue {q}: pq {pq.uid} still waits for its OFFSET_ILLEGAL correction"
            if s.now - pq.last_pull > PULL_MAX_IDLE_TIME:
                return f"client {i} queue {q}: pq {pq.uid} last pulled at {pq.last_pull}, now {s.now}"
    return None


LIVENESS_CHECKS = (
    ("LIV-1", "every queue owned by exactly one running consumer (CLUSTERING) or by all (BROADCASTING)"),
    ("LIV-2", "every owned queue's memory offset reached the broker (its file in BROADCASTING), flushed"),
    ("LIV-3/4", "every owned pq is pulling: none pull-expired, none left dropped by OFFSET_ILLEGAL"),
    ("LIV-5", "every message of every owned queue consumed (or a declared skip) and committed at maxOffset"),
)


def _failures(model: Model, s: State, restart_clients: bool) -> list[LivenessViolation]:
    out = []
    for vid, detail in (
        ("LIV-1", _liv1_ownership(model, s, restart_clients)),
        ("LIV-2", _liv2_offsets_reached(model, s)),
        ("LIV-3/4", _liv3_liv4_pulling(model, s)),
        ("LIV-5", _liv5_consumed(model, s)),
    ):
        if detail is not None:
            out.append(LivenessViolation(vid, detail))
    return out


def check_quiescent(model: Model, q: Quiescence, restart_clients: bool = True) -> list[LivenessViolation]:
    """The liveness checks on the state a quiescence ended in (docs/spec.md §13)."""
    if not q.reached:
        detail = f"horizon {q.horizon} not reached within {q.bound} steps (now {q.state.now})"
        return [LivenessViolation("LIV-bound", detail)]
    return _failures(model, q.state, restart_clients)


def summary(model: Model, s: State) -> str:
    """A few lines describing a state, for failure reports."""
    b = s.broker
    lines = [f"now={s.now} broker up={b.up} registered={sorted(b.registered)} offsets={b.offsets} flushed={b.flushed}"]
    lines.append(f"maxOffsets={[q.max_offset for q in b.queues]} minOffsets={[q.min_offset for q in b.queues]}")
    for i, cl in enumerate(s.clients):
        owned = [q for q, pq in enumerate(cl.pqs) if pq is not None]
        lines.append(
            f"client {i}: running={cl.running} view={cl.view} owned={owned} mem={cl.mem} file={cl.file} "
            f"next_persist={cl.next_persist} next_rebalance={cl.next_rebalance}"
        )
    return "\n".join(lines)


def quiesce_and_check(
    model: Model, state: State, restart_clients: bool = True
) -> tuple[Quiescence, list[LivenessViolation]]:
    """Quiesce ``state`` and check it; safety violations met on the way are reported as such."""
    q = quiesce(model, state, restart_clients)
    found = [LivenessViolation(vid, f"safety during quiescence: {d}") for vid, d in q.safety]
    return q, found + check_quiescent(model, q, restart_clients)


def describe(model: Model, q: Quiescence, violations: list[LivenessViolation], tail: int = 40) -> str:
    """A failure report: which property, the final state and the quiescence steps taken."""
    lines = [f"{v.id}: {v.detail}" for v in violations]
    lines.append(f"after {len(q.steps)} quiescence steps (horizon {q.horizon}, bound {q.bound}); state:")
    lines.append(summary(model, q.state))
    shown = q.steps[-tail:]
    lines.append(f"last {len(shown)} quiescence steps:")
    lines += [f"  {a!r}" for a in shown]
    return "\n".join(lines)
