"""Branches of ``spec/`` that a default campaign cannot reach, each with the reason it cannot.

``rmqspec coverage`` counts these apart (reached / reachable / excluded-with-reason) instead of as
misses. An entry names its branch by text, not by line number, so that edits elsewhere in the file do
not break it: the enclosing function, a piece of the branch's own line (``source``) and of the line it
goes to (``target``; ``"exit"`` when it leaves the function). An entry must match exactly ``count``
branches of the source as it is; one that matches another number (the line was edited, moved to
another function, deleted or duplicated) is *stale*: it is not applied, so it hides nothing, and
``rmqspec coverage`` lists it until it is fixed. An excluded branch that a measurement did reach is
counted as reached and listed (a mutation-only branch is reached under ``--mutation`` and in the test
suite, which plants every bug). Entries may overlap (a glob over ``PullMixin.*`` and a whole function):
a branch counts once, in the category of the first entry that matches it.

Categories:

- ``mutation``: a branch of the correct model that only a planted bug takes: an answer of a helper that
  only its variant in ``spec/variants/`` gives (``Config.mutations``, ``--mutation NAME``). The variants'
  own code is not measured (``rmqspec.spec_coverage``); campaigns with ``--mutation`` and
  ``tests/test_planted_bugs.py`` take these branches.
- ``violation``: the side of a property check (in the concern module of its property; ``check_state`` and
  ``check_step`` in ``spec/invariants.py``) that reports a violation. A clean campaign of the correct model
  never takes it (if it did, that would be a finding, and the branch would then count as reached); planted
  bugs and ``tests/`` take them.
- ``validation``: ``Config`` (or a strategy's constructor, which Java validates and ``Config`` already
  has) refusing a bad configuration or naming a bad field; a campaign draws only valid configurations
  (``units.sample_config``), the unit tests try the bad ones.
- ``defensive``: a guard against a call the model never makes in a run: an action it did not enable
  (a campaign's walk and its quiescence step only actions ``Model.enabled`` returned; ``check-trace``,
  replay and shrinking do step refused ones), an argument it cannot produce.
- ``excluded-config``: reachable only in a configuration a default campaign never draws on purpose:
  ``offset_check_in_slave`` (restores RMQ-17, INV-21), the strict forms of the orderly exclusivity checks, a
  broker outage under a 4.9.8 orderly CLUSTERING consumer (INV-19). (An admin reset, an offset-query error and
  retention under 4.9.8 are drawn: a violation they cause is reported as the RocketMQ bug it reproduces,
  properties/rocketmq_bugs.py.)
- ``outside-campaign``: code a campaign run does not call at all: reading a configuration file
  (``Config.from_mapping``, ``rmqspec run --config``), names and histories for display.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

CATEGORIES = ("mutation", "violation", "validation", "defensive", "excluded-config", "outside-campaign")


@dataclass(frozen=True)
class Exclusion:
    file: str  # file name in spec/, e.g. "consumer_process.py"
    function: str  # qualified name of the enclosing function, e.g. "FaultsMixin._stall" ("" at module level); "*" globs
    source: str  # a piece of the branch's line, e.g. "if not cl.running"
    target: str  # a piece of the line it goes to, "exit" for leaving the function, "" for any
    category: str  # one of CATEGORIES
    reason: str  # why a default campaign cannot reach it
    count: int = 1  # how many branches this entry must match (more than one: each named in reason)

    def matches(self, branch: Any) -> bool:
        if branch.file != self.file or self.source not in branch.source_text:
            return False
        if not fnmatchcase(branch.function, self.function):  # "PullMixin.*": one reason shared by many functions
            return False
        if self.target == "exit":
            return bool(branch.target < 0)
        return self.target in branch.target_text

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "function": self.function,
            "source": self.source,
            "target": self.target,
            "category": self.category,
            "reason": self.reason,
            "count": self.count,
        }


def _entries(file: str, category: str, reason: str, rows: list[tuple[Any, ...]]) -> list[Exclusion]:
    """One exclusion per ``(function, source, target[, count])`` row, all with ``category`` and ``reason``."""
    return [Exclusion(file, row[0], row[1], row[2], category, reason, *row[3:]) for row in rows]


def _placed(category: str, reason: str, rows: list[tuple[Any, ...]]) -> list[Exclusion]:
    """One exclusion per ``(file, function, source, target[, count])`` row, all with ``category`` and ``reason``:
    for the branches of one reason that lie in several of the model's concern modules."""
    return [Exclusion(row[0], row[1], row[2], row[3], category, reason, *row[4:]) for row in rows]


