"""The property registry: every state invariant and action property of the model, in checking order.

A state invariant is checked on every reachable state; an action property on every step
``(state, action, state')``. Each has an id (INV-n as numbered by the property list the project started from,
INV-n+ for ours), one sentence, the rules it rests on, and why it matters (``property_types.py``). A check returns
``None`` when it holds and a short description of the counterexample otherwise. Each property is defined with
its check in the module of the concern it is about (the map is docs/spec.md, "Map: RocketMQ concern, module, actions,
properties, planted bugs"); the causes of a falling committed offset and the guarantee it must keep are
``committed_offset.py``, and what at-least-once delivery tolerates is ``anomalies.py``.

This module assembles them: ``INVARIANTS`` and ``ACTION_PROPERTIES`` (the order is the order of the
violations a check reports), ``check_state`` and ``check_step``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rmqspec.spec import (
    admin_reset,
    broker,
    client_locks,
    committed_offset,
    concurrent_consume,
    consumer_process,
    orderly_consume,
    pull,
    rebalance,
    slave,
)
from rmqspec.spec.property_types import ActionProperty, Invariant, Violation

if TYPE_CHECKING:
    from rmqspec.spec.actions import Action
    from rmqspec.spec.model import Model
    from rmqspec.spec.state import State

INVARIANTS: tuple[Invariant, ...] = (
    concurrent_consume.PQ_ACCOUNTING,  # INV-1
    concurrent_consume.COMMIT_BELOW_UNPROCESSED,  # INV-2
    broker.BROKER_ANSWERS,  # INV-7
    committed_offset.AT_LEAST_ONCE,  # INV-9
    committed_offset.COMMITTED_IN_RANGE,  # INV-16
    client_locks.LOCK_BELIEF_EXCLUSIVE,  # INV-12a
    orderly_consume.SINGLE_ORDERLY_LISTENER,  # INV-12
    pull.SINGLE_PULL_LOOP,  # INV-20
    rebalance.EXCLUSIVE_OWNERSHIP_WHEN_VIEWS_AGREE,  # INV-13a
    rebalance.FULL_COVERAGE_WHEN_VIEWS_AGREE,  # INV-13b
)

ACTION_PROPERTIES: tuple[ActionProperty, ...] = (
    concurrent_consume.RETRY_ACCOUNTING,  # INV-10
    concurrent_consume.SEND_BACK_HAS_A_CAUSE,  # INV-24
    concurrent_consume.SEND_BACK_LEAVES_A_COPY,  # INV-24b
    concurrent_consume.CONSUME_RESULT_REMOVES_ITS_BATCH,  # INV-24c
    concurrent_consume.REQUESTS_COUNT_ATTEMPTS,  # INV-28
    broker.SCHEDULED_COPIES_REACH_THE_RETRY_QUEUE,  # INV-29
    broker.CHANNELS_EXPIRE_WHEN_SILENT,  # INV-38
    pull.INCREASE_ONLY_NEVER_LOWERS,  # INV-4
    concurrent_consume.DROPPED_PQ_IS_INERT,  # INV-5
    concurrent_consume.COMMIT_KEEPS_UP_WITH_REMOVAL,  # INV-2b
    consumer_process.PERSIST_ALL_PRUNES_MEMORY,  # INV-6a
    consumer_process.LOCAL_OFFSET_FILE_ONLY_GROWS,  # INV-6b
    consumer_process.LOCAL_OFFSET_FILE_FALLS_WITH_A_CAUSE,  # INV-6c
    consumer_process.FILE_WRITE_KEEPS_THE_PREVIOUS_FILE,  # INV-6d
    consumer_process.SHUTDOWN_PERSISTS_OWNED,  # INV-25
    consumer_process.SHUTDOWN_UNREGISTERS,  # INV-35
    consumer_process.TIMERS_KEEP_THEIR_PERIOD,  # INV-27
    committed_offset.BROKER_DECREASE_ATTRIBUTED,  # INV-8
    pull.PIGGYBACK_RULE,  # INV-14
    rebalance.RESUME_AT_LAST_LANDED_COMMIT,  # INV-15
    pull.PULL_STALLED_PQ_RECREATED,  # LIV-3
    pull.OFFSET_ILLEGAL_FIX_WHILE_OWNED,  # INV-17
    client_locks.BROKER_LOCK_EXCLUSIVE,  # INV-11
    client_locks.FIRST_LOCKED_PULL_POSITIONS_VALIDLY,  # INV-19
    client_locks.LOCK_RELEASED_ON_LEAVE,  # INV-26
    client_locks.LOCK_ANSWERS_FOLLOW_THE_TABLE,  # INV-34
    orderly_consume.LISTENER_HOLDS_LOCK,  # INV-12b
    orderly_consume.ORDERLY_COMMIT_POINT,  # INV-3
    admin_reset.RESET_TAKES_EFFECT,  # INV-18
    admin_reset.CLIENT_RESET_RUNS_ITS_COURSE,  # INV-31
    committed_offset.COMMITTED_DECREASE_DECLARED,  # INV-8r
    rebalance.POSITIONING_CAUSED,  # INV-9a
    rebalance.POSITIONING_SEEDS_MEMORY,  # INV-33
    rebalance.REMOVAL_PERSISTS_AND_FORGETS,  # INV-36
    rebalance.POSITION_FOLLOWS_CONSUME_FROM_WHERE,  # INV-37
    rebalance.GROUP_CHANGES_WAKE_THE_REBALANCE,  # INV-30
    pull.NO_REPULL_OF_CONSUMED,  # INV-22
    concurrent_consume.REDELIVERY_WITHIN_CAUSE,  # INV-22c
    concurrent_consume.EXPIRED_MESSAGE_CLEANED,  # INV-23
    slave.SLAVE_DECREASE_DECLARED,  # INV-8s
    slave.CORRECTION_FROM_MASTER_BOUNDS,  # INV-21
    slave.SLAVE_SYNC_COPIES_THE_MASTER,  # INV-32
)


def check_state(model: Model, state: State) -> list[Violation]:
    """Every state invariant that fails in ``state``."""
    out = []
    for inv in INVARIANTS:
        detail = inv.check(model, state)
        if detail is not None:
            out.append(Violation(inv.id, inv.name, detail))
    return out


def check_step(model: Model, before: State, action: Action, after: State) -> list[Violation]:
    """Every action property that fails for the step ``before --action--> after``."""
    out = []
    for prop in ACTION_PROPERTIES:
        detail = prop.check(model, before, action, after)
        if detail is not None:
            out.append(Violation(prop.id, prop.name, detail))
    return out
