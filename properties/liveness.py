"""Liveness at quiescence: once faults stop and timers run, the group catches up.

The property list the project started from states four liveness properties (LIV-1..LIV-4) "under fair
scheduling and eventually stable membership". A random walk never stops perturbing, so they cannot be checked on
its states.
This module checks them *as checks at quiescence*. From any reachable
state, :func:`quiesce` stops every perturbation and runs only healing and progress actions, fairly and
deterministically, for a logical-time horizon derived from the configuration; :func:`check_quiescent`
then checks the state it ends in. Pure: no I/O, clock or randomness; the same state always quiesces to
the same state with the same steps (docs/spec.md, "Liveness at quiescence").

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

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from rmqspec.spec import actions as act
from rmqspec.spec import orderly as lk
from rmqspec.spec.actions import CONSUME_SUCCESS, PERTURBING, Action
from rmqspec.spec.admin_reset import RESET_SLEEP
from rmqspec.spec.anomalies import _tolerated
from rmqspec.spec.broker import FLUSH_FIRST_DELAY
from rmqspec.spec.concurrent_consume import CLEAN_EXPIRE_MSG_TASK
from rmqspec.spec.config import CLUSTERING
from rmqspec.spec.consumer_process import HEARTBEAT_INTERVAL, PERSIST_FIRST_DELAY, PERSIST_INTERVAL
from rmqspec.spec.invariants import check_state, check_step
from rmqspec.spec.model import Model
from rmqspec.spec.pull import OFFSET_ILLEGAL_FIX_DELAY, PULL_MAX_IDLE_TIME
from rmqspec.spec.rebalance import REBALANCE_WAIT, _dealt, _nobody_is_dealt, _views_agree
from rmqspec.spec.state import PULL_DROPPED, State

# Logical time every quiescence runs past the latest scheduled retry (docs/spec.md, "The quiescence procedure", "The
# bound"): a pq stalled just before quiescence expires after 120 s and is re-created at the rebalance after that (LIV-3,
# <= 20 s); a restarted consumer heartbeats within 30 s and every member then needs one more rebalance (<= 20 s) after
# the last notification; a 4.9.8 OFFSET_ILLEGAL correction or admin-reset sleep adds 10 s and then waits for a periodic
# rebalance (<= 20 s); the pulls that follow consume without time passing, and the last offset is then persisted (first
# run 10 s after a start, then every 5 s) and flushed by the broker (first run 10 s after a restart, then every 5 s).
# Everything is doubled.
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
    joined: bool = False  # stopped at a state whose own quiescence is known to settle (``quiesce``'s ``joins``)


@dataclass(frozen=True)
class LivenessViolation:
    id: str
    detail: str


def horizon(model: Model, state: State) -> int:
    """The logical time quiescence runs to: the latest scheduled retry (or now), plus HORIZON_MS."""
    latest = max([state.now, *(e.due for e in state.broker.scheduled)])
    return latest + HORIZON_MS


def step_bound(model: Model, state: State, until: int) -> int:
    """A step bound that the horizon is reached well within for a correct model (figures in docs/spec.md,
    "Liveness at quiescence"): per logical second, every (client, queue) pair may run one idle pull round (3 steps) and
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
    if isinstance(action, act.PersistOffsets) and action.lagging:  # budgeted: offsets.json's writers race
        # (docs/spec.md, "What is real, ranked")
        return False
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
    model: Model,
    state: State,
    restart_clients: bool = True,
    check_safety: bool = True,
    settle: bool = True,
    joins: Callable[[State], bool] | None = None,
) -> Quiescence:
    """Run the healing schedule from ``state`` until the horizon or the step bound (module docstring).
    With ``settle`` it stops early once every liveness check has held at every clock advance for
    ``STABLE_MS`` of logical time (the checks are then checked once more on the final state by
    :func:`check_quiescent`). With ``check_safety`` every invariant and action property is checked on
    the way as well. ``joins(s)`` is asked of every state the schedule reaches; when it answers True the run
    stops there with ``joined`` set: the caller knows that state's own quiescence settles (a frontier
    quiescence's memo, ``properties.frontier``)."""
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
        if joins is not None and joins(state):
            return Quiescence(start, state, taken, until, bound, True, safety, joined=True)
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
class Shortfall(NamedTuple):
    """One thing a liveness check found undone at quiescence: the check's id, a description, and where: the
    client and queue it concerns (None: the whole group, or no particular queue); ``kind`` tells LIV-5's
    message never consumed ("unconsumed") from one consumed but not committed ("uncommitted"), LIV-3/4's
    pull-expired ("expired"), orderly-dropped ("dropped") and OFFSET_ILLEGAL ("illegal", "fix") pqs apart,
    and marks the two group shortfalls no client's task can leave: no consumer running ("none-running",
    LIV-1) and the broker's flushed file behind its table ("unflushed", LIV-2).
    A check fails when it has a shortfall; :func:`attribute` decides which shortfalls a dead task explains."""

    id: str
    detail: str
    client: int | None = None
    queue: int | None = None
    kind: str = ""


