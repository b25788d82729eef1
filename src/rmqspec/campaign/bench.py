"""Campaign benchmark (``rmqspec bench-campaign``): what distributing the runs over Spark buys.

Four figures, printed side by side in one run:

(a) scaling: runs/s and steps/s of a campaign on ``local[1]`` and on ``local[2]``, each given the
    same wall-clock budget, measured in the steady state (the batches after the first, so Spark
    start-up, the Python workers' start and the final Parquet write are left out; they are (d)),
    and the parallel efficiency ``steps/s(local[2]) / (2 x steps/s(local[1]))``;
(b) the baseline a user would pick instead: a plain loop of ``run_unit`` in one process over the
    same units (same seeds, profiles, steps and checks: the model, the reference in lockstep and
    every property at every step), given the same budget; the ratio of steps/s, in the steady
    state and end to end (the campaign's start-up and Parquet write included);
(c) time to first detection of each planted bug (``MUTATIONS``) with model-only runs
    (``lockstep=False``: the reference is never run against a mutated model): the loop versus
    campaign batches on a running ``local[2]`` session, over a few campaign seeds (median);
(d) the fixed and per-run costs of Spark, and from them the smallest campaign worth distributing.

Because the loop and the campaign run the same deterministic units in the same order, both find a
planted bug at the same run; what differs is how long it takes to get there. A machine check
first times two concurrent pure-Python loops against one: on a shared or throttled machine that is
the ceiling of any two-process speedup, and the figures should be read against it.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rmqspec import __version__
from rmqspec.campaign.runner import (
    DETERMINISM_SAMPLE,
    CampaignOptions,
    _run_batch,
    _spark_session,
    run_campaign,
    unit_spec,
)
from rmqspec.campaign.standalone import StandaloneCluster
from rmqspec.campaign.units import run_unit
from rmqspec.spec.config import MUTATIONS

TARGET_EFFICIENCY = 0.90
TARGET_RATIO = 1.8
DETECTION_SEED_STRIDE = 100_000  # campaign seeds of (c): 0, 100000, 200000, ...


@dataclass
class BenchOptions:
    budget: float = 45.0  # seconds per throughput measurement (local[1], local[2], the loop)
    steps: int = 300
    batch_size: int = 32
    lockstep: bool = True  # (a), (b) and (d); (c) is always model-only
    detect_budget: float = 20.0  # seconds per bug, side and seed before giving up
    detect_seeds: int = 3
    mutations: tuple[str, ...] = tuple(MUTATIONS)
    standalone: bool = False  # also time a campaign on a 2-worker standalone cluster on 127.0.0.1
    tmpdir: str | None = None  # scratch directory of the reference's files (TMPDIR), e.g. a tmpfs
    say: Callable[[str], None] = field(default=lambda line: None)


@dataclass
class CampaignFigure:
    master: str
    parallelism: int
    startup: float  # SparkSession start, as run_campaign measured it
    first_batch: float  # first batch: Python workers start and import rmqspec
    batches: int
    steady_runs: int
    steady_steps: int
    steady_seconds: float
    steady_task_seconds: float  # time spent inside run_unit by the steady runs
    steady_recheck_seconds: float  # estimated: the determinism self-check runs every 16th unit twice
    finalize: float  # after the last batch: deduplication, runs.parquet, Spark stop
    total: float
    total_runs: int
    total_steps: int
    unit_seconds: dict[int, float] = field(default_factory=dict)  # inside run_unit, every run
    other_cores: float | None = None  # CPU other processes used meanwhile

    @property
    def runs_per_s(self) -> float:
        return self.steady_runs / self.steady_seconds

    @property
    def steps_per_s(self) -> float:
        return self.steady_steps / self.steady_seconds

    @property
    def batch_seconds(self) -> float:
        return self.steady_seconds / max(1, self.batches - 1)


@dataclass
class LoopFigure:
    runs: int
    steps: int
    seconds: float
    unit_seconds: dict[int, float] = field(default_factory=dict)
    other_cores: float | None = None

    @property
    def runs_per_s(self) -> float:
        return self.runs / self.seconds

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.seconds


@dataclass
class Detection:
    mutation: str
    seed: int
    first_run: int | None  # 1-based index of the first violating run (the same for both sides)
    prop: str
    loop_seconds: float | None
    campaign_seconds: float | None
    campaign_runs: int


# -- measurements ------------------------------------------------------------------------------


class CpuMeter:
    """CPU used by *other* processes while a measurement runs, in cores (Linux ``/proc``; None elsewhere).

    Busy time of the whole machine (``/proc/stat``: user, system and steal) minus the CPU time
    of this process, its descendants (the Spark JVM, its Python workers) and kernel threads. A
    thread samples every process's own CPU time each ``interval`` seconds, so descendants that
    exit before the end (Python workers when Spark stops) are still counted up to their last
    sample. On a shared machine this says how many of the cores a figure really had.
    """

    def __init__(self, interval: float = 1.0) -> None:
        self._interval = interval
        self._first: dict[int, int] = {}  # ticks of each tracked process when first seen
        self._last: dict[int, int] = {}
        self._busy0: int | None = None
        self._other: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._wall = 0.0

    def __enter__(self) -> CpuMeter:
        self._busy0 = self._sample(initial=True)
        self._wall = time.perf_counter()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        busy1 = self._sample(initial=False)
        wall = time.perf_counter() - self._wall
        if self._busy0 is None or busy1 is None or wall <= 0:
            return
        ours = sum(self._last[pid] - self._first[pid] for pid in self._last)
        self._other = max(0.0, ((busy1 - self._busy0) - ours) / os.sysconf("SC_CLK_TCK") / wall)

    @property
    def other_cores(self) -> float | None:
        return self._other

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self._sample(initial=False)

    def _sample(self, initial: bool) -> int | None:
        """Record the CPU ticks of our processes; return the machine's busy ticks."""
        try:
            with open("/proc/stat", encoding="ascii") as f:
                cpu = [int(x) for x in f.readline().split()[1:]]
            parent: dict[int, int] = {}
            ticks: dict[int, int] = {}
            for entry in os.listdir("/proc"):
                if not entry.isdigit():
                    continue
                try:
                    with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as f:
                        fields = f.read().rsplit(")", 1)[1].split()
                except OSError:
                    continue  # exited meanwhile
                parent[int(entry)] = int(fields[1])
                ticks[int(entry)] = int(fields[11]) + int(fields[12])  # its own utime + stime
        except (OSError, ValueError, IndexError):
            return None
        children: dict[int, list[int]] = {}
        for pid, ppid in parent.items():
            children.setdefault(ppid, []).append(pid)
        todo = [os.getpid(), 2]  # this process, and kthreadd (kernel threads do everyone's I/O)
        while todo:
            pid = todo.pop()
            todo += children.get(pid, [])
            if pid not in ticks:
                continue
            self._first.setdefault(pid, ticks[pid] if initial else 0)
            self._last[pid] = ticks[pid]
        return cpu[0] + cpu[1] + cpu[2] + cpu[7]  # user, nice, system, steal (another VM's use)


