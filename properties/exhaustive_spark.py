"""``rmqspec check --spark``: the exhaustive breadth-first search of ``properties/exhaustive.py`` run level by
level on Spark, for configurations whose visited set or frontier does not fit one process.

It lives beside the local search because it is the same search: the same ``Bounds``, the same
``check_state``, the action properties, ``SOMETIMES``, the same ``CheckResult``, and ``replay`` to turn a path of
action indices into actions. Spark is only where the sets live; the session is made by the caller
(``spark_session`` here makes one like the campaign's).

One level is four steps, each a Spark job (so its time can be reported apart):

1. **expand**: the frontier, an RDD of (fingerprint, state) partitioned by fingerprint, is expanded with
   ``mapPartitions`` (each task builds ``Model(config)`` once); every transition is checked (each action
   property and sometimes-condition whose guard can fire, ``properties/step_guards.py``) and counted
   there, and each partition returns one small record of counts and findings beside its successors
   (fingerprint, (state, parent fingerprint, action index)). Successors outside a constraint are counted
   as pruned and dropped.
2. **dedup-shuffle**: ``reduceByKey`` over the fingerprint partitioner keeps one successor per fingerprint
   (the one with the least (parent, action index), so the result does not depend on task order). This is the
   level's shuffle.
3. **visited-join**: the distinct successors are united, partition by partition, with the visited set (one
   record per partition and level: the sorted fingerprints first reached at that level, with each one's
   parent fingerprint and action index). Both sides have the same partitioner, so the union is
   partition-aligned and the join is a set lookup inside each task, without a second shuffle. What is left
   is the next level: ``check_state`` runs on each new state there, and the level's visited record is
   built. Everything kept across levels is ``localCheckpoint``-ed, so the lineage stays one level long.
4. the driver reads the small records (counts, findings), and rebuilds the path of each finding by walking
   parent fingerprints back through the per-level visited records (one small job per level, on the
   partitions that hold the fingerprints), then replays it from ``initial()``.

The fingerprint is ``canonical.stable_fingerprint`` (BLAKE2b of a memo-free pickle of the canonical
state), not the local search's ``hash``: on Python 3.11 ``hash(None)`` differs between interpreters, and
string hashes differ unless PYTHONHASHSEED is fixed, so executors would disagree about which states are
one. Counts are those of the local search (equal canonical states, same constraints, level by level); with
``stop_at_first`` the search stops after the first level with a violation, so its counts then cover whole
levels where the local search stops mid-level, but the counterexample has the same (shortest) length.
Search limits (``max_states``, ``max_seconds``) are checked between levels; ``max_depth`` as the local
search does. The ghost history is dropped from shipped states: no check reads it, and it only grows.

A search that starts its own Spark session stops as a campaign does on SIGINT and SIGTERM (the one protocol,
``rmqspec.spark_session.own_spark_session``): Spark and its JVM are stopped quietly and ``CheckInterrupted``
is raised, which ``rmqspec check`` prints as one line, exit code 130 or 143.
"""

from __future__ import annotations

import signal
import time
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

from rmqspec.properties.canonical import stable_fingerprint, time_is_relative
from rmqspec.properties.exhaustive import SOMETIMES, Bounds, CheckResult, Found, replay
from rmqspec.properties.step_guards import StepChecks
from rmqspec.spark_session import own_spark_session
from rmqspec.spec.actions import action_name
from rmqspec.spec.config import Config
from rmqspec.spec.invariants import ACTION_PROPERTIES, check_state
from rmqspec.spec.model import Model
from rmqspec.spec.state import State

PARTITIONS_PER_CORE = 2  # fingerprint partitions per core Spark reports (defaultParallelism)

_LEVEL, _INFO, _STATS = "level", "info", "stats"  # tags of the small records, keyed None beside the states


class SparkCheckError(Exception):
    """Spark could not run the search (start-up, or the datasets lost their partitioning)."""


