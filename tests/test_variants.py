"""The planted bugs are named variants of the correct model (``spec/variants``), never branches of it.

Every name of ``config.MUTATIONS`` has exactly one registered variant, which ``Model(config)`` applies when
the configuration names it; the correct model carries no planted-bug flag; variants that do not override
the same helper compose, and two that do are refused. That each variant is still refuted is
tests/test_planted_bugs.py's (every name of ``MUTATIONS``) and tests/test_liveness.py's.
"""

from __future__ import annotations

import pytest

from rmqspec.spec.config import MUTATIONS, Config, ConfigError
from rmqspec.spec.model import Model
from rmqspec.spec.state import ProcessQueue
from rmqspec.spec.variants import VARIANTS, Variant, compose, overrides, planted, variant_model
from rmqspec.spec.variants.concurrent_consume import CommitPastCached


def test_every_mutation_has_one_variant_with_its_description_and_what_it_breaks() -> None:
    assert list(VARIANTS) != [] and set(VARIANTS) == set(MUTATIONS)
    for name, cls in VARIANTS.items():
        assert cls.mutation == name and cls.description == MUTATIONS[name]
        assert cls.breaks and all(rule.startswith("R") for rule in cls.breaks)
        assert cls.refuted_by and cls.__doc__
        assert overrides(cls) and all(hasattr(Model, method) for method in overrides(cls))


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_naming_a_mutation_applies_its_variant(name: str) -> None:
    model = Model(Config(mutations=frozenset({name})))
    assert type(model) is VARIANTS[name] and isinstance(model, Model)
    assert Model(Config(mutations=frozenset({name}))).__class__ is model.__class__  # the class is built once


def test_the_correct_model_has_no_planted_bug_flag() -> None:
    model = Model(Config())
    assert type(model) is Model and not isinstance(model, Variant)
    assert not [k for k in vars(model) if k.startswith("m_")]


def test_variants_overriding_different_helpers_compose_and_the_same_helper_is_refused() -> None:
    both = frozenset({"watermark_highest_consumed", "count_not_decremented"})
    model = Model(Config(mutations=both))
    assert all(isinstance(model, VARIANTS[name]) for name in both) and variant_model(both) is type(model)
    # no two registered variants override the same helper, so any mutations may be planted together
    pairs = [(a, b) for a in MUTATIONS for b in MUTATIONS if a < b]
    assert not [(a, b) for a, b in pairs if overrides(VARIANTS[a]) & overrides(VARIANTS[b])]

    class EmptyAtOnce(CommitPastCached):
        mutation = "empty_at_once"

        def _offset_when_tree_empties(self, pq: ProcessQueue) -> int:
            return 0

    clash = "commit_past_cached and empty_at_once both override _offset_when_tree_empties"
    with pytest.raises(ConfigError, match=clash):
        compose([CommitPastCached, EmptyAtOnce])


def test_a_variant_must_override_a_method_of_the_correct_model() -> None:
    class Misspelt(Variant):
        def _offset_when_tree_empty(self, pq: ProcessQueue) -> int:  # the model's is _offset_when_tree_empties
            return 0

    with pytest.raises(ValueError, match="must override methods of the correct model"):
        planted("commit_past_cached", breaks=("R6.3",), refuted_by=())(Misspelt)
    assert VARIANTS["commit_past_cached"] is CommitPastCached
