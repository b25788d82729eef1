"""Unit tests of the reference's orderly consume loop (R6.2, R6.4, R8.5-R8.8, R5.1 step 1).

Each test drives a ``ReferenceSystem`` with the model's actions (or calls the RocketMQ-shaped objects
directly where the model offers no action for the situation) and states one rule of
``ConsumeMessageOrderlyService``, ``ProcessQueue`` or ``RebalancePushImpl``'s orderly removal, under
4.9.8 and, where they differ, 5.x. The lockstep check (``tests/test_refinement.py``) compares the
same behaviour with the model on random walks; these tests pin the rules one at a time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rmqspec.properties.orderly_scenarios import wait_step
from rmqspec.reference.consume_message_concurrently_service import ConsumeRequestState
from rmqspec.reference.consume_message_orderly_service import (
    ConsumeMessageOrderlyService,
    ConsumeOrderlyStatus,
    ConsumeRequest,
    OrderlyListenerAnswer,
)
from rmqspec.reference.default_mq_push_consumer_impl import DefaultMQPushConsumerImpl
from rmqspec.reference.message_queue import dlq_topic
from rmqspec.reference.offset_store import ReadOffsetType
from rmqspec.reference.process_queue import ProcessQueue
from rmqspec.reference.protocol import RequestCode
from rmqspec.reference.rebalance_impl import NEW_PULL_DISPATCH_DELAY, REBALANCE_MIN_INTERVAL
from rmqspec.refinement.reference_system import ReferenceActionError, ReferenceSystem
from rmqspec.spec import actions as act
from rmqspec.spec.config import Config
from rmqspec.spec.model import Model
from rmqspec.spec.state import PULL_DROPPED, PULL_READY, State

SUCCESS = act.ORDERLY_SUCCESS
SUSPEND = act.SUSPEND_CURRENT_QUEUE_A_MOMENT
BASE: dict[str, object] = {
    "orderly": True,
    "consumers": 1,
    "queues": 1,
    "backlog": 3,
    "messages_per_queue": 5,
    "consume_from_where": "CONSUME_FROM_FIRST_OFFSET",
    "pull_batch_size": 3,
}


@pytest.fixture(autouse=True)
def _quiet_reference_logs() -> Iterator[None]:
    logging.getLogger("rmqspec.reference").setLevel(logging.CRITICAL)
    yield
    logging.getLogger("rmqspec.reference").setLevel(logging.NOTSET)


# --- harness ------------------------------------------------------------------------------------------


def system(tmp_path: Path, **overrides: Any) -> ReferenceSystem:
    """One orderly consumer of one queue holding a backlog of 3 messages, read from the first offset."""
    settings: dict[str, Any] = {**BASE, **overrides}
    ref = ReferenceSystem(Config(**settings), tmp_path)
    ref.apply(act.Start(0))
    paced = ref.version.rebalance_paced
    if paced:  # 5.x: the first rebalance comes minInterval after start (R4.2)
        ref.clock.advance_to(REBALANCE_MIN_INTERVAL)
    ref.apply(act.Rebalance(0))
    if paced:  # 5.x: and dispatches the new pq's first pull 500 ms later (R9.4)
        ref.clock.advance_to(ref.clock.now() + NEW_PULL_DISPATCH_DELAY)
    return ref


def consumer(ref: ReferenceSystem, i: int = 0) -> DefaultMQPushConsumerImpl:
    process = ref.processes[i]
    assert process is not None
    return process.consumer


def service(ref: ReferenceSystem, i: int = 0) -> ConsumeMessageOrderlyService:
    s = consumer(ref, i).consume_message_service
    assert isinstance(s, ConsumeMessageOrderlyService)
    return s


def pq_of(ref: ReferenceSystem, q: int = 0, i: int = 0) -> ProcessQueue:
    return consumer(ref, i).rebalance_impl.process_queue_table[ref.mqs[q]]


def pull(ref: ReferenceSystem, q: int = 0, i: int = 0) -> None:
    """SendPull, the broker's answer, ReceivePull."""
    uid = pq_of(ref, q, i).uid
    ref.apply(act.SendPull(i, q))
    ref.apply(act.BrokerReceive(i))
    ref.apply(act.ReceivePull(i, uid))


def queued(ref: ReferenceSystem, i: int = 0) -> list[tuple[ConsumeRequest, int]]:
    return service(ref, i).consume_executor.queue.items()


def running(ref: ReferenceSystem, state: ConsumeRequestState, i: int = 0) -> list[ConsumeRequest]:
    return [r for r in service(ref, i).consume_executor.running if r.state is state]


def start_first(ref: ReferenceSystem, i: int = 0) -> ConsumeRequest:
    """StartConsume of the oldest submitted request; returns it."""
    request = queued(ref, i)[0][0]
    ref.apply(act.StartConsume(i, request.rid))
    return request


def listening(tmp_path: Path, **overrides: Any) -> tuple[ReferenceSystem, ConsumeRequest]:
    """A system whose listener runs on the first batch of queue 0."""
    ref = system(tmp_path, **overrides)
    pull(ref)
    return ref, start_first(ref)