class CheckInterrupted(KeyboardInterrupt):
    """A search on Spark stopped by SIGINT or SIGTERM; Spark and its JVM are stopped."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum  # 130 for SIGINT, 143 for SIGTERM, as a shell reports a signal

    def __str__(self) -> str:
        what = "terminated (SIGTERM)" if self.signum == signal.SIGTERM else "interrupted"
        return f"{what}; nothing was checked to the end"


@dataclass
class LevelTiming:
    """Where one level's wall time went (seconds): the four jobs, and the driver's own work between them."""

    depth: int
    frontier: int
    successors: int  # transitions kept after the constraints (before any deduplication)
    new_states: int
    expand: float = 0.0
    dedup_shuffle: float = 0.0
    visited_join: float = 0.0
    driver: float = 0.0

    @property
    def total(self) -> float:
        return self.expand + self.dedup_shuffle + self.visited_join + self.driver


def _fingerprint_partition(fp: int) -> int:
    """The partitioner of every fingerprint-keyed dataset of the search (one function object, so PySpark
    and the JVM see the datasets as co-partitioned); Spark takes it modulo the partition count."""
    return fp


def _model(config: Config) -> Model:
    return Model(config)


# --- the workers' side -------------------------------------------------------------------------------
def _expand(config: Config, bounds: Bounds, items: Iterable[tuple[int, State]]) -> Iterator[tuple[Any, Any]]:
    """Expand one partition of the frontier: its successors, then one record of counts and findings."""
    model = _model(config)
    relative = time_is_relative(config)
    clamp = bounds.clamp_ms
    # the step checks each action type can fire, as in the local search (properties/step_guards.py)
    step_properties = StepChecks(model, ACTION_PROPERTIES, lambda p: p.check).for_action
    step_sometimes = StepChecks(model, SOMETIMES, lambda x: x.holds).for_action
    transitions = pruned = 0
    actions: Counter[str] = Counter()
    hits: Counter[str] = Counter()
    witness: dict[str, tuple[int, int, str]] = {}
    violations: dict[tuple[str, str], tuple[int, int, str, str]] = {}
    for fp, s in items:
        for j, a in enumerate(model.enabled(s)):
            n = model.step(s, a)
            name = action_name(a)
            transitions += 1
            actions[name] += 1
            for prop in step_properties(a):
                detail = prop.check(model, s, a, n)
                if detail is None:
                    continue
                found = (fp, j, prop.name, detail)
                key = (prop.id, name)
                if key not in violations or found < violations[key]:
                    violations[key] = found
            for st in step_sometimes(a):
                if st.holds(model, s, a, n):
                    hits[st.name] += 1
                    w = (fp, j, name)
                    if st.name not in witness or w < witness[st.name]:
                        witness[st.name] = w
            if not bounds.admits(n):
                pruned += 1
                continue
            yield stable_fingerprint(n, config, relative, clamp), (n._replace(history=None), fp, j)
    yield None, (_STATS, transitions, pruned, dict(actions), dict(hits), witness, violations)


def _first_parent(x: tuple[State, int, int], y: tuple[State, int, int]) -> tuple[State, int, int]:
    """Of two successors with one fingerprint, the one reached by the least (parent, action index)."""
    return x if (x[1], x[2]) <= (y[1], y[2]) else y


def _join_visited(config: Config, items: Iterable[tuple[Any, Any]]) -> Iterator[tuple[Any, Any]]:
    """One partition of (visited records of every level, distinct successors): the new states (keyed by
    fingerprint), this level's visited record, and one record of counts and ``check_state`` findings."""
    visited: set[int] = set()
    candidates: list[tuple[int, tuple[State, int, int]]] = []
    for key, value in items:
        if key is None:
            visited.update(value[1])
        else:
            candidates.append((key, value))
    model = _model(config)
    new = sorted((c for c in candidates if c[0] not in visited), key=lambda c: c[0])
    violations: dict[tuple[str, str], tuple[int, int, str, str]] = {}
    for fp, (s, _parent, _j) in new:
        for v in check_state(model, s):
            key = (v.id, "state")
            if key not in violations:  # new is in fingerprint order: the first is the least
                violations[key] = (fp, -1, v.name, v.detail)
        yield fp, s
    fps = array("q", (fp for fp, _ in new))
    yield None, (_LEVEL, fps, array("q", (v[1] for _, v in new)), array("l", (v[2] for _, v in new)))
    yield None, (_INFO, len(new), violations)


