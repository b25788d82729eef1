"""The ``rmqspec`` command.

``rmqspec run`` explores the model on a set of configurations and prints a readable summary
(steps, actions fired, distinct states, invariants checked, violations), and draws each shrunk
counterexample as a timeline (``counterexample.svg``, ``rmqspec.timeline``); ``rmqspec bench`` prints
throughput figures; ``rmqspec check-trace`` checks an implementation's trace against the model, and
``rmqspec check-history`` checks a black-box history of what a group's users saw, and ``rmqspec
conform`` checks a live implementation through the adapter protocol that ``rmqspec serve-reference``
serves (docs/oracle.md). Exit codes: 0 all properties held (the trace conforms), 1 a property was
violated (or the trace or implementation diverges), 2 bad input (a configuration file, trace or
script that cannot be read or holds a bad value), 3 an internal error, 4 a nondeterministic run
(campaign), 5 the system under test crashed, hung or broke the protocol (conform). Every error
is one line on stderr that names what was wrong; no command prints a bare traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rmqspec import __version__
from rmqspec.bench_held_out import add_parser as add_bench_held_out
from rmqspec.check_cli import add_check_command, positive_int, positive_seconds, seconds
from rmqspec.jsonin import InputError, read_file
from rmqspec.outfiles import check_directory, write_atomic
from rmqspec.spec.config import (
    AVG_BY_CIRCLE,
    BROADCASTING,
    CONSISTENT_HASH,
    FROM_FIRST,
    FROM_TIMESTAMP,
    Config,
    ConfigError,
)
from rmqspec.spec_coverage import COVERAGE_EVERY

if TYPE_CHECKING:
    from rmqspec.properties.explore import Counterexample, ExploreResult

EXIT_OK, EXIT_VIOLATION, EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_NONDETERMINISM, EXIT_SUT_FAILED = 0, 1, 2, 3, 4, 5
EXIT_OUTPUT_CLOSED = 141  # the reader of standard output closed it (``| head``): a shell's code for SIGPIPE

# The default model run: each mode, strategy and start position, with faults on.
DEFAULT_CONFIGS: dict[str, Config] = {
    "clustering-avg": Config(consumers=3, queues=4, max_reconsume_times=2),
    "clustering-circle-first": Config(
        consumers=3, queues=4, strategy=AVG_BY_CIRCLE, consume_from_where=FROM_FIRST, backlog=2, backlog_head_hot=False
    ),
    "clustering-hash-timestamp": Config(
        consumers=2, queues=4, strategy=CONSISTENT_HASH, consume_from_where=FROM_TIMESTAMP, consume_timestamp=20_000
    ),
    "clustering-tags-batches": Config(
        consumers=2, queues=2, tags=("A", "B"), subscription=("A",), consume_batch_size=2, max_reconsume_times=1
    ),
    "broadcasting": Config(consumers=2, queues=3, mode=BROADCASTING, consume_from_where=FROM_FIRST),
}


class CliError(Exception):
    """Bad input: printed as one line, exit code 2."""


def load_config(path: str) -> Config:
    """A Config from a JSON file whose keys are Config fields."""
    try:
        values = read_file(path, "the config")
    except InputError as err:
        raise CliError(str(err)) from None
    if not isinstance(values, dict):
        raise CliError(f"{path}: expected a JSON object of Config fields, got {type(values).__name__}")
    try:
        return Config.from_mapping(values, where=path)
    except ConfigError as err:
        raise CliError(f"{path}: {err}" if not str(err).startswith(path) else str(err)) from None


def _cmd_run(args: argparse.Namespace) -> int:
    from rmqspec.properties.explore import explore, shrink
    from rmqspec.properties.search_coverage import sometimes_figures

    configs = {Path(args.config).stem: load_config(args.config)} if args.config else dict(DEFAULT_CONFIGS)
    if args.mutation:
        try:
            configs = {name: replace(c, mutations=frozenset(args.mutation)) for name, c in configs.items()}
        except ConfigError as err:
            raise CliError(f"--mutation: {err}") from None
    out_dir = Path(args.out)
    problem = check_directory(out_dir)
    if problem is not None:  # refused before the walks, not after them
        raise CliError(f"--out {out_dir}: cannot write results: {problem}")
    total_actions: Counter[str] = Counter()
    total_sometimes: Counter[str] = Counter()
    rows = []
    failures = []
    started = time.perf_counter()
    for k, (name, config) in enumerate(configs.items(), 1):
        print(f"[{k}/{len(configs)}] {name}: {args.walks} walks x {args.steps} steps ...", file=sys.stderr, flush=True)
        result = explore(
            config, args.walks, args.steps, first_seed=args.seed, track_states=True, liveness=not args.no_liveness
        )
        total_actions.update(result.actions)
        rows.append(
            {
                "config": name,
                "valid": result.valid,
                "walks": result.walks,
                "steps": result.steps,
                "distinct_states": result.distinct_states,
                "invariant_checks": result.invariant_checks,
                "deliveries": result.deliveries,
                "redeliveries": result.redeliveries,
                "violations": [
                    {"id": v.id, "name": v.name, "detail": v.detail, "seed": c.seed, "steps": len(c.actions)}
                    for c in result.counterexamples
                    for v in c.violations
                ],
                "liveness": _liveness_figures(result),
                **result.fates.as_dict(),  # "fates", "harm": per fate at the walks' ends (properties/fates.py)
                "redelivery_causes": dict(result.redelivery_causes.most_common()),
                **sometimes_figures(result.sometimes_hits),  # "sometimes_hits", "sometimes_vacuous"
            }
        )
        total_sometimes.update(result.sometimes_hits)
        failures += [(name, c) for c in result.counterexamples]
    elapsed = time.perf_counter() - started
    summary = {
        "valid": not failures,
        "version": __version__,
        "seconds": round(elapsed, 2),
        "liveness": not args.no_liveness,
        "configs": rows,
        "actions": dict(total_actions.most_common()),
        **sometimes_figures(total_sometimes),  # over every configuration: "sometimes_hits", "sometimes_vacuous"
    }
    shrunk_failures = [(name, c, shrink(c)) for name, c in failures]
    try:  # the files first: a reader that closes standard output early (``| head``) loses none of them
        out_dir.mkdir(parents=True, exist_ok=True)
        write_atomic(out_dir / "run-summary.json", json.dumps(summary, indent=2) + "\n")
        write_atomic(out_dir / "actions.svg", _bar_chart_svg(total_actions, "Actions fired"))
        pictures = _write_counterexample_pictures([(name, small) for name, _, small in shrunk_failures], out_dir)
    except OSError as err:
        raise CliError(f"{err.filename or out_dir}: cannot write results: {err.strerror}") from None
    _print_summary(summary)
    for name, c, small in shrunk_failures:
        if c.walk_steps is not None and small.walk_steps is not None:  # a liveness failure: its walk is shrunk
            shrunk = f"its walk shrunk from {c.walk_steps} to {small.walk_steps} steps"
        else:
            shrunk = f"shrunk from {len(c.actions)} to {len(small.actions)} steps"
        print(f"\nCounterexample in {name} ({shrunk}):")
        print(small.describe())
    print(f"\nwrote {out_dir / 'run-summary.json'} and {out_dir / 'actions.svg'}")
    for path in pictures:
        print(f"wrote {path} (the counterexample as a timeline picture)")
    return EXIT_OK if not failures else EXIT_VIOLATION


def _write_counterexample_pictures(failures: list[tuple[str, Counterexample]], out_dir: Path) -> list[Path]:
    """Each shrunk counterexample as a timeline (``rmqspec.timeline``): ``<out>/counterexample.svg`` when the
    run found one, ``<out>/counterexample-<config>.svg`` each when it found several."""
    from rmqspec.timeline import render_timeline

    paths = []
    for name, c in failures:
        path = out_dir / ("counterexample.svg" if len(failures) == 1 else f"counterexample-{name}.svg")
        title = f"Counterexample in {name} (seed {c.seed})"
        svg = render_timeline(c.config, c.actions, c.violations, title=title, walk_steps=c.walk_steps)
        write_atomic(path, svg)
        paths.append(path)
    return paths


def _liveness_figures(result: ExploreResult) -> dict[str, object]:
    """A config's liveness figures for run-summary.json: walks quiesced, quiescences that reached their
    horizon or settled within the step bound, those that settled early, quiescence steps, and per cause
    of harm (a task still dead) the walks it explained a failed check of, per check id."""
    return {
        "quiesced": result.quiesced,
        "reached": result.quiescence_reached,
        "settled": result.quiescence_settled,
        "quiescence_steps": result.quiescence_steps,
        "violations": sum(1 for c in result.counterexamples if c.walk_steps is not None),
        "harm": {
            cause: {"walks": walks, "checks": dict(sorted(result.harm_checks[cause].items()))}
            for cause, walks in sorted(result.harm_walks.items())
        },
    }


def _print_summary(summary: dict[str, object]) -> None:
    from rmqspec.properties.search_coverage import sometimes_line, vacuous_lines
    from rmqspec.spec.invariants import ACTION_PROPERTIES, INVARIANTS

    rows: list[dict[str, Any]] = summary["configs"]  # type: ignore[assignment]
    print(f"rmqspec {summary['version']} model run ({summary['seconds']} s)")
    print(
        f"{'config':<28}{'walks':>7}{'steps':>10}{'states':>10}{'checks':>12}{'redeliv.':>10}"
        f"{'quiesced':>10}{'reached':>9}  violations"
    )
    for r in rows:
        violations = r["violations"]
        shown = "none" if not violations else ", ".join(sorted({v["id"] for v in violations}))
        live = r["liveness"]
        print(
            f"{r['config']:<28}{r['walks']:>7}{r['steps']:>10}{r['distinct_states']:>10}"
            f"{r['invariant_checks']:>12}{r['redeliveries']:>10}{live['quiesced']:>10}{live['reached']:>9}  {shown}"
        )
    actions: dict[str, int] = summary["actions"]  # type: ignore[assignment]
    print("\nrules fired: " + ", ".join(f"{name} {count}" for name, count in actions.items()))
    ids = [p.id for p in INVARIANTS] + [p.id for p in ACTION_PROPERTIES]
    print(f"invariants checked at every step: {', '.join(ids)}")
    if not summary["liveness"]:
        print("liveness at quiescence: not checked (--no-liveness)")
    else:
        quiesced = sum(r["liveness"]["quiesced"] for r in rows)
        reached = sum(r["liveness"]["reached"] for r in rows)
        settled = sum(r["liveness"]["settled"] for r in rows)
        failed = sum(r["liveness"]["violations"] for r in rows)
        print(
            f"liveness at quiescence (LIV-1..LIV-5): {quiesced} walks quiesced, {reached} reached the horizon or "
            f"settled ({settled} settled early), {failed} liveness violations"
        )
        print(f"liveness harm (checks failed where a shown cause explains them): {_harm_line(rows)}")
    fates: Counter[str] = Counter()
    harm: Counter[str] = Counter()
    causes: Counter[str] = Counter()
    for r in rows:
        fates.update(r["fates"])
        harm.update(r["harm"])
        causes.update(r["redelivery_causes"])
    _print_fates(fates, harm, causes, "after the quiescence" if summary["liveness"] else "at the end of each walk")
    hits: dict[str, int] = summary["sometimes_hits"]  # type: ignore[assignment]
    print(sometimes_line(hits))
    for line in vacuous_lines(hits):
        print(line)
    print(f"violations: {'none' if summary['valid'] else 'FOUND (see below)'}")


def _print_fates(fates: Mapping[str, int], harm: Mapping[str, int], causes: Mapping[str, int], where: str) -> None:
    """The fate of every message (properties/fates.py), the fault harm among them, the redeliveries per cause."""
    print(f"message fates {where}: " + (", ".join(f"{k} {n}" for k, n in sorted(fates.items())) or "no messages"))
    print("fault harm among them: " + (", ".join(f"{k} {n}" for k, n in sorted(harm.items())) or "none"))
    ranked = sorted(causes.items(), key=lambda kv: (-kv[1], kv[0]))
    print("redeliveries by cause: " + (", ".join(f"{k} {n}" for k, n in ranked) or "none"))


def _harm_line(rows: list[dict[str, Any]]) -> str:
    """Harm per cause over every config: walks, and per check the walks it failed in."""
    walks: Counter[str] = Counter()
    checks: dict[str, Counter[str]] = {}
    for r in rows:
        for cause, harm in r["liveness"]["harm"].items():
            walks[cause] += harm["walks"]
            checks.setdefault(cause, Counter()).update(harm["checks"])
    if not walks:
        return "none"
    return "; ".join(
        f"{cause} in {n} walks ({', '.join(f'{vid} {k}' for vid, k in sorted(checks[cause].items()))})"
        for cause, n in sorted(walks.items())
    )


def _bar_chart_svg(counts: Counter[str], title: str) -> str:
    """A dependency-free horizontal bar chart."""
    items = counts.most_common()
    width, bar_h, left = 640, 18, 170
    height = 40 + bar_h * len(items)
    top = max((c for _, c in items), default=1)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
        'font-size="12">',
        f'<text x="10" y="20" font-size="14" font-weight="bold">{title}</text>',
    ]
    for k, (name, count) in enumerate(items):
        y = 32 + k * bar_h
        w = (width - left - 70) * count / top
        parts.append(f'<text x="{left - 6}" y="{y + 12}" text-anchor="end">{name}</text>')
        parts.append(f'<rect x="{left}" y="{y}" width="{w:.1f}" height="{bar_h - 4}" fill="#4a7bd0"/>')
        parts.append(f'<text x="{left + w + 4:.1f}" y="{y + 12}">{count}</text>')
    parts.append("</svg>\n")
    return "\n".join(parts)


def _cmd_campaign(args: argparse.Namespace) -> int:
    from rmqspec.campaign.report import (
        reproduced_line,
        search_line,
        state_coverage_line,
        summarize,
        write_report,
    )
    from rmqspec.campaign.runner import (
        CampaignError,
        CampaignInterrupted,
        CampaignOptions,
        DeterminismError,
        run_campaign,
        save_failures,
    )
    from rmqspec.properties.search_coverage import sometimes_line, vacuous_lines
    from rmqspec.spec.config import HELD_OUT_NAMES, MUTATIONS, PLANTABLE

    unknown = sorted(set(args.mutation or ()) - PLANTABLE)
    if unknown:
        raise CliError(
            f"--mutation: unknown {unknown}; accepted: {sorted(MUTATIONS)} and the held-out {list(HELD_OUT_NAMES)}"
        )
    if args.runs is None and args.duration is None:
        args.duration = 120.0
    if args.out is None:
        if args.resume:
            raise CliError("--resume needs --out DIR: the campaign directory to continue")
        args.out = time.strftime("rmqspec-out/campaign-%Y%m%d-%H%M%S")  # a fresh campaign each time
    out = Path(args.out)
    store = Path(args.store)
    interactive = sys.stderr.isatty()

    def progress(line: str) -> None:
        print(("\r" if interactive else "") + line, end="" if interactive else "\n", file=sys.stderr, flush=True)

    named = _campaign_named_config(args.config) if args.config else None
    options = CampaignOptions(
        out=out,
        named=named,
        master=args.master,
        runs=args.runs,
        duration=args.duration,
        steps=args.steps,
        seed=args.seed,
        batch_size=args.batch_size,
        resume=args.resume,
        lockstep=not args.no_lockstep,
        liveness=not args.no_liveness,
        coverage_every=args.coverage_every,
        mutations=frozenset(args.mutation or ()),
        search=args.search,
        corpus=None if args.corpus is None else Path(args.corpus),
        progress=progress,
    )
    try:
        result = run_campaign(options)
    except CampaignError as err:
        raise CliError(str(err)) from None
    except CampaignInterrupted as err:  # main() prints it: what is saved, and this command to resume
        if interactive:
            print(file=sys.stderr)  # end the progress line
        err.resume_command = _resume_command(args, out)
        raise
    except DeterminismError as err:
        print(f"\nrmqspec: NONDETERMINISM: {err}", file=sys.stderr)
        return EXIT_NONDETERMINISM
    if interactive:
        print(file=sys.stderr)
    try:
        saved = save_failures(result.failures, store)
        summary = summarize(result, args.master)
        report = write_report(result, summary, out, store)
    except OSError as err:  # every run is in the batches: resuming writes the results again
        raise CliError(
            f"{err.filename or out}: cannot write: {err.strerror}; every run is saved in {out / 'batches'}: make "
            f"room, then {_resume_command(args, out)}"
        ) from None
    print(
        f"rmqspec campaign on {args.master} (parallelism {summary['parallelism']}): {summary['runs']} runs, "
        f"{summary['steps']} steps in {summary['seconds']} s ({summary['steps_per_second']} steps/s)"
    )
    print(
        f"distinct abstract states: {summary['distinct_abstract_states']}; property checks: "
        f"{summary['invariant_checks']}; determinism self-check: {summary['determinism_checks']} runs repeated"
    )
    print("rules fired: " + ", ".join(f"{k} {v}" for k, v in summary["rules"].items()))
    directed = summary["directed_starts"]
    print(
        f"directed starts: {directed['runs']} runs began with a scripted prefix, "
        f"{len(directed['per_start'])} distinct starts (report.md lists them)"
    )
    live = summary["liveness"]
    if args.no_liveness:
        print("liveness at quiescence: not checked (--no-liveness)")
    else:
        print(
            f"liveness at quiescence (LIV-1..LIV-5): {live['checked']} runs quiesced, {live['reached']} reached the "
            f"horizon or settled ({live['settled']} settled early), {live['violations']} runs with a liveness violation"
        )
        harm = "; ".join(
            f"{cause} in {h['runs']} runs ({', '.join(f'{vid} {n}' for vid, n in h['checks'].items())})"
            for cause, h in live["harm"].items()
        )
        print(f"liveness harm (checks failed where a shown cause explains them): {harm or 'none'}")
    f = summary["fates"]
    _print_fates(f["fates"], f["harm"], f["redelivery_causes"], "at the end of the runs")
    print(_spec_coverage_line(summary["spec_branch_coverage"], out))
    print(sometimes_line(summary["sometimes_hits"]))
    for line in vacuous_lines(summary["sometimes_hits"], "the runs"):
        print(line)
    coverage_line = state_coverage_line(summary["state_coverage"])
    if coverage_line is not None:
        print(coverage_line)
    print(search_line(summary["search"], out))
    print(reproduced_line(summary))
    if result.failures:
        print(f"violations: {len(result.failures)} distinct (saved to {store}):")
        for f in summary["failures"]:
            print(f"  {f['signature']} {f['name']}: {f['detail']} ({f['shrunk_steps']} steps)")
    else:
        print("violations: none")
    print(f"report: {report}  (runs: {out / 'runs.parquet'}, summary: {out / 'summary.json'})")
    if saved:
        print(f"failure store: {len(saved)} file(s) in {store}")
    return EXIT_OK if result.valid else EXIT_VIOLATION


def _campaign_named_config(text: str) -> Any:
    """``campaign --config``: a named configuration, or a file in its format (``rmqspec check --config``); a
    file whose Config equals a named one's is that one, bounds included (its report gets the coverage line: the
    bounds only decide which of a unit's states are counted, never what a unit does)."""
    from rmqspec.properties.exhaustive import load_named, named_configs

    named = named_configs()
    if text in named:
        return named[text]
    if not Path(text).is_file():
        raise CliError(f"--config {text}: neither a named configuration ({', '.join(named)}) nor a file")
    try:
        loaded = load_named(Path(text))
    except ConfigError as err:
        raise CliError(f"--config {err}") from None
    same = next((nc for nc in named.values() if nc.config == loaded.config), None)
    return same if same is not None else loaded


