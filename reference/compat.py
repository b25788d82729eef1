"""Switches that make the reference behave like the model where the model departs from RocketMQ 4.9.8.

The refinement check compares two independent formulations: the model (``rmqspec.spec``) and this
RocketMQ-shaped reference. Where reading RocketMQ 4.9.8 (and semantics.md) gave a different answer
from the model, the reference implements RocketMQ and names the difference here. Each switch, when
True (the default, used by the lockstep test), makes the reference take the model's branch instead;
:meth:`SpecCompat.faithful` turns them all off. Tests show that each switch is load-bearing: with it
off, the lockstep check finds a divergence.
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class SpecCompat:
    # R9.3 steps 2-3, R11.0: a broker with no consumer registered answers GET_CONSUMER_LIST_BY_GROUP
    # with SYSTEM_ERROR, findConsumerIdList gives null and the rebalance keeps every pq. The model
    # allocates over the empty list, so the consumer drops all its queues.
    empty_consumer_list_drops_queues: bool = True
    # R5.2/R5.4: without postSubscriptionWhenPull (default false) the broker looks the subscription up
    # in its ConsumerManager and rejects a pull of an unregistered group (SUBSCRIPTION_NOT_EXIST, or
    # SUBSCRIPTION_NOT_LATEST) before the piggy-backed commit. The model's broker never rejects, which
    # is what postSubscriptionWhenPull=true gives.
    post_subscription_when_pull: bool = True
    # R9.6 step 3: RebalancePushImpl.messageQueueChanged bumps subVersion and sends a heartbeat to all
    # brokers whenever a rebalance changed the pq table; the model registers only by the 30 s timer
    # and at start.
    no_heartbeat_on_rebalance_change: bool = True
    # R5.7: the FOUND branch of the PullCallback has no dropped check, so a reply for a dropped pq still
    # runs putMessage and submits ConsumeRequests (which return at once, R7.2 step 1). The model
    # ignores the reply (no requests, no ids minted).
    ignore_found_for_dropped_pq: bool = True
    # R5.4/R5.5: a pull that finds messages is answered at once from the queue as it is then; only
    # PULL_NOT_FOUND is held for long polling. The model computes every answer when the client takes
    # it, so messages produced in between are included.
    pull_result_at_reply: bool = True
    # R9.4 Phase A: a pq not pulled for 120 s (isPullExpired) is dropped and re-created. The model has
    # no pull expiry (nor the 15 s hold / 30 s client timeouts that keep RocketMQ's pulls short).
    no_pull_expiry: bool = True
    # R9.7, ConsumerManager#unregisterConsumer: the CHANGE notification is sent whenever the group
    # exists, even if that client's channel was not registered (e.g. after a broker restart, before its
    # heartbeat). The model notifies only when the client was listed.
    unregister_notifies_only_if_listed: bool = True
    # R10.3: ConsumeQueue#getOffsetInQueueByTime returns the binary-search hit among equal store times;
    # the model returns the first message stored at that time.
    search_offset_first_equal: bool = True
    # R5.5, DefaultMessageStore#isTheBatchFull: a pull returns at most maxTransferCountOnMessageInMemory
    # (32) messages, whatever pullBatchSize asks for; the model fills the whole batch.
    pull_batch_not_capped: bool = True

    @classmethod
    def faithful(cls) -> SpecCompat:
        """Every switch off: the reference does what RocketMQ 4.9.8 does."""
        return cls(**{f.name: False for f in fields(cls)})

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))
