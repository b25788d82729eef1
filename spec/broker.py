"""The broker: the topic's commit log, ``ConsumerOffsetManager``, its flush, restart and channels.

RocketMQ classes: ``ConsumerOffsetManager`` (the in-memory offset table, last writer wins, R3.2, R3.4;
``consumerOffset.json`` and its ``.bak``, R3.6, R3.7, string2File (ConsumerProcessMixin._write_file)),
``BrokerController``'s flush timer (R3.6), ``ConsumerManager`` and ``ClientHousekeepingService`` (registration by
heartbeat, the idle-channel scan, NOTIFY_CONSUMER_IDS_CHANGED; the client timers (ConsumerProcessMixin), R4.3, what
triggers a rebalance (RebalanceMixin)), ``ConsumerManageProcessor`` (UPDATE_CONSUMER_OFFSET, R3.4),
``PullMessageProcessor`` (the piggy-backed commit and long polling, R5.4; the answers themselves are
``broker_rules.py``), ``ScheduleMessageService`` delivering retries to ``%RETRY%`` (the broker's send-back
(ConcurrentConsumeMixin._goes_to_dlq), the retry topic subscription (ConcurrentConsumeMixin)), and the page cache of a
young queue's head (the offset query's answer, broker_rules.query_consumer_offset). The broker's request pools, in which
one request may overtake another on a connection, are docs/spec.md, "Thread boundaries". The master's slave is
``slave.py``.

Its actions, before the class: ``Produce``, ``CoolQueueHead``, ``BrokerFlush``, ``DeliverScheduled``,
``BrokerCrash``, ``BrokerRestart``, ``ExpireChannel``, ``BrokerReceive``.

Last writer wins (R3.2) and the broker's load (R3.7) are decided here; the properties that check their
consequences are ``committed_offset.py`` (INV-8, INV-8r) and, on the slave's table, ``slave.py`` (INV-8s), which
also applies the UPDATE_CONSUMER_OFFSET handler (R3.4) and the pull handler (R5.4) to the slave's copy.

Its properties, after the class: INV-7 (QUERY_CONSUMER_OFFSET never answers a negative SUCCESS), INV-29 (a
scheduled copy leaves the schedule only when due, into the retry queue, unchanged) and INV-38 (the idle-channel scan
closes only a silent consumer's channel, 120 s after its last heartbeat). What the
committed offset must cover and why it may fall (INV-9, INV-16, INV-8, INV-8r) is ``committed_offset.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from rmqspec.spec import broker_rules as br
from rmqspec.spec.enabling import ActionNotEnabled
from rmqspec.spec.property_types import ActionProperty, Invariant
from rmqspec.spec.state import (
    Broker,
    Client,
    Commit,
    Event,
    Ghost,
    History,
    Message,
    PullRequestMsg,
    PullResult,
    State,
    pq_key,
)
from rmqspec.spec.state import put_at as _put

if TYPE_CHECKING:
    from rmqspec.spec.actions import Action
    from rmqspec.spec.model import Model

# Broker timers (R4.3, R3.6; docs/rules.md, "Constants").
FLUSH_FIRST_DELAY: Final = 10_000  # broker consumer-offset flush first run (R3.6)
FLUSH_INTERVAL: Final = 5_000  # flushConsumerOffsetInterval (R3.6)
CHANNEL_EXPIRED_TIMEOUT: Final = 120_000  # the broker's idle-channel scan closes a silent consumer (R4.3)


# BrokerReceive.overtakes ranges over 0..OVERTAKE_WINDOW (see BrokerReceive).
OVERTAKE_WINDOW = 1


# Actions of the broker, each handled by its transition ``_<snake_case name>`` below
@dataclass(frozen=True, slots=True)
class Produce:
    queue: int
    tag: str


@dataclass(frozen=True, slots=True)
class CoolQueueHead:
    queue: int


@dataclass(frozen=True, slots=True)
class BrokerFlush:
    """The broker's consumer-offset flush timer fires."""


