"""The model's actions. Each is a small immutable value; all nondeterminism is in its fields.

Actions are frozen dataclasses rather than tuples so that two actions of different kinds never
compare equal (``StartConsume(0, 3) != ApplyConsumeOffset(0, 3)``).

The docstring of each action's transition (``Model._<name>``, in the module of its concern, e.g.
``pull.py``; ``Model.step``'s table in ``model.py`` maps each action to it) gives its enabling
condition, its effect and the rules it models. This module only names the actions and their
parameters, grouped by who performs them.
"""

from __future__ import annotations

from dataclasses import dataclass

# Consume statuses of the concurrent listener (R7.3).
CONSUME_SUCCESS = "CONSUME_SUCCESS"
RECONSUME_LATER = "RECONSUME_LATER"
# ConsumeOrderlyStatus (R8.6); an exception or null counts as SUSPEND. COMMIT and ROLLBACK act as
# SUCCESS with autoCommit (the default), so the model offers the two distinct answers.
ORDERLY_SUCCESS = "SUCCESS"
SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"
# With autoCommit = false (Config.orderly_auto_commit) the listener also answers COMMIT and ROLLBACK (R8.6).
ORDERLY_COMMIT = "COMMIT"
ORDERLY_ROLLBACK = "ROLLBACK"
# Stall durations: past the client's lock validity (30 s), past the broker's lock expiry (60 s), and
# long enough (with the 30 s heartbeat period) for the broker's 120 s channel expiry.
STALL_DURATIONS = (35_000, 65_000, 150_000)


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
class CorruptOffsetFile:
    """While the broker is down, its consumerOffset.json becomes unreadable (a power loss with the page
    cache unwritten, a disk fault; RMQ-21). Budgeted (``Config.offset_file_corruptions``)."""


@dataclass(frozen=True, slots=True)
class SlaveReplicate:
    """The slave's copy of one queue catches up with the master's commit log (HA replication; slaves,
    ``Config.slave``). Free: replication only ever lags."""

    queue: int


@dataclass(frozen=True, slots=True)
class SlaveSync:
    """The slave's SlaveSynchronize timer fires: it copies the master's offset table (R3.8)."""


@dataclass(frozen=True, slots=True)
class ExpireChannel:
    client: int


@dataclass(frozen=True, slots=True)
class BrokerReceive:
    """The broker runs a request from the client's connection: the oldest (``overtakes`` 0), or the one
    ``overtakes`` places behind it, which then overtakes the older (docs/spec.md §18: 4.9.8 hands each
    request to a thread pool per request code, NettyRemotingAbstract#processRequestCommand, so requests
    read in order from one connection run in any order).

    The window is 0 or 1 (OVERTAKE_WINDOW): a request may overtake the one just before it. Repeated steps
    let the oldest request wait behind any number of later ones, which is the outcome the offset
    properties see (an older commit landing after newer ones); a wider window only multiplies branching.
    The model enables 1 only where the order can change an offset (``Model.may_overtake``)."""

    client: int
    overtakes: int = 0


# BrokerReceive.overtakes ranges over 0..OVERTAKE_WINDOW (see BrokerReceive).
OVERTAKE_WINDOW = 1


@dataclass(frozen=True, slots=True)
class LoseCommit:
    """The oldest request on the client's connection, a oneway UPDATE_CONSUMER_OFFSET, is lost on the
    way (R2.5, R2.6). Budgeted (``Config.commit_losses``)."""

    client: int


# --- consumer process -------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Start:
    client: int


@dataclass(frozen=True, slots=True)
class Shutdown:
    client: int


@dataclass(frozen=True, slots=True)
class OrphanReturns:
    """An orderly listener that outlived its consumer's ``Shutdown`` returns (R4.4 step 1, R8.9; docs/spec.md
    §18.3). ``shutdownNow`` only interrupts the consume thread, and a listener that ignores the interrupt runs
    on after ``unlockAll`` released the broker locks; when it returns, ``processConsumeResult`` finds its pq
    dropped by ``destroy()`` and updates nothing, and the loop ends. Enabled while the listener ``rid`` of
    ``client`` is in ``Client.orphaned``."""

    client: int
    rid: int


@dataclass(frozen=True, slots=True)
class Crash:
    client: int


@dataclass(frozen=True, slots=True)
class CorruptLocalOffsetFile:
    """While consumer ``client`` is down, its offsets.json (BROADCASTING) becomes unreadable (a power loss,
    a disk fault; RMQ-21). Budgeted (``Config.local_offset_file_corruptions``)."""

    client: int


@dataclass(frozen=True, slots=True)
class Heartbeat:
    client: int


@dataclass(frozen=True, slots=True)
class PersistOffsets:
    """The persistAllConsumerOffset timer. ``lagging`` 1 (BROADCASTING, budgeted ``Config.lagging_file_writes``):
    persistAll reads and merges offsets.json now and its string2File lands later (``OffsetFileWriteLands``), over
    whatever the other writers of the file wrote meanwhile (no lock between them; docs/spec.md §18.3)."""

    client: int
    lagging: int = 0


@dataclass(frozen=True, slots=True)
class OffsetFileWriteLands:
    """The lagging persistAll's ``MixAll.string2File`` of offsets.json runs: it writes the table it merged from
    the file it read, undoing any entry another writer changed since (a lost update; docs/spec.md §18.3)."""

    client: int


