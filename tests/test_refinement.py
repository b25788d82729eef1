"""Refinement check: the RocketMQ-shaped reference implementation (``rmqspec.reference``) against the model.

The lockstep tests walk the model at random (``random.Random(seed)`` over ``Model.enabled``), apply
each action to both ``Model.step`` and ``ReferenceSystem.apply``, and require
``reference.abstract() == (state.now, state.broker, state.clients)`` after every step. A failure
prints the action sequence and the first field that differs.

The reference implements RocketMQ 4.9.8; where the model departs from it, a ``SpecCompat`` switch
makes the reference take the model's branch. The lockstep runs use every switch; a second group of
tests turns each switch off alone and shows that the check then finds a divergence (so each switch
marks a real disagreement, not dead code). Unit tests at the end state the rules the random walks
do not make obvious.
"""

from __future__ import annotations

import dataclasses
import logging
import random
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from rmqspec.reference.broker import BrokerHost, ExpressionMessageFilter, GetMessageStatus, PullMessageProcessor
from rmqspec.reference.compat import SpecCompat
from rmqspec.reference.message import PROPERTY_ORIGIN_MESSAGE_ID, PROPERTY_RETRY_TOPIC, MessageExt
from rmqspec.reference.message_queue import MessageQueue, dlq_topic, retry_topic
from rmqspec.reference.mq_client_instance import MQClientInstance, TopicRouteData
from rmqspec.reference.process_queue import ProcessQueue
from rmqspec.reference.protocol import (
    ConsumerSendMsgBackRequestHeader,
    PullMessageRequestHeader,
    PullSysFlag,
    QueryConsumerOffsetRequestHeader,
    QueryConsumerOffsetResponseHeader,
    RemotingCommand,
    RequestCode,
    ResponseCode,
    SendMessageRequestHeader,
    SubscriptionData,
)
from rmqspec.reference.remote_broker_offset_store import RemoteBrokerOffsetStore
from rmqspec.reference.scheduler import DelayQueue, ScheduledExecutorService, SchedulerError, VirtualClock
from rmqspec.reference.system import ReferenceActionError, ReferenceSystem, UnsupportedConfigError
from rmqspec.spec import actions as act
from rmqspec.spec.config import Config
from rmqspec.spec.model import Model
from rmqspec.spec.state import State

STEPS = 300
SEEDS = (0, 1, 2)

CONFIGS: dict[str, dict[str, Any]] = {
    "clustering-avg": {},
    "clustering-avg-by-circle-3-consumers": {
        "strategy": "AVG_BY_CIRCLE",
        "consumers": 3,
        "client_crashes": 2,
        "broker_crashes": 2,
    },
    "clustering-consistent-hash": {"strategy": "CONSISTENT_HASH", "consumers": 3, "queues": 3},
    "backlog-hot-head-batches": {"backlog": 2, "messages_per_queue": 5, "consume_batch_size": 2, "pull_batch_size": 3},
    "backlog-cold-head": {"backlog": 2, "backlog_head_hot": False, "messages_per_queue": 5},
    "tags-with-subscription": {"tags": ("A", "B"), "subscription": ("A",), "backlog": 3, "messages_per_queue": 6},
    "dlq-after-one-retry": {"max_reconsume_times": 1, "send_back_failures": 2, "consume_batch_size": 2},
    "from-first-cold-backlog": {
        "consume_from_where": "CONSUME_FROM_FIRST_OFFSET",
        "backlog": 2,
        "backlog_head_hot": False,
    },
    "from-timestamp-cold-backlog": {
        "consume_from_where": "CONSUME_FROM_TIMESTAMP",
        "consume_timestamp": 0,
        "backlog": 3,
        "backlog_head_hot": False,
        "messages_per_queue": 6,
    },
    "from-timestamp-later": {"consume_from_where": "CONSUME_FROM_TIMESTAMP", "consume_timestamp": 20_000, "queues": 2},
    "broadcasting": {"mode": "BROADCASTING", "client_crashes": 2, "client_shutdowns": 2},
    "broadcasting-timestamp-cold-backlog": {
        "mode": "BROADCASTING",
        "backlog": 2,
        "backlog_head_hot": False,
        "consume_from_where": "CONSUME_FROM_TIMESTAMP",
        "consume_timestamp": 15_000,
    },
    "broadcasting-tags-from-first": {
        "mode": "BROADCASTING",
        "tags": ("A", "B"),
        "subscription": ("B",),
        "consume_from_where": "CONSUME_FROM_FIRST_OFFSET",
        "consumers": 3,
    },
    "one-queue-many-faults": {
        "consumers": 1,
        "queues": 1,
        "backlog": 2,
        "consume_from_where": "CONSUME_FROM_FIRST_OFFSET",
        "client_crashes": 3,
        "broker_crashes": 3,
        "client_shutdowns": 3,
    },
}

