"""Distributed randomized campaigns: runs fanned out over Spark, results gathered and stored.

A campaign is an ordered list of units; unit ``k`` has seed ``base_seed + k`` and swarm profile
``PROFILES[k % len(PROFILES)]``, so what a unit does depends only on the campaign's seed and the code
version. Units are executed in fixed-size batches, one Spark job per batch. Each finished batch is
written atomically to ``<out>/batches/batch-NNNNNN.jsonl`` before the next starts, which makes the
campaign resumable (``--resume`` skips the batches on disk, so no run is lost or repeated) and a
killed worker costs only time (Spark re-runs the deterministic task). A sample of units is run
twice in every batch and their trace hashes must agree: the determinism self-check.

At the end the rows become ``runs.parquet`` (one row per run), violations are deduplicated by
signature into the failure store, and ``summary.json`` plus ``report.md`` with pictures are written.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rmqspec.campaign.units import PROFILES
from rmqspec.spec_coverage import COVERAGE_EVERY

DEFAULT_MASTER = "local[*]"
DETERMINISM_SAMPLE = 16  # every 16th unit is executed twice and must produce the same trace hash


class CampaignError(Exception):
    """Bad campaign input or state on disk (exit code 2)."""


class DeterminismError(Exception):
    """The same unit produced two different traces (exit code 4): results cannot be trusted."""


@dataclass
class CampaignOptions:
    out: Path
    master: str = DEFAULT_MASTER
    runs: int | None = None
    duration: float | None = None
    steps: int = 300
    seed: int = 0
    batch_size: int = 32
    resume: bool = False
    lockstep: bool = True
    liveness: bool = True  # quiesce each run's end state and check liveness (docs/spec.md §13)
    coverage_every: int = COVERAGE_EVERY  # measure spec/ branch coverage in units k % coverage_every == 0; 0: none
    mutations: frozenset[str] = frozenset()
    store: Path | None = None
    progress: Callable[[str], None] | None = None

    def manifest(self) -> dict[str, Any]:
        """What must match for ``--resume`` to continue the same campaign."""
        from rmqspec import __version__

        return {
            "rmqspec": __version__,
            "seed": self.seed,
            "steps": self.steps,
            "batch_size": self.batch_size,
            "lockstep": self.lockstep,
            "liveness": self.liveness,
            "mutations": sorted(self.mutations),
            "profiles": [p.name for p in PROFILES],
        }


@dataclass
class CampaignResult:
    rows: list[dict[str, Any]] = field(default_factory=list)
    failures: dict[str, dict[str, Any]] = field(default_factory=dict)
    seconds: float = 0.0
    spark_startup_seconds: float = 0.0
    determinism_checks: int = 0
    parallelism: int = 0
    spec_coverage: dict[str, Any] | None = None  # coverage.json's document (spec_coverage.coverage_document)

    @property
    def valid(self) -> bool:
        return not self.failures


def unit_spec(k: int, options: CampaignOptions) -> tuple[int, int, str]:
    """(unit, seed, profile) of unit ``k``: deterministic in the campaign's seed."""
    return k, options.seed + k, PROFILES[k % len(PROFILES)].name


def _execute(task: tuple[int, int, str, int, list[str], bool, bool, bool]) -> dict[str, Any]:
    """The Spark task: run one unit and return its row (imports stay inside for the workers). A measured
    unit's row also holds the spec/ arcs it executed (``spec_arcs``, ``spec_digest``; not in Parquet)."""
    from rmqspec.campaign.units import run_unit

    unit, seed, profile, steps, mutations, lockstep, liveness, measure = task
    if not measure:
        return {
            **run_unit(unit, seed, profile, steps, frozenset(mutations), lockstep, liveness).as_row(),
            "spec_arcs": None,
            "spec_digest": None,
        }
    from rmqspec.spec_coverage import ArcCollector, encode_arcs

    with ArcCollector() as collector:
        row = run_unit(unit, seed, profile, steps, frozenset(mutations), lockstep, liveness).as_row()
    arcs = None if collector.arcs is None else encode_arcs(collector.arcs)
    return {**row, "spec_arcs": arcs, "spec_digest": collector.digest if arcs is not None else None}


