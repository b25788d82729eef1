"""The model's state: an immutable, hashable value that every action maps to a new value.

Everything is a ``NamedTuple`` of ints, bools and tuples, so a state's canonical form is its value
and hashing is cheap. Two states are equal when every field is, including the identities the
model mints (pq uids, request ids) and the ghost counters; only the history is left out. Queues are
numbered: ``0 .. queues-1`` are the topic's queues in MessageQueue order, and in CLUSTERING the
last index is the single queue of ``%RETRY%<group>``. Per-queue tables are tuples indexed by that
number, with ``None`` for "no entry". Sets of offsets are bitmasks (bit ``o`` set means offset
``o``), which keeps the ProcessQueue tree and the ghost ledgers fast and hashable.

Ghost fields (``Ghost``, ``State.history``) record what happened so that invariants can speak about
the past; no action reads them to decide what to do.
"""

from __future__ import annotations

from typing import Any, NamedTuple

# Pull-request life cycle of a ProcessQueue (pullMessage (PullMixin._send_pull), the pull-status handling
# (PullMixin._receive_pull)).
PULL_READY = 0  # a PullRequest waits in the executor; SendPull may run once now >= pull_ready_at
PULL_IN_FLIGHT = 1  # the request is on the wire or held by the broker; its reply is pending
PULL_DROPPED = 2  # OFFSET_ILLEGAL dropped the pq and its PullRequest; it waits for its fix (the pull-status handling,
# PullMixin._receive_pull)


class Message(NamedTuple):
    """One message in a broker queue (the pull statuses, broker_rules.pull_result). ``origin`` is (topic queue, offset)
    of the message first produced; a retry-topic message keeps its origin and counts its reconsumeTimes."""

    origin: tuple[int, int]
    tag: str
    store_time: int
    reconsume_times: int = 0
    sent_back_at: int = 0  # ghost: when the send-back that created a retry message happened


class BrokerQueue(NamedTuple):
    """A consume queue: readable range [min_offset, len(messages)) (the pull statuses,
    broker_rules.pull_result)."""

    messages: tuple[Message, ...]
    head_hot: bool  # is message 0 still in page cache? Decides the young-queue answer (the offset query's answer,
    # broker_rules.query_consumer_offset)
    min_offset: int = 0

    @property
    def max_offset(self) -> int:
        return len(self.messages)


class Scheduled(NamedTuple):
    """A sent-back message waiting in SCHEDULE_TOPIC_XXXX for its delay level (step 8 of the broker's send-back,
    ConcurrentConsumeMixin._goes_to_dlq)."""

    due: int
    message: Message


class Broker(NamedTuple):
    """A broker: the master (``State.broker``) with its queues, ConsumerOffsetManager table and flushed
    file, or its slave (``State.slave``), whose queues are its copy of the master's commit log."""

    up: bool
    queues: tuple[BrokerQueue, ...]
    offsets: tuple[int | None, ...]  # ConsumerOffsetManager memory, "T@G" per queue (the broker's offset table,
    # BrokerMixin)
    flushed: tuple[int | None, ...]  # consumerOffset.json as last written by the flush timer (the broker's flush,
    # BrokerMixin._broker_flush)
    next_flush: int | None  # flushConsumerOffsetInterval timer; None while the broker is down
    registered: frozenset[int]  # consumer channels of the group, by client index (what triggers a rebalance,
    # RebalanceMixin)
    scheduled: tuple[Scheduled, ...]  # in due order
    dlq: tuple[Message, ...]  # %DLQ%<group>
    epoch: int = 0  # counts crashes: a pull the broker accepted in an older epoch fails
    # orderly: RebalanceLockManager's table for the group, per queue (client, lastUpdateTimestamp)
    # or None (the broker lock table, orderly.try_lock_batch); memory only, so a crash empties it. () when the consumer
    # is not orderly.
    locks: tuple[tuple[int, int] | None, ...] = ()
    # admin reset: 5.x resetOffsetTable, the pending server-side reset per queue (the 5.x reset, AdminResetMixin);
    # memory only. () means none pending anywhere.
    reset_pending: tuple[int | None, ...] = ()
    # Stall: per client, when its channel's lastUpdateTimestamp was last set by a heartbeat (the broker's timers,
    # BrokerMixin); kept only when stalls are configured (the idle-channel scan matters only then). () otherwise.
    heartbeat_at: tuple[int, ...] = ()
    # CorruptOffsetFile: consumerOffset.json.bak, the table the flush before the last wrote (the broker's flush
    # (BrokerMixin._broker_flush), the broker's load (BrokerMixin._broker_restart)); None when there is no readable
    # .bak. Kept only when corruptions are configured.
    bak: tuple[int | None, ...] | None = None
    main_unreadable: bool = False  # CorruptOffsetFile: consumerOffset.json holds garbage until the next flush
    next_sync: int | None = None  # slaves: the slave's SlaveSynchronize timer (SlaveSync, SlaveMixin._slave_sync); None
    # on the master


