"""Contracts over the model's pure helpers, for CrossHair's symbolic execution.

Each function states a property of a pure helper of ``rmqspec.spec`` as PEP 316 ``pre:`` and
``post:`` conditions; ``crosshair check --analysis_kind=PEP316`` searches the preconditions'
whole (bounded) input space for a counterexample instead of sampling it. The bounds are small
because the properties are about shapes, not sizes: AVG's arithmetic has the same cases at
6 queues as at 600.
"""

from __future__ import annotations

from rmqspec.spec import broker_rules as br
from rmqspec.spec.allocation import allocate
from rmqspec.spec.state import BrokerQueue, Message
from rmqspec.spec.variants.rebalance import overlapping_avg


def _partitions(strategy: str, n: int, c: int, overlap: bool = False) -> bool:
    mqs = tuple(f"MessageQueue [topic=T, brokerName=b, queueId={j}]" for j in range(n))
    cids = tuple(f"10.0.0.{i + 1}@c{i}" for i in range(c))
    taken: list[int] = []
    for cid in cids:
        if overlap:  # the planted bug avg_blocks_overlap (spec/variants/rebalance.py)
            taken.extend(overlapping_avg(cid, mqs, cids))
        else:
            taken.extend(allocate.__wrapped__(strategy, cid, mqs, cids, 10))
    return sorted(taken) == list(range(n))


def avg_allocation_is_a_partition(n: int, c: int) -> bool:
    """INV-13 for AVG (R11.1): every queue goes to exactly one consumer.

    pre: 1 <= n <= 8
    pre: 1 <= c <= 5
    post: __return__
    """
    return _partitions("AVG", n, c)


def circle_allocation_is_a_partition(n: int, c: int) -> bool:
    """INV-13 for AVG_BY_CIRCLE (R11.2).

    pre: 1 <= n <= 8
    pre: 1 <= c <= 5
    post: __return__
    """
    return _partitions("AVG_BY_CIRCLE", n, c)


def query_never_answers_a_negative_offset(
    stored: int, has_entry: bool, messages: int, head_hot: bool, in_memory_rule: bool
) -> bool:
    """INV-7 (R3.5): QUERY_CONSUMER_OFFSET answers NOT_FOUND or an offset >= 0, under the young-queue
    rule of either version (``in_memory_rule``: 5.1.0+).

    pre: 0 <= messages <= 3
    post: __return__
    """
    queue = BrokerQueue(tuple(Message((0, o), "A", 0) for o in range(messages)), head_hot)
    answer = br.query_consumer_offset(stored if has_entry else None, queue, head_in_memory_rule=in_memory_rule)
    return answer is None or answer >= 0


def young_answer_differs_only_for_an_empty_queue(messages: int, head_hot: bool) -> bool:
    """R3.5: the 4.9.8 and 5.1.0+ young-queue rules disagree exactly on an empty queue (0 against
    NOT_FOUND) when the group has no offset.

    pre: 0 <= messages <= 3
    post: __return__
    """
    queue = BrokerQueue(tuple(Message((0, o), "A", 0) for o in range(messages)), head_hot and messages > 0)
    old = br.query_consumer_offset(None, queue)
    new = br.query_consumer_offset(None, queue, head_in_memory_rule=True)
    return (old != new) == (messages == 0)


def retry_delays_never_shrink(k: int) -> bool:
    """R7.7: each further failure waits at least as long; the first retry waits 10 s.

    pre: 0 <= k <= 20
    post: __return__
    """
    return br.retry_delay_ms(k) <= br.retry_delay_ms(k + 1) and br.retry_delay_ms(0) == 10_000


def pull_result_stays_in_the_queue(offset: int, messages: int, batch: int) -> bool:
    """R5.5: a pull inside [0, maxOffset] returns offsets in the queue and a nextBeginOffset no
    lower than the request and no higher than maxOffset.

    pre: 0 <= messages <= 4
    pre: 0 <= offset <= messages
    pre: 1 <= batch <= 3
    post: __return__
    """
    queue = BrokerQueue(tuple(Message((0, o), "A", 0) for o in range(messages)), True)
    result = br.pull_result(queue, offset, batch, None)
    inside = all(offset <= o < messages for o in result.found)
    return inside and offset <= result.next_begin <= messages and len(result.found) <= batch
