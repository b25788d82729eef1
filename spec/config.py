"""The model's configuration: what is being checked, how large, and with which fault budgets.

A :class:`Config` fixes everything the model does not choose by itself: the number of consumers and
queues, the consumption mode and strategy, where a new group starts, the RocketMQ constants that a
small model needs scaled down (batch sizes, thresholds), the budgets of the perturbing actions, and
the planted bugs (``mutations``) a test wants the checker to refute. Every value is validated on
construction; a bad one raises :class:`ConfigError` naming the field and what it accepts.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Final

# Message models and strategies the model explores (R1.3, the allocation strategies,
# allocation.allocate_queues).
CLUSTERING: Final = "CLUSTERING"
BROADCASTING: Final = "BROADCASTING"
MODES: Final = (CLUSTERING, BROADCASTING)

AVG: Final = "AVG"
AVG_BY_CIRCLE: Final = "AVG_BY_CIRCLE"
CONSISTENT_HASH: Final = "CONSISTENT_HASH"
CONFIG: Final = "CONFIG"
MACHINE_ROOM: Final = "MACHINE_ROOM"
MACHINE_ROOM_NEARBY: Final = "MACHINE_ROOM_NEARBY"
STRATEGIES: Final = (AVG, AVG_BY_CIRCLE, CONSISTENT_HASH, CONFIG, MACHINE_ROOM, MACHINE_ROOM_NEARBY)
# What the model's MACHINE_ROOM_NEARBY may wrap: the strategies that partition any queue list.
NEARBY_INNER_STRATEGIES: Final = (AVG, AVG_BY_CIRCLE, CONSISTENT_HASH)

# ConsumeFromWhere (computePullFromWhere, RebalanceMixin._compute_pull_from_where). The three deprecated values behave
# exactly like LAST in 4.9.8.
FROM_LAST: Final = "CONSUME_FROM_LAST_OFFSET"
FROM_FIRST: Final = "CONSUME_FROM_FIRST_OFFSET"
FROM_TIMESTAMP: Final = "CONSUME_FROM_TIMESTAMP"
DEPRECATED_AS_LAST: Final = (
    "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
    "CONSUME_FROM_MIN_OFFSET",
    "CONSUME_FROM_MAX_OFFSET",
)
CONSUME_FROM_WHERE: Final = (FROM_LAST, FROM_FIRST, FROM_TIMESTAMP, *DEPRECATED_AS_LAST)

# RocketMQ release lines (docs/spec.md, "What the version switch changes"). "5.x" is the latest 5.x
# behaviour (5.3.3 / develop) of each switch below; the derived properties of Config name the tag.
V4_9_8: Final = "4.9.8"
V5_X: Final = "5.x"
VERSIONS: Final = (V4_9_8, V5_X)

# Planted bugs, each described by what it breaks: the names of the known-buggy variants of the model in
# spec/variants/ (kept here so that a Config validates without importing the model; spec/variants checks at
# import that each name has exactly one variant). tests/test_planted_bugs.py names the property that must
# refute each one and proves it does.
MUTATIONS: Final[dict[str, str]] = {
    "watermark_highest_consumed": "RMQ-01: removeMessage returns highest removed + 1 instead of lowest held",
    "commit_before_send_back": "RMQ-03: messages whose send-back failed are removed and committed anyway",
    "dropped_pq_commits": "RMQ-05: processConsumeResult still updates the offset of a dropped pq",
    "ignore_increase_only": "updateOffset overwrites even when increaseOnly is true (R1.5)",
    "no_persist_all_pruning": "remote persistAll keeps memory entries of queues it no longer owns (R2.7)",
    "local_remove_offset_deletes_file": "LocalFileOffsetStore.removeOffset also deletes the file entry (R1.14)",
    "bak_written_once": "string2File copies offsets.json to .bak only while no .bak exists (R1.15)",
    "broker_answers_minus_one": "QUERY_CONSUMER_OFFSET answers SUCCESS(-1) for a group with no offset (R3.5)",
    "channel_expiry_in_seconds": "the idle-channel scan closes a silent channel 120 ms after its last heartbeat (R4.3)",
    "dlq_one_retry_late": "send-back routes to the DLQ only when reconsumeTimes > max (R7.5)",
    "piggyback_next_offset": "the pull piggy-backs the pull cursor instead of the stored offset (R5.2)",
    "count_not_decremented": "ProcessQueue.removeMessage forgets to decrement msgCount (R6.3)",
    "dlq_copy_not_stored": "the broker answers a send-back at maxReconsumeTimes SUCCESS and stores no DLQ copy (R7.5)",
    "send_back_from_ack_index": "processConsumeResult sends back from ackIndex, not ackIndex + 1 (R7.3)",
    "commit_past_cached": "removeMessage returns queueOffsetMax + 2 when the tree empties (R6.3)",
    "removal_result_read_before_removal": "removeMessage reads the lowest held offset before removing the batch, so "
    "a removal of the tree's head answers the head itself (R6.3)",
    "resume_ignores_stored_offset": "computePullFromWhere ignores the broker offset and uses consumeFromWhere",
    "last_offset_one_before_max": "CONSUME_FROM_LAST_OFFSET starts one below the max offset (R10.1)",
    "avg_blocks_overlap": "AVG gives every consumer a block starting one queue early (R11.1)",
    # orderly consumption (R8): planted bugs of the broker lock table
    "lock_ignores_holder": "orderly: tryLockBatch grants a queue another client holds, unexpired (R8.1)",
    "lock_all_keeps_denied_locked": "orderly: lockAll leaves the pqs of the refused queues locked (R8.2)",
    "add_without_lock": "orderly: the rebalance adds a queue without lock(mq) first (R8.4; RMQ-09 item 2, #112)",
    # pull expiry, retention and OFFSET_ILLEGAL
    "pull_expiry_ignored": "R9.4 Phase A keeps a pq not pulled for more than 120 s (isPullExpired, R6.6)",
    "offset_illegal_fix_deferred": "5.x runs the OFFSET_ILLEGAL correction 10 s later, as 4.9.8 does (R5.7)",
    "offset_fix_updates_after_removal": "the OFFSET_ILLEGAL correction persists and removes the stale offset, then "
    "puts the corrected one in memory for a queue with no pq (R5.7)",
    # admin reset (the 4.9.8 reset and the 5.x reset, AdminResetMixin)
    "client_reset_off_by_one": "MQClientInstance.resetOffset applies the reset offset minus one (R3.10a)",
    "client_reset_skips_update": "MQClientInstance.resetOffset skips updateOffset(increaseOnly=false) and "
    "persists the old memory offset (R3.10a step 4)",
    # orderly consume loop (the orderly ProcessQueue helpers and the orderly consume loop, OrderlyConsumeMixin)
    "orderly_commit_returns_last_key": "ProcessQueue.commit returns the largest consumed key, not key + 1 (R6.4)",
    "orderly_suspend_commits": "SUSPEND_CURRENT_QUEUE_A_MOMENT commits the batch it puts back (R8.6)",
    "orderly_removal_ignores_consume_lock": "RMQ-09 (1): orderly removal unlocks the broker lock while the "
    "listener still runs (R8.8)",
    "unlock_delay_never_scheduled": "4.9.8's orderly removal of a pq with cached messages schedules no "
    "unlockDelay: the broker lock stays until it expires (R8.8)",
    "orderly_ignores_lock_expiry": "RMQ-10 plant: the orderly loop does not check isLockExpired (R8.5)",
    "orderly_no_queue_monitor": "ConsumeRequest.run does not take the MessageQueueLock: two runs of one queue "
    "overlap (R8.5)",
    "pull_request_requeued": "the pull thread re-queues the PullRequest it sends (a double "
    "executePullRequestImmediately): two pull loops for one pq (R5.1)",
    # the causal allow-list (docs/spec.md, "Allowed anomalies, each with its cause"): each refuted only by a property
    # that demands a cause
    "empty_group_loses_offsets": "the broker drops a group's offsets when its last consumer leaves: a restart "
    "then positions by consumeFromWhere over what the group had committed (R3.1, R10.4)",
    "resume_memory_one_behind": "computePullFromWhere seeds the memory offset one below the stored offset it "
    "resumes at: the first commit lowers the broker below what that pq read (R10.1, R1.5)",
    "position_seeds_memory_one_below": "computePullFromWhere seeds the memory offset one below a position "
    "consumeFromWhere chose: the pq's commit lowers the broker below its own start, a value it never read; 'a pq "
    "that did not read the value it undercuts' would tolerate it as a stale owner's commit (R10.1, R1.5)",
    "first_pull_one_below_position": "Phase B's new PullRequest starts one below the position computePullFromWhere "
    "returned: the new pq delivers again a message below its start, which the group had committed; counting it as "
    "'resumed-at-<how>' without its extent would tolerate it (R9.4, R10.1)",
    "pull_cursor_one_behind": "the PullCallback sets nextOffset to nextBeginOffset - 1 after FOUND: the last "
    "message is pulled again once consumed (R5.7)",
    "update_offset_stores_one_less": "the broker's updateConsumerOffset stores commitOffset - 1: a pq's persist "
    "lands below what its own pull's piggy-back landed, with every request applied in order (R3.2, R5.4); "
    "'the same pq wrote it' would tolerate it, the request-pool-reorder cause does not "
    "(docs/spec.md, 'Thread boundaries')",
    # cleanExpiredMsg (ConcurrentConsumeMixin._clean_expired_msg)
    "expired_removed_without_send_back": "cleanExpiredMsg removes an expired message from the pq without sending "
    "it back: the watermark passes a message nobody handled (R6.8)",
    "clean_timer_stops": "the cleanExpireMsg task runs once and is never re-armed: a message whose listener outlives "
    "consumeTimeout afterwards stays in its pq, pinning its queue's offset, with no dead task to explain it (R6.8)",
    # liveness at quiescence (docs/spec.md, "Liveness at quiescence"): background tasks that stop; only LIV checks see
    # them
    "shutdown_skips_queued_commits": "the shutdown's persistAll skips a queue with a commit already on the "
    "connection (R4.4)",
    "persist_timer_stops": "persistAllConsumerOffset runs once and is never rescheduled (R4.1)",
    "rebalance_timer_stops": "RebalanceService is not re-armed after a run: only rebalanceImmediately wakes it (R4.2)",
}


# Held-out real bugs (spec/variants/held_out/, docs/held_out.md): plantable with Config.mutations and --mutation like
# the names above, but kept apart from MUTATIONS so that nothing iterating the planted bugs (their tests, the benches,
# the check tables, the campaign) ever sees them. spec/variants/held_out checks at import that each name has exactly
# one variant, in this order.
HELD_OUT_NAMES: Final[tuple[str, ...]] = (
    "local_offset_bak_never_written",
    "clean_expired_unstarted",
    "lock_all_keeps_lock_time",
    "orderly_removal_keeps_lock",
    "reset_rebalance_not_paused",
    "commit_to_slave_while_master_up",
    "no_correct_tags_offset",
    "dropped_pq_request_consumed",
    "query_error_reads_as_no_offset",
    "slave_corrects_from_own_bounds",
    "broadcast_failure_kept_in_pq",
    "orderly_first_pull_no_reread",
    # the second set (spec/variants/held_out/client_reports.py): written apart from the search, catch figures seen
    "local_persist_one_noop",
    "local_offset_dir_per_start",
    "local_offset_load_no_bak",
    "retry_queue_no_offset_skipped",
    "offset_illegal_fix_keeps_pq",
    "retry_messages_answered_later",
    "orderly_suspend_drops_batch",
    "orderly_empty_tree_corrects_offset",
    "orderly_forward_to_retry",
    "broadcast_orderly_locks_on_add",
    # the third set (spec/variants/held_out/fix_commits.py): written apart from the search, catch figures seen
    "shutdown_persists_empty_table",
    "offset_not_found_read_as_error",
    "orderly_new_pq_unlocked",
    "consume_result_lost_to_npe",
    "orderly_shutdown_keeps_locks",
    "orderly_suspend_counts_twice",
    "tags_offset_skips_zero",
    "rebalance_keeps_dirty_offset",
    "send_back_limit_from_group",
    "offset_illegal_pulls_on",
    # the fourth set (spec/variants/held_out/legacy_fixes.py): written apart from the search, catch figures seen
    "young_queue_zero_from_disk",
    "timestamp_searched_in_seconds",
    "removal_counts_absent_messages",
    "flow_control_keeps_pull_time",
    "rebalance_removal_skips_persist",
    "orderly_take_keeps_consuming",
    "consume_batches_skip_one",
    "retry_queue_from_last_max",
    "orderly_first_pull_waits_for_broker",
    "commit_of_new_queue_dropped",
    # the fifth set (spec/variants/held_out/client_fixes.py): written apart from the search, catch figures seen
    "local_remove_offset_noop",
    "send_back_failure_keeps_times",
    "client_reset_wake_throws",
    "rebalance_every_ten_seconds",
    "memory_offset_read_as_absent",
    "server_reset_table_not_written",
    "new_lock_entry_not_granted",
    "retry_delay_stops_growing",
    "broadcast_orderly_checks_lock",
    # the sixth set, broker half (spec/variants/held_out/broker_fixes.py): written apart from the search, catch figures
    # seen
    "offset_scan_ignores_online_group",
    "query_success_without_offset",
    "schedule_service_not_started",
    # the sixth set, client half (spec/variants/held_out/client_lifecycle_fixes.py): written apart from the search,
    # catch figures seen
    "removal_count_triangular",
    "sent_back_kept_in_pq",
    # the seventh set, orderly half (spec/variants/held_out/orderly_gate_fixes.py): written apart from the search,
    # catch figures seen
    "orderly_run_lock_check_or",
    "unlocked_orderly_pull_goes_on",
    # the seventh set, request half (spec/variants/held_out/unhandled_requests.py): written apart from the search,
    # catch figures seen
    "slave_offset_sync_stub",
    "client_reset_request_unsupported",
    "consumer_ids_changed_ignored",
    # the eighth set, Rust half (spec/variants/held_out/rust_client_fixes.py): written apart from the search, catch
    # figures seen
    "avg_overflow_past_last_queue",
    "local_read_leaves_memory_empty",
    # the eighth set, ProcessQueue half (spec/variants/held_out/process_queue_fixes.py): written apart from the search,
    # catch figures seen
    "emptied_tree_commits_last_key",
    # the ninth set (spec/variants/held_out/housekeeping_fixes.py): written apart from the search, catch figures seen
    "consumer_channels_never_scanned",
    # the tenth set (spec/variants/held_out/channel_events_fixes.py): written apart from the search, catch figures
    # seen
    "channel_close_keeps_consumer",
    "consumer_unregister_unimplemented",
    # the eleventh set (spec/variants/held_out/go_push_consumer_fixes.py): written apart from the search, catch figures
    # seen
    "pull_expired_queue_kept_dropped",
    "send_back_stub_reports_success",
    "lock_all_renews_refused_locks",
    # the twelfth set, part A (spec/variants/held_out/java_tracker_fixes.py): written apart from the search, catch
    # figures unseen
    "heartbeat_keeps_first_channel_stamp",
    "consumer_list_request_fails",
    "tag_filter_never_matches",
    # the twelfth set, part B (spec/variants/held_out/client_tracker_fixes.py): written apart from the search, catch
    # figures unseen
    "master_only_broker_lookup",
    "pull_callback_keeps_replaced_pq",
    # the thirteenth set (spec/variants/held_out/release_note_fixes.py): written apart from the search, catch figures
    # unseen
    "negative_tags_code_passes_filter",
)
# Every name Config.mutations accepts.
PLANTABLE: Final[frozenset[str]] = frozenset(MUTATIONS) | frozenset(HELD_OUT_NAMES)


class ConfigError(ValueError):
    """A configuration value is out of range; the message names the field and what is accepted."""


@dataclass(frozen=True, slots=True)
class Config:
    """What the model checks. Defaults are RocketMQ 4.9.8's where RocketMQ has one.

    The scaled-down values are chosen so that a random walk of a few hundred steps reaches the
    interesting states: a pull batch of 2 with at most 4 cached messages per queue makes flow
    control and partially consumed batches common, where RocketMQ's 32 and 1000 would need
    thousands of messages.
    """

    consumers: int = 2
    queues: int = 4
    messages_per_queue: int = 4  # how many Produce actions each queue of the topic accepts
    backlog: int = 0  # messages already in each queue at time 0 (counted in messages_per_queue)
    backlog_head_hot: bool = True  # is message 0 of a backlog still in page cache (the offset query's answer,
    # broker_rules.query_consumer_offset)?
    mode: str = CLUSTERING
    strategy: str = AVG
    consume_from_where: str = FROM_LAST
    consume_timestamp: int = 0  # logical ms; CONSUME_FROM_TIMESTAMP looks it up (searchOffset,
    # broker_rules.search_offset)
    pull_batch_size: int = 2  # RocketMQ: 32 (the piggy-backed commit, PullMixin._piggyback_offset)
    consume_batch_size: int = 1  # consumeMessageBatchMaxSize, RocketMQ default 1 (submitConsumeRequest,
    # ConcurrentConsumeMixin._start_consume)
    pull_threshold_for_queue: int = 4  # RocketMQ: 1000 (pullMessage, PullMixin._send_pull)
    max_reconsume_times: int = 16  # -1 means 16 for concurrent consumers (the client's sendMessageBack,
    # ConcurrentConsumeMixin._send_back)
    tags: tuple[str, ...] = ("A",)  # tags producers attach
    subscription: tuple[str, ...] | None = None  # None is "*"; otherwise the subscribed tags
    virtual_node_cnt: int = 10  # consistent hash (CONSISTENT_HASH, allocation.allocate_queues); 0 is accepted and
    # allocates nothing
    # Parameters of CONFIG, MACHINE_ROOM and MACHINE_ROOM_NEARBY (the allocation strategies,
    # allocation.allocate_queues), None for the others.
    allocate_config_queues: tuple[tuple[int, ...], ...] | None = None  # CONFIG: queue indices, per consumer
    consumeridcs: tuple[str, ...] | None = None  # MACHINE_ROOM: the rooms dealt; None is Java's unset set
    nearby_inner: str | None = None  # MACHINE_ROOM_NEARBY: the strategy it wraps
    consumer_rooms: tuple[str, ...] | None = None  # MACHINE_ROOM_NEARBY: each consumer's room
    broker_room: str | None = None  # MACHINE_ROOM_NEARBY: the broker's room
    client_crashes: int = 1
    client_shutdowns: int = 1
    broker_crashes: int = 1
    send_back_failures: int = 1
    query_errors: int = 0  # QUERY_CONSUMER_OFFSET answered with an error code (readOffset,
    # RebalanceMixin._compute_pull_from_where); see RebalanceQueryError
    version: str = V4_9_8
    group: str = "G"
    topic: str = "T"
    broker_name: str = "broker-a"
    mutations: frozenset[str] = field(default_factory=frozenset)
    # orderly consumption: a ConsumeMessageOrderlyService consumer: its lock protocol (ClientLocksMixin, with the
    # broker's lock table orderly.try_lock_batch and the first locked pull's re-read in PullMixin._send_pull), its
    # consume loop (OrderlyConsumeMixin) and its removal at rebalance (OrderlyConsumeMixin._remove_orderly).
    orderly: bool = False
    # retention and OFFSET_ILLEGAL (the pull statuses (broker_rules.pull_result), the pull-status handling
    # (PullMixin._receive_pull)): commit-log retention raising minOffset (RetentionDelete). Default 0: without it no
    # pull offset ever falls below minOffset, so existing configurations keep their exact state space and meaning; runs
    # that want OFFSET_ILLEGAL ask for it.
    retention_deletes: int = 0
    # admin reset (the 4.9.8 reset and the 5.x reset, AdminResetMixin): budget of AdminReset. Default 0, so existing
    # runs keep their exact state space and meaning. CLUSTERING only.
    admin_resets: int = 0
    # orderly consume loop: budget of Stall, a stop-the-world pause of a consumer (default 0: the timing
    # margins of the lockAll timer (ClientLocksMixin._lock_all) hold)
    client_stalls: int = 0
    # faults (default 0 / off, so that existing runs keep their state space): oneway commits lost on the way
    # (LoseCommit, updateConsumeOffsetToBroker, ConsumerProcessMixin._send_commit); a rebalance whose consumer list
    # lacks the consumer itself (RebalanceWithoutSelf, S7); consumer 1 sharing consumer 0's clientId (RMQ-11; CLUSTERING
    # only)
    commit_losses: int = 0
    view_faults: int = 0
    duplicate_client_id: bool = False
    task_deaths: int = 0  # a background task dies for good (TaskDies)
    # the broker's consumerOffset.json unreadable at a restart (CorruptOffsetFile; the broker's load
    # (BrokerMixin._broker_restart), RMQ-21). At most 1: after one, the next flush copies the unreadable main over .bak,
    # and a second would stop the broker from starting at all (loadBak fails), which the model does not represent.
    offset_file_corruptions: int = 0
    # a BROADCASTING consumer's offsets.json unreadable at its restart (CorruptLocalOffsetFile; a corrupt offset file's
    # aftermath, FaultsMixin). At most 1, for the same reason: a second one would make both files unreadable and the
    # consumer unable to start.
    local_offset_file_corruptions: int = 0
    # a BROADCASTING consumer's offsets.json has unlocked writers (LocalFileOffsetStore#persistAll on the timer
    # thread, #persist on the rebalance, OFFSET_ILLEGAL and reset threads: read, merge, string2File): this many
    # persistAll runs may read and merge now and write later, over what other writers wrote meanwhile
    # (PersistOffsets(client, lagging=1), OffsetFileWriteLands; docs/spec.md, "What is real, ranked"). BROADCASTING
    # only.
    lagging_file_writes: int = 0
    # slaves: a slave (brokerId 1) of the broker name. While the master is down, pulls, offset queries,
    # commits and consumer lists go to it (the slave routing (SlaveMixin), updateConsumeOffsetToBroker
    # (ConsumerProcessMixin._send_commit), the pull's sysFlag (PullMixin._send_pull), the CLUSTERING allocation
    # (RebalanceMixin._rebalance_topic)); it copies the commit log (HA) and the master's offset table every 10 s
    # (SlaveSynchronize, SlaveSync, SlaveMixin._slave_sync). Default off: existing runs keep their state space.
    slave: bool = False
    # MessageStoreConfig.offsetCheckInSlave (the pull statuses, broker_rules.pull_result): may a slave answer
    # PULL_OFFSET_MOVED from its own bounds? false (the default) since the RMQ-17 fix; true restores RMQ-17 for a
    # lagging slave.
    offset_check_in_slave: bool = False
    # orderly consume loop: ConsumeOrderlyContext.autoCommit as the listener leaves it (the orderly commit,
    # OrderlyConsumeMixin._orderly_finish). true (the default): SUCCESS commits the batch. false: SUCCESS commits
    # nothing, COMMIT commits everything taken since the last commit, ROLLBACK puts it all back.
    orderly_auto_commit: bool = True
    # cleanExpiredMsg (ConcurrentConsumeMixin._clean_expired_msg): consumeTimeout in logical ms, both
    # the period of the concurrent consume service's cleanExpireMsg timer (scheduleAtFixedRate: first run one period
    # after start, then every period counted from the planned run, whatever the run found) and the age a started
    # listener's message must exceed to be sent back and removed. RocketMQ: 15 min. Scaled down like pull_batch_size
    # (docs/spec.md, "What is abstracted away, and why"), minutes read as seconds: campaign walks (300 steps,
    # src/rmqspec/campaign) end at a median of about 90 s of logical time (p90 180 s), so 15 min never fires; their
    # listeners run 0 s at the median, about 5 s at p90 and under 20 s at p99. At 15 s only that tail outlives the
    # timeout, as only a stuck listener outlives RocketMQ's: over 1,000 campaign seeds the timer fires about 9,400 times
    # and removes messages in 19 runs (10 s: 41 runs, but a p90 listener then nearly expires; 20 s: 13).
    consume_timeout: int = 15_000

    def __post_init__(self) -> None:
        _check_range("consumers", self.consumers, 1, 8)
        _check_range("queues", self.queues, 1, 32)
        _check_range("messages_per_queue", self.messages_per_queue, 0, 60)
        _check_range("backlog", self.backlog, 0, self.messages_per_queue)
        _check_choice("mode", self.mode, MODES)
        _check_choice("strategy", self.strategy, STRATEGIES)
        _check_choice("consume_from_where", self.consume_from_where, CONSUME_FROM_WHERE)
        _check_range("consume_timestamp", self.consume_timestamp, 0, 10**12)
        _check_range("pull_batch_size", self.pull_batch_size, 1, 1024)
        _check_range("consume_batch_size", self.consume_batch_size, 1, 1024)
        _check_range("pull_threshold_for_queue", self.pull_threshold_for_queue, 1, 65535)
        if self.max_reconsume_times != -1:
            _check_range("max_reconsume_times", self.max_reconsume_times, 0, 16)
        if not self.tags or any(not t for t in self.tags):
            raise ConfigError(f"tags: got {self.tags!r}; accepted: a non-empty tuple of non-empty strings")
        if self.subscription is not None and not self.subscription:
            raise ConfigError("subscription: got (); accepted: None (meaning '*') or a non-empty tuple of tags")
        _check_range("virtual_node_cnt", self.virtual_node_cnt, 0, 1000)
        _check_allocation(self)
        for budget in (
            "client_crashes",
            "client_shutdowns",
            "broker_crashes",
            "send_back_failures",
            "query_errors",
            "client_stalls",
            "commit_losses",
            "view_faults",
            "task_deaths",
        ):
            _check_range(budget, getattr(self, budget), 0, 100)
        _check_choice("version", self.version, VERSIONS)
        for name in ("group", "topic"):
            value = getattr(self, name)
            if not value or "@" in value:
                raise ConfigError(f"{name}: got {value!r}; accepted: a non-empty name without '@'")
        if not self.broker_name:  # '@' is allowed: MACHINE_ROOM reads "<room>@<name>" (MACHINE_ROOM,
            # allocation.allocate_queues)
            raise ConfigError("broker_name: got ''; accepted: a non-empty name ('<room>@<name>' for MACHINE_ROOM)")
        if not isinstance(self.orderly, bool):  # orderly
            raise ConfigError(f"orderly: got {self.orderly!r}; accepted: true or false")
        _check_range("retention_deletes", self.retention_deletes, 0, 100)  # retention
        _check_range(
            "consume_timeout", self.consume_timeout, 1, 24 * 3_600_000
        )  # ConcurrentConsumeMixin._clean_expired_msg
        _check_range("admin_resets", self.admin_resets, 0, 100)  # admin reset
        if not isinstance(self.duplicate_client_id, bool):
            raise ConfigError(f"duplicate_client_id: got {self.duplicate_client_id!r}; accepted: true or false")
        if self.duplicate_client_id and (
            self.mode != CLUSTERING or self.consumers < 2 or self.strategy == MACHINE_ROOM_NEARBY
        ):
            raise ConfigError(
                "duplicate_client_id: got true; accepted only in CLUSTERING with at least 2 consumers and a strategy "
                "other than MACHINE_ROOM_NEARBY (a BROADCASTING offset file and a consumer's room are keyed by "
                "clientId, which the model does not share)"
            )
        _check_range("offset_file_corruptions", self.offset_file_corruptions, 0, 1)
        _check_range("local_offset_file_corruptions", self.local_offset_file_corruptions, 0, 1)
        _check_range("lagging_file_writes", self.lagging_file_writes, 0, 100)
        if self.lagging_file_writes and self.mode != BROADCASTING:
            raise ConfigError(
                "lagging_file_writes: got a budget in CLUSTERING; accepted: 0 (only a BROADCASTING consumer writes "
                "its offsets to a local file, R1.3)"
            )
        if self.local_offset_file_corruptions and self.mode != BROADCASTING:
            raise ConfigError(
                "local_offset_file_corruptions: got a budget in CLUSTERING; accepted: 0 (only a BROADCASTING "
                "consumer keeps its offsets in a local file, R1.3)"
            )
        faults = (self.commit_losses, self.view_faults, self.duplicate_client_id, self.task_deaths)
        if self.admin_resets and any(faults):
            raise ConfigError(
                "admin_resets: got a budget with commit_losses, view_faults, duplicate_client_id or task_deaths; "
                "accepted: 0 "
                "(not modelled together yet)"
            )
        if self.admin_resets and (self.orderly or self.client_stalls):
            raise ConfigError(
                "admin_resets: got a budget with orderly or client_stalls; accepted: 0 (the admin reset is not "
                "modelled together with the orderly consume loop or stalls yet, docs/spec.md, section orderly_consume)"
            )
        if self.admin_resets and self.mode != CLUSTERING:
            raise ConfigError(
                "admin_resets: got a budget in BROADCASTING; accepted: 0 (admin reset is modelled for CLUSTERING)"
            )
        if not isinstance(self.orderly_auto_commit, bool) or (not self.orderly_auto_commit and not self.orderly):
            raise ConfigError(
                f"orderly_auto_commit: got {self.orderly_auto_commit!r}; accepted: true, or false with orderly = true "
                "(autoCommit is a ConsumeOrderlyContext setting)"
            )
        for flag in ("slave", "offset_check_in_slave"):  # slaves
            if not isinstance(getattr(self, flag), bool):
                raise ConfigError(f"{flag}: got {getattr(self, flag)!r}; accepted: true or false")
        if self.offset_check_in_slave and not self.slave:
            raise ConfigError("offset_check_in_slave: got true without a slave; accepted: false, or set slave = true")
        if self.slave and (self.orderly or self.admin_resets or self.client_stalls or self.task_deaths):
            raise ConfigError(
                "slave: got true with orderly, admin_resets, client_stalls or task_deaths; accepted: false (the slave "
                "is not modelled together with broker locks, the admin reset or the idle-channel scan yet, "
                "docs/spec.md, section slave)"
            )
        unknown = sorted(set(self.mutations) - PLANTABLE)
        if unknown:
            raise ConfigError(
                f"mutations: unknown {unknown}; accepted: {sorted(MUTATIONS)} and the held-out {list(HELD_OUT_NAMES)}"
            )

    @property
    def effective_max_reconsume_times(self) -> int:
        """-1 means 16 for a concurrent consumer (the client's sendMessageBack, ConcurrentConsumeMixin._send_back) and
        Integer.MAX_VALUE for an orderly one (checkReconsumeTimes, OrderlyConsumeMixin._orderly_finish)."""
        if self.max_reconsume_times == -1:
            return 2**31 - 1 if self.orderly else 16
        return self.max_reconsume_times

    # --- the version switches (docs/spec.md, "What the version switch changes") ----------------------
    @property
    def broker_error_reads_as_no_offset(self) -> bool:
        """readOffset (RebalanceMixin._compute_pull_from_where): ``readOffset(READ_FROM_STORE)`` maps every broker error
        code (MQBrokerException) to -1, "no offset", in 4.9.8; from 5.0.0 (commit b6ff649291) only QUERY_NOT_FOUND
        (OffsetNotFoundException) gives -1 and any other code gives -2, a failed read [RMQ-14]."""
        return self.version == V4_9_8

    @property
    def read_error_throws(self) -> bool:
        """computePullFromWhere (RebalanceMixin._compute_pull_from_where): ``computePullFromWhereWithException`` returns
        -1 on a failed read (-2) in 4.9.8; from 5.0.0 it throws MQClientException, which 5.x's rebalance catches in
        ``computePullFromWhere`` (the rebalance's pq table update, RebalanceMixin._update_process_queue_table): either
        way the queue gets no pq this round."""
        return self.version != V4_9_8

    @property
    def young_queue_needs_head_in_memory(self) -> bool:
        """the offset query's answer (broker_rules.query_consumer_offset): a group with no offset is told 0 when the
        queue is young. 4.9.8 tests ``!checkInDiskByConsumeOffset(0)``, true for an empty queue; 5.1.0+ (commit
        3949f6938e) tests ``checkInMemByConsumeOffset(0, 1)``, false for an empty queue, which is then NOT_FOUND. The
        5.x client sends no setZeroIfNotFound (5.0.0 sent false; 5.1.0 dropped it, d5e6fb6634) [RMQ-15]."""
        return self.version != V4_9_8

    @property
    def orderly_locks_in_broadcasting(self) -> bool:
        """orderly BROADCASTING's locks (ClientLocksMixin): a 4.9.8 orderly BROADCASTING consumer still locks each queue
        it adds (``isOrder`` is passed through) and skips a queue whose lock fails, but never renews; 5.3.2 (commit
        2956f6d46b) takes no locks in BROADCASTING."""
        return self.version == V4_9_8

    @property
    def offset_illegal_fixed_at_once(self) -> bool:
        """the pull-status handling (PullMixin._receive_pull): 4.9.8 corrects an OFFSET_ILLEGAL queue 10 s later with a
        plain overwrite (``executeTaskLater``), leaving the queue to the next periodic rebalance; 5.2.0
        (apache/rocketmq#7645) corrects at once with ``updateAndFreezeOffset`` and calls ``rebalanceImmediately``."""
        return self.version != V4_9_8

    @property
    def server_side_reset(self) -> bool:
        """the 4.9.8 reset (AdminResetMixin)/the 5.x reset (AdminResetMixin) (admin reset): 4.9.8's broker computes the
        targets and pushes RESET_CONSUMER_CLIENT_OFFSET to the clients, which apply it after a 10 s sleep; from 5.1.0 a
        broker with ``useServerSideResetOffset`` (default true from 5.2.0) rewrites its own table, remembers a pending
        reset, ignores UPDATE_CONSUMER_OFFSET for that queue meanwhile, and answers the next pull with OFFSET_RESET
        (PULL_OFFSET_MOVED) (RIP-48, commit d663bcf6aa)."""
        return self.version != V4_9_8

    @property
    def orderly_removal_waits_for_consume_lock(self) -> bool:
        """the orderly removal (OrderlyConsumeMixin._remove_orderly) (orderly consume loop): 4.9.8's
        removeUnnecessaryMessageQueue persists and removes the offset first, then needs the consume lock (1 s tryLock)
        to unlock, delaying the unlock 20 s when messages are cached; 5.2.0 (commit 59e8f9b66e, 5.x) persists, then
        needs the write lock (500 ms) or forces the removal once the pq's lock is 20 s old, and unlocks at once."""
        return self.version == V4_9_8

    @property
    def lock_all_skips_dropped(self) -> bool:
        """the client lock calls (ClientLocksMixin._lock) (orderly consume loop): 5.x's lockAll and unlockAll build
        their batches from the pqs that are not dropped (``buildProcessQueueTableByBrokerName``, every 5.x tag); 4.9.8's
        take every key of the table, so a pq an orderly removal left dropped keeps its lock renewed."""
        return self.version != V4_9_8

    @property
    def orderly_forward_counts_the_send(self) -> bool:
        """checkReconsumeTimes (OrderlyConsumeMixin._orderly_finish) (orderly consume loop): the message an orderly
        consumer forwards at maxReconsumeTimes carries RECONSUME_TIME = reconsumeTimes in 4.9.8, reconsumeTimes + 1 from
        5.1.1 (commit 7cfffe7f48, apache/rocketmq#6163)."""
        return self.version != V4_9_8

    @property
    def slave_serves_pulls(self) -> bool:
        """the broker's pull handler (BrokerMixin._broker_receive) (slaves): a 4.9.8 slave serves pulls (its
        PULL_RETRY_IMMEDIATELY for slaveReadEnable = false is overwritten by the status switch); from 5.0.0
        ``PullMessageProcessor#rejectRequest`` refuses every pull on a slave with slaveReadEnable = false (SYSTEM_BUSY),
        which the client takes as an exception (3 s)."""
        return self.version == V4_9_8

    @property
    def slave_sync_times(self) -> tuple[int, int]:
        """SlaveSync (SlaveMixin._slave_sync) (slaves): (first, period) of the slave's offset sync in ms. 4.9.8
        schedules syncAll at 3 s, then every 10 s; 5.0.0 runs a 3 s task from 10 s that syncs only when more than 60 s
        passed since the last sync (or since the controller was built): at 61 s, then every 63 s."""
        return (3_000, 10_000) if self.version == V4_9_8 else (61_000, 63_000)

    @property
    def rebalance_paced(self) -> bool:
        """RebalanceService (RebalanceMixin._rebalance), the rebalance's pq table update
        (RebalanceMixin._update_process_queue_table): 4.9.8's RebalanceService runs ``doRebalance`` whenever it is woken
        and waits 20 s after each, and new pqs pull at once. 5.x's waits at least minInterval (1 s) after the last
        rebalance, counted from its construction, so the first rebalance comes 1 s after start, and waits 20 s after a
        balanced result but 1 s after an unbalanced one (5.2.0, 59e8f9b66e); new pqs' first pulls are dispatched 500 ms
        later (5.0.0)."""
        return self.version != V4_9_8

    @property
    def send_back_skips_cleaned(self) -> bool:
        """processConsumeResult (ConcurrentConsumeMixin._finish_consume), cleanExpiredMsg
        (ConcurrentConsumeMixin._clean_expired_msg): from 5.1.0 (commit c217d8bb80, apache/rocketmq#5481)
        processConsumeResult skips the send-back of a failed message that is no longer in its pq (``containsMessage``:
        cleanExpiredMsg already sent it back and removed it); 4.9.8 sends it back a second time."""
        return self.version != V4_9_8

    @property
    def retry_topic(self) -> str:
        return "%RETRY%" + self.group

    @property
    def dlq_topic(self) -> str:
        return "%DLQ%" + self.group

    @property
    def has_retry_queue(self) -> bool:
        """CLUSTERING push consumers also subscribe to %RETRY%<group> (the retry topic subscription,
        ConcurrentConsumeMixin)."""
        return self.mode == CLUSTERING

    @property
    def queue_count(self) -> int:
        """Queues the model tracks: the topic's, plus the retry topic's one queue in CLUSTERING."""
        return self.queues + (1 if self.has_retry_queue else 0)

    @classmethod
    def from_mapping(cls, values: dict[str, object], where: str = "config") -> Config:
        """Build a Config from parsed JSON/TOML, naming unknown keys and wrong types."""
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ConfigError(f"{where}: unknown field(s) {unknown}; accepted: {sorted(known)}")
        converted: dict[str, object] = {}
        for key, value in values.items():
            _check_json_type(where, key, str(known[key].type), value)
            if key in ("tags", "subscription", "consumeridcs", "consumer_rooms") and isinstance(value, list):
                value = tuple(value)
            if key == "allocate_config_queues" and isinstance(value, list):
                value = tuple(tuple(v) if isinstance(v, list) else v for v in value)
            if key == "mutations" and isinstance(value, list):
                value = frozenset(value)
            converted[key] = value
        try:
            return cls(**converted)  # type: ignore[arg-type]
        except TypeError as err:
            raise ConfigError(f"{where}: {err}") from None
        except ConfigError as err:  # a value out of range (__post_init__): name the file as well as the field
            raise ConfigError(f"{where}: {err}") from None


# The JSON shape each Config annotation accepts in from_mapping: (test, what is accepted). The
# annotations are strings (``from __future__ import annotations``); a field whose annotation is not
# listed here is left to __post_init__. JSON has no tuples or sets, so arrays stand for both.
def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_strings(v: object) -> bool:
    return isinstance(v, (list, tuple)) and all(isinstance(t, str) for t in v)


def _is_int_lists(v: object) -> bool:
    return isinstance(v, (list, tuple)) and all(isinstance(x, (list, tuple)) and all(map(_is_int, x)) for x in v)


_JSON_TYPES: Final[dict[str, tuple[Callable[[object], bool], str]]] = {
    "int": (_is_int, "an integer (not true/false, not a decimal)"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
    "str": (lambda v: isinstance(v, str), "a string"),
    "str | None": (lambda v: v is None or isinstance(v, str), "a string or null"),
    "tuple[str, ...]": (_is_strings, "an array of strings"),
    "tuple[str, ...] | None": (lambda v: v is None or _is_strings(v), "an array of strings or null"),
    "tuple[tuple[int, ...], ...] | None": (
        lambda v: v is None or _is_int_lists(v),
        "an array of arrays of integers, or null",
    ),
    "frozenset[str]": (_is_strings, "an array of strings"),
}


def _check_json_type(where: str, name: str, annotation: str, value: object) -> None:
    rule = _JSON_TYPES.get(annotation)
    if rule is not None and not rule[0](value):
        try:
            shown = json.dumps(value)
        except (TypeError, ValueError):  # not from JSON: a Python caller's object
            shown = repr(value)
        shown = shown if len(shown) <= 80 else shown[:77] + "..."
        kind = _JSON_NAMES.get(type(value), type(value).__name__)
        raise ConfigError(f"{where}: {name}: got {shown} ({kind}); accepted: {rule[1]}")


_JSON_NAMES: Final[dict[type, str]] = {
    dict: "an object",
    list: "an array",
    tuple: "an array",
    str: "a string",
    bool: "a boolean",
    int: "an integer",
    float: "a number",
    type(None): "null",
}


def _check_range(name: str, value: object, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(f"{name}: got {value!r}; accepted: an integer from {low} to {high}")


def _check_choice(name: str, value: object, accepted: tuple[str, ...]) -> None:
    if value not in accepted:
        raise ConfigError(f"{name}: got {value!r}; accepted: {', '.join(accepted)}")


def _check_allocation(c: Config) -> None:
    """The parameters of CONFIG, MACHINE_ROOM and MACHINE_ROOM_NEARBY (the allocation strategies,
    allocation.allocate_queues): each must be given for its strategy and None for every other, so that no setting is
    silently ignored."""
    owners = {
        "allocate_config_queues": CONFIG,
        "consumeridcs": MACHINE_ROOM,
        "nearby_inner": MACHINE_ROOM_NEARBY,
        "consumer_rooms": MACHINE_ROOM_NEARBY,
        "broker_room": MACHINE_ROOM_NEARBY,
    }
    for name, owner in owners.items():
        value = getattr(c, name)
        if owner != c.strategy and value is not None:
            raise ConfigError(f"{name}: got {value!r}; accepted: None unless strategy is {owner} (it is {c.strategy})")
    if c.strategy == CONFIG:
        lists, top = c.allocate_config_queues, c.queue_count - 1
        if not (
            isinstance(lists, tuple)
            and len(lists) == c.consumers
            and all(
                isinstance(qs, tuple) and len(set(qs)) == len(qs) and all(type(q) is int and 0 <= q <= top for q in qs)
                for qs in lists
            )
        ):
            retry = f"; {c.queues} is the retry queue" if c.has_retry_queue else ""
            raise ConfigError(
                f"allocate_config_queues: got {lists!r}; accepted: for strategy CONFIG, one tuple per consumer "
                f"({c.consumers}) of distinct queue indices from 0 to {top}{retry}"
            )
    if c.strategy == MACHINE_ROOM:
        idcs = c.consumeridcs
        if idcs is not None and not (isinstance(idcs, tuple) and all(isinstance(r, str) for r in idcs)):
            raise ConfigError(
                f"consumeridcs: got {idcs!r}; accepted: for strategy MACHINE_ROOM, a tuple of room names, "
                "or None (never set: a NullPointerException once a broker is named '<room>@<name>')"
            )
    if c.strategy == MACHINE_ROOM_NEARBY:
        if c.nearby_inner not in NEARBY_INNER_STRATEGIES:
            raise ConfigError(
                f"nearby_inner: got {c.nearby_inner!r}; accepted: for strategy MACHINE_ROOM_NEARBY, "
                + ", ".join(NEARBY_INNER_STRATEGIES)
            )
        rooms = c.consumer_rooms
        if not (
            isinstance(rooms, tuple) and len(rooms) == c.consumers and all(isinstance(r, str) and r for r in rooms)
        ):
            raise ConfigError(
                f"consumer_rooms: got {rooms!r}; accepted: for strategy MACHINE_ROOM_NEARBY, one non-empty room "
                f"name per consumer ({c.consumers})"
            )
        if not (isinstance(c.broker_room, str) and c.broker_room):
            raise ConfigError(
                f"broker_room: got {c.broker_room!r}; accepted: for strategy MACHINE_ROOM_NEARBY, a non-empty room name"
            )