class ProcessQueue(NamedTuple):
    """ProcessQueue of one owned queue plus its PullRequest cursor (R6.1, pullMessage, PullMixin._send_pull).

    ``tree`` is msgTreeMap as a bitmask of offsets; the counters are kept separately, as in
    RocketMQ, so that INV-1 can check they agree.
    """

    uid: int  # unique per client: a ProcessQueue object identity
    tree: int
    msg_count: int
    msg_size: int
    queue_offset_max: int
    next_offset: int  # PullRequest.nextOffset
    pull_state: int  # PULL_READY or PULL_IN_FLIGHT
    pull_ready_at: int  # when the executor runs the next pullMessage (the pull-status handling
    # (PullMixin._receive_pull) delays)
    # orderly consumption (the expiry predicates (PullMixin.pull_expired), the client lock calls
    # (ClientLocksMixin._lock), step 6 of pullMessage (PullMixin._send_pull)); left at these defaults when the consumer
    # is not orderly
    locked: bool = False  # pq.locked
    last_lock: int = 0  # pq.lastLockTimestamp; isLockExpired() is now - last_lock > 30 s
    previously_locked: bool = False  # PullRequest.previouslyLocked: the first locked pull re-read the offset
    # --- pull expiry and OFFSET_ILLEGAL ---
    last_pull: int = 0  # lastPullTimestamp: creation, then every pullMessage run (step 2 of pullMessage
    # (PullMixin._send_pull), the expiry predicates (PullMixin.pull_expired))
    # --- orderly consume loop (the orderly ProcessQueue helpers and the orderly consume loop, OrderlyConsumeMixin);
    # defaults when the consumer is not orderly ---
    consuming_tree: int = 0  # consumingMsgOrderlyTreeMap as a bitmask; msgCount counts it too (the msgCount accounting,
    # ConcurrentConsumeMixin)
    consuming: bool = False  # pq.consuming: set by a dispatching putMessage, cleared by an empty take (putMessage
    # (PullMixin._receive_pull), the orderly ProcessQueue helpers (OrderlyConsumeMixin))
    dropped: bool = False  # dropped, yet still in processQueueTable: orderly removal failed (the orderly removal,
    # OrderlyConsumeMixin._remove_orderly)
    retry_times: tuple[tuple[int, int], ...] = ()  # (offset, local reconsumeTimes) raised by a suspend
    # (checkReconsumeTimes, OrderlyConsumeMixin._orderly_finish)
    # --- cleanExpiredMsg (ConcurrentConsumeMixin._clean_expired_msg); () when the consumer is orderly
    # (it never cleans) --- (offset, CONSUME_START_TIME) of each held message whose listener has started, lowest offset
    # first: the property ConsumeRequest.run stamps on the message object in msgTreeMap (step 3 of ConsumeRequest.run,
    # ConcurrentConsumeMixin._deliver), kept until the message leaves the tree (a resubmitted request's message keeps
    # its first run's stamp until it runs again)
    consume_started: tuple[tuple[int, int], ...] = ()