def mem_offset(ref: ReferenceSystem, q: int = 0, i: int = 0) -> int:
    return consumer(ref, i).offset_store.read_offset(ref.mqs[q], ReadOffsetType.READ_FROM_MEMORY)


def broker_lock_holder(ref: ReferenceSystem, q: int = 0) -> int | None:
    locks = ref.abstract()[1].locks
    entry = locks[q]
    return None if entry is None else entry[0]


def offsets(msgs: dict[int, Any]) -> list[int]:
    return sorted(msgs)


# --- dispatch and the run (R6.2, R8.5) ----------------------------------------------------------------


def test_found_submits_one_request_only_when_the_pq_was_not_consuming(tmp_path: Path) -> None:
    ref = system(tmp_path, pull_batch_size=2)
    pull(ref)
    pq = pq_of(ref)
    assert pq.consuming and offsets(pq.msg_tree_map) == [0, 1]
    assert len(queued(ref)) == 1 and queued(ref)[0][0].msgs == []  # a request names the pq, not messages
    pull(ref)  # offset 2 arrives while the pq is still consuming
    assert offsets(pq.msg_tree_map) == [0, 1, 2]
    assert len(queued(ref)) == 1


def test_run_moves_the_lowest_batch_into_the_consuming_map_and_calls_the_listener(tmp_path: Path) -> None:
    ref, request = listening(tmp_path, consume_batch_size=2)
    pq = pq_of(ref)
    assert request.state is ConsumeRequestState.LISTENING
    assert [m.queue_offset for m in request.msgs] == [0, 1]
    assert offsets(pq.consuming_msg_orderly_tree_map) == [0, 1] and offsets(pq.msg_tree_map) == [2]
    assert pq.msg_count == 3  # msgCount counts both maps (R6.5)
    assert pq.consume_lock.held  # the listener runs under the consume lock (R8.5 step 3)
    client = ref.abstract()[2][0]
    assert client.consuming[0].msgs == ((0, 0), (1, 0)) and client.consuming[0].begin == request.begin_time


def test_success_commits_one_past_the_largest_key_and_overwrites_the_offset(tmp_path: Path) -> None:
    ref, request = listening(tmp_path, consume_batch_size=2)
    consumer(ref).offset_store.update_offset(ref.mqs[0], 7, False)  # a higher memory offset ...
    ref.apply(act.FinishConsume(0, request.rid, SUCCESS, -1, 0))
    assert request.state is ConsumeRequestState.UPDATING_OFFSET and request.commit_offset == 2
    pq = pq_of(ref)
    assert not pq.consuming_msg_orderly_tree_map and pq.msg_count == 1
    assert not pq.consume_lock.held  # the listener returned; the queue's monitor is still held
    assert service(ref).message_queue_lock.is_held(ref.mqs[0])
    ref.apply(act.ApplyConsumeOffset(0, request.rid))
    assert mem_offset(ref) == 2  # ... is overwritten: updateOffset(increaseOnly=false) (R8.6)


def test_apply_goes_round_the_loop_and_calls_the_listener_again_in_the_same_run(tmp_path: Path) -> None:
    ref, request = listening(tmp_path)
    ref.apply(act.FinishConsume(0, request.rid, SUCCESS, -1, 0))
    ref.apply(act.ApplyConsumeOffset(0, request.rid))
    assert request.state is ConsumeRequestState.LISTENING and [m.queue_offset for m in request.msgs] == [1]


def test_an_empty_take_clears_consuming_ends_the_run_and_releases_the_monitor(tmp_path: Path) -> None:
    ref, request = listening(tmp_path, consume_batch_size=3)
    ref.apply(act.FinishConsume(0, request.rid, SUCCESS, -1, 0))
    ref.apply(act.ApplyConsumeOffset(0, request.rid))
    assert request.state is ConsumeRequestState.DONE
    assert not service(ref).consume_executor.running
    assert not pq_of(ref).consuming and not service(ref).message_queue_lock.is_held(ref.mqs[0])
    pull(ref)  # nothing new: no request; a new message would dispatch again
    ref.apply(act.Produce(0, "A"))
    pull(ref)
    assert len(queued(ref)) == 1 and pq_of(ref).consuming


def test_the_queue_monitor_keeps_a_second_request_of_the_queue_waiting(tmp_path: Path) -> None:
    ref, request = listening(tmp_path)
    orderly = service(ref)
    orderly.submit_consume_request_later(pq_of(ref), ref.mqs[0], 10)  # e.g. an earlier run's resubmission
    ref.clock.advance_to(ref.clock.now() + 10)
    second = queued(ref)[0][0]
    assert not orderly.consume_executor.can_start(second)
    with pytest.raises(ReferenceActionError):
        ref.apply(act.StartConsume(0, second.rid))
    ref.apply(act.FinishConsume(0, request.rid, SUSPEND, -1, 0))  # the run ends: the monitor is free
    assert orderly.consume_executor.can_start(second)


