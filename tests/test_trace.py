"""Trace conformance: ``rmqspec check-trace`` judges an implementation's trace by the model.

The samples in ``tests/data/traces`` are one conforming trace, one with a planted divergence (the
model with RMQ-01 planted wrote the observations, the header names the correct model) and one
malformed; ``tests/data/traces/README.md`` says how each was made. The schema in
``docs/trace.schema.json`` is checked with a small validator for the subset of JSON Schema it uses,
and against the reader's own tables.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rmqspec.cli import DEFAULT_CONFIGS, main
from rmqspec.properties.explore import explore
from rmqspec.properties.profiles import scaled
from rmqspec.properties.serialize import ACTION_TYPES, action_from_json
from rmqspec.properties.trace import (
    EVENT_KEYS,
    EVENT_REQUIRED,
    FIELD_RULES,
    HEADER_KEYS,
    OBSERVATION_KEYS,
    TraceFormatError,
    TraceReport,
    action_rules,
    check_trace,
    explorer_actions,
    trace_lines,
    write_trace,
)
from rmqspec.spec import actions as act
from rmqspec.spec import config as cfg
from rmqspec.spec.actions import (
    CONSUME_SUCCESS,
    ORDERLY_COMMIT,
    ORDERLY_ROLLBACK,
    ORDERLY_SUCCESS,
    RECONSUME_LATER,
    SUSPEND_CURRENT_QUEUE_A_MOMENT,
)
from rmqspec.spec.config import Config
from rmqspec.spec.invariants import ACTION_PROPERTIES, INVARIANTS
from rmqspec.spec.model import Model

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT / "tests" / "data" / "traces"
CONFORMING, DIVERGENT, MALFORMED = TRACES / "conforming.jsonl", TRACES / "divergent.jsonl", TRACES / "malformed.jsonl"
SCHEMA = json.loads((ROOT / "docs" / "trace.schema.json").read_text(encoding="utf-8"))
RULES = ROOT / "docs" / "rules.md"


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def _objects(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in _lines(path)]


def _dump(objects: list[dict[str, Any]]) -> list[str]:
    return [json.dumps(o) for o in objects]


# --- the model and the samples -------------------------------------------------------------------
@pytest.mark.parametrize("name", sorted(DEFAULT_CONFIGS))
def test_the_model_conforms_to_the_traces_it_writes(name: str, tmp_path: Path) -> None:
    config = DEFAULT_CONFIGS[name]
    for seed in (0, 1):
        actions = explorer_actions(config, seed, 80)
        path = tmp_path / f"{name}-{seed}.jsonl"
        assert write_trace(config, actions, path) == len(actions)
        report = check_trace(path)
        assert report.valid, report.describe()
        assert report.events == report.steps_checked == len(actions)
        assert report.observed_fields == dict.fromkeys(OBSERVATION_KEYS, len(actions))
        assert report.comparisons > 0


def test_the_conforming_sample_conforms(capsys: pytest.CaptureFixture[str]) -> None:
    report = check_trace(CONFORMING)
    assert report.valid and report.divergence is None and report.violation_count == 0
    assert report.events == 40
    assert main(["check-trace", str(CONFORMING)]) == 0
    assert "CONFORMS" in capsys.readouterr().out


def test_a_planted_bug_is_a_divergence_naming_step_field_and_rules(capsys: pytest.CaptureFixture[str]) -> None:
    report = check_trace(DIVERGENT)
    d = report.divergence
    assert d is not None and not report.valid
    assert (d.step, d.line, d.kind) == (16, 17, "observation")
    assert d.action == {"action": "ApplyConsumeOffset", "client": 1, "rid": 5}
    assert (d.field, d.expected, d.observed) == ("observed.mem.1.2", 0, 2)
    assert d.action_rules == action_rules("ApplyConsumeOffset") == ["R7.3"]
    assert d.field_rules == list(FIELD_RULES["mem"])
    assert set(d.rules) == {"R7.3", "R1.5", "R6.3"}
    assert main(["check-trace", "--json", str(DIVERGENT)]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["valid"] is False and out["divergence"]["field"] == "observed.mem.1.2"
    assert out["violation_count"] == 0 and set(out["invariant_counts"]) == {p.id for p in INVARIANTS} | {
        p.id for p in ACTION_PROPERTIES
    }
    assert main(["check-trace", str(DIVERGENT)]) == 1
    text = capsys.readouterr().out
    assert "divergence at step 16" in text and "observed.mem.1.2: expected 0, observed 2" in text


def test_the_malformed_sample_is_rejected_with_its_line_and_field(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(TraceFormatError) as caught:
        check_trace(MALFORMED)
    assert (caught.value.line, caught.value.field) == (5, "observed.brokr_offsets")
    assert main(["check-trace", str(MALFORMED)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("rmqspec: error: ")
    assert "line 5: observed.brokr_offsets: unknown observation" in err and "Traceback" not in err


def test_an_action_the_model_forbids_is_a_not_enabled_divergence() -> None:
    objects = _objects(CONFORMING)
    objects[3]["action"] = {"action": "BrokerRestart"}  # the broker is up at step 3
    report = check_trace(_dump(objects))
    d = report.divergence
    assert d is not None and (d.step, d.line, d.kind) == (3, 4, "not-enabled")
    assert d.action_rules == action_rules("BrokerRestart") == ["R3.7", "R4.3"] and d.field is None
    assert report.steps_checked == 3 and report.events == 40  # the rest is still read


def test_only_observed_fields_are_compared_so_hidden_state_can_hide_a_divergence() -> None:
    objects = _objects(DIVERGENT)
    for event in objects[1:]:
        del event["observed"]["mem"]  # RMQ-01 shows only in the memory offset by step 16
    report = check_trace(_dump(objects))
    assert report.valid and report.observed_fields["mem"] == 0
    bare = [objects[0]] + [{"step": e["step"], "action": e["action"]} for e in objects[1:]]
    assert check_trace(_dump(bare)).comparisons == 0


def test_invariant_violations_of_the_replayed_model_are_counted_per_invariant() -> None:
    mutated = Config(consumers=3, queues=4, mutations=frozenset({"watermark_highest_consumed"}))
    found = explore(mutated, 60, 300).counterexamples[0]
    lines = list(trace_lines(mutated, found.actions))  # the header names the mutated model
    report = check_trace(lines)
    assert report.divergence is None and not report.valid
    ids = {v.id for v in found.violations}
    assert report.violation_count >= 1 and all(report.invariant_counts[i] >= 1 for i in ids)
    assert report.violations[0].step == len(found.actions) and report.violations[0].rules
    assert check_trace(lines, invariants=False).valid


# Planted bugs (configurations as in test_planted_bugs.py) and whether their run shows a divergence.
PLANTED_BASE = {"consumers": 3, "queues": 4, "messages_per_queue": 4, "max_reconsume_times": 2}
PLANTED: dict[str, tuple[dict[str, Any], bool]] = {
    "count_not_decremented": ({}, False),  # msgCount is not observed
    "watermark_highest_consumed": ({}, True),
    "ignore_increase_only": ({}, True),
    "dropped_pq_commits": ({}, True),
    "no_persist_all_pruning": ({}, True),
    "local_remove_offset_deletes_file": ({"mode": cfg.BROADCASTING}, True),
    # offsets.json.bak is not observed
    "bak_written_once": ({"mode": cfg.BROADCASTING, "local_offset_file_corruptions": 1}, False),
    "broker_answers_minus_one": ({}, False),  # the broker's answer is not observed
    "channel_expiry_in_seconds": ({"client_stalls": 2}, True),  # see REFUSED_FIRST
    # INV-24b fails at the listener's return (a failed send-back let go with no copy), before the commit passes it
    "commit_before_send_back": ({"send_back_failures": 2}, False),
    "dlq_one_retry_late": ({"max_reconsume_times": 1, "consumers": 1}, False),  # the DLQ is not observed
    "dlq_copy_not_stored": ({"max_reconsume_times": 1, "consumers": 1}, False),  # the DLQ is not observed
    "send_back_from_ack_index": ({}, False),  # INV-24 fails at the send-back, and the broker's schedule is not observed
    "avg_blocks_overlap": ({}, True),
    "piggyback_next_offset": ({}, False),  # the piggy-backed commit is not observed
    # from a timestamp the variant's position differs from the stored offset it ignores, which next_offset shows;
    # with the default (LAST) the first counterexample is the retry queue's positioning at 0, its stored offset too
    "resume_ignores_stored_offset": ({"consume_from_where": cfg.FROM_TIMESTAMP}, True),
    "last_offset_one_before_max": ({}, True),  # the pull cursor is observed
    "commit_past_cached": ({"mode": cfg.BROADCASTING}, True),
    # pull expiry; pull_expiry_ignored needs a stalling schedule, not a random walk (SCHEDULE_ONLY)
    "pull_expiry_ignored": ({}, False),
    "offset_illegal_fix_deferred": ({"version": "5.x", "retention_deletes": 2}, True),
    # INV-36 fails at the correction itself, before the stale offset it persisted is read back
    "offset_fix_updates_after_removal": ({"retention_deletes": 2}, False),
    # admin reset under 4.9.8: the first violation of the walk is RMQ-26's race (INV-18), which
    # the correct model shares; in the first counterexample (seed 2) the reset's off-by-one commit has landed
    # on the broker by then (observed.broker_offsets); the skipped update is shown on a schedule
    "client_reset_off_by_one": ({"admin_resets": 2}, True),
    "client_reset_skips_update": ({}, False),
    # orderly: the first violation is a lock grant, before any observed offset differs
    "lock_ignores_holder": ({"orderly": True}, False),
    "add_without_lock": ({"orderly": True}, False),
    # orderly consume loop: INV-3 fails at the listener's return, before the memory offset it computes is
    # applied; the other three need a schedule (tests/test_planted_bugs.py, ORDERLY_SCRIPTED_CASES)
    "orderly_commit_returns_last_key": ({"orderly": True}, False),
    "orderly_suspend_commits": ({"orderly": True}, False),
    "orderly_removal_ignores_consume_lock": ({"orderly": True}, False),
    "orderly_ignores_lock_expiry": ({"orderly": True}, False),
    "orderly_no_queue_monitor": ({"orderly": True}, False),
    "unlock_delay_never_scheduled": ({"orderly": True}, False),  # the broker's lock table is not observed
    "pull_request_requeued": ({}, False),  # INV-20 fails at the send, before an observed field differs
    # INV-27 fails at the timer's first run, which drops the deadline: the timers are not observed
    "persist_timer_stops": ({"mode": cfg.BROADCASTING}, False),
    "rebalance_timer_stops": ({}, False),
    # the causal allow-list
    "empty_group_loses_offsets": ({"consumers": 1}, True),
    "resume_memory_one_behind": ({}, True),
    "pull_cursor_one_behind": ({}, True),
    # the broker's request pools (docs/spec.md, "Thread boundaries"): the persist lands one low, which the broker's
    # table shows
    "update_offset_stores_one_less": ({}, True),
    # cleanExpiredMsg (R6.8): only the missing retry copy differs, and the broker's schedule is not observed
    "expired_removed_without_send_back": ({"consume_timeout": 2_000}, False),
    "position_seeds_memory_one_below": ({}, True),  # the memory offset is observed
    "first_pull_one_below_position": ({}, True),  # the pull cursor is observed
    # INV-27 fails at the cleaner's first run, which drops its deadline: the timer is not observed
    "clean_timer_stops": ({"consume_timeout": 2_000}, False),
    "shutdown_skips_queued_commits": ({}, False),  # needs its schedule (tests/test_planted_bugs.py, SHUTDOWN_CASES)
    # INV-2b fails at the listener's return, before the short offset it queues reaches the (observed) memory offset
    "removal_result_read_before_removal": ({}, False),
    "lock_all_keeps_denied_locked": ({"orderly": True}, False),  # the pqs' lock flags are not observed
}
# Planted bugs whose trace first shows an action the correct model does not enable there (the early idle-channel close):
# the checker reports the step as not enabled, before any observed field could differ
REFUSED_FIRST = {"channel_expiry_in_seconds"}
# tests/test_planted_bugs.py, SCHEDULED_CASES, (admin reset) RESET_SCRIPTED_CASES and SHUTDOWN_CASES
SCHEDULE_ONLY = {
    "shutdown_skips_queued_commits",
    "pull_expiry_ignored",
    "client_reset_skips_update",
    "orderly_removal_ignores_consume_lock",
    "orderly_ignores_lock_expiry",
    "orderly_no_queue_monitor",
}


@pytest.mark.parametrize("mutation", sorted(PLANTED))
def test_a_planted_bug_diverges_when_it_touches_an_observed_field(mutation: str) -> None:
    assert set(PLANTED) == set(cfg.MUTATIONS)
    overrides, diverges = PLANTED[mutation]
    if mutation in SCHEDULE_ONLY:
        return
    config = Config.from_mapping({**PLANTED_BASE, **overrides})
    planted = replace(config, mutations=frozenset({mutation}))
    found = explore(planted, 300, 300).counterexamples[0]
    report = check_trace(list(trace_lines(config, found.actions, observe_with=planted)))
    assert (report.divergence is not None) == diverges
    if report.divergence is not None and mutation in REFUSED_FIRST:
        assert report.divergence.kind == "not-enabled" and report.divergence.step <= len(found.actions)
        return
    if report.divergence is not None:
        assert report.divergence.kind == "observation" and report.divergence.step <= len(found.actions)
        # the first mismatch, or (an OFFSET_ILLEGAL fix deferred: the pq also stays owned) one at the same step;
        # a broker-side bug (the group's offsets dropped) shows in the broker's table
        fields = [str(report.divergence.field)] + [m.field for m in report.divergence.mismatches]
        observed = ("observed.mem.", "observed.next_offset.", "observed.broker_offsets.")
        assert any(f.startswith(observed) for f in fields), fields


def test_rules_come_from_the_transition_docstrings_and_the_semantics() -> None:
    for name in ACTION_TYPES:
        fn = getattr(Model, "_" + re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower())
        assert fn.__doc__ and fn.__doc__.startswith(name), name
        assert set(action_rules(name)) == set(re.findall(r"\bR\d+(?:\.\d+[a-z]?)?", fn.__doc__)), name
    assert action_rules("SendPull") == ["R5.1", "R6.6", "R5.2", "R5.7"]
    assert set(FIELD_RULES) == set(OBSERVATION_KEYS)
    # Every rule a trace report prints has its entry in docs/rules.md (a heading "### <id> <title>"); a bare
    # section number (R11, the allocation strategies) has the entries of its rules ("### R11.0 ...").
    text = RULES.read_text(encoding="utf-8")
    cited = {r for rules in FIELD_RULES.values() for r in rules} | {r for n in ACTION_TYPES for r in action_rules(n)}
    assert cited
    assert not [r for r in cited if not re.search(rf"^### {re.escape(r)}(?: |\.\d)", text, re.MULTILINE)]


def test_the_recorded_trace_is_the_explorers_walk() -> None:
    mutated = Config(consumers=3, queues=4, mutations=frozenset({"watermark_highest_consumed"}))
    found = explore(mutated, 60, 300).counterexamples[0]
    assert explorer_actions(mutated, found.seed, 300) == found.actions


# --- malformed input --------------------------------------------------------------------------------
def _edit(index: int, change: Any) -> Any:
    def apply(objects: list[dict[str, Any]]) -> list[str]:
        change(objects[index])
        return _dump(objects)

    return apply


def _set(path: str, value: Any) -> Any:
    def change(obj: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        for key in parents:
            obj = obj[key]
        obj[last] = value

    return change


def _delete(path: str) -> Any:
    def change(obj: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        for key in parents:
            obj = obj[key]
        del obj[last]

    return change


FINISH = {"action": "FinishConsume", "client": 0, "rid": 0, "status": "OK", "ack_index": 0, "send_back_fails": 0}
MALFORMATIONS: dict[str, tuple[Any, int, str]] = {
    # name: (how the conforming sample is broken, the line named, the field named)
    "bad JSON": (lambda o: [*_dump(o[:3]), '{"step": 3, "action": ', *_dump(o[4:])], 4, "line"),
    "empty file": (lambda o: [], 1, "header"),
    "missing header": (lambda o: _dump(o[1:]), 1, "header"),
    "blank line": (lambda o: [*_dump(o[:2]), "", *_dump(o[2:])], 3, "line"),
    "not an object": (lambda o: [*_dump(o[:2]), "[1, 2]"], 3, "line"),
    "wrong format": (_edit(0, _set("format", "rmq-trace")), 1, "header.format"),
    "wrong version": (_edit(0, _set("version", 2)), 1, "header.version"),
    "producer missing": (_edit(0, _delete("producer")), 1, "header.producer"),
    "unknown header key": (_edit(0, _set("vesion", 1)), 1, "header.vesion"),
    "bad config value": (_edit(0, _set("config.consumers", 0)), 1, "header.config"),
    "unknown config field": (_edit(0, _set("config.consumer", 2)), 1, "header.config"),
    "config field of the wrong type": (_edit(0, _set("config.tags", "A")), 1, "header.config.tags"),
    "second header": (lambda o: [*_dump(o[:3]), json.dumps(o[0]), *_dump(o[3:])], 4, "line"),
    "unknown action": (_edit(2, _set("action.action", "Pull")), 3, "action.action"),
    "action field missing": (_edit(3, _delete("action.client")), 4, "action.client"),
    "unknown action field": (_edit(2, _set("action.clinet", 0)), 3, "action.clinet"),
    "client as a string": (_edit(3, _set("action.client", "0")), 4, "action.client"),
    "client as a boolean": (_edit(3, _set("action.client", True)), 4, "action.client"),
    "client out of range": (_edit(3, _set("action.client", 2)), 4, "action.client"),
    "step missing": (_edit(2, _delete("step")), 3, "step"),
    "step skipped": (_edit(2, _set("step", 3)), 3, "step"),
    "step as float": (_edit(2, _set("step", 2.0)), 3, "step"),
    "unknown event key": (_edit(2, _set("observd", {})), 3, "observd"),
    "observed not an object": (_edit(2, _set("observed", [])), 3, "observed"),
    "unknown observation": (_edit(2, _set("observed.broker_offset", {})), 3, "observed.broker_offset"),
    "mem offset of the wrong type": (_edit(2, _set("observed.mem.0.1", "3")), 3, "observed.mem.0.1"),
    "mem client out of range": (_edit(2, _set("observed.mem.5", {})), 3, "observed.mem"),
    "queue key not an index": (_edit(2, _set("observed.broker_offsets.01", 0)), 3, "observed.broker_offsets"),
    "owned queue listed twice": (_edit(2, _set("observed.owned.0", [1, 1])), 3, "observed.owned.0"),
    "owned not an array": (_edit(2, _set("observed.owned.0", {})), 3, "observed.owned.0"),
    "delivered pair too short": (_edit(2, _set("observed.delivered", [[0]])), 3, "observed.delivered.0"),
    "next offset as boolean": (_edit(2, _set("observed.next_offset.0", {"0": False})), 3, "observed.next_offset.0.0"),
    "bad listener status": (
        _edit(1, _set("action", {**FINISH, "status": "OK"})),
        2,
        "action.status",
    ),
    "bad line after a divergence": (
        lambda o: _dump([*o[:2], {**o[2], "action": {"action": "BrokerRestart"}}, *o[3:5]]) + ["{"],
        6,
        "line",
    ),
}


@pytest.mark.parametrize("name", sorted(MALFORMATIONS))
def test_every_malformation_names_its_line_and_field(name: str) -> None:
    build, line, field = MALFORMATIONS[name]
    with pytest.raises(TraceFormatError) as caught:
        check_trace(build(_objects(CONFORMING)))
    assert (caught.value.line, caught.value.field) == (line, field), str(caught.value)
    assert str(caught.value).startswith(f"line {line}: {field}: ")


def test_unreadable_files_exit_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(CONFORMING.read_bytes().splitlines(keepends=True)[0] + b"\xff\xfe\n")
    assert main(["check-trace", str(binary)]) == 2
    assert "line 2: line: not UTF-8" in capsys.readouterr().err
    assert main(["check-trace", str(tmp_path / "missing.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rmqspec: error: ") and "cannot read" in err and err.count("\n") == 1
    assert main(["check-trace", "--json", str(MALFORMED)]) == 2
    captured = capsys.readouterr()
    assert json.loads(captured.out)["error"] == {
        "line": 5,
        "field": "observed.brokr_offsets",
        "message": "unknown observation; accepted: mem, owned, broker_offsets, delivered, next_offset, flushed",
    }


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 6) | st.integers() | st.floats() | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)
FUZZ_BASE = _lines(CONFORMING)[:16]


@st.composite
def mutated_traces(draw: st.DrawFn) -> list[str]:
    lines = list(FUZZ_BASE)
    for _ in range(draw(st.integers(1, 3))):
        if not lines:
            break
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(["delete", "duplicate", "swap", "truncate", "garble", "set", "drop", "add"]))
        if op == "delete":
            del lines[i]
        elif op == "duplicate":
            lines.insert(i, lines[i])
        elif op == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "truncate":
            lines[i] = lines[i][: draw(st.integers(0, len(lines[i])))]
        elif op == "garble":
            k = draw(st.integers(0, len(lines[i])))
            lines[i] = lines[i][:k] + draw(st.text(min_size=1, max_size=3)) + lines[i][k:]
        else:
            try:
                obj = json.loads(lines[i])
            except ValueError:
                continue
            # walk down to a random object inside the line, then set, drop or add a key there
            node = obj
            while isinstance(node, dict) and node and draw(st.booleans()):
                child = node[draw(st.sampled_from(sorted(node)))]
                if not isinstance(child, dict):
                    break
                node = child
            if not isinstance(node, dict):
                continue
            if op == "add" or not node:
                node[draw(st.text(max_size=6))] = draw(JSON_VALUES)
            else:
                key = draw(st.sampled_from(sorted(node)))
                if op == "drop":
                    del node[key]
                else:
                    node[key] = draw(JSON_VALUES)
            lines[i] = json.dumps(obj)
    return lines


@scaled(5)
@given(mutated_traces())
def test_the_reader_gives_a_report_or_a_clean_format_error_and_nothing_else(lines: list[str]) -> None:
    try:
        report = check_trace(lines)
    except TraceFormatError as err:
        assert 1 <= err.line <= max(1, len(lines)) and err.field and err.message
        assert str(err) == f"line {err.line}: {err.field}: {err.message}"
        return
    assert isinstance(report, TraceReport)
    json.dumps(report.to_json())
    report.describe()


# --- the schema ---------------------------------------------------------------------------------------
SUPPORTED_KEYWORDS = {
    "$schema", "$id", "$defs", "$ref", "title", "description", "oneOf", "type", "const", "enum", "properties",
    "required", "additionalProperties", "propertyNames", "pattern", "items", "prefixItems", "minItems", "maxItems",
    "uniqueItems", "minimum", "maximum", "minLength",
}  # fmt: skip
JSON_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: type(v) is int,
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def schema_errors(value: Any, schema: dict[str, Any], path: str = "$") -> list[str]:
    """A validator for the subset of JSON Schema 2020-12 that docs/trace.schema.json uses."""
    if "$ref" in schema:
        target: Any = SCHEMA
        for part in schema["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        rest = {k: v for k, v in schema.items() if k != "$ref"}
        return schema_errors(value, target, path) + (schema_errors(value, rest, path) if rest else [])
    errors: list[str] = []
    if "oneOf" in schema:
        matches = sum(not schema_errors(value, s, path) for s in schema["oneOf"])
        if matches != 1:
            errors.append(f"{path}: matches {matches} of oneOf")
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(JSON_TYPES[t](value) for t in types):
            return [*errors, f"{path}: not {types}"]
    if "const" in schema and (value != schema["const"] or type(value) is not type(schema["const"])):
        errors.append(f"{path}: not {schema['const']!r}")
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: not one of {schema['enum']}")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        errors += [f"{path}: missing {k}" for k in schema.get("required", []) if k not in value]
        for k, v in value.items():
            if "propertyNames" in schema:
                errors += schema_errors(k, schema["propertyNames"], f"{path}.{k}(name)")
            if k in props:
                errors += schema_errors(v, props[k], f"{path}.{k}")
            elif schema.get("additionalProperties") is False:
                errors.append(f"{path}: unexpected key {k}")
            elif isinstance(schema.get("additionalProperties"), dict):
                errors += schema_errors(v, schema["additionalProperties"], f"{path}.{k}")
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0) or len(value) > schema.get("maxItems", len(value)):
            errors.append(f"{path}: {len(value)} items")
        if schema.get("uniqueItems") and len({json.dumps(v) for v in value}) != len(value):
            errors.append(f"{path}: items not unique")
        prefix = schema.get("prefixItems", [])
        for k, v in enumerate(value):
            item_schema = prefix[k] if k < len(prefix) else schema.get("items")
            if item_schema is not None:
                errors += schema_errors(v, item_schema, f"{path}[{k}]")
    if isinstance(value, str):
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errors.append(f"{path}: does not match {schema['pattern']}")
        if len(value) < schema.get("minLength", 0):
            errors.append(f"{path}: too short")
    if type(value) is int and not schema.get("minimum", value) <= value <= schema.get("maximum", value):
        errors.append(f"{path}: {value} out of range")
    return errors


def _keywords(node: Any, under_properties: bool = False) -> set[str]:
    if isinstance(node, list):
        return set().union(*(_keywords(n) for n in node)) if node else set()
    if not isinstance(node, dict):
        return set()
    out = set() if under_properties else set(node)
    for k, v in node.items():
        out |= _keywords(v, under_properties=k in ("properties", "$defs") and not under_properties)
    return out


def test_the_schema_uses_only_what_the_test_validator_implements() -> None:
    assert _keywords(SCHEMA) <= SUPPORTED_KEYWORDS
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"


@pytest.mark.parametrize("sample", [CONFORMING, DIVERGENT])
def test_the_samples_match_the_schema(sample: Path) -> None:
    for n, obj in enumerate(_objects(sample), 1):
        assert schema_errors(obj, SCHEMA) == [], f"line {n}"


# What one line's shape cannot show: JSON syntax, line order, step numbering, indexes the config bounds.
SCHEMA_BLIND = {
    "bad JSON",
    "empty file",
    "missing header",
    "blank line",
    "second header",
    "step skipped",
    "client out of range",
    "mem client out of range",
    "bad line after a divergence",
}


@pytest.mark.parametrize("name", sorted(set(MALFORMATIONS) - SCHEMA_BLIND))
def test_the_schema_rejects_the_lines_the_reader_rejects_for_their_shape(name: str) -> None:
    build, line, _ = MALFORMATIONS[name]
    assert schema_errors(json.loads(build(_objects(CONFORMING))[line - 1]), SCHEMA)


def test_the_schema_and_the_reader_agree_on_keys_actions_and_config() -> None:
    defs = SCHEMA["$defs"]
    assert defs["header"]["required"] == list(HEADER_KEYS) == list(defs["header"]["properties"])
    assert defs["header"]["properties"]["format"]["const"] == "rmqspec-trace"
    assert defs["event"]["required"] == list(EVENT_REQUIRED) and list(defs["event"]["properties"]) == list(EVENT_KEYS)
    assert list(defs["observed"]["properties"]) == list(OBSERVATION_KEYS)
    assert [r["$ref"].rsplit("/", 1)[1] for r in defs["action"]["oneOf"]] == list(ACTION_TYPES)
    for name, cls in ACTION_TYPES.items():
        fields = [f.name for f in dataclasses.fields(cls)]
        required = [f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING]
        assert ["action", *fields] == list(defs[name]["properties"]), name
        assert defs[name]["required"] == ["action", *required], name  # BrokerReceive.overtakes is optional
        assert defs[name]["properties"]["action"] == {"const": name}
    assert defs["FinishConsume"]["properties"]["status"]["enum"] == [
        CONSUME_SUCCESS,
        RECONSUME_LATER,
        ORDERLY_SUCCESS,
        SUSPEND_CURRENT_QUEUE_A_MOMENT,
        ORDERLY_COMMIT,
        ORDERLY_ROLLBACK,
    ]
    props = defs["config"]["properties"]
    assert list(props) == [f.name for f in dataclasses.fields(Config)]
    assert props["mode"]["enum"] == list(cfg.MODES) and props["strategy"]["enum"] == list(cfg.STRATEGIES)
    assert props["consume_from_where"]["enum"] == list(cfg.CONSUME_FROM_WHERE)
    assert props["version"]["enum"] == list(cfg.VERSIONS)
    assert props["mutations"]["items"]["enum"] == list(cfg.MUTATIONS)


def test_broker_receive_overtakes_is_optional_in_the_schema_the_reader_and_the_writer() -> None:
    """docs/spec.md, "Thread boundaries": ``BrokerReceive.overtakes`` is written only when 1; a trace without it (every
    trace written before it existed) reads as 0, and the overtaking step of a run reads back as written."""
    assert action_from_json({"action": "BrokerReceive", "client": 0}) == act.BrokerReceive(0)
    assert action_from_json({"action": "BrokerReceive", "client": 0, "overtakes": 1}) == act.BrokerReceive(0, 1)
    config = Config(consumers=1, queues=1, messages_per_queue=3, pull_batch_size=4)
    model = Model(config)
    actions: list[act.Action] = [act.Produce(0, "A")] * 3
    actions += [act.Start(0), act.Rebalance(0), act.SendPull(0, 0), act.BrokerReceive(0), act.ReceivePull(0, 0)]
    for rid in (2, 3):  # consume offset 0, send the pull carrying 1, consume offset 1
        done = act.FinishConsume(0, rid, CONSUME_SUCCESS, 0, 0)
        actions += [act.StartConsume(0, rid), done, act.ApplyConsumeOffset(0, rid)]
        actions += [act.SendPull(0, 0)] if rid == 2 else []
    state = model.initial()
    for a in actions:
        state = model.step(state, a)
    while act.PersistOffsets(0) not in model.enabled(state):  # the persist timer sends 2 behind the pull
        a = act.Heartbeat(0) if act.Heartbeat(0) in model.enabled(state) else act.Tick()
        actions.append(a)
        state = model.step(state, a)
    actions += [act.PersistOffsets(0), act.BrokerReceive(0, 1), act.BrokerReceive(0)]
    lines = list(trace_lines(config, actions))
    events = [json.loads(line) for line in lines[1:]]
    assert [e["action"] for e in events if "overtakes" in e["action"]] == [
        {"action": "BrokerReceive", "client": 0, "overtakes": 1}
    ]
    assert all(schema_errors(json.loads(line), SCHEMA) == [] for line in lines)
    report = check_trace(lines)
    assert report.valid and report.events == len(actions), report.describe()


@pytest.mark.parametrize("name", [f.name for f in dataclasses.fields(Config)])
def test_the_schemas_config_bounds_are_configs(name: str) -> None:
    spec = SCHEMA["$defs"]["config"]["properties"][name]
    if "minimum" not in spec:
        return
    base: dict[str, object] = {"messages_per_queue": 60} if name == "backlog" else {}
    if name in ("local_offset_file_corruptions", "lagging_file_writes"):
        base = {"mode": "BROADCASTING"}  # only a BROADCASTING consumer keeps a local file
    for value in (spec["minimum"], spec["maximum"]):
        Config.from_mapping({**base, name: value})
    for value in (spec["minimum"] - 1, spec["maximum"] + 1):
        with pytest.raises(cfg.ConfigError):
            Config.from_mapping({**base, name: value})


# --- commands and docs ----------------------------------------------------------------------------------
def test_record_trace_then_check_trace(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good, bad = tmp_path / "good.jsonl", tmp_path / "bad.jsonl"
    assert main(["record-trace", "--seed", "3", "--steps", "60", "--out", str(good)]) == 0
    assert main(["check-trace", str(good)]) == 0
    args = ["record-trace", "--seed", "26", "--steps", "80", "--plant", "watermark_highest_consumed"]
    assert main([*args, "--out", str(bad)]) == 0
    assert json.loads(bad.read_text(encoding="utf-8").splitlines()[0])["config"]["mutations"] == []
    assert main(["check-trace", "--json", str(bad)]) == 1
    out = capsys.readouterr().out
    report = json.loads(out[out.index("{") :])
    assert report["divergence"]["field"].startswith("observed.mem.")
    assert main(["record-trace", "--plant", "no_such_bug", "--out", str(bad)]) == 2


def test_bench_trace_prints_its_figures(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench-trace", "--events", "150", "300"]) == 0
    out = capsys.readouterr().out
    assert "parse ev/s" in out and "target: >= 300,000 events/s" in out
    assert len([line for line in out.splitlines() if re.match(r"\s+(150|300)\s", line)]) == 2


def test_the_example_in_docs_oracle_conforms() -> None:
    text = (ROOT / "docs" / "oracle.md").read_text(encoding="utf-8")
    section = text[text.index("## Trace conformance") :]
    example = section[section.index("```jsonl") + len("```jsonl") : section.index("```", section.index("```jsonl") + 3)]
    lines = example.strip().splitlines()
    assert len(lines) == 6
    report = check_trace(lines)
    assert report.valid and report.events == 5 and report.comparisons > 0


def test_the_planted_divergence_sample_is_what_the_mutated_model_writes() -> None:
    objects = _objects(DIVERGENT)
    config = Config.from_mapping(objects[0]["config"])
    mutated = replace(config, mutations=frozenset({"watermark_highest_consumed"}))
    actions = [action_from_json(e["action"]) for e in objects[1:]]
    regenerated = [json.loads(line) for line in trace_lines(config, actions, objects[0]["producer"], mutated)]
    assert regenerated == objects
