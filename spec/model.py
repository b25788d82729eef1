"""The pure model: ``Model(config)`` gives ``initial()``, ``enabled(state)`` and ``step(state, action)``.

This is the executable specification of RocketMQ 4.9.8 consumer offset management for one
consumer group on one topic served by one broker (with ``Config.slave``, its master and slave), in
CLUSTERING or BROADCASTING mode with concurrent or (``Config.orderly``) orderly consumption.
``Config.version = "5.x"`` switches the 5.x differences it models (the derived properties of
``Config``; docs/spec.md, "What the version switch changes"). It has no I/O, no clock and no randomness: time is the
``Tick`` action and every choice (which consumer pulls, how a listener answers, which fault strikes) is an action
parameter.

``Model`` is assembled from one mixin class per RocketMQ concern, each in its own module (the map is
docs/spec.md, "Map: RocketMQ concern, module, actions, properties, planted bugs"): ``clock`` (``Tick`` and the timers),
``broker`` (commit log, offset table, flush, channels), ``slave``, ``consumer_process`` (start, shutdown, crash,
heartbeat, persist, the offset stores), ``rebalance`` (with ``computePullFromWhere``), ``ghost`` (the facts the
properties read), ``pull`` (with pull expiry, retention and OFFSET_ILLEGAL), ``concurrent_consume`` (with send-back, the
DLQ and cleanExpiredMsg), ``client_locks`` (the client side of the broker locks), ``orderly_consume`` (the orderly
loop), ``faults`` and ``admin_reset``. This module keeps what ties them together: the constructor, ``initial``, ``step``
(the dispatch of an action to its transition ``_<name>``) and ``enabled``. Each transition documents its enabling
condition (checked first; a disabled action raises :class:`ActionNotEnabled`), its effect, and the rules it models.

The correct model holds no planted bug: ``Model(config)`` with ``config.mutations`` is an instance of the
named variants of ``spec/variants`` (each overriding one helper of this model) in front of ``Model``.

Timers (client persist 5 s after 10 s, rebalance 20 s, heartbeat 30 s after 1 s, broker flush
5 s after 10 s, scheduled retries) fire as actions; ``Tick`` cannot pass a due timer, so timers
fire on time relative to the clock while still interleaving freely with everything else.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rmqspec.spec.actions import (
    OVERTAKE_WINDOW,
    STALL_DURATIONS,
    Action,
    ApplyConsumeOffset,
    BrokerCrash,
    BrokerFlush,
    BrokerReceive,
    BrokerRestart,
    CleanExpiredMsg,
    CoolQueueHead,
    CorruptLocalOffsetFile,
    CorruptOffsetFile,
    Crash,
    DelayedUnlock,
    DeliverScheduled,
    ExpireChannel,
    FinishConsume,
    FixOffsetIllegal,
    Heartbeat,
    LockAll,
    LoseCommit,
    OffsetFileWriteLands,
    OrphanReturns,
    PersistOffsets,
    Produce,
    Rebalance,
    RebalanceQueryError,
    RebalanceWithoutSelf,
    ReceivePull,
    RetentionDelete,
    SendPull,
    Shutdown,
    SlaveReplicate,
    SlaveSync,
    Stall,
    Start,
    StartConsume,
    TaskDies,
    Tick,
    TryLockLater,
)
from rmqspec.spec.actions import ActionNotEnabled as ActionNotEnabled  # raised by every transition
from rmqspec.spec.admin_reset import AdminResetMixin
from rmqspec.spec.allocation import Strategy, client_id, model_queues, strategy_for
from rmqspec.spec.broker import FLUSH_FIRST_DELAY, BrokerMixin
from rmqspec.spec.client_locks import ClientLocksMixin
from rmqspec.spec.clock import ClockMixin
from rmqspec.spec.concurrent_consume import ConcurrentConsumeMixin
from rmqspec.spec.config import BROADCASTING, CLUSTERING, Config
from rmqspec.spec.consumer_process import ConsumerProcessMixin
from rmqspec.spec.faults import FaultsMixin
from rmqspec.spec.ghost import GhostMixin
from rmqspec.spec.orderly_consume import OrderlyConsumeMixin
from rmqspec.spec.pull import PullMixin
from rmqspec.spec.rebalance import RebalanceMixin
from rmqspec.spec.slave import SlaveMixin
from rmqspec.spec.state import (
    PULL_READY,
    Broker,
    BrokerQueue,
    Budget,
    Client,
    Commit,
    Event,
    Ghost,
    History,
    Message,
    State,
)


class Model(
    ClockMixin,
    BrokerMixin,
    SlaveMixin,
    ConsumerProcessMixin,
    RebalanceMixin,
    GhostMixin,
    PullMixin,
    ConcurrentConsumeMixin,
    ClientLocksMixin,
    OrderlyConsumeMixin,
    FaultsMixin,
    AdminResetMixin,
):
    """The model of one consumer group; see the module docstring."""

    def __new__(cls, config: Config) -> Model:
        """``Model(config)`` with planted bugs (``config.mutations``) is an instance of the correct model
        with those variants in front (``spec/variants``: each overrides one helper); without, of ``Model``."""
        if cls is not Model or not config.mutations:
            return super().__new__(cls)
        from rmqspec.spec.variants import variant_model  # the variants import this module

        return super().__new__(variant_model(config.mutations))

    def __init__(self, config: Config) -> None:
        self.config = config
        c = config
        self.clustering = c.mode == CLUSTERING
        self.q_count = c.queue_count
        self.topic_queues: tuple[int, ...] = tuple(range(c.queues))
        self.retry_queue: int | None = c.queues if c.has_retry_queue else None
        # The MessageQueue of each queue index: allocation works on them, and Phase B creates pqs in
        # their order (the rebalance's pq table update (RebalanceMixin._update_process_queue_table); a CONFIG list may
        # name the retry queue in the topic's pass).
        self.mqs = model_queues(c)
        self.queue_index = {mq: q for q, mq in enumerate(self.mqs)}
        self.cids = tuple(client_id(0 if i == 1 and c.duplicate_client_id else i) for i in range(c.consumers))
        # Who a clientId names: the lowest consumer index with it. The broker's lock table, unlockBatch and
        # a consumer list key by clientId, so consumers sharing one are one holder there (RMQ-11).
        self.identity = tuple(self.cids.index(cid) for cid in self.cids)
        self.max_reconsume = c.effective_max_reconsume_times
        self.strategies = tuple(self._allocation_strategy(i) for i in range(c.consumers))
        # orderly consumption (R8): which lock rules apply
        self.orderly = c.orderly
        self.lock_renewal = c.orderly and self.clustering  # lockMQPeriodically, unlockAll at shutdown (the lockAll
        # timer (ClientLocksMixin._lock_all), orderly BROADCASTING's locks (ClientLocksMixin))
        self.lock_on_add = c.orderly and (self.clustering or c.orderly_locks_in_broadcasting)  # lock before add
        # (RebalanceMixin._locks_before_add), orderly BROADCASTING's locks (ClientLocksMixin)
        # orderly consume loop (the orderly consume loop, OrderlyConsumeMixin)
        self.orderly_removal = c.orderly and self.clustering  # removeUnnecessaryMessageQueue's orderly branch
        # cleanExpiredMsg (ConcurrentConsumeMixin._clean_expired_msg): only
        # ConsumeMessageConcurrentlyService schedules it
        self.cleans_expired = not c.orderly
        self.consume_timeout = c.consume_timeout
        self.skips_cleaned = c.send_back_skips_cleaned  # 5.x: no second send-back of a cleaned message
        # (processConsumeResult, ConcurrentConsumeMixin._finish_consume)
        # What INV-12a and INV-12 tolerate by default, each switched off by a test to show what it hides
        # (docs/spec.md, section orderly_consume): overlaps after an unlock released a lock still relied on (4.9.8's
        # late unlockDelay, 5.x's forced removal: bugs; ghost stale_unlocks), overlaps after a timing margin broke
        # (broker crash, the overlapping client's stall: outside INV-12's claim, RMQ-10), and the one lock two sharers
        # of a clientId hold (RMQ-11).
        self.tolerate_stale_unlock = True
        self.tolerate_broken_margins = True
        self.tolerate_shared_client_id = True
        # Stall, TaskDies: the broker's idle-channel scan (the broker's timers, BrokerMixin) matters only when
        # heartbeats can stop
        self.track_heartbeats = c.client_stalls > 0 or c.task_deaths > 0
        self.track_bak = c.offset_file_corruptions > 0  # CorruptOffsetFile: the broker's .bak
        self.track_file_bak = c.local_offset_file_corruptions > 0  # CorruptLocalOffsetFile: offsets.json.bak
        self.paced = c.rebalance_paced  # 5.x rebalance loop (RebalanceService, RebalanceMixin._rebalance); read on
        # every enabled() call, so cached
        # slaves: INV-8 on the slave's table tolerates SlaveSync overwriting commits the slave took while the
        # master was down (SlaveSync (SlaveMixin._slave_sync), RMQ-25 (2): by design, the maintainers' answer); a test
        # switches it off
        self.tolerate_slave_sync = True
        self._steps: dict[type, Callable[[State, Any], State]] = {
            Tick: self._tick,
            Produce: self._produce,
            CoolQueueHead: self._cool_queue_head,
            BrokerFlush: self._broker_flush,
            DeliverScheduled: self._deliver_scheduled,
            BrokerCrash: self._broker_crash,
            BrokerRestart: self._broker_restart,
            ExpireChannel: self._expire_channel,
            BrokerReceive: self._broker_receive,
            Start: self._start,
            Shutdown: self._shutdown,
            OrphanReturns: self._orphan_returns,
            Crash: self._crash,
            Heartbeat: self._heartbeat,
            PersistOffsets: self._persist_offsets,
            OffsetFileWriteLands: self._offset_file_write_lands,
            CleanExpiredMsg: self._clean_expired_msg,
            Rebalance: self._rebalance,
            RebalanceQueryError: self._rebalance_query_error,
            SendPull: self._send_pull,
            ReceivePull: self._receive_pull,
            StartConsume: self._start_consume,
            FinishConsume: self._finish_consume,
            ApplyConsumeOffset: self._apply_consume_offset,
            LockAll: self._lock_all,  # orderly
            TryLockLater: self._try_lock_later,  # orderly consume loop
            DelayedUnlock: self._delayed_unlock,  # orderly consume loop
            Stall: self._stall,  # faults
            LoseCommit: self._lose_commit,  # faults
            RebalanceWithoutSelf: self._rebalance_without_self,  # faults
            TaskDies: self._task_dies,  # faults
            CorruptOffsetFile: self._corrupt_offset_file,  # faults
            CorruptLocalOffsetFile: self._corrupt_local_offset_file,  # faults
            SlaveReplicate: self._slave_replicate,  # slaves
            SlaveSync: self._slave_sync,  # slaves
            RetentionDelete: self._retention_delete,  # retention
            FixOffsetIllegal: self._fix_offset_illegal,  # OFFSET_ILLEGAL
        }
        self._reset_init()  # admin reset

    def _allocation_strategy(self, client: int) -> Strategy:
        """The AllocateMessageQueueStrategy object consumer ``client`` is configured with (R11)."""
        return strategy_for(self.config, client)

    # --- the three entry points ---------------------------------------------------------------
    def initial(self) -> State:
        """No consumer running; every topic queue holds ``backlog`` messages stored at time 0."""
        c = self.config
        q_count = self.q_count
        backlog = tuple(Message((q, o), c.tags[o % len(c.tags)], 0) for q in range(c.queues) for o in range(c.backlog))
        queues = tuple(
            BrokerQueue(backlog[q * c.backlog : (q + 1) * c.backlog], c.backlog_head_hot if c.backlog else False)
            for q in range(c.queues)
        ) + ((BrokerQueue((), False),) if self.retry_queue is not None else ())
        none_q: tuple[int | None, ...] = (None,) * q_count
        broker = Broker(True, queues, none_q, none_q, FLUSH_FIRST_DELAY, frozenset(), (), ())
        if self.orderly:  # orderly: an empty RebalanceLockManager table (the broker lock table, orderly.try_lock_batch)
            broker = broker._replace(locks=(None,) * q_count)
        if self.track_heartbeats:  # each channel's lastUpdateTimestamp, 0 while not registered (the broker's timers,
            # BrokerMixin)
            broker = broker._replace(heartbeat_at=(0,) * c.consumers)
        if self.track_bak:  # no .bak yet: loadBak would give an empty table (the broker's load,
            # BrokerMixin._broker_restart)
            broker = broker._replace(bak=none_q)
        client = Client(False, none_q, none_q, (None,) * q_count, (), (), (), (), (), None, None, None, False, None, 0)
        if self.track_file_bak:  # no offsets.json.bak yet: it reads as empty (readLocalOffset,
            # FaultsMixin._corrupt_local_offset_file)
            client = client._replace(file_bak=none_q)
        ledgers = c.consumers if c.mode == BROADCASTING else 1
        zeros = (0,) * (ledgers * q_count)
        skipped = list(zeros)
        for ledger in range(ledgers):  # messages whose tag is not subscribed are never owed
            for q in range(c.queues):
                skipped[ledger * q_count + q] = self._unsubscribed_bits(queues[q])
        ghost = Ghost(zeros, zeros, tuple(skipped), none_q, none_q, 0, 0)
        per_client_queue = (0,) * (c.consumers * q_count)
        ghost = ghost._replace(received=per_client_queue, listened=per_client_queue)
        if self.track_bak:  # CorruptOffsetFile: nobody wrote the missing .bak's table
            ghost = ghost._replace(bak_writer=none_q)
        budget = Budget(
            c.client_crashes,
            c.client_shutdowns,
            c.broker_crashes,
            c.send_back_failures,
            (c.messages_per_queue - c.backlog,) * c.queues,
            c.query_errors,
            retention_deletes=c.retention_deletes,
        )
        budget = budget._replace(
            admin_resets=c.admin_resets,
            client_stalls=c.client_stalls,
            commit_losses=c.commit_losses,
            view_faults=c.view_faults,
            task_deaths=c.task_deaths,
            offset_file_corruptions=c.offset_file_corruptions,
            local_offset_file_corruptions=c.local_offset_file_corruptions,
            lagging_file_writes=c.lagging_file_writes,
        )
        start = History(Event(0, "start", -1, -1, 0, "initial state"), None)
        slave = None
        if c.slave:  # slaves: started with the master, the backlog already copied, its sync timer armed (SlaveSync,
            # SlaveMixin._slave_sync)
            first_sync = c.slave_sync_times[0]
            slave = Broker(True, queues, none_q, none_q, None, frozenset(), (), (), next_sync=first_sync)
            ghost = ghost._replace(slave_last_writer=none_q)
        return State(0, broker, (client,) * c.consumers, ghost, budget, start, slave)

    def step(self, state: State, action: Action) -> State:
        """Apply ``action``; raises :class:`ActionNotEnabled` if its enabling condition fails."""
        handler = self._steps.get(type(action))
        if handler is None:
            raise TypeError(f"not an action of this model: {action!r}")
        client = getattr(action, "client", None)
        if (
            client is not None
            and not isinstance(action, self._UNSTALLED)
            and 0 <= client < len(state.clients)
            and self._stalled(state, state.clients[client])
        ):
            raise ActionNotEnabled(action, "the client is stalled")  # Stall: a paused JVM
        return handler(state, action)

    # What still happens to a stalled client: the broker reads its connection and may expire its channel,
    # and the process can be killed (faults.py, Stall).
    _UNSTALLED = (BrokerReceive, ExpireChannel, Crash, Start, LoseCommit)

    def enabled(self, state: State) -> list[Action]:
        """Every action enabled in ``state``, in a deterministic order."""
        c = self.config
        out: list[Action] = []
        b = state.broker
        timers_due = self._timers_due(state)
        if not timers_due and self._next_deadline(state) is not None:
            out.append(Tick())
        for q in self.topic_queues:
            if state.budget.produces[q] > 0 and b.up:
                out.extend(Produce(q, tag) for tag in c.tags)
            queue = b.queues[q]
            if queue.head_hot and queue.max_offset > 0:
                out.append(CoolQueueHead(q))
        if b.up:
            if b.next_flush is not None and b.next_flush <= state.now:
                out.append(BrokerFlush())
            if b.scheduled and b.scheduled[0].due <= state.now:
                out.append(DeliverScheduled())
            if state.budget.broker_crashes > 0:
                out.append(BrokerCrash())
        else:
            out.append(BrokerRestart())
            if state.budget.offset_file_corruptions > 0 and b.bak is not None:
                out.append(CorruptOffsetFile())  # faults
        sl = state.slave
        if sl is not None:  # slaves
            if b.up:
                out.extend(SlaveReplicate(q) for q in range(self.q_count) if sl.queues[q] != b.queues[q])
            if sl.next_sync is not None and sl.next_sync <= state.now:
                out.append(SlaveSync())
        for i, cl in enumerate(state.clients):
            if self._channel_expirable(state, i):
                out.append(ExpireChannel(i))
            if cl.orphaned and not self._stalled(state, cl):
                out.extend(OrphanReturns(i, r.rid) for r in cl.orphaned)  # docs/spec.md, "What is real, ranked":
                # listeners past a Shutdown
            if cl.file_write_pending is not None and not self._stalled(state, cl):
                out.append(OffsetFileWriteLands(i))  # docs/spec.md, "What is real, ranked": also after a Shutdown,
                # which does not wait for it
            if cl.channel:
                out.append(BrokerReceive(i))
                if self.may_overtake(cl):
                    out.append(BrokerReceive(i, OVERTAKE_WINDOW))  # the broker's request pools (docs/spec.md, "Thread
                    # boundaries")
                if state.budget.commit_losses > 0 and isinstance(cl.channel[0], Commit):
                    out.append(LoseCommit(i))  # faults: the oneway commit is lost on the way
            if not cl.running:
                out.append(Start(i))
                if state.budget.local_offset_file_corruptions > 0 and cl.file_bak is not None:
                    out.append(CorruptLocalOffsetFile(i))  # faults
                continue
            if state.budget.client_crashes > 0 and self._stalled(state, cl):
                out.append(Crash(i))  # a paused JVM can still be killed; nothing else of it runs
            if self._stalled(state, cl):
                continue
            if state.budget.client_stalls > 0:
                out.extend(Stall(i, d) for d in STALL_DURATIONS)  # faults
            if state.budget.task_deaths > 0:
                out.extend(TaskDies(i, t) for t in self._live_tasks(cl))  # faults
            out.extend(self._orderly_timers_enabled(state, i, cl))  # orderly consume loop
            if state.budget.client_shutdowns > 0:
                out.append(Shutdown(i))
            if state.budget.client_crashes > 0:
                out.append(Crash(i))
            if cl.next_heartbeat is not None and cl.next_heartbeat <= state.now:
                out.append(Heartbeat(i))
            if cl.next_persist is not None and cl.next_persist <= state.now and cl.file_write_pending is None:
                out.append(PersistOffsets(i))
                if self._may_lag_write(state, cl):
                    out.append(PersistOffsets(i, 1))  # docs/spec.md, "What is real, ranked": offsets.json's writers are
                    # not serialised
            if cl.next_clean is not None and cl.next_clean <= state.now:
                out.append(CleanExpiredMsg(i))
            if cl.next_lock_all is not None and cl.next_lock_all <= state.now:
                out.append(LockAll(i))  # orderly
            if self._rebalance_due(state, i):
                out.append(Rebalance(i))
                listing = self._list_source(state)
                if self.clustering and state.budget.query_errors > 0 and listing is not None and listing.registered:
                    out.extend(RebalanceQueryError(i, q) for q, pq in enumerate(cl.pqs) if pq is None)
                if self._self_missing_possible(state, i):
                    out.append(RebalanceWithoutSelf(i))  # faults
            for q, pq in enumerate(cl.pqs):
                if (
                    pq is not None
                    and pq.pull_state == PULL_READY
                    and pq.pull_ready_at <= state.now
                    and (pq.msg_count <= c.pull_threshold_for_queue or pq.dropped)
                ):
                    out.append(SendPull(i, q))
            out.extend(ReceivePull(i, p.pq_uid) for p in cl.pulls if p.epoch != -1)
            out.extend(StartConsume(i, r.rid) for r in cl.requests if self._may_start(cl, r, state.now))
            for r in cl.consuming:
                out.extend(self._finish_choices(state, i, r))
            out.extend(ApplyConsumeOffset(i, u.rid) for u in cl.offset_updates)
        out.extend(self._retention_and_fix_enabled(state))
        out.extend(self._reset_enabled(state))  # admin reset
        return out


def initial(config: Config) -> State:
    """The initial state of ``Model(config)``."""
    return Model(config).initial()
