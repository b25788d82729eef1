"""Every failure a campaign stored in ``failures/`` is re-checked on every test run.

A record whose configuration plants a bug (``mutations``) must still be refuted by the same
property: the checker has not lost its teeth. A record found on the real model (no mutations) is a
RocketMQ-model bug to fix: its test fails while the failure still reproduces. A liveness record
(``walk_steps``) replays its walk and quiesces the end state again (docs/spec.md, "Liveness at quiescence").
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rmqspec.properties.explore import replay, replay_liveness
from rmqspec.properties.serialize import action_from_json, action_to_json, config_from_json
from rmqspec.spec import actions as act

STORE = Path(__file__).resolve().parent.parent / "failures"
RECORDS = sorted(STORE.glob("*.json"))


def test_the_store_holds_failures() -> None:
    assert RECORDS, f"{STORE} is empty: commit at least one campaign failure so replay is exercised"


@pytest.mark.parametrize("path", RECORDS, ids=[p.stem for p in RECORDS])
def test_stored_failure_replays_as_recorded(path: Path) -> None:
    record = json.loads(path.read_text(encoding="utf-8"))
    config = config_from_json(record["config"], where=f"{path.name}: config")
    actions = [action_from_json(a, where=f"{path.name}: action {n}") for n, a in enumerate(record["actions"], 1)]
    if "walk_steps" in record:  # a liveness failure: the walk, then its (deterministic) quiescence
        safety, outcome = replay_liveness(config, actions, record["walk_steps"])
        found = {v.id for v in safety} | ({v.id for v in outcome.violations} if outcome is not None else set())
    else:
        # a planted bug's record shows its property still refutes it by itself: a property written later may see the
        # same walk sooner (commit_before_send_back's INV-9 walk now fails INV-24b first, at the listener's return)
        watch = frozenset({record["id"]}) if config.mutations else None
        _, violations = replay(config, actions, watch)
        found = {v.id for v in violations}
    reproduced = record["id"] in found
    if config.mutations:
        assert reproduced, f"{path.name}: planted bug {sorted(config.mutations)} no longer refuted by {record['id']}"
    else:
        assert not reproduced, f"{path.name}: still fails: {record['id']} {record['detail']}"


def test_every_action_kind_round_trips_through_json_including_bool_fields() -> None:
    # AdminReset.by_timestamp is a bool: a stored counterexample holding one must read back (it once did not)
    reset = act.AdminReset(0, 15_000, True)
    assert action_from_json(action_to_json(reset)) == reset
    with pytest.raises(ValueError, match="by_timestamp must be bool"):
        action_from_json({"action": "AdminReset", "queue": 0, "target": 1, "by_timestamp": 1})
    with pytest.raises(ValueError, match="queue must be int"):
        action_from_json({"action": "AdminReset", "queue": True, "target": 1, "by_timestamp": False})
