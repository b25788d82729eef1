"""``rmqspec bench-history``: check-history throughput against plain JSON parsing, on one core.

A synthetic history of a busy CLUSTERING group is written to a temporary file for each size:
4 consumers on 16 queues, every message produced, delivered (about 3% failing once and succeeding on
the local retry), committed every 4 messages of a queue, with a consumer leaving and joining again
(views and ownership changing) every 5,000 events; the new owner of each queue the leaver held
redelivers the messages since its last commit (the unpersisted window). Every redelivery has the
cause the checker asks for (local-retry, resumed-at-stored-offset), so the history is valid. Then, in
the same process, the file is (1) parsed line by line with ``json.loads`` and nothing else, and (2)
checked end to end by ``check_history`` (read, validate, bucket, analyse, report). Each figure is the
least CPU time of the process over a few runs (one core; wall time on a shared machine measures the
neighbours too).
The ratio (2)/(1) is what the target keeps within 3x, and events per second should stay
flat from 10^4 to 10^6 events (linear time).
"""

from __future__ import annotations

import gc
import json
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rmqspec.properties.history import check_history

TARGET_EVENTS_PER_S = 300_000
TARGET_RATIO = 3.0
CONSUMERS = [f"10.0.0.{i + 1}@c{i}" for i in range(4)]
QUEUES = 16
CHURN_EVERY = 5_000
REPEATS = 3


def _event(t: int, kind: str, consumer: str | None = None, queue: int | None = None, **more: Any) -> str:
    text = f'{{"time": {t}, "type": "{kind}"'
    if consumer is not None:
        text += f', "consumer": "{consumer}"'
    if queue is not None:
        text += f', "topic": "T", "queue": {queue}'
    for name, value in more.items():
        text += f', "{name}": {json.dumps(value)}'
    return text + "}"


def write_synthetic_history(path: Path, events: int, seed: int = 1) -> int:
    """Write a valid history of at least ``events`` events (it ends after a whole step, so that no
    rebalance is cut short); returns the exact number of events."""
    rng = random.Random(seed)
    header = {
        "format": "rmqspec-history",
        "version": 1,
        "mode": "CLUSTERING",
        "consumption": "concurrent",
        "rocketmq": "4.9.8",
        "group": "bench",
    }
    lines = [json.dumps(header)]
    now = 0
    live = list(CONSUMERS)
    owner: dict[int, str] = {}

    def rebalance() -> None:
        members = sorted(live)
        for q in range(QUEUES):
            new = members[q * len(members) // QUEUES]
            old = owner.get(q)
            if old != new:
                if old is not None and old in live:
                    lines.append(_event(now, "own", old, q, owned=False))
                lines.append(_event(now, "own", new, q, owned=True))
                owner[q] = new
        for c in members:
            lines.append(_event(now, "view", c, members=members))

    for c in live:
        lines.append(_event(0, "join", c))
    rebalance()
    next_offset = [0] * QUEUES
    committed = [0] * QUEUES
    since_commit = [0] * QUEUES
    next_churn = CHURN_EVERY
    while len(lines) - 1 < events:
        now += rng.randint(0, 2)
        q = rng.randrange(QUEUES)
        o = next_offset[q]
        next_offset[q] += 1
        c = owner[q]
        lines.append(_event(now, "produce", None, q, offset=o))
        if rng.random() < 0.03:
            lines.append(_event(now, "deliver", c, q, offset=o, result="failure"))
        lines.append(_event(now, "deliver", c, q, offset=o))
        since_commit[q] += 1
        if since_commit[q] >= 4:
            since_commit[q] = 0
            committed[q] = o + 1
            lines.append(_event(now, "commit", c, q, offset=o + 1))
        if len(lines) >= next_churn:
            next_churn += CHURN_EVERY
            now += 1
            gone = rng.choice(live)
            live.remove(gone)
            moved = [qq for qq, who in owner.items() if who == gone]
            for qq, who in list(owner.items()):
                if who == gone:
                    lines.append(_event(now, "own", gone, qq, owned=False))
            lines.append(_event(now, "leave", gone))
            rebalance()
            for qq, who in owner.items():  # the new owner resumes at the last commit: the window again
                if who != gone and qq in moved:
                    for oo in range(committed[qq], next_offset[qq]):
                        lines.append(_event(now, "deliver", who, qq, offset=oo))
            now += 1
            live.append(gone)
            lines.append(_event(now, "join", gone))
            rebalance()
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return len(lines) - 1


def _best(fns: list[Callable[[], object]], repeats: int) -> list[float]:
    """The least CPU time of the process over ``repeats`` runs of each of ``fns``, run in turn (so a
    noisy neighbour slows them alike and the ratio between them holds)."""
    best = [float("inf")] * len(fns)
    for _ in range(repeats):
        for k, fn in enumerate(fns):
            gc.collect()
            start = time.process_time()
            fn()
            best[k] = min(best[k], time.process_time() - start)
    return best


def _parse_only(path: Path) -> int:
    n = 0
    loads = json.loads
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            loads(line)
            n += 1
    return n


def run_bench_history(sizes: tuple[int, ...] = (10_000, 100_000, 1_000_000)) -> list[str]:
    """Run the benchmark; returns the printed lines."""
    lines = [
        f"rmqspec bench-history: synthetic CLUSTERING history, {len(CONSUMERS)} consumers x {QUEUES} queues; "
        f"CPU time on one core, best of {REPEATS} runs each (alternating)",
        f"  {'events':>10} {'json.loads only':>18} {'check-history':>16} {'ratio':>7} {'us/event':>9}  report",
    ]
    rates = []
    ratios = []
    with tempfile.TemporaryDirectory(prefix="rmqspec-bench-history-") as tmp:
        for size in sizes:
            path = Path(tmp) / f"history-{size}.jsonl"
            n = write_synthetic_history(path, size)
            report: dict[str, Any] = {}
            parse, check = _best(
                [lambda p=path: _parse_only(p), lambda p=path, out=report: out.update(check_history(p))],  # type: ignore[misc]
                REPEATS,
            )
            rate = n / check
            rates.append(rate)
            ratios.append(check / parse)
            verdict = "valid" if report["valid"] else f"INVALID {report['not_tolerated']}"
            lines.append(
                f"  {n:>10,} {n / parse:>14,.0f} e/s {rate:>12,.0f} e/s {check / parse:>6.2f}x "
                f"{1e6 / rate:>9.2f}  {verdict}"
            )
            path.unlink()
    lines.append(
        f"  target >= {TARGET_EVENTS_PER_S:,} events/s: {'met' if min(rates) >= TARGET_EVENTS_PER_S else 'MISSED'} "
        f"(slowest size {min(rates):,.0f}); target within {TARGET_RATIO:.0f}x of json.loads: "
        f"{'met' if max(ratios) <= TARGET_RATIO else 'MISSED'} (worst {max(ratios):.2f}x)"
    )
    if len(rates) > 1:
        relative = ", ".join(f"{r / rates[0]:.2f}" for r in rates)
        lines.append(f"  linearity: events/s relative to the smallest size: {relative}")
    return lines
