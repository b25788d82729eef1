"""Seeded random walks of the model with every invariant checked at every step.

This is the plain, dependency-free explorer: ``walk`` runs one random walk and stops at the first
violation; ``explore`` runs many and aggregates flat, Jepsen-style results (steps, actions fired
per name, distinct states, invariants checked, violations, the transitions that met each
sometimes-condition). The CLI's model run and the planted-bug
tests use it; the Hypothesis state machines in ``machines.py`` add shrinking on top of the same
checks.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from rmqspec.properties.fates import Fates, message_fates
from rmqspec.properties.liveness import DeadTask, LivenessOutcome, check_liveness, death, describe
from rmqspec.properties.search_coverage import count_sometimes
from rmqspec.spec.actions import PERTURBING, Action, action_name
from rmqspec.spec.config import Config
from rmqspec.spec.invariants import ACTION_PROPERTIES, INVARIANTS, Violation, check_state, check_step
from rmqspec.spec.model import ActionNotEnabled, Model
from rmqspec.spec.state import State

_W = TypeVar("_W")  # what a shrinking candidate shows of its failure (violations, lost messages)


@dataclass
class Counterexample:
    """A failing run. A liveness counterexample (``walk_steps`` set) is a walk, ``actions[:walk_steps]``,
    followed by the quiescence steps from its end state; ``report`` then describes the quiesced state."""

    config: Config
    seed: int
    actions: list[Action]
    violations: list[Violation]
    walk_steps: int | None = None
    report: str = ""

    def describe(self) -> str:
        lines = [f"{v.id} {v.name}: {v.detail}" for v in self.violations]
        if self.walk_steps is None:
            lines.append(f"after {len(self.actions)} steps (seed {self.seed}):")
            lines += [f"  {k:3d}. {a!r}" for k, a in enumerate(self.actions, 1)]
            return "\n".join(lines)
        lines.append(f"after a walk of {self.walk_steps} steps (seed {self.seed}) and its quiescence:")
        lines += [f"  {k:3d}. {a!r}" for k, a in enumerate(self.actions[: self.walk_steps], 1)]
        lines.append(self.report)
        return "\n".join(lines)


@dataclass
class ExploreResult:
    """Flat results of a batch of walks; ``valid`` is false iff some invariant failed."""

    walks: int = 0
    steps: int = 0
    actions: Counter[str] = field(default_factory=Counter)
    distinct_states: int = 0
    invariant_checks: int = 0
    deliveries: int = 0
    redeliveries: int = 0
    counterexamples: list[Counterexample] = field(default_factory=list)
    # liveness at quiescence (explore(..., liveness=True)): walks quiesced, those whose quiescence reached its
    # horizon or settled within the step bound, those that settled early, and the quiescence steps taken
    quiesced: int = 0
    quiescence_reached: int = 0
    quiescence_settled: int = 0
    quiescence_steps: int = 0
    # liveness harm: per cause (DeadTask.cause), the walks it explained a failed check of, and per check
    harm_walks: Counter[str] = field(default_factory=Counter)
    harm_checks: dict[str, Counter[str]] = field(default_factory=dict)
    # message fates at the end of every walk without a violation (after its quiescence when liveness is on;
    # properties/fates.py) and the redeliveries per cause (Ghost.redelivery_causes) of the same end states
    fates: Fates = field(default_factory=Fates)
    redelivery_causes: Counter[str] = field(default_factory=Counter)
    # transitions that met each sometimes-condition (properties/exhaustive.py, SOMETIMES; search_coverage.py)
    sometimes_hits: dict[str, int] = field(default_factory=dict)

    def count_fates(self, model: Model, end: State, outcome: LivenessOutcome | None = None) -> Fates:
        """Add the fates and redelivery causes of one walk's end state (after ``outcome``'s quiescence, whose
        harm causes name what left messages pending); returns its fates."""
        fates = message_fates(model, end, stalled_by(outcome))
        self.fates.merge(fates)
        self.redelivery_causes.update(dict(end.ghost.redelivery_causes))
        return fates

    def count_liveness(self, outcome: LivenessOutcome) -> None:
        """Add one quiescence's figures and harm."""
        self.quiesced += 1
        self.quiescence_reached += outcome.quiescence.reached
        self.quiescence_settled += outcome.settled
        self.quiescence_steps += len(outcome.quiescence.steps)
        for cause, checks in harm_by_cause(outcome).items():
            self.harm_walks[cause] += 1
            self.harm_checks.setdefault(cause, Counter()).update(checks)

    @property
    def valid(self) -> bool:
        return not self.counterexamples


