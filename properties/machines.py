"""Hypothesis state machines over the model.

``SpecMachine`` drives the pure model: each step picks an action family (tick, produce, network,
client start/stop, rebalance, pull, consume, ...) and then one of its enabled actions, and records
the action as a Hypothesis event, so ``--hypothesis-show-statistics`` reads as "how often did a
crash / rebalance / send-back happen". It checks every state invariant after every step and every
action property on every step. The configuration itself is drawn in the
``initialize`` rule, so one test explores consumers, queues, modes, strategies, positioning and
fault budgets together, as swarm testing does; a subclass can pin it (``config_strategy``). At the
teardown of every example that passed its steps, the end state is quiesced and the liveness
properties checked (``liveness.check_liveness``, docs/spec.md, "Liveness at quiescence"): a failed check that a dead
task explains is recorded as that task's harm (a Hypothesis event), any other fails the example. A subclass sets
``liveness = False`` to skip it.

``LockstepMachine`` drives the model and the reference implementation with the same actions and
checks after every step that the reference, seen through its abstraction, equals the model state:
the refinement check that keeps the two honest. At teardown the reference follows the quiescence
steps too, compared after each.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any, ClassVar

from hypothesis import event, note
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from rmqspec.properties.fates import message_fates
from rmqspec.properties.liveness import DeadTask, LivenessOutcome, check_liveness, death, describe
from rmqspec.spec import actions as act
from rmqspec.spec.config import (
    BROADCASTING,
    CLUSTERING,
    CONFIG,
    CONSISTENT_HASH,
    CONSUME_FROM_WHERE,
    MACHINE_ROOM,
    MACHINE_ROOM_NEARBY,
    MODES,
    NEARBY_INNER_STRATEGIES,
    STRATEGIES,
    V5_X,
    VERSIONS,
    Config,
)
from rmqspec.spec.invariants import check_state, check_step
from rmqspec.spec.model import Model
from rmqspec.spec.pull import PULL_MAX_IDLE_TIME
from rmqspec.spec.state import State


@st.composite
def configs(draw: st.DrawFn, mutations: frozenset[str] = frozenset(), **fixed: Any) -> Config:
    """Small configurations that reach every action family within ~100 steps."""
    values: dict[str, Any] = {
        "consumers": draw(st.integers(1, 3)),
        "queues": draw(st.integers(1, 4)),
        "messages_per_queue": draw(st.integers(1, 4)),
        "mode": draw(st.sampled_from(MODES)),
        "strategy": draw(st.sampled_from(STRATEGIES)),
        "consume_from_where": draw(st.sampled_from(CONSUME_FROM_WHERE)),
        "consume_timestamp": draw(st.sampled_from((0, 15_000, 60_000))),
        "backlog_head_hot": draw(st.booleans()),
        "pull_batch_size": draw(st.integers(1, 3)),
        "consume_batch_size": draw(st.integers(1, 2)),
        "pull_threshold_for_queue": draw(st.integers(1, 4)),
        # 1-2 instead of RocketMQ's 16, so that walks of ~100 steps reach the DLQ.
        "max_reconsume_times": draw(st.integers(1, 2)),
        "client_crashes": draw(st.integers(0, 2)),
        "client_shutdowns": draw(st.integers(0, 2)),
        "broker_crashes": draw(st.integers(0, 1)),
        "send_back_failures": draw(st.integers(0, 2)),
        "mutations": mutations,
    }
    values["backlog"] = draw(st.integers(0, values["messages_per_queue"]))
    if draw(st.booleans()):
        values["tags"] = ("A", "B")
        values["subscription"] = draw(st.sampled_from((None, ("A",))))
    values["version"] = draw(st.sampled_from(VERSIONS))
    values["query_errors"] = draw(st.integers(0, 1))
    values["orderly"] = draw(st.booleans())  # orderly: the lock protocol of R8.1-R8.4
    values["retention_deletes"] = draw(st.integers(0, 2))  # RetentionDelete, OFFSET_ILLEGAL
    values["client_stalls"] = draw(st.integers(0, 1))  # orderly consume loop: a stop-the-world pause
    # faults: a lost oneway commit, a consumer list without oneself, an unreadable broker offset file, a
    # clientId shared by consumers 0 and 1, a background task that dies (by design it fails liveness: the
    # teardown's check reports that as the task's harm, not as a violation)
    values["commit_losses"] = draw(st.integers(0, 1))
    values["view_faults"] = draw(st.integers(0, 1))
    values["offset_file_corruptions"] = draw(st.integers(0, 1))
    values["local_offset_file_corruptions"] = draw(st.integers(0, 1))
    values["lagging_file_writes"] = draw(st.integers(0, 2))
    values["duplicate_client_id"] = draw(st.sampled_from((False, False, False, True)))
    values["task_deaths"] = draw(st.integers(0, 1))
    values.update(fixed)
    if values.get("admin_resets"):  # the admin reset is not modelled with these (yet)
        for key, off in (
            ("orderly", False),
            ("client_stalls", 0),
            ("commit_losses", 0),
            ("view_faults", 0),
            ("duplicate_client_id", False),
            ("task_deaths", 0),
        ):
            values[key] = values[key] if key in fixed else off
    # slaves: one run in four gets a slave, where it is modelled (no locks, admin reset or idle-channel scan);
    # offset_check_in_slave is never drawn: it restores RMQ-17, which INV-21 reports (tests/test_slaves.py)
    if "slave" not in fixed and not any(values.get(k) for k in ("orderly", "admin_resets", "client_stalls")):
        values["slave"] = draw(st.sampled_from((False, False, False, True)))
    if values.get("slave"):  # slaves: not modelled with locks, the admin reset or the idle-channel scan (yet)
        for key, off in (("orderly", False), ("admin_resets", 0), ("client_stalls", 0), ("task_deaths", 0)):
            values[key] = values[key] if key in fixed else off
    if "orderly_auto_commit" not in fixed:  # orderly consume loop: one orderly run in four leaves autoCommit off (R8.6)
        values["orderly_auto_commit"] = not (values["orderly"] and draw(st.sampled_from((False, False, False, True))))
    if values["mode"] != BROADCASTING and "local_offset_file_corruptions" not in fixed:
        values["local_offset_file_corruptions"] = 0  # only a BROADCASTING consumer has a local file
    if values["mode"] != BROADCASTING and "lagging_file_writes" not in fixed:
        values["lagging_file_writes"] = 0
    duplicable = values["mode"] == CLUSTERING and values["consumers"] >= 2 and values["strategy"] != MACHINE_ROOM_NEARBY
    if not duplicable and "duplicate_client_id" not in fixed:
        values["duplicate_client_id"] = False
    if not _retention_clean(values) and "retention_deletes" not in fixed:
        values["retention_deletes"] = 0
    if values["version"] != V5_X and "query_errors" not in fixed:
        # Under 4.9.8 an offset-query error is RMQ-14, a real bug that INV-15 reports
        # (tests/test_refinement.py reproduces it): a clean run draws it under 5.x only.
        values["query_errors"] = 0
    orderly_4_9_8 = values["orderly"] and values["version"] != V5_X and values["mode"] == CLUSTERING
    if orderly_4_9_8 and "broker_crashes" not in fixed:
        # orderly: a broker outage at a 4.9.8 orderly consumer's first locked pull is a real bug that
        # INV-19 reports (tests/test_orderly.py reproduces it): a clean run keeps the broker up there.
        values["broker_crashes"] = 0
    values.update({k: v for k, v in draw(allocation_settings(values)).items() if k not in fixed})
    return Config(**values)


@st.composite
def allocation_settings(draw: st.DrawFn, values: dict[str, Any]) -> dict[str, Any]:
    """The parameters of ``values["strategy"]`` (R11.3-R11.6), sized to its consumers and queues.
    Most draws let some consumer own queues; some give RocketMQ's degenerate cases (nothing dealt,
    no virtual node, consumeridcs never set), whose allowed anomalies INV-13 must tolerate."""
    strategy, consumers = values["strategy"], values["consumers"]
    if strategy == CONSISTENT_HASH:
        return {"virtual_node_cnt": draw(st.sampled_from((10, 10, 10, 1, 0)))}
    if strategy == CONFIG:
        count = values["queues"] + (1 if values.get("mode", CLUSTERING) == CLUSTERING else 0)
        lists = st.sets(st.integers(0, count - 1)).map(lambda qs: tuple(sorted(qs)))
        return {"allocate_config_queues": tuple(draw(lists) for _ in range(consumers))}
    if strategy == MACHINE_ROOM:
        return {
            "broker_name": draw(st.sampled_from(("r1@broker-a", "r1@broker-a", "r2@broker-a", "broker-a"))),
            "consumeridcs": draw(st.sampled_from((("r1",), ("r1", "r2"), ("r2",), None))),
        }
    if strategy == MACHINE_ROOM_NEARBY:
        inner = values.get("nearby_inner") or draw(st.sampled_from(NEARBY_INNER_STRATEGIES))
        rooms = st.sampled_from(("r1", "r2"))
        return {
            "nearby_inner": inner,
            "broker_room": draw(rooms),
            "consumer_rooms": tuple(draw(rooms) for _ in range(consumers)),
            **({"virtual_node_cnt": draw(st.sampled_from((10, 1, 0)))} if inner == CONSISTENT_HASH else {}),
        }
    return {}


FAMILIES: dict[str, tuple[type, ...]] = {
    "tick": (act.Tick,),
    "produce": (act.Produce, act.CoolQueueHead),
    "broker_timer": (act.BrokerFlush, act.DeliverScheduled),
    "broker_crash": (act.BrokerCrash,),
    "broker_heal": (act.BrokerRestart, act.ExpireChannel),
    "slave": (act.SlaveReplicate, act.SlaveSync),  # slaves: HA copy and the offset sync timer
    "network": (act.BrokerReceive,),
    "client_start": (act.Start,),
    "client_stop": (act.Shutdown, act.Crash),
    # LockAll, TryLockLater, DelayedUnlock: the orderly service's scheduled tasks; CleanExpiredMsg:
    # the concurrent service's cleanExpireMsg timer (R6.8)
    "client_timer": (
        act.Heartbeat,
        act.PersistOffsets,
        act.OffsetFileWriteLands,  # a lagging persistAll's write of offsets.json (docs/spec.md, "What is real, ranked")
        act.LockAll,
        act.TryLockLater,
        act.DelayedUnlock,
        act.CleanExpiredMsg,
    ),
    "stall": (act.Stall,),  # a stop-the-world pause (budgeted, Config.client_stalls)
    # faults (budgeted): a lost oneway commit, a list without oneself, a dead task, an unreadable offset file
    "fault": (
        act.LoseCommit,
        act.RebalanceWithoutSelf,
        act.TaskDies,
        act.CorruptOffsetFile,
        act.CorruptLocalOffsetFile,
    ),
    "rebalance": (act.Rebalance, act.RebalanceQueryError),
    "pull": (act.SendPull, act.ReceivePull),
    # OrphanReturns: an orderly listener that outlived its consumer's Shutdown returns (docs/spec.md, "What is real,
    # ranked")
    "consume": (act.StartConsume, act.FinishConsume, act.ApplyConsumeOffset, act.OrphanReturns),
    # admin reset: drawn only when a config sets admin_resets (tests/test_admin_reset.py)
    "admin_reset": (act.AdminReset, act.ClientResetReceive, act.ClientResetWake),
    # commit-log retention (budgeted) and the 4.9.8 OFFSET_ILLEGAL task (a timer)
    "retention": (act.RetentionDelete,),
    "offset_fix": (act.FixOffsetIllegal,),
}
_FAMILY_OF = {t: name for name, types in FAMILIES.items() for t in types}


class SpecMachine(RuleBasedStateMachine):
    """The model under Hypothesis: every action family is a rule, every property is checked."""

    config_strategy: ClassVar[st.SearchStrategy[Config]] = configs()
    liveness: ClassVar[bool] = True  # quiesce and check liveness at teardown (docs/spec.md, "Liveness at quiescence")

    def __init__(self) -> None:
        super().__init__()
        self.model: Model | None = None
        self.state: State | None = None
        self._by_family: dict[str, list[act.Action]] = {}
        self._steps = 0
        self._deaths: list[DeadTask] = []
        self._failed = False  # a step or a check failed: the example ends with that failure, not quiesced

    @initialize(config=configs())
    def start(self, config: Config) -> None:
        self.begin(config)

    def begin(self, config: Config) -> None:
        note(f"config: {config!r}")
        self._failed = True  # until the start (and the reference's first comparison) passed
        self.model = Model(config)
        self._set_state(self.model.initial())
        self.on_start(config)
        self._failed = False

    def on_start(self, config: Config) -> None:
        """Hook for subclasses (the lockstep machine starts the reference here)."""

    def _set_state(self, state: State) -> None:
        assert self.model is not None
        self.state = state
        grouped: dict[str, list[act.Action]] = {}
        for a in self.model.enabled(state):
            grouped.setdefault(_FAMILY_OF[type(a)], []).append(a)
        self._by_family = grouped

    def _fire(self, family: str, data: st.DataObject) -> None:
        assert self.model is not None and self.state is not None
        action = data.draw(st.sampled_from(self._by_family[family]), label=family)
        before = self.state
        self._failed = True  # until the step has passed every check (and the reference followed it)
        after = self.model.step(before, action)
        event(f"action {type(action).__name__}")
        for outcome in outcomes(self.model, before, after):
            event(f"reached: {outcome}")
        violations = check_step(self.model, before, action, after)
        assert not violations, "; ".join(f"{v.id} {v.name}: {v.detail}" for v in violations)
        self._steps += 1
        if (dead := death(action, after, self._steps)) is not None:
            self._deaths.append(dead)
        self.on_step(action, after)
        self._set_state(after)
        self._failed = False

    def on_step(self, action: act.Action, after: State) -> None:
        """Hook for subclasses, called after the model stepped and before the new state is kept."""

    @rule(data=st.data())
    def step(self, data: st.DataObject) -> None:
        """One step: pick an enabled action family, then one of its enabled actions.

        Choosing the family first gives rare families (a crash, a flush) the same chance as the
        busy ones (pulls, network deliveries), which is what lets short walks reach them.
        """
        families = sorted(self._by_family)
        if not families:
            return
        self._fire(data.draw(st.sampled_from(families), label="family"), data)

    @invariant()
    def state_invariants_hold(self) -> None:
        if self.model is None or self.state is None:
            return
        violations = check_state(self.model, self.state)
        self._failed = bool(violations)
        assert not violations, "; ".join(f"{v.id} {v.name}: {v.detail}" for v in violations)

    def teardown(self) -> None:
        """Quiesce the end state and check liveness, unless a safety check failed (that failure stands)
        or ``liveness`` is off."""
        if not self.liveness or self._failed or self.model is None or self.state is None:
            return
        outcome = check_liveness(self.model, self.state, self._deaths)
        quiescence = outcome.quiescence
        event(f"quiescence: {'settled early' if outcome.settled else 'ran to the horizon'}")
        for harm in outcome.harms:
            for cause in dict.fromkeys(d.cause for d in harm.causes):
                event(f"liveness harm: {cause} {harm.id}")
        self.on_quiescence(outcome)
        assert not outcome.violations, describe(self.model, quiescence, outcome.violations)
        fates = message_fates(self.model, quiescence.state)  # every message has a fate (properties/fates.py)
        for fate in fates.counts:
            event(f"fate: {fate}")
        assert not fates.lost, f"FATES: lost after the quiescence (ledger, queue, offset): {fates.lost}"

    def on_quiescence(self, outcome: LivenessOutcome) -> None:
        """Hook for subclasses, called with the quiescence before its verdict is asserted."""


def outcomes(model: Model, before: State, after: State) -> list[str]:
    """Interesting things a step made happen, for the statistics that show what a budget reaches."""
    out = []
    if len(after.broker.dlq) > len(before.broker.dlq):
        out.append("message routed to the DLQ")
    if len(after.broker.scheduled) > len(before.broker.scheduled):
        out.append("message sent back for retry")
    if after.ghost.redeliveries > before.ghost.redeliveries:
        old_causes = dict(before.ghost.redelivery_causes)
        out.extend(
            f"message delivered again ({cause})"
            for cause, n in after.ghost.redelivery_causes
            if n > old_causes.get(cause, 0)
        )
    if len(after.ghost.skips) > len(before.ghost.skips):  # the causal allow-list: each skip with its cause
        out.extend(f"messages skipped ({cause})" for _, cause, _ in after.ghost.skips[len(before.ghost.skips) :])
    if after.budget.send_back_failures < before.budget.send_back_failures:
        out.append("send-back failed")
    if after.budget.query_errors < before.budget.query_errors:
        out.append("offset query failed")
    for old, new in zip(before.broker.offsets, after.broker.offsets, strict=True):
        if old is not None and new is not None and new < old:
            out.append("broker offset decreased")
            break
    out.extend(_reset_outcomes(before, after))  # admin reset
    out.extend(pull_expiry_outcomes(model, before, after))  # pull expiry, retention, OFFSET_ILLEGAL
    retry = model.retry_queue
    if retry is not None and after.ghost.delivered[retry] != before.ghost.delivered[retry]:
        out.append("retry-topic message consumed")
    if model.clustering and any(a is not b for a, b in zip(before.clients, after.clients, strict=True)):
        members = tuple(i for i, cl in enumerate(after.clients) if cl.running)
        if (
            members
            and all(after.clients[i].view == members for i in members)
            and not all(before.clients[i].view == members for i in members)
        ):
            out.append("consumers' views agreed")
    return out


def _retention_clean(values: dict[str, Any]) -> bool:
    """Under 4.9.8 retention exposes the OFFSET_ILLEGAL window (INV-17, a real bug that
    tests/test_pull_expiry_and_offset_illegal.py reproduces) once a rebalance can take a queue away; with one
    consumer or in BROADCASTING no rebalance does, so a clean run draws retention there, and anywhere under 5.x."""
    return values["version"] == V5_X or values.get("consumers", 2) == 1 or values.get("mode") == BROADCASTING


def pull_expiry_outcomes(model: Model, before: State, after: State) -> list[str]:
    """Retention, OFFSET_ILLEGAL (dropped, corrected) and pull expiry reached."""
    out = []
    if after.budget.retention_deletes < before.budget.retention_deletes:
        out.append("retention raised minOffset")
    for old, new in zip(before.clients, after.clients, strict=True):
        if len(new.offset_fixes) > len(old.offset_fixes):
            out.append("OFFSET_ILLEGAL correction scheduled (4.9.8)")
        if new.running and len(new.offset_fixes) < len(old.offset_fixes):
            out.append("OFFSET_ILLEGAL corrected 10 s later (4.9.8)")
        if old.running and new.running and not new.offset_fixes and new.rebalance_requested:
            for p_old, p_new in zip(old.pqs, new.pqs, strict=True):
                pulled = p_old is not None and any(p.pq_uid == p_old.uid for p in old.pulls)
                if pulled and p_new is None and p_old is not None and all(p.pq_uid != p_old.uid for p in new.pulls):
                    out.append("OFFSET_ILLEGAL corrected at once (5.x)")
        for p_old, p_new in zip(old.pqs, new.pqs, strict=True):
            expired = p_old is not None and before.now - p_old.last_pull > PULL_MAX_IDLE_TIME
            if expired and p_new is not None and p_old is not None and p_new.uid != p_old.uid:
                out.append("pull-expired pq re-created")
    return out


def _reset_outcomes(before: State, after: State) -> list[str]:
    """What a step did to an admin reset, from the ghost history it appended."""
    names = {
        "reset-completed": "admin reset completed",
        "commit-ignored": "commit ignored during a pending reset",
        "reset-overwritten": "reset overwritten by an older pq's commit",
    }
    out = []
    node = after.history
    while node is not None and node is not before.history:
        if node.event.kind in names:
            out.append(names[node.event.kind])
        elif node.event.cause == "offset-illegal-fix" and node.event.kind == "commit-sent":
            out.append("OFFSET_ILLEGAL correction sent")
        node = node.previous
    expected = before.ghost.reset_expect
    if expected and after.ghost.reset_expect != expected and any(e is not None for e in expected):
        out.append("reset expectation ended")
    return sorted(set(out))


def machine_for(config_strategy: st.SearchStrategy[Config], base: type[SpecMachine] = SpecMachine) -> type[SpecMachine]:
    """A subclass of ``base`` whose ``initialize`` rule draws configs from ``config_strategy``."""

    class Pinned(base):  # type: ignore[valid-type,misc]
        @initialize(config=config_strategy)
        def start(self, config: Config) -> None:
            self.begin(config)

    Pinned.__name__ = f"{base.__name__}Pinned"
    return Pinned


class LockstepMachine(SpecMachine):
    """Model and reference implementation driven by the same actions (refinement check)."""

    def __init__(self) -> None:
        super().__init__()
        self.reference: Any = None
        self._tmp: Path | None = None

    def on_start(self, config: Config) -> None:
        from rmqspec.refinement.reference_system import ReferenceSystem

        self._tmp = Path(tempfile.mkdtemp(prefix="rmqspec-lockstep-"))
        self.reference = ReferenceSystem(config, self._tmp)
        self._compare("initial state")

    def on_step(self, action: act.Action, after: State) -> None:
        self.reference.apply(action)
        self.state = after
        self._compare(repr(action))

    def _compare(self, what: str) -> None:
        assert self.state is not None
        expected = (self.state.now, self.state.broker, self.state.clients, self.state.slave)
        actual = (*self.reference.abstract(), self.reference.abstract_slave())  # slaves: State.slave too
        if actual != expected:
            raise AssertionError(f"refinement broken after {what}:\n{first_difference(expected, actual)}")

    def on_quiescence(self, outcome: LivenessOutcome) -> None:
        """The reference follows the quiescence steps, compared with the model after each."""
        assert self.model is not None
        state = outcome.quiescence.start
        for k, action in enumerate(outcome.quiescence.steps, 1):
            state = self.model.step(state, action)
            self.reference.apply(action)
            self.state = state
            self._compare(f"{action!r}, quiescence step {k}")

    def teardown(self) -> None:
        try:
            super().teardown()
        finally:
            if self.reference is not None:
                self.reference.close()
            if self._tmp is not None:
                shutil.rmtree(self._tmp, ignore_errors=True)


def first_difference(expected: Any, actual: Any, path: str = "state") -> str:
    """The first field where two nested NamedTuple/tuple values differ, as a readable path."""
    if type(expected) is not type(actual) or not isinstance(expected, tuple):
        return f"{path}: model {expected!r} != reference {actual!r}"
    fields = getattr(expected, "_fields", None)
    if len(expected) != len(actual):
        return f"{path}: model has {len(expected)} entries, reference {len(actual)}: {expected!r} != {actual!r}"
    for k, (e, a) in enumerate(zip(expected, actual, strict=True)):
        if e != a:
            name = f"{path}.{fields[k]}" if fields else f"{path}[{k}]"
            return first_difference(e, a, name)
    return f"{path}: equal"
