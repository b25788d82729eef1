"""Refinement check: the RocketMQ-shaped reference implementation (``rmqspec.reference``) against the model.

The lockstep tests walk the model at random (``random.Random(seed)`` over ``Model.enabled``), apply
each action to both ``Model.step`` and ``ReferenceSystem.apply``, and require
``reference.abstract() == (state.now, state.broker, state.clients)`` after every step. A failure
prints the action sequence and the first field that differs.

The reference implements RocketMQ 4.9.8; where the model departs from it, a ``SpecCompat`` switch
makes the reference take the model's branch. The lockstep runs use every switch; a second group of
tests turns each switch off alone and shows that the check then finds a divergence (so each switch
marks a real disagreement, not dead code). Unit tests at the end state the rules the random walks
do not make obvious.
"""

from __future__ import annotations

import dataclasses
import logging
import random
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from rmqspec.properties.orderly_scenarios import wait_step
from rmqspec.properties.slave_scenarios import RMQ17_SCHEDULE, slave_config, slave_outage
from rmqspec.reference.broker import BrokerHost, ExpressionMessageFilter, GetMessageStatus, PullMessageProcessor
from rmqspec.reference.compat import SpecCompat
from rmqspec.reference.exceptions import MQClientException
from rmqspec.reference.fastjson_format import encode_client_offset_file
from rmqspec.reference.message import PROPERTY_ORIGIN_MESSAGE_ID, PROPERTY_RETRY_TOPIC, MessageExt
from rmqspec.reference.message_queue import MessageQueue, dlq_topic, retry_topic
from rmqspec.reference.mq_client_instance import MQClientInstance, TopicRouteData
from rmqspec.reference.mq_version import MQVersion
from rmqspec.reference.offset_store import ReadOffsetType
from rmqspec.reference.process_queue import ProcessQueue
from rmqspec.reference.protocol import (
    ConsumerSendMsgBackRequestHeader,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    PullSysFlag,
    QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader,
    RemotingCommand,
    RequestCode,
    ResetOffsetRequestHeader,
    ResponseCode,
    SendMessageRequestHeader,
    SubscriptionData,
    UpdateConsumerOffsetRequestHeader,
)
from rmqspec.reference.rebalance_impl import RebalancePushImpl
from rmqspec.reference.remote_broker_offset_store import RemoteBrokerOffsetStore
from rmqspec.reference.scheduler import DelayQueue, ScheduledExecutorService, SchedulerError, VirtualClock
from rmqspec.refinement.reference_system import (
    FileReadings,
    ReferenceActionError,
    ReferenceSystem,
    UnsupportedConfigError,
)
from rmqspec.spec import actions as act
from rmqspec.spec.config import FROM_FIRST, Config
from rmqspec.spec.invariants import Violation, check_state, check_step
from rmqspec.spec.model import Model
from rmqspec.spec.pull import PULL_MAX_IDLE_TIME
from rmqspec.spec.state import PULL_DROPPED, Commit, State, history_list

STEPS = 300
SEEDS = (0, 1, 2)

RETENTION: dict[str, Any] = {"retention_deletes": 4, "backlog": 2, "consume_from_where": "CONSUME_FROM_FIRST_OFFSET"}

# slaves: a slave, and two master crashes so that the walks spend time with the master down
SLAVE: dict[str, Any] = {"slave": True, "broker_crashes": 2}

# admin reset: 2 consumers x 2 queues, the default faults
RESET: dict[str, Any] = {"admin_resets": 3, "queues": 2, "messages_per_queue": 4}
# orderly consume loop: a backlog from offset 0, batches of 2, one local retry before the DLQ, forwards that
# may fail, and consumers that come and go
ORDERLY_LOOP: dict[str, Any] = {
    "orderly": True,
    "consumers": 3,
    "queues": 2,
    "messages_per_queue": 6,
    "backlog": 2,
    "consume_from_where": "CONSUME_FROM_FIRST_OFFSET",
    "max_reconsume_times": 2,
    "send_back_failures": 2,
    "consume_batch_size": 2,
    "client_crashes": 2,
    "client_shutdowns": 2,
}

CONFIGS: dict[str, dict[str, Any]] = {
    "clustering-avg": {},
    "clustering-avg-by-circle-3-consumers": {
        "strategy": "AVG_BY_CIRCLE",
        "consumers": 3,
        "client_crashes": 2,
        "broker_crashes": 2,
    },
    "clustering-consistent-hash": {"strategy": "CONSISTENT_HASH", "consumers": 3, "queues": 3},
    # R11.4: overlapping lists, a consumer with none, and the retry queue (index 3) listed for client 0,
    # so its pq is created in the topic's pass (R9.4 Phase B takes every listed queue, in MessageQueue order).
    "clustering-config-lists": {
        "strategy": "CONFIG",
        "consumers": 3,
        "queues": 3,
        "allocate_config_queues": ((0, 1, 3), (1, 2), ()),
    },
    # R11.5: the broker is in a listed room, so its queues are sliced; 4 + 1 queues over 3 consumers.
    "clustering-machine-room": {
        "strategy": "MACHINE_ROOM",
        "broker_name": "r1@broker-a",
        "consumeridcs": ("r1", "r2"),
        "consumers": 3,
        "client_crashes": 2,
    },
    # R11.5, R11.7: consumeridcs never set and a "<room>@<name>" broker: every allocation throws a
    # NullPointerException, and every rebalance leaves the (empty) pq table as it is.
    "clustering-machine-room-unset-idcs": {"strategy": "MACHINE_ROOM", "broker_name": "r1@broker-a"},
    # R11.6: client 0 shares the broker's room; when it is gone, clients 1 and 2 share the queues.
    "clustering-nearby": {
        "strategy": "MACHINE_ROOM_NEARBY",
        "nearby_inner": "AVG_BY_CIRCLE",
        "broker_room": "r1",
        "consumer_rooms": ("r1", "r2", "r2"),
        "consumers": 3,
        "client_crashes": 2,
        "client_shutdowns": 2,
    },
    "backlog-hot-head-batches": {"backlog": 2, "messages_per_queue": 5, "consume_batch_size": 2, "pull_batch_size": 3},
    "backlog-cold-head": {"backlog": 2, "backlog_head_hot": False, "messages_per_queue": 5},
    # FIRST: with LAST, walks that produce every message before the first rebalance consume nothing
    "tags-with-subscription": {
        "tags": ("A", "B"),
        "subscription": ("A",),
        "backlog": 3,
        "messages_per_queue": 6,
        "consume_from_where": "CONSUME_FROM_FIRST_OFFSET",
    },
    "dlq-after-one-retry": {"max_reconsume_times": 1, "send_back_failures": 2, "consume_batch_size": 2},
    "from-first-cold-backlog": {
        "consume_from_where": "CONSUME_FROM_FIRST_OFFSET",
        "backlog": 2,
        "backlog_head_hot": False,
    },
    "from-timestamp-cold-backlog": {
        "consume_from_where": "CONSUME_FROM_TIMESTAMP",
        "consume_timestamp": 0,
        "backlog": 3,
        "backlog_head_hot": False,
        "messages_per_queue": 6,
    },
    "from-timestamp-later": {"consume_from_where": "CONSUME_FROM_TIMESTAMP", "consume_timestamp": 20_000, "queues": 2},
    "broadcasting": {"mode": "BROADCASTING", "client_crashes": 2, "client_shutdowns": 2},
    "broadcasting-timestamp-cold-backlog": {
        "mode": "BROADCASTING",
        "backlog": 2,
        "backlog_head_hot": False,
        "consume_from_where": "CONSUME_FROM_TIMESTAMP",
        "consume_timestamp": 15_000,
    },
    "broadcasting-tags-from-first": {
        "mode": "BROADCASTING",
        "tags": ("A", "B"),
        "subscription": ("B",),
        "consume_from_where": "CONSUME_FROM_FIRST_OFFSET",
        "consumers": 3,
    },
    "one-queue-many-faults": {
        "consumers": 1,
        "queues": 1,
        "backlog": 2,
        "consume_from_where": "CONSUME_FROM_FIRST_OFFSET",
        "client_crashes": 3,
        "broker_crashes": 3,
        "client_shutdowns": 3,
    },
    # The version switch (docs/spec.md, "What the version switch changes"): the same walks under 5.x.
    # Empty queues at start reach the 5.1.0+ young-queue rule; query errors reach R2.3's 5.x mapping.
    "5x-clustering-query-errors": {"version": "5.x", "query_errors": 2, "consumers": 3, "client_crashes": 2},
    "5x-backlog-hot-and-cold": {"version": "5.x", "backlog": 1, "messages_per_queue": 4, "query_errors": 1},
    "5x-from-timestamp-cold-backlog": {
        "version": "5.x",
        "consume_from_where": "CONSUME_FROM_TIMESTAMP",
        "consume_timestamp": 0,
        "backlog": 3,
        "backlog_head_hot": False,
        "messages_per_queue": 6,
        "query_errors": 1,
    },
    "5x-broadcasting": {"version": "5.x", "mode": "BROADCASTING", "client_crashes": 2},
    # 4.9.8 with query errors: the reference follows the model onto RMQ-14's path (INV-15 fails there;
    # the lockstep check compares states only).
    "4.9.8-query-errors-from-first": {"query_errors": 2, "consume_from_where": "CONSUME_FROM_FIRST_OFFSET"},
    # orderly consumption (R8.1-R8.4, R8.9): broker locks, lockAll, lock-first rebalance and the first locked
    # pull's offset re-read, under both versions; crashes leave locks to expire, a broker crash loses them.
    "orderly-clustering": {"orderly": True, "consumers": 3, "client_crashes": 2, "broker_crashes": 2},
    "5x-orderly-clustering": {"orderly": True, "version": "5.x", "consumers": 3, "client_shutdowns": 2},
    "orderly-broadcasting": {"orderly": True, "mode": "BROADCASTING", "client_crashes": 2},
    "5x-orderly-broadcasting": {"orderly": True, "version": "5.x", "mode": "BROADCASTING"},
    # orderly consume loop (R8.5-R8.8): takes, commits that overwrite, suspends and local retries, forwards
    # to the DLQ (some failing), refused and forced removals, relocks, 4.9.8's delayed unlock, stalls. The
    # walks weight the loop's actions (ORDERLY_WEIGHTS) so that a listener is often still running when a
    # rebalance or a stall comes.
    "orderly-loop": {**ORDERLY_LOOP},
    "5x-orderly-loop": {**ORDERLY_LOOP, "version": "5.x"},
    "orderly-loop-stalls": {**ORDERLY_LOOP, "client_stalls": 3, "broker_crashes": 2},
    "5x-orderly-loop-stalls": {**ORDERLY_LOOP, "version": "5.x", "client_stalls": 3, "broker_crashes": 2},
    "orderly-loop-broadcasting": {**ORDERLY_LOOP, "mode": "BROADCASTING", "client_stalls": 1},
    "5x-orderly-loop-retention": {**ORDERLY_LOOP, "version": "5.x", "retention_deletes": 3},
    # autoCommit false (R8.6): SUCCESS holds the batch, COMMIT commits all held, ROLLBACK puts all back
    "orderly-loop-manual-commit": {**ORDERLY_LOOP, "orderly_auto_commit": False},
    "5x-orderly-loop-manual-commit": {**ORDERLY_LOOP, "version": "5.x", "orderly_auto_commit": False},
    # retention (R5.5, R5.7, R9.4): retention raises minOffset under a consumer positioned at 0, so pulls
    # get OFFSET_ILLEGAL; 4.9.8 corrects 10 s later (FixOffsetIllegal), 5.x at once, in both modes.
    "retention": {**RETENTION, "consumers": 3, "queues": 3, "client_crashes": 2, "broker_crashes": 2},
    "5x-retention": {**RETENTION, "version": "5.x", "consumers": 3, "queues": 3, "broker_crashes": 2},
    "retention-broadcasting": {**RETENTION, "mode": "BROADCASTING", "client_crashes": 2},
    "5x-retention-broadcasting": {**RETENTION, "mode": "BROADCASTING", "version": "5.x"},
    # admin reset (admin reset, R3.10a, R3.10b): resets by offset and by timestamp with the default
    # faults. 4.9.8: the push, suspend and 10 s sleep, the client's own persist and resume, the old method
    # when nobody is online; 5.x: the pending reset, ignored commits, the pull answered OFFSET_RESET.
    "admin-reset": {**RESET},
    "5x-admin-reset": {**RESET, "version": "5.x"},
    # faults: oneway commits lost on the wire (R2.5, R2.6); rebalances whose consumer list lacks the asker
    # (S7, R9.3, R11.0); consumer 1 sharing consumer 0's clientId (RMQ-11): one slice taken twice, one orphaned,
    # and (orderly) one broker lock held, and released, by both.
    "commit-losses": {"commit_losses": 3, "consumers": 2, "client_crashes": 1, "broker_crashes": 1},
    "view-faults": {"view_faults": 3, "consumers": 3, "client_crashes": 1},
    "duplicate-client-id": {
        "duplicate_client_id": True,
        "consumers": 3,
        "queues": 4,
        "client_crashes": 2,
        "view_faults": 2,
        "commit_losses": 2,
    },
    "5x-duplicate-client-id-orderly": {
        "duplicate_client_id": True,
        "version": "5.x",
        "orderly": True,
        "consumers": 3,
        "client_shutdowns": 2,
        "client_crashes": 1,
    },
    "orderly-loop-faults": {
        **ORDERLY_LOOP,
        "duplicate_client_id": True,
        "view_faults": 2,
        "commit_losses": 2,
        "client_stalls": 2,
    },
    # faults: background tasks that die (TaskDies) and an unreadable broker offset file (CorruptOffsetFile)
    "task-deaths": {"consumers": 3, "task_deaths": 3},
    "5x-task-deaths-orderly": {"consumers": 3, "task_deaths": 3, "orderly": True, "version": "5.x"},
    "task-deaths-broadcasting": {"mode": "BROADCASTING", "task_deaths": 2},
    "corrupt-offset-file": {
        "consumers": 2,
        "offset_file_corruptions": 1,
        "broker_crashes": 3,
        "backlog": 2,
        "consume_from_where": "CONSUME_FROM_FIRST_OFFSET",
    },
    "5x-corrupt-offset-file-orderly": {
        "consumers": 2,
        "offset_file_corruptions": 1,
        "broker_crashes": 3,
        "orderly": True,
        "version": "5.x",
    },
    "corrupt-local-offset-file": {
        "mode": "BROADCASTING",
        "local_offset_file_corruptions": 1,
        "client_crashes": 3,
        "backlog": 2,
        "consume_from_where": "CONSUME_FROM_FIRST_OFFSET",
    },
    "5x-corrupt-local-offset-file-orderly": {
        "mode": "BROADCASTING",
        "local_offset_file_corruptions": 1,
        "client_crashes": 3,
        "orderly": True,
        "version": "5.x",
    },
    # slaves (R2.4, R2.5, R3.4, R3.8, R5.3-R5.5, R9.3): a slave of the broker name; while the master is down,
    # pulls (flag cleared), offset queries, commits and consumer lists go to it; HA replication lags
    # (SlaveReplicate) and SlaveSynchronize copies the master's table (SlaveSync: 4.9.8 3 s/10 s, 5.x 61 s/63 s);
    # a 5.x slave rejects pulls; offsetCheckInSlave decides whether a lagging slave moves a consumer (RMQ-17).
    "slave": {**SLAVE, "consumers": 3, "client_crashes": 2},
    "5x-slave": {**SLAVE, "version": "5.x", "consumers": 3},
    "slave-broadcasting": {**SLAVE, "mode": "BROADCASTING", "client_crashes": 2},
    "5x-slave-broadcasting": {**SLAVE, "version": "5.x", "mode": "BROADCASTING"},
    "slave-retention": {**SLAVE, **RETENTION},
    "slave-offset-check-retention": {**SLAVE, **RETENTION, "offset_check_in_slave": True},
    "slave-faults": {**SLAVE, "consumers": 3, "commit_losses": 3, "view_faults": 3, "query_errors": 2},
}

