"""Scripted orderly-consumption scenarios (R8.5-R8.8), shared by the orderly tests and the planted-bug
tests: schedules that random walks reach too rarely, each with every property checked at every step.

- ``removal_while_listening``: a queue moves away from a consumer whose listener runs on it (RMQ-09 (1)).
- ``stall_past_lock_validity``: a consumer wakes from a 35 s stall with a consume request queued (RMQ-10's
  client-side check).
- ``requeued_while_listening``: 5.x forces the removal of a stalled consumer's queue while its listener runs,
  then gives the queue back to it (the MessageQueueLock is what keeps the two runs apart).
- ``lock_expiry_regression``: RMQ-10 itself, a stall past the broker's lock expiry and channel expiry.
- ``stale_delayed_unlock``: 4.9.8's unlockDelay releasing a lock its consumer took again meanwhile.
- ``listener_outlives_shutdown``: a consumer shuts down while its listener runs; the listener runs on after
  ``unlockAll``, and the next owner consumes the same batch beside it (docs/spec.md, "What is real, ranked").

Each returns a :class:`OrderlyRun`: the violations seen (property ids, first occurrence order), whether the
schedule ran to its end (a correct model may block a step a bug enables), and the broker offsets of queue 0
after every step, for the regression of RMQ-10.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from rmqspec.spec import actions as act
from rmqspec.spec.config import FROM_FIRST, Config
from rmqspec.spec.invariants import check_state, check_step
from rmqspec.spec.model import ActionNotEnabled, Model
from rmqspec.spec.rebalance import REBALANCE_MIN_INTERVAL
from rmqspec.spec.state import State

# Timers and ticks: what "time passes" means in a schedule (never a listener answer or a network step).
TIMERS = (
    act.Tick,
    act.BrokerFlush,
    act.PersistOffsets,
    act.Heartbeat,
    act.Rebalance,
    act.LockAll,
    act.TryLockLater,
    act.DelayedUnlock,
    act.DeliverScheduled,
)


# The timers a paced wait fires when one is due (the clock cannot pass it): never a rebalance, a listener answer
# or a network step, which are the schedule's own choices.
DUE_TIMERS = (
    act.BrokerFlush,
    act.PersistOffsets,
    act.Heartbeat,
    act.LockAll,
    act.TryLockLater,
    act.DelayedUnlock,
    act.DeliverScheduled,
    act.SlaveSync,
    act.FixOffsetIllegal,
    act.CleanExpiredMsg,  # a concurrent consumer's cleanExpireMsg timer (R6.8)
)


PACED_KINDS = (act.Rebalance, act.RebalanceWithoutSelf, act.RebalanceQueryError, act.SendPull)


def _time_passes(enabled: list[act.Action]) -> act.Action | None:
    """A tick or, while a timer due holds the clock, that timer (``DUE_TIMERS``)."""
    return next((a for a in enabled if isinstance(a, (act.Tick, *DUE_TIMERS))), None)


def wait_step(model: Model, state: State, action: act.Action) -> act.Action | None:
    """The step that lets time pass first when 5.x's pacing holds ``action`` back (a woken rebalance waits
    minInterval after the last one or the start, a new pq's first pull 500 ms; R4.2, R9.4); None when
    ``action`` is enabled, is not paced, or the model is 4.9.8."""
    if not (model.paced and isinstance(action, PACED_KINDS)):
        return None
    enabled = model.enabled(state)
    return None if action in enabled else _time_passes(enabled)


def advance_paced(
    model: Model, state: State, action: act.Action, also: Callable[[act.Action, State], None] | None = None
) -> State:
    """The state once ``wait_step`` has let at most ``REBALANCE_MIN_INTERVAL`` of clock pass before ``action``;
    ``also(step, after)`` sees each step taken (a lockstep driver applies it to the reference)."""
    begin = state.now
    while state.now - begin < REBALANCE_MIN_INTERVAL and (wait := wait_step(model, state, action)) is not None:
        state = model.step(state, wait)
        if also is not None:
            also(wait, state)
    return state


def paced_wait(
    model: Model,
    state: Callable[[], State],
    do: Callable[[act.Action], None],
    kind: type,
    where: Callable[[act.Action], bool] = lambda a: True,
) -> act.Action | None:
    """``advance_paced`` for a driver that names an action by ``kind`` and ``where`` and steps through ``do``:
    the first such action enabled once at most ``REBALANCE_MIN_INTERVAL`` of clock passed, or ``None``. A
    schedule written as "start, then rebalance" reads the same under both versions."""
    begin = state().now
    paced = model.paced and issubclass(kind, PACED_KINDS)
    while True:
        enabled = model.enabled(state())
        action = next((a for a in enabled if isinstance(a, kind) and where(a)), None)
        if action is not None or not paced or state().now - begin >= REBALANCE_MIN_INTERVAL:
            return action
        wait = _time_passes(enabled)
        if wait is None:
            return None
        do(wait)


def step_paced(model: Model, state: State, action: act.Action) -> State:
    """``model.step(state, action)`` after ``advance_paced`` (no property is checked on the way)."""
    return model.step(advance_paced(model, state, action), action)


def orderly_config(version: str, **overrides: object) -> Config:
    values: dict[str, object] = {
        "orderly": True,
        "consumers": 2,
        "queues": 1,
        "backlog": 3,
        "messages_per_queue": 3,
        "consume_from_where": FROM_FIRST,
        "client_crashes": 0,
        "client_shutdowns": 0,
        "broker_crashes": 0,
        "send_back_failures": 0,
        "version": version,
    }
    values.update(overrides)
    return Config(**values)  # type: ignore[arg-type]


@dataclass
class OrderlyRun:
    violations: list[str] = field(default_factory=list)
    completed: bool = False
    broker_offsets: list[int | None] = field(default_factory=list)  # queue 0, after every step
    taken: list[act.Action] = field(default_factory=list)
    overlap: list[tuple[int, int]] = field(default_factory=list)  # listeners (client, rid) seen running at once
    redelivery_causes: dict[str, int] = field(default_factory=dict)  # the final state's Ghost.redelivery_causes
    config: Config | None = None  # the configuration the schedule ran under

    @property
    def ids(self) -> list[str]:
        return list(dict.fromkeys(v.split(" ", 1)[0] for v in self.violations))

    @property
    def regressions(self) -> list[tuple[int, int]]:
        """Falls of queue 0's committed offset: (from, to)."""
        pairs = zip(self.broker_offsets, self.broker_offsets[1:], strict=False)
        return [(a, b) for a, b in pairs if a is not None and b is not None and b < a]


