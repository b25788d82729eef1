"""The allocation strategy objects of the reference's consumers, built from a model ``Config`` as a user would
configure them (R11.1-R11.6), and the table ``MachineRoomResolver`` that MACHINE_ROOM_NEARBY is given.

The driver (``reference_system.ReferenceSystem``) builds each consumer's strategy here when it starts it; the
allocation tests use the resolver on its own. It constructs ``rmqspec.reference.allocate`` objects from the
configuration and touches nothing else.
"""

from __future__ import annotations

from rmqspec.reference.allocate import (
    AllocateMachineRoomNearby,
    AllocateMessageQueueAveragely,
    AllocateMessageQueueAveragelyByCircle,
    AllocateMessageQueueByConfig,
    AllocateMessageQueueByMachineRoom,
    AllocateMessageQueueConsistentHash,
    AllocateMessageQueueStrategy,
)
from rmqspec.reference.message_queue import MessageQueue
from rmqspec.spec.allocation import client_id
from rmqspec.spec.config import Config


class TableMachineRoomResolver:
    """A ``MachineRoomResolver`` by table: the broker's room and each consumer's room (R11.6)."""

    def __init__(self, broker_rooms: dict[str, str], consumer_rooms: dict[str, str]) -> None:
        self.broker_rooms = broker_rooms
        self.consumer_rooms = consumer_rooms

    def broker_deploy_in(self, message_queue: MessageQueue) -> str | None:
        return self.broker_rooms.get(message_queue.broker_name)

    def consumer_deploy_in(self, client_id: str) -> str | None:
        return self.consumer_rooms.get(client_id)


def allocation_strategy(config: Config, client: int, mqs: list[MessageQueue]) -> AllocateMessageQueueStrategy:
    """The strategy object consumer ``client`` is built with, as a user would configure it: CONFIG
    with that consumer's own queue list (``mqs`` by queue index), MACHINE_ROOM with the group's
    ``consumeridcs`` (unset when None), MACHINE_ROOM_NEARBY wrapping its inner strategy with a table
    resolver of ``broker_room`` and ``consumer_rooms`` (R11.1-R11.6)."""

    def plain(name: str) -> AllocateMessageQueueStrategy:
        if name == "CONFIG":
            lists = config.allocate_config_queues
            return AllocateMessageQueueByConfig(None if lists is None else [mqs[q] for q in lists[client]])
        if name == "MACHINE_ROOM":
            return AllocateMessageQueueByMachineRoom(config.consumeridcs)
        if name == "CONSISTENT_HASH":
            return AllocateMessageQueueConsistentHash(config.virtual_node_cnt)
        if name == "AVG_BY_CIRCLE":
            return AllocateMessageQueueAveragelyByCircle()
        return AllocateMessageQueueAveragely()

    if config.strategy != "MACHINE_ROOM_NEARBY":
        return plain(config.strategy)
    assert config.nearby_inner is not None and config.broker_room is not None and config.consumer_rooms is not None
    resolver = TableMachineRoomResolver(
        {config.broker_name: config.broker_room},
        {client_id(i): room for i, room in enumerate(config.consumer_rooms)},
    )
    return AllocateMachineRoomNearby(plain(config.nearby_inner), resolver)
