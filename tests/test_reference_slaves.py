"""The reference's slave (``Config.slave``; R2.4, R2.5, R3.4, R3.8, R5.3-R5.5, R9.3), class by class.

The lockstep walks and scenarios of ``tests/test_refinement.py`` compare the reference with the model; these
tests state the RocketMQ rules the slave adds to the reference's classes directly: the client's address lookups
(``findBrokerAddressInSubscribe`` and its fall-back, ``findBrokerAddressInPublish``, ``selectBrokerAddr``),
``pullKernelImpl`` clearing the commit flag for a slave, the slave's ``PullMessageProcessor`` and
``nextOffsetCorrection`` (offsetCheckInSlave), 5.x's ``rejectRequest``, and ``SlaveSynchronize``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rmqspec.reference.broker import SLAVE_SYNC_TASK_NAME, BrokerHost, BrokerRole
from rmqspec.reference.compat import SpecCompat
from rmqspec.reference.consumer_offset_manager import ConsumerOffsetManager
from rmqspec.reference.mq_client_instance import MASTER_ID, FindBrokerResult, MQClientInstance, TopicRouteData
from rmqspec.reference.mq_version import MQVersion
from rmqspec.reference.protocol import (
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    PullSysFlag,
    RemotingCommand,
    RequestCode,
    ResponseCode,
)
from rmqspec.reference.scheduler import VirtualClock
from rmqspec.refinement.reference_system import SLAVE_ADDR, ReferenceSystem
from rmqspec.spec import actions as act
from rmqspec.spec.config import Config

MASTER = "broker-a:10911"
TOPICS = {"T": 1, "%RETRY%G": 1}


def _pair(
    tmp_path: Path, version: str = "4.9.8", offset_check_in_slave: bool = False
) -> tuple[VirtualClock, BrokerHost, BrokerHost]:
    clock = VirtualClock()
    compat, v = SpecCompat(), MQVersion(version)
    master = BrokerHost(clock, tmp_path / "master", "broker-a", TOPICS, compat, version=v)
    master.start()
    slave = BrokerHost(
        clock,
        tmp_path / "slave",
        "broker-a",
        TOPICS,
        compat,
        store_host="10.0.0.101:10911",
        version=v,
        broker_addr=SLAVE_ADDR,
        broker_role=BrokerRole.SLAVE,
        offset_check_in_slave=offset_check_in_slave,
        master=master,
    )
    slave.start()
    return clock, master, slave


def _pull(host: BrokerHost, offset: int, commit_offset: int = 0) -> RemotingCommand | None:
    """A pull of T:0 with the subscription in the request (no heartbeat needed), suspend allowed."""
    assert host.controller is not None
    flag = PullSysFlag.build_sys_flag(commit_offset > 0, True, True, False)
    header = PullMessageRequestHeader("G", "T", 0, offset, 2, flag, commit_offset, 15_000, "*", 0)
    request = RemotingCommand.create_request_command(RequestCode.PULL_MESSAGE, header)
    return host.controller.pull_message_processor.process_request(host.connect("10.0.0.1:1"), request, True)


def test_subscribe_lookup_falls_back_to_the_slave_only_when_the_master_is_missing_and_allowed(tmp_path: Path) -> None:
    """R2.4, R2.5, R5.3, R9.3: ``findBrokerAddressInSubscribe(name, MASTER_ID, onlyThisBroker)`` gives the master
    while the route has it; without it, only the non-strict lookup falls back to the slave (isSlave true).
    ``findBrokerAddressInPublish`` knows the master only; ``findBrokerAddrByTopic`` (``selectBrokerAddr``)
    prefers the master, else the slave."""
    clock, master, slave = _pair(tmp_path)
    addrs = {MASTER_ID: MASTER, 1: SLAVE_ADDR}
    route = {"T": TopicRouteData("broker-a", MASTER, 1, addrs)}
    instance = MQClientInstance(
        "c0", clock, master.connect("c0"), route, SpecCompat(), MQVersion(), [slave.connect("c0")]
    )
    assert instance.find_broker_address_in_subscribe("broker-a", MASTER_ID, True) == FindBrokerResult(MASTER, False)
    assert instance.find_broker_addr_by_topic("T") == MASTER
    del addrs[MASTER_ID]  # the name server drops the master
    assert instance.find_broker_address_in_subscribe("broker-a", MASTER_ID, True) is None
    assert instance.find_broker_address_in_subscribe("broker-a", MASTER_ID, False) == FindBrokerResult(SLAVE_ADDR, True)
    assert instance.find_broker_address_in_publish("broker-a") is None
    assert instance.find_broker_addr_by_topic("T") == SLAVE_ADDR
    assert instance.find_broker_address_in_subscribe("broker-b", MASTER_ID, False) is None


def test_a_slave_serves_pulls_from_its_copy_and_never_stores_the_piggy_backed_commit(tmp_path: Path) -> None:
    """R5.4, R5.5: the slave answers from its own copy (here one message behind the master: NO_NEW_MSG is
    held); ``storeOffsetEnable`` is false on a SLAVE even with the flag set."""
    _, master, slave = _pair(tmp_path)
    master.produce("T", 0, "A", bytes(16))
    master.produce("T", 0, "A", bytes(16))
    slave.replicate_queue("T", 0)
    master.produce("T", 0, "A", bytes(16))
    found = _pull(slave, 0, commit_offset=1)
    assert found is not None and found.code == ResponseCode.SUCCESS
    assert isinstance(found.header, PullMessageResponseHeader) and found.header.next_begin_offset == 2
    assert _pull(slave, 2, commit_offset=2) is None  # OFFSET_OVERFLOW_ONE on the copy: held (long polling)
    assert slave.require_controller().consumer_offset_manager.query_offset("G", "T", 0) == -1
    assert master.require_controller().consumer_offset_manager.query_offset("G", "T", 0) == -1


@pytest.mark.parametrize("offset_check_in_slave", [False, True])
def test_a_slave_moves_no_consumer_unless_offset_check_in_slave(tmp_path: Path, offset_check_in_slave: bool) -> None:
    """R5.5 [RMQ-17]: offset 3 is past the slave's copy (max 1). ``nextOffsetCorrection`` keeps 3 and the processor
    turns PULL_OFFSET_MOVED into PULL_RETRY_IMMEDIATELY, unless offsetCheckInSlave: then PULL_OFFSET_MOVED to
    the slave's own maxOffset. The master, asked the same, always corrects."""
    _, master, slave = _pair(tmp_path, offset_check_in_slave=offset_check_in_slave)
    master.produce("T", 0, "A", bytes(16))
    slave.replicate_queue("T", 0)
    for _ in range(3):
        master.produce("T", 0, "A", bytes(16))
    response = _pull(slave, 5)
    assert response is not None and isinstance(response.header, PullMessageResponseHeader)
    if offset_check_in_slave:
        assert (response.code, response.header.next_begin_offset) == (ResponseCode.PULL_OFFSET_MOVED, 1)
    else:
        assert (response.code, response.header.next_begin_offset) == (ResponseCode.PULL_RETRY_IMMEDIATELY, 5)
    on_master = _pull(master, 5)
    assert on_master is not None and isinstance(on_master.header, PullMessageResponseHeader)
    assert (on_master.code, on_master.header.next_begin_offset) == (ResponseCode.PULL_OFFSET_MOVED, 4)