def test_a_request_of_a_dropped_pq_returns_at_once_even_while_the_monitor_is_held(tmp_path: Path) -> None:
    ref, _ = listening(tmp_path)
    stale = ProcessQueue(99, ref.clock.now())
    stale.dropped = True
    service(ref).submit_consume_request(None, stale, ref.mqs[0], True)
    late = queued(ref)[0][0]
    ref.apply(act.StartConsume(0, late.rid))
    assert late.state is ConsumeRequestState.DONE and late.msgs == []


# --- suspend, local retry and forwarding (R8.6, R8.7) -------------------------------------------------


def test_suspend_below_max_puts_batch_back_and_resubmits_after_one_second(tmp_path: Path) -> None:
    ref, request = listening(tmp_path, consume_batch_size=2)
    now = ref.clock.now()
    ref.apply(act.FinishConsume(0, request.rid, SUSPEND, -1, 0))
    pq = pq_of(ref)
    assert request.state is ConsumeRequestState.DONE  # the run ends
    assert offsets(pq.msg_tree_map) == [0, 1, 2] and not pq.consuming_msg_orderly_tree_map
    assert pq.msg_count == 3 and pq.consuming  # still consuming: the next run is already scheduled
    assert [m.reconsume_times for m in request.msgs] == [1, 1]  # local reconsumeTimes, not sent anywhere
    (later, ready_at), *_ = queued(ref)
    assert ready_at == now + 1_000 and later.rid != request.rid
    assert mem_offset(ref) == 0 and not ref.abstract()[1].dlq
    assert ref.abstract()[2][0].pqs[0].retry_times == ((0, 1), (1, 1))  # type: ignore[union-attr]


def test_a_null_or_throwing_listener_counts_as_suspend(tmp_path: Path) -> None:
    ref, request = listening(tmp_path)
    service(ref).consume_executor.resume(request, OrderlyListenerAnswer(None))
    assert offsets(pq_of(ref).msg_tree_map) == [0, 1, 2] and request.msgs[0].reconsume_times == 1


def test_the_resubmitted_run_hands_the_listener_the_raised_reconsume_times(tmp_path: Path) -> None:
    ref, request = listening(tmp_path)
    ref.apply(act.FinishConsume(0, request.rid, SUSPEND, -1, 0))
    ref.clock.advance_to(ref.clock.now() + 1_000)
    again = start_first(ref)
    assert [(m.queue_offset, m.reconsume_times) for m in again.msgs] == [(0, 1)]


@pytest.mark.parametrize(("version", "stored_times"), [("4.9.8", 1), ("5.x", 2)])
def test_suspend_at_max_forwards_to_the_dlq_and_commits(tmp_path: Path, version: str, stored_times: int) -> None:
    ref, request = listening(tmp_path, version=version, max_reconsume_times=1)
    ref.apply(act.FinishConsume(0, request.rid, SUSPEND, -1, 0))  # reconsumeTimes 0 -> 1 locally
    ref.clock.advance_to(ref.clock.now() + 1_000)
    again = start_first(ref)
    ref.apply(act.FinishConsume(0, again.rid, SUSPEND, -1, 0))  # at the maximum: forwarded
    assert again.state is ConsumeRequestState.UPDATING_OFFSET and again.commit_offset == 1
    dlq = ref.abstract()[1].dlq
    assert len(dlq) == 1 and dlq[0].origin == (0, 0)
    assert dlq[0].reconsume_times == stored_times  # RECONSUME_TIME: times (4.9.8), times + 1 (5.1.1+)
    stored = ref.host.message_store.find_consume_queue(dlq_topic(ref.config.group), 0)
    assert stored is not None and len(stored.units) == 1


def test_a_failed_forward_at_max_counts_as_a_local_retry(tmp_path: Path) -> None:
    ref, request = listening(tmp_path, max_reconsume_times=0)
    ref.apply(act.FinishConsume(0, request.rid, SUSPEND, -1, 1))  # the forwarding send fails
    assert request.state is ConsumeRequestState.DONE and request.msgs[0].reconsume_times == 1
    assert offsets(pq_of(ref).msg_tree_map) == [0, 1, 2] and not ref.abstract()[1].dlq


def test_forward_faults_may_name_only_messages_at_max(tmp_path: Path) -> None:
    ref, request = listening(tmp_path)
    with pytest.raises(ReferenceActionError):
        ref.apply(act.FinishConsume(0, request.rid, SUSPEND, -1, 1))
    with pytest.raises(ReferenceActionError):
        ref.apply(act.FinishConsume(0, request.rid, act.CONSUME_SUCCESS, -1, 0))