def machine_check(iterations: int = 6_000_000) -> float:
    """How much faster two concurrent pure-Python loops finish than one after the other (2.0 ideal)."""
    code = f"x=0\nfor i in range({iterations}): x+=i"

    def wall(n: int) -> float:
        start = time.perf_counter()
        procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(n)]
        for p in procs:
            p.wait(timeout=120)
        return time.perf_counter() - start

    one = min(wall(1) for _ in range(2))
    return 2 * one / wall(2)


def measure_loop(opts: BenchOptions, budget: float) -> LoopFigure:
    """The baseline: ``run_unit`` over the campaign's units, one after the other, in this process."""
    spec = CampaignOptions(out=Path("."), steps=opts.steps, seed=0)
    runs = steps = 0
    unit_seconds: dict[int, float] = {}
    with CpuMeter() as meter:
        start = time.perf_counter()
        while time.perf_counter() - start < budget:
            unit, seed, profile = unit_spec(runs, spec)
            result = run_unit(unit, seed, profile, opts.steps, frozenset(), opts.lockstep)
            steps += result.steps
            unit_seconds[unit] = result.seconds
            runs += 1
        seconds = time.perf_counter() - start
    return LoopFigure(runs, steps, seconds, unit_seconds, meter.other_cores)


def measure_campaign(master: str, opts: BenchOptions, work: Path) -> CampaignFigure:
    """A real campaign (``run_campaign``) of ``opts.budget`` seconds, with each batch's end timed."""
    stamps: list[float] = []
    out = Path(tempfile.mkdtemp(prefix="campaign-", dir=work))
    options = CampaignOptions(
        out=out,
        master=master,
        duration=opts.budget,
        steps=opts.steps,
        seed=0,
        batch_size=opts.batch_size,
        lockstep=opts.lockstep,
        coverage_every=0,  # the loop (b) measures no coverage either: the same work on both sides
        progress=lambda _line: stamps.append(time.perf_counter()),
    )
    with CpuMeter() as meter:
        started = time.perf_counter()
        result = run_campaign(options)
        ended = time.perf_counter()
    other = meter.other_cores
    shutil.rmtree(out, ignore_errors=True)
    rows = sorted(result.rows, key=lambda r: r["unit"])
    ready = started + result.spark_startup_seconds
    if len(stamps) >= 2:
        steady = rows[opts.batch_size :]
        window = stamps[-1] - stamps[0]
    else:  # one batch only: its time includes the workers' start
        steady, window = rows, stamps[0] - ready
    return CampaignFigure(
        master=master,
        parallelism=result.parallelism,
        startup=result.spark_startup_seconds,
        first_batch=stamps[0] - ready,
        batches=len(stamps),
        steady_runs=len(steady),
        steady_steps=sum(r["steps"] for r in steady),
        steady_seconds=window,
        steady_task_seconds=sum(r["seconds"] for r in steady),
        steady_recheck_seconds=sum(r["seconds"] for r in steady if r["unit"] % DETERMINISM_SAMPLE == 0),
        finalize=ended - stamps[-1],
        total=ended - started,
        total_runs=len(rows),
        total_steps=sum(r["steps"] for r in rows),
        unit_seconds={r["unit"]: r["seconds"] for r in rows},
        other_cores=other,
    )