def _resume_command(args: argparse.Namespace, out: Path) -> str:
    """The command that continues an interrupted campaign: every setting the manifest pins, the same budget."""
    import shlex

    argv = ["rmqspec", "campaign", "--resume", "--out", str(out), "--master", args.master]
    argv += ["--runs", str(args.runs)] if args.runs is not None else ["--duration", f"{args.duration:g}"]
    argv += ["--steps", str(args.steps), "--seed", str(args.seed), "--batch-size", str(args.batch_size)]
    argv += ["--coverage-every", str(args.coverage_every), "--store", str(args.store)]
    argv += ["--no-lockstep"] * args.no_lockstep + ["--no-liveness"] * args.no_liveness
    argv += ["--config", args.config] if args.config else []
    for mutation in sorted(set(args.mutation or ())):
        argv += ["--mutation", mutation]
    return shlex.join(argv)


def _spec_coverage_line(figures: dict[str, Any] | None, out: Path) -> str:
    if figures is None:
        return "spec/ branch coverage: not measured (--coverage-every 0, or coverage.py missing on the executors)"
    excluded = ", ".join(f"{c} {n}" for c, n in figures["excluded_by_category"].items()) or "none"
    stale = f"; {figures['stale_exclusions']} STALE exclusions" if figures["stale_exclusions"] else ""
    other = figures.get("measured_on_other_source", 0)
    elsewhere = ""
    if other:
        elsewhere = f" ({other} more measured on other spec/ source, left out: spec/ changed during the run)"
    return (
        f"spec/ branch coverage: {figures['reached']}/{figures['reachable']} reachable branches reached "
        f"({figures['percent']} %) in {figures['measured_runs']} measured runs{elsewhere}; "
        f"excluded by design: {excluded}; "
        f"{figures['unreached']} unreached{stale} (rmqspec coverage --campaign {out})"
    )


