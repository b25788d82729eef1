"""The coverage-guided campaign: features derived from the model, the corpus and its plans, the swarm's reach of every
gated behaviour, RocketMQ 4.9.8's own bugs told apart from violations by their cause, and a guided campaign that
keeps its corpus and starts from another's."""

from __future__ import annotations

import json
import random
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from rmqspec.campaign.corpus import ARM_FLOOR, Plan, Scheduler, reconfigure
from rmqspec.campaign.report import search_summary
from rmqspec.campaign.runner import CampaignOptions, CampaignResult, run_campaign
from rmqspec.campaign.units import FAULT_HOLDS, PROFILES, _choose, fault_hold, patient_run, run_unit, sample_config
from rmqspec.properties.explore import replay
from rmqspec.properties.features import (
    ACTION_GATES,
    FACT_GATES,
    FACTS,
    Features,
    action_feature,
    behaviours,
    reached_behaviour,
    state_facts,
)
from rmqspec.properties.rocketmq_bugs import REPRODUCED, classify
from rmqspec.properties.serialize import action_from_json, action_to_json, config_from_json, config_to_json
from rmqspec.spec import actions as act
from rmqspec.spec.config import CLUSTERING, V4_9_8, V5_X, Config
from rmqspec.spec.model import Model
from rmqspec.spec.state import PULL_READY


def _walk(config: Config, seed: int, steps: int) -> tuple[Model, list[tuple[object, act.Action, object]]]:
    model, rng, state = Model(config), random.Random(seed), None
    state = model.initial()
    out = []
    for _ in range(steps):
        enabled = model.enabled(state)
        if not enabled:
            break
        action = enabled[rng.randrange(len(enabled))]
        after = model.step(state, action)
        out.append((state, action, after))
        state = after
    return model, out


# --- features -----------------------------------------------------------------------------------------------------


def test_an_effect_feature_names_the_field_a_step_changed_and_how() -> None:
    model = Model(Config(consumers=1, queues=1, messages_per_queue=1))
    s0 = model.initial()
    s1 = model.step(s0, act.Start(0))
    features = Features(model)
    features.observe(s0, act.Start(0), s1)
    assert "a:Start" in features.names
    assert "e:Start:clients[].running:on" in features.names  # the client's running flag went from off to on
    assert "n:->Start" in features.names
    assert not any(f.startswith("e:Start:now") for f in features.names)  # the clock is left out


def test_an_action_feature_keeps_the_parameters_that_choose_a_branch_and_drops_the_indices() -> None:
    assert action_feature(act.Stall(1, 35_000)) == action_feature(act.Stall(0, 35_000))
    assert action_feature(act.Stall(0, 35_000)) != action_feature(act.Stall(0, 2_000))
    assert action_feature(act.SendPull(0, 1)) == "a:SendPull"


def test_the_flow_control_fact_holds_exactly_where_the_pull_of_a_ready_due_pq_is_not_enabled() -> None:
    """The fact is SendPull's flow-control clause: wherever it holds for a due pq, the model offers no SendPull for
    that pq, and the walks of a configuration with threshold 1 reach it."""
    config = Config(consumers=1, queues=1, messages_per_queue=6, pull_threshold_for_queue=1, pull_batch_size=2)
    seen = 0
    for seed in range(30):
        model, steps = _walk(config, seed, 80)
        for _, _, state in steps:
            if "flow-control-held" not in state_facts(model, state):  # type: ignore[arg-type]
                continue
            seen += 1
            cl = state.clients[0]  # type: ignore[attr-defined]
            held = [
                q
                for q, pq in enumerate(cl.pqs)
                if pq is not None and not pq.dropped and pq.pull_state == PULL_READY and pq.msg_count > 1
            ]
            assert held
            for q in held:
                if cl.pqs[q].pull_ready_at <= state.now and not cl.stalled_until:  # type: ignore[attr-defined]
                    assert act.SendPull(0, q) not in model.enabled(state)  # type: ignore[arg-type]
    assert seen > 0


