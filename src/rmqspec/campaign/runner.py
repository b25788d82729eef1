"""Distributed randomized campaigns: runs fanned out over Spark, results gathered and stored.

A campaign is an ordered list of units; unit ``k`` has seed ``base_seed + k`` and swarm profile
``PROFILES[k % len(PROFILES)]``, so what a unit does depends only on the campaign's seed and the code
version. Units are executed in fixed-size batches, one Spark job per batch. Each finished batch is
written atomically to ``<out>/batches/batch-NNNNNN.jsonl`` before the next starts, which makes the
campaign resumable (``--resume`` skips the batches on disk, so no run is lost or repeated) and a
killed worker costs only time (Spark re-runs the deterministic task). A sample of units is run
twice in every batch and their trace hashes must agree: the determinism self-check.

``--resume`` accepts a batch file only if it verifies (``_verified_batches``): it holds exactly its own
units, once each, every row a JSON object with the fields and types of a row, its unit's seed, profile
and configuration (re-derived from the manifest's seed), and a ``row_sha256`` digest that matches the
row. A batch that does not verify is named on stderr and re-run, never accepted: the run is reproducible
from its seed. SIGINT and SIGTERM stop the campaign through one path (``CampaignInterrupted``): Spark is
stopped, its JVM too, and the error says how many batches are saved (docs/campaign.md).

At the end the rows become ``runs.parquet`` (one row per run), violations are deduplicated by
signature into the failure store, and ``summary.json`` plus ``report.md`` with pictures are written.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rmqspec.campaign.corpus import Plan, Scheduler
from rmqspec.campaign.units import PROFILES, directed_start
from rmqspec.jsonin import InputError, iter_lines, parse
from rmqspec.outfiles import write_atomic
from rmqspec.properties.exhaustive import NamedConfig
from rmqspec.spark_session import own_spark_session
from rmqspec.spec_coverage import COVERAGE_EVERY

DEFAULT_MASTER = "local[*]"
DETERMINISM_SAMPLE = 16  # every 16th unit is executed twice and must produce the same trace hash


class CampaignError(Exception):
    """Bad campaign input or state on disk (exit code 2)."""


class DeterminismError(Exception):
    """The same unit produced two different traces (exit code 4): results cannot be trusted."""


class CampaignInterrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM stopped the campaign after Spark and its JVM were stopped. ``str()`` is one
    line: what is saved in ``out`` and, once the CLI has set ``resume_command``, how to resume."""

    def __init__(self, signum: int, out: Path, batches: int, runs: int) -> None:
        super().__init__(signum, out, batches, runs)
        self.signum, self.out, self.batches, self.runs = signum, out, batches, runs
        self.resume_command = ""

    @property
    def exit_code(self) -> int:
        return 128 + self.signum  # 130 for SIGINT, 143 for SIGTERM, as a shell reports a signal

    def __str__(self) -> str:
        what = "terminated (SIGTERM)" if self.signum == signal.SIGTERM else "interrupted"
        resume = f"; resume with: {self.resume_command}" if self.resume_command else "; resume with --resume"
        return f"{what}: {self.batches} batches ({self.runs} runs) saved in {self.out}{resume}"


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
    liveness: bool = True  # quiesce each run's end state and check liveness (docs/spec.md, "Liveness at quiescence")
    coverage_every: int = COVERAGE_EVERY  # measure spec/ coverage in units k % coverage_every == 0 and directed ones
    mutations: frozenset[str] = frozenset()
    # every unit walks this configuration instead of a sampled one (``--config NAME|FILE``); its bounds make the
    # units report the fingerprints of their states inside the constraints (``RunResult.named_states``)
    named: NamedConfig | None = None
    store: Path | None = None
    # the search (campaign/corpus.py): "guided" keeps a corpus of runs that reached new features and plans most
    # units from it; "random" runs every unit fresh from its seed (the campaign of before the corpus)
    search: str = "guided"
    corpus: Path | None = None  # --corpus DIR: start from another campaign's corpus
    progress: Callable[[str], None] | None = None
    notice: Callable[[str], None] | None = None  # one line per batch --resume re-runs (default: stderr)

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
            "search": self.search,
            "corpus": None
            if self.corpus is None
            else {"path": str(self.corpus), "sha256": _corpus_digest(self.corpus)},
            **({} if self.named is None else {"config": self.named_config_json()}),
        }

    def named_config_json(self) -> dict[str, Any]:
        """The named configuration every unit walks, as the manifest records it."""
        from rmqspec.properties.serialize import config_to_json

        assert self.named is not None
        return {
            "name": self.named.name,
            "config": config_to_json(self.named.config),
            "bounds": {k: v for k, v in vars(self.named.bounds).items() if k != "max_seconds"},
        }


