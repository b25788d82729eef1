"""Directed starts: scripted prefixes that bring a random walk to a rare precondition, then let it go.

A random walk of a few hundred steps almost never lines up the interleavings some of the model's branches
need: a listener still running when its lock expires or its consumer shuts down, a delayed unlock firing
on a pq that came back, a master outage long enough for a consumer to commit on the slave and restart. The
scripted scenarios of the tests (``orderly_scenarios``, ``reset_scenarios``, ``slave_scenarios``) reach each
of them in a few dozen steps. A campaign run may begin with one of those scripts (``campaign.units``: one run in
``DIRECTED_EVERY``, seven, chosen from the seed): the walk replays the script's steps, with every property and the
lockstep reference checked at each as in any walk, then goes on at random under the run's swarm profile,
so that what lies behind the precondition is searched too, not only the precondition.

Each start is ``(name, version)``: the scenario's configuration and the actions it took, scripted against
the correct model with its default tolerances. A start must be clean (no property fails on its steps):
``test_every_directed_start_is_clean_and_replays_in_lockstep`` in tests/test_campaign.py checks it. That each
script reaches its precondition is what the scenario's own tests (tests/test_orderly.py, test_slaves.py,
test_admin_reset.py, test_offset_file_writers.py) assert, and for the scripts written here
``test_the_new_directed_scripts_reach_their_preconditions`` and one test per script after it in
tests/test_campaign.py (``pull_beyond_the_slave`` is RMQ-17's schedule, tests/test_slaves.py). A scenario
whose correct run cannot end (``removal_while_listening`` and ``requeued_while_listening`` block, by design,
where the correct model refuses the next step) is a start too: the prefix up to the block is the
precondition.

Not a start: the scenarios that show real RocketMQ bugs (a 4.9.8 admin reset, RMQ-26; RMQ-17's
``offset_check_in_slave``), which the default campaign leaves out on purpose (docs/campaign.md);
``forced_removal_under_a_slow_listener`` under 4.9.8, whose block is reached only after 2,000 steps of
ticks, beyond a run's budget; and any script with a broker outage under a 4.9.8 orderly CLUSTERING consumer
(4.9.8's delayed unlock lost with the broker down), since ``campaign.units.run_unit`` runs those
configurations with ``broker_crashes = 0`` (INV-19) and would give the script up at the crash.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

from rmqspec.properties import orderly_scenarios as orderly
from rmqspec.properties import reset_scenarios as reset
from rmqspec.properties import slave_scenarios as slave
from rmqspec.properties.file_scenarios import file_race_config, lagging_write_race
from rmqspec.spec import actions as act
from rmqspec.spec.config import BROADCASTING, FROM_TIMESTAMP, V4_9_8, V5_X, Config
from rmqspec.spec.model import Model


@dataclass(frozen=True)
class Start:
    """A directed start: ``name`` under ``version``, what it reaches, and how to script it."""

    name: str
    version: str
    reaches: str  # the rare precondition, in words (docs/campaign.md lists them)
    script: Callable[[str], tuple[Config, list[act.Action]]]

    @property
    def key(self) -> str:
        return f"{self.name}@{self.version}"

    def prefix(self) -> tuple[Config, tuple[act.Action, ...]]:
        """The scenario's configuration and the steps it took (computed once per process)."""
        return _scripted(self)


@cache
def _scripted(start: Start) -> tuple[Config, tuple[act.Action, ...]]:
    config, taken = start.script(start.version)
    return config, tuple(taken)


def _orderly(run: Callable[[str], orderly.OrderlyRun]) -> Callable[[str], tuple[Config, list[act.Action]]]:
    def script(version: str) -> tuple[Config, list[act.Action]]:
        result = run(version)
        assert result.config is not None
        return result.config, result.taken

    return script


def _driven(run: Callable[[str], reset.Driver]) -> Callable[[str], tuple[Config, list[act.Action]]]:
    def script(version: str) -> tuple[Config, list[act.Action]]:
        d = run(version)
        return d.model.config, d.taken

    return script


def _consumed_one(d: reset.Driver) -> None:
    """Client 0 starts, takes the queue, pulls and consumes what it got, and its persist lands."""
    d.fire(act.Start)
    d.fire(act.Rebalance)
    slave.pull_once(d)
    slave.consume_everything(d)
    slave.persist_and_land(d)