def _awake(state: State, client: int) -> bool:
    """The client's Stall is over (the schedules wait for the wake-up, wherever 5.x's pacing put the stall)."""
    until = state.clients[client].stalled_until
    return until is None or state.now >= until


class _Schedule:
    def __init__(self, config: Config, strict: bool) -> None:
        self.model = Model(config)
        self.model.tolerate_stale_unlock = not strict
        self.model.tolerate_broken_margins = not strict
        self.state: State = self.model.initial()
        self.run = OrderlyRun()

    def do(self, action: act.Action) -> None:
        if isinstance(action, PACED_KINDS) and self.model.paced:  # 5.x holds it back a moment
            paced_wait(self.model, lambda: self.state, self.do, type(action), lambda a: a == action)
        after = self.model.step(self.state, action)
        found = check_step(self.model, self.state, action, after) + check_state(self.model, after)
        self.run.violations += [f"{v.id} {v.name}: {v.detail}" for v in found]
        self.run.taken.append(action)
        self.run.broker_offsets.append(after.broker.offsets[0])
        self.state = after

    def fire(self, kind: type, where: Callable[[act.Action], bool] = lambda a: True) -> None:
        """The first enabled action of ``kind`` that ``where`` accepts, after the clock moves up to 1 s if it
        must (``paced_wait``); ActionNotEnabled if none."""
        action = paced_wait(self.model, lambda: self.state, self.do, kind, where)
        if action is None:
            raise ActionNotEnabled(act.Tick(), f"no {kind.__name__} enabled at {self.state.now}")
        self.do(action)

    def until(self, done: Callable[[State], bool], limit: int = 2_000) -> None:
        """Fire timers (the due ones first) and ticks until ``done``."""
        for _ in range(limit):
            if done(self.state):
                return
            options = [a for a in self.model.enabled(self.state) if isinstance(a, TIMERS)]
            if not options:
                raise ActionNotEnabled(act.Tick(), f"stuck at {self.state.now}")
            self.do(next((a for a in options if not isinstance(a, act.Tick)), options[0]))
        raise ActionNotEnabled(act.Tick(), f"not reached by {self.state.now}")

    def drain(self, client: int) -> None:
        while self.state.clients[client].channel:
            self.do(act.BrokerReceive(client))

    def pull(self, client: int, queue: int) -> None:
        """One pull round: send, the broker reads it, the reply is taken."""
        self.fire(act.SendPull, _by(client, queue=queue))
        self.drain(client)
        self.fire(act.ReceivePull, _by(client))

    def listen(self, client: int) -> None:
        """The oldest ready consume request of ``client`` starts its listener."""
        self.fire(act.StartConsume, _by(client))

    def finish(self, client: int, status: str = act.ORDERLY_SUCCESS) -> None:
        self.fire(act.FinishConsume, _by(client, status=status))

    def apply(self, client: int) -> None:
        self.fire(act.ApplyConsumeOffset, _by(client))

    def listen_alone_then_join(self, queue: int) -> None:
        """Consumer 0 starts alone, takes every queue, pulls ``queue`` and listens on it; consumer 1 starts."""
        self.do(act.Start(0))
        self.fire(act.Rebalance, _by(0))
        self.pull(0, queue)
        self.listen(0)
        self.do(act.Start(1))