def _liv1_ownership(model: Model, s: State, restart_clients: bool) -> Iterator[Shortfall]:
    running = [i for i, cl in enumerate(s.clients) if cl.running]
    if not running:
        if restart_clients:
            yield Shortfall("LIV-1", "no consumer is running", kind="none-running")
        return
    if not model.clustering:
        for i in running:
            missing = [q for q in model.topic_queues if s.clients[i].pqs[q] is None]
            if missing:
                yield Shortfall("LIV-1", f"BROADCASTING client {i} owns no pq of queues {missing}", client=i)
        return
    members = _views_agree(model, s)
    if members is None:
        everyone = tuple(sorted(running, key=lambda j: model.cids[j]))
        nothing_owned = all(pq is None for i in running for pq in s.clients[i].pqs)
        if nothing_owned and all(_nobody_is_dealt(model, everyone, q) for q in range(model.q_count)):
            return  # ALLOCATION_ANOMALIES: e.g. MACHINE_ROOM's rebalance throws for good (R11.5, R11.7)
        if model.orderly and "double-ownership-by-configuration" in _tolerated(model.config):
            # An orderly consumer whose CONFIG list shares a queue with another never gets its lock
            # (R8.1, R8.4), so its rebalance never places every allocated queue and records no view;
            # ownership is then checked without agreement (below).
            members = everyone
    if members is None:
        views = {i: s.clients[i].view for i in running}
        yield Shortfall("LIV-1", f"the views never agreed: registered {sorted(s.broker.registered)}, views {views}")
        return
    shared = "double-ownership-by-configuration" in _tolerated(model.config)
    lists = model.config.allocate_config_queues
    for q in range(model.q_count):
        owners = [i for i in running if (pq := s.clients[i].pqs[q]) is not None and not pq.dropped]
        duplicate = model.config.duplicate_client_id  # RMQ-11: DUPLICATE_CLIENT_ID_ANOMALIES
        orphaned = duplicate and not _dealt(model, members, q)
        if not owners and not _nobody_is_dealt(model, members, q) and not orphaned:
            yield Shortfall("LIV-1", f"queue {q} is owned by nobody", queue=q)
        configured = shared and lists is not None and all(q in lists[i] for i in owners)
        sharers = duplicate and len({model.identity[i] for i in owners}) == 1
        if len(owners) > 1 and not configured and not sharers:
            yield Shortfall("LIV-1", f"queue {q} is owned by clients {owners}", queue=q)


def _liv2_offsets_reached(model: Model, s: State) -> Iterator[Shortfall]:
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
                yield Shortfall(
                    "LIV-2", f"client {i} queue {q}: memory offset {mem} but the {where} holds {stored}", i, q
                )
    if model.clustering and b.up and b.flushed != b.offsets:
        for q in range(model.q_count):
            if b.flushed[q] != b.offsets[q]:
                yield Shortfall(
                    "LIV-2",
                    f"broker flushed {b.flushed} lags its table {b.offsets} (queue {q})",
                    queue=q,
                    kind="unflushed",
                )