def commit_on_the_wire_at_channel_expiry(version: str) -> reset.Driver:
    """Client 0's persist timer sends its commit and the pull thread a pull request behind it, and before the broker
    reads them the client stalls 150 s: the broker's idle-channel scan closes the channel, the commit is lost with
    it and the pull fails (R4.3)."""
    d = reset.Driver(reset.reset_config(version, admin_resets=0, client_stalls=1))
    d.do(act.Produce(0, "A"))
    _consumed_one(d)
    d.do(act.Produce(0, "A"))
    slave.pull_once(d)
    slave.consume_everything(d)
    d.until(act.PersistOffsets)
    d.fire(act.PersistOffsets)  # the commit is on the wire; nobody reads it
    d.fire(act.SendPull)  # and a pull request behind it
    d.do(act.Stall(0, 150_000))
    d.until(act.ExpireChannel)
    d.fire(act.ExpireChannel)
    return d


def timestamp_between_messages(version: str) -> reset.Driver:
    """CONSUME_FROM_TIMESTAMP at 15 s on a queue with a message stored before it and one after: the search
    lands between two store times and takes the nearer (R10.3), not an exact match."""
    d = reset.Driver(
        reset.reset_config(version, admin_resets=0, consume_from_where=FROM_TIMESTAMP, consume_timestamp=15_000)
    )
    d.do(act.Produce(0, "A"))
    while d.state.now <= 15_000:
        d.until(act.Tick)
        d.do(act.Tick())
    d.do(act.Produce(0, "A"))
    d.do(act.CoolQueueHead(0))  # a young queue whose head is in memory would answer 0 instead (R3.5)
    d.fire(act.Start)
    d.fire(act.Rebalance)
    return d


def pull_beyond_the_slave(version: str) -> reset.Driver:
    """RMQ-17's schedule with 4.9.8's default offsetCheckInSlave=false: a message consumed from the master, which
    crashes before the slave copies it; the pull at offset 1 goes to the slave, which does not correct it (R5.5)."""
    d = reset.Driver(slave.slave_config(version))
    d.do(act.Produce(0, "A"))
    d.fire(act.Start)
    d.fire(act.Rebalance)
    slave.pull_once(d)
    d.do(act.BrokerCrash())
    slave.pull_once(d)
    return d


def restart_on_the_slave(synced: bool) -> Callable[[str], reset.Driver]:
    """A consumer that had committed restarts while the master is down, and asks the slave where to start: the
    slave has the offset if its SlaveSync ran after the commit landed (R3.8), else it answers that it has none
    and the consumer positions by CONSUME_FROM_WHERE (R2.4, R10.1)."""

    def script(version: str) -> reset.Driver:
        d = reset.Driver(slave.slave_config(version, client_crashes=1))
        d.do(act.Produce(0, "A"))
        d.do(act.Produce(0, "A"))
        d.do(act.CoolQueueHead(0))  # else a slave without the entry answers 0 for a young queue (R3.5)
        d.do(act.SlaveReplicate(0))
        _consumed_one(d)
        d.until(act.SlaveSync if synced else act.BrokerFlush)  # the master's table flushed, unless it syncs first
        d.fire(act.SlaveSync if synced else act.BrokerFlush)
        d.do(act.BrokerCrash())
        d.do(act.Crash(0))
        d.fire(act.Start)
        d.fire(act.Rebalance)
        return d

    return script


def _time_passes(d: reset.Driver, done: Callable[[], bool], client: int | None = None) -> None:
    """Fire due timers and ticks until ``done``: ``client``'s and the broker's timers first (the broker's alone for
    ``None`` or -1), another client's only when nothing else is due (a Tick waits for every due timer). No network
    step, listener answer or pull, so whatever is on the wire stays there."""
    timers = (
        act.PersistOffsets,
        act.Heartbeat,
        act.BrokerFlush,
        act.Rebalance,
        act.SlaveSync,
        act.CleanExpiredMsg,
        act.DeliverScheduled,
        act.LockAll,
        act.TryLockLater,
        act.DelayedUnlock,
        act.FixOffsetIllegal,
    )
    while not done():
        enabled = d.model.enabled(d.state)
        due = [a for a in enabled if isinstance(a, timers) and getattr(a, "client", client) in (client, None)]
        due = due or [a for a in enabled if isinstance(a, timers)]
        d.do(due[0] if due else act.Tick())


