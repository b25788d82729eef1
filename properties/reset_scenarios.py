"""Scripted admin-reset scenarios (R3.10a, R3.10b), shared by the reset tests and the
planted-bug tests: a driver that steps the model by kinds of action with every property checked, and the
4.9.8 race of RMQ-26 in its racing and its patient order."""

from __future__ import annotations

from collections.abc import Callable

from rmqspec.properties.orderly_scenarios import PACED_KINDS, paced_wait
from rmqspec.spec import actions as act
from rmqspec.spec.config import FROM_FIRST, V4_9_8, Config
from rmqspec.spec.invariants import check_state, check_step
from rmqspec.spec.model import Model
from rmqspec.spec.state import State

QUIET = {"client_crashes": 0, "client_shutdowns": 0, "broker_crashes": 0, "send_back_failures": 0}


def reset_config(version: str, **overrides: object) -> Config:
    values: dict[str, object] = {
        "consumers": 1,
        "queues": 1,
        "messages_per_queue": 3,
        "consume_from_where": FROM_FIRST,
        "admin_resets": 1,
        "version": version,
        **QUIET,
    }
    values.update(overrides)
    return Config(**values)  # type: ignore[arg-type]


class Driver:
    """Steps a model through named kinds of action, checking every property at every step."""

    def __init__(self, config: Config) -> None:
        self.model = Model(config)
        self.state: State = self.model.initial()
        self.taken: list[act.Action] = []
        self.violations: list[str] = []

    def fire(self, kind: type, where: Callable[[act.Action], bool] = lambda a: True) -> act.Action:
        """The first enabled action of ``kind`` that ``where`` accepts, after the clock moves up to 1 s if 5.x's
        pacing makes it wait (``orderly_scenarios.paced_wait``)."""
        action = paced_wait(self.model, lambda: self.state, self.do, kind, where)
        if action is None:
            raise StopIteration(f"no {kind.__name__} enabled at {self.state.now}")
        self.do(action)
        return action

    def do(self, action: act.Action) -> None:
        if isinstance(action, PACED_KINDS) and self.model.paced:  # 5.x holds it back a moment
            paced_wait(self.model, lambda: self.state, self.do, type(action), lambda a: a == action)
        after = self.model.step(self.state, action)
        found = check_step(self.model, self.state, action, after) + check_state(self.model, after)
        self.violations += [f"{v.id} {v.name}: {v.detail}" for v in found]
        self.taken.append(action)
        self.state = after

    def drain(self, client: int = 0) -> None:
        while self.state.clients[client].channel:
            self.do(act.BrokerReceive(client))

    def until(self, kind: type) -> None:
        """Fire due timers (never BrokerReceive) and ticks until an action of ``kind`` is enabled."""
        timers = (act.PersistOffsets, act.Heartbeat, act.BrokerFlush, act.Rebalance, act.SlaveSync, act.CleanExpiredMsg)
        while not any(isinstance(a, kind) for a in self.model.enabled(self.state)):
            enabled = self.model.enabled(self.state)
            due = [a for a in enabled if isinstance(a, timers)]
            self.do(due[0] if due else next(a for a in enabled if isinstance(a, act.Tick)))


def consumed_then_reset(version: str, **overrides: object) -> Driver:
    """Consumer 0 consumes and commits message 0 of queue 0 (broker offset 1), then the admin resets
    queue 0 to offset 0."""
    d = Driver(reset_config(version, **overrides))
    d.do(act.Produce(0, "A"))
    d.do(act.Produce(0, "A"))
    d.do(act.Start(0))
    d.do(act.Rebalance(0))
    d.do(act.SendPull(0, 0))
    d.drain()
    d.fire(act.ReceivePull)
    d.fire(act.StartConsume)  # the request of offset 0
    d.fire(act.FinishConsume, lambda a: isinstance(a, act.FinishConsume) and a.ack_index == 0)
    d.fire(act.ApplyConsumeOffset)
    d.until(act.PersistOffsets)
    d.fire(act.PersistOffsets)
    d.drain()
    assert d.state.broker.offsets[0] == 1
    d.do(act.AdminReset(0, 0, False))
    return d


def resume_after_reset(d: Driver, patient: bool) -> None:
    """4.9.8: the RESET push arrives, the 10 s sleep passes, the client resumes and rebalances, either
    before (racing) or after (patient) its oneway persist of the reset offset has landed; then the new
    pq pulls."""
    d.fire(act.ClientResetReceive)
    d.until(act.ClientResetWake)
    d.fire(act.ClientResetWake)
    if patient:
        d.drain()
    d.fire(act.Rebalance)
    d.do(act.SendPull(0, 0))
    d.drain()
    d.fire(act.ReceivePull)


def patient_reset_violations(mutations: frozenset[str]) -> list[str]:
    """Ids of the properties that fail on the patient 4.9.8 order (the reset's persist lands before the
    rebalance), for a model with ``mutations``: none for the correct model."""
    d = consumed_then_reset(V4_9_8, mutations=mutations)
    resume_after_reset(d, patient=True)
    return sorted({v.split(" ", 1)[0] for v in d.violations})
