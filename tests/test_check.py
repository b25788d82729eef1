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
from rmqspec.properties.exhaustive import SOMETIMES, Bounds, Search, Sometimes, check, named_configs, replay
from rmqspec.properties.explain import explored_graph, unavoidable_steps
from rmqspec.properties.lasso import find_lassos
from rmqspec.properties.scenario_starts import STARTS
from rmqspec.properties.step_guards import StepChecks
from rmqspec.spec.actions import Action
from rmqspec.spec.admin_reset import AdminReset
from rmqspec.spec.clock import Tick
from rmqspec.spec.config import Config, ConfigError
from rmqspec.spec.invariants import ACTION_PROPERTIES, check_state, check_step
from rmqspec.spec.model import Model
from rmqspec.spec.property_types import ActionProperty
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
        if out is None:
            return None
        key = list(out)
        key[canon._P_LAST_PULL] = canon.CLOCK_ORIGIN
        return tuple(key)

    monkeypatch.setattr(canon._Shift, "pq", forgetful)
    assert _bisimulation_mismatch(range(0, 40)) is not None


def _walk_transitions(seeds: range, steps: int = 120) -> Iterator[tuple[Model, State, Action, State]]:
    """Every transition of the campaign runs of ``_runs``: the scripted prefix, then a random walk."""
    for _, config, prefix, rng in _runs(seeds):
        model = Model(config)
        s = model.initial()
        for step in range(len(prefix) + steps):
            acts = model.enabled(s)
            if not acts:
                break
            for a in acts:
                yield model, s, a, model.step(s, a)
            s = model.step(s, prefix[step] if step < len(prefix) else acts[rng.randrange(len(acts))])


def _memo_mismatch(seeds: range) -> str | None:
    """The first state of the runs whose memoised canonical key (one ``CanonicalKeys`` for a whole run, as the
    search uses it) differs from a key built afresh, or None."""
    keys: canon.CanonicalKeys | None = None
    for model, _, _, n in _walk_transitions(seeds, steps=60):
        if keys is None or keys.config is not model.config:
            keys = canon.CanonicalKeys(model.config, canon.time_is_relative(model.config))
        fresh = canon.CanonicalKeys(model.config, keys.relative_time).key(n)
        if keys.key(n) != fresh or hash(keys.key(n)) != hash(fresh):
            return f"{model.config}: the memoised key of a state at {n.now} ms differs"
    return None


def test_the_memoised_canonical_key_equals_a_fresh_one_on_campaign_walks() -> None:
    assert _memo_mismatch(range(0, 12)) is None


def test_the_memo_check_catches_keys_kept_across_a_clock_change(monkeypatch: pytest.MonkeyPatch) -> None:
    # a memo that survives a Tick keeps the old clock's shifted times for the records the Tick left alone
    def renew_keeping_the_memo(self: canon.CanonicalKeys, now: int) -> canon._Shift:
        self._now = now
        self._shift = canon._Shift(now, self.clamp_ms, self.config)
        return self._shift

    monkeypatch.setattr(canon.CanonicalKeys, "_renew", renew_keeping_the_memo)
    assert _memo_mismatch(range(0, 12)) is not None


def test_a_step_check_is_skipped_only_where_its_guard_returns_at_once() -> None:
    # every check StepChecks leaves out for a transition would have returned "holds" / "not reached" on it
    per_model: dict[Config, tuple[StepChecks[ActionProperty], StepChecks[Sometimes]]] = {}
    skipped = 0
    for model, s, a, n in _walk_transitions(range(0, 12)):
        if model.config not in per_model:
            per_model[model.config] = (
                StepChecks(model, ACTION_PROPERTIES, lambda p: p.check),
                StepChecks(model, SOMETIMES, lambda x: x.holds),
            )
        props, some = per_model[model.config]
        asked_p, asked_s = props.for_action(a), some.for_action(a)
        for p in ACTION_PROPERTIES:
            if p not in asked_p:
                skipped += 1
                assert p.check(model, s, a, n) is None, (p.id, a)
        for x in SOMETIMES:
            if x not in asked_s:
                skipped += 1
                assert x.holds(model, s, a, n) is False, (x.name, a)
    assert skipped > 100_000  # the guards do spare most calls


