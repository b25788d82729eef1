"""Campaigns on Spark ``local[2]``: results, resume without loss or repetition, the determinism
self-check, the failure store, and one-line errors for bad input."""

from __future__ import annotations

import json
import random
from dataclasses import fields, replace
from pathlib import Path

import pytest

from rmqspec.campaign.report import summarize, write_report
from rmqspec.campaign.runner import (
    CampaignError,
    CampaignOptions,
    DeterminismError,
    _check_determinism,
    deduplicate,
    run_campaign,
    save_failures,
)
from rmqspec.campaign.units import PROFILE_BY_NAME, PROFILES, run_unit, sample_config
from rmqspec.cli import main
from rmqspec.properties.serialize import action_from_json
from rmqspec.properties.trace import check_trace
from rmqspec.spec.config import BROADCASTING, Config


def test_a_run_is_a_pure_function_of_its_inputs() -> None:
    first = run_unit(3, 1003, "everything", 120).as_row()
    again = run_unit(3, 1003, "everything", 120).as_row()
    first.pop("seconds"), again.pop("seconds")
    assert first == again and first["steps"] > 0


def test_swarm_profiles_switch_perturbations_off() -> None:
    calm = run_unit(0, 7, "calm", 200, lockstep=False)
    assert calm.rules["Crash"] == calm.rules["Shutdown"] == calm.rules["BrokerCrash"] == 0
    faulty = next(c for k in range(200) if (c := sample_config(random.Random(k))).client_stalls)
    quiet = PROFILE_BY_NAME["calm"].apply(faulty)  # the faults sample_config drew are off in the calm profile
    assert (quiet.client_stalls, quiet.commit_losses, quiet.view_faults, quiet.duplicate_client_id) == (0, 0, 0, False)
    assert PROFILE_BY_NAME["calm"].apply(replace(faulty, task_deaths=1)).task_deaths == 0
    assert PROFILE_BY_NAME["crashes"].apply(faulty).client_stalls == 1
    assert all(p.name for p in PROFILES)


def test_sample_config_draws_every_fault_family_and_only_combinations_config_accepts() -> None:
    faults = (
        "client_stalls",
        "commit_losses",
        "view_faults",
        "duplicate_client_id",
        "offset_file_corruptions",
        "local_offset_file_corruptions",
        "task_deaths",  # its liveness failures are reported as harm (test_a_dead_task_is_harm_...)
    )
    drawn = dict.fromkeys(faults, 0)
    slaves = manual = 0
    for seed in range(600):
        config = sample_config(random.Random(seed))
        assert Config(**{f.name: getattr(config, f.name) for f in fields(config)}) == config  # validated
        assert config.task_deaths <= 1
        assert config.offset_file_corruptions <= 1 and config.local_offset_file_corruptions <= 1
        assert config.mode == BROADCASTING or not config.local_offset_file_corruptions
        assert not config.offset_check_in_slave  # it restores RMQ-17, which INV-21 reports
        for f in faults:
            drawn[f] += bool(getattr(config, f))
        slaves += config.slave
        manual += not config.orderly_auto_commit
    assert all(drawn.values()), drawn
    assert max(drawn.values()) < 600 / 4, drawn  # modest: each fault in well under a quarter of the runs
    assert slaves and manual  # a slave (docs/spec.md §16) and an orderly listener with autoCommit off (§14)


def test_campaign_writes_rows_parquet_summary_and_report(tmp_path: Path) -> None:
    options = CampaignOptions(out=tmp_path, master="local[2]", runs=12, steps=80, batch_size=6)
    result = run_campaign(options)
    assert [r["unit"] for r in result.rows] == list(range(12))
    assert result.valid and result.determinism_checks == 1  # unit 0 of every 16 runs twice
    assert (tmp_path / "runs.parquet" / "_SUCCESS").exists()
    assert len(list((tmp_path / "batches").glob("batch-*.jsonl"))) == 2


def test_every_run_reports_a_fate_for_every_message_and_the_report_sums_them(tmp_path: Path) -> None:
    options = CampaignOptions(out=tmp_path, master="local[2]", runs=8, steps=120, batch_size=8, lockstep=False)
    result = run_campaign(options)
    for r in result.rows:
        produced = sum(n for fate, n in r["fates"].items() if fate != "dead-lettered")
        # quiesced runs: a message not consumed has a cause (a skip, an allocation that deals its queue to nobody)
        assert produced > 0 and "lost" not in r["fates"] and "pending" not in r["fates"], r["fates"]
        assert set(r["fate_harm"]) <= set(r["fates"])
    summary = summarize(result, "local[2]")
    assert summary["fates"]["lost"] == 0
    assert summary["fates"]["messages"] == sum(sum(r["fates"].values()) for r in result.rows)
    redelivered = sum(r["redeliveries"] for r in result.rows)
    assert redelivered <= sum(summary["fates"]["redelivery_causes"].values())  # the quiescences add their own
    report = write_report(result, summary, tmp_path, tmp_path / "store").read_text()
    assert "## Message fates" in report and "consumed-and-committed" in report


