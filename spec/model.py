"""The pure model: ``Model(config)`` gives ``initial()``, ``enabled(state)`` and ``step(state, action)``.

This is the executable specification of RocketMQ 4.9.8 consumer offset management for one
consumer group on one topic served by one broker (with ``Config.slave``, its master and slave), in
CLUSTERING or BROADCASTING mode with concurrent or (``Config.orderly``) orderly consumption.
``Config.version = "5.x"`` switches the 5.x differences it models (the derived properties of
``Config``; docs/spec.md §9). It has no I/O, no clock and no randomness: time is the ``Tick``
action and every choice (which consumer pulls, how a listener answers, which fault strikes) is an
action parameter. Each transition function below documents its enabling condition (checked first;
a disabled action raises :class:`ActionNotEnabled`), its effect, and the rules it models.

Timers (client persist 5 s after 10 s, rebalance 20 s, heartbeat 30 s after 1 s, broker flush
5 s after 10 s, scheduled retries) fire as actions; ``Tick`` cannot pass a due timer, so timers
fire on time relative to the clock while still interleaving freely with everything else.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from rmqspec.spec import broker_rules as br
from rmqspec.spec import orderly as lk
from rmqspec.spec.actions import (
    BACKGROUND_TASKS,
    CONSUME_SUCCESS,
    ORDERLY_COMMIT,
    ORDERLY_ROLLBACK,
    ORDERLY_SUCCESS,
    OVERTAKE_WINDOW,
    RECONSUME_LATER,
    STALL_DURATIONS,
    SUSPEND_CURRENT_QUEUE_A_MOMENT,
    Action,
    AdminReset,  # full fidelity area
    ApplyConsumeOffset,
    BrokerCrash,
    BrokerFlush,
    BrokerReceive,
    BrokerRestart,
    CleanExpiredMsg,
    ClientResetReceive,  # full fidelity area
    ClientResetWake,  # full fidelity area
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
from rmqspec.spec.allocation import AllocationError, allocate_queues, client_id, model_queues, strategy_for
from rmqspec.spec.config import (
    BROADCASTING,
    CLUSTERING,
    FROM_FIRST,
    FROM_TIMESTAMP,
    Config,
)
from rmqspec.spec.state import (
    PULL_DROPPED,
    PULL_IN_FLIGHT,
    PULL_READY,
    Broker,
    BrokerQueue,
    Budget,
    Client,
    Commit,
    ConsumeRequest,
    Event,
    Ghost,
    History,
    Message,
    OffsetFix,
    OffsetUpdate,
    ProcessQueue,
    PullInFlight,
    PullRequestMsg,
    PullResult,
    Scheduled,
    State,
    pq_key,
)
from rmqspec.spec.state import bit_offsets as _bits

# Timer constants (semantics §14).
PERSIST_FIRST_DELAY: Final = 10_000  # persistAllConsumerOffset first run (R4.1)
PERSIST_INTERVAL: Final = 5_000  # persistConsumerOffsetInterval (R4.1)
REBALANCE_WAIT: Final = 20_000  # RebalanceService waitInterval (R4.2)
REBALANCE_MIN_INTERVAL: Final = 1_000  # 5.x rocketmq.client.rebalance.minInterval, also the unbalanced wait (R4.2)
NEW_PULL_DISPATCH_DELAY: Final = 500  # 5.x dispatchPullRequest(pullRequestList, 500) for new pqs (R9.4)
HEARTBEAT_FIRST_DELAY: Final = 1_000  # heartbeat task first run (R4.1)
HEARTBEAT_INTERVAL: Final = 30_000  # heartbeatBrokerInterval (R4.1)
FLUSH_FIRST_DELAY: Final = 10_000  # broker consumer-offset flush first run (R3.6)
FLUSH_INTERVAL: Final = 5_000  # flushConsumerOffsetInterval (R3.6)
PULL_DELAY_WHEN_EXCEPTION: Final = 3_000  # pullTimeDelayMillsWhenException (R5.7)
SEND_BACK_RESUBMIT_DELAY: Final = 5_000  # local resubmit after a failed send-back (R7.3)
OFFSET_ILLEGAL_FIX_DELAY: Final = 10_000  # executeTaskLater of the 4.9.8 OFFSET_ILLEGAL task (R5.7)
RESET_SLEEP: Final = 10_000  # full fidelity: MQClientInstance.resetOffset's Thread.sleep(10000) (R3.10a)
PULL_DELAY_WHEN_SUSPEND: Final = 1_000  # full fidelity: PULL_TIME_DELAY_MILLS_WHEN_SUSPEND (R3.10a)
ADMIN_WRITER: Final = -1  # full fidelity: ghost writer key of the admin's own table writes
# full fidelity: commit causes that apply a reset (the 4.9.8 client's persist; 5.x adoption via R5.7)
RESET_APPLY_CAUSES: Final = ("admin-reset-client", "offset-illegal-fix")
PULL_MAX_IDLE_TIME: Final = 120_000  # rocketmq.client.pull.pullMaxIdleTime: isPullExpired (R6.6)
CHANNEL_EXPIRED_TIMEOUT: Final = 120_000  # the broker's idle-channel scan closes a silent consumer (R4.3)
# orderly consume loop (R8.5-R8.8)
TRY_LOCK_LATER_AT_RUN: Final = 100  # ConsumeRequest.run finds the pq not locked: tryLockLaterAndReconsume(100)
TRY_LOCK_LATER_IN_LOOP: Final = 10  # the loop finds it not locked or expired: tryLockLaterAndReconsume(10)
RESUBMIT_AFTER_LOCK: Final = 10  # tryLockLaterAndReconsume: lockOneMQ granted
RESUBMIT_AFTER_LOCK_DENIED: Final = 3_000  # tryLockLaterAndReconsume: lockOneMQ refused
MAX_TIME_CONSUME_CONTINUOUSLY: Final = 60_000  # rocketmq.client.maxTimeConsumeContinuously
SUBMIT_LATER_AFTER_LONG_RUN: Final = 10  # the loop yields after a long run: submitConsumeRequestLater(10)
SUSPEND_CURRENT_QUEUE_TIME: Final = 1_000  # suspendCurrentQueueTimeMillis, within the [10, 30 000] clamp
UNLOCK_DELAY_TIME: Final = 20_000  # rocketmq.client.unlockDelayTimeMills; 5.x's forced-removal age (R8.8)
SLAVE_SYNC_WRITER: Final = -2  # ghost writer key of the slave's table entries that SlaveSync copied
# cleanExpiredMsg (R6.8): at most this many messages per pq and run, each sent back at this delay level
CLEAN_EXPIRED_MAX_LOOPS: Final = 16
CLEAN_EXPIRED_DELAY_LEVEL: Final = 3
# How a pq's position was found when the group had no stored offset (Ghost.starts): consumeFromWhere
# decided (R10.4), or the broker answered 0 for a young queue with no entry (R3.5). On a queue the group
# had committed on, each needs a cause the run shows (INV-9a, Model.missing_offset_cause).
POSITIONED_WITHOUT_OFFSET: Final = frozenset(
    {"consume-from-first", "consume-from-last", "consume-from-timestamp", "young-queue-zero"}
)


class ActionNotEnabled(Exception):
    """``step`` was given an action whose enabling condition does not hold in the state."""

    def __init__(self, action: Action, reason: str) -> None:
        super().__init__(f"{action!r} is not enabled: {reason}")
        self.action = action
        self.reason = reason


def _put(seq: tuple[Any, ...], index: int, value: Any) -> tuple[Any, ...]:
    return seq[:index] + (value,) + seq[index + 1 :]


def _lowest(bits: int) -> int:
    return (bits & -bits).bit_length() - 1


class Model:
    """The model of one consumer group; see the module docstring."""

    def __init__(self, config: Config) -> None:
        self.config = config
        c = config
        self.clustering = c.mode == CLUSTERING
        self.q_count = c.queue_count
        self.topic_queues: tuple[int, ...] = tuple(range(c.queues))
        self.retry_queue: int | None = c.queues if c.has_retry_queue else None
        # The MessageQueue of each queue index: allocation works on them, and Phase B creates pqs in
        # their order (R9.4; a CONFIG list may name the retry queue in the topic's pass).
        self.mqs = model_queues(c)
        self.queue_index = {mq: q for q, mq in enumerate(self.mqs)}
        self.cids = tuple(client_id(0 if i == 1 and c.duplicate_client_id else i) for i in range(c.consumers))
        # Who a clientId names: the lowest consumer index with it. The broker's lock table, unlockBatch and
        # a consumer list key by clientId, so consumers sharing one are one holder there (RMQ-11).
        self.identity = tuple(self.cids.index(cid) for cid in self.cids)
        self.max_reconsume = c.effective_max_reconsume_times
        m = c.mutations
        self.m_watermark_highest = "watermark_highest_consumed" in m
        self.m_commit_before_send_back = "commit_before_send_back" in m
        self.m_dropped_pq_commits = "dropped_pq_commits" in m
        self.m_ignore_increase_only = "ignore_increase_only" in m
        self.m_no_pruning = "no_persist_all_pruning" in m
        self.m_local_remove_deletes = "local_remove_offset_deletes_file" in m
        self.m_answers_minus_one = "broker_answers_minus_one" in m
        self.m_dlq_late = "dlq_one_retry_late" in m
        self.m_piggyback_next = "piggyback_next_offset" in m
        self.m_count_kept = "count_not_decremented" in m
        self.m_commit_past = "commit_past_cached" in m
        self.m_resume_ignores = "resume_ignores_stored_offset" in m
        self.m_avg_overlap = "avg_blocks_overlap" in m
        # fidelity (pull expiry, retention, OFFSET_ILLEGAL)
        self.m_no_pull_expiry = "pull_expiry_ignored" in m
        self.m_fix_deferred = "offset_illegal_fix_deferred" in m
        # liveness at quiescence (docs/spec.md §13)
        self.m_persist_stops = "persist_timer_stops" in m
        self.m_rebalance_stops = "rebalance_timer_stops" in m
        self.strategies = tuple(strategy_for(c, i, self.m_avg_overlap) for i in range(c.consumers))
        # orderly area (R8): which lock rules apply
        self.orderly = c.orderly
        self.lock_renewal = c.orderly and self.clustering  # lockMQPeriodically, unlockAll at shutdown (R8.3, R8.9)
        self.lock_on_add = c.orderly and (self.clustering or c.orderly_locks_in_broadcasting)  # R8.4, R8.9
        self.m_lock_ignores_holder = "lock_ignores_holder" in m
        self.m_add_without_lock = "add_without_lock" in m
        # orderly consume loop (R8.5-R8.8)
        self.orderly_removal = c.orderly and self.clustering  # removeUnnecessaryMessageQueue's orderly branch
        self.m_commit_last_key = "orderly_commit_returns_last_key" in m
        self.m_suspend_commits = "orderly_suspend_commits" in m
        self.m_removal_ignores_lock = "orderly_removal_ignores_consume_lock" in m
        self.m_ignores_lock_expiry = "orderly_ignores_lock_expiry" in m
        self.m_no_queue_monitor = "orderly_no_queue_monitor" in m
        self.m_pull_requeued = "pull_request_requeued" in m
        # the causal allow-list: bugs that categories would tolerate (a positioning skip, a decrease by
        # another pq, a duplicate)
        self.m_empty_group_loses_offsets = "empty_group_loses_offsets" in m
        self.m_resume_memory_one_behind = "resume_memory_one_behind" in m
        self.m_pull_cursor_one_behind = "pull_cursor_one_behind" in m
        self.m_commit_one_less = "update_offset_stores_one_less" in m
        # cleanExpiredMsg (R6.8): only ConsumeMessageConcurrentlyService schedules it
        self.cleans_expired = not c.orderly
        self.consume_timeout = c.consume_timeout
        self.m_expired_no_send_back = "expired_removed_without_send_back" in m
        self.skips_cleaned = c.send_back_skips_cleaned  # 5.x: no second send-back of a cleaned message (R7.3)
        # What INV-12a and INV-12 tolerate by default, each switched off by a test to show what it hides
        # (docs/spec.md §14): overlaps after an unlock released a lock still relied on (4.9.8's late
        # unlockDelay, 5.x's forced removal: bugs; ghost stale_unlocks), overlaps after a timing margin broke
        # (broker crash, the overlapping client's stall: outside INV-12's claim, RMQ-10), and the one lock
        # two sharers of a clientId hold (RMQ-11).
        self.tolerate_stale_unlock = True
        self.tolerate_broken_margins = True
        self.tolerate_shared_client_id = True
        # Stall, TaskDies: the broker's idle-channel scan (R4.3) matters only when heartbeats can stop
        self.track_heartbeats = c.client_stalls > 0 or c.task_deaths > 0
        self.track_bak = c.offset_file_corruptions > 0  # CorruptOffsetFile: the broker's .bak
        self.track_file_bak = c.local_offset_file_corruptions > 0  # CorruptLocalOffsetFile: offsets.json.bak
        self.paced = c.rebalance_paced  # 5.x rebalance loop (R4.2); read on every enabled() call, so cached
        # slaves: INV-8 on the slave's table tolerates SlaveSync overwriting commits the slave took while the
        # master was down (R3.8, RMQ-25 (2): by design, the maintainers' answer); a test switches it off
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
            LockAll: self._lock_all,  # orderly area
            TryLockLater: self._try_lock_later,  # orderly consume loop
            DelayedUnlock: self._delayed_unlock,  # orderly consume loop
            Stall: self._stall,  # orderly consume loop
            LoseCommit: self._lose_commit,  # faults
            RebalanceWithoutSelf: self._rebalance_without_self,  # faults
            TaskDies: self._task_dies,  # faults
            CorruptOffsetFile: self._corrupt_offset_file,  # faults
            CorruptLocalOffsetFile: self._corrupt_local_offset_file,  # faults
            SlaveReplicate: self._slave_replicate,  # slaves
            SlaveSync: self._slave_sync,  # slaves
            RetentionDelete: self._retention_delete,  # fidelity area
            FixOffsetIllegal: self._fix_offset_illegal,  # fidelity area
        }
        self._reset_init()  # full fidelity area (admin reset)

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
        if self.orderly:  # orderly area: an empty RebalanceLockManager table (R8.1)
            broker = broker._replace(locks=(None,) * q_count)
        if self.track_heartbeats:  # each channel's lastUpdateTimestamp, 0 while not registered (R4.3)
            broker = broker._replace(heartbeat_at=(0,) * c.consumers)
        if self.track_bak:  # no .bak yet: loadBak would give an empty table (R3.7)
            broker = broker._replace(bak=none_q)
        client = Client(False, none_q, none_q, (None,) * q_count, (), (), (), (), (), None, None, None, False, None, 0)
        if self.track_file_bak:  # no offsets.json.bak yet: it reads as empty (R1.10)
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
        if c.slave:  # slaves: started with the master, the backlog already copied, its sync timer armed (R3.8)
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
            raise ActionNotEnabled(action, "the client is stalled")  # orderly consume loop: a paused JVM
        return handler(state, action)

    # What still happens to a stalled client: the broker reads its connection and may expire its channel,
    # and the process can be killed (orderly consume loop, Stall).
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
                out.extend(OrphanReturns(i, r.rid) for r in cl.orphaned)  # §18.3: listeners past a Shutdown
            if cl.file_write_pending is not None and not self._stalled(state, cl):
                out.append(OffsetFileWriteLands(i))  # §18.3: also after a Shutdown, which does not wait for it
            if cl.channel:
                out.append(BrokerReceive(i))
                if self.may_overtake(cl):
                    out.append(BrokerReceive(i, OVERTAKE_WINDOW))  # the broker's request pools (§18)
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
                out.extend(Stall(i, d) for d in STALL_DURATIONS)  # orderly consume loop
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
                    out.append(PersistOffsets(i, 1))  # §18.3: offsets.json's writers are not serialised
            if cl.next_clean is not None and cl.next_clean <= state.now:
                out.append(CleanExpiredMsg(i))
            if cl.next_lock_all is not None and cl.next_lock_all <= state.now:
                out.append(LockAll(i))  # orderly area
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
        out.extend(self._fidelity_enabled(state))
        out.extend(self._reset_enabled(state))  # full fidelity area (admin reset)
        return out

    # --- time ---------------------------------------------------------------------------------
    def _timers_due(self, s: State) -> bool:
        now, b = s.now, s.broker
        if b.up and ((b.next_flush is not None and b.next_flush <= now) or (b.scheduled and b.scheduled[0].due <= now)):
            return True
        if s.slave is not None and s.slave.next_sync is not None and s.slave.next_sync <= now:  # slaves
            return True
        for cl in s.clients:
            if (
                cl.running
                and not self._stalled(s, cl)
                and (
                    any(due <= now for _, _, due in cl.relocks)  # orderly consume loop
                    or any(due <= now for _, due in cl.unlocks)
                    or (cl.next_persist is not None and cl.next_persist <= now)
                    or (cl.next_clean is not None and cl.next_clean <= now)
                    or (cl.next_rebalance is not None and cl.next_rebalance <= now)
                    or (cl.next_heartbeat is not None and cl.next_heartbeat <= now)
                    or (cl.next_lock_all is not None and cl.next_lock_all <= now)
                    or any(f.due <= now for f in cl.offset_fixes)  # fidelity area
                    or (cl.reset_wake is not None and cl.reset_wake <= now)  # full fidelity area (admin reset)
                )
            ):
                return True
        return False

    def _next_deadline(self, s: State) -> int | None:
        now, b = s.now, s.broker
        times: list[int] = []
        if b.up:
            if b.next_flush is not None:
                times.append(b.next_flush)
            if b.scheduled:
                times.append(b.scheduled[0].due)
        if s.slave is not None and s.slave.next_sync is not None:  # slaves
            times.append(s.slave.next_sync)
        for cl in s.clients:
            if not cl.running:
                continue
            if self._stalled(s, cl):  # orderly consume loop: nothing of a paused client runs until it wakes
                times.append(cl.stalled_until)  # type: ignore[arg-type]
                continue
            times.extend(due for _, _, due in cl.relocks)  # orderly consume loop
            times.extend(due for _, due in cl.unlocks)
            for t in (cl.next_persist, cl.next_rebalance, cl.next_heartbeat, cl.next_lock_all, cl.next_clean):
                if t is not None:
                    times.append(t)
            times.extend(r.ready_at for r in cl.requests)
            times.extend(pq.pull_ready_at for pq in cl.pqs if pq is not None and pq.pull_state == PULL_READY)
            times.extend(f.due for f in cl.offset_fixes)  # fidelity area
            if cl.reset_wake is not None:  # full fidelity area (admin reset)
                times.append(cl.reset_wake)
            if cl.rebalance_requested and self.paced:  # 5.x: a woken rebalance waits minInterval
                times.append(cl.last_rebalance + REBALANCE_MIN_INTERVAL)
        later = [t for t in times if t > now]
        return min(later) if later else None

    def _tick(self, s: State, a: Tick) -> State:
        """Tick. Enabled: no timer is due and some deadline lies ahead. Effect: the clock jumps to
        the earliest future deadline (a timer, a delayed pull or a delayed consume request); the
        flow-control retries of the interval refresh lastPullTimestamp (``_flow_control_retries``)."""
        if self._timers_due(s):
            raise ActionNotEnabled(a, "a timer is due and must fire first")
        target = self._next_deadline(s)
        if target is None:
            raise ActionNotEnabled(a, "nothing is scheduled")
        return self._flow_control_retries(s._replace(now=target))

    # --- environment --------------------------------------------------------------------------
    def _produce(self, s: State, a: Produce) -> State:
        """Produce(queue, tag). Enabled: the broker is up, the queue's produce budget remains and
        the tag is one of config.tags. Effect: a message is appended at maxOffset, stored at ``now``;
        message 0 of an empty queue starts hot (R3.5). An unsubscribed tag is owed to nobody."""
        q = a.queue
        if not (0 <= q < self.config.queues) or a.tag not in self.config.tags:
            raise ActionNotEnabled(a, "no such queue or tag")
        if not s.broker.up or s.budget.produces[q] <= 0:
            raise ActionNotEnabled(a, "broker down or produce budget used up")
        queue = s.broker.queues[q]
        o = queue.max_offset
        queue = queue._replace(
            messages=(*queue.messages, Message((q, o), a.tag, s.now)), head_hot=queue.head_hot or o == 0
        )
        ghost = s.ghost
        sub = self.config.subscription
        if sub is not None and a.tag not in sub:
            skipped = list(ghost.skipped)
            for ledger_base in range(0, len(skipped), self.q_count):
                skipped[ledger_base + q] |= 1 << o
            ghost = ghost._replace(skipped=tuple(skipped))
        return s._replace(
            broker=s.broker._replace(queues=_put(s.broker.queues, q, queue)),
            budget=s.budget._replace(produces=_put(s.budget.produces, q, s.budget.produces[q] - 1)),
            ghost=ghost,
        )

    def _cool_queue_head(self, s: State, a: CoolQueueHead) -> State:
        """CoolQueueHead(queue). Enabled: message 0 of the queue is still hot. Effect: it leaves the
        page cache, so a group with no offset is now told QUERY_NOT_FOUND instead of 0 (R3.5)."""
        queue = s.broker.queues[a.queue] if 0 <= a.queue < self.config.queues else None
        if queue is None or not queue.head_hot or queue.max_offset == 0:
            raise ActionNotEnabled(a, "queue head is not hot")
        return s._replace(
            broker=s.broker._replace(queues=_put(s.broker.queues, a.queue, queue._replace(head_hot=False)))
        )

    # --- broker -------------------------------------------------------------------------------
    def _broker_flush(self, s: State, a: BrokerFlush) -> State:
        """BrokerFlush. Enabled: broker up and its flush timer due. Effect: consumerOffset.json
        becomes a copy of the in-memory table; next flush in 5 s (R3.6)."""
        b = s.broker
        if not b.up or b.next_flush is None or b.next_flush > s.now:
            raise ActionNotEnabled(a, "flush timer not due")
        due = b.next_flush
        if self.track_bak:  # string2File copies the readable previous main to .bak (R1.15, R3.6)
            b = b._replace(bak=None if b.main_unreadable else b.flushed, main_unreadable=False)
            s = s._replace(ghost=s.ghost._replace(bak_writer=s.ghost.flushed_writer))
        return s._replace(
            broker=b._replace(flushed=b.offsets, next_flush=due + FLUSH_INTERVAL),
            ghost=s.ghost._replace(flushed_writer=s.ghost.last_writer),
        )

    def _deliver_scheduled(self, s: State, a: DeliverScheduled) -> State:
        """DeliverScheduled. Enabled: broker up and the earliest scheduled message is due. Effect:
        the message lands in %RETRY%<group> (R7.5 step 8, R7.8). BROADCASTING has no retry queue in the
        model (nobody subscribes to it, R7.8): the copy a BROADCASTING cleanExpiredMsg sent (R6.8) only
        leaves the schedule."""
        b = s.broker
        if not b.up or not b.scheduled or b.scheduled[0].due > s.now:
            raise ActionNotEnabled(a, "no scheduled message due")
        rq = self.retry_queue
        if rq is None:
            return s._replace(broker=b._replace(scheduled=b.scheduled[1:]))
        msg = b.scheduled[0].message._replace(store_time=s.now)
        queue = b.queues[rq]
        queue = queue._replace(messages=(*queue.messages, msg), head_hot=queue.head_hot or queue.max_offset == 0)
        return s._replace(broker=b._replace(queues=_put(b.queues, rq, queue), scheduled=b.scheduled[1:]))

    def _broker_crash(self, s: State, a: BrokerCrash) -> State:
        """BrokerCrash (budgeted). Enabled: broker up. Effect: the in-memory offset table is lost
        and what will be loaded is the flushed file (R3.6, R3.7); every connection breaks, so
        requests still on the wire are lost and pulls the broker held fail; registrations go."""
        b = s.broker
        if not b.up or s.budget.broker_crashes <= 0:
            raise ActionNotEnabled(a, "broker down or crash budget used up")
        clients = []
        hist = s.history
        for i, cl in enumerate(s.clients):
            for item in cl.channel:
                if isinstance(item, Commit) and not item.to_slave:
                    hist = History(Event(s.now, "commit-lost", i, item.queue, item.offset, item.cause), hist)
            # A pull still on the wire fails like one the broker held: its reply is an exception. Requests
            # to the slave travel on another connection (slaves).
            pulls = tuple(p._replace(epoch=-2) if p.epoch == -1 and not p.from_slave else p for p in cl.pulls)
            clients.append(cl._replace(channel=tuple(r for r in cl.channel if r.to_slave), pulls=pulls))
        return s._replace(
            broker=b._replace(
                up=False,
                offsets=b.flushed,
                next_flush=None,
                registered=frozenset(),
                heartbeat_at=(0,) * len(b.heartbeat_at),  # Stall: the channel table is broker memory
                epoch=b.epoch + 1,
                locks=(None,) * len(b.locks),  # orderly area: the lock table is memory only (R8.1)
            ),
            clients=tuple(clients),
            budget=s.budget._replace(broker_crashes=s.budget.broker_crashes - 1),
            ghost=self._value_changed(
                self._note_lost(s.ghost, b.offsets, b.flushed, 0, "broker-crash"), range(self.q_count)
            )._replace(
                last_writer=s.ghost.flushed_writer,
                lock_table_lost_at=s.now if self.orderly else s.ghost.lock_table_lost_at,  # orderly area
            ),
            history=hist,
        )

    def _broker_restart(self, s: State, a: BrokerRestart) -> State:
        """BrokerRestart (healing). Enabled: broker down. Effect: it loads consumerOffset.json and
        starts its flush timer (first after 10 s); consumers re-register by heartbeat (R3.7, R4.3)."""
        b = s.broker
        if b.up:
            raise ActionNotEnabled(a, "broker is up")
        return s._replace(broker=b._replace(up=True, next_flush=s.now + FLUSH_FIRST_DELAY))

    def _expire_channel(self, s: State, a: ExpireChannel) -> State:
        """ExpireChannel(client) (healing). Enabled: a broker that is up (the master, or its slave) still
        lists a consumer whose process is gone, or the master lists one that is stalled with its last
        heartbeat more than 120 s ago.
        Effect: for a process that is gone, the channel closes (TCP close or 120 s idle expiry) and
        the other members are told to rebalance (R4.3, R9.7). For a stalled one the broker's
        idle-channel scan removes and closes the channel without telling anyone (R4.3): requests on
        the wire are lost and its pulls fail."""
        i = a.client
        cl = s.clients[i]
        if not self._channel_expirable(s, i):
            raise ActionNotEnabled(a, "no stale channel for this client")
        if not cl.running:  # the process is gone: every broker listing it closes the channel (slaves)
            return self._leave(s, i, closed=True)
        b = self._unregister(s.broker, i)
        # scanNotActiveChannel: the channel is removed and closed, and nobody is told; what was on the wire
        # is lost and every pull awaiting a reply fails (R4.3)
        hist = s.history
        for item in cl.channel:
            if isinstance(item, Commit):
                hist = History(Event(s.now, "commit-lost", i, item.queue, item.offset, item.cause), hist)
        cl = cl._replace(channel=(), pulls=tuple(p._replace(epoch=-2, result=None) for p in cl.pulls))
        return s._replace(
            broker=b, clients=_put(s.clients, i, cl), history=hist, ghost=self._lost_overtaken(s.ghost, i)
        )

    def _channel_expirable(self, s: State, i: int) -> bool:
        """A broker that is up lists consumer ``i`` although its process is gone, or (master only: the
        slave is not modelled with stalls) its channel is idle past 120 s."""
        b, cl = s.broker, s.clients[i]
        listed = b.up and i in b.registered
        if cl.running:
            return listed and self._channel_idle(s, i)
        return listed or (s.slave is not None and i in s.slave.registered)

    def _notify(self, s: State, slave: bool = False) -> State:
        """NOTIFY_CONSUMER_IDS_CHANGED to every live channel of the group on the master (or the slave:
        its ConsumerManager notifies alike, R9.7)."""
        members = s.slave.registered if slave and s.slave is not None else s.broker.registered
        clients = tuple(
            cl._replace(rebalance_requested=True) if cl.running and i in members else cl
            for i, cl in enumerate(s.clients)
        )
        return s._replace(clients=clients)

    def _leave(self, s: State, i: int, closed: bool) -> State:
        """Consumer ``i``'s channel goes from every broker that is up (an unregister at shutdown, a closed
        connection): each tells its remaining channels (R9.7). ``closed``: the connection closed, which
        a broker acts on only if it lists the channel; otherwise UNREGISTER_CLIENT, on which a broker that
        knows the group notifies."""
        b, sl = s.broker, s.slave
        if b.up and (i in b.registered if closed else b.registered):
            s = self._notify(s._replace(broker=self._unregister(b, i)))
            if self.m_empty_group_loses_offsets and not s.broker.registered:
                s = s._replace(broker=s.broker._replace(offsets=(None,) * self.q_count))
        if sl is not None and (i in sl.registered if closed else sl.registered):
            s = self._notify(s._replace(slave=sl._replace(registered=sl.registered - {i})), slave=True)
        return s

    def _list_source(self, s: State) -> Broker | None:
        """The broker a GET_CONSUMER_LIST_BY_GROUP goes to: the master while it is up, else its slave
        (findBrokerAddrByTopic: the master's address when the route has it, else any, R9.3)."""
        return s.broker if s.broker.up else s.slave

    def _unregister(self, b: Broker, i: int) -> Broker:
        """The broker forgets consumer ``i``'s channel (and, with stalls tracked, its timestamp)."""
        if b.heartbeat_at:
            b = b._replace(heartbeat_at=_put(b.heartbeat_at, i, 0))
        return b._replace(registered=b.registered - {i})

    def _register(self, s: State, i: int) -> State:
        """A heartbeat registers the consumer with every broker of the route, the slave too (R4.1); a
        new channel makes that broker notify (R9.7)."""
        sl = s.slave
        if sl is not None and i not in sl.registered:  # slaves
            s = self._notify(s._replace(slave=sl._replace(registered=sl.registered | {i})), slave=True)
        b = s.broker
        if b.up and self.track_heartbeats:  # the channel's lastUpdateTimestamp (R4.3)
            b = b._replace(heartbeat_at=_put(b.heartbeat_at, i, s.now))
            s = s._replace(broker=b)
        if not b.up or i in b.registered:
            return s
        return self._notify(s._replace(broker=b._replace(registered=b.registered | {i})))

    def _broker_receive(self, s: State, a: BrokerReceive) -> State:
        """BrokerReceive(client). Enabled: the client's connection holds a request. Effect: the
        broker processes the oldest one. UPDATE_CONSUMER_OFFSET stores the value, last writer
        wins (R3.2, R3.4). PULL_MESSAGE first applies its piggy-backed commit when the flag is set
        (the broker is a master; R5.4) and then holds the request until its reply is taken.
        With ``overtakes`` 1 the broker runs the second request first, which overtakes the oldest
        (docs/spec.md §18: a thread pool per request code); enabled only where that order can change an
        offset (``may_overtake``). The ghost records the overtaken request (``Ghost.overtaken``)."""
        item, rest, victim = self._take_request(s, a)
        s = s._replace(clients=_put(s.clients, a.client, s.clients[a.client]._replace(channel=rest)))
        if item.to_slave:
            return self._slave_receive(s, a.client, item)
        if isinstance(item, Commit):
            offset = item.offset - 1 if self.m_commit_one_less and item.offset > 0 else item.offset
            return self._land_commit(s, a.client, item.queue, offset, item.pq_uid, item.cause, victim)
        result: PullResult | None
        if not s.broker.registered:
            # No consumer of the group registered (a restarted broker before any heartbeat):
            # SUBSCRIPTION_NOT_EXIST, an early rejection that skips the commit (R5.4).
            result = PullResult(br.PULL_ERROR, (), item.offset)
        else:
            if item.commit_flag:
                s = self._land_commit(s, a.client, item.queue, item.commit_offset, item.pq_uid, "piggyback", victim)
            result = self._pull_result(s, item.queue, item.offset)
            if result.status == br.NO_NEW_MSG:
                result = None  # held for long polling: answered when the client takes the reply
        epoch = s.broker.epoch
        cl = s.clients[a.client]
        pulls = tuple(
            p._replace(epoch=epoch, result=result) if p.pq_uid == item.pq_uid and p.epoch == -1 else p for p in cl.pulls
        )
        return s._replace(clients=_put(s.clients, a.client, cl._replace(pulls=pulls)))

    def _pull_result(self, s: State, q: int, offset: int, from_slave: bool = False) -> PullResult:
        sub = None if q == self.retry_queue else self.config.subscription
        batch = min(self.config.pull_batch_size, br.MAX_TRANSFER_COUNT_ON_MESSAGE_IN_MEMORY)
        if from_slave and s.slave is not None:  # slaves: its own copy and bounds (R5.5)
            return br.slave_pull_result(s.slave.queues[q], offset, batch, sub, self.config.offset_check_in_slave)
        return br.pull_result(s.broker.queues[q], offset, batch, sub)

    def may_overtake(self, cl: Client) -> bool:
        """BrokerReceive(client, overtakes=1) is enabled: the two oldest requests on the connection both
        carry a commit of one queue (an UPDATE_CONSUMER_OFFSET, or a PULL_MESSAGE with the commit flag) and
        both go to the master. An abstraction (docs/spec.md §18): 4.9.8 runs any request on its pool in any
        order, but requests of different queues, or a pull with no commit, commute for every offset the
        properties watch (a pull's result does not read the committed offset), so only these orders are
        offered; the slave's connection stays FIFO (its table has its own property, INV-8s)."""
        if len(cl.channel) < 2:
            return False
        older, newer = cl.channel[0], cl.channel[1]
        return (
            older.queue == newer.queue
            and not older.to_slave
            and not newer.to_slave
            and (isinstance(older, Commit) or older.commit_flag)
            and (isinstance(newer, Commit) or newer.commit_flag)
        )

    def _take_request(
        self, s: State, a: BrokerReceive
    ) -> tuple[Commit | PullRequestMsg, tuple[Commit | PullRequestMsg, ...], Commit | PullRequestMsg | None]:
        """The request BrokerReceive ``a`` runs, the connection without it, and the request it overtakes."""
        cl = s.clients[a.client]
        if not cl.channel:
            raise ActionNotEnabled(a, "nothing on the wire")
        if a.overtakes == 0:
            return cl.channel[0], cl.channel[1:], None
        if a.overtakes != OVERTAKE_WINDOW or not self.may_overtake(cl):
            raise ActionNotEnabled(a, "no second request that may overtake the oldest (both commits of one queue)")
        return cl.channel[1], (cl.channel[0], *cl.channel[2:]), cl.channel[0]

    def _lost_overtaken(self, g: Ghost, client: int) -> Ghost:
        """The oldest request on ``client``'s connection never lands (lost, or the channel closed): it can no
        longer be the overtaken request of ``Ghost.overtaken``, so a later copy of it gets no cause from it."""
        if not g.overtaken or all(mark is None or mark[0] != client for mark in g.overtaken):
            return g
        return g._replace(
            overtaken=tuple(None if mark is not None and mark[0] == client else mark for mark in g.overtaken)
        )

    def _land_commit(
        self,
        s: State,
        client: int,
        q: int,
        offset: int,
        uid: int,
        cause: str,
        overtook: Commit | PullRequestMsg | None = None,
    ) -> State:
        b, g = s.broker, self._value_changed(self._note_committed(s.ghost, q), (q,))
        if overtook is not None:  # the request pools: this commit ran before ``overtook`` (Ghost.overtaken)
            g = g._replace(overtaken=_put(g.overtaken or (None,) * self.q_count, q, (client, overtook)))
        return s._replace(
            broker=b._replace(offsets=_put(b.offsets, q, offset)),
            ghost=g._replace(last_writer=_put(g.last_writer, q, pq_key(client, uid))),
            history=History(Event(s.now, "commit-landed", client, q, offset, cause), s.history),
        )

    # --- slaves (R3.8, R2.4, R2.5, R5.3-R5.5, R9.3) -------------------------------------------------
    def _slave_receive(self, s: State, i: int, item: Commit | PullRequestMsg) -> State:
        """BrokerReceive of a request sent to the slave while the master was down. UPDATE_CONSUMER_OFFSET
        is stored: the 4.9.8 handler checks no role (R3.4). PULL_MESSAGE is answered from the slave's copy
        of the commit log; its commit flag is clear (R5.3), and a slave would not store it anyway (R5.4). A
        group the slave has no heartbeat of is SUBSCRIPTION_NOT_EXIST, as on the master; a 5.x slave refuses
        every pull (``Config.slave_serves_pulls``). Either error is an exception to the client (3 s)."""
        sl = s.slave
        assert sl is not None
        if isinstance(item, Commit):
            g = self._note_committed(s.ghost, item.queue)
            if s.broker.offsets[item.queue] is None:  # the slave never syncs its table back (R3.8, RMQ-25 (2))
                lost = g.offset_lost or ("",) * len(g.handled)
                g = g._replace(offset_lost=_put(lost, item.queue, "slave-only-commit"))
            return s._replace(
                slave=sl._replace(offsets=_put(sl.offsets, item.queue, item.offset)),
                ghost=g._replace(slave_last_writer=_put(g.slave_last_writer, item.queue, pq_key(i, item.pq_uid))),
                history=History(
                    Event(s.now, "commit-landed-on-slave", i, item.queue, item.offset, item.cause), s.history
                ),
            )
        result: PullResult | None = PullResult(br.PULL_ERROR, (), item.offset)
        if sl.registered and self.config.slave_serves_pulls:  # 5.x rejects the pull: SYSTEM_BUSY
            result = self._pull_result(s, item.queue, item.offset, from_slave=True)
            if result.status == br.NO_NEW_MSG:
                result = None  # held for long polling on the slave, answered as messages are copied
        cl = s.clients[i]
        pulls = tuple(
            p._replace(epoch=0, result=result) if p.pq_uid == item.pq_uid and p.epoch == -1 else p for p in cl.pulls
        )
        return s._replace(clients=_put(s.clients, i, cl._replace(pulls=pulls)))

    def _slave_replicate(self, s: State, a: SlaveReplicate) -> State:
        """SlaveReplicate(queue) (slaves; free). Enabled: the master is up and the slave's copy of ``queue``
        differs from the master's. Effect: the copy catches up with the master's commit log (HA): its
        messages, its minOffset (the model lets the slave's retention follow the master's) and whether
        message 0 is in page cache (R3.5). Until it runs, the slave lags; a master crash freezes the lag."""
        q, b, sl = a.queue, s.broker, s.slave
        if sl is None or not b.up or not 0 <= q < self.q_count or sl.queues[q] == b.queues[q]:
            raise ActionNotEnabled(a, "no slave, master down, or the slave's copy is current")
        return s._replace(slave=sl._replace(queues=_put(sl.queues, q, b.queues[q])))

    def _slave_sync(self, s: State, a: SlaveSync) -> State:
        """SlaveSync (slaves; a timer: 4.9.8 first 3 s after start, then every 10 s; 5.x at 61 s, then every
        63 s, ``Config.slave_sync_times``). Enabled: due. Effect, when the master is up:
        GET_ALL_CONSUMER_OFFSET returns the master's memory table and the slave applies it with ``putAll``
        on its ``topic@group`` map: for every topic whose key the master has, the
        slave's per-queue map is replaced by the master's, so a value the slave took while the master was
        down is overwritten (RMQ-25 (2)); a key only the slave has survives (R3.8). A master that is down
        answers nothing and the slave keeps its table."""
        b, sl = s.broker, s.slave
        if sl is None or sl.next_sync is None or sl.next_sync > s.now:
            raise ActionNotEnabled(a, "no slave sync due")
        sl = sl._replace(next_sync=sl.next_sync + self.config.slave_sync_times[1])
        if not b.up:
            return s._replace(slave=sl)
        offsets, writers = list(sl.offsets), list(s.ghost.slave_last_writer)
        hist = s.history
        topics = [self.topic_queues] + ([(self.retry_queue,)] if self.retry_queue is not None else [])
        for queues in topics:
            if all(b.offsets[q] is None for q in queues):
                continue  # no "topic@group" key on the master: the slave's own survives
            for q in queues:
                value = b.offsets[q]
                if offsets[q] != value:
                    hist = History(
                        Event(s.now, "slave-sync", -1, q, -1 if value is None else value, "slave-sync"), hist
                    )
                offsets[q], writers[q] = value, SLAVE_SYNC_WRITER
        return s._replace(
            slave=sl._replace(offsets=tuple(offsets)),
            ghost=s.ghost._replace(slave_last_writer=tuple(writers)),
            history=hist,
        )

    # --- consumer process ---------------------------------------------------------------------
    def _start(self, s: State, a: Start) -> State:
        """Start(client) (healing: a consumer joins or comes back). Enabled: not running. Effect:
        a fresh process: the offset store loads (BROADCASTING: the local file, R1.9; CLUSTERING:
        nothing, R2.1), the scheduled tasks start (persist after 10 s, heartbeat after 1 s, R4.1),
        a heartbeat registers it now, and it asks for an immediate rebalance (R9.7)."""
        i = a.client
        cl = s.clients[i]
        if cl.running:
            raise ActionNotEnabled(a, "already running")
        mem = cl.file if not self.clustering else cl.mem
        cl = cl._replace(
            # 5.x: RebalanceService's lastRebalanceTimestamp starts at construction (R4.2)
            last_rebalance=s.now if self.paced else 0,
            running=True,
            mem=mem,
            next_persist=s.now + PERSIST_FIRST_DELAY,
            next_rebalance=s.now + REBALANCE_WAIT,
            next_heartbeat=s.now + HEARTBEAT_FIRST_DELAY,
            rebalance_requested=True,
            view=None,
            next_lock_all=s.now + lk.LOCK_ALL_FIRST_DELAY if self.lock_renewal else None,  # orderly area (R8.3)
            next_clean=s.now + self.consume_timeout if self.cleans_expired else None,  # R6.8
        )
        return self._register(s._replace(clients=_put(s.clients, i, cl)), i)

    def _stop_process(self, cl: Client) -> Client:
        """What survives a consumer process: its local offset file, requests already on the wire."""
        none_q: tuple[int | None, ...] = (None,) * self.q_count
        return cl._replace(
            running=False,
            mem=none_q,
            pqs=(None,) * self.q_count,
            pulls=(),
            requests=(),
            consuming=(),
            offset_updates=(),
            next_persist=None,
            next_rebalance=None,
            next_heartbeat=None,
            rebalance_requested=False,
            view=None,
            next_lock_all=None,
            offset_fixes=(),  # fidelity area: the pull service's pending tasks die with it
            paused=False,  # full fidelity area (admin reset): the sleeping resetOffset dies with it
            reset_inbox=(),
            reset_table=(),
            reset_wake=None,
            reset_held=(),
            relocks=(),  # orderly consume loop: the service's scheduler dies with the process
            unlocks=(),
            stalled_until=None,
            dead_tasks=(),  # faults: a restarted process has all its tasks again
            last_rebalance=0,
            next_clean=None,  # R6.8: shutdown stops cleanExpireMsgExecutors; a crash ends it
        )

    def _shutdown(self, s: State, a: Shutdown) -> State:
        """Shutdown(client) (budgeted: a consumer leaves). Enabled: running. Effect, in R4.4's
        order: queued and running consume requests are discarded (awaitTermination 0); offsets of
        the owned queues are persisted (oneway / file); the consumer unregisters, which makes the
        broker notify the others; every pq is dropped and the process ends.

        An orderly consumer's running listeners are not stopped: ``shutdownNow`` interrupts their threads
        and a listener that does not check the interrupt runs on (``ThreadUtils#shutdownGracefully``), after
        ``unlockAll`` has released its queues at the broker (R4.4 step 1, R8.9). They become
        ``Client.orphaned`` until ``OrphanReturns``; meanwhile another consumer may lock the queue and run
        its listener beside them (INV-12's allowed anomaly ``orderly-listener-outlives-shutdown``). A concurrent
        listener's late return changes nothing either (its pq is dropped, R7.2) and no property compares
        concurrent listeners, so those are dropped here."""
        i = a.client
        if not s.clients[i].running or s.budget.client_shutdowns <= 0:
            raise ActionNotEnabled(a, "not running or shutdown budget used up")
        orphaned = (*s.clients[i].orphaned, *s.clients[i].consuming) if self.orderly else s.clients[i].orphaned
        cl = s.clients[i]._replace(requests=(), consuming=(), offset_updates=())
        s = s._replace(
            clients=_put(s.clients, i, cl),
            budget=s.budget._replace(client_shutdowns=s.budget.client_shutdowns - 1),
        )
        if self.lock_renewal:  # orderly area: ConsumeMessageOrderlyService.shutdown's unlockAll(false) (R4.4, R8.9)
            s = self._unlock_all(s, i)
        s = self._persist_all(s, i, "shutdown")
        s = self._leave(s, i, closed=False)  # the group exists: CHANGE goes out (R9.7)
        stopped = self._stop_process(s.clients[i])._replace(orphaned=orphaned)
        return s._replace(clients=_put(s.clients, i, stopped))

    def _orphan_returns(self, s: State, a: OrphanReturns) -> State:
        """OrphanReturns(client, rid). Enabled: that listener outlived its consumer's Shutdown and the JVM
        is not stalled. Effect: it returns; ``processConsumeResult`` commits its batch into a pq that
        ``destroy()`` dropped, so ``updateOffset`` is skipped (R8.6), and the loop ends at its dropped check
        (R8.5). Nothing else changes: its offsets were never persisted, so the next owner delivers them
        again (a redelivery at the last landed commit)."""
        cl = s.clients[a.client]
        if self._stalled(s, cl) or all(r.rid != a.rid for r in cl.orphaned):
            raise ActionNotEnabled(a, "no such listener outlived a shutdown, or its JVM is stalled")
        cl = cl._replace(orphaned=tuple(r for r in cl.orphaned if r.rid != a.rid))
        return s._replace(clients=_put(s.clients, a.client, cl))

    def _crash(self, s: State, a: Crash) -> State:
        """Crash(client) (budgeted). Enabled: running. Effect: memory is lost (offset table, pqs,
        pending work, timers). Requests already on the wire still arrive; the broker keeps the
        channel until ExpireChannel."""
        i = a.client
        if not s.clients[i].running or s.budget.client_crashes <= 0:
            raise ActionNotEnabled(a, "not running or crash budget used up")
        return s._replace(  # the JVM dies, and listeners that outlived an earlier Shutdown with it
            clients=_put(s.clients, i, self._stop_process(s.clients[i])._replace(orphaned=(), file_write_pending=None)),
            budget=s.budget._replace(client_crashes=s.budget.client_crashes - 1),
        )

    def _heartbeat(self, s: State, a: Heartbeat) -> State:
        """Heartbeat(client). Enabled: running and the 30 s heartbeat timer due (R4.1). Effect: the
        broker (if up) registers the consumer, notifying the group if it was not listed."""
        cl = s.clients[a.client]
        if not cl.running or cl.next_heartbeat is None or cl.next_heartbeat > s.now:
            raise ActionNotEnabled(a, "heartbeat not due")
        cl = cl._replace(next_heartbeat=cl.next_heartbeat + HEARTBEAT_INTERVAL)
        return self._register(s._replace(clients=_put(s.clients, a.client, cl)), a.client)

    def _persist_offsets(self, s: State, a: PersistOffsets) -> State:
        """PersistOffsets(client, lagging). Enabled: running, persistAllConsumerOffset due, and the timer's last
        persistAll has written. Effect: ``persistAll(keys(processQueueTable))`` (R4.1, R2.7, R1.12); next run
        in 5 s.

        ``lagging`` 1 (BROADCASTING, budgeted): LocalFileOffsetStore#persistAll reads offsets.json and merges
        the owned queues' memory values now, and its ``string2File`` runs later (``OffsetFileWriteLands``).
        Nothing locks the file against the other writers, ``persist(mq)`` on the rebalance thread (a
        pull-expired removal, R9.4), the OFFSET_ILLEGAL task (R5.7) and the 4.9.8 reset (R3.10a), so what
        they write meanwhile is overwritten (docs/spec.md §18.3). Enabled when a pq is owned, the file is
        readable and no reset sleeps (those persistAlls take the other paths of ``_persist_all``)."""
        cl = s.clients[a.client]
        if not cl.running or cl.next_persist is None or cl.next_persist > s.now or cl.file_write_pending is not None:
            raise ActionNotEnabled(a, "persist timer not due, or its last persistAll has not written yet")
        if a.lagging not in (0, 1) or (a.lagging and not self._may_lag_write(s, cl)):
            raise ActionNotEnabled(a, "no lagging write: not BROADCASTING, no budget, nothing owned or a reset sleeps")
        nxt = None if self.m_persist_stops else cl.next_persist + PERSIST_INTERVAL
        cl = cl._replace(next_persist=nxt)
        if a.lagging:
            content = tuple(
                cl.mem[q] if cl.pqs[q] is not None and cl.mem[q] is not None else cl.file[q]
                for q in range(self.q_count)
            )
            return s._replace(
                clients=_put(s.clients, a.client, cl._replace(file_write_pending=(cl.file, content))),
                budget=s.budget._replace(lagging_file_writes=s.budget.lagging_file_writes - 1),
            )
        s = s._replace(clients=_put(s.clients, a.client, cl))
        return self._persist_all(s, a.client, "persist-timer")

    def _may_lag_write(self, s: State, cl: Client) -> bool:
        """A lagging persistAll is possible: BROADCASTING, budget left, a pq owned (persistAll of nothing writes
        nothing), the main file readable and no reset asleep (those persistAlls are ``_persist_all``'s others)."""
        return (
            not self.clustering
            and s.budget.lagging_file_writes > 0
            and any(pq is not None for pq in cl.pqs)
            and not cl.file_main_unreadable
            and not cl.reset_held
        )

    def _offset_file_write_lands(self, s: State, a: OffsetFileWriteLands) -> State:
        """OffsetFileWriteLands(client). Enabled: a lagging persistAll has merged and not written, and the JVM is
        not stalled; also after the consumer's Shutdown, whose own persistAll does not wait for the timer's
        (``ScheduledExecutorService#shutdown`` lets a running task finish, R4.4), so this write may undo it.
        Effect: ``MixAll.string2File`` of the table it merged: the previous main becomes
        .bak and main holds that table, so an entry another writer changed since the read goes back to what
        the read saw (a lost update: INV-6b and INV-6c declare it, ``file-write-race``). A history event names
        the queues whose newer entry was undone."""
        i = a.client
        cl = s.clients[i]
        if cl.file_write_pending is None or self._stalled(s, cl):
            raise ActionNotEnabled(a, "no persistAll waits to write, or the JVM is stalled")
        read, content = cl.file_write_pending
        undone = [q for q in range(self.q_count) if cl.file[q] != read[q] and cl.file[q] != content[q]]
        # an entry another writer added after the read is gone: a restart positions without it (INV-9a's cause)
        s = s._replace(ghost=self._note_lost(s.ghost, cl.file, content, i, "file-write-race"))
        cl = self._write_file(cl, content)._replace(file_write_pending=None)
        s = s._replace(clients=_put(s.clients, i, cl))
        if undone:
            detail = f"undid queues {undone}: written by another thread after this persistAll read the file"
            s = s._replace(history=History(Event(s.now, "file-write-race", i, undone[0], -1, detail), s.history))
        return self._file_written(s, i)

    def _persist_all(self, s: State, i: int, cause: str) -> State:
        """OffsetStore.persistAll(keys(processQueueTable)).

        Remote store (R2.7): an empty set does nothing; otherwise every memory entry of an owned
        queue is sent oneway and every other entry is removed from memory. Local store (R1.12,
        4.9.8): the owned queues' memory values are merged into the file, other file entries kept.
        """
        cl = s.clients[i]
        owned = [q for q, pq in enumerate(cl.pqs) if pq is not None]
        if cl.reset_held:  # full fidelity area (admin reset): a sleeping reset's dropped pqs are still keys
            return self._reset_persist_all(s, i, cause)
        if not owned:
            return s
        if not self.clustering:
            file = tuple(
                cl.mem[q] if cl.pqs[q] is not None and cl.mem[q] is not None else cl.file[q]
                for q in range(self.q_count)
            )
            return self._file_written(s._replace(clients=_put(s.clients, i, self._write_file(cl, file))), i)
        mem = list(cl.mem)
        for q, value in enumerate(cl.mem):
            if value is None:
                continue
            pq = cl.pqs[q]
            if pq is not None:
                s = self._send_commit(s, i, q, value, pq.uid, cause)
            elif not self.m_no_pruning:
                mem[q] = None
        cl = s.clients[i]
        return s._replace(clients=_put(s.clients, i, cl._replace(mem=tuple(mem))))

    def _send_commit(self, s: State, i: int, q: int, value: int, uid: int, cause: str) -> State:
        """updateConsumeOffsetToBroker oneway (R2.5): queued on the connection if the broker is
        reachable, otherwise lost at once (the send fails and is logged). While the master is down the
        slave takes it (R2.5's lookup falls back to any address of the broker name; slaves)."""
        if not s.broker.up and s.slave is None:
            return s._replace(history=History(Event(s.now, "commit-lost", i, q, value, cause), s.history))
        cl = s.clients[i]
        cl = cl._replace(channel=(*cl.channel, Commit(q, value, uid, cause, to_slave=not s.broker.up)))
        return s._replace(
            clients=_put(s.clients, i, cl),
            history=History(Event(s.now, "commit-sent", i, q, value, cause), s.history),
        )

    def _persist_one(self, s: State, i: int, q: int, uid: int, cause: str) -> State:
        """OffsetStore.persist(mq): oneway send (R2.6) or a file write of that entry (R1.13)."""
        cl = s.clients[i]
        value = cl.mem[q]
        if value is None:
            return s
        if self.clustering:
            return self._send_commit(s, i, q, value, uid, cause)
        written = self._write_file(cl, _put(cl.file, q, value))
        return self._file_written(s._replace(clients=_put(s.clients, i, written)), i)

    def _write_file(self, cl: Client, file: tuple[int | None, ...]) -> Client:
        """MixAll.string2File of offsets.json (R1.15): the previous main goes to .bak (an unreadable main
        too, as text: the .bak is then unreadable); main gets the merged table read from the effective file."""
        if self.track_file_bak:
            cl = cl._replace(file_bak=None if cl.file_main_unreadable else cl.file, file_main_unreadable=False)
        return cl._replace(file=file)

    def _remove_offset(self, cl: Client, q: int) -> Client:
        """OffsetStore.removeOffset(mq): the memory entry only; the local file keeps it (R1.14, R2.2)."""
        cl = cl._replace(mem=_put(cl.mem, q, None))
        if self.m_local_remove_deletes and not self.clustering:
            cl = cl._replace(file=_put(cl.file, q, None))
        return cl

    # --- rebalance ----------------------------------------------------------------------------
    def _rebalance(self, s: State, a: Rebalance) -> State:
        """Rebalance(client). Enabled: running, and the 20 s wait is over or a rebalance was
        requested (start, notification). Effect: ``doRebalance`` for the topic and, in CLUSTERING,
        the retry topic (R9.1). BROADCASTING takes every queue (R9.2). CLUSTERING asks the broker (its
        slave while the master is down) for the consumer list; if it cannot (no broker) nothing changes,
        else it allocates with
        the configured strategy over the sorted lists (R9.3, R11) and updates the pq table (R9.4)."""
        if not self._rebalance_due(s, a.client):
            raise ActionNotEnabled(a, "no rebalance due or requested")
        return self._do_rebalance(s, a.client, None)

    def _rebalance_query_error(self, s: State, a: RebalanceQueryError) -> State:
        """RebalanceQueryError(client, queue) (budgeted). Enabled: CLUSTERING, a rebalance is due
        as for Rebalance, the broker is up with a consumer of the group registered, ``queue`` has no
        pq, and ``query_errors`` budget is left. Effect: Rebalance(client), except that if Phase B
        asks the broker for ``queue``'s offset, the QUERY_CONSUMER_OFFSET answer is SYSTEM_ERROR
        (the processor threw), which costs one unit of budget. readOffset maps it by version (R2.3):
        4.9.8 reads it as -1, no offset, and positions the queue by consumeFromWhere (R10.1), past
        a stored offset [RMQ-14]; 5.x reads it as -2, computePullFromWhereWithException throws and
        the rebalance leaves the queue without a pq this round (R10.1, R9.4)."""
        i, q = a.client, a.queue
        listing = self._list_source(s)
        if (
            not self.clustering
            or not 0 <= q < self.q_count
            or not self._rebalance_due(s, i)
            or s.budget.query_errors <= 0
            or listing is None
            or not listing.registered
            or s.clients[i].pqs[q] is not None
        ):
            raise ActionNotEnabled(a, "no rebalance due, no query of that queue possible, or budget used up")
        return self._do_rebalance(s, i, q)

    def _rebalance_due(self, s: State, i: int) -> bool:
        cl = s.clients[i]
        if "RebalanceService" in cl.dead_tasks:  # faults: the thread is gone; nothing wakes it
            return False
        if self.paced and s.now < cl.last_rebalance + REBALANCE_MIN_INTERVAL:
            return False  # 5.x: a wake-up within minInterval of the last rebalance waits out the rest (R4.2)
        return cl.running and (cl.rebalance_requested or (cl.next_rebalance is not None and cl.next_rebalance <= s.now))

    def _do_rebalance(self, s: State, i: int, fault: int | None, without_self: bool = False) -> State:
        """doRebalance (R9.1); ``fault`` is the queue whose offset query fails, if any; ``without_self``:
        the broker's consumer lists lack this consumer's clientId (RebalanceWithoutSelf). The next wait is
        20 s; 5.x waits only minInterval (1 s) when the result was not balanced (R4.2)."""
        cl = s.clients[i]
        wait = None if self.m_rebalance_stops else s.now + REBALANCE_WAIT
        cl = cl._replace(next_rebalance=wait, rebalance_requested=False)
        if self.paced:
            cl = cl._replace(last_rebalance=s.now)
        s = s._replace(clients=_put(s.clients, i, cl))
        s, balanced = self._rebalance_topics(s, i, fault, without_self)
        if balanced or wait is None or not self.paced:
            return s
        cl = s.clients[i]
        return s._replace(clients=_put(s.clients, i, cl._replace(next_rebalance=s.now + REBALANCE_MIN_INTERVAL)))

    def _rebalance_topics(self, s: State, i: int, fault: int | None, without_self: bool) -> tuple[State, bool]:
        """rebalanceByTopic for each subscribed topic; also returns 5.x's ``balanced``: every topic's allocation
        equals its working queues (pqs in the table, not dropped), a null consumer list counting as balanced
        and a throwing allocation as not (5.3.3 RebalanceImpl#rebalanceByTopic, R4.2)."""
        if not self.clustering:
            s, _ = self._rebalance_topic(s, i, self.topic_queues, set(self.topic_queues), fault)
            return s, not self.paced or self._working(s, i, self.topic_queues) == set(self.topic_queues)
        listing = self._list_source(s)
        if listing is None or not listing.registered:
            # findConsumerIdList gets an error (no broker, or no consumer registered: SYSTEM_ERROR)
            # and answers null: existing pqs are kept (R9.3 steps 2-3).
            return s, True
        me = self.cids[i]
        topics = [self.topic_queues]
        if self.retry_queue is not None:
            topics.append((self.retry_queue,))
        lists, complete, thrown, balanced = set(), True, 0, True
        for queues in topics:
            # findConsumerIdList per topic: the heartbeat of an earlier topic's change may have
            # registered this consumer in between (R9.3, R9.6).
            listed = self._list_source(s).registered  # type: ignore[union-attr]
            if without_self:
                listed = frozenset(j for j in listed if self.cids[j] != me)
                if not listed:  # an empty list is answered "no consumer for this group": null (R9.3 step 3)
                    thrown += 1
                    continue
            members = tuple(sorted(listed, key=lambda j: self.cids[j]))
            cid_all = tuple(self.cids[j] for j in members)
            try:
                allocated = allocate_queues(self.strategies[i], me, tuple(self.mqs[q] for q in queues), cid_all)
            except AllocationError:
                thrown += 1  # logged; this topic is left as it is this round (R9.3 step 5, R11.7)
                balanced = False
                continue
            mine = {self.queue_index[mq] for mq in allocated}
            errors = s.budget.query_errors
            s, placed = self._rebalance_topic(s, i, queues, mine, fault)
            if s.budget.query_errors != errors:
                fault = None  # the query error strikes once; a CONFIG list can ask again in the next topic
            lists.add(tuple(self.identity[j] for j in members))  # a view names clientIds (RMQ-11)
            complete = complete and placed
            # a CONFIG list naming the retry queue in the topic's pass is never balanced: getWorkingMessageQueue
            # looks only at the topic's own queues
            balanced = balanced and (not self.paced or mine == self._working(s, i, queues))
        if thrown == len(topics):
            return s, balanced  # no topic was allocated: the view stays
        view = lists.pop() if complete and not thrown and len(lists) == 1 else None
        cl = s.clients[i]
        return s._replace(clients=_put(s.clients, i, cl._replace(view=view))), balanced

    @staticmethod
    def _working(s: State, i: int, topic_queues: tuple[int, ...]) -> set[int]:
        """5.x getWorkingMessageQueue: the topic's queues with a pq in the table that is not dropped."""
        pqs = s.clients[i].pqs
        return {q for q in topic_queues if (pq := pqs[q]) is not None and not pq.dropped}

    def _rebalance_topic(
        self, s: State, i: int, topic_queues: tuple[int, ...], mine: set[int], fault: int | None
    ) -> tuple[State, bool]:
        """rebalanceByTopic's tail: update the pq table and, if it changed, messageQueueChanged,
        whose heartbeat registers the consumer with the broker (R9.6 step 3, R9.7)."""
        before = self._pq_uids(s.clients[i])
        s, complete = self._update_process_queue_table(s, i, topic_queues, mine, fault)
        # "changed": a pq added or removed; an orderly removal that was refused only marks its pq dropped (R8.8)
        if self._pq_uids(s.clients[i]) != before:
            s = self._register(s, i)
        return s, complete

    @staticmethod
    def _pq_uids(cl: Client) -> tuple[int | None, ...]:
        return tuple(None if pq is None else pq.uid for pq in cl.pqs)

    def _update_process_queue_table(
        self, s: State, i: int, topic_queues: tuple[int, ...], mine: set[int], fault: int | None
    ) -> tuple[State, bool]:
        """updateProcessQueueTableInRebalance (R9.4), push consumer.

        Phase A drops each pq no longer allocated, or pull-expired (R6.6): ``persist`` then
        ``removeOffset`` (R9.5); an orderly CLUSTERING consumer's removal may be refused and the pq
        stays in the table, dropped (R8.8), which keeps Phase B from re-creating it. Phase B
        creates a pq for each new queue: ``removeDirtyOffset``, then ``computePullFromWhere``
        (R10.1); a queue whose start cannot be computed is skipped this round. Returns the new
        state and whether every allocated queue now has a pq.
        """
        for q in topic_queues:
            pq = s.clients[i].pqs[q]
            if pq is None or (q in mine and not self.pull_expired(s, pq)):
                continue
            if self.orderly_removal:  # orderly consume loop: R8.8; a refused removal keeps the pq, dropped
                pq = pq._replace(dropped=True)
                cl = s.clients[i]
                s = s._replace(clients=_put(s.clients, i, cl._replace(pqs=_put(cl.pqs, q, pq))))
                s, removed = self._remove_orderly(s, i, q, pq, pq.uid, "rebalance-removal")
                if removed:
                    cl = s.clients[i]
                    s = s._replace(clients=_put(s.clients, i, self._detach(cl, q, pq)))
                continue
            s = self._persist_one(s, i, q, pq.uid, "rebalance-removal")
            cl = s.clients[i]
            cl = self._remove_offset(self._detach(cl, q, pq), q)
            s = s._replace(clients=_put(s.clients, i, cl))
        complete = True
        for q in sorted(mine, key=self.mqs.__getitem__):
            if s.clients[i].pqs[q] is not None:
                complete = complete and not s.clients[i].pqs[q].dropped  # type: ignore[union-attr]
                continue
            if self.lock_on_add and not self.m_add_without_lock:  # orderly area: lock(mq) first, else skip (R8.4)
                s, granted = self._lock(s, i, (q,), False)
                if q not in granted:
                    complete = False
                    continue
            cl = s.clients[i]
            s = s._replace(clients=_put(s.clients, i, self._remove_offset(cl, q)))  # removeDirtyOffset
            s, start = self._compute_pull_from_where(s, i, q, s.clients[i].seq, fault == q)
            if start is None or start < 0:
                complete = False
                continue
            cl = s.clients[i]
            first_pull = s.now + (NEW_PULL_DISPATCH_DELAY if self.paced else 0)
            pq = ProcessQueue(cl.seq, 0, 0, 0, 0, start, PULL_READY, first_pull, last_pull=s.now)
            if self.orderly:  # orderly area: pq.locked := true; lastLockTimestamp is its creation (R8.4)
                pq = pq._replace(locked=True, last_lock=s.now)
            cl = cl._replace(pqs=_put(cl.pqs, q, pq), seq=cl.seq + 1)
            s = s._replace(clients=_put(s.clients, i, cl))
        return s, complete

    def _compute_pull_from_where(
        self, s: State, i: int, q: int, uid: int, query_fails: bool
    ) -> tuple[State, int | None]:
        """computePullFromWhereWithException (R10.1) after ``readOffset(READ_FROM_STORE)``.

        CLUSTERING reads the broker (R2.3, R3.5): a found offset seeds memory with
        ``updateOffset(mq, o, false)``; QUERY_NOT_FOUND gives -1. BROADCASTING reads the local file
        (R1.11). With -1, consumeFromWhere decides (R10.4): LAST gives maxOffset (0 for a retry
        topic), FIRST gives 0, TIMESTAMP searches (maxOffset for a retry topic). The offsets a
        first-start position jumps over are recorded as declared skips (INV-9). ``None`` means the
        broker could not be asked (an exception: the queue is skipped this round).

        ``query_fails``: the broker answers SYSTEM_ERROR (RebalanceQueryError). 4.9.8 reads that as
        -1 like QUERY_NOT_FOUND; 5.x as -2, a failed read (R2.3), on which 5.x throws where 4.9.8
        returns -1 (R10.1); the caller skips the queue on both (R9.4).

        ``uid``: the pq positioned (the next uid for a pq Phase B creates). The ghost records how its
        position was found (``Ghost.starts``) and, for a position consumeFromWhere chose, why there was no
        stored offset (``missing_offset_cause``).
        """
        cl = s.clients[i]
        b = s.broker
        asked = b if b.up else s.slave  # slaves: R2.4's lookup falls back to the slave while the master is down
        stored: int | None
        if self.clustering:
            if asked is None:
                return s, None
            if query_fails:
                s = s._replace(budget=s.budget._replace(query_errors=s.budget.query_errors - 1))
                if not self.config.broker_error_reads_as_no_offset:
                    return s, None if self.config.read_error_throws else -1  # readOffset gave -2
                stored = None  # 4.9.8: MQBrokerException reads as -1, "no offset" [RMQ-14]
            else:
                stored = br.query_consumer_offset(
                    asked.offsets[q],
                    asked.queues[q],
                    self.m_answers_minus_one,
                    self.config.young_queue_needs_head_in_memory,
                )
        else:
            stored = cl.file[q]
        if stored is not None:
            seeded = stored - 1 if self.m_resume_memory_one_behind and stored > 0 else stored
            cl = cl._replace(mem=_put(cl.mem, q, seeded))  # updateOffset(mq, o, increaseOnly=false)
            s = s._replace(clients=_put(s.clients, i, cl))
            if stored >= 0 and not self.m_resume_ignores:
                how = "stored-offset"
                if self.clustering and asked is not None and asked.offsets[q] is None:
                    how = "young-queue-zero"  # no entry: the broker answers 0 for a young queue (R3.5)
                elif self.clustering and asked is s.slave:
                    how = "stored-offset-on-slave"
                return self._positioned(s, i, q, uid, stored, how, False, query_fails), stored
        cfw = self.config.consume_from_where
        is_retry = q == self.retry_queue
        if cfw == FROM_FIRST or (is_retry and cfw != FROM_TIMESTAMP):
            return self._positioned(s, i, q, uid, 0, "consume-from-first", False, query_fails), 0
        if not b.up:  # GET_MAX_OFFSET / SEARCH_OFFSET_BY_TIMESTAMP go to the master only: MQClientException
            return s, None
        queue = b.queues[q]
        if cfw == FROM_TIMESTAMP and not is_retry:
            start = br.search_offset(queue, self.config.consume_timestamp)
            return self._positioned(s, i, q, uid, start, "consume-from-timestamp", True, query_fails), start
        start = queue.max_offset
        return self._positioned(s, i, q, uid, start, "consume-from-last", True, query_fails), start

    def _positioned(
        self, s: State, i: int, q: int, uid: int, start: int, how: str, skip: bool, query_error: bool
    ) -> State:
        """Ghost of a position found for pq ``uid``: ``Ghost.starts``; for a position consumeFromWhere
        chose, the cause of the missing offset in the history event; the offsets a forward position
        jumps over that nobody handled are declared skipped with that cause (``Ghost.skips``). A new
        pq's own ledgers (``received``, ``listened``) start empty."""
        g = s.ghost
        idx = self._ledger(i) * self.q_count + q
        key = pq_key(i, uid)
        g = g._replace(starts=(*(e for e in g.starts if e[0] != key), (key, start, how)))
        if how == "stored-offset" and self.clustering:  # it read the master's current value
            readers = g.readers or (frozenset(),) * self.q_count
            g = g._replace(readers=_put(readers, q, readers[q] | {key}))
        cause = how
        if how in POSITIONED_WITHOUT_OFFSET:
            cause = f"{how}: {self.missing_offset_cause(s, i, q, query_error) or 'no cause'}"
        if skip and start > 0:
            below = (1 << start) - 1
            jumped = below & ~(g.handled[idx] | g.skipped[idx]) & ~((1 << s.broker.queues[q].min_offset) - 1)
            g = g._replace(skipped=_put(g.skipped, idx, g.skipped[idx] | below))
            if jumped:
                g = g._replace(skips=(*g.skips, (idx, cause, jumped)))
        if uid == s.clients[i].seq:
            cq = i * self.q_count + q
            if g.received[cq] or g.listened[cq]:
                g = g._replace(received=_put(g.received, cq, 0), listened=_put(g.listened, cq, 0))
        return s._replace(ghost=g, history=History(Event(s.now, "position", i, q, start, cause), s.history))

    # --- ghost: the facts the causal allow-list points to (docs/spec.md §4.3) -----------------------
    def missing_offset_cause(self, s: State, i: int, q: int, query_error: bool) -> str | None:
        """Why consumer ``i`` found no stored offset for queue ``q`` in ``s``: "first-start" when its
        ledger never had one land (R10.4: the messages before the position are not owed); otherwise the
        fault that removed it (``Ghost.offset_lost``; "slave-only-commit": the group's only commits of it
        landed on the slave while the master was down, and a slave never syncs back, R3.8, RMQ-25), a
        4.9.8 offset query that failed and reads as "no offset" (R2.3, RMQ-14), or a failover to a slave
        whose table lacks it (R2.4, R3.8). ``None``: the group had committed on this queue and nothing
        the run shows removed the offset: a loss (INV-9a)."""
        idx = self._ledger(i) * self.q_count + q
        g = s.ghost
        if not g.committed >> idx & 1:
            return "first-start"
        if g.offset_lost and g.offset_lost[idx]:
            return g.offset_lost[idx]
        if query_error and self.clustering and self.config.broker_error_reads_as_no_offset:
            return "query-error"
        if self.clustering and not s.broker.up and s.slave is not None and s.slave.offsets[q] is None:
            return "failover-to-a-replica-lacking-the-offset"
        return None

    def _note_committed(self, g: Ghost, idx: int) -> Ghost:
        """A commit of ledger index ``idx`` landed: the group has an offset there, and no fault has
        removed it since."""
        lost = g.offset_lost
        if lost and lost[idx]:
            lost = _put(lost, idx, "")
        return g._replace(committed=g.committed | 1 << idx, offset_lost=lost)

    def _value_changed(self, g: Ghost, queues: range | tuple[int, ...]) -> Ghost:
        """The master's value of ``queues`` changed: nobody has read the new one yet (``Ghost.readers``), and
        no request overtaken by its writer is known yet (``Ghost.overtaken``; set again by ``_land_commit``)."""
        if g.overtaken and any(g.overtaken[q] is not None for q in queues):
            overtaken = list(g.overtaken)
            for q in queues:
                overtaken[q] = None
            g = g._replace(overtaken=tuple(overtaken))
        if not g.readers or not any(g.readers[q] for q in queues):
            return g
        readers = list(g.readers)
        for q in queues:
            readers[q] = frozenset()
        return g._replace(readers=tuple(readers))

    def _note_lost(
        self, g: Ghost, before: tuple[int | None, ...], after: tuple[int | None, ...] | None, ledger: int, fault: str
    ) -> Ghost:
        """``fault`` replaces the offset table ``before`` by ``after``: the entries it removes are lost."""
        if after is None:
            return g
        lost = list(g.offset_lost or ("",) * len(g.handled))
        changed = False
        for q, (old, new) in enumerate(zip(before, after, strict=True)):
            if old is not None and new is None:
                lost[ledger * self.q_count + q] = fault
                changed = True
        return g._replace(offset_lost=tuple(lost)) if changed else g

    def _file_written(self, s: State, i: int) -> State:
        """BROADCASTING: consumer ``i``'s offsets.json now holds these entries (committed)."""
        g = s.ghost
        for q, value in enumerate(s.clients[i].file):
            idx = i * self.q_count + q
            if value is not None and (not g.committed >> idx & 1 or (g.offset_lost and g.offset_lost[idx])):
                g = self._note_committed(g, idx)
        return s._replace(ghost=g)

    def start_of(self, s: State, key: int) -> tuple[int, str] | None:
        """(start offset, how) of the pq with ``key`` (``pq_key``), if it was ever positioned."""
        for k, start, how in reversed(s.ghost.starts):
            if k == key:
                return start, how
        return None

    # --- pull ---------------------------------------------------------------------------------
    def _send_pull(self, s: State, a: SendPull) -> State:
        """SendPull(client, queue). Enabled: running; the queue's pq has a ready PullRequest and is
        not over pullThresholdForQueue (R5.1 holds a pull back only when msgCount > threshold). Flow
        control's 50 ms retries are folded: the retry that finds room is this step, and the retries
        before it, which only set lastPullTimestamp (R5.1 step 2 comes before step 5), are applied
        by Tick (``_flow_control_retries``), so a pq held by flow control never looks pull-expired
        (R6.6). Effect: PULL_MESSAGE at nextOffset
        with the piggy-backed commit: CLUSTERING sends the memory offset and sets the flag only
        when it is > 0 (R5.2). If the broker is down the
        send fails and the pull is retried after 3 s (R5.7). A pq that an orderly removal left dropped
        in the table only loses its PullRequest (R5.1 step 1)."""
        i, q = a.client, a.queue
        cl = s.clients[i]
        pq = cl.pqs[q] if cl.running and 0 <= q < self.q_count else None
        if (
            pq is None
            or pq.pull_state != PULL_READY
            or pq.pull_ready_at > s.now
            or (pq.msg_count > self.config.pull_threshold_for_queue and not pq.dropped)
        ):
            raise ActionNotEnabled(a, "no ready pull request under the flow-control threshold")
        if pq.dropped:  # orderly consume loop: R5.1 step 1, a dropped pq's PullRequest is discarded
            pq = pq._replace(pull_state=PULL_DROPPED)
            return s._replace(clients=_put(s.clients, i, cl._replace(pqs=_put(cl.pqs, q, pq))))
        pq = pq._replace(last_pull=s.now)  # R5.1 step 2
        if self.orderly:  # orderly area: R5.1 step 6
            s, pq, ready = self._orderly_pull_gate(s, i, q, pq)
            if not ready:
                return s
            cl = s.clients[i]
        to_slave = not s.broker.up  # slaves: the route lacks the master, so any address of the name (R5.3)
        if to_slave and s.slave is None:
            pq = pq._replace(pull_ready_at=s.now + PULL_DELAY_WHEN_EXCEPTION)
            return s._replace(clients=_put(s.clients, i, cl._replace(pqs=_put(cl.pqs, q, pq))))
        commit_value = 0  # R5.2: only CLUSTERING reads the store (READ_FROM_MEMORY, -1 if absent)
        if self.clustering:
            mem = cl.mem[q]
            commit_value = mem if mem is not None else -1
            if self.m_piggyback_next:
                commit_value = pq.next_offset
        # pullKernelImpl clears COMMIT_OFFSET for a slave's address (R5.3)
        request = PullRequestMsg(q, pq.uid, pq.next_offset, commit_value > 0 and not to_slave, commit_value, to_slave)
        cl = cl._replace(
            pqs=_put(cl.pqs, q, pq._replace(pull_state=PULL_READY if self.m_pull_requeued else PULL_IN_FLIGHT)),
            pulls=(*cl.pulls, PullInFlight(q, pq.uid, pq.next_offset, -1, None, None, from_slave=to_slave)),
            channel=(*cl.channel, request),
        )
        return s._replace(clients=_put(s.clients, i, cl))

    def _receive_pull(self, s: State, a: ReceivePull) -> State:
        """ReceivePull(client, pq_uid). Enabled: running and the broker has processed that pull.
        Effect: the PullCallback (R5.7) with the result computed from the queue now, which models
        long polling (a held request is answered when a message arrives; R5.4 commits only once).
        FOUND: putMessage, submit consume requests in batches of consumeMessageBatchMaxSize,
        nextOffset := nextBeginOffset. NO_NEW_MSG / NO_MATCHED_MSG: nextOffset := nextBeginOffset,
        then correctTagsOffset: if the pq holds nothing, updateOffset(nextOffset, increaseOnly).
        A broken connection (broker crashed meanwhile) or an error code is an exception: pull again
        after 3 s.
        A reply for a dropped pq changes nothing, except correctTagsOffset (R6.7)."""
        i = a.client
        cl = s.clients[i]
        found_at = next((k for k, p in enumerate(cl.pulls) if p.pq_uid == a.pq_uid and p.epoch != -1), None)
        if not cl.running or found_at is None:
            raise ActionNotEnabled(a, "no processed pull for this pq")
        pull = cl.pulls[found_at]
        cl = cl._replace(pulls=cl.pulls[:found_at] + cl.pulls[found_at + 1 :])
        s = s._replace(clients=_put(s.clients, i, cl))
        q = pull.queue
        pq = cl.pqs[q]
        live = pq is not None and pq.uid == pull.pq_uid
        failed = (
            (not pull.from_slave and (not s.broker.up or pull.epoch != s.broker.epoch))  # slaves: never crash
            or (pull.result is not None and pull.result.status == br.PULL_ERROR)
        )
        if failed:
            if live and pq is not None:
                pq = pq._replace(pull_state=PULL_READY, pull_ready_at=s.now + PULL_DELAY_WHEN_EXCEPTION)
                s = s._replace(clients=_put(s.clients, i, cl._replace(pqs=_put(cl.pqs, q, pq))))
            return s
        queue = s.broker.queues[q]
        result = pull.result if pull.result is not None else self._pull_result(s, q, pull.offset, pull.from_slave)
        if result.status == br.OFFSET_ILLEGAL:
            return self._offset_illegal(s, i, pull, result.next_begin)
        if not live or pq is None:
            if result.status == br.FOUND and self.orderly:  # putMessage on the detached pq; dispatch if idle
                if result.found and not pull.dropped_consuming:
                    cl = self._submit_orderly_request(cl, q, pull.pq_uid, s.now)
            elif result.status == br.FOUND:  # no dropped check here: requests are submitted (R5.7)
                cl = self._submit_consume_requests(cl, q, pull.pq_uid, result.found, queue, s.now)
            elif pull.dropped_empty:
                raised = self._updated(cl.mem[q], result.next_begin, True)
                current = cl.pqs[q]  # the shared entry now belongs to the table's pq (R6.7's exception)
                old = cl.mem[q]
                if self.orderly and (old is None or raised > old) and current is not None:  # "orderly-overwrite"
                    keys = s.ghost.raised_by_tags | {pq_key(i, current.uid)}
                    s = s._replace(ghost=s.ghost._replace(raised_by_tags=keys))
                cl = cl._replace(mem=_put(cl.mem, q, raised))
            return s._replace(clients=_put(s.clients, i, cl))
        if result.status == br.FOUND:
            tree, count, size, qmax = pq.tree, pq.msg_count, pq.msg_size, pq.queue_offset_max
            for o in result.found:  # ProcessQueue.putMessage (R6.2)
                if not tree >> o & 1:
                    tree |= 1 << o
                    count += 1
                    size += br.body_size(queue.messages[o])
                    qmax = o
            pq = pq._replace(tree=tree, msg_count=count, msg_size=size, queue_offset_max=qmax)
            g = s.ghost
            cq = i * self.q_count + q
            got = g.received[cq]
            for o in result.found:
                got |= 1 << o
            s = s._replace(ghost=g._replace(received=_put(g.received, cq, got)))
            if self.orderly:  # a replaced message is the stored one again; dispatchToConsume (R6.2, R8.4)
                found = set(result.found)
                pq = pq._replace(retry_times=tuple(e for e in pq.retry_times if e[0] not in found))
                if result.found and not pq.consuming:
                    pq = pq._replace(consuming=True)
                    cl = self._submit_orderly_request(cl, q, pq.uid, s.now)
            else:
                if pq.consume_started:  # a replaced message object carries no CONSUME_START_TIME (R6.2, R6.8)
                    found = set(result.found)
                    pq = pq._replace(consume_started=tuple(e for e in pq.consume_started if e[0] not in found))
                cl = self._submit_consume_requests(cl, q, pq.uid, result.found, queue, s.now)
        elif pq.msg_count == 0:  # correctTagsOffset
            raised = self._updated(cl.mem[q], result.next_begin, True)
            before = cl.mem[q]
            if self.orderly and (before is None or raised > before):  # ghost for INV-8's "orderly-overwrite"
                s = s._replace(ghost=s.ghost._replace(raised_by_tags=s.ghost.raised_by_tags | {pq_key(i, pq.uid)}))
            cl = cl._replace(mem=_put(cl.mem, q, raised))
        next_offset = result.next_begin
        if self.m_pull_cursor_one_behind and result.status == br.FOUND:
            next_offset -= 1
        pq = pq._replace(next_offset=next_offset, pull_state=PULL_READY, pull_ready_at=s.now)
        cl = cl._replace(pqs=_put(cl.pqs, q, pq))
        return s._replace(clients=_put(s.clients, i, cl))

    def _submit_consume_requests(
        self, cl: Client, q: int, uid: int, found: tuple[int, ...], queue: BrokerQueue, now: int
    ) -> Client:
        """submitConsumeRequest: consecutive chunks of consumeMessageBatchMaxSize (R7.1)."""
        requests = list(cl.requests)
        seq = cl.seq
        batch = self.config.consume_batch_size
        for k in range(0, len(found), batch):
            msgs = tuple((o, queue.messages[o].reconsume_times) for o in found[k : k + batch])
            requests.append(ConsumeRequest(seq, q, uid, msgs, now))
            seq += 1
        return cl._replace(requests=tuple(requests), seq=seq)

    def _updated(self, old: int | None, value: int, increase_only: bool) -> int:
        """OffsetStore.updateOffset (R1.5): a new entry takes the value; increaseOnly keeps the max."""
        if old is None or not increase_only or self.m_ignore_increase_only:
            return value
        return old if old >= value else value

    # --- consume ------------------------------------------------------------------------------
    def _start_consume(self, s: State, a: StartConsume) -> State:
        """StartConsume(client, rid). Enabled: running and the request's time has come. Effect:
        ConsumeRequest.run (R7.2): a request of a dropped pq returns at once; otherwise the
        listener receives the messages (a delivery, recorded in the ghost ledger)."""
        i = a.client
        cl = s.clients[i]
        k = next((k for k, r in enumerate(cl.requests) if r.rid == a.rid), None)
        if not cl.running or k is None or not self._may_start(cl, cl.requests[k], s.now):
            raise ActionNotEnabled(a, "no such ready consume request, or its queue's run is in progress")
        r = cl.requests[k]
        cl = cl._replace(requests=cl.requests[:k] + cl.requests[k + 1 :])
        s = s._replace(clients=_put(s.clients, i, cl))
        if self.orderly:  # orderly consume loop (R8.5)
            return self._orderly_run(s, i, r)
        pq = cl.pqs[r.queue]
        if pq is None or pq.uid != r.pq_uid or pq.pull_state == PULL_DROPPED:
            return s
        pq = self._stamp_consume_start(pq, r.msgs, s.now)
        cl = cl._replace(consuming=(*cl.consuming, r), pqs=_put(cl.pqs, r.queue, pq))
        return self._deliver(s._replace(clients=_put(s.clients, i, cl)), i, r.queue, r.msgs)

    def _stamp_consume_start(self, pq: ProcessQueue, msgs: tuple[tuple[int, int], ...], now: int) -> ProcessQueue:
        """ConsumeRequest.run stamps CONSUME_START_TIME on each message just before the listener (R7.2 step 3),
        which cleanExpiredMsg reads on the tree's first message (R6.8). A message no longer in the tree (the
        cleaner removed it, and a resubmitted request runs it again) is not recorded: nothing reads it."""
        stamps = dict(pq.consume_started)
        for o, _ in msgs:
            if pq.tree >> o & 1:
                stamps[o] = now
        return pq._replace(consume_started=tuple(sorted(stamps.items())))

    def _deliver(self, s: State, i: int, q: int, msgs: tuple[tuple[int, int], ...]) -> State:
        """The listener receives ``msgs``: ghost deliveries (a redelivery if seen before) and history."""
        g = s.ghost
        idx = self._ledger(i) * self.q_count + q
        cq = i * self.q_count + q
        delivered, mine = g.delivered[idx], g.listened[cq]
        redeliveries = g.redeliveries
        causes = dict(g.redelivery_causes)
        hist = s.history
        ledger = self._ledger(i)
        orphaned = {  # §18.3: a listener that outlived a Shutdown holds these, never to be committed (R4.4)
            o
            for j, other in enumerate(s.clients)
            if self._ledger(j) == ledger
            for r in other.orphaned
            if r.queue == q
            for o, _ in r.msgs
        }
        for o, times in msgs:
            if delivered >> o & 1:
                redeliveries += 1
                if mine >> o & 1:
                    cause = "local-retry"
                elif o in orphaned:
                    cause = "beside-orphaned-listener"
                else:
                    cause = self._resume_cause(s, i, q)
                causes[cause] = causes.get(cause, 0) + 1
            delivered |= 1 << o
            mine |= 1 << o
            hist = History(Event(s.now, "deliver", i, q, o, f"reconsumeTimes={times}"), hist)
        g = g._replace(
            delivered=_put(g.delivered, idx, delivered),
            listened=_put(g.listened, cq, mine),
            deliveries=g.deliveries + len(msgs),
            redeliveries=redeliveries,
            redelivery_causes=tuple(sorted(causes.items())),
        )
        return s._replace(ghost=g, history=hist)

    def _resume_cause(self, s: State, i: int, q: int) -> str:
        """The redelivery cause of a message the current pq of (``i``, ``q``) had not delivered itself but an
        earlier pq of the ledger had: where that pq resumed (the unpersisted window behind it)."""
        pq = s.clients[i].pqs[q]
        start = None if pq is None else self.start_of(s, pq_key(i, pq.uid))
        return "resumed-at-" + ("unknown" if start is None else start[1])

    def _finish_choices(self, s: State, i: int, r: ConsumeRequest) -> list[Action]:
        if self.orderly:
            return self._orderly_finish_choices(s, i, r)
        n = len(r.msgs)
        outcomes = [(CONSUME_SUCCESS, n - 1)]
        outcomes += [(CONSUME_SUCCESS, k) for k in range(-1, n - 1)]  # a batch acked in part, or not at all
        outcomes.append((RECONSUME_LATER, -1))
        out: list[Action] = []
        for status, ack in outcomes:
            out.append(FinishConsume(i, r.rid, status, ack, 0))
            failed = n - 1 - ack
            if failed and self.clustering and s.broker.up and s.budget.send_back_failures > 0:
                sendable = self._sendable(s.clients[i], r, r.msgs[ack + 1 :])
                out.extend(
                    FinishConsume(i, r.rid, status, ack, mask)
                    for mask in range(1, 1 << failed)
                    if mask.bit_count() <= s.budget.send_back_failures and not mask & ~sendable
                )
        return out

    def _sendable(self, cl: Client, r: ConsumeRequest, failed: tuple[tuple[int, int], ...]) -> int:
        """Bit j set: processConsumeResult would send failed message j back (CLUSTERING, R7.3). 5.x skips a
        message no longer in its pq, which cleanExpiredMsg sent back and removed (R6.8, containsMessage)."""
        mask = (1 << len(failed)) - 1
        pq = cl.pqs[r.queue]
        if not self.skips_cleaned or pq is None or pq.uid != r.pq_uid:
            return mask
        for j, (o, _) in enumerate(failed):
            if not pq.tree >> o & 1:
                mask &= ~(1 << j)
        return mask

    def _finish_consume(self, s: State, a: FinishConsume) -> State:
        """FinishConsume(client, rid, status, ack_index, send_back_fails). Enabled: running, the
        listener of that request is running, and the parameters are a possible listener answer
        (ack_index in [-1, n-1], -1 for RECONSUME_LATER) and send-back failures within budget (none
        forced when the broker is reachable; all of them when it is down). Effect:
        processConsumeResult (R7.3), skipped when the pq was dropped meanwhile (R7.2): acked
        messages are done; each failed one is sent back (R7.4, R7.5: to %DLQ% once reconsumeTimes
        reaches the maximum, else scheduled at delay level 3 + reconsumeTimes) or, in
        BROADCASTING, dropped. Messages whose send-back failed stay in the pq and are resubmitted
        locally after 5 s with reconsumeTimes + 1. The rest leave the pq (removeMessage, R6.3);
        its result is applied by ApplyConsumeOffset. An orderly consumer's listener: ``_orderly_finish``."""
        if self.orderly:
            return self._orderly_finish(s, a)
        i = a.client
        cl, k = self._running_listener(s, a)
        r = cl.consuming[k]
        n = len(r.msgs)
        ack = a.ack_index
        valid_ack = (a.status == CONSUME_SUCCESS and -1 <= ack <= n - 1) or (a.status == RECONSUME_LATER and ack == -1)
        failed = r.msgs[ack + 1 :] if valid_ack else ()
        fails = a.send_back_fails
        if (
            not valid_ack
            or fails < 0
            or fails >> len(failed)
            or (fails and (not self.clustering or not s.broker.up or fails.bit_count() > s.budget.send_back_failures))
            or fails & ~self._sendable(cl, r, failed)
        ):
            raise ActionNotEnabled(a, "not a possible listener answer or send-back fault")
        cl = cl._replace(consuming=cl.consuming[:k] + cl.consuming[k + 1 :])
        q = r.queue
        pq = cl.pqs[q]
        if pq is None or pq.uid != r.pq_uid or pq.pull_state == PULL_DROPPED:  # dropped: skip processConsumeResult
            return s._replace(clients=_put(s.clients, i, cl))
        g = s.ghost
        idx = self._ledger(i) * self.q_count + q
        handled, skipped = g.handled[idx], g.skipped[idx]
        for o, _ in r.msgs[: ack + 1]:
            handled |= 1 << o
        b = s.broker
        back_failed: list[tuple[int, int]] = []
        queue = b.queues[q]
        dropped_failures = 0
        for j, (o, times) in enumerate(failed):
            if not self.clustering:  # BROADCASTING drops failures (R7.3): a declared skip
                skipped |= 1 << o
                dropped_failures |= 1 << o
            elif self.skips_cleaned and not pq.tree >> o & 1:
                continue  # 5.x: cleanExpiredMsg already sent it back and removed it (R7.3, R6.8)
            elif not b.up or fails >> j & 1:
                back_failed.append((o, times + 1))
            else:
                b = self._send_back(b, queue.messages[o], s.now)
                handled |= 1 << o
        g = g._replace(handled=_put(g.handled, idx, handled), skipped=_put(g.skipped, idx, skipped))
        if dropped_failures:
            g = g._replace(skips=(*g.skips, (idx, "failure-dropped", dropped_failures)))
        budget = s.budget
        if fails:
            budget = budget._replace(send_back_failures=budget.send_back_failures - fails.bit_count())
        back_offsets = {o for o, _ in back_failed}
        removed = [o for o, _ in r.msgs if self.m_commit_before_send_back or o not in back_offsets]
        pq, offset = self._remove_message(pq, removed, queue)
        if offset >= 0:
            cl = cl._replace(offset_updates=(*cl.offset_updates, OffsetUpdate(r.rid, q, r.pq_uid, offset)))
        if back_failed:
            cl = cl._replace(
                requests=(
                    *cl.requests,
                    ConsumeRequest(cl.seq, q, r.pq_uid, tuple(back_failed), s.now + SEND_BACK_RESUBMIT_DELAY),
                ),
                seq=cl.seq + 1,
            )
        cl = cl._replace(pqs=_put(cl.pqs, q, pq))
        return s._replace(clients=_put(s.clients, i, cl), broker=b, ghost=g, budget=budget)

    def _apply_consume_offset(self, s: State, a: ApplyConsumeOffset) -> State:
        """ApplyConsumeOffset(client, rid). Enabled: running and that request's removeMessage result
        is pending. Effect: the end of processConsumeResult (R7.3): unless the pq was dropped in the
        meantime, updateOffset(mq, offset, increaseOnly=true). It is a separate step because
        other consume threads and the rebalance interleave between removeMessage and
        updateOffset; increaseOnly is what keeps a slower thread's lower result from winning.
        Orderly: ``_orderly_apply``."""
        if self.orderly:
            return self._orderly_apply(s, a)
        i = a.client
        cl, u = self._take_offset_update(s, a)
        pq = cl.pqs[u.queue]
        if (pq is not None and pq.uid == u.pq_uid and pq.pull_state != PULL_DROPPED) or self.m_dropped_pq_commits:
            cl = cl._replace(mem=_put(cl.mem, u.queue, self._updated(cl.mem[u.queue], u.offset, True)))
        return s._replace(clients=_put(s.clients, i, cl))

    def _running_listener(self, s: State, a: FinishConsume) -> tuple[Client, int]:
        """The client and the index in ``consuming`` of request ``a.rid``'s running listener."""
        cl = s.clients[a.client]
        k = next((k for k, r in enumerate(cl.consuming) if r.rid == a.rid), None)
        if not cl.running or k is None:
            raise ActionNotEnabled(a, "no running listener for this request")
        return cl, k

    def _take_offset_update(self, s: State, a: ApplyConsumeOffset) -> tuple[Client, OffsetUpdate]:
        """The client without request ``a.rid``'s pending OffsetUpdate, and that update."""
        cl = s.clients[a.client]
        k = next((k for k, u in enumerate(cl.offset_updates) if u.rid == a.rid), None)
        if not cl.running or k is None:
            raise ActionNotEnabled(a, "no pending offset update for this request")
        return cl._replace(offset_updates=cl.offset_updates[:k] + cl.offset_updates[k + 1 :]), cl.offset_updates[k]

    def _send_back(self, b: Broker, original: Message, now: int, delay_level: int = 0) -> Broker:
        """CONSUMER_SEND_MSG_BACK on the broker (R7.5): the broker looks the message up by its
        commit-log offset, so the stored reconsumeTimes counts, not the client's local copy (which
        a failed send-back raised). At reconsumeTimes >= max the message goes to %DLQ%<group>;
        otherwise to SCHEDULE_TOPIC at ``delay_level``, where 0 (processConsumeResult's default) lets the
        broker choose 3 + reconsumeTimes (R7.5 step 6; cleanExpiredMsg asks 3, R6.8), reaching %RETRY%<group>
        with reconsumeTimes + 1 (R7.7)."""
        times = original.reconsume_times
        at_max = times > self.max_reconsume if self.m_dlq_late else times >= self.max_reconsume
        msg = original._replace(reconsume_times=times + 1, store_time=now, sent_back_at=now)  # R7.5 step 7
        if at_max:
            return b._replace(dlq=(*b.dlq, msg))
        delay = br.retry_delay_ms(times) if delay_level == 0 else br.delay_level_ms(delay_level)
        entry = Scheduled(now + delay, msg)
        scheduled = tuple(sorted((*b.scheduled, entry), key=lambda e: e.due))
        return b._replace(scheduled=scheduled)

    def _remove_message(self, pq: ProcessQueue, offsets: list[int], queue: BrokerQueue) -> tuple[ProcessQueue, int]:
        """ProcessQueue.removeMessage (R6.3): the offset to commit is the lowest offset still held,
        or queueOffsetMax + 1 when the tree empties; -1 when the tree was already empty."""
        if pq.tree == 0:
            return pq, -1
        result = pq.queue_offset_max + (2 if self.m_commit_past else 1)
        tree, count, size = pq.tree, pq.msg_count, pq.msg_size
        for o in offsets:
            if tree >> o & 1:
                tree &= ~(1 << o)
                if not self.m_count_kept:
                    count -= 1
                size -= br.body_size(queue.messages[o])
        if count == 0:
            size = 0
        if tree:
            result = max(offsets) + 1 if self.m_watermark_highest and offsets else _lowest(tree)
        started = pq.consume_started
        if started:  # the stamps of messages that left the tree (R6.8)
            started = tuple(e for e in started if tree >> e[0] & 1)
        return pq._replace(tree=tree, msg_count=count, msg_size=size, consume_started=started), result

    # --- cleanExpiredMsg (R6.8) -------------------------------------------------------------------
    def _clean_expired_msg(self, s: State, a: CleanExpiredMsg) -> State:
        """CleanExpiredMsg(client) (a timer). Enabled: running and the cleanExpireMsg timer due: a concurrent
        consumer's ConsumeMessageConcurrentlyService.start schedules it at a fixed rate of consumeTimeout, first
        after one period; the orderly service never does, and cleanExpiredMsg returns at once for an orderly
        consumer (R6.8). Effect: the next run one period later, then cleanExpireMsg: ProcessQueue.cleanExpiredMsg
        of every pq of processQueueTable (in queue order; the pqs are independent, so another order changes only
        the order of their retry copies). Per pq, at most min(16, |msgTreeMap|) times: the tree's first message
        is taken only if its CONSUME_START_TIME is set (its listener started, R7.2 step 3) and more than
        consumeTimeout ago, else the pass stops; sendMessageBack(msg, 3) (CONSUMER_SEND_MSG_BACK to its store
        host at delay level 3, else the producer fall-back, R7.4); then, as it is still the first key,
        removeMessage([msg]), whose result is dropped: no updateOffset here (R6.3). The next removeMessage or
        correctTagsOffset of the pq commits past it while its listener may still run; that listener's result
        goes through processConsumeResult later (R7.3: 4.9.8 sends a failure back a second time, 5.x skips a
        message no longer in its pq).
        The broker schedules the copy at level 3 (10 s) whatever its reconsumeTimes, or dead-letters it at
        reconsumeTimes >= max (R7.5 step 6). CLUSTERING: the message is handled, its copy being durable.
        BROADCASTING (cleanExpiredMsg has no mode check): the copy is made alike, but it reaches %RETRY%<group>,
        which no BROADCASTING consumer subscribes to (R7.8; the model's BROADCASTING broker has no retry queue,
        so DeliverScheduled drops it there), so this consumer drops the message, a declared skip
        "expired-to-unsubscribed-retry-topic". The send-back fails only while the broker is down: each attempt
        throws (the producer fall-back too), is logged, and the message stays (the loop takes the same first
        message again, so the pass ends)."""
        i = a.client
        cl = s.clients[i]
        if not cl.running or cl.next_clean is None or cl.next_clean > s.now:
            raise ActionNotEnabled(a, "cleanExpireMsg not due")
        s = s._replace(clients=_put(s.clients, i, cl._replace(next_clean=cl.next_clean + self.consume_timeout)))
        for q in range(self.q_count):
            pq = s.clients[i].pqs[q]
            if pq is not None and pq.consume_started:
                s = self._clean_expired_pq(s, i, q, pq)
        return s

    def _clean_expired_pq(self, s: State, i: int, q: int, pq: ProcessQueue) -> State:
        """ProcessQueue.cleanExpiredMsg of one pq (R6.8; ``_clean_expired_msg``)."""
        b, g, hist = s.broker, s.ghost, s.history
        queue = b.queues[q]
        idx = self._ledger(i) * self.q_count + q
        handled, skipped, dropped = g.handled[idx], g.skipped[idx], 0
        for _ in range(min(CLEAN_EXPIRED_MAX_LOOPS, pq.tree.bit_count())):
            o = _lowest(pq.tree)
            started = next((t for k, t in pq.consume_started if k == o), None)
            if started is None or s.now - started <= self.consume_timeout or not b.up:
                break
            if self.m_expired_no_send_back:
                cause = "expired-removed"
            else:
                b = self._send_back(b, queue.messages[o], s.now, CLEAN_EXPIRED_DELAY_LEVEL)
                if self.clustering:
                    handled |= 1 << o
                    cause = "expired-sent-back"
                else:
                    skipped |= 1 << o
                    dropped |= 1 << o
                    cause = "expired-to-unsubscribed-retry-topic"
            pq, _ = self._remove_message(pq, [o], queue)
            hist = History(Event(s.now, cause, i, q, o, f"consume started at {started}"), hist)
        if hist is s.history:
            return s
        g = g._replace(handled=_put(g.handled, idx, handled), skipped=_put(g.skipped, idx, skipped))
        if dropped:
            g = g._replace(skips=(*g.skips, (idx, "expired-to-unsubscribed-retry-topic", dropped)))
        cl = s.clients[i]
        return s._replace(
            clients=_put(s.clients, i, cl._replace(pqs=_put(cl.pqs, q, pq))), broker=b, ghost=g, history=hist
        )

    def _ledger(self, client: int) -> int:
        return 0 if self.clustering else client

    def _unsubscribed_bits(self, queue: BrokerQueue) -> int:
        """Offsets of a topic queue whose tag the group does not subscribe to: never owed."""
        sub = self.config.subscription
        if sub is None:
            return 0
        return sum(1 << o for o, m in enumerate(queue.messages) if m.tag not in sub)

    # --- fidelity: pull expiry (R6.6, R9.4) ---------------------------------------------------------
    def pull_expired(self, s: State, pq: ProcessQueue) -> bool:
        """ProcessQueue.isPullExpired (R6.6): no pullMessage run for more than 120 s. R9.4 Phase A
        drops such a pq (push consumers) and Phase B re-creates it in the same pass. A pq held by flow
        control is never expired: its 50 ms retries keep lastPullTimestamp fresh, which every Tick
        applies (``_flow_control_retries``; docs/spec.md, "Pull expiry")."""
        return not self.m_no_pull_expiry and s.now - pq.last_pull > PULL_MAX_IDLE_TIME

    def flow_controlled(self, pq: ProcessQueue, now: int) -> bool:
        """pullMessage would take this pq's PullRequest now and stop at flow control (R5.1 step 5): the
        request is runnable and msgCount > pullThresholdForQueue (a dropped pq's request is discarded
        first, step 1)."""
        return (
            pq.pull_state == PULL_READY
            and pq.pull_ready_at <= now
            and pq.msg_count > self.config.pull_threshold_for_queue
            and not pq.dropped
        )

    def _flow_control_retries(self, s: State) -> State:
        """What pullMessage's flow-control retries did while the clock advanced to ``s.now`` (R5.1
        steps 2 and 5): a PullRequest held by flow control is run every 50 ms, and each run only sets
        lastPullTimestamp and re-queues itself 50 ms later. The retries of one Tick are folded into
        the last one, at the new time: ``last_pull := now`` (the last real retry ran less than 50 ms
        before), and the request stays runnable, so the run that finds room is the next SendPull.
        Nothing else of the state changes, so a per-50 ms step would only add no-op steps; this keeps
        the state finite and the behaviours the same: flow control alone never makes a pq
        pull-expired (R6.6, R9.4). A stalled JVM runs no retry."""
        clients = s.clients
        for i, cl in enumerate(clients):
            if not cl.running or self._stalled(s, cl):
                continue
            pqs = cl.pqs
            for q, pq in enumerate(pqs):
                if pq is not None and pq.last_pull != s.now and self.flow_controlled(pq, s.now):
                    pqs = _put(pqs, q, pq._replace(last_pull=s.now))
            if pqs is not cl.pqs:
                clients = _put(clients, i, cl._replace(pqs=pqs))
        return s if clients is s.clients else s._replace(clients=clients)

    # --- fidelity: retention and OFFSET_ILLEGAL (R5.5, R5.7) -----------------------------------------
    def _fidelity_enabled(self, s: State) -> list[Action]:
        out: list[Action] = []
        b = s.broker
        if b.up and s.budget.retention_deletes > 0:
            out.extend(RetentionDelete(q) for q in self.topic_queues if b.queues[q].min_offset < b.queues[q].max_offset)
        for i, cl in enumerate(s.clients):
            if cl.running and not self._stalled(s, cl):
                due = dict.fromkeys(f.queue for f in cl.offset_fixes if f.due <= s.now)
                out.extend(FixOffsetIllegal(i, q) for q in due)
        return out

    def _retention_delete(self, s: State, a: RetentionDelete) -> State:
        """RetentionDelete(queue) (budgeted). Enabled: the broker is up, ``queue`` is a topic queue
        holding a message at or above minOffset, and ``retention_deletes`` budget is left. Effect:
        commit-log retention deleted the file holding the queue's oldest remaining message, and the
        consume queue's minOffset rises by one (R5.5). A pull below it now gets OFFSET_ILLEGAL with
        nextBeginOffset = minOffset (R5.5, R5.7); with message 0 gone the queue is no longer young,
        so a group with no offset is told QUERY_NOT_FOUND (R3.5). Messages below minOffset are no
        longer owed (INV-9 counts from minOffset)."""
        q = a.queue
        b = s.broker
        queue = b.queues[q] if 0 <= q < self.config.queues else None
        if queue is None or not b.up or s.budget.retention_deletes <= 0 or queue.min_offset >= queue.max_offset:
            raise ActionNotEnabled(a, "broker down, no message left to delete, or retention budget used up")
        queue = queue._replace(min_offset=queue.min_offset + 1)
        return s._replace(
            broker=b._replace(queues=_put(b.queues, q, queue)),
            budget=s.budget._replace(retention_deletes=s.budget.retention_deletes - 1),
        )

    def _offset_illegal(self, s: State, i: int, pull: PullInFlight, next_begin: int) -> State:
        """The PullCallback's OFFSET_ILLEGAL branch (R5.7), which runs whether or not the pq was
        dropped meanwhile: nextOffset := nextBeginOffset, pq.dropped := true (its PullRequest is not
        re-queued, PULL_DROPPED). 4.9.8 schedules the correction 10 s later (FixOffsetIllegal);
        5.2.0+ runs it at once, then rebalanceImmediately (``Config.offset_illegal_fixed_at_once``).
        5.2.0's updateAndFreezeOffset freezes the entry until the removeOffset of the same task: at
        this model's granularity (the task is one step) the freeze has no effect, except after a
        removeProcessQueue that finds no pq, which 5.2.0 leaves frozen; not modelled."""
        cl = s.clients[i]
        q = pull.queue
        pq = cl.pqs[q]
        live = pq is not None and pq.uid == pull.pq_uid and pq.pull_state != PULL_DROPPED
        if live and pq is not None:
            cl = cl._replace(pqs=_put(cl.pqs, q, pq._replace(next_offset=next_begin, pull_state=PULL_DROPPED)))
        if self.m_fix_deferred or not self.config.offset_illegal_fixed_at_once:
            fix = OffsetFix(q, pull.pq_uid, next_begin, s.now + OFFSET_ILLEGAL_FIX_DELAY, live)
            cl = cl._replace(offset_fixes=(*cl.offset_fixes, fix))
            return s._replace(clients=_put(s.clients, i, cl))
        s = self._apply_offset_fix(s._replace(clients=_put(s.clients, i, cl)), i, q, next_begin)
        cl = s.clients[i]
        return s._replace(clients=_put(s.clients, i, cl._replace(rebalance_requested=True)))

    def _fix_offset_illegal(self, s: State, a: FixOffsetIllegal) -> State:
        """FixOffsetIllegal(client, queue) (a timer, 4.9.8). Enabled: running and the OFFSET_ILLEGAL
        task of ``queue`` scheduled 10 s earlier is due (the earliest, if several). Effect: the task
        (R5.7): updateOffset(mq, nextOffset, increaseOnly=false), persist(mq), removeProcessQueue(mq),
        which removes *whatever pq the table now holds* for mq, drops it and runs
        removeUnnecessaryMessageQueue (persist, removeOffset). The queue waits for the next
        rebalance. A declared cause of a falling offset (commits with cause "offset-illegal-fix")."""
        i, q = a.client, a.queue
        cl = s.clients[i]
        k = next((k for k, f in enumerate(cl.offset_fixes) if f.queue == q and f.due <= s.now), None)
        if not cl.running or k is None:
            raise ActionNotEnabled(a, "no OFFSET_ILLEGAL task due for this queue")
        fix = cl.offset_fixes[k]
        cl = cl._replace(offset_fixes=cl.offset_fixes[:k] + cl.offset_fixes[k + 1 :])
        return self._apply_offset_fix(s._replace(clients=_put(s.clients, i, cl)), i, q, fix.offset)

    def _apply_offset_fix(self, s: State, i: int, q: int, offset: int) -> State:
        """updateOffset(increaseOnly=false) (R1.5), persist(mq) (R2.6 / R1.13), removeProcessQueue."""
        cl = s.clients[i]
        s = s._replace(clients=_put(s.clients, i, cl._replace(mem=_put(cl.mem, q, offset))))
        pq = cl.pqs[q]
        s = self._persist_one(s, i, q, -1 if pq is None else pq.uid, "offset-illegal-fix")
        if pq is None:
            return s  # removeProcessQueue finds nothing: the memory entry stays until pruned (R2.7)
        cl = s.clients[i]._replace(pqs=_put(s.clients[i].pqs, q, None), view=None)
        s = s._replace(clients=_put(s.clients, i, cl))
        if self.orderly_removal:  # removeProcessQueue takes the pq out whatever the orderly removal answers
            s, _ = self._remove_orderly(s, i, q, pq._replace(dropped=True), -1, "offset-illegal-fix")
            cl = s.clients[i]
            return s._replace(clients=_put(s.clients, i, cl._replace(pulls=self._detach(cl, q, pq).pulls)))
        s = self._persist_one(s, i, q, -1, "offset-illegal-fix")
        cl = s.clients[i]
        cl = self._remove_offset(cl._replace(pulls=self._detach(cl, q, pq).pulls), q)
        return s._replace(clients=_put(s.clients, i, cl))

    # --- orderly area: broker locks (semantics §8) -------------------------------------------------
    def _lock(self, s: State, i: int, queues: tuple[int, ...], lock_all: bool) -> tuple[State, frozenset[int]]:
        """LOCK_BATCH_MQ, synchronous (R8.2): ``lock(mq)`` for one queue or ``lockAll`` for every queue
        in the pq table. The broker runs tryLockBatch (R8.1). Every granted queue with a pq gets
        ``locked := true, lastLockTimestamp := now``; ``lockAll`` also sets ``locked := false`` on
        the denied ones. A down broker is an exception: nothing granted, nothing changed."""
        b = s.broker
        if not b.up:
            return s, frozenset()
        locks, granted = lk.try_lock_batch(b.locks, queues, self.identity[i], s.now, self.m_lock_ignores_holder)
        cl = s.clients[i]
        pqs = list(cl.pqs)
        for q in queues:
            pq = pqs[q]
            if pq is None:
                continue
            if q in granted:
                pqs[q] = pq._replace(locked=True, last_lock=s.now)
            elif lock_all:
                pqs[q] = pq._replace(locked=False)
        return s._replace(
            broker=b._replace(locks=locks), clients=_put(s.clients, i, cl._replace(pqs=tuple(pqs)))
        ), granted

    def _unlock_all(self, s: State, i: int) -> State:
        """``unlockAll(oneway=false)`` (R8.2): UNLOCK_BATCH_MQ, synchronous, for every queue in the pq
        table; each pq gets ``locked := false``. A down broker is an exception, logged."""
        cl = s.clients[i]
        owned = self._lock_batch_queues(cl)
        if not owned or not s.broker.up:
            return s
        s = self._note_stale_unlock(s, i, owned)
        b = s.broker._replace(locks=lk.unlock_batch(s.broker.locks, owned, self.identity[i]))
        pqs = tuple(pq._replace(locked=False) if pq is not None and q in owned else pq for q, pq in enumerate(cl.pqs))
        return s._replace(broker=b, clients=_put(s.clients, i, cl._replace(pqs=pqs)))

    def _lock_batch_queues(self, cl: Client) -> tuple[int, ...]:
        """The queues lockAll / unlockAll put in their batch (R8.2): every key of the pq table in 4.9.8;
        only pqs not dropped in 5.x (``buildProcessQueueTableByBrokerName``)."""
        skip = self.config.lock_all_skips_dropped
        return tuple(
            q
            for q, pq in enumerate(cl.pqs)
            if pq is not None and not (skip and (pq.dropped or pq.pull_state == PULL_DROPPED))
        )

    def _lock_all(self, s: State, a: LockAll) -> State:
        """LockAll(client). Enabled: running, an orderly CLUSTERING consumer, and its
        lockMQPeriodically timer due (first 1 s after start, then every 20 s; R8.3). Effect:
        ``lockAll`` over the queues of the pq table (R8.2; 5.x leaves out dropped pqs), nothing when
        it is empty."""
        i = a.client
        cl = s.clients[i]
        if not cl.running or cl.next_lock_all is None or cl.next_lock_all > s.now:
            raise ActionNotEnabled(a, "lockAll timer not due")
        s = s._replace(clients=_put(s.clients, i, cl._replace(next_lock_all=cl.next_lock_all + lk.LOCK_ALL_INTERVAL)))
        owned = self._lock_batch_queues(cl)
        if not owned:
            return s
        s, _ = self._lock(s, i, owned, True)
        return s

    def _orderly_pull_gate(self, s: State, i: int, q: int, pq: ProcessQueue) -> tuple[State, ProcessQueue, bool]:
        """R5.1 step 6 of an orderly consumer's pullMessage, for ``pq`` as steps 1-5 left it: a pq
        not locked waits 3 s; the first pull of a locked pq re-reads the offset
        (computePullFromWhereWithException, R10.1: CLUSTERING asks the broker, so a handover resumes
        at the previous owner's last landed commit) and marks the request previouslyLocked; a
        failed read waits 3 s. Returns the state, the pq, and whether the pull goes on (when it
        does not, the state already holds the delayed pq).

        An unreachable broker is a failed read (readOffset gives -2, R2.3). 5.x throws on it and
        waits 3 s; 4.9.8's computePullFromWhereWithException returns -1 (R10.1), which pullMessage
        takes as the next offset without a check, marking the request previouslyLocked: the pull
        at -1 then gets OFFSET_ILLEGAL and the offset is reset to minOffset (INV-19)."""
        if pq.locked and pq.previously_locked:
            return s, pq, True
        start: int | None = None
        if pq.locked:
            before = s.clients[i].mem[q]
            s, start = self._compute_pull_from_where(s, i, q, pq.uid, False)
            if s.clients[i].mem[q] != before:  # ghost for INV-8: the re-read overwrote memory (increaseOnly=false)
                s = s._replace(ghost=s.ghost._replace(raised_by_tags=s.ghost.raised_by_tags | {pq_key(i, pq.uid)}))
            if start is None and self.clustering and not s.broker.up and not self.config.read_error_throws:
                start = -1  # 4.9.8: the failed read's -1 becomes nextOffset
        cl = s.clients[i]
        if start is None or (start < 0 and self.config.read_error_throws):
            pq = pq._replace(pull_ready_at=s.now + PULL_DELAY_WHEN_EXCEPTION)
            return s._replace(clients=_put(s.clients, i, cl._replace(pqs=_put(cl.pqs, q, pq)))), pq, False
        return s, pq._replace(next_offset=start, previously_locked=True), True

    # --- faults: a lost oneway commit, a consumer list that misses its asker --------------------------
    def _lose_commit(self, s: State, a: LoseCommit) -> State:
        """LoseCommit(client) (budgeted). Enabled: the oldest request on the client's connection is a
        oneway UPDATE_CONSUMER_OFFSET and ``commit_losses`` budget is left. Effect: it never reaches the
        broker (R2.5, R2.6: oneway, nothing notices); the next persist sends the memory offset again."""
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

    def _live_tasks(self, cl: Client) -> list[str]:
        """The client's background tasks still alive (lockMQPeriodically exists for orderly CLUSTERING)."""
        exists = {
            "persistAllConsumerOffset": cl.next_persist is not None,
            "sendHeartbeatToAllBroker": cl.next_heartbeat is not None,
            "RebalanceService": "RebalanceService" not in cl.dead_tasks,
            "lockMQPeriodically": cl.next_lock_all is not None,
        }
        return [t for t in BACKGROUND_TASKS if exists[t] and t not in cl.dead_tasks]

    def _task_dies(self, s: State, a: TaskDies) -> State:
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
        }[a.task]
        cl = cl._replace(dead_tasks=(*cl.dead_tasks, a.task), **timers)  # type: ignore[arg-type]
        return s._replace(
            clients=_put(s.clients, i, cl), budget=s.budget._replace(task_deaths=s.budget.task_deaths - 1)
        )

    def _corrupt_offset_file(self, s: State, a: CorruptOffsetFile) -> State:
        """CorruptOffsetFile (budgeted, at most once). Enabled: the broker is down and its .bak is readable
        or missing. Effect: consumerOffset.json is unreadable, so the restart's ``ConfigManager.load``
        falls back to ``loadBak`` (R3.7): the table of the flush before the last, or, with no .bak yet
        (fewer than two flushes), an empty table: every group looks new and starts from consumeFromWhere
        (S16). Offsets committed since that flush are lost; the next flush copies the unreadable main over
        .bak (R1.15). The client-side fall-back (R1.16) is not modelled."""
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

    def _corrupt_local_offset_file(self, s: State, a: CorruptLocalOffsetFile) -> State:
        """CorruptLocalOffsetFile(client) (budgeted, at most once; BROADCASTING). Enabled: the consumer is
        down and its offsets.json.bak is readable or missing. Effect: offsets.json is unreadable, so every
        readLocalOffset (load at start, readOffset, persistAll's merge) falls back to .bak (R1.10, R1.16 row
        2): the table of the write before the last, or nothing. The next write merges into that and
        copies the unreadable main over .bak (R1.15)."""
        i = a.client
        cl = s.clients[i]
        if cl.running or cl.file_bak is None or s.budget.local_offset_file_corruptions <= 0:
            raise ActionNotEnabled(a, "consumer running, .bak unreadable, or budget used up")
        return s._replace(
            clients=_put(s.clients, i, cl._replace(file=cl.file_bak, file_main_unreadable=True)),
            budget=s.budget._replace(local_offset_file_corruptions=s.budget.local_offset_file_corruptions - 1),
            ghost=self._note_lost(s.ghost, cl.file, cl.file_bak, i, "corrupt-local-offset-file"),
        )

    def _self_missing_possible(self, s: State, i: int) -> bool:
        b = self._list_source(s)
        return (
            self.clustering
            and s.budget.view_faults > 0
            and b is not None
            and i in b.registered
            and any(j != i for j in b.registered)
            and self._rebalance_due(s, i)
        )

    def _rebalance_without_self(self, s: State, a: RebalanceWithoutSelf) -> State:
        """RebalanceWithoutSelf(client) (budgeted). Enabled: CLUSTERING, a rebalance is due as for
        Rebalance, the broker is up with this consumer and another registered, and ``view_faults`` budget
        is left. Effect: Rebalance(client) in which every GET_CONSUMER_LIST_BY_GROUP answer lacks this
        consumer's clientId: its heartbeat had not reached the broker it asked (S7, R9.3). Its own id
        missing from cidAll, every strategy but CONFIG allocates it nothing (R11.0) and Phase A drops the
        topic's pqs; the others keep their slices, so queues go unowned until the next rebalance [RMQ-11]."""
        if not self._self_missing_possible(s, a.client):
            raise ActionNotEnabled(a, "no rebalance due, not listed with another consumer, or budget used up")
        s = s._replace(budget=s.budget._replace(view_faults=s.budget.view_faults - 1))
        return self._do_rebalance(s, a.client, None, without_self=True)

    # --- orderly consume loop (R6.4, R8.5-R8.8) and the Stall fault --------------------------------------
    def _stalled(self, s: State, cl: Client) -> bool:
        """Is the consumer process paused by a Stall now?"""
        return cl.stalled_until is not None and s.now < cl.stalled_until

    def _channel_idle(self, s: State, i: int) -> bool:
        """A stalled consumer, or one whose heartbeat task died, whose channel's lastUpdateTimestamp (its
        last heartbeat to land) is over 120 s old: the broker's idle-channel scan closes it (R4.3)."""
        b = s.broker
        cl = s.clients[i]
        silent = self._stalled(s, cl) or "sendHeartbeatToAllBroker" in cl.dead_tasks
        if not silent or not b.heartbeat_at or i not in b.registered:
            return False
        return s.now - b.heartbeat_at[i] > CHANNEL_EXPIRED_TIMEOUT

    def _stall(self, s: State, a: Stall) -> State:
        """Stall(client, duration) (budgeted). Enabled: running, not stalled, ``duration`` one of
        STALL_DURATIONS and ``client_stalls`` budget left. Effect: the process stops for ``duration``:
        no action of it runs and none of its timers fires until then, while the clock, the broker and
        the other consumers go on; afterwards every overdue timer fires. This is how the timing margins
        of orderly consumption break (renewal 20 s < client validity 30 s < broker expiry 60 s, R8.3)
        [RMQ-10]; the ghost notes when, for INV-12."""
        i = a.client
        cl = s.clients[i]
        if not cl.running or s.budget.client_stalls <= 0 or a.duration not in STALL_DURATIONS:
            raise ActionNotEnabled(a, "not running, stall budget used up, or not a stall duration")
        return s._replace(
            clients=_put(s.clients, i, cl._replace(stalled_until=s.now + a.duration)),
            budget=s.budget._replace(client_stalls=s.budget.client_stalls - 1),
            ghost=s.ghost._replace(stalled_at=_put(s.ghost.stalled_at or (-1,) * len(s.clients), i, s.now)),
        )

    def _orderly_timers_enabled(self, s: State, i: int, cl: Client) -> list[Action]:
        out: list[Action] = []
        uids = dict.fromkeys(uid for uid, _, due in cl.relocks if due <= s.now)
        out.extend(TryLockLater(i, uid) for uid in uids)
        queues = dict.fromkeys(q for q, due in cl.unlocks if due <= s.now)
        out.extend(DelayedUnlock(i, q) for q in queues)
        return out

    def _may_start(self, cl: Client, r: ConsumeRequest, now: int) -> bool:
        """A submitted request may run once its time has come; an orderly run of a live pq also needs its
        queue's MessageQueueLock, which a run of the same client holds from its first take to its end (R8.5)."""
        if r.ready_at > now:
            return False
        if not self.orderly or self.m_no_queue_monitor or not self._orderly_live(cl.pqs[r.queue], r.pq_uid):
            return True  # a dropped pq's request returns before it takes the monitor
        return all(x.queue != r.queue for x in cl.consuming) and all(u.queue != r.queue for u in cl.offset_updates)

    @staticmethod
    def _orderly_live(pq: ProcessQueue | None, uid: int) -> bool:
        """Is ``uid`` the table's pq and not dropped (R6.7)? A pq that left the table is dropped."""
        return pq is not None and pq.uid == uid and not pq.dropped and pq.pull_state != PULL_DROPPED

    def _submit_orderly_request(self, cl: Client, q: int, uid: int, ready_at: int) -> Client:
        """submitConsumeRequest / submitConsumeRequestLater (R8.4, R8.5): a ConsumeRequest names only
        (pq, mq); the run takes its messages from the pq."""
        request = ConsumeRequest(cl.seq, q, uid, (), ready_at)
        return cl._replace(requests=(*cl.requests, request), seq=cl.seq + 1)

    def _relock_later(self, s: State, i: int, uid: int, q: int, delay: int) -> State:
        """tryLockLaterAndReconsume(delay) (R8.5): a task on the service's scheduler."""
        cl = s.clients[i]
        return s._replace(clients=_put(s.clients, i, cl._replace(relocks=(*cl.relocks, (uid, q, s.now + delay)))))

    def _orderly_run(self, s: State, i: int, r: ConsumeRequest) -> State:
        """ConsumeRequest.run of the orderly service (R8.5 step 1): a dropped pq returns; CLUSTERING
        needs ``locked`` and not ``isLockExpired()`` (30 s), else it tries to lock again in 100 ms;
        then the loop starts (beginTime = now)."""
        q = r.queue
        pq = s.clients[i].pqs[q]
        if not self._orderly_live(pq, r.pq_uid) or pq is None:
            return s
        if self.clustering and not (pq.locked and not self._lock_expired(pq, s.now)):
            return self._relock_later(s, i, pq.uid, q, TRY_LOCK_LATER_AT_RUN)
        return self._orderly_iterate(s, i, q, pq.uid, r.rid, s.now)

    def _lock_expired(self, pq: ProcessQueue, now: int) -> bool:
        return not self.m_ignores_lock_expiry and lk.client_lock_expired(pq.last_lock, now)

    def _orderly_iterate(self, s: State, i: int, q: int, uid: int, rid: int, begin: int) -> State:
        """One pass of the orderly loop up to the listener call (R8.5 step 2): stop if dropped; in
        CLUSTERING, not locked or lock expired: try to lock again in 10 ms and stop; after 60 s of
        continuous consumption resubmit in 10 ms and stop; takeMessages(consumeMessageBatchMaxSize)
        (R6.4): none left clears ``consuming`` and stops; otherwise the listener receives them."""
        cl = s.clients[i]
        pq = cl.pqs[q]
        if not self._orderly_live(pq, uid) or pq is None:
            return s
        if self.clustering and (not pq.locked or self._lock_expired(pq, s.now)):
            return self._relock_later(s, i, uid, q, TRY_LOCK_LATER_IN_LOOP)
        if s.now - begin > MAX_TIME_CONSUME_CONTINUOUSLY:
            cl = self._submit_orderly_request(cl, q, uid, s.now + SUBMIT_LATER_AFTER_LONG_RUN)
            return s._replace(clients=_put(s.clients, i, cl))
        taken = _bits(pq.tree)[: self.config.consume_batch_size]
        if not taken:
            pq = pq._replace(consuming=False)
            return s._replace(clients=_put(s.clients, i, cl._replace(pqs=_put(cl.pqs, q, pq))))
        mask = sum(1 << o for o in taken)
        local = dict(pq.retry_times)
        queue = s.broker.queues[q]
        msgs = tuple((o, local.get(o, queue.messages[o].reconsume_times)) for o in taken)
        pq = pq._replace(tree=pq.tree & ~mask, consuming_tree=pq.consuming_tree | mask)
        listener = ConsumeRequest(rid, q, uid, msgs, s.now, begin)
        cl = cl._replace(pqs=_put(cl.pqs, q, pq), consuming=(*cl.consuming, listener))
        return self._deliver(s._replace(clients=_put(s.clients, i, cl)), i, q, msgs)

    def _orderly_finish_choices(self, s: State, i: int, r: ConsumeRequest) -> list[Action]:
        out: list[Action] = [
            FinishConsume(i, r.rid, ORDERLY_SUCCESS, -1, 0),
            FinishConsume(i, r.rid, SUSPEND_CURRENT_QUEUE_A_MOMENT, -1, 0),
        ]
        if not self.config.orderly_auto_commit:  # R8.6: the two answers that mean something only then
            out += [FinishConsume(i, r.rid, ORDERLY_COMMIT, -1, 0), FinishConsume(i, r.rid, ORDERLY_ROLLBACK, -1, 0)]
        at_max = sum(1 for _, times in r.msgs if times >= self.max_reconsume)
        if at_max and s.broker.up and s.budget.send_back_failures > 0:
            out.extend(
                FinishConsume(i, r.rid, SUSPEND_CURRENT_QUEUE_A_MOMENT, -1, mask)
                for mask in range(1, 1 << at_max)
                if mask.bit_count() <= s.budget.send_back_failures
            )
        return out

    def _orderly_finish(self, s: State, a: FinishConsume) -> State:
        """FinishConsume(client, rid, status, -1, send_back_fails), orderly. Enabled: that listener is
        running; ``status`` is SUCCESS or SUSPEND_CURRENT_QUEUE_A_MOMENT (an exception or null is a
        suspend); ``send_back_fails`` names at-max messages whose forwarding fails (budgeted; all fail
        when the broker is down). Effect: the listener returns (the consume lock is released) and
        processConsumeResult runs with autoCommit (R8.6) on the pq object, dropped or not:
        SUCCESS commits (``commit()``, R6.4). SUSPEND runs checkReconsumeTimes (R8.7): a message at
        maxReconsumeTimes is sent to %RETRY%<group> and the broker routes it to %DLQ%<group> (R7.6);
        any other message, or one whose send failed, counts one more local reconsume and suspends the
        batch: makeMessageToConsumeAgain puts the whole batch back in the tree and a new request runs
        after 1 s (suspendCurrentQueueTimeMillis); the run ends. A batch with every message forwarded
        commits. A commit leaves an OffsetUpdate for ApplyConsumeOffset.

        With ``Config.orderly_auto_commit`` false (R8.6): SUCCESS commits nothing (the batch stays in
        consumingMsgOrderlyTreeMap) and the loop goes on; COMMIT runs ``commit()``, which commits everything
        taken since the last commit; ROLLBACK runs ``rollback()``, which puts all of that back in the tree,
        and resubmits after 1 s; a SUSPEND whose batch was all forwarded commits nothing and goes on. A pq
        that left the table is committed as its batch alone (the model keeps no consuming map of it; its
        commit is never applied)."""
        i = a.client
        cl, k = self._running_listener(s, a)
        r = cl.consuming[k]
        at_max = [o for o, times in r.msgs if times >= self.max_reconsume]
        fails = a.send_back_fails
        auto = self.config.orderly_auto_commit
        answers = [ORDERLY_SUCCESS, SUSPEND_CURRENT_QUEUE_A_MOMENT]
        if not auto:
            answers += [ORDERLY_COMMIT, ORDERLY_ROLLBACK]
        if (
            a.status not in answers
            or a.ack_index != -1
            or fails < 0
            or fails >> len(at_max)
            or (fails and (a.status != SUSPEND_CURRENT_QUEUE_A_MOMENT or not s.broker.up))
            or fails.bit_count() > s.budget.send_back_failures
        ):
            raise ActionNotEnabled(a, "not a possible orderly listener answer or forwarding fault")
        cl = cl._replace(consuming=cl.consuming[:k] + cl.consuming[k + 1 :])
        q = r.queue
        pq = cl.pqs[q]
        on_pq = pq is not None and pq.uid == r.pq_uid  # the pq object is still in the table (maybe dropped)
        g = s.ghost
        idx = self._ledger(i) * self.q_count + q
        handled = g.handled[idx]
        b, budget = s.broker, s.budget
        batch = [o for o, _ in r.msgs]
        if a.status == ORDERLY_ROLLBACK:  # autoCommit false: rollback(), then submitConsumeRequestLater (R8.6)
            if on_pq and pq is not None:
                pq = pq._replace(tree=pq.tree | pq.consuming_tree, consuming_tree=0)
                cl = cl._replace(pqs=_put(cl.pqs, q, pq))
            cl = self._submit_orderly_request(cl, q, r.pq_uid, s.now + SUSPEND_CURRENT_QUEUE_TIME)
            return s._replace(clients=_put(s.clients, i, cl))
        if a.status in (ORDERLY_SUCCESS, ORDERLY_COMMIT):
            handled |= sum(1 << o for o in batch)
            suspend = False
        else:
            suspend, raised, j = False, {}, 0
            for o, times in r.msgs:
                if times >= self.max_reconsume:
                    failed = not b.up or fails >> j & 1
                    j += 1
                    if not failed:
                        b = self._forward_to_dlq(b, b.queues[q].messages[o], times, s.now)
                        handled |= 1 << o
                        continue
                suspend = True
                raised[o] = times + 1
            budget = budget._replace(send_back_failures=budget.send_back_failures - fails.bit_count())
            if suspend and not self.m_suspend_commits:
                if on_pq and pq is not None:  # makeMessageToConsumeAgain (R6.4); local reconsumeTimes (R8.7)
                    mask = sum(1 << o for o in batch)
                    times_of = dict(pq.retry_times) | raised
                    pq = pq._replace(
                        tree=pq.tree | mask,
                        consuming_tree=pq.consuming_tree & ~mask,
                        retry_times=tuple(sorted(times_of.items())),
                    )
                    cl = cl._replace(pqs=_put(cl.pqs, q, pq))
                cl = self._submit_orderly_request(cl, q, r.pq_uid, s.now + SUSPEND_CURRENT_QUEUE_TIME)
                g = g._replace(handled=_put(g.handled, idx, handled))
                return s._replace(clients=_put(s.clients, i, cl), broker=b, ghost=g, budget=budget)
        if not auto and a.status != ORDERLY_COMMIT:  # nothing committed: the loop takes the next batch (R8.6)
            g = g._replace(handled=_put(g.handled, idx, handled))
            s = s._replace(clients=_put(s.clients, i, cl), broker=b, ghost=g, budget=budget)
            return self._orderly_iterate(s, i, q, r.pq_uid, r.rid, r.begin)
        # commit() (R6.4) on the pq object; one that left the table has the batch in its consuming map
        taken = _bits(pq.consuming_tree) if not auto and on_pq and pq is not None and pq.consuming_tree else batch
        top = max(taken)
        offset = top if self.m_commit_last_key else top + 1
        if not on_pq:  # the detached pq's msgCount falls; a late reply's correctTagsOffset reads it (R6.7)
            pulls = tuple(
                p._replace(dropped_count=p.dropped_count - len(taken), dropped_empty=p.dropped_count == len(taken))
                if p.pq_uid == r.pq_uid
                else p
                for p in cl.pulls
            )
            cl = cl._replace(pulls=pulls)
        if on_pq and pq is not None:
            queue = b.queues[q]
            count = pq.msg_count - pq.consuming_tree.bit_count()
            bodies = sum(br.body_size(queue.messages[o]) for o in _bits(pq.consuming_tree))
            done = set(taken)
            pq = pq._replace(
                consuming_tree=0,
                msg_count=count,
                msg_size=0 if count == 0 else pq.msg_size - bodies,
                retry_times=tuple(e for e in pq.retry_times if e[0] not in done),
            )
            cl = cl._replace(pqs=_put(cl.pqs, q, pq))
        update = OffsetUpdate(r.rid, q, r.pq_uid, offset, r.begin)
        cl = cl._replace(offset_updates=(*cl.offset_updates, update))
        g = g._replace(handled=_put(g.handled, idx, handled))
        return s._replace(clients=_put(s.clients, i, cl), broker=b, ghost=g, budget=budget)

    def _forward_to_dlq(self, b: Broker, original: Message, times: int, now: int) -> Broker:
        """ConsumeMessageOrderlyService.sendMessageBack (R8.7): the producer sends a copy to
        %RETRY%<group> with RECONSUME_TIME = reconsumeTimes (5.1.1+: + 1) and MAX_RECONSUME_TIMES =
        max; the broker sees reconsumeTimes >= max and stores it in %DLQ%<group> (R7.6)."""
        counted = times + 1 if self.config.orderly_forward_counts_the_send else times
        return b._replace(dlq=(*b.dlq, original._replace(reconsume_times=counted, store_time=now, sent_back_at=now)))

    def _orderly_apply(self, s: State, a: ApplyConsumeOffset) -> State:
        """ApplyConsumeOffset(client, rid), orderly. Enabled: that run's commit is pending. Effect: the
        end of processConsumeResult (R8.6): unless the pq was dropped, updateOffset(mq, commitOffset,
        increaseOnly=false); then the loop's next pass (R8.5), which may call the listener again."""
        i = a.client
        cl, u = self._take_offset_update(s, a)
        if self._orderly_live(cl.pqs[u.queue], u.pq_uid) or self.m_dropped_pq_commits:
            cl = cl._replace(mem=_put(cl.mem, u.queue, self._updated(cl.mem[u.queue], u.offset, False)))
        s = s._replace(clients=_put(s.clients, i, cl))
        return self._orderly_iterate(s, i, u.queue, u.pq_uid, u.rid, u.begin)

    def _try_lock_later(self, s: State, a: TryLockLater) -> State:
        """TryLockLater(client, pq_uid) (a timer). Enabled: running, and a tryLockLaterAndReconsume
        task of that pq is due (the earliest due runs). Effect (R8.5): lockOneMQ, i.e. lock(mq) (R8.2),
        which refreshes whatever pq the table holds for mq; then submitConsumeRequestLater for the
        task's pq: 10 ms if the lock was granted, 3 s if not."""
        i = a.client
        cl = s.clients[i]
        due = [(t, k) for k, (uid, _, t) in enumerate(cl.relocks) if uid == a.pq_uid and t <= s.now]
        if not cl.running or not due:
            raise ActionNotEnabled(a, "no tryLockLaterAndReconsume task due for this pq")
        k = min(due)[1]
        uid, q, _ = cl.relocks[k]
        s = s._replace(clients=_put(s.clients, i, cl._replace(relocks=cl.relocks[:k] + cl.relocks[k + 1 :])))
        s, granted = self._lock(s, i, (q,), False)
        delay = RESUBMIT_AFTER_LOCK if q in granted else RESUBMIT_AFTER_LOCK_DENIED
        return s._replace(clients=_put(s.clients, i, self._submit_orderly_request(s.clients[i], q, uid, s.now + delay)))

    def _delayed_unlock(self, s: State, a: DelayedUnlock) -> State:
        """DelayedUnlock(client, queue) (a timer, 4.9.8). Enabled: running and an unlockDelay task of
        ``queue`` is due. Effect: ``unlock(mq, oneway=true)`` (R8.2, R8.8), whatever the table holds
        for mq now: if the client re-created a pq for the queue within those 20 s, its fresh broker lock
        is released and another consumer can lock the queue while this one still believes it holds it
        (a 4.9.8 bug, docs/spec.md §14; the ghost notes it for INV-12a/INV-12)."""
        i = a.client
        cl = s.clients[i]
        k = next((k for k, (q, due) in enumerate(cl.unlocks) if q == a.queue and due <= s.now), None)
        if not cl.running or k is None:
            raise ActionNotEnabled(a, "no unlockDelay task due for this queue")
        s = s._replace(clients=_put(s.clients, i, cl._replace(unlocks=cl.unlocks[:k] + cl.unlocks[k + 1 :])))
        return self._unlock_oneway(s, i, a.queue, late=True)

    def _per_q_int(self, values: tuple[int, ...]) -> tuple[int, ...]:
        return values if values else (-1,) * self.q_count

    def _unlock_oneway(self, s: State, i: int, q: int, late: bool = False) -> State:
        """``unlock(mq, oneway=true)`` (R8.2): applied when sent if the broker is up, lost if not. The
        model lets it act at once rather than queue behind commits on the connection; Java's broker
        runs lock requests and commits on different executors, so either order is possible."""
        if not s.broker.up:
            return s
        s = self._note_stale_unlock(s, i, (q,), late)
        return s._replace(broker=s.broker._replace(locks=lk.unlock_batch(s.broker.locks, (q,), self.identity[i])))

    def _note_stale_unlock(self, s: State, i: int, queues: tuple[int, ...], late: bool = False) -> State:
        """Ghost for INV-12a/INV-12: an unlock by client ``i``'s clientId that releases a lock a running
        client with that clientId still relies on (a live belief, or a listener running on the queue).
        RocketMQ's own code does this in three ways, which the default checker tolerates: a ``late`` unlock
        of the client's own lock (4.9.8's unlockDelay after the queue came back, 5.x's forced removal under a
        running listener), and any unlock by a sharer of a duplicate clientId. An ordinary unlock of a lock
        the client itself still relies on is not noted: that is a bug INV-12 must report (RMQ-09 (1))."""
        if not s.broker.locks:
            return s
        me = self.identity[i]
        stale = list(self._per_q_int(s.ghost.stale_unlocks))
        noted = False
        for q in queues:
            if lk.holder(s.broker.locks, q, s.now) != me:
                continue
            for j, cl in enumerate(s.clients):
                if not cl.running or self.identity[j] != me or (j == i and not late):
                    continue
                pq = cl.pqs[q]
                believes = pq is not None and not pq.dropped and pq.locked
                believes = believes and not lk.client_lock_expired(pq.last_lock, s.now)  # type: ignore[union-attr]
                listening = any(r.queue == q for r in cl.consuming)
                if believes or listening:
                    stale[q] = s.now
                    noted = True
        return s._replace(ghost=s.ghost._replace(stale_unlocks=tuple(stale))) if noted else s

    def _remove_orderly(self, s: State, i: int, q: int, pq: ProcessQueue, uid: int, cause: str) -> tuple[State, bool]:
        """removeUnnecessaryMessageQueue of an orderly CLUSTERING consumer for ``pq``, already dropped
        (R8.8). The consume lock is free when no listener of this pq runs (R8.5 step 3). Returns the
        state and whether the pq may leave the table; the caller takes it out.

        4.9.8: persist(mq) and removeOffset(mq) first; then, with the consume lock, unlockDelay: the
        broker unlock is sent 20 s later if the tree still caches messages, at once otherwise; without
        it the removal is refused. 5.x (5.2.0): persist(mq); with the write lock, or forced once the
        pq's lastLockTimestamp is more than 20 s old: persist again, removeOffset, unlock at once;
        otherwise refused, the memory offset kept."""
        free = all(r.pq_uid != pq.uid for r in s.clients[i].consuming)
        s = self._persist_one(s, i, q, uid, cause)
        if self.m_removal_ignores_lock:  # RMQ-09 (1): unlock at once, listener or not
            cl = s.clients[i]
            return self._unlock_oneway(s._replace(clients=_put(s.clients, i, self._remove_offset(cl, q))), i, q), True
        if self.config.orderly_removal_waits_for_consume_lock:
            cl = s.clients[i]
            s = s._replace(clients=_put(s.clients, i, self._remove_offset(cl, q)))
            if not free:
                return s, False
            if pq.tree:
                cl = s.clients[i]
                unlock = (q, s.now + UNLOCK_DELAY_TIME)
                return s._replace(clients=_put(s.clients, i, cl._replace(unlocks=(*cl.unlocks, unlock)))), True
            return self._unlock_oneway(s, i, q), True
        if not (free or s.now > pq.last_lock + UNLOCK_DELAY_TIME):
            return s, False
        s = self._persist_one(s, i, q, uid, cause)
        cl = s.clients[i]
        s = s._replace(clients=_put(s.clients, i, self._remove_offset(cl, q)))
        return self._unlock_oneway(s, i, q, late=not free), True  # forced: the listener may still run

    def _detach(self, cl: Client, q: int, pq: ProcessQueue) -> Client:
        """processQueueTable.remove(mq) of a dropped ``pq``. A pull of it still in flight remembers what
        its late reply reads: msgCount == 0 for correctTagsOffset (R6.7) and, orderly, ``consuming``
        for putMessage's dispatch (R6.2)."""
        pulls = tuple(
            p._replace(
                dropped_empty=pq.msg_count == 0,
                dropped_consuming=pq.consuming,
                dropped_count=pq.msg_count if self.orderly else 0,
            )
            if p.pq_uid == pq.uid
            else p
            for p in cl.pulls
        )
        return cl._replace(pqs=_put(cl.pqs, q, None), pulls=pulls)

    # --- full fidelity area: admin reset (R3.10a 4.9.8 client-driven; R3.10b 5.x server-side) -------
    # The reset's effects on shared transitions (pause, the pending reset, the crash) are wrappers
    # installed here only when Config.admin_resets > 0, so every other configuration runs the
    # unwrapped transitions and keeps its exact state space.
    def _reset_init(self) -> None:
        m = self.config.mutations
        self.reset_on = self.config.admin_resets > 0 and self.clustering
        self.m_reset_off_by_one = "client_reset_off_by_one" in m
        self.m_reset_skips_update = "client_reset_skips_update" in m
        # INV-18's declared event "a commit from a pq older than the reset lands after it". Tests set it
        # false to show what it covers: in 5.x that includes R3.10b's window (docs/spec.md §12).
        self.reset_declare_stale = True
        self._steps[AdminReset] = self._admin_reset
        self._steps[ClientResetReceive] = self._client_reset_receive
        self._steps[ClientResetWake] = self._client_reset_wake
        self._reset_wrapped: dict[type, Callable[[State, Any], State]] = {}
        if not self.reset_on:
            return
        wrappers: dict[type, Callable[[State, Any], State]] = {
            BrokerReceive: self._reset_broker_receive,
            BrokerCrash: self._reset_broker_crash,
            SendPull: self._reset_send_pull,
            Rebalance: self._reset_rebalance,
            RebalanceQueryError: self._reset_rebalance,
            ReceivePull: self._reset_receive_pull,
        }
        for kind, wrapper in wrappers.items():
            self._reset_wrapped[kind] = self._steps[kind]
            self._steps[kind] = wrapper

    def _per_q(self, values: tuple[Any, ...]) -> tuple[Any, ...]:
        """A per-queue ghost or broker tuple whose default () means "None for every queue"."""
        return values if values else (None,) * self.q_count

    def reset_stamps(self, queue: BrokerQueue) -> list[int]:
        """The timestamps an AdminReset by timestamp may name: the store times of the readable messages."""
        return sorted({msg.store_time for msg in queue.messages[queue.min_offset :]})

    def _reset_enabled(self, s: State) -> list[Action]:
        if not self.reset_on:
            return []
        out: list[Action] = []
        b = s.broker
        if b.up and s.budget.admin_resets > 0:
            for q in self.topic_queues:
                if b.offsets[q] is None:
                    continue
                queue = b.queues[q]
                out.extend(AdminReset(q, o, False) for o in range(queue.min_offset, queue.max_offset + 1))
                out.extend(AdminReset(q, t, True) for t in self.reset_stamps(queue))
        for i, cl in enumerate(s.clients):
            if not cl.running or self._stalled(s, cl):
                continue
            if cl.reset_inbox and cl.reset_wake is None:
                out.append(ClientResetReceive(i))
            if cl.reset_wake is not None and cl.reset_wake <= s.now:
                out.append(ClientResetWake(i))
                out.extend(ClientResetWake(i, uid) for uid in self._late_replies(s, i))  # §18.3
        return out

    def _late_replies(self, s: State, i: int) -> list[int]:
        """The pq uids whose answered pull could land inside client ``i``'s waking reset: a pq the reset holds
        for a queue of its table, with its reply NO_NEW_MSG or NO_MATCHED_MSG (or held, answered on arrival),
        the replies whose ``correctTagsOffset`` moves memory (R5.7, R6.7)."""
        cl = s.clients[i]
        targets = {q for q, _ in cl.reset_table}
        held = {uid for q, uid in cl.reset_held if q in targets}
        return [
            p.pq_uid
            for p in cl.pulls
            if p.pq_uid in held
            and p.epoch >= 0
            and (p.result is None or p.result.status in (br.NO_NEW_MSG, br.NO_MATCHED_MSG))
        ]

    def _admin_reset(self, s: State, a: AdminReset) -> State:
        """AdminReset(queue, target, by_timestamp) (budgeted, CLUSTERING). Enabled: the broker is up, the
        group has an offset for that topic queue (R3.10a step 2 fails the whole reset with SYSTEM_ERROR
        otherwise; the model asks it of 5.x too, so that resets strike mid-run), ``admin_resets`` budget
        is left, and the target is an offset in [minOffset, maxOffset] or the store time of a readable
        message, which searchOffset turns into an offset (R10.3). Forced, as mqadmin sends it.

        4.9.8 (R3.10a): Broker2Client.resetOffset does not write the broker's table; it pushes
        RESET_CONSUMER_CLIENT_OFFSET oneway to every online channel of the group (lost for a process
        that is gone, or when the connection breaks). With no consumer online (CONSUMER_NOT_ONLINE)
        mqadmin falls back to the old method, UPDATE_CONSUMER_OFFSET from the admin, which is where
        the reset completes. 5.x (R3.10b, ``Config.server_side_reset``): assignResetOffset records
        the pending reset and overwrites the table; the reset completes here."""
        q = a.queue
        b = s.broker
        if not self.reset_on or not 0 <= q < self.config.queues or not b.up or s.budget.admin_resets <= 0:
            raise ActionNotEnabled(a, "no admin reset possible (mode, broker down, budget or queue)")
        if b.offsets[q] is None:
            raise ActionNotEnabled(a, "the group has no offset for this queue: SYSTEM_ERROR (R3.10a step 2)")
        queue = b.queues[q]
        if a.by_timestamp:
            if a.target not in self.reset_stamps(queue):
                raise ActionNotEnabled(a, "not the store time of a readable message")
            target = br.search_offset(queue, a.target)
        else:
            if not queue.min_offset <= a.target <= queue.max_offset:
                raise ActionNotEnabled(a, "target outside [minOffset, maxOffset]")
            target = a.target
        g = s.ghost
        # Semantics INV-9: what lies below an explicit reset's target is a declared skip (a forward reset
        # skips it on purpose; a backward one replays from the target, not before it).
        jumped = ((1 << target) - 1) & ~(g.handled[q] | g.skipped[q]) & ~((1 << queue.min_offset) - 1)
        g = g._replace(skipped=_put(g.skipped, q, g.skipped[q] | ((1 << target) - 1)))
        if jumped:
            g = g._replace(skips=(*g.skips, (q, "admin-reset", jumped)))
        targets = g.reset_targets or (0,) * self.q_count
        g = g._replace(
            reset_targets=_put(targets, q, targets[q] | 1 << target),
            reset_expect=_put(self._per_q(g.reset_expect), q, None),  # a later reset replaces the expectation
        )
        how = f"by timestamp {a.target}" if a.by_timestamp else "by offset"
        s = s._replace(
            budget=s.budget._replace(admin_resets=s.budget.admin_resets - 1),
            ghost=g,
            history=History(Event(s.now, "admin-reset", -1, q, target, how), s.history),
        )
        if self.config.server_side_reset:
            pending = _put(self._per_q(b.reset_pending), q, target)
            s = s._replace(broker=b._replace(reset_pending=pending))
            return self._reset_completed(self._admin_write(s, q, target), q, target, ())
        if not b.registered:  # CONSUMER_NOT_ONLINE: the admin's old method writes the broker directly
            return self._reset_completed(self._admin_write(s, q, target), q, target, ())
        clients = tuple(
            cl._replace(reset_inbox=(*cl.reset_inbox, (q, target))) if i in b.registered and cl.running else cl
            for i, cl in enumerate(s.clients)
        )
        return s._replace(clients=clients)

    def _admin_write(self, s: State, q: int, target: int) -> State:
        """The admin's own write of the broker table (the old method's UPDATE_CONSUMER_OFFSET, or
        5.x assignResetOffset); its writer key is -1, no pq's."""
        b, g = s.broker, self._value_changed(self._note_committed(s.ghost, q), (q,))
        return s._replace(
            broker=b._replace(offsets=_put(b.offsets, q, target)),
            ghost=g._replace(last_writer=_put(g.last_writer, q, ADMIN_WRITER)),
            history=History(Event(s.now, "admin-write", -1, q, target, "admin-reset"), s.history),
        )

    def _reset_completed(self, s: State, q: int, target: int, extra: tuple[int, ...]) -> State:
        """Ghost: the reset of ``q`` to ``target`` completed; INV-18 now expects the first batch that a
        pq created from here on receives to start at ``target`` (or minOffset, if higher). The pqs
        alive now, those whose commits are on the wire now, and ``extra`` (the resetting client's dropped
        one) are the old owners', exempt. A
        later commit of an old owner's pq is a declared event, except from ``extra``: the resetting
        client knew of the reset before it completed, so its older commits landing late are RMQ-26's
        race (b), not a stale owner."""
        old = set(extra)
        for i, cl in enumerate(s.clients):
            pq = cl.pqs[q]
            if pq is not None:
                old.add(pq_key(i, pq.uid))
            old.update(pq_key(i, uid) for hq, uid in cl.reset_held if hq == q)
            old.update(pq_key(i, item.pq_uid) for item in cl.channel if item.queue == q)  # sent before completion
        g = s.ghost
        expect = _put(self._per_q(g.reset_expect), q, (target, tuple(sorted(old)), extra))
        return s._replace(
            ghost=g._replace(reset_expect=expect),
            history=History(Event(s.now, "reset-completed", -1, q, target, "admin-reset"), s.history),
        )

    def _client_reset_receive(self, s: State, a: ClientResetReceive) -> State:
        """ClientResetReceive(client) (4.9.8). Enabled: running, a RESET_CONSUMER_CLIENT_OFFSET is on
        the wire to it, and no earlier reset sleeps (resetOffset is synchronized). Effect:
        MQClientInstance.resetOffset steps 1-3 (R3.10a): suspend() (pause); every owned pq of the
        table's queues is dropped and cleared but stays in processQueueTable (``reset_held``); then
        the 10 s sleep starts, ending at ClientResetWake. While paused, pullMessage re-queues itself
        after 1 s and doRebalance does nothing; the persist timer still runs over the whole table."""
        i = a.client
        cl = s.clients[i]
        if not self.reset_on or not cl.running or not cl.reset_inbox or cl.reset_wake is not None:
            raise ActionNotEnabled(a, "no reset for this client, or one sleeps already")
        table, rest = cl.reset_inbox[:1], cl.reset_inbox[1:]
        pqs, pulls, held = cl.pqs, cl.pulls, list(cl.reset_held)
        for q, _ in table:
            pq = pqs[q]
            if pq is None:
                continue
            held.append((q, pq.uid))
            pqs = _put(pqs, q, None)  # dropped and clear()ed: msgCount is 0, which correctTagsOffset reads
            pulls = tuple(p._replace(dropped_empty=True) if p.pq_uid == pq.uid else p for p in pulls)
        cl = cl._replace(
            reset_inbox=rest,
            paused=True,
            reset_table=table,
            reset_wake=s.now + RESET_SLEEP,
            reset_held=tuple(held),
            pqs=pqs,
            pulls=pulls,
            view=None if held != list(cl.reset_held) else cl.view,  # no longer every allocated queue placed
        )
        return s._replace(clients=_put(s.clients, i, cl))

    def _client_reset_wake(self, s: State, a: ClientResetWake) -> State:
        """ClientResetWake(client) (4.9.8, a timer). Enabled: running and the 10 s sleep is over.
        Effect: resetOffset steps 4-5 (R3.10a): for each held queue of the table,
        updateOffset(mq, offset, increaseOnly=false), removeUnnecessaryMessageQueue (persist oneway,
        then removeOffset) and removal from the table; then resume(): pause = false and
        doRebalance now, which reads the broker (READ_FROM_STORE) whether or not the persist has
        landed: the race of RMQ-26. The reset completes here for each queue the client held.

        ``late_reply`` names a held pq whose answered NO_NEW_MSG / NO_MATCHED_MSG pull is taken between that
        queue's updateOffset and its persist (the callback thread, §18.3): ``correctTagsOffset`` (msgCount 0
        after the clear) raises memory with increaseOnly, and the persist sends the raised value instead of
        the target: the reset is lost (INV-18), and what the cleared pq held unconsumed is skipped (INV-9)."""
        i = a.client
        cl = s.clients[i]
        if not self.reset_on or not cl.running or cl.reset_wake is None or cl.reset_wake > s.now:
            raise ActionNotEnabled(a, "no reset sleep over")
        if a.late_reply != -1 and a.late_reply not in self._late_replies(s, i):
            raise ActionNotEnabled(a, "no answered NO_NEW_MSG or NO_MATCHED_MSG pull of a pq this reset holds")
        held = dict(cl.reset_held)
        done: list[tuple[int, int, int]] = []
        for q, offset in cl.reset_table:
            uid = held.get(q)
            if uid is None:
                continue  # not in processQueueTable: this client does nothing for q
            value = max(offset - 1, 0) if self.m_reset_off_by_one else offset
            if not self.m_reset_skips_update:
                cl = s.clients[i]
                s = s._replace(clients=_put(s.clients, i, cl._replace(mem=_put(cl.mem, q, value))))
            if uid == a.late_reply:  # §18.3: the pull callback runs between updateOffset and persist
                s = self._receive_pull(s, ReceivePull(i, uid))
            s = self._persist_one(s, i, q, uid, "admin-reset-client")
            s = s._replace(clients=_put(s.clients, i, self._remove_offset(s.clients[i], q)))
            done.append((q, offset, uid))
        cl = s.clients[i]
        remaining = tuple((q, uid) for q, uid in cl.reset_held if all(q != d[0] for d in done))
        cl = cl._replace(paused=False, reset_table=(), reset_wake=None, reset_held=remaining, rebalance_requested=True)
        if done:
            cl = cl._replace(view=None)
        s = s._replace(clients=_put(s.clients, i, cl))
        for q, offset, uid in done:
            s = self._reset_completed(s, q, offset, (pq_key(i, uid),))
        return s

    def _reset_broker_receive(self, s: State, a: BrokerReceive) -> State:
        """BrokerReceive with a pending server-side reset of the request's queue (5.x, R3.10b):
        UPDATE_CONSUMER_OFFSET is ignored (answered SUCCESS, "Offset has been previously reset",
        R3.4); PULL_MESSAGE takes the pending entry (queryThenEraseResetOffset) and is answered
        OFFSET_RESET, i.e. PULL_OFFSET_MOVED with nextBeginOffset = the reset offset, which the
        client's OFFSET_ILLEGAL path adopts (R5.7); tryCommitOffset runs after the erase
        (DefaultPullMessageResultHandler.handle), so a flagged piggy-back lands over the reset: the
        window of R3.10b. Everything else is BrokerReceive as before."""
        cl = s.clients[a.client]
        pending = self._per_q(s.broker.reset_pending)
        item = cl.channel[a.overtakes] if 0 <= a.overtakes < len(cl.channel) else None
        if item is None or pending[item.queue] is None:
            return self._reset_note_stale(s, self._reset_wrapped[BrokerReceive](s, a), a.client, item)
        item, rest, victim = self._take_request(s, a)  # the request pools (§18): maybe the second request
        q = item.queue
        if isinstance(item, Commit):
            cl = cl._replace(channel=rest)
            return s._replace(
                clients=_put(s.clients, a.client, cl),
                history=History(Event(s.now, "commit-ignored", a.client, q, item.offset, item.cause), s.history),
            )
        if not s.broker.registered:  # rejected before the reset lookup (SUBSCRIPTION_NOT_EXIST)
            return self._reset_wrapped[BrokerReceive](s, a)
        before = s
        target = pending[q]
        cl = cl._replace(channel=rest)
        s = s._replace(
            clients=_put(s.clients, a.client, cl),
            broker=s.broker._replace(reset_pending=_put(pending, q, None)),
        )
        if item.commit_flag:
            s = self._land_commit(s, a.client, q, item.commit_offset, item.pq_uid, "piggyback", victim)
        result = PullResult(br.OFFSET_ILLEGAL, (), target)
        epoch = s.broker.epoch
        cl = s.clients[a.client]
        pulls = tuple(
            p._replace(epoch=epoch, result=result) if p.pq_uid == item.pq_uid and p.epoch == -1 else p for p in cl.pulls
        )
        s = s._replace(clients=_put(s.clients, a.client, cl._replace(pulls=pulls)))
        return self._reset_note_stale(before, s, a.client, item)

    def _reset_note_stale(self, s: State, t: State, i: int, item: Commit | PullRequestMsg | None) -> State:
        """Ghost, INV-17's declared later event: a commit from a pq that existed when the reset of its
        queue completed lands afterwards (a stale owner's commit, S5; in 5.x also the erasing pull's
        own piggy-back, R3.10b's window). The reset's own applications do not count."""
        if item is None or not t.ghost.reset_expect or not self.reset_declare_stale:
            return t
        expect = self._per_q(t.ghost.reset_expect)
        entry = expect[item.queue]
        event = t.history.event if t.history is not None and t.history is not s.history else None
        if (
            entry is None
            or event is None
            or event.kind != "commit-landed"
            or event.cause in RESET_APPLY_CAUSES
            or event.offset == entry[0]
            or pq_key(i, item.pq_uid) not in entry[1]
            or pq_key(i, item.pq_uid) in entry[2]
        ):
            return t
        return t._replace(
            ghost=t.ghost._replace(reset_expect=_put(expect, item.queue, None)),
            history=History(Event(t.now, "reset-overwritten", i, item.queue, event.offset, event.cause), t.history),
        )

    def _reset_broker_crash(self, s: State, a: BrokerCrash) -> State:
        """BrokerCrash also loses the pending resets (resetOffsetTable is memory only) and the
        RESET_CONSUMER_CLIENT_OFFSET pushes on the wire; a completed reset's expectation ends (the
        table falls back to the flushed file: a declared later event of INV-17)."""
        s = self._reset_wrapped[BrokerCrash](s, a)
        clients = tuple(cl._replace(reset_inbox=()) for cl in s.clients)
        return s._replace(
            broker=s.broker._replace(reset_pending=()),
            clients=clients,
            ghost=s.ghost._replace(reset_expect=()),
        )

    def _reset_send_pull(self, s: State, a: SendPull) -> State:
        """SendPull while the consumer is paused (R3.10a step 1): pullMessage sets lastPullTimestamp,
        sees ``isPause`` and re-queues itself after PULL_TIME_DELAY_MILLS_WHEN_SUSPEND (1 s)."""
        i, q = a.client, a.queue
        cl = s.clients[i]
        pq = cl.pqs[q] if cl.running and 0 <= q < self.q_count else None
        if not cl.paused or pq is None or pq.pull_state != PULL_READY or pq.pull_ready_at > s.now:
            return self._reset_wrapped[SendPull](s, a)
        pq = pq._replace(last_pull=s.now, pull_ready_at=s.now + PULL_DELAY_WHEN_SUSPEND)
        return s._replace(clients=_put(s.clients, i, cl._replace(pqs=_put(cl.pqs, q, pq))))

    def _reset_rebalance(self, s: State, a: Rebalance | RebalanceQueryError) -> State:
        """A due rebalance of a paused consumer does nothing: DefaultMQPushConsumerImpl.doRebalance
        runs only when not paused (R3.10a step 1); the RebalanceService wait starts again."""
        i = a.client
        cl = s.clients[i]
        if not cl.paused or not self._rebalance_due(s, i):
            return self._reset_wrapped[type(a)](s, a)
        cl = cl._replace(next_rebalance=s.now + REBALANCE_WAIT, rebalance_requested=False)
        return s._replace(clients=_put(s.clients, i, cl))

    def _reset_persist_all(self, s: State, i: int, cause: str) -> State:
        """persistAll(keys(processQueueTable)) while a reset sleeps (R2.7, R4.1, R3.10a): the pqs the reset
        dropped are still keys of processQueueTable, so the key set is the owned pqs and the held ones,
        in one pass in queue order: their memory values are sent, every other entry is removed from
        memory (the set is never empty here). Called by ``_persist_all`` (the persist timer, shutdown)."""
        cl = s.clients[i]
        keys = {q: pq.uid for q, pq in enumerate(cl.pqs) if pq is not None} | dict(cl.reset_held)
        mem = list(cl.mem)
        for q, value in enumerate(cl.mem):
            if value is None:
                continue
            if q in keys:
                s = self._send_commit(s, i, q, value, keys[q], cause)
            elif not self.m_no_pruning:
                mem[q] = None
        cl = s.clients[i]
        return s._replace(clients=_put(s.clients, i, cl._replace(mem=tuple(mem))))

    def _reset_receive_pull(self, s: State, a: ReceivePull) -> State:
        """ReceivePull, plus INV-17's ghost: the first batch that a pq created after a completed reset
        receives ends the expectation (the invariant compares it with the target).

        A held pull (long polling) woken while a 5.x reset of its queue is pending takes the pending
        entry too: ``executeRequestWhenWakeup`` runs ``processRequest`` again, which calls
        ``queryThenEraseResetOffset`` before reading the store (R3.10b step 6), and answers OFFSET_RESET;
        no second commit (brokerAllowSuspend is false on wakeup, R5.4). Found by the lockstep check."""
        s = self._reset_wake_held_pull(s, a)
        t = self._reset_wrapped[ReceivePull](s, a)
        expect = self._per_q(t.ghost.reset_expect)
        pull = next(p for p in s.clients[a.client].pulls if p.pq_uid == a.pq_uid and p.epoch != -1)
        entry = expect[pull.queue]
        if entry is None or pq_key(a.client, a.pq_uid) in entry[1]:
            return t
        pq = t.clients[a.client].pqs[pull.queue]
        if pq is None or pq.uid != a.pq_uid or pq.tree == _old_tree(s, a.client, pull.queue, a.pq_uid):
            return t
        return t._replace(ghost=t.ghost._replace(reset_expect=_put(expect, pull.queue, None)))

    def _reset_wake_held_pull(self, s: State, a: ReceivePull) -> State:
        """The wakeup of a held pull under a pending reset of its queue (see ``_reset_receive_pull``):
        the pending entry is erased and the pull's answer becomes OFFSET_ILLEGAL at the target. A group
        nobody registers is refused before the reset lookup (SUBSCRIPTION_NOT_EXIST, R5.4)."""
        b = s.broker
        cl = s.clients[a.client]
        pull = next((p for p in cl.pulls if p.pq_uid == a.pq_uid and p.epoch != -1), None)
        if pull is None or not cl.running or not b.up or pull.epoch != b.epoch or pull.result is not None:
            return s
        pending = self._per_q(b.reset_pending)
        target = pending[pull.queue]
        if target is None or not b.registered:
            return s
        result = PullResult(br.OFFSET_ILLEGAL, (), target)
        pulls = tuple(p._replace(result=result) if p is pull else p for p in cl.pulls)
        return s._replace(
            broker=b._replace(reset_pending=_put(pending, pull.queue, None)),
            clients=_put(s.clients, a.client, cl._replace(pulls=pulls)),
        )


def _old_tree(s: State, i: int, q: int, uid: int) -> int:
    pq = s.clients[i].pqs[q]
    return pq.tree if pq is not None and pq.uid == uid else 0


def initial(config: Config) -> State:
    """The initial state of ``Model(config)``."""
    return Model(config).initial()
