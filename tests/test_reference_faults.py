"""The reference side of three faults: a lost oneway commit (``LoseCommit``, R2.5, R2.6), a rebalance whose
consumer list misses the consumer itself (``RebalanceWithoutSelf``, S7, R9.3, R11.0), and two consumers
sharing one clientId (``Config.duplicate_client_id``, RMQ-11).

Each scenario runs the model and ``ReferenceSystem`` in lockstep: after every action the reference's
abstraction must equal the model's state, so what is asserted about the final state holds for both. The
assertions on reference objects (the wire, the broker's consumer list, the lock table) show the RocketMQ
mechanism behind the abstract outcome.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from rmqspec.reference.broker import BrokerController
from rmqspec.reference.protocol import (
    GetConsumerListByGroupRequestHeader,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    UpdateConsumerOffsetRequestHeader,
)
from rmqspec.refinement.faults import ConsumerListWithout
from rmqspec.refinement.reference_system import ReferenceActionError, ReferenceSystem
from rmqspec.spec import actions as act
from rmqspec.spec.allocation import client_id
from rmqspec.spec.config import Config
from rmqspec.spec.model import Model
from rmqspec.spec.state import Commit, PullRequestMsg, State

TIMERS = act.TIME_ONLY


@pytest.fixture(autouse=True)
def _quiet_reference_logs() -> Iterator[None]:
    """The reference logs what RocketMQ logs (failed lists, allocation errors); not needed here."""
    logging.getLogger("rmqspec.reference").setLevel(logging.CRITICAL)
    yield
    logging.getLogger("rmqspec.reference").setLevel(logging.NOTSET)


class Lockstep:
    """The model and the reference side by side; every action must be enabled in the model, and after
    it the reference's abstraction must equal the model's (now, broker, clients)."""

    def __init__(self, config: Config, root: Path) -> None:
        self.model = Model(config)
        self.state: State = self.model.initial()
        self.ref = ReferenceSystem(config, root)
        self.trace: list[act.Action] = []
        self._check()

    def _check(self) -> None:
        expected = (self.state.now, self.state.broker, self.state.clients)
        assert self.ref.abstract() == expected, f"reference and model differ after {self.trace}"

    def enabled(self) -> list[act.Action]:
        return self.model.enabled(self.state)

    def do(self, action: act.Action) -> None:
        assert action in self.enabled(), f"{action!r} is not enabled at t={self.state.now} after {self.trace}"
        self.trace.append(action)
        self.state = self.model.step(self.state, action)
        self.ref.apply(action)
        self._check()

    def first(self, kind: type, client: int | None = None) -> act.Action:
        """The first enabled action of ``kind`` (of ``client``, when given)."""
        for a in self.enabled():
            if isinstance(a, kind) and (client is None or getattr(a, "client", None) == client):
                return a
        raise AssertionError(f"no {kind.__name__} enabled at t={self.state.now} after {self.trace}")

    def until(
        self, done: Callable[[State], bool], allowed: tuple[type, ...] = TIMERS, avoid: tuple[act.Action, ...] = ()
    ) -> None:
        """Fire ``allowed`` actions (timers before ticks, never ``avoid``) until ``done``."""
        for _ in range(500):
            if done(self.state):
                return
            options = [a for a in self.enabled() if isinstance(a, allowed) and a not in avoid]
            assert options, f"stuck at t={self.state.now}: nothing allowed is enabled"
            self.do(next((a for a in options if not isinstance(a, act.Tick)), options[0]))
        raise AssertionError("until: not done after 500 actions")

    def settle_rebalances(self) -> None:
        """Run every requested rebalance (the start's, the broker's notifications) until none is."""

        def quiet(s: State) -> bool:
            due = [a for a in self.enabled() if isinstance(a, act.Rebalance)]
            return not any(s.clients[a.client].rebalance_requested for a in due)

        self.until(quiet, allowed=(act.Rebalance,))

    def consume_one(self, client: int, queue: int) -> None:
        """Pull ``queue`` once and consume what came, successfully, up to updateOffset."""
        self.do(act.SendPull(client, queue))
        self.do(act.BrokerReceive(client))
        self.do(self.first(act.ReceivePull, client))
        while any(isinstance(a, act.StartConsume) and a.client == client for a in self.enabled()):
            start = self.first(act.StartConsume, client)
            assert isinstance(start, act.StartConsume)
            self.do(start)
            self.do(act.FinishConsume(client, start.rid, act.CONSUME_SUCCESS, 0, 0))
            self.do(act.ApplyConsumeOffset(client, start.rid))

    def owned(self, client: int) -> set[int]:
        return {q for q, pq in enumerate(self.state.clients[client].pqs) if pq is not None}


def _controller(run: Lockstep) -> BrokerController:
    controller = run.ref.host.controller
    assert controller is not None
    return controller


# --- LoseCommit ------------------------------------------------------------------------------------------


def test_a_lost_commit_never_reaches_the_broker_and_the_next_persist_sends_it_again(tmp_path: Path) -> None:
    """R2.5, R2.6: the persist timer's oneway UPDATE_CONSUMER_OFFSET is lost on the wire; nothing tells
    the client, whose memory still holds the offset, so the next persist (5 s later) sends it again and
    that one lands."""
    run = Lockstep(Config(consumers=1, queues=1, commit_losses=1), tmp_path)
    run.do(act.Produce(0, "A"))
    run.do(act.Start(0))
    run.do(act.Rebalance(0))
    run.consume_one(0, 0)
    assert run.state.clients[0].mem[0] == 1
    run.until(lambda s: bool(s.clients[0].channel), avoid=(act.Rebalance(0),))
    sent = run.state.clients[0].channel[0]
    assert isinstance(sent, Commit) and (sent.queue, sent.offset, sent.cause) == (0, 1, "persist-timer")
    lost_at = run.state.now
    wire = run.ref.connections[0].outbound
    assert wire[0].code == RequestCode.UPDATE_CONSUMER_OFFSET

    run.do(act.LoseCommit(0))

    assert [c.queue for c in run.state.clients[0].channel] == [1]  # the retry queue's commit is still on its way
    headers = [r.header for r in wire]
    assert all(isinstance(h, UpdateConsumerOffsetRequestHeader) for h in headers)
    assert [(h.topic, h.queue_id) for h in headers] == [("%RETRY%G", 0)]  # type: ignore[attr-defined]
    run.do(act.BrokerReceive(0))
    assert run.state.broker.offsets[:2] == (None, 0)  # the broker never heard of queue 0's
    assert _controller(run).consumer_offset_manager.query_offset("G", "T", 0) == -1
    assert run.state.clients[0].mem[0] == 1  # the client does not know
    assert run.state.budget.commit_losses == 0

    run.until(lambda s: bool(s.clients[0].channel), avoid=(act.Rebalance(0),))
    again = run.state.clients[0].channel[0]
    assert isinstance(again, Commit) and (again.queue, again.offset) == (0, 1)
    assert run.state.now == lost_at + 5_000
    run.do(act.BrokerReceive(0))
    assert run.state.broker.offsets[0] == 1
    assert _controller(run).consumer_offset_manager.query_offset("G", "T", 0) == 1


def test_a_lost_commit_can_be_the_final_persist_of_a_shutdown_and_then_nobody_sends_it(tmp_path: Path) -> None:
    """R2.6, R9.5: shutdown's persistAll is the client's last word; lost, the broker keeps the older
    offset and the next owner repeats what was consumed (at least once, S4)."""
    run = Lockstep(Config(consumers=1, queues=1, commit_losses=1), tmp_path)
    run.do(act.Produce(0, "A"))
    run.do(act.Start(0))
    run.do(act.Rebalance(0))
    run.consume_one(0, 0)
    run.do(act.Shutdown(0))
    final = run.state.clients[0].channel
    assert next((c.queue, c.offset, c.cause) for c in final if isinstance(c, Commit)) == (0, 1, "shutdown")
    run.do(act.LoseCommit(0))
    run.until(lambda s: not s.clients[0].channel, allowed=(act.BrokerReceive,))
    assert run.state.broker.offsets[0] is None
    run.do(act.Start(0))
    run.do(act.Rebalance(0))
    pq = run.state.clients[0].pqs[0]
    assert pq is not None and pq.next_offset == 0  # message 0 is delivered again


def test_losing_a_request_that_is_not_a_commit_is_refused_by_the_reference(tmp_path: Path) -> None:
    """The fault drops only a oneway commit: with a pull at the head of the wire the model does not
    enable it, and the reference refuses it without touching the wire."""
    run = Lockstep(Config(consumers=1, queues=1, commit_losses=1), tmp_path)
    run.do(act.Start(0))
    run.do(act.Rebalance(0))
    run.do(act.SendPull(0, 0))
    assert isinstance(run.state.clients[0].channel[0], PullRequestMsg)
    assert act.LoseCommit(0) not in run.enabled()
    with pytest.raises(ReferenceActionError, match="not a oneway commit"):
        run.ref.apply(act.LoseCommit(0))
    assert len(run.ref.connections[0].outbound) == 1
    run.do(act.Crash(0))
    with pytest.raises(ReferenceActionError, match="not a oneway commit"):
        run.ref.apply(act.LoseCommit(0))  # still the pull, even with the process gone


# --- RebalanceWithoutSelf --------------------------------------------------------------------------------


def _two_balanced_consumers(tmp_path: Path, **extra: object) -> Lockstep:
    """Consumers 0 and 1 over 2 queues, both rebalanced over [c0, c1]: 0 owns queue 0 and the retry
    queue (index 2), 1 owns queue 1."""
    run = Lockstep(Config(consumers=2, queues=2, **extra), tmp_path)  # type: ignore[arg-type]
    run.do(act.Start(0))
    run.do(act.Start(1))
    run.settle_rebalances()
    assert run.state.clients[0].view == (0, 1) and run.state.clients[1].view == (0, 1)
    assert run.owned(0) == {0, 2} and run.owned(1) == {1}
    return run


def test_a_rebalance_that_misses_itself_drops_every_queue_of_the_topic(tmp_path: Path) -> None:
    """S7, R9.3, R11.0: the broker's lists name only consumer 1, so AVG's check finds consumer 0's id
    missing and allocates it nothing, for the topic and the retry topic: Phase A persists and drops both
    pqs (R9.5). Consumer 1 keeps its slice: queue 0 and the retry queue are owned by nobody until the
    next rebalance, which sees the true list and takes them back."""
    run = _two_balanced_consumers(tmp_path, view_faults=1)
    run.until(lambda s: any(isinstance(a, act.RebalanceWithoutSelf) for a in run.enabled()), avoid=(act.Rebalance(0),))

    run.do(act.RebalanceWithoutSelf(0))

    assert run.owned(0) == set() and run.owned(1) == {1}
    assert run.state.clients[0].view == (1,)  # the list it balanced over lacks itself
    assert run.ref.host.consumer_list_filter is None  # the fault lasted that one rebalance
    info = _controller(run).consumer_manager.get_consumer_group_info("G")
    assert info is not None and info.get_all_client_id() == [client_id(0), client_id(1)]  # still registered
    assert run.state.budget.view_faults == 0
    run.until(lambda s: bool(s.clients[0].pqs[0]), allowed=(*TIMERS,))
    assert run.owned(0) == {0, 2} and run.state.clients[0].view == (0, 1)


def test_a_rebalance_that_misses_itself_keeps_a_config_list_because_config_ignores_the_consumer_list(
    tmp_path: Path,
) -> None:
    """R11.0, R11.4: CONFIG is the one strategy that does not check cidAll; its queues stay."""
    lists = ((0, 2), (1,))
    run = _two_balanced_consumers(tmp_path, view_faults=1, strategy="CONFIG", allocate_config_queues=lists)
    run.until(lambda s: any(isinstance(a, act.RebalanceWithoutSelf) for a in run.enabled()), avoid=(act.Rebalance(0),))
    run.do(act.RebalanceWithoutSelf(0))
    assert run.owned(0) == {0, 2} and run.state.clients[0].view == (1,)


def test_the_consumer_list_filter_removes_every_occurrence_of_the_id_and_only_in_its_group() -> None:
    """The driver's answer filter: the group's list minus the id, wherever it appears; other groups pass."""
    without = ConsumerListWithout("G", "x")
    assert without("G", ["x", "y", "x"]) == ["y"]
    assert without("H", ["x", "y"]) == ["x", "y"]


def test_rebalance_without_self_needs_clustering_and_another_registered_consumer(tmp_path: Path) -> None:
    """Alone in the group, the fault is not defined: the model does not enable it, the reference refuses."""
    run = Lockstep(Config(consumers=2, queues=2, view_faults=1), tmp_path)
    run.do(act.Start(0))
    assert act.RebalanceWithoutSelf(0) not in run.enabled()
    with pytest.raises(ReferenceActionError, match="not registered with another"):
        run.ref.apply(act.RebalanceWithoutSelf(0))
    assert run.ref.host.consumer_list_filter is None


# --- duplicate clientId ----------------------------------------------------------------------------------


def _list_answer(run: Lockstep) -> RemotingCommand:
    request = RemotingCommand.create_request_command(
        RequestCode.GET_CONSUMER_LIST_BY_GROUP, GetConsumerListByGroupRequestHeader("G")
    )
    return _controller(run).consumer_manage_processor.get_consumer_list_by_group(request)


def test_two_consumers_with_one_client_id_take_the_same_slice_and_orphan_the_other(tmp_path: Path) -> None:
    """RMQ-11: consumers 0 and 1 both report c0's id; the broker keeps one channel each, so the list is
    [c0, c0, c2]. AVG takes indexOf(c0) = 0 for both: both own queues 0 and 1 (and the retry queue,
    index 4) and consume them twice; index 1's slice, queue 2, has no owner; c2 owns queue 3. Every
    view reads (0, 0, 2)."""
    run = Lockstep(Config(consumers=3, queues=4, duplicate_client_id=True), tmp_path)
    for i in range(3):
        run.do(act.Start(i))
    run.settle_rebalances()
    answer = _list_answer(run)
    assert answer.code == ResponseCode.SUCCESS and isinstance(answer.body, list)
    assert sorted(answer.body) == [client_id(0), client_id(0), client_id(2)]
    assert run.ref.processes[1] is not None and run.ref.processes[1].instance.client_id == client_id(0)
    assert run.state.broker.registered == frozenset({0, 1, 2})
    assert [cl.view for cl in run.state.clients] == [(0, 0, 2)] * 3
    assert run.owned(0) == run.owned(1) == {0, 1, 4}
    assert run.owned(2) == {3}
    assert not any(run.owned(i) & {2} for i in range(3))  # queue 2 is orphaned


def test_consumers_sharing_a_client_id_both_hold_a_queue_lock_and_either_one_releases_it(tmp_path: Path) -> None:
    """RMQ-11, R8.1-R8.4: the broker's lock table keys by clientId, so consumer 1 is granted the lock of
    the queue consumer 0 holds (the same id) and both consume it orderly at once; consumer 1's shutdown
    unlocks by clientId and frees the queue under consumer 0, which still believes it holds it."""
    run = Lockstep(Config(consumers=2, queues=2, orderly=True, duplicate_client_id=True, client_shutdowns=1), tmp_path)
    run.do(act.Start(0))
    run.do(act.Start(1))
    run.settle_rebalances()
    assert run.owned(0) == run.owned(1) == {0, 2}  # [c0, c0]: both are index 0
    for i in (0, 1):
        pq = run.state.clients[i].pqs[0]
        assert pq is not None and pq.locked
    assert run.state.broker.locks[0] is not None and run.state.broker.locks[0][0] == 0  # held by "c0"

    run.do(act.Shutdown(1))

    assert run.state.broker.locks[0] is None  # unlockBatch by c0's id, sent by consumer 1
    pq = run.state.clients[0].pqs[0]
    assert pq is not None and pq.locked  # consumer 0 has not noticed


def test_an_emptied_consumer_list_is_no_consumer_for_this_group_and_the_rebalance_keeps_its_queues(
    tmp_path: Path,
) -> None:
    """Only the two consumers sharing c0 are registered, and the list misses c0: the filtered list is
    empty, which the processor answers SYSTEM_ERROR "no consumer for this group" (R9.3 step 2); the
    client's findConsumerIdList gives null and both topics are left alone (R9.3 step 3)."""
    run = Lockstep(Config(consumers=3, queues=2, duplicate_client_id=True, view_faults=1), tmp_path)
    run.do(act.Start(0))
    run.do(act.Start(1))
    run.settle_rebalances()
    before = run.state.clients[1]
    assert run.owned(0) == run.owned(1) == {0, 2}  # [c0, c0]: both index 0; queue 1 is orphaned
    run.until(lambda s: any(isinstance(a, act.RebalanceWithoutSelf) for a in run.enabled()), avoid=(act.Rebalance(1),))
    run.ref.host.consumer_list_filter = ConsumerListWithout("G", client_id(0))
    try:
        answer = _list_answer(run)
    finally:
        run.ref.host.consumer_list_filter = None
    assert answer.code == ResponseCode.SYSTEM_ERROR and "no consumer for this group" in (answer.remark or "")
    run.do(act.RebalanceWithoutSelf(1))
    assert run.owned(1) == {0, 2} and run.state.clients[1].view == before.view == (0, 0)