# What each configuration must have exercised over its seeds, beyond the common core.
CORE_ACTIONS = {"Start", "Rebalance", "SendPull", "BrokerReceive", "ReceivePull", "StartConsume", "FinishConsume"}
EXPECTED: dict[str, set[str]] = {
    "clustering-avg": {"ApplyConsumeOffset", "PersistOffsets", "BrokerFlush", "BrokerCrash", "Crash", "Shutdown"},
    "dlq-after-one-retry": {"DeliverScheduled", "dlq"},
    "broadcasting": {"ApplyConsumeOffset", "local-file-written"},
    "broadcasting-timestamp-cold-backlog": {"local-file-written"},
    "backlog-hot-head-batches": {"CoolQueueHead"},
}


# --- lockstep machinery -------------------------------------------------------------------------------


def first_difference(reference: object, model: object, path: str = "state") -> str | None:
    """The first field (depth first) where the reference's abstraction and the model's state differ."""
    if type(reference) is not type(model):
        return f"{path}: reference {reference!r} != model {model!r}"
    if isinstance(model, tuple) and hasattr(model, "_fields"):
        for name in model._fields:
            found = first_difference(getattr(reference, name), getattr(model, name), f"{path}.{name}")
            if found:
                return found
        return None
    if isinstance(model, tuple):
        assert isinstance(reference, tuple)
        if len(reference) != len(model):
            return f"{path}: reference {reference!r} != model {model!r}"
        for k, (r, m) in enumerate(zip(reference, model, strict=True)):
            found = first_difference(r, m, f"{path}[{k}]")
            if found:
                return found
        return None
    return None if reference == model else f"{path}: reference {reference!r} != model {model!r}"


def state_difference(reference: tuple[object, ...], model: tuple[object, ...]) -> str | None:
    """``first_difference`` of ``(now, broker, clients)``, with the parts named."""
    for name, r, m in zip(("now", "broker", "clients"), reference, model, strict=True):
        found = first_difference(r, m, name)
        if found:
            return found
    return None


Chooser = Callable[[Model, State, list[act.Action]], act.Action | None]


@dataclass
class LockstepRun:
    config: Config
    label: str
    trace: list[act.Action] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)
    seen: set[str] = field(default_factory=set)
    failure: str | None = None

    def report(self) -> str:
        lines = [f"lockstep divergence ({self.label}) after {len(self.trace)} actions: {self.failure}"]
        lines.append(f"config: {self.config}")
        lines.extend(f"  {k:4d} {a!r}" for k, a in enumerate(self.trace))
        return "\n".join(lines)