def test_every_fact_has_a_name_and_a_gate_names_a_known_action_or_fact() -> None:
    names = {t.__name__ for t in act.Action.__args__}  # type: ignore[attr-defined]
    assert set(ACTION_GATES) <= names
    assert set(FACT_GATES) <= set(FACTS)


# --- the swarm ----------------------------------------------------------------------------------------------------


def test_the_swarm_opens_every_gated_behaviour_in_some_run_of_a_default_campaign() -> None:
    """Every action and fact with a configuration gate is expressible in some of the first 400 units' configurations
    (a default campaign runs several hundred): a behaviour no configuration opens can never be reached."""
    configs = [
        p.apply(sample_config(random.Random(seed), profile=p)) for seed in range(400) for p in [PROFILES[seed % 6]]
    ]
    closed = [name for name, gate in {**ACTION_GATES, **FACT_GATES}.items() if not any(gate(c) for c in configs)]
    assert closed == []
    flow = sum(1 for c in configs if c.messages_per_queue > c.pull_threshold_for_queue + 2)
    assert flow > 80  # the flow-control draw: one run in four, besides what the other draws give
    assert any(c.version == V4_9_8 and c.admin_resets for c in configs)
    assert any(c.version == V4_9_8 and c.query_errors for c in configs)
    assert any(c.version == V4_9_8 and c.retention_deletes for c in configs)
    assert 60 < sum(patient_run(seed) for seed in range(400)) < 140


def test_a_holding_run_takes_fewer_of_its_faults_early_than_a_run_that_offers_them_like_any_action() -> None:
    """FAULT_HOLDS: each hold is drawn by a third of the runs, and the same configurations walked with a 19/20 hold
    take a smaller share of their budgeted faults in the first 20 steps than with none."""
    holds = Counter(fault_hold(seed) for seed in range(600))
    assert set(holds) == set(FAULT_HOLDS) and min(holds.values()) > 150
    config = replace(Config(consumers=2, queues=2, messages_per_queue=4), client_crashes=3, query_errors=3)
    model = Model(config)
    early = {}
    for hold in (0.0, FAULT_HOLDS[-1]):
        positions = []
        for seed in range(20):
            rng, state = random.Random(seed), model.initial()
            for k in range(300):
                a = _choose(rng, model, state, PROFILES[0], fault_holding=hold)
                if a is None:
                    break
                if isinstance(a, act.PERTURBING):
                    positions.append(k)
                state = model.step(state, a)
        early[hold] = sum(1 for k in positions if k < 20) / len(positions)
    assert early[FAULT_HOLDS[-1]] < early[0.0] / 2


# --- RocketMQ bugs reproduced ---------------------------------------------------------------------------------------


def test_a_violation_is_a_reproduced_rocketmq_bug_only_with_its_version_gate_property_and_mechanism() -> None:
    reset = Config(consumers=2, queues=2, version=V4_9_8, admin_resets=1, mode=CLUSTERING)
    command = [action_to_json(act.Start(0)), action_to_json(act.AdminReset(0, 1, False))]
    client_side = [*command, action_to_json(act.ClientResetReceive(0))]
    bug = classify(reset, "INV-18", client_side)
    assert bug is not None and bug.id == "RMQ-26"
    assert classify(reset, "INV-18", command) is None  # the admin's command alone is not the client-side race
    assert classify(reset, "INV-4", client_side) is None  # a property the bug is not known to break
    assert classify(replace(reset, version=V5_X), "INV-18", client_side) is None  # under 5.x: a violation
    assert classify(replace(reset, admin_resets=0), "INV-18", client_side) is None
    query = Config(consumers=2, queues=2, version=V4_9_8, query_errors=1)
    failed = action_to_json(act.RebalanceQueryError(1, 0))
    later = action_to_json(act.Rebalance(0))
    found = classify(query, "INV-15", [failed])
    assert found is not None and found.id == "RMQ-14"
    assert classify(query, "INV-15", [failed, later]) is None  # RMQ-14 breaks INV-15 at the failed query itself
    assert {b.id for b in REPRODUCED} >= {"RMQ-14", "RMQ-26"}