@dataclass(frozen=True, slots=True)
class DeliverScheduled:
    """The earliest due scheduled (sent-back) message reaches the retry topic."""


@dataclass(frozen=True, slots=True)
class BrokerCrash:
    """The broker process dies."""


@dataclass(frozen=True, slots=True)
class BrokerRestart:
    """The broker process comes back."""


@dataclass(frozen=True, slots=True)
class ExpireChannel:
    client: int


@dataclass(frozen=True, slots=True)
class BrokerReceive:
    """The broker runs a request from the client's connection: the oldest (``overtakes`` 0), or the one
    ``overtakes`` places behind it, which then overtakes the older (docs/spec.md, "Thread boundaries": 4.9.8 hands each
    request to a thread pool per request code, NettyRemotingAbstract#processRequestCommand, so requests
    read in order from one connection run in any order).

    The window is 0 or 1 (OVERTAKE_WINDOW): a request may overtake the one just before it. Repeated steps
    let the oldest request wait behind any number of later ones, which is the outcome the offset
    properties see (an older commit landing after newer ones); a wider window only multiplies branching.
    The model enables 1 only where the order can change an offset (``Model.may_overtake``)."""

    client: int
    overtakes: int = 0


class BrokerMixin:
    """``Model``'s transitions and helpers for the broker and its messages; see the module docstring."""

    # --- the topic's messages: produce, page cache (read by broker_rules.query_consumer_offset) ----------------
    def _produce(self: Model, s: State, a: Produce) -> State:
        """Produce(queue, tag). Enabled: the broker is up, the queue's produce budget remains and
        the tag is one of config.tags. Effect: a message is appended at maxOffset, stored at ``now``;
        message 0 of an empty queue starts hot (the offset query's answer, broker_rules.query_consumer_offset). An
        unsubscribed tag is owed to nobody."""
        q = a.queue
        if not (0 <= q < self.config.queues) or a.tag not in self.config.tags:
            raise ActionNotEnabled(a, "no such queue or tag")
        if not s.broker.up or s.budget.produces[q] <= 0:
            raise ActionNotEnabled(a, "broker down or produce budget used up")
        queue = s.broker.queues[q]
        o = queue.max_offset
        queue = queue._replace(
            messages=(*queue.messages, Message((q, o), a.tag, s.now)), head_hot=queue.head_hot or o == 0
        )
        ghost = s.ghost
        sub = self.config.subscription
        if sub is not None and a.tag not in sub:
            skipped = list(ghost.skipped)
            for ledger_base in range(0, len(skipped), self.q_count):
                skipped[ledger_base + q] |= 1 << o
            ghost = ghost._replace(skipped=tuple(skipped))
        return s._replace(
            broker=s.broker._replace(queues=_put(s.broker.queues, q, queue)),
            budget=s.budget._replace(produces=_put(s.budget.produces, q, s.budget.produces[q] - 1)),
            ghost=ghost,
        )

    def _cool_queue_head(self: Model, s: State, a: CoolQueueHead) -> State:
        """CoolQueueHead(queue). Enabled: message 0 of the queue is still hot. Effect: it leaves the
        page cache, so a group with no offset is now told QUERY_NOT_FOUND instead of 0 (the offset query's answer,
        broker_rules.query_consumer_offset)."""
        queue = s.broker.queues[a.queue] if 0 <= a.queue < self.config.queues else None
        if queue is None or not queue.head_hot or queue.max_offset == 0:
            raise ActionNotEnabled(a, "queue head is not hot")
        return s._replace(
            broker=s.broker._replace(queues=_put(s.broker.queues, a.queue, queue._replace(head_hot=False)))
        )

    # --- the broker: offset table, flush, restart, channels, consumer list, requests --------------
    def _broker_flush(self: Model, s: State, a: BrokerFlush) -> State:
        """BrokerFlush. Enabled: broker up and its flush timer due. Effect: consumerOffset.json
        becomes a copy of the in-memory table; next flush in 5 s (R3.6)."""
        b = s.broker
        if not b.up or b.next_flush is None or b.next_flush > s.now:
            raise ActionNotEnabled(a, "flush timer not due")
        due = b.next_flush
        if self.track_bak:  # string2File copies the readable previous main to .bak (string2File
            # (ConsumerProcessMixin._write_file), R3.6)
            b = b._replace(bak=None if b.main_unreadable else b.flushed, main_unreadable=False)
            s = s._replace(ghost=s.ghost._replace(bak_writer=s.ghost.flushed_writer))
        return s._replace(
            broker=b._replace(flushed=b.offsets, next_flush=due + FLUSH_INTERVAL),
            ghost=s.ghost._replace(flushed_writer=s.ghost.last_writer),
        )

    def _deliver_scheduled(self: Model, s: State, a: DeliverScheduled) -> State:
        """DeliverScheduled. Enabled: broker up and the earliest scheduled message is due. Effect:
        the message lands in %RETRY%<group> (step 8 of the broker's send-back (ConcurrentConsumeMixin._goes_to_dlq), the
        retry topic subscription (ConcurrentConsumeMixin)). BROADCASTING has no retry queue in the model (nobody
        subscribes to it, the retry topic subscription, ConcurrentConsumeMixin): the copy a BROADCASTING cleanExpiredMsg
        sent (cleanExpiredMsg, ConcurrentConsumeMixin._clean_expired_msg) only leaves the schedule."""
        b = s.broker
        if not b.up or not b.scheduled or b.scheduled[0].due > s.now:
            raise ActionNotEnabled(a, "no scheduled message due")
        rq = self.retry_queue
        if rq is None:
            return s._replace(broker=b._replace(scheduled=b.scheduled[1:]))
        msg = b.scheduled[0].message._replace(store_time=s.now)
        queue = b.queues[rq]
        queue = queue._replace(messages=(*queue.messages, msg), head_hot=queue.head_hot or queue.max_offset == 0)
        return s._replace(broker=b._replace(queues=_put(b.queues, rq, queue), scheduled=b.scheduled[1:]))

    def _broker_crash(self: Model, s: State, a: BrokerCrash) -> State:
        """BrokerCrash (budgeted). Enabled: broker up. Effect: the in-memory offset table is lost
        and what will be loaded is the flushed file (R3.6, R3.7); every connection breaks, so
        requests still on the wire are lost and pulls the broker held fail; registrations go."""
        b = s.broker
        if not b.up or s.budget.broker_crashes <= 0:
            raise ActionNotEnabled(a, "broker down or crash budget used up")
        clients = []
        hist = s.history
        for i, cl in enumerate(s.clients):
            for item in cl.channel:
                if isinstance(item, Commit) and not item.to_slave:
                    hist = History(Event(s.now, "commit-lost", i, item.queue, item.offset, item.cause), hist)
            # A pull still on the wire fails like one the broker held: its reply is an exception. Requests
            # to the slave travel on another connection (slaves).
            pulls = tuple(p._replace(epoch=-2) if p.epoch == -1 and not p.from_slave else p for p in cl.pulls)
            clients.append(cl._replace(channel=tuple(r for r in cl.channel if r.to_slave), pulls=pulls))
        return s._replace(
            broker=b._replace(
                up=False,
                offsets=b.flushed,
                next_flush=None,
                registered=frozenset(),
                heartbeat_at=(0,) * len(b.heartbeat_at),  # Stall: the channel table is broker memory
                epoch=b.epoch + 1,
                locks=(None,) * len(b.locks),  # orderly: the lock table is memory only (the broker lock table,
                # orderly.try_lock_batch)
            ),
            clients=tuple(clients),
            budget=s.budget._replace(broker_crashes=s.budget.broker_crashes - 1),
            ghost=self._value_changed(
                self._note_lost(s.ghost, b.offsets, b.flushed, 0, "broker-crash"), range(self.q_count)
            )._replace(
                last_writer=s.ghost.flushed_writer,
                lock_table_lost_at=s.now if self.orderly else s.ghost.lock_table_lost_at,  # orderly
            ),
            history=hist,
        )

    def _broker_restart(self: Model, s: State, a: BrokerRestart) -> State:
        """BrokerRestart (healing). Enabled: broker down. Effect: it loads consumerOffset.json and
        starts its flush timer (first after 10 s); consumers re-register by heartbeat (R3.7, R4.3)."""
        b = s.broker
        if b.up:
            raise ActionNotEnabled(a, "broker is up")
        return s._replace(broker=b._replace(up=True, next_flush=s.now + FLUSH_FIRST_DELAY))

    def _expire_channel(self: Model, s: State, a: ExpireChannel) -> State:
        """ExpireChannel(client) (healing). Enabled: a broker that is up (the master, or its slave) still
        lists a consumer whose process is gone, or the master lists one that is stalled with its last
        heartbeat more than 120 s ago.
        Effect: for a process that is gone, the channel closes (TCP close or 120 s idle expiry) and
        the other members are told to rebalance (R4.3, what triggers a rebalance, RebalanceMixin). For a stalled one the
        broker's idle-channel scan removes and closes the channel without telling anyone (R4.3): requests on the wire
        are lost and its pulls fail."""
        i = a.client
        cl = s.clients[i]
        if not self._channel_expirable(s, i):
            raise ActionNotEnabled(a, "no stale channel for this client")
        if not cl.running:  # the process is gone: every broker listing it closes the channel (slaves)
            return self._leave(s, i, closed=True)
        b = self._unregister(s.broker, i)
        # scanNotActiveChannel: the channel is removed and closed, and nobody is told; what was on the wire
        # is lost and every pull awaiting a reply fails (R4.3)
        hist = s.history
        for item in cl.channel:
            if isinstance(item, Commit):
                hist = History(Event(s.now, "commit-lost", i, item.queue, item.offset, item.cause), hist)
        cl = cl._replace(channel=(), pulls=tuple(p._replace(epoch=-2, result=None) for p in cl.pulls))
        return s._replace(
            broker=b, clients=_put(s.clients, i, cl), history=hist, ghost=self._lost_overtaken(s.ghost, i)
        )

    def _channel_expirable(self: Model, s: State, i: int) -> bool:
        """A broker that is up lists consumer ``i`` although its process is gone, or (master only: the
        slave is not modelled with stalls) its channel is idle past 120 s."""
        b, cl = s.broker, s.clients[i]
        listed = b.up and i in b.registered
        if cl.running:
            return listed and self._channel_idle(s, i)
        return listed or (s.slave is not None and i in s.slave.registered)

    def _notify(self: Model, s: State, slave: bool = False) -> State:
        """NOTIFY_CONSUMER_IDS_CHANGED to every live channel of the group on the master (or the slave:
        its ConsumerManager notifies alike, what triggers a rebalance (RebalanceMixin))."""
        members = s.slave.registered if slave and s.slave is not None else s.broker.registered
        clients = tuple(
            cl._replace(rebalance_requested=True) if cl.running and i in members else cl
            for i, cl in enumerate(s.clients)
        )
        return s._replace(clients=clients)

    def _leave(self: Model, s: State, i: int, closed: bool) -> State:
        """Consumer ``i``'s channel goes from every broker that is up (an unregister at shutdown, a closed
        connection): each tells its remaining channels (what triggers a rebalance, RebalanceMixin). ``closed``: the
        connection closed, which a broker acts on only if it lists the channel; otherwise UNREGISTER_CLIENT, on which a
        broker that knows the group notifies."""
        b, sl = s.broker, s.slave
        if b.up and (i in b.registered if closed else b.registered):
            s = self._notify(s._replace(broker=self._unregister(b, i)))
            if not s.broker.registered:
                s = self._last_consumer_left(s)
        if sl is not None and (i in sl.registered if closed else sl.registered):
            s = self._notify(s._replace(slave=sl._replace(registered=sl.registered - {i})), slave=True)
        return s

    def _last_consumer_left(self: Model, s: State) -> State:
        """The master after a group's last consumer left: ConsumerOffsetManager keeps the group's offsets, so a
        restart resumes from them (R3.1, the start without an offset, RebalanceMixin._compute_pull_from_where)."""
        return s

    def _stored_commit_offset(self: Model, offset: int) -> int:
        """What updateConsumerOffset stores for an UPDATE_CONSUMER_OFFSET: the request's commitOffset (R3.2)."""
        return offset

    def _query_consumer_offset(self: Model, b: Broker, q: int) -> int | None:
        """``b``'s answer to QUERY_CONSUMER_OFFSET for queue ``q`` (``broker_rules.query_consumer_offset``); the
        rebalance asks it and INV-7 checks it."""
        return br.query_consumer_offset(b.offsets[q], b.queues[q], self.config.young_queue_needs_head_in_memory)

    def _list_source(self: Model, s: State) -> Broker | None:
        """The broker a GET_CONSUMER_LIST_BY_GROUP goes to: the master while it is up, else its slave
        (findBrokerAddrByTopic: the master's address when the route has it, else any, the CLUSTERING allocation,
        RebalanceMixin._rebalance_topic)."""
        return s.broker if s.broker.up else s.slave

    def _unregister(self: Model, b: Broker, i: int) -> Broker:
        """The broker forgets consumer ``i``'s channel (and, with stalls tracked, its timestamp)."""
        if b.heartbeat_at:
            b = b._replace(heartbeat_at=_put(b.heartbeat_at, i, 0))
        return b._replace(registered=b.registered - {i})

    def _register(self: Model, s: State, i: int) -> State:
        """A heartbeat registers the consumer with every broker of the route, the slave too (the client timers,
        ConsumerProcessMixin); a new channel makes that broker notify (what triggers a rebalance, RebalanceMixin)."""
        sl = s.slave
        if sl is not None and i not in sl.registered:  # slaves
            s = self._notify(s._replace(slave=sl._replace(registered=sl.registered | {i})), slave=True)
        b = s.broker
        if b.up and self.track_heartbeats:  # the channel's lastUpdateTimestamp (R4.3)
            b = b._replace(heartbeat_at=_put(b.heartbeat_at, i, s.now))
            s = s._replace(broker=b)
        if not b.up or i in b.registered:
            return s
        return self._notify(s._replace(broker=b._replace(registered=b.registered | {i})))

    def _broker_receive(self: Model, s: State, a: BrokerReceive) -> State:
        """BrokerReceive(client). Enabled: the client's connection holds a request. Effect: the
        broker processes the oldest one. UPDATE_CONSUMER_OFFSET stores the value, last writer
        wins (R3.2, R3.4). PULL_MESSAGE first applies its piggy-backed commit when the flag is set
        (the broker is a master; R5.4) and then holds the request until its reply is taken.
        With ``overtakes`` 1 the broker runs the second request first, which overtakes the oldest
        (docs/spec.md, "Thread boundaries": a thread pool per request code); enabled only where that order can change an
        offset (``may_overtake``). The ghost records the overtaken request (``Ghost.overtaken``)."""
        item, rest, victim = self._take_request(s, a)
        s = s._replace(clients=_put(s.clients, a.client, s.clients[a.client]._replace(channel=rest)))
        if item.to_slave:
            return self._slave_receive(s, a.client, item)
        if isinstance(item, Commit):
            offset = self._stored_commit_offset(item.offset)
            return self._land_commit(s, a.client, item.queue, offset, item.pq_uid, item.cause, victim)
        result: PullResult | None
        if not s.broker.registered:
            # No consumer of the group registered (a restarted broker before any heartbeat):
            # SUBSCRIPTION_NOT_EXIST, an early rejection that skips the commit (R5.4).
            result = PullResult(br.PULL_ERROR, (), item.offset)
        else:
            if item.commit_flag:
                s = self._land_commit(s, a.client, item.queue, item.commit_offset, item.pq_uid, "piggyback", victim)
            result = self._pull_result(s, item.queue, item.offset)
            if result.status == br.NO_NEW_MSG:
                result = None  # held for long polling: answered when the client takes the reply
        epoch = s.broker.epoch
        cl = s.clients[a.client]
        pulls = tuple(
            p._replace(epoch=epoch, result=result) if p.pq_uid == item.pq_uid and p.epoch == -1 else p for p in cl.pulls
        )
        return s._replace(clients=_put(s.clients, a.client, cl._replace(pulls=pulls)))

    def _pull_result(self: Model, s: State, q: int, offset: int, from_slave: bool = False) -> PullResult:
        sub = None if q == self.retry_queue else self.config.subscription
        batch = min(self.config.pull_batch_size, br.MAX_TRANSFER_COUNT_ON_MESSAGE_IN_MEMORY)
        if from_slave and s.slave is not None:  # slaves: its own copy and bounds (the pull statuses,
            # broker_rules.pull_result)
            return br.slave_pull_result(s.slave.queues[q], offset, batch, sub, self.config.offset_check_in_slave)
        return br.pull_result(s.broker.queues[q], offset, batch, sub)

    def may_overtake(self: Model, cl: Client) -> bool:
        """BrokerReceive(client, overtakes=1) is enabled: the two oldest requests on the connection both
        carry a commit of one queue (an UPDATE_CONSUMER_OFFSET, or a PULL_MESSAGE with the commit flag) and
        both go to the master. An abstraction (docs/spec.md, "Thread boundaries"): 4.9.8 runs any request on its pool in
        any order, but requests of different queues, or a pull with no commit, commute for every offset the properties
        watch (a pull's result does not read the committed offset), so only these orders are offered; the slave's
        connection stays FIFO (its table has its own property, INV-8s)."""
        if len(cl.channel) < 2:
            return False
        older, newer = cl.channel[0], cl.channel[1]
        return (
            older.queue == newer.queue
            and not older.to_slave
            and not newer.to_slave
            and (isinstance(older, Commit) or older.commit_flag)
            and (isinstance(newer, Commit) or newer.commit_flag)
        )

    def _take_request(
        self: Model, s: State, a: BrokerReceive
    ) -> tuple[Commit | PullRequestMsg, tuple[Commit | PullRequestMsg, ...], Commit | PullRequestMsg | None]:
        """The request BrokerReceive ``a`` runs, the connection without it, and the request it overtakes."""
        cl = s.clients[a.client]
        if not cl.channel:
            raise ActionNotEnabled(a, "nothing on the wire")
        if a.overtakes == 0:
            return cl.channel[0], cl.channel[1:], None
        if a.overtakes != OVERTAKE_WINDOW or not self.may_overtake(cl):
            raise ActionNotEnabled(a, "no second request that may overtake the oldest (both commits of one queue)")
        return cl.channel[1], (cl.channel[0], *cl.channel[2:]), cl.channel[0]

    def _lost_overtaken(self: Model, g: Ghost, client: int) -> Ghost:
        """The oldest request on ``client``'s connection never lands (lost, or the channel closed): it can no
        longer be the overtaken request of ``Ghost.overtaken``, so a later copy of it gets no cause from it."""
        if not g.overtaken or all(mark is None or mark[0] != client for mark in g.overtaken):
            return g
        return g._replace(
            overtaken=tuple(None if mark is not None and mark[0] == client else mark for mark in g.overtaken)
        )

    def _land_commit(
        self: Model,
        s: State,
        client: int,
        q: int,
        offset: int,
        uid: int,
        cause: str,
        overtook: Commit | PullRequestMsg | None = None,
    ) -> State:
        b, g = s.broker, self._value_changed(self._note_committed(s.ghost, q), (q,))
        if overtook is not None:  # the request pools: this commit ran before ``overtook`` (Ghost.overtaken)
            g = g._replace(overtaken=_put(g.overtaken or (None,) * self.q_count, q, (client, overtook)))
        return s._replace(
            broker=b._replace(offsets=_put(b.offsets, q, offset)),
            ghost=g._replace(last_writer=_put(g.last_writer, q, pq_key(client, uid))),
            history=History(Event(s.now, "commit-landed", client, q, offset, cause), s.history),
        )

    def _channel_idle(self: Model, s: State, i: int) -> bool:
        """A stalled consumer, or one whose heartbeat task died, whose channel's lastUpdateTimestamp (its
        last heartbeat to land) is over 120 s old: the broker's idle-channel scan closes it (R4.3)."""
        b = s.broker
        cl = s.clients[i]
        silent = self._stalled(s, cl) or HEARTBEAT_TASK in cl.dead_tasks
        if not silent or not b.heartbeat_at or i not in b.registered:
            return False
        return s.now - b.heartbeat_at[i] > self._channel_expired_timeout()

    def _channel_expired_timeout(self: Model) -> int:
        """scanNotActiveChannel's limit on a channel's age since its lastUpdateTimestamp, in ms (R4.3)."""
        return CHANNEL_EXPIRED_TIMEOUT


