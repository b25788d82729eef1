"""The campaign benchmark's parts that need no Spark: the baseline loop, detection, the report.

The benchmark itself (``rmqspec bench-campaign``) starts several Spark sessions and takes minutes;
it is run by hand and its figures are recorded in docs/campaign.md. Nothing here asserts a timing.
"""

from __future__ import annotations

import pytest

from rmqspec.campaign.bench import (
    BenchOptions,
    CampaignFigure,
    Detection,
    LoopFigure,
    _detect_loop,
    _section_a,
    _section_b,
    _section_c,
    _section_d,
    measure_loop,
)
from rmqspec.cli import EXIT_BAD_INPUT, main


def test_baseline_loop_runs_campaign_units() -> None:
    figure = measure_loop(BenchOptions(steps=20, lockstep=False), budget=0.01)
    assert figure.runs >= 1 and 0 < figure.steps <= 20 * figure.runs


def test_loop_detects_a_planted_bug_at_a_deterministic_run() -> None:
    opts = BenchOptions(steps=300, detect_budget=30.0)
    first = _detect_loop("piggyback_next_offset", 0, opts)
    again = _detect_loop("piggyback_next_offset", 0, opts)
    assert first[0] is not None and first[:2] == again[:2]


def _figure(master: str, rate: float) -> CampaignFigure:
    return CampaignFigure(master, 2, 9.0, 1.5, 4, 96, 28_800, 28_800 / rate, 20.0, 1.0, 5.0, 60.0, 128, 38_400)


def test_report_sections_render() -> None:
    opts = BenchOptions(detect_seeds=2)
    one, two = _figure("local[1]", 1000.0), _figure("local[2]", 1900.0)
    loop = LoopFigure(40, 12_000, 12.0)
    detections = [
        Detection("ignore_increase_only", 0, 4, "INV-4", 0.1, 0.6, 32),
        Detection("ignore_increase_only", 100_000, 2, "INV-4", 0.05, None, 64),
    ]
    lines = (
        _section_a(opts, one, two, None)
        + _section_b(opts, loop, two)
        + _section_c(opts, detections, 9.0)
        + _section_d(opts, loop, one, two, 0.3, 0.2)
    )
    text = "\n".join(lines)
    assert "parallel efficiency local[2] vs 2 x local[1]: 95% (target >= 90%: met)" in text
    assert "ignore_increase_only" in text and "break-even" in text


def test_bench_campaign_rejects_an_unknown_mutation(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench-campaign", "--mutation", "no_such_bug"]) == EXIT_BAD_INPUT
    assert "no_such_bug" in capsys.readouterr().err
