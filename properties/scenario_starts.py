"""Directed starts: scripted prefixes that bring a random walk to a rare precondition, then let it go.

A random walk of a few hundred steps almost never lines up the interleavings some of the model's branches
need: a listener still running when its lock expires or its consumer shuts down, a delayed unlock firing
on a pq that came back, a master outage long enough for a consumer to commit on the slave and restart. The
scripted scenarios of the tests (``orderly_scenarios``, ``reset_scenarios``, ``slave_scenarios``) reach each
of them in a few dozen steps. A campaign run may begin with one of those scripts (``campaign.units``: about
one run in eight, chosen from the seed): the walk replays the script's steps, with every property and the
lockstep reference checked at each as in any walk, then goes on at random under the run's swarm profile,
so that what lies behind the precondition is searched too, not only the precondition.

Each start is ``(name, version)``: the scenario's configuration and the actions it took, scripted against
the correct model with its default tolerances. A start must be clean (no property fails on its steps):
``test_every_directed_start_is_clean_and_replays_in_lockstep`` in tests/test_campaign.py checks it. That each
script reaches its precondition is what the scenario's own tests (tests/test_orderly.py, test_slaves.py,
test_admin_reset.py, test_offset_file_writers.py) assert, and for the scripts written here
``test_the_new_directed_scripts_reach_their_preconditions`` (``pull_beyond_the_slave`` is RMQ-17's schedule,
tests/test_slaves.py). A scenario whose correct run cannot end (``removal_while_listening``
and ``requeued_while_listening`` block, by design, where the correct model refuses the next step) is a start
too: the prefix up to the block is the precondition.

Not a start: the scenarios that show real RocketMQ bugs (a 4.9.8 admin reset, RMQ-26; RMQ-17's
``offset_check_in_slave``), which the default campaign leaves out on purpose (docs/campaign.md), and
``forced_removal_under_a_slow_listener`` under 4.9.8, whose block is reached only after 2,000 steps of
ticks, beyond a run's budget.
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
from rmqspec.spec.config import FROM_TIMESTAMP, V4_9_8, V5_X, Config
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
    """Client 0's persist timer sends its commit, and before the broker reads it the client stalls 150 s: the
    broker's idle-channel scan closes the channel and the commit is lost with it (R4.3)."""
    d = reset.Driver(reset.reset_config(version, admin_resets=0, client_stalls=1))
    d.do(act.Produce(0, "A"))
    _consumed_one(d)
    d.do(act.Produce(0, "A"))
    slave.pull_once(d)
    slave.consume_everything(d)
    d.until(act.PersistOffsets)
    d.fire(act.PersistOffsets)  # the commit is on the wire; nobody reads it
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
        "a lagging persistAll undoing a removal's persist(mq) of offsets.json (docs/spec.md §18.3)",
        _lagging_write,
    ),
    Start(
        "consumed-then-reset",
        V5_X,
        "an admin reset below a committed offset (R3.10b)",
        _driven(lambda v: reset.consumed_then_reset(v)),
    ),
)
START_BY_KEY = {s.key: s for s in STARTS}
