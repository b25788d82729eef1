"""INV-2b and INV-33: the memory offset keeps up with what a pq was given and what it no longer holds.

- INV-2b (``commit_keeps_up_with_removal``, R6.3, R7.3, R1.5): a live pq's consume result queues at least what
  removeMessage owes (the lowest offset still held, queueOffsetMax + 1 once the tree empties), and its updateOffset
  leaves memory at least there.
- INV-33 (``positioning_seeds_memory``, R1.11, R2.3, R10.1): a pq positioned at an offset it read leaves that offset in
  memory.

Each is shown on scripted steps of the correct model: the step passes, and the same step with its effect changed the
way a broken client would leave it is reported.
"""

from __future__ import annotations

from rmqspec.spec import actions as act
from rmqspec.spec.concurrent_consume import COMMIT_KEEPS_UP_WITH_REMOVAL as INV2B
from rmqspec.spec.concurrent_consume import CONSUME_SUCCESS
from rmqspec.spec.config import Config
from rmqspec.spec.model import Model
from rmqspec.spec.rebalance import POSITIONING_SEEDS_MEMORY as INV33
from rmqspec.spec.state import State, pq_key
from rmqspec.spec.state import put_at as _put

QUIET = {"client_crashes": 0, "client_shutdowns": 0, "broker_crashes": 0}
TWO_MESSAGES = Config(consumers=1, queues=1, messages_per_queue=2, backlog=2,
                      consume_from_where="CONSUME_FROM_FIRST_OFFSET", **QUIET)  # fmt: skip
PULLED = [act.Start(0), act.Rebalance(0), act.SendPull(0, 0), act.BrokerReceive(0, 0), act.ReceivePull(0, 0)]


def _run(model: Model, actions: list[act.Action], state: State | None = None) -> State:
    state = model.initial() if state is None else state
    for action in actions:
        state = model.step(state, action)
    return state


def _client(state: State, i: int, **fields: object) -> State:
    return state._replace(clients=_put(state.clients, i, state.clients[i]._replace(**fields)))


def _both_listening(model: Model) -> tuple[State, int, int]:
    """Offsets 0 and 1 pulled into one pq, each in its own consume request, both listeners running."""
    state = _run(model, PULLED)
    first, second = (r.rid for r in state.clients[0].requests)
    return _run(model, [act.StartConsume(0, first), act.StartConsume(0, second)], state), first, second


def test_the_result_that_empties_the_tree_owes_queue_offset_max_plus_one_and_a_shorter_one_is_reported() -> None:
    model = Model(TWO_MESSAGES)
    state, first, second = _both_listening(model)
    # the later message finishes first: offset 0 is still held, so removeMessage owes 0
    finish_second = act.FinishConsume(0, second, CONSUME_SUCCESS, 0, 0)
    after_second = model.step(state, finish_second)
    assert [u.offset for u in after_second.clients[0].offset_updates] == [0]
    assert INV2B.check(model, state, finish_second, after_second) is None
    # the earlier one empties the tree: queueOffsetMax 1, so it owes 2
    finish_first = act.FinishConsume(0, first, CONSUME_SUCCESS, 0, 0)
    emptied = model.step(after_second, finish_first)
    update = next(u for u in emptied.clients[0].offset_updates if u.rid == first)
    assert update.offset == 2 and emptied.clients[0].pqs[0].tree == 0
    assert INV2B.check(model, after_second, finish_first, emptied) is None
    # the tree's last key + 1 (the 2013 removeMessage) falls short of the message consumed first
    short = emptied.clients[0].offset_updates
    short = tuple(u._replace(offset=1) if u.rid == first else u for u in short)
    detail = INV2B.check(model, after_second, finish_first, _client(emptied, 0, offset_updates=short))
    emptied_at = "the tree emptied at queueOffsetMax 1"
    assert detail == f"client 0 queue 0: the result of request {first} commits 1, but {emptied_at}"
    # a result that queues nothing at all (its update lost)
    lost = tuple(u for u in emptied.clients[0].offset_updates if u.rid != first)
    detail = INV2B.check(model, after_second, finish_first, _client(emptied, 0, offset_updates=lost))
    assert detail == f"client 0 queue 0: the result of request {first} queued no offset; removeMessage owes 2"