def _liv5_consumed(model: Model, s: State) -> Iterator[Shortfall]:
    """Every message of an owned queue was handled (or is a declared skip) and the committed offset
    reached maxOffset."""
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
                detail = f"client {i} queue {q}: offset {first} of [{low}, {high}) was never consumed"
                yield Shortfall("LIV-5", detail, i, q, "unconsumed")
                continue
            committed = s.broker.offsets[q] if model.clustering else cl.file[q]
            # autoCommit false: a listener holding what it took since its last COMMIT keeps the offset where it
            # was, by its choice (R8.6): a HeldUncommitted cause, reported as harm (``attribute``)
            if high > 0 and committed != high:
                yield Shortfall(
                    "LIV-5", f"client {i} queue {q}: committed {committed}, maxOffset {high}", i, q, "uncommitted"
                )


def _liv3_liv4_pulling(model: Model, s: State) -> Iterator[Shortfall]:
    for i, cl in enumerate(s.clients):
        if not cl.running:
            continue
        if cl.offset_fixes:
            pending = [f.queue for f in cl.offset_fixes]
            yield Shortfall(
                "LIV-3/4", f"client {i}: OFFSET_ILLEGAL corrections still pending {pending}", i, None, "fix"
            )
        for q, pq in enumerate(cl.pqs):
            if pq is None:
                continue
            if pq.dropped:
                detail = (
                    f"client {i} queue {q}: pq {pq.uid} is still in the table, dropped by an orderly removal (R8.8)"
                )
                kind = "dropped"
            elif pq.pull_state == PULL_DROPPED:
                detail = f"client {i} queue {q}: pq {pq.uid} still waits for its OFFSET_ILLEGAL correction"
                kind = "illegal"
            elif s.now - pq.last_pull > PULL_MAX_IDLE_TIME:
                detail = f"client {i} queue {q}: pq {pq.uid} last pulled at {pq.last_pull}, now {s.now}"
                kind = "expired"
            else:
                continue
            yield Shortfall("LIV-3/4", detail, i, q, kind)


LIVENESS_CHECKS = (
    ("LIV-1", "every queue owned by exactly one running consumer (CLUSTERING) or by all (BROADCASTING)"),
    ("LIV-2", "every owned queue's memory offset reached the broker (its file in BROADCASTING), flushed"),
    ("LIV-3/4", "every owned pq is pulling: none pull-expired, none left dropped by OFFSET_ILLEGAL"),
    ("LIV-5", "every message of every owned queue consumed (or a declared skip) and committed at maxOffset"),
)


def _checks(model: Model, s: State, restart_clients: bool) -> tuple[Iterator[Shortfall], ...]:
    return (
        _liv1_ownership(model, s, restart_clients),
        _liv2_offsets_reached(model, s),
        _liv3_liv4_pulling(model, s),
        _liv5_consumed(model, s),
    )


def _failures(model: Model, s: State, restart_clients: bool) -> list[LivenessViolation]:
    """The first shortfall of each check that fails, leaving out those a cause read from ``s`` itself explains (a
    listener holding messages, a lockless co-owner: ``state_causes``; the walk's dead tasks are attributed afterwards,
    by ``attribute``)."""
    held = state_causes(model, s)
    out = []
    for check in _checks(model, s, restart_clients):
        first = next((f for f in check if not any(explains(model, h, f, s) for h in held)), None)
        if first is not None:
            out.append(LivenessViolation(first.id, first.detail))
    return out


def shortfalls(model: Model, s: State, restart_clients: bool = True) -> list[Shortfall]:
    """Every shortfall of every check on ``s``, in check order."""
    return [found for check in _checks(model, s, restart_clients) for found in check]


def check_quiescent(model: Model, q: Quiescence, restart_clients: bool = True) -> list[LivenessViolation]:
    """The liveness checks on the state a quiescence ended in (docs/spec.md, "Liveness at quiescence")."""
    if not q.reached:
        detail = f"horizon {q.horizon} not reached within {q.bound} steps (now {q.state.now})"
        return [LivenessViolation("LIV-bound", detail)]
    return _failures(model, q.state, restart_clients)