class PullResult(NamedTuple):
    """What the broker answers a pull (the pull statuses, broker_rules.pull_result), as the client sees it (the
    pull-status handling, PullMixin._receive_pull)."""

    status: str
    found: tuple[int, ...]  # offsets handed to the client, in order
    next_begin: int


class PullInFlight(NamedTuple):
    """A pull that left the client. ``epoch`` is -1 while the request is on the wire, then the
    broker epoch that accepted it (-2: the connection broke first, so its reply is an exception).
    ``dropped_empty`` is set when its pq was dropped meanwhile, recording ``msgCount == 0`` at
    drop time, which correctTagsOffset reads (what drops a pq, PullMixin)."""

    queue: int
    pq_uid: int
    offset: int
    epoch: int
    dropped_empty: bool | None
    result: PullResult | None  # fixed when the broker answers at once; None while held (the broker's pull handler,
    # BrokerMixin._broker_receive)
    dropped_consuming: bool = False  # orderly: pq.consuming at drop time, which a late FOUND's dispatch reads
    dropped_count: int = 0  # orderly: the detached pq's msgCount, which its running listener's commit lowers
    from_slave: bool = False  # slaves: sent to the slave (the master was down); a master crash leaves it alone


class ConsumeRequest(NamedTuple):
    """A ConsumeRequest of the concurrent service: messages as (offset, reconsumeTimes) (submitConsumeRequest,
    ConcurrentConsumeMixin._start_consume).

    Orderly (the orderly loop, OrderlyConsumeMixin._orderly_iterate): a submitted request names only its pq (``msgs ==
    ()``); while its listener runs (``Client.consuming``) it holds the taken batch, ``ready_at`` is when the listener
    was called and ``begin`` the run's beginTime (MAX_TIME_CONSUME_CONTINUOUSLY)."""

    rid: int
    queue: int
    pq_uid: int
    msgs: tuple[tuple[int, int], ...]
    ready_at: int
    begin: int = 0


class OffsetUpdate(NamedTuple):
    """The tail of processConsumeResult: removeMessage returned ``offset``; the consume thread has
    yet to check ``dropped`` and call updateOffset(increaseOnly=true) (processConsumeResult,
    ConcurrentConsumeMixin._finish_consume). Orderly: ``commit()`` returned ``offset``; the thread has yet to run
    updateOffset(increaseOnly=false) unless dropped, then the loop's next iteration of the run begun at ``begin`` (the
    orderly commit, OrderlyConsumeMixin._orderly_finish)."""

    rid: int
    queue: int
    pq_uid: int
    offset: int
    begin: int = 0


class Commit(NamedTuple):
    """UPDATE_CONSUMER_OFFSET sent oneway (updateConsumeOffsetToBroker (ConsumerProcessMixin._send_commit), persist(mq)
    (ConsumerProcessMixin._persist_one)); ``cause`` is ghost provenance."""

    queue: int
    offset: int
    pq_uid: int
    cause: str
    to_slave: bool = False  # slaves: the master was down when it was sent (updateConsumeOffsetToBroker,
    # ConsumerProcessMixin._send_commit)


class PullRequestMsg(NamedTuple):
    """PULL_MESSAGE with its piggy-backed commit (the piggy-backed commit, PullMixin._piggyback_offset):
    ``commit_offset`` is applied by the broker only when ``commit_flag`` is set (the broker's pull handler,
    BrokerMixin._broker_receive)."""

    queue: int
    pq_uid: int
    offset: int
    commit_flag: bool
    commit_offset: int
    to_slave: bool = False  # slaves: the master was down; the flag is then clear (the pull's sysFlag,
    # PullMixin._send_pull)


