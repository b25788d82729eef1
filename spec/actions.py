"""The model's actions. Each is a small immutable value; all nondeterminism is in its fields.

Actions are frozen dataclasses rather than tuples so that two actions of different kinds never
compare equal (``StartConsume(0, 3) != ApplyConsumeOffset(0, 3)``).

The docstring of each action's transition (``model.py``, function ``_<name>``) gives its enabling
condition, its effect and the rules it models. This module only names the actions and their
parameters, grouped by who performs them.
"""

from __future__ import annotations

from dataclasses import dataclass

# Consume statuses of the concurrent listener (R7.3).
CONSUME_SUCCESS = "CONSUME_SUCCESS"
RECONSUME_LATER = "RECONSUME_LATER"


# --- environment and time ---------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Tick:
    """Advance the clock to the next deadline; only when no timer is due."""


@dataclass(frozen=True, slots=True)
class Produce:
    queue: int
    tag: str


@dataclass(frozen=True, slots=True)
class CoolQueueHead:
    queue: int


# --- broker -----------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class BrokerFlush:
    """The broker's consumer-offset flush timer fires."""


@dataclass(frozen=True, slots=True)
class DeliverScheduled:
    """The earliest due scheduled (sent-back) message reaches the retry topic."""


@dataclass(frozen=True, slots=True)
class BrokerCrash:
    """The broker process dies."""


@dataclass(frozen=True, slots=True)
class BrokerRestart:
    """The broker process comes back."""


@dataclass(frozen=True, slots=True)
class ExpireChannel:
    client: int


@dataclass(frozen=True, slots=True)
class BrokerReceive:
    client: int


# --- consumer process -------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Start:
    client: int


@dataclass(frozen=True, slots=True)
class Shutdown:
    client: int


@dataclass(frozen=True, slots=True)
class Crash:
    client: int


@dataclass(frozen=True, slots=True)
class Heartbeat:
    client: int


@dataclass(frozen=True, slots=True)
class PersistOffsets:
    client: int


@dataclass(frozen=True, slots=True)
class Rebalance:
    client: int


@dataclass(frozen=True, slots=True)
class RebalanceQueryError:
    """``Rebalance(client)`` during which the broker answers the QUERY_CONSUMER_OFFSET for ``queue``
    with an error code other than QUERY_NOT_FOUND (SYSTEM_ERROR: the request processor threw).
    Budgeted (``Config.query_errors``); spent only if the rebalance does query ``queue``."""

    client: int
    queue: int


@dataclass(frozen=True, slots=True)
class SendPull:
    client: int
    queue: int


@dataclass(frozen=True, slots=True)
class ReceivePull:
    client: int
    pq_uid: int


@dataclass(frozen=True, slots=True)
class StartConsume:
    client: int
    rid: int


@dataclass(frozen=True, slots=True)
class FinishConsume:
    """``ack_index`` as the listener set it (-1 fails the whole batch); ``send_back_fails`` is a
    bitmask over the failed messages whose send-back fails (budgeted)."""

    client: int
    rid: int
    status: str
    ack_index: int
    send_back_fails: int


@dataclass(frozen=True, slots=True)
class ApplyConsumeOffset:
    client: int
    rid: int


# --- orderly area (R8) ----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class LockAll:
    """The orderly consumer's lockMQPeriodically timer fires: ``lockAll`` (R8.2, R8.3)."""

    client: int


# --- fidelity area (retention, OFFSET_ILLEGAL; R5.5, R5.7) -----------------------------------------
@dataclass(frozen=True, slots=True)
class RetentionDelete:
    """Commit-log retention deletes the oldest remaining message of ``queue``: minOffset rises by one.
    Budgeted (``Config.retention_deletes``)."""

    queue: int


@dataclass(frozen=True, slots=True)
class FixOffsetIllegal:
    """The 4.9.8 OFFSET_ILLEGAL task, 10 s after the pull result: updateOffset(increaseOnly=false),
    persist, removeProcessQueue (R5.7). A declared cause of a falling offset."""

    client: int
    queue: int


# --- full fidelity area (admin reset; R3.10a, R3.10b) -------------------------------------------
@dataclass(frozen=True, slots=True)
class AdminReset:
    """An admin resets the group's offset of topic queue ``queue`` (budgeted, ``Config.admin_resets``):
    to the offset ``target``, or, with ``by_timestamp``, to the offset the broker's searchOffset finds
    for the timestamp ``target`` (resetOffsetByTimestamp). Forced (``isForce``), as mqadmin sends it."""

    queue: int
    target: int
    by_timestamp: bool


@dataclass(frozen=True, slots=True)
class ClientResetReceive:
    """4.9.8: the oldest RESET_CONSUMER_CLIENT_OFFSET for ``client`` arrives and
    MQClientInstance.resetOffset starts: suspend, drop the pqs, then sleep 10 s."""

    client: int


@dataclass(frozen=True, slots=True)
class ClientResetWake:
    """4.9.8: resetOffset's 10 s sleep ends (a timer): updateOffset, persist, remove pqs, resume."""

    client: int


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
    | RebalanceQueryError
    | SendPull
    | ReceivePull
    | StartConsume
    | FinishConsume
    | ApplyConsumeOffset
    | LockAll  # orderly area
    | RetentionDelete  # fidelity area
    | FixOffsetIllegal  # fidelity area
    | AdminReset  # full fidelity area (admin reset)
    | ClientResetReceive  # full fidelity area (admin reset)
    | ClientResetWake  # full fidelity area (admin reset)
)

# Perturbing actions draw on Budget; everything else heals or makes progress and is free.
PERTURBING = (Crash, Shutdown, BrokerCrash, RebalanceQueryError, RetentionDelete, AdminReset)


def action_name(action: Action) -> str:
    return type(action).__name__