# --- what explains a shortfall: a dead task, or a listener's choice -----------------------------------------------
# (docs/spec.md, "Liveness in every run, and what a shown cause may explain")
@dataclass(frozen=True)
class DeadTask:
    """A ``TaskDies`` fault of the walk: which task of which client, at which step of the walk (1-based)
    and logical time. It can explain a liveness shortfall only while the task is still dead at the end of
    the quiescence, that is, the client was not stopped (and so restarted) since."""

    client: int
    task: str
    step: int
    at: int

    @property
    def cause(self) -> str:
        """The key harm is counted under in reports: the fault and the task, whichever client."""
        return f"TaskDies({self.task})"

    def describe(self) -> str:
        return f"TaskDies({self.client}, {self.task}) at step {self.step} ({self.at} ms), still dead"

    def to_json(self) -> dict[str, object]:
        return {"cause": self.cause, "client": self.client, "task": self.task, "step": self.step, "at": self.at}


@dataclass(frozen=True)
class HeldUncommitted:
    """An orderly listener with autoCommit false (``Config.orderly_auto_commit``) that answered SUCCESS
    without a COMMIT: at the end of the quiescence its pq of ``queue`` still holds ``offsets``, taken and
    never committed (R8.6). Read from the final state; nothing in the quiescence makes the listener commit,
    since it is only called again with messages it has not taken yet."""

    client: int
    queue: int
    offsets: tuple[int, ...]

    @property
    def cause(self) -> str:
        return "HeldUncommitted(autoCommit=false)"

    def describe(self) -> str:
        return f"client {self.client} queue {self.queue}: the listener holds offsets {list(self.offsets)} uncommitted"

    def to_json(self) -> dict[str, object]:
        return {"cause": self.cause, "client": self.client, "queue": self.queue, "offsets": list(self.offsets)}


@dataclass(frozen=True)
class LocklessCoOwner:
    """Orderly CLUSTERING with CONFIG lists that both name ``queue``: ``client`` holds a live pq of it without its
    broker lock, which ``holder`` (another running consumer whose list names the queue too, with a live pq of it) holds
    and renews. AllocateMessageQueueByConfig hands both the queue for good (R11.4); the pq ``client`` created while it
    held the lock (a stall or a broker restart let the lock pass, R8.1) stays in its table, since the rebalance removes
    a pq only when the queue leaves the allocation or its pull expires (R9.4), and pullMessage refreshes
    lastPullTimestamp before it turns back an unlocked orderly pq (R5.1, R8.5). It never pulls or consumes, so its
    memory offset stays at ``offset``, and its persistAll writes that offset for every queue of its table every 5 s
    (R4.1) beside the holder's commits: last writer wins on the broker (R3.2). Read from the final state, like
    ``HeldUncommitted``."""

    client: int
    holder: int
    queue: int
    offset: int  # the lockless owner's memory offset, which its persists keep writing
    holder_offset: int | None  # the lock holder's memory offset

    @property
    def cause(self) -> str:
        return "LocklessCoOwner(CONFIG)"

    def describe(self) -> str:
        return (
            f"client {self.client} queue {self.queue}: configured beside lock holder {self.holder}, it holds a pq "
            f"without the lock and persists its memory offset {self.offset} (the holder's is {self.holder_offset})"
        )

    def to_json(self) -> dict[str, object]:
        return {
            "cause": self.cause,
            "client": self.client,
            "holder": self.holder,
            "queue": self.queue,
            "offset": self.offset,
            "holder_offset": self.holder_offset,
        }


Cause = DeadTask | HeldUncommitted | LocklessCoOwner


def death(action: Action, after: State, step: int) -> DeadTask | None:
    """The ``DeadTask`` a walk's step ``step`` (1-based) records, if the action was a ``TaskDies``."""
    if isinstance(action, act.TaskDies):
        return DeadTask(action.client, action.task, step, after.now)
    return None


def still_dead(deaths: Sequence[DeadTask], state: State) -> list[DeadTask]:
    """The deaths whose task is dead in ``state``: for each (client, task), the last death recorded, if the
    client's ``dead_tasks`` still names the task (a stop clears them, R4.1's tasks start with the process)."""
    last = {(d.client, d.task): d for d in deaths}
    return [d for (i, task), d in sorted(last.items()) if task in state.clients[i].dead_tasks]