class OffsetFix(NamedTuple):
    """Fidelity: the task 4.9.8's OFFSET_ILLEGAL path schedules 10 s ahead (the pull-status handling,
    PullMixin._receive_pull): for ``queue`` it will updateOffset(``offset``, increaseOnly=false), persist and
    removeProcessQueue. ``pq_uid`` is the pq the pull result dropped (provenance; the task itself acts on whatever the
    table holds)."""

    queue: int
    pq_uid: int
    offset: int
    due: int
    live: bool  # ghost: was that pq still in the table when the result arrived? (INV-17)


class Client(NamedTuple):
    """One consumer process (DefaultMQPushConsumer with its MQClientInstance)."""

    running: bool
    mem: tuple[int | None, ...]  # OffsetStore in-memory table (R1.4)
    file: tuple[int | None, ...]  # LocalFileOffsetStore file (BROADCASTING); survives crashes
    pqs: tuple[ProcessQueue | None, ...]  # processQueueTable
    pulls: tuple[PullInFlight, ...]
    requests: tuple[ConsumeRequest, ...]  # submitted, not yet running
    consuming: tuple[ConsumeRequest, ...]  # listener running
    offset_updates: tuple[OffsetUpdate, ...]  # removeMessage done, updateOffset not yet run
    channel: tuple[Commit | PullRequestMsg, ...]  # FIFO to the broker, survives the process
    next_persist: int | None  # persistAllConsumerOffset timer (the client timers, ConsumerProcessMixin)
    next_rebalance: int | None  # RebalanceService wait (RebalanceService, RebalanceMixin._rebalance)
    next_heartbeat: int | None  # heartbeat timer (the client timers, ConsumerProcessMixin)
    rebalance_requested: bool  # rebalanceImmediately() was called (what triggers a rebalance, RebalanceMixin)
    view: tuple[int, ...] | None  # cidAll of the last rebalance that placed every allocated queue
    seq: int  # mints pq uids and request ids
    next_lock_all: int | None = None  # orderly: lockMQPeriodically timer, CLUSTERING only (the lockAll timer,
    # ClientLocksMixin._lock_all)
    offset_fixes: tuple[OffsetFix, ...] = ()  # 4.9.8 OFFSET_ILLEGAL tasks waiting 10 s (the pull-status handling,
    # PullMixin._receive_pull)
    # admin reset (4.9.8 client-driven, the 4.9.8 reset, AdminResetMixin)
    paused: bool = False  # DefaultMQPushConsumerImpl.pause, set by resetOffset's suspend()
    reset_inbox: tuple[tuple[int, int], ...] = ()  # RESET_CONSUMER_CLIENT_OFFSET on the wire: (queue, offset)
    reset_table: tuple[tuple[int, int], ...] = ()  # the table of the reset that sleeps now
    reset_wake: int | None = None  # end of resetOffset's 10 s sleep
    reset_held: tuple[tuple[int, int], ...] = ()  # (queue, pq uid): dropped pqs still in processQueueTable
    # orderly consume loop (the orderly loop (OrderlyConsumeMixin._orderly_iterate), the orderly removal
    # (OrderlyConsumeMixin._remove_orderly)) and the stop-the-world fault
    relocks: tuple[tuple[int, int, int], ...] = ()  # tryLockLaterAndReconsume tasks: (pq uid, queue, due)
    unlocks: tuple[tuple[int, int], ...] = ()  # 4.9.8 unlockDelay tasks: (queue, due)
    stalled_until: int | None = None  # Stall: the JVM is paused until then (GC, suspended VM)
    dead_tasks: tuple[str, ...] = ()  # TaskDies: background tasks gone until the process restarts
    # CorruptLocalOffsetFile (BROADCASTING): offsets.json.bak (None: unreadable; all None: missing or empty)
    # and whether the main file holds garbage until the next write (readLocalOffset
    # (FaultsMixin._corrupt_local_offset_file), string2File (ConsumerProcessMixin._write_file), a corrupt offset file's
    # aftermath (FaultsMixin)). Kept only when local corruptions are configured.
    file_bak: tuple[int | None, ...] | None = None
    file_main_unreadable: bool = False
    last_rebalance: int = 0  # 5.x RebalanceService.lastRebalanceTimestamp (RebalanceService,
    # RebalanceMixin._rebalance): construction, then each rebalance
    next_clean: int | None = None  # cleanExpireMsg timer of ConsumeMessageConcurrentlyService (cleanExpiredMsg,
    # ConcurrentConsumeMixin._clean_expired_msg); None if orderly
    # orderly listeners still running after this consumer's Shutdown: shutdownNow interrupts, the listener
    # ignores it, and unlockAll has released the queue at the broker (step 1 of the shutdown order
    # (ConsumerProcessMixin._shutdown), orderly BROADCASTING's locks (ClientLocksMixin)). They end at OrphanReturns or
    # with the JVM (Crash); a later Start is a new consumer beside them.
    orphaned: tuple[ConsumeRequest, ...] = ()
    # BROADCASTING: a persistAll of the timer thread between its merge and its string2File (docs/spec.md, "What is real,
    # ranked"): the file it read and the table it will write. Other writers may write offsets.json meanwhile;
    # OffsetFileWriteLands.
    file_write_pending: tuple[tuple[int | None, ...], tuple[int | None, ...]] | None = None


