"""``ReferenceSystem``: one broker (and its slave) and N push consumers of the reference, driven by the model's actions.

This is the driver and the abstraction function of the refinement check. ``apply(action)`` performs
one action of ``rmqspec.spec.actions`` by calling the RocketMQ-shaped classes (never the model's
rules); ``abstract()`` reads those objects (and the real offset files) back into the model's state
types. A lockstep test applies every action to both and compares. ``Config.version`` reaches the
broker and every client as an ``MQVersion``, which lists the switches of 5.x.

What it may touch: every class of ``rmqspec.reference`` (to call and to read) and the files under
``root_dir``; from ``rmqspec.spec`` the actions, the configuration, the state types and named constants,
never a rule. The fault injectors it sets for one action are in ``faults.py``, the consumers' allocation
strategies in ``allocation.py``.

How each action maps:

- ``Tick``: refuse if a timer is due (broker flush, a due scheduled message, a client's persist,
  heartbeat, cleanExpireMsg or rebalance wait); else move the virtual clock to the earliest future due time of any
  executor, delay queue or timer. Then every process that is not stalled runs the pull thread's
  flow-control retries of the interval (``PullMessageService.run_flow_control_retries``): each only
  set ``lastPullTimestamp`` and re-queued itself 50 ms later, folded into one refresh at the new time.
- ``Produce``, ``CoolQueueHead``: a producer's SEND_MESSAGE; the page cache dropping message 0.
- ``BrokerFlush``: the controller's flush task (``ConsumerOffsetManager.persist``, R3.6).
  ``DeliverScheduled``: ``ScheduleMessageService.deliver_due_message``. ``BrokerCrash`` /
  ``BrokerRestart``: ``BrokerHost.crash`` / ``start`` (load from the real ``consumerOffset.json``).
  ``ExpireChannel``: ``ConsumerManager.do_channel_close_event``. ``BrokerReceive``: the broker reads
  the oldest request on that client's connection (``overtakes`` 1: the one behind it, which its request
  pools run first; docs/spec.md, "Thread boundaries").
- ``Start``: a new ``MQClientInstance`` + ``DefaultMQPushConsumerImpl``, ``start()``. ``Shutdown``:
  ``shutdown()``. ``Crash``: the process objects are dropped; its local offset file, its id sequence
  and its connection (with requests already sent) stay.
- ``Heartbeat`` / ``PersistOffsets``: the instance's scheduled task. ``CleanExpiredMsg``: the concurrent
  consume service's cleanExpireMsg task on its own executor (R6.8); ``Tick`` counts it among the timers.
  ``Rebalance``:
  ``RebalanceService.run_once``; ``RebalanceQueryError`` the same with the broker's processor failing
  that queue's QUERY_CONSUMER_OFFSET once (``QueryOffsetFault``: the answer is SYSTEM_ERROR).
  ``SendPull``: the pull thread takes that queue's PullRequest.
  ``ReceivePull``: the reply of that pq's pull is taken and its callback runs.
- ``StartConsume``: a pool thread takes that ConsumeRequest and runs up to the listener.
  ``FinishConsume``: the listener returns (status, ackIndex); the injected send-back faults make the
  chosen CONSUMER_SEND_MSG_BACK calls and their producer fall-backs fail; the thread runs up to
  ``removeMessage``. ``ApplyConsumeOffset``: the thread runs the dropped check and ``updateOffset``.
- Orderly consume loop (``Config.orderly``, R8.5-R8.8): ``StartConsume``: a pool thread of
  ``ConsumeMessageOrderlyService`` takes that request (it names a pq only) and runs ``ConsumeRequest.run``
  up to the listener (or to the end of the run). ``FinishConsume``: the listener returns SUCCESS or
  SUSPEND_CURRENT_QUEUE_A_MOMENT; the injected faults make the chosen forwarding sends of the messages
  at maxReconsumeTimes fail; the thread runs up to ``updateOffset`` (or the end of the run).
  ``ApplyConsumeOffset``: the dropped check, ``updateOffset(increaseOnly=false)`` and the loop's next
  iteration. ``TryLockLater``: the earliest due ``tryLockLaterAndReconsume`` task of that pq.
  ``DelayedUnlock``: the earliest due 4.9.8 ``unlockDelay`` task of that queue. ``Stall``: the client's
  JVM stops until ``now + duration``: the driver runs none of its actions but ``Crash``, and the clock
  may pass its timers; ``ExpireChannel`` then may close its channel once the broker's
  ``lastUpdateTimestamp`` of it (its last HEART_BEAT: the periodic one, start's, messageQueueChanged's)
  is more than 120 s old. Its effect is ``ConsumerManager.scanNotActiveChannel``'s: the channel is
  removed without notifying the others, and the connection is closed (requests on the wire and
  replies not yet taken are lost).
- Faults: ``LoseCommit``: the network loses the oldest request on that client's connection, which must
  be a oneway UPDATE_CONSUMER_OFFSET (R2.5, R2.6: nobody notices; the next persist sends the memory
  offset again). ``RebalanceWithoutSelf``: ``RebalanceService.run_once`` while the broker's
  GET_CONSUMER_LIST_BY_GROUP answers, for the topic and the retry topic alike, list the group without
  every occurrence of that client's clientId (``ConsumerListWithout`` as
  ``BrokerHost.consumer_list_filter``: its heartbeat had not reached the broker it asked, S7, R9.3);
  with its own id missing every strategy but CONFIG allocates it nothing (R11.0). An emptied list is
  the processor's "no consumer for this group" (SYSTEM_ERROR), so the topic is left alone, as the
  model's throwing allocation over an empty list leaves it. ``Config.duplicate_client_id``: client 1's
  ``MQClientInstance`` gets ``client_id(0)`` (IP@pid collided, RMQ-11); the broker keys the group's
  channels by connection, so the list names that id twice, allocation takes its first position
  (``indexOf``), and the lock table and unlockBatch, keyed by clientId, treat both as one holder.
- Admin reset (R3.10a/R3.10b): ``AdminReset``: mqadmin's INVOKE_BROKER_TO_RESET_OFFSET
  for one queue, forced, by offset or by timestamp (``AdminBrokerProcessor.reset_offset``); on
  CONSUMER_NOT_ONLINE (4.9.8) the admin's old method, UPDATE_CONSUMER_OFFSET straight to the broker.
  ``ClientResetReceive``: the client reads the oldest RESET_CONSUMER_CLIENT_OFFSET on its connection
  (``MQClientInstance.reset_offset``: suspend, drop, sleep). ``ClientResetWake``: the sleep's task runs.

- Slaves (``Config.slave``, R2.4, R2.5, R3.4, R3.8, R5.3-R5.5, R9.3): a second ``BrokerHost`` with
  ``BrokerRole.SLAVE`` (brokerId 1, ``offsetCheckInSlave`` from the config), its own ConsumerOffsetManager
  and store copy, started with the master (the backlog already copied); each client has a second
  ``ClientConnection`` to it, which the network keeps like the master's. The name server's brokerAddrs
  table is shared by every route: ``BrokerCrash`` drops the master from it, ``BrokerRestart`` puts it back,
  so the clients' lookups (``findBrokerAddressInSubscribe`` falling back to the slave, ``selectBrokerAddr``)
  see the death at once. ``SlaveReplicate(q)``: HA copies the master's queue q into the slave's store;
  ``SlaveSync``: the slave's SlaveSynchronize task runs. ``BrokerReceive(i)`` reads the request client i sent
  first across its two connections (the global send sequence of ``ClientConnection.send``); ``LoseCommit``
  loses that one. ``ExpireChannel`` of a gone client closes its channel on every broker that is up.
  ``abstract_slave()`` gives ``State.slave``.

Representation choices of the abstraction (where the model records something RocketMQ does not):
with a duplicate clientId (RMQ-11) a lock holder and each entry of a ``view`` are the lowest client index
with that clientId (``cids.index``), while ``Broker.registered`` stays per connection.
``Commit.cause`` / ``pq_uid`` and a pull's ``pq_uid`` are stamped by an ``RPCHook``; a sent-back
message's ``sent_back_at`` is a trace property (its store time and reconsumeTimes are the stored
message's own, R7.5 step 7). A pull's ``result`` is the broker's answer as the client will map it
(R5.5, R5.7): None while the request is on the wire, lost, or held (PULL_NOT_FOUND, long polling);
SUCCESS gives FOUND with the offsets in the body, PULL_RETRY_IMMEDIATELY NO_MATCHED_MSG,
PULL_OFFSET_MOVED OFFSET_ILLEGAL, any other code (e.g. SUBSCRIPTION_NOT_EXIST) an error at the
requested offset. Slaves: a request's ``to_slave`` and a pull's ``from_slave`` say which connection it went
on; the slave's ``flushed`` is the model's constant no-offset table and its ``next_flush`` None (the slave
never restarts, so its own file, which ``syncConsumerOffset`` persists, is never read).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import ClassVar, NamedTuple, TypeVar, cast

from rmqspec.reference.broker import (
    FLUSH_TASK_NAME,
    SLAVE_SYNC_TASK_NAME,
    BrokerController,
    BrokerHost,
    BrokerRole,
    DefaultMessageStore,
)
from rmqspec.reference.compat import SpecCompat
from rmqspec.reference.consume_message_concurrently_service import (
    CLEAN_EXPIRE_MSG_TASK_NAME,
    ConsumeConcurrentlyStatus,
    ConsumeMessageConcurrentlyService,
    ConsumeRequest,
    ConsumeRequestState,
    ListenerAnswer,
)
from rmqspec.reference.consume_message_orderly_service import (
    ConsumeMessageOrderlyService,
    ConsumeOrderlyStatus,
    OrderlyConsumeExecutor,
    OrderlyListenerAnswer,
    TryLockLaterTask,
)
from rmqspec.reference.consume_message_orderly_service import (
    ConsumeRequest as OrderlyConsumeRequest,
)
from rmqspec.reference.consumer_offset_manager import ConsumerOffsetManager
from rmqspec.reference.default_mq_push_consumer_impl import (
    DefaultMQPushConsumer,
    DefaultMQPushConsumerImpl,
    FixOffsetTask,
    PullRequest,
)
from rmqspec.reference.fastjson_format import read_client_offset_file
from rmqspec.reference.local_file_offset_store import LocalFileOffsetStore
from rmqspec.reference.message import (
    PROPERTY_CONSUME_START_TIMESTAMP,
    PROPERTY_ORIGIN_MESSAGE_ID,
    TRACE_SENT_BACK_AT,
    MessageExt,
    decode_message_id,
)
from rmqspec.reference.message_queue import MessageQueue, dlq_topic, retry_topic
from rmqspec.reference.mq_client_instance import (
    HEARTBEAT_TASK_NAME,
    LOCK_MQ_TASK_NAME,
    MASTER_ID,
    PERSIST_TASK_NAME,
    MQClientInstance,
    PullInvokeCallback,
    ResetOffsetTask,  # admin reset
    TopicRouteData,
)
from rmqspec.reference.mq_version import MQVersion
from rmqspec.reference.process_queue import ProcessQueue
from rmqspec.reference.protocol import (
    PullMessageRequestHeader,
    PullMessageResponseBody,
    PullMessageResponseHeader,
    PullSysFlag,
    RemotingCommand,
    RequestCode,
    ResetOffsetBody,
    ResetOffsetRequestHeader,
    ResponseCode,
    SearchOffsetRequestHeader,
    UpdateConsumerOffsetRequestHeader,
)
from rmqspec.reference.rebalance_impl import UnlockDelayTask
from rmqspec.reference.remoting import ClientConnection
from rmqspec.reference.scheduler import IdSequence, VirtualClock
from rmqspec.refinement.allocation import allocation_strategy
from rmqspec.refinement.faults import ConsumerListWithout, ForwardFaults, QueryOffsetFault, SendBackFaults
from rmqspec.spec import actions as act
from rmqspec.spec import broker_rules as br
from rmqspec.spec.allocation import client_id
from rmqspec.spec.config import BROADCASTING, CLUSTERING, Config
from rmqspec.spec.state import (
    PULL_DROPPED,
    PULL_IN_FLIGHT,
    PULL_READY,
    Broker,
    BrokerQueue,
    Client,
    Commit,
    Message,
    OffsetFix,
    OffsetUpdate,
    PullInFlight,
    PullRequestMsg,
    Scheduled,
)
from rmqspec.spec.state import (
    ConsumeRequest as SpecConsumeRequest,
)
from rmqspec.spec.state import (
    ProcessQueue as SpecProcessQueue,
)
from rmqspec.spec.state import (
    PullResult as SpecPullResult,
)

PQ_UID_FIELD = "rmqspecPqUid"
CAUSE_FIELD = "rmqspecCause"
BROKER_ADDR = "broker-a:10911"
SLAVE_ADDR = "broker-a-s:10911"  # slaves: the slave's address (brokerId 1)
SLAVE_STORE_HOST = "10.0.0.101:10911"
SLAVE_ID = 1
ADMIN_ADDR = "10.0.0.200:60000"  # admin reset: the mqadmin tool's connection
CHANNEL_EXPIRED_TIMEOUT = 120_000  # ConsumerManager's channel expiry (orderly consume loop: a stalled client)


T = TypeVar("T")


class _UnlockFuture(NamedTuple):
    """A pending 4.9.8 ``unlockDelay`` task of a client instance's scheduler."""

    name: str
    due: int
    task: UnlockDelayTask