def test_a_reput_offset_gets_the_stored_message_back(tmp_path: Path) -> None:
    ref, request = listening(tmp_path)
    ref.apply(act.FinishConsume(0, request.rid, SUSPEND, -1, 0))
    pq = pq_of(ref)
    assert pq.msg_tree_map[0].reconsume_times == 1
    fresh = ref.host.message_store.look_message_by_offset(pq.msg_tree_map[0].commit_log_offset)
    assert fresh is not None
    assert not pq.put_message([fresh])  # replaces key 0 (not counted again), no dispatch: consuming
    assert pq.msg_tree_map[0].reconsume_times == 0 and pq.msg_count == 3
    assert ref.abstract()[2][0].pqs[0].retry_times == ()  # type: ignore[union-attr]


def test_with_auto_commit_commit_and_rollback_act_as_success(tmp_path: Path) -> None:
    ref, request = listening(tmp_path)
    service(ref).consume_executor.resume(request, OrderlyListenerAnswer(ConsumeOrderlyStatus.ROLLBACK))
    assert request.state is ConsumeRequestState.UPDATING_OFFSET and request.commit_offset == 1


def test_without_auto_commit_rollback_puts_everything_back_and_success_commits_nothing(tmp_path: Path) -> None:
    ref, request = listening(tmp_path)
    orderly = service(ref)
    orderly.consume_executor.resume(request, OrderlyListenerAnswer(ConsumeOrderlyStatus.SUCCESS, auto_commit=False))
    pq = pq_of(ref)
    assert request.state is ConsumeRequestState.LISTENING and [m.queue_offset for m in request.msgs] == [1]
    assert offsets(pq.consuming_msg_orderly_tree_map) == [0, 1]  # 0 neither committed nor put back
    orderly.consume_executor.resume(request, OrderlyListenerAnswer(ConsumeOrderlyStatus.ROLLBACK, auto_commit=False))
    assert offsets(pq.msg_tree_map) == [0, 1, 2] and not pq.consuming_msg_orderly_tree_map
    assert request.state is ConsumeRequestState.DONE and [when for _, when in queued(ref)] == [ref.clock.now() + 1_000]


@pytest.mark.parametrize(("asked", "delay"), [(-1, 1_000), (0, 10), (5, 10), (40_000, 30_000), (2_500, 2_500)])
def test_submit_consume_request_later_clamps_its_delay(tmp_path: Path, asked: int, delay: int) -> None:
    ref = system(tmp_path)
    pull(ref)
    start_first(ref)
    service(ref).submit_consume_request_later(pq_of(ref), ref.mqs[0], asked)
    assert [when for _, when in queued(ref)] == [ref.clock.now() + delay]


# --- locks inside the loop (R8.5) ---------------------------------------------------------------------


def test_a_run_on_an_unlocked_pq_tries_to_lock_again_after_100_ms(tmp_path: Path) -> None:
    ref = system(tmp_path)
    pull(ref)
    pq = pq_of(ref)
    pq.locked = False
    now = ref.clock.now()
    start_first(ref)
    assert pq.msg_tree_map and not pq.consuming_msg_orderly_tree_map  # nothing taken
    assert ref.abstract()[2][0].relocks == ((pq.uid, 0, now + 100),)
    ref.clock.advance_to(now + 100)
    ref.apply(act.TryLockLater(0, pq.uid))  # lock(mq) granted: a request 10 ms later
    assert pq.locked and pq.last_lock_timestamp == now + 100
    assert [when for _, when in queued(ref)] == [now + 110]
    assert ref.abstract()[2][0].relocks == ()


def test_a_refused_relock_resubmits_after_3_s(tmp_path: Path) -> None:
    ref = system(tmp_path)
    pull(ref)
    pq = pq_of(ref)
    pq.locked = False
    start_first(ref)
    ref.apply(act.BrokerCrash())  # lock(mq) fails: the broker is down
    ref.clock.advance_to(ref.clock.now() + 100)
    ref.apply(act.TryLockLater(0, pq.uid))
    assert not pq.locked and [when for _, when in queued(ref)] == [ref.clock.now() + 3_000]


def test_the_loop_relocks_in_10_ms_once_the_lock_has_expired(tmp_path: Path) -> None:
    ref, request = listening(tmp_path)
    pq = pq_of(ref)
    ref.apply(act.FinishConsume(0, request.rid, SUCCESS, -1, 0))
    pq.last_lock_timestamp = ref.clock.now() - 30_001  # isLockExpired(): no lockAll for over 30 s
    ref.apply(act.ApplyConsumeOffset(0, request.rid))
    assert mem_offset(ref) == 1  # the commit is written first
    assert request.state is ConsumeRequestState.DONE and offsets(pq.msg_tree_map) == [1, 2]
    assert ref.abstract()[2][0].relocks == ((pq.uid, 0, ref.clock.now() + 10),)


def test_the_loop_yields_after_60_s_of_continuous_consumption(tmp_path: Path) -> None:
    ref, request = listening(tmp_path)
    ref.apply(act.FinishConsume(0, request.rid, SUCCESS, -1, 0))
    request.begin_time = ref.clock.now() - 60_001  # the run began more than MAX_TIME_CONSUME_CONTINUOUSLY ago
    ref.apply(act.ApplyConsumeOffset(0, request.rid))
    assert request.state is ConsumeRequestState.DONE
    assert [when for _, when in queued(ref)] == [ref.clock.now() + 10]