class Ghost(NamedTuple):
    """History summaries for invariants. Ledgers are indexed ``ledger * queue_count + queue``:
    one ledger for the group in CLUSTERING, one per client in BROADCASTING."""

    delivered: tuple[int, ...]  # offsets handed to a listener
    handled: tuple[int, ...]  # offsets whose last handling succeeded or was sent back
    skipped: tuple[int, ...]  # declared skips: positioning, filtered tags, broadcast failure drops
    last_writer: tuple[int | None, ...]  # per queue: pq key of the commit that landed last
    flushed_writer: tuple[int | None, ...]  # last_writer as of the last flush
    deliveries: int
    redeliveries: int
    lock_table_lost_at: int = -1  # orderly: when a broker crash last emptied the lock table (INV-12a)
    # admin reset: per queue, () meaning all None. reset_expect is (expected first
    # offset, pq keys that existed at completion, the resetting client's own among them) while INV-18
    # waits for the first batch of a newer pq; reset_targets is a bitmask of every target an admin reset
    # of the queue named (INV-8r).
    reset_expect: tuple[tuple[int, tuple[int, ...], tuple[int, ...]] | None, ...] = ()
    reset_targets: tuple[int, ...] = ()
    # orderly consume loop: per client, () meaning none, when it last stalled (a timing margin broke for
    # it); INV-12 tolerates an overlap of listeners one of whose clients stalled within 30 s before the
    # older began, or after (a broker crash: lock_table_lost_at)
    stalled_at: tuple[int, ...] = ()
    bak_writer: tuple[int | None, ...] = ()  # CorruptOffsetFile: flushed_writer as of the .bak's flush
    # per queue, () meaning none: when an unlock released a lock that a live belief or a running listener
    # of the same clientId still relied on (4.9.8's late unlockDelay, 5.x's forced removal, a sharer of a
    # clientId; docs/spec.md, section orderly_consume). INV-12a and INV-12 tolerate what follows unless
    # Model.tolerate_stale_unlock is off.
    stale_unlocks: tuple[int, ...] = ()
    # orderly consume loop: pq keys whose memory offset was set by something other than their own commits:
    # correctTagsOffset raising it (what drops a pq, PullMixin), or the first locked pull's re-read (step 6 of
    # pullMessage, PullMixin._send_pull) overwriting it; a later increaseOnly=false write may then land below: INV-8's
    # declared "orderly-overwrite"
    raised_by_tags: frozenset[int] = frozenset()
    # slaves: per queue, () meaning no slave: the pq key of the commit that landed last on the slave, or
    # SLAVE_SYNC_WRITER (-2) when SlaveSync wrote it, for INV-8s's stale-owner cause on the slave's table
    slave_last_writer: tuple[int | None, ...] = ()
    # The causal allow-list (docs/spec.md, "Allowed anomalies, each with its cause"): the facts a tolerated anomaly must
    # point to. committed: bitmask over ledger indices (ledger * queue_count + queue): a commit of that ledger's offset
    # ever landed (on the master or the slave, an admin write, or a BROADCASTING consumer's offset file). A group
    # positioned by consumeFromWhere on such a queue is not on its first start (INV-9a).
    committed: int = 0
    # offset_lost: per ledger index, "" for none (() when nothing was ever lost): the fault that removed a
    # stored offset since the last commit of it landed ("broker-crash": landed but never flushed, the broker's flush
    # (BrokerMixin._broker_flush); "corrupt-offset-file": the .bak lacks it, the broker's load
    # (BrokerMixin._broker_restart); "corrupt-local-offset-file", a corrupt offset file's aftermath (FaultsMixin);
    # "file-write-race": a lagging persistAll wrote over the entry another writer had added to offsets.json,
    # docs/spec.md, "What is real, ranked").
    offset_lost: tuple[str, ...] = ()
    # starts: (pq key, start offset, how) of every pq positioned, in creation order; "how" is the source of
    # the position: "stored-offset", "stored-offset-on-slave", "young-queue-zero" (the offset query's answer,
    # broker_rules.query_consumer_offset), "consume-from-first", "consume-from-last", "consume-from-timestamp"
    # (computePullFromWhere and the start without an offset, RebalanceMixin._compute_pull_from_where). INV-8r's
    # stale-owner cause reads it.
    starts: tuple[tuple[int, int, str], ...] = ()
    # readers: per queue, () meaning none: the pq keys that read the master's current value of the queue as
    # their start (readOffset and computePullFromWhere, RebalanceMixin._compute_pull_from_where) since it landed. A
    # commit from one of them below that value is not the race of last-writer-wins: that pq knew the value it undercuts
    # (INV-8r).
    readers: tuple[frozenset[int], ...] = ()
    # per client * queue_count + queue, () meaning all 0: what the current pq of that client and queue
    # received in pull results (INV-22) and handed its listener (the local-retry redelivery cause)
    received: tuple[int, ...] = ()
    listened: tuple[int, ...] = ()
    # redeliveries per cause, sorted (cause, count): "local-retry" (the same pq hands a message to its listener
    # again: a failed send-back, processConsumeResult (ConcurrentConsumeMixin._finish_consume); an orderly suspend or
    # rollback, the orderly commit and checkReconsumeTimes (OrderlyConsumeMixin._orderly_finish)) or "resumed-at-<how>"
    # (a new pq resumed below what an earlier one had delivered: the unpersisted window)
    redelivery_causes: tuple[tuple[str, int], ...] = ()
    # skips: (ledger index, cause, offsets) of every declared skip other than tag filtering and retention:
    # positioning ("consume-from-last: first-start", "consume-from-last: broker-crash", ...), an admin reset's
    # target, a BROADCASTING consumer's failed message (processConsumeResult, ConcurrentConsumeMixin._finish_consume).
    # Message fates name these causes.
    skips: tuple[tuple[int, str, int], ...] = ()
    # overtaken: per queue, () meaning all None: (client, request) when the master's current value of the queue
    # was landed by a request that overtook ``request``, still the oldest on that client's connection
    # (BrokerReceive with overtakes=1: the broker's request pools, docs/spec.md, "Thread boundaries"). Cleared by every
    # other change of the value and when that request is lost (LoseCommit, ExpireChannel). When ``request`` then lands
    # below it, INV-8r's cause is "request-pool-reorder".
    overtaken: tuple[tuple[int, Commit | PullRequestMsg] | None, ...] = ()