def _reset_498(seed: int) -> Config:
    """A 4.9.8 configuration with an admin reset, from what the swarm draws for ``seed``."""
    base = PROFILES[0].apply(sample_config(random.Random(seed)))
    return replace(
        base,
        version=V4_9_8,
        mode=CLUSTERING,
        orderly=False,
        orderly_auto_commit=True,
        admin_resets=1,
        slave=False,
        lagging_file_writes=0,
        local_offset_file_corruptions=0,
        client_stalls=0,
        commit_losses=0,
        view_faults=0,
        duplicate_client_id=False,
        task_deaths=0,
        query_errors=0,
        retention_deletes=0,
    )


def test_a_4_9_8_reset_run_reports_rmq26_apart_from_its_violations() -> None:
    """Seeds of 4.9.8 runs with an admin reset, walked with the correct model: the findings are reported as the bug
    they reproduce, never as violations, and each one's shrunk counterexample takes the reset."""
    found = 0
    for seed in range(40):
        config = _reset_498(seed)
        row = run_unit(seed, seed, "calm", 300, lockstep=False, plan=Plan(config, (), "test")).as_row()
        assert row["violations"] == [], row["violations"][:1]
        for text in row["reproduced"]:
            v = json.loads(text)
            assert v["rocketmq_bug"] == "RMQ-26" and any(a["action"] == "ClientResetReceive" for a in v["actions"])
            found += 1
    assert found > 0


def test_under_a_planted_bug_a_finding_the_correct_model_does_not_share_stays_a_violation() -> None:
    """With a planted bug in the 4.9.8 reset itself (the reset applied one below its target), the findings of the
    same 4.9.8 reset runs are the planted bug's: the correct model, replaying the shrunk run, does not break the
    property, so they are violations, not RMQ-26."""
    violations = 0
    for seed in range(12):
        config = _reset_498(seed)
        row = run_unit(
            seed, seed, "calm", 300, frozenset({"client_reset_off_by_one"}), lockstep=False, plan=Plan(config, (), "t")
        ).as_row()
        violations += len(row["violations"])
        for text in row["reproduced"]:  # what is still called RMQ-26 is broken by the correct model as well
            v = json.loads(text)
            _, broken = replay(config, [action_from_json(a) for a in v["actions"]])
            assert v["id"] in {b.id for b in broken}
    assert violations > 0


# --- the corpus -----------------------------------------------------------------------------------------------------


def _row(unit: int, features: list[str], actions: list[act.Action]) -> dict[str, object]:
    config = Config(consumers=1, queues=1, messages_per_queue=2)
    return {
        "unit": unit,
        "config": json.dumps(config_to_json(config)),
        "features": features,
        "actions": [action_to_json(a) for a in actions],
    }


def test_a_run_that_reaches_a_new_feature_becomes_an_entry_and_one_that_does_not_does_not() -> None:
    scheduler = Scheduler(seed=0, steps=50)
    kept = scheduler.absorb([_row(0, ["a:Start"], [act.Start(0)]), _row(1, ["a:Start"], [act.Start(0)])])
    assert kept == {0} and len(scheduler.entries) == 1
    kept = scheduler.absorb([_row(2, ["a:Start", "a:Tick"], [act.Start(0), act.Tick()])])
    assert kept == {2} and scheduler.entries[1].new == ("a:Tick",) and scheduler.hits["a:Start"] == 3
    random_search = Scheduler(seed=0, steps=50, guided=False)
    assert random_search.absorb([_row(0, ["a:Start"], [act.Start(0)])]) == set() and random_search.hits["a:Start"]


