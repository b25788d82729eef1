"""What a property is: ``Invariant`` (checked on every reachable state), ``ActionProperty`` (checked on
every step ``(state, action, state')``) and the ``Violation`` a failed check reports.

Each property has an id (INV-n as numbered by the property list the project started from, INV-n+ for ours), a
name, one sentence (``claim``), the rules it rests on, why it matters, and its ``check``, which returns ``None``
when it holds and a short description of the counterexample otherwise. The properties themselves live with their concern
module; ``invariants.py`` registers them. This module imports nothing of the model at run time, so that
every concern module may define properties without an import cycle.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from rmqspec.spec.actions import Action
    from rmqspec.spec.model import Model
    from rmqspec.spec.state import State


class Invariant(NamedTuple):
    id: str
    name: str
    claim: str
    rules: str
    why: str
    check: Callable[[Model, State], str | None]


class ActionProperty(NamedTuple):
    id: str
    name: str
    claim: str
    rules: str
    why: str
    check: Callable[[Model, State, Action, State], str | None]


class Violation(NamedTuple):
    id: str
    name: str
    detail: str