def test_broadcasting_runs_without_a_lock(tmp_path: Path) -> None:
    ref = system(tmp_path, mode="BROADCASTING", version="5.x")  # 5.x takes no locks in BROADCASTING
    pull(ref)
    pq_of(ref).locked = False  # (a new pq is created locked; in BROADCASTING the flag is never read)
    request = start_first(ref)
    assert request.state is ConsumeRequestState.LISTENING


# --- orderly removal at rebalance (R8.8) --------------------------------------------------------------


def remove_all(ref: ReferenceSystem, i: int = 0) -> bool:
    """Phase A of a rebalance that allocates nothing; True if the pq of queue 0 left the table."""
    rebalance = consumer(ref, i).rebalance_impl
    rebalance.update_process_queue_table_in_rebalance(ref.config.topic, set(), True)
    return ref.mqs[0] not in rebalance.process_queue_table


def test_removal_4_9_8_keeps_dropped_pq_while_listener_runs(tmp_path: Path) -> None:
    ref, request = listening(tmp_path)
    consumer(ref).offset_store.update_offset(ref.mqs[0], 0, False)
    pq = pq_of(ref)
    assert not remove_all(ref)
    assert pq.dropped and pq.try_unlock_times == 1 and pq_of(ref) is pq
    assert consumer(ref).offset_store.read_offset(ref.mqs[0], ReadOffsetType.READ_FROM_MEMORY) == -1  # removed
    assert broker_lock_holder(ref) == 0  # no unlock
    abstract_pq = ref.abstract()[2][0].pqs[0]
    assert abstract_pq is not None and abstract_pq.dropped
    ref.apply(act.FinishConsume(0, request.rid, SUCCESS, -1, 0))
    ref.apply(act.ApplyConsumeOffset(0, request.rid))  # dropped: no updateOffset, the run ends
    assert mem_offset(ref) == -1 and request.state is ConsumeRequestState.DONE
    assert remove_all(ref)  # the next rebalance takes it out (the tree still holds 1, 2: unlock later)
    assert ref.abstract()[2][0].unlocks == ((0, ref.clock.now() + 20_000),)


def test_removal_4_9_8_delays_the_unlock_20_s_when_the_tree_holds_messages(tmp_path: Path) -> None:
    ref = system(tmp_path)
    pull(ref)
    now = ref.clock.now()
    assert remove_all(ref)
    assert broker_lock_holder(ref) == 0 and ref.abstract()[2][0].unlocks == ((0, now + 20_000),)
    with pytest.raises(ReferenceActionError):
        ref.apply(act.DelayedUnlock(0, 0))  # not due yet
    ref.clock.advance_to(now + 20_000)
    ref.apply(act.DelayedUnlock(0, 0))
    assert broker_lock_holder(ref) is None and ref.abstract()[2][0].unlocks == ()


def test_removal_4_9_8_unlocks_at_once_when_the_tree_is_empty(tmp_path: Path) -> None:
    ref = system(tmp_path, backlog=0)
    assert remove_all(ref)
    assert broker_lock_holder(ref) is None and ref.abstract()[2][0].unlocks == ()


def test_removal_5x_waits_for_the_consume_lock_and_keeps_the_memory_offset(tmp_path: Path) -> None:
    ref, _ = listening(tmp_path, version="5.x")
    consumer(ref).offset_store.update_offset(ref.mqs[0], 0, False)
    pq = pq_of(ref)
    assert not remove_all(ref)
    assert pq.dropped and pq.locked and pq.try_unlock_times == 1
    assert mem_offset(ref) == 0  # 5.x persists first but removes the offset only with the lock
    assert broker_lock_holder(ref) == 0


def test_removal_5x_forces_unlock_after_20_s(tmp_path: Path) -> None:
    ref, request = listening(tmp_path, version="5.x")
    pq = pq_of(ref)
    pq.last_lock_timestamp = ref.clock.now() - 20_001  # the dropped pq's lock is more than 20 s old
    assert remove_all(ref)
    assert not pq.locked and broker_lock_holder(ref) is None and mem_offset(ref) == -1
    commits = [r for r in ref.connections[0].outbound if r.code == RequestCode.UPDATE_CONSUMER_OFFSET]
    assert len(commits) == 2  # persist(mq) before the lock test and again under it
    assert request.state is ConsumeRequestState.LISTENING  # the listener still runs: RMQ-09's window
    ref.apply(act.FinishConsume(0, request.rid, SUCCESS, -1, 0))  # commit() on the removed pq
    ref.apply(act.ApplyConsumeOffset(0, request.rid))
    assert mem_offset(ref) == -1 and request.state is ConsumeRequestState.DONE


def test_removal_5x_with_the_consume_lock_free_unlocks_at_once(tmp_path: Path) -> None:
    ref = system(tmp_path, version="5.x")
    pull(ref)
    pq = pq_of(ref)
    assert remove_all(ref)
    assert not pq.locked and broker_lock_holder(ref) is None and ref.abstract()[2][0].unlocks == ()


