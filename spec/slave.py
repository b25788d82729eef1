"""The master's slave: HA replication, ``SlaveSynchronize`` and the requests it serves while the master is down.

RocketMQ classes: ``SlaveSynchronize#syncConsumerOffset`` (GET_ALL_CONSUMER_OFFSET and ``putAll``, R3.8,
RMQ-25 (2)), the HA service copying the commit log, and the slave's own ``ConsumerManageProcessor`` and
``PullMessageProcessor`` (a commit is stored as on the master, ``BrokerMixin._broker_receive``; a pull is
answered from the slave's copy with no commit flag: the flag is set in ``PullMixin._send_pull``, the answer is
``broker_rules.slave_pull_result``). Clients reach the slave when the master is down (R2.4): offset queries, commits
(``ConsumerProcessMixin._send_commit``), pulls and consumer lists (``RebalanceMixin._rebalance_topic``). This
module decides the routing; those transitions apply it.

Its actions, before the class: ``SlaveReplicate``, ``SlaveSync``.

Its properties, after the class: INV-8s (the slave's table falls only through SlaveSync, another pq's commit
or the OFFSET_ILLEGAL fix-up) and INV-21 (a slave corrects OFFSET_ILLEGAL only to the master's bounds).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from rmqspec.spec import broker_rules as br
from rmqspec.spec.committed_offset import _by_offset_illegal_fix, _landed_commit
from rmqspec.spec.enabling import ActionNotEnabled
from rmqspec.spec.property_types import ActionProperty
from rmqspec.spec.pull import ReceivePull
from rmqspec.spec.state import (
    Commit,
    Event,
    History,
    PullRequestMsg,
    PullResult,
    State,
    pq_key,
)
from rmqspec.spec.state import put_at as _put

if TYPE_CHECKING:
    from rmqspec.spec.actions import Action
    from rmqspec.spec.model import Model

SLAVE_SYNC_WRITER: Final = -2  # ghost writer key of the slave's table entries that SlaveSync copied


# Actions of the slave, each handled by its transition ``_<snake_case name>`` below
@dataclass(frozen=True, slots=True)
class SlaveReplicate:
    """The slave's copy of one queue catches up with the master's commit log (HA replication; slaves,
    ``Config.slave``). Free: replication only ever lags."""

    queue: int


@dataclass(frozen=True, slots=True)
class SlaveSync:
    """The slave's SlaveSynchronize timer fires: it copies the master's offset table (R3.8)."""


class SlaveMixin:
    """``Model``'s transitions and helpers for the master's slave; see the module docstring."""

    def _slave_receive(self: Model, s: State, i: int, item: Commit | PullRequestMsg) -> State:
        """BrokerReceive of a request sent to the slave while the master was down. UPDATE_CONSUMER_OFFSET
        is stored: the 4.9.8 handler checks no role (the UPDATE_CONSUMER_OFFSET handler, BrokerMixin._broker_receive).
        PULL_MESSAGE is answered from the slave's copy of the commit log; its commit flag is clear (the pull's sysFlag,
        PullMixin._send_pull), and a slave would not store it anyway (the broker's pull handler,
        BrokerMixin._broker_receive). A group the slave has no heartbeat of is SUBSCRIPTION_NOT_EXIST, as on the master;
        a 5.x slave refuses every pull (``Config.slave_serves_pulls``). Either error is an exception to the client (3
        s)."""
        sl = s.slave
        assert sl is not None
        if isinstance(item, Commit):
            g = self._note_committed(s.ghost, item.queue)
            if s.broker.offsets[item.queue] is None:  # the slave never syncs its table back (R3.8, RMQ-25 (2))
                lost = g.offset_lost or ("",) * len(g.handled)
                g = g._replace(offset_lost=_put(lost, item.queue, "slave-only-commit"))
            return s._replace(
                slave=sl._replace(offsets=_put(sl.offsets, item.queue, item.offset)),
                ghost=g._replace(slave_last_writer=_put(g.slave_last_writer, item.queue, pq_key(i, item.pq_uid))),
                history=History(
                    Event(s.now, "commit-landed-on-slave", i, item.queue, item.offset, item.cause), s.history
                ),
            )
        result: PullResult | None = PullResult(br.PULL_ERROR, (), item.offset)
        if sl.registered and self.config.slave_serves_pulls:  # 5.x rejects the pull: SYSTEM_BUSY
            result = self._pull_result(s, item.queue, item.offset, from_slave=True)
            if result.status == br.NO_NEW_MSG:
                result = None  # held for long polling on the slave, answered as messages are copied
        cl = s.clients[i]
        pulls = tuple(
            p._replace(epoch=0, result=result) if p.pq_uid == item.pq_uid and p.epoch == -1 else p for p in cl.pulls
        )
        return s._replace(clients=_put(s.clients, i, cl._replace(pulls=pulls)))

    def _slave_replicate(self: Model, s: State, a: SlaveReplicate) -> State:
        """SlaveReplicate(queue) (slaves; free). Enabled: the master is up and the slave's copy of ``queue``
        differs from the master's. Effect: the copy catches up with the master's commit log (HA): its
        messages, its minOffset (the model lets the slave's retention follow the master's) and whether
        message 0 is in page cache (the offset query's answer, broker_rules.query_consumer_offset). Until it runs, the
        slave lags; a master crash freezes the lag."""
        q, b, sl = a.queue, s.broker, s.slave
        if sl is None or not b.up or not 0 <= q < self.q_count or sl.queues[q] == b.queues[q]:
            raise ActionNotEnabled(a, "no slave, master down, or the slave's copy is current")
        return s._replace(slave=sl._replace(queues=_put(sl.queues, q, b.queues[q])))

    def _slave_sync(self: Model, s: State, a: SlaveSync) -> State:
        """SlaveSync (slaves; a timer: 4.9.8 first 3 s after start, then every 10 s; 5.x at 61 s, then every
        63 s, ``Config.slave_sync_times``). Enabled: due. Effect, when the master is up:
        GET_ALL_CONSUMER_OFFSET returns the master's memory table and the slave applies it with ``putAll``
        on its ``topic@group`` map: for every topic whose key the master has, the
        slave's per-queue map is replaced by the master's, so a value the slave took while the master was
        down is overwritten (RMQ-25 (2)); a key only the slave has survives (R3.8). A master that is down
        answers nothing and the slave keeps its table."""
        b, sl = s.broker, s.slave
        if sl is None or sl.next_sync is None or sl.next_sync > s.now:
            raise ActionNotEnabled(a, "no slave sync due")
        sl = sl._replace(next_sync=sl.next_sync + self.config.slave_sync_times[1])
        if not b.up:
            return s._replace(slave=sl)
        offsets, writers = list(sl.offsets), list(s.ghost.slave_last_writer)
        hist = s.history
        topics = [self.topic_queues] + ([(self.retry_queue,)] if self.retry_queue is not None else [])
        for queues in topics:
            if all(b.offsets[q] is None for q in queues):
                continue  # no "topic@group" key on the master: the slave's own survives
            for q in queues:
                value = b.offsets[q]
                if offsets[q] != value:
                    hist = History(
                        Event(s.now, "slave-sync", -1, q, -1 if value is None else value, "slave-sync"), hist
                    )
                offsets[q], writers[q] = value, SLAVE_SYNC_WRITER
        return s._replace(
            slave=sl._replace(offsets=tuple(offsets)),
            ghost=s.ghost._replace(slave_last_writer=tuple(writers)),
            history=hist,
        )


# Properties of the slave (INV-8s, INV-21, INV-32)
def _slave_decrease_declared(m: Model, s: State, a: Action, t: State) -> str | None:
    if s.slave is None or t.slave is None:
        return None
    for q in range(m.q_count):
        old, new = s.slave.offsets[q], t.slave.offsets[q]
        if old is None or new is None or new >= old:
            continue
        if isinstance(a, SlaveSync):
            if m.tolerate_slave_sync:
                continue  # RMQ-25 (2): the master's older value wins (SLAVE_ANOMALIES)
            return f"queue {q}: SlaveSync lowered the slave's offset {old} -> {new} (the master's older value)"
        if _by_offset_illegal_fix(m, s, a, t, q):
            continue
        landed = _landed_commit(s, a, q)
        if landed is not None and landed[0] != s.ghost.slave_last_writer[q]:
            continue  # a stale or overlapping owner's late commit, as on the master (last writer wins
            # (BrokerMixin._land_commit), S5)
        return f"queue {q}: the slave's offset fell {old} -> {new} by {type(a).__name__}, written by the same pq"
    return None


SLAVE_DECREASE_DECLARED = ActionProperty(
    "INV-8s",
    "slave_decrease_declared",
    "The slave's offset table falls only through SlaveSync copying the master (tolerated by default, "
    "RMQ-25 (2)), a commit from a different pq than wrote it, or the OFFSET_ILLEGAL fix-up.",
    "R3.4, R3.8, R5.7",
    "While the master is down the slave's table is where a restart or a handover resumes (R2.4); a decrease "
    "there replays work, and one by SlaveSync undoes what consumers committed during the outage.",
    _slave_decrease_declared,
)


def _correction_from_master_bounds(m: Model, s: State, a: Action, t: State) -> str | None:
    if not isinstance(a, ReceivePull) or s.slave is None:
        return None
    pull = next((p for p in s.clients[a.client].pulls if p.pq_uid == a.pq_uid and p.epoch != -1), None)
    if pull is None or not pull.from_slave:
        return None
    result = pull.result if pull.result is not None else m._pull_result(s, pull.queue, pull.offset, True)
    if result.status != br.OFFSET_ILLEGAL:
        return None
    master = m._pull_result(s, pull.queue, pull.offset)
    if master.status == br.OFFSET_ILLEGAL and master.next_begin == result.next_begin:
        return None
    queue = s.broker.queues[pull.queue]
    return (
        f"client {a.client} queue {pull.queue}: the slave corrected offset {pull.offset} to {result.next_begin} from "
        f"its own bounds; the master's commit log holds [{queue.min_offset}, {queue.max_offset}) "
        f"({master.status} there)"
    )


CORRECTION_FROM_MASTER_BOUNDS = ActionProperty(
    "INV-21",
    "correction_from_master_bounds",
    "A pull served by a slave corrects the client's offset (OFFSET_ILLEGAL) only to the bound the master's "
    "commit log gives for it.",
    "R5.5, R5.7",
    "A lagging slave that corrects from its own bounds moves the consumer, and then its committed offset, "
    "backwards or forwards to a position the master never had (RMQ-17; I4 of docs/known_bugs.md); offsetCheckInSlave "
    "= false exists to stop it.",
    _correction_from_master_bounds,
)


def _slave_sync_copies_the_master(m: Model, s: State, a: Action, t: State) -> str | None:
    # Read from the two tables before the step, never from the model's sync helper. A SlaveSync with the master up
    # applies GET_ALL_CONSUMER_OFFSET with putAll (R3.8): every topic@group key the master has (the topic's queues,
    # the retry queue) is the master's, whole, on the slave afterwards; a key only the slave has stays. With the
    # master down the call fails and the slave's table stays as it was.
    if not isinstance(a, SlaveSync) or s.slave is None or t.slave is None:
        return None
    master, before, after = s.broker, s.slave.offsets, t.slave.offsets
    if not master.up:
        return None if after == before else "SlaveSync with the master down changed the slave's table"
    keys = [m.topic_queues] + ([(m.retry_queue,)] if m.retry_queue is not None else [])
    for queues in keys:
        held = any(master.offsets[q] is not None for q in queues)
        for q in queues:
            expected = master.offsets[q] if held else before[q]
            if after[q] != expected:
                return f"SlaveSync: queue {q} on the slave is {after[q]}, the master's table has {master.offsets[q]}"
    return None


SLAVE_SYNC_COPIES_THE_MASTER = ActionProperty(
    "INV-32",
    "slave_sync_copies_the_master",
    "A slave sync with the master up leaves on the slave, for every topic@group key the master has, the master's "
    "offsets of that key; keys only the slave has stay; with the master down nothing changes.",
    "R3.8",
    "The slave answers the offset queries while the master is down: a table it never copied positions queues by "
    "consumeFromWhere or by stale offsets, which skips (LAST) or replays (FIRST) what the group had committed.",
    _slave_sync_copies_the_master,
)
