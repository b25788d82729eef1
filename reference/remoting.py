"""The consumer's connection to the broker: a FIFO wire for oneway and async requests, direct sync calls.

Mirrors the parts of ``NettyRemotingClient`` / ``NettyRemotingAbstract`` that offset management
depends on:

- ``invoke_oneway`` (UPDATE_CONSUMER_OFFSET, R2.5/R2.6) and ``invoke_async`` (PULL_MESSAGE, R5.2) put
  the request on the connection's outbound FIFO; the broker reads it later (one request per step).
  A oneway request has no reply; an async one gets a :class:`ResponseFuture` whose callback runs
  when the reply is taken (the callback executor).
- ``invoke_sync`` (queries, send-back, heartbeat, ...) is answered at once, out of band of the FIFO.
- A request on the wire may be lost alone (``lose_oldest_request``): a lost oneway
  UPDATE_CONSUMER_OFFSET is never noticed (R2.5, R2.6); the next persist sends the offset again.
- When the broker process dies, the connection breaks: queued requests are lost silently (oneway
  loss, R2.5) and every reply not yet taken turns into a ``RemotingException``, so the pull callback
  sees an exception and retries after 3 s (R5.7).

:class:`ClientConnection` is the wire, owned by the network (it outlives a consumer process: requests
already sent still arrive after the client crashed). :class:`NettyRemotingClient` is the process's end
of it with its response table, lost with the process.

Slaves: a client has one connection per broker address (the master's and its slave's); a request names
the address it goes to. Every request put on a wire gets a global send sequence, so that the driver can
read a client's requests across its connections in the order they were sent (the model's one FIFO).
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from rmqspec.reference.protocol import RemotingCommand

NOT_YET_RECEIVED = -1  # request still on the wire
LOST_ON_THE_WIRE = -2  # the connection broke before the broker read it

# slaves: when each request went on a wire, across every connection (the abstraction merges a client's
# connections to the master and to its slave into the model's one FIFO, in send order)
_send_sequence = itertools.count(1)


class RemotingException(Exception):
    """``RemotingException``: the request could not be sent or its reply never came."""


class RemotingConnectException(RemotingException):
    """``RemotingConnectException``: no connection to the broker (it is down)."""


class RemotingSendRequestException(RemotingException):
    """``RemotingSendRequestException``: the connection broke while the request was in flight."""


class BrokerEndpoint(Protocol):
    """What the wire needs from the broker machine at the other end."""

    def is_up(self) -> bool: ...

    @property
    def incarnation(self) -> int: ...

    def process_sync(self, connection: ClientConnection, request: RemotingCommand) -> RemotingCommand: ...

    def wake_up_held_request(self, connection: ClientConnection, request: RemotingCommand) -> RemotingCommand: ...


class ClientRequestProcessor(Protocol):
    """The client's ``ClientRemotingProcessor``: requests the broker sends to the client."""

    def process_request(self, request: RemotingCommand) -> None: ...


class RPCHook(Protocol):
    """``RPCHook#doBeforeRequest``: sees (and may annotate) each request before it is sent."""

    def do_before_request(self, remote_addr: str, request: RemotingCommand) -> None: ...


@dataclass
class PendingReply:
    """The broker's side of an async request it has read: ``response`` is None while the broker holds
    the request (long polling, R5.4); ``incarnation`` is the broker process that accepted it."""

    incarnation: int
    request: RemotingCommand
    response: RemotingCommand | None


@dataclass(eq=False)
class ClientConnection:
    """One TCP connection between a consumer slot and the broker."""

    local_address: str
    broker: BrokerEndpoint
    remote_address: str = "broker-a:10911"
    outbound: deque[RemotingCommand] = field(default_factory=deque)
    replies: dict[int, PendingReply] = field(default_factory=dict)
    client_processor: ClientRequestProcessor | None = None
    # admin reset: oneway pushes from the broker not yet read by the client (R3.10a step 4)
    inbound: deque[RemotingCommand] = field(default_factory=deque)
    # slaves: the global send sequence of each request still on the wire, by opaque
    send_sequence: dict[int, int] = field(default_factory=dict)

    def send(self, request: RemotingCommand) -> None:
        """The request goes on the wire, stamped with the global send sequence."""
        self.send_sequence[request.opaque] = next(_send_sequence)
        self.outbound.append(request)

    def oldest_sequence(self) -> int | None:
        """The send sequence of the oldest request on the wire; None when the wire is empty."""
        return self.sequence_of(self.outbound[0]) if self.outbound else None

    def sequence_of(self, request: RemotingCommand) -> int:
        return self.send_sequence.get(request.opaque, 0)

    def is_active(self) -> bool:
        return self.broker.is_up()

    def break_connection(self) -> None:
        """The broker process died: what was still on the wire never arrives, either way."""
        self.outbound.clear()
        self.inbound.clear()
        self.send_sequence.clear()

    def close(self) -> None:
        """The broker closed this connection (its idle-channel scan, R4.3): requests still on the wire and
        replies the client has not taken are lost; the client's next request opens a new one."""
        self.outbound.clear()
        self.inbound.clear()
        self.replies.clear()
        self.send_sequence.clear()

    def read_request(self, position: int = 0) -> RemotingCommand:
        """The broker takes the oldest request, or the one ``position`` places behind it, to run it (the
        broker's request pools run one connection's requests in any order, docs/spec.md, "Thread boundaries"); raises
        ``IndexError`` when there is no such request."""
        request = self.outbound[position]
        del self.outbound[position]
        self.send_sequence.pop(request.opaque, None)
        return request

    def lose_oldest_request(self) -> RemotingCommand:
        """The network loses the oldest request on the wire: the broker never reads it, and the sender
        is not told (a oneway request has no reply to miss, R2.5). Raises ``IndexError`` when the wire
        is empty. Returns the lost request."""
        request = self.outbound.popleft()
        self.send_sequence.pop(request.opaque, None)
        return request

    def request_epoch(self, opaque: int) -> int:
        """Where request ``opaque`` is: on the wire, accepted by a broker incarnation, or lost."""
        if any(r.opaque == opaque for r in self.outbound):
            return NOT_YET_RECEIVED
        reply = self.replies.get(opaque)
        return LOST_ON_THE_WIRE if reply is None else reply.incarnation

    def take_reply(self, opaque: int) -> RemotingCommand:
        """The reply to ``opaque``; a held request is answered now. Raises if the connection broke."""
        reply = self.replies.pop(opaque, None)
        if reply is None:
            raise RemotingSendRequestException(f"request {opaque} was lost: the connection broke")
        if not self.broker.is_up() or reply.incarnation != self.broker.incarnation:
            raise RemotingException(f"connection to {self.remote_address} reset before the reply of {opaque}")
        if reply.response is None:
            return self.broker.wake_up_held_request(self, reply.request)
        return reply.response

    def notify_client(self, request: RemotingCommand) -> None:
        """A oneway request from the broker to the client process, if one is listening."""
        if self.client_processor is not None:
            self.client_processor.process_request(request)

    def push_to_client(self, request: RemotingCommand) -> None:
        """Admin reset: a oneway request from the broker that travels: it waits on the
        wire until the client reads it (``read_push``), and is lost if nobody listens or the
        connection breaks (R3.10a step 4, ``invokeOneway``)."""
        if self.client_processor is not None:
            self.inbound.append(request)

    def read_push(self) -> None:
        """The client's remoting thread reads the oldest push and hands it to its processor."""
        request = self.inbound.popleft()
        if self.client_processor is not None:
            self.client_processor.process_request(request)

    def drop_client(self) -> None:
        """The client process ended: nobody listens, and what was on its way in is lost."""
        self.client_processor = None
        self.inbound.clear()