def test_a_guard_that_reads_the_state_or_the_answer_is_never_trusted() -> None:
    model = Model(Config(consumers=1, queues=1, messages_per_queue=0, **NO_FAULTS))

    def reads_the_state(m: Model, s: State, a: Action, t: State) -> str | None:
        if not isinstance(a, Tick) or s.now > 0:
            return None
        return "broken"

    def guard_then_more(m: Model, s: State, a: Action, t: State) -> str | None:
        if not isinstance(a, Tick):
            print("not a tick")
            return None
        return "broken"

    def model_guard(m: Model, s: State, a: Action, t: State) -> str | None:
        if not m.orderly or not isinstance(a, Tick):
            return None
        return "broken"

    checks = StepChecks(model, [reads_the_state, guard_then_more, model_guard], lambda f: f)
    pull = next(x for x in model.enabled(model.initial()) if not isinstance(x, Tick))
    # a Tick could fail the first two (the state decides, or the guard does more than return): both are asked;
    # the third is spared on a concurrent consumer, whatever the action
    assert checks.for_action(Tick()) == (reads_the_state, guard_then_more)
    # any other action certainly makes the first return at once; the second's guard is not a plain return
    assert checks.for_action(pull) == (guard_then_more,)


def test_the_optimised_search_agrees_with_the_plain_one() -> None:
    # memoised keys and guard-skipped checks change no count, no witness and no counterexample
    one = named_configs()["one-message"]
    cases = [
        (named_configs()["idle-consumer"].config, named_configs()["idle-consumer"].bounds),
        (one.config, replace(one.bounds, horizon_ms=8_000)),
        (replace(one.config, mutations=frozenset({"commit_past_cached"})), replace(one.bounds, horizon_ms=12_000)),
    ]
    for config, bounds in cases:
        fast = check(config, bounds, stop_at_first=False, optimised=True).result
        plain = check(config, bounds, stop_at_first=False, optimised=False).result
        assert (fast.distinct_states, fast.transitions, fast.pruned) == (
            plain.distinct_states,
            plain.transitions,
            plain.pruned,
        )
        assert fast.depth_counts == plain.depth_counts and fast.action_counts == plain.action_counts
        assert fast.sometimes_hits == plain.sometimes_hits
        assert [(v.id, v.action, v.actions) for v in fast.violations] == [
            (v.id, v.action, v.actions) for v in plain.violations
        ]
    assert fast.violations  # the planted bug is found by both


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


def test_one_message_within_fifteen_seconds_routes_a_message_to_the_dlq_on_a_witness_that_replays() -> None:
    # its figures are checked by tests/test_check_configs.py against properties/check_configs/one-message.json
    nc = named_configs()["one-message"]
    bounds, expected = nc.tested()
    assert bounds.horizon_ms == 15_000
    r = check(nc.config, bounds, stop_at_first=False).result
    assert r.exhausted and r.valid and r.distinct_states == expected["distinct_states"]
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


def _path_avoiding(search: Search, target: int, label: int) -> list[Action] | None:
    """A path of actions from the initial state to state ``target`` of ``search``'s graph that never takes the
    action interned as ``label``, or None."""
    g = search.graph
    adjacency: dict[int, list[tuple[int, int]]] = {}
    for a, b, act in zip(g.src, g.dst, g.act, strict=True):
        if b >= 0 and act != label:
            adjacency.setdefault(a, []).append((b, act))
    parent: dict[int, tuple[int, int]] = {0: (-1, -1)}
    queue = [0]
    for node in queue:
        for b, act in adjacency.get(node, []):
            if b not in parent:
                parent[b] = (node, act)
                queue.append(b)
    if target not in parent:
        return None
    path = []
    while target != 0:
        target, act = parent[target]
        path.append(g.action_list[act])
    return path[::-1]


