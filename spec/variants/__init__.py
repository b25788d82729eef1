"""Planted bugs: named variants of the correct model that the checker must refute (``Config.mutations``).

Each variant is a subclass of :class:`~rmqspec.spec.model.Model` that overrides one helper or transition of
the correct model, so the correct model holds no planted-bug branch: the known-buggy behaviours live here,
one module per concern of ``spec/`` (``variants/pull.py`` plants bugs in ``pull.py``'s helpers, and so on).
:func:`planted` registers a variant under its mutation name with what it breaks: ``description`` (the text of
``config.MUTATIONS``, which keeps the names and descriptions so that configurations validate without
importing the model), ``breaks`` (the rules) and ``refuted_by`` (the properties ``tests/test_planted_bugs.py``
and ``tests/test_liveness.py`` show refuting it).

``Model(config)`` with ``config.mutations`` returns an instance of :func:`variant_model`: the one variant's
class, or for several names a class composed of theirs (in ``MUTATIONS`` order, then the held-out ones of
``variants/held_out``, which are not in ``VARIANTS``) in front of ``Model``. Two
variants that override the same method cannot be composed: :class:`~rmqspec.spec.config.ConfigError`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import cache
from typing import ClassVar, TypeVar

from rmqspec.spec.allocation import Strategy
from rmqspec.spec.config import AVG, MACHINE_ROOM_NEARBY, MUTATIONS, ConfigError
from rmqspec.spec.model import Model


class Variant(Model):
    """A planted bug: the correct model with one helper overridden. :func:`planted` sets the class attributes."""

    mutation: ClassVar[str]  # its name in config.MUTATIONS and Config.mutations
    description: ClassVar[str]  # config.MUTATIONS[mutation]: what it breaks
    breaks: ClassVar[tuple[str, ...]]  # the rules (docs/rules.md) it breaks
    refuted_by: ClassVar[tuple[str, ...]]  # the properties shown refuting it


V = TypeVar("V", bound=type[Variant])

VARIANTS: dict[str, type[Variant]] = {}  # mutation name -> its variant, filled by @planted


def planted(mutation: str, breaks: tuple[str, ...], refuted_by: tuple[str, ...]) -> Callable[[V], V]:
    """Register the decorated subclass of ``Model`` as the variant named ``mutation`` (a key of
    ``config.MUTATIONS``), breaking the rules ``breaks``, refuted by the properties ``refuted_by``."""

    def register(cls: V) -> V:
        if mutation not in MUTATIONS:
            raise ValueError(f"{cls.__name__}: {mutation!r} is not a name of config.MUTATIONS")
        replaced = overrides(cls)
        if not replaced or not all(hasattr(Model, method) for method in replaced):  # a misspelt name plants nothing
            raise ValueError(f"{cls.__name__}: must override methods of the correct model, not {sorted(replaced)}")
        if mutation in VARIANTS:
            raise ValueError(f"{cls.__name__}: {mutation!r} is already {VARIANTS[mutation].__name__}")
        cls.mutation = mutation
        cls.description = MUTATIONS[mutation]
        cls.breaks = breaks
        cls.refuted_by = refuted_by
        VARIANTS[mutation] = cls
        return cls

    return register


def with_avg_replaced(strategy: Strategy, avg: Strategy) -> Strategy:
    """``strategy`` with its AVG, alone or as MACHINE_ROOM_NEARBY's inner strategy, replaced by ``avg`` (a planted
    averaging strategy); any other strategy as it is."""
    if strategy.name == AVG:
        return avg
    if strategy.name == MACHINE_ROOM_NEARBY and strategy.inner is not None and strategy.inner.name == AVG:
        return replace(strategy, inner=avg)
    return strategy


def overrides(cls: type[Variant]) -> frozenset[str]:
    """The methods of the correct model that variant ``cls`` replaces."""
    return frozenset(k for k, v in vars(cls).items() if callable(v) and not k.startswith("__"))


@cache
def variant_model(mutations: frozenset[str]) -> type[Model]:
    """The class of ``Model(config)`` for ``config.mutations``: cached, so constructing is as cheap as
    without variants."""
    from rmqspec.spec.variants.held_out import HELD_OUT_VARIANTS  # the held-out real bugs (docs/held_out.md)

    unknown = sorted(mutations - VARIANTS.keys() - HELD_OUT_VARIANTS.keys())
    if unknown:
        raise ConfigError(f"mutations: unknown {unknown}")
    chosen = [VARIANTS[name] for name in MUTATIONS if name in mutations]
    return compose(chosen + [cls for name, cls in HELD_OUT_VARIANTS.items() if name in mutations])


def compose(chosen: list[type[Variant]]) -> type[Model]:
    """One variant's class, or a class with the variants ``chosen`` in front of ``Model``, in that order.
    Raises :class:`ConfigError` naming two variants that override the same method of the model."""
    if len(chosen) == 1:
        return chosen[0]
    for k, a in enumerate(chosen):
        for b in chosen[k + 1 :]:
            both = overrides(a) & overrides(b)
            if both:
                raise ConfigError(
                    f"mutations: {a.mutation} and {b.mutation} both override {', '.join(sorted(both))}; "
                    "plant them one at a time"
                )
    return type("Model+" + "+".join(c.__name__ for c in chosen), tuple(chosen), {"__module__": __name__})


# The variants register themselves on import; every mutation name has exactly one.
from rmqspec.spec.variants import (  # noqa: E402
    admin_reset,
    broker,
    client_locks,
    concurrent_consume,
    consumer_process,
    orderly_consume,
    pull,
    rebalance,
)

__all__ = [
    "VARIANTS",
    "Variant",
    "admin_reset",
    "broker",
    "client_locks",
    "compose",
    "concurrent_consume",
    "consumer_process",
    "orderly_consume",
    "overrides",
    "planted",
    "pull",
    "rebalance",
    "variant_model",
]
if VARIANTS.keys() != MUTATIONS.keys():
    raise ImportError(
        f"config.MUTATIONS without a variant, or variants not in it: {VARIANTS.keys() ^ MUTATIONS.keys()}"
    )
