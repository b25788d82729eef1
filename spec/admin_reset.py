"""The admin offset reset: 4.9.8's client-driven reset (R3.10a) and 5.x's server-side reset (R3.10b).

RocketMQ classes: ``ResetOffsetByTimeCommand`` / ``Broker2Client#resetOffset`` (the broker side, by offset
or by timestamp), ``ClientRemotingProcessor#resetOffset`` and ``MQClientInstance#resetOffset`` (4.9.8: the
consumer pauses, drops its pqs, sleeps 10 s, writes the new offsets through its offset store and resumes;
R3.10a, persistAll (ConsumerProcessMixin._persist_all), the client timers (ConsumerProcessMixin)), 5.x's
``ConsumerOffsetManager`` reset table read by the next pull (R3.10b, the broker's pull handler
(BrokerMixin._broker_receive), the pull-status handling (PullMixin._receive_pull), searchOffset
(broker_rules.search_offset)). The reset changes shared transitions (the broker's receive and crash, the pull, the
rebalance, the pull reply, persistAll); those wrappers are installed only when ``Config.admin_resets > 0``.

Its actions, before the class: ``AdminReset``, ``ClientResetReceive``, ``ClientResetWake``.

Its property, after the class: INV-18 (a completed reset takes effect on the next new pq of the queue). A
reset is also a declared cause of a falling broker offset (``committed_offset.py``, INV-8r) and of a falling
local offset file (``consumer_process.py``, INV-6c): those modules apply the reset rules decided here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from rmqspec.spec import broker_rules as br
from rmqspec.spec.broker import BrokerCrash, BrokerReceive
from rmqspec.spec.enabling import ActionNotEnabled
from rmqspec.spec.property_types import ActionProperty
from rmqspec.spec.pull import ReceivePull, SendPull
from rmqspec.spec.rebalance import REBALANCE_WAIT, Rebalance, RebalanceQueryError
from rmqspec.spec.state import (
    PULL_READY,
    BrokerQueue,
    Commit,
    Event,
    History,
    PullRequestMsg,
    PullResult,
    State,
    pq_key,
)
from rmqspec.spec.state import lowest_offset as _low
from rmqspec.spec.state import put_at as _put

if TYPE_CHECKING:
    from rmqspec.spec.actions import Action
    from rmqspec.spec.model import Model

RESET_SLEEP: Final = 10_000  # MQClientInstance.resetOffset's Thread.sleep(10000) (R3.10a)
PULL_DELAY_WHEN_SUSPEND: Final = 1_000  # PULL_TIME_DELAY_MILLS_WHEN_SUSPEND (R3.10a)
ADMIN_WRITER: Final = -1  # ghost writer key of the admin's own table writes
# commit causes that apply a reset (the 4.9.8 client's persist; 5.x adoption via the pull-status handling,
# PullMixin._receive_pull)
RESET_APPLY_CAUSES: Final = ("admin-reset-client", "offset-illegal-fix")


def _old_tree(s: State, i: int, q: int, uid: int) -> int:
    pq = s.clients[i].pqs[q]
    return pq.tree if pq is not None and pq.uid == uid else 0


# Actions of the admin reset, each handled by its transition ``_<snake_case name>`` below
@dataclass(frozen=True, slots=True)
class AdminReset:
    """An admin resets the group's offset of topic queue ``queue`` (budgeted, ``Config.admin_resets``):
    to the offset ``target``, or, with ``by_timestamp``, to the offset the broker's searchOffset finds
    for the timestamp ``target`` (resetOffsetByTimestamp). Forced (``isForce``), as mqadmin sends it."""

    queue: int
    target: int
    by_timestamp: bool


@dataclass(frozen=True, slots=True)
class ClientResetReceive:
    """4.9.8: the oldest RESET_CONSUMER_CLIENT_OFFSET for ``client`` arrives and
    MQClientInstance.resetOffset starts: suspend, drop the pqs, then sleep 10 s."""

    client: int


@dataclass(frozen=True, slots=True)
class ClientResetWake:
    """4.9.8: resetOffset's 10 s sleep ends (a timer): updateOffset, persist, remove pqs, resume.

    ``late_reply`` (a pq uid, -1 for none): the reply of that held pq's pull, NO_NEW_MSG or NO_MATCHED_MSG,
    runs its callback on another thread between the reset's ``updateOffset`` of the pq's queue and its
    ``persist`` (``MQClientInstance#resetOffset`` 1094-1095; docs/spec.md, "What is real, ranked"):
    ``correctTagsOffset`` raises memory above the target, and the persist sends the raised value: a lost reset, and a
    skip of what the cleared pq held unconsumed."""

    client: int
    late_reply: int = -1


class AdminResetMixin:
    """``Model``'s transitions and wrappers for the admin offset reset; see the module docstring."""

    # The reset's effects on shared transitions (pause, the pending reset, the crash) are wrappers
    # installed here only when Config.admin_resets > 0, so every other configuration runs the
    # unwrapped transitions and keeps its exact state space.
    def _reset_init(self: Model) -> None:
        self.reset_on = self.config.admin_resets > 0 and self.clustering
        # INV-18's declared event "a commit from a pq older than the reset lands after it". Tests set it
        # false to show what it covers: in 5.x that includes R3.10b's window (docs/spec.md, section admin_reset).
        self.reset_declare_stale = True
        self._steps[AdminReset] = self._admin_reset
        self._steps[ClientResetReceive] = self._client_reset_receive
        self._steps[ClientResetWake] = self._client_reset_wake
        self._reset_wrapped: dict[type, Callable[[State, Any], State]] = {}
        if not self.reset_on:
            return
        wrappers: dict[type, Callable[[State, Any], State]] = {
            BrokerReceive: self._reset_broker_receive,
            BrokerCrash: self._reset_broker_crash,
            SendPull: self._reset_send_pull,
            Rebalance: self._reset_rebalance,
            RebalanceQueryError: self._reset_rebalance,
            ReceivePull: self._reset_receive_pull,
        }
        for kind, wrapper in wrappers.items():
            self._reset_wrapped[kind] = self._steps[kind]
            self._steps[kind] = wrapper

    def _per_q(self: Model, values: tuple[Any, ...]) -> tuple[Any, ...]:
        """A per-queue ghost or broker tuple whose default () means "None for every queue"."""
        return values if values else (None,) * self.q_count

    def reset_stamps(self: Model, queue: BrokerQueue) -> list[int]:
        """The timestamps an AdminReset by timestamp may name: the store times of the readable messages."""
        return sorted({msg.store_time for msg in queue.messages[queue.min_offset :]})

    def _reset_enabled(self: Model, s: State) -> list[Action]:
        if not self.reset_on:
            return []
        out: list[Action] = []
        b = s.broker
        if b.up and s.budget.admin_resets > 0:
            for q in self.topic_queues:
                if b.offsets[q] is None:
                    continue
                queue = b.queues[q]
                out.extend(AdminReset(q, o, False) for o in range(queue.min_offset, queue.max_offset + 1))
                out.extend(AdminReset(q, t, True) for t in self.reset_stamps(queue))
        for i, cl in enumerate(s.clients):
            if not cl.running or self._stalled(s, cl):
                continue
            if cl.reset_inbox and cl.reset_wake is None:
                out.append(ClientResetReceive(i))
            if cl.reset_wake is not None and cl.reset_wake <= s.now:
                out.append(ClientResetWake(i))
                out.extend(ClientResetWake(i, uid) for uid in self._late_replies(s, i))  # docs/spec.md, "What is real,
                # ranked"
        return out

    def _late_replies(self: Model, s: State, i: int) -> list[int]:
        """The pq uids whose answered pull could land inside client ``i``'s waking reset: a pq the reset holds
        for a queue of its table, with its reply NO_NEW_MSG or NO_MATCHED_MSG (or held, answered on arrival),
        the replies whose ``correctTagsOffset`` moves memory (the pull-status handling (PullMixin._receive_pull), what
        drops a pq (PullMixin))."""
        cl = s.clients[i]
        targets = {q for q, _ in cl.reset_table}
        held = {uid for q, uid in cl.reset_held if q in targets}
        return [
            p.pq_uid
            for p in cl.pulls
            if p.pq_uid in held
            and p.epoch >= 0
            and (p.result is None or p.result.status in (br.NO_NEW_MSG, br.NO_MATCHED_MSG))
        ]

    def _admin_reset(self: Model, s: State, a: AdminReset) -> State:
        """AdminReset(queue, target, by_timestamp) (budgeted, CLUSTERING). Enabled: the broker is up, the
        group has an offset for that topic queue (R3.10a step 2 fails the whole reset with SYSTEM_ERROR
        otherwise; the model asks it of 5.x too, so that resets strike mid-run), ``admin_resets`` budget
        is left, and the target is an offset in [minOffset, maxOffset] or the store time of a readable
        message, which searchOffset turns into an offset (searchOffset, broker_rules.search_offset). Forced, as mqadmin
        sends it.

        4.9.8 (R3.10a): Broker2Client.resetOffset does not write the broker's table; it pushes
        RESET_CONSUMER_CLIENT_OFFSET oneway to every online channel of the group (lost for a process
        that is gone, or when the connection breaks). With no consumer online (CONSUMER_NOT_ONLINE)
        mqadmin falls back to the old method, UPDATE_CONSUMER_OFFSET from the admin, which is where
        the reset completes. 5.x (R3.10b, ``Config.server_side_reset``): assignResetOffset records
        the pending reset and overwrites the table; the reset completes here."""
        q = a.queue
        b = s.broker
        if not self.reset_on or not 0 <= q < self.config.queues or not b.up or s.budget.admin_resets <= 0:
            raise ActionNotEnabled(a, "no admin reset possible (mode, broker down, budget or queue)")
        if b.offsets[q] is None:
            raise ActionNotEnabled(a, "the group has no offset for this queue: SYSTEM_ERROR (R3.10a step 2)")
        queue = b.queues[q]
        if a.by_timestamp:
            if a.target not in self.reset_stamps(queue):
                raise ActionNotEnabled(a, "not the store time of a readable message")
            target = br.search_offset(queue, a.target)
        else:
            if not queue.min_offset <= a.target <= queue.max_offset:
                raise ActionNotEnabled(a, "target outside [minOffset, maxOffset]")
            target = a.target
        g = s.ghost
        # Semantics INV-9: what lies below an explicit reset's target is a declared skip (a forward reset
        # skips it on purpose; a backward one replays from the target, not before it).
        jumped = ((1 << target) - 1) & ~(g.handled[q] | g.skipped[q]) & ~((1 << queue.min_offset) - 1)
        g = g._replace(skipped=_put(g.skipped, q, g.skipped[q] | ((1 << target) - 1)))
        if jumped:
            g = g._replace(skips=(*g.skips, (q, "admin-reset", jumped)))
        targets = g.reset_targets or (0,) * self.q_count
        g = g._replace(
            reset_targets=_put(targets, q, targets[q] | 1 << target),
            reset_expect=_put(self._per_q(g.reset_expect), q, None),  # a later reset replaces the expectation
        )
        how = f"by timestamp {a.target}" if a.by_timestamp else "by offset"
        s = s._replace(
            budget=s.budget._replace(admin_resets=s.budget.admin_resets - 1),
            ghost=g,
            history=History(Event(s.now, "admin-reset", -1, q, target, how), s.history),
        )
        if self.config.server_side_reset:
            pending = _put(self._per_q(b.reset_pending), q, target)
            s = s._replace(broker=b._replace(reset_pending=pending))
            return self._reset_completed(self._admin_write(s, q, target), q, target, ())
        if not b.registered:  # CONSUMER_NOT_ONLINE: the admin's old method writes the broker directly
            return self._reset_completed(self._admin_write(s, q, target), q, target, ())
        clients = tuple(
            cl._replace(reset_inbox=(*cl.reset_inbox, (q, target))) if i in b.registered and cl.running else cl
            for i, cl in enumerate(s.clients)
        )
        return s._replace(clients=clients)

    def _admin_write(self: Model, s: State, q: int, target: int) -> State:
        """The admin's own write of the broker table (the old method's UPDATE_CONSUMER_OFFSET, or
        5.x assignResetOffset); its writer key is -1, no pq's."""
        b, g = s.broker, self._value_changed(self._note_committed(s.ghost, q), (q,))
        return s._replace(
            broker=b._replace(offsets=_put(b.offsets, q, target)),
            ghost=g._replace(last_writer=_put(g.last_writer, q, ADMIN_WRITER)),
            history=History(Event(s.now, "admin-write", -1, q, target, "admin-reset"), s.history),
        )

    def _reset_completed(self: Model, s: State, q: int, target: int, extra: tuple[int, ...]) -> State:
        """Ghost: the reset of ``q`` to ``target`` completed; INV-18 now expects the first batch that a
        pq created from here on receives to start at ``target`` (or minOffset, if higher). The pqs
        alive now, those whose commits are on the wire now, and ``extra`` (the resetting client's dropped
        one) are the old owners', exempt. A
        later commit of an old owner's pq is a declared event, except from ``extra``: the resetting
        client knew of the reset before it completed, so its older commits landing late are RMQ-26's
        race (b), not a stale owner."""
        old = set(extra)
        for i, cl in enumerate(s.clients):
            pq = cl.pqs[q]
            if pq is not None:
                old.add(pq_key(i, pq.uid))
            old.update(pq_key(i, uid) for hq, uid in cl.reset_held if hq == q)
            old.update(pq_key(i, item.pq_uid) for item in cl.channel if item.queue == q)  # sent before completion
        g = s.ghost
        expect = _put(self._per_q(g.reset_expect), q, (target, tuple(sorted(old)), extra))
        return s._replace(
            ghost=g._replace(reset_expect=expect),
            history=History(Event(s.now, "reset-completed", -1, q, target, "admin-reset"), s.history),
        )

    def _client_reset_receive(self: Model, s: State, a: ClientResetReceive) -> State:
        """ClientResetReceive(client) (4.9.8). Enabled: running, a RESET_CONSUMER_CLIENT_OFFSET is on
        the wire to it, and no earlier reset sleeps (resetOffset is synchronized). Effect:
        MQClientInstance.resetOffset steps 1-3 (R3.10a): suspend() (pause); every owned pq of the
        table's queues is dropped and cleared but stays in processQueueTable (``reset_held``); then
        the 10 s sleep starts, ending at ClientResetWake. While paused, pullMessage re-queues itself
        after 1 s and doRebalance does nothing; the persist timer still runs over the whole table."""
        i = a.client
        cl = s.clients[i]
        if not self.reset_on or not cl.running or not cl.reset_inbox or cl.reset_wake is not None:
            raise ActionNotEnabled(a, "no reset for this client, or one sleeps already")
        table, rest = cl.reset_inbox[:1], cl.reset_inbox[1:]
        pqs, pulls, held = cl.pqs, cl.pulls, list(cl.reset_held)
        for q, _ in table:
            pq = pqs[q]
            if pq is None:
                continue
            held.append((q, pq.uid))
            pqs = _put(pqs, q, None)  # dropped and clear()ed: msgCount is 0, which correctTagsOffset reads
            pulls = tuple(p._replace(dropped_empty=True) if p.pq_uid == pq.uid else p for p in pulls)
        cl = cl._replace(
            reset_inbox=rest,
            paused=True,
            reset_table=table,
            reset_wake=s.now + RESET_SLEEP,
            reset_held=tuple(held),
            pqs=pqs,
            pulls=pulls,
            view=None if held != list(cl.reset_held) else cl.view,  # no longer every allocated queue placed
        )
        return s._replace(clients=_put(s.clients, i, cl))

    def _client_reset_wake(self: Model, s: State, a: ClientResetWake) -> State:
        """ClientResetWake(client) (4.9.8, a timer). Enabled: running and the 10 s sleep is over.
        Effect: resetOffset steps 4-5 (R3.10a): for each held queue of the table,
        updateOffset(mq, offset, increaseOnly=false), removeUnnecessaryMessageQueue (persist oneway,
        then removeOffset) and removal from the table; then resume(): pause = false and
        doRebalance now, which reads the broker (READ_FROM_STORE) whether or not the persist has
        landed: the race of RMQ-26. The reset completes here for each queue the client held.

        ``late_reply`` names a held pq whose answered NO_NEW_MSG / NO_MATCHED_MSG pull is taken between that
        queue's updateOffset and its persist (the callback thread, docs/spec.md, "What is real, ranked"):
        ``correctTagsOffset`` (msgCount 0 after the clear) raises memory with increaseOnly, and the persist sends the
        raised value instead of the target: the reset is lost (INV-18), and what the cleared pq held unconsumed is
        skipped (INV-9)."""
        i = a.client
        cl = s.clients[i]
        if not self.reset_on or not cl.running or cl.reset_wake is None or cl.reset_wake > s.now:
            raise ActionNotEnabled(a, "no reset sleep over")
        if a.late_reply != -1 and a.late_reply not in self._late_replies(s, i):
            raise ActionNotEnabled(a, "no answered NO_NEW_MSG or NO_MATCHED_MSG pull of a pq this reset holds")
        held = dict(cl.reset_held)
        done: list[tuple[int, int, int]] = []
        for q, offset in cl.reset_table:
            uid = held.get(q)
            if uid is None:
                continue  # not in processQueueTable: this client does nothing for q
            s = self._reset_update_offset(s, i, q, self._reset_value(offset))
            if uid == a.late_reply:  # docs/spec.md, "What is real, ranked": the pull callback runs between updateOffset
                # and persist
                s = self._receive_pull(s, ReceivePull(i, uid))
            s = self._persist_one(s, i, q, uid, "admin-reset-client")
            s = s._replace(clients=_put(s.clients, i, self._remove_offset(s.clients[i], q)))
            done.append((q, offset, uid))
        cl = s.clients[i]
        remaining = tuple((q, uid) for q, uid in cl.reset_held if all(q != d[0] for d in done))
        cl = cl._replace(paused=False, reset_table=(), reset_wake=None, reset_held=remaining, rebalance_requested=True)
        if done:
            cl = cl._replace(view=None)
        s = s._replace(clients=_put(s.clients, i, cl))
        for q, offset, uid in done:
            s = self._reset_completed(s, q, offset, (pq_key(i, uid),))
        return s

    def _reset_broker_receive(self: Model, s: State, a: BrokerReceive) -> State:
        """BrokerReceive with a pending server-side reset of the request's queue (5.x, R3.10b):
        UPDATE_CONSUMER_OFFSET is ignored (answered SUCCESS, "Offset has been previously reset",
        the UPDATE_CONSUMER_OFFSET handler (BrokerMixin._broker_receive)); PULL_MESSAGE takes the pending entry
        (queryThenEraseResetOffset) and is answered OFFSET_RESET, i.e. PULL_OFFSET_MOVED with nextBeginOffset = the
        reset offset, which the client's OFFSET_ILLEGAL path adopts (the pull-status handling, PullMixin._receive_pull);
        tryCommitOffset runs after the erase (DefaultPullMessageResultHandler.handle), so a flagged piggy-back lands
        over the reset: the window of R3.10b. Everything else is BrokerReceive as before."""
        cl = s.clients[a.client]
        pending = self._per_q(s.broker.reset_pending)
        item = cl.channel[a.overtakes] if 0 <= a.overtakes < len(cl.channel) else None
        if item is None or pending[item.queue] is None:
            return self._reset_note_stale(s, self._reset_wrapped[BrokerReceive](s, a), a.client, item)
        item, rest, victim = self._take_request(s, a)  # the request pools (docs/spec.md, "Thread boundaries"): maybe
        # the second request
        q = item.queue
        if isinstance(item, Commit):
            cl = cl._replace(channel=rest)
            return s._replace(
                clients=_put(s.clients, a.client, cl),
                history=History(Event(s.now, "commit-ignored", a.client, q, item.offset, item.cause), s.history),
            )
        if not s.broker.registered:  # rejected before the reset lookup (SUBSCRIPTION_NOT_EXIST)
            return self._reset_wrapped[BrokerReceive](s, a)
        before = s
        target = pending[q]
        cl = cl._replace(channel=rest)
        s = s._replace(
            clients=_put(s.clients, a.client, cl),
            broker=s.broker._replace(reset_pending=_put(pending, q, None)),
        )
        if item.commit_flag:
            s = self._land_commit(s, a.client, q, item.commit_offset, item.pq_uid, "piggyback", victim)
        result = PullResult(br.OFFSET_ILLEGAL, (), target)
        epoch = s.broker.epoch
        cl = s.clients[a.client]
        pulls = tuple(
            p._replace(epoch=epoch, result=result) if p.pq_uid == item.pq_uid and p.epoch == -1 else p for p in cl.pulls
        )
        s = s._replace(clients=_put(s.clients, a.client, cl._replace(pulls=pulls)))
        return self._reset_note_stale(before, s, a.client, item)

    def _reset_note_stale(self: Model, s: State, t: State, i: int, item: Commit | PullRequestMsg | None) -> State:
        """Ghost, INV-17's declared later event: a commit from a pq that existed when the reset of its
        queue completed lands afterwards (a stale owner's commit, S5; in 5.x also the erasing pull's
        own piggy-back, R3.10b's window). The reset's own applications do not count."""
        if item is None or not t.ghost.reset_expect or not self.reset_declare_stale:
            return t
        expect = self._per_q(t.ghost.reset_expect)
        entry = expect[item.queue]
        event = t.history.event if t.history is not None and t.history is not s.history else None
        if (
            entry is None
            or event is None
            or event.kind != "commit-landed"
            or event.cause in RESET_APPLY_CAUSES
            or event.offset == entry[0]
            or pq_key(i, item.pq_uid) not in entry[1]
            or pq_key(i, item.pq_uid) in entry[2]
        ):
            return t
        return t._replace(
            ghost=t.ghost._replace(reset_expect=_put(expect, item.queue, None)),
            history=History(Event(t.now, "reset-overwritten", i, item.queue, event.offset, event.cause), t.history),
        )

    def _reset_broker_crash(self: Model, s: State, a: BrokerCrash) -> State:
        """BrokerCrash also loses the pending resets (resetOffsetTable is memory only) and the
        RESET_CONSUMER_CLIENT_OFFSET pushes on the wire; a completed reset's expectation ends (the
        table falls back to the flushed file: a declared later event of INV-17)."""
        s = self._reset_wrapped[BrokerCrash](s, a)
        clients = tuple(cl._replace(reset_inbox=()) for cl in s.clients)
        return s._replace(
            broker=s.broker._replace(reset_pending=()),
            clients=clients,
            ghost=s.ghost._replace(reset_expect=()),
        )

    def _reset_send_pull(self: Model, s: State, a: SendPull) -> State:
        """SendPull while the consumer is paused (R3.10a step 1): pullMessage sets lastPullTimestamp,
        sees ``isPause`` and re-queues itself after PULL_TIME_DELAY_MILLS_WHEN_SUSPEND (1 s)."""
        i, q = a.client, a.queue
        cl = s.clients[i]
        pq = cl.pqs[q] if cl.running and 0 <= q < self.q_count else None
        if not cl.paused or pq is None or pq.pull_state != PULL_READY or pq.pull_ready_at > s.now:
            return self._reset_wrapped[SendPull](s, a)
        pq = pq._replace(last_pull=s.now, pull_ready_at=s.now + PULL_DELAY_WHEN_SUSPEND)
        return s._replace(clients=_put(s.clients, i, cl._replace(pqs=_put(cl.pqs, q, pq))))

    def _reset_rebalance(self: Model, s: State, a: Rebalance | RebalanceQueryError) -> State:
        """A due rebalance of a paused consumer does nothing: DefaultMQPushConsumerImpl.doRebalance
        runs only when not paused (R3.10a step 1); the RebalanceService wait starts again."""
        i = a.client
        cl = s.clients[i]
        if not cl.paused or not self._rebalance_due(s, i):
            return self._reset_wrapped[type(a)](s, a)
        cl = cl._replace(next_rebalance=s.now + REBALANCE_WAIT, rebalance_requested=False)
        return s._replace(clients=_put(s.clients, i, cl))

    def _reset_value(self: Model, offset: int) -> int:
        """The offset MQClientInstance.resetOffset writes for a queue: the one the reset names (R3.10a)."""
        return offset

    def _reset_update_offset(self: Model, s: State, i: int, q: int, value: int) -> State:
        """MQClientInstance.resetOffset's ``updateOffset(mq, value, increaseOnly=false)`` before the persist
        (R3.10a step 4)."""
        cl = s.clients[i]
        return s._replace(clients=_put(s.clients, i, cl._replace(mem=_put(cl.mem, q, value))))

    def _reset_persist_all(self: Model, s: State, i: int, cause: str) -> State:
        """persistAll(keys(processQueueTable)) while a reset sleeps (persistAll (ConsumerProcessMixin._persist_all), the
        client timers (ConsumerProcessMixin), R3.10a): the pqs the reset dropped are still keys of processQueueTable, so
        the key set is the owned pqs and the held ones, in one pass in queue order: their memory values are sent, every
        other entry is removed from memory (the set is never empty here). Called by ``_persist_all`` (the persist timer,
        shutdown)."""
        cl = s.clients[i]
        keys = {q: pq.uid for q, pq in enumerate(cl.pqs) if pq is not None} | dict(cl.reset_held)
        unowned = []
        for q, value in enumerate(cl.mem):
            if value is None:
                continue
            if q in keys:
                s = self._send_commit(s, i, q, value, keys[q], cause)
            else:
                unowned.append(q)
        cl = s.clients[i]
        if unowned:
            cl = cl._replace(mem=self._without_unowned(cl.mem, unowned))
        return s._replace(clients=_put(s.clients, i, cl))

    def _reset_receive_pull(self: Model, s: State, a: ReceivePull) -> State:
        """ReceivePull, plus INV-17's ghost: the first batch that a pq created after a completed reset
        receives ends the expectation (the invariant compares it with the target).

        A held pull (long polling) woken while a 5.x reset of its queue is pending takes the pending
        entry too: ``executeRequestWhenWakeup`` runs ``processRequest`` again, which calls
        ``queryThenEraseResetOffset`` before reading the store (R3.10b step 6), and answers OFFSET_RESET;
        no second commit (brokerAllowSuspend is false on wakeup, the broker's pull handler,
        BrokerMixin._broker_receive). Found by the lockstep check."""
        s = self._reset_wake_held_pull(s, a)
        t = self._reset_wrapped[ReceivePull](s, a)
        expect = self._per_q(t.ghost.reset_expect)
        pull = next(p for p in s.clients[a.client].pulls if p.pq_uid == a.pq_uid and p.epoch != -1)
        entry = expect[pull.queue]
        if entry is None or pq_key(a.client, a.pq_uid) in entry[1]:
            return t
        pq = t.clients[a.client].pqs[pull.queue]
        if pq is None or pq.uid != a.pq_uid or pq.tree == _old_tree(s, a.client, pull.queue, a.pq_uid):
            return t
        return t._replace(ghost=t.ghost._replace(reset_expect=_put(expect, pull.queue, None)))

    def _reset_wake_held_pull(self: Model, s: State, a: ReceivePull) -> State:
        """The wakeup of a held pull under a pending reset of its queue (see ``_reset_receive_pull``):
        the pending entry is erased and the pull's answer becomes OFFSET_ILLEGAL at the target. A group
        nobody registers is refused before the reset lookup (SUBSCRIPTION_NOT_EXIST, the broker's pull handler,
        BrokerMixin._broker_receive)."""
        b = s.broker
        cl = s.clients[a.client]
        pull = next((p for p in cl.pulls if p.pq_uid == a.pq_uid and p.epoch != -1), None)
        if pull is None or not cl.running or not b.up or pull.epoch != b.epoch or pull.result is not None:
            return s
        pending = self._per_q(b.reset_pending)
        target = pending[pull.queue]
        if target is None or not b.registered:
            return s
        result = PullResult(br.OFFSET_ILLEGAL, (), target)
        pulls = tuple(p._replace(result=result) if p is pull else p for p in cl.pulls)
        return s._replace(
            broker=b._replace(reset_pending=_put(pending, pull.queue, None)),
            clients=_put(s.clients, a.client, cl._replace(pulls=pulls)),
        )


# Properties of the admin reset (INV-18, INV-31)
def _reset_takes_effect(m: Model, s: State, a: Action, t: State) -> str | None:
    """INV-18: the first batch that a pq created after a completed reset receives starts at the target
    (minOffset if that is higher; the first subscribed offset from there). The model's ghost ends the
    expectation at that batch, at a later reset or broker crash, or when a commit from a pq that existed
    at completion lands (a stale owner; in 5.x the erasing pull's own piggy-back)."""
    if not isinstance(a, ReceivePull) or not s.ghost.reset_expect:
        return None
    pull = next((p for p in s.clients[a.client].pulls if p.pq_uid == a.pq_uid and p.epoch != -1), None)
    if pull is None:
        return None
    q = pull.queue
    entry = m._per_q(s.ghost.reset_expect)[q]
    if entry is None or m._per_q(t.ghost.reset_expect)[q] is not None:
        return None
    pq, before = t.clients[a.client].pqs[q], s.clients[a.client].pqs[q]
    if pq is None:
        return None
    new = pq.tree & ~(before.tree if before is not None and before.uid == pq.uid else 0)
    queue = t.broker.queues[q]
    expected = max(entry[0], queue.min_offset)
    unsubscribed = m._unsubscribed_bits(queue)
    while expected < queue.max_offset and unsubscribed >> expected & 1:
        expected += 1
    first = _low(new)
    # A batch below the current minOffset but not below the reset target was answered before
    # retention raised minOffset (RetentionDelete between the pull's answer and its receipt).
    if first != expected and not (entry[0] <= first < queue.min_offset):
        return (
            f"queue {q}: the reset to {entry[0]} completed, but the first batch of client {a.client}'s new pq "
            f"{a.pq_uid} starts at {first}"
        )
    return None


RESET_TAKES_EFFECT = ActionProperty(
    "INV-18",
    "reset_takes_effect",
    "After an admin reset completes (4.9.8: the resetting client resumes, or the admin's old-method write; "
    "5.x: the broker's assignResetOffset), the first batch a newly created pq of that queue receives starts "
    "at the reset offset (or minOffset if higher), unless a broker crash, a later reset, or a commit from a "
    "pq that existed at completion intervenes.",
    "R3.10a, R3.10b, R5.7, R9.4",
    "A reset that does not take effect silently replays or skips what the operator asked for (RMQ-26).",
    _reset_takes_effect,
)


def _client_reset_runs_its_course(m: Model, s: State, a: Action, t: State) -> str | None:
    # Read from the client before and after the step. A RESET_CONSUMER_CLIENT_OFFSET leaves the client's inbox only
    # into MQClientInstance.resetOffset (R3.10a): the consumer is paused, the reset's table is the one that sleeps,
    # the 10 s sleep is armed, and every pq the client held of the table's queues is dropped (kept as held, for the
    # wake-up to remove); or with the process itself (a crash, a shutdown: nothing of it is left to reset); or with
    # the connection, when the broker crashes with the oneway push still on the wire (_reset_broker_crash).
    if s.clients is t.clients or isinstance(a, BrokerCrash):
        return None
    for i, (cl, nxt) in enumerate(zip(s.clients, t.clients, strict=True)):
        if cl is nxt or not cl.reset_inbox or not nxt.running:
            continue
        taken = len(cl.reset_inbox) - len(nxt.reset_inbox)
        if taken <= 0:
            continue
        entry = cl.reset_inbox[0]
        if taken > 1 or nxt.reset_inbox != cl.reset_inbox[1:]:
            return f"client {i}: {taken} resets left the inbox in one step"
        if not isinstance(a, ClientResetReceive) or a.client != i:
            return f"client {i}: {type(a).__name__} took the reset of {entry} from the inbox without running it"
        if not nxt.paused or nxt.reset_table != (entry,) or nxt.reset_wake != s.now + RESET_SLEEP:
            return (
                f"client {i}: the reset of {entry} was taken but the consumer is "
                f"{'paused' if nxt.paused else 'not paused'} with {nxt.reset_table} sleeping until {nxt.reset_wake} "
                f"(expected paused, {(entry,)} until {s.now + RESET_SLEEP})"
            )
        q = entry[0]
        pq = cl.pqs[q]
        if pq is not None and (nxt.pqs[q] is not None or (q, pq.uid) not in nxt.reset_held):
            return f"client {i}: the reset of queue {q} was taken but its pq {pq.uid} was not dropped and held"
    return None


CLIENT_RESET_RUNS_ITS_COURSE = ActionProperty(
    "INV-31",
    "client_reset_runs_its_course",
    "4.9.8: a RESET_CONSUMER_CLIENT_OFFSET leaves a running client's inbox only by its ClientResetReceive (or lost "
    "on the wire with a broker crash), which pauses the consumer, drops and holds the pq of the reset's queue and "
    "sleeps 10 s with that table.",
    "R3.10a",
    "INV-18 judges a reset once it completes; a reset taken and never run completes nowhere, so the operator's "
    "reset is lost without an error and the consumer goes on from where it was.",
    _client_reset_runs_its_course,
)