ORDERLY_LOOP_CONFIGS = frozenset(name for name in CONFIGS if "orderly-loop" in name)
LOOP_SEEDS, LOOP_STEPS = 10, 500  # a listener outlasting a rebalance, or a relock, needs the longer walks
SLAVE_CONFIGS = frozenset(name for name in CONFIGS if CONFIGS[name].get("slave"))
SLAVE_SEEDS = 10  # slaves: the master must be down long enough for each slave path (5.x: seeds 6 and 8 of 0-9 land
# a commit on the slave once its paced rebalances delay the first consumption, R4.2); the walks are cheap

# What each configuration must have exercised over its seeds, beyond the common core (or instead of it).
CORE_ACTIONS = {"Start", "Rebalance", "SendPull", "BrokerReceive", "ReceivePull", "StartConsume", "FinishConsume"}
CORE_OVERRIDE: dict[str, set[str]] = {"clustering-machine-room-unset-idcs": {"Start", "Rebalance", "Heartbeat"}}
EXPECTED: dict[str, set[str]] = {
    "clustering-avg": {"ApplyConsumeOffset", "PersistOffsets", "BrokerFlush", "BrokerCrash", "Crash", "Shutdown"},
    "dlq-after-one-retry": {"DeliverScheduled", "dlq"},
    "broadcasting": {"ApplyConsumeOffset", "local-file-written"},
    "broadcasting-timestamp-cold-backlog": {"local-file-written"},
    "backlog-hot-head-batches": {"CoolQueueHead"},
    "5x-clustering-query-errors": {"query-error"},
    "5x-backlog-hot-and-cold": {"query-error", "CoolQueueHead"},
    "5x-from-timestamp-cold-backlog": {"query-error"},
    "5x-broadcasting": {"local-file-written"},
    "4.9.8-query-errors-from-first": {"query-error"},
    "orderly-clustering": {"LockAll"},  # orderly
    "orderly-loop": {"ApplyConsumeOffset", "suspend", "dlq", "removal-refused", "DelayedUnlock"},
    "5x-orderly-loop": {"ApplyConsumeOffset", "suspend", "dlq"},  # a refused 5.x removal: tests/test_orderly.py
    "orderly-loop-stalls": {"Stall", "TryLockLater", "suspend"},
    # TryLockLater: one seed in ten reached it before 5.x's pacing (R4.2), none of 80 since; the scripted
    # lockstep of tests/test_orderly.py::test_a_consumer_stalled_past_30_s_relocks_before_it_consumes covers it
    "5x-orderly-loop-stalls": {"Stall", "suspend"},
    "orderly-loop-broadcasting": {"ApplyConsumeOffset", "suspend", "dlq", "Stall"},
    "5x-orderly-loop-retention": {"RetentionDelete", "suspend"},
    "orderly-loop-manual-commit": {"ApplyConsumeOffset", "commit-of-earlier-batches", "rollback-of-earlier-batches"},
    "5x-orderly-loop-manual-commit": {"ApplyConsumeOffset", "commit-of-earlier-batches", "rollback-of-earlier-batches"},
    "5x-orderly-clustering": {"LockAll"},
    "retention": {"RetentionDelete", "FixOffsetIllegal"},  # retention and OFFSET_ILLEGAL
    "5x-retention": {"RetentionDelete", "offset-illegal-at-once"},
    "retention-broadcasting": {"RetentionDelete", "FixOffsetIllegal", "local-file-written"},
    "5x-retention-broadcasting": {"RetentionDelete", "offset-illegal-at-once"},
    # admin reset
    "admin-reset": {"ClientResetReceive", "ClientResetWake", "reset-by-offset", "reset-by-timestamp"},
    "5x-admin-reset": {
        "reset-by-offset",
        "reset-by-timestamp",
        "commit-ignored",
        "offset-illegal-at-once",
        "reset-taken-by-held-pull",
    },
    # faults
    "commit-losses": {"LoseCommit", "PersistOffsets"},
    "view-faults": {"RebalanceWithoutSelf"},
    "duplicate-client-id": {"RebalanceWithoutSelf", "LoseCommit", "duplicate-in-view"},
    "5x-duplicate-client-id-orderly": {"LockAll", "duplicate-in-view", "lock-shared-by-duplicate-id"},
    "orderly-loop-faults": {"LoseCommit", "RebalanceWithoutSelf", "Stall", "lock-shared-by-duplicate-id", "suspend"},
    "task-deaths": {"TaskDies"},
    "5x-task-deaths-orderly": {"TaskDies", "LockAll"},
    "task-deaths-broadcasting": {"TaskDies", "local-file-written"},
    "corrupt-offset-file": {"CorruptOffsetFile", "BrokerRestart"},
    "5x-corrupt-offset-file-orderly": {"CorruptOffsetFile"},
    "corrupt-local-offset-file": {"CorruptLocalOffsetFile", "local-file-written"},
    "5x-corrupt-local-offset-file-orderly": {"CorruptLocalOffsetFile"},
    # slaves (markers: run_lockstep and slave_marks)
    "slave": {
        "SlaveReplicate",
        "SlaveSync",
        "commit-landed-on-slave",
        "slave-sync",
        "slave-sync-master-down",
        "slave-pull-FOUND",
        "slave-held-pull-answered",
        "slave-start",
    },
    "5x-slave": {"SlaveSync", "commit-landed-on-slave", "slave-sync", "slave-pull-ERROR"},
    "slave-broadcasting": {"slave-pull-FOUND", "slave-channel-closed", "local-file-written"},
    "5x-slave-broadcasting": {"slave-pull-ERROR", "local-file-written"},
    "slave-retention": {"RetentionDelete", "FixOffsetIllegal", "slave-pull-NO_MATCHED_MSG"},
    "slave-offset-check-retention": {"RetentionDelete", "slave-pull-OFFSET_ILLEGAL"},
    "slave-faults": {"LoseCommit", "slave-commit-lost", "slave-listing-fault", "query-error", "slave-unregister"},
}


# --- lockstep machinery -------------------------------------------------------------------------------


def first_difference(reference: object, model: object, path: str = "state") -> str | None:
    """The first field (depth first) where the reference's abstraction and the model's state differ."""
    if type(reference) is not type(model):
        return f"{path}: reference {reference!r} != model {model!r}"
    if isinstance(model, tuple) and hasattr(model, "_fields"):
        for name in model._fields:
            found = first_difference(getattr(reference, name), getattr(model, name), f"{path}.{name}")
            if found:
                return found
        return None
    if isinstance(model, tuple):
        assert isinstance(reference, tuple)
        if len(reference) != len(model):
            return f"{path}: reference {reference!r} != model {model!r}"
        for k, (r, m) in enumerate(zip(reference, model, strict=True)):
            found = first_difference(r, m, f"{path}[{k}]")
            if found:
                return found
        return None
    return None if reference == model else f"{path}: reference {reference!r} != model {model!r}"


