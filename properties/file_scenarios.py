"""Scripted schedules of a BROADCASTING consumer's offsets.json writers (docs/spec.md, "What is real, ranked"), shared
by the tests of the file's unlocked writers and the campaign's directed starts (``scenario_starts``)."""

from __future__ import annotations

from rmqspec.properties.orderly_scenarios import wait_step
from rmqspec.properties.reset_scenarios import QUIET
from rmqspec.spec import actions as act
from rmqspec.spec.config import BROADCASTING, FROM_FIRST, Config
from rmqspec.spec.model import Model
from rmqspec.spec.pull import PULL_MAX_IDLE_TIME


def file_race_config(**overrides: object) -> Config:
    values: dict[str, object] = {
        "mode": BROADCASTING,
        "consumers": 1,
        "queues": 1,
        "backlog": 3,
        "messages_per_queue": 3,
        "consume_from_where": FROM_FIRST,
        **QUIET,
        "lagging_file_writes": 1,
        "consume_timeout": 900_000,  # RocketMQ's 15 min: the cleaner stays out of this schedule (R6.8)
    }
    values.update(overrides)
    return Config(**values)  # type: ignore[arg-type]


def lagging_write_race(model: Model) -> list[act.Action]:
    """Consumer 0 consumes offset 0 (memory 1) and starts the listener of offset 1; its next pull is never
    answered, so the pq is pull-expired after 120 s (R9.4). When the persist timer and the rebalance are both
    due, the timer's persistAll reads the file and merges memory 1, then the listener returns (memory 2), the
    rebalance removes the expired pq with persist(mq) (file 2) and re-creates it, and the lagging write lands:
    the file goes back to 1."""
    s = model.initial()
    taken: list[act.Action] = []

    def do(a: act.Action) -> None:
        nonlocal s
        while (wait := wait_step(model, s, a)) is not None:  # 5.x paces rebalances and first pulls (R4.2, R9.4)
            s = model.step(s, wait)
            taken.append(wait)
        assert a in model.enabled(s), (a, s.now)
        s = model.step(s, a)
        taken.append(a)

    def first(kind: type, **fields: object) -> act.Action:
        return next(
            a for a in model.enabled(s) if isinstance(a, kind) and all(getattr(a, k) == v for k, v in fields.items())
        )

    do(act.Start(0))
    do(act.Rebalance(0))
    do(act.SendPull(0, 0))
    do(act.BrokerReceive(0))
    do(first(act.ReceivePull))
    for kind in (act.StartConsume, act.FinishConsume, act.ApplyConsumeOffset, act.StartConsume):
        do(first(kind, **({"ack_index": 0} if kind is act.FinishConsume else {})))
    do(act.SendPull(0, 0))
    while True:
        enabled = model.enabled(s)
        pq = s.clients[0].pqs[0]
        expired = pq is not None and s.now - pq.last_pull > PULL_MAX_IDLE_TIME
        if expired and act.PersistOffsets(0) in enabled and act.Rebalance(0) in enabled:
            break
        timers = [
            a
            for a in enabled
            if isinstance(a, (act.Heartbeat, act.BrokerFlush, act.PersistOffsets, act.Rebalance))
            and not getattr(a, "lagging", 0)
        ]
        do(timers[0] if timers else act.Tick())
    do(act.PersistOffsets(0, 1))
    do(first(act.FinishConsume, ack_index=0))
    do(first(act.ApplyConsumeOffset))
    do(act.Rebalance(0))
    do(act.OffsetFileWriteLands(0))
    return taken