def test_plans_depend_only_on_the_seed_the_round_and_the_rows_merged() -> None:
    rows = [_row(k, [f"f{k}", "shared"], [act.Start(0), act.Tick(), act.Rebalance(0)]) for k in range(6)]
    first, second = Scheduler(seed=7, steps=50), Scheduler(seed=7, steps=50)
    first.absorb(rows), second.absorb(list(reversed(rows)))  # merged in unit order whatever the order given
    assert first.plans(list(range(6, 30)), 1) == second.plans(list(range(6, 30)), 1)
    plans = first.plans(list(range(30, 90)), 2)
    fresh = sum(p is None for p in plans.values())
    assert 0 < fresh < 60 and abs(fresh / 60 - first.shares()["fresh"]) < 0.15
    assert {p.origin.split(" ")[0] for p in plans.values() if p is not None} >= {"cut", "perturb", "reconfigure"}


def test_an_arm_that_found_more_per_run_gets_a_larger_share_and_none_falls_below_the_floor() -> None:
    scheduler = Scheduler(seed=0, steps=50)
    rows = [_row(k, [f"new{k}", f"more{k}"], [act.Start(0)]) for k in range(10)]  # fresh: two new features a run
    rows += [{**_row(10 + k, ["new0"], [act.Start(0)]), "origin": "cut 0"} for k in range(10)]  # cuts: nothing new
    scheduler.absorb(rows)
    shares = scheduler.shares()
    assert shares["fresh"] > shares["perturb"] > shares["cut"] >= ARM_FLOOR - 1e-9
    assert abs(sum(shares.values()) - 1) < 1e-9


def test_an_arm_is_judged_by_what_it_found_lately_and_gives_way_once_its_yield_falls() -> None:
    scheduler = Scheduler(seed=0, steps=50)
    # the first round: fresh draws find ten features a run, cuts one
    first = [_row(k, [f"early{k}.{j}" for j in range(10)], [act.Start(0)]) for k in range(10)]
    first += [{**_row(10 + k, [f"cut0.{k}"], [act.Start(0)]), "origin": "cut 0"} for k in range(10)]
    scheduler.absorb(first)
    assert scheduler.shares()["fresh"] > 0.5
    # five more rounds: the fresh draws find nothing new, the cuts still one a run each; over all six rounds fresh
    # found 100 in 60 runs and cut 60 in 60, but lately only cut pays (the arms never tried keep their prior, one a
    # run, and share the rest with it)
    for r in range(1, 6):
        rows = [_row(100 * r + k, ["early0.0"], [act.Start(0)]) for k in range(10)]
        rows += [{**_row(100 * r + 10 + k, [f"cut{r}.{k}"], [act.Start(0)]), "origin": "cut 0"} for k in range(10)]
        scheduler.absorb(rows)
    shares = scheduler.shares()
    assert shares["cut"] > 0.2 > 0.05 > shares["fresh"] >= ARM_FLOOR - 1e-9


def test_a_rare_feature_gives_its_entry_more_energy() -> None:
    scheduler = Scheduler(seed=0, steps=50)
    scheduler.absorb([_row(k, ["common"], [act.Start(0)]) for k in range(10)] + [_row(10, ["rare"], [act.Tick()])])
    common, rare = scheduler.entries
    assert scheduler.energy(rare) > scheduler.energy(common)


def test_reconfigure_changes_one_knob_to_a_valid_configuration_the_swarm_could_draw() -> None:
    config = Config(consumers=2, queues=2, messages_per_queue=3)
    for seed in range(200):
        changed = reconfigure(random.Random(seed), config)
        if changed is None:
            continue
        new, knob = changed
        assert [f for f in config_to_json(config) if config_to_json(config)[f] != config_to_json(new).get(f)] == [knob]
        assert not (new.version == V4_9_8 and new.orderly and new.mode == CLUSTERING and new.broker_crashes)