def run_lockstep(
    config: Config, root: Path, choose: Chooser, steps: int, label: str, compat: SpecCompat | None = None
) -> LockstepRun:
    model = Model(config)
    state = model.initial()
    reference = ReferenceSystem(config, root, compat)
    run = LockstepRun(config, label)
    try:
        expected = (state.now, state.broker, state.clients)
        if reference.abstract() != expected:
            run.failure = f"initial state: {state_difference(reference.abstract(), expected)}"
            return run
        for _ in range(steps):
            enabled = model.enabled(state)
            action = choose(model, state, enabled) if enabled else None
            if action is None:
                break
            run.trace.append(action)
            run.counts[type(action).__name__] += 1
            state = model.step(state, action)
            try:
                reference.apply(action)
            except ReferenceActionError as e:
                run.failure = f"the reference refused {action!r}: {e}"
                return run
            abstract = reference.abstract()
            expected = (state.now, state.broker, state.clients)
            if abstract != expected:
                run.failure = state_difference(abstract, expected) or "states differ (no field found)"
                return run
            if state.broker.dlq:
                run.seen.add("dlq")
            if any(v is not None for cl in state.clients for v in cl.file):
                run.seen.add("local-file-written")
    finally:
        reference.close()
    return run


def random_chooser(seed: int) -> Chooser:
    rng = random.Random(seed)
    return lambda model, state, enabled: rng.choice(enabled)


TIMER_ACTIONS = (act.Tick, act.BrokerFlush, act.PersistOffsets, act.Heartbeat, act.Rebalance, act.DeliverScheduled)


@dataclass
class Until:
    """Script step: fire timers (and ticks), never ``avoid``, until ``done(state)``."""

    done: Callable[[State], bool]
    allowed: tuple[type, ...] = TIMER_ACTIONS
    avoid: tuple[act.Action, ...] = ()


def script_chooser(*items: act.Action | Until) -> Chooser:
    pending: Iterator[act.Action | Until] = iter(items)
    current: list[act.Action | Until | None] = [next(pending, None)]

    def choose(model: Model, state: State, enabled: list[act.Action]) -> act.Action | None:
        while True:
            item = current[0]
            if item is None:
                return None
            if isinstance(item, Until):
                if item.done(state):
                    current[0] = next(pending, None)
                    continue
                options = [a for a in enabled if isinstance(a, item.allowed) and a not in item.avoid]
                assert options, f"script stuck at t={state.now}: nothing allowed is enabled"
                return next((a for a in options if not isinstance(a, act.Tick)), options[0])
            assert item in enabled, f"script step {item!r} is not enabled at t={state.now}"
            current[0] = next(pending, None)
            return item

    return choose


@pytest.fixture(autouse=True)
def _quiet_reference_logs() -> Iterator[None]:
    """The reference logs every refused pull and failed send-back, as RocketMQ does; not needed here."""
    logging.getLogger("rmqspec.reference").setLevel(logging.CRITICAL)
    yield
    logging.getLogger("rmqspec.reference").setLevel(logging.NOTSET)


# --- the lockstep check ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(CONFIGS))
def test_reference_refines_model_on_seeded_random_walks(name: str, tmp_path: Path) -> None:
    config = Config(**CONFIGS[name])
    counts: Counter[str] = Counter()
    seen: set[str] = set()
    for seed in SEEDS:
        run = run_lockstep(config, tmp_path / f"seed{seed}", random_chooser(seed), STEPS, f"{name} seed {seed}")
        assert run.failure is None, run.report()
        counts.update(run.counts)
        seen |= run.seen
    missing = (CORE_ACTIONS | EXPECTED.get(name, set())) - set(counts) - seen
    assert not missing, f"{name}: the walks never exercised {sorted(missing)}; counts {dict(counts)}"