def state_difference(reference: tuple[object, ...], model: tuple[object, ...]) -> str | None:
    """``first_difference`` of ``(now, broker, clients, slave)``, with the parts named."""
    for name, r, m in zip(("now", "broker", "clients", "slave"), reference, model, strict=True):
        found = first_difference(r, m, name)
        if found:
            return found
    return None


Chooser = Callable[[Model, State, list[act.Action]], act.Action | None]


@dataclass
class LockstepRun:
    config: Config
    label: str
    trace: list[act.Action] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    seen: set[str] = field(default_factory=set)
    failure: str | None = None

    def report(self) -> str:
        lines = [f"lockstep divergence ({self.label}) after {len(self.trace)} actions: {self.failure}"]
        lines.append(f"config: {self.config}")
        lines.extend(f"  {k:4d} {a!r}" for k, a in enumerate(self.trace))
        return "\n".join(lines)


def slave_marks(before: State, action: act.Action) -> set[str]:
    """Slaves: the slave paths ``action`` takes from ``before`` (for the coverage check of the walks)."""
    marks: set[str] = set()
    client = getattr(action, "client", None)
    if isinstance(action, act.LoseCommit) and before.clients[action.client].channel[0].to_slave:
        marks.add("slave-commit-lost")
    if isinstance(action, act.ReceivePull):
        pull = next(p for p in before.clients[action.client].pulls if p.pq_uid == action.pq_uid and p.epoch != -1)
        if pull.from_slave and pull.result is None:
            marks.add("slave-held-pull-answered")
    if not before.broker.up:
        if isinstance(action, act.RebalanceWithoutSelf | act.RebalanceQueryError):
            marks.add("slave-listing-fault")
        if isinstance(action, act.ExpireChannel):
            marks.add("slave-channel-closed")
        if isinstance(action, act.SlaveSync):
            marks.add("slave-sync-master-down")
        if isinstance(action, act.Shutdown):
            marks.add("slave-unregister")
        if isinstance(action, act.Start) and client is not None:
            marks.add("slave-start")
    return marks


def abstract_all(reference: ReferenceSystem) -> tuple[object, ...]:
    """The reference's ``(now, broker, clients)`` and (slaves) its ``State.slave``."""
    return (*reference.abstract(), reference.abstract_slave())


def run_lockstep(
    config: Config, root: Path, choose: Chooser, steps: int, label: str, compat: SpecCompat | None = None
) -> LockstepRun:
    model = Model(config)
    state = model.initial()
    reference = ReferenceSystem(config, root, compat)
    run = LockstepRun(config, label)
    try:
        expected = (state.now, state.broker, state.clients, state.slave)
        if abstract_all(reference) != expected:
            run.failure = f"initial state: {state_difference(abstract_all(reference), expected)}"
            return run
        for _ in range(steps):
            enabled = model.enabled(state)
            action = choose(model, state, enabled) if enabled else None
            if action is None:
                break
            run.trace.append(action)
            run.counts[type(action).__name__] += 1
            previous, state = state, model.step(state, action)
            if isinstance(action, act.ReceivePull):  # only OFFSET_ILLEGAL at once (5.x) removes a pq
                q = next(p.queue for p in previous.clients[action.client].pulls if p.pq_uid == action.pq_uid)
                if previous.clients[action.client].pqs[q] is not None and state.clients[action.client].pqs[q] is None:
                    run.seen.add("offset-illegal-at-once")
            try:
                reference.apply(action)
            except ReferenceActionError as e:
                run.failure = f"the reference refused {action!r}: {e}"
                return run
            abstract = abstract_all(reference)
            expected = (state.now, state.broker, state.clients, state.slave)
            if abstract != expected:
                run.failure = state_difference(abstract, expected) or "states differ (no field found)"
                return run
            if state.broker.dlq:
                run.seen.add("dlq")
            if any(v is not None for cl in state.clients for v in cl.file):
                run.seen.add("local-file-written")
            if state.budget.query_errors < config.query_errors:
                run.seen.add("query-error")
            if isinstance(action, act.AdminReset):  # admin reset
                run.seen.add("reset-by-timestamp" if action.by_timestamp else "reset-by-offset")
            events, h = [], state.history  # admin reset: the events of this step
            while h is not None and h is not previous.history:
                events.append(h.event.kind)
                h = h.previous
            run.seen.update(k for k in events if k in ("commit-ignored", "admin-write"))
            run.seen.update(k for k in events if k in ("commit-landed-on-slave", "slave-sync"))  # slaves
            if previous.slave is not None:  # slaves: what went to the slave while the master was down
                run.seen.update(slave_marks(previous, action))
            run.seen.update(  # slaves: how the slave answered pulls (e.g. "slave-pull-OFFSET_ILLEGAL")
                f"slave-pull-{p.result.status}"
                for cl in state.clients
                for p in cl.pulls
                if p.from_slave and p.result is not None
            )
            taken = [
                p
                for p, n in zip(previous.broker.reset_pending, state.broker.reset_pending, strict=False)
                if p is not None and n is None
            ]
            if taken and isinstance(action, act.ReceivePull):  # a held pull woken under a pending 5.x reset
                run.seen.add("reset-taken-by-held-pull")
            if config.orderly and any(  # orderly: a pq lost its lock at lockAll, or a lock was refused
                pq is not None and not pq.locked for cl in state.clients for pq in cl.pqs
            ):
                run.seen.add("lock-denied")
            if isinstance(action, act.FinishConsume) and action.status == act.SUSPEND_CURRENT_QUEUE_A_MOMENT:
                run.seen.add("suspend")  # orderly consume loop
            if isinstance(action, act.FinishConsume) and action.status in (act.ORDERLY_COMMIT, act.ORDERLY_ROLLBACK):
                # autoCommit false (R8.6): a COMMIT or ROLLBACK over more than the batch just taken
                pq = previous.clients[action.client].pqs
                batch = next(r for r in previous.clients[action.client].consuming if r.rid == action.rid)
                held = pq[batch.queue]
                if held is not None and held.uid == batch.pq_uid and held.consuming_tree.bit_count() > len(batch.msgs):
                    run.seen.add(f"{action.status.lower()}-of-earlier-batches")
            if any(pq is not None and pq.dropped for cl in state.clients for pq in cl.pqs):
                run.seen.add("removal-refused")  # an orderly removal refused by a running listener (R8.8)
            if any(cl.view is not None and len(set(cl.view)) < len(cl.view) for cl in state.clients):
                run.seen.add("duplicate-in-view")  # faults (RMQ-11): balanced over a list naming one id twice
            locked = [q for cl in state.clients for q, pq in enumerate(cl.pqs) if pq is not None and pq.locked]
            if config.duplicate_client_id and len(locked) > len(set(locked)):
                run.seen.add("lock-shared-by-duplicate-id")  # faults (RMQ-11): two consumers, one broker lock
    finally:
        reference.close()
    return run


def random_chooser(seed: int) -> Chooser:
    rng = random.Random(seed)
    return lambda model, state, enabled: rng.choice(enabled)


# orderly consume loop: the loop's own steps weigh 4, a rebalance 3, a fault 1, everything else 2.
ORDERLY_WEIGHTS = {
    "StartConsume": 4,
    "FinishConsume": 4,
    "ApplyConsumeOffset": 4,
    "TryLockLater": 4,
    "Rebalance": 3,
    "Crash": 1,
    "Shutdown": 1,
    "Stall": 1,
}


def weighted_chooser(seed: int) -> Chooser:
    rng = random.Random(seed)

    def choose(model: Model, state: State, enabled: list[act.Action]) -> act.Action:
        return rng.choices(enabled, [ORDERLY_WEIGHTS.get(type(a).__name__, 2) for a in enabled])[0]

    return choose


TIMER_ACTIONS = act.TIME_ONLY


@dataclass
class Until:
    """Script step: fire timers (and ticks), never ``avoid``, until ``done(state)``."""

    done: Callable[[State], bool]
    allowed: tuple[type, ...] = TIMER_ACTIONS
    avoid: tuple[act.Action, ...] = ()


def script_chooser(*items: act.Action | Until) -> Chooser:
    pending: Iterator[act.Action | Until] = iter(items)
    current: list[act.Action | Until | None] = [next(pending, None)]

    def choose(model: Model, state: State, enabled: list[act.Action]) -> act.Action | None:
        while True:
            item = current[0]
            if item is None:
                return None
            if isinstance(item, Until):
                if item.done(state):
                    current[0] = next(pending, None)
                    continue
                options = [a for a in enabled if isinstance(a, item.allowed) and a not in item.avoid]
                assert options, f"script stuck at t={state.now}: nothing allowed is enabled"
                return next((a for a in options if not isinstance(a, act.Tick)), options[0])
            wait = wait_step(model, state, item)  # 5.x's pacing holds the step back (R4.2): let time pass
            if wait is not None:
                return wait
            assert item in enabled, f"script step {item!r} is not enabled at t={state.now}"
            current[0] = next(pending, None)
            return item

    return choose


@pytest.fixture(autouse=True)
def _quiet_reference_logs() -> Iterator[None]:
    """The reference logs every refused pull and failed send-back, as RocketMQ does; not needed here."""
    logging.getLogger("rmqspec.reference").setLevel(logging.CRITICAL)
    yield
    logging.getLogger("rmqspec.reference").setLevel(logging.NOTSET)


# --- the lockstep check ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(CONFIGS))
def test_reference_refines_model_on_seeded_random_walks(name: str, tmp_path: Path) -> None:
    config = Config(**CONFIGS[name])
    counts: Counter[str] = Counter()
    seen: set[str] = set()
    loop = name in ORDERLY_LOOP_CONFIGS  # orderly consume loop: more and longer weighted walks
    seeds = range(LOOP_SEEDS) if loop else range(SLAVE_SEEDS) if name in SLAVE_CONFIGS else SEEDS
    for seed in seeds:
        chooser = weighted_chooser(seed) if loop else random_chooser(seed)
        run = run_lockstep(
            config, tmp_path / f"seed{seed}", chooser, LOOP_STEPS if loop else STEPS, f"{name} seed {seed}"
        )
        assert run.failure is None, run.report()
        counts.update(run.counts)
        seen |= run.seen
    missing = (CORE_OVERRIDE.get(name, CORE_ACTIONS) | EXPECTED.get(name, set())) - set(counts) - seen
    assert not missing, f"{name}: the walks never exercised {sorted(missing)}; counts {dict(counts)}"


