"""``rmqspec bench-check``: the exhaustive search on one process against the same search on Spark.

Runs one configuration with ``properties.exhaustive.check`` and with ``properties.exhaustive_spark.check_on_spark``
on a master (default ``local[2]``), checks that both give the same counts, and prints states/s of each, their
ratio, the Spark session's start-up (left out of the rate), the cost of the portable fingerprint against
Python's hash, and where the Spark search's time went, per level and in total: expand (the successors, the
checks, the fingerprints), dedup-shuffle (``reduceByKey``), visited-join (the co-partitioned union with the
visited set, ``check_state``) and the driver's own work.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterator
from typing import Any

from rmqspec.properties.canonical import CanonicalKeys, canonical, stable_fingerprint, time_is_relative
from rmqspec.properties.exhaustive import Bounds, CheckResult, check
from rmqspec.properties.exhaustive_spark import LevelTiming, check_on_spark, spark_session
from rmqspec.spec.config import Config
from rmqspec.spec.model import Model


def fingerprint_cost(config: Config, bounds: Bounds, states: int = 3000) -> tuple[float, float, float, float]:
    """Microseconds per state of ``canonical`` (the State form), of the search's memoised key
    (``CanonicalKeys.key``), of its ``hash`` and of ``stable_fingerprint``, on the first ``states`` states of a
    breadth-first walk."""
    model = Model(config)
    relative = time_is_relative(config)
    sample, frontier = [model.initial()], [model.initial()]
    while frontier and len(sample) < states:
        nxt = [model.step(s, a) for s in frontier for a in model.enabled(s)]
        sample += nxt
        frontier = nxt[:states]
    sample = sample[:states]
    keys = CanonicalKeys(config, relative, bounds.clamp_ms)
    out = []
    for fn in (
        lambda s: canonical(s, config, relative, bounds.clamp_ms),
        keys.key,
        lambda s: hash(keys.key(s)),
        lambda s: stable_fingerprint(s, config, relative, bounds.clamp_ms),
    ):
        t = time.process_time()
        for s in sample:
            fn(s)
        out.append((time.process_time() - t) / len(sample) * 1e6)
    return out[0], out[1], out[2], out[3]


def step_share(config: Config, bounds: Bounds, searched: CheckResult) -> str:
    """What the model's own ``enabled`` and ``step`` cost per distinct state, against the whole search's
    ``searched``: the same breadth-first search without the checks, timing only those two calls. Its rate is
    the ceiling no checker optimisation can pass."""
    model = Model(config)
    fp = CanonicalKeys(config, bounds.time_is_relative(config), bounds.clamp_ms).fingerprint
    s0 = model.initial()
    seen, frontier, spent = {fp(s0)}, deque([s0]), 0.0
    while frontier:
        s = frontier.popleft()
        started = time.process_time()  # CPU time, as the search's rate per CPU second
        successors = [model.step(s, a) for a in model.enabled(s)]
        spent += time.process_time() - started
        for n in successors:
            if bounds.admits(n) and (key := fp(n)) not in seen:
                seen.add(key)
                frontier.append(n)
    ceiling = len(seen) / spent if spent else 0.0
    if not ceiling or len(seen) != searched.distinct_states:
        return "the model alone: not measured (the search did not exhaust the configuration)"
    return (
        f"the model alone (enabled + step of each of the {len(seen):,} states): {ceiling:,.0f} states per CPU "
        f"second, the ceiling of any search that expands every state with this model; the optimised search reaches "
        f"{searched.states_per_cpu_second() / ceiling:.0%} of it"
    )


def run_bench_check(name: str, config: Config, bounds: Bounds, master: str = "local[2]") -> Iterator[str]:
    """The report's lines, as they become known."""
    yield f"bench-check {name}: constraints {bounds.describe()}; Spark master {master}"
    canon, key, hashed, stable = fingerprint_cost(config, bounds)
    yield (
        f"  fingerprint per state (CPU): the search's memoised key {key:.1f} us, + hash {hashed - key:.1f} us; "
        f"the Spark search's portable one: canonical() as a State {canon:.1f} us, + BLAKE2b digest "
        f"{stable - canon:.1f} us"
    )
    local = check(config, bounds, stop_at_first=False).result
    yield (
        f"  one process: {local.distinct_states:,} states, {local.transitions:,} transitions in "
        f"{local.seconds:.2f} s: {local.states_per_second():,.0f} states/s, "
        f"{local.states_per_cpu_second():,.0f} per CPU second, {local.bytes_per_state:,.0f} bytes per state"
    )
    plain = check(config, bounds, stop_at_first=False, optimised=False).result
    yield (
        f"  one process, plain search (canonical() afresh per state, every step check on every transition): "
        f"{plain.states_per_cpu_second():,.0f} states per CPU second; the optimised search is "
        f"{local.states_per_cpu_second() / max(1.0, plain.states_per_cpu_second()):.2f} times as fast"
        + ("" if plain.distinct_states == local.distinct_states else "; COUNTS DIFFER")
    )
    yield "  " + step_share(config, bounds, local)
    started = time.perf_counter()
    spark = spark_session(master)
    startup = time.perf_counter() - started
    try:
        check_on_spark(config, Bounds(max_depth=1, **_constraints(bounds)), spark)  # the Python workers' start
        timings: list[LevelTiming] = []
        on_spark = check_on_spark(config, bounds, spark, stop_at_first=False, timings=timings)
        parallelism = spark.sparkContext.defaultParallelism
    finally:
        spark.stop()
    same = (
        on_spark.distinct_states == local.distinct_states
        and on_spark.transitions == local.transitions
        and on_spark.depth_counts == local.depth_counts
        and on_spark.action_counts == local.action_counts
    )
    yield (
        f"  Spark {master} ({parallelism} cores): {on_spark.distinct_states:,} states in {on_spark.seconds:.2f} s: "
        f"{on_spark.states_per_second():,.0f} states/s (session start-up {startup:.1f} s, not counted); "
        f"counts {'equal to' if same else 'DIFFERENT FROM'} the local search's"
    )
    ratio = on_spark.states_per_second() / local.states_per_second() if local.seconds else 0.0
    yield f"  ratio Spark / one process: {ratio:.2f}"
    total = LevelTiming(-1, 0, 0, 0)
    for t in timings:
        for field in ("expand", "dedup_shuffle", "visited_join", "driver"):
            setattr(total, field, getattr(total, field) + getattr(t, field))
    yield (f"  Spark time by step over {len(timings)} levels: " + ", ".join(_share(total, f) for f in _FIELDS))
    per_job = min((t.dedup_shuffle for t in timings), default=0.0)
    yield f"  smallest level's dedup-shuffle (about the fixed cost of a job with a shuffle): {per_job:.2f} s"
    yield "  per level (depth, frontier, successors, new states, expand / dedup-shuffle / visited-join / driver s):"
    for t in timings:
        yield (
            f"    {t.depth:3d} {t.frontier:8,} {t.successors:9,} {t.new_states:8,}   "
            f"{t.expand:6.2f} {t.dedup_shuffle:6.2f} {t.visited_join:6.2f} {t.driver:6.2f}"
        )


_FIELDS = ("expand", "dedup_shuffle", "visited_join", "driver")


def _share(total: LevelTiming, field: str) -> str:
    value = getattr(total, field)
    return f"{field.replace('_', '-')} {value:.1f} s ({value / total.total:.0%})" if total.total else field


def _constraints(bounds: Bounds) -> dict[str, Any]:
    return {"horizon_ms": bounds.horizon_ms, "max_channel": bounds.max_channel, "clamp_ms": bounds.clamp_ms}
