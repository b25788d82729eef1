"""The held-out set (spec/variants/held_out, docs/held_out.md): each variant really does its bug, and which
properties report it on its witness.

A witness is a fixed action schedule from ``initial()`` of a small configuration. Both the correct model and the
variant accept it; their end states differ in the way the bug describes (``DIFFERS``). Then the schedule is
replayed with the variant planted through the existing replay (``properties/explore.py``): every invariant and
action property at every step, liveness at quiescence from its end, and the message fates of the quiesced state.
The properties that fire must be exactly the registry's ``seen_by``, an empty tuple for a bug no property sees
on its witness. Nothing here is tuned to make a property fire: the registry records what is seen.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from rmqspec.properties.explore import replay_liveness
from rmqspec.properties.fates import message_fates
from rmqspec.spec import actions as act
from rmqspec.spec import broker_rules as br
from rmqspec.spec.config import HELD_OUT_NAMES, MUTATIONS, Config
from rmqspec.spec.model import Model
from rmqspec.spec.state import PULL_DROPPED, PULL_READY, Commit, ProcessQueue, PullRequestMsg, State
from rmqspec.spec.variants import VARIANTS
from rmqspec.spec.variants.held_out import HELD_OUT, HELD_OUT_VARIANTS


def _quiet_until(config: Config, prefix: list[act.Action], until: int) -> list[act.Action]:
    """``prefix``, then the correct model's clock run to ``until``: a Tick when one is enabled, else the first due
    timer of ``enabled`` (heartbeat, persist, flush, rebalance, cleaner, lockAll, scheduled delivery). Deterministic: a
    fixed schedule too long to spell out, for a witness that needs two minutes to pass with nothing else happening."""
    timers = (
        act.Heartbeat,
        act.PersistOffsets,
        act.BrokerFlush,
        act.Rebalance,
        act.CleanExpiredMsg,
        act.LockAll,
        act.DeliverScheduled,
    )
    model = Model(config)
    state = model.initial()
    for action in prefix:
        state = model.step(state, action)
    schedule = list(prefix)
    while state.now < until:
        enabled = model.enabled(state)
        ticks = [a for a in enabled if isinstance(a, act.Tick)]
        due = [a for a in enabled if isinstance(a, timers) and not (isinstance(a, act.PersistOffsets) and a.lagging)]
        action = ticks[0] if ticks else due[0]
        state = model.step(state, action)
        schedule.append(action)
    return schedule


_FLOW_CONTROL_CONFIG = Config(
    consumers=1,
    queues=1,
    messages_per_queue=2,
    client_crashes=0,
    client_shutdowns=0,
    broker_crashes=0,
    send_back_failures=0,
    pull_threshold_for_queue=1,
    consume_timeout=24 * 3_600_000,
)


# a BROADCASTING consumer's OFFSET_ILLEGAL reply and its fix 10 s later (the witness of two local-store bugs)
_BROADCAST_OFFSET_FIX: tuple[Config, list[act.Action]] = (
    Config(
        consumers=1,
        queues=1,
        messages_per_queue=2,
        mode="BROADCASTING",
        client_crashes=0,
        client_shutdowns=0,
        broker_crashes=0,
        send_back_failures=0,
        retention_deletes=1,
    ),
    [
        act.Start(client=0),
        act.Rebalance(client=0),
        act.SendPull(client=0, queue=0),
        act.BrokerReceive(client=0, overtakes=0),
        act.Produce(queue=0, tag="A"),
        act.Produce(queue=0, tag="A"),
        act.CoolQueueHead(queue=0),
        act.RetentionDelete(queue=0),
        act.ReceivePull(client=0, pq_uid=0),
        act.Tick(),
        act.Heartbeat(client=0),
        act.Tick(),
        act.FixOffsetIllegal(client=0, queue=0),
    ],
)


# name -> (configuration, witness schedule)
# the sixth set's client half: one consumer, one queue of two messages, both pulled and handed to the listener
# one orderly consumer whose broker crashes: lockAll can no longer renew the lock its pq holds
_ORDERLY_BROKER_CRASH = Config(
    consumers=1,
    queues=1,
    messages_per_queue=1,
    orderly=True,
    client_crashes=0,
    client_shutdowns=0,
    broker_crashes=1,
    send_back_failures=0,
)

_TWO_MESSAGES_ONE_QUEUE = Config(
    consumers=1,
    queues=1,
    messages_per_queue=2,
    client_crashes=0,
    client_shutdowns=0,
    broker_crashes=0,
    send_back_failures=0,
)
_PULL_TWO_AND_CONSUME = [
    act.Produce(queue=0, tag="A"),
    act.Produce(queue=0, tag="A"),
    act.Start(client=0),
    act.Rebalance(client=0),
    act.SendPull(client=0, queue=0),
    act.BrokerReceive(client=0, overtakes=0),
    act.ReceivePull(client=0, pq_uid=0),
    act.StartConsume(client=0, rid=2),
]


def _silent_then_expired(config: Config, silencing: act.Action) -> list[act.Action]:
    """Two consumers, each rebalanced onto its queue; then ``silencing`` (consumer 1 stalls or crashes), the correct
    model's clock run to 121 s, past 120 s since consumer 1's last heartbeat, and its channel goes (ExpireChannel)."""
    prefix = [act.Start(client=0), act.Start(client=1), act.Rebalance(client=0), act.Rebalance(client=1), silencing]
    return [*_quiet_until(config, prefix, 121_000), act.ExpireChannel(client=1)]


WITNESSES: dict[str, tuple[Config, list[act.Action]]] = {
    "local_offset_bak_never_written": (
        Config(
            consumers=1,
            queues=1,
            messages_per_queue=3,
            mode="BROADCASTING",
            client_crashes=2,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
            local_offset_file_corruptions=1,
        ),
        [
            act.Start(client=0),
            act.Produce(queue=0, tag="A"),
            act.CoolQueueHead(queue=0),
            act.Produce(queue=0, tag="A"),
            act.Crash(client=0),
            act.Start(client=0),
            act.Produce(queue=0, tag="A"),
            act.Tick(),
            act.Rebalance(client=0),
            act.SendPull(client=0, queue=0),
            act.BrokerReceive(client=0, overtakes=0),
            act.ReceivePull(client=0, pq_uid=0),
            act.Heartbeat(client=0),
            act.Tick(),
            act.BrokerFlush(),
            act.SendPull(client=0, queue=0),
            act.PersistOffsets(client=0, lagging=0),
            act.Tick(),
            act.PersistOffsets(client=0, lagging=0),
            act.Crash(client=0),
            act.CorruptLocalOffsetFile(client=0),
            act.Start(client=0),
            act.Rebalance(client=0),
        ],
    ),
    "clean_expired_unstarted": (
        Config(
            consumers=1,
            queues=1,
            messages_per_queue=3,
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
            consume_timeout=2000,
        ),
        [
            act.Start(client=0),
            act.Produce(queue=0, tag="A"),
            act.CoolQueueHead(queue=0),
            act.Rebalance(client=0),
            act.SendPull(client=0, queue=1),
            act.SendPull(client=0, queue=0),
            act.Tick(),
            act.Produce(queue=0, tag="A"),
            act.Produce(queue=0, tag="A"),
            act.Heartbeat(client=0),
            act.Tick(),
            act.CleanExpiredMsg(client=0),
            act.BrokerReceive(client=0, overtakes=0),
            act.ReceivePull(client=0, pq_uid=1),
            act.BrokerReceive(client=0, overtakes=0),
            act.Tick(),
            act.SendPull(client=0, queue=1),
            act.ReceivePull(client=0, pq_uid=0),
            act.CleanExpiredMsg(client=0),
            act.StartConsume(client=0, rid=3),
            act.Tick(),
            act.CleanExpiredMsg(client=0),
        ],
    ),
    "lock_all_keeps_lock_time": (
        Config(
            consumers=1,
            queues=1,
            messages_per_queue=2,
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
            orderly=True,
        ),
        [
            act.Start(client=0),
            act.Rebalance(client=0),
            act.Tick(),
            act.LockAll(client=0),
        ],
    ),
    "orderly_removal_keeps_lock": (
        Config(
            queues=2,
            messages_per_queue=2,
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
            orderly=True,
        ),
        [
            act.Start(client=1),
            act.Rebalance(client=1),
            act.SendPull(client=1, queue=0),
            act.Produce(queue=1, tag="A"),
            act.SendPull(client=1, queue=1),
            act.Start(client=0),
            act.Rebalance(client=1),
            act.Rebalance(client=0),
        ],
    ),
    "reset_rebalance_not_paused": (
        Config(
            consumers=1,
            queues=1,
            messages_per_queue=3,
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
            admin_resets=1,
        ),
        [
            act.Start(client=0),
            act.Rebalance(client=0),
            act.Tick(),
            act.Heartbeat(client=0),
            act.SendPull(client=0, queue=1),
            act.BrokerReceive(client=0, overtakes=0),
            act.Tick(),
            act.PersistOffsets(client=0, lagging=0),
            act.BrokerFlush(),
            act.ReceivePull(client=0, pq_uid=1),
            act.BrokerReceive(client=0, overtakes=0),
            act.SendPull(client=0, queue=1),
            act.Tick(),
            act.BrokerFlush(),
            act.SendPull(client=0, queue=0),
            act.PersistOffsets(client=0, lagging=0),
            act.CleanExpiredMsg(client=0),
            act.BrokerReceive(client=0, overtakes=0),
            act.AdminReset(queue=0, target=0, by_timestamp=False),
            act.Tick(),
            act.ClientResetReceive(client=0),
            act.Rebalance(client=0),
        ],
    ),
    "commit_to_slave_while_master_up": (
        Config(
            consumers=1,
            queues=1,
            messages_per_queue=2,
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
            slave=True,
        ),
        [
            act.Start(client=0),
            act.Tick(),
            act.Rebalance(client=0),
            act.Heartbeat(client=0),
            act.SendPull(client=0, queue=1),
            act.Tick(),
            act.SlaveSync(),
            act.SendPull(client=0, queue=0),
            act.Tick(),
            act.BrokerFlush(),
            act.PersistOffsets(client=0, lagging=0),
        ],
    ),
    "no_correct_tags_offset": (
        Config(
            consumers=1,
            queues=1,
            messages_per_queue=3,
            tags=("A", "B"),
            subscription=("A",),
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
        ),
        [
            act.Start(client=0),
            act.Tick(),
            act.Rebalance(client=0),
            act.SendPull(client=0, queue=0),
            act.Produce(queue=0, tag="B"),
            act.BrokerReceive(client=0, overtakes=0),
            act.ReceivePull(client=0, pq_uid=0),
        ],
    ),
    "dropped_pq_request_consumed": (
        Config(queues=1, messages_per_queue=2, client_crashes=0, broker_crashes=0, send_back_failures=0),
        [
            act.Start(client=1),
            act.Produce(queue=0, tag="A"),
            act.CoolQueueHead(queue=0),
            act.Start(client=0),
            act.Shutdown(client=0),
            act.Tick(),
            act.Rebalance(client=1),
            act.SendPull(client=1, queue=0),
            act.SendPull(client=1, queue=1),
            act.Produce(queue=0, tag="A"),
            act.BrokerReceive(client=1, overtakes=0),
            act.Start(client=0),
            act.Rebalance(client=1),
            act.Heartbeat(client=1),
            act.Rebalance(client=0),
            act.ReceivePull(client=1, pq_uid=0),
            act.SendPull(client=0, queue=1),
            act.StartConsume(client=1, rid=2),
        ],
    ),
    "query_error_reads_as_no_offset": (
        Config(
            consumers=1,
            queues=1,
            messages_per_queue=2,
            client_crashes=0,
            broker_crashes=0,
            send_back_failures=0,
            query_errors=1,
            version="5.x",
        ),
        [
            act.Start(client=0),
            act.Tick(),
            act.RebalanceQueryError(client=0, queue=0),
        ],
    ),
    "slave_corrects_from_own_bounds": (
        Config(
            consumers=1,
            queues=1,
            messages_per_queue=3,
            client_crashes=0,
            client_shutdowns=0,
            send_back_failures=0,
            retention_deletes=1,
            slave=True,
        ),
        [
            act.Tick(),
            act.Start(client=0),
            act.SlaveSync(),
            act.Tick(),
            act.Produce(queue=0, tag="A"),
            act.CoolQueueHead(queue=0),
            act.RetentionDelete(queue=0),
            act.Rebalance(client=0),
            act.Heartbeat(client=0),
            act.SendPull(client=0, queue=1),
            act.BrokerCrash(),
            act.SendPull(client=0, queue=0),
            act.Tick(),
            act.BrokerReceive(client=0, overtakes=0),
        ],
    ),
    "broadcast_failure_kept_in_pq": (
        Config(
            queues=1,
            consumers=1,
            messages_per_queue=2,
            mode="BROADCASTING",
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
        ),
        [
            act.Start(client=0),
            act.Rebalance(client=0),
            act.Produce(queue=0, tag="A"),
            act.SendPull(client=0, queue=0),
            act.CoolQueueHead(queue=0),
            act.BrokerReceive(client=0, overtakes=0),
            act.ReceivePull(client=0, pq_uid=0),
            act.StartConsume(client=0, rid=1),
            act.Produce(queue=0, tag="A"),
            act.FinishConsume(client=0, rid=1, status="CONSUME_SUCCESS", ack_index=-1, send_back_fails=0),
        ],
    ),
    "orderly_first_pull_no_reread": (
        Config(
            queues=1,
            consumers=2,
            messages_per_queue=3,
            orderly=True,
            client_crashes=0,
            broker_crashes=0,
            send_back_failures=0,
        ),
        [
            act.Start(client=1),
            act.Rebalance(client=1),
            act.Produce(queue=0, tag="A"),
            act.CoolQueueHead(queue=0),
            act.SendPull(client=1, queue=0),
            act.Produce(queue=0, tag="A"),
            act.BrokerReceive(client=1, overtakes=0),
            act.ReceivePull(client=1, pq_uid=0),
            act.StartConsume(client=1, rid=2),
            act.FinishConsume(client=1, rid=2, status="SUCCESS", ack_index=-1, send_back_fails=0),
            act.SendPull(client=1, queue=1),
            act.SendPull(client=1, queue=0),
            act.Shutdown(client=1),
            act.Tick(),
            act.Start(client=1),
            act.Rebalance(client=1),
            act.Produce(queue=0, tag="A"),
            act.BrokerReceive(client=1, overtakes=0),
            act.BrokerFlush(),
            act.SendPull(client=1, queue=1),
            act.BrokerReceive(client=1, overtakes=0),
            act.BrokerReceive(client=1, overtakes=0),
            act.SendPull(client=1, queue=0),
            act.Tick(),
            act.LockAll(client=1),
            act.Start(client=0),
            act.Heartbeat(client=1),
            act.Tick(),
            act.Rebalance(client=1),
            act.Rebalance(client=0),
            act.SendPull(client=0, queue=0),
            act.LockAll(client=0),
            act.BrokerReceive(client=1, overtakes=0),
            act.SendPull(client=0, queue=1),
            act.BrokerReceive(client=0, overtakes=0),
            act.BrokerReceive(client=1, overtakes=0),
            act.ReceivePull(client=1, pq_uid=4),
            act.ReceivePull(client=0, pq_uid=0),
            act.BrokerReceive(client=1, overtakes=0),
            act.BrokerReceive(client=0, overtakes=0),
            act.StartConsume(client=0, rid=2),
        ],
    ),
    # the second set (spec/variants/held_out/client_reports.py): figures seen
    "local_persist_one_noop": _BROADCAST_OFFSET_FIX,
    "local_offset_dir_per_start": (
        Config(
            consumers=1,
            queues=1,
            messages_per_queue=2,
            mode="BROADCASTING",
            client_crashes=1,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
        ),
        [
            act.Start(client=0),
            act.Rebalance(client=0),
            act.SendPull(client=0, queue=0),
            act.Tick(),
            act.BrokerReceive(client=0, overtakes=0),
            act.ReceivePull(client=0, pq_uid=0),
            act.Heartbeat(client=0),
            act.Tick(),
            act.Produce(queue=0, tag="A"),
            act.PersistOffsets(client=0, lagging=0),
            act.SendPull(client=0, queue=0),
            act.Crash(client=0),
            act.CoolQueueHead(queue=0),
            act.BrokerReceive(client=0, overtakes=0),
            act.Start(client=0),
        ],
    ),
    "local_offset_load_no_bak": (
        Config(
            consumers=1,
            queues=1,
            messages_per_queue=2,
            mode="BROADCASTING",
            client_crashes=1,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
            local_offset_file_corruptions=1,
        ),
        [
            act.CorruptLocalOffsetFile(client=0),
            act.Produce(queue=0, tag="A"),
            act.Tick(),
            act.BrokerFlush(),
            act.Start(client=0),
        ],
    ),
    "retry_queue_no_offset_skipped": (
        Config(
            consumers=1,
            queues=1,
            messages_per_queue=2,
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
            version="5.x",
        ),
        [
            act.Produce(queue=0, tag="A"),
            act.Start(client=0),
            act.Tick(),
            act.Heartbeat(client=0),
            act.Rebalance(client=0),
        ],
    ),
    "offset_illegal_fix_keeps_pq": (
        Config(
            consumers=1,
            queues=1,
            messages_per_queue=2,
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
            retention_deletes=1,
        ),
        [
            act.Start(client=0),
            act.Rebalance(client=0),
            act.SendPull(client=0, queue=0),
            act.Produce(queue=0, tag="A"),
            act.RetentionDelete(queue=0),
            act.BrokerReceive(client=0, overtakes=0),
            act.ReceivePull(client=0, pq_uid=0),
            act.Produce(queue=0, tag="A"),
            act.CoolQueueHead(queue=0),
            act.SendPull(client=0, queue=1),
            act.Tick(),
            act.Heartbeat(client=0),
            act.Tick(),
            act.BrokerFlush(),
            act.FixOffsetIllegal(client=0, queue=0),
        ],
    ),
    "retry_messages_answered_later": (
        Config(
            consumers=1,
            queues=1,
            messages_per_queue=1,
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
        ),
        [
            act.Produce(queue=0, tag="A"),
            act.Start(client=0),
            act.Rebalance(client=0),
            act.SendPull(client=0, queue=0),
            act.SendPull(client=0, queue=1),
            act.BrokerReceive(client=0, overtakes=0),
            act.Tick(),
            act.BrokerReceive(client=0, overtakes=0),
            act.ReceivePull(client=0, pq_uid=0),
            act.ReceivePull(client=0, pq_uid=1),
            act.Heartbeat(client=0),
            act.StartConsume(client=0, rid=2),
            act.CoolQueueHead(queue=0),
            act.FinishConsume(client=0, rid=2, status="RECONSUME_LATER", ack_index=-1, send_back_fails=0),
            act.SendPull(client=0, queue=1),
            act.SendPull(client=0, queue=0),
            act.Tick(),
            act.BrokerReceive(client=0, overtakes=0),
            act.PersistOffsets(client=0, lagging=0),
            act.BrokerFlush(),
            act.Tick(),
            act.DeliverScheduled(),
            act.ReceivePull(client=0, pq_uid=1),
            act.SendPull(client=0, queue=1),
            act.StartConsume(client=0, rid=3),
            act.FinishConsume(client=0, rid=3, status="CONSUME_SUCCESS", ack_index=0, send_back_fails=0),
        ],
    ),
    "orderly_suspend_drops_batch": (
        Config(
            consumers=1,
            queues=1,
            messages_per_queue=2,
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
            orderly=True,
        ),
        [
            act.Start(client=0),
            act.Produce(queue=0, tag="A"),
            act.Rebalance(client=0),
            act.SendPull(client=0, queue=0),
            act.SendPull(client=0, queue=1),
            act.BrokerReceive(client=0, overtakes=0),
            act.BrokerReceive(client=0, overtakes=0),
            act.Tick(),
            act.ReceivePull(client=0, pq_uid=0),
            act.StartConsume(client=0, rid=2),
            act.FinishConsume(
                client=0, rid=2, status="SUSPEND_CURRENT_QUEUE_A_MOMENT", ack_index=-1, send_back_fails=0
            ),
        ],
    ),
    "orderly_empty_tree_corrects_offset": (
        Config(
            consumers=1,
            queues=1,
            messages_per_queue=2,
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
            orderly=True,
        ),
        [
            act.Start(client=0),
            act.Produce(queue=0, tag="A"),
            act.Rebalance(client=0),
            act.SendPull(client=0, queue=0),
            act.BrokerReceive(client=0, overtakes=0),
            act.CoolQueueHead(queue=0),
            act.ReceivePull(client=0, pq_uid=0),
            act.SendPull(client=0, queue=0),
            act.BrokerReceive(client=0, overtakes=0),
            act.StartConsume(client=0, rid=2),
            act.ReceivePull(client=0, pq_uid=0),
        ],
    ),
    "orderly_forward_to_retry": (
        Config(
            consumers=1,
            queues=1,
            messages_per_queue=2,
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
            orderly=True,
            version="5.x",
            max_reconsume_times=0,
        ),
        [
            act.Start(client=0),
            act.Tick(),
            act.Heartbeat(client=0),
            act.Rebalance(client=0),
            act.LockAll(client=0),
            act.Tick(),
            act.SendPull(client=0, queue=0),
            act.Produce(queue=0, tag="A"),
            act.SendPull(client=0, queue=1),
            act.BrokerReceive(client=0, overtakes=0),
            act.ReceivePull(client=0, pq_uid=0),
            act.StartConsume(client=0, rid=2),
            act.FinishConsume(
                client=0, rid=2, status="SUSPEND_CURRENT_QUEUE_A_MOMENT", ack_index=-1, send_back_fails=0
            ),
        ],
    ),
    "broadcast_orderly_locks_on_add": (
        Config(
            consumers=2,
            queues=1,
            messages_per_queue=2,
            mode="BROADCASTING",
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
            orderly=True,
            version="5.x",
        ),
        [
            act.Produce(queue=0, tag="A"),
            act.Start(client=1),
            act.Tick(),
            act.Start(client=0),
            act.Produce(queue=0, tag="A"),
            act.Heartbeat(client=1),
            act.CoolQueueHead(queue=0),
            act.Rebalance(client=1),
            act.Tick(),
            act.Tick(),
            act.Heartbeat(client=0),
            act.Rebalance(client=0),
        ],
    ),
    # the third set (spec/variants/held_out/fix_commits.py): figures seen
    "shutdown_persists_empty_table": (
        Config(
            consumers=1,
            queues=1,
            messages_per_queue=2,
            client_crashes=0,
            client_shutdowns=1,
            broker_crashes=0,
            send_back_failures=0,
        ),
        [
            act.Produce(queue=0, tag="A"),
            act.Start(client=0),
            act.Rebalance(client=0),
            act.SendPull(client=0, queue=0),
            act.BrokerReceive(client=0, overtakes=0),
            act.ReceivePull(client=0, pq_uid=0),
            act.StartConsume(client=0, rid=2),
            act.FinishConsume(client=0, rid=2, status="CONSUME_SUCCESS", ack_index=0, send_back_fails=0),
            act.ApplyConsumeOffset(client=0, rid=2),
            act.Shutdown(client=0),
        ],
    ),
    "offset_not_found_read_as_error": (
        Config(
            consumers=1,
            queues=1,
            messages_per_queue=2,
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
            version="5.x",
        ),
        [
            act.Start(client=0),
            act.Tick(),
            act.Rebalance(client=0),
        ],
    ),
    "orderly_new_pq_unlocked": (
        Config(
            consumers=1,
            queues=1,
            messages_per_queue=2,
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
            orderly=True,
        ),
        [
            act.Start(client=0),
            act.Rebalance(client=0),
            act.SendPull(client=0, queue=0),
        ],
    ),
    "consume_result_lost_to_npe": (
        Config(
            consumers=1,
            queues=1,
            messages_per_queue=2,
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
        ),
        [
            act.Produce(queue=0, tag="A"),
            act.Start(client=0),
            act.Rebalance(client=0),
            act.SendPull(client=0, queue=0),
            act.BrokerReceive(client=0, overtakes=0),
            act.ReceivePull(client=0, pq_uid=0),
            act.StartConsume(client=0, rid=2),
            act.FinishConsume(client=0, rid=2, status="CONSUME_SUCCESS", ack_index=0, send_back_fails=0),
        ],
    ),
    "orderly_shutdown_keeps_locks": (
        Config(
            consumers=2,
            queues=1,
            messages_per_queue=2,
            client_crashes=0,
            client_shutdowns=1,
            broker_crashes=0,
            send_back_failures=0,
            orderly=True,
        ),
        [
            act.Start(client=1),
            act.Rebalance(client=1),
            act.Shutdown(client=1),
            act.Start(client=0),
            act.Rebalance(client=0),
        ],
    ),
    "orderly_suspend_counts_twice": (
        Config(
            consumers=1,
            queues=1,
            messages_per_queue=2,
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
            orderly=True,
        ),
        [
            act.Start(client=0),
            act.Produce(queue=0, tag="A"),
            act.Rebalance(client=0),
            act.SendPull(client=0, queue=0),
            act.BrokerReceive(client=0, overtakes=0),
            act.ReceivePull(client=0, pq_uid=0),
            act.StartConsume(client=0, rid=2),
            act.FinishConsume(
                client=0, rid=2, status="SUSPEND_CURRENT_QUEUE_A_MOMENT", ack_index=-1, send_back_fails=0
            ),
        ],
    ),
    "tags_offset_skips_zero": (
        Config(
            consumers=1,
            queues=1,
            messages_per_queue=2,
            mode="BROADCASTING",
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
        ),
        [
            act.Start(client=0),
            act.Rebalance(client=0),
            act.SendPull(client=0, queue=0),
            act.BrokerReceive(client=0, overtakes=0),
            act.ReceivePull(client=0, pq_uid=0),
            act.Tick(),
            act.Heartbeat(client=0),
            act.Tick(),
            act.PersistOffsets(client=0, lagging=0),
        ],
    ),
    "rebalance_keeps_dirty_offset": (
        Config(
            consumers=2,
            queues=1,
            messages_per_queue=2,
            client_crashes=0,
            client_shutdowns=1,
            broker_crashes=0,
            send_back_failures=0,
            version="5.x",
        ),
        [
            act.Start(client=1),
            act.Tick(),
            act.Rebalance(client=1),
            act.Heartbeat(client=1),
            act.Tick(),
            act.SendPull(client=1, queue=0),
            act.BrokerReceive(client=1, overtakes=0),
            act.Start(client=0),
            act.Tick(),
            act.Rebalance(client=1),
            act.ReceivePull(client=1, pq_uid=0),
            act.Produce(queue=0, tag="A"),
            act.CoolQueueHead(queue=0),
            act.Shutdown(client=0),
            act.Tick(),
            act.Rebalance(client=1),
        ],
    ),
    "send_back_limit_from_group": (
        Config(
            consumers=1,
            queues=1,
            messages_per_queue=2,
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
            max_reconsume_times=0,
        ),
        [
            act.Produce(queue=0, tag="A"),
            act.Start(client=0),
            act.Rebalance(client=0),
            act.SendPull(client=0, queue=0),
            act.BrokerReceive(client=0, overtakes=0),
            act.ReceivePull(client=0, pq_uid=0),
            act.StartConsume(client=0, rid=2),
            act.FinishConsume(client=0, rid=2, status="RECONSUME_LATER", ack_index=-1, send_back_fails=0),
        ],
    ),
    "offset_illegal_pulls_on": (
        Config(
            consumers=1,
            queues=1,
            messages_per_queue=2,
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
            retention_deletes=1,
        ),
        [
            act.Start(client=0),
            act.Rebalance(client=0),
            act.SendPull(client=0, queue=0),
            act.Produce(queue=0, tag="A"),
            act.RetentionDelete(queue=0),
            act.BrokerReceive(client=0, overtakes=0),
            act.ReceivePull(client=0, pq_uid=0),
        ],
    ),
    # the fourth set (spec/variants/held_out/legacy_fixes.py): figures seen
    "young_queue_zero_from_disk": (
        Config(
            consumers=1,
            queues=1,
            messages_per_queue=2,
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
        ),
        [
            act.Produce(queue=0, tag="A"),
            act.CoolQueueHead(queue=0),
            act.Start(client=0),
            act.Rebalance(client=0),
        ],
    ),
    "timestamp_searched_in_seconds": (
        Config(
            consumers=1,
            queues=1,
            messages_per_queue=2,
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
            consume_from_where="CONSUME_FROM_TIMESTAMP",
            consume_timestamp=800,
        ),
        [
            act.Produce(queue=0, tag="A"),
            act.Start(client=0),
            act.Tick(),
            act.Produce(queue=0, tag="A"),
            act.CoolQueueHead(queue=0),
            act.Rebalance(client=0),
        ],
    ),
    "removal_counts_absent_messages": (
        Config(
            consumers=1,
            queues=1,
            messages_per_queue=2,
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
            consume_timeout=2000,
        ),
        [
            act.Produce(queue=0, tag="A"),
            act.Produce(queue=0, tag="A"),
            act.Start(client=0),
            act.Rebalance(client=0),
            act.SendPull(client=0, queue=0),
            act.BrokerReceive(client=0, overtakes=0),
            act.ReceivePull(client=0, pq_uid=0),
            act.StartConsume(client=0, rid=2),
            act.Tick(),
            act.Heartbeat(client=0),
            act.Tick(),
            act.CleanExpiredMsg(client=0),
            act.Tick(),
            act.CleanExpiredMsg(client=0),
            act.FinishConsume(client=0, rid=2, status="CONSUME_SUCCESS", ack_index=0, send_back_fails=0),
        ],
    ),
    "flow_control_keeps_pull_time": (
        _FLOW_CONTROL_CONFIG,
        [
            *_quiet_until(
                _FLOW_CONTROL_CONFIG,
                [
                    act.Produce(queue=0, tag="A"),
                    act.Produce(queue=0, tag="A"),
                    act.Start(client=0),
                    act.Rebalance(client=0),
                    act.SendPull(client=0, queue=0),
                    act.BrokerReceive(client=0, overtakes=0),
                    act.ReceivePull(client=0, pq_uid=0),
                ],
                140_000,
            ),
            act.Rebalance(client=0),
        ],
    ),
    "rebalance_removal_skips_persist": (
        Config(
            consumers=2,
            queues=1,
            messages_per_queue=2,
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
        ),
        [
            act.Produce(queue=0, tag="A"),
            act.Start(client=1),
            act.Rebalance(client=1),
            act.SendPull(client=1, queue=0),
            act.BrokerReceive(client=1, overtakes=0),
            act.ReceivePull(client=1, pq_uid=0),
            act.StartConsume(client=1, rid=2),
            act.FinishConsume(client=1, rid=2, status="CONSUME_SUCCESS", ack_index=0, send_back_fails=0),
            act.ApplyConsumeOffset(client=1, rid=2),
            act.Start(client=0),
            act.Rebalance(client=1),
        ],
    ),
    "orderly_take_keeps_consuming": (
        Config(
            consumers=1,
            queues=1,
            messages_per_queue=2,
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
            orderly=True,
        ),
        [
            act.Start(client=0),
            act.Produce(queue=0, tag="A"),
            act.Rebalance(client=0),
            act.SendPull(client=0, queue=0),
            act.BrokerReceive(client=0, overtakes=0),
            act.ReceivePull(client=0, pq_uid=0),
            act.StartConsume(client=0, rid=2),
            act.FinishConsume(client=0, rid=2, status="SUCCESS", ack_index=-1, send_back_fails=0),
            act.ApplyConsumeOffset(client=0, rid=2),
            act.Produce(queue=0, tag="A"),
            act.SendPull(client=0, queue=0),
            act.BrokerReceive(client=0, overtakes=0),
            act.ReceivePull(client=0, pq_uid=0),
        ],
    ),
    "consume_batches_skip_one": (
        Config(
            consumers=1,
            queues=1,
            messages_per_queue=2,
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
        ),
        [
            act.Produce(queue=0, tag="A"),
            act.Produce(queue=0, tag="A"),
            act.Start(client=0),
            act.Rebalance(client=0),
            act.SendPull(client=0, queue=0),
            act.BrokerReceive(client=0, overtakes=0),
            act.ReceivePull(client=0, pq_uid=0),
        ],
    ),
    "retry_queue_from_last_max": (
        Config(
            consumers=1,
            queues=1,
            messages_per_queue=2,
            client_crashes=1,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
            query_errors=1,
        ),
        [
            act.Start(client=0),
            act.Produce(queue=0, tag="A"),
            act.Rebalance(client=0),
            act.SendPull(client=0, queue=0),
            act.BrokerReceive(client=0, overtakes=0),
            act.ReceivePull(client=0, pq_uid=0),
            act.StartConsume(client=0, rid=2),
            act.FinishConsume(client=0, rid=2, status="RECONSUME_LATER", ack_index=-1, send_back_fails=0),
            act.Tick(),
            act.Heartbeat(client=0),
            act.Tick(),
            act.DeliverScheduled(),
            act.Crash(client=0),
            act.Start(client=0),
            act.RebalanceQueryError(client=0, queue=1),
        ],
    ),
    "orderly_first_pull_waits_for_broker": (
        Config(
            consumers=1,
            queues=1,
            messages_per_queue=2,
            client_crashes=1,
            client_shutdowns=0,
            broker_crashes=1,
            send_back_failures=0,
            orderly=True,
        ),
        [
            act.Start(client=0),
            act.Produce(queue=0, tag="A"),
            act.Rebalance(client=0),
            act.SendPull(client=0, queue=0),
            act.BrokerReceive(client=0, overtakes=0),
            act.ReceivePull(client=0, pq_uid=0),
            act.StartConsume(client=0, rid=2),
            act.FinishConsume(client=0, rid=2, status="SUCCESS", ack_index=-1, send_back_fails=0),
            act.ApplyConsumeOffset(client=0, rid=2),
            act.Tick(),
            act.Heartbeat(client=0),
            act.LockAll(client=0),
            act.Tick(),
            act.PersistOffsets(client=0, lagging=0),
            act.BrokerReceive(client=0, overtakes=0),
            act.BrokerReceive(client=0, overtakes=0),
            act.Crash(client=0),
            act.Start(client=0),
            act.Rebalance(client=0),
            act.BrokerCrash(),
            act.BrokerRestart(),
            act.SendPull(client=0, queue=0),
        ],
    ),
    "commit_of_new_queue_dropped": (
        Config(
            consumers=1,
            queues=2,
            messages_per_queue=2,
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
        ),
        [
            act.Start(client=0),
            act.Rebalance(client=0),
            act.Tick(),
            act.Heartbeat(client=0),
            act.Tick(),
            act.PersistOffsets(client=0, lagging=0),
            act.BrokerReceive(client=0, overtakes=0),
            act.BrokerReceive(client=0, overtakes=0),
            act.BrokerReceive(client=0, overtakes=0),
        ],
    ),
    # the fifth set (spec/variants/held_out/client_fixes.py): figures seen
    "local_remove_offset_noop": _BROADCAST_OFFSET_FIX,
    "send_back_failure_keeps_times": (
        Config(
            consumers=1,
            queues=1,
            messages_per_queue=1,
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=1,
        ),
        [
            act.Produce(queue=0, tag="A"),
            act.Start(client=0),
            act.Rebalance(client=0),
            act.SendPull(client=0, queue=0),
            act.BrokerReceive(client=0, overtakes=0),
            act.ReceivePull(client=0, pq_uid=0),
            act.StartConsume(client=0, rid=2),
            act.FinishConsume(client=0, rid=2, status="RECONSUME_LATER", ack_index=-1, send_back_fails=1),
        ],
    ),
    "client_reset_wake_throws": (
        Config(
            consumers=1,
            queues=1,
            messages_per_queue=2,
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
            admin_resets=1,
        ),
        [
            act.Produce(queue=0, tag="A"),
            act.Tick(),
            act.Produce(queue=0, tag="A"),
            act.BrokerFlush(),
            act.CoolQueueHead(queue=0),
            act.Tick(),
            act.Start(client=0),
            act.Rebalance(client=0),
            act.SendPull(client=0, queue=0),
            act.SendPull(client=0, queue=1),
            act.BrokerReceive(client=0, overtakes=0),
            act.ReceivePull(client=0, pq_uid=0),
            act.SendPull(client=0, queue=0),
            act.BrokerReceive(client=0, overtakes=0),
            act.BrokerReceive(client=0, overtakes=0),
            act.AdminReset(queue=0, target=0, by_timestamp=True),
            act.ClientResetReceive(client=0),
            act.ReceivePull(client=0, pq_uid=0),
            act.ReceivePull(client=0, pq_uid=1),
            act.BrokerFlush(),
            act.Tick(),
            act.Heartbeat(client=0),
            act.Tick(),
            act.BrokerFlush(),
            act.Tick(),
            act.ClientResetWake(client=0, late_reply=-1),
        ],
    ),
    "rebalance_every_ten_seconds": (
        Config(
            consumers=1,
            queues=1,
            messages_per_queue=1,
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
        ),
        [act.Start(client=0), act.Rebalance(client=0)],
    ),
    "memory_offset_read_as_absent": (
        Config(
            consumers=1,
            queues=1,
            messages_per_queue=2,
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
        ),
        [
            act.Produce(queue=0, tag="A"),
            act.CoolQueueHead(queue=0),
            act.Produce(queue=0, tag="A"),
            act.Start(client=0),
            act.Rebalance(client=0),
            act.SendPull(client=0, queue=0),
            act.BrokerReceive(client=0, overtakes=0),
            act.ReceivePull(client=0, pq_uid=0),
            act.SendPull(client=0, queue=0),
        ],
    ),
    "server_reset_table_not_written": (
        Config(
            consumers=1,
            queues=1,
            messages_per_queue=2,
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
            admin_resets=1,
            version="5.x",
        ),
        [
            act.Produce(queue=0, tag="A"),
            act.Start(client=0),
            act.Produce(queue=0, tag="A"),
            act.Tick(),
            act.Heartbeat(client=0),
            act.Tick(),
            act.Rebalance(client=0),
            act.CoolQueueHead(queue=0),
            act.PersistOffsets(client=0, lagging=0),
            act.BrokerReceive(client=0, overtakes=0),
            act.AdminReset(queue=0, target=2, by_timestamp=False),
        ],
    ),
    "new_lock_entry_not_granted": (
        Config(
            consumers=1,
            queues=1,
            messages_per_queue=1,
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
            orderly=True,
        ),
        [act.Start(client=0), act.Rebalance(client=0)],
    ),
    "retry_delay_stops_growing": (
        Config(
            consumers=1,
            queues=1,
            messages_per_queue=1,
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
            consume_timeout=24 * 3_600_000,
        ),
        [
            act.Start(client=0),
            act.Tick(),
            act.Rebalance(client=0),
            act.SendPull(client=0, queue=0),
            act.BrokerReceive(client=0, overtakes=0),
            act.ReceivePull(client=0, pq_uid=0),
            act.SendPull(client=0, queue=1),
            act.SendPull(client=0, queue=0),
            act.BrokerReceive(client=0, overtakes=0),
            act.Produce(queue=0, tag="A"),
            act.CoolQueueHead(queue=0),
            act.Heartbeat(client=0),
            act.BrokerReceive(client=0, overtakes=0),
            act.ReceivePull(client=0, pq_uid=0),
            act.SendPull(client=0, queue=0),
            act.BrokerReceive(client=0, overtakes=0),
            act.StartConsume(client=0, rid=2),
            act.ReceivePull(client=0, pq_uid=0),
            act.FinishConsume(client=0, rid=2, status="RECONSUME_LATER", ack_index=-1, send_back_fails=0),
            act.ApplyConsumeOffset(client=0, rid=2),
            act.Tick(),
            act.BrokerFlush(),
            act.PersistOffsets(client=0, lagging=0),
            act.ReceivePull(client=0, pq_uid=1),
            act.SendPull(client=0, queue=1),
            act.BrokerReceive(client=0, overtakes=0),
            act.Tick(),
            act.BrokerReceive(client=0, overtakes=0),
            act.DeliverScheduled(),
            act.BrokerReceive(client=0, overtakes=0),
            act.SendPull(client=0, queue=0),
            act.ReceivePull(client=0, pq_uid=1),
            act.SendPull(client=0, queue=1),
            act.BrokerReceive(client=0, overtakes=0),
            act.ReceivePull(client=0, pq_uid=0),
            act.StartConsume(client=0, rid=3),
            act.FinishConsume(client=0, rid=3, status="RECONSUME_LATER", ack_index=-1, send_back_fails=0),
            act.ApplyConsumeOffset(client=0, rid=3),
            act.SendPull(client=0, queue=0),
            act.Tick(),
            act.BrokerFlush(),
            act.PersistOffsets(client=0, lagging=0),
            act.BrokerReceive(client=0, overtakes=0),
            act.BrokerReceive(client=0, overtakes=0),
            act.ReceivePull(client=0, pq_uid=0),
            act.BrokerReceive(client=0, overtakes=0),
            act.SendPull(client=0, queue=0),
            act.BrokerReceive(client=0, overtakes=0),
            act.Tick(),
            act.BrokerReceive(client=0, overtakes=0),
            act.BrokerFlush(),
            act.ReceivePull(client=0, pq_uid=0),
            act.ReceivePull(client=0, pq_uid=1),
            act.SendPull(client=0, queue=0),
            act.PersistOffsets(client=0, lagging=0),
            act.BrokerReceive(client=0, overtakes=0),
            act.Tick(),
            act.Rebalance(client=0),
            act.Tick(),
            act.PersistOffsets(client=0, lagging=0),
            act.BrokerFlush(),
            act.Tick(),
            act.SendPull(client=0, queue=1),
            act.BrokerReceive(client=0, overtakes=0),
            act.ReceivePull(client=0, pq_uid=0),
            act.SendPull(client=0, queue=0),
            act.BrokerFlush(),
            act.PersistOffsets(client=0, lagging=0),
            act.BrokerReceive(client=0, overtakes=0),
            act.Tick(),
            act.BrokerReceive(client=0, overtakes=0),
            act.BrokerReceive(client=0, overtakes=1),
            act.ReceivePull(client=0, pq_uid=1),
            act.BrokerReceive(client=0, overtakes=0),
            act.Heartbeat(client=0),
            act.Tick(),
            act.BrokerReceive(client=0, overtakes=1),
            act.SendPull(client=0, queue=1),
            act.BrokerFlush(),
            act.PersistOffsets(client=0, lagging=0),
            act.Tick(),
            act.PersistOffsets(client=0, lagging=0),
            act.BrokerFlush(),
            act.Tick(),
            act.Rebalance(client=0),
            act.BrokerReceive(client=0, overtakes=0),
            act.BrokerReceive(client=0, overtakes=1),
            act.BrokerReceive(client=0, overtakes=0),
            act.DeliverScheduled(),
            act.Tick(),
            act.ReceivePull(client=0, pq_uid=1),
            act.StartConsume(client=0, rid=4),
            act.SendPull(client=0, queue=1),
            act.FinishConsume(client=0, rid=4, status="RECONSUME_LATER", ack_index=-1, send_back_fails=0),
        ],
    ),
    "broadcast_orderly_checks_lock": (
        Config(
            consumers=1,
            queues=1,
            messages_per_queue=2,
            mode="BROADCASTING",
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
            orderly=True,
        ),
        [
            act.Start(client=0),
            act.Produce(queue=0, tag="A"),
            act.CoolQueueHead(queue=0),
            act.Rebalance(client=0),
            act.SendPull(client=0, queue=0),
            act.BrokerReceive(client=0, overtakes=0),
            act.ReceivePull(client=0, pq_uid=0),
            act.Tick(),
            act.Heartbeat(client=0),
            act.Tick(),
            act.Produce(queue=0, tag="A"),
            act.BrokerFlush(),
            act.PersistOffsets(client=0, lagging=0),
            act.SendPull(client=0, queue=0),
            act.BrokerReceive(client=0, overtakes=0),
            act.Tick(),
            act.PersistOffsets(client=0, lagging=0),
            act.BrokerFlush(),
            act.Tick(),
            act.BrokerFlush(),
            act.ReceivePull(client=0, pq_uid=0),
            act.Rebalance(client=0),
            act.SendPull(client=0, queue=0),
            act.PersistOffsets(client=0, lagging=0),
            act.Tick(),
            act.StartConsume(client=0, rid=1),
            act.BrokerReceive(client=0, overtakes=0),
            act.BrokerFlush(),
            act.ReceivePull(client=0, pq_uid=0),
            act.FinishConsume(
                client=0, rid=1, status="SUSPEND_CURRENT_QUEUE_A_MOMENT", ack_index=-1, send_back_fails=0
            ),
            act.PersistOffsets(client=0, lagging=0),
            act.Tick(),
            act.Tick(),
            act.BrokerFlush(),
            act.PersistOffsets(client=0, lagging=0),
            act.Tick(),
            act.Heartbeat(client=0),
            act.Tick(),
            act.SendPull(client=0, queue=0),
            act.PersistOffsets(client=0, lagging=0),
            act.BrokerFlush(),
            act.StartConsume(client=0, rid=2),
        ],
    ),
    # the sixth set, broker half
    "offset_scan_ignores_online_group": (
        Config(
            consumers=1,
            queues=1,
            messages_per_queue=2,
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
            retention_deletes=1,
        ),
        [
            act.Start(client=0),
            act.Tick(),
            act.Produce(queue=0, tag="A"),
            act.Heartbeat(client=0),
            act.Produce(queue=0, tag="A"),
            act.Rebalance(client=0),
            act.Tick(),
            act.PersistOffsets(client=0, lagging=0),
            act.CoolQueueHead(queue=0),
            act.BrokerReceive(client=0, overtakes=0),
            act.BrokerFlush(),
            act.SendPull(client=0, queue=0),
            act.RetentionDelete(queue=0),
        ],
    ),
    "query_success_without_offset": (
        Config(
            consumers=1,
            queues=1,
            messages_per_queue=2,
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
        ),
        [
            act.Start(client=0),
            act.Rebalance(client=0),
        ],
    ),
    "schedule_service_not_started": (
        Config(
            consumers=1,
            queues=1,
            messages_per_queue=1,
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
        ),
        [
            act.Start(client=0),
            act.Produce(queue=0, tag="A"),
            act.Rebalance(client=0),
            act.SendPull(client=0, queue=0),
            act.BrokerReceive(client=0, overtakes=0),
            act.CoolQueueHead(queue=0),
            act.SendPull(client=0, queue=1),
            act.ReceivePull(client=0, pq_uid=0),
            act.StartConsume(client=0, rid=2),
            act.FinishConsume(client=0, rid=2, status="RECONSUME_LATER", ack_index=-1, send_back_fails=0),
            act.SendPull(client=0, queue=0),
            act.ApplyConsumeOffset(client=0, rid=2),
            act.Tick(),
            act.BrokerReceive(client=0, overtakes=0),
            act.ReceivePull(client=0, pq_uid=1),
            act.SendPull(client=0, queue=1),
            act.Heartbeat(client=0),
            act.Tick(),
            act.DeliverScheduled(),
        ],
    ),
    # the sixth set, client half (spec/variants/held_out/client_lifecycle_fixes.py): measured once
    "removal_count_triangular": (
        replace(_TWO_MESSAGES_ONE_QUEUE, consume_batch_size=2),
        [
            *_PULL_TWO_AND_CONSUME,
            act.FinishConsume(client=0, rid=2, status="CONSUME_SUCCESS", ack_index=1, send_back_fails=0),
        ],
    ),
    "sent_back_kept_in_pq": (
        _TWO_MESSAGES_ONE_QUEUE,
        [
            *_PULL_TWO_AND_CONSUME,
            act.FinishConsume(client=0, rid=2, status="RECONSUME_LATER", ack_index=-1, send_back_fails=0),
        ],
    ),
    # the seventh set, orderly half (spec/variants/held_out/orderly_gate_fixes.py): figures unseen
    "orderly_run_lock_check_or": (
        _ORDERLY_BROKER_CRASH,
        [
            *_quiet_until(
                _ORDERLY_BROKER_CRASH,
                [
                    act.Start(client=0),
                    act.Produce(queue=0, tag="A"),
                    act.Rebalance(client=0),
                    act.SendPull(client=0, queue=0),
                    act.BrokerReceive(client=0, overtakes=0),
                    act.ReceivePull(client=0, pq_uid=0),
                    act.BrokerCrash(),
                ],
                30_001,
            ),
            act.StartConsume(client=0, rid=2),
        ],
    ),
    "unlocked_orderly_pull_goes_on": (
        Config(
            consumers=2,
            queues=2,
            messages_per_queue=1,
            orderly=True,
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=1,
            send_back_failures=0,
            client_stalls=1,
        ),
        [
            act.Tick(),
            act.Start(client=1),
            act.Start(client=0),
            act.Produce(queue=0, tag="A"),
            act.Rebalance(client=0),
            act.SendPull(client=0, queue=2),
            act.Stall(client=0, duration=35_000),
            act.Produce(queue=1, tag="A"),
            act.BrokerCrash(),
            act.Tick(),
            act.CoolQueueHead(queue=0),
            act.Heartbeat(client=1),
            act.BrokerRestart(),
            act.Rebalance(client=1),
            act.LockAll(client=1),
            act.CoolQueueHead(queue=1),
            *[act.Tick(), act.PersistOffsets(client=1, lagging=0), act.Tick(), act.BrokerFlush()] * 3,
            act.LockAll(client=1),
            act.Rebalance(client=1),
            *[act.Tick(), act.PersistOffsets(client=1, lagging=0), act.Tick(), act.BrokerFlush()] * 2,
            act.Heartbeat(client=1),
            act.Tick(),
            act.Rebalance(client=1),
            act.LockAll(client=0),
            act.Heartbeat(client=0),
            act.SendPull(client=1, queue=1),
            act.SendPull(client=0, queue=0),
        ],
    ),
    # the seventh set, request half (spec/variants/held_out/unhandled_requests.py): figures unseen
    "slave_offset_sync_stub": (
        Config(
            consumers=1,
            queues=1,
            messages_per_queue=2,
            slave=True,
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
        ),
        [
            act.Produce(queue=0, tag="A"),
            act.Produce(queue=0, tag="A"),
            act.Start(client=0),
            act.Tick(),
            act.CoolQueueHead(queue=0),
            act.Rebalance(client=0),
            act.SlaveReplicate(queue=0),
            act.SendPull(client=0, queue=0),
            act.SendPull(client=0, queue=1),
            act.BrokerReceive(client=0, overtakes=0),
            act.ReceivePull(client=0, pq_uid=0),
            act.BrokerReceive(client=0, overtakes=0),
            act.Heartbeat(client=0),
            act.Tick(),
            act.SendPull(client=0, queue=0),
            act.BrokerReceive(client=0, overtakes=0),
            act.SlaveSync(),
        ],
    ),
    "client_reset_request_unsupported": (
        Config(
            consumers=1,
            queues=1,
            messages_per_queue=2,
            admin_resets=1,
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
        ),
        [
            act.Start(client=0),
            act.Produce(queue=0, tag="A"),
            act.Rebalance(client=0),
            act.Tick(),
            act.Heartbeat(client=0),
            act.Tick(),
            act.Produce(queue=0, tag="A"),
            act.BrokerFlush(),
            act.CoolQueueHead(queue=0),
            act.PersistOffsets(client=0, lagging=0),
            act.SendPull(client=0, queue=1),
            act.BrokerReceive(client=0, overtakes=0),
            act.AdminReset(queue=0, target=1, by_timestamp=False),
            act.ClientResetReceive(client=0),
        ],
    ),
    "consumer_ids_changed_ignored": (
        Config(
            consumers=2,
            queues=1,
            messages_per_queue=1,
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
        ),
        [
            act.Start(client=0),
            act.Rebalance(client=0),
            act.Start(client=1),
        ],
    ),
    # the eighth set (spec/variants/held_out/rust_client_fixes.py): figures unseen
    "avg_overflow_past_last_queue": (
        Config(
            consumers=2,
            queues=1,
            messages_per_queue=1,
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
        ),
        [
            act.Start(client=1),
            act.Rebalance(client=1),
            act.Start(client=0),
            act.Rebalance(client=1),
        ],
    ),
    "local_read_leaves_memory_empty": (
        Config(
            consumers=1,
            queues=1,
            messages_per_queue=2,
            mode="BROADCASTING",
            client_crashes=1,
            client_shutdowns=1,
            broker_crashes=0,
            send_back_failures=0,
        ),
        [
            act.Produce(queue=0, tag="A"),
            act.Produce(queue=0, tag="A"),
            act.Tick(),
            act.Start(client=0),
            act.Rebalance(client=0),
            act.SendPull(client=0, queue=0),
            act.BrokerFlush(),
            act.BrokerReceive(client=0, overtakes=0),
            act.ReceivePull(client=0, pq_uid=0),
            act.Tick(),
            act.Heartbeat(client=0),
            act.SendPull(client=0, queue=0),
            act.Shutdown(client=0),
            act.Start(client=0),
            act.Tick(),
            act.Crash(client=0),
            act.Start(client=0),
            act.CoolQueueHead(queue=0),
            act.Rebalance(client=0),
        ],
    ),
    "emptied_tree_commits_last_key": (
        Config(
            consumers=1,
            queues=1,
            messages_per_queue=2,
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
        ),
        [
            act.Tick(),
            act.Start(client=0),
            act.Rebalance(client=0),
            act.BrokerFlush(),
            act.Produce(queue=0, tag="A"),
            act.Produce(queue=0, tag="A"),
            act.SendPull(client=0, queue=0),
            act.SendPull(client=0, queue=1),
            act.BrokerReceive(client=0, overtakes=0),
            act.ReceivePull(client=0, pq_uid=0),
            act.StartConsume(client=0, rid=3),
            act.FinishConsume(client=0, rid=3, status="CONSUME_SUCCESS", ack_index=0, send_back_fails=0),
            act.StartConsume(client=0, rid=2),
            act.FinishConsume(client=0, rid=2, status="CONSUME_SUCCESS", ack_index=-1, send_back_fails=0),
        ],
    ),
    # two consumers, each with a queue; consumer 1 pauses for 150 s, and 120 s after its last heartbeat its channel
    # expires (the correct scan, or, in the variant, Netty's idle handler on a channel with no traffic)
    "consumer_channels_never_scanned": (
        _STALL_CONFIG := Config(
            consumers=2,
            queues=2,
            messages_per_queue=1,
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
            client_stalls=1,
        ),
        _silent_then_expired(_STALL_CONFIG, act.Stall(client=1, duration=150_000)),
    ),
    # the tenth set (spec/variants/held_out/channel_events_fixes.py): figures unseen
    # two consumers, each with a queue; consumer 1 crashes, and 120 s after its last heartbeat its channel goes (the
    # correct close event at any time, or, in the variant, the idle-channel scan once the heartbeat is 120 s old)
    "channel_close_keeps_consumer": (
        _CRASH_CONFIG := Config(
            consumers=2,
            queues=2,
            messages_per_queue=1,
            client_crashes=1,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
            client_stalls=1,
        ),
        _silent_then_expired(_CRASH_CONFIG, act.Crash(client=1)),
    ),
    # two consumers, each with a queue; consumer 1 shuts down (UNREGISTER_CLIENT)
    "consumer_unregister_unimplemented": (
        Config(
            consumers=2,
            queues=2,
            messages_per_queue=1,
            client_crashes=0,
            client_shutdowns=1,
            broker_crashes=0,
            send_back_failures=0,
        ),
        [
            act.Start(client=0),
            act.Start(client=1),
            act.Rebalance(client=0),
            act.Rebalance(client=1),
            act.Shutdown(client=1),
        ],
    ),
    # the eleventh set (spec/variants/held_out/go_push_consumer_fixes.py): figures unseen
    # one consumer whose pqs are created and never pulled; it pauses for 150 s, and the rebalance after the pause finds
    # both pqs pull-expired
    "pull_expired_queue_kept_dropped": (
        _EXPIRY_CONFIG := Config(
            consumers=1,
            queues=1,
            messages_per_queue=1,
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
            client_stalls=1,
        ),
        [
            *_quiet_until(
                _EXPIRY_CONFIG,
                [act.Start(client=0), act.Rebalance(client=0), act.Stall(client=0, duration=150_000)],
                150_000,
            ),
            act.Rebalance(client=0),
        ],
    ),
    # messages 0 and 1 pulled together, each its own batch; message 0's listener answers RECONSUME_LATER
    "send_back_stub_reports_success": (
        _TWO_MESSAGES_ONE_QUEUE,
        [
            *_PULL_TWO_AND_CONSUME,
            act.FinishConsume(client=0, rid=2, status="RECONSUME_LATER", ack_index=-1, send_back_fails=0),
        ],
    ),
    # one orderly consumer locks its queues at its first rebalance; the broker crashes, and the first lockAll runs
    # while it is down
    "lock_all_renews_refused_locks": (
        _ORDERLY_BROKER_CRASH,
        [
            *_quiet_until(
                _ORDERLY_BROKER_CRASH, [act.Start(client=0), act.Rebalance(client=0), act.BrokerCrash()], 1_000
            ),
            act.LockAll(client=0),
        ],
    ),
    # the twelfth set, part A (spec/variants/held_out/java_tracker_fixes.py): figures unseen
    # one consumer registers at its start (0 s) and heartbeats every 30 s; the correct model's clock run to 121 s
    "heartbeat_keeps_first_channel_stamp": (
        _HEARTBEAT_CONFIG := Config(
            consumers=1,
            queues=1,
            messages_per_queue=1,
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
            client_stalls=1,
        ),
        _quiet_until(_HEARTBEAT_CONFIG, [act.Start(client=0), act.Rebalance(client=0)], 121_000),
    ),
    # one consumer, one queue holding a message; the consumer starts and rebalances
    "consumer_list_request_fails": (
        Config(
            consumers=1,
            queues=1,
            messages_per_queue=1,
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
        ),
        [act.Produce(queue=0, tag="A"), act.Start(client=0), act.Rebalance(client=0)],
    ),
    # one consumer subscribed to tag A; a tag-A message is produced, and the consumer's first pull is answered
    "tag_filter_never_matches": (
        Config(
            consumers=1,
            queues=1,
            messages_per_queue=1,
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
            tags=("A", "B"),
            subscription=("A",),
        ),
        [
            act.Produce(queue=0, tag="A"),
            act.Start(client=0),
            act.Rebalance(client=0),
            act.SendPull(client=0, queue=0),
            act.BrokerReceive(client=0, overtakes=0),
            act.ReceivePull(client=0, pq_uid=0),
        ],
    ),
    # the twelfth set, part B (spec/variants/held_out/client_tracker_fixes.py): figures unseen
    # one consumer; message 0 produced and replicated to the slave; the master crashes and the first pull is sent
    "master_only_broker_lookup": (
        Config(
            consumers=1,
            queues=1,
            messages_per_queue=1,
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=1,
            send_back_failures=0,
            slave=True,
        ),
        [
            act.Start(client=0),
            act.Tick(),
            act.Rebalance(client=0),
            act.Heartbeat(client=0),
            act.Produce(queue=0, tag="A"),
            act.SlaveReplicate(queue=0),
            act.BrokerCrash(),
            act.SendPull(client=0, queue=0),
        ],
    ),
    # one consumer pulls message 0 and starts its listener, then pauses for 150 s with the listener running; the
    # rebalance after the pause replaces both pull-idle pqs, and the new pq of queue 0 pulls while the old listener runs
    "pull_callback_keeps_replaced_pq": (
        _CALLBACK_CONFIG := Config(
            consumers=1,
            queues=1,
            messages_per_queue=1,
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
            client_stalls=1,
        ),
        [
            *_quiet_until(
                _CALLBACK_CONFIG,
                [
                    act.Start(client=0),
                    act.Rebalance(client=0),
                    act.Produce(queue=0, tag="A"),
                    act.SendPull(client=0, queue=0),
                    act.BrokerReceive(client=0),
                    act.ReceivePull(client=0, pq_uid=0),
                    act.StartConsume(client=0, rid=2),
                    act.Stall(client=0, duration=150_000),
                ],
                150_000,
            ),
            act.Rebalance(client=0),
            act.SendPull(client=0, queue=0),
            act.BrokerReceive(client=0),
            act.BrokerReceive(client=0),
            act.BrokerReceive(client=0),
            act.ReceivePull(client=0, pq_uid=3),
        ],
    ),
    # the thirteenth set (spec/variants/held_out/release_note_fixes.py): figures unseen
    # one consumer subscribed to tag "paid" of the tags "paid" and "refund" ("refund".hashCode() is negative); a
    # "refund" message is produced, and the consumer's first pull is answered
    "negative_tags_code_passes_filter": (
        Config(
            consumers=1,
            queues=1,
            messages_per_queue=1,
            client_crashes=0,
            client_shutdowns=0,
            broker_crashes=0,
            send_back_failures=0,
            tags=("paid", "refund"),
            subscription=("paid",),
        ),
        [
            act.Produce(queue=0, tag="refund"),
            act.Start(client=0),
            act.Rebalance(client=0),
            act.SendPull(client=0, queue=0),
            act.BrokerReceive(client=0, overtakes=0),
            act.ReceivePull(client=0, pq_uid=0),
        ],
    ),
}


def _pq_tree(s: State, client: int, q: int) -> int:
    pq = s.clients[client].pqs[q]
    return 0 if pq is None else pq.tree


# name -> (correct end state, variant end state) -> does the variant's differ the way the bug says?
DIFFERS: dict[str, Callable[[State, State], bool]] = {
    # the restart after the corruption finds the stored offset in .bak, the variant an empty .bak
    "local_offset_bak_never_written": lambda ok, bug: (
        ok.ghost.starts[-1][2] == "stored-offset" and bug.ghost.starts[-1][2] == "consume-from-last"
    ),
    # the cleaner took a cached message whose listener never started out of the pq
    "clean_expired_unstarted": lambda ok, bug: (
        _pq_tree(bug, 0, 0) != _pq_tree(ok, 0, 0) and _pq_tree(bug, 0, 0) & ~_pq_tree(ok, 0, 0) == 0
    ),
    # lockAll granted the queue but left its lastLockTimestamp
    "lock_all_keeps_lock_time": lambda ok, bug: _last_lock(bug) < _last_lock(ok),
    # the queue's new owner cannot lock it: its previous owner removed it without unlocking
    "orderly_removal_keeps_lock": lambda ok, bug: _locked_queues(bug, 0) < _locked_queues(ok, 0),
    # the rebalance ran during the reset's sleep and placed a new pq on the queue the reset dropped
    "reset_rebalance_not_paused": lambda ok, bug: ok.clients[0].pqs[0] is None and bug.clients[0].pqs[0] is not None,
    # the persist sent its commit to the slave while the master is up
    "commit_to_slave_while_master_up": lambda ok, bug: (
        any(isinstance(r, Commit) and r.to_slave for r in bug.clients[0].channel)
        and not any(isinstance(r, Commit) and r.to_slave for r in ok.clients[0].channel)
    ),
    # NO_MATCHED_MSG left the memory offset where it was: it never passes the filtered message
    "no_correct_tags_offset": lambda ok, bug: (bug.clients[0].mem[0] or 0) < (ok.clients[0].mem[0] or 0),
    # the dropped pq's request runs its listener
    "dropped_pq_request_consumed": lambda ok, bug: len(bug.clients[1].consuming) > len(ok.clients[1].consuming),
    # the failed read positioned the queue (5.x skips it this round)
    "query_error_reads_as_no_offset": lambda ok, bug: (
        ok.clients[0].pqs[0] is None and bug.clients[0].pqs[0] is not None
    ),
    # the failed message is still cached, holding the offset update below it
    "broadcast_failure_kept_in_pq": lambda ok, bug: (
        _pq_tree(ok, 0, 0) == 0
        and _pq_tree(bug, 0, 0) != 0
        and bug.clients[0].offset_updates[-1].offset < ok.clients[0].offset_updates[-1].offset
    ),
    # the new owner's first locked pull started below what the previous owner consumed: a message comes again
    "orderly_first_pull_no_reread": lambda ok, bug: bug.ghost.redeliveries > ok.ghost.redeliveries,
    # the slave answered the pull below its minOffset with a correction from its own bounds
    "slave_corrects_from_own_bounds": lambda ok, bug: (
        _pull_statuses(bug) == [br.OFFSET_ILLEGAL] and _pull_statuses(ok) == [br.NO_MATCHED_MSG]
    ),
    # the second set
    # the OFFSET_ILLEGAL fix's persist(mq) wrote nothing: offsets.json keeps the old offset
    "local_persist_one_noop": lambda ok, bug: ok.clients[0].file[0] == 1 and bug.clients[0].file[0] != 1,
    # the restart loads an empty offsets.json: the previous run's stored offset is not in memory
    "local_offset_dir_per_start": lambda ok, bug: ok.clients[0].mem[0] is not None and bug.clients[0].mem[0] is None,
    # with offsets.json unreadable the consumer does not start
    "local_offset_load_no_bak": lambda ok, bug: ok.clients[0].running and not bug.clients[0].running,
    # the retry queue (no offset, CONSUME_FROM_LAST_OFFSET) gets no pq
    "retry_queue_no_offset_skipped": lambda ok, bug: ok.clients[0].pqs[1] is not None and bug.clients[0].pqs[1] is None,
    # the fixed queue's dropped pq is still in the table
    "offset_illegal_fix_keeps_pq": lambda ok, bug: ok.clients[0].pqs[0] is None and bug.clients[0].pqs[0] is not None,
    # the retry message the listener consumed is sent back again
    "retry_messages_answered_later": lambda ok, bug: len(bug.broker.scheduled) > len(ok.broker.scheduled),
    # SUSPEND left the batch in neither map: the tree lacks it, the count still holds it
    "orderly_suspend_drops_batch": lambda ok, bug: (
        _pq_tree(bug, 0, 0) == 0 and _pq_tree(ok, 0, 0) != 0 and _msg_count(bug) == _msg_count(ok)
    ),
    # NO_NEW_MSG with the batch taken raised the offset past the message being consumed
    "orderly_empty_tree_corrects_offset": lambda ok, bug: (bug.clients[0].mem[0] or 0) > (ok.clients[0].mem[0] or 0),
    # the forwarded copy is scheduled for the retry topic, not stored in the DLQ
    "orderly_forward_to_retry": lambda ok, bug: (
        len(ok.broker.dlq) == 1 and not bug.broker.dlq and len(bug.broker.scheduled) > len(ok.broker.scheduled)
    ),
    # consumer 0's lock(mq) fails against consumer 1's: it adds no pq for the queue
    "broadcast_orderly_locks_on_add": lambda ok, bug: (
        ok.clients[0].pqs[0] is not None and bug.clients[0].pqs[0] is None
    ),
    # the third set
    # the shutdown's persistAll sent nothing: the consumed message's offset never leaves the client
    "shutdown_persists_empty_table": lambda ok, bug: (
        _shutdown_commits(ok) == [(0, 1), (1, 0)] and not _shutdown_commits(bug)
    ),
    # 5.x: the queues the group has no offset for get no pq (QUERY_NOT_FOUND read as a failed read)
    "offset_not_found_read_as_error": lambda ok, bug: (
        all(pq is not None for pq in ok.clients[0].pqs) and all(pq is None for pq in bug.clients[0].pqs)
    ),
    # the new orderly pq is not locked, so its first pull waits instead of going out
    "orderly_new_pq_unlocked": lambda ok, bug: (
        _pq(ok, 0, 0).locked and not _pq(bug, 0, 0).locked and ok.clients[0].pulls and not bug.clients[0].pulls
    ),
    # the listener's success is never processed: the message stays cached, no offset update is pending
    "consume_result_lost_to_npe": lambda ok, bug: (
        _pq_tree(ok, 0, 0) == 0
        and _pq_tree(bug, 0, 0) == 1
        and ok.clients[0].offset_updates
        and not bug.clients[0].offset_updates
    ),
    # the departed consumer's broker lock stays: the new owner's lock(mq) fails and it adds no pq
    "orderly_shutdown_keeps_locks": lambda ok, bug: ok.clients[0].pqs[0] is not None and bug.clients[0].pqs[0] is None,
    # the suspended batch is back in the tree and still in the consuming map, counted twice
    "orderly_suspend_counts_twice": lambda ok, bug: (
        _pq(bug, 0, 0).tree == _pq(ok, 0, 0).tree
        and _pq(bug, 0, 0).consuming_tree != 0
        and _msg_count(bug) == _msg_count(ok) + 1
    ),
    # NO_NEW_MSG at nextBeginOffset 0 recorded nothing: offsets.json keeps no entry for the queue
    "tags_offset_skips_zero": lambda ok, bug: ok.clients[0].file[0] == 0 and bug.clients[0].file[0] is None,
    # the re-added queue's memory keeps the dirty 0, below the position 1 its new pq starts at
    "rebalance_keeps_dirty_offset": lambda ok, bug: (
        ok.clients[1].mem[0] is None and bug.clients[1].mem[0] == 0 and _pq(bug, 1, 0).next_offset == 1
    ),
    # at maxReconsumeTimes 0 the correct broker dead-letters the failed message; the variant schedules a retry
    "send_back_limit_from_group": lambda ok, bug: (
        len(ok.broker.dlq) == 1 and not bug.broker.dlq and len(bug.broker.scheduled) == 1
    ),
    # OFFSET_ILLEGAL corrected memory at once and the pq pulls on; the correct pq is dropped, its fix 10 s away
    "offset_illegal_pulls_on": lambda ok, bug: (
        _pq(ok, 0, 0).pull_state == PULL_DROPPED
        and ok.clients[0].offset_fixes
        and bug.clients[0].mem[0] == 1
        and _pq(bug, 0, 0).pull_state == PULL_READY
        and not bug.clients[0].offset_fixes
    ),
    # the fourth set
    # a new group with LAST on a never-truncated queue whose message 0 is on disk is told 0 and starts there, not at max
    "young_queue_zero_from_disk": lambda ok, bug: _pq(ok, 0, 0).next_offset == 1 and _pq(bug, 0, 0).next_offset == 0,
    # the timestamp search in seconds lands on the first message, before the one stored closest to the timestamp
    "timestamp_searched_in_seconds": lambda ok, bug: _pq(ok, 0, 0).next_offset == 1 and _pq(bug, 0, 0).next_offset == 0,
    # the listener's removal of the message the cleaner already removed uncounts it a second time
    "removal_counts_absent_messages": lambda ok, bug: (
        _pq(ok, 0, 0).tree == _pq(bug, 0, 0).tree == 0b10 and _msg_count(bug) == _msg_count(ok) - 1 == 0
    ),
    # the flow-controlled pq looks pull-idle after 120 s: the rebalance replaces it by a new pq at the committed offset
    "flow_control_keeps_pull_time": lambda ok, bug: (
        _pq(ok, 0, 0).uid == 0 and _pq(bug, 0, 0).uid != 0 and _pq(bug, 0, 0).next_offset == 0
    ),
    # the queues given up at the rebalance are removed without their persist: no commit goes out for them
    "rebalance_removal_skips_persist": lambda ok, bug: (
        _removal_commits(ok, 1) == [(0, 1), (1, 0)] and not _removal_commits(bug, 1)
    ),
    # the loop ended on an empty tree with consuming still set: the next FOUND submits no consume request
    "orderly_take_keeps_consuming": lambda ok, bug: (
        len(ok.clients[0].requests) == 1
        and not bug.clients[0].requests
        and _pq(bug, 0, 0).consuming
        and _pq(bug, 0, 0).tree == _pq(ok, 0, 0).tree != 0
    ),
    # the second message of the pull is never handed to a listener, yet stays cached
    "consume_batches_skip_one": lambda ok, bug: (
        [r.msgs for r in ok.clients[0].requests] == [((0, 0),), ((1, 0),)]
        and [r.msgs for r in bug.clients[0].requests] == [((0, 0),)]
        and _pq(bug, 0, 0).tree == 0b11
    ),
    # the retry queue, no offset read, is positioned past the retry message it holds
    "retry_queue_from_last_max": lambda ok, bug: _pq(ok, 0, 1).next_offset == 0 and _pq(bug, 0, 1).next_offset == 1,
    # the restarted broker lost the unflushed commit 1: the correct first pull re-reads 0 and pulls from there
    # (message 0 again), the variant's waits for the broker's offset to reach 1, which nothing will make it do
    "orderly_first_pull_waits_for_broker": lambda ok, bug: (
        [p.offset for p in ok.clients[0].pulls] == [0]
        and _pq(ok, 0, 0).previously_locked
        and not bug.clients[0].pulls
        and _pq(bug, 0, 0).next_offset == 1
        and not _pq(bug, 0, 0).previously_locked
    ),
    "commit_of_new_queue_dropped": lambda ok, bug: (
        ok.broker.offsets == (0, 0, 0) and bug.broker.offsets == (0, None, 0)
    ),
    # the fifth set
    # the OFFSET_ILLEGAL fix's removeOffset left the corrected offset in memory; the correct store removed it
    "local_remove_offset_noop": lambda ok, bug: (
        ok.clients[0].mem[0] is None and bug.clients[0].mem[0] == 1 and ok.clients[0].file[0] == bug.clients[0].file[0]
    ),
    # the message whose send-back failed is resubmitted with its old reconsumeTimes, not one more
    "send_back_failure_keeps_times": lambda ok, bug: (
        ok.clients[0].requests[-1].msgs == ((0, 1),) and bug.clients[0].requests[-1].msgs == ((0, 0),)
    ),
    # the reset's wake threw before its loop: the dropped pq stays a key of the table, the reset's update never ran
    "client_reset_wake_throws": lambda ok, bug: (
        not ok.clients[0].reset_held and bug.clients[0].reset_held == ((0, 0),) and not bug.clients[0].paused
    ),
    # the next rebalance after the first is 10 s away, not 20 s
    "rebalance_every_ten_seconds": lambda ok, bug: (
        ok.clients[0].next_rebalance == 20_000 and bug.clients[0].next_rebalance == 10_000
    ),
    # the second pull carries the memory offset as its commit in the correct model, no commit in the variant
    "memory_offset_read_as_absent": lambda ok, bug: (
        [(p.commit_flag, p.commit_offset) for p in ok.clients[0].channel if isinstance(p, PullRequestMsg)]
        == [(True, 2)]
        and [p.commit_flag for p in bug.clients[0].channel if isinstance(p, PullRequestMsg)] == [False]
    ),
    # the 5.x reset to 2 is pending in both; the correct table holds 2, the variant's the 0 committed before
    "server_reset_table_not_written": lambda ok, bug: (
        ok.broker.offsets[0] == 2 and bug.broker.offsets[0] == 0 and ok.broker.reset_pending == bug.broker.reset_pending
    ),
    # the first lock(mq) is refused though the broker now holds the queue for the client: no pq for it
    "new_lock_entry_not_granted": lambda ok, bug: (
        ok.clients[0].pqs[0] is not None and bug.clients[0].pqs[0] is None and bug.broker.locks[0] is not None
    ),
    # message 0's third failure: the correct broker schedules it 1 min away (level 5), the variant 30 s (level 4)
    "retry_delay_stops_growing": lambda ok, bug: (
        [(e.due - ok.now, e.message.reconsume_times) for e in ok.broker.scheduled] == [(60_000, 3)]
        and [(e.due - bug.now, e.message.reconsume_times) for e in bug.broker.scheduled] == [(30_000, 3)]
    ),
    # 35 s after its lock, the BROADCASTING consumer's next run: the correct one consumes, the variant relocks first
    "broadcast_orderly_checks_lock": lambda ok, bug: (
        [r.rid for r in ok.clients[0].consuming] == [2]
        and not bug.clients[0].consuming
        and bug.clients[0].relocks == ((0, 0, bug.now + 100),)
    ),
    # the sixth set, broker half
    # retention raised minOffset to 1 over the committed 0: the scan removed the online group's offset, the correct
    # broker keeps it
    "offset_scan_ignores_online_group": lambda ok, bug: (
        ok.broker.offsets == (0, None) and bug.broker.offsets == (None, None) and 0 in bug.broker.registered
    ),
    # the young queues' QUERY_CONSUMER_OFFSET answers SUCCESS(0): the correct rebalance starts both pqs at 0, the
    # variant's answer carries no offset, the read fails and neither queue gets a pq
    "query_success_without_offset": lambda ok, bug: (
        all(pq is not None and pq.next_offset == 0 for pq in ok.clients[0].pqs)
        and bug.clients[0].pqs == (None, None)
        and bug.clients[0].running
    ),
    # message 0 failed once and was sent back; its 10 s delay is due: the correct broker's schedule delivers the copy
    # to the retry queue, the variant's schedule service never runs and the retry queue stays empty
    "schedule_service_not_started": lambda ok, bug: (
        len(ok.broker.queues[1].messages) == 1
        and ok.broker.queues[1].messages[0].reconsume_times == 1
        and bug.broker.queues[1].messages == ()
        and ok.broker.scheduled == bug.broker.scheduled == ()
    ),
    # the sixth set, client half
    # the batch of two removed from the tree uncounts 1 + 2 messages: msgCount wraps below 0 to 2**64 - 1
    "removal_count_triangular": lambda ok, bug: (
        _pq(ok, 0, 0).tree == _pq(bug, 0, 0).tree == 0 and _msg_count(ok) == 0 and _msg_count(bug) == (1 << 64) - 1
    ),
    # message 0, sent back to the retry topic, stays in the pq: removeMessage returns 0 where the correct one returns 1
    "sent_back_kept_in_pq": lambda ok, bug: (
        _pq(ok, 0, 0).tree == 0b10
        and _pq(bug, 0, 0).tree == 0b11
        and [u.offset for u in ok.clients[0].offset_updates] == [1]
        and [u.offset for u in bug.clients[0].offset_updates] == [0]
    ),
    # the seventh set, orderly half
    # the broker is down, so lockAll cannot renew the lock: 30 s after it the request runs with the pq locked and its
    # lock expired; the correct run asks a relock in 100 ms, the variant's enters the loop, whose check asks 10 ms
    "orderly_run_lock_check_or": lambda ok, bug: (
        _pq(ok, 0, 0).locked
        and ok.clients[0].relocks == ((0, 0, ok.now + 100),)
        and bug.clients[0].relocks == ((0, 0, bug.now + 10),)
    ),
    # client 1 holds queue 0's broker lock and client 0's lockAll took its pq's lock away: the correct pull waits,
    # the variant's goes to the broker unlocked and leaves the PullRequest ready again a second later (a second loop)
    "unlocked_orderly_pull_goes_on": lambda ok, bug: (
        not _pq(ok, 0, 0).locked
        and ok.broker.locks[0] is not None
        and ok.broker.locks[0][0] == 1
        and [p.queue for p in ok.clients[0].pulls] == [2]
        and [p.queue for p in bug.clients[0].pulls] == [2, 0]
        and _pq(bug, 0, 0).pull_state == PULL_READY
    ),
    # the seventh set, request half
    # the first SlaveSync after the master stored offset 2: the correct slave copies it, the variant's table stays empty
    "slave_offset_sync_stub": lambda ok, bug: (
        ok.broker.offsets[0] == bug.broker.offsets[0] == 2
        and ok.slave is not None
        and bug.slave is not None
        and ok.slave.offsets[0] == 2
        and bug.slave.offsets[0] is None
    ),
    # the reset's RESET_CONSUMER_CLIENT_OFFSET arrives: the correct client pauses, drops the queue's pq and sleeps
    # 10 s; the variant's answers 'unsupported' and goes on with the pq it had
    "client_reset_request_unsupported": lambda ok, bug: (
        ok.clients[0].paused
        and ok.clients[0].reset_wake is not None
        and ok.clients[0].pqs[0] is None
        and not bug.clients[0].paused
        and bug.clients[0].reset_wake is None
        and bug.clients[0].pqs[0] is not None
    ),
    # consumer 1 joins: the broker's NOTIFY_CONSUMER_IDS_CHANGED wakes consumer 0's rebalance in the correct model,
    # not in the variant
    "consumer_ids_changed_ignored": lambda ok, bug: (
        ok.clients[0].rebalance_requested and not bug.clients[0].rebalance_requested
    ),
    # the eighth set (spec/variants/held_out/rust_client_fixes.py): figures unseen
    # consumer 0 joins, sorted before consumer 1, which now starts past the only queue: the correct consumer 1 gives up
    # the queue and the retry queue, the variant's allocation fails and keeps both pqs
    "avg_overflow_past_last_queue": lambda ok, bug: (
        ok.clients[1].pqs == (None, None) and all(pq is not None and not pq.dropped for pq in bug.clients[1].pqs)
    ),
    # the restarted BROADCASTING consumer resumes at the offset offsets.json holds: the correct readOffset puts it in
    # memory, the variant's leaves memory empty
    "local_read_leaves_memory_empty": lambda ok, bug: (
        ok.clients[0].file[0] == bug.clients[0].file[0] == ok.clients[0].mem[0] == 2 and bug.clients[0].mem[0] is None
    ),
    # messages 0 and 1 in one pull, message 1's listener finishes first: the removal of message 0 empties the tree,
    # and the updateOffset it queues carries 2 (queueOffsetMax + 1) in the correct model, 1 (the tree's last key + 1)
    # in the variant
    "emptied_tree_commits_last_key": lambda ok, bug: (
        _pq_tree(ok, 0, 0) == _pq_tree(bug, 0, 0) == 0
        and [u.offset for u in ok.clients[0].offset_updates] == [0, 2]
        and [u.offset for u in bug.clients[0].offset_updates] == [0, 1]
    ),
    # the paused consumer's channel goes in both: the correct idle-channel scan removes it and tells nobody, the
    # variant's close event (the only way a consumer channel expires there) tells consumer 0 to rebalance
    "consumer_channels_never_scanned": lambda ok, bug: (
        ok.broker.registered == bug.broker.registered == frozenset({0})
        and not ok.clients[0].rebalance_requested
        and bug.clients[0].rebalance_requested
    ),
    # the tenth set (spec/variants/held_out/channel_events_fixes.py): figures unseen
    # the crashed consumer's channel goes in both: the correct close event tells consumer 0 to rebalance, the variant's
    # idle-channel scan (the only way a gone process's channel goes there) tells nobody
    "channel_close_keeps_consumer": lambda ok, bug: (
        ok.broker.registered == bug.broker.registered == frozenset({0})
        and ok.clients[0].rebalance_requested
        and not bug.clients[0].rebalance_requested
    ),
    # the shut-down consumer unregisters: the correct broker drops it and tells consumer 0, the variant's keeps it
    # listed and tells nobody
    "consumer_unregister_unimplemented": lambda ok, bug: (
        ok.broker.registered == frozenset({0})
        and bug.broker.registered == frozenset({0, 1})
        and ok.clients[0].rebalance_requested
        and not bug.clients[0].rebalance_requested
    ),
    # the eleventh set
    # the correct rebalance replaces both pull-expired pqs with new ones, positioned at the stored offsets; the
    # variant's drops them, removes their memory offsets and keeps them in the table, so nothing replaces them
    "pull_expired_queue_kept_dropped": lambda ok, bug: (
        [pq.uid for pq in ok.clients[0].pqs if pq is not None] == [2, 3]
        and not any(pq is not None and pq.dropped for pq in ok.clients[0].pqs)
        and [(pq.uid, pq.dropped, pq.pull_state) for pq in bug.clients[0].pqs if pq is not None]
        == [(0, True, PULL_DROPPED), (1, True, PULL_DROPPED)]
        and bug.clients[0].mem == (None, None)
    ),
    # message 0 failed: both remove it from the pq and queue the same offset update, but only the correct broker holds
    # its retry copy
    "send_back_stub_reports_success": lambda ok, bug: (
        [e.message.origin for e in ok.broker.scheduled] == [(0, 0)]
        and not bug.broker.scheduled
        and _pq(ok, 0, 0).tree == _pq(bug, 0, 0).tree == 0b10
        and ok.clients[0].offset_updates == bug.clients[0].offset_updates
    ),
    # the lockAll request fails (broker down): the correct pqs keep the lock time of their rebalance's lock(mq), 0; the
    # variant's, none granted, are all stamped locked at the lockAll's time
    "lock_all_renews_refused_locks": lambda ok, bug: (
        not ok.broker.up
        and [(pq.locked, pq.last_lock) for pq in ok.clients[0].pqs if pq is not None] == [(True, 0), (True, 0)]
        and [(pq.locked, pq.last_lock) for pq in bug.clients[0].pqs if pq is not None] == [(True, 1000), (True, 1000)]
    ),
    # the twelfth set, part A
    # the live consumer's channel still carries its registration time (0 s), 121 s old, where the correct broker has
    # its last heartbeat (91 s): the variant's idle-channel scan may now close it, the correct one may not
    "heartbeat_keeps_first_channel_stamp": lambda ok, bug: (
        ok.broker.registered == bug.broker.registered == frozenset({0})
        and ok.broker.heartbeat_at == (91_000,)
        and bug.broker.heartbeat_at == (0,)
        and bug.now - bug.broker.heartbeat_at[0] > 120_000 >= ok.now - ok.broker.heartbeat_at[0]
    ),
    # the rebalance got no consumer list: the correct consumer holds pqs of the topic's queue and the retry queue at
    # their positions, the variant's none
    "consumer_list_request_fails": lambda ok, bug: (
        all(pq is not None for pq in ok.clients[0].pqs)
        and all(pq is None for pq in bug.clients[0].pqs)
        and bug.clients[0].mem == (None, None)
        and ok.broker.registered == bug.broker.registered == frozenset({0})
    ),
    # the correct pull found the subscribed message and handed it to the listener; the variant's answered
    # NO_MATCHED_MSG: nothing cached or consumed, and correctTagsOffset raised the memory offset past the message
    "tag_filter_never_matches": lambda ok, bug: (
        _pq_tree(ok, 0, 0) == 1
        and len(ok.clients[0].requests) == 1
        and ok.clients[0].mem[0] == 0
        and _pq_tree(bug, 0, 0) == 0
        and not bug.clients[0].requests
        and bug.clients[0].mem[0] == 1
    ),
    # the twelfth set, part B
    # the master is down: the correct pull goes to the slave, which holds message 0; the variant's finds no address,
    # sends nothing and is retried after the exception delay
    "master_only_broker_lookup": lambda ok, bug: (
        not ok.broker.up
        and ok.clients[0].channel == (PullRequestMsg(0, 0, 0, False, 0, to_slave=True),)
        and _pq(ok, 0, 0).pull_state != PULL_READY
        and not bug.clients[0].channel
        and not bug.clients[0].pulls
        and _pq(bug, 0, 0).pull_state == PULL_READY
        and _pq(bug, 0, 0).pull_ready_at == bug.now + 1_000
    ),
    # the new pq (uid 3) of queue 0 pulled message 0 while the old pq's listener still runs: the correct reply fills
    # the new pq and re-queues its PullRequest; the variant's goes to the old, dropped request and is dropped, and the
    # new pq's PullRequest is gone
    "pull_callback_keeps_replaced_pq": lambda ok, bug: (
        [(r.rid, r.pq_uid) for r in ok.clients[0].consuming]
        == [(r.rid, r.pq_uid) for r in bug.clients[0].consuming]
        == [(2, 0)]
        and (_pq(ok, 0, 0).uid, _pq(ok, 0, 0).tree, _pq(ok, 0, 0).pull_state) == (3, 0b1, PULL_READY)
        and [(r.pq_uid, r.msgs) for r in ok.clients[0].requests] == [(3, ((0, 0),))]
        and (_pq(bug, 0, 0).uid, _pq(bug, 0, 0).tree, _pq(bug, 0, 0).pull_state) == (3, 0, PULL_DROPPED)
        and not _pq(bug, 0, 0).dropped
        and not bug.clients[0].requests
        and not bug.clients[0].pulls
    ),
    # the thirteenth set
    # both pulls scanned the unsubscribed message and moved the pull cursor past it, and neither caches or consumes
    # it; the correct answer was NO_MATCHED_MSG, whose correctTagsOffset raised the memory offset over it, the variant's
    # an empty FOUND, which leaves the memory offset below it
    "negative_tags_code_passes_filter": lambda ok, bug: (
        _pq(ok, 0, 0).next_offset == _pq(bug, 0, 0).next_offset == 1
        and _pq_tree(ok, 0, 0) == _pq_tree(bug, 0, 0) == 0
        and not ok.clients[0].requests
        and not bug.clients[0].requests
        and ok.clients[0].mem[0] == 1
        and bug.clients[0].mem[0] == 0
    ),
}


def _pq(s: State, client: int, q: int) -> ProcessQueue:
    pq = s.clients[client].pqs[q]
    assert pq is not None
    return pq


def _shutdown_commits(s: State) -> list[tuple[int, int]]:
    return [(c.queue, c.offset) for c in s.clients[0].channel if isinstance(c, Commit) and c.cause == "shutdown"]


def _removal_commits(s: State, client: int) -> list[tuple[int, int]]:
    return [
        (c.queue, c.offset)
        for c in s.clients[client].channel
        if isinstance(c, Commit) and c.cause == "rebalance-removal"
    ]


def _last_lock(s: State) -> int:
    pq = s.clients[0].pqs[0]
    assert pq is not None
    return pq.last_lock


def _msg_count(s: State) -> int:
    pq = s.clients[0].pqs[0]
    return -1 if pq is None else pq.msg_count


def _locked_queues(s: State, client: int) -> int:
    return sum(1 for pq in s.clients[client].pqs if pq is not None and pq.locked)


def _pull_statuses(s: State) -> list[str]:
    return [p.result.status for p in s.clients[0].pulls if p.result is not None]


def _end(config: Config, schedule: list[act.Action]) -> State:
    model = Model(config)
    state = model.initial()
    for action in schedule:
        state = model.step(state, action)
    return state


def seen_on_witness(name: str) -> set[str]:
    """The properties that report the variant ``name`` on its witness: safety at every step of the schedule, then
    liveness at quiescence from its end, then a lost message fate (``FATES``) of the quiesced state."""
    config, schedule = WITNESSES[name]
    planted = replace(config, mutations=frozenset({name}))
    safety, outcome = replay_liveness(planted, schedule, len(schedule))
    seen = {v.id for v in safety}
    if outcome is not None:
        seen |= {v.id for v in outcome.violations}
        if message_fates(Model(planted), outcome.quiescence.state).lost:
            seen.add("FATES")
    return seen


def test_the_held_out_set_is_registered_apart_from_the_planted_bugs() -> None:
    assert len(HELD_OUT) >= 10 and tuple(HELD_OUT) == HELD_OUT_NAMES == tuple(HELD_OUT_VARIANTS)
    assert not set(HELD_OUT) & set(MUTATIONS) and not set(HELD_OUT) & set(VARIANTS)
    assert set(WITNESSES) == set(DIFFERS) == set(HELD_OUT)
    for name, bug in HELD_OUT.items():
        assert bug.citation and bug.breaks and all(r.startswith("R") for r in bug.breaks)
        assert type(Model(Config(mutations=frozenset({name})))) is HELD_OUT_VARIANTS[name]


@pytest.mark.parametrize("name", HELD_OUT_NAMES)
def test_the_variant_does_its_bug_on_its_witness(name: str) -> None:
    config, schedule = WITNESSES[name]
    ok = _end(config, schedule)
    bug = _end(replace(config, mutations=frozenset({name})), schedule)
    assert ok != bug
    assert DIFFERS[name](ok, bug)


@pytest.mark.parametrize("name", HELD_OUT_NAMES)
def test_the_registry_records_which_properties_see_it_on_its_witness(name: str) -> None:
    assert seen_on_witness(name) == set(HELD_OUT[name].seen_by)


def test_the_cli_plants_a_held_out_bug_by_name(tmp_path: Path) -> None:
    from rmqspec.cli import main

    out = tmp_path / "run"
    code = main(["run", "--mutation", HELD_OUT_NAMES[0], "--walks", "1", "--steps", "5", "--out", str(out)])
    assert code in (0, 1)  # a measurement of the variant, not bad input
    assert main(["run", "--mutation", "not_a_bug", "--walks", "1", "--steps", "5", "--out", str(out)]) == 2