def test_a_5x_slave_rejects_every_pull_and_a_4_9_8_one_does_not(tmp_path: Path) -> None:
    """R5.4: 5.x ``PullMessageProcessor#rejectRequest`` (slaveReadEnable = false on a SLAVE): SYSTEM_BUSY."""
    for version, rejects in (("4.9.8", False), ("5.x", True)):
        _, master, slave = _pair(tmp_path / version, version)
        assert slave.require_controller().pull_message_processor.reject_request() is rejects
        assert master.require_controller().pull_message_processor.reject_request() is False
        connection = slave.connect("10.0.0.1:1")
        flag = PullSysFlag.build_sys_flag(False, True, True, False)
        header = PullMessageRequestHeader("G", "T", 0, 0, 2, flag, 0, 15_000, "*", 0)
        request = RemotingCommand.create_request_command(RequestCode.PULL_MESSAGE, header)
        connection.send(request)
        slave.require_controller().process_next_request(connection)
        code = connection.replies[request.opaque].response
        assert (code is not None and code.code == ResponseCode.SYSTEM_BUSY) is rejects


def test_slave_synchronize_puts_the_masters_table_over_the_slaves_per_topic_key(tmp_path: Path) -> None:
    """R3.8 [RMQ-25 (2)]: ``putAll`` of GET_ALL_CONSUMER_OFFSET: T@G's map is the master's (the slave's own
    queue-1 value is gone), a key only the slave has stays; the table is persisted. While the master is down
    nothing changes."""
    _, master, slave = _pair(tmp_path)
    m = master.require_controller().consumer_offset_manager
    s = slave.require_controller().consumer_offset_manager
    m.commit_offset("c", "G", "T", 0, 5)
    s.commit_offset("c", "G", "T", 0, 7)
    s.commit_offset("c", "G", "T", 1, 3)
    s.commit_offset("c", "G", "%RETRY%G", 0, 2)
    slave.require_controller().slave_synchronize.sync_consumer_offset()
    assert s.offset_table == {"T@G": {0: 5}, "%RETRY%G@G": {0: 2}}
    persisted = ConsumerOffsetManager(tmp_path / "slave")
    assert persisted.load() and persisted.offset_table == s.offset_table
    s.commit_offset("c", "G", "T", 0, 9)
    master.crash()
    slave.require_controller().slave_synchronize.sync_consumer_offset()
    assert s.query_offset("G", "T", 0) == 9


