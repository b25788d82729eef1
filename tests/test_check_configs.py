"""The named configurations of ``rmqspec check`` (properties/check_configs/*.json): each gives the figures its file
expects (states, transitions, diameter, exhausted or not, the sometimes-conditions and actions it reaches, and no
liveness failure at its horizon), each concern's rare path is reached where its configuration says, the timer-stop
bugs are caught at the horizon, and each planted bug that docs/check.md ("Planted bugs: shortest against shrunk")
says a configuration refutes is refuted there, by the property and at the length the table gives, with a counterexample
that replays through the model."""

from __future__ import annotations

from dataclasses import replace

import pytest

from rmqspec.properties.exhaustive import SOMETIMES, Bounds, NamedConfig, check, named_configs
from rmqspec.properties.frontier import FrontierCollector, FrontierFailure, quiesce_frontier
from rmqspec.properties.lasso import find_lassos
from rmqspec.properties.liveness import _failures, quiesce
from rmqspec.spec import actions as act
from rmqspec.spec.config import MUTATIONS, Config
from rmqspec.spec.invariants import check_state, check_step
from rmqspec.spec.model import Model
from rmqspec.spec.state import PULL_DROPPED, State


def _frontier_failures(nc: NamedConfig, bounds: Bounds, config: Config | None = None) -> list[FrontierFailure]:
    collector = FrontierCollector()
    search = check(config or nc.config, bounds, stop_at_first=False, at_horizon=collector.add)
    return quiesce_frontier(search, collector.states, stop_at_first=False).failures


def test_every_shipped_configuration_says_what_its_search_gives() -> None:
    for nc in named_configs().values():
        _, expected = nc.tested()
        assert {"exhausted", "distinct_states", "diameter", "sometimes", "actions"} <= set(expected), nc.name
        assert nc.expected, nc.name  # the full configuration's figures, as `rmqspec check --config all` measures them
        if nc.bounds.horizon_ms is not None:
            assert expected.get("frontier_failures") == [], nc.name


@pytest.mark.parametrize("name", sorted(named_configs()))
def test_the_correct_model_gives_the_figures_its_configuration_file_expects(name: str) -> None:
    # the figures live in properties/check_configs/<name>.json ("expected", or "expected_within" where the full
    # search is too long for the tests); docs/check.md's table gives the same
    nc = named_configs()[name]
    bounds, expected = nc.tested()
    r = check(nc.config, bounds, stop_at_first=False).result
    assert r.valid
    got = {
        "exhausted": r.exhausted,
        "distinct_states": r.distinct_states,
        "transitions": r.transitions,
        "pruned": r.pruned,
        "diameter": r.diameter,
        "sometimes": sorted(r.sometimes),
        "actions": sorted(r.action_counts),
    }
    assert {k: v for k, v in got.items() if k in expected} == {k: v for k, v in expected.items() if k in got}
    # every witness of a sometimes-condition replays through the model and meets the condition on its last step
    model = Model(nc.config)
    for found in r.sometimes.values():
        s = model.initial()
        for a in found.actions[:-1]:
            s = model.step(s, a)  # type: ignore[arg-type]
        last = found.actions[-1]
        holds = next(x.holds for x in SOMETIMES if x.name == found.id)
        assert holds(model, s, last, model.step(s, last)), (name, found.id)  # type: ignore[arg-type]
    if "frontier_failures" in expected:
        assert [f.ids for f in _frontier_failures(nc, bounds)] == expected["frontier_failures"]


def test_the_orderly_handover_configuration_is_searched_to_its_state_limit() -> None:
    # too large to exhaust here with two requests per connection (docs/check.md): the correct model is searched
    # to its limit without a violation, which is evidence, not proof
    nc = named_configs()["orderly-two-consumers-one-message-instant"]
    r = check(nc.config, replace(nc.bounds, max_states=20_000)).result
    assert r.valid and r.stopped_by == "max_states" and not r.exhausted


# --- each concern's rare path is reached (the behaviour, shown on the state the witness ends in) -----------------
def _witness_end(nc: NamedConfig, condition: str) -> tuple[Model, list[object], State]:
    r = check(nc.config, nc.tested()[0]).result
    found = r.sometimes[condition]
    model = Model(nc.config)
    s = model.initial()
    for a in found.actions:
        s = model.step(s, a)  # type: ignore[arg-type]
    return model, list(found.actions), s


