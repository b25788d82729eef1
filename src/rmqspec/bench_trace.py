"""Throughput of ``rmqspec check-trace``: events per second on one core, against parsing alone.

For each size, one seeded explorer walk of ``BENCH_TRACE_CONFIG`` is written as a trace with full
observations (every field the format has, after every event) into a temporary directory. Then, in
the same process, the file is timed four ways, in CPU seconds of this process (so other work on the
machine does not count):

* parse: read the file and ``json.loads`` every line (the floor any JSONL reader pays);
* replay: ``check_trace`` on the same walk written without observations (model steps only);
* conformance: ``check_trace(invariants=False)`` (steps and every observed value compared);
* full: ``check_trace`` (conformance plus every state and action property at every step).

A size is run only when the full check's rate on the previous size predicts it finishes within the
time budget (writing the trace first takes longer than checking it). The target is 300,000
events/s and within 3x of parsing; the figures say how far a replay is from it.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from rmqspec.properties.trace import check_trace, explorer_actions, trace_lines
from rmqspec.spec.actions import Action
from rmqspec.spec.config import Config

BENCH_TRACE_CONFIG = Config(consumers=2, queues=4, messages_per_queue=40, max_reconsume_times=2)
TARGET_EVENTS_PER_S = 300_000
TARGET_PARSE_RATIO = 3.0
DEFAULT_SIZES = (10_000, 100_000, 1_000_000)


def _parse_only(path: Path) -> int:
    loads = json.loads
    n = 0
    with open(path, "rb") as handle:
        for raw in handle:
            loads(raw.decode("utf-8"))
            n += 1
    return n


def _timed(fn: Callable[..., object], *args: object, **kwargs: object) -> float:
    """CPU seconds of this process: one core's work, whatever else the machine runs."""
    start = time.process_time()
    fn(*args, **kwargs)
    return time.process_time() - start


def _write(path: Path, lines: Iterator[str]) -> None:
    with open(path, "w", encoding="utf-8") as out:
        for line in lines:
            out.write(line)
            out.write("\n")


def _bare_lines(config: Config, actions: list[Action]) -> Iterator[str]:
    """The same trace without observations: only the model's steps are left to check."""
    for k, line in enumerate(trace_lines(config, actions)):
        if k == 0:
            yield line
        else:
            event = json.loads(line)
            del event["observed"]
            yield json.dumps(event, separators=(",", ":"))


def run_bench_trace(sizes: tuple[int, ...] = DEFAULT_SIZES, budget_s: float = 60.0, seed: int = 7) -> Iterator[str]:
    """Run the benchmark, yielding the printed lines as they are ready."""
    config = BENCH_TRACE_CONFIG
    yield (
        f"rmqspec bench-trace: {config.consumers} consumers x {config.queues} queues, {config.mode}, "
        f"full observations on every event, one core (CPU time)"
    )
    yield f"  {'events':>9} {'MB':>6} {'parse ev/s':>12} {'replay ev/s':>12} {'conform ev/s':>13} {'full ev/s':>11}"
    yield f"  {'':>9} {'':>6} {'':>12} {'(x parse)':>12} {'(x parse)':>13} {'(x parse)':>11}"
    per_event_s: float | None = None
    best_conform = 0.0
    with tempfile.TemporaryDirectory(prefix="rmqspec-bench-trace-") as tmp:
        for size in sorted(sizes):
            if per_event_s is not None and per_event_s * size > budget_s:
                estimate = per_event_s * size
                yield f"  {size:>9} skipped: the full check would take about {estimate:.0f} s > {budget_s:.0f} s budget"
                continue
            actions = explorer_actions(config, seed, size, stop_at_violation=False)
            path, bare = Path(tmp) / f"trace-{size}.jsonl", Path(tmp) / f"bare-{size}.jsonl"
            _write(path, trace_lines(config, actions, producer="rmqspec bench-trace"))
            _write(bare, _bare_lines(config, actions))
            events = len(actions)
            parse = _timed(_parse_only, path)
            replay = _timed(check_trace, bare, invariants=False)
            conform = _timed(check_trace, path, invariants=False)
            full = _timed(check_trace, path)
            megabytes = path.stat().st_size / 1e6
            path.unlink()
            bare.unlink()
            per_event_s = full / max(events, 1)  # the prediction is about the full check

            rates = [events / t if t > 0 else float("inf") for t in (parse, replay, conform, full)]
            best_conform = max(best_conform, rates[2])
            yield (
                f"  {events:>9} {megabytes:>6.1f} {rates[0]:>12,.0f} "
                f"{rates[1]:>12,.0f} {rates[2]:>13,.0f} {rates[3]:>11,.0f}"
            )
            yield (
                f"  {'':>9} {'':>6} {'':>12} {replay / parse:>11.1f}x {conform / parse:>12.1f}x {full / parse:>10.1f}x"
            )
    verdict = "meets" if best_conform >= TARGET_EVENTS_PER_S else "MISSES"
    yield (
        f"  target: >= {TARGET_EVENTS_PER_S:,} events/s and within {TARGET_PARSE_RATIO:.0f}x of parsing: {verdict} "
        f"(best conformance rate {best_conform:,.0f} events/s)"
    )