def test_lockstep_catches_a_planted_watermark_bug(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """RMQ-01 style: removeMessage returns queueOffsetMax + 2 when the tree empties; the check must fail."""
    original = ProcessQueue.remove_message

    def planted(self: ProcessQueue, msgs: list[MessageExt], now: int) -> int:
        result = original(self, msgs, now)
        return result + 1 if result >= 0 and not self.msg_tree_map else result

    monkeypatch.setattr(ProcessQueue, "remove_message", planted)
    run = run_lockstep(Config(), tmp_path, random_chooser(0), STEPS, "planted bug")
    assert run.failure is not None, "the planted divergence went unnoticed"
    assert "offset" in run.failure and run.trace[-1].__class__ is act.FinishConsume, run.report()


# --- every compat switch marks a real disagreement ---------------------------------------------------

Scenario = tuple[dict[str, Any], Callable[[int], Chooser], int]

SCENARIOS: dict[str, Scenario] = {
    # A random walk that reaches the disagreement within a few seeds.
    "search_offset_first_equal": (CONFIGS["from-timestamp-cold-backlog"], random_chooser, STEPS),
    # Scripted: client 1 starts (subVersion 1000) after client 0 (subVersion 0); the broker restarts and
    # only client 0 heartbeats again; client 1's pull gets SUBSCRIPTION_NOT_LATEST in RocketMQ, while
    # the model serves it (someone is registered).
    "pull_ignores_sub_version": (
        {},
        lambda _seed: script_chooser(
            act.Start(0),
            act.Tick(),
            act.Start(1),
            act.Rebalance(1),
            act.BrokerCrash(),
            act.BrokerRestart(),
            act.Heartbeat(0),
            act.SendPull(1, 2),
            act.BrokerReceive(1),
        ),
        9,
    ),
}


def test_every_compat_switch_has_a_scenario() -> None:
    assert set(SCENARIOS) == set(SpecCompat.names())


@pytest.mark.parametrize("switch", list(SCENARIOS))
def test_turning_one_compat_switch_off_makes_the_check_fail(switch: str, tmp_path: Path) -> None:
    """With ``switch`` off the reference does what RocketMQ 4.9.8 does and the model disagrees; the same
    walk passes with the switch on, so the divergence is exactly that rule."""
    kwargs, chooser, steps = SCENARIOS[switch]
    config = Config(**kwargs)
    faithful_here = dataclasses.replace(SpecCompat(), **{switch: False})
    for seed in range(12):
        run = run_lockstep(config, tmp_path / f"off{seed}", chooser(seed), steps, switch, faithful_here)
        if run.failure is not None:
            break
    else:
        pytest.fail(f"{switch}: no divergence found with the switch off")
    again = run_lockstep(config, tmp_path / f"on{seed}", chooser(seed), len(run.trace), switch)
    assert again.failure is None, again.report()


# --- pull expiry, retention, OFFSET_ILLEGAL (both versions) -----------------------------------------


def test_pull_expired_pq_is_recreated_by_the_next_rebalance_in_model_and_reference(tmp_path: Path) -> None:
    """R9.4, R6.6 (LIV-3): a pq never pulled for more than 120 s is dropped by the next rebalance and
    re-created with a new pq in the same pass, in the model and the reference alike (this was the
    reference's compat switch ``no_pull_expiry``; the model now has the rule)."""
    for version in ("4.9.8", "5.x"):
        config = Config(consumers=1, queues=1, version=version)
        # 4.9.8 re-creates it at the rebalance of 140 s, 5.x (its rebalances 1 s later, R4.2) at 141 s
        chooser = script_chooser(act.Start(0), Until(lambda s: s.now >= 142_000))
        run = run_lockstep(config, tmp_path / version, chooser, 400, f"pull expiry {version}")
        assert run.failure is None, run.report()
        model = Model(config)
        state = model.initial()
        uids = set()
        for action in run.trace:
            after = model.step(state, action)
            assert not check_step(model, state, action, after), action
            state = after
            pq = state.clients[0].pqs[0]
            uids.add(-1 if pq is None else pq.uid)
        assert len(uids - {-1}) >= 2, "the stalled pq was never re-created"


def test_a_pq_held_by_flow_control_is_never_pull_expired_in_model_and_reference(tmp_path: Path) -> None:
    """R5.1 steps 2 and 5, R6.6, R9.4: pullMessage sets lastPullTimestamp before its flow-control check,
    so the 50 ms retries of a pq over pullThresholdForQueue keep it fresh. A pq held by flow control for
    140 s survives every rebalance, and once consumption frees room its staleness counts from then, so
    the rebalance 20 s later keeps it too; model and reference agree at every step."""
    pulling = (*TIMER_ACTIONS, act.SendPull, act.BrokerReceive, act.ReceivePull)
    consuming = (act.StartConsume, act.FinishConsume, act.ApplyConsumeOffset)

    threshold = Config().pull_threshold_for_queue  # 4; six cached messages are over it

    def held(s: State) -> bool:
        pq = s.clients[0].pqs[0]
        return pq is not None and pq.msg_count > threshold

    def drained(s: State) -> bool:
        cl = s.clients[0]
        return not (cl.requests or cl.consuming or cl.offset_updates)

    for version in ("4.9.8", "5.x"):
        config = Config(consumers=1, queues=1, backlog=6, messages_per_queue=6, version=version)
        chooser = script_chooser(
            act.Start(0),
            Until(held, pulling),
            Until(lambda s: s.now >= 142_000),  # only timers and ticks: the pq stays over the threshold
            Until(drained, consuming),  # consumption frees room at 142 s
            Until(lambda s: s.now >= 165_000),  # the rebalance of 160 s (5.x: 161 s) sees it 18 s after
        )
        run = run_lockstep(config, tmp_path / version, chooser, 600, f"flow control {version}")
        assert run.failure is None, run.report()
        model = Model(config)
        state = model.initial()
        uids, held_since, rebalances = set(), None, 0
        for action in run.trace:
            after = model.step(state, action)
            assert not check_step(model, state, action, after), action
            pq = after.clients[0].pqs[0]
            if pq is not None and held(after):
                held_since = after.now if held_since is None else held_since
                uids.add(pq.uid)
                assert pq.last_pull == after.now or not isinstance(action, act.Tick), action
                if isinstance(action, act.Rebalance):
                    rebalances += 1
            state = after
        final = state.clients[0].pqs[0]
        assert final is not None and uids == {final.uid}, "the pq held by flow control was re-created"
        assert held_since is not None and state.now - held_since > PULL_MAX_IDLE_TIME
        assert rebalances >= 6, rebalances
        assert final.msg_count == 0 and final.last_pull >= 142_000


@pytest.mark.parametrize(("version", "copies"), [("4.9.8", 2), ("5.x", 1)])
def test_a_listener_outliving_consume_timeout_is_sent_back_and_removed_by_the_cleaner_in_lockstep(
    version: str, copies: int, tmp_path: Path
) -> None:
    """R6.8, R7.3: the listener of offset 0 runs past consumeTimeout; the cleanExpireMsg timer sends the message
    back at delay level 3 and removes it from the pq without an offset update, while offset 1 (queued, never
    started) stays. The listener then fails: 4.9.8 sends the message back a second time, 5.x sees it is no
    longer in its pq and skips it; removeMessage commits offset 1. Model and reference agree at every step
    and no property breaks."""
    config = Config(queues=1, consumers=1, backlog=2, messages_per_queue=2, consume_from_where=FROM_FIRST)
    config = dataclasses.replace(config, version=version)
    pulling = (*TIMER_ACTIONS, act.SendPull, act.BrokerReceive, act.ReceivePull)

    def cleaned(s: State) -> bool:
        pq = s.clients[0].pqs[0]
        return pq is not None and pq.tree == 0b10

    prefix: tuple[act.Action | Until, ...] = (
        act.Start(0),
        Until(lambda s: len(s.clients[0].requests) == 2, pulling),
        Until(lambda s: bool(s.clients[0].consuming), (act.StartConsume,)),  # offset 0's request, the first
        Until(cleaned),  # timers only: the listener outlives consumeTimeout
    )
    state, broken = lockstep_script(config, tmp_path / "prefix", *prefix)
    assert broken == []
    (listener,) = state.clients[0].consuming
    assert listener.msgs == ((0, 0),) and state.clients[0].offset_updates == ()
    (copy,) = state.broker.scheduled
    assert copy.message.origin == (0, 0) and copy.due == state.now + 10_000
    rid = listener.rid
    state, broken = lockstep_script(
        config,
        tmp_path / "full",
        *prefix,
        act.FinishConsume(0, rid, act.RECONSUME_LATER, -1, 0),
        act.ApplyConsumeOffset(0, rid),
        Until(lambda s: not s.broker.scheduled),  # the copies reach %RETRY%<group>
    )
    assert broken == []
    assert state.clients[0].mem[0] == 1
    retry = state.broker.queues[1].messages
    assert [(m.origin, m.reconsume_times) for m in retry] == [((0, 0), 1)] * copies


def _cleaner_removal_seeds() -> dict[tuple[str, str], tuple[int, str]]:
    """For each (mode, version), the first campaign unit (seed, profile) whose own walk has a CleanExpiredMsg
    remove a message (R6.8), found by replaying the units' walks with the model alone."""
    from rmqspec.campaign.units import PROFILE_BY_NAME, _choose, directed_start, sample_config

    found: dict[tuple[str, str], tuple[int, str]] = {}
    for seed in range(600):
        if directed_start(seed) is not None:
            continue  # the unit begins with a scripted prefix (properties/scenario_starts.py), not this walk
        profile = ("calm", "retries")[seed % 2]
        rng = random.Random(seed)
        config = PROFILE_BY_NAME[profile].apply(sample_config(rng))
        key = (config.mode, config.version)
        if key in found or config.orderly:
            continue
        model = Model(config)
        state = model.initial()
        for _ in range(300):  # the unit's own walk (run_unit draws the same actions from the same rng)
            action = _choose(rng, model, state, PROFILE_BY_NAME[profile])
            if action is None:
                break
            after = model.step(state, action)
            if isinstance(action, act.CleanExpiredMsg) and any(
                e.kind.startswith("expired") for e in history_list(after)[len(history_list(state)) :]
            ):
                found[key] = (seed, profile)
                break
            state = after
        if len(found) == 4:
            break
    return found


def test_campaign_runs_whose_cleaner_removes_a_message_pass_in_lockstep() -> None:
    """R6.8: campaign runs reach a CleanExpiredMsg that removes a message in both modes and both versions, and
    each such run (lockstep with the reference, every property, liveness at quiescence) finds nothing."""
    from rmqspec.campaign.units import run_unit

    found = _cleaner_removal_seeds()
    assert len(found) >= 3, found  # CLUSTERING under both versions and BROADCASTING under at least one
    for seed, profile in found.values():
        result = run_unit(seed, seed, profile, 300)
        assert result.violations == [] and result.rules["CleanExpiredMsg"] > 0, (seed, profile)


# --- unit tests: claims the walks do not make obvious -------------------------------------------------


def msg(offset: int, body: int = 16) -> MessageExt:
    return MessageExt("T", bytes(body), queue_offset=offset)


def test_process_queue_commits_the_lowest_offset_still_held() -> None:
    """R6.3 / RMQ-01: finishing 2..3 while 0..1 are in flight commits 0, not 4."""
    pq = ProcessQueue(0, 0)
    msgs = [msg(o) for o in range(4)]
    pq.put_message(msgs)
    assert pq.remove_message(msgs[2:], 0) == 0
    assert pq.remove_message(msgs[:1], 0) == 1
    assert (pq.msg_count, pq.msg_size) == (1, 16)


def test_process_queue_commits_one_past_the_last_cached_message_when_it_empties() -> None:
    pq = ProcessQueue(0, 0)
    pq.put_message([msg(5), msg(6, 24)])
    assert pq.remove_message([msg(6), msg(5)], 0) == 7
    assert (pq.msg_count, pq.msg_size, pq.queue_offset_max) == (0, 0, 6)
    assert pq.remove_message([msg(5)], 0) == -1  # an empty tree gives -1: the caller skips the update


def test_process_queue_offset_max_is_the_last_new_message_in_list_order_and_duplicates_do_not_count() -> None:
    """R6.2: queueOffsetMax follows list order, not the maximum; a replaced key is not counted again."""
    pq = ProcessQueue(0, 0)
    assert pq.put_message([msg(3), msg(1)]) is True
    assert pq.queue_offset_max == 1
    assert pq.put_message([msg(3)]) is False  # already consuming: no second dispatch
    assert (pq.msg_count, pq.msg_size) == (2, 32)


class _Hook:
    """Collects oneway commits sent by a store under test."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, int, int]] = []

    def do_before_request(self, remote_addr: str, request: RemotingCommand) -> None:
        h = request.header
        if request.code == RequestCode.UPDATE_CONSUMER_OFFSET:
            self.sent.append((h.topic, h.queue_id, h.commit_offset))  # type: ignore[attr-defined]


def _client(tmp_path: Path, version: str = "4.9.8") -> tuple[BrokerHost, MQClientInstance, _Hook]:
    clock = VirtualClock()
    host = BrokerHost(clock, tmp_path, "broker-a", {"T": 4, "%RETRY%G": 1}, SpecCompat(), version=MQVersion(version))
    host.start()
    route = {"T": TopicRouteData("broker-a", "broker-a:10911", 4)}
    instance = MQClientInstance("c0", clock, host.connect("c0"), route, SpecCompat(), MQVersion(version))
    hook = _Hook()
    instance.remoting_client.register_rpc_hook(hook)
    return host, instance, hook


def test_remote_store_persist_all_sends_the_given_queues_and_forgets_the_rest(tmp_path: Path) -> None:
    """R2.7: after a non-empty persistAll(S), memory holds only queues of S; only those were sent."""
    _, instance, hook = _client(tmp_path)
    store = RemoteBrokerOffsetStore(instance, "G")
    mqs = [MessageQueue("T", "broker-a", q) for q in range(3)]
    for q, mq in enumerate(mqs):
        store.update_offset(mq, 10 + q, False)
    store.persist_all({mqs[0], mqs[2]})
    assert hook.sent == [("T", 0, 10), ("T", 2, 12)]
    assert set(store.offset_table) == {mqs[0], mqs[2]}


def test_remote_store_persist_all_of_nothing_neither_sends_nor_prunes(tmp_path: Path) -> None:
    _, instance, hook = _client(tmp_path)
    store = RemoteBrokerOffsetStore(instance, "G")
    store.update_offset(MessageQueue("T", "broker-a", 0), 3, False)
    store.persist_all(set())
    assert hook.sent == [] and len(store.offset_table) == 1


def test_remote_store_update_offset_increase_only_keeps_the_larger_value(tmp_path: Path) -> None:
    """R1.5: a new entry takes any value; increaseOnly keeps max(old, new); otherwise overwrite."""
    _, instance, _ = _client(tmp_path)
    store = RemoteBrokerOffsetStore(instance, "G")
    mq = MessageQueue("T", "broker-a", 0)
    store.update_offset(mq, 5, True)
    store.update_offset(mq, 3, True)
    assert store.offset_table[mq] == 5
    store.update_offset(mq, 3, False)
    assert store.offset_table[mq] == 3


def _query(host: BrokerHost, queue_id: int, set_zero_if_not_found: bool | None = None) -> RemotingCommand:
    assert host.controller is not None
    return host.controller.consumer_manage_processor.query_consumer_offset(
        RemotingCommand.create_request_command(
            RequestCode.QUERY_CONSUMER_OFFSET,
            QueryConsumerOffsetRequestHeader("G", "T", queue_id, set_zero_if_not_found),
        )
    )


def _queried_offset(response: RemotingCommand) -> int:
    assert response.code == ResponseCode.SUCCESS and isinstance(response.header, QueryConsumerOffsetResponseHeader)
    return response.header.offset


def test_query_consumer_offset_answers_zero_for_a_young_queue_and_not_found_once_its_head_is_cold(
    tmp_path: Path,
) -> None:
    """R3.5: no stored offset and an empty queue, or message 0 still hot, gives SUCCESS(0) (S2);
    once message 0 left page cache it gives QUERY_NOT_FOUND; a stored offset always wins."""
    host, _, _ = _client(tmp_path)
    assert _queried_offset(_query(host, 0)) == 0
    host.produce("T", 0, "A", bytes(16))
    assert _query(host, 0).code == ResponseCode.SUCCESS
    host.message_store.evict_from_page_cache("T", 0)
    assert _query(host, 0).code == ResponseCode.QUERY_NOT_FOUND
    assert host.controller is not None
    host.controller.consumer_offset_manager.commit_offset("c0", "G", "T", 0, 1)
    assert _queried_offset(_query(host, 0)) == 1


def _pull(host: BrokerHost, offset: int, batch: int = 2, subscription: str = "*") -> RemotingCommand | None:
    assert host.controller is not None
    header = PullMessageRequestHeader(
        "G", "T", 0, offset, batch, PullSysFlag.build_sys_flag(False, False, True, False), 0, 0, subscription, 0
    )
    return host.controller.pull_message_processor.process_request(
        host.connections[0], RemotingCommand.create_request_command(RequestCode.PULL_MESSAGE, header), True
    )


@pytest.mark.parametrize(
    ("produced", "offset", "status", "code", "next_begin"),
    [
        (0, 0, GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, ResponseCode.PULL_NOT_FOUND, 0),
        (0, 3, GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, ResponseCode.PULL_OFFSET_MOVED, 0),
        (3, 3, GetMessageStatus.OFFSET_OVERFLOW_ONE, ResponseCode.PULL_NOT_FOUND, 3),
        (3, 5, GetMessageStatus.OFFSET_OVERFLOW_BADLY, ResponseCode.PULL_OFFSET_MOVED, 3),
        (3, 0, GetMessageStatus.FOUND, ResponseCode.SUCCESS, 2),
        (3, 2, GetMessageStatus.FOUND, ResponseCode.SUCCESS, 3),
    ],
)
def test_pull_result_table_of_a_master(
    tmp_path: Path, produced: int, offset: int, status: GetMessageStatus, code: int, next_begin: int
) -> None:
    """R5.5: store status, nextBeginOffset and response code (batch of 2, no filter). A queue never
    written has no consume queue (NO_MATCHED_LOGIC_QUEUE), which answers like an empty one."""
    host, _, _ = _client(tmp_path)
    for _ in range(produced):
        host.produce("T", 0, "A", bytes(16))
    result = host.message_store.get_message("G", "T", 0, offset, 2, ExpressionMessageFilter(None))
    assert (result.status, result.next_begin_offset) == (status, next_begin)
    assert PullMessageProcessor._response_code(result.status, offset) == code


def test_a_pull_returns_at_most_32_messages_in_both_and_is_answered_at_once(tmp_path: Path) -> None:
    """R5.5 isTheBatchFull: pullBatchSize 40 over a backlog of 40 gives 32 messages; the answer is fixed
    when the broker reads the request (R5.4), so a message produced before the reply is not in it."""
    config = Config(
        queues=1,
        consumers=1,
        backlog=40,
        messages_per_queue=41,
        pull_batch_size=40,
        pull_threshold_for_queue=100,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    )
    script = (act.Start(0), act.Rebalance(0), act.SendPull(0, 0), act.BrokerReceive(0), act.Produce(0, "A"))
    model = Model(config)
    state = model.initial()
    for a in script:
        state = model.step(state, a)
    [pull] = state.clients[0].pulls
    assert pull.result is not None and pull.result.found == tuple(range(32)) and pull.result.next_begin == 32
    run = run_lockstep(config, tmp_path, script_chooser(*script), len(script), "batch cap")
    assert run.failure is None and len(run.trace) == len(script), run.report()


def test_pull_skips_unsubscribed_tags_and_reports_no_match_past_them(tmp_path: Path) -> None:
    """R5.5: filtered units are scanned past; nothing matched gives NO_MATCHED_MESSAGE with
    nextBeginOffset after the scan (PULL_RETRY_IMMEDIATELY)."""
    host, _, _ = _client(tmp_path)
    for tag in ("B", "A", "B", "B"):
        host.produce("T", 0, tag, bytes(16))
    only_a = ExpressionMessageFilter(SubscriptionData.build("T", "A", 0))
    found = host.message_store.get_message("G", "T", 0, 0, 2, only_a)
    assert found.status is GetMessageStatus.FOUND
    assert [m.queue_offset for m in found.message_list] == [1] and found.next_begin_offset == 4
    nothing = host.message_store.get_message("G", "T", 0, 2, 2, only_a)
    assert (nothing.status, nothing.next_begin_offset) == (GetMessageStatus.NO_MATCHED_MESSAGE, 4)


def test_piggy_backed_commit_lands_once_when_first_processed_even_if_the_pull_is_held(tmp_path: Path) -> None:
    """R5.4: the broker commits the client-sent offset on the first pass (even when it holds the pull
    for long polling) and not when the held request runs again."""
    host, _, _ = _client(tmp_path)
    assert host.controller is not None
    header = PullMessageRequestHeader(
        "G", "T", 0, 0, 2, PullSysFlag.build_sys_flag(True, True, True, False), 7, 15_000, "*", 0
    )
    request = RemotingCommand.create_request_command(RequestCode.PULL_MESSAGE, header)
    processor = host.controller.pull_message_processor
    assert processor.process_request(host.connections[0], request, True) is None  # held: nothing to read
    offsets = host.controller.consumer_offset_manager
    assert offsets.query_offset("G", "T", 0) == 7
    offsets.commit_offset("other", "G", "T", 0, 9)
    response = processor.execute_request_when_wakeup(host.connections[0], request)
    assert response.code == ResponseCode.PULL_NOT_FOUND and offsets.query_offset("G", "T", 0) == 9


def test_search_offset_by_time_returns_the_binary_search_hit_or_the_closest_neighbour(tmp_path: Path) -> None:
    """R10.3 (ConsumeQueue#getOffsetInQueueByTime): an exact hit among equal times is wherever the
    search lands (offset 1 of four messages at t=0), the model's reading is the first; otherwise the
    closest store time, the earlier on a tie."""
    host, _, _ = _client(tmp_path)
    store = host.message_store
    for _ in range(4):
        host.produce("T", 0, "A", bytes(16))
    assert store.get_offset_in_queue_by_time("T", 0, 0, first_of_equal=False) == 1
    assert store.get_offset_in_queue_by_time("T", 0, 0, first_of_equal=True) == 0
    host.clock.advance_to(100)
    host.produce("T", 0, "A", bytes(16))
    assert store.get_offset_in_queue_by_time("T", 0, 50, first_of_equal=True) == 3  # tie: earlier
    assert store.get_offset_in_queue_by_time("T", 0, 60, first_of_equal=True) == 4
    assert store.get_offset_in_queue_by_time("T", 1, 60, first_of_equal=True) == 0  # empty queue


def _send_back(host: BrokerHost, commit_log_offset: int, max_times: int = 1) -> None:
    assert host.controller is not None
    header = ConsumerSendMsgBackRequestHeader(commit_log_offset, "G", 0, "", "T", max_times)
    response = host.controller.send_message_processor.consumer_send_msg_back(
        RemotingCommand.create_request_command(RequestCode.CONSUMER_SEND_MSG_BACK, header)
    )
    assert response.code == ResponseCode.SUCCESS


def test_send_back_retries_at_level_three_plus_stored_count_then_dead_letters_with_count_plus_one(
    tmp_path: Path,
) -> None:
    """R7.5/R7.7: the broker decides by the *stored* reconsumeTimes: 0 goes to SCHEDULE_TOPIC at level 3
    (10 s) as reconsumeTimes 1; at max (1) it goes to %DLQ% and is stored with reconsumeTimes + 1."""
    host, _, _ = _client(tmp_path)
    original = host.produce("T", 0, "A", bytes(16))
    _send_back(host, original.commit_log_offset)
    store = host.message_store
    [(due, scheduled)] = store.schedule_message_service.pending()
    assert (due, scheduled.reconsume_times, scheduled.get_property(PROPERTY_RETRY_TOPIC)) == (10_000, 1, "T")
    host.clock.advance_to(10_000)
    store.schedule_message_service.deliver_due_message()
    retry_cq = store.find_consume_queue(retry_topic("G"), 0)
    assert retry_cq is not None
    retried = store.commit_log[retry_cq.units[0].commit_log_offset]
    _send_back(host, retried.commit_log_offset)
    dlq_cq = store.find_consume_queue(dlq_topic("G"), 0)
    assert dlq_cq is not None
    dead = store.commit_log[dlq_cq.units[0].commit_log_offset]
    assert dead.reconsume_times == 2 and dead.get_property(PROPERTY_ORIGIN_MESSAGE_ID) == original.msg_id


def test_producer_fallback_to_the_retry_topic_dead_letters_one_retry_earlier(tmp_path: Path) -> None:
    """R7.4 + R7.6: the fall-back send carries reconsumeTimes + 1, and handleRetryAndDLQ compares *that*
    with the maximum, so with max 1 a first failure already lands in %DLQ% (the broker path would retry)."""
    host, _, _ = _client(tmp_path)
    assert host.controller is not None
    header = SendMessageRequestHeader("P", retry_topic("G"), 0, {"TAGS": "A", "DELAY": "3"}, 0, 1, 1)
    host.controller.send_message_processor.send_message(
        RemotingCommand.create_request_command(RequestCode.SEND_MESSAGE, header, bytes(16))
    )
    assert host.message_store.get_max_offset_in_queue(dlq_topic("G"), 0) == 1


def test_scheduled_executor_runs_only_due_tasks_and_rearms_fixed_rate_ones() -> None:
    clock = VirtualClock()
    executor = ScheduledExecutorService(clock, "t")
    runs: list[int] = []
    executor.schedule_at_fixed_rate("p", lambda: runs.append(clock.now()), 10_000, 5_000)
    with pytest.raises(SchedulerError):
        executor.run_due("p")
    clock.advance_to(10_000)
    executor.run_due("p")
    assert runs == [10_000] and executor.due_time("p") == 15_000
    queue: DelayQueue[str] = DelayQueue()
    queue.put("x", 20_000)
    with pytest.raises(SchedulerError):
        queue.take("x", clock.now())


def test_driver_refuses_configs_with_mutations_and_impossible_actions(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedConfigError):
        ReferenceSystem(Config(mutations=frozenset({"commit_past_cached"})), tmp_path / "m")
    system = ReferenceSystem(Config(), tmp_path / "r")
    with pytest.raises(ReferenceActionError):
        system.apply(act.SendPull(0, 0))  # client 0 is not running
    system.apply(act.Start(0))
    system.apply(act.Tick())  # to the heartbeat at 1 s
    with pytest.raises(ReferenceActionError, match="timers are due"):
        system.apply(act.Tick())


def test_broker_flush_is_read_back_from_the_real_offset_file_after_a_crash(tmp_path: Path) -> None:
    """R3.6/R3.7: what survives a broker crash is the last flushed consumerOffset.json."""
    host, _, _ = _client(tmp_path)
    assert host.controller is not None
    host.controller.consumer_offset_manager.commit_offset("c0", "G", "T", 0, 4)
    host.clock.advance_to(10_000)
    host.controller.scheduled_executor_service.run_due("flushConsumerOffset")
    host.controller.consumer_offset_manager.commit_offset("c0", "G", "T", 0, 6)
    host.crash()
    controller = host.start()
    assert controller.consumer_offset_manager.query_offset("G", "T", 0) == 4
    assert (tmp_path / "config" / "consumerOffset.json").exists()


def test_file_readings_derive_once_per_content_and_again_when_the_file_changes(tmp_path: Path) -> None:
    """The abstraction's file readings (``FileReadings``) are derived from the files' bytes: the same content is
    derived once, a rewrite, a removal or a second file's change derives again, and a derivation that raised is
    not remembered."""
    readings = FileReadings()
    main, bak = tmp_path / "offsets.json", tmp_path / "offsets.json.bak"
    calls: list[str] = []

    def derivation() -> str:
        calls.append("x")
        if main.exists() and main.read_bytes() == b"bad":
            raise ValueError("unparsable")
        return main.read_text() if main.exists() else "missing"

    def read() -> str:
        return readings.derive("t", (main, bak), derivation)

    assert read() == "missing" and read() == "missing" and len(calls) == 1
    main.write_text("1")
    assert read() == "1" and read() == "1" and len(calls) == 2
    bak.write_text("0")
    assert read() == "1" and len(calls) == 3
    main.write_text("2")
    assert read() == "2" and len(calls) == 4
    main.write_bytes(b"bad")
    for _ in range(2):
        with pytest.raises(ValueError):
            read()
    assert len(calls) == 6
    main.unlink()
    assert read() == "missing" and len(calls) == 7


def test_the_abstraction_reads_a_local_offset_file_rewritten_behind_the_reference(tmp_path: Path) -> None:
    """R1.10: a BROADCASTING client's ``file`` is what readLocalOffset reads now, not what it read at the last
    step: a rewrite of offsets.json between two abstractions shows, and the old content shows again once
    restored."""
    config = Config(consumers=1, queues=1, messages_per_queue=1, mode="BROADCASTING")
    system = ReferenceSystem(config, tmp_path)
    try:
        system.apply(act.Start(client=0))
        before = system.abstract()[2][0].file
        path = system._local_store(0).store_path
        original = path.read_bytes() if path.exists() else None
        mq = system.mqs[0]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(encode_client_offset_file({mq: 7}, "fastjson"))
        assert system.abstract()[2][0].file == (7,)
        if original is None:
            path.unlink()
        else:
            path.write_bytes(original)
        assert system.abstract()[2][0].file == before
    finally:
        system.close()


# --- the version switch: each 5.x difference, in the model and the reference ---------------------------
#
# The scripted scenarios run in lockstep, so the model's final state below is also the reference's
# (its abstraction); docs/spec.md, "What the version switch changes", records the outcomes.

VERSIONS = ("4.9.8", "5.x")


def lockstep_script(
    config: Config, root: Path, *script: act.Action | Until
) -> tuple[State, list[tuple[act.Action, list[Violation]]]]:
    """Run ``script`` to its end in lockstep; return the model's final state (which the reference's
    abstraction equals) and the properties each step broke, as the explorer would check them."""
    run = run_lockstep(config, root, script_chooser(*script), 10_000, f"script under {config.version}")
    assert run.failure is None, run.report()
    model = Model(config)
    state = model.initial()
    broken: list[tuple[act.Action, list[Violation]]] = []
    for a in run.trace:
        after = model.step(state, a)
        violations = check_step(model, state, a, after) + check_state(model, after)
        if violations:
            broken.append((a, violations))
        state = after
    return state, broken


@pytest.mark.parametrize(("version", "on_system_error"), [("4.9.8", -1), ("5.x", -2)])
def test_5x_maps_system_error_to_minus_two_where_4_9_8_reads_no_offset(
    tmp_path: Path, version: str, on_system_error: int
) -> None:
    """R2.3: QUERY_NOT_FOUND reads as -1 in both versions; any other error code (here SYSTEM_ERROR,
    the processor threw) as -1 in 4.9.8 and -2 in 5.x. Memory is left alone either way."""
    host, instance, _ = _client(tmp_path, version)
    store = RemoteBrokerOffsetStore(instance, "G", MQVersion(version))
    mq = MessageQueue("T", "broker-a", 0)
    host.produce("T", 0, "A", bytes(16))
    host.message_store.evict_from_page_cache("T", 0)  # an old queue: QUERY_NOT_FOUND
    assert store.read_offset(mq, ReadOffsetType.READ_FROM_STORE) == -1
    host.fault_injector = lambda request: request.code == RequestCode.QUERY_CONSUMER_OFFSET
    assert store.read_offset(mq, ReadOffsetType.READ_FROM_STORE) == on_system_error
    assert mq not in store.offset_table


def _on_wire(s: State, offset: int) -> bool:
    return any(isinstance(r, Commit) and r.queue == 0 and r.offset == offset for r in s.clients[0].channel)


@pytest.mark.parametrize("version", VERSIONS)
def test_a_commit_overtaking_a_pull_lowers_the_broker_offset_in_lockstep(tmp_path: Path, version: str) -> None:
    """docs/spec.md, "Thread boundaries": the broker's request pools run a later UPDATE_CONSUMER_OFFSET (C = 2) before
    the pull sent earlier on the same connection, whose piggy-back (P = 1) then lands below it. The reference takes the
    second request off its connection (``ClientConnection.read_request(1)``) and agrees with the model; INV-8r accepts
    the fall with its cause, request-pool-reorder, and nothing else fails."""
    config = Config(consumers=1, queues=1, messages_per_queue=3, pull_batch_size=4, version=version)
    state, broken = lockstep_script(
        config,
        tmp_path,
        *[act.Produce(0, "A")] * 3,
        act.Start(0),
        act.Rebalance(0),
        act.SendPull(0, 0),
        act.BrokerReceive(0),
        act.ReceivePull(0, 0),  # offsets 0, 1, 2: consume requests 2, 3, 4
        act.StartConsume(0, 2),
        act.FinishConsume(0, 2, act.CONSUME_SUCCESS, 0, 0),
        act.ApplyConsumeOffset(0, 2),  # memory 1
        act.SendPull(0, 0),  # piggy-back P = 1
        act.StartConsume(0, 3),
        act.FinishConsume(0, 3, act.CONSUME_SUCCESS, 0, 0),
        act.ApplyConsumeOffset(0, 3),  # memory 2
        Until(lambda s: _on_wire(s, 2)),  # the persist timer sends C = 2 behind the pull
        act.BrokerReceive(0, 1),  # C overtakes the pull
        act.BrokerReceive(0),  # the pull lands P
    )
    assert state.broker.offsets[0] == 1
    assert broken == []


def _rmq14_script(version: str) -> tuple[Config, tuple[act.Action | Until, ...]]:
    """Consumer 0 consumes offset 0 of two and shuts down, committing 1; consumer 1 takes the queue
    over, and its query of the stored offset is answered SYSTEM_ERROR."""
    config = Config(consumers=2, queues=1, messages_per_queue=2, query_errors=1, version=version)
    script: tuple[act.Action | Until, ...] = (
        act.Produce(0, "A"),
        act.Produce(0, "A"),
        act.Start(0),
        act.Rebalance(0),  # young queue: 0 in both versions
        act.SendPull(0, 0),
        act.BrokerReceive(0),
        act.ReceivePull(0, 0),  # offsets 0 and 1, one consume request each (rids 2 and 3)
        act.StartConsume(0, 2),
        act.FinishConsume(0, 2, act.CONSUME_SUCCESS, 0, 0),
        act.ApplyConsumeOffset(0, 2),  # memory 1
        act.Shutdown(0),  # persistAll sends 1 oneway
        Until(lambda s: not s.clients[0].channel, allowed=(act.BrokerReceive,)),
        act.Start(1),
        act.RebalanceQueryError(1, 0),
    )
    return config, script


def test_rmq14_4_9_8_resumes_past_the_stored_offset_after_a_system_error_and_breaks_inv15(tmp_path: Path) -> None:
    """RMQ-14 (R2.3, R10.1): 4.9.8 reads the SYSTEM_ERROR as "no offset" and positions consumer 1 by
    CONSUME_FROM_LAST at maxOffset 2, past the stored 1: offset 1 is never delivered, and INV-15
    (resume_at_last_landed_commit) fails on that step."""
    config, script = _rmq14_script("4.9.8")
    state, broken = lockstep_script(config, tmp_path, *script)
    assert state.broker.offsets[0] == 1
    pq = state.clients[1].pqs[0]
    assert pq is not None and pq.next_offset == 2
    assert not state.ghost.delivered[0] >> 1 & 1
    assert [(a, [v.id for v in vs]) for a, vs in broken] == [(act.RebalanceQueryError(1, 0), ["INV-15"])]


def test_rmq14_5x_skips_the_queue_after_a_system_error_and_resumes_at_the_stored_offset_next_round(
    tmp_path: Path,
) -> None:
    """The same run under 5.x: readOffset gives -2, computePullFromWhereWithException throws, the
    rebalance leaves the queue without a pq (R10.1, R9.4); that result is unbalanced, so the next
    rebalance comes minInterval (1 s) later, not 20 s (R4.2), reads 1 and resumes there. No property
    fails."""
    config, script = _rmq14_script("5.x")
    skipped, broken = lockstep_script(config, tmp_path, *script)
    assert skipped.clients[1].pqs[0] is None and skipped.budget.query_errors == 0
    assert skipped.clients[1].next_rebalance == skipped.now + 1_000
    state, broken = lockstep_script(
        config, tmp_path / "next", *script, Until(lambda s: s.clients[1].pqs[0] is not None)
    )
    pq = state.clients[1].pqs[0]
    assert pq is not None and pq.next_offset == 1 and state.now == skipped.now + 1_000
    assert broken == []


def test_rmq14_explorer_finds_inv15_under_4_9_8_and_the_same_walks_pass_under_5x() -> None:
    """Seeded random walks with one query error: 4.9.8 breaks INV-15 within 100 walks (walk 39 today);
    5.x passes the same 100 walks (and more: docs/spec.md, "The switches are load-bearing, and the known bugs they
    touch")."""
    from rmqspec.properties.explore import explore

    def walks(version: str) -> Any:
        config = Config(consumers=2, queues=2, messages_per_queue=3, query_errors=1, version=version, broker_crashes=0)
        return explore(config, walks=100, max_steps=200, watch=frozenset({"INV-15"}))

    old = walks("4.9.8")
    assert [v.id for v in old.counterexamples[0].violations] == ["INV-15"]
    assert walks("5.x").valid


@pytest.mark.parametrize("version", VERSIONS)
def test_a_failed_offset_read_skips_the_queue_in_both_versions_though_only_5x_throws(
    tmp_path: Path, version: str
) -> None:
    """R10.1, R9.4: a query that times out (-2 from readOffset, in both versions). 4.9.8's
    computePullFromWhereWithException returns -1 and 5.x's throws, but 5.x's rebalance calls the
    catching computePullFromWhere, so the push consumer skips the queue this round either way. The
    switch is real at the method and invisible in the rebalance."""
    config = Config(consumers=1, queues=1, version=version)
    system = ReferenceSystem(config, tmp_path)
    system.apply(act.Start(0))
    process = system.processes[0]
    assert process is not None
    remoting = process.instance.remoting_client
    remoting.fault_injector = lambda request: request.code == RequestCode.QUERY_CONSUMER_OFFSET
    rebalance = process.consumer.rebalance_impl
    assert isinstance(rebalance, RebalancePushImpl)
    mq = system.topic_mqs[0]
    if version == "4.9.8":
        assert rebalance.compute_pull_from_where_with_exception(mq) == -1
    else:
        with pytest.raises(MQClientException) as thrown:
            rebalance.compute_pull_from_where_with_exception(mq)
        assert thrown.value.response_code == ResponseCode.QUERY_NOT_FOUND
    system.clock.advance_to(1_000)  # 5.x: the first rebalance comes minInterval after start (R4.2)
    system.apply(act.Rebalance(0))
    assert mq not in rebalance.process_queue_table
    remoting.fault_injector = None
    system.clock.advance_to(21_000)  # the 20 s wait after the rebalance at 1 s (5.x would retry after 1 s)
    system.apply(act.Rebalance(0))
    assert mq in rebalance.process_queue_table


@pytest.mark.parametrize("version", VERSIONS)
def test_5x_empty_queue_answers_not_found_where_4_9_8_answers_zero(tmp_path: Path, version: str) -> None:
    """R3.5: 4.9.8's young-queue test !checkInDiskByConsumeOffset(0) holds for an empty queue (0);
    5.1.0+'s checkInMemByConsumeOffset(0, 1) does not (QUERY_NOT_FOUND). A hot first message is young
    in both, a cold one in neither."""
    host, _, _ = _client(tmp_path, version)
    if version == "4.9.8":
        assert _queried_offset(_query(host, 0)) == 0
    else:
        assert _query(host, 0).code == ResponseCode.QUERY_NOT_FOUND
    host.produce("T", 0, "A", bytes(16))
    assert _queried_offset(_query(host, 0)) == 0
    host.message_store.evict_from_page_cache("T", 0)
    assert _query(host, 0).code == ResponseCode.QUERY_NOT_FOUND


@pytest.mark.parametrize("version", VERSIONS)
def test_5x_start_on_an_empty_queue_seeds_no_offset_so_a_crash_before_the_first_commit_skips_what_arrived(
    tmp_path: Path, version: str
) -> None:
    """R3.5 in a run (lockstep). 4.9.8 answers 0 for the empty queue, which seeds memory and is
    committed by the persist timer; the consumer crashes after two messages arrived and message 0
    left page cache, and comes back at 0. 5.x answers QUERY_NOT_FOUND: LAST gives maxOffset 0 and no
    memory entry, nothing is committed, and the restarted consumer is told NOT_FOUND again and jumps
    to maxOffset 2: offsets 0 and 1 are never delivered (a declared positioning skip, not a
    violation)."""
    config = Config(consumers=1, queues=1, messages_per_queue=2, version=version)
    state, broken = lockstep_script(
        config,
        tmp_path,
        act.Start(0),
        act.Rebalance(0),
        Until(lambda s: s.now >= 10_000 and s.clients[0].next_persist == 15_000),
        Until(lambda s: not s.clients[0].channel, allowed=(act.BrokerReceive,)),
        act.Produce(0, "A"),
        act.Produce(0, "A"),
        act.CoolQueueHead(0),
        act.Crash(0),
        act.Start(0),
        act.Rebalance(0),
    )
    pq = state.clients[0].pqs[0]
    assert broken == [] and pq is not None
    if version == "4.9.8":
        assert (state.broker.offsets[0], pq.next_offset, state.clients[0].mem[0]) == (0, 0, 0)
    else:
        assert (state.broker.offsets[0], pq.next_offset, state.clients[0].mem[0]) == (None, 2, None)
        assert state.ghost.skipped[0] == 0b11 and state.ghost.delivered[0] == 0


@pytest.mark.parametrize("version", VERSIONS)
def test_rmq15_a_new_group_with_last_starts_from_zero_on_a_young_queue_in_both_versions(
    tmp_path: Path, version: str
) -> None:
    """RMQ-15 (R3.5, R10.4): a brand-new group with CONSUME_FROM_LAST and a backlog whose first
    message is still hot is told 0 and consumes the history, in 4.9.8 and in 5.x alike: only 5.0.0's
    client asked for NOT_FOUND (setZeroIfNotFound=false), and 5.1.0 took that out. Once message 0
    left memory both start at maxOffset."""
    config = Config(consumers=1, queues=2, backlog=3, messages_per_queue=3, version=version)
    state, _ = lockstep_script(config, tmp_path, act.CoolQueueHead(1), act.Start(0), act.Rebalance(0))
    starts = [pq.next_offset if pq is not None else None for pq in state.clients[0].pqs[:2]]
    assert starts == [0, 3]
    assert state.clients[0].mem[0] == 0  # the broker's 0 seeded memory as if the group had consumed nothing


@pytest.mark.parametrize("version", VERSIONS)
def test_5x_client_sends_no_set_zero_if_not_found_so_a_young_queue_still_answers_zero(
    tmp_path: Path, version: str
) -> None:
    """R3.5, RMQ-15: the classic client's QUERY_CONSUMER_OFFSET carries no setZeroIfNotFound in 4.9.8
    and in 5.1.0+ (5.0.0 sent false; d5e6fb6634 removed it), so the young-queue rule applies. A 5.x
    broker honours an explicit false (NOT_FOUND); a 4.9.8 broker has no such field."""
    config = Config(consumers=1, queues=1, backlog=1, messages_per_queue=1, version=version)
    system = ReferenceSystem(config, tmp_path / "system")
    headers: list[QueryConsumerOffsetRequestHeader] = []

    class Spy:
        def do_before_request(self, remote_addr: str, request: RemotingCommand) -> None:
            if isinstance(request.header, QueryConsumerOffsetRequestHeader):
                headers.append(request.header)

    system.apply(act.Start(0))
    process = system.processes[0]
    assert process is not None
    process.instance.remoting_client.register_rpc_hook(Spy())
    system.clock.advance_to(1_000)  # 5.x: the first rebalance comes minInterval after start (R4.2)
    system.apply(act.Rebalance(0))
    assert headers and all(h.set_zero_if_not_found is None for h in headers)
    assert system.abstract()[2][0].mem[0] == 0
    host, _, _ = _client(tmp_path / "broker", version)
    host.produce("T", 0, "A", bytes(16))
    explicit_false = _query(host, 0, set_zero_if_not_found=False)
    if version == "4.9.8":
        assert _queried_offset(explicit_false) == 0
    else:
        assert explicit_false.code == ResponseCode.QUERY_NOT_FOUND


# --- admin reset (R3.10a, R3.10b) ------------------------------------------------------------------------


def test_4_9_8_admin_reset_with_nobody_online_falls_back_to_the_old_method_in_lockstep(tmp_path: Path) -> None:
    """R3.10a step 5: with no consumer channel Broker2Client answers CONSUMER_NOT_ONLINE and mqadmin's old
    method writes the broker's table with UPDATE_CONSUMER_OFFSET; one consumer that crashes and shuts
    down leaves such moments. Lockstep walks until one reset took that path (the model's "admin-write")."""
    config = Config(admin_resets=3, consumers=1, queues=1, messages_per_queue=3, client_crashes=2, client_shutdowns=2)
    for seed in range(20):
        run = run_lockstep(config, tmp_path / f"seed{seed}", random_chooser(seed), STEPS, f"offline reset {seed}")
        assert run.failure is None, run.report()
        if "admin-write" in run.seen:
            return
    pytest.fail("no walk reset the offset while nobody was online")


def _reset(host: BrokerHost, queue: int, offset: int = -1, timestamp: int = -1) -> RemotingCommand:
    assert host.controller is not None
    header = ResetOffsetRequestHeader("T", "G", timestamp, True, queue, offset)
    return host.controller.process_sync(
        host.connections[0], RemotingCommand.create_request_command(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, header)
    )


def _commit(host: BrokerHost, queue: int, offset: int) -> RemotingCommand:
    assert host.controller is not None
    header = UpdateConsumerOffsetRequestHeader("G", "T", queue, offset)
    return host.controller.process_sync(
        host.connections[0], RemotingCommand.create_request_command(RequestCode.UPDATE_CONSUMER_OFFSET, header)
    )


def test_4_9_8_broker_reset_refuses_a_group_without_offset_and_never_writes_its_table(tmp_path: Path) -> None:
    """R3.10a steps 2, 3 and 5: no offset of the group gives SYSTEM_ERROR; with an offset and nobody online
    the answer is CONSUMER_NOT_ONLINE, and the broker's table keeps its value either way."""
    host, _, _ = _client(tmp_path)
    for _ in range(3):
        host.produce("T", 0, "A", bytes(16))
    assert _reset(host, 0, offset=1).code == ResponseCode.SYSTEM_ERROR
    assert _commit(host, 0, 3).code == ResponseCode.SUCCESS
    assert _reset(host, 0, offset=1).code == ResponseCode.CONSUMER_NOT_ONLINE
    assert host.controller is not None
    assert host.controller.consumer_offset_manager.query_offset("G", "T", 0) == 3


def test_5x_pending_reset_ignores_commits_and_the_next_pull_takes_it_before_its_own_commit(tmp_path: Path) -> None:
    """R3.10b steps 4-6, R3.4: assignResetOffset overwrites the table and records a pending reset; a commit
    is answered SUCCESS and ignored meanwhile; the next pull is answered PULL_OFFSET_MOVED at the reset
    offset, erases the entry, and its piggy-backed commit lands afterwards (R3.10b's window)."""
    host, _, _ = _client(tmp_path, "5.x")
    for _ in range(4):
        host.produce("T", 0, "A", bytes(16))
    assert host.controller is not None
    manager = host.controller.consumer_offset_manager
    assert _commit(host, 0, 3).code == ResponseCode.SUCCESS
    assert _reset(host, 0, offset=6).code == ResponseCode.SYSTEM_ERROR  # beyond maxOffset + 1 (4 + 1)
    assert _reset(host, 0, offset=1).code == ResponseCode.SUCCESS
    assert manager.query_offset("G", "T", 0) == 1 and manager.has_offset_reset("T", "G", 0)
    ignored = _commit(host, 0, 4)
    assert ignored.code == ResponseCode.SUCCESS and ignored.remark == "Offset has been previously reset"
    assert manager.query_offset("G", "T", 0) == 1
    header = PullMessageRequestHeader(
        "G", "T", 0, 3, 2, PullSysFlag.build_sys_flag(True, True, True, False), 3, 0, "*", 0
    )
    response = host.controller.pull_message_processor.process_request(
        host.connections[0], RemotingCommand.create_request_command(RequestCode.PULL_MESSAGE, header), True
    )
    assert response is not None and response.code == ResponseCode.PULL_OFFSET_MOVED
    assert isinstance(response.header, PullMessageResponseHeader) and response.header.next_begin_offset == 1
    assert not manager.has_offset_reset("T", "G", 0)
    assert manager.query_offset("G", "T", 0) == 3  # the stale piggy-back landed after the erase


def test_4_9_8_client_reset_suspends_drops_sleeps_then_persists_and_resumes(tmp_path: Path) -> None:
    """R3.10a client steps 1-5 in lockstep: the push, suspend and drop, a paused pull re-queued after 1 s,
    a rebalance that does nothing, the wake with updateOffset(increaseOnly=false), the oneway persist
    (cause admin-reset-client), removeOffset and resume (the rebalance service woken)."""
    config = Config(consumers=1, queues=1, messages_per_queue=2, admin_resets=1)
    placed = Until(lambda s: s.clients[0].pqs[0] is not None and s.broker.offsets[0] is not None)
    script = (
        act.Start(0),
        Until(lambda s: s.clients[0].pqs[0] is not None),
        act.Produce(0, "A"),
        Until(lambda s: s.broker.offsets[0] is not None, TIMER_ACTIONS + (act.BrokerReceive,)),
        placed,
        act.AdminReset(0, 0, False),
        act.ClientResetReceive(0),
        Until(
            lambda s: s.clients[0].reset_wake is not None and s.now >= s.clients[0].reset_wake,
            TIMER_ACTIONS + (act.SendPull,),
        ),
        act.ClientResetWake(0),
    )
    state, _ = lockstep_script(config, tmp_path, *script)
    cl = state.clients[0]
    assert not cl.paused and cl.rebalance_requested and cl.pqs[0] is None and cl.mem[0] is None
    assert any(isinstance(c, Commit) and c.offset == 0 and c.cause == "admin-reset-client" for c in cl.channel)


def test_4_9_8_offset_illegal_fix_during_a_client_reset_removes_the_held_pq_and_its_memory_offset(
    tmp_path: Path,
) -> None:
    """R5.7 and R3.10a: a pull below minOffset gets OFFSET_ILLEGAL while a client reset sleeps; the reset's
    dropped pq is still in processQueueTable, so the fix's ``removeProcessQueue`` (10 s later, before the
    reset wakes) finds it there: it removes it, persists and removes the memory offset (removeUnnecessaryMessageQueue).
    The reset then finds no pq of the queue and does nothing for it. (Campaign seed 7, unit 88: the model kept
    the memory offset, REFINEMENT:29f56a1706.)"""
    config = Config(
        consumers=1,
        queues=1,
        messages_per_queue=3,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
        retention_deletes=1,
        admin_resets=1,
    )
    answered = Until(lambda s: all(p.result is not None for p in s.clients[0].pulls), (act.BrokerReceive,))
    script = (
        act.Start(0),
        act.Rebalance(0),  # the pq at 0
        act.Produce(0, "A"),
        act.RetentionDelete(0),  # minOffset 1: a pull at 0 is OFFSET_ILLEGAL
        Until(lambda s: s.broker.offsets[0] is not None, TIMER_ACTIONS + (act.BrokerReceive,)),
        act.AdminReset(0, 1, False),
        act.SendPull(0, 0),
        answered,
        act.ClientResetReceive(0),  # suspend; the pq is dropped but stays in the table (reset_held)
        act.ReceivePull(0, 0),  # OFFSET_ILLEGAL: the fix is due at the reset's wake time
        Until(lambda s: any(f.due <= s.now for f in s.clients[0].offset_fixes)),
        act.FixOffsetIllegal(0, 0),  # runs before the wake
    )
    state, _ = lockstep_script(config, tmp_path, *script)
    cl = state.clients[0]
    assert cl.pqs[0] is None and cl.reset_held == () and cl.mem[0] is None and cl.reset_wake == state.now
    fixes = [c for c in cl.channel if isinstance(c, Commit) and c.cause == "offset-illegal-fix"]
    assert [c.offset for c in fixes] == [1, 1]  # persist(mq), then removeUnnecessaryMessageQueue's persist
    state, _ = lockstep_script(config, tmp_path / "woken", *script, act.ClientResetWake(0))
    cl = state.clients[0]
    assert not cl.paused and cl.mem[0] is None  # the reset found no pq of queue 0: no updateOffset for it
    assert not any(isinstance(c, Commit) and c.cause == "admin-reset-client" for c in cl.channel)


# --- slaves (R2.4, R2.5, R3.4, R3.8, R5.3-R5.5, R9.3): the known slave bugs, in lockstep ---------------------


@pytest.mark.parametrize("offset_check_in_slave", [False, True])
def test_rmq17_a_lagging_slave_moves_the_consumer_only_with_offset_check_in_slave(
    tmp_path: Path, offset_check_in_slave: bool
) -> None:
    """R5.5 [RMQ-17]: the slave's copy is empty and the pull asks offset 1. offsetCheckInSlave = false (the
    default): ``nextOffsetCorrection`` keeps 1 and PULL_OFFSET_MOVED becomes PULL_RETRY_IMMEDIATELY, so the
    client pulls again at 1. true: PULL_OFFSET_MOVED to 0, the slave's own bound (OFFSET_ILLEGAL; INV-21)."""
    config = slave_config(consume_from_where="CONSUME_FROM_LAST_OFFSET", offset_check_in_slave=offset_check_in_slave)
    state, broken = lockstep_script(config, tmp_path, *RMQ17_SCHEDULE)
    pq = state.clients[0].pqs[0]
    if offset_check_in_slave:
        assert [(a, [v.id for v in vs]) for a, vs in broken] == [(act.ReceivePull(0, 0), ["INV-21"])]
        assert pq is not None and pq.pull_state == PULL_DROPPED and state.clients[0].offset_fixes[0].offset == 0
    else:
        assert broken == []
        assert pq is not None and pq.next_offset == 1 and pq.pull_ready_at == state.now


def _slave_outage_script(version: str) -> tuple[Config, tuple[act.Action, ...]]:
    """``slave_scenarios.slave_outage`` (RMQ-25 (2)) as the model ran it, to replay in lockstep."""
    d = slave_outage(version)
    return d.model.config, tuple(d.taken)


def test_rmq25_slave_commits_taken_during_the_outage_are_overwritten_by_the_next_sync_in_lockstep(
    tmp_path: Path,
) -> None:
    """R3.4, R3.8 [RMQ-25 (2)]: the slave took 4 while the master was down (no role check); SlaveSync's putAll
    writes the master's 2 back; the consumer restarted meanwhile resumes at 2 and gets 2 and 3 again."""
    config, script = _slave_outage_script("4.9.8")
    state, broken = lockstep_script(config, tmp_path, *script)
    assert broken == []  # SLAVE_ANOMALIES: tolerated by default
    assert state.slave is not None and state.slave.offsets[0] == 2 and state.broker.offsets[0] == 2
    history = [e.kind for e in history_list(state)]
    assert "commit-landed-on-slave" in history and "slave-sync" in history
    pq = state.clients[0].pqs[0]
    assert pq is not None and pq.next_offset == 2


def test_5x_slave_rejects_pulls_but_takes_commits_in_lockstep(tmp_path: Path) -> None:
    """R5.4: a 5.x slave answers every pull SYSTEM_BUSY (``rejectRequest``), an exception to the client, which
    pulls again 3 s later at the same offset; the commits it takes still land (R3.4); its sync runs at 61 s."""
    config, script = _slave_outage_script("5.x")
    cut = script.index(act.BrokerRestart())
    state, broken = lockstep_script(config, tmp_path, *script[:cut])
    assert broken == []
    pq = state.clients[0].pqs[0]
    assert pq is not None and pq.next_offset == 2
    assert state.slave is not None and state.slave.offsets[0] == 2 and state.slave.next_sync == 61_000
    assert "commit-landed-on-slave" in [e.kind for e in history_list(state)]
