"""``rmqspec bench-counterexamples``: for every planted bug, the exhaustive search's shortest counterexample
beside the random search's shrunk one, on the smallest named configuration that expresses it.

Per mutation, the named safety configurations (those with a horizon) are tried smallest first
(:func:`safety_configs`): the first whose breadth-first search finds a violation gives the row its
configuration, its property, its length (which is minimal in that configuration) and the seconds to find it;
the seeded random walks on the same configuration then give how many walks and seconds the random search
took and its counterexample's length after delta-debugging. A mutation refuted only by a liveness check
(``refuted_by`` of its variant, spec/variants) is not searched here: its lasso is in docs/check.md,
"Liveness as fair cycles". A mutation that no configuration expresses within the time limits is listed as
such (docs/check.md, "Planted bugs: shortest against shrunk", says why for each). Figures, not assertions:
the printed table is what docs/check.md quotes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from rmqspec.properties.exhaustive import NamedConfig, check, named_configs
from rmqspec.properties.explore import explore, shrink
from rmqspec.spec.config import MUTATIONS
from rmqspec.spec.variants import VARIANTS

# The budgets of perturbing actions a configuration may spend (Config fields): each one spent widens the space.
BUDGETS = (
    "client_crashes",
    "client_shutdowns",
    "broker_crashes",
    "send_back_failures",
    "query_errors",
    "retention_deletes",
    "admin_resets",
    "client_stalls",
    "commit_losses",
    "view_faults",
    "task_deaths",
    "offset_file_corruptions",
    "local_offset_file_corruptions",
    "lagging_file_writes",
)


@dataclass
class Row:
    mutation: str
    expected: tuple[str, ...] = ()  # the properties its variant names as refuting it (refuted_by)
    config: str = ""
    exhaustive_id: str = ""
    exhaustive_steps: int | None = None
    exhaustive_seconds: float = 0.0
    random_walks: int | None = None
    random_seconds: float = 0.0
    random_steps: int | None = None
    shrunk_steps: int | None = None
    tried: tuple[str, ...] = ()  # the configurations searched without a violation

    @property
    def liveness_only(self) -> bool:
        return bool(self.expected) and all(p.startswith("LIV-") for p in self.expected)


def size(named: NamedConfig) -> tuple[int, int, int, int, int, int, str]:
    """How large a configuration is, for trying the smallest first: its horizon (time multiplies every
    other dimension: the configurations without time come first), consumers times queues, messages per queue,
    budgeted perturbations, whether it is orderly (then the name, to break ties)."""
    c = named.config
    budgets = sum(getattr(c, b) for b in BUDGETS)
    horizon = named.bounds.horizon_ms or 0
    return (horizon, c.consumers * c.queues, c.messages_per_queue, budgets, int(c.orderly), c.consumers, named.name)


def safety_configs() -> list[NamedConfig]:
    """The named configurations with a horizon (the ones a safety search of a planted bug tries), smallest first."""
    return sorted((nc for nc in named_configs().values() if nc.bounds.horizon_ms is not None), key=size)


def bench_counterexamples(
    seconds_per_search: float = 60.0, walks: int = 200, steps: int = 200, only: list[str] | None = None
) -> list[Row]:
    """One row per mutation (see the module docstring)."""
    safety = safety_configs()
    rows = []
    for mutation in only or list(MUTATIONS):
        row = Row(mutation, VARIANTS[mutation].refuted_by)
        rows.append(row)
        if row.liveness_only:
            continue
        for nc in safety:
            config = replace(nc.config, mutations=frozenset({mutation}))
            started = time.perf_counter()
            r = check(config, replace(nc.bounds, max_seconds=seconds_per_search)).result
            if not r.violations:
                row.tried += (nc.name if r.exhausted else f"{nc.name} (cut at {r.distinct_states:,} states)",)
                continue
            v = r.violations[0]
            row.config, row.exhaustive_id, row.exhaustive_steps = nc.name, v.id, v.depth
            row.exhaustive_seconds = time.perf_counter() - started
            started = time.perf_counter()
            for k in range(walks):
                found = explore(config, 1, steps, first_seed=k)
                if found.counterexamples:
                    c = found.counterexamples[0]
                    row.random_walks, row.random_steps = k + 1, len(c.actions)
                    row.random_seconds = time.perf_counter() - started
                    row.shrunk_steps = len(shrink(c).actions)
                    break
            break
    return rows


def print_table(rows: list[Row]) -> None:
    print(
        "| mutation | configuration | property (expected) | shortest (BFS) | BFS s | walks to find | random s "
        "| random length | shrunk length |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        if r.liveness_only:
            print(f"| {r.mutation} | liveness only ({', '.join(r.expected)}): not searched here | | | | | | | |")
            continue
        if r.exhaustive_steps is None:
            print(f"| {r.mutation} | none within the limits | ({', '.join(r.expected)}) | | | | | | |")
            continue
        prop = r.exhaustive_id if r.exhaustive_id in r.expected else f"{r.exhaustive_id} ({', '.join(r.expected)})"
        walks = "not within the walks" if r.random_walks is None else str(r.random_walks)
        print(
            f"| {r.mutation} | {r.config} | {prop} | {r.exhaustive_steps} | {r.exhaustive_seconds:.1f} "
            f"| {walks} | {r.random_seconds:.1f} | {r.random_steps or ''} | {r.shrunk_steps or ''} |"
        )
    for r in rows:
        if r.tried:
            print(f"{r.mutation}: no violation in {', '.join(r.tried)}")