def test_an_orderly_broadcasting_consumer_removes_like_a_concurrent_one(tmp_path: Path) -> None:
    ref, _ = listening(tmp_path, mode="BROADCASTING")
    assert remove_all(ref)  # persist, removeOffset, true: no consume lock, no unlock (R8.8 is CLUSTERING only)
    assert ref.abstract()[2][0].unlocks == ()


def test_a_dropped_pq_in_the_table_discards_its_pull_request_when_taken(tmp_path: Path) -> None:
    ref, _ = listening(tmp_path)
    assert not remove_all(ref)
    abstract_pq = ref.abstract()[2][0].pqs[0]
    assert abstract_pq is not None and abstract_pq.pull_state == PULL_READY  # its request still circulates
    ref.apply(act.SendPull(0, 0))
    abstract_pq = ref.abstract()[2][0].pqs[0]
    assert abstract_pq is not None and abstract_pq.pull_state == PULL_DROPPED and abstract_pq.next_offset == 3
    assert all(r.code != RequestCode.PULL_MESSAGE for r in ref.connections[0].outbound)  # nothing was pulled


def test_a_dropped_pq_in_the_table_stays_until_a_rebalance_can_remove_it(tmp_path: Path) -> None:
    ref, _ = listening(tmp_path)
    rebalance = consumer(ref).rebalance_impl
    assert not remove_all(ref)
    rebalance.update_process_queue_table_in_rebalance(ref.config.topic, {ref.mqs[0]}, True)
    assert pq_of(ref).dropped  # allocated again, but Phase B does not re-create a queue still in the table


def test_a_oneway_unlock_is_lost_while_the_broker_is_down(tmp_path: Path) -> None:
    ref = system(tmp_path, backlog=0)
    ref.apply(act.BrokerCrash())
    assert remove_all(ref)  # unlock(mq, true) fails silently: nothing waits on the wire for a later broker
    assert all(r.code != RequestCode.UNLOCK_BATCH_MQ for r in ref.connections[0].outbound)


# --- shutdown and stalls --------------------------------------------------------------------------------


def test_shutdown_discards_runs_and_relock_tasks_then_unlocks_all(tmp_path: Path) -> None:
    ref = system(tmp_path, queues=2, backlog=2)
    pull(ref, 0)
    pull(ref, 1)
    pq_of(ref, 1).locked = False
    first = start_first(ref)  # queue 0: listening
    start_first(ref)  # queue 1: not locked, relock in 100 ms
    orderly = service(ref)
    assert orderly.try_lock_later_tasks() and first.state is ConsumeRequestState.LISTENING
    ref.apply(act.Shutdown(0))
    assert not orderly.try_lock_later_tasks() and not orderly.consume_executor.running
    # shutdownNow only interrupts: the listener on queue 0 runs on, holding its monitor, while unlockAll has
    # released both queues at the broker (R4.4 step 1, R8.9; docs/spec.md, "What is real, ranked")
    assert list(orderly.consume_executor.orphans) == [first]
    assert orderly.message_queue_lock.is_held(ref.mqs[0])
    assert broker_lock_holder(ref, 0) is None and broker_lock_holder(ref, 1) is None
    ref.apply(act.OrphanReturns(0, first.rid))  # it returns into a dropped pq: no offset update, run ends
    assert not orderly.consume_executor.orphans and not orderly.message_queue_lock.is_held(ref.mqs[0])
    assert first.state is ConsumeRequestState.DONE


def test_a_stalled_client_runs_nothing_and_its_timers_wait(tmp_path: Path) -> None:
    ref = system(tmp_path)
    now = ref.clock.now()
    ref.apply(act.Stall(0, 35_000))
    with pytest.raises(ReferenceActionError):
        ref.apply(act.SendPull(0, 0))
    ref.apply(act.Tick())  # the client's heartbeat and lockAll timers (due at 1 s) do not hold the clock back
    assert ref.clock.now() == now + 10_000  # the broker's flush timer does
    while ref.clock.now() < now + 35_000:
        ref.apply(act.BrokerFlush())
        ref.apply(act.Tick())
    assert ref.clock.now() == now + 35_000  # the stall's end is a deadline of its own
    with pytest.raises(ReferenceActionError):
        ref.apply(act.Tick())  # awake: every overdue timer is due at once
    ref.apply(act.LockAll(0))
    assert ref.abstract()[2][0].stalled_until == now + 35_000


def test_a_stalled_client_can_be_killed(tmp_path: Path) -> None:
    ref = system(tmp_path)
    ref.apply(act.Stall(0, 150_000))
    ref.apply(act.Crash(0))
    assert ref.processes[0] is None


