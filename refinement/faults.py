"""Fault injectors of the refinement check: callables the driver (``reference_system.ReferenceSystem``) sets on
the reference's hooks for the length of one action, and clears again.

``SendBackFaults`` and ``ForwardFaults`` go on ``RemotingClient.fault_injector`` (a client's sends fail as if the
network had dropped them); ``QueryOffsetFault`` on ``BrokerHost.fault_injector`` (the broker's processor fails);
``ConsumerListWithout`` on ``BrokerHost.consumer_list_filter`` (the consumer list the broker answers). Each reads
the request or the list it is handed and answers whether to fail it, or the list to answer; it keeps only its own
plan and touches no object of the reference or the model.
"""

from __future__ import annotations

from rmqspec.reference.message_queue import MessageQueue
from rmqspec.reference.protocol import QueryConsumerOffsetRequestHeader, RemotingCommand, RequestCode


class SendBackFaults:
    """A fault injector for the remoting client: the planned CONSUMER_SEND_MSG_BACK calls fail, and so
    does the producer fall-back that follows a failed one (the broker is unreachable for that message)."""

    def __init__(self, plan: list[bool]) -> None:
        self.plan = list(plan)
        self.fail_fallback = False

    def __call__(self, request: RemotingCommand) -> bool:
        if request.code == RequestCode.CONSUMER_SEND_MSG_BACK:
            fail = self.plan.pop(0) if self.plan else False
            self.fail_fallback = fail
            return fail
        if request.code == RequestCode.SEND_MESSAGE and self.fail_fallback:
            self.fail_fallback = False
            return True
        return False


class ForwardFaults:
    """Orderly consume loop: a fault injector for the remoting client: the planned SEND_MESSAGE calls (the
    forwarding sends of messages at maxReconsumeTimes, R8.7) fail, in order."""

    def __init__(self, plan: list[bool]) -> None:
        self.plan = list(plan)

    def __call__(self, request: RemotingCommand) -> bool:
        if request.code == RequestCode.SEND_MESSAGE:
            return self.plan.pop(0) if self.plan else False
        return False


class QueryOffsetFault:
    """A fault injector for the broker: the first QUERY_CONSUMER_OFFSET of ``group`` for ``mq`` makes
    the processor fail (the broker answers SYSTEM_ERROR); later requests pass."""

    def __init__(self, group: str, mq: MessageQueue) -> None:
        self.group = group
        self.mq = mq
        self.struck = False

    def __call__(self, request: RemotingCommand) -> bool:
        h = request.header
        if (
            self.struck
            or request.code != RequestCode.QUERY_CONSUMER_OFFSET
            or not isinstance(h, QueryConsumerOffsetRequestHeader)
        ):
            return False
        self.struck = (h.consumer_group, h.topic, h.queue_id) == (self.group, self.mq.topic, self.mq.queue_id)
        return self.struck


class ConsumerListWithout:
    """A consumer-list filter for the broker (``BrokerHost.consumer_list_filter``): ``group``'s list without
    any occurrence of ``client_id``, as a broker answers that this client's heartbeat has not reached yet
    (S7, R9.3; the ``RebalanceWithoutSelf`` fault). Other groups' lists pass unchanged."""

    def __init__(self, group: str, client_id: str) -> None:
        self.group = group
        self.client_id = client_id

    def __call__(self, group: str, client_ids: list[str]) -> list[str]:
        if group != self.group:
            return client_ids
        return [cid for cid in client_ids if cid != self.client_id]
