"""Faults the environment injects, each budgeted: a lost commit, a dead task, a corrupted offset file, a missing
consumer list entry, and Stall (a paused JVM).

``LoseCommit`` loses a oneway UPDATE_CONSUMER_OFFSET on the wire (updateConsumeOffsetToBroker
(ConsumerProcessMixin._send_commit), persist(mq) (ConsumerProcessMixin._persist_one)). ``TaskDies`` ends one of the
client's scheduled tasks (an uncaught exception ends a ``ScheduledExecutorService`` task). ``CorruptOffsetFile`` makes
the broker's ``consumerOffset.json`` unreadable so that a restart loads the ``.bak`` (the broker's load
(BrokerMixin._broker_restart), string2File (ConsumerProcessMixin._write_file)); ``CorruptLocalOffsetFile`` does the same
to a BROADCASTING client's ``offsets.json`` (R1.10, R1.16). ``RebalanceWithoutSelf`` is a consumer list that misses its
asker (the CLUSTERING allocation (RebalanceMixin._rebalance_topic), the strategies' validation
(allocation.allocate_queues)). ``Stall`` pauses a client process while the clock and everyone else go on, which is how
the orderly timing margins break (the lockAll timer (ClientLocksMixin._lock_all), RMQ-10).

Its actions, before the class: ``CorruptOffsetFile``, ``LoseCommit``, ``CorruptLocalOffsetFile``,
``RebalanceWithoutSelf``, ``TaskDies``, ``Stall``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rmqspec.spec.concurrent_consume import CLEAN_EXPIRE_MSG_TASK
from rmqspec.spec.enabling import ActionNotEnabled
from rmqspec.spec.state import Client, Commit, Event, History, State
from rmqspec.spec.state import put_at as _put

if TYPE_CHECKING:
    from rmqspec.spec.model import Model


# Stall durations: past the client's lock validity (30 s), past the broker's lock expiry (60 s), and
# long enough (with the 30 s heartbeat period) for the broker's 120 s channel expiry.
STALL_DURATIONS = (35_000, 65_000, 150_000)
# The background tasks a TaskDies fault can kill: MQClientInstance's scheduled persist and heartbeat
# tasks, the RebalanceService thread, ConsumeMessageOrderlyService's lockMQPeriodically and
# ConsumeMessageConcurrentlyService's cleanExpireMsg.
BACKGROUND_TASKS = (
    "persistAllConsumerOffset",
    "sendHeartbeatToAllBroker",
    "RebalanceService",
    "lockMQPeriodically",
    CLEAN_EXPIRE_MSG_TASK,
)


# Actions of the environment's faults, each handled by its transition ``_<snake_case name>`` below
@dataclass(frozen=True, slots=True)
class CorruptOffsetFile:
    """While the broker is down, its consumerOffset.json becomes unreadable (a power loss with the page
    cache unwritten, a disk fault; RMQ-21). Budgeted (``Config.offset_file_corruptions``)."""


@dataclass(frozen=True, slots=True)
class LoseCommit:
    """The oldest request on the client's connection, a oneway UPDATE_CONSUMER_OFFSET, is lost on the
    way (updateConsumeOffsetToBroker (ConsumerProcessMixin._send_commit), persist(mq)
    (ConsumerProcessMixin._persist_one)). Budgeted (``Config.commit_losses``)."""

    client: int


@dataclass(frozen=True, slots=True)
class CorruptLocalOffsetFile:
    """While consumer ``client`` is down, its offsets.json (BROADCASTING) becomes unreadable (a power loss,
    a disk fault; RMQ-21). Budgeted (``Config.local_offset_file_corruptions``)."""

    client: int


@dataclass(frozen=True, slots=True)
class RebalanceWithoutSelf:
    """``Rebalance(client)`` during which the broker's consumer list lacks the client itself: its
    heartbeat has not reached the broker it asked (S7, the CLUSTERING allocation, RebalanceMixin._rebalance_topic).
    Budgeted (``Config.view_faults``)."""

    client: int


@dataclass(frozen=True, slots=True)
class TaskDies:
    """A background task of the client dies for good (an uncaught Error: a scheduled task is then never
    run again, the rebalance thread exits), until the process restarts. Budgeted (``Config.task_deaths``).
    ``task`` is one of BACKGROUND_TASKS."""

    client: int
    task: str


@dataclass(frozen=True, slots=True)
class Stall:
    """A stop-the-world pause of the consumer process (GC, a suspended VM) for ``duration`` ms, one of
    STALL_DURATIONS. Budgeted (``Config.client_stalls``). Breaks the timing margins that orderly
    exclusivity rests on (the lockAll timer (ClientLocksMixin._lock_all), INV-12)."""

    client: int
    duration: int


class FaultsMixin:
    """``Model``'s injected faults; see the module docstring."""

    # --- a lost commit, a dead task, corrupt offset files, a consumer list without its asker ------
    def _lose_commit(self: Model, s: State, a: LoseCommit) -> State:
        """LoseCommit(client) (budgeted). Enabled: the oldest request on the client's connection is a
        oneway UPDATE_CONSUMER_OFFSET and ``commit_losses`` budget is left. Effect: it never reaches the
        broker (updateConsumeOffsetToBroker (ConsumerProcessMixin._send_commit), persist(mq)
        (ConsumerProcessMixin._persist_one): oneway, nothing notices); the next persist sends the memory offset
        again."""
        i = a.client
        cl = s.clients[i]
        if not cl.channel or not isinstance(cl.channel[0], Commit) or s.budget.commit_losses <= 0:
            raise ActionNotEnabled(a, "no oneway commit at the head of the connection, or budget used up")
        item = cl.channel[0]
        return s._replace(
            clients=_put(s.clients, i, cl._replace(channel=cl.channel[1:])),
            ghost=self._lost_overtaken(s.ghost, i),
            budget=s.budget._replace(commit_losses=s.budget.commit_losses - 1),
            history=History(Event(s.now, "commit-lost", i, item.queue, item.offset, item.cause), s.history),
        )

    def _live_tasks(self: Model, cl: Client) -> list[str]:
        """The client's background tasks still alive (lockMQPeriodically exists for orderly CLUSTERING)."""
        exists = {
            "persistAllConsumerOffset": cl.next_persist is not None,
            "sendHeartbeatToAllBroker": cl.next_heartbeat is not None,
            "RebalanceService": "RebalanceService" not in cl.dead_tasks,
            "lockMQPeriodically": cl.next_lock_all is not None,
            CLEAN_EXPIRE_MSG_TASK: cl.next_clean is not None,
        }
        return [t for t in BACKGROUND_TASKS if exists[t] and t not in cl.dead_tasks]

    def _task_dies(self: Model, s: State, a: TaskDies) -> State:
        """TaskDies(client, task) (budgeted). Enabled: running, the task is alive, ``task_deaths`` budget
        left. Effect: the task never runs again until the process restarts: an Error escapes its
        ``catch (Exception)`` (a ScheduledExecutorService then suppresses every later run; the
        RebalanceService thread exits, so neither its 20 s wait nor rebalanceImmediately wakes it). The
        4.9.8 tasks catch Exception (lockMQPeriodically since 4.9.3, #3861), so only an Error kills them
        [RMQ-10's "renewal dies"]. Liveness at quiescence reports what the dead task leaves undone."""
        i = a.client
        cl = s.clients[i]
        if not cl.running or s.budget.task_deaths <= 0 or a.task not in self._live_tasks(cl):
            raise ActionNotEnabled(a, "not running, no such live task, or budget used up")
        timers = {
            "persistAllConsumerOffset": {"next_persist": None},
            "sendHeartbeatToAllBroker": {"next_heartbeat": None},
            "RebalanceService": {"next_rebalance": None},
            "lockMQPeriodically": {"next_lock_all": None},
            CLEAN_EXPIRE_MSG_TASK: {"next_clean": None},
        }[a.task]
        cl = cl._replace(dead_tasks=(*cl.dead_tasks, a.task), **timers)  # type: ignore[arg-type]
        return s._replace(
            clients=_put(s.clients, i, cl), budget=s.budget._replace(task_deaths=s.budget.task_deaths - 1)
        )

    def _corrupt_offset_file(self: Model, s: State, a: CorruptOffsetFile) -> State:
        """CorruptOffsetFile (budgeted, at most once). Enabled: the broker is down and its .bak is readable
        or missing. Effect: consumerOffset.json is unreadable, so the restart's ``ConfigManager.load``
        falls back to ``loadBak`` (the broker's load, BrokerMixin._broker_restart): the table of the flush before the
        last, or, with no .bak yet (fewer than two flushes), an empty table: every group looks new and starts from
        consumeFromWhere (S16). Offsets committed since that flush are lost; the next flush copies the unreadable main
        over .bak (string2File, ConsumerProcessMixin._write_file). The client-side fall-back (R1.16) is not modelled."""
        b = s.broker
        if b.up or b.bak is None or s.budget.offset_file_corruptions <= 0:
            raise ActionNotEnabled(a, "broker up, no .bak yet, or budget used up")
        # the model loads the table when the broker goes down (BrokerCrash): what the restart will load
        return s._replace(
            broker=b._replace(offsets=b.bak, flushed=b.bak, main_unreadable=True),
            budget=s.budget._replace(offset_file_corruptions=s.budget.offset_file_corruptions - 1),
            ghost=self._value_changed(
                self._note_lost(s.ghost, b.offsets, b.bak, 0, "corrupt-offset-file"), range(self.q_count)
            )._replace(flushed_writer=s.ghost.bak_writer, last_writer=s.ghost.bak_writer),
        )

    def _corrupt_local_offset_file(self: Model, s: State, a: CorruptLocalOffsetFile) -> State:
        """CorruptLocalOffsetFile(client) (budgeted, at most once; BROADCASTING). Enabled: the consumer is
        down and its offsets.json.bak is readable or missing. Effect: offsets.json is unreadable, so every
        readLocalOffset (load at start, readOffset, persistAll's merge) falls back to .bak (R1.10, R1.16 row
        2): the table of the write before the last, or nothing. The next write merges into that and
        copies the unreadable main over .bak (string2File, ConsumerProcessMixin._write_file)."""
        i = a.client
        cl = s.clients[i]
        if cl.running or cl.file_bak is None or s.budget.local_offset_file_corruptions <= 0:
            raise ActionNotEnabled(a, "consumer running, .bak unreadable, or budget used up")
        return s._replace(
            clients=_put(s.clients, i, cl._replace(file=cl.file_bak, file_main_unreadable=True)),
            budget=s.budget._replace(local_offset_file_corruptions=s.budget.local_offset_file_corruptions - 1),
            ghost=self._note_lost(s.ghost, cl.file, cl.file_bak, i, "corrupt-local-offset-file"),
        )

    def _self_missing_possible(self: Model, s: State, i: int) -> bool:
        b = self._list_source(s)
        return (
            self.clustering
            and s.budget.view_faults > 0
            and b is not None
            and i in b.registered
            and any(j != i for j in b.registered)
            and self._rebalance_due(s, i)
        )

    def _rebalance_without_self(self: Model, s: State, a: RebalanceWithoutSelf) -> State:
        """RebalanceWithoutSelf(client) (budgeted). Enabled: CLUSTERING, a rebalance is due as for
        Rebalance, the broker is up with this consumer and another registered, and ``view_faults`` budget
        is left. Effect: Rebalance(client) in which every GET_CONSUMER_LIST_BY_GROUP answer lacks this
        consumer's clientId: its heartbeat had not reached the broker it asked (S7, the CLUSTERING allocation,
        RebalanceMixin._rebalance_topic). Its own id missing from cidAll, every strategy but CONFIG allocates it nothing
        (the strategies' validation, allocation.allocate_queues) and Phase A drops the topic's pqs; the others keep
        their slices, so queues go unowned until the next rebalance [RMQ-11]."""
        if not self._self_missing_possible(s, a.client):
            raise ActionNotEnabled(a, "no rebalance due, not listed with another consumer, or budget used up")
        s = s._replace(budget=s.budget._replace(view_faults=s.budget.view_faults - 1))
        return self._do_rebalance(s, a.client, None, without_self=True)

    # --- Stall: a paused JVM (the lockAll timer's margins, ClientLocksMixin._lock_all; RMQ-10) -------------------
    def _stalled(self: Model, s: State, cl: Client) -> bool:
        """Is the consumer process paused by a Stall now?"""
        return cl.stalled_until is not None and s.now < cl.stalled_until

    def _stall(self: Model, s: State, a: Stall) -> State:
        """Stall(client, duration) (budgeted). Enabled: running, not stalled, ``duration`` one of
        STALL_DURATIONS and ``client_stalls`` budget left. Effect: the process stops for ``duration``:
        no action of it runs and none of its timers fires until then, while the clock, the broker and
        the other consumers go on; afterwards every overdue timer fires. This is how the timing margins
        of orderly consumption break (renewal 20 s < client validity 30 s < broker expiry 60 s, the lockAll timer,
        ClientLocksMixin._lock_all) [RMQ-10]; the ghost notes when, for INV-12."""
        i = a.client
        cl = s.clients[i]
        if not cl.running or s.budget.client_stalls <= 0 or a.duration not in STALL_DURATIONS:
            raise ActionNotEnabled(a, "not running, stall budget used up, or not a stall duration")
        return s._replace(
            clients=_put(s.clients, i, cl._replace(stalled_until=s.now + a.duration)),
            budget=s.budget._replace(client_stalls=s.budget.client_stalls - 1),
            ghost=s.ghost._replace(stalled_at=_put(s.ghost.stalled_at or (-1,) * len(s.clients), i, s.now)),
        )