# --- branch coverage of spec/ (docs/campaign.md, "Branch coverage") ------------------------------
COVERAGE_EPILOG = """\
A branch is an arc of coverage.py's branch coverage in spec/*.py: from an if/elif/for/while/match line
to one of its possible next lines. Reached means executed at least once by the measured runs (not
verified). Excluded branches are those rmqspec/coverage_exclusions.py lists as unreachable by a default
campaign, each with its reason (mutation-only, validation, defensive, ...); an exclusion that matches
another number of branches than it claims is stale, listed, and not applied.

With --campaign DIR: the campaign's coverage.json (or, if it has none, its batches); with --from FILE:
a coverage.json, e.g. the test suite's (RMQSPEC_COVERAGE=1 make test writes rmqspec-out/test-coverage.json);
otherwise a campaign with the given budget is run first (default: the default campaign, 120 s).

exit codes: 0 printed (the campaign found no violation); 1 the campaign it ran found a violation;
2 bad input (a directory without coverage, an unreadable coverage.json: the message names the file and field);
3 an internal error."""


def _cmd_coverage(args: argparse.Namespace) -> int:
    from rmqspec.spec_coverage import CoverageFileError, campaign_document, describe, load_document, reanalyze

    code = EXIT_OK
    if args.campaign or args.from_file:
        path = Path(args.from_file) if args.from_file else Path(args.campaign) / "coverage.json"
    else:
        out = Path(args.out) if args.out else Path(time.strftime("rmqspec-out/coverage-%Y%m%d-%H%M%S"))
        argv = ["campaign", "--out", str(out), "--master", args.master, "--coverage-every", str(args.coverage_every)]
        argv += ["--runs", str(args.runs)] if args.runs else ["--duration", str(args.duration or 120.0)]
        code = main(argv)
        if code not in (EXIT_OK, EXIT_VIOLATION):
            return code
        path = out / "coverage.json"
    try:
        if args.campaign and not path.exists():  # an interrupted campaign: its batches hold the arcs
            document = _coverage_from_batches(Path(args.campaign), campaign_document)
        else:
            document = reanalyze(load_document(path))
    except CoverageFileError as err:
        raise CliError(str(err)) from None
    if args.json:
        print(json.dumps({k: v for k, v in document.items() if k != "arcs"}, indent=2))
    else:
        print(describe(document, limit=args.limit))
    return code


