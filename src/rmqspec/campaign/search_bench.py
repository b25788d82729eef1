"""``rmqspec bench-search``: the guided campaign against the random one, side by side, on the same budget.

Runs two campaigns of the same seed, master, steps and duration (or runs) one after the other, the coverage-guided
search (``--search guided``, the default) and the random search it replaced (``--search random``), and prints for
each: runs, steps, steps per second, distinct features (properties/features.py), behaviours reached (the report's
table), corpus entries and violations; then the ratios guided / random, and writes ``features.svg`` with both
feature curves against seconds and ``bench-search.json``. Neither measures spec/ branch coverage (a measured
unit runs about 2.7 times slower and adds its arcs as features), so both count the same kinds of feature. The two
campaigns run in turn on one machine, so a neighbour's load falls on whichever is running: the figures name the
machine's load before each.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rmqspec.campaign.report import line_chart, summarize
from rmqspec.campaign.runner import CampaignOptions, run_campaign


@dataclass
class SearchBenchOptions:
    out: Path
    master: str = "local[*]"
    duration: float | None = 120.0
    runs: int | None = None
    steps: int = 300
    seed: int = 0
    mutations: frozenset[str] = frozenset()


def run_search_bench(options: SearchBenchOptions, say: Any = print) -> dict[str, Any]:
    """Run both campaigns and return the figures (also written to ``<out>/bench-search.json``)."""
    options.out.mkdir(parents=True, exist_ok=True)
    figures: dict[str, Any] = {"seed": options.seed, "master": options.master, "steps": options.steps}
    curves: list[tuple[str, list[tuple[int, int]]]] = []
    for search in ("guided", "random"):
        load = os.getloadavg()[0]
        campaign = CampaignOptions(
            out=options.out / search,
            master=options.master,
            runs=options.runs,
            duration=options.duration,
            steps=options.steps,
            seed=options.seed,
            mutations=options.mutations,
            search=search,
            store=None,
            coverage_every=0,  # measured units run slower and add arcs: both searches measure none
            progress=_prefixed(say, search),
        )
        result = run_campaign(campaign)
        summary = summarize(result, options.master)
        s = summary["search"]
        reached = len(s["behaviours"]) - len(s["behaviours_unreached"]) - len(s["behaviours_inexpressible"])
        figures[search] = {
            "load_before": round(load, 2),
            "runs": summary["runs"],
            "steps": summary["steps"],
            "seconds": summary["seconds"],
            "steps_per_second": summary["steps_per_second"],
            "features": s["features"],
            "behaviours_reached": reached,
            "behaviours": len(s["behaviours"]),
            "behaviours_unreached": s["behaviours_unreached"],
            "corpus_entries": s["corpus_entries"],
            "distinct_violations": summary["distinct_violations"],
            "curve": s["curve"],
        }
        curves.append((f"{search} search", [(int(p["seconds"] or 0), p["features"]) for p in s["curve"]]))
    g, r = figures["guided"], figures["random"]
    figures["ratios"] = {
        "features": round(g["features"] / max(1, r["features"]), 3),
        "steps_per_second": round((g["steps_per_second"] or 0) / max(1e-9, r["steps_per_second"] or 0), 3),
        "runs": round(g["runs"] / max(1, r["runs"]), 3),
    }
    (options.out / "features.svg").write_text(
        line_chart("Distinct features reached, guided and random search", "seconds", curves), encoding="utf-8"
    )
    (options.out / "bench-search.json").write_text(json.dumps(figures, indent=1) + "\n", encoding="utf-8")
    return figures


def _prefixed(say: Any, search: str) -> Any:
    def progress(line: str) -> None:
        say(f"{search}: {line}")

    return progress


def report_lines(figures: dict[str, Any], out: Path) -> list[str]:
    """What ``rmqspec bench-search`` prints."""
    lines = []
    for search in ("guided", "random"):
        f = figures[search]
        lines.append(
            f"{search:>6}: {f['runs']} runs, {f['steps']} steps in {f['seconds']} s ({f['steps_per_second']} steps/s; "
            f"load {f['load_before']} before), {f['features']} distinct features, behaviours reached "
            f"{f['behaviours_reached']} of {f['behaviours']}, {f['corpus_entries']} corpus entries, "
            f"{f['distinct_violations']} distinct violations"
        )
        if f["behaviours_unreached"]:
            lines.append(f"        never reached where expressible: {', '.join(f['behaviours_unreached'])}")
    ratio = figures["ratios"]
    lines.append(
        f"guided / random: features {ratio['features']}x, steps/s {ratio['steps_per_second']}x, runs {ratio['runs']}x"
    )
    points = "; ".join(
        f"{s}: "
        + ", ".join(
            f"{p['seconds']:.0f} s {p['features']}"
            for p in figures[s]["curve"][:: max(1, len(figures[s]["curve"]) // 6)]
        )
        for s in ("guided", "random")
    )
    lines.append(f"feature curves (seconds, features): {points}")
    lines.append(f"picture: {out / 'features.svg'}; figures: {out / 'bench-search.json'}")
    return lines


def main_time() -> str:
    return time.strftime("rmqspec-out/bench-search-%Y%m%d-%H%M%S")