class ReferenceActionError(RuntimeError):
    """The driver was asked for an action the reference cannot perform in its current state."""


class UnsupportedConfigError(ValueError):
    """The configuration asks for something the reference does not implement (e.g. mutations)."""


def message_body(queue_offset: int) -> bytes:
    """The body the producer sends: 16 + 8 * (offset mod 4) bytes, the lengths the model assumes."""
    return bytes(16 + (queue_offset % 4) * 8)


class ProvenanceHook:
    """An ``RPCHook`` that stamps each commit and pull with the ProcessQueue it was sent for and the
    task that sent it, for the abstraction (RocketMQ has no such fields)."""

    def __init__(self, system: ReferenceSystem, index: int) -> None:
        self.system = system
        self.index = index

    def do_before_request(self, remote_addr: str, request: RemotingCommand) -> None:
        header = request.header
        if not isinstance(header, UpdateConsumerOffsetRequestHeader | PullMessageRequestHeader):
            return
        process = self.system.processes[self.index]
        assert process is not None
        mq = MessageQueue(header.topic, self.system.config.broker_name, header.queue_id)
        pq = process.consumer.rebalance_impl.process_queue_table.get(mq)
        request.ext_fields[PQ_UID_FIELD] = str(pq.uid if pq is not None else -1)
        if isinstance(header, UpdateConsumerOffsetRequestHeader):
            request.ext_fields[CAUSE_FIELD] = self.system.current_cause or "unknown"


class ClientProcess:
    """One running consumer process. ``stalled_until`` (orderly consume loop, ``Stall``): the JVM is
    stopped until then; nothing of the process runs and its timers wait."""

    def __init__(self, instance: MQClientInstance, consumer: DefaultMQPushConsumerImpl) -> None:
        self.instance = instance
        self.consumer = consumer
        self.stalled_until: int | None = None
        self.dead_tasks: list[str] = []  # faults (TaskDies): background tasks an Error killed

    def stalled(self, now: int) -> bool:
        return self.stalled_until is not None and now < self.stalled_until


class FileReadings:
    """What the abstraction function reads from the reference's files, derived once per distinct content.

    Each step's abstraction reads every offset file back (the persisted state is part of the model's), and
    parsing them was most of a lockstep step's cost. A reading is a pure function of the bytes of the files it
    names (present or missing), so :meth:`derive` reads those bytes on every call, as the reference's own loaders
    would, and runs the derivation (the loader itself, with its fallbacks) only for content it has not seen. The
    derived value must be immutable; a derivation that raises is not remembered.
    """

    LIMIT: ClassVar[int] = 4096  # distinct contents kept; a run of a few hundred steps writes far fewer

    def __init__(self) -> None:
        self._memo: dict[tuple[object, ...], object] = {}

    def derive(self, what: str, paths: tuple[Path, ...], derivation: Callable[[], T]) -> T:
        """``derivation()``, which reads only ``paths``, for their current content."""
        key = (what, *(_content(p) for p in paths))
        if key in self._memo:
            return cast(T, self._memo[key])
        value = derivation()
        if len(self._memo) >= self.LIMIT:
            self._memo.clear()
        self._memo[key] = value
        return value


