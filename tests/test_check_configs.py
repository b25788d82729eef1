"""The small named configurations of ``rmqspec check`` (properties/check_configs/*.json beyond idle-consumer,
one-message and query-error-5x): each is exhausted with its pinned counts and reaches its pinned
sometimes-properties, and each planted bug that docs/check.md ("Planted bugs: shortest against shrunk") says a
configuration refutes is refuted there, by the property and at the length the table gives, with a counterexample
that replays through the model."""

from __future__ import annotations

from dataclasses import replace

import pytest

from rmqspec.bench_counterexamples import safety_configs
from rmqspec.properties.exhaustive import check, named_configs
from rmqspec.spec.config import MUTATIONS
from rmqspec.spec.invariants import check_state, check_step
from rmqspec.spec.model import Model
from rmqspec.spec.state import State

# name -> (bounds changed for the pin, the pinned counts, the sometimes-properties reached). A configuration whose
# own search takes more than about 20 s here is pinned within tighter bounds, as test_check.py pins one-message
# within 15 s; docs/check.md ("Named configurations and pinned counts") gives the full figures.
PINNED: dict[str, tuple[dict[str, int], dict[str, int], set[str]]] = {
    "broadcast-restart-instant": (
        {},
        {"distinct_states": 35, "transitions": 83, "pruned": 37, "diameter": 10},
        set(),
    ),
    "orderly-one-message-instant": (
        {},
        {"distinct_states": 487, "transitions": 1905, "pruned": 614, "diameter": 19},
        set(),
    ),
    "orderly-two-consumers-instant": (
        {},
        {"distinct_states": 205, "transitions": 839, "pruned": 303, "diameter": 11},
        set(),
    ),
    "two-consumers-instant": (
        {},
        {"distinct_states": 895, "transitions": 5029, "pruned": 1631, "diameter": 15},
        {"commit-after-drop"},
    ),
    "two-messages-instant": (
        {},
        {"distinct_states": 2751, "transitions": 14045, "pruned": 3439, "diameter": 20},
        set(),
    ),
    "retention-instant": (
        {},
        {"distinct_states": 6709, "transitions": 36607, "pruned": 8365, "diameter": 25},
        {"offset-illegal-with-cache"},
    ),
    "consume-timeout": (
        {},
        {"distinct_states": 31851, "transitions": 135968, "pruned": 17798, "diameter": 24},
        set(),
    ),
    "restart-instant": (
        {"max_channel": 1},
        {"distinct_states": 14717, "transitions": 60272, "pruned": 20946, "diameter": 34},
        {"commit-after-drop"},
    ),
    "two-consumers-one-message-instant": (
        {"max_channel": 1},
        {"distinct_states": 29967, "transitions": 224539, "pruned": 0, "diameter": 31},
        {"commit-after-drop", "rebalance-drops-cached"},
    ),
    "admin-reset": (
        {"horizon_ms": 6000},
        {"distinct_states": 0, "transitions": 0, "pruned": 0, "diameter": 0},
        set(),
    ),
}

# (mutation, configuration, property, shortest length): the rows of docs/check.md's table, as
# ``rmqspec bench-counterexamples`` found them (the first configuration, smallest first, whose search breaks).
REFUTED: list[tuple[str, str, str, int]] = []


def test_every_shipped_configuration_with_a_horizon_is_pinned_or_was_pinned_before() -> None:
    # idle-consumer, one-message and query-error-5x are pinned in tests/test_check.py
    assert {nc.name for nc in safety_configs()} == set(PINNED) | {"one-message"}
    assert set(named_configs()) == set(PINNED) | {"idle-consumer", "one-message", "query-error-5x"}


@pytest.mark.parametrize("name", sorted(PINNED))
def test_the_correct_model_exhausts_the_configuration_with_its_pinned_counts_and_sometimes(name: str) -> None:
    changed, counts, sometimes = PINNED[name]
    nc = named_configs()[name]
    r = check(nc.config, replace(nc.bounds, **changed), stop_at_first=False).result
    assert r.exhausted and r.valid
    got = {"distinct_states": r.distinct_states, "transitions": r.transitions, "pruned": r.pruned}
    assert {**got, "diameter": r.diameter} == counts
    assert set(r.sometimes) == sometimes


def _replays_to(config_mutation: tuple[str, str], prop: str, actions: list[object]) -> bool:
    """Whether ``actions``, stepped from ``initial()`` by the model with the mutation, end in a violation of
    ``prop`` on their last step."""
    name, mutation = config_mutation
    model = Model(replace(named_configs()[name].config, mutations=frozenset({mutation})))
    s: State = model.initial()
    if not actions:
        return any(v.id == prop for v in check_state(model, s))
    for k, a in enumerate(actions):
        n = model.step(s, a)  # type: ignore[arg-type]
        if k == len(actions) - 1:
            return any(v.id == prop for v in check_state(model, n) + check_step(model, s, a, n))  # type: ignore[arg-type]
        s = n
    return False


@pytest.mark.parametrize(("mutation", "name", "prop", "length"), REFUTED, ids=[f"{m}-in-{n}" for m, n, _, _ in REFUTED])
def test_the_planted_bug_is_refuted_in_its_smallest_configuration_with_a_shortest_counterexample_that_replays(
    mutation: str, name: str, prop: str, length: int
) -> None:
    nc = named_configs()[name]
    r = check(replace(nc.config, mutations=frozenset({mutation})), nc.bounds).result
    assert not r.valid and r.stopped_by == "violation"
    first = r.violations[0]
    assert (first.id, first.depth) == (prop, length)
    assert _replays_to((name, mutation), prop, first.actions)


def test_every_planted_bug_in_the_table_is_a_planted_bug() -> None:
    assert {m for m, *_ in REFUTED} <= set(MUTATIONS)
    assert len({m for m, *_ in REFUTED}) == len(REFUTED)