def test_a_planned_prefix_is_replayed_where_enabled_and_skipped_where_not() -> None:
    config = Config(consumers=1, queues=1, messages_per_queue=1, client_crashes=0, client_shutdowns=0)
    prefix = (act.Start(0), act.Start(0), act.Produce(0, "A"), act.Crash(0))  # the second Start, the Crash: refused
    row = run_unit(0, 0, "calm", 10, lockstep=False, liveness=False, plan=Plan(config, prefix, "test")).as_row()
    assert row["origin"] == "test" and row["start_steps"] == 2
    assert [a["action"] for a in row["actions"][:2]] == ["Start", "Produce"]


# --- a guided campaign ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def guided(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, CampaignResult]:
    out = tmp_path_factory.mktemp("guided") / "campaign"
    options = CampaignOptions(out=out, master="local[1]", runs=24, steps=60, batch_size=8, coverage_every=0)
    return out, run_campaign(options)


def test_a_guided_campaign_plans_later_rounds_from_its_corpus_and_saves_it(
    guided: tuple[Path, CampaignResult],
) -> None:
    out, result = guided
    origins = [r["origin"].split(" ")[0] for r in result.rows]
    assert set(origins[:8]) <= {"fresh", "start"}  # the first round has no corpus yet
    assert any(o in ("cut", "perturb", "splice", "reconfigure") for o in origins[8:])
    assert result.scheduler is not None and len(result.scheduler.curve) == 3
    lines = (out / "corpus" / "entries.jsonl").read_text().splitlines()
    assert len(lines) == len(result.scheduler.entries) > 0
    kept = {r["unit"] for r in result.rows if r["actions"] is not None}
    assert kept == {e.unit for e in result.scheduler.entries}  # only entries keep their walk's actions
    document = json.loads((out / "corpus" / "features.json").read_text())
    assert document["features"] == dict(sorted(result.scheduler.hits.items()))


def test_the_behaviour_table_counts_only_runs_whose_configuration_opens_a_behaviour(
    guided: tuple[Path, CampaignResult],
) -> None:
    """Every run that reached a behaviour passes its gate (a gate that refused a run reaching it would be wrong), and
    the table counts those runs."""
    _, result = guided
    table = {b["behaviour"]: b for b in search_summary(result)["behaviours"]}
    for key, _name, gate in behaviours():
        reaching = [r for r in result.rows if reached_behaviour(key, r["features"])]
        assert all(gate(config_from_json(json.loads(r["config"]))) for r in reaching), key
        assert table[key]["reached"] == len(reaching) <= table[key]["could"]
    assert table["a:Start"]["could"] == len(result.rows) and table["a:Start"]["reached"] > 0


def test_a_campaign_started_from_another_corpus_plans_from_it_in_its_first_round(
    guided: tuple[Path, CampaignResult], tmp_path: Path
) -> None:
    source, first = guided
    options = CampaignOptions(
        out=tmp_path / "again",
        master="local[1]",
        runs=8,
        steps=40,
        batch_size=8,
        coverage_every=0,
        corpus=source / "corpus",
    )
    result = run_campaign(options)
    assert first.scheduler is not None and result.scheduler is not None
    loaded = len(first.scheduler.entries)
    parents = [
        int(r["origin"].split(" ")[1].split("+")[0])
        for r in result.rows
        if r["origin"].split(" ")[0] in ("cut", "perturb", "splice")
    ]
    assert parents and all(p < loaded for p in parents)  # the first round's parents are the loaded entries
    assert all(e.features for e in result.scheduler.entries[:loaded])  # loaded with their features: their energy


def test_a_corpus_directory_without_entries_is_refused_naming_it(tmp_path: Path) -> None:
    from rmqspec.campaign.runner import CampaignError

    options = CampaignOptions(out=tmp_path / "c", master="local[1]", runs=1, steps=5, corpus=tmp_path / "nothing")
    with pytest.raises(CampaignError, match=r"nothing/entries\.jsonl"):
        run_campaign(options)