def _detect_loop(mutation: str, seed: int, opts: BenchOptions) -> tuple[int | None, str, float | None]:
    spec = CampaignOptions(out=Path("."), steps=opts.steps, seed=seed)
    start = time.perf_counter()
    k = 0
    while time.perf_counter() - start < opts.detect_budget:
        unit, unit_seed, profile = unit_spec(k, spec)
        result = run_unit(unit, unit_seed, profile, opts.steps, frozenset({mutation}), lockstep=False)
        if result.violations:
            return k + 1, result.violations[0]["id"], time.perf_counter() - start
        k += 1
    return None, "-", None


def _detect_campaign(
    sc: Any, mutation: str, seed: int, opts: BenchOptions
) -> tuple[int | None, str, float | None, int]:
    spec = CampaignOptions(
        out=Path("."),
        steps=opts.steps,
        seed=seed,
        batch_size=opts.batch_size,
        lockstep=False,
        mutations=frozenset({mutation}),
        coverage_every=0,  # as in the loop it is compared with
    )
    start = time.perf_counter()
    index = 0
    while time.perf_counter() - start < opts.detect_budget:
        batch = list(range(index * opts.batch_size, (index + 1) * opts.batch_size))
        rows, _ = _run_batch(sc, spec, batch, sc.defaultParallelism, {})
        index += 1
        hits = sorted((r for r in rows if r["violation_count"]), key=lambda r: r["unit"])
        if hits:
            first = hits[0]
            prop = json.loads(first["violations"][0])["id"]
            return first["unit"] + 1, prop, time.perf_counter() - start, index * opts.batch_size
    return None, "-", None, index * opts.batch_size


