"""Time: the ``Tick`` action and the timers it may not pass.

RocketMQ runs its periodic work on ``ScheduledExecutorService`` tasks: the client's persist, heartbeat and
rebalance timers (``MQClientInstance#startScheduledTask``, ``RebalanceService``; the client timers
(ConsumerProcessMixin), RebalanceService (RebalanceMixin._rebalance)), orderly ``lockMQPeriodically`` (the lockAll
timer, ClientLocksMixin._lock_all), ``cleanExpireMsg`` (cleanExpiredMsg, ConcurrentConsumeMixin._clean_expired_msg), the
broker's consumer-offset flush (the broker's flush, BrokerMixin._broker_flush) and the scheduled-message delivery (the
broker's send-back, ConcurrentConsumeMixin._goes_to_dlq). The model has no clock of its own: ``Tick`` jumps to the
earliest future deadline and is not enabled while a timer is due, so every timer fires on time relative to the clock
while interleaving freely with everything else (docs/rules.md, "Timers, persistence cadence and shutdown"
and "Constants").

Its actions, before the class: ``Tick``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rmqspec.spec.enabling import ActionNotEnabled
from rmqspec.spec.rebalance import REBALANCE_MIN_INTERVAL
from rmqspec.spec.state import PULL_READY, State

if TYPE_CHECKING:
    from rmqspec.spec.model import Model


# Actions of time, each handled by its transition ``_<snake_case name>`` below
@dataclass(frozen=True, slots=True)
class Tick:
    """Advance the clock to the next deadline; only when no timer is due."""


class ClockMixin:
    """``Model``'s transitions and helpers for time; see the module docstring."""

    def _timers_due(self: Model, s: State) -> bool:
        now, b = s.now, s.broker
        if b.up and ((b.next_flush is not None and b.next_flush <= now) or (b.scheduled and b.scheduled[0].due <= now)):
            return True
        if s.slave is not None and s.slave.next_sync is not None and s.slave.next_sync <= now:  # slaves
            return True
        for cl in s.clients:
            if (
                cl.running
                and not self._stalled(s, cl)
                and (
                    any(due <= now for _, _, due in cl.relocks)  # orderly consume loop
                    or any(due <= now for _, due in cl.unlocks)
                    or (cl.next_persist is not None and cl.next_persist <= now)
                    or (cl.next_clean is not None and cl.next_clean <= now)
                    or (cl.next_rebalance is not None and cl.next_rebalance <= now)
                    or (cl.next_heartbeat is not None and cl.next_heartbeat <= now)
                    or (cl.next_lock_all is not None and cl.next_lock_all <= now)
                    or any(f.due <= now for f in cl.offset_fixes)  # the OFFSET_ILLEGAL fix (the pull-status handling,
                    # PullMixin._receive_pull)
                    or (cl.reset_wake is not None and cl.reset_wake <= now)  # admin reset
                )
            ):
                return True
        return False

    def _next_deadline(self: Model, s: State) -> int | None:
        now, b = s.now, s.broker
        times: list[int] = []
        if b.up:
            if b.next_flush is not None:
                times.append(b.next_flush)
            if b.scheduled:
                times.append(b.scheduled[0].due)
        if s.slave is not None and s.slave.next_sync is not None:  # slaves
            times.append(s.slave.next_sync)
        for cl in s.clients:
            if not cl.running:
                continue
            if self._stalled(s, cl):  # orderly consume loop: nothing of a paused client runs until it wakes
                times.append(cl.stalled_until)  # type: ignore[arg-type]
                continue
            times.extend(due for _, _, due in cl.relocks)  # orderly consume loop
            times.extend(due for _, due in cl.unlocks)
            for t in (cl.next_persist, cl.next_rebalance, cl.next_heartbeat, cl.next_lock_all, cl.next_clean):
                if t is not None:
                    times.append(t)
            times.extend(r.ready_at for r in cl.requests)
            times.extend(pq.pull_ready_at for pq in cl.pqs if pq is not None and pq.pull_state == PULL_READY)
            times.extend(f.due for f in cl.offset_fixes)  # the OFFSET_ILLEGAL fix (the pull-status handling,
            # PullMixin._receive_pull)
            if cl.reset_wake is not None:  # admin reset
                times.append(cl.reset_wake)
            if cl.rebalance_requested and self.paced:  # 5.x: a woken rebalance waits minInterval
                times.append(cl.last_rebalance + REBALANCE_MIN_INTERVAL)
        later = [t for t in times if t > now]
        return min(later) if later else None

    def _tick(self: Model, s: State, a: Tick) -> State:
        """Tick. Enabled: no timer is due and some deadline lies ahead. Effect: the clock jumps to
        the earliest future deadline (a timer, a delayed pull or a delayed consume request); the
        flow-control retries of the interval refresh lastPullTimestamp (``_flow_control_retries``)."""
        if self._timers_due(s):
            raise ActionNotEnabled(a, "a timer is due and must fire first")
        target = self._next_deadline(s)
        if target is None:
            raise ActionNotEnabled(a, "nothing is scheduled")
        return self._flow_control_retries(s._replace(now=target))