@pytest.mark.parametrize(("version", "first", "period"), [("4.9.8", 3_000, 10_000), ("5.x", 61_000, 63_000)])
def test_the_slave_sync_task_follows_the_version(tmp_path: Path, version: str, first: int, period: int) -> None:
    """R3.8: 4.9.8 syncs at 3 s, then every 10 s; 5.x's 3 s task syncs at 61 s, then every 63 s. The master
    has no such task."""
    clock, master, slave = _pair(tmp_path, version)
    executor = slave.require_controller().scheduled_executor_service
    assert executor.due_time(SLAVE_SYNC_TASK_NAME) == first
    assert master.require_controller().scheduled_executor_service.due_time(SLAVE_SYNC_TASK_NAME) is None
    clock.advance_to(first)
    executor.run_due(SLAVE_SYNC_TASK_NAME)
    assert executor.due_time(SLAVE_SYNC_TASK_NAME) == first + period


def test_pulls_and_commits_go_to_the_slave_with_the_flag_cleared_while_the_master_is_down(tmp_path: Path) -> None:
    """R2.5, R5.3: with the master down, the driver's name server drops it; the client's pull and oneway
    commit go on its connection to the slave, and ``pullKernelImpl`` clears FLAG_COMMIT_OFFSET (the memory
    offset still rides in the header)."""
    config = Config(consumers=1, queues=1, messages_per_queue=2, slave=True)
    system = ReferenceSystem(config, tmp_path)
    for action in (act.Start(0), act.Rebalance(0), act.Produce(0, "A"), act.SendPull(0, 0), act.BrokerReceive(0)):
        system.apply(action)
    process = system.processes[0]
    assert process is not None
    system.apply(act.ReceivePull(0, system.abstract()[2][0].pulls[0].pq_uid))
    process.consumer.offset_store.update_offset(system.mqs[0], 1, False)
    system.apply(act.BrokerCrash())
    system.apply(act.SendPull(0, 0))
    slave_wire = system.slave_connections[0].outbound
    assert len(slave_wire) == 1 and not system.connections[0].outbound
    header = slave_wire[0].header
    assert isinstance(header, PullMessageRequestHeader)
    assert not PullSysFlag.has_commit_offset_flag(header.sys_flag) and header.commit_offset == 1
    process.consumer.offset_store.persist(system.mqs[0])
    assert [r.code for r in slave_wire] == [RequestCode.PULL_MESSAGE, RequestCode.UPDATE_CONSUMER_OFFSET]
    channel = system.abstract()[2][0].channel
    assert [type(r).__name__ for r in channel] == ["PullRequestMsg", "Commit"] and all(r.to_slave for r in channel)