def _by(client: int, **fields: object) -> Callable[[act.Action], bool]:
    """An action of ``client`` whose named fields have these values."""
    return lambda a: getattr(a, "client", None) == client and all(getattr(a, k) == v for k, v in fields.items())


def _scripted(config: Config, strict: bool, script: Callable[[_Schedule], None]) -> OrderlyRun:
    sched = _Schedule(config, strict)
    sched.run.config = config
    try:
        script(sched)
        sched.run.completed = True
    except ActionNotEnabled:
        pass
    sched.run.redelivery_causes = dict(sched.state.ghost.redelivery_causes)
    return sched.run


def _listening(client: int) -> Callable[[State], bool]:
    return lambda s: bool(s.clients[client].consuming)


def removal_while_listening(version: str, mutations: frozenset[str] = frozenset()) -> OrderlyRun:
    """Consumer 0 alone owns both topic queues and listens on queue 1; consumer 1 joins and is allocated
    queue 1. The correct removal keeps the lock while the listener runs (R8.8), so consumer 1 cannot lock
    queue 1 (R8.4); RMQ-09 (1)'s removal unlocks at once and consumer 1 consumes beside the listener."""
    config = orderly_config(version, queues=2, mutations=mutations)

    def script(s: _Schedule) -> None:
        s.listen_alone_then_join(1)
        s.fire(act.Rebalance, _by(0))
        s.fire(act.Rebalance, _by(1))
        s.pull(1, 1)
        s.until(lambda st: any(r.ready_at <= st.now for r in st.clients[1].requests))
        s.listen(1)

    return _scripted(config, False, script)