_VIOLATION = (
    "reports a violation of this property: a clean campaign of the correct model never takes it (one that "
    "does has found a bug, and the branch counts as reached); tests/test_planted_bugs.py and the rule tests do"
)
_NOT_ENABLED = (
    "refuses an action that is not enabled: a campaign's walk and quiescence step only actions "
    "Model.enabled returned; check-trace, replay and shrinking do step refused ones (tests/test_trace.py)"
)
_VALIDATED = (
    "refuses a configuration Config already refuses (Config.__post_init__, _check_allocation): a campaign "
    "draws only valid ones; tests/test_spec_allocation.py and tests/test_spec_rules.py try the bad ones"
)

EXCLUSIONS: tuple[Exclusion, ...] = (
    *_placed(
        "violation",
        _VIOLATION,
        [
            ("concurrent_consume.py", "_pq_accounting", "if pq.msg_count != count", 'return f"'),
            ("concurrent_consume.py", "_pq_accounting", "if pq.msg_size != size", 'return f"'),
            (
                "concurrent_consume.py",
                "_commit_below_unprocessed",
                "if unprocessed and mem > _low(unprocessed)",
                'return f"',
            ),
            ("broker.py", "_broker_answers", "if answer is not None and answer < 0", 'return f"'),
            ("broker.py", "_broker_answers", "if b.offsets[q] is not None and answer != b.offsets[q]", 'return f"'),
            ("committed_offset.py", "_at_least_once", "if missing", 'who = "the group"'),
            ("committed_offset.py", "_committed_in_range", "if not 0 <= offset <= high", 'where = "broker"'),
            ("rebalance.py", "_exclusive_ownership", "if m.identity[owner[q]] == m.identity[i]", 'return f"'),
            ("concurrent_consume.py", "_retry_accounting", "if not 1 <= k <= limit", 'return f"'),
            (
                "concurrent_consume.py",
                "_retry_accounting",
                "if due < expected or (exact and due != expected)",
                'return f"',
            ),
            ("concurrent_consume.py", "_retry_accounting", "if msg.reconsume_times < least", 'return f"'),
            ("concurrent_consume.py", "_retry_accounting", "elif msg.reconsume_times != limit + 1", 'return f"'),
            ("pull.py", "_increase_only", "if old is not None and new is not None and new < old", 'return f"'),
            (
                "pull.py",
                "_offset_illegal_fix_while_owned",
                "if not fix.live or (pq is not None and pq.uid == fix.pq_uid)",
                'now = "no pq" if pq is None',
            ),
            ("concurrent_consume.py", "_dropped_pq_inert", "if t.clients[a.client].mem != cl.mem", 'return f"'),
            ("concurrent_consume.py", "_dropped_pq_inert", "if t.ghost.delivered != s.ghost.delivered", 'return f"'),
            ("consumer_process.py", "_local_file_grows", "if lost", 'return f"'),
            (
                "committed_offset.py",
                "_broker_decrease_attributed",
                "if t.ghost.last_writer[q] == s.ghost.last_writer[q]",
                'return f"',
            ),
            ("pull.py", "_piggyback_rule", "if req.commit_offset != expected", 'return f"'),
            ("rebalance.py", "_resume_at_stored", "and new.next_offset != stored", 'return f"'),
            ("pull.py", "_pull_stalled_recreated", "if m.clustering and any(_allocation_throws(", 'return f"'),
            (
                "client_locks.py",
                "_broker_lock_exclusive",
                "if held_by is not None and held_by != entry[0]",
                'return f"',
            ),
            ("client_locks.py", "_lock_belief_exclusive", "if len(fresh) > 1", 'return f"'),
            ("pull.py", "_single_pull_loop", "if n != expected", 'return f"'),
            ("pull.py", "_single_pull_loop", "if extra", 'return f"'),
            ("orderly_consume.py", "_single_orderly_listener", "if len(set(clients)) < len(clients)", 'return f"'),
            (
                "orderly_consume.py",
                "_single_orderly_listener",
                "if broken >= 0 and broken >= min(running)[0]",
                'return f"',
            ),
            (
                "orderly_consume.py",
                "_listener_holds_lock",
                "if pq is None or not pq.locked",
                "last = None if pq is None",
            ),
            ("orderly_consume.py", "_orderly_commit_point", "if update.offset != max(batch) + 1", 'return f"'),
            ("orderly_consume.py", "_orderly_commit_point", "if open_", 'return f"'),
            ("orderly_consume.py", "_orderly_commit_point", "if missing", 'return f"'),
            ("rebalance.py", "_positioning_caused", "if not (jumped or replayed)", 'effect = f"skips'),
            ("pull.py", "_no_repull_of_consumed", "if again", "return ("),
            ("slave.py", "_slave_decrease_declared", "if m.tolerate_slave_sync", 'return f"'),
            (
                "slave.py",
                "_slave_decrease_declared",
                "if landed is not None and landed[0] != s.ghost.slave_last_writer",
                'return f"',
            ),
            ("committed_offset.py", "_committed_decrease_declared", "if not any(cause.applies(", 'return f"'),
            ("admin_reset.py", "_reset_takes_effect", "if first != expected", "return ("),
            ("client_locks.py", "_first_locked_pull_valid", "if after.next_offset < 0", 'return f"'),
            (
                "client_locks.py",
                "_lock_released_on_leave",
                "if lk.holder(locks, a.queue, t.now) == m.identity[a.client]",
                'return f"',
            ),
            ("client_locks.py", "_lock_released_on_leave", "if kept", 'return f"'),
            (
                "client_locks.py",
                "_lock_released_on_leave",
                "if any(r.pq_uid == pq.uid for r in old.consuming)",
                'return f"',
            ),
            ("consumer_process.py", "_shutdown_persists_owned", "if unwritten", "q, value = unwritten[0]"),
            ("consumer_process.py", "_shutdown_persists_owned", "if _shutdown_commits(after.channel", 'return f"'),
            ("invariants.py", "check_state", "if detail is not None", "out.append(Violation("),
            ("invariants.py", "check_step", "if detail is not None", "out.append(Violation("),
        ],
    ),
    Exclusion(
        "model.py",
        "Model.__new__",
        "if cls is not Model or not config.mutations",
        "from rmqspec.spec.variants import variant_model",
        "mutation",
        "building the class of a model with planted bugs (spec/variants/): a default campaign plants none; "
        "rmqspec campaign --mutation NAME and tests/test_planted_bugs.py do",
    ),
    Exclusion(
        "rebalance.py",
        "RebalanceMixin._compute_pull_from_where",
        "if self._resumes_at_stored(stored)",
        "cfw = self.config.consume_from_where",
        "mutation",
        "a stored offset the rebalance does not resume at: the correct model's answer and offset file hold no "
        "negative value (INV-7, INV-16), so only the variant resume_ignores_stored_offset (spec/variants/"
        "rebalance.py) goes on to consumeFromWhere with one; rmqspec campaign --mutation NAME and "
        "tests/test_planted_bugs.py do",
    ),
    Exclusion(
        "concurrent_consume.py",
        "ConcurrentConsumeMixin._clean_expired_pq",
        'elif cause == "expired-to-unsubscribed-retry-topic"',
        "pq, _ = self._remove_message(",
        "mutation",
        "neither send-back cause: only the variant expired_removed_without_send_back (spec/variants/"
        "concurrent_consume.py) removes an expired message without sending it back; a default campaign plants "
        "none, rmqspec campaign --mutation NAME and tests/test_planted_bugs.py do",
    ),
    # every transition's refusal of a disabled action, per module of the model (51 in all)
    *(
        Exclusion(file, f"{cls}.*", "", "raise ActionNotEnabled(", "defensive", _NOT_ENABLED, count)
        for file, cls, count in (
            ("model.py", "Model", 1),
            ("clock.py", "ClockMixin", 2),
            ("broker.py", "BrokerMixin", 10),
            ("slave.py", "SlaveMixin", 2),
            ("consumer_process.py", "ConsumerProcessMixin", 8),
            ("rebalance.py", "RebalanceMixin", 2),
            ("pull.py", "PullMixin", 4),
            ("concurrent_consume.py", "ConcurrentConsumeMixin", 5),
            ("client_locks.py", "ClientLocksMixin", 2),
            ("orderly_consume.py", "OrderlyConsumeMixin", 2),
            ("faults.py", "FaultsMixin", 6),
            ("admin_reset.py", "AdminResetMixin", 7),
        )
    ),
    Exclusion(
        "clock.py",
        "ClockMixin._next_deadline",
        "if b.next_flush is not None",
        "if b.scheduled",
        "defensive",
        "the master's flush timer is None only while it is down: the initial state and _broker_restart set it, "
        "_broker_flush advances it, and only _broker_crash clears it, together with up=False",
    ),
    Exclusion(
        "rebalance.py",
        "RebalanceMixin._rebalance_topics",
        "if self.retry_queue is not None",
        "lists, complete, thrown, balanced",
        "defensive",
        "retry_queue is None only in BROADCASTING (Config.has_retry_queue), and _rebalance_topics returns "
        "before this line when not clustering",
    ),
    Exclusion(
        "ghost.py",
        "GhostMixin._note_lost",
        "if after is None",
        "return g",
        "defensive",
        "every caller passes a table: the flushed one (a tuple, Broker.flushed), or a .bak that "
        "CorruptOffsetFile and CorruptLocalOffsetFile are enabled only with (their handlers refuse None first)",
    ),
    Exclusion(
        "admin_reset.py",
        "_reset_takes_effect",
        "if pull is None",
        "return None",
        "defensive",
        "the ReceivePull the walk steps was enabled, and Model.enabled offers ReceivePull(i, uid) only for a pull "
        "of that pq with epoch != -1, the very pull this looks up",
    ),
    *_entries(
        "slave.py",
        "excluded-config",
        "a slave answering OFFSET_ILLEGAL, which only offset_check_in_slave = true gives "
        "(broker_rules.slave_pull_result); it restores RMQ-17, which INV-21 reports, so sample_config never "
        "draws it (tests/test_slaves.py sets it)",
        [
            ("_correction_from_master_bounds", "if result.status != br.OFFSET_ILLEGAL", "master = m._pull_result("),
            (
                "_correction_from_master_bounds",
                "if master.status == br.OFFSET_ILLEGAL and master.next_begin == result.next_begin",
                "",
                2,
            ),
        ],
    ),
    Exclusion(
        "client_locks.py",
        "ClientLocksMixin._orderly_pull_gate",
        "if start is None and self.clustering and not s.broker.up and not self.config.read_error_throws",
        "start = -1",
        "excluded-config",
        "a 4.9.8 orderly CLUSTERING consumer's locked first pull while the master is down: the master goes "
        "down only by BrokerCrash, which run_unit switches off for exactly these runs (the outage is a real "
        "bug, INV-19, tests/test_orderly.py), and Config refuses a slave with orderly",
    ),
    Exclusion(
        "pull.py",
        "PullMixin._receive_pull",
        "if not tree >> o & 1",
        "for o in result.found",
        "defensive",
        "putMessage of an offset the pq already holds: a FOUND reply is read at the pull's own nextOffset, and a "
        "live pq's nextOffset never moves back while it holds messages (docs/spec.md, 'Three fidelity checks' (c); "
        "the OFFSET_ILLEGAL "
        "branch that moves it drops the pq, R5.7)",
    ),
    *_entries(
        "pull.py",
        "defensive",
        "LIV-3's exemption for a pull-expired pq kept by an allocation that throws: the one strategy that throws "
        "on a valid non-empty list (MACHINE_ROOM without consumeridcs under a '<room>@<name>' broker) throws for "
        "every list that holds the asker, so no pq ever exists under it (docs/campaign.md); a kept pq without a "
        "throw is the violation itself",
        [
            (
                "_pull_stalled_recreated",
                "if kept is None or kept.uid != pq.uid or kept.dropped",
                "queues = (q,) if q == m.retry_queue else m.topic_queues",
            ),
            (
                "_pull_stalled_recreated",
                "if m.clustering and any(_allocation_throws(m, i, queues, r) for r in members)",
                "continue",
            ),
        ],
    ),
    Exclusion(
        "allocation.py",
        "allocate_queues",
        "if inner.name == CONFIG and inner.message_queue_list is None",
        "raise NullPointerError(",
        "defensive",
        "MACHINE_ROOM_NEARBY around a CONFIG with no list (Java's addAll(null)): Config accepts only AVG, "
        "AVG_BY_CIRCLE and CONSISTENT_HASH as nearby_inner; tests/test_spec_allocation.py and conform's "
        "reference run it",
    ),
    *_entries(
        "committed_offset.py",
        "defensive",
        "_landed_commit is asked only about a decrease that the step's landing request made: a step that lands "
        "no request on the queue, or one without a commit, lowers no broker offset (its callers run after the "
        "failover and admin-reset causes, which cover every other lowering step)",
        [
            (
                "_landed_commit",
                "if not isinstance(a, BrokerReceive) or not 0 <= a.overtakes < len(s.clients[a.client].channel)",
                "return None",
            ),
            ("_landed_commit", "if item.queue != q", "return None"),
            ("_landed_commit", "if item.commit_flag", "return None"),
        ],
    ),
    Exclusion(
        "committed_offset.py",
        "stale_owner_race",
        "if s.ghost.readers and key in s.ghost.readers[q]",
        "return None",
        "defensive",
        "a lowering commit from a pq that read the current value as its start: its memory would have to fall "
        "below what it read, and its only lowering writer, the OFFSET_ILLEGAL correction, goes below a stored "
        "position only for a pull above maxOffset, which a committed value never is; no path found (the "
        "campaigns and the directed starts never take it)",
    ),
    *_placed(
        "violation",
        "the path to INV-9a's report: a pq positioned without a stored offset on a queue whose group had committed, "
        "with no cause the ghost shows (missing_offset_cause answers None). Every way the correct model's tables "
        "lose an entry records its cause in Ghost.offset_lost (a broker crash, an unreadable file, a slave "
        "lacking it, a 4.9.8 query error), so a clean campaign never gets here; the planted bug "
        "empty_group_loses_offsets does (tests/test_causal_allow_list.py)",
        [
            (
                "ghost.py",
                "GhostMixin.missing_offset_cause",
                "if self.clustering and not s.broker.up and s.slave is not None and s.slave.offsets[q] is None",
                "return None",
            ),
            (
                "rebalance.py",
                "_positioning_caused",
                "if m.missing_offset_cause(s, client, q, query_error) is not None",
                "idx = m._ledger(client) * m.q_count + q",
            ),
            ("rebalance.py", "_positioning_caused", "if not (jumped or replayed)", "continue"),
        ],
    ),
    Exclusion(
        "admin_reset.py",
        "_reset_takes_effect",
        "if pq is None",
        "return None",
        "defensive",
        "the ghost ends a reset's expectation at a ReceivePull only for the pq that is in the table after it "
        "(AdminResetMixin._reset_receive_pull), and this check goes on only when the step ended the expectation",
    ),
    Exclusion(
        "client_locks.py",
        "ClientLocksMixin._note_stale_unlock",
        "if not s.broker.locks",
        "return s",
        "defensive",
        "only orderly consumers unlock, and an orderly model's broker always has a lock table (State.initial "
        "and BrokerRestart build one per queue)",
    ),
    Exclusion(
        "client_locks.py",
        "ClientLocksMixin._unlock_oneway",
        "if not s.broker.up",
        "return s",
        "excluded-config",
        "an unlock sent while the master is down outside a rebalance: only 4.9.8's delayed unlock and the "
        "OFFSET_ILLEGAL correction of a 4.9.8 orderly CLUSTERING consumer send one, and run_unit runs every such "
        "configuration with broker_crashes = 0 (INV-19's outage at the first locked pull is a real bug, "
        "tests/test_orderly.py); tests/test_orderly.py unlocks with the broker down",
    ),
    Exclusion(
        "model.py", "Model.step", "if handler is None", "raise TypeError", "defensive", "an action of another model"
    ),
    *_entries(
        "allocation.py",
        "defensive",
        "the model calls a strategy only with its own clientId and non-empty queue and consumer lists "
        "(Model._rebalance_topics answers an empty list itself, R9.3 step 3); tests/test_spec_allocation.py",
        [
            ("_check", "if not current", "raise"),
            ("_check", "if not mq_all", "raise"),
            ("_check", "if not cid_all", "raise"),
        ],
    ),
    Exclusion("config.py", "*", "", "raise ConfigError", "validation", _VALIDATED, 25),
    Exclusion("config.py", "_check_allocation", "if not (", 'retry = f"', "validation", _VALIDATED),
    *_entries(
        "allocation.py",
        "validation",
        _VALIDATED,
        [
            ("Strategy.__post_init__", "if self.name not in STRATEGIES", "raise"),
            ("Strategy.__post_init__", "and self.virtual_node_cnt < 0", "raise"),
            ("Strategy.__post_init__", "if self.inner is None", "raise"),
            ("Strategy.__post_init__", "if self.resolver is None", "raise"),
            ("allocate", "if strategy not in (AVG, AVG_BY_CIRCLE, CONSISTENT_HASH)", "raise"),
            ("allocate", "and virtual_node_cnt < 0", "raise"),
            ("allocate_queues", "if not room", "raise", 2),
        ],
    ),
    Exclusion(
        "config.py",
        "Config.from_mapping",
        "",
        "",
        "outside-campaign",
        "reads a configuration file (rmqspec run --config, check-trace headers); a campaign builds Config directly",
        10,
    ),
    Exclusion(
        "config.py",
        "_check_json_type",
        "",
        "",
        "outside-campaign",
        "checks a value read from a configuration file; its only caller is Config.from_mapping",
        2,
    ),
    Exclusion(
        "allocation.py",
        "Strategy.java_name",
        "",
        "",
        "outside-campaign",
        "getName(), for display and the reference's logs; the model never asks a strategy its name",
        2,
    ),
    Exclusion(
        "state.py",
        "History.events",
        "",
        "",
        "outside-campaign",
        "the history as a list, for repr and counterexample reports; a clean campaign run prints none",
        2,
    ),
    Exclusion(
        "consumer_process.py",
        "file_write_race",
        "if cl.file_write_pending is None",
        "return frozenset()",
        "defensive",
        "OffsetFileWriteLands is enabled only while the client has a lagging write pending (Model.enabled); "
        "check-trace steps a refused one (tests/test_trace.py)",
    ),
    *_entries(
        "consumer_process.py",
        "violation",
        "INV-6c's search for a fall's cause runs only where a BROADCASTING consumer's offsets.json entry falls "
        "outside a lagging write's race, and in a default campaign nothing else lowers it: Config refuses an admin "
        "reset in BROADCASTING (so no ClientResetWake writes the file), 4.9.8's FixOffsetIllegal needs retention "
        "and a queue the consumer lost meanwhile, and 5.x's correction in the pull callback writes nextBeginOffset, "
        "a minOffset above the pulled offset, so it raises (R5.7; 400 walks of BROADCASTING 5.x with retention, "
        "crashes and lagging writes met no fall). Planted bugs that lower the file reach it "
        "(tests/test_offset_file_writers.py, the INV-6c tests)",
        [
            ("local_file_lowering", "", "", 8),
            ("_local_file_falls_caused", "if before is None or after is None", "if not local_file_lowering"),
            ("_local_file_falls_caused", "if not local_file_lowering(s, a, i, q)", "", 2),
        ],
    ),
    *_placed(
        "excluded-config",
        "the strict form of the orderly exclusivity checks (Model.tolerate_shared_client_id, "
        "tolerate_broken_margins, tolerate_stale_unlock set False), which the scenario tests use to show that "
        "RocketMQ's anomaly happens (tests/test_orderly.py, tests/test_faults.py); a campaign checks with each "
        "anomaly tolerated only where its recorded cause (a shared clientId, a stall or broker crash, a stale "
        "unlock) is in the state",
        [
            ("client_locks.py", "_lock_belief_exclusive", "if m.tolerate_shared_client_id", "if len(fresh) > 1"),
            (
                "orderly_consume.py",
                "_single_orderly_listener",
                "if m.tolerate_broken_margins",
                "if m.tolerate_stale_unlock",
            ),
            ("orderly_consume.py", "_single_orderly_listener", "if m.tolerate_stale_unlock", "if broken >= 0"),
        ],
    ),
    *_placed(
        "violation",
        _VIOLATION,
        [
            # INV-8r's report names the committing pq's start; it runs only for a decrease with no declared cause
            ("committed_offset.py", "_below_own_start", "if landed is None or start is None", "", 2),
            # INV-22c: a step that counted a redelivery under no-cause, and the search for its detail
            ("concurrent_consume.py", "_redelivery_within_cause", "if after.get(NO_REDELIVERY_CAUSE", "delivered = ["),
            ("concurrent_consume.py", "_redelivery_within_cause", "for client, q, o in delivered", "", 2),
            ("concurrent_consume.py", "_redelivery_within_cause", "if pq is not None and start is not None", "", 2),
            # INV-23's run half: an expired message still heading its pq after a cleanExpireMsg run
            ("concurrent_consume.py", "_expired_message_cleaned", "if pq is None or head is None", "old = before"),
            ("concurrent_consume.py", "_expired_message_cleaned", "if old is not None and old.uid == pq.uid", "", 2),
        ],
    ),
    *_placed(
        "mutation",
        "a helper's answer that only its variant gives (spec/variants/): position_seeds_memory_one_below seeds the "
        "memory at a consumeFromWhere position, first_pull_one_below_position pulls below a new pq's start (whose "
        "redelivery has no cause), clean_timer_stops leaves a running consumer with no cleanExpireMsg timer and no "
        "dead task; a default campaign plants none, rmqspec campaign --mutation NAME and tests/test_planted_bugs.py do",
        [
            ("rebalance.py", "RebalanceMixin._compute_pull_from_where", "if mem != cl.mem[q]", "s = s._replace("),
            ("concurrent_consume.py", "ConcurrentConsumeMixin._resume_cause", "o < start[0]", "return NO_REDELIVERY"),
            ("concurrent_consume.py", "_expired_message_cleaned", "cl.next_clean is not None", "for q, pq in"),
            ("concurrent_consume.py", "_expired_message_cleaned", "for q, pq in enumerate(cl.pqs)", "", 2),
            ("concurrent_consume.py", "_expired_message_cleaned", "if head is not None and s.now <=", "", 2),
        ],
    ),
    Exclusion(
        "anomalies.py",
        "allowed_anomalies",
        "if config.mode == CLUSTERING",
        "return out",
        "outside-campaign",
        "in a run only the CLUSTERING properties (INV-13 ownership) ask for the tolerated anomalies; "
        "BROADCASTING asks only from tests and properties/history",
    ),
)