def held_uncommitted(model: Model, s: State) -> list[HeldUncommitted]:
    """Every running consumer's pq whose autoCommit-false listener holds messages it never committed."""
    if model.config.orderly_auto_commit:
        return []
    return [
        HeldUncommitted(i, q, tuple(k for k in range(pq.consuming_tree.bit_length()) if pq.consuming_tree >> k & 1))
        for i, cl in enumerate(s.clients)
        if cl.running
        for q, pq in enumerate(cl.pqs)
        if pq is not None and pq.consuming_tree
    ]


def lockless_co_owners(model: Model, s: State) -> list[LocklessCoOwner]:
    """Every running orderly CLUSTERING consumer holding a live pq, and a memory offset, of a queue that its CONFIG list
    and the lock holder's both name, without the broker lock the holder keeps (``LocklessCoOwner``)."""
    lists = model.config.allocate_config_queues
    if not model.orderly or not model.clustering or lists is None:
        return []
    found = []
    for q in range(model.q_count):
        owner = lk.holder(s.broker.locks, q, s.now)
        if owner is None:
            continue
        live = [i for i, cl in enumerate(s.clients) if cl.running and (pq := cl.pqs[q]) is not None and not pq.dropped]
        holders = [h for h in live if model.identity[h] == owner and q in lists[h]]
        for h in holders[:1]:
            for i in live:
                offset = s.clients[i].mem[q]
                if model.identity[i] != owner and q in lists[i] and offset is not None:
                    found.append(LocklessCoOwner(i, h, q, offset, s.clients[h].mem[q]))
    return found


def state_causes(model: Model, s: State) -> list[HeldUncommitted | LocklessCoOwner]:
    """The causes read from a state itself, not from the walk: listeners holding messages, lockless co-owners."""
    return [*held_uncommitted(model, s), *lockless_co_owners(model, s)]


def _held(s: State, client: int) -> set[int]:
    return {q for q, pq in enumerate(s.clients[client].pqs) if pq is not None}


def _shared(model: Model, s: State, q: int | None) -> bool:
    """CLUSTERING: is queue ``q`` held (a live pq) by two or more running consumers, whose commits then
    land on the same broker offset? (A BROADCASTING consumer commits to its own file.)"""
    if q is None or not model.clustering:
        return False
    return sum(1 for cl in s.clients if cl.running and (pq := cl.pqs[q]) is not None and not pq.dropped) > 1