def stall_past_lock_validity(version: str, mutations: frozenset[str] = frozenset()) -> OrderlyRun:
    """Consumer 0 has a consume request queued and stalls 35 s; on waking it runs the request before its
    overdue lockAll. The loop must find the lock expired (30 s, R6.6) and re-lock first (R8.5)."""
    config = orderly_config(version, consumers=1, client_stalls=1, mutations=mutations)

    def script(s: _Schedule) -> None:
        s.do(act.Start(0))
        s.fire(act.Rebalance)
        s.pull(0, 0)
        s.do(act.Stall(0, 35_000))
        s.until(lambda st: _awake(st, 0))
        s.listen(0)

    return _scripted(config, False, script)


def requeued_while_listening(mutations: frozenset[str] = frozenset()) -> OrderlyRun:
    """5.x: consumer 0 listens on queue 1 and stalls 35 s; consumer 1 joins meanwhile. On waking, consumer
    0's rebalance forces the removal of queue 1 (its lock is over 20 s old, R8.8) though the listener runs;
    consumer 1 leaves, consumer 0 takes queue 1 back with a new pq and pulls. The new pq's request must wait
    for the old run's MessageQueueLock (R8.5): two listeners of one queue in one consumer otherwise."""
    config = orderly_config("5.x", queues=2, client_stalls=1, client_shutdowns=1, mutations=mutations)

    def script(s: _Schedule) -> None:
        s.listen_alone_then_join(1)
        s.do(act.Stall(0, 35_000))
        s.until(lambda st: _awake(st, 0) and st.clients[1].next_rebalance is not None)
        s.fire(act.Rebalance, _by(0))
        s.do(act.Shutdown(1))
        s.drain(1)
        s.fire(act.Rebalance, _by(0))
        s.pull(0, 1)  # the first locked pull re-reads the offset
        s.until(lambda st: any(r.queue == 1 and r.ready_at <= st.now for r in st.clients[0].requests))
        s.fire(act.StartConsume, _by(0))

    return _scripted(config, False, script)


def lock_expiry_regression(version: str, strict: bool = True) -> OrderlyRun:
    """RMQ-10: consumer 0 listens on message 0 and stalls 150 s (a GC pause). Its heartbeats stop, so the
    broker's idle scan drops its channel after 120 s; its lock expired at 60 s. Consumer 1's periodic
    rebalance takes the queue, locks it, re-reads the committed offset and consumes and commits all three
    messages while consumer 0's listener is still inside message 0. Consumer 0 wakes, its listener returns,
    and processConsumeResult commits 1 with increaseOnly=false (R8.6); its overdue persist lowers the
    broker's offset from 3 to 1. ``strict`` checks INV-12 without its timing-margin tolerance."""
    config = orderly_config(version, client_stalls=1)

    def script(s: _Schedule) -> None:
        s.listen_alone_then_join(0)
        s.fire(act.Rebalance, _by(1))
        s.do(act.Stall(0, 150_000))
        s.until(lambda st: act.ExpireChannel(0) in s.model.enabled(st))
        s.do(act.ExpireChannel(0))
        s.until(lambda st: st.clients[1].pqs[0] is not None)
        for _ in range(2):
            s.pull(1, 0)
            if s.state.clients[1].requests:
                s.listen(1)
            while s.state.clients[1].consuming or s.state.clients[1].offset_updates:
                s.finish(1) if s.state.clients[1].consuming else s.apply(1)
        while s.state.broker.offsets[0] != 3:  # consumer 1's persist timer commits 3
            s.until(lambda st: bool(st.clients[1].channel))
            s.drain(1)
        s.until(lambda st: _awake(st, 0))  # consumer 0 wakes; its consume thread runs first
        s.finish(0)
        s.apply(0)
        s.fire(act.PersistOffsets, _by(0))
        s.drain(0)

    return _scripted(config, strict, script)