def test_a_counterexample_marks_the_actions_every_path_takes_and_only_those() -> None:
    # dlq_one_retry_late (R7.5): the first failure may be any failing answer, so that step is one way among
    # others; the produce, the pulls and the second failure are not
    one = named_configs()["one-message"]
    config = replace(one.config, mutations=frozenset({"dlq_one_retry_late"}))
    bounds = replace(one.bounds, horizon_ms=11_000)
    found = check(config, bounds).result.violations[0]
    search = explored_graph(config, bounds)
    assert search is not None
    u = unavoidable_steps(search, found)
    assert 1 in u.steps and len(found.actions) in u.steps and u.dominator_steps[-1] == len(found.actions)
    unmarked = [k for k in range(1, len(found.actions) + 1) if k not in u.steps]
    assert unmarked  # the explanation tells essential steps from incidental ones
    model = Model(config)
    keys = canon.CanonicalKeys(config)
    s = model.initial()
    for a in found.actions[:-1]:  # an action property: the violating state is where the breaking step starts
        s = model.step(s, a)
    target = search.visited[keys.fingerprint(s)]
    for k in unmarked:  # another path reaches the same violating state without that step's action
        other = _path_avoiding(search, target, search.graph.actions[found.actions[k - 1]])
        assert other is not None
        t = model.initial()
        for a in other:
            t = model.step(t, a)
        assert keys.fingerprint(t) == keys.fingerprint(s) and found.actions[k - 1] not in other
    for k in u.steps[:-1]:  # and none without a marked one
        assert _path_avoiding(search, target, search.graph.actions[found.actions[k - 1]]) is None


def test_collecting_every_violation_keeps_one_per_property_and_action() -> None:
    base = named_configs()["one-message"]
    config = replace(base.config, mutations=frozenset({"commit_past_cached"}))
    r = check(config, replace(base.bounds, horizon_ms=12_000), stop_at_first=False).result
    keys = [(v.id, v.action) for v in r.violations]
    assert len(keys) == len(set(keys)) >= 2
    assert r.exhausted


# Liveness as fair cycles. The timer-stop bugs are invisible to every safety property but INV-27, which these tests
# unwatch (the fixture inv27_unwatched); each needs a configuration where its timer is the only way forward.
QUERY_ERROR_ONCE = Config(consumers=1, queues=1, messages_per_queue=0, query_errors=1, **NO_FAULTS)


@pytest.mark.usefixtures("inv27_unwatched")
def test_a_lasso_catches_a_persist_timer_that_stops() -> None:
    config = Config(consumers=1, queues=1, messages_per_queue=0, mode="BROADCASTING", **NO_FAULTS)
    planted = replace(config, mutations=frozenset({"persist_timer_stops"}))
    search = check(planted, Bounds(max_channel=1, max_states=20_000), keep_edges=True)
    lassos = find_lassos(search)
    assert [lz.id for lz in lassos] == ["LIV-2"]
    assert not any(type(a).__name__ == "PersistOffsets" for a in lassos[0].cycle)


@pytest.mark.usefixtures("inv27_unwatched")
def test_the_correct_idle_consumer_has_no_lasso_and_its_planted_twin_of_the_rebalance_timer_neither() -> None:
    # one consumer gets its queue at its first rebalance, so a rebalance timer that stops changes nothing here
    nc = named_configs()["idle-consumer"]
    for mutations in (frozenset(), frozenset({"rebalance_timer_stops"})):
        search = check(replace(nc.config, mutations=mutations), nc.bounds, keep_edges=True)
        assert search.result.exhausted
        assert find_lassos(search) == []


def test_the_sometimes_properties_are_named_and_described() -> None:
    assert len({s.name for s in SOMETIMES}) == len(SOMETIMES) == 8
    assert all(s.description for s in SOMETIMES)


def test_check_command_reports_statistics_and_exits_zero_on_the_correct_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["check", "--config", "idle-consumer", "--json", "--quiet", "--out", str(tmp_path)])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0
    assert (
        doc["exhausted"]
        and doc["valid"]
        and doc["distinct_states"] == named_configs()["idle-consumer"].expected["distinct_states"]
    )
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
    assert "every path to this violating state (of all 71,908 states) takes the actions of steps" in out
    traces = sorted(tmp_path.glob("violation-1-*.trace.jsonl"))
    assert traces and sorted(tmp_path.glob("violation-1-*.svg"))
    assert main(["check-trace", str(traces[0])]) == 1  # the trace replays to its violation against the model


