"""Branch coverage of spec/ (rmqspec.spec_coverage, docs/campaign.md "Branch coverage"): what is
measured, how exclusions apply, and what the report and `rmqspec coverage` print."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rmqspec import cli, spec_coverage
from rmqspec.campaign.report import spec_coverage_lines
from rmqspec.campaign.runner import CampaignResult
from rmqspec.coverage_exclusions import CATEGORIES, EXCLUSIONS, Exclusion
from rmqspec.spec.config import Config
from rmqspec.spec.model import Model
from rmqspec.spec_coverage import (
    ArcCollector,
    SpecCoverage,
    analyze,
    campaign_document,
    coverage_document,
    encode_arcs,
    spec_digest,
    spec_files,
    summary_figures,
)


def _walk(steps: int = 30) -> None:
    """A short deterministic walk of the model: the first enabled action each time."""
    model = Model(Config(consumers=2, queues=2))
    state = model.initial()
    for _ in range(steps):
        enabled = model.enabled(state)
        if not enabled:
            break
        state = model.step(state, enabled[0])


@pytest.fixture(scope="module")
def measured() -> dict[str, list[tuple[int, int]]]:
    with ArcCollector() as collector:
        _walk()
        json.dumps({"not": "spec"})  # code outside spec/ runs too, and is not recorded
    assert collector.arcs is not None
    return collector.arcs


@pytest.fixture(scope="module")
def coverage(measured: dict[str, list[tuple[int, int]]]) -> SpecCoverage:
    return analyze(measured, exclusions=())


def test_the_collector_records_arcs_of_spec_only(measured: dict[str, list[tuple[int, int]]]) -> None:
    names = {p.name for p in spec_files()}
    assert measured and set(measured) <= names
    assert measured["model.py"]  # the walk ran the model
    assert all(isinstance(a, int) and isinstance(b, int) for arcs in measured.values() for a, b in arcs)


def test_analyze_counts_every_branch_once(coverage: SpecCoverage) -> None:
    totals = coverage.totals
    assert totals.branches == len(coverage.reached) + len(coverage.unreached) + len(coverage.excluded)
    assert 0 < totals.reached < totals.branches and totals.excluded == 0
    assert set(coverage.files) <= {p.name for p in spec_files()}
    assert {b.file for b in coverage.unreached} <= set(coverage.files)


def _exclusion_for(branch: Any, branches: list[Any], category: str = "defensive") -> Exclusion:
    entry = Exclusion(branch.file, branch.function, branch.source_text, branch.target_text, category, "test")
    return Exclusion(
        entry.file,
        entry.function,
        entry.source,
        entry.target,
        category,
        "test",
        sum(entry.matches(b) for b in branches),
    )


def test_an_exclusion_moves_unreached_branches_to_excluded(
    measured: dict[str, list[tuple[int, int]]], coverage: SpecCoverage
) -> None:
    everything = coverage.reached + coverage.unreached
    target = next(b for b in coverage.unreached if b.function and b.source_text and b.target_text != "exit")
    entry = _exclusion_for(target, everything)
    again = analyze(measured, exclusions=(entry,))
    assert again.totals.excluded == entry.count >= 1
    assert again.totals.reached == coverage.totals.reached
    assert again.totals.reachable == coverage.totals.reachable - entry.count
    assert target in [b for b, _ in again.excluded] and target not in again.unreached
    assert not again.stale and again.excluded_by_category() == {"defensive": entry.count}


def test_an_excluded_branch_that_was_reached_counts_as_reached(
    measured: dict[str, list[tuple[int, int]]], coverage: SpecCoverage
) -> None:
    everything = coverage.reached + coverage.unreached
    target = next(b for b in coverage.reached if b.function and b.source_text)
    entry = _exclusion_for(target, everything)
    again = analyze(measured, exclusions=(entry,))
    assert target in [b for b, _ in again.excluded_but_reached]
    assert again.totals.reached == coverage.totals.reached


def test_an_exclusion_that_no_longer_matches_is_stale_and_not_applied(
    measured: dict[str, list[tuple[int, int]]], coverage: SpecCoverage
) -> None:
    target = coverage.unreached[0]
    gone = Exclusion("model.py", "Model._no_such_function", "if nothing", "", "defensive", "edited away")
    miscounted = Exclusion(target.file, target.function, target.source_text, "", "defensive", "count", count=99)
    again = analyze(measured, exclusions=(gone, miscounted))
    assert [e for e, _ in again.stale] == [gone, miscounted]
    assert "matches 0 branches, not 1" in again.stale[0][1]
    assert again.totals.excluded == 0 and again.totals.reached == coverage.totals.reached
    document = coverage_document(again, source="test", runs=1, measured=1)
    assert len(document["stale_exclusions"]) == 2
    assert "STALE exclusions (2" in spec_coverage.describe(document)


def test_the_exclusions_in_the_repository_are_well_formed_and_none_is_stale() -> None:
    assert all(e.category in CATEGORIES and e.reason and e.count >= 1 for e in EXCLUSIONS)
    assert len({(e.file, e.function, e.source, e.target) for e in EXCLUSIONS}) == len(EXCLUSIONS)
    result = analyze({})
    assert not result.stale, [f"{e.function} {e.source!r}: {why}" for e, why in result.stale]
    matched = {b for b in result.unreached + [b for b, _ in result.excluded] if any(e.matches(b) for e in EXCLUSIONS)}
    assert result.totals.excluded == len(matched) == len(result.excluded)  # a branch two entries match counts once
    assert sum(result.excluded_by_category().values()) == result.totals.excluded


def test_a_campaign_document_counts_only_runs_measured_on_this_source(
    measured: dict[str, list[tuple[int, int]]],
) -> None:
    encoded = encode_arcs(measured)
    rows = [
        {"unit": 2, "spec_arcs": None, "spec_digest": None},
        {"unit": 0, "spec_arcs": encoded, "spec_digest": spec_digest()},
        {"unit": 1, "spec_arcs": {"model.py": [1, 2]}, "spec_digest": "0000000000000000"},
    ]
    document = campaign_document(rows, "campaign")
    assert (document["runs"], document["measured_runs"], document["measured_on_other_source"]) == (3, 1, 1)
    # the campaign's summary line says why a row measured on other source is left out
    line = cli._spec_coverage_line(summary_figures(document), Path("out"))
    assert "in 1 measured runs (1 more measured on other spec/ source, left out: spec/ changed during the run)" in line
    assert document["growth"] == [[1, document["totals"]["reached"] + len(document["excluded_but_reached"])]]


@pytest.fixture(scope="module")
def campaign_dir(tmp_path_factory: pytest.TempPathFactory, measured: dict[str, list[tuple[int, int]]]) -> Path:
    """A campaign directory as the report leaves it: coverage.json, branches.svg, the report section."""
    document = campaign_document([{"unit": 0, "spec_arcs": encode_arcs(measured), "spec_digest": spec_digest()}], "c")
    out = tmp_path_factory.mktemp("campaign")
    lines = spec_coverage_lines(CampaignResult(spec_coverage=document), out)
    (out / "report.md").write_text("\n".join(lines), encoding="utf-8")
    return out


def test_the_report_section_writes_coverage_json_and_the_picture(campaign_dir: Path, tmp_path: Path) -> None:
    out = campaign_dir
    text = (out / "report.md").read_text(encoding="utf-8")
    totals = json.loads((out / "coverage.json").read_text(encoding="utf-8"))["totals"]
    assert text.startswith("## Branch coverage of spec/")
    assert f"**{totals['reached']} of {totals['reachable']} reachable branches reached" in text
    assert "| `spec/model.py` |" in text and "![branches](branches.svg)" in text
    assert (out / "branches.svg").read_text(encoding="utf-8").startswith("<svg")
    assert spec_coverage_lines(CampaignResult(), tmp_path / "none")[2].startswith("Not measured")


def test_rmqspec_coverage_prints_a_campaigns_figures(campaign_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = campaign_dir
    totals = json.loads((out / "coverage.json").read_text(encoding="utf-8"))["totals"]
    assert cli.main(["coverage", "--campaign", str(out), "--limit", "3"]) == cli.EXIT_OK
    printed = capsys.readouterr().out
    total_line = next(line for line in printed.splitlines() if line.startswith("total"))
    assert total_line.split()[1:5] == [str(totals[k]) for k in ("branches", "excluded", "reachable", "reached")]
    assert "unreached branches (" in printed and "spec/model.py" in printed
    assert cli.main(["coverage", "--from", str(out / "coverage.json"), "--json"]) == cli.EXIT_OK
    assert json.loads(capsys.readouterr().out)["totals"] == totals


@pytest.mark.parametrize(
    ("content", "names"),
    [
        ("{not json", "line 1: not JSON"),
        ('{"format": "something else"}', "field 'format'"),
        ('{"format": "rmqspec-spec-coverage", "digest": "x", "arcs": [], "runs": 1}', "field 'arcs'"),
        (None, "no such file"),
    ],
)
def test_a_bad_coverage_file_is_one_line_and_exit_code_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, names: str
) -> None:
    if content is not None:
        (tmp_path / "coverage.json").write_text(content, encoding="utf-8")
    assert cli.main(["coverage", "--campaign", str(tmp_path)]) == cli.EXIT_BAD_INPUT == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("rmqspec: error: ") and names in err
    assert str(tmp_path / "coverage.json") in err


@pytest.mark.skipif(spec_coverage._SUITE is not None, reason="the suite itself is being measured")
def test_the_suite_measurement_includes_nested_collectors(tmp_path: Path) -> None:
    suite = spec_coverage.SuiteMeasurement()
    suite.start()
    try:
        with ArcCollector() as inner:  # pauses the suite's measurement: its arcs are added at the end
            _walk(5)
    finally:
        document = suite.finish(tmp_path / "test-coverage.json", "test suite", 1)
    assert spec_coverage._SUITE is None
    assert inner.arcs is not None and document["totals"]["reached"] > 0
    saved = spec_coverage.load_document(tmp_path / "test-coverage.json")
    assert set(map(tuple, zip(saved["arcs"]["model.py"][0::2], saved["arcs"]["model.py"][1::2], strict=True))) >= set(
        inner.arcs["model.py"]
    )