def _coverage_from_batches(directory: Path, campaign_document: Any) -> dict[str, Any]:
    from rmqspec.campaign.runner import CampaignError, _load_batches
    from rmqspec.spec_coverage import CoverageFileError

    try:
        rows = [row for rows in _load_batches(directory / "batches").values() for row in rows]
    except CampaignError as err:
        raise CoverageFileError(str(err)) from None
    if not any(row.get("spec_arcs") is not None for row in rows):
        raise CoverageFileError(
            f"{directory / 'coverage.json'}: no such file, and no run in {directory / 'batches'} has field "
            "'spec_arcs' (a campaign run with --coverage-every 0, or not a campaign directory)"
        )
    document: dict[str, Any] = campaign_document(rows, f"campaign {directory} (from its batches)")
    return document


def _cmd_bench(args: argparse.Namespace) -> int:
    from rmqspec.bench import run_bench

    for line in run_bench(args.steps, args.reference_steps):
        print(line, flush=True)
    return EXIT_OK


# --- trace conformance (docs/oracle.md, "Trace conformance") ------------------------------------
CHECK_TRACE_EPILOG = """\
A trace is JSON Lines: a header line {"format": "rmqspec-trace", "version": 1, "config": {...},
"producer": "..."} and one event per line {"step": n, "action": {...}, "observed": {...}}
(docs/trace.schema.json). The trace is replayed through the model; the first event whose action the
model does not enable, or after which an observed value differs from the model's state, is the
divergence. Every invariant is checked on every replayed step.

exit codes: 0 the trace conforms and no invariant failed; 1 a divergence or an invariant violation;
2 the trace cannot be read (the error names the line and the field); 3 an internal error."""


def _cmd_check_trace(args: argparse.Namespace) -> int:
    from rmqspec.properties.trace import TraceFormatError, check_trace

    started = time.monotonic()
    try:
        report = check_trace(args.file, invariants=not args.no_invariants, max_violations=args.max_violations)
    except OSError as err:
        raise CliError(f"{args.file}: cannot read: {err.strerror or err}") from None
    except TraceFormatError as err:
        if args.json:
            error = {"line": err.line, "field": err.field, "message": err.message}
            print(json.dumps({"valid": False, "file": args.file, "error": error}))
        raise CliError(f"{args.file}: {err}") from None
    if args.junit:
        from rmqspec import junit

        _write_junit(args.junit, f"check-trace {args.file}", junit.trace_cases(report), time.monotonic() - started)
    if args.json:
        print(json.dumps({"file": args.file, **report.to_json()}, indent=2))
    else:
        print(f"{args.file}: {report.describe()}")
    return EXIT_OK if report.valid else EXIT_VIOLATION


def _write_junit(path: str, suite: str, cases: list[Any], seconds: float) -> None:
    from rmqspec import junit

    try:
        junit.write(path, suite, cases, seconds)
    except OSError as err:
        raise CliError(f"{path}: cannot write the JUnit report (--junit): {err.strerror or err}") from None


def _cmd_record_trace(args: argparse.Namespace) -> int:
    from rmqspec.properties.trace import explorer_actions, write_trace

    config = load_config(args.config) if args.config else Config()
    observe_with = None
    if args.plant:
        try:
            observe_with = replace(config, mutations=config.mutations | frozenset(args.plant))
        except ConfigError as err:
            raise CliError(f"--plant: {err}") from None
    actions = explorer_actions(observe_with or config, args.seed, args.steps)
    producer = args.producer or (
        f"rmqspec {__version__} model, explorer seed {args.seed}"
        + (f", planted {', '.join(sorted(args.plant))}" if args.plant else "")
    )
    try:
        events = write_trace(config, actions, args.out, producer=producer, observe_with=observe_with)
    except OSError as err:
        raise CliError(f"{args.out}: cannot write: {err.strerror or err}") from None
    print(f"wrote {events} events to {args.out}")
    return EXIT_OK


def _cmd_bench_trace(args: argparse.Namespace) -> int:
    from rmqspec.bench_trace import run_bench_trace

    for line in run_bench_trace(tuple(args.events), args.max_seconds):
        print(line, flush=True)
    return EXIT_OK