def measure_detection(opts: BenchOptions) -> tuple[list[Detection], float, float]:
    """(c): every planted bug, loop and campaign, over ``detect_seeds`` campaign seeds. Also returns
    the warm start-up of the session used and the median time of an empty batch job on it."""
    found: list[Detection] = []
    started = time.perf_counter()
    spark = _spark_session("local[2]")
    warm_startup = time.perf_counter() - started
    try:
        sc = spark.sparkContext
        sc.parallelize(range(8), 8).map(lambda x: x).collect()  # start the Python workers
        job = []
        for _ in range(5):
            t = time.perf_counter()
            sc.parallelize(range(opts.batch_size), max(1, min(opts.batch_size, sc.defaultParallelism * 4))).map(
                lambda x: x
            ).collect()
            job.append(time.perf_counter() - t)
        for mutation in opts.mutations:
            for j in range(opts.detect_seeds):
                seed = j * DETECTION_SEED_STRIDE
                loop_run, prop, loop_s = _detect_loop(mutation, seed, opts)
                camp_run, camp_prop, camp_s, camp_runs = _detect_campaign(sc, mutation, seed, opts)
                if loop_run is not None and camp_run is not None and loop_run != camp_run:
                    raise AssertionError(f"{mutation}, seed {seed}: loop found run {loop_run}, campaign {camp_run}")
                prop = prop if prop != "-" else camp_prop
                found.append(Detection(mutation, seed, loop_run or camp_run, prop, loop_s, camp_s, camp_runs))
                opts.say(f"(c) {mutation} seed {seed}: run {loop_run or camp_run}, loop {loop_s}, campaign {camp_s}")
    finally:
        spark.stop()
    return found, warm_startup, statistics.median(job)


# -- the whole benchmark -----------------------------------------------------------------------


def run_campaign_bench(opts: BenchOptions, command: str) -> list[str]:
    """Run every measurement and return the report's lines (the first one is ``command``)."""
    load_start = os.getloadavg()
    if opts.tmpdir is not None:  # before any Spark start: the Python workers inherit the variable
        os.environ["TMPDIR"] = opts.tmpdir
        tempfile.tempdir = None
    work = Path(tempfile.mkdtemp(prefix="rmqspec-bench-campaign-"))
    try:
        opts.say("machine check: one versus two concurrent CPU loops ...")
        capacity = machine_check()
        opts.say(f"(b) baseline: a loop of run_unit for {opts.budget:.0f} s ...")
        loop = measure_loop(opts, opts.budget)
        opts.say(f"(a) campaign on local[2] for {opts.budget:.0f} s ...")
        two = measure_campaign("local[2]", opts, work)
        opts.say(f"(a) campaign on local[1] for {opts.budget:.0f} s ...")
        one = measure_campaign("local[1]", opts, work)
        cluster: tuple[CampaignFigure, float] | None = None
        if opts.standalone:
            opts.say(f"(a) campaign on a standalone cluster (2 workers x 1 core) for {opts.budget:.0f} s ...")
            with StandaloneCluster(workers=2, cores=1, base_dir=work) as sa:
                figure = measure_campaign(sa.master_url, opts, work)
                figure.master = "standalone"
                cluster = (figure, sa.startup_seconds)
        opts.say(f"(c) time to first detection of {len(opts.mutations)} planted bugs ...")
        detections, warm, job = measure_detection(opts)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    header = [
        f"$ {command}",
        f"rmqspec {__version__}, pyspark {_pyspark_version()}, Python {platform.python_version()}, {_java_version()}; "
        f"{os.cpu_count()} CPUs; load average {load_start[0]:.1f} at start, {os.getloadavg()[0]:.1f} at end; "
        f"scratch files in {tempfile.gettempdir()}",
        f"machine check: two concurrent pure-Python loops finish {capacity:.2f}x as fast as one after the other "
        "(2.00 on two idle cores; the ceiling of any two-process speedup here)",
        "'others used': CPU taken by other processes on this machine during that measurement (0 on an idle machine)",
    ]
    return (
        header
        + [""]
        + _section_a(opts, one, two, cluster[0] if cluster else None)
        + [""]
        + _section_b(opts, loop, two)
        + [""]
        + _section_c(opts, detections, two.startup)
        + [""]
        + _section_d(opts, loop, one, two, warm, job, cluster)
    )


def _cores(value: float | None) -> str:
    return "?" if value is None else f"{value:.2f} cores"


def _mode(opts: BenchOptions) -> str:
    return "model + reference in lockstep" if opts.lockstep else "model only"