@dataclass(eq=False)
class ResponseFuture:
    """``ResponseFuture`` of an async request; ``invoke_callback`` runs when the reply is taken."""

    opaque: int
    request: RemotingCommand
    invoke_callback: Callable[[ResponseFuture], None]
    response_command: RemotingCommand | None = None
    cause: Exception | None = None
    connection: ClientConnection | None = None  # the channel the request went on (slaves: master or slave)


class NettyRemotingClient:
    """A process's remoting client over its :class:`ClientConnection` (the master's) and, with a slave,
    one more connection per broker address (``channelTables`` by address). A request goes to the
    connection of the address it names; no address means the first connection (callers that predate
    slaves). An address without a connection cannot be reached (``RemotingConnectException``).

    ``fault_injector`` lets a test make a request fail as if the network had dropped it: it is asked
    about every sync request and raises ``RemotingSendRequestException`` when it returns True.
    """

    def __init__(self, connection: ClientConnection, others: list[ClientConnection] | None = None) -> None:
        self.connection = connection
        self.channel_tables: dict[str, ClientConnection] = {connection.remote_address: connection}
        for other in others or []:
            self.channel_tables[other.remote_address] = other
        self.response_table: dict[int, ResponseFuture] = {}
        self.rpc_hooks: list[RPCHook] = []
        self.fault_injector: Callable[[RemotingCommand], bool] | None = None

    def register_rpc_hook(self, hook: RPCHook) -> None:
        self.rpc_hooks.append(hook)

    def connections(self) -> list[ClientConnection]:
        return list(self.channel_tables.values())

    def _channel(self, addr: str | None) -> ClientConnection:
        if addr is None:
            return self.connection
        channel = self.channel_tables.get(addr)
        if channel is None:
            raise RemotingConnectException(f"connect to {addr!r} failed: no such broker address")
        return channel

    def _before(self, channel: ClientConnection, request: RemotingCommand) -> None:
        if not channel.is_active():
            raise RemotingConnectException(f"connect to {channel.remote_address} failed")
        for hook in self.rpc_hooks:
            hook.do_before_request(channel.remote_address, request)

    def invoke_sync(self, request: RemotingCommand, addr: str | None = None) -> RemotingCommand:
        channel = self._channel(addr)
        self._before(channel, request)
        if self.fault_injector is not None and self.fault_injector(request):
            raise RemotingSendRequestException(f"send request {request.code} to {channel.remote_address}")
        return channel.broker.process_sync(channel, request)

    def invoke_oneway(self, request: RemotingCommand, addr: str | None = None) -> None:
        channel = self._channel(addr)
        self._before(channel, request)
        channel.send(request)

    def invoke_async(
        self, request: RemotingCommand, invoke_callback: Callable[[ResponseFuture], None], addr: str | None = None
    ) -> None:
        channel = self._channel(addr)
        self._before(channel, request)
        self.response_table[request.opaque] = ResponseFuture(
            request.opaque, request, invoke_callback, None, None, channel
        )
        channel.send(request)

    def connection_of(self, opaque: int) -> ClientConnection:
        """The connection the pending async request ``opaque`` went on."""
        channel = self.response_table[opaque].connection
        return channel if channel is not None else self.connection

    def process_response(self, opaque: int) -> None:
        """The reply of ``opaque`` arrives (or its failure is noticed); its callback runs now."""
        channel = self.connection_of(opaque)
        future = self.response_table.pop(opaque)
        try:
            future.response_command = channel.take_reply(opaque)
        except RemotingException as e:
            future.cause = e
        future.invoke_callback(future)

    def shutdown(self) -> None:
        """The process ends: pending futures are forgotten; the wires keep what was sent."""
        self.response_table.clear()
        for channel in self.channel_tables.values():
            if channel.client_processor is not None:
                channel.drop_client()