# Properties of the broker (INV-7, INV-29, INV-38)
def _broker_answers(m: Model, s: State) -> str | None:
    b = s.broker
    for q in range(m.q_count):
        answer = m._query_consumer_offset(b, q)
        if answer is not None and answer < 0:
            return f"queue {q}: QUERY_CONSUMER_OFFSET answers SUCCESS({answer})"
        if b.offsets[q] is not None and answer != b.offsets[q] and b.offsets[q] >= 0:  # type: ignore[operator]
            return f"queue {q}: stored {b.offsets[q]} but answered {answer}"
    return None


BROKER_ANSWERS = Invariant(
    "INV-7",
    "broker_answers",
    "QUERY_CONSUMER_OFFSET answers a stored offset, 0 for a young queue, or NOT_FOUND; never a negative SUCCESS.",
    "R3.3, R3.5",
    "A negative start offset sends the client to OFFSET_ILLEGAL and minOffset (RMQ-14).",
    _broker_answers,
)


def _scheduled_copies_reach_the_retry_queue(m: Model, s: State, a: Action, t: State) -> str | None:
    # Read from the step and the schedule's own order, never from the model's delivery helper (which a planted bug
    # overrides). SCHEDULE_TOPIC_XXXX is a topic of the commit log: a crash, a restart, a slave's promotion or any
    # client action keeps what it holds. Only the master's ScheduleMessageService takes a message out, when its delay
    # is due, and stores it in its real topic with a new store time (messageTimeup); in the model the real topic of a
    # CLUSTERING send-back is the group's one retry queue, and nothing else writes to that queue (producers write to
    # the topic's queues). A BROADCASTING copy (cleanExpiredMsg's) has no retry queue to reach and only leaves the
    # schedule.
    before, after = s.broker, t.broker
    if before is after:
        return None
    rq = m.retry_queue
    old = before.queues[rq].messages if rq is not None else ()
    new = after.queues[rq].messages if rq is not None else ()
    if new[: len(old)] != old:
        return f"{type(a).__name__}: the retry queue's stored messages changed"
    arrived = new[len(old) :]
    if before.scheduled == after.scheduled:
        if arrived:
            return f"{type(a).__name__}: {arrived[0].origin} reached the retry queue without leaving the schedule"
        return None
    gone = list(before.scheduled)
    for e in after.scheduled:
        if e in gone:
            gone.remove(e)
    if not gone:
        return None  # a send-back only added to the schedule
    e = gone[0]
    if not isinstance(a, DeliverScheduled) or len(gone) > 1 or e != before.scheduled[0]:
        return f"{type(a).__name__}: the scheduled copy of {e.message.origin} left the schedule undelivered"
    if not before.up or e.due > s.now:
        return f"the scheduled copy of {e.message.origin} was delivered before its delay (due {e.due}, now {s.now})"
    if rq is None:
        return None if not arrived else f"{arrived[0].origin} reached a retry queue the group does not have"
    if arrived != (e.message._replace(store_time=t.now),):
        got = "nothing" if not arrived else ", ".join(str(x) for x in arrived)
        return f"the scheduled copy of {e.message.origin} was due at {e.due}; the retry queue received {got}"
    return None