def test_a_run_that_ends_with_a_lost_message_records_a_shrunk_fates_violation() -> None:
    # A run whose per-step properties said nothing (here: the walk of a planted commit_past_cached that only
    # the fates watch) but whose end state has a lost message: the row gets FATES, shrunk like any failure.
    from rmqspec.campaign.units import RunResult, _record_fates
    from rmqspec.properties.explore import explore, replay
    from rmqspec.spec.model import Model

    config = Config(consumers=3, queues=4, messages_per_queue=4, mutations=frozenset({"commit_past_cached"}))
    found = explore(config, 300, 300, watch=frozenset({"FATES"})).counterexamples[0]
    model = Model(config)
    state = model.initial()
    for action in found.actions:
        state = model.step(state, action)
    result = RunResult(0, found.seed, "calm", config)
    _record_fates(result, model, state, found.actions, violated=False)
    assert any(fate.endswith("lost") for fate in result.fates), result.fates
    [record] = result.violations
    assert record["id"] == "FATES" and record["shrunk_steps"] < 40 < record["original_steps"] == len(found.actions)
    assert replay(config, [action_from_json(a) for a in record["actions"]])[1]  # INV-9 agrees on the short walk


def test_resume_runs_only_the_missing_batches(tmp_path: Path) -> None:
    options = CampaignOptions(out=tmp_path, master="local[2]", runs=12, steps=60, batch_size=4, lockstep=False)
    complete = run_campaign(options)
    kept = tmp_path / "batches" / "batch-000000.jsonl"
    before = kept.read_text()
    (tmp_path / "batches" / "batch-000002.jsonl").unlink()  # as if interrupted before the last batch
    resumed = run_campaign(CampaignOptions(**{**options.__dict__, "resume": True}))
    assert kept.read_text() == before
    assert [r["unit"] for r in resumed.rows] == list(range(12))
    assert [r["trace_hash"] for r in resumed.rows] == [r["trace_hash"] for r in complete.rows]


def test_resume_refuses_different_settings(tmp_path: Path) -> None:
    options = CampaignOptions(out=tmp_path, master="local[1]", runs=2, steps=10, batch_size=2, lockstep=False)
    run_campaign(options)
    with pytest.raises(CampaignError, match="different settings: seed"):
        run_campaign(CampaignOptions(**{**options.__dict__, "resume": True, "seed": 9}))


def test_determinism_check_fails_loudly_on_different_traces() -> None:
    row = {"unit": 16, "seed": 16, "profile": "calm", "trace_hash": "a" * 64}
    with pytest.raises(DeterminismError, match="unit 16"):
        _check_determinism([row], [{**row, "trace_hash": "b" * 64}])


def test_planted_bug_is_found_deduplicated_and_stored(tmp_path: Path) -> None:
    options = CampaignOptions(
        out=tmp_path,
        master="local[2]",
        runs=24,
        steps=200,
        batch_size=12,
        lockstep=False,
        mutations=frozenset({"watermark_highest_consumed"}),
    )
    result = run_campaign(options)
    assert not result.valid
    assert {f["id"] for f in result.failures.values()} == {"INV-2"}
    assert len(result.failures) <= sum(r["violation_count"] for r in result.rows)
    paths = save_failures(result.failures, tmp_path / "store")
    record = json.loads(paths[0].read_text())
    assert record["config"]["mutations"] == ["watermark_highest_consumed"] and record["actions"]
    # The stored trace, checked against the correct model, shows the planted bug's divergence.
    report = check_trace(paths[0].with_name(paths[0].stem + ".trace.jsonl"))
    assert not report.valid and report.divergence is not None
    assert deduplicate(result.rows).keys() == result.failures.keys()


def test_cli_campaign_reports_bad_input_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["campaign", "--runs", "1", "--out", str(tmp_path), "--resume"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "nothing to resume" in err[0]
    assert main(["campaign", "--runs", "1", "--mutation", "nope", "--out", str(tmp_path)]) == 2
