"""Scripted slave scenarios (docs/spec.md, section slave; R2.4, R2.5, R3.4, R3.8, R5.3-R5.5), shared by the model's
slave tests and the lockstep ones: one consumer of one queue whose broker has a slave, driven through a master
outage with every property checked at every step (``reset_scenarios.Driver``).

- ``consumed_two_then_master_down``: messages 0 and 1 consumed and committed (2, flushed), 2 and 3 produced
  and copied to the slave, then the master crashes.
- ``slave_outage``: that, then the consumer reads from the slave and commits 4 there; the master comes back with
  2 and the consumer restarts before it persists again; SlaveSync puts 2 back (RMQ-25 (2)).
- ``RMQ17_SCHEDULE``: RMQ-17's shrunk walk.
"""

from __future__ import annotations

from rmqspec.properties.reset_scenarios import Driver
from rmqspec.spec import actions as act
from rmqspec.spec.config import FROM_FIRST, V4_9_8, Config

QUIET = {"client_crashes": 0, "client_shutdowns": 0, "broker_crashes": 1, "send_back_failures": 0}


def slave_config(version: str = V4_9_8, **overrides: object) -> Config:
    values: dict[str, object] = {
        "consumers": 1,
        "queues": 1,
        "messages_per_queue": 4,
        "consume_from_where": FROM_FIRST,
        "slave": True,
        "version": version,
        **QUIET,
    }
    values.update(overrides)
    return Config(**values)  # type: ignore[arg-type]


def consume_everything(d: Driver) -> None:
    """Run every consume request of client 0 to success and apply its offset."""
    while True:
        enabled = d.model.enabled(d.state)
        step = next(
            (
                a
                for a in enabled
                if isinstance(a, act.StartConsume | act.ApplyConsumeOffset)
                or (isinstance(a, act.FinishConsume) and a.status == act.CONSUME_SUCCESS and not a.send_back_fails)
            ),
            None,
        )
        if step is None:
            return
        d.do(step)


def pull_once(d: Driver) -> None:
    d.fire(act.SendPull)
    d.drain()
    d.fire(act.ReceivePull)


def persist_and_land(d: Driver) -> None:
    """Client 0's next persist timer, and the broker reads what it sent."""
    d.until(act.PersistOffsets)
    d.fire(act.PersistOffsets)
    d.drain()


def consumed_two_then_master_down(version: str, **overrides: object) -> Driver:
    d = Driver(slave_config(version, **overrides))
    d.fire(act.Start)
    d.fire(act.Rebalance)
    d.do(act.Produce(0, "A"))
    d.do(act.Produce(0, "A"))
    d.do(act.SlaveReplicate(0))
    pull_once(d)
    consume_everything(d)
    persist_and_land(d)
    d.until(act.BrokerFlush)
    d.fire(act.BrokerFlush)
    d.do(act.Produce(0, "A"))
    d.do(act.Produce(0, "A"))
    d.do(act.SlaveReplicate(0))
    d.do(act.BrokerCrash())
    return d


def slave_outage(version: str, tolerate_slave_sync: bool = True) -> Driver:
    """RMQ-25 (2), to the consumer's restart after the sync (``client_crashes`` 1)."""
    d = consumed_two_then_master_down(version, client_crashes=1)
    d.model.tolerate_slave_sync = tolerate_slave_sync
    pull_once(d)
    consume_everything(d)
    persist_and_land(d)
    d.do(act.BrokerRestart())
    d.do(act.Crash(0))
    d.until(act.SlaveSync)
    d.fire(act.SlaveSync)
    d.fire(act.Start)
    d.fire(act.Rebalance)
    return d


# RMQ-17, shrunk from a walk (seed 234 of `explore(config, 300, 300, fault_rate=0.02)`): one message consumed from
# the master, which crashes before the slave copies it; the next pull goes to the slave at offset 1.
RMQ17_SCHEDULE: tuple[act.Action, ...] = (
    act.Start(0),
    act.Rebalance(0),
    act.Produce(0, "A"),
    act.SendPull(0, 0),
    act.BrokerReceive(0),
    act.ReceivePull(0, 0),
    act.BrokerCrash(),
    act.SendPull(0, 0),
    act.BrokerReceive(0),
    act.ReceivePull(0, 0),
)