SCHEDULED_COPIES_REACH_THE_RETRY_QUEUE = ActionProperty(
    "INV-29",
    "scheduled_copies_reach_the_retry_queue",
    "A message waiting in the broker's schedule leaves it only when its delay is due and the master is up, the "
    "earliest first, and then lands, unchanged but for its store time, in the group's retry queue (a BROADCASTING "
    "copy has none); nothing else reaches the retry queue and nothing there changes.",
    "R7.5, R7.7",
    "The original's offset was committed when its send-back succeeded: the scheduled copy is the message's only "
    "way back to the listener, so a copy lost, altered or never delivered is a message lost, and at-least-once, "
    "which follows the original, does not see it.",
    _scheduled_copies_reach_the_retry_queue,
)


HEARTBEAT_TASK: Final = "sendHeartbeatToAllBroker"  # the client's heartbeat task, as TaskDies names it


def _channels_expire_when_silent(m: Model, s: State, a: Action, t: State) -> str | None:
    # Read from the client's own state (a Stall, a dead heartbeat task) and the channel table, never from the model's
    # idle predicate (which a planted bug overrides). R4.3: a heartbeat that lands refreshes its channel's
    # lastUpdateTimestamp (ConsumerGroupInfo#updateChannel), and scanNotActiveChannel closes only a channel whose
    # lastUpdateTimestamp is more than 120 s old, which a consumer whose heartbeats run every 30 s never has. The close
    # of a consumer whose process is gone (the TCP close, or Netty's idle close) is not the scan and is not judged.
    from rmqspec.spec.consumer_process import Heartbeat  # the consumer process imports this module

    i = getattr(a, "client", -1)
    if isinstance(a, Heartbeat):
        stamps = t.broker.heartbeat_at
        if s.broker.up and s.clients[i].running and stamps and stamps[i] != s.now:
            return f"client {i}: its heartbeat landed at {s.now}, but its channel's lastUpdateTimestamp is {stamps[i]}"
        return None
    if not isinstance(a, ExpireChannel) or not s.clients[i].running:
        return None
    cl = s.clients[i]
    stalled = cl.stalled_until is not None and s.now < cl.stalled_until
    if not stalled and HEARTBEAT_TASK not in cl.dead_tasks:
        return f"client {i}: the idle-channel scan closed the channel of a running consumer whose heartbeats still run"
    stamps = s.broker.heartbeat_at
    if stamps and s.now - stamps[i] <= CHANNEL_EXPIRED_TIMEOUT:
        return (
            f"client {i}: the idle-channel scan closed its channel at {s.now}, its last heartbeat at {stamps[i]}: "
            f"not more than {CHANNEL_EXPIRED_TIMEOUT} ms before"
        )
    return None


CHANNELS_EXPIRE_WHEN_SILENT = ActionProperty(
    "INV-38",
    "channels_expire_when_silent",
    "A heartbeat that lands stamps its channel's lastUpdateTimestamp, and the broker's idle-channel scan closes the "
    "channel of a running consumer only when the consumer is silent (paused, or its heartbeat task dead) and its last "
    "heartbeat is more than 120 s old.",
    "R4.3, R9.3",
    "The scan tells nobody: the consumer drops out of the group's list until its next heartbeat makes a new channel, "
    "its requests on the wire are lost and a rebalance meanwhile deals its queues to the others; a handover that at-"
    "least-once allows, so no delivery property sees a live consumer expired.",
    _channels_expire_when_silent,
)