def test_check_command_names_a_bad_configuration(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--config", "no-such-configuration"]) == 2
    assert "no-such-configuration" in capsys.readouterr().err


@pytest.mark.usefixtures("inv27_unwatched")
def test_check_command_reports_a_liveness_failure_at_the_horizon_and_writes_its_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["check", "--config", "broadcast-retention-instant", "--quiet", "--no-explain", "--out", str(tmp_path)]
    assert main([*argv, "--mutation", "persist_timer_stops"]) == 1
    out = capsys.readouterr().out
    assert "LIV-2 (at the horizon)" in out and "then the quiescence" in out
    assert (tmp_path / "horizon-1-liv-2.txt").is_file() and (tmp_path / "horizon-1-liv-2.trace.jsonl").is_file()
    # the flag turns it off, and the lasso search alone sees nothing: the horizon cut every cycle
    assert main([*argv, "--mutation", "persist_timer_stops", "--no-frontier"]) == 0
    assert "at the horizon: skipped (--no-frontier)" in capsys.readouterr().out
    # the correct model is clean there, and the report says how many frontier states were quiesced
    assert main([*argv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["frontier"]["frontier_states"] > 0 and doc["frontier"]["failures"] == []


def test_the_counterexample_bench_prints_the_shortest_beside_the_shrunk(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench-counterexamples", "--mutation", "commit_past_cached", "--seconds", "30", "--walks", "20"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| commit_past_cached"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] in named_configs() and int(cells[3]) <= int(cells[8])  # BFS is never longer than shrunk


@pytest.mark.usefixtures("inv27_unwatched")
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


def test_the_check_bench_measures_the_models_own_ceiling_on_the_same_states() -> None:
    from rmqspec.bench_check import step_share

    nc = named_configs()["idle-consumer"]
    line = step_share(nc.config, nc.bounds, check(nc.config, nc.bounds, stop_at_first=False).result)
    assert "each of the 1,201 states" in line and "states per CPU second" in line


def test_check_all_runs_every_named_configuration_but_those_that_opt_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from rmqspec.properties import exhaustive

    shipped = exhaustive.NAMED_DIR
    named = tmp_path / "configs"
    named.mkdir()
    for name in ("idle-consumer", "broadcast-restart-instant"):
        (named / f"{name}.json").write_text((shipped / f"{name}.json").read_text())
    slow = json.loads((shipped / "one-message.json").read_text())
    (named / "slow.json").write_text(json.dumps({**slow, "default_run": False}))
    monkeypatch.setattr(exhaustive, "NAMED_DIR", named)
    assert main(["check", "--config", "all", "--quiet", "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "check idle-consumer: exhausted" in out and "check broadcast-restart-instant: exhausted" in out
    assert "checked 2 named configurations: no violation; not run by default: slow" in out
    # a planted bug makes the run fail, and each document is one line of JSON
    argv = ["check", "--config", "all", "--quiet", "--json", "--no-explain", "--mutation", "pull_request_requeued"]
    assert main([*argv, "--out", str(tmp_path / "out2")]) == 1
    docs = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [d["config"] for d in docs] == ["broadcast-restart-instant", "idle-consumer"]
    assert all(not d["valid"] for d in docs)


def test_check_command_compares_a_named_configuration_with_the_figures_its_file_expects(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from rmqspec.properties import exhaustive

    named = tmp_path / "configs"
    named.mkdir()
    doc = json.loads((exhaustive.NAMED_DIR / "broadcast-restart-instant.json").read_text())
    (named / "right.json").write_text(json.dumps(doc))
    wrong = {**doc, "expected": {**doc["expected"], "distinct_states": doc["expected"]["distinct_states"] + 1}}
    (named / "wrong.json").write_text(json.dumps(wrong))
    monkeypatch.setattr(exhaustive, "NAMED_DIR", named)
    argv = ["check", "--quiet", "--out", str(tmp_path / "out")]
    assert main([*argv, "--config", "right"]) == 0
    assert "differ" not in capsys.readouterr().out
    assert main([*argv, "--config", "wrong"]) == 1
    assert 'the figures differ from the configuration file\'s "expected": distinct_states: expected' in (
        capsys.readouterr().out
    )
    # a changed bound is another search: nothing to compare
    assert main([*argv, "--config", "wrong", "--max-depth", "3"]) == 0


def test_every_shipped_configuration_is_run_by_default_or_says_why_not() -> None:
    for nc in named_configs().values():
        assert nc.default_run or "Not run by `rmqspec check --config all`" in nc.description, nc.name
