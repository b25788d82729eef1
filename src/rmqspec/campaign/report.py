"""The campaign's human-facing output: ``summary.json``, ``report.md`` and its SVG pictures.

Pictures are plain SVG written here (no plotting dependency): distinct violations found as runs
complete, coverage growth (distinct abstract states and distinct rules fired), and per-profile
statistics. The summary is flat and aggregatable: ``valid``, counts, and the failure signatures.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from rmqspec.campaign.runner import CampaignResult

COLORS = ("#4a7bd0", "#d0704a", "#3a9a5b", "#9a3a8a")


def summarize(result: CampaignResult, master: str) -> dict[str, Any]:
    rows = result.rows
    rules: Counter[str] = Counter()
    for r in rows:
        rules.update(r["rules"])
    steps = sum(r["steps"] for r in rows)
    return {
        "valid": result.valid,
        "master": master,
        "parallelism": result.parallelism,
        "runs": len(rows),
        "steps": steps,
        "seconds": result.seconds,
        "spark_startup_seconds": result.spark_startup_seconds,
        "steps_per_second": round(steps / result.seconds, 1) if result.seconds else None,
        "distinct_abstract_states": len({h for r in rows for h in r["abstract_states"]}),
        "invariant_checks": sum(r["invariant_checks"] for r in rows),
        "deliveries": sum(r["deliveries"] for r in rows),
        "redeliveries": sum(r["redeliveries"] for r in rows),
        "determinism_checks": result.determinism_checks,
        "violation_count": sum(r["violation_count"] for r in rows),
        "distinct_violations": len(result.failures),
        "failures": [
            {k: f[k] for k in ("signature", "id", "name", "detail", "shrunk_steps", "occurrences", "found_by")}
            for f in result.failures.values()
        ],
        "rules": dict(rules.most_common()),
        "profiles": _per_profile(rows),
    }


def _per_profile(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    acc: dict[str, dict[str, Any]] = defaultdict(lambda: {"runs": 0, "steps": 0, "violations": 0, "states": set()})
    for r in rows:
        p = acc[r["profile"]]
        p["runs"] += 1
        p["steps"] += r["steps"]
        p["violations"] += r["violation_count"]
        p["states"].update(r["abstract_states"])
    return {
        name: {
            "runs": p["runs"],
            "steps": p["steps"],
            "violations": p["violations"],
            "distinct_states": len(p["states"]),
        }
        for name, p in sorted(acc.items())
    }


def write_report(result: CampaignResult, summary: dict[str, Any], out: Path, store: Path) -> Path:
    """Write summary.json, the pictures and report.md; returns the report's path."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    rows = result.rows
    found: set[str] = set()
    states: set[int] = set()
    rules: set[str] = set()
    violations_curve, states_curve, rules_curve = [], [], []
    for n, r in enumerate(rows, 1):
        found.update(json.loads(v)["signature"] for v in r["violations"])
        states.update(r["abstract_states"])
        rules.update(k for k, c in r["rules"].items() if c)
        violations_curve.append((n, len(found)))
        states_curve.append((n, len(states)))
        rules_curve.append((n, len(rules)))
    (out / "violations.svg").write_text(
        line_chart("Distinct violations found", "runs", [("violations", violations_curve)]), encoding="utf-8"
    )
    (out / "coverage.svg").write_text(
        line_chart("Coverage growth", "runs", [("distinct abstract states", states_curve)]), encoding="utf-8"
    )
    (out / "rules.svg").write_text(
        line_chart("Distinct rules fired", "runs", [("rules", rules_curve)]), encoding="utf-8"
    )
    lines = [
        "# rmqspec campaign report",
        "",
        f"- verdict: **{'no violations' if summary['valid'] else 'VIOLATIONS FOUND'}**",
        f"- master `{summary['master']}`, parallelism {summary['parallelism']}, {summary['runs']} runs, "
        f"{summary['steps']} steps in {summary['seconds']} s ({summary['steps_per_second']} steps/s; "
        f"Spark start-up {summary['spark_startup_seconds']} s)",
        f"- {summary['distinct_abstract_states']} distinct abstract states, {summary['invariant_checks']} "
        f"property checks, {summary['redeliveries']} redeliveries of {summary['deliveries']} deliveries",
        f"- determinism self-check: {summary['determinism_checks']} runs executed twice, all identical",
        "",
        "![violations](violations.svg) ![coverage](coverage.svg) ![rules](rules.svg)",
        "",
        "## Per profile",
        "",
        "| profile | runs | steps | violations | distinct states |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for name, p in summary["profiles"].items():
        lines.append(f"| {name} | {p['runs']} | {p['steps']} | {p['violations']} | {p['distinct_states']} |")
    lines += ["", "## Failures (deduplicated by signature)", ""]
    if not result.failures:
        lines.append("None.")
    for sig, f in sorted(result.failures.items()):
        lines.append(
            f"- `{sig}` {f['id']} {f['name']}: {f['detail']} ({f['occurrences']} runs; shrunk from "
            f"{f['original_steps']} to {f['shrunk_steps']} steps; stored in `{store}`)"
        )
    lines += ["", "## Rules fired", ""]
    lines += [f"- {name}: {count}" for name, count in summary["rules"].items()]
    report = out / "report.md"
    report.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return report


def line_chart(title: str, x_label: str, series: list[tuple[str, list[tuple[int, int]]]]) -> str:
    """A small dependency-free SVG line chart of integer series."""
    width, height, left, bottom, top = 560, 300, 60, 40, 36
    xs = [x for _, pts in series for x, _ in pts] or [1]
    ys = [y for _, pts in series for _, y in pts] or [0]
    x_max, y_max = max(max(xs), 1), max(max(ys), 1)

    def sx(x: float) -> float:
        return left + (width - left - 20) * x / x_max

    def sy(y: float) -> float:
        return height - bottom - (height - bottom - top) * y / y_max

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
        'font-size="12">',
        f'<text x="{left}" y="20" font-size="14" font-weight="bold">{title}</text>',
        f'<line x1="{left}" y1="{sy(0)}" x2="{width - 20}" y2="{sy(0)}" stroke="#444"/>',
        f'<line x1="{left}" y1="{sy(0)}" x2="{left}" y2="{top}" stroke="#444"/>',
        f'<text x="{(width + left) / 2}" y="{height - 8}" text-anchor="middle">{x_label} ({x_max})</text>',
        f'<text x="{left - 6}" y="{sy(y_max) + 4}" text-anchor="end">{y_max}</text>',
        f'<text x="{left - 6}" y="{sy(0) + 4}" text-anchor="end">0</text>',
    ]
    for k, (name, pts) in enumerate(series):
        color = COLORS[k % len(COLORS)]
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in ([(0, 0)] + pts))
        parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{path}"/>')
        parts.append(f'<text x="{left + 10}" y="{top + 14 + 14 * k}" fill="{color}">{name}</text>')
    parts.append("</svg>\n")
    return "\n".join(parts)
