"""The consumer process and its offset store: start, shutdown, crash, heartbeat and the persist timer.

RocketMQ classes: ``DefaultMQPushConsumerImpl#start`` and ``#shutdown`` (R4.4), ``MQClientInstance``'s scheduled tasks
(persistAllConsumerOffset, heartbeat; R4.1), ``RemoteBrokerOffsetStore`` (CLUSTERING: ``persistAll``, ``persist``,
``removeOffset``, the oneway UPDATE_CONSUMER_OFFSET; R2.1, R2.2, R2.5-R2.7) and ``LocalFileOffsetStore``
(BROADCASTING: ``load``, ``persistAll``, ``persist``, ``removeOffset``, the writes of ``offsets.json`` and its
``.bak`` by ``MixAll.string2File``; R1.9, R1.12-R1.15). The client timers (R4.1) fire through ``clock.py``;
``string2File`` (R1.15) also writes the broker's ``consumerOffset.json`` (``BrokerMixin._broker_flush``) and is what
the corrupt-file faults break (``faults.py``). The unserialised writers of ``offsets.json`` (a lagging ``persistAll``)
are docs/spec.md, "What is real, ranked".

Its actions, before the class: ``Start``, ``Shutdown``, ``OrphanReturns``, ``Crash``, ``Heartbeat``,
``PersistOffsets``, ``OffsetFileWriteLands``.

Its properties, after the class: INV-6a (persistAll prunes unowned queues from memory), INV-6b (offsets.json
never loses an entry), INV-6c (an offsets.json entry falls only with a cause the step shows:
``file_write_race``, ``local_file_lowering``), INV-25 (a shutdown persists every queue of its table), INV-35 (a
shutdown unregisters from every broker) and INV-27
(the client's scheduled tasks keep their first delays and periods).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from rmqspec.spec import broker_rules as br
from rmqspec.spec import orderly as lk
from rmqspec.spec.admin_reset import ClientResetWake
from rmqspec.spec.enabling import ActionNotEnabled
from rmqspec.spec.faults import CorruptLocalOffsetFile
from rmqspec.spec.property_types import ActionProperty
from rmqspec.spec.pull import FixOffsetIllegal, ReceivePull
from rmqspec.spec.rebalance import REBALANCE_WAIT
from rmqspec.spec.state import Client, Commit, Event, History, State, pq_key, step_events
from rmqspec.spec.state import put_at as _put

if TYPE_CHECKING:
    from rmqspec.spec.actions import Action
    from rmqspec.spec.model import Model

# Consumer timers (R4.1, R4.4; docs/rules.md, "Constants").
PERSIST_FIRST_DELAY: Final = 10_000  # persistAllConsumerOffset first run (R4.1)
PERSIST_INTERVAL: Final = 5_000  # persistConsumerOffsetInterval (R4.1)
HEARTBEAT_FIRST_DELAY: Final = 1_000  # heartbeat task first run (R4.1)
HEARTBEAT_INTERVAL: Final = 30_000  # heartbeatBrokerInterval (R4.1)


# Actions of the consumer process, each handled by its transition ``_<snake_case name>`` below
@dataclass(frozen=True, slots=True)
class Start:
    client: int


@dataclass(frozen=True, slots=True)
class Shutdown:
    client: int


@dataclass(frozen=True, slots=True)
class OrphanReturns:
    """An orderly listener that outlived its consumer's ``Shutdown`` returns (R4.4 step 1, orderly BROADCASTING's locks
    (ClientLocksMixin); docs/spec.md, "What is real, ranked"). ``shutdownNow`` only interrupts the consume thread, and a
    listener that ignores the interrupt runs on after ``unlockAll`` released the broker locks; when it returns,
    ``processConsumeResult`` finds its pq dropped by ``destroy()`` and updates nothing, and the loop ends. Enabled while
    the listener ``rid`` of ``client`` is in ``Client.orphaned``."""

    client: int
    rid: int


@dataclass(frozen=True, slots=True)
class Crash:
    client: int


@dataclass(frozen=True, slots=True)
class Heartbeat:
    client: int


@dataclass(frozen=True, slots=True)
class PersistOffsets:
    """The persistAllConsumerOffset timer. ``lagging`` 1 (BROADCASTING, budgeted ``Config.lagging_file_writes``):
    persistAll reads and merges offsets.json now and its string2File lands later (``OffsetFileWriteLands``), over
    whatever the other writers of the file wrote meanwhile (no lock between them; docs/spec.md, "What is real,
    ranked")."""

    client: int
    lagging: int = 0


@dataclass(frozen=True, slots=True)
class OffsetFileWriteLands:
    """The lagging persistAll's ``MixAll.string2File`` of offsets.json runs: it writes the table it merged from
    the file it read, undoing any entry another writer changed since (a lost update; docs/spec.md, "What is real,
    ranked")."""

    client: int


class ConsumerProcessMixin:
    """``Model``'s transitions and helpers for the consumer process and its offset store; see the module docstring."""

    def _start(self: Model, s: State, a: Start) -> State:
        """Start(client) (healing: a consumer joins or comes back). Enabled: not running. Effect:
        a fresh process: the offset store loads (BROADCASTING: the local file, R1.9; CLUSTERING:
        nothing, R2.1), the scheduled tasks start (persist after 10 s, heartbeat after 1 s, R4.1),
        a heartbeat registers it now, and it asks for an immediate rebalance (what triggers a rebalance,
        RebalanceMixin)."""
        i = a.client
        cl = s.clients[i]
        if cl.running:
            raise ActionNotEnabled(a, "already running")
        mem = cl.file if not self.clustering else cl.mem
        cl = cl._replace(
            # 5.x: RebalanceService's lastRebalanceTimestamp starts at construction (RebalanceService,
            # RebalanceMixin._rebalance)
            last_rebalance=s.now if self.paced else 0,
            running=True,
            mem=mem,
            next_persist=s.now + PERSIST_FIRST_DELAY,
            next_rebalance=s.now + REBALANCE_WAIT,
            next_heartbeat=s.now + HEARTBEAT_FIRST_DELAY,
            rebalance_requested=True,
            view=None,
            next_lock_all=s.now + lk.LOCK_ALL_FIRST_DELAY if self.lock_renewal else None,  # orderly consumption (the
            # lockAll timer, ClientLocksMixin._lock_all)
            next_clean=s.now + self.consume_timeout if self.cleans_expired else None,  # cleanExpiredMsg
            # (ConcurrentConsumeMixin._clean_expired_msg)
        )
        return self._register(s._replace(clients=_put(s.clients, i, cl)), i)

    def _stop_process(self: Model, cl: Client) -> Client:
        """What survives a consumer process: its local offset file, requests already on the wire."""
        none_q: tuple[int | None, ...] = (None,) * self.q_count
        return cl._replace(
            running=False,
            mem=none_q,
            pqs=(None,) * self.q_count,
            pulls=(),
            requests=(),
            consuming=(),
            offset_updates=(),
            next_persist=None,
            next_rebalance=None,
            next_heartbeat=None,
            rebalance_requested=False,
            view=None,
            next_lock_all=None,
            offset_fixes=(),  # OFFSET_ILLEGAL: the pull service's pending tasks die with it
            paused=False,  # admin reset: the sleeping resetOffset dies with it
            reset_inbox=(),
            reset_table=(),
            reset_wake=None,
            reset_held=(),
            relocks=(),  # orderly consume loop: the service's scheduler dies with the process
            unlocks=(),
            stalled_until=None,
            dead_tasks=(),  # faults: a restarted process has all its tasks again
            last_rebalance=0,
            next_clean=None,  # cleanExpiredMsg (ConcurrentConsumeMixin._clean_expired_msg): shutdown stops
            # cleanExpireMsgExecutors; a crash ends it
        )

    def _shutdown(self: Model, s: State, a: Shutdown) -> State:
        """Shutdown(client) (budgeted: a consumer leaves). Enabled: running. Effect, in R4.4's
        order: queued and running consume requests are discarded (awaitTermination 0); offsets of
        the owned queues are persisted (oneway / file); the consumer unregisters, which makes the
        broker notify the others; every pq is dropped and the process ends.

        An orderly consumer's running listeners are not stopped: ``shutdownNow`` interrupts their threads
        and a listener that does not check the interrupt runs on (``ThreadUtils#shutdownGracefully``), after
        ``unlockAll`` has released its queues at the broker (R4.4 step 1, orderly BROADCASTING's locks,
        ClientLocksMixin). They become ``Client.orphaned`` until ``OrphanReturns``; meanwhile another consumer may lock
        the queue and run its listener beside them (INV-12's allowed anomaly ``orderly-listener-outlives-shutdown``). A
        concurrent listener's late return changes nothing either (its pq is dropped, ConsumeRequest.run,
        ConcurrentConsumeMixin._deliver) and no property compares concurrent listeners, so those are dropped here."""
        i = a.client
        if not s.clients[i].running or s.budget.client_shutdowns <= 0:
            raise ActionNotEnabled(a, "not running or shutdown budget used up")
        orphaned = (*s.clients[i].orphaned, *s.clients[i].consuming) if self.orderly else s.clients[i].orphaned
        cl = s.clients[i]._replace(requests=(), consuming=(), offset_updates=())
        s = s._replace(
            clients=_put(s.clients, i, cl),
            budget=s.budget._replace(client_shutdowns=s.budget.client_shutdowns - 1),
        )
        if self.lock_renewal:  # orderly: ConsumeMessageOrderlyService.shutdown's unlockAll(false) (R4.4, orderly
            # BROADCASTING's locks, ClientLocksMixin)
            s = self._unlock_all(s, i)
        s = self._persist_all(s, i, "shutdown")
        s = self._leave(s, i, closed=False)  # the group exists: CHANGE goes out (what triggers a rebalance,
        # RebalanceMixin)
        stopped = self._stop_process(s.clients[i])._replace(orphaned=orphaned)
        return s._replace(clients=_put(s.clients, i, stopped))

    def _orphan_returns(self: Model, s: State, a: OrphanReturns) -> State:
        """OrphanReturns(client, rid). Enabled: that listener outlived its consumer's Shutdown and the JVM
        is not stalled. Effect: it returns; ``processConsumeResult`` commits its batch into a pq that
        ``destroy()`` dropped, so ``updateOffset`` is skipped (the orderly commit, OrderlyConsumeMixin._orderly_finish),
        and the loop ends at its dropped check (the orderly loop, OrderlyConsumeMixin._orderly_iterate). Nothing else
        changes: its offsets were never persisted, so the next owner delivers them again (a redelivery at the last
        landed commit)."""
        cl = s.clients[a.client]
        if self._stalled(s, cl) or all(r.rid != a.rid for r in cl.orphaned):
            raise ActionNotEnabled(a, "no such listener outlived a shutdown, or its JVM is stalled")
        cl = cl._replace(orphaned=tuple(r for r in cl.orphaned if r.rid != a.rid))
        return s._replace(clients=_put(s.clients, a.client, cl))

    def _crash(self: Model, s: State, a: Crash) -> State:
        """Crash(client) (budgeted). Enabled: running. Effect: memory is lost (offset table, pqs,
        pending work, timers). Requests already on the wire still arrive; the broker keeps the
        channel until ExpireChannel."""
        i = a.client
        if not s.clients[i].running or s.budget.client_crashes <= 0:
            raise ActionNotEnabled(a, "not running or crash budget used up")
        return s._replace(  # the JVM dies, and listeners that outlived an earlier Shutdown with it
            clients=_put(s.clients, i, self._stop_process(s.clients[i])._replace(orphaned=(), file_write_pending=None)),
            budget=s.budget._replace(client_crashes=s.budget.client_crashes - 1),
        )

    def _heartbeat(self: Model, s: State, a: Heartbeat) -> State:
        """Heartbeat(client). Enabled: running and the 30 s heartbeat timer due (R4.1). Effect: the
        broker (if up) registers the consumer, notifying the group if it was not listed."""
        cl = s.clients[a.client]
        if not cl.running or cl.next_heartbeat is None or cl.next_heartbeat > s.now:
            raise ActionNotEnabled(a, "heartbeat not due")
        cl = cl._replace(next_heartbeat=cl.next_heartbeat + HEARTBEAT_INTERVAL)
        return self._register(s._replace(clients=_put(s.clients, a.client, cl)), a.client)

    def _persist_offsets(self: Model, s: State, a: PersistOffsets) -> State:
        """PersistOffsets(client, lagging). Enabled: running, persistAllConsumerOffset due, and the timer's last
        persistAll has written. Effect: ``persistAll(keys(processQueueTable))`` (R4.1, R2.7, R1.12); next run
        in 5 s.

        ``lagging`` 1 (BROADCASTING, budgeted): LocalFileOffsetStore#persistAll reads offsets.json and merges
        the owned queues' memory values now, and its ``string2File`` runs later (``OffsetFileWriteLands``).
        Nothing locks the file against the other writers, ``persist(mq)`` on the rebalance thread (a
        pull-expired removal, the rebalance's pq table update (RebalanceMixin._update_process_queue_table)), the
        OFFSET_ILLEGAL task (the pull-status handling, PullMixin._receive_pull) and the 4.9.8 reset (the 4.9.8 reset,
        AdminResetMixin), so what they write meanwhile is overwritten (docs/spec.md, "What is real, ranked"). Enabled
        when a pq is owned, the file is readable and no reset sleeps (those persistAlls take the other paths of
        ``_persist_all``)."""
        cl = s.clients[a.client]
        if not cl.running or cl.next_persist is None or cl.next_persist > s.now or cl.file_write_pending is not None:
            raise ActionNotEnabled(a, "persist timer not due, or its last persistAll has not written yet")
        if a.lagging not in (0, 1) or (a.lagging and not self._may_lag_write(s, cl)):
            raise ActionNotEnabled(a, "no lagging write: not BROADCASTING, no budget, nothing owned or a reset sleeps")
        cl = cl._replace(next_persist=self._next_persist_run(cl.next_persist))
        if a.lagging:
            content = tuple(
                cl.mem[q] if cl.pqs[q] is not None and cl.mem[q] is not None else cl.file[q]
                for q in range(self.q_count)
            )
            return s._replace(
                clients=_put(s.clients, a.client, cl._replace(file_write_pending=(cl.file, content))),
                budget=s.budget._replace(lagging_file_writes=s.budget.lagging_file_writes - 1),
            )
        s = s._replace(clients=_put(s.clients, a.client, cl))
        return self._persist_all(s, a.client, "persist-timer")

    def _next_persist_run(self: Model, due: int) -> int | None:
        """When persistAllConsumerOffset runs again after the run due at ``due``: 5 s later (R4.1)."""
        return due + PERSIST_INTERVAL

    def _may_lag_write(self: Model, s: State, cl: Client) -> bool:
        """A lagging persistAll is possible: BROADCASTING, budget left, a pq owned (persistAll of nothing writes
        nothing), the main file readable and no reset asleep (those persistAlls are ``_persist_all``'s others)."""
        return (
            not self.clustering
            and s.budget.lagging_file_writes > 0
            and any(pq is not None for pq in cl.pqs)
            and not cl.file_main_unreadable
            and not cl.reset_held
        )

    def _offset_file_write_lands(self: Model, s: State, a: OffsetFileWriteLands) -> State:
        """OffsetFileWriteLands(client). Enabled: a lagging persistAll has merged and not written, and the JVM is
        not stalled; also after the consumer's Shutdown, whose own persistAll does not wait for the timer's
        (``ScheduledExecutorService#shutdown`` lets a running task finish, R4.4), so this write may undo it.
        Effect: ``MixAll.string2File`` of the table it merged: the previous main becomes
        .bak and main holds that table, so an entry another writer changed since the read goes back to what
        the read saw (a lost update: INV-6b and INV-6c declare it, ``file-write-race``). A history event names
        the queues whose newer entry was undone."""
        i = a.client
        cl = s.clients[i]
        if cl.file_write_pending is None or self._stalled(s, cl):
            raise ActionNotEnabled(a, "no persistAll waits to write, or the JVM is stalled")
        read, content = cl.file_write_pending
        undone = [q for q in range(self.q_count) if cl.file[q] != read[q] and cl.file[q] != content[q]]
        # an entry another writer added after the read is gone: a restart positions without it (INV-9a's cause)
        s = s._replace(ghost=self._note_lost(s.ghost, cl.file, content, i, "file-write-race"))
        cl = self._write_file(cl, content)._replace(file_write_pending=None)
        s = s._replace(clients=_put(s.clients, i, cl))
        if undone:
            detail = f"undid queues {undone}: written by another thread after this persistAll read the file"
            s = s._replace(history=History(Event(s.now, "file-write-race", i, undone[0], -1, detail), s.history))
        return self._file_written(s, i)

    def _persist_all(self: Model, s: State, i: int, cause: str) -> State:
        """OffsetStore.persistAll(keys(processQueueTable)).

        Remote store (R2.7): an empty set does nothing; otherwise every memory entry of an owned
        queue is sent oneway and every other entry is removed from memory. Local store (R1.12,
        4.9.8): the owned queues' memory values are merged into the file, other file entries kept.
        """
        cl = s.clients[i]
        owned = [q for q, pq in enumerate(cl.pqs) if pq is not None]
        if cl.reset_held:  # admin reset: a sleeping reset's dropped pqs are still keys
            return self._reset_persist_all(s, i, cause)
        if not owned:
            return s
        if not self.clustering:
            file = tuple(
                cl.mem[q] if cl.pqs[q] is not None and cl.mem[q] is not None else cl.file[q]
                for q in range(self.q_count)
            )
            return self._file_written(s._replace(clients=_put(s.clients, i, self._write_file(cl, file))), i)
        unowned = []
        for q, value in enumerate(cl.mem):
            if value is None:
                continue
            pq = cl.pqs[q]
            if pq is not None:
                s = self._send_commit(s, i, q, value, pq.uid, cause)
            else:
                unowned.append(q)
        cl = s.clients[i]
        if unowned:
            cl = cl._replace(mem=self._without_unowned(cl.mem, unowned))
        return s._replace(clients=_put(s.clients, i, cl))

    def _without_unowned(self: Model, mem: tuple[int | None, ...], unowned: list[int]) -> tuple[int | None, ...]:
        """The memory table after a remote persistAll: the entries of the queues ``unowned``, not in its key
        set, are removed (R2.7). ``_persist_all`` and ``_reset_persist_all`` call it."""
        out = list(mem)
        for q in unowned:
            out[q] = None
        return tuple(out)

    def _send_commit(self: Model, s: State, i: int, q: int, value: int, uid: int, cause: str) -> State:
        """updateConsumeOffsetToBroker oneway (R2.5): queued on the connection if the broker is
        reachable, otherwise lost at once (the send fails and is logged). While the master is down the
        slave takes it (R2.5's lookup falls back to any address of the broker name; slaves)."""
        if not s.broker.up and s.slave is None:
            return s._replace(history=History(Event(s.now, "commit-lost", i, q, value, cause), s.history))
        cl = s.clients[i]
        cl = cl._replace(channel=(*cl.channel, Commit(q, value, uid, cause, to_slave=not s.broker.up)))
        return s._replace(
            clients=_put(s.clients, i, cl),
            history=History(Event(s.now, "commit-sent", i, q, value, cause), s.history),
        )

    def _persist_one(self: Model, s: State, i: int, q: int, uid: int, cause: str) -> State:
        """OffsetStore.persist(mq): oneway send (R2.6) or a file write of that entry (R1.13)."""
        cl = s.clients[i]
        value = cl.mem[q]
        if value is None:
            return s
        if self.clustering:
            return self._send_commit(s, i, q, value, uid, cause)
        written = self._write_file(cl, _put(cl.file, q, value))
        return self._file_written(s._replace(clients=_put(s.clients, i, written)), i)

    def _write_file(self: Model, cl: Client, file: tuple[int | None, ...]) -> Client:
        """MixAll.string2File of offsets.json (R1.15): the previous main goes to .bak (an unreadable main
        too, as text: the .bak is then unreadable); main gets the merged table read from the effective file."""
        if self.track_file_bak:
            cl = cl._replace(file_bak=None if cl.file_main_unreadable else cl.file, file_main_unreadable=False)
        return cl._replace(file=file)

    def _remove_offset(self: Model, cl: Client, q: int) -> Client:
        """OffsetStore.removeOffset(mq): the memory entry only; the local file keeps it (R1.14, R2.2)."""
        return cl._replace(mem=_put(cl.mem, q, None))


# Properties of the offset stores (INV-6a; BROADCASTING's offsets.json: INV-6b, INV-6c)
def _persist_all_prunes(m: Model, s: State, a: Action, t: State) -> str | None:
    if not m.clustering or not isinstance(a, PersistOffsets):
        return None
    cl = t.clients[a.client]
    owned = {q for q, pq in enumerate(cl.pqs) if pq is not None}
    owned |= {q for q, _ in cl.reset_held}  # admin reset: a sleeping reset's dropped pqs are still table keys
    if not owned:
        return None
    extra = sorted(q for q, v in enumerate(cl.mem) if v is not None and q not in owned)
    return f"client {a.client}: after persistAll memory still holds unowned queues {extra}" if extra else None


PERSIST_ALL_PRUNES_MEMORY = ActionProperty(
    "INV-6a",
    "persist_all_prunes_memory",
    "After a non-empty persistAll, the remote store's memory holds only owned queues.",
    "R2.7",
    "Unpruned entries of lost queues are re-sent later as stale commits over the new owner's.",
    _persist_all_prunes,
)


def file_write_race(s: State, a: Action, i: int) -> frozenset[int]:
    """The queues whose offsets.json entry the step ``a`` undoes as a lost update of client ``i``'s file: ``a``
    is a lagging persistAll's write (OffsetFileWriteLands) and another writer changed the entry between that
    persistAll's read and this write (docs/spec.md, "What is real, ranked"). The declared cause ``file-write-race``."""
    if not isinstance(a, OffsetFileWriteLands) or a.client != i:
        return frozenset()
    cl = s.clients[i]
    if cl.file_write_pending is None:
        return frozenset()
    read, content = cl.file_write_pending
    return frozenset(q for q, value in enumerate(cl.file) if value != read[q] and value != content[q])


def _local_file_grows(m: Model, s: State, a: Action, t: State) -> str | None:
    """INV-6b: no write of offsets.json drops a queue's entry (the 4.9.8 merge keeps what it read), except an
    entry a lagging persistAll never read because another writer added it meanwhile (``file_write_race``)."""
    if m.clustering or isinstance(a, CorruptLocalOffsetFile):  # an unreadable main falls back to .bak (a corrupt offset
        # file's aftermath, FaultsMixin)
        return None
    for i, (old, new) in enumerate(zip(s.clients, t.clients, strict=True)):
        raced = file_write_race(s, a, i)
        lost = [q for q in range(m.q_count) if old.file[q] is not None and new.file[q] is None and q not in raced]
        if lost:
            return f"client {i}: the offset file lost entries for queues {lost}"
    return None


LOCAL_OFFSET_FILE_ONLY_GROWS = ActionProperty(
    "INV-6b",
    "local_offset_file_only_grows",
    "The LocalFileOffsetStore file never loses a queue's entry (4.9.8 merge).",
    "R1.12, R1.14",
    "A queue temporarily not owned would restart from consumeFromWhere and skip or replay (RMQ-21).",
    _local_file_grows,
)


def _file_write_keeps_the_previous_file(m: Model, s: State, a: Action, t: State) -> str | None:
    # Read from the files before and after the step and the step's "file-written" events (the ghost's record of each
    # write, GhostMixin._file_written), never from the model's write helper (which a planted bug overrides).
    # string2File (R1.15) copies the previous offsets.json to offsets.json.bak before it renames the new one into
    # place, so after one write .bak holds the main file as it was (an unreadable main as an unreadable .bak, None)
    # and the main is readable. A step that writes several times (a removal of each queue, the OFFSET_ILLEGAL fix's
    # two persists) leaves in .bak the table between its last two writes: each entry the one before the step or the
    # one after. Only where the model keeps .bak (a budget of local-file corruptions: Model.track_file_bak).
    if m.clustering or not m.track_file_bak:
        return None
    writes = Counter(e.client for e in step_events(s.history, t.history) if e.kind == "file-written")
    for i, k in sorted(writes.items()):
        old, new = s.clients[i], t.clients[i]
        if new.file_main_unreadable:
            return f"client {i}: offsets.json was written, but its main file still reads as unreadable"
        bak = new.file_bak
        if k == 1:
            expected = None if old.file_main_unreadable else old.file
            if bak != expected:
                was = "an unreadable file" if expected is None else expected
                held = "an unreadable file" if bak is None else bak
                return f"client {i}: offsets.json was written over {was}, but .bak holds {held}, not the previous file"
            continue
        if bak is None:  # only the first write can copy an unreadable main: it leaves the main readable
            return f"client {i}: offsets.json was written {k} times, but .bak reads as unreadable"
        stale = [q for q in range(m.q_count) if bak[q] != old.file[q] and bak[q] != new.file[q]]
        if stale:
            q = stale[0]
            return (
                f"client {i}: offsets.json was written {k} times ({old.file[q]} -> {new.file[q]} for queue {q}), but "
                f".bak holds {bak[q]} for it, neither the entry before the step nor the one after"
            )
    return None


FILE_WRITE_KEEPS_THE_PREVIOUS_FILE = ActionProperty(
    "INV-6d",
    "file_write_keeps_the_previous_file",
    "A write of a BROADCASTING consumer's offsets.json leaves the previous main file in offsets.json.bak (an "
    "unreadable main as an unreadable .bak), and the new main readable.",
    "R1.15, R1.16",
    ".bak is what readLocalOffset falls back to when offsets.json is damaged: a .bak that is not the previous file "
    "restarts the consumer from an older table, or from consumeFromWhere, and it re-consumes or skips what the "
    "lost writes recorded.",
    _file_write_keeps_the_previous_file,
)


def local_file_lowering(s: State, a: Action, i: int, q: int) -> bool:
    """Whether step ``a`` writes client ``i``'s offsets.json entry of queue ``q`` with increaseOnly false by design
    (INV-6c): the 4.9.8 client reset's wake for a queue of its table (the admin's target, the 4.9.8 reset,
    AdminResetMixin), or the OFFSET_ILLEGAL correction of that queue (nextBeginOffset, the pull-status handling,
    PullMixin._receive_pull): the 4.9.8 task, or 5.x at once in the callback of a pull answered OFFSET_ILLEGAL."""
    if getattr(a, "client", None) != i:
        return False
    cl = s.clients[i]
    if isinstance(a, ClientResetWake):
        return any(target == q for target, _ in cl.reset_table)
    if isinstance(a, FixOffsetIllegal):
        return a.queue == q
    if isinstance(a, ReceivePull):
        return any(
            p.pq_uid == a.pq_uid and p.queue == q and p.result is not None and p.result.status == br.OFFSET_ILLEGAL
            for p in cl.pulls
        )
    return False


def orderly_overwrite_persisted(m: Model, s: State, a: Action, i: int, q: int) -> bool:
    """Whether step ``a`` writes to client ``i``'s offsets.json the memory offset of queue ``q`` that an orderly
    consumer lowered by design: the memory of its live pq was raised by correctTagsOffset or the first locked pull's
    re-read (ghost raised_by_tags), and its orderly commit then wrote a lower value with increaseOnly false, the
    broker-side cause "orderly-overwrite" of committed_offset (DECLARED_DECREASE_CAUSES) reaching the local file
    through the persist that writes the memory (or a lagging write of it landing)."""
    if not m.orderly or getattr(a, "client", None) != i or not isinstance(a, (PersistOffsets, OffsetFileWriteLands)):
        return False
    pq = s.clients[i].pqs[q]
    return pq is not None and pq_key(i, pq.uid) in s.ghost.raised_by_tags


def _local_file_falls_caused(m: Model, s: State, a: Action, t: State) -> str | None:
    """INV-6c: a BROADCASTING consumer's offsets.json entry falls only where the step shows why: a lost update
    of its unlocked writers (``file_write_race``), a reset or an OFFSET_ILLEGAL correction of that queue
    (``local_file_lowering``), an orderly consumer's overwrite of a raised memory offset persisted
    (``orderly_overwrite_persisted``), or the fall-back to .bak of an unreadable main (a corrupt offset file's
    aftermath, FaultsMixin)."""
    if m.clustering or isinstance(a, CorruptLocalOffsetFile):
        return None
    for i, (old, new) in enumerate(zip(s.clients, t.clients, strict=True)):
        if old.file == new.file:
            continue
        raced = file_write_race(s, a, i)
        for q in range(m.q_count):
            before, after = old.file[q], new.file[q]
            if before is None or after is None or after >= before or q in raced:
                continue
            if not local_file_lowering(s, a, i, q) and not orderly_overwrite_persisted(m, s, a, i, q):
                return f"client {i} queue {q}: offsets.json fell from {before} to {after}, no declared cause"
    return None


LOCAL_OFFSET_FILE_FALLS_WITH_A_CAUSE = ActionProperty(
    "INV-6c",
    "local_offset_file_falls_with_a_cause",
    "A BROADCASTING offsets.json entry falls only by a lost update of its unlocked writers, a reset, an "
    "OFFSET_ILLEGAL correction or an orderly consumer's overwrite of a raised memory offset (docs/spec.md, 'What is "
    "real, ranked').",
    "R1.12, R1.13, R3.10a, R5.7",
    "The file is where a restarted broadcast consumer resumes: a fall replays what it had consumed.",
    _local_file_falls_caused,
)


def _shutdown_persists_owned(m: Model, s: State, a: Action, t: State) -> str | None:
    """INV-25: the consumer's ``Shutdown`` persists the memory offset of every queue of its processQueueTable (the
    owned pqs, and in CLUSTERING the pqs a sleeping admin reset dropped, still keys of the table) after the consume
    service stopped: CLUSTERING sends each one oneway (when the master, or a slave in its place, is reachable: the
    send to neither fails at once, as every commit's does), BROADCASTING writes each one to offsets.json. Read from
    the step itself: the commits it adds to the connection, the file it leaves."""
    if not isinstance(a, Shutdown):
        return None
    i = a.client
    before, after = s.clients[i], t.clients[i]
    keys = {q for q, pq in enumerate(before.pqs) if pq is not None} | {q for q, _ in before.reset_held}
    owed = sorted((q, value) for q in keys if (value := before.mem[q]) is not None)
    if not owed:
        return None
    if not m.clustering:
        unwritten = [(q, value) for q, value in owed if after.file[q] != value]
        if unwritten:
            q, value = unwritten[0]
            return f"client {i}: Shutdown left offsets.json at {after.file[q]} for queue {q}, memory {value}"
        return None
    if not s.broker.up and s.slave is None:
        return None
    for q, value in owed:
        if _shutdown_commits(after.channel, q, value) <= _shutdown_commits(before.channel, q, value):
            return f"client {i}: Shutdown sent no commit of queue {q} at its memory offset {value}"
    return None


def _shutdown_commits(channel: tuple[object, ...], q: int, value: int) -> int:
    """How many shutdown commits of queue ``q`` at ``value`` the connection ``channel`` carries."""
    return sum(
        1 for c in channel if isinstance(c, Commit) and c.queue == q and c.offset == value and c.cause == "shutdown"
    )


SHUTDOWN_PERSISTS_OWNED = ActionProperty(
    "INV-25",
    "shutdown_persists_owned",
    "A consumer's shutdown persists the memory offset of every queue of its processQueueTable: a oneway commit "
    "each (CLUSTERING, broker reachable) or offsets.json (BROADCASTING).",
    "R4.4, R2.7, R1.12",
    "What was consumed since the last 5 s persist is otherwise delivered again to the next owner, or to this "
    "consumer after its restart.",
    _shutdown_persists_owned,
)


def _shutdown_unregisters(m: Model, s: State, a: Action, t: State) -> str | None:
    # Read from the brokers' lists after the step, never from the model's leave helper (which a planted bug
    # overrides). UNREGISTER_CLIENT goes to every address of the broker name (the master while it is up, the slave);
    # a broker that lists the consumer's channel removes it (ConsumerManager#unregisterConsumer, R4.4 step 3).
    if not isinstance(a, Shutdown):
        return None
    i = a.client
    if t.broker.up and i in t.broker.registered:
        return f"client {i}: its shutdown left it in the master's list of the group {sorted(t.broker.registered)}"
    if t.slave is not None and i in t.slave.registered:
        return f"client {i}: its shutdown left it in the slave's list of the group {sorted(t.slave.registered)}"
    return None


SHUTDOWN_UNREGISTERS = ActionProperty(
    "INV-35",
    "shutdown_unregisters",
    "A consumer's shutdown leaves it in no broker's list of the group: UNREGISTER_CLIENT reaches the master while it "
    "is up and the slave, and each removes its channel.",
    "R4.4, R9.7",
    "A consumer the brokers still list is dealt its queues by every member's rebalance, and nobody consumes them "
    "until its channel closes; at-least-once allows the delay, so no delivery property reports it.",
    _shutdown_unregisters,
)


def _timers_keep_their_period(m: Model, s: State, a: Action, t: State) -> str | None:
    """INV-27: the client's fixed-rate tasks keep the cadence ``MQClientInstance#startScheduledTask`` and the consumer
    services give them (R4.1). A start arms each task at its first delay: persistAllConsumerOffset 10 s, the
    heartbeat 1 s, RebalanceService's 20 s wait (woken at once by the start's request; RebalanceMixin._rebalance),
    lockMQPeriodically 1 s where the consumer locks (the lockAll timer, ClientLocksMixin._lock_all), cleanExpireMsg
    one consumeTimeout where it cleans (cleanExpiredMsg, ConcurrentConsumeMixin._clean_expired_msg). A task's own run
    moves its deadline one period on from the deadline it ran at (``scheduleAtFixedRate``); a run of RebalanceService,
    on its timer or on request, waits 20 s from now (5.x: 1 s when unbalanced). No other step moves a deadline, and a
    deadline goes away only with its process or when the task dies (TaskDies). Read from the step and the
    constants, not from the model's own scheduling helpers, so a variant that reschedules differently is seen."""
    from rmqspec.spec.client_locks import LockAll  # client_locks imports this module
    from rmqspec.spec.concurrent_consume import CLEAN_EXPIRE_MSG_TASK, CleanExpiredMsg
    from rmqspec.spec.rebalance import REBALANCE_MIN_INTERVAL

    for i, (before, after) in enumerate(zip(s.clients, t.clients, strict=True)):
        if before is after or not after.running:  # a client the step left alone keeps its deadlines
            continue
        if not before.running:
            lock_first = s.now + lk.LOCK_ALL_FIRST_DELAY if m.lock_renewal else None
            armed = {
                "persistAllConsumerOffset": (after.next_persist, s.now + PERSIST_FIRST_DELAY),
                "sendHeartbeatToAllBroker": (after.next_heartbeat, s.now + HEARTBEAT_FIRST_DELAY),
                "RebalanceService": (after.next_rebalance, s.now + REBALANCE_WAIT),
                "lockMQPeriodically": (after.next_lock_all, lock_first),
                CLEAN_EXPIRE_MSG_TASK: (after.next_clean, s.now + m.consume_timeout if m.cleans_expired else None),
            }
            for task, (got, expected) in armed.items():
                if got != expected:
                    return f"client {i}: the start armed {task} for {got}, expected {expected}"
            continue
        own = getattr(a, "client", None) == i
        fixed_rate = (
            ("persistAllConsumerOffset", before.next_persist, after.next_persist, PERSIST_INTERVAL, PersistOffsets),
            ("sendHeartbeatToAllBroker", before.next_heartbeat, after.next_heartbeat, HEARTBEAT_INTERVAL, Heartbeat),
            ("lockMQPeriodically", before.next_lock_all, after.next_lock_all, lk.LOCK_ALL_INTERVAL, LockAll),
            (CLEAN_EXPIRE_MSG_TASK, before.next_clean, after.next_clean, m.consume_timeout, CleanExpiredMsg),
        )
        for task, old, new, period, action in fixed_rate:
            if old == new:
                continue
            if new is None and task in after.dead_tasks:
                continue
            if own and isinstance(a, action) and old is not None and old <= s.now and new == old + period:
                continue
            return f"client {i}: {type(a).__name__} moved {task}'s deadline from {old} to {new}"
        ran = before.rebalance_requested and not after.rebalance_requested
        if before.next_rebalance == after.next_rebalance and not ran:
            continue
        new = after.next_rebalance
        if new is None:
            if "RebalanceService" in after.dead_tasks:
                continue
            return f"client {i}: {type(a).__name__} left RebalanceService with no next run"
        waits = {s.now + REBALANCE_WAIT, s.now + REBALANCE_MIN_INTERVAL} if m.paced else {s.now + REBALANCE_WAIT}
        if new not in waits:
            return (
                f"client {i}: {type(a).__name__} set RebalanceService's next run to {new}, expected "
                f"{' or '.join(str(w) for w in sorted(waits))}"
            )
    return None


TIMERS_KEEP_THEIR_PERIOD = ActionProperty(
    "INV-27",
    "timers_keep_their_period",
    "The client's scheduled tasks keep their cadence: a start arms each at its first delay, a task's run moves it "
    "one period on, RebalanceService waits 20 s after each run (5.x: 1 s when unbalanced), and nothing else moves "
    "a deadline; one goes only with its process or its task.",
    "R4.1, R4.2, R8.3, R6.8",
    "A task that stops or slows leaves its work undone for as long: offsets not persisted, a consumer not "
    "heard by the broker, a rebalance or a lock renewal not made, an expired message not cleaned.",
    _timers_keep_their_period,
)