def run_campaign(options: CampaignOptions) -> CampaignResult:
    """Run (or resume) a campaign; see the module docstring."""
    if options.runs is None and options.duration is None:
        raise CampaignError("give --runs N or --duration SECONDS to bound the campaign")
    batches_dir = options.out / "batches"
    _prepare_output(options, batches_dir)
    done_rows = _load_batches(batches_dir)
    started = time.perf_counter()
    spark = _spark_session(options.master)
    result = CampaignResult(spark_startup_seconds=round(time.perf_counter() - started, 2))
    sc = spark.sparkContext
    result.parallelism = sc.defaultParallelism
    result.rows = [row for rows in done_rows.values() for row in rows]
    say = options.progress or (lambda line: None)
    if done_rows:
        say(f"resuming: {len(done_rows)} batches ({len(result.rows)} runs) already on disk")
    try:
        for batch in _batches(options, done_rows):
            if _out_of_budget(options, result, started, batch):
                break
            rows, rechecked = _run_batch(sc, options, batch, result.parallelism)
            _check_determinism(rows, rechecked)
            result.determinism_checks += len(rechecked)
            _write_batch(batches_dir, batch[0] // options.batch_size, rows)
            result.rows.extend(rows)
            say(_progress_line(options, result, started))
        result.rows.sort(key=lambda r: r["unit"])
        result.failures = deduplicate(result.rows)
        if any(r.get("spec_arcs") is not None for r in result.rows):
            from rmqspec.spec_coverage import campaign_document

            result.spec_coverage = campaign_document(result.rows, "campaign")
        _write_parquet(spark, result.rows, options.out / "runs.parquet")
    finally:
        spark.stop()
    result.seconds = round(time.perf_counter() - started, 2)
    return result


def _prepare_output(options: CampaignOptions, batches_dir: Path) -> None:
    manifest_path = options.out / "manifest.json"
    manifest = options.manifest()
    try:
        if options.resume:
            if not manifest_path.exists():
                raise CampaignError(f"{manifest_path}: nothing to resume (run without --resume first)")
            on_disk = json.loads(manifest_path.read_text(encoding="utf-8"))
            if on_disk != manifest:
                diff = sorted(k for k in manifest if on_disk.get(k) != manifest[k])
                raise CampaignError(f"{manifest_path}: --resume with different settings: {', '.join(diff)}")
            return
        if batches_dir.exists() and any(batches_dir.iterdir()):
            raise CampaignError(f"{options.out}: holds a campaign already; use --resume or another --out")
        batches_dir.mkdir(parents=True, exist_ok=True)
        _atomic_write(manifest_path, json.dumps(manifest, indent=2) + "\n")
    except json.JSONDecodeError as err:
        raise CampaignError(f"{manifest_path}: line {err.lineno}: not JSON: {err.msg}") from None
    except OSError as err:
        raise CampaignError(f"{options.out}: {err.strerror}") from None


def _load_batches(batches_dir: Path) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = {}
    if not batches_dir.exists():
        return out
    for path in sorted(batches_dir.glob("batch-*.jsonl")):
        rows = []
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as err:
                raise CampaignError(f"{path}: line {n}: not JSON ({err.msg}); delete the file to re-run it") from None
        out[int(path.stem.split("-")[1])] = rows
    return out


def _batches(options: CampaignOptions, done: dict[int, list[dict[str, Any]]]) -> Iterator[list[int]]:
    index = 0
    while options.runs is None or index * options.batch_size < options.runs:
        if index not in done:
            first = index * options.batch_size
            last = first + options.batch_size if options.runs is None else min(first + options.batch_size, options.runs)
            yield list(range(first, last))
        index += 1


def _out_of_budget(options: CampaignOptions, result: CampaignResult, started: float, batch: list[int]) -> bool:
    if options.duration is None:
        return False
    # Always run one batch, so a tiny duration still produces results.
    return bool(result.rows) and time.perf_counter() - started >= options.duration


def _run_batch(
    sc: Any, options: CampaignOptions, batch: list[int], parallelism: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    tasks = []
    for k in batch:
        unit, seed, profile = unit_spec(k, options)
        measure = options.coverage_every > 0 and unit % options.coverage_every == 0
        tasks.append(
            (unit, seed, profile, options.steps, sorted(options.mutations), options.lockstep, options.liveness, measure)
        )
    rechecks = [(*t[:-1], False) for t in tasks if t[0] % DETERMINISM_SAMPLE == 0]  # the trace, not the arcs, again
    everything = tasks + rechecks
    rows: list[dict[str, Any]] = (
        sc.parallelize(everything, max(1, min(len(everything), parallelism * 4))).map(_execute).collect()
    )
    return rows[: len(tasks)], rows[len(tasks) :]


def _check_determinism(rows: list[dict[str, Any]], rechecked: list[dict[str, Any]]) -> None:
    by_unit = {r["unit"]: r for r in rows}
    for again in rechecked:
        first = by_unit[again["unit"]]
        if first["trace_hash"] != again["trace_hash"]:
            raise DeterminismError(
                f"unit {again['unit']} (seed {again['seed']}, profile {again['profile']}) ran twice with "
                f"different traces: {first['trace_hash'][:12]} != {again['trace_hash'][:12]}"
            )


def _write_batch(batches_dir: Path, index: int, rows: list[dict[str, Any]]) -> None:
    text = "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows)
    _atomic_write(batches_dir / f"batch-{index:06d}.jsonl", text)


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def deduplicate(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """One failure per signature (property and shape of the shrunk run), the shortest kept."""
    failures: dict[str, dict[str, Any]] = {}
    for row in rows:
        for text in row["violations"]:
            v = json.loads(text)
            record = {
                **v,
                "config": json.loads(row["config"]),
                "found_by": {"unit": row["unit"], "seed": row["seed"], "profile": row["profile"]},
                "occurrences": 1,
            }
            old = failures.get(v["signature"])
            if old is None:
                failures[v["signature"]] = record
            else:
                old["occurrences"] += 1
                if v["shrunk_steps"] < old["shrunk_steps"]:
                    record["occurrences"] = old["occurrences"]
                    failures[v["signature"]] = record
    return failures


def save_failures(failures: dict[str, dict[str, Any]], store: Path) -> list[Path]:
    """Write each failure to ``<store>/<signature>.json`` (the suite replays ``failures/``) and
    as a trace in the oracle's format, ``<signature>.trace.jsonl``: checked against the correct
    model, the trace of a planted bug shows its divergence and any run shows its violation."""
    from dataclasses import replace

    from rmqspec.properties.serialize import action_from_json, config_from_json
    from rmqspec.properties.trace import write_trace

    store.mkdir(parents=True, exist_ok=True)
    paths = []
    for sig, record in sorted(failures.items()):
        stem = sig.replace(":", "-")
        path = store / f"{stem}.json"
        _atomic_write(path, json.dumps(record, indent=2, sort_keys=True) + "\n")
        config = config_from_json(record["config"])
        actions = [action_from_json(a) for a in record["actions"]]
        planted = f", planted {sorted(config.mutations)}" if config.mutations else ""
        producer = f"rmqspec campaign failure {sig}{planted}"
        write_trace(
            replace(config, mutations=frozenset()),
            actions,
            store / f"{stem}.trace.jsonl",
            producer=producer,
            observe_with=config if config.mutations else None,
        )
        paths.append(path)
    return paths


def _spark_session(master: str) -> Any:
    try:
        from pyspark.sql import SparkSession
    except ImportError as err:  # pragma: no cover - pyspark is a dependency
        raise CampaignError(f"pyspark is not installed: {err}") from None
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # this machine's network is loopback only
    log4j = Path(__file__).with_name("log4j2.properties")
    # Local mode retries a failed task only when told how often: local[N] -> local[N,4].
    local = re.fullmatch(r"local(?:\[(\d+|\*)\])?", master)
    if local:
        master = f"local[{local.group(1) or 1},4]"
    builder = SparkSession.builder
    if master.startswith("local") or "127.0.0.1" in master:
        # Everything is on this machine: keep Spark on loopback. On a real cluster the driver's
        # address comes from spark-submit or spark-defaults, so the executors can reach it.
        builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
    try:
        spark = (
            builder.master(master)
            .appName("rmqspec-campaign")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.task.maxFailures", "4")  # a lost task is re-run: units are deterministic
            .config("spark.sql.shuffle.partitions", "4")
            .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log4j}")
            .config("spark.executor.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{log4j}")
            .getOrCreate()
        )
    except Exception as err:
        raise CampaignError(f"cannot start Spark with master {master!r}: {str(err).splitlines()[0]}") from None
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _write_parquet(spark: Any, rows: list[dict[str, Any]], path: Path) -> None:
    from pyspark.sql.types import (
        ArrayType,
        BooleanType,
        DoubleType,
        IntegerType,
        LongType,
        MapType,
        StringType,
        StructField,
        StructType,
    )

    schema = StructType(
        [
            StructField("unit", IntegerType(), False),
            StructField("seed", LongType(), False),
            StructField("profile", StringType(), False),
            StructField("config", StringType(), False),
            StructField("steps", IntegerType(), False),
            StructField("rules", MapType(StringType(), IntegerType()), False),
            StructField("distinct_abstract_states", IntegerType(), False),
            StructField("invariant_checks", LongType(), False),
            StructField("deliveries", IntegerType(), False),
            StructField("redeliveries", IntegerType(), False),
            StructField("violation_count", IntegerType(), False),
            StructField("violations", ArrayType(StringType()), False),
            StructField("liveness_checked", BooleanType(), False),
            StructField("liveness_reached", BooleanType(), False),
            StructField("liveness_settled", BooleanType(), False),
            StructField("quiescence_steps", IntegerType(), False),
            StructField("liveness_harm", ArrayType(StringType()), False),
            StructField("fates", MapType(StringType(), IntegerType()), False),
            StructField("fate_harm", MapType(StringType(), IntegerType()), False),
            StructField("redelivery_causes", MapType(StringType(), IntegerType()), False),
            StructField("trace_hash", StringType(), False),
            StructField("seconds", DoubleType(), False),
        ]
    )
    names = [f.name for f in schema.fields]
    late: dict[str, dict[str, int]] = {"fates": {}, "fate_harm": {}, "redelivery_causes": {}}  # older batches
    data = [tuple(r[n] if n in r else late[n] for n in names) for r in rows]
    spark.createDataFrame(data, schema).coalesce(1).write.mode("overwrite").parquet(str(path))


def _progress_line(options: CampaignOptions, result: CampaignResult, started: float) -> str:
    done = len(result.rows)
    elapsed = time.perf_counter() - started
    if options.runs is not None:
        frac = min(1.0, done / options.runs)
        goal = f"{done}/{options.runs} runs"
    else:
        assert options.duration is not None
        frac = min(1.0, elapsed / options.duration)
        goal = f"{done} runs, {elapsed:.0f}/{options.duration:.0f} s"
    bar = "#" * int(frac * 30) + "." * (30 - int(frac * 30))
    violations = len({json.loads(v)["signature"] for r in result.rows for v in r["violations"]})
    steps = sum(r["steps"] for r in result.rows)
    return f"[{bar}] {goal}, {steps} steps, {violations} distinct violations, {steps / max(elapsed, 1e-9):,.0f} steps/s"
