"""INV-28 (``requests_count_attempts``): a concurrent consumer's new consume request hands each message with the count
of what it has been through, the stored reconsumeTimes for a pull's messages and one more than the failed run's for a
local retry after a failed send-back (R7.3, R7.5).

Each half is shown on one scripted step of the correct model: the step passes, and the same step with the new
request's count changed is reported, with the offset and both counts.
"""

from __future__ import annotations

from rmqspec.spec import actions as act
from rmqspec.spec.concurrent_consume import RECONSUME_LATER, REQUESTS_COUNT_ATTEMPTS
from rmqspec.spec.config import Config
from rmqspec.spec.model import Model
from rmqspec.spec.state import State
from rmqspec.spec.state import put_at as _put

ONE_MESSAGE = Config(
    consumers=1, queues=1, messages_per_queue=1, backlog=1, send_back_failures=1,
    consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    client_crashes=0, client_shutdowns=0, broker_crashes=0,
)  # fmt: skip
PULLED = [act.Start(0), act.Rebalance(0), act.SendPull(0, 0), act.BrokerReceive(0, 0), act.ReceivePull(0, 0)]


def _run(model: Model, actions: list[act.Action]) -> State:
    state = model.initial()
    for action in actions:
        state = model.step(state, action)
    return state


def _recount(state: State, times: int) -> State:
    """``state`` with the newest request of client 0 handing its first message with reconsumeTimes ``times``."""
    cl = state.clients[0]
    last = cl.requests[-1]
    changed = last._replace(msgs=((last.msgs[0][0], times), *last.msgs[1:]))
    return state._replace(clients=_put(state.clients, 0, cl._replace(requests=(*cl.requests[:-1], changed))))


def test_a_pulled_message_is_handed_with_its_stored_count_and_any_other_count_is_reported() -> None:
    model = Model(ONE_MESSAGE)
    before = _run(model, PULLED[:-1])
    after = model.step(before, PULLED[-1])
    assert after.clients[0].requests[-1].msgs == ((0, 0),)
    assert REQUESTS_COUNT_ATTEMPTS.check(model, before, PULLED[-1], after) is None
    detail = REQUESTS_COUNT_ATTEMPTS.check(model, before, PULLED[-1], _recount(after, 1))
    assert detail is not None and "offset 0 with reconsumeTimes 1, the stored message has 0" in detail


def test_a_local_retry_after_a_failed_send_back_counts_one_more_and_a_kept_count_is_reported() -> None:
    model = Model(ONE_MESSAGE)
    pulled = _run(model, PULLED)
    rid = pulled.clients[0].requests[-1].rid
    before = model.step(pulled, act.StartConsume(0, rid))
    finish = act.FinishConsume(0, rid, RECONSUME_LATER, -1, 1)  # the one send-back fails: a local retry
    after = model.step(before, finish)
    assert after.clients[0].requests[-1].msgs == ((0, 1),)
    assert REQUESTS_COUNT_ATTEMPTS.check(model, before, finish, after) is None
    detail = REQUESTS_COUNT_ATTEMPTS.check(model, before, finish, _recount(after, 0))
    assert detail is not None and "hands offset 0 with reconsumeTimes 0, after a run at 0" in detail