def test_an_update_offset_that_leaves_memory_below_the_result_is_reported_and_a_dropped_pqs_is_not_judged() -> None:
    model = Model(TWO_MESSAGES)
    state, first, second = _both_listening(model)
    state = _run(model, [act.FinishConsume(0, second, CONSUME_SUCCESS, 0, 0),
                         act.FinishConsume(0, first, CONSUME_SUCCESS, 0, 0)], state)  # fmt: skip
    apply = act.ApplyConsumeOffset(0, first)
    applied = model.step(state, apply)
    assert applied.clients[0].mem[0] == 2
    assert INV2B.check(model, state, apply, applied) is None
    kept = _client(applied, 0, mem=state.clients[0].mem)  # updateOffset skipped: memory still 0
    assert INV2B.check(model, state, apply, kept) == "client 0 queue 0: updateOffset of 2 left the memory offset at 0"
    # a pq dropped in between: its result changes no offset, which INV-5 judges and INV-2b leaves alone
    dropped = _client(state, 0, pqs=_put(state.clients[0].pqs, 0, None))
    after_drop = model.step(dropped, apply)
    assert after_drop.clients[0].mem == dropped.clients[0].mem
    assert INV2B.check(model, dropped, apply, after_drop) is None


def test_a_pq_positioned_at_the_broker_offset_it_read_leaves_it_in_memory_and_one_left_empty_is_reported() -> None:
    model = Model(Config(consumers=1, queues=1, messages_per_queue=2, backlog=2, client_crashes=0, broker_crashes=0,
                         consume_from_where="CONSUME_FROM_FIRST_OFFSET"))  # fmt: skip
    state = _run(model, PULLED)
    rid = state.clients[0].requests[0].rid
    # offset 0 consumed, the shutdown's persistAll commits 1, and the consumer starts again
    state = _run(model, [act.StartConsume(0, rid), act.FinishConsume(0, rid, CONSUME_SUCCESS, 0, 0),
                         act.ApplyConsumeOffset(0, rid), act.Shutdown(0), act.BrokerReceive(0, 0), act.Start(0)],
                 state)  # fmt: skip
    assert state.broker.offsets[0] == 1
    rebalance = act.Rebalance(0)
    positioned = model.step(state, rebalance)
    assert positioned.clients[0].pqs[0] is not None and positioned.clients[0].mem[0] == 1
    assert INV33.check(model, state, rebalance, positioned) is None
    empty = _client(positioned, 0, mem=_put(positioned.clients[0].mem, 0, None))
    detail = INV33.check(model, state, rebalance, empty)
    read = "positioned at 1 by the offset it read (stored-offset)"
    assert detail == f"client 0 queue 0: {read}, but the memory offset is None"


def test_a_position_consume_from_where_chose_is_not_judged_by_what_memory_holds() -> None:
    model = Model(Config(consumers=1, queues=1, messages_per_queue=2, backlog=2,
                         consume_from_where="CONSUME_FROM_LAST_OFFSET", **QUIET))  # fmt: skip
    state = _run(model, [act.Start(0), act.CoolQueueHead(0)])  # no longer young: the broker answers QUERY_NOT_FOUND
    rebalance = act.Rebalance(0)
    positioned = model.step(state, rebalance)
    pq = positioned.clients[0].pqs[0]
    assert pq is not None
    assert [how for key, _, how in positioned.ghost.starts if key == pq_key(0, pq.uid)] == ["consume-from-last"]
    assert positioned.clients[0].mem[0] is None  # no stored offset: no updateOffset (R10.1)
    assert INV33.check(model, state, rebalance, positioned) is None
