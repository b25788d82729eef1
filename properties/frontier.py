"""Liveness at the horizon: quiescence from every frontier state of a horizon-bounded search.

A horizon cuts every cycle that passes time, so the lasso search (``properties/lasso.py``) finds nothing a timer
is needed for in a configuration with a horizon. Here every **frontier state** (an expanded state with a
successor the horizon cut off: a ``Tick`` past it) is handed to the quiescence procedure
(``properties/liveness.py``, ``check_liveness``): perturbations stop, stopped consumers restart, and a weakly fair
schedule of healing and progress actions runs with no horizon of the search's, until every liveness check
(LIV-1..LIV-5) has held for ``STABLE_MS`` or the quiescence's own horizon passes. A frontier state whose
quiescence ends with a check failing is a liveness violation, reported as the search's shortest path to the
frontier state followed by the quiescence's steps: a real run of the model.

**A memo of settled runs.** The quiescence schedule from a state depends only on the state's class (the canonical
form is a bisimulation, docs/check.md), and the suffix of a run that settled, from any state it passed through, is
itself a schedule that settles from that state. So every state of a settled run is remembered (by fingerprint), and
a later quiescence that reaches one of them stops there: its run followed by the remembered suffix settles. A run
that fails is never cut short this way: each reported failure is the whole quiescence from its frontier state.

What this checks and what it misses is in docs/check.md ("Liveness at the horizon").
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from rmqspec.properties.canonical import CanonicalKeys
from rmqspec.properties.liveness import DeadTask, check_liveness
from rmqspec.spec.actions import Action

if TYPE_CHECKING:
    from rmqspec.properties.exhaustive import Search
    from rmqspec.spec.model import Model
    from rmqspec.spec.state import State


@dataclass
class FrontierFailure:
    """A frontier state whose quiescence fails: the checks, the path to the frontier state and the quiescence."""

    ids: list[str]
    details: list[str]
    prefix: list[Action]
    quiescence: list[Action]
    reached_ms: int  # the logical time the quiescence ended at

    def describe(self) -> str:
        lines = [f"{i} (at the horizon): {d}" for i, d in zip(self.ids, self.details, strict=True)]
        lines.append(f"the search's shortest path to a frontier state, {len(self.prefix)} steps:")
        lines += [f"  {k:3d}. {a!r}" for k, a in enumerate(self.prefix, 1)]
        lines.append(
            f"then the quiescence (no perturbation, consumers restarted, a weakly fair schedule), "
            f"{len(self.quiescence)} steps, ending at {self.reached_ms} ms with the check failing:"
        )
        lines += [f"  {k:3d}. {a!r}" for k, a in enumerate(self.quiescence, len(self.prefix) + 1)]
        return "\n".join(lines)


@dataclass
class FrontierResult:
    """The frontier quiescences of one search: how many frontier states, how many quiescences ran to their end
    (the others joined a settled run), the quiescence steps taken in all, and one failure per liveness check."""

    frontier_states: int = 0
    full_runs: int = 0
    steps: int = 0
    failures: list[FrontierFailure] = field(default_factory=list)
    cpu_seconds: float = 0.0  # this process's CPU time for the quiescences

    def describe(self) -> str:
        if not self.frontier_states:
            return "no frontier state (the horizon cut nothing)"
        return (
            f"quiesced {self.frontier_states:,} frontier states (quiescences run to their end: {self.full_runs:,}, "
            f"the others joined a settled run; {self.steps:,} quiescence steps, {self.cpu_seconds:.1f} s of CPU)"
        )

    def as_dict(self) -> dict[str, object]:
        return {
            "frontier_states": self.frontier_states,
            "full_runs": self.full_runs,
            "quiescence_steps": self.steps,
            "cpu_seconds": round(self.cpu_seconds, 3),
            "failures": [
                {
                    "ids": f.ids,
                    "details": f.details,
                    "prefix_steps": len(f.prefix),
                    "quiescence_steps": len(f.quiescence),
                }
                for f in self.failures
            ],
        }


class FrontierCollector:
    """Collects the frontier states of a search (pass ``collector.add`` as ``exhaustive.check``'s ``at_horizon``)."""

    def __init__(self) -> None:
        self.states: list[tuple[int, State]] = []

    def add(self, index: int, state: State) -> None:
        self.states.append((index, state))


def _dead_tasks(state: State) -> list[DeadTask]:
    """The tasks dead in ``state`` (``TaskDies``), as the causes the quiescence may blame a shortfall on: a dead task
    is the fault's harm, not a violation (docs/spec.md, "Liveness in every run")."""
    return [DeadTask(i, t, 0, state.now) for i, cl in enumerate(state.clients) for t in cl.dead_tasks]


def _joins(keys: CanonicalKeys, settled: set[int], run: list[int], s: State) -> bool:
    """Whether ``s`` is a state of a settled run (``quiesce``'s ``joins``); if not, it is added to ``run``."""
    key = keys.fingerprint(s)
    if key in settled:
        return True
    run.append(key)
    return False


def quiesce_frontier(search: Search, frontier: list[tuple[int, State]], stop_at_first: bool = True) -> FrontierResult:
    """Quiesce every frontier state (module docstring), in the search's breadth-first order, so the first failure of
    each check has the shortest prefix among the frontier states that fail it. ``stop_at_first``: stop at the first
    failing frontier state."""
    from rmqspec.properties.exhaustive import replay

    model: Model = search.model
    bounds = search.result.bounds
    keys = CanonicalKeys(model.config, search.result.relative_time, bounds.clamp_ms)
    settled: set[int] = set()
    out = FrontierResult(frontier_states=len(frontier))
    cpu_started = time.process_time()
    failed_ids: set[str] = set()
    for index, state in frontier:
        run: list[int] = []  # the fingerprints this quiescence passes, remembered if it settles
        joins = partial(_joins, keys, settled, run)
        start_key = keys.fingerprint(state)
        if start_key in settled:
            continue
        outcome = check_liveness(model, state, _dead_tasks(state), True, check_safety=False, joins=joins)
        out.steps += len(outcome.quiescence.steps)
        if not outcome.quiescence.joined:
            out.full_runs += 1
        if not outcome.violations:
            settled.add(start_key)
            settled.update(run)
            continue
        new = [v for v in outcome.violations if v.id not in failed_ids]
        if not new:
            continue
        failed_ids.update(v.id for v in new)
        prefix, _ = replay(model, search.graph.path(index))
        out.failures.append(
            FrontierFailure(
                [v.id for v in new],
                [v.detail for v in new],
                prefix,
                outcome.quiescence.steps,
                outcome.quiescence.state.now,
            )
        )
        if stop_at_first:
            break
    out.cpu_seconds = time.process_time() - cpu_started
    return out