def test_flow_control_holds_a_pull_while_the_pq_is_over_its_threshold() -> None:
    nc = named_configs()["flow-control-instant"]
    model, _, s = _witness_end(nc, "flow-control-holds-pull")
    pq = s.clients[0].pqs[0]
    assert pq is not None and pq.msg_count > nc.config.pull_threshold_for_queue == 1
    assert model.flow_controlled(pq, s.now)
    # the topic queue's ready pull request is held (queue 1, the retry queue, is empty and pulls on)
    assert not any(isinstance(a, act.SendPull) and a.queue == 0 for a in model.enabled(s))
    assert s.broker.queues[0].max_offset > pq.next_offset  # a message is still to be pulled


def test_an_offset_query_fails_during_a_rebalance_and_a_later_rebalance_takes_the_queue() -> None:
    nc = named_configs()["rebalance-query-error-5x"]
    r = check(nc.config, nc.bounds, stop_at_first=False).result
    assert r.action_counts["RebalanceQueryError"] > 0 and nc.config.version == "5.x"
    # the first rebalance's query fails, and the quiescence from there (the periodic rebalance) takes the queue
    model = Model(nc.config)
    s = model.initial()
    for _ in range(10):  # Start, then the clock to the first rebalance (1 s, minInterval): two steps
        enabled = model.enabled(s)
        if any(isinstance(a, act.RebalanceQueryError) for a in enabled):
            break
        wire = [a for a in enabled if isinstance(a, (act.Start, act.BrokerReceive, act.Heartbeat))]
        s = model.step(s, wire[0] if wire else act.Tick())
    s = model.step(s, act.RebalanceQueryError(0, 0))
    assert s.clients[0].pqs[0] is None  # 5.x skipped the queue (R2.3)
    q = quiesce(model, s)
    assert q.reached and q.state.clients[0].pqs[0] is not None and not _failures(model, q.state, True)


def test_broadcasting_retention_deletes_and_the_broker_answers_offset_illegal() -> None:
    nc = named_configs()["broadcast-retention-instant"]
    assert nc.config.mode == "BROADCASTING"
    _, actions, s = _witness_end(nc, "offset-illegal-with-cache")
    assert any(isinstance(a, act.RetentionDelete) for a in actions)
    assert isinstance(actions[-1], act.ReceivePull)
    # the pq is marked dropped at once and its offset corrected 10 s later (4.9.8, R5.7): the quiescence's part
    pq = s.clients[0].pqs[0]
    assert pq is not None and pq.pull_state == PULL_DROPPED and pq.msg_count > 0
    assert [f.queue for f in s.clients[0].offset_fixes] == [0]


def test_clean_expired_msg_removes_a_message_whose_listener_ran_past_the_timeout() -> None:
    nc = named_configs()["consume-timeout"]
    _, actions, s = _witness_end(nc, "expired-message-cleaned")
    assert isinstance(actions[-1], act.CleanExpiredMsg)
    assert s.broker.scheduled or s.broker.dlq  # its copy was sent back (R6.8)


def test_a_pull_goes_to_the_slave_while_the_master_is_down() -> None:
    nc = named_configs()["slave-instant"]
    _, actions, s = _witness_end(nc, "pull-to-slave")
    assert not s.broker.up and s.clients[0].pulls[-1].from_slave
    assert any(isinstance(a, act.BrokerCrash) for a in actions)