def test_lockstep_catches_a_planted_watermark_bug(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """RMQ-01 style: removeMessage returns queueOffsetMax + 2 when the tree empties; the check must fail."""
    original = ProcessQueue.remove_message

    def planted(self: ProcessQueue, msgs: list[MessageExt], now: int) -> int:
        result = original(self, msgs, now)
        return result + 1 if result >= 0 and not self.msg_tree_map else result

    monkeypatch.setattr(ProcessQueue, "remove_message", planted)
    run = run_lockstep(Config(), tmp_path, random_chooser(0), STEPS, "planted bug")
    assert run.failure is not None, "the planted divergence went unnoticed"
    assert "offset" in run.failure and run.trace[-1].__class__ is act.FinishConsume, run.report()


# --- every compat switch marks a real disagreement ---------------------------------------------------

Scenario = tuple[dict[str, Any], Callable[[int], Chooser], int]

SCENARIOS: dict[str, Scenario] = {
    # A random walk that reaches the disagreement within a few seeds.
    "search_offset_first_equal": (CONFIGS["from-timestamp-cold-backlog"], random_chooser, STEPS),
    # Scripted: client 1 starts (subVersion 1000) after client 0 (subVersion 0); the broker restarts and
    # only client 0 heartbeats again; client 1's pull gets SUBSCRIPTION_NOT_LATEST in RocketMQ, while
    # the model serves it (someone is registered).
    "pull_ignores_sub_version": (
        {},
        lambda _seed: script_chooser(
            act.Start(0),
            act.Tick(),
            act.Start(1),
            act.Rebalance(1),
            act.BrokerCrash(),
            act.BrokerRestart(),
            act.Heartbeat(0),
            act.SendPull(1, 2),
            act.BrokerReceive(1),
        ),
        9,
    ),
    # Scripted: a pq that is never pulled for more than 120 s is re-created at the next rebalance.
    "no_pull_expiry": (
        {"consumers": 1, "queues": 1},
        lambda _seed: script_chooser(act.Start(0), Until(lambda s: s.now >= 141_000)),
        400,
    ),
}


def test_every_compat_switch_has_a_scenario() -> None:
    assert set(SCENARIOS) == set(SpecCompat.names())


@pytest.mark.parametrize("switch", list(SCENARIOS))
def test_turning_one_compat_switch_off_makes_the_check_fail(switch: str, tmp_path: Path) -> None:
    """With ``switch`` off the reference does what RocketMQ 4.9.8 does and the model disagrees; the same
    walk passes with the switch on, so the divergence is exactly that rule."""
    kwargs, chooser, steps = SCENARIOS[switch]
    config = Config(**kwargs)
    faithful_here = dataclasses.replace(SpecCompat(), **{switch: False})
    for seed in range(12):
        run = run_lockstep(config, tmp_path / f"off{seed}", chooser(seed), steps, switch, faithful_here)
        if run.failure is not None:
            break
    else:
        pytest.fail(f"{switch}: no divergence found with the switch off")
    again = run_lockstep(config, tmp_path / f"on{seed}", chooser(seed), len(run.trace), switch)
    assert again.failure is None, again.report()


# --- unit tests: claims the walks do not make obvious -------------------------------------------------


def msg(offset: int, body: int = 16) -> MessageExt:
    return MessageExt("T", bytes(body), queue_offset=offset)


def test_process_queue_commits_the_lowest_offset_still_held() -> None:
    """R6.3 / RMQ-01: finishing 2..3 while 0..1 are in flight commits 0, not 4."""
    pq = ProcessQueue(0, 0)
    msgs = [msg(o) for o in range(4)]
    pq.put_message(msgs)
    assert pq.remove_message(msgs[2:], 0) == 0
    assert pq.remove_message(msgs[:1], 0) == 1
    assert (pq.msg_count, pq.msg_size) == (1, 16)


def test_process_queue_commits_one_past_the_last_cached_message_when_it_empties() -> None:
    pq = ProcessQueue(0, 0)
    pq.put_message([msg(5), msg(6, 24)])
    assert pq.remove_message([msg(6), msg(5)], 0) == 7
    assert (pq.msg_count, pq.msg_size, pq.queue_offset_max) == (0, 0, 6)
    assert pq.remove_message([msg(5)], 0) == -1  # an empty tree gives -1: the caller skips the update


def test_process_queue_offset_max_is_the_last_new_message_in_list_order_and_duplicates_do_not_count() -> None:
    """R6.2: queueOffsetMax follows list order, not the maximum; a replaced key is not counted again."""
    pq = ProcessQueue(0, 0)
    assert pq.put_message([msg(3), msg(1)]) is True
    assert pq.queue_offset_max == 1
    assert pq.put_message([msg(3)]) is False  # already consuming: no second dispatch
    assert (pq.msg_count, pq.msg_size) == (2, 32)


class _Hook:
    """Collects oneway commits sent by a store under test."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, int, int]] = []

    def do_before_request(self, remote_addr: str, request: RemotingCommand) -> None:
        h = request.header
        if request.code == RequestCode.UPDATE_CONSUMER_OFFSET:
            self.sent.append((h.topic, h.queue_id, h.commit_offset))  # type: ignore[attr-defined]


def _client(tmp_path: Path) -> tuple[BrokerHost, MQClientInstance, _Hook]:
    clock = VirtualClock()
    host = BrokerHost(clock, tmp_path, "broker-a", {"T": 4, "%RETRY%G": 1}, SpecCompat())
    host.start()
    route = {"T": TopicRouteData("broker-a", "addr", 4)}
    instance = MQClientInstance("c0", clock, host.connect("c0"), route, SpecCompat())
    hook = _Hook()
    instance.remoting_client.register_rpc_hook(hook)
    return host, instance, hook


def test_remote_store_persist_all_sends_the_given_queues_and_forgets_the_rest(tmp_path: Path) -> None:
    """R2.7: after a non-empty persistAll(S), memory holds only queues of S; only those were sent."""
    _, instance, hook = _client(tmp_path)
    store = RemoteBrokerOffsetStore(instance, "G")
    mqs = [MessageQueue("T", "broker-a", q) for q in range(3)]
    for q, mq in enumerate(mqs):
        store.update_offset(mq, 10 + q, False)
    store.persist_all({mqs[0], mqs[2]})
    assert hook.sent == [("T", 0, 10), ("T", 2, 12)]
    assert set(store.offset_table) == {mqs[0], mqs[2]}


def test_remote_store_persist_all_of_nothing_neither_sends_nor_prunes(tmp_path: Path) -> None:
    _, instance, hook = _client(tmp_path)
    store = RemoteBrokerOffsetStore(instance, "G")
    store.update_offset(MessageQueue("T", "broker-a", 0), 3, False)
    store.persist_all(set())
    assert hook.sent == [] and len(store.offset_table) == 1


def test_remote_store_update_offset_increase_only_keeps_the_larger_value(tmp_path: Path) -> None:
    """R1.5: a new entry takes any value; increaseOnly keeps max(old, new); otherwise overwrite."""
    _, instance, _ = _client(tmp_path)
    store = RemoteBrokerOffsetStore(instance, "G")
    mq = MessageQueue("T", "broker-a", 0)
    store.update_offset(mq, 5, True)
    store.update_offset(mq, 3, True)
    assert store.offset_table[mq] == 5
    store.update_offset(mq, 3, False)
    assert store.offset_table[mq] == 3


def _query(host: BrokerHost, queue_id: int) -> RemotingCommand:
    assert host.controller is not None
    return host.controller.consumer_manage_processor.query_consumer_offset(
        RemotingCommand.create_request_command(
            RequestCode.QUERY_CONSUMER_OFFSET, QueryConsumerOffsetRequestHeader("G", "T", queue_id)
        )
    )


def _queried_offset(response: RemotingCommand) -> int:
    assert response.code == ResponseCode.SUCCESS and isinstance(response.header, QueryConsumerOffsetResponseHeader)
    return response.header.offset


def test_query_consumer_offset_answers_zero_for_a_young_queue_and_not_found_once_its_head_is_cold(
    tmp_path: Path,
) -> None:
    """R3.5: no stored offset and an empty queue, or message 0 still hot, gives SUCCESS(0) (S2);
    once message 0 left page cache it gives QUERY_NOT_FOUND; a stored offset always wins."""
    host, _, _ = _client(tmp_path)
    assert _queried_offset(_query(host, 0)) == 0
    host.produce("T", 0, "A", bytes(16))
    assert _query(host, 0).code == ResponseCode.SUCCESS
    host.message_store.evict_from_page_cache("T", 0)
    assert _query(host, 0).code == ResponseCode.QUERY_NOT_FOUND
    assert host.controller is not None
    host.controller.consumer_offset_manager.commit_offset("c0", "G", "T", 0, 1)
    assert _queried_offset(_query(host, 0)) == 1


def _pull(host: BrokerHost, offset: int, batch: int = 2, subscription: str = "*") -> RemotingCommand | None:
    assert host.controller is not None
    header = PullMessageRequestHeader(
        "G", "T", 0, offset, batch, PullSysFlag.build_sys_flag(False, False, True, False), 0, 0, subscription, 0
    )
    return host.controller.pull_message_processor.process_request(
        host.connections[0], RemotingCommand.create_request_command(RequestCode.PULL_MESSAGE, header), True
    )


@pytest.mark.parametrize(
    ("produced", "offset", "status", "code", "next_begin"),
    [
        (0, 0, GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, ResponseCode.PULL_NOT_FOUND, 0),
        (0, 3, GetMessageStatus.NO_MATCHED_LOGIC_QUEUE, ResponseCode.PULL_OFFSET_MOVED, 0),
        (3, 3, GetMessageStatus.OFFSET_OVERFLOW_ONE, ResponseCode.PULL_NOT_FOUND, 3),
        (3, 5, GetMessageStatus.OFFSET_OVERFLOW_BADLY, ResponseCode.PULL_OFFSET_MOVED, 3),
        (3, 0, GetMessageStatus.FOUND, ResponseCode.SUCCESS, 2),
        (3, 2, GetMessageStatus.FOUND, ResponseCode.SUCCESS, 3),
    ],
)
def test_pull_result_table_of_a_master(
    tmp_path: Path, produced: int, offset: int, status: GetMessageStatus, code: int, next_begin: int
) -> None:
    """R5.5: store status, nextBeginOffset and response code (batch of 2, no filter). A queue never
    written has no consume queue (NO_MATCHED_LOGIC_QUEUE), which answers like an empty one."""
    host, _, _ = _client(tmp_path)
    for _ in range(produced):
        host.produce("T", 0, "A", bytes(16))
    result = host.message_store.get_message("G", "T", 0, offset, 2, ExpressionMessageFilter(None))
    assert (result.status, result.next_begin_offset) == (status, next_begin)
    assert PullMessageProcessor._response_code(result.status, offset) == code


def test_a_pull_returns_at_most_32_messages_in_both_and_is_answered_at_once(tmp_path: Path) -> None:
    """R5.5 isTheBatchFull: pullBatchSize 40 over a backlog of 40 gives 32 messages; the answer is fixed
    when the broker reads the request (R5.4), so a message produced before the reply is not in it."""
    config = Config(
        queues=1,
        consumers=1,
        backlog=40,
        messages_per_queue=41,
        pull_batch_size=40,
        pull_threshold_for_queue=100,
        consume_from_where="CONSUME_FROM_FIRST_OFFSET",
    )
    script = (act.Start(0), act.Rebalance(0), act.SendPull(0, 0), act.BrokerReceive(0), act.Produce(0, "A"))
    model = Model(config)
    state = model.initial()
    for a in script:
        state = model.step(state, a)
    [pull] = state.clients[0].pulls
    assert pull.result is not None and pull.result.found == tuple(range(32)) and pull.result.next_begin == 32
    run = run_lockstep(config, tmp_path, script_chooser(*script), len(script), "batch cap")
    assert run.failure is None and len(run.trace) == len(script), run.report()


def test_pull_skips_unsubscribed_tags_and_reports_no_match_past_them(tmp_path: Path) -> None:
    """R5.5: filtered units are scanned past; nothing matched gives NO_MATCHED_MESSAGE with
    nextBeginOffset after the scan (PULL_RETRY_IMMEDIATELY)."""
    host, _, _ = _client(tmp_path)
    for tag in ("B", "A", "B", "B"):
        host.produce("T", 0, tag, bytes(16))
    only_a = ExpressionMessageFilter(SubscriptionData.build("T", "A", 0))
    found = host.message_store.get_message("G", "T", 0, 0, 2, only_a)
    assert found.status is GetMessageStatus.FOUND
    assert [m.queue_offset for m in found.message_list] == [1] and found.next_begin_offset == 4
    nothing = host.message_store.get_message("G", "T", 0, 2, 2, only_a)
    assert (nothing.status, nothing.next_begin_offset) == (GetMessageStatus.NO_MATCHED_MESSAGE, 4)


def test_piggy_backed_commit_lands_once_when_first_processed_even_if_the_pull_is_held(tmp_path: Path) -> None:
    """R5.4: the broker commits the client-sent offset on the first pass (even when it holds the pull
    for long polling) and not when the held request runs again."""
    host, _, _ = _client(tmp_path)
    assert host.controller is not None
    header = PullMessageRequestHeader(
        "G", "T", 0, 0, 2, PullSysFlag.build_sys_flag(True, True, True, False), 7, 15_000, "*", 0
    )
    request = RemotingCommand.create_request_command(RequestCode.PULL_MESSAGE, header)
    processor = host.controller.pull_message_processor
    assert processor.process_request(host.connections[0], request, True) is None  # held: nothing to read
    offsets = host.controller.consumer_offset_manager
    assert offsets.query_offset("G", "T", 0) == 7
    offsets.commit_offset("other", "G", "T", 0, 9)
    response = processor.execute_request_when_wakeup(host.connections[0], request)
    assert response.code == ResponseCode.PULL_NOT_FOUND and offsets.query_offset("G", "T", 0) == 9


def test_search_offset_by_time_returns_the_binary_search_hit_or_the_closest_neighbour(tmp_path: Path) -> None:
    """R10.3 (ConsumeQueue#getOffsetInQueueByTime): an exact hit among equal times is wherever the
    search lands (offset 1 of four messages at t=0), the model's reading is the first; otherwise the
    closest store time, the earlier on a tie."""
    host, _, _ = _client(tmp_path)
    store = host.message_store
    for _ in range(4):
        host.produce("T", 0, "A", bytes(16))
    assert store.get_offset_in_queue_by_time("T", 0, 0, first_of_equal=False) == 1
    assert store.get_offset_in_queue_by_time("T", 0, 0, first_of_equal=True) == 0
    host.clock.advance_to(100)
    host.produce("T", 0, "A", bytes(16))
    assert store.get_offset_in_queue_by_time("T", 0, 50, first_of_equal=True) == 3  # tie: earlier
    assert store.get_offset_in_queue_by_time("T", 0, 60, first_of_equal=True) == 4
    assert store.get_offset_in_queue_by_time("T", 1, 60, first_of_equal=True) == 0  # empty queue


def _send_back(host: BrokerHost, commit_log_offset: int, max_times: int = 1) -> None:
    assert host.controller is not None
    header = ConsumerSendMsgBackRequestHeader(commit_log_offset, "G", 0, "", "T", max_times)
    response = host.controller.send_message_processor.consumer_send_msg_back(
        RemotingCommand.create_request_command(RequestCode.CONSUMER_SEND_MSG_BACK, header)
    )
    assert response.code == ResponseCode.SUCCESS


def test_send_back_retries_at_level_three_plus_stored_count_then_dead_letters_with_count_plus_one(
    tmp_path: Path,
) -> None:
    """R7.5/R7.7: the broker decides by the *stored* reconsumeTimes: 0 goes to SCHEDULE_TOPIC at level 3
    (10 s) as reconsumeTimes 1; at max (1) it goes to %DLQ% and is stored with reconsumeTimes + 1."""
    host, _, _ = _client(tmp_path)
    original = host.produce("T", 0, "A", bytes(16))
    _send_back(host, original.commit_log_offset)
    store = host.message_store
    [(due, scheduled)] = store.schedule_message_service.pending()
    assert (due, scheduled.reconsume_times, scheduled.get_property(PROPERTY_RETRY_TOPIC)) == (10_000, 1, "T")
    host.clock.advance_to(10_000)
    store.schedule_message_service.deliver_due_message()
    retry_cq = store.find_consume_queue(retry_topic("G"), 0)
    assert retry_cq is not None
    retried = store.commit_log[retry_cq.units[0].commit_log_offset]
    _send_back(host, retried.commit_log_offset)
    dlq_cq = store.find_consume_queue(dlq_topic("G"), 0)
    assert dlq_cq is not None
    dead = store.commit_log[dlq_cq.units[0].commit_log_offset]
    assert dead.reconsume_times == 2 and dead.get_property(PROPERTY_ORIGIN_MESSAGE_ID) == original.msg_id


def test_producer_fallback_to_the_retry_topic_dead_letters_one_retry_earlier(tmp_path: Path) -> None:
    """R7.4 + R7.6: the fall-back send carries reconsumeTimes + 1, and handleRetryAndDLQ compares *that*
    with the maximum, so with max 1 a first failure already lands in %DLQ% (the broker path would retry)."""
    host, _, _ = _client(tmp_path)
    assert host.controller is not None
    header = SendMessageRequestHeader("P", retry_topic("G"), 0, {"TAGS": "A", "DELAY": "3"}, 0, 1, 1)
    host.controller.send_message_processor.send_message(
        RemotingCommand.create_request_command(RequestCode.SEND_MESSAGE, header, bytes(16))
    )
    assert host.message_store.get_max_offset_in_queue(dlq_topic("G"), 0) == 1


def test_scheduled_executor_runs_only_due_tasks_and_rearms_fixed_rate_ones() -> None:
    clock = VirtualClock()
    executor = ScheduledExecutorService(clock, "t")
    runs: list[int] = []
    executor.schedule_at_fixed_rate("p", lambda: runs.append(clock.now()), 10_000, 5_000)
    with pytest.raises(SchedulerError):
        executor.run_due("p")
    clock.advance_to(10_000)
    executor.run_due("p")
    assert runs == [10_000] and executor.due_time("p") == 15_000
    queue: DelayQueue[str] = DelayQueue()
    queue.put("x", 20_000)
    with pytest.raises(SchedulerError):
        queue.take("x", clock.now())


def test_driver_refuses_configs_with_mutations_and_impossible_actions(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedConfigError):
        ReferenceSystem(Config(mutations=frozenset({"commit_past_cached"})), tmp_path / "m")
    system = ReferenceSystem(Config(), tmp_path / "r")
    with pytest.raises(ReferenceActionError):
        system.apply(act.SendPull(0, 0))  # client 0 is not running
    system.apply(act.Start(0))
    system.apply(act.Tick())  # to the heartbeat at 1 s
    with pytest.raises(ReferenceActionError, match="timers are due"):
        system.apply(act.Tick())


def test_broker_flush_is_read_back_from_the_real_offset_file_after_a_crash(tmp_path: Path) -> None:
    """R3.6/R3.7: what survives a broker crash is the last flushed consumerOffset.json."""
    host, _, _ = _client(tmp_path)
    assert host.controller is not None
    host.controller.consumer_offset_manager.commit_offset("c0", "G", "T", 0, 4)
    host.clock.advance_to(10_000)
    host.controller.scheduled_executor_service.run_due("flushConsumerOffset")
    host.controller.consumer_offset_manager.commit_offset("c0", "G", "T", 0, 6)
    host.crash()
    controller = host.start()
    assert controller.consumer_offset_manager.query_offset("G", "T", 0) == 4
    assert (tmp_path / "config" / "consumerOffset.json").exists()
