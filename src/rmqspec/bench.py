"""Throughput benchmark: spec steps per second versus reference steps per second.

One seeded walk of the model on 3 consumers x 8 queues is recorded first; then, in the same
process, the recorded actions are replayed through ``Model.step`` alone, through a full explorer
step (``enabled`` + ``step`` + every property), and through the reference implementation (real
file I/O in a temporary directory). Figures are printed with the ratio against the spec, so a
change's cost shows up as a ratio that does not depend on the machine.
"""

from __future__ import annotations

import random
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from rmqspec.spec.actions import Action
from rmqspec.spec.config import Config
from rmqspec.spec.invariants import check_state, check_step
from rmqspec.spec.model import Model

BENCH_CONFIG = Config(consumers=3, queues=8, messages_per_queue=40, max_reconsume_times=2)
TARGET_SPEC_STEPS_PER_S = 20_000  # the foundation issue's target, one core


@dataclass
class Figure:
    name: str
    steps: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.steps / self.seconds if self.seconds > 0 else float("inf")


def record_walk(config: Config, steps: int, seed: int = 7) -> list[Action]:
    """The actions of one seeded random walk (restarted from the initial state if it dead-ends)."""
    model = Model(config)
    rng = random.Random(seed)
    state = model.initial()
    actions: list[Action] = []
    while len(actions) < steps:
        enabled = model.enabled(state)
        if not enabled:
            state = model.initial()
            continue
        action = enabled[rng.randrange(len(enabled))]
        state = model.step(state, action)
        actions.append(action)
    return actions


def _time_spec_steps(config: Config, actions: list[Action]) -> Figure:
    model = Model(config)
    state = model.initial()
    start = time.perf_counter()
    for a in actions:
        state = model.step(state, a)
    return Figure("spec step()", len(actions), time.perf_counter() - start)


def _time_checked_steps(config: Config, actions: list[Action]) -> Figure:
    model = Model(config)
    state = model.initial()
    start = time.perf_counter()
    for a in actions:
        model.enabled(state)
        after = model.step(state, a)
        check_step(model, state, a, after)
        check_state(model, after)
        state = after
    return Figure("spec enabled()+step()+all properties", len(actions), time.perf_counter() - start)


def _time_reference(config: Config, actions: list[Action]) -> Figure | str:
    try:
        from rmqspec.refinement.reference_system import ReferenceSystem
    except ImportError as err:  # pragma: no cover - only before the reference exists
        return f"reference implementation unavailable: {err}"
    with tempfile.TemporaryDirectory(prefix="rmqspec-bench-") as tmp:
        system = ReferenceSystem(config, Path(tmp))
        start = time.perf_counter()
        for a in actions:
            system.apply(a)
        elapsed = time.perf_counter() - start
        system.close()
    return Figure("reference apply()", len(actions), elapsed)


def run_bench(steps: int = 20_000, reference_steps: int = 5_000) -> list[str]:
    """Run the benchmark and return the printed lines."""
    config = BENCH_CONFIG
    actions = record_walk(config, steps)
    spec = _time_spec_steps(config, actions)
    checked = _time_checked_steps(config, actions)
    ref = _time_reference(config, actions[:reference_steps])
    lines = [
        f"rmqspec bench: {config.consumers} consumers x {config.queues} queues, {config.mode}, one core",
        f"  {spec.name:<40} {spec.rate:>12,.0f} steps/s  ({spec.steps} steps in {spec.seconds:.2f} s)",
        f"  {checked.name:<40} {checked.rate:>12,.0f} steps/s  (ratio to step(): {checked.rate / spec.rate:.2f})",
    ]
    if isinstance(ref, Figure):
        lines.append(
            f"  {ref.name:<40} {ref.rate:>12,.0f} steps/s  (spec/reference ratio: {spec.rate / ref.rate:.1f}x)"
        )
    else:
        lines.append(f"  {ref}")
    verdict = "meets" if spec.rate >= TARGET_SPEC_STEPS_PER_S else "MISSES"
    lines.append(f"  target: >= {TARGET_SPEC_STEPS_PER_S:,} spec steps/s: {verdict}")
    return lines