def _lookup_parents(wanted: frozenset[int], items: Iterable[tuple[Any, Any]]) -> Iterator[tuple[int, int, int]]:
    """(fingerprint, parent fingerprint, action index) of each wanted fingerprint in a visited partition."""
    for _key, (_tag, fps, parents, vias) in items:
        index = {fp: k for k, fp in enumerate(fps) if fp in wanted}
        for fp, k in index.items():
            yield fp, parents[k], vias[k]


# --- the driver --------------------------------------------------------------------------------------
def check_on_spark(
    config: Config,
    bounds: Bounds = Bounds(),  # noqa: B008 - frozen, as in exhaustive.check
    spark: Any = None,
    *,
    master: str = "local[*]",
    stop_at_first: bool = True,
    partitions: int | None = None,
    timings: list[LevelTiming] | None = None,
    progress: Callable[[CheckResult, int, int], None] | None = None,
) -> CheckResult:
    """Explore every state of ``config`` reachable within ``bounds`` on Spark, level by level (module
    docstring). ``spark`` is a SparkSession (or SparkContext); without one, the active session is used, or
    one is started on ``master`` and stopped at the end. ``partitions`` is the fingerprint partition count (default
    ``PARTITIONS_PER_CORE`` per core). Each level's ``LevelTiming`` is appended to ``timings``;
    ``progress(result, depth, frontier)`` is called after each level."""
    bounds.time_is_relative(config)  # raises when a CONSUME_FROM_TIMESTAMP configuration has no horizon
    if spark is None:
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession()  # a session of the caller's (a test's) is used, not stopped
    if spark is not None:
        sc = getattr(spark, "sparkContext", spark)
        return _Search(config, bounds, sc, stop_at_first, partitions, timings, progress).run()
    return _check_on_own_spark(
        master, lambda sc: _Search(config, bounds, sc, stop_at_first, partitions, timings, progress)
    )


def _check_on_own_spark(master: str, search: Callable[[Any], _Search]) -> CheckResult:
    """``search(sc).run()`` in a Spark session started for it and stopped after it, SIGINT and SIGTERM handled as a
    campaign handles them (module docstring)."""
    with own_spark_session(lambda: spark_session(master), CheckInterrupted) as spark:
        result = search(spark.sparkContext).run()
    return result


