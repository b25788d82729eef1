"""The model's actions: the vocabulary every run, trace and schedule is written in.

Each action is a small immutable value; all nondeterminism is in its fields. Actions are frozen dataclasses
rather than tuples so that two actions of different kinds never compare equal (``StartConsume(0, 3) !=
ApplyConsumeOffset(0, 3)``).

Each action is defined in the module of its concern, next to the transition that handles it
(``Model._<name>``, whose docstring gives its enabling condition, its effect and the rules it models;
``Model.step``'s table in ``model.py`` maps each action to it): ``Tick`` in ``clock.py``, ``SendPull`` in
``pull.py``, and so on. This module gathers them: the ``Action`` union, ``TIME_ONLY``, ``PERTURBING``,
``action_name`` and ``ActionNotEnabled`` (defined in ``enabling.py``), and re-exports every action and its
answer constants, so that ``from rmqspec.spec.actions import X`` names any of them.
"""

from __future__ import annotations

from rmqspec.spec.admin_reset import AdminReset, ClientResetReceive, ClientResetWake
from rmqspec.spec.broker import (
    OVERTAKE_WINDOW,
    BrokerCrash,
    BrokerFlush,
    BrokerReceive,
    BrokerRestart,
    CoolQueueHead,
    DeliverScheduled,
    ExpireChannel,
    Produce,
)
from rmqspec.spec.client_locks import DelayedUnlock, LockAll
from rmqspec.spec.clock import Tick
from rmqspec.spec.concurrent_consume import (
    CONSUME_SUCCESS,
    RECONSUME_LATER,
    ApplyConsumeOffset,
    CleanExpiredMsg,
    FinishConsume,
    StartConsume,
)
from rmqspec.spec.consumer_process import (
    Crash,
    Heartbeat,
    OffsetFileWriteLands,
    OrphanReturns,
    PersistOffsets,
    Shutdown,
    Start,
)
from rmqspec.spec.enabling import ActionNotEnabled
from rmqspec.spec.faults import (
    BACKGROUND_TASKS,
    STALL_DURATIONS,
    CorruptLocalOffsetFile,
    CorruptOffsetFile,
    LoseCommit,
    RebalanceWithoutSelf,
    Stall,
    TaskDies,
)
from rmqspec.spec.orderly_consume import (
    ORDERLY_COMMIT,
    ORDERLY_ROLLBACK,
    ORDERLY_SUCCESS,
    SUSPEND_CURRENT_QUEUE_A_MOMENT,
    TryLockLater,
)
from rmqspec.spec.pull import FixOffsetIllegal, ReceivePull, RetentionDelete, SendPull
from rmqspec.spec.rebalance import Rebalance, RebalanceQueryError
from rmqspec.spec.slave import SlaveReplicate, SlaveSync

__all__ = [
    "BACKGROUND_TASKS",
    "CONSUME_SUCCESS",
    "ORDERLY_COMMIT",
    "ORDERLY_ROLLBACK",
    "ORDERLY_SUCCESS",
    "OVERTAKE_WINDOW",
    "PERTURBING",
    "RECONSUME_LATER",
    "STALL_DURATIONS",
    "SUSPEND_CURRENT_QUEUE_A_MOMENT",
    "TIME_ONLY",
    "Action",
    "ActionNotEnabled",
    "AdminReset",
    "ApplyConsumeOffset",
    "BrokerCrash",
    "BrokerFlush",
    "BrokerReceive",
    "BrokerRestart",
    "CleanExpiredMsg",
    "ClientResetReceive",
    "ClientResetWake",
    "CoolQueueHead",
    "CorruptLocalOffsetFile",
    "CorruptOffsetFile",
    "Crash",
    "DelayedUnlock",
    "DeliverScheduled",
    "ExpireChannel",
    "FinishConsume",
    "FixOffsetIllegal",
    "Heartbeat",
    "LockAll",
    "LoseCommit",
    "OffsetFileWriteLands",
    "OrphanReturns",
    "PersistOffsets",
    "Produce",
    "Rebalance",
    "RebalanceQueryError",
    "RebalanceWithoutSelf",
    "ReceivePull",
    "RetentionDelete",
    "SendPull",
    "Shutdown",
    "SlaveReplicate",
    "SlaveSync",
    "Stall",
    "Start",
    "StartConsume",
    "TaskDies",
    "Tick",
    "TryLockLater",
    "action_name",
]

# Every action, each with the module that defines it and its transition.
Action = (
    Tick  # clock.py
    | Produce  # broker.py
    | CoolQueueHead  # broker.py
    | BrokerFlush  # broker.py
    | DeliverScheduled  # broker.py
    | BrokerCrash  # broker.py
    | BrokerRestart  # broker.py
    | CorruptOffsetFile  # faults.py
    | SlaveReplicate  # slave.py
    | SlaveSync  # slave.py
    | ExpireChannel  # broker.py
    | BrokerReceive  # broker.py
    | LoseCommit  # faults.py
    | Start  # consumer_process.py
    | Shutdown  # consumer_process.py
    | OrphanReturns  # consumer_process.py
    | Crash  # consumer_process.py
    | CorruptLocalOffsetFile  # faults.py
    | Heartbeat  # consumer_process.py
    | PersistOffsets  # consumer_process.py
    | OffsetFileWriteLands  # consumer_process.py
    | CleanExpiredMsg  # concurrent_consume.py
    | Rebalance  # rebalance.py
    | RebalanceQueryError  # rebalance.py
    | RebalanceWithoutSelf  # faults.py
    | TaskDies  # faults.py
    | SendPull  # pull.py
    | ReceivePull  # pull.py
    | StartConsume  # concurrent_consume.py
    | FinishConsume  # concurrent_consume.py
    | ApplyConsumeOffset  # concurrent_consume.py
    | LockAll  # client_locks.py
    | TryLockLater  # orderly_consume.py
    | DelayedUnlock  # client_locks.py
    | Stall  # faults.py
    | RetentionDelete  # pull.py
    | FixOffsetIllegal  # pull.py
    | AdminReset  # admin_reset.py
    | ClientResetReceive  # admin_reset.py
    | ClientResetWake  # admin_reset.py
)

# Time passing with nothing but the clock and the scheduled tasks: a schedule made only of these holds every
# pull, listener and network delivery back (the adversarial "wait two minutes" of a stalled pull, the expiry predicates,
# PullMixin.pull_expired).
TIME_ONLY = (Tick, BrokerFlush, PersistOffsets, Heartbeat, Rebalance, DeliverScheduled, CleanExpiredMsg)

# Perturbing actions draw on Budget; everything else heals or makes progress and is free.
PERTURBING = (
    Crash,
    Shutdown,
    BrokerCrash,
    RebalanceQueryError,
    RetentionDelete,
    AdminReset,
    Stall,
    LoseCommit,
    RebalanceWithoutSelf,
    TaskDies,
    CorruptOffsetFile,
    CorruptLocalOffsetFile,
)


def action_name(action: Action) -> str:
    return type(action).__name__