def _consume_all(d: reset.Driver, client: int) -> None:
    """Run every consume request of ``client`` to success and apply its offset."""
    while step := next(
        (
            a
            for a in d.model.enabled(d.state)
            if getattr(a, "client", None) == client
            and (
                isinstance(a, act.StartConsume | act.ApplyConsumeOffset)
                or (isinstance(a, act.FinishConsume) and a.status == act.CONSUME_SUCCESS and not a.send_back_fails)
            )
        ),
        None,
    ):
        d.do(step)


def _join(d: reset.Driver, client: int) -> None:
    """``client`` starts and runs its first rebalance."""
    d.fire(act.Start, _of(client))
    d.fire(act.Rebalance, _of(client))


def _join_and_consume(d: reset.Driver, client: int, queue: int) -> None:
    """``client`` starts, rebalances, pulls ``queue`` once and consumes what the pull brought."""
    _join(d, client)
    _pull(d, client, queue)
    _consume_all(d, client)


def _consume_and_commit(d: reset.Driver, client: int, queue: int) -> None:
    """``client`` pulls ``queue`` once and consumes what came; then its persist timer sends the commit, which lands."""
    _pull(d, client, queue)
    _consume_all(d, client)
    _time_passes(d, lambda: bool(d.state.clients[client].channel), client)
    d.drain(client)


def _pull(d: reset.Driver, client: int, queue: int) -> None:
    d.fire(act.SendPull, _of(client, queue))
    d.drain(client)
    d.fire(act.ReceivePull, _of(client))


def _of(client: int, queue: int | None = None) -> Callable[[act.Action], bool]:
    """An action of ``client`` (and of ``queue``, when given)."""
    return lambda a: getattr(a, "client", None) == client and queue in (None, getattr(a, "queue", None))


def late_commit_on_the_slave(version: str) -> reset.Driver:
    """While the master is down, consumer 0's persist of queue 1 (offset 2) waits on its connection to the slave;
    consumer 1 joins, is allocated queue 1 (consumer 0 has not rebalanced yet), starts where the slave's empty
    entry puts it, consumes all four messages and commits 4 on the slave. Consumer 0's older commit then lands:
    the slave's offset falls 4 -> 2, written by another pq than the last (R3.2, R3.4; INV-8s's stale owner)."""
    d = reset.Driver(slave.slave_config(version, consumers=2, queues=2))
    for _ in range(4):
        d.do(act.Produce(1, "A"))
    d.do(act.SlaveReplicate(1))
    _join_and_consume(d, 0, 1)
    d.do(act.BrokerCrash())
    _time_passes(d, lambda: bool(d.state.clients[0].channel), 0)  # the persist timer sends to the slave
    _join(d, 1)
    _pull(d, 1, 1)
    _consume_all(d, 1)
    _consume_and_commit(d, 1, 1)
    d.drain(0)
    return d


def offset_illegal_fix_below(on_slave: bool) -> Callable[[str], reset.Driver]:
    """Consumer 1 consumes all four messages of queue 0 (one pull of four) and commits 4; consumer 0 joined
    before that commit and took the queue with no stored offset (a cooled head: no young-queue 0, so its memory
    stays empty and its persist timer sends nothing). Retention deletes two messages; consumer 0's pull at 0 gets
    OFFSET_ILLEGAL with nextBeginOffset 2, and 10 s later 4.9.8's correction (updateOffset(increaseOnly=false),
    persist) commits 2 over the 4 (R5.7): on the master, or, ``on_slave``, on the slave that took consumer 1's
    commit by SlaveSync, the master having crashed meanwhile (R3.4)."""

    def script(version: str) -> reset.Driver:
        d = reset.Driver(
            slave.slave_config(
                version,
                consumers=2,
                retention_deletes=2,
                pull_batch_size=4,
                slave=on_slave,
                broker_crashes=1 if on_slave else 0,
            )
        )
        for _ in range(4):
            d.do(act.Produce(0, "A"))
        d.do(act.CoolQueueHead(0))
        _join_and_consume(d, 1, 0)
        _join(d, 0)
        _time_passes(d, lambda: any(a == act.PersistOffsets(1) for a in d.model.enabled(d.state)), -1)
        d.do(act.PersistOffsets(1))
        d.drain(1)
        if on_slave:
            d.until(act.SlaveSync)
            d.fire(act.SlaveSync)
        d.do(act.RetentionDelete(0))
        d.do(act.RetentionDelete(0))
        if on_slave:
            d.do(act.SlaveReplicate(0))
        _pull(d, 0, 0)  # OFFSET_ILLEGAL: the correction is due in 10 s
        if on_slave:
            d.do(act.BrokerCrash())
        d.until(act.FixOffsetIllegal)
        d.fire(act.FixOffsetIllegal)
        d.drain(0)
        return d

    return script