def explains(model: Model, cause: Cause, shortfall: Shortfall, s: State) -> bool:
    """Whether ``cause`` (a task still dead, or a listener holding messages, in the final state ``s``)
    explains ``shortfall`` (docs/spec.md, "Liveness in every run, and what a shown cause may explain"): only the
    shortfalls its absence, or the listener's choice, can leave. The group shortfalls no client's task can leave (no
    consumer running, the broker's flush lagging) are never explained, nor is the step bound or a safety violation."""
    here, q = shortfall.client, shortfall.queue
    if isinstance(cause, LocklessCoOwner):
        return _lockless_explains(model, cause, shortfall, s)
    if shortfall.kind == "unflushed":
        # The holder's commits stay at its last COMMIT (R8.6) while a second owner of the queue (a shared
        # clientId, RMQ-11; CONFIG lists) persists its own value every 5 s: the two overwrite each other on
        # the broker forever, so a commit always lands after the last flush. Nothing else explains a lag.
        return isinstance(cause, HeldUncommitted) and q == cause.queue and _shared(model, s, q)
    if shortfall.kind == "none-running":
        return False
    if isinstance(cause, HeldUncommitted):
        # R8.6: only a COMMIT moves the offset, so the holder's memory offset and commits stay at its last
        # COMMIT; R6.5: what it holds counts in msgCount, so past the flow-control threshold the queue is
        # never pulled again; a second owner of the queue (a shared clientId, RMQ-11; CONFIG lists) commits
        # beside it, and their persists overwrite each other on the broker.
        if q != cause.queue:
            return False
        if shortfall.id == "LIV-5" and here == cause.client:
            pq = s.clients[cause.client].pqs[cause.queue]
            flow_controlled = pq is not None and pq.msg_count > model.config.pull_threshold_for_queue
            return shortfall.kind == "uncommitted" or flow_controlled
        return shortfall.id in ("LIV-2", "LIV-5") and shortfall.kind != "unconsumed" and _shared(model, s, q)
    c, task = cause.client, cause.task
    if task == "persistAllConsumerOffset":
        # Nothing else writes the consumer's offsets of the queues it keeps (R4.1): BROADCASTING's file,
        # and in CLUSTERING what the pull piggy-back (R5.2) did not carry, the last offset of all
        if shortfall.id == "LIV-2":
            return here == c
        return shortfall.id == "LIV-5" and here == c and shortfall.kind == "uncommitted"
    if task == "RebalanceService":
        # The group's ownership needs every member to re-run its rebalance (R4.2, R9.7): every LIV-1
        # shortfall in CLUSTERING, its own in BROADCASTING. Only a rebalance removes its pull-expired or
        # orderly-dropped pqs (R6.6, R8.8: LIV-3/4); a queue it should have given up is consumed and
        # committed by it and the new owner, whose commits overwrite each other (LIV-2, LIV-5).
        if shortfall.id == "LIV-1":
            return model.clustering or here == c
        if shortfall.id == "LIV-3/4":
            return here == c and shortfall.kind in ("expired", "dropped")
        return model.clustering and q is not None and q in _held(s, c) and _shared(model, s, q)
    if task == "sendHeartbeatToAllBroker":
        # The broker's idle scan drops the consumer 120 s after its last heartbeat, telling nobody, and
        # messageQueueChanged's heartbeat brings it back: it flaps every ~2 minutes (R4.3, docs/spec.md
        # "What the version switch changes"), so "eventually stable membership", the premise of every LIV property
        # (docs/spec.md, "Liveness at quiescence"), never holds. CLUSTERING: any shortfall of the group.
        # BROADCASTING (no allocation by membership): its own, and everyone's while nobody of the group is
        # registered, when every pull is rejected (R5.4).
        return model.clustering or here == c or not s.broker.registered
    if task == CLEAN_EXPIRE_MSG_TASK:
        # R6.8: the cleaner only removes a message whose listener has run past consumeTimeout. At quiescence every
        # listener answers (CONSUME_SUCCESS), and its processConsumeResult removes and commits what it held, so a dead
        # cleaner leaves nothing undone there: it explains no shortfall. Its harm is during the run: the message a
        # stuck listener pins past its cleanup deadline, which INV-23 tolerates only while the task is dead.
        return False
    if task == "lockMQPeriodically":
        # Orderly CLUSTERING: the broker locks of the queues it holds lapse after 60 s and its own after
        # 30 s (R8.3); each run then re-locks its queue alone (tryLockLaterAndReconsume), and another
        # consumer may take a lapsed lock: only the queues it holds can be left unowned, doubly owned,
        # unconsumed or overwritten
        return q is not None and q in _held(s, c)
    return False


def _lockless_explains(model: Model, cause: LocklessCoOwner, shortfall: Shortfall, s: State) -> bool:
    """What a lockless co-owner's persists leave on its queue: the broker holds whichever of the two owners' memory
    offsets was written last (R3.2, R4.1), so each owner's LIV-2 may find the other's value there, and the committed
    offset may be the lockless owner's stale one (LIV-5 "uncommitted"); the two overwrite each other every 5 s, so the
    flush may lag the table with one of the two values. Nothing else: the holder pulls and consumes every message
    (LIV-5 "unconsumed" stays a violation), and a broker value that is neither owner's is unexplained."""
    q = cause.queue
    if shortfall.queue != q:
        return False
    written = {cause.offset, cause.holder_offset}
    stored = s.broker.offsets[q]
    if shortfall.kind == "unflushed":
        return stored in written and s.broker.flushed[q] in written
    if shortfall.client not in (cause.client, cause.holder):
        return False
    if shortfall.id == "LIV-2":
        return shortfall.kind == "" and stored in written
    return shortfall.id == "LIV-5" and shortfall.kind == "uncommitted" and stored == cause.offset


