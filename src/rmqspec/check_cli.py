"""``rmqspec check``: exhaustive breadth-first checking of a configuration (``properties/exhaustive.py``), its
liveness lassos (``properties/lasso.py``) and quiescence at its horizon (``properties/frontier.py``), statistics
as TLC prints them, and each counterexample as a step table, a trace ``check-trace`` replays and a picture.

Exit codes: 0 no violation (the report says whether the search was exhausted or cut by a limit), 1 a safety
or liveness violation (a lasso, or a failure at the horizon: ``properties/frontier.py``) or a named configuration
whose figures differ from its file's "expected", 2 bad input (a bad bound or field, an output that cannot be
written: the line names it), 130 interrupted (the statistics so far are printed), 143 terminated (SIGTERM, with
``--spark``).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from rmqspec import __version__
from rmqspec.outfiles import check_directory, check_writable, write_atomic
from rmqspec.spec.config import ConfigError

EXIT_OK, EXIT_VIOLATION = 0, 1


class CheckInputError(Exception):
    """Bad input to ``check``: printed as one line, exit code 2."""


def add_check_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from rmqspec.properties.exhaustive import named_configs

    names = ", ".join(named_configs())
    check = sub.add_parser(
        "check",
        help="exhaustive breadth-first check of a small configuration: shortest counterexamples, liveness lassos",
        description="Visit every state of a configuration reachable within its bounds, check every invariant on "
        "every state and every action property on every transition, and report the shortest path to each "
        "violation; then look for liveness violations as fair cycles. docs/check.md explains the bounds and "
        "what the canonical form of a state leaves out.",
        epilog=f"named configurations: {names}. exit codes: 0 no violation (exhausted or not: the report says), "
        "1 a violation (or a named configuration's figures differ from its file's expected), 2 bad input (a bad "
        "bound or field, an output that cannot be written), 130 interrupted, 143 terminated (SIGTERM, with --spark).",
    )
    check.add_argument(
        "--config",
        default="one-message",
        help="a named configuration, a JSON file, or 'all': every named configuration not marked default_run false "
        "(default one-message)",
    )
    check.add_argument("--mutation", action="append", help="plant a known bug (repeatable); see spec/config.py")
    check.add_argument("--horizon", type=int, metavar="MS", help="constraint: no state's clock passes MS")
    check.add_argument("--max-channel", type=int, metavar="N", help="constraint: requests a connection may hold")
    check.add_argument("--max-states", type=int, metavar="N", help="limit: stop after N distinct states")
    check.add_argument("--max-depth", type=int, metavar="N", help="limit: do not go deeper than N steps")
    check.add_argument("--max-seconds", type=seconds, metavar="S", help="limit: stop after S seconds")
    stop = check.add_mutually_exclusive_group()
    stop.add_argument("--stop-at-first", dest="all", action="store_false", help="stop at the first violation (default)")
    stop.add_argument("--all", dest="all", action="store_true", help="collect one violation per property and action")
    check.add_argument(
        "--no-liveness", action="store_true", help="no liveness check: neither lassos nor quiescence at the horizon"
    )
    check.add_argument(
        "--no-frontier",
        action="store_true",
        help="with a horizon, do not quiesce the frontier states the horizon cuts off (docs/check.md, "
        "'Liveness at the horizon')",
    )
    check.add_argument(
        "--no-explain",
        action="store_true",
        help="do not mark a counterexample's unavoidable steps (the dominators of its violation, found by "
        "exploring the whole graph again; skipped above 200,000 states)",
    )
    check.add_argument(
        "--spark",
        action="store_true",
        help="run the search level by level on Spark (frontier and visited set as fingerprint-partitioned "
        "datasets); same counts and verdicts, no liveness (docs/check.md, 'On Spark')",
    )
    check.add_argument(
        "--master", default="local[*]", metavar="URL", help="with --spark: the Spark master (default local[*])"
    )
    check.add_argument("--graph", metavar="FILE", help="also write the state graph (.graphml or .dot; small configs)")
    check.add_argument(
        "--out", default="rmqspec-out/check", help="where counterexamples go (default rmqspec-out/check)"
    )
    check.add_argument("--json", action="store_true", help="print the result as JSON")
    check.add_argument("--quiet", action="store_true", help="no progress line on stderr")
    check.set_defaults(func=run_check, all=False)
    bench = sub.add_parser(
        "bench-check",
        help="time the exhaustive search on one process and on Spark: states/s, ratio, time per level by step",
    )
    bench.add_argument("--config", default="one-message", help="a named configuration or a JSON file")
    bench.add_argument("--horizon", type=int, metavar="MS", help="constraint: no state's clock passes MS")
    bench.add_argument("--max-channel", type=int, metavar="N", help="constraint: requests a connection may hold")
    bench.add_argument("--master", default="local[2]", metavar="URL", help="the Spark master (default local[2])")
    bench.set_defaults(
        func=run_bench_check, mutation=None, max_states=None, max_depth=None, max_seconds=None, horizon=None
    )
    bench = sub.add_parser(
        "bench-counterexamples",
        help="per planted bug: the exhaustive shortest counterexample beside the random search's shrunk one",
    )
    bench.add_argument(
        "--seconds", type=positive_seconds, default=60.0, help="time limit of each exhaustive search (default 60)"
    )
    bench.add_argument("--walks", type=int, default=200, help="random walks tried per mutation (default 200)")
    bench.add_argument("--mutation", action="append", help="only these mutations (repeatable; default all)")
    bench.set_defaults(func=_run_bench)
    cov = sub.add_parser(
        "state-coverage",
        help="the fraction of an exhausted configuration's states that rmqspec run, the Hypothesis machine and a "
        "campaign reach, and its growth with budget as a picture",
        description="Exhaust a named configuration, then count how many of its distinct states each random "
        "searcher reaches with its default budget: rmqspec run's seeded walks, the Hypothesis machine "
        "SpecMachine (the test suite's settings, derandomized) and a campaign's units (run in this process, "
        "model only: the reference and the quiescence do not change a unit's walk). docs/check.md, "
        "'A denominator for random search'.",
        epilog=f"named configurations: {names}. exit codes: 0 printed, 2 bad input.",
    )
    cov.add_argument(
        "--config",
        default="idle-consumer",
        metavar="NAME",
        help=f"a named configuration ({names}; default idle-consumer)",
    )
    cov.add_argument(
        "--walks", type=positive_int, metavar="N", default=40, help="rmqspec run: walks (default 40, as rmqspec run)"
    )
    cov.add_argument(
        "--steps", type=positive_int, metavar="N", default=400, help="rmqspec run: steps per walk (default 400)"
    )
    cov.add_argument(
        "--examples",
        type=positive_int,
        metavar="N",
        help="Hypothesis: max_examples (default: the active profile's, as the suite)",
    )
    cov.add_argument(
        "--step-count",
        type=positive_int,
        metavar="N",
        help="Hypothesis: stateful_step_count (default: the active profile's)",
    )
    cov.add_argument(
        "--campaign-runs",
        type=positive_int,
        metavar="N",
        default=1000,
        help="campaign: units (default 1000: about a default campaign)",
    )
    cov.add_argument(
        "--campaign-steps", type=positive_int, metavar="N", default=300, help="campaign: steps per unit (default 300)"
    )
    cov.add_argument(
        "--only",
        choices=("run", "hypothesis", "campaign"),
        metavar="SEARCHER",
        action="append",
        help="measure only this searcher: run, hypothesis or campaign (repeatable; default all three)",
    )
    cov.add_argument("--json", action="store_true", help="also print the figures as JSON")
    cov.add_argument(
        "--out", default="rmqspec-out/check", metavar="DIR", help="where the picture goes (default rmqspec-out/check)"
    )
    cov.set_defaults(func=_run_state_coverage)


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


# The longest a duration, a timeout or a time budget may be: about 31 years, as exhaustive.BOUND_RANGES bounds
# max_seconds. NaN and the infinities are refused: NaN compares false with every clock, so a loop "until NaN
# seconds have passed" never ends and one "while less than NaN" never starts.
MAX_SECONDS = 1e9


def seconds(text: str) -> float:
    """An argparse type: a finite number of seconds, from 0 to MAX_SECONDS."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not 0 <= value <= MAX_SECONDS:  # NaN fails the comparison too
        raise argparse.ArgumentTypeError(f"expected a finite number of seconds from 0 to {MAX_SECONDS:g}, got {text}")
    return value


