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
from rmqspec.outfiles import write_atomic
from rmqspec.properties.search_coverage import growth_svg, sometimes_figures, vacuous_lines
from rmqspec.spec_coverage import summary_figures, write_document

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
        "directed_starts": directed_starts_summary(rows),
        "liveness": liveness_summary(rows),
        "fates": fates_summary(rows),
        "spec_branch_coverage": summary_figures(result.spec_coverage) if result.spec_coverage else None,
        **sometimes_figures(_summed(rows, "sometimes_hits")),
        "state_coverage": state_coverage_summary(result),
        "search": search_summary(result),
        "reproduced_rocketmq_bugs": reproduced_summary(rows),
    }


def reproduced_summary(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per RocketMQ bug the correct model reproduced (properties/rocketmq_bugs.py): the runs, the properties that
    reported it, and the shortest example's length and unit."""
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        for text in r.get("reproduced") or []:
            v = json.loads(text)
            e = out.setdefault(v["rocketmq_bug"], {"runs": 0, "properties": {}, "shortest": None, "unit": None})
            e["runs"] += 1
            e["properties"][v["id"]] = e["properties"].get(v["id"], 0) + 1
            if e["shortest"] is None or v["shrunk_steps"] < e["shortest"]:
                e["shortest"], e["unit"] = v["shrunk_steps"], r["unit"]
    return dict(sorted(out.items()))


def reproduced_line(summary: dict[str, Any]) -> str:
    """The campaign's line on the RocketMQ bugs its runs reproduced."""
    bugs = summary["reproduced_rocketmq_bugs"]
    if not bugs:
        return "RocketMQ 4.9.8 bugs reproduced (not violations of the model): none"
    return "RocketMQ 4.9.8 bugs reproduced (not violations of the model): " + "; ".join(
        f"{k} in {e['runs']} runs ({', '.join(f'{p} {n}' for p, n in e['properties'].items())}; shortest "
        f"{e['shortest']} steps, unit {e['unit']})"
        for k, e in bugs.items()
    )


RAREST_LISTED = 25  # summary.json and report.md list this many of the rarest features
EFFECTS_LISTED = 30  # report.md lists this many of the rarest effect branches; summary.json has them all


def _always(config: Any) -> bool:
    return True


def search_summary(result: CampaignResult) -> dict[str, Any]:
    """The search's figures: guided or random, the features reached and the corpus, the runs and the new features
    per origin (fresh, each operator), the feature curve, the rarest features, and the behaviour table: per action
    and per state fact of the model (properties/features.behaviours), the runs whose configuration could express it
    and the runs that reached it."""
    from rmqspec.properties.features import behaviours, reached_behaviour
    from rmqspec.properties.serialize import config_from_json

    rows = result.rows
    scheduler = result.scheduler
    per_origin: dict[str, dict[str, int]] = {}
    seen: set[str] = set()
    fresh_curve: list[tuple[int, int]] = []
    fresh_seen: set[str] = set()
    for r in rows:
        kind = r.get("origin", "fresh").split(" ")[0]
        entry = per_origin.setdefault(kind, {"runs": 0, "new_features": 0})
        entry["runs"] += 1
        features = r.get("features") or []
        entry["new_features"] += sum(1 for f in features if f not in seen)
        seen.update(features)
        if kind in ("fresh", "start"):
            fresh_seen.update(features)
            fresh_curve.append((len(fresh_curve) + 1, len(fresh_seen)))
    configs = [config_from_json(json.loads(r["config"])) for r in rows]
    table = []
    for key, _name, gate in behaviours():
        could = sum(1 for c in configs if gate(c))
        reached = sum(1 for r in rows if reached_behaviour(key, r.get("features") or []))
        table.append({"behaviour": key, "could": could, "reached": reached})
    hits: Counter[str] = Counter()
    for r in rows:
        hits.update(r.get("features") or [])
    # every effect branch reached (e:<Action>:<field>:<change>), with the gate of its action: no list of effects
    # exists before a run reaches them (the unreached branches of the model are the branch-coverage section's)
    gates = {name: gate for _, name, gate in behaviours()}
    effects: list[dict[str, Any]] = []
    for feature, reached in hits.items():
        if feature.startswith("e:"):
            gate = gates.get(feature.split(":")[1], _always)
            effects.append({"behaviour": feature, "could": sum(1 for c in configs if gate(c)), "reached": reached})
    effects.sort(key=lambda b: (b["reached"] / max(1, b["could"]), b["behaviour"]))
    return {
        "mode": "random" if scheduler is None or not scheduler.guided else "guided",
        "features": len(hits),
        "corpus_entries": 0 if scheduler is None else len(scheduler.entries),
        "per_origin": per_origin,
        "curve": [] if scheduler is None else scheduler.curve,
        "fresh_curve": fresh_curve[:: max(1, len(fresh_curve) // 200)],
        "rarest": [{"feature": f, "runs": n} for f, n in sorted(hits.items(), key=lambda kv: (kv[1], kv[0]))][
            :RAREST_LISTED
        ],
        "behaviours": table,
        "effects": effects,
        "behaviours_unreached": [b["behaviour"] for b in table if b["could"] and not b["reached"]],
        "behaviours_inexpressible": [b["behaviour"] for b in table if not b["could"]],
    }


def search_line(s: dict[str, Any], out: Path) -> str:
    """The campaign's line on its search."""
    unreached, inexpressible = s["behaviours_unreached"], s["behaviours_inexpressible"]
    reached = len(s["behaviours"]) - len(unreached) - len(inexpressible)
    return (
        f"search: {s['mode']}, {s['features']} distinct features, {s['corpus_entries']} corpus entries "
        f"({out / 'corpus'}); behaviours reached: {reached} of {len(s['behaviours'])}"
        + (f"; never reached where expressible: {', '.join(unreached)}" if unreached else "")
        + (f"; expressible in no run: {', '.join(inexpressible)}" if inexpressible else "")
    )


def search_lines(summary: dict[str, Any], out: Path) -> list[str]:
    """report.md's section on the search, and features.svg: the features reached against runs."""
    s = summary["search"]
    curve = [(p["runs"], p["features"]) for p in s["curve"]]
    series = [(f"{s['mode']} search, all units", curve)]
    if s["mode"] == "guided":
        series.append(("the fresh units alone (a random search's draw)", [tuple(p) for p in s["fresh_curve"]]))
    (out / "features.svg").write_text(line_chart("Distinct features reached", "runs", series), encoding="utf-8")
    lines = [
        "## Search",
        "",
        f"{s['mode'].capitalize()} search: {s['features']} distinct features (properties/features.py), "
        f"{s['corpus_entries']} corpus entries (<out>/corpus).",
        "",
        "![features](features.svg)",
        "",
        "| origin | runs | features it was first to reach |",
        "| --- | ---: | ---: |",
    ]
    lines += [f"| {k} | {v['runs']} | {v['new_features']} |" for k, v in sorted(s["per_origin"].items())]
    lines += ["", "Rarest features (runs that reached each):", ""]
    lines += [f"- `{r['feature']}`: {r['runs']}" for r in s["rarest"]]
    lines += [
        "",
        "### Behaviours",
        "",
        "Per action and per state fact of the model: the runs whose configuration could express it, and those that "
        "reached it.",
        "",
        "| behaviour | could | reached |",
        "| --- | ---: | ---: |",
    ]
    lines += [f"| `{b['behaviour']}` | {b['could']} | {b['reached']} |" for b in s["behaviours"]]
    lines += [
        "",
        f"Effect branches reached: {len(s['effects'])} (summary.json, `search.effects`); the {EFFECTS_LISTED} "
        "rarest, by the share of the runs that could reach them:",
        "",
        "| effect | could | reached |",
        "| --- | ---: | ---: |",
    ]
    lines += [f"| `{b['behaviour']}` | {b['could']} | {b['reached']} |" for b in s["effects"][:EFFECTS_LISTED]]
    lines.append("")
    return lines


def _summed(rows: list[dict[str, Any]], name: str) -> Counter[str]:
    total: Counter[str] = Counter()
    for r in rows:
        total.update(r.get(name, {}))  # rows of batches written by an older rmqspec lack it
    return total


def state_coverage_summary(result: CampaignResult) -> dict[str, Any] | None:
    """With ``--config`` naming one of the shipped configurations (``properties/check_configs``) and no planted
    bug: how many of its exhaustive distinct states the units reached (each unit's ``named_states``, portable
    fingerprints of its states up to the first outside the constraints). Exhausts the configuration here, in
    the driver (``search_coverage.exhaust``). Sets ``result.state_coverage`` (the running count, for the
    picture). None without ``--config``; ``{"config", "reason"}`` when there is no denominator."""
    from rmqspec.properties.exhaustive import named_configs
    from rmqspec.properties.search_coverage import Reached, exhaust

    named = result.named
    if named is None:
        return None
    shipped = named_configs().get(named.name)
    if shipped is None or shipped.config != named.config or shipped.bounds != named.bounds:
        return {"config": named.name, "reason": "not one of the named configurations: no exhaustive count"}
    if result.mutations:
        return {"config": named.name, "reason": "a planted bug changes the model's space: no exhaustive count"}
    try:
        space = exhaust(shipped)
    except ValueError as err:  # its bounds do not make it finite (a search limit cut it)
        return {"config": named.name, "reason": f"no exhaustive count: {err}"}
    reached = Reached(space, "campaign units", f"{len(result.rows)} runs")
    for r in result.rows:
        reached.add_keys(r.get("named_states", []), r["steps"], bool(r.get("left_constraints")), r.get("states_inside"))
    result.state_coverage = reached
    return {
        "config": named.name,
        "distinct_states": space.size,
        "reached": reached.count,
        "fraction": round(reached.fraction, 4),
        "percent": round(100 * reached.fraction, 1),
        "runs_that_left_the_constraints": reached.left,
        "unmatched": reached.unmatched,
    }


def state_coverage_line(figures: dict[str, Any] | None) -> str | None:
    """The campaign's coverage line for a named configuration, or None without ``--config``."""
    if figures is None:
        return None
    if "reason" in figures:
        return f"state coverage of {figures['config']}: {figures['reason']}"
    unmatched = f"; {figures['unmatched']} states NOT in the exhaustive set" if figures["unmatched"] else ""
    return (
        f"reached {figures['reached']:,} of {figures['distinct_states']:,} distinct states of {figures['config']} "
        f"({figures['percent']} %){unmatched}"
    )


def sometimes_report_lines(summary: dict[str, Any]) -> list[str]:
    """report.md's section on the sometimes-conditions the runs met."""
    hits = summary["sometimes_hits"]
    lines = [
        "## Sometimes-conditions",
        "",
        "Transitions of the runs' walks that met each condition that must be reachable (docs/check.md, "
        "'Sometimes-properties'):",
        "",
        "| condition | transitions |",
        "| --- | ---: |",
    ]
    lines += [f"| `{name}` | {n} |" for name, n in hits.items()]
    vacuous = vacuous_lines(hits, "the runs")
    return [*lines, "", *(f"- {line}" for line in vacuous), *([""] if vacuous else [])]


def directed_starts_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The runs that began with a directed start (properties/scenario_starts.py): how many, and per start the
    runs and those whose script ran to its end (``start_steps``; a planted bug can cut a script short)."""
    from rmqspec.properties.scenario_starts import START_BY_KEY

    per: dict[str, dict[str, int]] = {}
    for r in rows:
        key = r.get("start", "")
        if not key:
            continue
        entry = per.setdefault(key, {"runs": 0, "whole_script": 0})
        entry["runs"] += 1
        start = START_BY_KEY.get(key)
        entry["whole_script"] += int(start is not None and r.get("start_steps", 0) == len(start.prefix()[1]))
    return {"runs": sum(e["runs"] for e in per.values()), "per_start": dict(sorted(per.items()))}


def liveness_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Liveness at quiescence over the runs: runs checked (ended without a safety violation, liveness on),
    quiescences that reached the horizon or settled within the step bound, those that settled early,
    quiescence steps, runs with a liveness violation (a failed check no dead task explains), and harm:
    per cause (``TaskDies(<task>)``), the runs whose failed checks it explained, and per check id."""
    harm_runs: Counter[str] = Counter()
    harm_checks: dict[str, Counter[str]] = defaultdict(Counter)
    for r in rows:
        seen: set[str] = set()
        for text in r["liveness_harm"]:
            harm = json.loads(text)
            for cause in dict.fromkeys(c["cause"] for c in harm["causes"]):
                harm_checks[cause][harm["id"]] += 1
                seen.add(cause)
        harm_runs.update(seen)
    return {
        "checked": sum(1 for r in rows if r["liveness_checked"]),
        "reached": sum(1 for r in rows if r["liveness_reached"]),
        "settled": sum(1 for r in rows if r["liveness_settled"]),
        "quiescence_steps": sum(r["quiescence_steps"] for r in rows),
        "violations": sum(1 for r in rows if any("walk_steps" in json.loads(v) for v in r["violations"])),
        "harm": {
            cause: {"runs": n, "checks": dict(sorted(harm_checks[cause].items()))}
            for cause, n in sorted(harm_runs.items())
        },
    }


def fates_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Message fates over the runs (properties/fates.py): messages per fate, those a modelled fault caused
    (harm), the runs with any fault harm, and the redeliveries per cause (Ghost.redelivery_causes)."""
    fates: Counter[str] = Counter()
    harm: Counter[str] = Counter()
    causes: Counter[str] = Counter()
    for r in rows:
        fates.update(r.get("fates", {}))  # rows of batches written before fates were recorded lack them
        harm.update(r.get("fate_harm", {}))
        causes.update(r.get("redelivery_causes", {}))
    return {
        "messages": sum(fates.values()),
        "fates": dict(sorted(fates.items())),
        "harm": dict(sorted(harm.items())),
        "runs_with_harm": sum(1 for r in rows if r.get("fate_harm")),
        "lost": fates.get("lost", 0) + fates.get("retry: lost", 0),
        "redelivery_causes": dict(causes.most_common()),
    }


def fates_lines(summary: dict[str, Any]) -> list[str]:
    """report.md's section on message fates and redelivery causes."""
    f = summary["fates"]
    lines = [
        "## Message fates",
        "",
        f"{f['messages']} messages over all runs, each with one fate at the end of its run (after the quiescence; "
        "docs/spec.md, 'Allowed anomalies, each with its cause'). A skip names its cause; one a modelled fault "
        "caused is that fault's harm "
        f"({f['runs_with_harm']} runs); `lost` is a violation ({f['lost']}).",
        "",
        "| fate | messages | of which fault harm |",
        "| --- | ---: | ---: |",
    ]
    for name, n in f["fates"].items():
        lines.append(f"| {name} | {n} | {f['harm'].get(name, 0)} |")
    lines += [
        "",
        "Redeliveries per cause (every redelivery has one; docs/spec.md, 'Allowed anomalies, each with its cause'):",
        "",
    ]
    if not f["redelivery_causes"]:
        return [*lines, "None.", ""]
    lines += ["| cause | redeliveries |", "| --- | ---: |"]
    lines += [f"| {cause} | {n} |" for cause, n in f["redelivery_causes"].items()]
    return [*lines, ""]


def liveness_lines(summary: dict[str, Any]) -> list[str]:
    """report.md's liveness section: the runs quiesced and checked, and the harm per cause."""
    live = summary["liveness"]
    lines = ["## Liveness at quiescence", ""]
    if not live["checked"]:
        return [*lines, "Not checked (`--no-liveness`, or every run stopped at a safety violation).", ""]
    lines += [
        f"{live['checked']} runs quiesced and checked (LIV-1..LIV-5, docs/spec.md, 'Liveness at quiescence'): "
        f"{live['reached']} reached "
        f"the horizon or settled within the step bound ({live['settled']} settled early), "
        f"{live['quiescence_steps']} quiescence steps; {live['violations']} runs with a liveness violation "
        "(listed with the failures below).",
        "",
        "Harm: checks that failed only where a task still dead explains them (a modelled fault, not a violation):",
        "",
    ]
    if not live["harm"]:
        return [*lines, "None.", ""]
    lines += ["| cause | runs | failed checks (runs) |", "| --- | ---: | --- |"]
    for cause, harm in live["harm"].items():
        checks = ", ".join(f"{vid} {n}" for vid, n in harm["checks"].items())
        lines.append(f"| `{cause}` | {harm['runs']} | {checks} |")
    return [*lines, ""]


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
    write_atomic(out / "summary.json", json.dumps(summary, indent=2) + "\n")
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
    violations_chart = line_chart("Distinct violations found", "runs", [("violations", violations_curve)])
    write_atomic(out / "violations.svg", violations_chart)
    states_chart = line_chart("Coverage growth", "runs", [("distinct abstract states", states_curve)])
    write_atomic(out / "coverage.svg", states_chart)
    write_atomic(out / "rules.svg", line_chart("Distinct rules fired", "runs", [("rules", rules_curve)]))
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
    directed = summary["directed_starts"]
    lines += ["", f"Directed starts: {directed['runs']} runs began with a scripted prefix (docs/campaign.md)."]
    for key, e in directed["per_start"].items():
        lines.append(f"- `{key}`: {e['runs']} runs, {e['whole_script']} ran the whole script")
    coverage_line = state_coverage_line(summary["state_coverage"])
    if coverage_line is not None:
        lines += ["", "## State coverage of the named configuration", "", coverage_line + "."]
        if result.state_coverage is not None:
            reached = result.state_coverage
            svg = growth_svg(reached.space, [reached], "this campaign's units, in unit order")
            write_atomic(out / "state-coverage.svg", svg)
            lines += [
                "",
                f"Each unit's states count until it first leaves the constraints ({reached.left} of {reached.runs} "
                "runs left them); docs/check.md, 'A denominator for random search'.",
                "",
                "![state coverage](state-coverage.svg)",
            ]
    lines += ["", *search_lines(summary, out)]
    lines += ["", "## RocketMQ bugs reproduced", "", reproduced_line(summary) + " (properties/rocketmq_bugs.py).", ""]
    lines += ["", *sometimes_report_lines(summary)]
    lines += liveness_lines(summary)
    lines += fates_lines(summary)
    lines += spec_coverage_lines(result, out)
    lines += ["## Failures (deduplicated by signature)", ""]
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
    write_atomic(report, "\n".join(lines) + "\n")
    return report


UNREACHED_LISTED = 40  # report.md lists this many unreached branches; coverage.json has them all


def spec_coverage_lines(result: CampaignResult, out: Path) -> list[str]:
    """Writes coverage.json and branches.svg; report.md's section on spec/ branch coverage."""
    lines = ["## Branch coverage of spec/", ""]
    document = result.spec_coverage
    if document is None:
        return [*lines, "Not measured (`--coverage-every 0`, or coverage.py missing on the executors).", ""]
    write_document(out / "coverage.json", document)
    totals = document["totals"]
    curve = [(n, k) for n, k in document["growth"]]
    if curve and curve[-1][0] < document["runs"]:  # the runs after the last measured one reach no more
        curve.append((document["runs"], curve[-1][1]))
    write_atomic(
        out / "branches.svg",
        line_chart(
            f"spec/ branches reached (y axis: the {totals['reachable']} reachable)",
            "runs",
            [("branches reached (measured runs)", curve)],
            y_max=totals["reachable"],
        ),
    )
    excluded = ", ".join(f"{c} {n}" for c, n in document["excluded_by_category"].items()) or "none"
    lines += [
        f"**{totals['reached']} of {totals['reachable']} reachable branches reached ({totals['percent']} %)** "
        f"in the {document['measured_runs']} measured runs of {document['runs']}; {totals['branches']} branches "
        f"in all, {totals['excluded']} excluded as unreachable by design ({excluded}; "
        "`rmqspec/coverage_exclusions.py`). Reached means executed, not verified. All of it: "
        f"`coverage.json`, or `rmqspec coverage --campaign {out}`.",
        "",
        "![branches](branches.svg)",
        "",
        "| file | branches | excluded | reachable | reached | % |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, f in document["files"].items():
        lines.append(
            f"| `{name}` | {f['branches']} | {f['excluded']} | {f['reachable']} | {f['reached']} | {f['percent']} |"
        )
    unreached = document["unreached"]
    lines += ["", f"Unreached branches: {len(unreached) or 'none'}", ""]
    for b in unreached[:UNREACHED_LISTED]:
        lines.append(f"- `{b['where']}` {b['function'] or '(module)'}: `{b['source']}` -> `{b['target']}`")
    if len(unreached) > UNREACHED_LISTED:
        lines.append(f"- ... and {len(unreached) - UNREACHED_LISTED} more in `coverage.json`")
    if document["stale_exclusions"]:
        lines += ["", f"**Stale exclusions** (not applied): {len(document['stale_exclusions'])}, see `coverage.json`"]
    return [*lines, ""]


def line_chart(
    title: str, x_label: str, series: list[tuple[str, list[tuple[int, int]]]], y_max: int | None = None
) -> str:
    """A small dependency-free SVG line chart of integer series (y from 0 to ``y_max``, default the highest)."""
    width, height, left, bottom, top = 560, 300, 60, 40, 36
    xs = [x for _, pts in series for x, _ in pts] or [1]
    ys = [y for _, pts in series for _, y in pts] or [0]
    x_max, y_max = max(max(xs), 1), max(max(ys), y_max or 0, 1)

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
