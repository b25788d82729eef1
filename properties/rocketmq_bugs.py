"""RocketMQ 4.9.8's own bugs, which the correct model reproduces: how a search tells them from a violation.

The model is faithful to 4.9.8, bugs included: under 4.9.8 an offset-query error is read as "no offset" (RMQ-14,
INV-15), the OFFSET_ILLEGAL correction runs 10 s late and may overwrite a new owner's offset (apache/rocketmq#7645,
INV-17), and the client-side admin reset races the commits in flight and the rebalance (RMQ-26, INV-18, and its
loss window, INV-9). A campaign still draws these features under 4.9.8 (the 4.9.8 paths they open are where real
4.x clients run), so each such finding must be told apart from a violation, by its cause, not by its category:

A violation of a run is *a reproduced RocketMQ bug* (``classify``) only if all of these hold:
- the run's configuration is the bug's version and enables the bug's feature (``gate``);
- the violated property is one the bug is known to break (``properties``);
- its shrunk counterexample takes the bug's own mechanism (``cause``): the 4.9.8 client-side reset's receipt
  (``ClientResetReceive``, not the admin's command, which also writes the broker directly), the 4.9.8 delayed
  OFFSET_ILLEGAL task (``FixOffsetIllegal``), and for RMQ-14 the violating step itself is the failed query
  (``RebalanceQueryError``, ``at_last_step``): shrinking removes every action the violation does not need, so a
  violation that happens without the mechanism is not this bug, and stays a violation;
- in a campaign with planted bugs, the correct model breaks the same property on the same shrunk run
  (``campaign/units._correct_model_agrees``).

A run's violations are sorted before shrinking: those that could be a reproduced bug are shrunk apart from the
others, so that a step breaking both a bug's property and another cannot shrink to the bug's alone
(``campaign/units._record_violations``).

A reproduced bug is reported apart (the campaign's summary and report: which bug, how many runs, the shortest
example), never as a violation of the model, and never as a catch of a planted variant. What it can hide: a
planted or real bug that breaks the same property in the same 4.9.8 run and needs the same action; the same bug
under 5.x, or with another property, is still a violation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rmqspec.spec.config import V4_9_8, Config


@dataclass(frozen=True)
class RocketMQBug:
    """A bug of a RocketMQ release that the correct model reproduces."""

    id: str
    what: str
    version: str
    gate: Callable[[Config], bool]  # the configuration enables its feature
    properties: frozenset[str]  # the properties that report it
    cause: str  # the action of its mechanism, which the shrunk counterexample must take (its "action" name in JSON)
    at_last_step: bool = False  # the violating step itself must be that action


REPRODUCED: tuple[RocketMQBug, ...] = (
    RocketMQBug(
        "RMQ-14",
        "4.9.8 reads an offset-query error as 'no offset' and positions the queue by consumeFromWhere (fixed in 5.0.0)",
        V4_9_8,
        lambda c: c.query_errors > 0,
        frozenset({"INV-15"}),
        "RebalanceQueryError",
        at_last_step=True,
    ),
    RocketMQBug(
        "OFFSET_ILLEGAL window (apache/rocketmq#7645)",
        "4.9.8 runs the OFFSET_ILLEGAL correction 10 s later: it may overwrite the offset of a queue a rebalance "
        "moved meanwhile",
        V4_9_8,
        lambda c: c.retention_deletes > 0,
        frozenset({"INV-17", "INV-15"}),
        "FixOffsetIllegal",
    ),
    RocketMQBug(
        "RMQ-26",
        "4.9.8's client-side reset is not atomic with the commits in flight and the rebalance: the reset is lost, "
        "or its sleep loses messages",
        V4_9_8,
        lambda c: c.admin_resets > 0,
        frozenset({"INV-18", "INV-9"}),
        "ClientResetReceive",
    ),
)


def classify(config: Config, violation_id: str, actions: Sequence[dict[str, Any]]) -> RocketMQBug | None:
    """The RocketMQ bug a violation of ``violation_id`` reproduces, given its run's ``config`` and its shrunk
    counterexample's ``actions`` (as JSON, ``serialize.action_to_json``), or None: a violation."""
    for bug in REPRODUCED:
        if config.version != bug.version or not bug.gate(config) or violation_id not in bug.properties:
            continue
        taken = actions[-1:] if bug.at_last_step else actions
        if any(a.get("action") == bug.cause for a in taken):
            return bug
    return None


def candidate(config: Config, violation_id: str) -> bool:
    """Could a violation of ``violation_id`` in a run of ``config`` be a reproduced bug, whatever its run?"""
    return any(
        config.version == bug.version and bug.gate(config) and violation_id in bug.properties for bug in REPRODUCED
    )