def test_the_broker_expires_a_stalled_channel_120_s_after_its_last_heartbeat(tmp_path: Path) -> None:
    ref = system(tmp_path)
    info = ref._controller().consumer_manager.get_consumer_group_info(ref.config.group)
    assert info is not None
    last = info.channel_info_table[ref.connections[0]].last_update_timestamp
    ref.apply(act.Stall(0, 150_000))
    ref.clock.advance_to(last + 120_000)
    with pytest.raises(ReferenceActionError):
        ref.apply(act.ExpireChannel(0))
    ref.clock.advance_to(last + 120_001)
    ref.apply(act.ExpireChannel(0))
    assert 0 not in ref.abstract()[1].registered


# --- scripted lockstep runs: the reference and the model step by step ---------------------------------

TIMERS = (
    act.Tick,
    act.BrokerFlush,
    act.PersistOffsets,
    act.Heartbeat,
    act.Rebalance,
    act.LockAll,
    act.BrokerReceive,
    act.TryLockLater,
    act.DelayedUnlock,
)


@dataclass
class Until:
    """Fire timers (and ticks, and the broker's reads) until ``done(state)``."""

    done: Callable[[State], bool]


def lockstep(tmp_path: Path, config: Config, *script: act.Action | Until) -> tuple[State, ReferenceSystem]:
    """Apply ``script`` to the model and the reference; after every step the reference's abstraction
    must equal the model's state, and every scripted action must be enabled in the model."""
    model = Model(config)
    state = model.initial()
    ref = ReferenceSystem(config, tmp_path)

    def step(action: act.Action) -> None:
        nonlocal state
        while (wait := wait_step(model, state, action)) is not None:  # 5.x's pacing (R4.2): time passes
            step(wait)
        assert action in model.enabled(state), f"{action!r} is not enabled at t={state.now}"
        state = model.step(state, action)
        ref.apply(action)
        assert ref.abstract() == (state.now, state.broker, state.clients), f"after {action!r}"

    for item in script:
        if isinstance(item, Until):
            while not item.done(state):
                options = [a for a in model.enabled(state) if isinstance(a, TIMERS)]
                assert options, f"stuck at t={state.now}"
                step(next((a for a in options if not isinstance(a, act.Tick)), options[0]))
        else:
            step(item)
    return state, ref


def test_lockstep_a_stall_past_the_lock_validity_makes_the_run_relock(tmp_path: Path) -> None:
    """A 35 s stall outlasts isLockExpired's 30 s: the queued request's run finds the lock expired and
    re-locks 100 ms later (R8.5 step 1); the re-lock is granted and a new run consumes."""
    config = Config(**{**BASE, "client_stalls": 1})
    state, _ = lockstep(
        tmp_path,
        config,
        act.Start(0),
        act.Rebalance(0),
        act.SendPull(0, 0),
        act.BrokerReceive(0),
        act.ReceivePull(0, 0),
        act.Stall(0, 35_000),
        Until(lambda s: s.now >= 35_000),
        act.StartConsume(0, 2),
    )
    assert state.clients[0].relocks == ((0, 0, 35_100),) and not state.clients[0].consuming
    state, _ = lockstep(
        tmp_path / "again",
        config,
        act.Start(0),
        act.Rebalance(0),
        act.SendPull(0, 0),
        act.BrokerReceive(0),
        act.ReceivePull(0, 0),
        act.Stall(0, 35_000),
        Until(lambda s: s.now >= 35_000),
        act.StartConsume(0, 2),
        Until(lambda s: not s.clients[0].relocks and s.now >= 35_110),
        act.StartConsume(0, 3),
    )
    assert [r.msgs for r in state.clients[0].consuming] == [((0, 0),)]


def test_lockstep_removal_4_9_8_keeps_the_pq_dropped_until_the_listener_returns(tmp_path: Path) -> None:
    """Client 1 consumes queue 0 when client 0 (first in cid order) joins: client 1's rebalance cannot
    take the consume lock, so its pq stays dropped in the table (R8.8); its pull request is discarded;
    once the listener has returned, the next rebalance removes it and unlocks (20 s later: the tree
    still caches messages), and client 0 takes the queue over."""
    config = Config(**{**BASE, "consumers": 2})
    state, _ = lockstep(
        tmp_path,
        config,
        act.Start(1),
        act.Rebalance(1),
        act.SendPull(1, 0),
        act.BrokerReceive(1),
        act.ReceivePull(1, 0),
        act.StartConsume(1, 2),
        act.Start(0),
        act.Rebalance(1),
    )
    pq = state.clients[1].pqs[0]
    assert pq is not None and pq.dropped and state.clients[1].consuming
    state, _ = lockstep(
        tmp_path / "more",
        config,
        act.Start(1),
        act.Rebalance(1),
        act.SendPull(1, 0),
        act.BrokerReceive(1),
        act.ReceivePull(1, 0),
        act.StartConsume(1, 2),
        act.Start(0),
        act.Rebalance(1),
        act.SendPull(1, 0),
        act.FinishConsume(1, 2, SUCCESS, -1, 0),
        act.ApplyConsumeOffset(1, 2),
        Until(lambda s: s.clients[1].pqs[0] is None),
    )
    assert state.clients[1].unlocks == ((0, state.now + 20_000),)
    assert state.broker.locks[0] is not None and state.broker.locks[0][0] == 1  # held until the delayed unlock