def _section_a(
    opts: BenchOptions, one: CampaignFigure, two: CampaignFigure, cluster: CampaignFigure | None
) -> list[str]:
    efficiency = two.steps_per_s / (2 * one.steps_per_s)
    lines = [
        f"(a) scaling: campaigns of {opts.steps}-step runs ({_mode(opts)}), batches of {opts.batch_size}, "
        f"{opts.budget:.0f} s each; steady state (batches after the first)",
        f"    {'master':<10}{'batches':>8}{'runs':>7}{'steps':>9}{'seconds':>9}{'runs/s':>9}{'steps/s':>9}"
        f"{'others used':>13}",
    ]
    for f in (one, two) if cluster is None else (one, two, cluster):
        lines.append(
            f"    {f.master:<10}{f.batches:>8}{f.steady_runs:>7}{f.steady_steps:>9}{f.steady_seconds:>9.1f}"
            f"{f.runs_per_s:>9.2f}{f.steps_per_s:>9.0f}{_cores(f.other_cores):>13}"
        )
    lines.append(
        f"    parallel efficiency local[2] vs 2 x local[1]: {efficiency:.0%} "
        f"(target >= {TARGET_EFFICIENCY:.0%}: {'met' if efficiency >= TARGET_EFFICIENCY else 'MISSED'})"
    )
    if cluster is not None:
        lines.append(
            f"    standalone cluster (2 workers x 1 core, 127.0.0.1) vs 2 x local[1]: "
            f"{cluster.steps_per_s / (2 * one.steps_per_s):.0%}"
        )
    return lines


def _section_b(opts: BenchOptions, loop: LoopFigure, two: CampaignFigure) -> list[str]:
    steady = two.steps_per_s / loop.steps_per_s
    end_to_end = (two.total_steps / two.total) / loop.steps_per_s
    return [
        f"(b) baseline: a plain loop of run_unit in one process (same units, same checks: {_mode(opts)}, every "
        f"property at every step), {opts.budget:.0f} s",
        f"    {'':<34}{'runs':>7}{'steps':>9}{'seconds':>9}{'runs/s':>9}{'steps/s':>9}{'others used':>13}",
        f"    {'loop of run_unit':<34}{loop.runs:>7}{loop.steps:>9}{loop.seconds:>9.1f}{loop.runs_per_s:>9.2f}"
        f"{loop.steps_per_s:>9.0f}{_cores(loop.other_cores):>13}",
        f"    {'campaign local[2], steady state':<34}{two.steady_runs:>7}{two.steady_steps:>9}"
        f"{two.steady_seconds:>9.1f}{two.runs_per_s:>9.2f}{two.steps_per_s:>9.0f}",
        f"    {'campaign local[2], end to end':<34}{two.total_runs:>7}{two.total_steps:>9}{two.total:>9.1f}"
        f"{two.total_runs / two.total:>9.2f}{two.total_steps / two.total:>9.0f}{_cores(two.other_cores):>13}",
        f"    steps/s ratio campaign/loop: {steady:.2f}x steady, {end_to_end:.2f}x end to end "
        f"(target >= {TARGET_RATIO}x: {'met' if steady >= TARGET_RATIO else 'MISSED'})",
    ]


def _section_c(opts: BenchOptions, detections: list[Detection], cold: float) -> list[str]:
    lines = [
        f"(c) time to first detection of each planted bug: model-only runs (lockstep=False) of {opts.steps} steps; "
        f"median over campaign seeds {', '.join(str(j * DETECTION_SEED_STRIDE) for j in range(opts.detect_seeds))}; "
        f"campaign = batches of {opts.batch_size} on a running local[2] session; a fresh `rmqspec campaign` adds "
        f"the start-up ({cold:.1f} s); '>' = not found within {opts.detect_budget:.0f} s",
        f"    {'mutation':<34}{'property':<13}{'run #':>6}{'loop s':>9}{'campaign s':>12}{'+start-up s':>13}",
    ]
    by_mutation: dict[str, list[Detection]] = {}
    for d in detections:
        by_mutation.setdefault(d.mutation, []).append(d)
    for mutation, ds in by_mutation.items():
        props = sorted({d.prop for d in ds if d.prop != "-"}) or ["-"]
        runs = [d.first_run for d in ds if d.first_run is not None]
        loop = _median_or_cap([d.loop_seconds for d in ds], opts.detect_budget)
        camp = _median_or_cap([d.campaign_seconds for d in ds], opts.detect_budget)
        with_start = "-" if camp.startswith(">") else f"{float(camp) + cold:.2f}"
        lines.append(
            f"    {mutation:<34}{','.join(props):<13}{(str(int(statistics.median(runs))) if runs else '-'):>6}"
            f"{loop:>9}{camp:>12}{with_start:>13}"
        )
    return lines