def walk(
    model: Model,
    seed: int,
    max_steps: int,
    on_state: Callable[[State], None] | None = None,
    result: ExploreResult | None = None,
    watch: frozenset[str] | None = None,
    record: list[Action] | None = None,
    check: bool = True,
    fault_rate: float | None = None,
    deaths: list[DeadTask] | None = None,
) -> Counterexample | None:
    """One random walk of at most ``max_steps`` steps; the first violation ends it. With
    ``watch``, only violations of those property ids count (to show one property alone catches a
    bug that another would report first). ``record`` receives the actions taken; with ``check``
    false no property is checked (the walk then only stops when nothing is enabled).

    ``fault_rate`` makes the walk *fault-sparing*: a step may take a perturbing action (a budgeted
    fault) only with that probability, otherwise it chooses among the others. A uniform walk spends
    its fault budget in the first few steps, before anything is in flight; sparing walks keep faults
    for later, which is what reaches a long-running listener or a late unlock.

    ``deaths`` receives the walk's ``TaskDies`` faults (``liveness.death``), the causes liveness harm is
    attributed to."""
    rng = random.Random(seed)
    state = model.initial()
    taken: list[Action] = [] if record is None else record
    checks_per_step = len(INVARIANTS) + len(ACTION_PROPERTIES)
    for _ in range(max_steps):
        enabled = model.enabled(state)
        if not enabled:
            break
        if fault_rate is not None:
            calm = [a for a in enabled if not isinstance(a, PERTURBING)]
            action = rng.choice(enabled if (rng.random() < fault_rate or not calm) else calm)
        else:
            action = enabled[rng.randrange(len(enabled))]
        after = model.step(state, action)
        taken.append(action)
        if deaths is not None and (dead := death(action, after, len(taken))) is not None:
            deaths.append(dead)
        violations = check_step(model, state, action, after) + check_state(model, after) if check else []
        if watch is not None:
            violations = [v for v in violations if v.id in watch]
        if result is not None:
            result.steps += 1
            result.actions[action_name(action)] += 1
            result.invariant_checks += checks_per_step
            count_sometimes(model, state, action, after, result.sometimes_hits)
        if on_state is not None:
            on_state(after)
        state = after
        if violations:
            return Counterexample(model.config, seed, taken, violations)
    if result is not None:
        result.deliveries += state.ghost.deliveries
        result.redeliveries += state.ghost.redeliveries
    return None


def explore(
    config: Config,
    walks: int,
    max_steps: int,
    first_seed: int = 0,
    stop_at_first: bool = True,
    track_states: bool = False,
    watch: frozenset[str] | None = None,
    liveness: bool = False,
    fault_rate: float | None = None,
    model: Model | None = None,
) -> ExploreResult:
    """Run ``walks`` seeded walks of ``config``; optionally count distinct states. With ``liveness``,
    every walk that ends without a violation is then quiesced and its end state checked against the
    liveness properties (``liveness.check_liveness``, docs/spec.md, "Liveness at quiescence"): a failed check that the
    walk's still-dead tasks explain is counted as their harm (``harm_walks``, ``harm_checks``), any other is a
    counterexample whose actions are the walk's followed by the quiescence steps. ``fault_rate``: fault-sparing walks
    (``walk``). ``model``: a model of ``config`` to use instead of a fresh one (a test switching one of its tolerances
    off)."""
    model = Model(config) if model is None else model
    result = ExploreResult()
    seen: set[State] = set()
    last: list[State] = [model.initial()]

    def on_state(state: State) -> None:
        last[0] = state
        if track_states:
            seen.add(state)

    for k in range(walks):
        result.walks += 1
        last[0] = model.initial()
        taken: list[Action] = []
        deaths: list[DeadTask] = []
        found = walk(
            model, first_seed + k, max_steps, on_state, result, watch, taken, fault_rate=fault_rate, deaths=deaths
        )
        end, outcome = last[0], None
        if found is None and liveness:
            outcome = check_liveness(model, end, deaths)
            result.count_liveness(outcome)
            found = liveness_counterexample(model, first_seed + k, taken, outcome, watch)
            end = outcome.quiescence.state
        if found is None:
            found = lost_counterexample(model, first_seed + k, taken, result.count_fates(model, end, outcome), watch)
        if found is not None:
            result.counterexamples.append(found)
            if stop_at_first:
                break
    result.distinct_states = len(seen)
    return result


def stalled_by(outcome: LivenessOutcome | None) -> str:
    """The causes of a quiescence's liveness harm, in order and joined ("" for none): what a message still
    pending after it waits on (``fates.message_fates``)."""
    if outcome is None:
        return ""
    return ", ".join(dict.fromkeys(c.cause for h in outcome.harms for c in h.causes))