@dataclass(frozen=True, slots=True)
class CleanExpiredMsg:
    """The concurrent consume service's cleanExpireMsg timer fires (every consumeTimeout): each pq of the table
    sends back and removes its first messages whose listener started more than consumeTimeout ago (R6.8)."""

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
class RebalanceWithoutSelf:
    """``Rebalance(client)`` during which the broker's consumer list lacks the client itself: its
    heartbeat has not reached the broker it asked (S7, R9.3). Budgeted (``Config.view_faults``)."""

    client: int


# The background tasks a TaskDies fault can kill: MQClientInstance's scheduled persist and heartbeat
# tasks, the RebalanceService thread, and ConsumeMessageOrderlyService's lockMQPeriodically.
BACKGROUND_TASKS = ("persistAllConsumerOffset", "sendHeartbeatToAllBroker", "RebalanceService", "lockMQPeriodically")


@dataclass(frozen=True, slots=True)
class TaskDies:
    """A background task of the client dies for good (an uncaught Error: a scheduled task is then never
    run again, the rebalance thread exits), until the process restarts. Budgeted (``Config.task_deaths``).
    ``task`` is one of BACKGROUND_TASKS."""

    client: int
    task: str


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
    bitmask over the failed messages whose send-back fails (budgeted). Orderly: ``status`` is
    ORDERLY_SUCCESS or SUSPEND_CURRENT_QUEUE_A_MOMENT, ``ack_index`` is -1, and ``send_back_fails``
    ranges over the batch's messages at maxReconsumeTimes, whose forwarding send fails."""

    client: int
    rid: int
    status: str
    ack_index: int
    send_back_fails: int


@dataclass(frozen=True, slots=True)
class ApplyConsumeOffset:
    client: int
    rid: int


# --- orderly consumption (R8) ---------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class LockAll:
    """The orderly consumer's lockMQPeriodically timer fires: ``lockAll`` (R8.2, R8.3)."""

    client: int


@dataclass(frozen=True, slots=True)
class TryLockLater:
    """orderly consume loop: the earliest due tryLockLaterAndReconsume task of pq ``pq_uid`` runs:
    lock(mq), then a ConsumeRequest 10 ms later if granted, 3 s if not (R8.5)."""

    client: int
    pq_uid: int


@dataclass(frozen=True, slots=True)
class DelayedUnlock:
    """orderly consume loop, 4.9.8: unlockDelay's task, 20 s after an orderly removal that left
    messages in the pq: a oneway UNLOCK_BATCH_MQ for ``queue`` (R8.8)."""

    client: int
    queue: int


@dataclass(frozen=True, slots=True)
class Stall:
    """A stop-the-world pause of the consumer process (GC, a suspended VM) for ``duration`` ms, one of
    STALL_DURATIONS. Budgeted (``Config.client_stalls``). Breaks the timing margins that orderly
    exclusivity rests on (R8.3, INV-12)."""

    client: int
    duration: int


# --- retention and OFFSET_ILLEGAL (R5.5, R5.7) -----------------------------------------------------
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


# --- admin reset (R3.10a, R3.10b) ---------------------------------------------------------------
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
    """4.9.8: resetOffset's 10 s sleep ends (a timer): updateOffset, persist, remove pqs, resume.

    ``late_reply`` (a pq uid, -1 for none): the reply of that held pq's pull, NO_NEW_MSG or NO_MATCHED_MSG,
    runs its callback on another thread between the reset's ``updateOffset`` of the pq's queue and its
    ``persist`` (``MQClientInstance#resetOffset`` 1094-1095; docs/spec.md §18.3): ``correctTagsOffset``
    raises memory above the target, and the persist sends the raised value: a lost reset, and a skip of
    what the cleared pq held unconsumed."""

    client: int
    late_reply: int = -1


Action = (
    Tick
    | Produce
    | CoolQueueHead
    | BrokerFlush
    | DeliverScheduled
    | BrokerCrash
    | BrokerRestart
    | CorruptOffsetFile  # faults
    | SlaveReplicate  # slaves
    | SlaveSync  # slaves
    | ExpireChannel
    | BrokerReceive
    | LoseCommit  # faults
    | Start
    | Shutdown
    | OrphanReturns
    | Crash
    | CorruptLocalOffsetFile  # faults
    | Heartbeat
    | PersistOffsets
    | OffsetFileWriteLands
    | CleanExpiredMsg
    | Rebalance
    | RebalanceQueryError
    | RebalanceWithoutSelf  # faults
    | TaskDies  # faults
    | SendPull
    | ReceivePull
    | StartConsume
    | FinishConsume
    | ApplyConsumeOffset
    | LockAll  # orderly
    | TryLockLater  # orderly consume loop
    | DelayedUnlock  # orderly consume loop
    | Stall  # orderly consume loop
    | RetentionDelete  # retention
    | FixOffsetIllegal  # OFFSET_ILLEGAL
    | AdminReset  # admin reset
    | ClientResetReceive  # admin reset
    | ClientResetWake  # admin reset
)

# Time passing with nothing but the clock and the scheduled tasks: a schedule made only of these holds every
# pull, listener and network delivery back (the adversarial "wait two minutes" of a stalled pull, R6.6).
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


class ActionNotEnabled(Exception):
    """``step`` was given an action whose enabling condition does not hold in the state."""

    def __init__(self, action: Action, reason: str) -> None:
        super().__init__(f"{action!r} is not enabled: {reason}")
        self.action = action
        self.reason = reason
