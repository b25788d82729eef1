"""Throughput and memory benchmark of ``rmqspec conform`` against ``serve-reference``.

One conform run of ``sequences`` generated sequences over the v1 components (all seven; or the
``components`` asked for, e.g. the protocol 2 consumer components) is timed,
with every sequence's requests written to a scratch file as it ends; then the same requests are
replayed through a fresh session (no generation), and the two rates are printed with
their ratio: what generation costs on top of the requests themselves. The resident set size of this
process is printed at the start and at the end of the generating run, so a leak shows as growth
(the SUT's own memory is its own). Both processes are pinned to one core where the platform allows
(``sched_setaffinity``), as the figures in docs/oracle.md are quoted.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from rmqspec.conform import protocol as p
from rmqspec.conform.driver import Session, conform, replay

TARGET_REQUESTS_PER_S: Final = 5_000  # the daily-tool target for generated requests, one core


def rss_mib() -> float:
    """This process's resident set size now, in MiB (Linux ``/proc``; the peak elsewhere)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:  # pragma: no cover - not Linux
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_bench_conform(
    sequences: int = 10_000,
    steps: int = 40,
    seed: int = 0,
    one_core: bool = True,
    components: tuple[str, ...] = p.COMPONENTS_V1,
) -> Iterator[str]:
    """Run the benchmark, yielding the printed lines as they are ready."""
    if one_core and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # the SUT, started later, inherits it
    command = f"{sys.executable} -m rmqspec.cli serve-reference"
    with tempfile.TemporaryDirectory(prefix="rmqspec-bench-conform-") as scratch:
        out = Path(scratch)
        recorded = out / "requests.jsonl"
        which = "all v1 components" if set(components) == set(p.COMPONENTS_V1) else ", ".join(components)
        yield f"rmqspec bench-conform: {sequences:,} sequences of up to {steps} operations, {which}"
        start_rss = rss_mib()
        yield f"  RSS at start:                 {start_rss:8.1f} MiB"
        with open(recorded, "w", encoding="utf-8") as sink:

            def keep(script: list[dict[str, Any]]) -> None:
                sink.write(json.dumps(script) + "\n")

            result = conform(
                command,
                out / "run",
                examples=sequences,
                steps=steps,
                seed=seed,
                on_sequence=keep,
                components=components,
            )
        end_rss = rss_mib()
        generated = result.requests / result.seconds
        yield f"  RSS at end:                   {end_rss:8.1f} MiB  (growth {end_rss - start_rss:+.1f} MiB)"
        yield (
            f"  generated (conform)           {generated:8,.0f} requests/s  "
            f"({result.requests:,} requests, {result.examples:,} sequences in {result.seconds:.1f} s)"
        )
        session = Session(command, 10.0, out / "replay", components)
        try:
            started = session.requests
            began = time.perf_counter()
            with open(recorded, encoding="utf-8") as source:
                for line in source:
                    replay(session, json.loads(line))
            seconds = time.perf_counter() - began
            replayed = session.requests - started
        finally:
            session.close()
        replay_rate = replayed / seconds
        yield f"  pure replay of the same       {replay_rate:8,.0f} requests/s  ({replayed:,} in {seconds:.1f} s)"
        yield f"  generated / replay ratio      {generated / replay_rate:8.2f}"
        verdict = "meets" if generated >= TARGET_REQUESTS_PER_S else "MISSES"
        yield f"  target: >= {TARGET_REQUESTS_PER_S:,} generated requests/s: {verdict}"
        if not result.valid:
            yield f"  (the reference diverged from itself: {result.to_json()['findings']})"