def _corpus_digest(directory: Path) -> str | None:
    """SHA-256 of a seed corpus's entries: ``--resume`` must plan from the same corpus, not from whatever that
    directory holds by then."""
    try:
        return hashlib.sha256((directory / "entries.jsonl").read_bytes()).hexdigest()
    except OSError:
        return None


@dataclass
class CampaignResult:
    rows: list[dict[str, Any]] = field(default_factory=list)
    failures: dict[str, dict[str, Any]] = field(default_factory=dict)
    seconds: float = 0.0
    spark_startup_seconds: float = 0.0
    determinism_checks: int = 0
    parallelism: int = 0
    spec_coverage: dict[str, Any] | None = None  # coverage.json's document (spec_coverage.coverage_document)
    named: NamedConfig | None = None  # the configuration every unit walked (CampaignOptions.named)
    mutations: frozenset[str] = frozenset()
    # the units' reach of the named configuration's exhaustive space (search_coverage.Reached), once summarized
    state_coverage: Any = None
    scheduler: Scheduler | None = None  # the corpus and the feature curve (campaign/corpus.py)

    @property
    def valid(self) -> bool:
        return not self.failures


def unit_spec(k: int, options: CampaignOptions) -> tuple[int, int, str]:
    """(unit, seed, profile) of unit ``k``: deterministic in the campaign's seed."""
    return k, options.seed + k, PROFILES[k % len(PROFILES)].name


Task = tuple[int, int, str, int, list[str], bool, bool, bool, Any, Any]


def _execute(task: Task) -> dict[str, Any]:
    """The Spark task: run one unit and return its row (imports stay inside for the workers). A measured
    unit's row also holds the spec/ arcs it executed (``spec_arcs``, ``spec_digest``; not in Parquet). The
    last two elements are the named configuration every unit walks, or None, and the unit's plan (a guided
    campaign's, campaign/corpus.py), or None."""
    from rmqspec.campaign.units import run_unit

    unit, seed, profile, steps, mutations, lockstep, liveness, measure, named, plan = task
    fixed: dict[str, Any] = {"plan": plan}
    if named is not None:
        fixed.update(fixed_config=named.config, bounds=named.bounds)
    if not measure:
        return {
            **run_unit(unit, seed, profile, steps, frozenset(mutations), lockstep, liveness, **fixed).as_row(),
            "spec_arcs": None,
            "spec_digest": None,
        }
    from rmqspec.spec_coverage import ArcCollector, encode_arcs

    with ArcCollector() as collector:
        row = run_unit(unit, seed, profile, steps, frozenset(mutations), lockstep, liveness, **fixed).as_row()
    arcs = None if collector.arcs is None else encode_arcs(collector.arcs)
    return {**row, "spec_arcs": arcs, "spec_digest": collector.digest if arcs is not None else None}


def run_campaign(options: CampaignOptions) -> CampaignResult:
    """Run (or resume) a campaign; see the module docstring. The output directory is locked while it runs
    (``output_lock``): a second campaign into it is refused."""
    if options.resume and not (options.out / "manifest.json").exists():
        return _run_campaign(options)  # which says there is nothing to resume, before anything is created
    with output_lock(options.out):
        return _run_campaign(options)


LOCK_NAME = "campaign.lock"