def _median_or_cap(values: list[float | None], cap: float) -> str:
    known = sorted(v if v is not None else float("inf") for v in values)
    m = known[len(known) // 2] if len(known) % 2 else (known[len(known) // 2 - 1] + known[len(known) // 2]) / 2
    return f">{cap:.0f}" if m == float("inf") else f"{m:.2f}"


def _section_d(
    opts: BenchOptions,
    loop: LoopFigure,
    one: CampaignFigure,
    two: CampaignFigure,
    warm: float,
    job: float,
    cluster: tuple[CampaignFigure, float] | None = None,
) -> list[str]:
    per_run_loop = loop.seconds / loop.runs
    per_run_one = one.steady_seconds / one.steady_runs
    in_task = one.steady_task_seconds / one.steady_runs
    recheck = one.steady_recheck_seconds / one.steady_runs
    per_run_two = two.steady_seconds / two.steady_runs
    warm_up = max(0.0, two.first_batch - two.batch_seconds)
    fixed = two.startup + warm_up + two.finalize
    lines = [
        "(d) Spark overheads (from the runs above)",
        f"    start-up, cold (JVM + SparkContext, local[2]):      {two.startup:6.1f} s",
        f"    start-up, warm (new SparkContext in a running JVM): {warm:6.1f} s",
        f"    first batch, extra (Python workers start, import):  {warm_up:6.1f} s",
        f"    end of campaign (dedup, runs.parquet, stop):        {two.finalize:6.1f} s",
        f"    one batch job with no work ({opts.batch_size} tasks):           {job * 1000:6.0f} ms",
        f"    per run on local[1]: {per_run_one * 1000:.0f} ms wall = {in_task * 1000:.0f} ms inside run_unit "
        f"+ {recheck * 1000:.0f} ms determinism re-runs (1 in {DETERMINISM_SAMPLE}) "
        f"+ {(per_run_one - in_task - recheck) * 1000:.0f} ms Spark (scheduling, serialization, batch barrier); "
        f"the loop: {per_run_loop * 1000:.0f} ms",
    ]
    for f in (one, two):
        same = [u for u in f.unit_seconds if u in loop.unit_seconds]
        if same:
            ratio = sum(f.unit_seconds[u] for u in same) / sum(loop.unit_seconds[u] for u in same)
            lines.append(
                f"    time inside run_unit on {f.master}, relative to the loop, same {len(same)} runs: {ratio:.2f}x"
                + (" (the workers slow each other down: CPU, disk)" if f.parallelism > 1 else "")
            )
    if cluster is not None:
        figure, started = cluster
        lines.append(
            f"    standalone cluster: daemons up in {started:.1f} s; application start-up {figure.startup:.1f} s, "
            f"end of campaign {figure.finalize:.1f} s"
        )
    if per_run_two < per_run_loop:
        runs = fixed / (per_run_loop - per_run_two)
        lines.append(
            f"    break-even: fixed cost {fixed:.1f} s / ({per_run_loop * 1000:.0f} - {per_run_two * 1000:.0f} ms "
            f"saved per run) = {runs:.0f} runs of {opts.steps} steps (about {runs * per_run_loop:.0f} s of "
            "single-process work); smaller campaigns are faster as a loop"
        )
    else:
        lines.append("    break-even: none: local[2] is not faster per run than the loop on this machine right now")
    return lines


def _pyspark_version() -> str:
    try:
        import pyspark

        return str(pyspark.__version__)
    except ImportError:  # pragma: no cover - pyspark is a dependency
        return "missing"


def _java_version() -> str:
    try:
        out = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "Java: unknown"
    first = (out.stderr or out.stdout).splitlines()
    return first[0].strip() if first else "Java: unknown"