def corrupted_offset_file_at_restart(version: str) -> reset.Driver:
    """A consumer commits 1 and the broker flushes it, then 2 and another flush (the .bak now holds 1); the
    broker crashes and its consumerOffset.json becomes unreadable: the restart loads the .bak and the committed
    offset falls 2 -> 1 (R3.6, R3.7)."""
    d = reset.Driver(reset.reset_config(version, admin_resets=0, broker_crashes=1, offset_file_corruptions=1))
    d.fire(act.Start)
    d.fire(act.Rebalance)
    for _ in range(2):
        d.do(act.Produce(0, "A"))
        slave.pull_once(d)
        slave.consume_everything(d)
        slave.persist_and_land(d)
        d.until(act.BrokerFlush)
        d.fire(act.BrokerFlush)
    d.do(act.BrokerCrash())
    d.do(act.CorruptOffsetFile())
    return d


def consumer_list_without_self(version: str) -> reset.Driver:
    """Two consumers share one clientId; a rebalance whose consumer list lacks the asker's clientId (its heartbeat
    had not reached the broker, S7) lacks them both: the list is empty, answered as null, and the pq table is
    kept (R9.3 step 3)."""
    d = reset.Driver(reset.reset_config(version, admin_resets=0, consumers=2, duplicate_client_id=True, view_faults=1))
    d.do(act.Produce(0, "A"))
    _join(d, 0)
    d.fire(act.Start, _of(1))
    d.fire(act.RebalanceWithoutSelf, _of(0))
    return d


def lock_refused_while_its_pq_exists(version: str) -> reset.Driver:
    """An orderly consumer owns the queue, locked, with a consume request queued, and its RebalanceService
    thread dies (TaskDies); the broker crashes and restarts with an empty lock table and no registrations
    (R8.1, R4.1). Consumer 1 starts and, alone in the consumer list until consumer 0's next heartbeat, is
    allocated the queue and locks it. Consumer 0, which no longer rebalances, keeps its pqs: its
    lockAll is refused (locked := false), so its consume request finds no valid lock and runs
    tryLockLaterAndReconsume, whose lock(mq) is refused too while its pq is in the table (R8.2, R8.5)."""
    d = reset.Driver(orderly.orderly_config(version, broker_crashes=1, task_deaths=1))
    _join(d, 0)
    _pull(d, 0, 0)
    d.do(act.TaskDies(0, "RebalanceService"))
    d.do(act.BrokerCrash())
    d.do(act.BrokerRestart())
    d.fire(act.Start, _of(1))
    _time_passes(d, lambda: d.state.clients[1].pqs[0] is not None, 1)
    _time_passes(d, lambda: d.state.clients[0].pqs[0] is not None and not d.state.clients[0].pqs[0].locked, 0)
    d.fire(act.StartConsume, _of(0))
    _time_passes(d, lambda: any(isinstance(a, act.TryLockLater) for a in d.model.enabled(d.state)), 0)
    d.fire(act.TryLockLater, _of(0))
    return d


def old_listener_answers_after_requeue(status: str) -> Callable[[str], reset.Driver]:
    """``requeued_while_listening`` (5.x): consumer 0's listener on queue 1 outlives a 35 s stall, its pq is
    removed by force and the queue taken back with a new pq (R8.5, R8.8); then the old listener answers
    ``status``: ROLLBACK (autoCommit off) or SUSPEND_CURRENT_QUEUE_A_MOMENT. The pq it came from has left the
    table, so nothing is put back into a tree, and a request of the old pq is resubmitted 1 s later (R8.6,
    R8.7)."""

    def script(version: str) -> reset.Driver:
        config = orderly.orderly_config(
            version,
            queues=2,
            client_stalls=1,
            client_shutdowns=1,
            orderly_auto_commit=status != act.ORDERLY_ROLLBACK,
        )
        d = reset.Driver(config)
        _join(d, 0)
        _pull(d, 0, 1)
        d.fire(act.StartConsume, _of(0))
        d.do(act.Start(1))
        d.do(act.Stall(0, 35_000))
        _time_passes(d, lambda: d.state.now >= (d.state.clients[0].stalled_until or 0), 0)
        _time_passes(d, lambda: any(a == act.Rebalance(0) for a in d.model.enabled(d.state)), 0)
        d.fire(act.Rebalance, _of(0))
        d.do(act.Shutdown(1))
        d.drain(1)
        d.fire(act.Rebalance, _of(0))
        _pull(d, 0, 1)
        cl = d.state.clients[0]
        old = next(r for r in cl.consuming if (pq := cl.pqs[r.queue]) is None or pq.uid != r.pq_uid)
        d.do(act.FinishConsume(0, old.rid, status, -1, 0))
        return d

    return script


