"""The model's actions. Each is a small immutable value; all nondeterminism is in its fields.

The docstring of each action's transition (``model.py``, function ``_<name>``) gives its enabling
condition, its effect and the rules it models. This module only names the actions and their
parameters, grouped by who performs them.
"""

from __future__ import annotations

from typing import NamedTuple

# Consume statuses of the concurrent listener (R7.3).
CONSUME_SUCCESS = "CONSUME_SUCCESS"
RECONSUME_LATER = "RECONSUME_LATER"


# --- environment and time ---------------------------------------------------------------------
class Tick(NamedTuple):
    """Advance the clock to the next deadline; only when no timer is due."""


class Produce(NamedTuple):
    queue: int
    tag: str


class CoolQueueHead(NamedTuple):
    queue: int


# --- broker -----------------------------------------------------------------------------------
class BrokerFlush(NamedTuple):
    pass


class DeliverScheduled(NamedTuple):
    pass


class BrokerCrash(NamedTuple):
    pass


class BrokerRestart(NamedTuple):
    pass


class ExpireChannel(NamedTuple):
    client: int


class BrokerReceive(NamedTuple):
    client: int


# --- consumer process -------------------------------------------------------------------------
class Start(NamedTuple):
    client: int


class Shutdown(NamedTuple):
    client: int


class Crash(NamedTuple):
    client: int


class Heartbeat(NamedTuple):
    client: int


class PersistOffsets(NamedTuple):
    client: int


class Rebalance(NamedTuple):
    client: int


class SendPull(NamedTuple):
    client: int
    queue: int


class ReceivePull(NamedTuple):
    client: int
    pq_uid: int


class StartConsume(NamedTuple):
    client: int
    rid: int


class FinishConsume(NamedTuple):
    """``ack_index`` as the listener set it (-1 fails the whole batch); ``send_back_fails`` is a
    bitmask over the failed messages whose send-back fails (budgeted)."""

    client: int
    rid: int
    status: str
    ack_index: int
    send_back_fails: int


class ApplyConsumeOffset(NamedTuple):
    client: int
    rid: int


Action = (
    Tick
    | Produce
    | CoolQueueHead
    | BrokerFlush
    | DeliverScheduled
    | BrokerCrash
    | BrokerRestart
    | ExpireChannel
    | BrokerReceive
    | Start
    | Shutdown
    | Crash
    | Heartbeat
    | PersistOffsets
    | Rebalance
    | SendPull
    | ReceivePull
    | StartConsume
    | FinishConsume
    | ApplyConsumeOffset
)

# Perturbing actions draw on Budget; everything else heals or makes progress and is free.
PERTURBING = (Crash, Shutdown, BrokerCrash)


def action_name(action: Action) -> str:
    return type(action).__name__