def _add_trace_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    check = sub.add_parser(
        "check-trace",
        help="check an implementation's trace against the model (exit 0 conforms, 1 diverges, 2 unreadable)",
        description="Check a trace (JSON Lines) written by an implementation against the model.",
        epilog=CHECK_TRACE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    check.add_argument("file", help="the trace: JSON Lines, header first")
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    check.add_argument("--no-invariants", action="store_true", help="check conformance only (faster)")
    check.add_argument(
        "--max-violations", type=positive_int, default=50, help="violations listed (all are counted; default 50)"
    )
    check.add_argument("--junit", metavar="FILE", help="also write a JUnit XML report: a test case per property")
    check.set_defaults(func=_cmd_check_trace)
    record = sub.add_parser(
        "record-trace",
        help="write the explorer's seeded walk of the model as a trace",
        description="Write the explorer's walk with this seed (the walk `rmqspec run --config` takes) as a trace "
        "with full observations; like the explorer's, it stops after the first invariant violation. "
        "With --plant, the walk and the observations come from the model with that planted bug while "
        "the header names the configuration without it: the trace of a faulty implementation.",
    )
    record.add_argument("--config", help="a JSON file of Config fields (default: Config())")
    record.add_argument("--seed", type=int, default=0, help="explorer seed (default 0)")
    record.add_argument("--steps", type=positive_int, default=100, help="at most this many events (default 100)")
    record.add_argument("--plant", action="append", help="observe with a planted bug (repeatable)")
    record.add_argument("--producer", help="the header's producer text")
    record.add_argument("--out", required=True, help="where to write the trace")
    record.set_defaults(func=_cmd_record_trace)
    bench = sub.add_parser("bench-trace", help="print check-trace events per second against JSON parsing")
    bench.add_argument(
        "--events",
        type=positive_int,
        nargs="+",
        default=[10_000, 100_000, 1_000_000],
        help="trace sizes (default 10000 100000 1000000)",
    )
    bench.add_argument(
        "--max-seconds",
        type=positive_seconds,
        default=60.0,
        help="skip a size whose full check is predicted to take longer (default 60)",
    )
    bench.set_defaults(func=_cmd_bench_trace)


def _cmd_bench_campaign(args: argparse.Namespace) -> int:
    from rmqspec.campaign.bench import BenchOptions, run_campaign_bench
    from rmqspec.campaign.runner import CampaignError
    from rmqspec.spec.config import MUTATIONS

    unknown = sorted(set(args.mutation or ()) - set(MUTATIONS))
    if unknown:
        raise CliError(f"--mutation: unknown {unknown}; accepted: {sorted(MUTATIONS)}")
    if args.budget <= 0 or args.detect_budget <= 0:
        raise CliError("--budget and --detect-budget must be positive numbers of seconds")
    options = BenchOptions(
        budget=args.budget,
        steps=args.steps,
        batch_size=args.batch_size,
        lockstep=not args.no_lockstep,
        detect_budget=args.detect_budget,
        detect_seeds=args.detect_seeds,
        mutations=tuple(args.mutation or MUTATIONS),
        standalone=args.standalone,
        tmpdir=args.tmpdir,
        say=lambda line: print(f"... {line}", file=sys.stderr, flush=True),
    )
    command = "rmqspec bench-campaign " + " ".join(
        [
            f"--budget {args.budget:g}",
            f"--steps {args.steps}",
            f"--batch-size {args.batch_size}",
            f"--detect-budget {args.detect_budget:g}",
            f"--detect-seeds {args.detect_seeds}",
            *(["--no-lockstep"] if args.no_lockstep else []),
            *(["--standalone"] if args.standalone else []),
            *([f"--tmpdir {args.tmpdir}"] if args.tmpdir else []),
            *(f"--mutation {m}" for m in args.mutation or ()),
        ]
    )
    try:
        lines = run_campaign_bench(options, command)
    except CampaignError as err:
        raise CliError(str(err)) from None
    for line in lines:
        print(line, flush=True)
    return EXIT_OK


def _cmd_bench_search(args: argparse.Namespace) -> int:
    from rmqspec.campaign.runner import CampaignError
    from rmqspec.campaign.search_bench import SearchBenchOptions, main_time, report_lines, run_search_bench
    from rmqspec.spec.config import MUTATIONS

    unknown = sorted(set(args.mutation or ()) - set(MUTATIONS))
    if unknown:
        raise CliError(f"--mutation: unknown {unknown}; accepted: {sorted(MUTATIONS)}")
    if args.runs is None and args.duration is None:
        args.duration = 120.0
    if args.duration is not None and not (0 < args.duration < float("inf")):
        raise CliError(f"--duration: got {args.duration}; accepted: a positive, finite number of seconds")
    out = Path(args.out or main_time())
    options = SearchBenchOptions(
        out=out,
        master=args.master,
        duration=args.duration,
        runs=args.runs,
        steps=args.steps,
        seed=args.seed,
        mutations=frozenset(args.mutation or ()),
    )
    try:
        figures = run_search_bench(options, lambda line: print(f"... {line}", file=sys.stderr, flush=True))
    except CampaignError as err:
        raise CliError(str(err)) from None
    for line in report_lines(figures, out):
        print(line, flush=True)
    return EXIT_OK


# --- history checking (docs/oracle.md, "History checking") --------------------------------------
CHECK_HISTORY_EPILOG = """\
A history is JSON Lines (docs/history.schema.json): a header line {"format": "rmqspec-history",
"version": 1, "mode": "CLUSTERING"|"BROADCASTING", "consumption": "concurrent"|"orderly", "rocketmq":
"4.9.8"|"5.x", "group": "G"}, then one event per line with a nondecreasing "time" and a "type":
produce, deliver, commit, skip, join, leave, view or own. With --spark, a Parquet history (one row per
line, with a seq column) is read too. The report lists lost, duplicated, unexpected,
commit_decreased, commit_beyond_max, commit_negative, double_owned, unowned and skipped entries,
counts per queue, every message's fate (as the model names them, with the fault harm among them),
the redeliveries per cause, and which anomalies the mode's allow-list tolerates and why; a
redelivery or a consumeFromWhere skip needs a cause the history shows (docs/oracle.md).

exit codes: 0 valid (every anomaly found is tolerated); 1 an anomaly the mode does not tolerate;
2 the history cannot be read (the error names the line and the field); 3 an internal error."""


def _cmd_check_history(args: argparse.Namespace) -> int:
    from rmqspec.properties.history import ANOMALIES, HistoryError, check_history, describe

    started = time.monotonic()
    try:
        if args.spark:
            from rmqspec.history_spark import check_history_spark

            report = check_history_spark(args.file, master=args.master)
        else:
            report = check_history(args.file)
    except OSError as err:
        raise CliError(f"{args.file}: cannot read: {err.strerror or err}") from None
    except HistoryError as err:
        if args.json:
            error = {"line": err.line, "field": err.field, "message": err.message}
            print(json.dumps({"valid": False, "file": args.file, "error": error}))
        raise CliError(f"{args.file}: {err}") from None
    if args.junit:
        from rmqspec import junit

        cases = junit.history_cases(report, ANOMALIES)
        _write_junit(args.junit, f"check-history {args.file}", cases, time.monotonic() - started)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"{args.file}: {describe(report, limit=args.limit)}")
    return EXIT_OK if report["valid"] else EXIT_VIOLATION


def _cmd_bench_history(args: argparse.Namespace) -> int:
    from rmqspec.bench_history import run_bench_history

    for line in run_bench_history(tuple(args.events)):
        print(line, flush=True)
    return EXIT_OK


def _cmd_bench_conform(args: argparse.Namespace) -> int:
    from rmqspec.bench_conform import run_bench_conform
    from rmqspec.conform.protocol import COMPONENTS_V1

    components = tuple(c.strip() for c in args.components.split(",")) if args.components else COMPONENTS_V1
    for line in run_bench_conform(args.sequences, args.steps, one_core=not args.all_cores, components=components):
        print(line, flush=True)
    return EXIT_OK


def _cmd_bench_cluster(args: argparse.Namespace) -> int:
    from rmqspec.cluster.bench import BenchError, run_bench_cluster

    try:
        for line in run_bench_cluster(args.seconds, args.in_flight, args.consumers):
            print(line, flush=True)
    except (BenchError, OSError) as err:
        raise CliError(f"bench-cluster: {err}") from None
    return EXIT_OK