def orderly_broadcasting_listeners(version: str) -> reset.Driver:
    """Two orderly BROADCASTING consumers: consumer 0 locks queue 0 and its listener runs; the broker crashes and
    restarts with an empty lock table (R8.1), so consumer 1's next rebalance locks the queue too, and its
    listener runs beside consumer 0's. Each BROADCASTING consumer owns its own progress (R9.2), so INV-12's
    one-listener-per-queue claim is per consumer there."""
    d = reset.Driver(orderly.orderly_config(version, mode=BROADCASTING, broker_crashes=1))
    _join(d, 0)
    _pull(d, 0, 0)
    d.fire(act.StartConsume, _of(0))
    d.fire(act.Start, _of(1))
    d.do(act.BrokerCrash())
    d.do(act.BrokerRestart())
    _time_passes(d, lambda: d.state.clients[1].pqs[0] is not None and 1 in d.state.broker.registered, 1)
    _pull(d, 1, 0)
    _time_passes(d, lambda: any(isinstance(a, act.StartConsume) for a in d.model.enabled(d.state)), 1)
    d.fire(act.StartConsume, _of(1))
    return d


def expired_to_unsubscribed_retry_topic(version: str) -> reset.Driver:
    """A BROADCASTING consumer's listener runs past a 2 s consumeTimeout: cleanExpiredMsg sends the message back
    at delay level 3 and removes it from the pq (R6.8). The copy goes to %RETRY%<group>, which no BROADCASTING
    consumer subscribes to (R7.8): a declared skip; 10 s later the schedule delivers it to nobody."""
    d = reset.Driver(file_race_config(version=version, lagging_file_writes=0, consume_timeout=2_000))
    d.fire(act.Start)
    d.fire(act.Rebalance)
    _pull(d, 0, 0)
    d.fire(act.StartConsume)
    _time_passes(d, lambda: bool(d.state.broker.scheduled), 0)
    _time_passes(d, lambda: not d.state.broker.scheduled, 0)
    return d


def reset_to_an_unsubscribed_offset(version: str) -> reset.Driver:
    """5.x, a group subscribed to tag A of a queue holding A, B, A: the consumer has committed 0 when the admin
    resets the queue to 1, the offset of the B. The next pull takes the pending reset as OFFSET_ILLEGAL, the new
    pq starts at 1, and its first batch starts at 2, the first subscribed offset from the target (R3.10b, R5.5;
    INV-18 skips the unsubscribed offsets)."""
    d = reset.Driver(reset.reset_config(version, tags=("A", "B"), subscription=("A",)))
    for tag in ("A", "B", "A"):
        d.do(act.Produce(0, tag))
    d.fire(act.Start)
    d.fire(act.Rebalance)
    slave.persist_and_land(d)  # memory 0: the broker has an offset to reset, and no pull piggy-backs one
    d.do(act.AdminReset(0, 1, False))
    _pull(d, 0, 0)  # OFFSET_ILLEGAL from the pending reset: 5.x adopts it at once and rebalances
    d.drain()
    d.fire(act.Rebalance)
    _pull(d, 0, 0)
    return d


def _late_offset_illegal_reply_for_a_removed_pq(version: str) -> reset.Driver:
    """Consumer 0 owns both queues; retention deletes message 0 of queue 1, and consumer 0's pull of queue 1 at 0
    is answered OFFSET_ILLEGAL (nextBeginOffset 1). Before the reply is taken, consumer 1 joins and consumer 0's
    rebalance removes the pq; then the reply is taken (R5.7: its branch runs for the removed pq)."""
    d = reset.Driver(reset.reset_config(version, admin_resets=0, consumers=2, queues=2, retention_deletes=1))
    d.do(act.Produce(1, "A"))
    d.do(act.Produce(1, "A"))
    _join(d, 0)
    d.do(act.RetentionDelete(1))
    d.fire(act.SendPull, _of(0, 1))
    d.drain(0)
    d.fire(act.Start, _of(1))
    d.fire(act.Rebalance, _of(0))
    d.fire(act.ReceivePull, _of(0))
    return d


