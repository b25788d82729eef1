"""``rmqspec check --spark`` on ``local[2]``: the level-synchronous Spark search gives exactly the local search's
counts and verdicts, and a counterexample as short as the local one; its fingerprint is the same in every
interpreter. One Spark session serves the module (start-up is the slow part)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from rmqspec.cli import main
from rmqspec.properties.canonical import stable_fingerprint
from rmqspec.properties.exhaustive import Bounds, CheckResult, check, named_configs, replay
from rmqspec.properties.exhaustive_spark import LevelTiming, check_on_spark, spark_session
from rmqspec.spec.invariants import check_state, check_step
from rmqspec.spec.model import Model

ONE_MESSAGE_15_S = Bounds(horizon_ms=15_000, max_channel=1)


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = spark_session("local[2]", quick_start=True)
    yield session
    session.stop()


def _counts(r: CheckResult) -> dict[str, Any]:
    return {
        "distinct_states": r.distinct_states,
        "transitions": r.transitions,
        "pruned": r.pruned,
        "depth_counts": r.depth_counts,
        "action_counts": dict(r.action_counts),
        "sometimes_hits": dict(r.sometimes_hits),
        "sometimes_depths": {k: f.depth for k, f in r.sometimes.items()},
        "exhausted": r.exhausted,
        "valid": r.valid,
    }


def test_spark_search_of_idle_consumer_gives_exactly_the_local_counts(spark: Any) -> None:
    named = named_configs()["idle-consumer"]
    local = check(named.config, named.bounds).result
    timings: list[LevelTiming] = []
    on_spark = check_on_spark(named.config, named.bounds, spark, timings=timings)
    assert _counts(on_spark) == _counts(local)
    assert on_spark.exhausted and len(timings) == len(local.depth_counts)
    assert [t.new_states for t in timings[:-1]] == local.depth_counts[1:]


def test_spark_search_of_one_message_within_15_s_gives_exactly_the_local_counts(spark: Any) -> None:
    config = named_configs()["one-message"].config
    local = check(config, ONE_MESSAGE_15_S).result
    on_spark = check_on_spark(config, ONE_MESSAGE_15_S, spark)
    assert local.exhausted and local.pruned > 0
    assert _counts(on_spark) == _counts(local)


def test_spark_counterexample_to_a_planted_bug_is_as_short_as_the_local_one_and_replays_to_its_violation(
    spark: Any,
) -> None:
    config = replace(named_configs()["one-message"].config, mutations=frozenset({"commit_past_cached"}))
    local = check(config, ONE_MESSAGE_15_S).result
    on_spark = check_on_spark(config, ONE_MESSAGE_15_S, spark)
    assert local.violations and on_spark.violations and on_spark.stopped_by == "violation"
    shortest = min(v.depth for v in local.violations)
    assert {v.depth for v in on_spark.violations} == {shortest}
    model = Model(config)
    for found in on_spark.violations:
        assert found.id in {v.id for v in local.violations}
        actions = found.actions
        _, before = replay(model, [model.enabled(s).index(a) for s, a in _states(model, actions[:-1])])
        after = model.step(before, actions[-1])
        seen = check_state(model, after) if found.action == "state" else check_step(model, before, actions[-1], after)
        assert found.id in {v.id for v in seen}


def _states(model: Model, actions: list[Any]) -> list[tuple[Any, Any]]:
    s, out = model.initial(), []
    for a in actions:
        out.append((s, a))
        s = model.step(s, a)
    return out


def test_check_cli_with_spark_prints_the_report_and_says_liveness_is_not_run_on_spark(
    spark: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code = main(
        [
            "check",
            "--config",
            "idle-consumer",
            "--spark",
            "--master",
            "local[2]",
            "--max-depth",
            "3",
            "--quiet",
            "--out",
            str(tmp_path),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "NOT exhausted (stopped by max_depth)" in out
    assert "states per depth: 1 2 4 7" in out
    assert "liveness: not run on Spark (it needs the graph in one process)" in out


def test_stable_fingerprint_does_not_depend_on_how_a_frozenset_was_built() -> None:
    config = named_configs()["idle-consumer"].config
    s = Model(config).initial()
    a = s._replace(broker=s.broker._replace(registered=frozenset([3, 11])))
    b = s._replace(broker=s.broker._replace(registered=frozenset([11, 3])))
    assert list(a.broker.registered) != list(b.broker.registered)  # the iteration orders differ
    assert stable_fingerprint(a, config) == stable_fingerprint(b, config)
    assert stable_fingerprint(a, config) != stable_fingerprint(s, config)


def test_stable_fingerprint_is_the_same_in_interpreters_with_different_hash_seeds() -> None:
    code = (
        "from rmqspec.properties.canonical import stable_fingerprint;"
        "from rmqspec.properties.exhaustive import named_configs;"
        "from rmqspec.spec.model import Model;"
        "c = named_configs()['one-message'].config; m = Model(c); s = m.initial();"
        "s = m.step(s, m.enabled(s)[0]);"
        "print(stable_fingerprint(s, c), hash(None))"
    )
    outputs = []
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        outputs.append(done.stdout.split())
    assert outputs[0][0] == outputs[1][0]
