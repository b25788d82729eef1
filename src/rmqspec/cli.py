"""The ``rmqspec`` command.

``rmqspec run`` explores the model on a set of configurations and prints a readable summary
(steps, actions fired, distinct states, invariants checked, violations); ``rmqspec bench`` prints
throughput figures. Exit codes: 0 all properties held, 1 a property was violated, 2 bad input
(a configuration file that cannot be read or holds a bad value), 3 an internal error. Every error
is one line on stderr that names what was wrong; no command prints a bare traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

from rmqspec import __version__
from rmqspec.spec.config import (
    AVG_BY_CIRCLE,
    BROADCASTING,
    CONSISTENT_HASH,
    FROM_FIRST,
    FROM_TIMESTAMP,
    Config,
    ConfigError,
)

EXIT_OK, EXIT_VIOLATION, EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_NONDETERMINISM = 0, 1, 2, 3, 4

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
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise CliError(f"{path}: cannot read: {err.strerror}") from None
    try:
        values = json.loads(text)
    except json.JSONDecodeError as err:
        raise CliError(f"{path}: line {err.lineno}: not JSON: {err.msg}") from None
    if not isinstance(values, dict):
        raise CliError(f"{path}: expected a JSON object of Config fields, got {type(values).__name__}")
    try:
        return Config.from_mapping(values, where=path)
    except ConfigError as err:
        raise CliError(f"{path}: {err}" if not str(err).startswith(path) else str(err)) from None


def _cmd_run(args: argparse.Namespace) -> int:
    from rmqspec.properties.explore import explore, shrink

    configs = {Path(args.config).stem: load_config(args.config)} if args.config else dict(DEFAULT_CONFIGS)
    if args.mutation:
        try:
            configs = {name: replace(c, mutations=frozenset(args.mutation)) for name, c in configs.items()}
        except ConfigError as err:
            raise CliError(f"--mutation: {err}") from None
    out_dir = Path(args.out)
    total_actions: Counter[str] = Counter()
    rows = []
    failures = []
    started = time.perf_counter()
    for k, (name, config) in enumerate(configs.items(), 1):
        print(f"[{k}/{len(configs)}] {name}: {args.walks} walks x {args.steps} steps ...", file=sys.stderr, flush=True)
        result = explore(config, args.walks, args.steps, first_seed=args.seed, track_states=True)
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
            }
        )
        failures += [(name, c) for c in result.counterexamples]
    elapsed = time.perf_counter() - started
    summary = {
        "valid": not failures,
        "version": __version__,
        "seconds": round(elapsed, 2),
        "configs": rows,
        "actions": dict(total_actions.most_common()),
    }
    _print_summary(summary)
    for name, c in failures:
        small = shrink(c)
        print(f"\nCounterexample in {name} (shrunk from {len(c.actions)} to {len(small.actions)} steps):")
        print(small.describe())
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "run-summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
        (out_dir / "actions.svg").write_text(_bar_chart_svg(total_actions, "Actions fired"), encoding="utf-8")
    except OSError as err:
        raise CliError(f"{out_dir}: cannot write results: {err.strerror}") from None
    print(f"\nwrote {out_dir / 'run-summary.json'} and {out_dir / 'actions.svg'}")
    return EXIT_OK if not failures else EXIT_VIOLATION


def _print_summary(summary: dict[str, object]) -> None:
    from rmqspec.spec.invariants import ACTION_PROPERTIES, INVARIANTS

    rows: list[dict[str, object]] = summary["configs"]  # type: ignore[assignment]
    print(f"rmqspec {summary['version']} model run ({summary['seconds']} s)")
    print(f"{'config':<28}{'walks':>7}{'steps':>10}{'states':>10}{'checks':>12}{'redeliv.':>10}  violations")
    for r in rows:
        violations = r["violations"]
        shown = "none" if not violations else ", ".join(sorted({v["id"] for v in violations}))  # type: ignore[attr-defined]
        print(
            f"{r['config']:<28}{r['walks']:>7}{r['steps']:>10}{r['distinct_states']:>10}"
            f"{r['invariant_checks']:>12}{r['redeliveries']:>10}  {shown}"
        )
    actions: dict[str, int] = summary["actions"]  # type: ignore[assignment]
    print("\nrules fired: " + ", ".join(f"{name} {count}" for name, count in actions.items()))
    ids = [p.id for p in INVARIANTS] + [p.id for p in ACTION_PROPERTIES]
    print(f"invariants checked at every step: {', '.join(ids)}")
    print(f"violations: {'none' if summary['valid'] else 'FOUND (see below)'}")


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
    from rmqspec.campaign.report import summarize, write_report
    from rmqspec.campaign.runner import (
        CampaignError,
        CampaignOptions,
        DeterminismError,
        run_campaign,
        save_failures,
    )
    from rmqspec.spec.config import MUTATIONS

    unknown = sorted(set(args.mutation or ()) - set(MUTATIONS))
    if unknown:
        raise CliError(f"--mutation: unknown {unknown}; accepted: {sorted(MUTATIONS)}")
    if args.runs is None and args.duration is None:
        args.duration = 120.0
    if args.out is None:
        if args.resume:
            raise CliError("--resume needs --out DIR: the campaign directory to continue")
        args.out = time.strftime("rmqspec-out/campaign-%Y%m%d-%H%M%S")  # a fresh campaign each time
    out = Path(args.out)
    store = Path(args.store) if args.store else out / "failures"
    interactive = sys.stderr.isatty()

    def progress(line: str) -> None:
        print(("\r" if interactive else "") + line, end="" if interactive else "\n", file=sys.stderr, flush=True)

    options = CampaignOptions(
        out=out,
        master=args.master,
        runs=args.runs,
        duration=args.duration,
        steps=args.steps,
        seed=args.seed,
        batch_size=args.batch_size,
        resume=args.resume,
        lockstep=not args.no_lockstep,
        mutations=frozenset(args.mutation or ()),
        progress=progress,
    )
    try:
        result = run_campaign(options)
    except CampaignError as err:
        raise CliError(str(err)) from None
    except DeterminismError as err:
        print(f"\nrmqspec: NONDETERMINISM: {err}", file=sys.stderr)
        return EXIT_NONDETERMINISM
    if interactive:
        print(file=sys.stderr)
    saved = save_failures(result.failures, store)
    summary = summarize(result, args.master)
    report = write_report(result, summary, out, store)
    print(
        f"rmqspec campaign on {args.master} (parallelism {summary['parallelism']}): {summary['runs']} runs, "
        f"{summary['steps']} steps in {summary['seconds']} s ({summary['steps_per_second']} steps/s)"
    )
    print(
        f"distinct abstract states: {summary['distinct_abstract_states']}; property checks: "
        f"{summary['invariant_checks']}; determinism self-check: {summary['determinism_checks']} runs repeated"
    )
    print("rules fired: " + ", ".join(f"{k} {v}" for k, v in summary["rules"].items()))
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


def _cmd_bench(args: argparse.Namespace) -> int:
    from rmqspec.bench import run_bench

    for line in run_bench(args.steps, args.reference_steps):
        print(line, flush=True)
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rmqspec", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--version", action="version", version=f"rmqspec {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="explore the model and print a summary (the main job)")
    run.add_argument("--config", help="a JSON file of Config fields (default: the built-in set)")
    run.add_argument("--walks", type=_positive, default=40, help="random walks per configuration (default 40)")
    run.add_argument("--steps", type=_positive, default=400, help="steps per walk (default 400)")
    run.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    run.add_argument("--mutation", action="append", help="plant a known bug (repeatable); see spec/config.py")
    run.add_argument("--out", default="rmqspec-out", help="where to write run-summary.json (default rmqspec-out)")
    run.set_defaults(func=_cmd_run)
    camp = sub.add_parser("campaign", help="a randomized campaign on Spark (the main job)")
    camp.add_argument("--master", default="local[*]", help="Spark master URL (default local[*])")
    bound = camp.add_mutually_exclusive_group()
    bound.add_argument("--runs", type=_positive, help="number of runs")
    bound.add_argument("--duration", type=float, help="seconds to keep starting batches (default 120)")
    camp.add_argument("--steps", type=_positive, default=300, help="steps per run (default 300)")
    camp.add_argument("--seed", type=int, default=0, help="campaign seed: unit k uses seed+k (default 0)")
    camp.add_argument("--batch-size", type=_positive, default=32, help="runs per Spark job (default 32)")
    camp.add_argument("--out", help="output directory (default rmqspec-out/campaign-<time>)")
    camp.add_argument("--store", help="failure store directory (default <out>/failures)")
    camp.add_argument("--resume", action="store_true", help="continue the campaign in --out")
    camp.add_argument("--no-lockstep", action="store_true", help="model only, without the reference")
    camp.add_argument("--mutation", action="append", help="plant a known bug (repeatable)")
    camp.set_defaults(func=_cmd_campaign)
    bench = sub.add_parser("bench", help="print spec and reference steps per second")
    bench.add_argument("--steps", type=_positive, default=20_000, help="spec steps to time (default 20000)")
    bench.add_argument("--reference-steps", type=_positive, default=5_000, help="reference steps (default 5000)")
    bench.set_defaults(func=_cmd_bench)
    return parser


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
        return code
    except CliError as err:
        print(f"rmqspec: error: {err}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("rmqspec: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # never a bare traceback: say what broke and where to report it
        print(f"rmqspec: internal error: {type(err).__name__}: {err} (please report this)", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