class _Search:
    def __init__(
        self,
        config: Config,
        bounds: Bounds,
        sc: Any,
        stop_at_first: bool,
        partitions: int | None,
        timings: list[LevelTiming] | None,
        progress: Callable[[CheckResult, int, int], None] | None,
    ) -> None:
        self.config, self.bounds, self.sc = config, bounds, sc
        self.stop_at_first = stop_at_first
        self.partitions = partitions or max(1, sc.defaultParallelism * PARTITIONS_PER_CORE)
        self.timings = timings
        self.progress = progress
        self.model = Model(config)
        self.relative = time_is_relative(config)
        self.result = CheckResult(config, bounds, self.relative)
        self.levels: list[Any] = []  # visited record RDD per depth
        self.found_keys: set[tuple[str, str]] = set()

    def _partitioned(self, rdd: Any) -> Any:
        return rdd.partitionBy(self.partitions, _fingerprint_partition)

    def _aligned(self, rdd: Any, what: str) -> Any:
        if rdd.getNumPartitions() != self.partitions:
            raise SparkCheckError(
                f"{what}: {rdd.getNumPartitions()} partitions where {self.partitions} were expected: the datasets "
                "lost their common fingerprint partitioner, so the visited-set join would be wrong"
            )
        return rdd

    def run(self) -> CheckResult:
        from pyspark import StorageLevel

        result, bounds, config = self.result, self.bounds, self.config
        started = time.perf_counter()
        deadline = None if bounds.max_seconds is None else started + bounds.max_seconds
        s0 = self.model.initial()
        fp0 = stable_fingerprint(s0, config, self.relative, bounds.clamp_ms)
        record = (_LEVEL, array("q", [fp0]), array("q", [0]), array("l", [-1]))
        level0 = self._partitioned(self.sc.parallelize([(fp0, record)], 1))
        level0 = level0.map(lambda kv: (None, kv[1]), preservesPartitioning=True)
        level0.persist(StorageLevel.MEMORY_AND_DISK)
        level0.localCheckpoint()
        level0.count()
        self.levels.append(self._aligned(level0, "the initial level"))
        frontier = self._partitioned(self.sc.parallelize([(fp0, s0._replace(history=None))], 1))
        frontier_size = 1
        result.depth_counts.append(1)
        result.distinct_states = 1
        previous: Any = None  # the RDD the frontier is read from, released once the next level is built
        self._record(0, [(v.id, "initial", v.name, v.detail, []) for v in check_state(self.model, s0)])
        if result.violations and self.stop_at_first:
            result.stopped_by = "violation"
        depth = 0
        while frontier_size and not result.stopped_by:
            if bounds.max_depth is not None and depth >= bounds.max_depth:
                result.stopped_by = "max_depth"
                break
            timing = LevelTiming(depth, frontier_size, 0, 0)
            level_started = time.perf_counter()

            t = time.perf_counter()
            # not preservesPartitioning: the successors' keys are new fingerprints, which the shuffle below
            # must place (with the frontier's partitioner kept, reduceByKey would skip its shuffle)
            expanded = frontier.mapPartitions(partial(_expand, config, bounds))
            expanded.persist(StorageLevel.MEMORY_AND_DISK)
            stats = expanded.filter(lambda kv: kv[0] is None).map(lambda kv: kv[1]).collect()
            timing.expand = time.perf_counter() - t

            t = time.perf_counter()
            distinct = expanded.filter(lambda kv: kv[0] is not None).reduceByKey(
                _first_parent, self.partitions, _fingerprint_partition
            )
            distinct.persist(StorageLevel.MEMORY_AND_DISK)
            distinct.count()
            timing.dedup_shuffle = time.perf_counter() - t
            expanded.unpersist()

            t = time.perf_counter()
            joined = self._aligned(self.sc.union([*self.levels, distinct]), f"the visited-set join at depth {depth}")
            joined = joined.mapPartitions(partial(_join_visited, config), preservesPartitioning=True)
            joined.persist(StorageLevel.MEMORY_AND_DISK)
            joined.localCheckpoint()
            info = joined.filter(lambda kv: kv[0] is None and kv[1][0] == _INFO).map(lambda kv: kv[1]).collect()
            # this level's visited record is materialized by the next level's join, which reads it: one job
            # less per level (the joined dataset it comes from is kept until then)
            level = joined.filter(lambda kv: kv[0] is None and kv[1][0] == _LEVEL)
            level.persist(StorageLevel.MEMORY_AND_DISK)
            level.localCheckpoint()
            distinct.unpersist()
            if previous is not None:
                previous.unpersist()
            timing.visited_join = time.perf_counter() - t

            self.levels.append(self._aligned(level, f"the visited level at depth {depth + 1}"))
            frontier = joined.filter(lambda kv: kv[0] is not None)
            previous = joined
            new_states = sum(x[1] for x in info)
            timing.successors = sum(x[1] - x[2] for x in stats)
            timing.new_states = new_states
            self._account(depth, stats, info)
            frontier_size = new_states
            if new_states:
                result.depth_counts.append(new_states)
                result.distinct_states += new_states
            if result.violations and self.stop_at_first:
                result.stopped_by = "violation"
            depth += 1
            if frontier_size and not result.stopped_by:
                if bounds.max_states is not None and result.distinct_states >= bounds.max_states:
                    result.stopped_by = "max_states"
                elif deadline is not None and time.perf_counter() > deadline:
                    result.stopped_by = "max_seconds"
            timing.driver = time.perf_counter() - level_started - timing.expand - timing.dedup_shuffle
            timing.driver -= timing.visited_join
            if self.timings is not None:
                self.timings.append(timing)
            result.seconds = time.perf_counter() - started
            if self.progress is not None:
                self.progress(result, depth, frontier_size)
        result.exhausted = not frontier_size and not result.stopped_by
        for rdd in [*self.levels, previous]:
            if rdd is not None:
                rdd.unpersist()
        result.seconds = time.perf_counter() - started
        return result

    def _account(self, depth: int, stats: list[Any], info: list[Any]) -> None:
        """Add one level's counts to the result, and record its findings (each with its path)."""
        result = self.result
        violations: dict[tuple[str, str], tuple[int, int, str, str]] = {}
        witness: dict[str, tuple[int, int, str]] = {}
        for _tag, transitions, pruned, actions, hits, wit, vs in stats:
            result.transitions += transitions
            result.pruned += pruned
            result.action_counts.update(actions)
            result.sometimes_hits.update(hits)
            for name, w in wit.items():
                if name not in witness or w < witness[name]:
                    witness[name] = w
            for key, v in vs.items():
                if key not in violations or v < violations[key]:
                    violations[key] = v
        step_found = [(vid, name, v) for (vid, name), v in sorted(violations.items())]
        state_found: dict[tuple[str, str], tuple[int, int, str, str]] = {}
        for _tag, _count, vs in info:
            for key, v in vs.items():
                if key not in state_found or v < state_found[key]:
                    state_found[key] = v
        new_witness = {n: w for n, w in witness.items() if n not in result.sometimes}
        todo = [(vid, name, v) for vid, name, v in step_found if (vid, name) not in self.found_keys]
        todo_states = [
            (vid, name, v) for (vid, name), v in sorted(state_found.items()) if (vid, name) not in self.found_keys
        ]
        if not (todo or todo_states or new_witness):
            return
        # parents of the level's expanded states (depth) and of its new states (depth + 1)
        paths = self._paths(depth, {v[0] for _, _, v in todo} | {w[0] for w in new_witness.values()})
        new_paths = self._paths(depth + 1, {v[0] for _, _, v in todo_states})
        self._record(
            depth + 1,
            [(vid, name, v[2], v[3], [*paths[v[0]], v[1]]) for vid, name, v in todo]
            + [(vid, name, v[2], v[3], new_paths[v[0]]) for vid, name, v in todo_states],
        )
        for st in SOMETIMES:
            if st.name in new_witness:
                fp, j, name = new_witness[st.name]
                actions, _ = replay(self.model, [*paths[fp], j])
                result.sometimes[st.name] = Found(st.name, st.name, st.description, name, actions, len(actions))

    def _record(self, depth: int, found: list[tuple[str, str, str, str, list[int]]]) -> None:
        for vid, name, vname, detail, choices in found:
            if (vid, name) in self.found_keys:
                continue
            self.found_keys.add((vid, name))
            actions, _ = replay(self.model, choices)
            if len(actions) != depth:
                raise SparkCheckError(
                    f"{vid}: the rebuilt path has {len(actions)} steps where depth {depth} was expected"
                )
            self.result.violations.append(Found(vid, vname, detail, name, actions, len(actions)))

    def _paths(self, depth: int, fps: set[int]) -> dict[int, list[int]]:
        """The action indices from ``initial()`` to each fingerprint first reached at ``depth``: parent
        fingerprints walked back through the visited records, one job per level."""
        paths: dict[int, list[int]] = {fp: [] for fp in fps}
        at: dict[int, int] = {fp: fp for fp in fps}  # the path's start -> the fingerprint reached so far back
        for d in range(depth, 0, -1):
            wanted = frozenset(at.values())
            parts = sorted({_fingerprint_partition(fp) % self.partitions for fp in wanted})
            rows = self.sc.runJob(self.levels[d], partial(_lookup_parents, wanted), parts)
            parent = {fp: (p, j) for fp, p, j in rows}
            for start, fp in at.items():
                if fp not in parent:
                    raise SparkCheckError(f"fingerprint {fp} is not in the visited record of depth {d}")
                p, j = parent[fp]
                paths[start].append(j)
                at[start] = p
        for path in paths.values():
            path.reverse()
        return paths


# --- the session -------------------------------------------------------------------------------------
def spark_session(master: str = "local[*]", quick_start: bool = False) -> Any:
    """A Spark session like the campaign's (``rmqspec.spark_session.start_spark``). ``quick_start`` (tests)
    trades JIT quality for a JVM that starts sooner."""
    from rmqspec.spark_session import SparkStartError, start_spark

    try:
        return start_spark(master, "rmqspec-check", quick_start=quick_start)
    except SparkStartError as err:
        raise SparkCheckError(str(err)) from None