def offset_illegal_reply_after_removal(version: str) -> reset.Driver:
    """4.9.8: consumer 0 owns both queues; retention deletes message 0 of queue 1, and consumer 0's pull of
    queue 1 at 0 is answered OFFSET_ILLEGAL (nextBeginOffset 1). Before the reply is taken, consumer 1 joins and
    consumer 0's rebalance removes the pq. The late reply still runs the OFFSET_ILLEGAL branch for the removed
    pq (R5.7), and 10 s later the correction finds no pq of queue 1 in the table: updateOffset and persist run,
    removeProcessQueue finds nothing (R2.7)."""
    d = _late_offset_illegal_reply_for_a_removed_pq(version)
    _time_passes(d, lambda: any(isinstance(a, act.FixOffsetIllegal) for a in d.model.enabled(d.state)), 0)
    d.fire(act.FixOffsetIllegal, _of(0))
    return d


def offset_illegal_fix_without_pq_lands_below(version: str) -> reset.Driver:
    """4.9.8: as ``offset_illegal_reply_after_removal``, consumer 0's late OFFSET_ILLEGAL reply for its removed pq
    of queue 1 schedules the correction to 1. Consumer 1, the new owner, pulls at 0 too, gets OFFSET_ILLEGAL and
    its own correction. Consumer 0's correction runs first, finds no pq and sends its persist (a commit of no pq)
    while consumer 1 corrects to 1, resumes there, consumes a new message and commits 3. Consumer 0's commit of 1
    then lands: the broker's offset falls 3 -> 1, written by the correction of a pq that no longer exists (R5.7,
    R2.7, R3.2; INV-8's offset-illegal-fix cause)."""
    d = _late_offset_illegal_reply_for_a_removed_pq(version)
    d.drain(0)  # the removal's persist of queue 1 (0) lands now, before the correction's
    d.fire(act.Rebalance, _of(1))
    _pull(d, 1, 1)

    def fix_due(client: int) -> Callable[[], bool]:
        return lambda: any(a == act.FixOffsetIllegal(client, 1) for a in d.model.enabled(d.state))

    _time_passes(d, fix_due(0), 0)
    d.do(act.FixOffsetIllegal(0, 1))  # its commit of 1 waits on consumer 0's connection
    _time_passes(d, fix_due(1), 1)
    d.do(act.FixOffsetIllegal(1, 1))
    d.drain(1)
    _time_passes(d, lambda: d.state.clients[1].pqs[1] is not None, 1)
    d.do(act.Produce(1, "A"))
    _consume_and_commit(d, 1, 1)
    d.drain(0)
    return d


def late_reply_raises_the_new_pqs_offset(version: str) -> reset.Driver:
    """An orderly consumer subscribed to tag A of queues holding only B: its pull of queue 1 at 0 is answered
    NO_MATCHED_MSG (nextBeginOffset 3, past the three B's), and before the reply is taken a rebalance removes
    the pq (consumer 1 joined) and, consumer 1 gone again, the next one takes the queue back with a new pq. The
    late reply's correctTagsOffset runs for the removed, empty pq and raises the shared memory entry, now the
    new pq's (R6.7's exception, R8.6: an orderly overwrite a later commit may undercut)."""
    d = reset.Driver(orderly.orderly_config(version, queues=2, tags=("B",), subscription=("A",), client_shutdowns=1))
    _join(d, 0)
    d.fire(act.SendPull, _of(0, 1))
    d.drain(0)
    d.fire(act.Start, _of(1))
    d.fire(act.Rebalance, _of(0))
    d.do(act.Shutdown(1))
    d.drain(1)
    d.fire(act.Rebalance, _of(0))
    d.fire(act.ReceivePull, _of(0))
    return d