def _content(path: Path) -> bytes | str | None:
    """The file's bytes; None when it is missing; the error's name when it cannot be read."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        return type(e).__name__


class ReferenceSystem:
    def __init__(self, config: Config, root_dir: Path, compat: SpecCompat | None = None) -> None:
        if config.mutations:
            raise UnsupportedConfigError(
                f"planted bugs are model-only; the reference implements RocketMQ: {sorted(config.mutations)}"
            )
        self.config = config
        self.version = MQVersion(config.version)  # the broker's and every client's release line
        self.compat = compat if compat is not None else SpecCompat()
        self.root_dir = Path(root_dir)
        self.clock = VirtualClock(0)
        self.clustering = config.mode == CLUSTERING
        c = config
        self.topic_mqs = [MessageQueue(c.topic, c.broker_name, q) for q in range(c.queues)]
        self.retry_mq = MessageQueue(retry_topic(c.group), c.broker_name, 0) if self.clustering else None
        self.mqs = self.topic_mqs + ([self.retry_mq] if self.retry_mq is not None else [])
        self.index_of = {mq: k for k, mq in enumerate(self.mqs)}
        # faults (RMQ-11): with duplicate_client_id, consumer 1's IP@pid collides with consumer 0's
        self.cids = [client_id(0 if i == 1 and c.duplicate_client_id else i) for i in range(c.consumers)]
        # slaves: the name server's brokerAddrs of the broker name, shared by every route (and so by every
        # client's brokerAddrTable); the driver drops the master while it is down. None without a slave.
        self.broker_addrs: dict[int, str] | None = {MASTER_ID: BROKER_ADDR, SLAVE_ID: SLAVE_ADDR} if c.slave else None
        self.route = {c.topic: TopicRouteData(c.broker_name, BROKER_ADDR, c.queues, self.broker_addrs)}
        if self.clustering:
            self.route[retry_topic(c.group)] = TopicRouteData(c.broker_name, BROKER_ADDR, 1, self.broker_addrs)
        self.broker_dir = self.root_dir / "broker"
        self.offsets_dir = self.root_dir / "offsets"
        self.host = BrokerHost(
            self.clock,
            self.broker_dir,
            c.broker_name,
            {c.topic: c.queues, retry_topic(c.group): 1},
            self.compat,
            version=self.version,
        )
        self.host.start()
        for q in range(c.queues):
            for o in range(c.backlog):
                self.host.produce(c.topic, q, c.tags[o % len(c.tags)], message_body(o))
            if c.backlog and not c.backlog_head_hot:
                self.host.message_store.evict_from_page_cache(c.topic, q)
        self.connections: list[ClientConnection] = [
            self.host.connect(f"10.0.0.{i + 1}:{50000 + i}") for i in range(c.consumers)
        ]
        self.connection_index = {conn: i for i, conn in enumerate(self.connections)}
        # slaves: the slave (brokerId 1), started with the master, the backlog already replicated
        self.slave_host: BrokerHost | None = None
        self.slave_connections: list[ClientConnection] = []
        if c.slave:
            self.slave_host = BrokerHost(
                self.clock,
                self.root_dir / "slave",
                c.broker_name,
                {c.topic: c.queues, retry_topic(c.group): 1},
                self.compat,
                store_host=SLAVE_STORE_HOST,
                version=self.version,
                broker_addr=SLAVE_ADDR,
                broker_role=BrokerRole.SLAVE,
                offset_check_in_slave=c.offset_check_in_slave,
                master=self.host,
            )
            self.slave_host.start()
            for mq in self.mqs:
                self.slave_host.replicate_queue(mq.topic, mq.queue_id)
            self.slave_connections = [
                self.slave_host.connect(f"10.0.0.{i + 1}:{51000 + i}") for i in range(c.consumers)
            ]
            self.connection_index.update({conn: i for i, conn in enumerate(self.slave_connections)})
        self.admin_connection = self.host.connect(ADMIN_ADDR)  # admin reset
        self.ids = [IdSequence() for _ in range(c.consumers)]
        self.processes: list[ClientProcess | None] = [None] * c.consumers
        self.readings = FileReadings()  # the abstraction's file reads, derived once per content
        self.broker_offset_file = ConsumerOffsetManager(self.broker_dir).config_file_path()
        self.local_file_readers = [LocalFileOffsetStore(cid, c.group, self.offsets_dir) for cid in self.cids]
        # per client: orderly listeners that outlived its shutdown, with the pool that still runs them (docs/spec.md,
        # "What is real, ranked")
        self.orphans: list[list[tuple[OrderlyConsumeExecutor, OrderlyConsumeRequest]]] = [
            [] for _ in range(c.consumers)
        ]
        # per client: the BROADCASTING store whose lagging persistAll has merged and not yet written (docs/spec.md,
        # "What is real, ranked")
        self.lagging_writes: list[LocalFileOffsetStore | None] = [None] * c.consumers
        self.current_cause: str | None = None
        self._handlers: dict[type, Callable[[act.Action], None]] = {
            act.Tick: lambda a: self._tick(),
            act.Produce: self._produce,  # type: ignore[dict-item]
            act.CoolQueueHead: self._cool_queue_head,  # type: ignore[dict-item]
            act.BrokerFlush: lambda a: self._controller().scheduled_executor_service.run_due(FLUSH_TASK_NAME),
            act.DeliverScheduled: lambda a: self._deliver_scheduled(),
            act.BrokerCrash: lambda a: self._broker_crash(),
            act.BrokerRestart: lambda a: self._broker_restart(),
            act.SlaveReplicate: self._slave_replicate,  # type: ignore[dict-item]  # slaves
            act.SlaveSync: lambda a: self._slave_sync(),  # slaves
            act.ExpireChannel: self._expire_channel,  # type: ignore[dict-item]
            act.BrokerReceive: self._broker_receive,  # type: ignore[dict-item]
            act.LoseCommit: self._lose_commit,  # type: ignore[dict-item]  # faults
            act.Start: self._start,  # type: ignore[dict-item]
            act.Shutdown: self._shutdown,  # type: ignore[dict-item]
            act.OrphanReturns: self._orphan_returns,  # type: ignore[dict-item]
            act.Crash: self._crash,  # type: ignore[dict-item]
            act.Heartbeat: self._heartbeat,  # type: ignore[dict-item]
            act.PersistOffsets: self._persist_offsets,  # type: ignore[dict-item]
            act.OffsetFileWriteLands: self._offset_file_write_lands,  # type: ignore[dict-item]
            act.CleanExpiredMsg: self._clean_expired_msg,  # type: ignore[dict-item]
            act.Rebalance: self._rebalance,  # type: ignore[dict-item]
            act.RebalanceQueryError: self._rebalance_query_error,  # type: ignore[dict-item]
            act.RebalanceWithoutSelf: self._rebalance_without_self,  # type: ignore[dict-item]  # faults
            act.SendPull: self._send_pull,  # type: ignore[dict-item]
            act.ReceivePull: self._receive_pull,  # type: ignore[dict-item]
            act.StartConsume: self._start_consume,  # type: ignore[dict-item]
            act.FinishConsume: self._finish_consume,  # type: ignore[dict-item]
            act.ApplyConsumeOffset: self._apply_consume_offset,  # type: ignore[dict-item]
            act.LockAll: self._lock_all,  # type: ignore[dict-item]  # orderly
            act.TryLockLater: self._try_lock_later,  # type: ignore[dict-item]  # orderly consume loop
            act.DelayedUnlock: self._delayed_unlock,  # type: ignore[dict-item]
            act.Stall: self._stall,  # type: ignore[dict-item]
            act.TaskDies: self._task_dies,  # type: ignore[dict-item]  # faults
            act.CorruptOffsetFile: self._corrupt_offset_file,  # type: ignore[dict-item]  # faults
            act.CorruptLocalOffsetFile: self._corrupt_local_offset_file,  # type: ignore[dict-item]  # faults
            act.RetentionDelete: self._retention_delete,  # type: ignore[dict-item]  # retention
            act.FixOffsetIllegal: self._fix_offset_illegal,  # type: ignore[dict-item]  # OFFSET_ILLEGAL
            act.AdminReset: self._admin_reset,  # type: ignore[dict-item]  # admin reset
            act.ClientResetReceive: self._client_reset_receive,  # type: ignore[dict-item]
            act.ClientResetWake: self._client_reset_wake,  # type: ignore[dict-item]
        }

    # --- driver ---------------------------------------------------------------------------------------

    def apply(self, action: act.Action) -> None:
        handler = self._handlers.get(type(action))
        if handler is None:
            raise ReferenceActionError(f"not an action of the model: {action!r}")
        try:
            handler(action)
        except ReferenceActionError:
            raise
        except Exception as e:
            raise ReferenceActionError(f"{action!r} failed in the reference: {type(e).__name__}: {e}") from e
        finally:
            self.current_cause = None

    def close(self) -> None:
        """Release the process objects (files stay under ``root_dir`` for inspection)."""
        self.processes = [None] * len(self.processes)
        self.orphans = [[] for _ in self.processes]
        self.lagging_writes = [None] * len(self.processes)

    def _controller(self) -> BrokerController:
        if self.host.controller is None:
            raise ReferenceActionError("the broker is down")
        return self.host.controller

    def _slave_controller(self) -> BrokerController:
        if self.slave_host is None or self.slave_host.controller is None:
            raise ReferenceActionError("there is no slave")
        return self.slave_host.controller

    def _client_connections(self, i: int) -> list[ClientConnection]:
        """Client ``i``'s connections: to the master, and (slaves) to the slave."""
        return [self.connections[i], *self.slave_connections[i : i + 1]]

    def _oldest_on_wire(self, i: int) -> ClientConnection | None:
        """The connection of client ``i`` whose oldest request was sent first (the model's one FIFO)."""
        waiting = [(seq, conn) for conn in self._client_connections(i) if (seq := conn.oldest_sequence()) is not None]
        return min(waiting, key=lambda w: w[0])[1] if waiting else None

    def _host_of(self, connection: ClientConnection) -> BrokerHost:
        return self.slave_host if self.slave_host is not None and connection in self.slave_connections else self.host

    def _process(self, i: int, stalled_ok: bool = False) -> ClientProcess:
        process = self.processes[i]
        if process is None or process.consumer.service_state != "RUNNING":
            raise ReferenceActionError(f"client {i} is not running")
        if not stalled_ok and process.stalled(self.clock.now()):  # orderly consume loop: a stopped JVM
            raise ReferenceActionError(f"client {i} is stalled until {process.stalled_until}")
        return process

    def _mq(self, q: int) -> MessageQueue:
        if not 0 <= q < len(self.mqs):
            raise ReferenceActionError(f"no queue {q}")
        return self.mqs[q]

    # time
    def _timers(self) -> list[tuple[str, int]]:
        timers: list[tuple[str, int]] = []
        controller = self.host.controller
        if controller is not None:
            due = controller.scheduled_executor_service.due_time(FLUSH_TASK_NAME)
            if due is not None:
                timers.append(("broker flush", due))
            scheduled = self.host.message_store.schedule_message_service.next_deliver_timestamp()
            if scheduled is not None:
                timers.append(("scheduled message", scheduled))
        slave = None if self.slave_host is None else self.slave_host.controller
        if slave is not None:  # slaves: SlaveSynchronize's task (R3.8)
            due = slave.scheduled_executor_service.due_time(SLAVE_SYNC_TASK_NAME)
            if due is not None:
                timers.append(("slave sync", due))
        now = self.clock.now()
        for process in self.processes:
            if process is not None and not process.stalled(now):  # a stalled JVM's timers wait
                timers.extend(process.instance.timers())
        return timers

    def _tick(self) -> None:
        now = self.clock.now()
        due = [name for name, when in self._timers() if when <= now]
        if due:
            raise ReferenceActionError(f"Tick: timers are due and must fire first: {due}")
        times = [when for _, when in self._timers()]
        for process in self.processes:
            if process is not None and process.stalled(now):  # orderly consume loop: it wakes then
                assert process.stalled_until is not None
                times.append(process.stalled_until)
            elif process is not None:
                times.extend(process.instance.next_deadlines())
        later = [t for t in times if t > now]
        if not later:
            raise ReferenceActionError("Tick: nothing is scheduled")
        self.clock.advance_to(min(later))
        now = self.clock.now()
        for process in self.processes:  # the pull thread's flow-control retries meanwhile (R5.1)
            if process is not None and not process.stalled(now):
                process.instance.pull_message_service.run_flow_control_retries()

    # environment and broker
    def _produce(self, a: act.Produce) -> None:
        c = self.config
        if not 0 <= a.queue < c.queues or a.tag not in c.tags:
            raise ReferenceActionError(f"no such queue or tag: {a!r}")
        offset = self.host.message_store.get_max_offset_in_queue(c.topic, a.queue)
        self.host.produce(c.topic, a.queue, a.tag, message_body(offset))

    def _cool_queue_head(self, a: act.CoolQueueHead) -> None:
        self.host.message_store.evict_from_page_cache(self._mq(a.queue).topic, a.queue)

    def _deliver_scheduled(self) -> None:
        self._controller()
        self.host.message_store.schedule_message_service.deliver_due_message()

    def _broker_crash(self) -> None:
        """kill -9 of the master; with a slave the name server's route drops the master at once (slaves)."""
        self.host.crash()
        if self.broker_addrs is not None:
            self.broker_addrs.pop(MASTER_ID, None)

    def _broker_restart(self) -> None:
        if self.host.is_up():
            raise ReferenceActionError("the broker is up")
        self.host.start()
        if self.broker_addrs is not None:  # slaves: the master registers again
            self.broker_addrs[MASTER_ID] = BROKER_ADDR

    # slaves (R3.8, R5.5)
    def _slave_replicate(self, a: act.SlaveReplicate) -> None:
        """HA: the slave's copy of queue ``a.queue`` catches up with the master's commit log."""
        if self.slave_host is None or not self.host.is_up():
            raise ReferenceActionError("no slave, or the master is down")
        mq = self._mq(a.queue)
        self.slave_host.replicate_queue(mq.topic, mq.queue_id)

    def _slave_sync(self) -> None:
        """The slave's SlaveSynchronize task runs (``syncAll``; nothing while the master is down)."""
        self._slave_controller().scheduled_executor_service.run_due(SLAVE_SYNC_TASK_NAME)

    def _expire_channel(self, a: act.ExpireChannel) -> None:
        """The channel closes: the process is gone (TCP close), or (orderly consume loop) it is stalled
        and its last heartbeat is more than 120 s old (the broker's channel scan)."""
        process = self.processes[a.client]
        if process is None:  # every broker that is up and lists the channel closes it (slaves: both)
            closed = False
            for host, connection in zip((self.host, self.slave_host), self._client_connections(a.client), strict=False):
                controller = None if host is None else host.controller
                if controller is None:
                    continue
                info = controller.consumer_manager.get_consumer_group_info(self.config.group)
                closed |= info is not None and connection in info.channel_info_table
                controller.consumer_manager.do_channel_close_event(connection)
            if not closed:
                raise ReferenceActionError(f"no broker that is up lists client {a.client}'s channel")
            return
        controller = self._controller()
        if not self._channel_idle(controller, a.client, process):
            raise ReferenceActionError(f"client {a.client} is alive: its channel does not expire")
        controller.consumer_manager.expire_idle_channel(self.connections[a.client])

    def _channel_idle(self, controller: BrokerController, i: int, process: ClientProcess) -> bool:
        """A stalled client, or one whose heartbeat task died (TaskDies), whose channel's
        lastUpdateTimestamp is more than 120 s old (``ConsumerManager.scanNotActiveChannel``'s
        CHANNEL_EXPIRED_TIMEOUT)."""
        now = self.clock.now()
        if not process.stalled(now) and "sendHeartbeatToAllBroker" not in process.dead_tasks:
            return False
        info = controller.consumer_manager.get_consumer_group_info(self.config.group)
        if info is None:
            return False
        channel = info.channel_info_table.get(self.connections[i])
        return channel is not None and now - channel.last_update_timestamp > CHANNEL_EXPIRED_TIMEOUT

    def _broker_receive(self, a: act.BrokerReceive) -> None:
        """The broker at the other end reads the oldest request client ``a.client`` sent (slaves: the
        oldest across its connections to the master and to the slave). With ``overtakes`` the broker runs the
        request that many places behind the oldest, on the same connection, first: its request pools
        (``BrokerController.process_next_request``, docs/spec.md, "Thread boundaries")."""
        connection = self._oldest_on_wire(a.client)
        if connection is None:
            raise ReferenceActionError(f"nothing on client {a.client}'s wire")
        if a.overtakes:
            on_wire = sorted(
                (conn.sequence_of(r), k, conn)
                for k, conn in enumerate(self._client_connections(a.client))
                for r in conn.outbound
            )
            if not 0 < a.overtakes < len(on_wire) or any(c is not connection for _, _, c in on_wire[: a.overtakes + 1]):
                raise ReferenceActionError(
                    f"client {a.client} has no request {a.overtakes} places behind the oldest on the same connection"
                )
        host = self._host_of(connection)
        if host.controller is None:
            raise ReferenceActionError("the broker is down")
        host.controller.process_next_request(connection, a.overtakes)

    def _lose_commit(self, a: act.LoseCommit) -> None:
        """Faults: the oldest request on the client's connection, a oneway UPDATE_CONSUMER_OFFSET, is lost
        on the way (R2.5, R2.6). The client is not asked: it may be stalled, crashed or gone."""
        connection = self._oldest_on_wire(a.client)
        if connection is None or connection.outbound[0].code != RequestCode.UPDATE_CONSUMER_OFFSET:
            raise ReferenceActionError(f"the oldest request on client {a.client}'s wire is not a oneway commit")
        connection.lose_oldest_request()

    # consumer process
    def _start(self, a: act.Start) -> None:
        i = a.client
        if self.processes[i] is not None:
            raise ReferenceActionError(f"client {i} is already running")
        c = self.config
        instance = MQClientInstance(
            self.cids[i],
            self.clock,
            self.connections[i],
            dict(self.route),
            self.compat,
            self.version,
            self.slave_connections[i : i + 1],  # slaves
        )
        instance.remoting_client.register_rpc_hook(ProvenanceHook(self, i))
        strategy = allocation_strategy(c, i, self.mqs)
        settings = DefaultMQPushConsumer(
            consumer_group=c.group,
            allocate_message_queue_strategy=strategy,
            subscription={c.topic: "*" if c.subscription is None else " || ".join(c.subscription)},
            message_model=c.mode,
            consume_from_where=c.consume_from_where,
            consume_timestamp=c.consume_timestamp,
            pull_batch_size=c.pull_batch_size,
            consume_message_batch_max_size=c.consume_batch_size,
            pull_threshold_for_queue=c.pull_threshold_for_queue,
            max_reconsume_times=c.max_reconsume_times,
            consume_orderly=c.orderly,  # orderly
            consume_timeout=c.consume_timeout,  # R6.8
        )
        consumer = DefaultMQPushConsumerImpl(settings, instance, self.ids[i], self.offsets_dir)
        self.processes[i] = ClientProcess(instance, consumer)
        consumer.start()

    def _shutdown(self, a: act.Shutdown) -> None:
        process = self._process(a.client)
        self.current_cause = "shutdown"
        process.consumer.shutdown()
        service = process.consumer.consume_message_service
        if isinstance(service, ConsumeMessageOrderlyService):  # its listeners run on (R4.4 step 1, docs/spec.md, "What
            # is real, ranked")
            executor = service.consume_executor
            self.orphans[a.client].extend((executor, r) for r in executor.orphans)
        self.processes[a.client] = None

    def _orphan_returns(self, a: act.OrphanReturns) -> None:
        """The orderly listener ``a.rid`` that outlived client ``a.client``'s shutdown returns SUCCESS (what it
        answers changes nothing: its pq is dropped) and its thread runs to the end."""
        process = self.processes[a.client]
        if process is not None and process.stalled(self.clock.now()):
            raise ReferenceActionError(f"client {a.client} is stalled until {process.stalled_until}")
        found = [(k, e, r) for k, (e, r) in enumerate(self.orphans[a.client]) if r.rid == a.rid]
        if not found:
            raise ReferenceActionError(f"client {a.client} has no listener {a.rid} that outlived a shutdown")
        k, executor, request = found[0]
        del self.orphans[a.client][k]
        answer = OrderlyListenerAnswer(ConsumeOrderlyStatus.SUCCESS, self.config.orderly_auto_commit)
        executor.orphan_returns(request, answer)

    def _crash(self, a: act.Crash) -> None:
        self._process(a.client, stalled_ok=True)  # a stalled JVM can still be killed
        for connection in self._client_connections(a.client):  # nobody listens any more; pushes are lost
            connection.drop_client()
        self.processes[a.client] = None
        self.orphans[a.client] = []  # the JVM dies with the listeners that outlived an earlier shutdown
        self.lagging_writes[a.client] = None  # and with a persistAll that had not written yet

    def _heartbeat(self, a: act.Heartbeat) -> None:
        self._process(a.client).instance.scheduled_executor_service.run_due(HEARTBEAT_TASK_NAME)

    def _persist_offsets(self, a: act.PersistOffsets) -> None:
        """The persist timer's task. ``lagging`` 1: the BROADCASTING store's persistAll reads and merges now and
        writes at ``OffsetFileWriteLands`` (docs/spec.md, "What is real, ranked")."""
        process = self._process(a.client)
        self.current_cause = "persist-timer"
        store = process.consumer.offset_store
        if a.lagging:
            if not isinstance(store, LocalFileOffsetStore) or self.lagging_writes[a.client] is not None:
                raise ReferenceActionError("a lagging persistAll needs a local store with no write pending")
            store.lag_next_persist_all = True
        held = False
        try:
            process.instance.scheduled_executor_service.run_due(PERSIST_TASK_NAME)
        finally:
            if isinstance(store, LocalFileOffsetStore):
                held = bool(a.lagging) and not store.lag_next_persist_all  # persist_all took the request
                store.lag_next_persist_all = False
        if a.lagging:
            if not held or not isinstance(store, LocalFileOffsetStore) or store.pending_write is None:
                raise ReferenceActionError("the lagging persistAll had nothing to write")
            self.lagging_writes[a.client] = store

    def _offset_file_write_lands(self, a: act.OffsetFileWriteLands) -> None:
        """The lagging persistAll's ``string2File`` runs, on a thread that outlives the consumer's shutdown."""
        process, store = self.processes[a.client], self.lagging_writes[a.client]
        if store is None:
            raise ReferenceActionError(f"client {a.client} has no persistAll waiting to write")
        if process is not None and process.stalled(self.clock.now()):
            raise ReferenceActionError(f"client {a.client} is stalled until {process.stalled_until}")
        self.lagging_writes[a.client] = None
        store.write_pending()

    def _clean_expired_msg(self, a: act.CleanExpiredMsg) -> None:
        """R6.8: the cleanExpireMsg task of the concurrent consume service, on its own executor."""
        self._consume_service(a.client).clean_expire_msg_executors.run_due(CLEAN_EXPIRE_MSG_TASK_NAME)

    def _rebalance(self, a: act.Rebalance) -> None:
        process = self._process(a.client)
        self.current_cause = "rebalance-removal"
        process.instance.rebalance_service.run_once()

    def _rebalance_query_error(self, a: act.RebalanceQueryError) -> None:
        """The rebalance runs with the broker's processor failing the QUERY_CONSUMER_OFFSET of that
        queue (answered SYSTEM_ERROR), once."""
        process = self._process(a.client)
        mq = self._mq(a.queue)
        fault = QueryOffsetFault(self.config.group, mq)
        self.current_cause = "rebalance-removal"
        hosts = [h for h in (self.host, self.slave_host) if h is not None]  # slaves: whichever is asked
        for host in hosts:
            host.fault_injector = fault
        try:
            process.instance.rebalance_service.run_once()
        finally:
            for host in hosts:
                host.fault_injector = None

    def _rebalance_without_self(self, a: act.RebalanceWithoutSelf) -> None:
        """Faults: the rebalance runs while every consumer list the broker answers lacks this client's
        clientId (S7, R9.3). Needs CLUSTERING and the broker up with this client and another registered
        (otherwise the fault is not one the model defines)."""
        process = self._process(a.client)
        if not self.clustering:
            raise ReferenceActionError("RebalanceWithoutSelf: BROADCASTING asks for no consumer list")
        # the broker GET_CONSUMER_LIST_BY_GROUP goes to: the master, or (slaves) its slave while it is down
        asked, mine = self.host.controller, self.connections[a.client]
        if asked is None and self.slave_host is not None:
            asked, mine = self.slave_host.controller, self.slave_connections[a.client]
        if asked is None:
            raise ReferenceActionError("the broker is down")
        info = asked.consumer_manager.get_consumer_group_info(self.config.group)
        channels = [] if info is None else info.get_all_channel()
        if mine not in channels or all(ch is mine for ch in channels):
            raise ReferenceActionError(f"RebalanceWithoutSelf: client {a.client} is not registered with another")
        self.current_cause = "rebalance-removal"
        hosts = [h for h in (self.host, self.slave_host) if h is not None]
        for host in hosts:
            host.consumer_list_filter = ConsumerListWithout(self.config.group, self.cids[a.client])
        try:
            process.instance.rebalance_service.run_once()
        finally:
            for host in hosts:
                host.consumer_list_filter = None

    def _send_pull(self, a: act.SendPull) -> None:
        process = self._process(a.client)
        pq = process.consumer.rebalance_impl.process_queue_table.get(self._mq(a.queue))
        request = next((r for r in process.instance.pull_message_service.pending() if r.process_queue is pq), None)
        if pq is None or request is None:
            raise ReferenceActionError(f"client {a.client} has no queued pull request for queue {a.queue}")
        process.instance.pull_message_service.run_pull_request(request)

    def _receive_pull(self, a: act.ReceivePull) -> None:
        process = self._process(a.client)
        remoting = process.instance.remoting_client
        for opaque, future in remoting.response_table.items():
            callback = future.invoke_callback
            if (
                isinstance(callback, PullInvokeCallback)
                and callback.pull_callback.pull_request.process_queue.uid == a.pq_uid
                and remoting.connection_of(opaque).request_epoch(opaque) != -1
            ):
                self.current_cause = "offset-illegal-fix"  # the only commit a callback sends (5.x, R5.7)
                remoting.process_response(opaque)
                return
        raise ReferenceActionError(f"client {a.client} has no processed pull for pq {a.pq_uid}")

    def _consume_service(self, i: int) -> ConsumeMessageConcurrentlyService:
        service = self._process(i).consumer.consume_message_service
        if not isinstance(service, ConsumeMessageConcurrentlyService):
            raise ReferenceActionError(f"client {i} consumes orderly")
        return service

    def _orderly_service(self, i: int) -> ConsumeMessageOrderlyService | None:
        service = self._process(i).consumer.consume_message_service
        return service if isinstance(service, ConsumeMessageOrderlyService) else None

    def _start_consume(self, a: act.StartConsume) -> None:
        orderly = self._orderly_service(a.client)
        if orderly is not None:
            self._start_consume_orderly(orderly, a)
            return
        service = self._consume_service(a.client)
        executor = service.consume_executor
        request = next((r for r, _ in executor.queue.items() if r.rid == a.rid), None)
        if request is None:
            raise ReferenceActionError(f"client {a.client} has no submitted consume request {a.rid}")
        executor.start_thread(request, self.clock.now())

    def _running(self, i: int, rid: int, state: ConsumeRequestState) -> ConsumeRequest:
        executor = self._consume_service(i).consume_executor
        request = next((r for r in executor.running if r.rid == rid and r.state is state), None)
        if request is None:
            raise ReferenceActionError(f"client {i}: no consume thread {rid} in state {state.value}")
        return request

    def _finish_consume(self, a: act.FinishConsume) -> None:
        orderly = self._orderly_service(a.client)
        if orderly is not None:
            self._finish_consume_orderly(orderly, a)
            return
        request = self._running(a.client, a.rid, ConsumeRequestState.LISTENING)
        n = len(request.msgs)
        if a.status == act.CONSUME_SUCCESS and -1 <= a.ack_index <= n - 1:
            answer = ListenerAnswer(ConsumeConcurrentlyStatus.CONSUME_SUCCESS, a.ack_index)
            failed = n - 1 - a.ack_index
        elif a.status == act.RECONSUME_LATER and a.ack_index == -1:
            answer = ListenerAnswer(ConsumeConcurrentlyStatus.RECONSUME_LATER)
            failed = n
        else:
            raise ReferenceActionError(f"not a listener answer: {a!r}")
        if a.send_back_fails < 0 or a.send_back_fails >> failed:
            raise ReferenceActionError(f"send-back faults {a.send_back_fails:b} name messages that did not fail")
        remoting = self._process(a.client).instance.remoting_client
        failed_msgs = request.msgs[n - failed :]
        plan = [
            bool(a.send_back_fails >> j & 1)
            for j, msg in enumerate(failed_msgs)  # 5.x sends no message its pq no longer holds (R7.3, R6.8)
            if not (self.version.send_back_skips_cleaned and not request.process_queue.contains_message(msg))
        ]
        remoting.fault_injector = SendBackFaults(plan)
        try:
            self._consume_service(a.client).consume_executor.resume(request, answer)
        finally:
            remoting.fault_injector = None

    def _apply_consume_offset(self, a: act.ApplyConsumeOffset) -> None:
        orderly = self._orderly_service(a.client)
        if orderly is not None:
            thread = self._running_orderly(orderly, a, ConsumeRequestState.UPDATING_OFFSET)
            orderly.consume_executor.resume(thread, None)
            return
        request = self._running(a.client, a.rid, ConsumeRequestState.UPDATING_OFFSET)
        self._consume_service(a.client).consume_executor.resume(request, None)

    # orderly consume loop (R8.5-R8.8)
    def _start_consume_orderly(self, service: ConsumeMessageOrderlyService, a: act.StartConsume) -> None:
        executor = service.consume_executor
        request = next((r for r, _ in executor.queue.items() if r.rid == a.rid), None)
        if request is None:
            raise ReferenceActionError(f"client {a.client} has no submitted consume request {a.rid}")
        if not executor.can_start(request):
            raise ReferenceActionError(f"client {a.client}: request {a.rid} would block on its queue's monitor")
        executor.start_thread(request, self.clock.now())

    @staticmethod
    def _running_orderly(
        service: ConsumeMessageOrderlyService, a: act.FinishConsume | act.ApplyConsumeOffset, state: ConsumeRequestState
    ) -> OrderlyConsumeRequest:
        request = next((r for r in service.consume_executor.running if r.rid == a.rid and r.state is state), None)
        if request is None:
            raise ReferenceActionError(f"client {a.client}: no orderly consume thread {a.rid} in state {state.value}")
        return request

    def _finish_consume_orderly(self, service: ConsumeMessageOrderlyService, a: act.FinishConsume) -> None:
        """The orderly listener returns ``a.status``; bit j of ``send_back_fails`` fails the forwarding
        send of the j-th message of the batch at maxReconsumeTimes (R8.7)."""
        request = self._running_orderly(service, a, ConsumeRequestState.LISTENING)
        statuses = {
            act.ORDERLY_SUCCESS: ConsumeOrderlyStatus.SUCCESS,
            act.SUSPEND_CURRENT_QUEUE_A_MOMENT: ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT,
            act.ORDERLY_COMMIT: ConsumeOrderlyStatus.COMMIT,
            act.ORDERLY_ROLLBACK: ConsumeOrderlyStatus.ROLLBACK,
        }
        status = statuses.get(a.status)
        if status is None or a.ack_index != -1:
            raise ReferenceActionError(f"not an orderly listener answer: {a!r}")
        at_max = 0
        if status is ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT:
            at_max = sum(1 for m in request.msgs if m.reconsume_times >= service.get_max_reconsume_times())
        if a.send_back_fails < 0 or a.send_back_fails >> at_max:
            raise ReferenceActionError(f"forward faults {a.send_back_fails:b} name messages not forwarded")
        remoting = self._process(a.client).instance.remoting_client
        remoting.fault_injector = ForwardFaults([bool(a.send_back_fails >> j & 1) for j in range(at_max)])
        try:
            # the listener leaves autoCommit as the configuration says (R8.6)
            service.consume_executor.resume(request, OrderlyListenerAnswer(status, self.config.orderly_auto_commit))
        finally:
            remoting.fault_injector = None

    def _try_lock_later(self, a: act.TryLockLater) -> None:
        """The earliest due ``tryLockLaterAndReconsume`` task of pq ``a.pq_uid`` runs (R8.5)."""
        process = self._process(a.client)
        service = process.consumer.consume_message_service
        if not isinstance(service, ConsumeMessageOrderlyService):
            raise ReferenceActionError(f"client {a.client} does not consume orderly")
        now = self.clock.now()
        due = [
            f
            for f in service.try_lock_later_tasks()
            if isinstance(f.task, TryLockLaterTask) and f.task.process_queue.uid == a.pq_uid and f.due <= now
        ]
        if not due:
            raise ReferenceActionError(f"client {a.client} has no re-lock task due for pq {a.pq_uid}")
        task = min(due, key=lambda f: f.due)  # min keeps the first scheduled among equal due times
        process.instance.scheduled_executor_service.run_due(task.name)

    def _delayed_unlock(self, a: act.DelayedUnlock) -> None:
        """The earliest due 4.9.8 ``unlockDelay`` task of that queue runs (R8.8)."""
        process = self._process(a.client)
        mq = self._mq(a.queue)
        now = self.clock.now()
        due = [f for f in self._unlock_tasks(process.instance) if f.task.message_queue == mq and f.due <= now]
        if not due:
            raise ReferenceActionError(f"client {a.client} has no delayed unlock due for queue {a.queue}")
        task = min(due, key=lambda f: f.due)
        process.instance.scheduled_executor_service.run_due(task.name)

    # faults: a background task dies; the broker's offset file unreadable at restart
    _TASK_NAMES: ClassVar[dict[str, str]] = {
        "persistAllConsumerOffset": PERSIST_TASK_NAME,
        "sendHeartbeatToAllBroker": HEARTBEAT_TASK_NAME,
        "lockMQPeriodically": LOCK_MQ_TASK_NAME,
    }

    def _task_dies(self, a: act.TaskDies) -> None:
        """An Error escapes the task: its scheduled future is never run again (ScheduledThreadPoolExecutor
        suppresses later runs), or the RebalanceService thread exits (R4.1, R4.2, R8.3)."""
        process = self._process(a.client)
        if a.task in process.dead_tasks:
            raise ReferenceActionError(f"client {a.client}: {a.task} is already dead")
        if a.task == "RebalanceService":
            process.instance.rebalance_service.dead = True
        elif a.task == CLEAN_EXPIRE_MSG_TASK_NAME:  # ConsumeMessageConcurrentlyService's own executor (R6.8)
            future = self._consume_service(a.client).clean_expire_msg_executors.get(CLEAN_EXPIRE_MSG_TASK_NAME)
            if future is None:
                raise ReferenceActionError(f"client {a.client} has no {a.task} task")
            future.cancel()
        else:
            future = process.instance.scheduled_executor_service.get(self._TASK_NAMES[a.task])
            if future is None:
                raise ReferenceActionError(f"client {a.client} has no {a.task} task")
            future.cancel()
        process.dead_tasks.append(a.task)

    def _corrupt_offset_file(self, a: act.CorruptOffsetFile) -> None:
        """While the broker is down, consumerOffset.json is overwritten with garbage (RMQ-21); the restart's
        ConfigManager.load then falls back to .bak (R3.7)."""
        if self.host.is_up():
            raise ReferenceActionError("the broker is up: its offset file is corrupted only while it is down")
        path = ConsumerOffsetManager(self.broker_dir).config_file_path()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"\x00\x17{garbage")

    def _local_store(self, i: int) -> LocalFileOffsetStore:
        """A store of client ``i``'s offsets.json, to read or corrupt the file (its own table stays empty)."""
        return self.local_file_readers[i]

    def _corrupt_local_offset_file(self, a: act.CorruptLocalOffsetFile) -> None:
        """While consumer ``a.client`` is down, its offsets.json is overwritten with garbage (RMQ-21); every
        readLocalOffset then falls back to .bak (R1.10, R1.16)."""
        if self.processes[a.client] is not None:
            raise ReferenceActionError(f"client {a.client} is running: its file is corrupted only while it is down")
        path = self._local_store(a.client).store_path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"\x00\x17{garbage")

    def _abstract_file_bak(self, i: int) -> tuple[tuple[int | None, ...] | None, bool]:
        """CorruptLocalOffsetFile: (offsets.json.bak's table: all None when missing or empty, None when
        unreadable; whether offsets.json is unreadable). (None, False) unless configured."""
        if not self.config.local_offset_file_corruptions:
            return None, False
        store = self._local_store(i)
        none_q: tuple[int | None, ...] = (None,) * len(self.mqs)

        def table(path: Path) -> tuple[int | None, ...] | None:
            text = path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
            if not text:
                return none_q
            try:
                parsed = read_client_offset_file(text, str(path))
            except Exception:
                return None
            return tuple(parsed.get(mq) for mq in self.mqs)

        main = store.store_path
        bak = Path(f"{main}.bak")
        return self.readings.derive(
            "local-bak", (main, bak), lambda: (table(bak), main.exists() and table(main) is None)
        )

    def _abstract_bak(self) -> tuple[tuple[int | None, ...] | None, bool]:
        """CorruptOffsetFile: (the table consumerOffset.json.bak holds: all None when it is missing, None
        when it is unreadable; whether the main file is unreadable). ((), False) unless configured."""
        if not self.config.offset_file_corruptions:
            return None, False
        main = self.broker_offset_file
        none_q: tuple[int | None, ...] = (None,) * len(self.mqs)

        def readable(path: Path) -> tuple[int | None, ...] | None:
            text = path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
            if not text:
                return none_q
            probe = ConsumerOffsetManager(self.broker_dir)
            try:
                probe.decode(text, str(path))
            except Exception:
                return None
            values = (probe.query_offset(self.config.group, mq.topic, mq.queue_id) for mq in self.mqs)
            return tuple(None if v < 0 else v for v in values)

        bak = Path(f"{main}.bak")
        return self.readings.derive(
            "broker-bak", (main, bak), lambda: (readable(bak), main.exists() and readable(main) is None)
        )

    def _stall(self, a: act.Stall) -> None:
        """A stop-the-world pause: the process runs nothing until ``now + duration``."""
        process = self._process(a.client)
        if a.duration <= 0:
            raise ReferenceActionError(f"not a stall: {a!r}")
        process.stalled_until = self.clock.now() + a.duration

    @staticmethod
    def _unlock_tasks(instance: MQClientInstance) -> list[_UnlockFuture]:
        return [
            _UnlockFuture(f.name, f.due, f.task)
            for f in instance.scheduled_executor_service.tasks()
            if isinstance(f.task, UnlockDelayTask)
        ]

    def _abstract_orderly_listener(self, r: OrderlyConsumeRequest) -> SpecConsumeRequest:
        """An orderly listener that runs (or outlived its consumer's shutdown) as the model's ConsumeRequest."""
        return SpecConsumeRequest(
            r.rid,
            self.index_of[r.message_queue],
            r.process_queue.uid,
            tuple((m.queue_offset, m.reconsume_times) for m in r.msgs),
            r.listen_at,
            r.begin_time,
        )

    def _abstract_orderly_work(
        self, service: ConsumeMessageOrderlyService, instance: MQClientInstance
    ) -> tuple[
        tuple[SpecConsumeRequest, ...],
        tuple[SpecConsumeRequest, ...],
        tuple[OffsetUpdate, ...],
        tuple[tuple[int, int, int], ...],
        tuple[tuple[int, int], ...],
    ]:
        """(requests, consuming, offset_updates, relocks, unlocks) of an orderly consumer."""
        executor = service.consume_executor
        requests = tuple(
            SpecConsumeRequest(r.rid, self.index_of[r.message_queue], r.process_queue.uid, (), when)
            for r, when in executor.queue.items()
        )
        consuming = tuple(
            self._abstract_orderly_listener(r) for r in executor.running if r.state is ConsumeRequestState.LISTENING
        )
        updates = tuple(
            OffsetUpdate(r.rid, self.index_of[r.message_queue], r.process_queue.uid, r.commit_offset, r.begin_time)
            for r in executor.running
            if r.state is ConsumeRequestState.UPDATING_OFFSET
        )
        relocks = tuple(
            (f.task.process_queue.uid, self.index_of[f.task.message_queue], f.due)
            for f in service.try_lock_later_tasks()
            if isinstance(f.task, TryLockLaterTask)
        )
        unlocks = tuple((self.index_of[f.task.message_queue], f.due) for f in self._unlock_tasks(instance))
        return requests, consuming, updates, relocks, unlocks

    def _retry_times(self, pq: ProcessQueue) -> tuple[tuple[int, int], ...]:
        """(offset, reconsumeTimes) of each message in the pq (tree first, then the consuming map) whose
        local reconsumeTimes differs from the stored message's: the ones checkReconsumeTimes raised."""
        commit_log = self.host.message_store.commit_log
        held = {**pq.consuming_msg_orderly_tree_map, **pq.msg_tree_map}
        return tuple(
            (offset, msg.reconsume_times)
            for offset, msg in sorted(held.items())
            if msg.reconsume_times != commit_log[msg.commit_log_offset].reconsume_times
        )

    # orderly
    # retention and the OFFSET_ILLEGAL task (R5.5, R5.7)
    def _retention_delete(self, a: act.RetentionDelete) -> None:
        self._controller()
        if not 0 <= a.queue < self.config.queues:
            raise ReferenceActionError(f"no topic queue {a.queue}")
        self.host.message_store.retention_delete(self.config.topic, a.queue)

    def _fix_offset_illegal(self, a: act.FixOffsetIllegal) -> None:
        """The earliest due OFFSET_ILLEGAL task of that queue runs (4.9.8, R5.7)."""
        process = self._process(a.client)
        mq = self._mq(a.queue)
        now = self.clock.now()
        scheduler = process.instance.scheduled_executor_service
        task = next(
            (
                f
                for f in scheduler.tasks()
                if isinstance(f.task, FixOffsetTask) and f.task.pull_request.message_queue == mq and f.due <= now
            ),
            None,
        )
        if task is None:
            raise ReferenceActionError(f"client {a.client} has no OFFSET_ILLEGAL task due for queue {a.queue}")
        self.current_cause = "offset-illegal-fix"
        scheduler.run_due(task.name)

    @staticmethod
    def _fix_tasks(instance: MQClientInstance) -> dict[int, tuple[int, FixOffsetTask]]:
        """The pending OFFSET_ILLEGAL tasks by the uid of the pq they were scheduled for: (due, task)."""
        return {
            f.task.pull_request.process_queue.uid: (f.due, f.task)
            for f in instance.scheduled_executor_service.tasks()
            if isinstance(f.task, FixOffsetTask)
        }

    def _abstract_fixes(self, instance: MQClientInstance) -> tuple[OffsetFix, ...]:
        return tuple(
            OffsetFix(
                self.index_of[task.pull_request.message_queue],
                uid,
                task.pull_request.next_offset,
                due,
                task.live,
            )
            for uid, (due, task) in self._fix_tasks(instance).items()
        )

    def _lock_all(self, a: act.LockAll) -> None:
        """ConsumeMessageOrderlyService's lockMQPeriodically task (R8.3)."""
        self._process(a.client).instance.scheduled_executor_service.run_due(LOCK_MQ_TASK_NAME)

    def _abstract_locks(self) -> tuple[tuple[int, int] | None, ...]:
        """orderly: the RebalanceLockManager table by queue index, () for a non-orderly group."""
        if not self.config.orderly:
            return ()
        controller = self.host.controller
        if controller is None:
            return (None,) * len(self.mqs)
        out: list[tuple[int, int] | None] = []
        for mq in self.mqs:
            entry = controller.rebalance_lock_manager.entry(self.config.group, mq)
            out.append(None if entry is None else (self.cids.index(entry.client_id), entry.last_update_timestamp))
        return tuple(out)

    # admin reset: admin reset (R3.10a 4.9.8 client-driven; R3.10b 5.x server-side)
    def _admin_reset(self, a: act.AdminReset) -> None:
        """mqadmin ``resetOffsetByTime`` (or by offset) of one topic queue, forced: INVOKE_BROKER_TO_RESET_OFFSET
        (R3.10a, R3.10b). On CONSUMER_NOT_ONLINE (4.9.8) ``ResetOffsetByTimeCommand`` falls back to
        ``resetOffsetByTimestampOld``: the offset (searchOffset for a timestamp) goes to the broker with
        UPDATE_CONSUMER_OFFSET (R3.10a). Any other refusal is an action the reference cannot perform."""
        controller = self._controller()
        c = self.config
        if not 0 <= a.queue < c.queues:
            raise ReferenceActionError(f"no topic queue {a.queue}")
        header = ResetOffsetRequestHeader(
            c.topic,
            c.group,
            a.target if a.by_timestamp else -1,
            True,
            a.queue,
            -1 if a.by_timestamp else a.target,
        )
        request = RemotingCommand.create_request_command(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, header)
        response = controller.process_sync(self.admin_connection, request)
        if response.code == ResponseCode.CONSUMER_NOT_ONLINE:
            offset = a.target
            if a.by_timestamp:
                search = RemotingCommand.create_request_command(
                    RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, SearchOffsetRequestHeader(c.topic, a.queue, a.target)
                )
                found = controller.process_sync(self.admin_connection, search).body
                assert isinstance(found, int)
                offset = found
            update = RemotingCommand.create_request_command(
                RequestCode.UPDATE_CONSUMER_OFFSET, UpdateConsumerOffsetRequestHeader(c.group, c.topic, a.queue, offset)
            )
            response = controller.process_sync(self.admin_connection, update)
        if response.code != ResponseCode.SUCCESS:
            raise ReferenceActionError(f"the broker refused the reset: {response.code} {response.remark}")

    def _client_reset_receive(self, a: act.ClientResetReceive) -> None:
        """The client's remoting thread reads the oldest RESET_CONSUMER_CLIENT_OFFSET (R3.10a); not while
        an earlier resetOffset sleeps (the method is synchronized)."""
        process = self._process(a.client)
        connection = self.connections[a.client]
        if not connection.inbound or process.instance.sleeping_reset() is not None:
            raise ReferenceActionError(f"client {a.client}: no reset push to read, or a reset sleeps")
        connection.read_push()

    def _client_reset_wake(self, a: act.ClientResetWake) -> None:
        """resetOffset's 10 s sleep ends: the rest of the method runs (R3.10a steps 4-5)."""
        instance = self._process(a.client).instance
        sleeping = instance.sleeping_reset()
        if sleeping is None or sleeping[0] > self.clock.now():
            raise ReferenceActionError(f"client {a.client}: no reset sleep is over")
        task = next(f for f in instance.scheduled_executor_service.tasks() if f.task is sleeping[1])
        self.current_cause = "admin-reset-client"
        if a.late_reply == -1:
            instance.scheduled_executor_service.run_due(task.name)
            return
        # docs/spec.md, "What is real, ranked": the pull callback thread takes the reply of pq ``late_reply`` between
        # the reset's updateConsumeOffset of that pq's queue and its removeUnnecessaryMessageQueue (persist)
        consumer = self._process(a.client).consumer
        table = consumer.rebalance_impl.process_queue_table
        late = next((mq for mq, pq in table.items() if pq.uid == a.late_reply), None)
        if late is None:
            raise ReferenceActionError(f"client {a.client}: the reset holds no pq {a.late_reply}")
        update = consumer.update_consume_offset

        def update_then_reply(mq: MessageQueue, offset: int) -> None:
            update(mq, offset)
            if mq == late:
                self._receive_pull(act.ReceivePull(a.client, a.late_reply))
                self.current_cause = "admin-reset-client"

        consumer.update_consume_offset = update_then_reply  # type: ignore[method-assign]
        try:
            instance.scheduled_executor_service.run_due(task.name)
        finally:
            del consumer.update_consume_offset

    def _abstract_reset_pending(self, controller: BrokerController | None) -> tuple[int | None, ...]:
        """5.x ``resetOffsetTable`` by queue index; () while the table has no key of the group (the
        model's "none anywhere"; a key stays once a reset was assigned, as in Java)."""
        if controller is None:
            return ()
        table = controller.consumer_offset_manager.reset_offset_table
        keys = {mq.topic + "@" + self.config.group for mq in self.mqs}
        if not keys & set(table):
            return ()
        return tuple(table.get(mq.topic + "@" + self.config.group, {}).get(mq.queue_id) for mq in self.mqs)

    def _abstract_reset_client(
        self, i: int, instance: MQClientInstance
    ) -> tuple[tuple[tuple[int, int], ...], tuple[tuple[int, int], ...], int | None, tuple[tuple[int, int], ...]]:
        """The client's (reset_inbox, reset_table, reset_wake, reset_held): pushes on the wire, the
        sleeping reset's table and wake time, and the pqs it holds."""
        inbox: list[tuple[int, int]] = []
        for request in self.connections[i].inbound:
            body = request.body
            assert isinstance(body, ResetOffsetBody)
            inbox.extend((self.index_of[mq], offset) for mq, offset in body.offset_table.items())
        sleeping = instance.sleeping_reset()
        if sleeping is None:
            return tuple(inbox), (), None, ()
        due, task = sleeping
        table = tuple((self.index_of[mq], offset) for mq, offset in task.offset_table.items())
        return tuple(inbox), table, due, self._held(task)

    def _held(self, task: ResetOffsetTask) -> tuple[tuple[int, int], ...]:
        """The pqs the sleeping reset dropped: those of its table still in ``processQueueTable``."""
        table = task.consumer.rebalance_impl.process_queue_table
        return tuple(
            (self.index_of[mq], table[mq].uid)
            for mq in sorted(table)
            if mq.topic == task.topic and mq in task.offset_table
        )

    # --- abstraction ----------------------------------------------------------------------------------

    def abstract(self) -> tuple[int, Broker, tuple[Client, ...]]:
        """The model's (now, broker, clients), read from the reference objects and files."""
        return self.clock.now(), self._abstract_broker(), tuple(self._abstract_client(i) for i in range(len(self.cids)))

    def _flushed_offsets(self) -> tuple[int | None, ...]:
        """The group's offsets as ``ConsumerOffsetManager.load`` reads them from consumerOffset.json (and its .bak,
        R3.7): what a broker restarting now would start from."""
        main = self.broker_offset_file

        def load() -> tuple[int | None, ...]:
            manager = ConsumerOffsetManager(self.broker_dir)
            if not manager.load():
                raise ReferenceActionError("consumerOffset.json and its .bak are unreadable")
            return self._abstract_offsets(manager)

        return self.readings.derive("broker-flushed", (main, Path(f"{main}.bak")), load)

    def _abstract_queues(self, store: DefaultMessageStore) -> tuple[BrokerQueue, ...]:
        queues = []
        for mq in self.mqs:
            cq = store.find_consume_queue(mq.topic, mq.queue_id)
            if cq is None:
                queues.append(BrokerQueue((), False))
                continue
            messages = tuple(self._abstract_message(store.commit_log[u.commit_log_offset]) for u in cq.units)
            queues.append(BrokerQueue(messages, cq.head_in_page_cache, cq.min_logic_offset))
        return tuple(queues)

    def _abstract_offsets(self, manager: ConsumerOffsetManager) -> tuple[int | None, ...]:
        values = (manager.query_offset(self.config.group, mq.topic, mq.queue_id) for mq in self.mqs)
        return tuple(None if v < 0 else v for v in values)

    def _abstract_registered(self, controller: BrokerController) -> frozenset[int]:
        group_info = controller.consumer_manager.get_consumer_group_info(self.config.group)
        if group_info is None:
            return frozenset()
        return frozenset(self.connection_index[ch] for ch in group_info.get_all_channel())

    def abstract_slave(self) -> Broker | None:
        """Slaves: the model's ``State.slave``, None without a slave. The slave never crashes and never
        flushes in the model: ``flushed`` is its constant no-offset table (the slave's own file, which
        ``syncConsumerOffset`` persists, is never read back), and ``next_sync`` is the due time of its
        SlaveSynchronize task."""
        host = self.slave_host
        if host is None:
            return None
        controller = host.require_controller()
        none_q: tuple[int | None, ...] = (None,) * len(self.mqs)
        return Broker(
            up=True,
            queues=self._abstract_queues(host.message_store),
            offsets=self._abstract_offsets(controller.consumer_offset_manager),
            flushed=none_q,
            next_flush=None,
            registered=self._abstract_registered(controller),
            scheduled=(),
            dlq=(),
            epoch=host.incarnation,
            next_sync=controller.scheduled_executor_service.due_time(SLAVE_SYNC_TASK_NAME),
        )

    def _abstract_broker(self) -> Broker:
        c = self.config
        bak, main_unreadable = self._abstract_bak()
        store = self.host.message_store
        controller = self.host.controller
        flushed = self._flushed_offsets()
        queues = self._abstract_queues(store)
        offsets = self._abstract_offsets

        registered: frozenset[int] = frozenset()
        next_flush = None
        scheduled: tuple[Scheduled, ...] = ()
        if controller is not None:
            next_flush = controller.scheduled_executor_service.due_time(FLUSH_TASK_NAME)
            registered = self._abstract_registered(controller)
        scheduled = tuple(
            Scheduled(due, self._abstract_message(msg)) for due, msg in store.schedule_message_service.pending()
        )
        dlq_cq = store.find_consume_queue(dlq_topic(c.group), 0)
        dlq = (
            ()
            if dlq_cq is None
            else tuple(self._abstract_message(store.commit_log[u.commit_log_offset]) for u in dlq_cq.units)
        )
        return Broker(
            up=controller is not None,
            queues=queues,
            offsets=flushed if controller is None else offsets(controller.consumer_offset_manager),
            flushed=flushed,
            next_flush=next_flush,
            registered=registered,
            scheduled=scheduled,
            dlq=dlq,
            epoch=self.host.incarnation,
            heartbeat_at=self._abstract_heartbeats(controller),  # Stall
            bak=bak,  # faults (CorruptOffsetFile)
            main_unreadable=main_unreadable,
            locks=self._abstract_locks(),  # orderly
            reset_pending=self._abstract_reset_pending(controller),  # admin reset
        )

    @staticmethod
    def _consume_started(pq: ProcessQueue) -> tuple[tuple[int, int], ...]:
        """R6.8: (offset, CONSUME_START_TIME) of each message of the tree that carries the property, which
        ``ConsumeRequest.run`` stamps on the message objects the tree holds (R7.2 step 3)."""
        return tuple(
            (o, int(started))
            for o in sorted(pq.msg_tree_map)
            if (started := pq.msg_tree_map[o].get_property(PROPERTY_CONSUME_START_TIMESTAMP))
        )

    def _abstract_heartbeats(self, controller: BrokerController | None) -> tuple[int, ...]:
        """Stall, TaskDies: each consumer channel's lastUpdateTimestamp, 0 while not registered; () unless
        stalls or task deaths are configured (the model keeps it only then)."""
        if not (self.config.client_stalls or self.config.task_deaths):
            return ()
        stamps = [0] * self.config.consumers
        info = None if controller is None else controller.consumer_manager.get_consumer_group_info(self.config.group)
        if info is not None:
            for channel, entry in info.channel_info_table.items():
                stamps[self.connection_index[channel]] = entry.last_update_timestamp
        return tuple(stamps)

    def _abstract_message(self, msg: MessageExt) -> Message:
        """A stored message as the model sees it: its own store time and reconsumeTimes; a sent-back
        one (scheduled, retry or dead letter) is named by the message first produced."""
        origin_id = msg.get_property(PROPERTY_ORIGIN_MESSAGE_ID)
        if origin_id is None:
            return Message((msg.queue_id, msg.queue_offset), msg.tags or "", msg.store_timestamp, msg.reconsume_times)
        original = self.host.message_store.commit_log[decode_message_id(origin_id)[1]]  # read, not copied
        origin = (original.queue_id, original.queue_offset)
        sent_back_at = int(msg.properties[TRACE_SENT_BACK_AT])
        return Message(origin, msg.tags or "", msg.store_timestamp, msg.reconsume_times, sent_back_at)

    def _abstract_client(self, i: int) -> Client:
        c = self.config
        none_q: tuple[int | None, ...] = (None,) * len(self.mqs)
        file = none_q
        if c.mode == BROADCASTING:
            store = self._local_store(i)

            def read() -> tuple[int | None, ...]:
                table = store.read_local_offset() or {}
                return tuple(table.get(mq) for mq in self.mqs)

            file = self.readings.derive("local", (store.store_path, Path(f"{store.store_path}.bak")), read)
        channel = self._abstract_channel(i)
        file_bak, file_main_unreadable = self._abstract_file_bak(i)  # faults (CorruptLocalOffsetFile)
        process = self.processes[i]
        orphaned = tuple(self._abstract_orderly_listener(r) for _, r in self.orphans[i])
        lagging = self.lagging_writes[i]
        pending = None if lagging is None or lagging.pending_write is None else lagging.pending_write
        file_write_pending = (
            None
            if pending is None
            else (tuple(pending[0].get(mq) for mq in self.mqs), tuple(pending[1].get(mq) for mq in self.mqs))
        )
        if process is None:
            return Client(
                file_write_pending=file_write_pending,
                orphaned=orphaned,
                file_bak=file_bak,
                file_main_unreadable=file_main_unreadable,
                running=False,
                mem=none_q,
                file=file,
                pqs=(None,) * len(self.mqs),
                pulls=(),
                requests=(),
                consuming=(),
                offset_updates=(),
                channel=channel,
                next_persist=None,
                next_rebalance=None,
                next_heartbeat=None,
                rebalance_requested=False,
                view=None,
                seq=self.ids[i].value,
            )
        instance, consumer = process.instance, process.consumer
        reset_inbox, reset_table, reset_wake, reset_held = self._abstract_reset_client(i, instance)  # admin reset
        held = {self.mqs[q] for q, _ in reset_held}
        mem = consumer.offset_store.clone_offset_table(None)
        pulls, in_flight = self._abstract_pulls(i, instance)
        queued = {r.process_queue.uid: r for r in instance.pull_message_service.pending()}
        pqs: list[SpecProcessQueue | None] = []
        for mq in self.mqs:
            owned = consumer.rebalance_impl.process_queue_table.get(mq)
            if owned is None or mq in held:  # a sleeping reset's pq is dropped, out of the model's pqs
                pqs.append(None)
                continue
            if owned.uid in queued:  # one PullRequest circulates per pq: queued, or on its way
                pull_request, state = queued[owned.uid], PULL_READY
            elif owned.uid in in_flight:
                pull_request, state = in_flight[owned.uid], PULL_IN_FLIGHT
            elif owned.dropped and owned.uid in (fixes := self._fix_tasks(instance)):  # OFFSET_ILLEGAL
                pull_request, state = fixes[owned.uid][1].pull_request, PULL_DROPPED
            elif owned.dropped and owned.uid in consumer.discarded_pull_requests:  # orderly consume loop (R8.8)
                pull_request, state = consumer.discarded_pull_requests[owned.uid], PULL_DROPPED
            else:
                raise AssertionError(f"client {i}: the pull request of pq {owned.uid} is lost")
            pqs.append(
                SpecProcessQueue(
                    owned.uid,
                    sum(1 << o for o in owned.msg_tree_map),
                    owned.msg_count,
                    owned.msg_size,
                    owned.queue_offset_max,
                    pull_request.next_offset,
                    state,
                    pull_request.ready_at,
                    last_pull=owned.last_pull_timestamp,
                    consume_started=() if self.config.orderly else self._consume_started(owned),  # R6.8
                )
            )
            if self.config.orderly:  # orderly: lock state (R6.6, R8.2) and previouslyLocked (R5.1)
                pqs[-1] = pqs[-1]._replace(  # type: ignore[union-attr]
                    locked=owned.locked,
                    last_lock=owned.last_lock_timestamp,
                    previously_locked=pull_request.previously_locked,
                    # orderly consume loop (R6.4, R8.5-R8.8); an orderly removal that failed left it dropped
                    consuming_tree=sum(1 << o for o in owned.consuming_msg_orderly_tree_map),
                    consuming=owned.consuming,
                    dropped=owned.dropped and owned.try_unlock_times > 0,
                    retry_times=self._retry_times(owned),
                )
        service = consumer.consume_message_service
        relocks: tuple[tuple[int, int, int], ...] = ()
        unlocks: tuple[tuple[int, int], ...] = ()
        if isinstance(service, ConsumeMessageOrderlyService):  # orderly consume loop
            requests, consuming, updates, relocks, unlocks = self._abstract_orderly_work(service, instance)
        else:
            executor = service.consume_executor
            requests = tuple(self._abstract_consume_request(r, when) for r, when in executor.queue.items())
            consuming = tuple(
                self._abstract_consume_request(r, r.ready_at)
                for r in executor.running
                if r.state is ConsumeRequestState.LISTENING
            )
            updates = tuple(
                OffsetUpdate(r.rid, self.index_of[r.message_queue], r.process_queue.uid, r.remove_result)
                for r in executor.running
                if r.state is ConsumeRequestState.UPDATING_OFFSET
            )
        scheduler = instance.scheduled_executor_service
        view = consumer.rebalance_impl.balanced_cid_all
        return Client(
            file_write_pending=file_write_pending,
            orphaned=orphaned,
            running=True,
            mem=tuple(mem.get(mq) for mq in self.mqs),
            file=file,
            pqs=tuple(pqs),
            pulls=pulls,
            requests=requests,
            consuming=consuming,
            offset_updates=updates,
            channel=channel,
            next_persist=scheduler.due_time(PERSIST_TASK_NAME),
            next_rebalance=None if instance.rebalance_service.dead else instance.rebalance_service.wait_deadline,
            next_heartbeat=scheduler.due_time(HEARTBEAT_TASK_NAME),
            rebalance_requested=instance.rebalance_service.has_notified,
            view=None if view is None else tuple(self.cids.index(cid) for cid in view),
            seq=self.ids[i].value,
            next_lock_all=scheduler.due_time(LOCK_MQ_TASK_NAME),  # orderly
            next_clean=service.clean_expire_msg_due(),  # R6.8
            offset_fixes=self._abstract_fixes(instance),  # OFFSET_ILLEGAL
            paused=consumer.pause,  # admin reset
            reset_inbox=reset_inbox,
            reset_table=reset_table,
            reset_wake=reset_wake,
            reset_held=reset_held,
            relocks=relocks,  # orderly consume loop
            unlocks=unlocks,
            stalled_until=process.stalled_until,
            dead_tasks=tuple(process.dead_tasks),  # faults
            last_rebalance=instance.rebalance_service.last_rebalance_timestamp if self.version.rebalance_paced else 0,
            file_bak=file_bak,
            file_main_unreadable=file_main_unreadable,
        )

    def _abstract_pulls(
        self, i: int, instance: MQClientInstance
    ) -> tuple[tuple[PullInFlight, ...], dict[int, PullRequest]]:
        """The pulls whose reply the process still awaits, in send order, and their PullRequests."""
        in_flight: dict[int, PullRequest] = {}
        pulls: list[PullInFlight] = []
        for opaque, future in instance.remoting_client.response_table.items():
            callback = future.invoke_callback
            if not isinstance(callback, PullInvokeCallback):
                continue
            pull_request = callback.pull_callback.pull_request
            pq = pull_request.process_queue
            header = future.request.header
            assert isinstance(header, PullMessageRequestHeader)
            in_flight[pq.uid] = pull_request
            connection = future.connection if future.connection is not None else self.connections[i]
            epoch = connection.request_epoch(opaque)
            reply = connection.replies.get(opaque) if epoch >= 0 else None
            # orderly consume loop: a pq that an orderly removal left dropped in the table is not detached
            consumer = callback.pull_callback.consumer
            table = consumer.rebalance_impl.process_queue_table
            detached = pq.dropped and not (consumer.consume_orderly and table.get(pull_request.message_queue) is pq)
            pulls.append(
                PullInFlight(
                    self.index_of[pull_request.message_queue],
                    pq.uid,
                    header.queue_offset,
                    epoch,
                    (pq.msg_count == 0) if detached else None,
                    None if reply is None else self._abstract_pull_response(reply.response, header),
                    dropped_consuming=detached and consumer.consume_orderly and pq.consuming,
                    dropped_count=pq.msg_count if detached and consumer.consume_orderly else 0,
                    from_slave=connection in self.slave_connections,  # slaves
                )
            )
        return tuple(pulls), in_flight

    @staticmethod
    def _abstract_pull_response(
        response: RemotingCommand | None, request: PullMessageRequestHeader
    ) -> SpecPullResult | None:
        """The broker's answer to a pull as the client will map it (R5.5, R5.7); None while held."""
        if response is None:
            return None
        status = {
            ResponseCode.SUCCESS: br.FOUND,
            ResponseCode.PULL_NOT_FOUND: br.NO_NEW_MSG,
            ResponseCode.PULL_RETRY_IMMEDIATELY: br.NO_MATCHED_MSG,
            ResponseCode.PULL_OFFSET_MOVED: br.OFFSET_ILLEGAL,
        }.get(response.code)
        if status is None:  # an error code: the callback's onException
            return SpecPullResult(br.PULL_ERROR, (), request.queue_offset)
        header = response.header
        assert isinstance(header, PullMessageResponseHeader)
        body = response.body
        found = tuple(m.queue_offset for m in body.messages) if isinstance(body, PullMessageResponseBody) else ()
        return SpecPullResult(status, found, header.next_begin_offset)

    def _abstract_consume_request(self, request: ConsumeRequest, ready_at: int) -> SpecConsumeRequest:
        msgs = tuple((m.queue_offset, m.reconsume_times) for m in request.msgs)
        return SpecConsumeRequest(
            request.rid, self.index_of[request.message_queue], request.process_queue.uid, msgs, ready_at
        )

    def _abstract_channel(self, i: int) -> tuple[Commit | PullRequestMsg, ...]:
        """Client ``i``'s requests on the wire, in send order across its connections (slaves: the model's
        one FIFO, each request marked with the broker it goes to)."""
        on_wire = [
            (conn.sequence_of(r), r, conn in self.slave_connections)
            for conn in self._client_connections(i)
            for r in conn.outbound
        ]
        return tuple(self._abstract_wire_request(r, to_slave) for _, r, to_slave in sorted(on_wire, key=lambda w: w[0]))

    def _abstract_wire_request(self, request: RemotingCommand, to_slave: bool = False) -> Commit | PullRequestMsg:
        header = request.header
        uid = int(request.ext_fields.get(PQ_UID_FIELD, "-1"))
        if isinstance(header, UpdateConsumerOffsetRequestHeader):
            mq = MessageQueue(header.topic, self.config.broker_name, header.queue_id)
            cause = request.ext_fields.get(CAUSE_FIELD, "")
            return Commit(self.index_of[mq], header.commit_offset, uid, cause, to_slave)
        assert isinstance(header, PullMessageRequestHeader)
        mq = MessageQueue(header.topic, self.config.broker_name, header.queue_id)
        flag = PullSysFlag.has_commit_offset_flag(header.sys_flag)
        return PullRequestMsg(self.index_of[mq], uid, header.queue_offset, flag, header.commit_offset, to_slave)
