"""Seeded random walks of the model with every invariant checked at every step.

This is the plain, dependency-free explorer: ``walk`` runs one random walk and stops at the first
violation; ``explore`` runs many and aggregates flat, Jepsen-style results (steps, actions fired
per name, distinct states, invariants checked, violations). The CLI's model run and the planted-bug
tests use it; the Hypothesis state machines in ``machines.py`` add shrinking on top of the same
checks.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from rmqspec.properties.liveness import describe, quiesce_and_check
from rmqspec.spec.actions import PERTURBING, Action, action_name
from rmqspec.spec.config import Config
from rmqspec.spec.invariants import ACTION_PROPERTIES, INVARIANTS, Violation, check_state, check_step
from rmqspec.spec.model import ActionNotEnabled, Model
from rmqspec.spec.state import State


@dataclass
class Counterexample:
    config: Config
    seed: int
    actions: list[Action]
    violations: list[Violation]

    def describe(self) -> str:
        lines = [f"{v.id} {v.name}: {v.detail}" for v in self.violations]
        lines.append(f"after {len(self.actions)} steps (seed {self.seed}):")
        lines += [f"  {k:3d}. {a!r}" for k, a in enumerate(self.actions, 1)]
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
) -> Counterexample | None:
    """One random walk of at most ``max_steps`` steps; the first violation ends it. With
    ``watch``, only violations of those property ids count (to show one property alone catches a
    bug that another would report first). ``record`` receives the actions taken; with ``check``
    false no property is checked (the walk then only stops when nothing is enabled).

    ``fault_rate`` makes the walk *fault-sparing*: a step may take a perturbing action (a budgeted
    fault) only with that probability, otherwise it chooses among the others. A uniform walk spends
    its fault budget in the first few steps, before anything is in flight; sparing walks keep faults
    for later, which is what reaches a long-running listener or a late unlock."""
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
        violations = check_step(model, state, action, after) + check_state(model, after) if check else []
        if watch is not None:
            violations = [v for v in violations if v.id in watch]
        if result is not None:
            result.steps += 1
            result.actions[action_name(action)] += 1
            result.invariant_checks += checks_per_step
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
    liveness properties (``liveness.quiesce_and_check``, docs/spec.md §13); a failure is reported as
    a counterexample whose actions are the walk's followed by the quiescence steps. ``fault_rate``:
    fault-sparing walks (``walk``). ``model``: a model of ``config`` to use instead of a fresh one (a
    test switching one of its tolerances off)."""
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
        found = walk(model, first_seed + k, max_steps, on_state, result, watch, record=taken, fault_rate=fault_rate)
        if found is None and liveness:
            found = _liveness_counterexample(model, first_seed + k, taken, last[0], watch)
        if found is not None:
            result.counterexamples.append(found)
            if stop_at_first:
                break
    result.distinct_states = len(seen)
    return result


def _liveness_counterexample(
    model: Model, seed: int, taken: list[Action], state: State, watch: frozenset[str] | None
) -> Counterexample | None:
    quiescence, found = quiesce_and_check(model, state)
    if watch is not None:
        found = [v for v in found if v.id in watch]
    if not found:
        return None
    report = describe(model, quiescence, found)
    violations = [Violation(v.id, "liveness at quiescence", report) for v in found]
    return Counterexample(model.config, seed, taken + quiescence.steps, violations)


def replay(config: Config, actions: list[Action]) -> tuple[State, list[Violation]]:
    """Apply ``actions`` from the initial state, checking every property; stops at a violation.
    Raises ``ActionNotEnabled`` if an action is not enabled where it comes."""
    model = Model(config)
    state = model.initial()
    for action in actions:
        after = model.step(state, action)
        violations = check_step(model, state, action, after) + check_state(model, after)
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
    only its own steps.
    """
    target = {v.id for v in found.violations}
    actions = list(found.actions)
    violations = found.violations
    chunk = max(1, len(actions) // 2)
    while chunk >= 1:
        start, removed = 0, False
        while start < len(actions):
            taken, result = _replay_skipping(found.config, actions[:start] + actions[start + chunk :])
            if {v.id for v in result} & target:
                actions, violations, removed = taken, result, True
            else:
                start += chunk
        if not removed:
            chunk //= 2
    return Counterexample(found.config, found.seed, actions, violations)