@dataclass(frozen=True)
class Harm:
    """A liveness check that failed only where shown causes explain it: the check, its first shortfall, and
    the causes that explain its shortfalls."""

    id: str
    detail: str
    causes: tuple[Cause, ...]

    def describe(self) -> str:
        return f"{self.id}: {self.detail} (harm of {'; '.join(c.describe() for c in self.causes)})"


def attribute(
    model: Model, s: State, found: list[Shortfall], deaths: Sequence[DeadTask]
) -> tuple[list[LivenessViolation], list[Harm]]:
    """Split the shortfalls of each failed check: a check with a shortfall that no cause explains (no
    still-dead task of ``deaths``, no listener holding messages and no lockless co-owner in ``s``) is a violation, its
    first such shortfall named; a check whose every shortfall some cause explains is that cause's harm."""
    causes: list[Cause] = [*still_dead(deaths, s), *state_causes(model, s)]
    violations: list[LivenessViolation] = []
    harms: list[Harm] = []
    for vid in dict.fromkeys(f.id for f in found):
        mine = [f for f in found if f.id == vid]
        unexplained = [f for f in mine if not any(explains(model, c, f, s) for c in causes)]
        if unexplained:
            violations.append(LivenessViolation(vid, unexplained[0].detail))
        else:
            harms.append(
                Harm(vid, mine[0].detail, tuple(c for c in causes if any(explains(model, c, f, s) for f in mine)))
            )
    return violations, harms


@dataclass
class LivenessOutcome:
    """A quiescence and its verdict: ``violations`` (safety on the way, the step bound, and liveness
    shortfalls no dead task explains) and ``harms`` (checks that failed only where a dead task explains)."""

    quiescence: Quiescence
    violations: list[LivenessViolation]
    harms: list[Harm]

    @property
    def settled(self) -> bool:
        """Stopped early: every check held for ``STABLE_MS``."""
        return self.quiescence.state.now < self.quiescence.horizon


def check_liveness(
    model: Model,
    state: State,
    deaths: Sequence[DeadTask] = (),
    restart_clients: bool = True,
    check_safety: bool = True,
    joins: Callable[[State], bool] | None = None,
) -> LivenessOutcome:
    """Quiesce ``state`` and check it, telling the harm of the walk's dead tasks (``deaths``) from
    violations: what every run does at its end (docs/spec.md, "Liveness at quiescence"). ``check_safety``: check every
    safety property on the quiescence steps too (the shrinker leaves it off while it looks for a liveness failure).
    ``joins``: as for ``quiesce``; a run that joins a known-settling state has no liveness violation."""
    q = quiesce(model, state, restart_clients, check_safety, joins=joins)
    violations = [LivenessViolation(vid, f"safety during quiescence: {d}") for vid, d in q.safety]
    if q.joined:
        return LivenessOutcome(q, violations, [])
    if not q.reached:
        return LivenessOutcome(q, violations + check_quiescent(model, q, restart_clients), [])
    found, harms = attribute(model, q.state, shortfalls(model, q.state, restart_clients), deaths)
    return LivenessOutcome(q, violations + found, harms)


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
    """Quiesce ``state`` and check it; safety violations met on the way are reported as such. No dead task
    is taken as a cause here (``check_liveness`` takes the walk's): every failure it explains is reported."""
    outcome = check_liveness(model, state, (), restart_clients)
    return outcome.quiescence, outcome.violations


def describe(model: Model, q: Quiescence, violations: list[LivenessViolation], tail: int = 40) -> str:
    """A failure report: which property, the final state and the quiescence steps taken."""
    lines = [f"{v.id}: {v.detail}" for v in violations]
    lines.append(f"after {len(q.steps)} quiescence steps (horizon {q.horizon}, bound {q.bound}); state:")
    lines.append(summary(model, q.state))
    shown = q.steps[-tail:]
    lines.append(f"last {len(shown)} quiescence steps:")
    lines += [f"  {a!r}" for a in shown]
    return "\n".join(lines)
