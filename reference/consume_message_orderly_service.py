"""The lock half of ``ConsumeMessageOrderlyService`` (semantics R8.3, R8.9, R4.4).

In RocketMQ 4.9.8 an orderly push consumer's ``ConsumeMessageOrderlyService.start`` schedules
``lockMQPeriodically`` in CLUSTERING: ``RebalanceImpl.lockAll`` every 20 s
(``rocketmq.client.rebalance.lockInterval``), first after 1 s; ``shutdown`` stops it and, in
CLUSTERING, calls ``unlockAll(false)`` (synchronous UNLOCK_BATCH_MQ).

Only that part is implemented so far. The orderly consume loop (R8.5-R8.7: the per-queue consume
lock, ``takeMessages``, ``commit`` with ``increaseOnly=false``, suspend and local retry) is not: an
orderly consumer of the reference still consumes through ``ConsumeMessageConcurrentlyService``,
exactly as the model (``Config.orderly``) does until it models that loop (docs/spec.md).

The task runs on the client instance's scheduled executor under ``LOCK_MQ_TASK_NAME`` (Java gives
the service its own single-thread scheduler; the schedule is the same) so that the driver's clock
treats it like the other timers.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final

from rmqspec.reference.mq_client_instance import LOCK_MQ_TASK_NAME
from rmqspec.reference.scheduler import ScheduledFuture

if TYPE_CHECKING:
    from rmqspec.reference.default_mq_push_consumer_impl import DefaultMQPushConsumerImpl

log = logging.getLogger(__name__)

REBALANCE_LOCK_INTERVAL: Final = 20_000  # rocketmq.client.rebalance.lockInterval (R8.3)
LOCK_MQ_INITIAL_DELAY: Final = 1_000


class ConsumeMessageOrderlyService:
    """``ConsumeMessageOrderlyService``: start (lock renewal) and shutdown (unlockAll) only."""

    def __init__(self, consumer_impl: DefaultMQPushConsumerImpl) -> None:
        self.consumer_impl = consumer_impl
        self.stopped = False
        self.future: ScheduledFuture | None = None

    def _clustering(self) -> bool:
        return self.consumer_impl.default_mq_push_consumer.message_model == "CLUSTERING"

    def start(self) -> None:
        if self._clustering():
            self.future = self.consumer_impl.mq_client_factory.scheduled_executor_service.schedule_at_fixed_rate(
                LOCK_MQ_TASK_NAME, self.lock_mq_periodically, LOCK_MQ_INITIAL_DELAY, REBALANCE_LOCK_INTERVAL
            )

    def lock_mq_periodically(self) -> None:
        """R8.3: ``lockAll`` unless stopped (4.9.3+ catches what it throws, #3861)."""
        if self.stopped:
            return
        try:
            self.consumer_impl.rebalance_impl.lock_all()
        except Exception as e:
            log.error("lockMQPeriodically exception %s", e)

    def shutdown(self) -> None:
        """R4.4 step 1, R8.9: stop the schedule, then in CLUSTERING ``unlockAll(false)``."""
        self.stopped = True
        if self.future is not None:
            self.future.cancel()
            self.future = None
        if self._clustering():
            self.consumer_impl.rebalance_impl.unlock_all(False)
