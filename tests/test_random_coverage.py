"""How much of an exhausted configuration each random searcher reaches (properties/search_coverage.py): the
Hypothesis machine, a campaign on a named configuration with its coverage line, the sometimes-conditions the
random search counts, and a planted defect in the counting that the coverage claims catch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rmqspec.campaign.runner import CampaignOptions, unit_spec
from rmqspec.campaign.units import directed_start, run_unit
from rmqspec.cli import main
from rmqspec.properties.canonical import stable_fingerprint
from rmqspec.properties.exhaustive import SOMETIMES, named_configs
from rmqspec.properties.explore import explore, walk
from rmqspec.properties.scenario_starts import START_BY_KEY
from rmqspec.properties.search_coverage import (
    Reached,
    StateSpace,
    campaign_coverage,
    count_sometimes,
    exhaust,
    growth_svg,
    hypothesis_coverage,
    hypothesis_settings,
    run_coverage,
    sometimes_figures,
    vacuous_lines,
)
from rmqspec.spec.config import Config
from rmqspec.spec.model import Model
from rmqspec.spec.state import State

IDLE_STATES = 1_201  # idle-consumer's exhaustive count, pinned in tests/test_check.py


@pytest.fixture(scope="module")
def idle() -> StateSpace:
    return exhaust(named_configs()["idle-consumer"])


def coverage_problems(space: StateSpace, reached: Reached, pinned: int) -> list[str]:
    """What is wrong with a coverage figure: a denominator other than the pinned count, a state counted that
    the exhaustive search never met, a count outside (0, denominator], a running count that falls."""
    problems = []
    if space.size != pinned:
        problems.append(f"denominator {space.size}, pinned {pinned}")
    if reached.unmatched:
        problems.append(f"{reached.unmatched} states outside the exhaustive set")
    if not 0 < reached.count <= space.size:
        problems.append(f"reached {reached.count} of {space.size}")
    counts = [n for _, n in reached.curve]
    if counts != sorted(counts):
        problems.append("the running count falls")
    return problems


def test_the_hypothesis_machine_reaches_a_counted_fraction_of_idle_consumer_the_same_every_time(
    idle: StateSpace,
) -> None:
    dev = hypothesis_settings("dev")  # the suite's default budget: 60 examples of at most 80 steps
    first = hypothesis_coverage(idle, dev)
    assert coverage_problems(idle, first, IDLE_STATES) == []
    assert 0 < first.fraction <= 1 and first.steps > 0 and first.runs >= dev.max_examples
    again = hypothesis_coverage(idle, dev)
    assert (again.count, again.steps, again.curve) == (first.count, first.steps, first.curve)  # derandomized


def test_run_walks_and_campaign_units_are_counted_alike_and_drawn_as_one_picture(idle: StateSpace) -> None:
    run = run_coverage(idle, walks=6, steps=120)
    units = campaign_coverage(idle, runs=6, steps=120)
    for reached in (run, units):
        assert coverage_problems(idle, reached, IDLE_STATES) == []
        assert reached.runs == 6 and reached.curve[-1] == (reached.steps, reached.count)
    svg = growth_svg(idle, [run, units])
    assert svg.count("<polyline") == 2 and "budget: steps taken" in svg and "distinct states reached" in svg
    assert "1,201 in all" in svg


def test_a_campaign_on_a_named_configuration_prints_its_coverage_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], idle: StateSpace
) -> None:
    out = tmp_path / "campaign"
    argv = ["campaign", "--master", "local[1]", "--runs", "6", "--steps", "60", "--batch-size", "6"]
    argv += ["--config", "idle-consumer", "--no-lockstep", "--out", str(out), "--store", str(tmp_path / "store")]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    line = next(x for x in printed.splitlines() if x.startswith("reached "))
    # the units ran on Spark's Python workers: their portable fingerprints agree with this process's
    expected = campaign_coverage(idle, runs=6, steps=60).count
    assert line.startswith(f"reached {expected:,} of 1,201 distinct states of idle-consumer (")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["state_coverage"]["distinct_states"] == IDLE_STATES
    assert summary["state_coverage"]["reached"] == expected and summary["state_coverage"]["unmatched"] == 0
    assert set(summary["sometimes_hits"]) == {s.name for s in SOMETIMES}
    report = (out / "report.md").read_text()
    assert line in report and (out / "state-coverage.svg").exists()


def test_a_campaign_configuration_that_is_neither_named_nor_a_good_file_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["campaign", "--runs", "1", "--config", "no-such-configuration", "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no-such-configuration" in err
    bad = tmp_path / "bad.json"
    bad.write_text('{"config": {"consumers": "two"}}')
    assert main(["campaign", "--runs", "1", "--config", str(bad), "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(bad) in err and "Traceback" not in err


def _routed_to_dlq_script() -> tuple[Config, int, list[object]]:
    """A seeded walk of one-message whose path routes the message to the DLQ, cut at that step."""
    config = named_configs()["one-message"].config
    model = Model(config)
    seed = 3  # the first seed whose 200-step walk reaches the DLQ
    taken: list[object] = []
    walk(model, seed, 200, record=taken, check=False)  # type: ignore[arg-type]
    state = model.initial()
    for k, action in enumerate(taken, 1):
        after = model.step(state, action)  # type: ignore[arg-type]
        if len(after.broker.dlq) > len(state.broker.dlq):
            return config, seed, taken[:k]
        state = after
    raise AssertionError("the walk never reached the DLQ")


def test_the_random_search_counts_a_condition_its_walk_reaches_and_names_those_it_never_reaches() -> None:
    config, seed, script = _routed_to_dlq_script()
    replayed: dict[str, int] = {}
    model = Model(config)
    state: State = model.initial()
    for action in script:
        after = model.step(state, action)  # type: ignore[arg-type]
        count_sometimes(model, state, action, after, replayed)
        state = after
    assert replayed == {"routed-to-dlq": 1}
    result = explore(config, 1, len(script), first_seed=seed, liveness=False)
    assert result.sometimes_hits == replayed  # the walk's own count, transition by transition
    figures = sometimes_figures(result.sometimes_hits)
    assert figures["sometimes_hits"]["routed-to-dlq"] == 1
    assert "routed-to-dlq" not in figures["sometimes_vacuous"]
    assert "lock-expires-under-listener" in figures["sometimes_vacuous"]  # one-message is not orderly
    assert (
        "no transition reached lock-expires-under-listener: the walks or their configurations never got there"
        in vacuous_lines(result.sometimes_hits)
    )


def test_a_campaign_unit_counts_the_condition_its_directed_start_reaches() -> None:
    key = "lock-expiry-regression@4.9.8"  # its script lets a pq's lock expire under its orderly listener
    seed = next(s for s in range(10_000) if (start := directed_start(s)) is not None and start.key == key)
    _, prefix = START_BY_KEY[key].prefix()
    unit, seed, profile = unit_spec(seed, CampaignOptions(out=Path("unused")))
    row = run_unit(unit, seed, profile, len(prefix), lockstep=False, liveness=False).as_row()
    assert row["start_steps"] == len(prefix) and row["sometimes_hits"].get("lock-expires-under-listener", 0) >= 1


def test_rmqspec_run_reports_sometimes_hits_and_vacuous_conditions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "idle.json"
    config.write_text(json.dumps({"consumers": 1, "queues": 1, "messages_per_queue": 0}))
    argv = ["run", "--config", str(config), "--walks", "2", "--steps", "40", "--no-liveness", "--out", str(tmp_path)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "no transition reached routed-to-dlq: the walks or their configurations never got there" in printed
    summary = json.loads((tmp_path / "run-summary.json").read_text())
    assert summary["sometimes_hits"] == {s.name: 0 for s in SOMETIMES}
    assert summary["configs"][0]["sometimes_vacuous"] == [s.name for s in SOMETIMES]


def test_a_fingerprint_that_ignores_the_pulls_in_flight_fails_the_coverage_claims(idle: StateSpace) -> None:
    """The planted defect: a fingerprint blind to each consumer's pull requests in flight merges states the
    model tells apart. The denominator shrinks, and the coverage claims name it."""

    def blind(state: State, config: Config, relative: bool, clamp: int) -> int:
        emptied = state._replace(clients=tuple(c._replace(pulls=()) for c in state.clients))
        return stable_fingerprint(emptied, config, relative, clamp)

    planted = exhaust(named_configs()["idle-consumer"], fingerprint=blind)
    reached = run_coverage(planted, walks=6, steps=120)
    assert planted.size < IDLE_STATES
    assert any(p.startswith("denominator") for p in coverage_problems(planted, reached, IDLE_STATES))
    # and a walk fingerprinted differently from the exhaustive set is caught as states outside it
    mixed = Reached(idle, "mixed")
    model = Model(idle.named.config)
    states = [model.initial()]
    walk(model, 0, 120, on_state=states.append, check=False)
    keys, _ = planted.keys_of_run(states)
    mixed.add_keys(keys, len(states) - 1)
    assert any("outside the exhaustive set" in p for p in coverage_problems(idle, mixed, IDLE_STATES))


def test_state_coverage_prints_every_searcher_and_draws_a_curve_for_each(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["state-coverage", "--config", "idle-consumer", "--walks", "3", "--steps", "50", "--examples", "5"]
    argv += ["--step-count", "20", "--campaign-runs", "4", "--campaign-steps", "50", "--out", str(tmp_path)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("idle-consumer: 1,201 distinct states in all (exhaustive")
    for searcher in (
        "rmqspec run (3 walks x 50 steps)",
        "Hypothesis SpecMachine (5 examples",
        "campaign units (4 runs",
    ):
        assert f"  {searcher}" in printed and "of 1,201 (" in printed
    svg = (tmp_path / "state-coverage-idle-consumer.svg").read_text()
    assert svg.count("<polyline") == 3


def test_state_coverage_names_an_unknown_configuration_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["state-coverage", "--config", "no-such-configuration"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no-such-configuration" in err
