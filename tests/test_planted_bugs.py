"""Every property catches a planted bug: the model with a known-buggy variant must be refuted.

For each mutation in ``config.MUTATIONS`` the seeded explorer must find a violation of the named
property, watching that property alone (so the test shows it catches the bug by itself, not that
some other check happened to fire first), and the correct model with the same budget must not.
"""

from __future__ import annotations

import pytest

from rmqspec.properties.explore import explore, replay, shrink
from rmqspec.spec.config import BROADCASTING, CLUSTERING, MUTATIONS, Config
from rmqspec.spec.model import ActionNotEnabled

BASE = {"consumers": 3, "queues": 4, "messages_per_queue": 4, "max_reconsume_times": 2}

# mutation -> (property id that must refute it, config overrides that let walks reach it)
CASES: dict[str, tuple[str, dict[str, object]]] = {
    "count_not_decremented": ("INV-1", {"mode": CLUSTERING}),
    "watermark_highest_consumed": ("INV-2", {"mode": CLUSTERING}),
    "ignore_increase_only": ("INV-4", {"mode": CLUSTERING}),
    "dropped_pq_commits": ("INV-5", {"mode": CLUSTERING}),
    "no_persist_all_pruning": ("INV-6a", {"mode": CLUSTERING}),
    "local_remove_offset_deletes_file": ("INV-6b", {"mode": BROADCASTING}),
    "broker_answers_minus_one": ("INV-7", {"mode": CLUSTERING}),
    "commit_before_send_back": ("INV-9", {"mode": CLUSTERING, "send_back_failures": 2}),
    "dlq_one_retry_late": ("INV-10", {"mode": CLUSTERING, "max_reconsume_times": 1, "consumers": 1}),
    "avg_blocks_overlap": ("INV-13a", {"mode": CLUSTERING}),
    "piggyback_next_offset": ("INV-14", {"mode": CLUSTERING}),
    "resume_ignores_stored_offset": ("INV-15", {"mode": CLUSTERING}),
    "commit_past_cached": ("INV-16", {"mode": BROADCASTING}),
}
# Properties refuted a second time by a bug above, watched alone.
SECOND_WITNESSES = [
    ("ignore_increase_only", "INV-8", {"mode": CLUSTERING}),
    ("avg_blocks_overlap", "INV-13b", {"mode": CLUSTERING}),
    ("commit_past_cached", "INV-9", {"mode": CLUSTERING}),
]

WALKS, STEPS = 300, 300  # enough for every case below; the slowest needs ~60 walks


def test_every_mutation_has_a_refuting_property() -> None:
    assert set(CASES) == set(MUTATIONS)


@pytest.mark.parametrize(
    ("mutation", "prop", "overrides"),
    [(m, p, o) for m, (p, o) in CASES.items()] + SECOND_WITNESSES,
)
def test_property_refutes_planted_bug(mutation: str, prop: str, overrides: dict[str, object]) -> None:
    config = Config(**{**BASE, **overrides, "mutations": frozenset({mutation})})  # type: ignore[arg-type]
    result = explore(config, WALKS, STEPS, watch=frozenset({prop}))
    assert not result.valid, f"{prop} did not refute {mutation} in {WALKS} walks of {STEPS} steps"
    found = result.counterexamples[0]
    assert {v.id for v in found.violations} == {prop}


@pytest.mark.parametrize("mode", [CLUSTERING, BROADCASTING])
def test_correct_model_passes_the_same_budget(mode: str) -> None:
    result = explore(Config(**{**BASE, "mode": mode}), 60, STEPS)  # type: ignore[arg-type]
    assert result.valid, result.counterexamples[0].describe()
    assert result.actions["FinishConsume"] > 0 and result.actions["Crash"] > 0


def test_shrunk_counterexample_is_one_minimal_and_still_fails() -> None:
    config = Config(**{**BASE, "mutations": frozenset({"watermark_highest_consumed"})})  # type: ignore[arg-type]
    found = explore(config, WALKS, STEPS).counterexamples[0]
    small = shrink(found)
    assert len(small.actions) <= 20 < len(found.actions)  # 245 steps shrink to 15
    assert {v.id for v in small.violations} == {"INV-2"}
    assert replay(config, small.actions)[1] == small.violations
    for k in range(len(small.actions)):  # deleting any one action loses the failure
        try:
            _, violations = replay(config, small.actions[:k] + small.actions[k + 1 :])
        except ActionNotEnabled:
            continue
        assert "INV-2" not in {v.id for v in violations}