def test_lockstep_removal_5x_forces_the_unlock_of_a_stalled_consumer_whose_listener_runs(tmp_path: Path) -> None:
    """5.x: client 1's listener runs and its process stalls for 35 s; when it wakes, the overdue
    rebalance finds the queue allocated to client 0 and the pq's lock 35 s old: the removal is forced
    (R8.8), the broker lock released while the listener still runs (RMQ-09's window), and the late
    commit changes nothing."""
    config = Config(**{**BASE, "consumers": 2, "version": "5.x", "client_stalls": 1})
    state, _ = lockstep(
        tmp_path,
        config,
        act.Start(1),
        act.Rebalance(1),
        act.SendPull(1, 0),
        act.BrokerReceive(1),
        act.ReceivePull(1, 0),
        act.StartConsume(1, 2),
        act.Start(0),
        act.Stall(1, 35_000),
        Until(lambda s: s.now >= s.clients[1].stalled_until),  # type: ignore[operator]  # awake
        act.Rebalance(1),
        act.FinishConsume(1, 2, SUCCESS, -1, 0),
        act.ApplyConsumeOffset(1, 2),
    )
    client = state.clients[1]
    assert client.pqs[0] is None and not client.consuming and not client.offset_updates
    assert client.mem[0] is None  # removeOffset ran; the late commit wrote nothing
    assert state.broker.locks[0] is None or state.broker.locks[0][0] == 0


def test_lockstep_the_broker_expires_a_stalled_channel_120_s_after_its_last_heartbeat_and_tells_nobody(
    tmp_path: Path,
) -> None:
    """Consumer 0 heartbeats at start (t=0) and stalls at once: ConsumerManager.scanNotActiveChannel may drop
    its channel only once t > 120 s (CHANNEL_EXPIRED_TIMEOUT since lastUpdateTimestamp), and then tells
    nobody: consumer 1 gets no rebalance request (R4.3)."""
    config = Config(**{**BASE, "consumers": 2, "client_stalls": 1})
    state, _ = lockstep(
        tmp_path,
        config,
        act.Start(0),
        act.Start(1),
        act.Rebalance(1),
        act.Stall(0, 150_000),
        Until(lambda s: s.now > 91_000),
    )
    assert act.ExpireChannel(0) not in Model(config).enabled(state)
    state, _ = lockstep(
        tmp_path / "again",
        config,
        act.Start(0),
        act.Start(1),
        act.Rebalance(1),
        act.Stall(0, 150_000),
        Until(lambda s: s.now > 120_000),
        Until(lambda s: not s.clients[1].rebalance_requested),
        act.ExpireChannel(0),
    )
    assert state.broker.registered == frozenset({1}) and not state.clients[1].rebalance_requested


def test_lockstep_a_late_reply_reads_the_msg_count_a_forced_removal_commit_left(tmp_path: Path) -> None:
    """5.x: client 1 consumes the whole tree (batch 3) with a pull in flight and stalls; the forced removal
    detaches the pq with msgCount 3; the listener's commit() makes it 0; the late NO_NEW_MSG reply's
    correctTagsOffset sees 0 and writes the memory offset of a queue the client no longer owns (R6.7)."""
    config = Config(**{**BASE, "consumers": 2, "version": "5.x", "client_stalls": 1, "consume_batch_size": 3})
    lockstep(
        tmp_path,
        config,
        act.Start(1),
        act.Rebalance(1),
        act.SendPull(1, 0),
        act.BrokerReceive(1),
        act.ReceivePull(1, 0),
        act.StartConsume(1, 2),
        act.SendPull(1, 0),
        act.Start(0),
        act.Stall(1, 35_000),
        Until(lambda s: s.now >= s.clients[1].stalled_until),  # type: ignore[operator]  # awake
        act.Rebalance(1),
        act.FinishConsume(1, 2, SUCCESS, -1, 0),
        act.ApplyConsumeOffset(1, 2),
        act.ReceivePull(1, 0),
    )


def test_lockstep_a_run_longer_than_60_s_hands_the_queue_back_to_the_pool(tmp_path: Path) -> None:
    """A listener that runs for over a minute (the timers, lockAll among them, keep firing): after its
    commit the loop sees MAX_TIME_CONSUME_CONTINUOUSLY exceeded and resubmits the pq 10 ms later (R8.5)."""
    state, _ = lockstep(
        tmp_path,
        Config(**BASE),
        act.Start(0),
        act.Rebalance(0),
        act.SendPull(0, 0),
        act.BrokerReceive(0),
        act.ReceivePull(0, 0),
        act.StartConsume(0, 2),
        Until(lambda s: s.now > 60_000),
        act.FinishConsume(0, 2, SUCCESS, -1, 0),
        act.ApplyConsumeOffset(0, 2),
    )
    client = state.clients[0]
    assert not client.consuming and client.mem[0] == 1
    assert [(r.msgs, r.ready_at) for r in client.requests] == [((), state.now + 10)]