class Budget(NamedTuple):
    """Remaining perturbations. Healing actions (start, restart, expiry) are never budgeted."""

    client_crashes: int
    client_shutdowns: int
    broker_crashes: int
    send_back_failures: int
    produces: tuple[int, ...]  # per topic queue
    query_errors: int = 0  # RebalanceQueryError (readOffset, RebalanceMixin._compute_pull_from_where)
    retention_deletes: int = 0  # RetentionDelete (the pull statuses, broker_rules.pull_result)
    admin_resets: int = 0  # AdminReset (the 4.9.8 reset and the 5.x reset, AdminResetMixin)
    client_stalls: int = 0  # orderly consume loop: Stall, a stop-the-world pause
    commit_losses: int = 0  # faults: LoseCommit
    view_faults: int = 0  # faults: RebalanceWithoutSelf
    task_deaths: int = 0  # faults: TaskDies
    offset_file_corruptions: int = 0  # faults: CorruptOffsetFile
    local_offset_file_corruptions: int = 0  # faults: CorruptLocalOffsetFile
    lagging_file_writes: int = 0  # PersistOffsets(client, lagging=1): offsets.json's unlocked writers (docs/spec.md,
    # "What is real, ranked")


class Event(NamedTuple):
    """One entry of the ghost history: a delivery or a commit, with its cause."""

    time: int
    kind: str  # "start", "deliver", "commit-sent", "commit-landed", "commit-lost", "position", "file-written"
    # the admin reset adds "admin-reset", "admin-write", "reset-completed", "commit-ignored",
    # "reset-overwritten"; their client is -1 when the admin acts
    client: int
    queue: int
    offset: int
    cause: str


