"""The held-out set: variants of the model that plant real consumer-offset bugs reported against RocketMQ and
its clients, kept apart from the planted bugs of ``config.MUTATIONS`` so that the search is judged on bugs
nobody tuned it to (docs/held_out.md).

Each variant is planted the way ``spec/variants`` plants a bug (a subclass of the model overriding one helper),
by the intent of the buggy code as its issue describes it. :func:`held_out` registers it under its name with a
:class:`HeldOutBug`: what it breaks, the rules (docs/rules.md) it violates, the citation, and ``seen_by``, the
properties that report it on its witness schedule (``tests/test_held_out.py``; empty when none does, which is a
finding, not something to fix by changing the variant).

The names are ``config.HELD_OUT_NAMES``, so that ``Config(mutations=...)`` validates them without importing the
model; ``Model(config)`` builds them through ``variants.variant_model``. Nothing that iterates
``config.MUTATIONS`` or ``variants.VARIANTS`` (the planted-bug tests, the benches, the check tables, the
campaign's draws) sees them: they are judged, never trained on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from rmqspec.spec.config import HELD_OUT_NAMES
from rmqspec.spec.model import Model
from rmqspec.spec.variants import Variant, overrides


@dataclass(frozen=True, slots=True)
class HeldOutBug:
    """One held-out real bug: what the variant breaks, the rules (R-numbers of docs/rules.md) it violates, where it was
    reported (repository, issue or pull request and its title), the properties that report it on its
    witness (empty: none does), and whether its catch figures have been seen by search work.

    ``figures_seen``: True when the search's catch figures on this bug (``rmqspec bench-held-out``) have been used
    by, or shown to, people changing the search. A search change may be judged only on bugs whose ``figures_seen``
    is False, and a bug becomes seen as soon as its figures are used to change the search: then set it True here
    (docs/held_out.md, "The second set")."""

    description: str
    breaks: tuple[str, ...]
    citation: str
    seen_by: tuple[str, ...]
    figures_seen: bool


HELD_OUT: dict[str, HeldOutBug] = {}  # name -> the bug, filled by @held_out
HELD_OUT_VARIANTS: dict[str, type[Variant]] = {}  # name -> its variant class

V = TypeVar("V", bound=type[Variant])


def held_out(name: str, bug: HeldOutBug) -> Callable[[V], V]:
    """Register the decorated subclass of ``Model`` as the held-out variant ``name`` (one of
    ``config.HELD_OUT_NAMES``) planting ``bug``."""

    def register(cls: V) -> V:
        if name not in HELD_OUT_NAMES:
            raise ValueError(f"{cls.__name__}: {name!r} is not a name of config.HELD_OUT_NAMES")
        replaced = overrides(cls)
        if not replaced or not all(hasattr(Model, method) for method in replaced):
            raise ValueError(f"{cls.__name__}: must override methods of the correct model, not {sorted(replaced)}")
        if name in HELD_OUT:
            raise ValueError(f"{cls.__name__}: {name!r} is already {HELD_OUT_VARIANTS[name].__name__}")
        cls.mutation = name
        cls.description = bug.description
        cls.breaks = bug.breaks
        cls.refuted_by = bug.seen_by
        HELD_OUT[name] = bug
        HELD_OUT_VARIANTS[name] = cls
        return cls

    return register


# real_bugs first: the registry's order is config.HELD_OUT_NAMES's
from rmqspec.spec.variants.held_out import real_bugs  # noqa: E402, I001  (registers the variants)
from rmqspec.spec.variants.held_out import client_reports  # noqa: E402  (the second set, figures seen)
from rmqspec.spec.variants.held_out import fix_commits  # noqa: E402  (the third set, figures seen)
from rmqspec.spec.variants.held_out import legacy_fixes  # noqa: E402  (the fourth set, figures seen)
from rmqspec.spec.variants.held_out import client_fixes  # noqa: E402  (the fifth set, figures seen)
from rmqspec.spec.variants.held_out import broker_fixes  # noqa: E402  (the sixth set's broker half, figures seen)
from rmqspec.spec.variants.held_out import client_lifecycle_fixes  # noqa: E402  (the sixth set's client half, seen)
from rmqspec.spec.variants.held_out import orderly_gate_fixes  # noqa: E402  (the seventh set's orderly half, seen)
from rmqspec.spec.variants.held_out import unhandled_requests  # noqa: E402  (the seventh set's request half, seen)
from rmqspec.spec.variants.held_out import rust_client_fixes  # noqa: E402  (the eighth set's Rust half, seen)
from rmqspec.spec.variants.held_out import process_queue_fixes  # noqa: E402  (the eighth set's ProcessQueue half, seen)
from rmqspec.spec.variants.held_out import housekeeping_fixes  # noqa: E402  (the ninth set, figures seen)
from rmqspec.spec.variants.held_out import channel_events_fixes  # noqa: E402  (the tenth set, figures seen)
from rmqspec.spec.variants.held_out import go_push_consumer_fixes  # noqa: E402  (the eleventh set, figures seen)
from rmqspec.spec.variants.held_out import java_tracker_fixes  # noqa: E402  (the twelfth set, part A, unseen)
from rmqspec.spec.variants.held_out import client_tracker_fixes  # noqa: E402  (the twelfth set, part B, unseen)
from rmqspec.spec.variants.held_out import release_note_fixes  # noqa: E402  (the thirteenth set, unseen)

__all__ = [
    "HELD_OUT",
    "HELD_OUT_VARIANTS",
    "HeldOutBug",
    "broker_fixes",
    "channel_events_fixes",
    "client_fixes",
    "client_lifecycle_fixes",
    "client_reports",
    "client_tracker_fixes",
    "fix_commits",
    "go_push_consumer_fixes",
    "held_out",
    "housekeeping_fixes",
    "java_tracker_fixes",
    "legacy_fixes",
    "orderly_gate_fixes",
    "process_queue_fixes",
    "real_bugs",
    "release_note_fixes",
    "rust_client_fixes",
    "unhandled_requests",
    "unseen",
]


def unseen() -> tuple[str, ...]:
    """The held-out names whose catch figures no search work has seen (``figures_seen`` False), in registry
    order: the only bugs a change of the search may be judged on."""
    return tuple(name for name, bug in HELD_OUT.items() if not bug.figures_seen)


if tuple(HELD_OUT) != HELD_OUT_NAMES:
    raise ImportError(f"config.HELD_OUT_NAMES and the held-out variants differ: {set(HELD_OUT) ^ set(HELD_OUT_NAMES)}")