def late_found_reply_after_orderly_removal(version: str) -> reset.Driver:
    """An orderly consumer owns both queues; its pull of queue 1 brings messages 0 and 1 and queues a consume
    request (the dispatch flag set, no listener yet), and its next pull, of message 2, is answered. Consumer 1
    joins, and the rebalance removes the pq, the consume lock being free (R8.8). The late FOUND reply puts the
    message into the removed pq and dispatches nothing: its dispatch flag was still set (R6.2, R8.4)."""
    d = reset.Driver(orderly.orderly_config(version, queues=2))
    _join(d, 0)
    _pull(d, 0, 1)
    d.fire(act.SendPull, _of(0, 1))
    d.drain(0)
    d.fire(act.Start, _of(1))
    d.fire(act.Rebalance, _of(0))
    d.fire(act.ReceivePull, _of(0))
    return d


def _lagging_write(version: str) -> tuple[Config, list[act.Action]]:
    config = file_race_config(version=version)
    return config, lagging_write_race(Model(config))


_ORDERLY: tuple[tuple[str, str, Callable[[str], orderly.OrderlyRun]], ...] = (
    (
        "removal-while-listening",
        "an orderly pq removed by a rebalance while its listener runs (R8.8)",
        orderly.removal_while_listening,
    ),
    (
        "stall-past-lock-validity",
        "an orderly consume request run after a 35 s stall, its lock expired (R8.5)",
        orderly.stall_past_lock_validity,
    ),
    (
        "lock-expiry-regression",
        "an orderly listener that outlives its lock, its channel and another consumer's commits (RMQ-10)",
        lambda v: orderly.lock_expiry_regression(v, strict=False),
    ),
    (
        "stale-delayed-unlock",
        "a delayed unlock (4.9.8) firing after its queue came back to the same consumer (R8.8)",
        lambda v: orderly.stale_delayed_unlock(v, strict=False),
    ),
    (
        "listener-outlives-shutdown",
        "an orderly listener still running after its consumer's Shutdown (R4.4, R8.9)",
        orderly.listener_outlives_shutdown,
    ),
)