# (mutation, configuration, property, shortest length): the rows of docs/check.md's table, as
# ``rmqspec bench-counterexamples`` found them (the first configuration, smallest first, whose search breaks).
REFUTED: list[tuple[str, str, str, int]] = [
    ("broker_answers_minus_one", "broadcast-restart-instant", "INV-7", 0),
    ("pull_request_requeued", "broadcast-restart-instant", "INV-20", 3),
    ("local_remove_offset_deletes_file", "broadcast-restart-instant", "INV-6b", 8),
    ("piggyback_next_offset", "orderly-one-message-instant", "INV-14", 4),
    ("orderly_commit_returns_last_key", "orderly-one-message-instant", "INV-3", 7),
    ("orderly_suspend_commits", "orderly-one-message-instant", "INV-3", 7),
    ("last_offset_one_before_max", "orderly-one-message-instant", "INV-37", 3),
    ("pull_cursor_one_behind", "orderly-one-message-instant", "INV-22", 9),
    ("count_not_decremented", "restart-instant", "INV-1", 7),
    ("commit_past_cached", "restart-instant", "INV-9", 10),
    ("resume_ignores_stored_offset", "restart-instant", "INV-9a", 11),
    ("update_offset_stores_one_less", "restart-instant", "INV-8", 12),
    ("empty_group_loses_offsets", "restart-instant", "INV-9a", 13),
    ("resume_memory_one_behind", "commit-loss-instant", "INV-33", 10),
    ("watermark_highest_consumed", "two-messages-instant", "INV-2", 8),
    ("removal_result_read_before_removal", "two-messages-instant", "INV-2b", 7),
    ("commit_before_send_back", "slave-instant", "INV-24b", 8),
    ("send_back_from_ack_index", "two-messages-instant", "INV-24", 7),
    ("ignore_increase_only", "two-messages-instant", "INV-4", 11),
    ("dropped_pq_commits", "retention-instant", "INV-5", 13),
    ("add_without_lock", "orderly-one-message-instant", "INV-34", 2),
    ("lock_ignores_holder", "orderly-two-consumers-instant", "INV-11", 4),
    ("orderly_removal_ignores_consume_lock", "orderly-two-consumers-one-message-instant", "INV-12", 13),
    ("unlock_delay_never_scheduled", "orderly-two-consumers-one-message-instant", "INV-26", 7),
    ("avg_blocks_overlap", "two-consumers-instant", "INV-13a", 4),
    ("expired_removed_without_send_back", "consume-timeout", "INV-24b", 12),
    # the task's first run drops its deadline (INV-27); the liveness checks see the persist and rebalance ones too
    ("clean_timer_stops", "consume-timeout", "INV-27", 5),
    ("persist_timer_stops", "admin-reset", "INV-27", 5),
    ("rebalance_timer_stops", "broadcast-restart-instant", "INV-27", 2),
    ("first_pull_one_below_position", "restart-instant", "INV-15", 12),
    ("client_reset_off_by_one", "admin-reset", "INV-8", 15),
    ("no_persist_all_pruning", "admin-reset", "INV-6a", 16),
    ("dlq_one_retry_late", "one-message", "INV-10", 17),
    ("dlq_copy_not_stored", "one-message", "INV-24b", 17),
]
# Configurations small enough that the test also searches every path one step shorter and finds nothing: the
# breadth-first order already makes the first violation a shortest one; this shows it on the small ones.
SHORTNESS_SHOWN = {
    "broadcast-restart-instant",
    "orderly-one-message-instant",
    "orderly-two-consumers-instant",
    "two-consumers-instant",
    "two-messages-instant",
    "retention-instant",
}


def _replays_to(config_mutation: tuple[str, str], prop: str, actions: list[object]) -> bool:
    """Whether ``actions``, stepped from ``initial()`` by the model with the mutation, end in a violation of
    ``prop`` on their last step."""
    name, mutation = config_mutation
    model = Model(replace(named_configs()[name].config, mutations=frozenset({mutation})))
    s: State = model.initial()
    if not actions:
        return any(v.id == prop for v in check_state(model, s))
    for k, a in enumerate(actions):
        n = model.step(s, a)  # type: ignore[arg-type]
        if k == len(actions) - 1:
            return any(v.id == prop for v in check_state(model, n) + check_step(model, s, a, n))  # type: ignore[arg-type]
        s = n
    return False