def lost_counterexample(
    model: Model, seed: int, taken: list[Action], fates: Fates, watch: frozenset[str] | None = None
) -> Counterexample | None:
    """A walk whose end state gives some message the fate "lost" (passed by the committed offset, never
    handled nor skipped with a cause) although no property fired on the way: INV-9 and the fates disagree,
    and the walk is reported as a ``FATES`` violation (``shrink`` shortens it with ``_shrink_fates``)."""
    if not fates.lost or (watch is not None and "FATES" not in watch):
        return None
    where = ", ".join(f"ledger {ledger} queue {q} offset {o}" for ledger, q, o in fates.lost[:10])
    return Counterexample(
        model.config, seed, list(taken), [Violation("FATES", "every_message_has_a_fate", f"lost: {where}")]
    )


def harm_by_cause(outcome: LivenessOutcome) -> dict[str, list[str]]:
    """Per cause (``DeadTask.cause``), the ids of the checks whose failure it explained in ``outcome``."""
    out: dict[str, list[str]] = {}
    for harm in outcome.harms:
        for cause in dict.fromkeys(d.cause for d in harm.causes):
            out.setdefault(cause, []).append(harm.id)
    return out


def liveness_counterexample(
    model: Model, seed: int, walked: list[Action], outcome: LivenessOutcome, watch: frozenset[str] | None = None
) -> Counterexample | None:
    """The counterexample of a quiescence whose checks failed unexplained (``watch``: only those ids), or
    None: the walk's actions, then the quiescence steps (``walk_steps`` marks where they start)."""
    found = [v for v in outcome.violations if watch is None or v.id in watch]
    if not found:
        return None
    q = outcome.quiescence
    violations = [Violation(v.id, "liveness at quiescence", v.detail) for v in found]
    report = describe(model, q, found)
    if outcome.harms:
        report += "\nharm of dead tasks (not violations):\n" + "\n".join(f"  {h.describe()}" for h in outcome.harms)
    return Counterexample(model.config, seed, walked + q.steps, violations, len(walked), report)


def replay_liveness(
    config: Config, actions: list[Action], walk_steps: int
) -> tuple[list[Violation], LivenessOutcome | None]:
    """Replay a liveness counterexample: the walk, ``actions[:walk_steps]``, with every property checked,
    then its quiescence (recomputed: it is deterministic). Returns the walk's safety violations, if any
    (and then no outcome), else the liveness outcome."""
    model = Model(config)
    state = model.initial()
    deaths: list[DeadTask] = []
    for k, action in enumerate(actions[:walk_steps], 1):
        after = model.step(state, action)
        violations = check_step(model, state, action, after) + check_state(model, after)
        if violations:
            return violations, None
        if (dead := death(action, after, k)) is not None:
            deaths.append(dead)
        state = after
    return [], check_liveness(model, state, deaths)


def replay(config: Config, actions: list[Action], watch: frozenset[str] | None = None) -> tuple[State, list[Violation]]:
    """Apply ``actions`` from the initial state, checking every property (with ``watch``, only violations of those
    property ids count); stops at a violation. Raises ``ActionNotEnabled`` if an action is not enabled where it
    comes."""
    model = Model(config)
    state = model.initial()
    for action in actions:
        after = model.step(state, action)
        violations = check_step(model, state, action, after) + check_state(model, after)
        if watch is not None:
            violations = [v for v in violations if v.id in watch]
        state = after
        if violations:
            return state, violations
    return state, []


def _replay_skipping(config: Config, actions: list[Action]) -> tuple[list[Action], list[Violation]]:
    """Like ``replay``, but an action not enabled where it comes is skipped instead of failing.
    Returns the actions actually taken and the violations of the last one."""
    model = Model(config)
    state = model.initial()
    taken: list[Action] = []
    for action in actions:
        try:
            after = model.step(state, action)
        except ActionNotEnabled:
            continue
        taken.append(action)
        violations = check_step(model, state, action, after) + check_state(model, after)
        state = after
        if violations:
            return taken, violations
    return taken, []


def shrink(found: Counterexample) -> Counterexample:
    """A shorter run that still violates one of the same properties (delta debugging).

    Chunks of actions are deleted, largest first; the rest is replayed with actions that are no
    longer enabled skipped, and kept if it still fails the same way. The result is 1-minimal:
    deleting any single action loses the failure. Deterministic, and cheap because a replay costs
    only its own steps. A liveness counterexample shrinks its walk, each candidate quiesced again
    (``_shrink_liveness``).
    """
    if found.walk_steps is not None:
        return _shrink_liveness(found)
    if {v.id for v in found.violations} == {"FATES"}:
        return _shrink_fates(found)
    target = {v.id for v in found.violations}

    def still_fails(candidate: list[Action]) -> tuple[list[Action], list[Violation]] | None:
        taken, result = _replay_skipping(found.config, candidate)
        return (taken, result) if {v.id for v in result} & target else None

    actions, violations = _delta_debug(list(found.actions), found.violations, still_fails)
    return Counterexample(found.config, found.seed, actions, violations)