def _add_history_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    check = sub.add_parser(
        "check-history",
        help="check a black-box history for lost, duplicated, ... messages (exit 0 valid, 1 anomalies, 2 unreadable)",
        description="Check a history of what users of a consumer group saw, in Jepsen's anomaly vocabulary.",
        epilog=CHECK_HISTORY_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    check.add_argument("file", help="the history: JSON Lines, header first (Parquet with --spark)")
    check.add_argument("--json", action="store_true", help="print the full report as JSON")
    check.add_argument("--spark", action="store_true", help="read and analyse with PySpark (JSON Lines or Parquet)")
    check.add_argument("--master", default="local[*]", help="Spark master URL with --spark (default local[*])")
    check.add_argument("--limit", type=positive_int, default=5, help="entries shown per anomaly class (default 5)")
    check.add_argument("--junit", metavar="FILE", help="also write a JUnit XML report: a test case per anomaly")
    check.set_defaults(func=_cmd_check_history)
    bench = sub.add_parser("bench-history", help="print check-history events per second against JSON parsing")
    bench.add_argument(
        "--events",
        type=positive_int,
        nargs="+",
        default=[10_000, 100_000, 1_000_000],
        help="history sizes (default 10000 100000 1000000)",
    )
    bench.set_defaults(func=_cmd_bench_history)


SERVE_CLUSTER_EPILOG = """\
On 127.0.0.1, a name server (--port) and a broker (--broker-port) speaking RocketMQ 4.x's remoting
protocol, backed by the reference implementation; point a client's name-server address at the first.
--history writes what the broker saw (produce, commit, join, leave) in check-history's format; merge it
with the listeners' deliver lines (rmqspec merge-history) and judge with rmqspec check-history
(docs/oracle.md, "Checking an unmodified client against serve-cluster").

exit codes: 0 stopped after --duration; 2 bad arguments, a bad fault script or a port in use; 3 internal error;
130 SIGINT; 143 SIGTERM (the history is flushed and closed on each). With --judge, the verdict once stopped,
however stopped: 0 valid, 1 an anomaly not tolerated, 2 an unreadable file."""


def _cmd_serve_cluster(args: argparse.Namespace) -> int:
    from rmqspec.cluster.faults import FaultScriptError, load_faults
    from rmqspec.cluster.run import serve_cluster

    if args.judge and args.history is None:
        raise CliError("serve-cluster: --judge needs --history (the broker's side of the history to judge)")
    faults = None
    if args.faults is not None:
        try:
            faults, drawn = load_faults(args.faults, args.seed, args.duration, args.queues)
        except FaultScriptError as err:
            raise CliError(str(err)) from None
        if drawn is not None:
            _write_drawn_faults(args, drawn)
    try:
        code = serve_cluster(
            args.port,
            args.broker_port,
            args.rocketmq,
            args.history,
            args.duration,
            args.group,
            args.queues,
            args.store,
            faults,
            args.speed,
        )
    except OSError as err:
        raise CliError(f"serve-cluster: cannot listen or write: {err}") from None
    if not args.judge:
        return code
    return _judge_cluster_run(args.history, [Path(f) for f in args.judge])


def _write_drawn_faults(args: argparse.Namespace, drawn: dict[str, Any]) -> None:
    """A profile's drawn script, written beside the history (``--faults FILE`` replays it) or, without a history, on
    stderr, with one line saying what was drawn."""
    text = json.dumps(drawn, indent=1)
    where = "below"
    if args.history is not None:
        path = args.history.with_name(args.history.stem + ".faults.json")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text + "\n", encoding="utf-8")
        except OSError as err:
            raise CliError(f"serve-cluster: cannot write the drawn fault script {path}: {err}") from None
        where = str(path)
    kinds = ", ".join(f"{e['fault']} at {e['after_seconds']:g} s" for e in drawn["faults"]) or "no faults"
    print(f"serve-cluster: profile {args.faults}, seed {args.seed}: {kinds}; the script: {where}", file=sys.stderr)
    if args.history is None:
        print(text, file=sys.stderr)


def _judge_cluster_run(history: Path, listeners: list[Path]) -> int:
    """serve-cluster --judge: merge the broker's history with the listeners' files next to it and check it."""
    from rmqspec.cluster.history_log import merge_histories
    from rmqspec.properties.history import HistoryError, check_history, describe

    merged = history.with_name(history.stem + ".merged.jsonl")
    try:
        merge_histories(history, listeners, merged)
        report = check_history(merged)
    except HistoryError as err:
        raise CliError(f"{merged}: {err}") from None
    except (OSError, ValueError) as err:
        raise CliError(f"serve-cluster --judge: {err}") from None
    print(f"{merged}: {describe(report)}")
    return EXIT_OK if report["valid"] else EXIT_VIOLATION


def _cmd_merge_history(args: argparse.Namespace) -> int:
    from rmqspec.cluster.history_log import merge_histories

    try:
        count = merge_histories(args.broker, list(args.listeners), args.out)
    except (OSError, ValueError) as err:
        raise CliError(str(err)) from None
    print(f"{args.out}: {count} events")
    return EXIT_OK


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {value}")
    return value