class History:
    """The ghost history: a cons list (newest first), so appending is O(1) and shares structure.

    It takes no part in equality or hashing: two states that differ only in how they were reached
    are the same state. That keeps the canonical form of a state its value.
    """

    __slots__ = ("event", "previous")

    def __init__(self, event: Event, previous: History | None) -> None:
        self.event = event
        self.previous = previous

    def __eq__(self, other: object) -> bool:
        return isinstance(other, History)

    def __hash__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return f"History(<{len(self.events())} events>)"

    def events(self) -> list[Event]:
        """Oldest first."""
        out: list[Event] = []
        node: History | None = self
        while node is not None:
            out.append(node.event)
            node = node.previous
        out.reverse()
        return out


def step_events(before: History | None, after: History | None) -> list[Event]:
    """The events a step added to the ghost history (``after`` extends ``before``), oldest first."""
    out: list[Event] = []
    node = after
    while node is not None and node is not before:
        out.append(node.event)
        node = node.previous
    out.reverse()
    return out


class State(NamedTuple):
    now: int
    broker: Broker
    clients: tuple[Client, ...]
    ghost: Ghost
    budget: Budget
    history: History | None  # ghost; ignored by == and hash
    slave: Broker | None = None  # slaves: the master's slave, always up (Config.slave)


def history_list(state: State) -> list[Event]:
    """The ghost history of ``state``, oldest first."""
    return [] if state.history is None else state.history.events()


def put_at(seq: tuple[Any, ...], index: int, value: Any) -> tuple[Any, ...]:
    """``seq`` with ``value`` at ``index`` (the model's one way of changing a tuple entry)."""
    return seq[:index] + (value,) + seq[index + 1 :]


def bit_offsets(mask: int) -> list[int]:
    """The offsets a bitmask holds, lowest first."""
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


def lowest_offset(mask: int) -> int:
    """The lowest offset a non-empty bitmask holds."""
    return (mask & -mask).bit_length() - 1


def pq_key(client: int, uid: int) -> int:
    """A group-wide identity for a ProcessQueue, used as commit provenance (INV-8)."""
    return uid * 16 + client  # at most 8 clients (config.consumers <= 8)