def _delta_debug(
    actions: list[Action], witness: _W, still_fails: Callable[[list[Action]], tuple[list[Action], _W] | None]
) -> tuple[list[Action], _W]:
    """Delete chunks of ``actions``, largest first, keeping a deletion when ``still_fails`` gives the
    actions it actually took and a new witness; 1-minimal: deleting any single action loses the failure."""
    chunk = max(1, len(actions) // 2)
    while chunk >= 1:
        start, removed = 0, False
        while start < len(actions):
            kept = still_fails(actions[:start] + actions[start + chunk :])
            if kept is not None:
                (actions, witness), removed = kept, True
            else:
                start += chunk
        if not removed:
            chunk //= 2
    return actions, witness


def _lost_after(model: Model, actions: list[Action]) -> tuple[list[Action], list[tuple[int, int, int]]]:
    """Replay ``actions`` (skipping those not enabled where they come, checking nothing) and return the
    actions taken and the messages whose fate is "lost" at their end or, if none, after its quiescence."""
    state = model.initial()
    taken: list[Action] = []
    for action in actions:
        try:
            state = model.step(state, action)
        except ActionNotEnabled:
            continue
        taken.append(action)
    lost = message_fates(model, state).lost
    if not lost:
        lost = message_fates(model, check_liveness(model, state, (), check_safety=False).quiescence.state).lost
    return taken, lost


def _shrink_fates(found: Counterexample) -> Counterexample:
    """``shrink`` for a ``FATES`` counterexample: chunks of the walk are deleted, and a candidate is kept
    if, replayed and quiesced, some message still ends "lost"; the result is 1-minimal like ``shrink``'s."""
    model = Model(found.config)
    actions, lost = _lost_after(model, list(found.actions))
    if not lost:  # only the walk as it ran shows it (a quiescence that handled the message): keep it
        return found

    def still_fails(candidate: list[Action]) -> tuple[list[Action], list[tuple[int, int, int]]] | None:
        taken, still = _lost_after(model, candidate)
        return (taken, still) if still else None

    actions, lost = _delta_debug(actions, lost, still_fails)
    where = ", ".join(f"ledger {ledger} queue {q} offset {o}" for ledger, q, o in lost[:10])
    violation = Violation("FATES", "every_message_has_a_fate", f"lost: {where}")
    return Counterexample(found.config, found.seed, actions, [violation])


def _shrink_liveness(found: Counterexample) -> Counterexample:
    """``shrink`` for a liveness counterexample: chunks of the walk are deleted, and a candidate is kept
    if its walk passes every safety property and its quiescence still fails one of the same checks
    unexplained. The result is the shrunk walk followed by its own quiescence."""
    assert found.walk_steps is not None
    model = Model(found.config)
    target = {v.id for v in found.violations}
    safety = any(not vid.startswith("LIV-") for vid in target)  # a safety violation met during the quiescence

    def attempt(actions: list[Action], final: bool = False) -> tuple[list[Action], LivenessOutcome] | None:
        state = model.initial()
        taken: list[Action] = []
        deaths: list[DeadTask] = []
        for action in actions:
            try:
                after = model.step(state, action)
            except ActionNotEnabled:
                continue
            if check_step(model, state, action, after) + check_state(model, after):
                return None  # another failure: not this one
            taken.append(action)
            if (dead := death(action, after, len(taken))) is not None:
                deaths.append(dead)
            state = after
        outcome = check_liveness(model, state, deaths, check_safety=safety or final)
        return (taken, outcome) if {v.id for v in outcome.violations} & target else None

    best = attempt(list(found.actions[: found.walk_steps]))
    if best is None:  # not reproducible from the walk alone (it should be: everything here is deterministic)
        return found
    actions = best[0]
    chunk = max(1, len(actions) // 2)
    while chunk >= 1:
        start, removed = 0, False
        while start < len(actions):
            kept = attempt(actions[:start] + actions[start + chunk :])
            if kept is not None:
                best, removed, actions = kept, True, kept[0]
            else:
                start += chunk
        if not removed:
            chunk //= 2
    checked = attempt(best[0], final=True)  # the result's quiescence with every safety property checked
    if checked is None:
        return found
    small = liveness_counterexample(model, found.seed, checked[0], checked[1], frozenset(target))
    return small if small is not None else found