def _speed(text: str) -> float:
    value = _positive_float(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a factor of at least 1, got {value:g}")
    return value


def _add_cluster_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = sub.add_parser(
        "serve-cluster",
        help="a name server and broker on RocketMQ's wire protocol, backed by the reference, for real clients",
        description="Serve RocketMQ 4.x clients with the reference implementation and log what the broker sees.",
        epilog=SERVE_CLUSTER_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument("--port", type=_non_negative, default=9876, help="name server port (default 9876; 0: any)")
    serve.add_argument("--broker-port", type=_non_negative, default=10911, help="broker port (default 10911; 0: any)")
    serve.add_argument(
        "--version", dest="rocketmq", choices=("4.9.8", "5.x"), default="4.9.8", help="broker behaviour to implement"
    )
    serve.add_argument("--history", type=Path, metavar="FILE", help="write the broker's history here")
    serve.add_argument("--group", help="the consumer group the history is about (default: the first one seen)")
    serve.add_argument("--duration", type=_positive_float, metavar="S", help="stop after S seconds (exit 0)")
    serve.add_argument("--queues", type=positive_int, default=4, help="queues of a topic created on lookup (default 4)")
    serve.add_argument("--store", type=Path, metavar="DIR", help="the broker's store root (default: a temporary one)")
    serve.add_argument(
        "--faults",
        metavar="FILE|PROFILE",
        help='a fault script ({"faults": [...]}) or a profile to draw one from with --seed: '
        "calm, restarts, requests, membership, offsets, mixed (docs/oracle.md)",
    )
    serve.add_argument(
        "--seed", type=_non_negative, default=0, help="the seed a --faults PROFILE draws its script with (default 0)"
    )
    serve.add_argument(
        "--speed",
        type=_speed,
        default=1.0,
        metavar="F",
        help="run the schedule's delay levels (retries, sendMessageBack's levels) F times faster (default 1); the "
        "clients' timers, held pulls and the channel expiry stay on the wall clock (docs/oracle.md)",
    )
    serve.add_argument(
        "--judge",
        action="append",
        metavar="DELIVERIES",
        help="at the end, merge --history with this listener file (repeatable) into <history>.merged.jsonl, "
        "check it and exit with the verdict (0 valid, 1 not)",
    )
    serve.set_defaults(func=_cmd_serve_cluster)
    bench = sub.add_parser(
        "bench-cluster",
        help="messages per second through serve-cluster: sequential sends against pipelined sends with consumers",
    )
    bench.add_argument("--seconds", type=positive_seconds, default=20.0, help="the budget (default 20)")
    bench.add_argument("--in-flight", type=positive_int, default=64, help="pipelined sends on the wire (default 64)")
    bench.add_argument("--consumers", type=positive_int, default=3, help="consumers, one queue each (default 3)")
    bench.set_defaults(func=_cmd_bench_cluster)
    merge = sub.add_parser(
        "merge-history",
        help="merge serve-cluster's history with listeners' deliver lines into one history, by time",
    )
    merge.add_argument("broker", type=Path, help="the history serve-cluster wrote (header first)")
    merge.add_argument("listeners", type=Path, nargs="*", help="files of deliver lines written by listener helpers")
    merge.add_argument("--out", type=Path, required=True, help="the merged history")
    merge.set_defaults(func=_cmd_merge_history)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rmqspec", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--version", action="version", version=f"rmqspec {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="explore the model and print a summary (the main job)")
    run.add_argument("--config", help="a JSON file of Config fields (default: the built-in set)")
    run.add_argument("--walks", type=positive_int, default=40, help="random walks per configuration (default 40)")
    run.add_argument("--steps", type=positive_int, default=400, help="steps per walk (default 400)")
    run.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    run.add_argument("--mutation", action="append", help="plant a known bug (repeatable); see spec/config.py")
    run.add_argument(
        "--out",
        default="rmqspec-out",
        help="where to write run-summary.json and counterexample.svg (default rmqspec-out)",
    )
    run.add_argument(
        "--no-liveness",
        action="store_true",
        help="do not quiesce each walk's end state and check liveness (LIV-1..LIV-5; on by default)",
    )
    run.set_defaults(func=_cmd_run)
    camp = sub.add_parser("campaign", help="a randomized campaign on Spark (the main job)")
    camp.add_argument("--master", default="local[*]", help="Spark master URL (default local[*])")
    bound = camp.add_mutually_exclusive_group()
    bound.add_argument("--runs", type=positive_int, help="number of runs")
    bound.add_argument("--duration", type=positive_seconds, help="seconds to keep starting batches (default 120)")
    camp.add_argument("--steps", type=positive_int, default=300, help="steps per run (default 300)")
    camp.add_argument("--seed", type=int, default=0, help="campaign seed: unit k uses seed+k (default 0)")
    camp.add_argument("--batch-size", type=positive_int, default=32, help="runs per Spark job (default 32)")
    camp.add_argument("--out", help="output directory (default rmqspec-out/campaign-<time>)")
    camp.add_argument(
        "--store", default="failures", help="failure store, replayed by the test suite (default failures/)"
    )
    camp.add_argument("--resume", action="store_true", help="continue the campaign in --out")
    camp.add_argument("--no-lockstep", action="store_true", help="model only, without the reference")
    camp.add_argument(
        "--no-liveness",
        action="store_true",
        help="do not quiesce each run's end state and check liveness (LIV-1..LIV-5; on by default)",
    )
    camp.add_argument("--mutation", action="append", help="plant a known bug (repeatable)")
    camp.add_argument(
        "--config",
        metavar="NAME|FILE",
        help="run every unit on this configuration (a named one of rmqspec check, or a file in its format) instead "
        "of sampled ones; for a named one the report counts the distinct states reached of its exhaustive space",
    )
    camp.add_argument(
        "--search",
        choices=("guided", "random"),
        default="guided",
        help="guided (default): keep a corpus of runs that reached new features and plan most units from it; "
        "random: every unit drawn from its seed alone",
    )
    camp.add_argument(
        "--corpus",
        metavar="DIR",
        help="start from another campaign's corpus (its <out>/corpus directory); this campaign writes its own",
    )
    camp.add_argument(
        "--coverage-every",
        type=_non_negative,
        default=COVERAGE_EVERY,
        metavar="N",
        help=f"measure spec/ branch coverage in one run in N (default {COVERAGE_EVERY}; 1 every run, 0 none)",
    )
    camp.set_defaults(func=_cmd_campaign)
    cov = sub.add_parser(
        "coverage",
        help="branch coverage of spec/: per file reached/reachable, every unreached branch, exclusions",
        description="Print which branches of the model (spec/*.py) a campaign or the test suite reached.",
        epilog=COVERAGE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    where = cov.add_mutually_exclusive_group()
    where.add_argument("--campaign", metavar="DIR", help="a campaign's output directory")
    where.add_argument("--from", dest="from_file", metavar="FILE", help="a coverage.json (campaign or test suite)")
    where.add_argument("--runs", type=positive_int, help="run a campaign of this many runs first")
    where.add_argument(
        "--duration", type=positive_seconds, help="run a campaign of this many seconds first (default 120)"
    )
    cov.add_argument("--master", default="local[*]", help="Spark master for the campaign it runs (default local[*])")
    cov.add_argument(
        "--coverage-every",
        type=_non_negative,
        default=COVERAGE_EVERY,
        metavar="N",
        help=f"in the campaign it runs, measure one run in N (default {COVERAGE_EVERY})",
    )
    cov.add_argument("--out", help="output directory of the campaign it runs (default rmqspec-out/coverage-<time>)")
    cov.add_argument("--json", action="store_true", help="print the analysis as JSON (every list in full)")
    cov.add_argument("--limit", type=positive_int, help="unreached branches listed (default: all)")
    cov.set_defaults(func=_cmd_coverage)
    bench = sub.add_parser("bench", help="print spec and reference steps per second")
    bench.add_argument("--steps", type=positive_int, default=20_000, help="spec steps to time (default 20000)")
    bench.add_argument("--reference-steps", type=positive_int, default=5_000, help="reference steps (default 5000)")
    bench.set_defaults(func=_cmd_bench)
    bc = sub.add_parser(
        "bench-campaign",
        help="campaign throughput on local[1] vs local[2], against a single-process loop, time to detect "
        "planted bugs, Spark overheads",
    )
    bc.add_argument(
        "--budget", type=positive_seconds, default=45.0, help="seconds per throughput measurement (default 45)"
    )
    bc.add_argument("--steps", type=positive_int, default=300, help="steps per run (default 300)")
    bc.add_argument("--batch-size", type=positive_int, default=32, help="runs per Spark job (default 32)")
    bc.add_argument(
        "--detect-budget", type=positive_seconds, default=20.0, help="seconds per planted bug and side (default 20)"
    )
    bc.add_argument("--detect-seeds", type=positive_int, default=3, help="campaign seeds per planted bug (default 3)")
    bc.add_argument("--mutation", action="append", help="only these planted bugs in (c) (repeatable; default all)")
    bc.add_argument("--no-lockstep", action="store_true", help="model-only runs for (a), (b) and (d) too")
    bc.add_argument(
        "--standalone", action="store_true", help="also time a 2-worker standalone cluster on 127.0.0.1 in (a)"
    )
    bc.add_argument("--tmpdir", help="TMPDIR for the reference's scratch files, e.g. /dev/shm (default: unchanged)")
    bc.set_defaults(func=_cmd_bench_campaign)
    bs = sub.add_parser(
        "bench-search",
        help="the coverage-guided campaign against the random one, side by side: features, behaviours, steps/s",
    )
    bs.add_argument("--master", default="local[*]", help="Spark master URL (default local[*])")
    bs_bound = bs.add_mutually_exclusive_group()
    bs_bound.add_argument("--runs", type=positive_int, help="runs per campaign")
    bs_bound.add_argument("--duration", type=float, help="seconds per campaign (default 120, as make run's)")
    bs.add_argument("--steps", type=positive_int, default=300, help="steps per run (default 300)")
    bs.add_argument("--seed", type=int, default=0, help="campaign seed of both (default 0)")
    bs.add_argument("--out", help="output directory (default rmqspec-out/bench-search-<time>)")
    bs.add_argument("--mutation", action="append", help="plant a known bug in both (repeatable)")
    bs.set_defaults(func=_cmd_bench_search)
    add_check_command(sub)
    add_bench_held_out(sub)
    _add_trace_commands(sub)
    _add_history_commands(sub)
    _add_cluster_commands(sub)
    _add_conform_commands(sub)
    bench = sub.add_parser(
        "bench-conform",
        help="print conform's requests per second against serve-reference, its ratio to a pure replay, and RSS",
    )
    bench.add_argument("--sequences", type=positive_int, default=10_000, help="generated sequences (default 10,000)")
    bench.add_argument("--steps", type=positive_int, default=40, help="operations per sequence, at most (default 40)")
    bench.add_argument("--all-cores", action="store_true", help="do not pin conform and the SUT to one core")
    bench.add_argument(
        "--components", help="comma-separated components to generate for (default: the seven of protocol 1)"
    )
    bench.set_defaults(func=_cmd_bench_conform)
    return parser


# --- live conformance (docs/oracle.md, "Live conformance") --------------------------------------
CONFORM_EPILOG = """\
The system under test is a program that reads JSON-line requests on stdin and writes JSON-line
replies on stdout (docs/oracle.md, "The adapter protocol"); `rmqspec serve-reference` is one.
conform generates seeded request sequences over the components the SUT declares, sends
each request to the SUT and to the reference, and stops at the first reply that differs. The
finding is shrunk and saved as a script that `--replay` runs again.

A finding is named by its fingerprint: the operation and, for each differing field, its path and
how it differs (store.clone table[T/1].offset:changed); the values are shown, not part of it.
--known FILE lists differences a team has accepted, each with its reason: a fingerprint, or a field
path (* per segment) with optional patterns on the values (docs/oracle.md); they are reported and the
run goes on. --max-findings N collects up to N findings of distinct fingerprints before stopping, each
with its count, shrunk (keeping its fingerprint) and saved. An adapter may answer an operation or
result fields as unsupported: they are then not generated or not compared, and the report says so.

exit codes: 0 every reply agreed (or differed only as --known accepts); 1 a divergence; 2 bad input
(bad arguments, an unreadable --known file, or a script that is unreadable or has a request the
reference rejects); 3 an internal error; 5 the SUT crashed, hung, wrote garbage, answered the
wrong request or wrote a line no request asked for."""


def _cmd_conform(args: argparse.Namespace) -> int:
    from rmqspec.conform.driver import (
        KnownDifferences,
        KnownError,
        ScriptError,
        SutBroke,
        conform,
        describe,
        replay_script,
    )
    from rmqspec.conform.sut import SutFailure

    out = Path(args.out) if args.out else Path("rmqspec-out") / time.strftime("conform-%Y%m%d-%H%M%S")
    components = tuple(c.strip() for c in args.components.split(",")) if args.components else None

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        known = KnownDifferences.read(args.known) if args.known else None
    except KnownError as err:
        raise CliError(str(err)) from None
    try:
        if args.replay:
            result = replay_script(args.sut, args.replay, out, timeout=args.timeout, known=known)
        else:
            result = conform(
                args.sut,
                out,
                examples=args.examples,
                steps=args.steps,
                seed=args.seed,
                timeout=args.timeout,
                shrink_seconds=args.shrink_seconds,
                components=components,
                progress=None if args.json else progress,
                known=known,
                max_findings=args.max_findings,
            )
    except SutFailure as failure:  # at start-up: nothing could be checked
        if args.json:
            print(json.dumps({"valid": False, "sut": args.sut, "sutFailure": failure.to_json()}, indent=2))
        print(f"rmqspec: {failure}", file=sys.stderr)
        return EXIT_SUT_FAILED
    except ScriptError as err:
        raise CliError(str(err)) from None
    except ValueError as err:
        raise CliError(str(err)) from None
    if args.junit:
        from rmqspec import junit

        _write_junit(args.junit, f"conform {args.sut}", junit.conform_cases(result), result.seconds)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        print(describe(result))
    if any(isinstance(f, SutBroke) for f in result.findings):
        return EXIT_SUT_FAILED
    return EXIT_OK if result.valid else EXIT_VIOLATION


def _cmd_serve_reference(args: argparse.Namespace) -> int:
    from rmqspec.conform.reference_adapter import serve

    serve(sys.stdin, sys.stdout, version=args.version, plant=args.plant)
    return EXIT_OK


def _add_conform_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from rmqspec.conform.protocol import COMPONENTS, VERSIONS
    from rmqspec.conform.reference_adapter import ALL_PLANTS as PLANTS

    conform = sub.add_parser(
        "conform",
        help="check a live implementation through the adapter protocol (exit 0 conforms, 1 diverges, 5 SUT failed)",
        description="Drive an implementation (any program speaking the adapter protocol) against the reference.",
        epilog=CONFORM_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    conform.add_argument(
        "--sut", required=True, help='the command that starts the adapter, e.g. "java -jar adapter.jar"'
    )
    conform.add_argument("--replay", metavar="FILE", help="run a saved script instead of generating requests")
    conform.add_argument("--examples", type=positive_int, default=200, help="generated request sequences (default 200)")
    conform.add_argument("--steps", type=positive_int, default=40, help="operations per sequence, at most (default 40)")
    conform.add_argument("--seed", type=int, default=0, help="generation seed; the same seed sends the same requests")
    conform.add_argument(
        "--timeout", type=positive_seconds, default=10.0, help="seconds to wait for each reply (default 10)"
    )
    conform.add_argument(
        "--shrink-seconds", type=seconds, default=60.0, help="time budget for shrinking a finding (default 60)"
    )
    conform.add_argument("--components", help=f"comma-separated subset to check (of {', '.join(COMPONENTS)})")
    conform.add_argument("--out", help="where the script and the SUT's stderr go (default rmqspec-out/conform-<time>)")
    conform.add_argument("--json", action="store_true", help="print the result as JSON")
    conform.add_argument(
        "--known",
        metavar="FILE",
        help="accepted differences, by fingerprint or field path, each with a reason (JSON Lines, docs/oracle.md)",
    )
    conform.add_argument(
        "--max-findings",
        type=positive_int,
        default=1,
        help="findings of distinct fingerprints to collect before stopping, each shrunk and saved (default 1)",
    )
    conform.add_argument(
        "--junit", metavar="FILE", help="also write a JUnit XML report: a test case per finding and per clean component"
    )
    conform.set_defaults(func=_cmd_conform)

    serve = sub.add_parser(
        "serve-reference",
        help="serve the reference implementation over the adapter protocol on stdin/stdout",
        description="Answer adapter-protocol requests (JSON lines on stdin) with the reference implementation.",
    )
    serve.add_argument("--version", choices=VERSIONS, default=VERSIONS[0], help="RocketMQ version to implement")
    serve.add_argument(
        "--plant",
        choices=sorted(PLANTS),
        help="behave wrongly in one documented way, to test an oracle: "
        + "; ".join(f"{k}: {v}" for k, v in sorted(PLANTS.items())),
    )
    serve.set_defaults(func=_cmd_serve_reference)


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
        return code
    except (CliError, InputError) as err:  # InputError: a JSON input, named by the reader that refused it
        print(f"rmqspec: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:  # ``rmqspec ... | head``: the reader has what it wanted; files already written stay
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's last flush of stdout cannot raise again
        return EXIT_OUTPUT_CLOSED
    except OSError as err:  # a file that cannot be written (a full disk, no permission): named, never a traceback
        if err.filename is None:
            print(f"rmqspec: internal error: {type(err).__name__}: {err} (please report this)", file=sys.stderr)
            return EXIT_INTERNAL
        print(f"rmqspec: error: {err.filename}: {err.strerror}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt as err:  # a campaign's (CampaignInterrupted) says what it saved and how to resume
        print(f"rmqspec: {str(err) or 'interrupted'}", file=sys.stderr)
        return int(getattr(err, "exit_code", 130))  # 143 for a campaign's SIGTERM
    except Exception as err:  # never a bare traceback: say what broke and where to report it
        print(f"rmqspec: internal error: {type(err).__name__}: {err} (please report this)", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