def positive_seconds(text: str) -> float:
    """An argparse type: a finite number of seconds above 0, at most MAX_SECONDS."""
    value = seconds(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds above 0, got {text}")
    return value


def _run_state_coverage(args: argparse.Namespace) -> int:
    from rmqspec.properties.exhaustive import named_configs
    from rmqspec.properties.search_coverage import (
        campaign_coverage,
        exhaust,
        growth_svg,
        hypothesis_coverage,
        hypothesis_settings,
        run_coverage,
    )

    named = named_configs()
    if args.config not in named:
        print(
            f"rmqspec: error: --config {args.config}: not a named configuration ({', '.join(named)})", file=sys.stderr
        )
        return 2
    out = Path(args.out)
    try:
        space = exhaust(named[args.config])
    except ValueError as err:  # a named configuration its bounds do not make finite
        print(f"rmqspec: error: --config {args.config}: {err}", file=sys.stderr)
        return 2
    only = set(args.only or ("run", "hypothesis", "campaign"))
    print(f"{space.named.name}: {space.size:,} distinct states in all (exhaustive, {space.seconds:.1f} s)", flush=True)
    searchers = []
    if "run" in only:
        searchers.append(run_coverage(space, args.walks, args.steps))
        _print_reached(searchers[-1])
    if "hypothesis" in only:
        overrides = {"max_examples": args.examples, "stateful_step_count": args.step_count}
        hyp = hypothesis_settings(**{k: v for k, v in overrides.items() if v is not None})
        searchers.append(hypothesis_coverage(space, hyp))
        _print_reached(searchers[-1])
    if "campaign" in only:
        searchers.append(campaign_coverage(space, args.campaign_runs, args.campaign_steps))
        _print_reached(searchers[-1], "in this process, model only")
    try:
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"state-coverage-{space.named.name}.svg"
        path.write_text(growth_svg(space, searchers), encoding="utf-8")
    except OSError as err:
        print(f"rmqspec: error: {out}: cannot write: {err.strerror}", file=sys.stderr)
        return 2
    if args.json:
        doc = {"config": space.named.name, "distinct_states": space.size, "searchers": [s.as_dict() for s in searchers]}
        print(json.dumps(doc, indent=2))
    print(f"wrote {path}")
    return EXIT_OK


def _print_reached(r: Any, how: str = "") -> None:
    marks = sorted({len(r.curve) // 4, len(r.curve) // 2, 3 * len(r.curve) // 4, len(r.curve) - 1} - {0})
    growth = ", ".join(f"{r.curve[k][0]:,}: {r.curve[k][1]:,}" for k in marks)
    unmatched = f"; {r.unmatched} states NOT in the exhaustive set" if r.unmatched else ""
    print(
        f"  {r.searcher} ({r.budget}{', ' + how if how else ''}): reached {r.count:,} of {r.space.size:,} "
        f"({r.fraction:.1%}) in {r.steps:,} steps; {r.left} of {r.runs} runs left the constraints, "
        f"after {r.inside / max(1, r.runs):.1f} states inside on average{unmatched}",
        flush=True,
    )
    print(f"    growth (steps: states): {growth}", flush=True)


def _run_bench(args: argparse.Namespace) -> int:
    from rmqspec.bench_counterexamples import bench_counterexamples, print_table

    try:
        rows = bench_counterexamples(args.seconds, args.walks, only=args.mutation)
    except ConfigError as err:
        print(f"rmqspec: error: --mutation: {err}", file=sys.stderr)
        return 2
    print_table(rows)
    return EXIT_OK


def _load(args: argparse.Namespace) -> Any:
    from rmqspec.properties.exhaustive import NamedConfig, load_named, named_configs

    named = named_configs()
    try:
        if args.config in named:
            nc: NamedConfig = named[args.config]
        elif Path(args.config).is_file():
            nc = load_named(Path(args.config))
        else:
            raise CheckInputError(
                f"--config {args.config}: neither a named configuration ({', '.join(named)}) nor a file"
            )
        config = nc.config
        if args.mutation:
            config = replace(config, mutations=config.mutations | frozenset(args.mutation))
    except ConfigError as err:
        raise CheckInputError(str(err)) from None
    overrides = {
        "horizon_ms": args.horizon,
        "max_channel": args.max_channel,
        "max_states": args.max_states,
        "max_depth": args.max_depth,
        "max_seconds": args.max_seconds,
    }
    bounds = nc.bounds
    for key, value in overrides.items():
        if value is not None:
            try:  # Bounds checks each for type, finiteness and range (exhaustive.BOUND_RANGES)
                bounds = replace(bounds, **{key: value})
            except ConfigError as err:
                flag = "--horizon" if key == "horizon_ms" else f"--{key.replace('_', '-')}"
                what = str(err).removeprefix(f"{key}: ").removesuffix(", or null for no limit")
                raise CheckInputError(f"{flag}: {what}") from None
    return nc.name, config, bounds


ALL = "all"


def run_check_all(args: argparse.Namespace) -> int:
    """``--config all``: every named configuration whose file does not opt out (``default_run``), one after
    another, each with its own report (with ``--json``, one JSON document per line) and its counterexamples
    under ``<out>/<name>``. The exit code is the worst of theirs: 130, then 2, then 1."""
    from rmqspec.properties.exhaustive import named_configs

    if args.graph or args.spark:
        print("rmqspec: error: --config all: --graph and --spark take one configuration", file=sys.stderr)
        return 2
    chosen = [nc for nc in named_configs().values() if nc.default_run]
    skipped = [nc.name for nc in named_configs().values() if not nc.default_run]
    codes = {}
    for nc in chosen:
        one = argparse.Namespace(
            **{**vars(args), "config": nc.name, "out": str(Path(args.out) / nc.name), "json_lines": True}
        )
        codes[nc.name] = code = run_check(one)
        if code == 130:
            return 130
        if not args.json:
            print()
    if not args.json:
        bad = [name for name, code in codes.items() if code != EXIT_OK]
        print(
            f"checked {len(codes)} named configurations: "
            + (f"{len(bad)} failed ({', '.join(bad)})" if bad else "no violation")
            + (f"; not run by default: {', '.join(skipped)} (see their descriptions)" if skipped else "")
        )
    return 2 if 2 in codes.values() else (EXIT_VIOLATION if EXIT_VIOLATION in codes.values() else EXIT_OK)


def run_check(args: argparse.Namespace) -> int:
    from rmqspec.properties.exhaustive import SOMETIMES, CheckResult, check
    from rmqspec.properties.frontier import FrontierCollector, FrontierResult, quiesce_frontier
    from rmqspec.properties.lasso import find_lassos

    if args.config == ALL:
        return run_check_all(args)
    try:
        name, config, bounds = _load(args)
    except CheckInputError as err:
        print(f"rmqspec: error: {err}", file=sys.stderr)
        return 2

    def progress(r: CheckResult, depth: int, frontier: int) -> None:
        if not args.quiet:
            print(
                f"\r  {r.distinct_states:>10,} states  depth {depth:>3}  frontier {frontier:>9,}  "
                f"{r.states_per_second():>7,.0f} states/s",
                end="",
                file=sys.stderr,
                flush=True,
            )

    if args.graph and not args.spark:  # refused before the search, not after it
        problem = check_writable(args.graph)
        if problem is not None:
            print(f"rmqspec: error: --graph {args.graph}: cannot write: {problem}", file=sys.stderr)
            return 2
    problem = check_directory(args.out)
    if problem is not None:  # where counterexamples go: refused before the search
        print(f"rmqspec: error: --out {args.out}: cannot write counterexamples: {problem}", file=sys.stderr)
        return 2
    if args.spark:
        return _run_check_on_spark(args, name, config, bounds, progress)
    interrupted = False
    frontier_on = not args.no_liveness and not getattr(args, "no_frontier", False) and bounds.horizon_ms is not None
    collector = FrontierCollector() if frontier_on else None
    try:
        search = check(
            config,
            bounds,
            stop_at_first=not args.all,
            keep_edges=not args.no_liveness,
            progress=progress,
            at_horizon=None if collector is None else collector.add,
        )
    except ValueError as err:  # a configuration that needs a horizon
        print(f"rmqspec: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\nrmqspec: interrupted; nothing was checked to the end", file=sys.stderr)
        return 130
    if not args.quiet:
        print(file=sys.stderr)
    r = search.result
    lassos = []
    liveness_note = "skipped (--no-liveness)" if args.no_liveness else ""
    if not args.no_liveness:
        if r.stopped_by == "violation":
            liveness_note = "skipped: the search stopped at a safety violation"
        else:
            try:
                lassos = find_lassos(search)
            except KeyboardInterrupt:
                interrupted = True
                liveness_note = "interrupted"
            liveness_note = liveness_note or ("searched the explored graph" + ("" if r.exhausted else " (partial)"))
    frontier: FrontierResult | None = None
    if collector is not None and r.stopped_by != "violation" and not interrupted:
        try:
            frontier = quiesce_frontier(search, collector.states, stop_at_first=not args.all)
            liveness_note += "; at the horizon: " + frontier.describe()
        except KeyboardInterrupt:
            interrupted = True
            liveness_note += "; at the horizon: interrupted"
    elif bounds.horizon_ms is not None and not args.no_liveness and r.stopped_by != "violation":
        liveness_note += "; at the horizon: skipped (--no-frontier)"
    frontier_failures = frontier.failures if frontier is not None else []
    differences = _differences_from_expected(args, name, config, bounds, r, frontier, lassos)
    explained: dict[int, Any] = {}
    explain_note = ""
    if r.violations and not args.no_explain:
        explained, explain_note = _explain(config, bounds, r.violations)
    out = Path(args.out)
    written, write_error = _write_counterexamples(out, config, r, lassos, frontier_failures)
    graph_error = write_error
    if args.graph:
        try:
            written.append(_write_graph(search, Path(args.graph)))
        except CheckInputError as err:  # the results are still printed; the exit code is 2
            print(f"rmqspec: error: {err}", file=sys.stderr)
            graph_error = True
    doc = {
        "config": name,
        "version": __version__,
        "mutations": sorted(config.mutations),
        **r.as_dict(),
        "valid": r.valid and not lassos and not frontier_failures,
        "liveness": liveness_note,
        "frontier": None if frontier is None else frontier.as_dict(),
        "lassos": [
            {"id": lz.id, "detail": lz.detail, "prefix_steps": len(lz.prefix), "cycle_steps": len(lz.cycle)}
            for lz in lassos
        ],
        "written": [str(p) for p in written],
        "expected_differences": differences,
    }
    for k, v in enumerate(doc["violations"]):
        v["unavoidable_steps"] = explained[k].steps if k in explained else None
    if explain_note:
        doc["explain"] = explain_note
    if args.json:
        # one document per line when several configurations are checked (--config all)
        print(json.dumps(doc) if getattr(args, "json_lines", False) else json.dumps(doc, indent=2))
    else:
        _print_report(name, r, lassos, liveness_note, written, SOMETIMES, explained, explain_note, frontier_failures)
    if differences and not args.json:
        print(f'the figures differ from the configuration file\'s "expected": {"; ".join(differences)}')
    if interrupted:
        return 130
    if graph_error:  # a counterexample or the graph could not be written: the line above names the file
        return 2
    if not doc["valid"] or differences:
        return EXIT_VIOLATION
    return EXIT_OK


def _differences_from_expected(
    args: argparse.Namespace, name: str, config: Any, bounds: Any, r: Any, frontier: Any, lassos: list[Any]
) -> list[str]:
    """How the search of a named configuration, run as its file gives it (no mutation, no changed bound, every
    check on), differs from the figures its file expects (``"expected"``; docs/check.md, "Named configurations");
    [] when it is not run that way or agrees. A difference means the model's reachable space changed."""
    from rmqspec.properties.exhaustive import named_configs

    nc = named_configs().get(name)
    if nc is None or not nc.expected or config != nc.config or bounds != nc.bounds or args.all or args.no_liveness:
        return []
    if getattr(args, "no_frontier", False) or r.stopped_by == "violation" or lassos:
        return []
    got: dict[str, Any] = {
        "exhausted": r.exhausted,
        "distinct_states": r.distinct_states,
        "transitions": r.transitions,
        "pruned": r.pruned,
        "diameter": r.diameter,
        "sometimes": sorted(r.sometimes),
        "actions": sorted(r.action_counts),
    }
    if frontier is not None:
        got["frontier_failures"] = [f.ids for f in frontier.failures]
    return [
        f"{key}: expected {want!r}, got {got[key]!r}"
        for key, want in nc.expected.items()
        if key in got and got[key] != want
    ]


def run_bench_check(args: argparse.Namespace) -> int:
    from rmqspec.bench_check import run_bench_check as bench

    try:
        name, config, bounds = _load(args)
    except CheckInputError as err:
        print(f"rmqspec: error: {err}", file=sys.stderr)
        return 2
    for line in bench(name, config, bounds, args.master):
        print(line, flush=True)
    return EXIT_OK


SPARK_LIVENESS_NOTE = "not run on Spark (it needs the graph in one process)"


def _run_check_on_spark(args: argparse.Namespace, name: str, config: Any, bounds: Any, progress: Any) -> int:
    from rmqspec.properties.exhaustive import SOMETIMES
    from rmqspec.properties.exhaustive_spark import SparkCheckError, check_on_spark

    if args.graph:
        print(
            "rmqspec: error: --graph needs the state graph in one process; it cannot be used with --spark",
            file=sys.stderr,
        )
        return 2
    try:
        r = check_on_spark(config, bounds, master=args.master, stop_at_first=not args.all, progress=progress)
    except (ValueError, SparkCheckError) as err:
        print(f"rmqspec: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as err:  # CheckInterrupted: Spark and its JVM are stopped; 130 or 143
        print(f"\nrmqspec: {str(err) or 'interrupted; nothing was checked to the end'}", file=sys.stderr)
        return int(getattr(err, "exit_code", 130))
    if not args.quiet:
        print(file=sys.stderr)
    written, write_error = _write_counterexamples(Path(args.out), config, r, [])
    doc = {
        "config": name,
        "version": __version__,
        "mutations": sorted(config.mutations),
        **r.as_dict(),
        "spark_master": args.master,
        "liveness": SPARK_LIVENESS_NOTE,
        "lassos": [],
        "written": [str(p) for p in written],
    }
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        _print_report(name, r, [], SPARK_LIVENESS_NOTE, written, SOMETIMES)
    if write_error:
        return 2
    return EXIT_OK if r.valid else EXIT_VIOLATION


def _explain(config: Any, bounds: Any, violations: list[Any]) -> tuple[dict[int, Any], str]:
    """The unavoidable steps of each violation's counterexample (properties/explain.py), by index, or why
    there are none."""
    from rmqspec.properties.explain import MAX_STATES, explored_graph, unavoidable_steps

    try:
        search = explored_graph(config, bounds)
    except KeyboardInterrupt:
        return {}, "unavoidable steps: interrupted"
    if search is None:
        return {}, f"unavoidable steps: not computed (more than {MAX_STATES:,} states, or a search limit)"
    return {k: unavoidable_steps(search, v) for k, v in enumerate(violations)}, ""


# Below this many states the growth of the process's peak RSS is the allocator's noise (arenas an earlier search freed
# are reused), not the search's memory.
MEASURABLE_STATES = 10_000


def _print_report(
    name: str,
    r: Any,
    lassos: list[Any],
    liveness_note: str,
    written: list[Path],
    sometimes: Any,
    explained: dict[int, Any] | None = None,
    explain_note: str = "",
    frontier_failures: list[Any] | None = None,
) -> None:
    how = "exhausted" if r.exhausted else f"NOT exhausted (stopped by {r.stopped_by})"
    print(f"check {name}: {how}; constraints: {r.bounds.describe()}; time relative to now: {r.relative_time}")
    # the driver's CPU time says nothing of a Spark search's, which runs in the executors
    cpu = f", {r.states_per_cpu_second():,.0f} per CPU second" if getattr(r, "cpu_seconds", 0) else ""
    print(
        f"  {r.distinct_states:,} distinct states, {r.transitions:,} transitions, {r.pruned:,} pruned by constraints, "
        f"diameter {r.diameter}, {r.seconds:.1f} s ({r.states_per_second():,.0f} states/s{cpu}), "
        + (
            f"{r.bytes_per_state:,.0f} bytes per state"
            if r.distinct_states >= MEASURABLE_STATES
            else "too few states to measure memory per state"
        )
    )
    print("  states per depth: " + " ".join(str(n) for n in r.depth_counts))
    print("  transitions per action: " + ", ".join(f"{k} {v:,}" for k, v in r.action_counts.most_common()))
    print("  sometimes:")
    for st in sometimes:
        f = r.sometimes.get(st.name)
        hit = f"reached, shortest witness {f.depth} steps ({r.sometimes_hits[st.name]:,} transitions)" if f else "NEVER"
        print(f"    {st.name:30} {hit}")
    print(f"  liveness: {liveness_note}")
    explained = explained or {}
    for i, v in enumerate(r.violations):
        print(f"\n{v.id} {v.name}: {v.detail}\nshortest path, {v.depth} steps, broken by {v.action}:")
        marked = set(explained[i].steps) if i in explained else set()
        for k, a in enumerate(v.actions, 1):
            print(f"  {'*' if k in marked else ' '}{k:3d}. {a!r}")
        if i in explained:
            print("  " + explained[i].describe())
    if explain_note and r.violations:
        print(explain_note)
    for lz in lassos:
        print("\n" + lz.describe())
    for ff in frontier_failures or []:
        print("\n" + ff.describe())
    if not r.violations and not lassos and not frontier_failures:
        print("no violation" + ("" if r.exhausted else " within the limits"))
    for p in written:
        print(f"wrote {p}")


def _write_counterexamples(
    out: Path, config: Any, r: Any, lassos: list[Any], frontier_failures: list[Any] | None = None
) -> tuple[list[Path], bool]:
    """Each violation's trace and picture, each lasso's description and each failure at the horizon's report and
    trace under ``out``, each written whole or not at all; the files written, and whether one could not be (the
    error line on stderr names it)."""
    from rmqspec.properties.trace import write_trace

    written: list[Path] = []
    frontier_failures = frontier_failures or []
    if not r.violations and not lassos and not frontier_failures:
        return written, False
    try:
        out.mkdir(parents=True, exist_ok=True)
        for k, v in enumerate(r.violations, 1):
            stem = out / f"violation-{k}-{v.id.lower()}"
            write_trace(config, v.actions, str(stem) + ".trace.jsonl", producer=f"rmqspec {__version__} check")
            written.append(Path(str(stem) + ".trace.jsonl"))
            svg = _picture(config, v.actions, [v])
            if svg is not None:
                write_atomic(Path(str(stem) + ".svg"), svg)
                written.append(Path(str(stem) + ".svg"))
        for k, lz in enumerate(lassos, 1):
            stem = out / f"lasso-{k}-{lz.id.lower().replace('/', '-')}"
            write_atomic(Path(str(stem) + ".txt"), lz.describe() + "\n")
            written.append(Path(str(stem) + ".txt"))
        for k, ff in enumerate(frontier_failures, 1):
            # the run as a trace (the path to the frontier state, then the quiescence), and the report
            stem = out / f"horizon-{k}-{ff.ids[0].lower().replace('/', '-')}"
            write_atomic(Path(str(stem) + ".txt"), ff.describe() + "\n")
            write_trace(
                config, ff.prefix + ff.quiescence, str(stem) + ".trace.jsonl", producer=f"rmqspec {__version__} check"
            )
            written += [Path(str(stem) + ".txt"), Path(str(stem) + ".trace.jsonl")]
    except OSError as err:
        print(f"rmqspec: error: {err.filename or out}: cannot write counterexamples: {err.strerror}", file=sys.stderr)
        return written, True
    return written, False


def _picture(config: Any, actions: list[Any], violations: list[Any]) -> str | None:
    try:
        from rmqspec.spec.property_types import Violation
        from rmqspec.timeline import render_timeline
    except ImportError:
        return None
    vs = [Violation(v.id, v.name, v.detail) for v in violations]
    return render_timeline(config, actions, vs, title="rmqspec check: shortest counterexample")


def _write_graph(search: Any, path: Path) -> Path:
    import networkx as nx

    from rmqspec.spec.actions import action_name

    g = search.graph
    if len(g.parent) > 200_000:
        raise CheckInputError(f"--graph {path}: {len(g.parent):,} states is too many to export (at most 200,000)")
    out = nx.MultiDiGraph()
    out.add_nodes_from(
        (k, {"depth": int(g.depth[k]), "liveness": int(g.bad[k]) if g.bad else 0}) for k in range(len(g.parent))
    )
    out.add_edges_from(
        (u, v, {"action": action_name(g.action_list[k])}) for u, v, k in zip(g.src, g.dst, g.act, strict=True) if v >= 0
    )
    try:
        if path.suffix == ".dot":
            lines = ["digraph states {"]
            lines += [f'  {u} -> {v} [label="{d["action"]}"];' for u, v, d in out.edges(data=True)]
            lines.append("}")
            write_atomic(path, "\n".join(lines) + "\n")
        else:
            xml = ["<?xml version='1.0' encoding='utf-8'?>\n", *(f"{x}\n" for x in nx.generate_graphml(out))]
            write_atomic(path, xml)
    except OSError as err:
        raise CheckInputError(f"--graph {path}: cannot write: {err.strerror}") from None
    return path