@pytest.mark.parametrize(("mutation", "name", "prop", "length"), REFUTED, ids=[f"{m}-in-{n}" for m, n, _, _ in REFUTED])
def test_the_planted_bug_is_refuted_in_its_smallest_configuration_with_a_shortest_counterexample_that_replays(
    mutation: str, name: str, prop: str, length: int
) -> None:
    nc = named_configs()[name]
    r = check(replace(nc.config, mutations=frozenset({mutation})), nc.bounds).result
    assert not r.valid and r.stopped_by == "violation"
    first = r.violations[0]
    assert (first.id, first.depth) == (prop, length)
    assert _replays_to((name, mutation), prop, first.actions)
    if name in SHORTNESS_SHOWN and length > 0:
        shorter = check(replace(nc.config, mutations=frozenset({mutation})), replace(nc.bounds, max_depth=length - 1))
        assert shorter.result.valid


# Liveness at the horizon (properties/frontier.py): each timer-stop bug in a horizon-bounded configuration, where the
# horizon cuts every cycle that passes time, so the lasso search cannot see it.
AT_HORIZON = [
    ("persist_timer_stops", "broadcast-retention-instant", "LIV-2"),
    ("rebalance_timer_stops", "rebalance-query-error-5x", "LIV-1"),
]


@pytest.mark.parametrize(("mutation", "name", "liv"), AT_HORIZON, ids=[m for m, *_ in AT_HORIZON])
@pytest.mark.usefixtures("inv27_unwatched")  # what the liveness checks see of them alone
def test_a_timer_that_stops_is_caught_at_the_horizon_by_a_run_that_replays(mutation: str, name: str, liv: str) -> None:
    nc = named_configs()[name]
    planted = replace(nc.config, mutations=frozenset({mutation}))
    assert find_lassos(check(planted, nc.bounds, keep_edges=True)) == []  # no cycle: the horizon cut them
    failures = _frontier_failures(nc, nc.bounds, planted)
    assert failures and liv in failures[0].ids
    # the report is a real run: the search's path to the frontier state, then the quiescence, ends where it fails
    model = Model(planted)
    s = model.initial()
    for a in failures[0].prefix + failures[0].quiescence:
        s = model.step(s, a)
    assert liv in {v.id for v in _failures(model, s, True)}
    assert s.now > (nc.bounds.horizon_ms or 0)  # the run went past the horizon: only the quiescence could see it


# Refuted a second time, with INV-27 unwatched, by a lasso (tests/test_check.py) and at the horizon (AT_HORIZON).
BY_LASSO = {"persist_timer_stops", "rebalance_timer_stops"}
# The rest of docs/check.md's table: not expressed by a small configuration (the docs give the smallest configuration
# tried for each).
NOT_EXPRESSED = {
    "offset_illegal_fix_deferred",  # two 5.x consumers, a retention delete and more than 10 s
    "client_reset_skips_update",  # time past the reset's 10 s sleep; admin-reset itself shows nothing
    "orderly_ignores_lock_expiry",  # a 35 s stall over a running orderly listener
    "orderly_no_queue_monitor",  # two 5.x orderly consumers, two queues, a stall and a shutdown
    "pull_expiry_ignored",  # liveness over a pull stalled for 120 s
    "position_seeds_memory_one_below",  # a consumeFromWhere position above 0 under a higher value another pq landed
    "shutdown_skips_queued_commits",  # a shutdown after the 10 s persist timer queued a commit of an owned queue
    "lock_all_keeps_denied_locked",  # a lockAll (first 1 s after the start) refused a queue another client holds: the
    # orderly configurations with two consumers are instant (time 0), so no lockAll runs
    "offset_fix_updates_after_removal",  # 4.9.8's OFFSET_ILLEGAL correction runs 10 s after the reply: the
    # retention configurations have no clock, and rebalance-query-error-5x no retention
    "bak_written_once",  # offsets.json.bak is kept only under a local-file corruption budget, which no named one has
    "channel_expiry_in_seconds",  # a silent consumer (a stall or a dead heartbeat task): no named configuration has one
}


def test_every_planted_bug_is_refuted_in_a_named_configuration_or_named_as_not_expressed() -> None:
    refuted = [m for m, *_ in REFUTED]
    assert len(set(refuted)) == len(refuted)
    assert set(refuted) | NOT_EXPRESSED == set(MUTATIONS) and set(refuted) >= BY_LASSO
    assert {m for m, *_ in AT_HORIZON} == BY_LASSO
    assert len(refuted) + len(NOT_EXPRESSED) == len(MUTATIONS) == 45