@contextmanager
def output_lock(out: Path) -> Iterator[None]:
    """Hold ``<out>/campaign.lock`` for as long as the campaign runs, or raise CampaignError naming the process
    that holds it. The lock is an ``flock`` on the file, which the kernel releases when its holder exits however
    it exits, so a lock left by a killed campaign is stale by construction: the file stays, with the dead
    holder's pid, and the next campaign takes it. The file holds the holder's pid, for the message."""
    path = out / LOCK_NAME
    try:
        out.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as err:
        raise CampaignError(f"{err.filename or path}: cannot create the campaign's lock file: {err.strerror}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.read(fd, 64).decode(errors="replace").strip() or "unknown"
            raise CampaignError(
                f"{out}: in use by another campaign (pid {holder}, which holds {path}); wait for it to end, or give "
                "another --out"
            ) from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError as err:
            raise CampaignError(f"{path}: cannot write the campaign's lock file: {err.strerror}") from None
        yield
    finally:
        os.close(fd)  # releases the flock


def _run_campaign(options: CampaignOptions) -> CampaignResult:
    if options.runs is None and options.duration is None:
        raise CampaignError("give --runs N or --duration SECONDS to bound the campaign")
    batches_dir = options.out / "batches"
    _prepare_output(options, batches_dir)
    scheduler = Scheduler(
        options.seed, options.steps, guided=options.search == "guided", fixed=options.named is not None
    )
    if options.corpus is not None:
        try:
            scheduler.load(options.corpus)
        except InputError as err:
            raise CampaignError(f"{err}; give --corpus a campaign's corpus directory (<out>/corpus)") from None
    deferred: dict[int, Path] = {}  # guided: batches on disk verified when the campaign reaches them
    done_rows = _verified_batches(options, batches_dir, scheduler, deferred)
    saved = [len(done_rows), sum(len(rows) for rows in done_rows.values())]  # batches, runs in <out>
    started = time.perf_counter()

    def interrupted(signum: int) -> CampaignInterrupted:  # names the batches saved by the time of the signal
        return CampaignInterrupted(signum, options.out, *saved)

    with own_spark_session(lambda: _spark_session(options.master), interrupted) as spark:
        result = CampaignResult(
            spark_startup_seconds=round(time.perf_counter() - started, 2),
            named=options.named,
            mutations=options.mutations,
            scheduler=scheduler,
        )
        sc = spark.sparkContext
        result.parallelism = sc.defaultParallelism
        result.rows = [row for rows in done_rows.values() for row in rows]
        steps_done = sum(r["steps"] for r in result.rows)
        say = options.progress or (lambda line: None)
        if done_rows:
            say(f"resuming: {len(done_rows)} batches ({len(result.rows)} runs) already on disk")
        for batch in _batches(options, done_rows):
            index = batch[0] // options.batch_size
            if index not in deferred and _out_of_budget(options, result, started, batch):
                break
            plans = scheduler.plans(batch, index)
            rows = _deferred_rows(options, deferred, index, plans)
            if rows is None:
                rows, rechecked = _run_batch(sc, options, batch, result.parallelism, plans)
                _check_determinism(rows, rechecked)
                result.determinism_checks += len(rechecked)
                _absorb(scheduler, rows)
                _write_batch(batches_dir, index, rows)
                saved[0], saved[1] = saved[0] + 1, saved[1] + len(rows)
            else:
                scheduler.absorb(rows)
                saved[0], saved[1] = saved[0] + 1, saved[1] + len(rows)
            result.rows.extend(rows)
            steps_done += sum(r["steps"] for r in rows)
            scheduler.record_round(len(result.rows), time.perf_counter() - started, steps_done)
            _save_corpus(scheduler, options.out / "corpus")
            say(_progress_line(options, result, started))
        result.rows.sort(key=lambda r: r["unit"])
        result.failures = deduplicate(result.rows)
        if any(r.get("spec_arcs") is not None for r in result.rows):
            from rmqspec.spec_coverage import campaign_document

            result.spec_coverage = campaign_document(result.rows, "campaign")
        _write_parquet(spark, result.rows, options.out / "runs.parquet")
    result.seconds = round(time.perf_counter() - started, 2)
    return result


def _prepare_output(options: CampaignOptions, batches_dir: Path) -> None:
    manifest_path = options.out / "manifest.json"
    manifest = options.manifest()
    try:
        if options.resume:
            if not manifest_path.exists():
                raise CampaignError(f"{manifest_path}: nothing to resume (run without --resume first)")
            on_disk = parse(manifest_path.read_bytes(), str(manifest_path))
            if not isinstance(on_disk, dict):
                kind = "null" if on_disk is None else type(on_disk).__name__
                raise CampaignError(
                    f"{manifest_path}: expected a JSON object of the campaign's settings, got {kind}{_AFRESH}"
                )
            if on_disk != manifest:
                diff = sorted(k for k in manifest.keys() | on_disk.keys() if on_disk.get(k) != manifest.get(k))
                raise CampaignError(
                    f"{manifest_path}: --resume with different settings: {', '.join(diff)}; resume with the "
                    "settings this file holds, or start afresh without --resume in another --out"
                )
            if not batches_dir.is_dir() and batches_dir.exists():
                raise CampaignError(f"{batches_dir}: not a directory; move it away, then resume again")
            return
        if batches_dir.exists() and any(batches_dir.iterdir()):
            raise CampaignError(f"{options.out}: holds a campaign already; use --resume or another --out")
        batches_dir.mkdir(parents=True, exist_ok=True)
        _atomic_write(manifest_path, json.dumps(manifest, indent=2) + "\n")
    except InputError as err:
        raise CampaignError(f"{err}{_AFRESH}") from None
    except OSError as err:
        raise CampaignError(f"{err.filename or options.out}: {err.strerror}") from None


_AFRESH = (
    "; it is the file a campaign writes when it starts: restore it, or start afresh without --resume in another --out"
)


def _load_batches(batches_dir: Path) -> dict[int, list[dict[str, Any]]]:
    """Every batch file's rows, unverified (``rmqspec coverage --campaign`` reads the arcs in them)."""
    out: dict[int, list[dict[str, Any]]] = {}
    if not batches_dir.exists():
        return out
    for path in sorted(batches_dir.glob("batch-*.jsonl")):
        if (name := BATCH_NAME.fullmatch(path.name)) is None:
            continue
        try:
            rows = [row for _, row in iter_lines(path, str(path))]
        except InputError as err:
            raise CampaignError(f"{err}; delete the file to re-run it") from None
        out[int(name.group(1))] = rows
    return out


BATCH_NAME = re.compile(r"batch-(\d{6,})\.jsonl")  # _write_batch's names
ROW_DIGEST = "row_sha256"  # a batch row's digest of the rest of the row (_row_digest)
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")
# The element types of a row's collections, as Parquet stores them (_write_parquet)
_ROW_ELEMENTS: dict[str, type] = {
    "abstract_states": int,
    "violations": str,
    "reproduced": str,
    "liveness_harm": str,
    "named_states": int,
}
_ROW_MAPS = ("rules", "fates", "fate_harm", "redelivery_causes", "sometimes_hits")  # str -> int


def _row_digest(row: dict[str, Any]) -> str:
    """SHA-256 of the row's canonical JSON (sorted keys): what a JSON round trip leaves unchanged."""
    return hashlib.sha256(json.dumps(row, sort_keys=True).encode("utf-8")).hexdigest()


def _verified_batches(
    options: CampaignOptions,
    batches_dir: Path,
    scheduler: Scheduler | None = None,
    deferred: dict[int, Path] | None = None,
) -> dict[int, list[dict[str, Any]]]:
    """The batches on disk that ``--resume`` may keep, by index, each as its rows in unit order. Any other
    batch is named on stderr (``options.notice``) with why, and left to be re-run: batch ``k`` must hold
    exactly units ``k * batch_size`` up to the next batch's first or ``--runs`` (``_verify_batch``). Files
    that are not batches are ignored with a note; batches at or past ``--runs`` are left out of the result.

    With a guided ``scheduler`` a batch's plans depend on every batch before it, so the batches 0, 1, ... up to the
    first missing or failing one are verified against the plans the scheduler gives them and merged into its corpus,
    as the campaign did when it wrote them; the later ones go to ``deferred`` (by index), which the campaign verifies
    when it reaches them, after re-running the batch before (``run_campaign``)."""
    notice = options.notice or (lambda line: print(line, file=sys.stderr, flush=True))
    if not options.resume:
        return {}  # _prepare_output made sure there are none
    if not batches_dir.exists():
        notice(f"rmqspec: {batches_dir}: missing; re-running every batch")
        try:
            batches_dir.mkdir(parents=True)
        except OSError as err:
            raise CampaignError(f"{batches_dir}: cannot create: {err.strerror}") from None
        return {}
    try:
        paths = sorted(batches_dir.iterdir())
    except OSError as err:
        raise CampaignError(f"{batches_dir}: cannot list: {err.strerror}; fix its permissions") from None
    done: dict[int, list[dict[str, Any]]] = {}
    chained = scheduler is not None and scheduler.guided
    gap = False  # chained: a batch is missing or failed, so every later one is re-run
    for path in paths:
        name = BATCH_NAME.fullmatch(path.name)
        if name is None:
            if not path.name.endswith(".tmp"):  # a .tmp is a write cut short: the batch is re-run
                notice(f"rmqspec: {path}: not a batch file (batch-NNNNNN.jsonl); ignored")
            continue
        index = int(name.group(1))
        first = index * options.batch_size
        if options.runs is not None and first >= options.runs:
            notice(f"rmqspec: {path}: past --runs {options.runs}; left out of this result")
            continue
        if not path.is_file():
            raise CampaignError(f"{path}: not a regular file, so it cannot be replaced; remove it, then resume again")
        plans: dict[int, Plan | None] = {}
        if chained and (gap or index != len(done)):
            gap = True
            if deferred is not None:
                deferred[index] = path
            continue
        picks = [] if scheduler is None else scheduler.snapshot()
        if scheduler is not None:
            own = range(first, first + options.batch_size)
            units = own if options.runs is None else range(first, min(own.stop, options.runs))
            plans = scheduler.plans(list(units), index)
        rows, problem = _verify_batch(options, path, index, plans)
        if problem is None:
            done[index] = rows
            if scheduler is not None:
                scheduler.absorb(rows)
                runs = sum(len(r) for r in done.values())
                scheduler.record_round(runs, None, sum(r["steps"] for b in done.values() for r in b))
        else:
            gap = True
            if scheduler is not None:
                scheduler.restore(picks)
            end = first + options.batch_size if options.runs is None else min(first + options.batch_size, options.runs)
            notice(f"rmqspec: {path}: {problem}; re-running batch {index} (units {first}..{end - 1})")
    return done


def _verify_batch(
    options: CampaignOptions, path: Path, index: int, plans: dict[int, Plan | None] | None = None
) -> tuple[list[dict[str, Any]], str | None]:
    """(the rows of units ``want`` in order, None) if batch file ``index`` holds exactly its own units, once
    each, every row valid (``_row_problem``); else ([], why, naming the line). A unit of the batch at or
    past ``--runs`` (the campaign was started with a larger bound) is left out."""
    first = index * options.batch_size
    own = range(first, first + options.batch_size)
    want = own if options.runs is None else range(first, min(own.stop, options.runs))
    rows: dict[int, dict[str, Any]] = {}
    try:
        for n, value in iter_lines(path, str(path)):
            problem = _row_problem(options, value, own, plans or {})
            if problem is not None:
                return [], f"line {n}: {problem}"
            if value["unit"] in rows:
                return [], f"line {n}: unit {value['unit']} a second time"
            rows[value["unit"]] = {k: v for k, v in value.items() if k != ROW_DIGEST}
    except InputError as err:
        return [], err.detail
    except OSError as err:
        return [], f"cannot read: {err.strerror}"
    missing = [u for u in want if u not in rows]
    if missing:
        held = f"{len(rows)} runs" if rows else "no runs"
        return (
            [],
            f"holds {held}, missing {len(missing)} of units {want.start}..{want.stop - 1}, unit {missing[0]} first",
        )
    return [rows[u] for u in want], None


def _row_problem(
    options: CampaignOptions, row: Any, own: range, plans: dict[int, Plan | None] | None = None
) -> str | None:
    """Why ``row`` is not a valid row of a batch holding units ``own``, or None. Checked: a JSON object whose
    ``row_sha256`` matches the rest of it (an edited or cut row fails here); a unit of this batch; every field
    of a row with its type (re-derived: ``run_unit`` of zero steps gives the unit's row without a walk, 0.3 ms);
    the seed, profile and configuration that the manifest's seed gives the unit; steps within ``--steps``; a
    trace hash that is a SHA-256; violations that ``deduplicate`` can read. Not checked: that the walk's
    results and trace hash are the ones its seed gives, which takes re-running the unit."""
    from rmqspec.campaign.units import run_unit

    if not isinstance(row, dict):
        return f"expected a JSON object (a run's row), got {'null' if row is None else type(row).__name__}"
    digest = row.get(ROW_DIGEST)
    if not isinstance(digest, str):
        return f"no field {ROW_DIGEST!r} (not a row this rmqspec wrote)"
    body = {k: v for k, v in row.items() if k != ROW_DIGEST}
    if _row_digest(body) != digest:
        return f"{ROW_DIGEST} does not match the row: it was edited or damaged"
    unit = body.get("unit")
    if type(unit) is not int or unit not in own:
        return f"unit {unit!r} is not one of this batch's units {own.start}..{own.stop - 1}"
    k, seed, profile = unit_spec(unit, options)
    fixed: dict[str, Any] = {}
    if options.named is not None:
        fixed = {"fixed_config": options.named.config, "bounds": options.named.bounds}
    plan = (plans or {}).get(unit)
    expected = run_unit(
        k, seed, profile, 0, options.mutations, lockstep=False, liveness=False, plan=plan, **fixed
    ).as_row()
    expected.update(spec_arcs=None, spec_digest=None)
    if body.get("actions") is None:  # a row that did not become a corpus entry keeps no actions (_absorb)
        expected["actions"] = None
    for name, value in expected.items():
        if name not in body:
            return f"no field {name!r}"
        got = body[name]
        if not (type(got) is type(value) or _float_like(value, got) or name.startswith("spec_") or value is None):
            return f"field {name!r} is {type(got).__name__}, expected {type(value).__name__}"
    if not (body["spec_arcs"] is None or isinstance(body["spec_arcs"], dict)) or not (
        body["spec_digest"] is None or isinstance(body["spec_digest"], str)
    ):
        return "field 'spec_arcs' or 'spec_digest' of the wrong type"
    for name in ("seed", "profile", "start", "config", "origin"):
        if body[name] != expected[name]:
            return f"{name} is not the one the manifest's seed {options.seed} gives unit {unit}"
    if not 0 <= body["steps"] <= options.steps or not _SHA256_HEX.fullmatch(body["trace_hash"]):
        return "steps or trace_hash out of range"
    for name, element in _ROW_ELEMENTS.items():
        if any(type(e) is not element for e in body[name]):
            return f"field {name!r} holds something other than {element.__name__}"
    for name in _ROW_MAPS:
        if any(type(v) is not int for v in body[name].values()):
            return f"field {name!r} maps to something other than int"
    if any(type(f) is not str for f in body["features"]) or not (
        body["actions"] is None or all(isinstance(a, dict) for a in body["actions"])
    ):
        return "field 'features' or 'actions' of the wrong type"
    if body["violation_count"] != len(body["violations"]):
        return "violation_count is not the number of violations"
    for text in body["violations"]:
        try:
            v = json.loads(text)
        except ValueError:
            return "a violation that is not JSON"
        if not (isinstance(v, dict) and isinstance(v.get("signature"), str) and type(v.get("shrunk_steps")) is int):
            return "a violation without its signature and shrunk_steps"
    return None


def _float_like(value: Any, got: Any) -> bool:
    return type(value) is float and type(got) is int  # JSON may write a whole float as an int


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


def _deferred_rows(
    options: CampaignOptions, deferred: dict[int, Path], index: int, plans: dict[int, Plan | None]
) -> list[dict[str, Any]] | None:
    """A deferred batch's rows if its file verifies against this round's ``plans``; else None (it is re-run, named on
    stderr)."""
    path = deferred.pop(index, None)
    if path is None:
        return None
    rows, problem = _verify_batch(options, path, index, plans)
    if problem is None:
        return rows
    notice = options.notice or (lambda line: print(line, file=sys.stderr, flush=True))
    notice(f"rmqspec: {path}: {problem}; re-running batch {index}")
    return None


def _absorb(scheduler: Scheduler, rows: list[dict[str, Any]]) -> None:
    """Merge a batch's rows into the corpus; a row keeps its walk's actions only if it became an entry."""
    kept = scheduler.absorb(rows)
    for row in rows:
        if row["unit"] not in kept:
            row["actions"] = None


def _save_corpus(scheduler: Scheduler, directory: Path) -> None:
    try:
        scheduler.save(directory)
    except OSError as err:
        raise CampaignError(
            f"{err.filename or directory}: cannot write the corpus: {err.strerror}; make room or fix permissions, "
            "then resume"
        ) from None


def _run_batch(
    sc: Any, options: CampaignOptions, batch: list[int], parallelism: int, plans: dict[int, Plan | None]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    tasks = []
    for k in batch:
        unit, seed, profile = unit_spec(k, options)
        # every run with a directed start is measured: those runs exist to reach branches the others do not
        sampled = options.coverage_every > 0 and unit % options.coverage_every == 0
        plan = plans.get(unit)
        directed = options.named is None and plan is None and directed_start(seed) is not None
        measure = sampled or (options.coverage_every > 0 and directed)
        mutations = sorted(options.mutations)
        tasks.append(
            (
                unit,
                seed,
                profile,
                options.steps,
                mutations,
                options.lockstep,
                options.liveness,
                measure,
                options.named,
                plan,
            )
        )
    # the trace, not the arcs, again
    rechecks: list[Task] = [(*t[:7], False, t[8], t[9]) for t in tasks if t[0] % DETERMINISM_SAMPLE == 0]
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
    """One line per row, with its digest (``row_sha256``), which ``--resume`` checks."""
    text = "".join(json.dumps({**r, ROW_DIGEST: _row_digest(r)}, sort_keys=True) + "\n" for r in rows)
    path = batches_dir / f"batch-{index:06d}.jsonl"
    try:
        _atomic_write(path, text)
    except OSError as err:
        raise CampaignError(
            f"{path}: cannot write: {err.strerror}; make room or fix permissions, then resume"
        ) from None


_atomic_write = write_atomic  # the one atomic writer (rmqspec/outfiles.py)


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


def failure_file_stem(signature: str) -> str:
    """A failure's file name in the store, from its signature ``<property>:<hash>``: every character a file name may
    not hold or would read as a directory (``LIV-3/4``'s slash, the colon) becomes ``-``."""
    return "".join(c if c.isalnum() or c in "._-" else "-" for c in signature)


def save_failures(failures: dict[str, dict[str, Any]], store: Path) -> list[Path]:
    """Write each failure to ``<store>/<signature>.json`` (the suite replays ``failures/``), as a
    trace in the oracle's format, ``<signature>.trace.jsonl`` (checked against the correct model, the
    trace of a planted bug shows its divergence and any run shows its violation), and as a timeline
    picture, ``<signature>.svg`` (``rmqspec.timeline``)."""
    from dataclasses import replace

    from rmqspec.properties.serialize import action_from_json, config_from_json
    from rmqspec.properties.trace import write_trace
    from rmqspec.spec.property_types import Violation
    from rmqspec.timeline import render_timeline

    store.mkdir(parents=True, exist_ok=True)
    paths = []
    for sig, record in sorted(failures.items()):
        stem = failure_file_stem(sig)
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
        violation = Violation(record["id"], record["name"], record["detail"])
        title = f"Failure {sig}{planted}"
        svg = render_timeline(config, actions, [violation], title=title, walk_steps=record.get("walk_steps"))
        _atomic_write(store / f"{stem}.svg", svg)
        paths.append(path)
    return paths


def _spark_session(master: str) -> Any:
    from rmqspec.spark_session import SparkStartError, start_spark

    try:
        return start_spark(master, "rmqspec-campaign")
    except SparkStartError as err:
        raise CampaignError(str(err)) from None


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
            StructField("start", StringType(), False),
            StructField("start_steps", IntegerType(), False),
            StructField("config", StringType(), False),
            StructField("steps", IntegerType(), False),
            StructField("rules", MapType(StringType(), IntegerType()), False),
            StructField("distinct_abstract_states", IntegerType(), False),
            StructField("invariant_checks", LongType(), False),
            StructField("deliveries", IntegerType(), False),
            StructField("redeliveries", IntegerType(), False),
            StructField("violation_count", IntegerType(), False),
            StructField("violations", ArrayType(StringType()), False),
            StructField("reproduced", ArrayType(StringType()), False),
            StructField("origin", StringType(), False),
            StructField("liveness_checked", BooleanType(), False),
            StructField("liveness_reached", BooleanType(), False),
            StructField("liveness_settled", BooleanType(), False),
            StructField("quiescence_steps", IntegerType(), False),
            StructField("liveness_harm", ArrayType(StringType()), False),
            StructField("fates", MapType(StringType(), IntegerType()), False),
            StructField("fate_harm", MapType(StringType(), IntegerType()), False),
            StructField("redelivery_causes", MapType(StringType(), IntegerType()), False),
            StructField("sometimes_hits", MapType(StringType(), IntegerType()), False),
            StructField("named_states", ArrayType(LongType()), False),
            StructField("left_constraints", BooleanType(), False),
            StructField("states_inside", IntegerType(), False),
            StructField("trace_hash", StringType(), False),
            StructField("seconds", DoubleType(), False),
        ]
    )
    names = [f.name for f in schema.fields]
    late: dict[str, Any] = {
        "fates": {},
        "fate_harm": {},
        "redelivery_causes": {},
        "start": "",
        "start_steps": 0,
        "sometimes_hits": {},
        "named_states": [],
        "left_constraints": False,
        "states_inside": 0,
        "reproduced": [],
        "origin": "fresh",
    }
    # ``late``: the fields that batches written by an older rmqspec lack
    data = [tuple(r[n] if n in r else late[n] for n in names) for r in rows]
    # Written beside, then renamed over runs.parquet: a write that fails (a full disk) leaves no directory a
    # reader would take for the campaign's runs, only the .tmp one, which the next write overwrites.
    tmp = path.with_name(path.name + ".tmp")
    spark.sparkContext.setLogLevel("OFF")  # a failed write's hundreds of lines of task errors: one line says it
    try:
        spark.createDataFrame(data, schema).coalesce(1).write.mode("overwrite").parquet(str(tmp))
    except Exception as err:
        reason = next((r for r in _WRITE_FAILURES if r in str(err)), None)
        if reason is None:
            raise
        raise CampaignError(
            f"{path}: cannot write: {reason}; every run is saved in {path.parent / 'batches'}: make room, then resume"
        ) from None
    finally:
        spark.sparkContext.setLogLevel("ERROR")  # as spark_session.start_spark leaves it
    try:
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    except OSError as err:
        raise CampaignError(f"{path}: cannot write: {err.strerror}") from None


# What Hadoop's local file system says when a write fails for want of room or permission (a Java exception's
# message, passed through py4j): the failures a user fixes, not an internal error.
_WRITE_FAILURES = ("No space left on device", "Disk quota exceeded", "Permission denied", "Read-only file system")


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
