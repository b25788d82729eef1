"""offsets.json has unlocked writers (docs/spec.md, "What is real, ranked"): a BROADCASTING consumer's persist timer
reads, merges and writes the file (LocalFileOffsetStore#persistAll) while the rebalance thread's persist(mq) of a
pull-expired queue does the same, so a persistAll that read before the other write and writes after it undoes that
write.

The model splits the timer's persistAll (``PersistOffsets(client, lagging=1)``, ``OffsetFileWriteLands``), the
reference holds its string2File back in lockstep, and INV-6c (the file falls only with a cause) accepts the fall
because the step shows the race; without that cause, or with a planted bug that lowers the file, it fails.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rmqspec.properties.explore import explore
from rmqspec.properties.file_scenarios import file_race_config, lagging_write_race
from rmqspec.refinement.reference_system import ReferenceSystem
from rmqspec.spec import actions as act
from rmqspec.spec import consumer_process
from rmqspec.spec import invariants as inv
from rmqspec.spec.config import BROADCASTING, FROM_FIRST, Config
from rmqspec.spec.invariants import check_state, check_step
from rmqspec.spec.model import Model
from rmqspec.spec.state import State, history_list

ALL = frozenset(p.id for p in inv.INVARIANTS) | frozenset(p.id for p in inv.ACTION_PROPERTIES)


def _replay(model: Model, taken: list[act.Action]) -> list[State]:
    states = [model.initial()]
    for a in taken:
        states.append(model.step(states[-1], a))
    return states


def test_a_lagging_persist_all_undoes_a_removals_persist_and_inv_6c_names_the_race(tmp_path: Path) -> None:
    model = Model(file_race_config())
    taken = lagging_write_race(model)
    states = _replay(model, taken)
    assert [s.clients[0].file[0] for s in states[-3:]] == [1, 2, 1]  # persist(mq) wrote 2, the late write 1
    for before, a, after in zip(states, taken, states[1:], strict=False):
        assert check_step(model, before, a, after) + check_state(model, after) == [], a
    races = [e for e in history_list(states[-1]) if e.kind == "file-write-race"]
    assert len(races) == 1 and races[0].queue == 0
    reference = ReferenceSystem(model.config, tmp_path)  # the reference holds the write back the same way
    for before, a, after in zip(states, taken, states[1:], strict=False):
        reference.apply(a)
        assert reference.abstract() == (after.now, after.broker, after.clients), (a, before.now)


def test_inv_6c_refutes_the_same_fall_when_the_step_shows_no_race(monkeypatch: pytest.MonkeyPatch) -> None:
    model = Model(file_race_config())
    taken = lagging_write_race(model)
    states = _replay(model, taken)
    monkeypatch.setattr(consumer_process, "file_write_race", lambda s, a, i: frozenset())
    found = check_step(model, states[-2], taken[-1], states[-1])
    assert [v.id for v in found] == ["INV-6c"] and "fell from 2 to 1" in found[0].detail


def test_inv_6c_refutes_a_consumer_whose_updates_ignore_increase_only_without_inv_4() -> None:
    config = Config(
        mode=BROADCASTING,
        consumers=2,
        queues=3,
        messages_per_queue=4,
        consume_from_where=FROM_FIRST,
        lagging_file_writes=2,
        mutations=frozenset({"ignore_increase_only"}),
    )
    refuted = explore(config, 60, 200, watch=frozenset({"INV-6c"}))
    assert not refuted.valid and "no declared cause" in refuted.counterexamples[0].violations[0].detail


@pytest.mark.parametrize("version", ["4.9.8", "5.x"])
def test_the_correct_model_with_lagging_writes_keeps_every_property(version: str) -> None:
    config = Config(
        mode=BROADCASTING, consumers=2, queues=3, messages_per_queue=4, lagging_file_writes=2, version=version
    )
    result = explore(config, 100, 300, watch=ALL)
    assert result.valid, result.counterexamples[0].describe()
    assert result.actions["OffsetFileWriteLands"] > 0  # each one landed a lagging persistAll


def test_an_entry_the_race_removes_makes_a_restart_skip_reported_as_the_races_harm() -> None:
    # The 4.9.8 OFFSET_ILLEGAL task (retention) persists a queue whose entry the lagging persistAll never read;
    # the late write drops it, and the re-created pq positions by CONSUME_FROM_LAST past unconsumed messages.
    # Ghost.offset_lost names the race, so INV-9a accepts the skip and the fates count it as harm.
    config = Config(
        mode=BROADCASTING, consumers=2, queues=3, messages_per_queue=4, lagging_file_writes=2, retention_deletes=2
    )
    result = explore(config, 150, 300, watch=ALL)
    assert result.valid, result.counterexamples[0].describe()
    assert any(fate.endswith(": file-write-race") for fate in result.fates.harm), result.fates.harm