# A directed run draws STARTS[randrange(len(STARTS))] (campaign.units.directed_start): adding or reordering starts
# changes which seed draws which (tests choose their start by key, never by seed).
STARTS: tuple[Start, ...] = (
    *(Start(name, v, reaches, _orderly(run)) for name, reaches, run in _ORDERLY for v in (V4_9_8, V5_X)),
    Start(
        "forced-removal-under-a-slow-listener",
        V5_X,
        "5.x forcing an orderly removal past 20 s while the listener runs (R8.2, R8.8)",
        _orderly(lambda v: orderly.forced_removal_under_a_slow_listener(v, strict=False)),
    ),
    Start(
        "requeued-while-listening",
        V5_X,
        "a queue taken back with a new pq while the old pq's listener runs (R8.5)",
        _orderly(lambda v: orderly.requeued_while_listening()),
    ),
    *(
        Start(
            "master-down-with-commits",
            v,
            "a master crash with commits flushed and messages on the slave only (R2.4, R5.3)",
            _driven(slave.consumed_two_then_master_down),
        )
        for v in (V4_9_8, V5_X)
    ),
    *(
        Start(
            "slave-outage",
            v,
            "a commit on the slave, the master back with an older offset, SlaveSync (RMQ-25 (2))",
            _driven(slave.slave_outage),
        )
        for v in (V4_9_8, V5_X)
    ),
    *(
        Start(
            "commit-on-the-wire-at-channel-expiry",
            v,
            "a commit the broker never read when a stalled consumer's channel expires (R4.3)",
            _driven(commit_on_the_wire_at_channel_expiry),
        )
        for v in (V4_9_8, V5_X)
    ),
    Start(
        "timestamp-between-messages",
        V5_X,
        "CONSUME_FROM_TIMESTAMP between two store times (R10.3)",
        _driven(timestamp_between_messages),
    ),
    Start(
        "pull-beyond-the-slave",
        V4_9_8,
        "a pull past the slave's copy with offsetCheckInSlave off (R5.5, RMQ-17's schedule)",
        _driven(pull_beyond_the_slave),
    ),
    *(
        Start(
            f"restart-on-the-slave-{'synced' if synced else 'unsynced'}",
            V4_9_8,
            f"a consumer positioned by a slave that {'has' if synced else 'lacks'} its offset (R2.4, R3.8)",
            _driven(restart_on_the_slave(synced)),
        )
        for synced in (True, False)
    ),
    Start(
        "lagging-offset-file-write",
        V4_9_8,
        "a lagging persistAll undoing a removal's persist(mq) of offsets.json (docs/spec.md, 'What is real, ranked')",
        _lagging_write,
    ),
    Start(
        "consumed-then-reset",
        V5_X,
        "an admin reset below a committed offset (R3.10b)",
        _driven(lambda v: reset.consumed_then_reset(v)),
    ),
    Start(
        "late-commit-on-the-slave",
        V4_9_8,
        "a stale owner's commit landing on the slave below a newer one during a master outage (R3.2, R3.4)",
        _driven(late_commit_on_the_slave),
    ),
    Start(
        "offset-illegal-fix-on-the-slave",
        V4_9_8,
        "4.9.8's deferred OFFSET_ILLEGAL correction lowering the slave's offset, the master down (R5.7, R3.4)",
        _driven(offset_illegal_fix_below(on_slave=True)),
    ),
    Start(
        "offset-illegal-fix-below-the-master",
        V4_9_8,
        "4.9.8's deferred OFFSET_ILLEGAL correction lowering the master's offset (R5.7)",
        _driven(offset_illegal_fix_below(on_slave=False)),
    ),
    Start(
        "corrupted-offset-file-at-restart",
        V4_9_8,
        "an unreadable consumerOffset.json: the restart loads the older .bak, lowering an offset (R3.6, R3.7)",
        _driven(corrupted_offset_file_at_restart),
    ),
    Start(
        "offset-illegal-reply-after-removal",
        V4_9_8,
        "a late OFFSET_ILLEGAL reply for a removed pq, and its correction finding no pq (R5.7, R2.7)",
        _driven(offset_illegal_reply_after_removal),
    ),
    Start(
        "offset-illegal-fix-without-pq-lands-below",
        V4_9_8,
        "the correction of a removed pq committing below the new owner's offset (R5.7, R2.7, R3.2)",
        _driven(offset_illegal_fix_without_pq_lands_below),
    ),
    Start(
        "lock-refused-while-its-pq-exists",
        V5_X,
        "tryLockLaterAndReconsume's lock(mq) refused while the pq is in the table (R8.2, R8.5)",
        _driven(lock_refused_while_its_pq_exists),
    ),
    Start(
        "old-listener-rolls-back-after-requeue",
        V5_X,
        "an orderly ROLLBACK (autoCommit off) from the listener of a pq the table has replaced (R8.5, R8.6)",
        _driven(old_listener_answers_after_requeue(act.ORDERLY_ROLLBACK)),
    ),
    Start(
        "old-listener-suspends-after-requeue",
        V5_X,
        "an orderly SUSPEND from the listener of a pq the table has replaced (R8.5, R8.7)",
        _driven(old_listener_answers_after_requeue(act.SUSPEND_CURRENT_QUEUE_A_MOMENT)),
    ),
    Start(
        "orderly-broadcasting-listeners",
        V4_9_8,
        "two orderly BROADCASTING consumers listening on one queue at once (R8.4, R9.2)",
        _driven(orderly_broadcasting_listeners),
    ),
    Start(
        "expired-to-unsubscribed-retry-topic",
        V4_9_8,
        "cleanExpiredMsg sending a BROADCASTING message to a retry topic nobody subscribes to (R6.8, R7.8)",
        _driven(expired_to_unsubscribed_retry_topic),
    ),
    Start(
        "reset-to-an-unsubscribed-offset",
        V5_X,
        "an admin reset to an offset whose tag the group does not subscribe to (R3.10b, R5.5)",
        _driven(reset_to_an_unsubscribed_offset),
    ),
    Start(
        "consumer-list-without-self",
        V4_9_8,
        "an empty consumer list at a rebalance: the sharers of one clientId missing from it (R9.3 step 3, S7)",
        _driven(consumer_list_without_self),
    ),
    Start(
        "late-reply-raises-the-new-pqs-offset",
        V4_9_8,
        "a removed orderly pq's late NO_MATCHED_MSG raising the offset of the pq that replaced it (R6.7, R8.6)",
        _driven(late_reply_raises_the_new_pqs_offset),
    ),
    Start(
        "late-found-reply-after-orderly-removal",
        V4_9_8,
        "a late FOUND reply for an orderly pq removed with a consume request queued (R6.2, R8.8)",
        _driven(late_found_reply_after_orderly_removal),
    ),
)
START_BY_KEY = {s.key: s for s in STARTS}