def stale_delayed_unlock(version: str, strict: bool = True) -> OrderlyRun:
    """Consumer 0 alone owns both topic queues and has messages of queue 1 cached; consumer 1 joins and is
    allocated queue 1, so consumer 0's removal (4.9.8) schedules the broker unlock 20 s later (unlockDelay,
    R8.8). Consumer 1 leaves again at once, consumer 0 takes queue 1 back (its own unexpired lock is
    refreshed), and then the old unlock task fires: it releases the lock of consumer 0's new pq. Consumer 1
    comes back and locks queue 1 while consumer 0 still holds a live lock belief (INV-12a when ``strict``).
    5.x unlocks at once at removal and schedules nothing."""
    config = orderly_config(version, queues=2, client_shutdowns=1)

    def script(s: _Schedule) -> None:
        s.do(act.Start(0))
        s.fire(act.Rebalance, _by(0))
        s.pull(0, 1)
        s.do(act.Start(1))
        s.fire(act.Rebalance, _by(0))
        s.do(act.Shutdown(1))
        s.drain(1)
        s.fire(act.Rebalance, _by(0))
        if version == "4.9.8":
            s.until(lambda st: not st.clients[0].unlocks)  # the unlockDelay task fires
        s.do(act.Start(1))
        s.fire(act.Rebalance, _by(1))

    return _scripted(config, strict, script)


def listener_outlives_shutdown(version: str, mutations: frozenset[str] = frozenset()) -> OrderlyRun:
    """Consumer 0 alone owns the queue and its listener runs on offset 0; consumer 1 joins, and consumer 0
    shuts down before the listener returns. ``shutdownNow`` does not stop the listener, and ``unlockAll``
    releases the broker lock (R4.4 step 1, R8.9), so consumer 1 locks the queue, resumes at the last landed
    commit and hands offset 0 to its listener while consumer 0's still runs: an overlap INV-12 tolerates only
    because the orphan is in the state. The orphan then returns and changes nothing; consumer 1 commits.
    ``OrderlyRun.overlap`` records the listeners (client, rid) that ran at once."""
    config = orderly_config(version, client_shutdowns=1, mutations=mutations)

    def script(s: _Schedule) -> None:
        s.listen_alone_then_join(0)
        s.drain(1)
        s.do(act.Shutdown(0))
        s.drain(0)
        s.fire(act.Rebalance, _by(1))
        s.drain(1)
        s.pull(1, 0)
        s.until(lambda st: any(r.ready_at <= st.now for r in st.clients[1].requests))
        s.listen(1)
        st = s.state
        s.run.overlap = [(0, r.rid) for r in st.clients[0].orphaned] + [(1, r.rid) for r in st.clients[1].consuming]
        s.fire(act.OrphanReturns, _by(0))
        s.finish(1)
        s.apply(1)
        s.until(lambda st: bool(st.clients[1].channel))  # the persist timer sends the commit
        s.drain(1)

    return _scripted(config, True, script)


def forced_removal_under_a_slow_listener(version: str, strict: bool = True) -> OrderlyRun:
    """Consumer 0 alone owns both topic queues and listens on queue 1 for a long time; consumer 1 joins and
    is allocated queue 1. The removal is refused while the listener runs (R8.8). 5.x's lockAll leaves the
    dropped pq out (R8.2), so its lastLockTimestamp ages, and a rebalance more than 20 s later forces the
    removal and unlocks at once: consumer 1 locks queue 1 and consumes it beside the running listener, with
    no stall and no crash (INV-12 when ``strict``). 4.9.8's lockAll keeps renewing the dropped pq, so
    consumer 1 never gets the lock while the listener runs (the schedule blocks at its pull)."""
    config = orderly_config(version, queues=2)

    def script(s: _Schedule) -> None:
        s.listen_alone_then_join(1)
        s.fire(act.Rebalance, _by(0))  # refused: the listener runs
        s.fire(act.Rebalance, _by(1))  # the lock is still consumer 0's
        s.until(lambda st: st.clients[1].pqs[1] is not None)  # periodic rebalances: forced removal, then the lock
        s.pull(1, 1)
        s.until(lambda st: any(r.queue == 1 and r.ready_at <= st.now for r in st.clients[1].requests))
        s.listen(1)

    return _scripted(config, strict, script)
