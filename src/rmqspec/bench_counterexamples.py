"""``rmqspec bench-counterexamples``: for every planted bug, the exhaustive search's shortest counterexample
beside the random search's shrunk one, on the named configurations that can express it.

Per mutation and named safety configuration (one with a horizon): the breadth-first search's first
violation (its length, which is minimal, and the seconds to find it) and the seeded random walks' first
counterexample (how many walks and seconds it took, and its length after delta-debugging). A mutation no
configuration expresses within the time limits is listed as such: those need more consumers, queues or
faults than an exhaustive search can afford (docs/check.md, "Planted bugs: shortest against shrunk").
Figures, not assertions: the printed table is what docs/check.md quotes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from rmqspec.properties.exhaustive import check, named_configs
from rmqspec.properties.explore import explore, shrink
from rmqspec.spec.config import MUTATIONS


@dataclass
class Row:
    mutation: str
    config: str = ""
    exhaustive_id: str = ""
    exhaustive_steps: int | None = None
    exhaustive_seconds: float = 0.0
    random_walks: int | None = None
    random_seconds: float = 0.0
    random_steps: int | None = None
    shrunk_steps: int | None = None


def bench_counterexamples(
    seconds_per_search: float = 60.0, walks: int = 200, steps: int = 200, only: list[str] | None = None
) -> list[Row]:
    """One row per mutation (see the module docstring)."""
    safety = {n: nc for n, nc in named_configs().items() if nc.bounds.horizon_ms is not None}
    rows = []
    for mutation in only or list(MUTATIONS):
        row = Row(mutation)
        for name, nc in safety.items():
            config = replace(nc.config, mutations=frozenset({mutation}))
            started = time.perf_counter()
            r = check(config, replace(nc.bounds, max_seconds=seconds_per_search)).result
            if r.violations:
                v = r.violations[0]
                row.config, row.exhaustive_id, row.exhaustive_steps = name, v.id, v.depth
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
        rows.append(row)
    return rows


def print_table(rows: list[Row]) -> None:
    print(
        "| mutation | configuration | property | shortest (BFS) | BFS s | walks to find | random s "
        "| random length | shrunk length |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        if r.exhaustive_steps is None:
            print(f"| {r.mutation} | none within the limits | | | | | | | |")
            continue
        walks = "not within the walks" if r.random_walks is None else str(r.random_walks)
        print(
            f"| {r.mutation} | {r.config} | {r.exhaustive_id} | {r.exhaustive_steps} | {r.exhaustive_seconds:.1f} "
            f"| {walks} | {r.random_seconds:.1f} | {r.random_steps or ''} | {r.shrunk_steps or ''} |"
        )
