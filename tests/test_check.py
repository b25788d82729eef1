"""Exhaustive checking (``rmqspec check``): the canonical form is sound, the named configurations' state counts
are pinned, planted bugs are refuted with shortest counterexamples, liveness lassos catch the timer-stop bugs
and spare the correct model, and the command reports all of it."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from rmqspec.campaign.units import sample_config, with_allocation_strategy, with_faults
from rmqspec.cli import main
from rmqspec.properties import canonical as canon
from rmqspec.properties.exhaustive import SOMETIMES, Bounds, check, named_configs, replay
from rmqspec.properties.lasso import find_lassos
from rmqspec.properties.scenario_starts import STARTS
from rmqspec.spec.actions import Action
from rmqspec.spec.admin_reset import AdminReset
from rmqspec.spec.config import Config, ConfigError
from rmqspec.spec.invariants import check_state, check_step
from rmqspec.spec.model import Model
from rmqspec.spec.state import State

NO_FAULTS = {"client_crashes": 0, "client_shutdowns": 0, "broker_crashes": 0, "send_back_failures": 0}


def _runs(seeds: range) -> Iterator[tuple[str, Config, tuple[Action, ...], random.Random]]:
    """Random campaign configurations walked from ``initial()``, then every directed start of the campaign
    (properties/scenario_starts.py: pull expiry, lock expiry after a stall, OFFSET_ILLEGAL, the slave, ...)
    walked along its scripted prefix and on at random."""
    for seed in seeds:
        rng = random.Random(seed)
        try:
            config = with_allocation_strategy(rng, with_faults(rng, sample_config(rng)))
        except ConfigError:
            continue
        yield f"seed {seed}", config, (), rng
    for start in STARTS:
        config, prefix = start.prefix()
        yield start.key, config, prefix, random.Random(start.key)


def _bisimulation_mismatch(seeds: range, steps: int = 200, after_prefix: int = 40) -> str | None:
    """At every state of the runs, check that the state and its canonical form enable the same actions, that
    each pair of successors has one canonical form, and that every property gives the same verdict on both.
    The first mismatch, described, or None."""
    for where, config, prefix, rng in _runs(seeds):
        model = Model(config)
        relative = canon.time_is_relative(config)
        s = model.initial()
        for step in range(len(prefix) + (after_prefix if prefix else steps)):
            acts = model.enabled(s)
            if not acts:
                break
            c = canon.canonical(s, config, relative)
            shifted = [_shifted(a, s, config) for a in acts] if relative else acts
            c_acts = model.enabled(c)
            if c_acts != shifted:
                return f"{where} step {step}: enabled actions differ"
            if sorted(v.id for v in check_state(model, s)) != sorted(v.id for v in check_state(model, c)):
                return f"{where} step {step}: invariants differ"
            for a, b in zip(acts, c_acts, strict=True):
                n1, n2 = model.step(s, a), model.step(c, b)
                if canon.canonical(n1, config, relative) != canon.canonical(n2, config, relative):
                    return f"{where} step {step}: successors of {a!r} differ"
                if {v.id for v in check_step(model, s, a, n1)} != {v.id for v in check_step(model, c, b, n2)}:
                    return f"{where} step {step}: action properties of {a!r} differ"
            if step < len(prefix):
                s = model.step(s, prefix[step])
                continue
            # favour Tick one time in four so that walks reach long idle stretches and old times get clamped
            ticks = [a for a in acts if type(a).__name__ == "Tick"]
            s = model.step(s, ticks[0] if ticks and rng.random() < 0.25 else acts[rng.randrange(len(acts))])
    return None


def _shifted(a: Action, s: State, config: Config) -> Action:
    """The action as the canonical state enables it: an admin reset by timestamp names a store time, which the
    canonical form shifts (R3.10a); every other action parameter is free of time."""
    if isinstance(a, AdminReset) and a.by_timestamp:
        return replace(a, target=canon._Shift(s.now, canon.DEFAULT_CLAMP_MS, config).t(a.target))
    return a


def test_the_canonical_form_is_a_one_step_bisimulation_on_campaign_walks() -> None:
    assert _bisimulation_mismatch(range(0, 40)) is None


def test_the_bisimulation_check_catches_a_canonical_form_that_forgets_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    # a canonical form that treats every pq's lastPullTimestamp as "now" hides pull expiry (R6.6)
    original = canon._Shift.pq

    def forgetful(self: canon._Shift, pq: object) -> object:
        out = original(self, pq)  # type: ignore[arg-type]
        return None if out is None else out._replace(last_pull=canon.CLOCK_ORIGIN)

    monkeypatch.setattr(canon._Shift, "pq", forgetful)
    assert _bisimulation_mismatch(range(0, 40)) is not None


def test_clock_shifts_and_report_counters_do_not_make_states_distinct() -> None:
    config = Config(consumers=1, queues=1, messages_per_queue=0, **NO_FAULTS)
    model = Model(config)
    s = model.initial()
    later = s._replace(now=s.now + 5000, ghost=s.ghost._replace(deliveries=7, redeliveries=3))
    later = later._replace(broker=later.broker._replace(next_flush=s.broker.next_flush + 5000))
    assert canon.canonical(later, config) == canon.canonical(s, config)
    assert canon.canonical(s._replace(now=1), config) != canon.canonical(s, config)  # the flush is 1 ms nearer


def test_the_named_configurations_load_and_describe_themselves() -> None:
    named = named_configs()
    assert {"idle-consumer", "one-message"} <= set(named)
    for nc in named.values():
        assert nc.description
        assert nc.bounds.max_channel is not None  # every shipped configuration bounds its connections


def test_a_bad_check_configuration_is_named_with_its_field(tmp_path: Path) -> None:
    from rmqspec.properties.exhaustive import load_named

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"config": {}, "bounds": {"max_chanel": 1}}))
    with pytest.raises(ConfigError, match="max_chanel"):
        load_named(bad)


# The exhaustive counts of the named configurations: a change to the model that changes the reachable space
# fails here and must explain the new figure (docs/check.md, "Pinned counts").
PINNED = {
    "idle-consumer": {"distinct_states": 1201, "transitions": 4025, "pruned": 948, "diameter": 22},
}


@pytest.mark.parametrize("name", sorted(PINNED))
def test_the_named_configuration_has_its_pinned_state_count(name: str) -> None:
    nc = named_configs()[name]
    r = check(nc.config, nc.bounds, stop_at_first=False).result
    assert r.exhausted and r.valid
    got = {
        "distinct_states": r.distinct_states,
        "transitions": r.transitions,
        "pruned": r.pruned,
        "diameter": r.diameter,
    }
    assert got == PINNED[name]


def test_one_message_within_fifteen_seconds_is_exhausted_with_its_pinned_count_and_reaches_its_sometimes() -> None:
    nc = named_configs()["one-message"]
    r = check(nc.config, replace(nc.bounds, horizon_ms=15_000), stop_at_first=False).result
    assert r.exhausted and r.valid
    assert (r.distinct_states, r.transitions, r.pruned) == (53_870, 243_697, 49_043)
    assert sum(r.depth_counts) == r.distinct_states
    # a single consumer of one message can send it back to the DLQ; the others need more consumers or queues
    assert "routed-to-dlq" in r.sometimes
    witness = r.sometimes["routed-to-dlq"]
    _, end = replay(Model(nc.config), _choices(nc.config, witness.actions))
    assert end.broker.dlq


def _choices(config: Config, actions: list[object]) -> list[int]:
    model = Model(config)
    s = model.initial()
    out = []
    for a in actions:
        out.append(model.enabled(s).index(a))  # type: ignore[arg-type]
        s = model.step(s, a)  # type: ignore[arg-type]
    return out


def test_a_planted_bug_is_refuted_with_a_shortest_counterexample_that_replays() -> None:
    base = named_configs()["one-message"]
    config = replace(base.config, mutations=frozenset({"commit_past_cached"}))
    r = check(config, replace(base.bounds, horizon_ms=15_000)).result
    assert not r.valid and r.stopped_by == "violation"
    first = r.violations[0]
    assert first.id in {"INV-2", "INV-9", "INV-16"}
    # breadth-first: no shorter path breaks anything
    shorter = check(config, replace(base.bounds, horizon_ms=15_000, max_depth=first.depth - 1)).result
    assert shorter.valid
    model = Model(config)
    s: State = model.initial()
    broken = False
    for k, a in enumerate(first.actions):
        n = model.step(s, a)
        if k == len(first.actions) - 1:
            broken = any(v.id == first.id for v in check_state(model, n) + check_step(model, s, a, n))
        s = n
    assert broken


def test_collecting_every_violation_keeps_one_per_property_and_action() -> None:
    base = named_configs()["one-message"]
    config = replace(base.config, mutations=frozenset({"commit_past_cached"}))
    r = check(config, replace(base.bounds, horizon_ms=12_000), stop_at_first=False).result
    keys = [(v.id, v.action) for v in r.violations]
    assert len(keys) == len(set(keys)) >= 2
    assert r.exhausted


# Liveness as fair cycles. The timer-stop bugs are invisible to every safety property (tests/test_planted_bugs.py,
# LIVENESS_ONLY); each needs a configuration where its timer is the only way forward.
QUERY_ERROR_ONCE = Config(consumers=1, queues=1, messages_per_queue=0, query_errors=1, **NO_FAULTS)


def test_a_lasso_catches_a_persist_timer_that_stops() -> None:
    config = Config(consumers=1, queues=1, messages_per_queue=0, mode="BROADCASTING", **NO_FAULTS)
    planted = replace(config, mutations=frozenset({"persist_timer_stops"}))
    search = check(planted, Bounds(max_channel=1, max_states=20_000), keep_edges=True)
    lassos = find_lassos(search)
    assert [lz.id for lz in lassos] == ["LIV-2"]
    assert not any(type(a).__name__ == "PersistOffsets" for a in lassos[0].cycle)


def test_the_correct_idle_consumer_has_no_lasso_and_its_planted_twin_of_the_rebalance_timer_neither() -> None:
    # one consumer gets its queue at its first rebalance, so a rebalance timer that stops changes nothing here
    nc = named_configs()["idle-consumer"]
    for mutations in (frozenset(), frozenset({"rebalance_timer_stops"})):
        search = check(replace(nc.config, mutations=mutations), nc.bounds, keep_edges=True)
        assert search.result.exhausted
        assert find_lassos(search) == []


def test_the_sometimes_properties_are_named_and_described() -> None:
    assert len({s.name for s in SOMETIMES}) == len(SOMETIMES) == 5
    assert all(s.description for s in SOMETIMES)


def test_check_command_reports_statistics_and_exits_zero_on_the_correct_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["check", "--config", "idle-consumer", "--json", "--quiet", "--out", str(tmp_path)])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0
    assert doc["exhausted"] and doc["valid"] and doc["distinct_states"] == PINNED["idle-consumer"]["distinct_states"]
    assert doc["liveness"].startswith("searched")
    assert set(doc["sometimes"]) == {s.name for s in SOMETIMES}


def test_check_command_writes_the_shortest_counterexample_as_trace_and_picture(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["check", "--config", "one-message", "--horizon", "15000", "--mutation", "commit_past_cached"]
    code = main([*argv, "--quiet", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 1
    assert "shortest path, 11 steps" in out
    traces = sorted(tmp_path.glob("violation-1-*.trace.jsonl"))
    assert traces and sorted(tmp_path.glob("violation-1-*.svg"))
    assert main(["check-trace", str(traces[0])]) == 1  # the trace replays to its violation against the model


def test_check_command_names_a_bad_configuration(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--config", "no-such-configuration"]) == 2
    assert "no-such-configuration" in capsys.readouterr().err


def test_random_walks_reach_a_counted_fraction_of_an_exhausted_space(tmp_path: Path) -> None:
    from rmqspec.properties.exhaustive import coverage_svg, walk_coverage

    cov = walk_coverage(named_configs()["idle-consumer"], walks=6, steps=120)
    assert cov.distinct_states == PINNED["idle-consumer"]["distinct_states"]
    assert len(cov.curve) == 6 and cov.curve == sorted(cov.curve)  # a running count never falls
    assert 0 < cov.curve[-1] < cov.distinct_states
    assert "<polyline" in coverage_svg(cov)


def test_the_counterexample_bench_prints_the_shortest_beside_the_shrunk(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench-counterexamples", "--mutation", "commit_past_cached", "--seconds", "30", "--walks", "20"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| commit_past_cached"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] in named_configs() and int(cells[3]) <= int(cells[8])  # BFS is never longer than shrunk


def test_a_lasso_catches_a_rebalance_timer_that_stops_where_the_periodic_rebalance_is_the_only_way_on() -> None:
    nc = named_configs()["query-error-5x"]
    planted = check(replace(nc.config, mutations=frozenset({"rebalance_timer_stops"})), nc.bounds, keep_edges=True)
    lassos = find_lassos(planted)
    assert [lz.id for lz in lassos] == ["LIV-1"]
    assert not any(type(a).__name__ == "Rebalance" for a in lassos[0].cycle)
    # the correct model has no lasso among the same number of states (evidence, not proof: the search is cut)
    correct = check(nc.config, nc.bounds, keep_edges=True)
    assert correct.result.stopped_by == "max_states"
    assert find_lassos(correct) == []
