"""``rmqspec bench-held-out``'s plumbing (src/rmqspec/bench_held_out.py), not the catch rate: names are checked, the
campaign's batch files and the check's JSON lines are read for the first detection, and one tiny end-to-end run
(a campaign of a few seconds on one held-out variant, no check) goes through the installed CLI and reports."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from types import ModuleType

import pytest

from rmqspec.bench_held_out import campaign_detection, check_detection, cli_command
from rmqspec.cli import main
from rmqspec.spec.config import HELD_OUT_NAMES


def test_an_unknown_name_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench-held-out", "--names", f"{HELD_OUT_NAMES[0]},no_such_bug", "--no-check"]) == 2
    err = capsys.readouterr().err
    assert "--names: unknown ['no_such_bug']" in err and HELD_OUT_NAMES[0] in err


def test_a_planted_bug_name_is_not_a_held_out_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench-held-out", "--names", "watermark_highest_consumed", "--no-check"]) == 2
    assert "unknown ['watermark_highest_consumed']" in capsys.readouterr().err


def _batch(path: Path, rows: list[dict[str, object]], mtime: float) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    os.utime(path, (mtime, mtime))


def test_the_campaign_detection_is_the_first_violating_row_of_the_first_batch_holding_one(tmp_path: Path) -> None:
    batches = tmp_path / "batches"
    batches.mkdir()
    clean = {"violation_count": 0, "violations": []}

    def bad(prop: str, steps: int) -> dict[str, object]:
        return {"violation_count": 1, "violations": [json.dumps({"id": prop, "shrunk_steps": steps})]}

    _batch(batches / "batch-000000.jsonl", [{"unit": 0, **clean}, {"unit": 1, **clean}], 1_000.0)
    _batch(batches / "batch-000001.jsonl", [{"unit": 3, **bad("INV-9", 7)}, {"unit": 2, **bad("INV-5", 12)}], 1_042.5)
    _batch(batches / "batch-000002.jsonl", [{"unit": 4, **bad("INV-1", 3)}], 1_050.0)
    assert campaign_detection(tmp_path, 1_000.0) == ("INV-5", 12, 42.5)
    (batches / "batch-000001.jsonl").unlink()
    (batches / "batch-000002.jsonl").unlink()
    assert campaign_detection(tmp_path, 1_000.0) is None


def test_the_check_detection_sums_the_searches_up_to_the_first_failing_configuration() -> None:
    lines = [
        "progress text that is not a document",
        json.dumps({"config": "a", "seconds": 1.25, "violations": [], "lassos": []}),
        json.dumps(
            {
                "config": "b",
                "seconds": 2.0,
                "violations": [],
                "lassos": [{"id": "LIV-2", "prefix_steps": 5, "cycle_steps": 3}],
            }
        ),
        json.dumps({"config": "c", "seconds": 9.0, "violations": [{"id": "INV-1", "steps": 4}], "lassos": []}),
    ]
    assert check_detection("\n".join(lines)) == ("LIV-2", 8, 3.2)
    assert check_detection("\n".join(lines[:2])) is None


def test_a_tiny_campaign_of_one_held_out_variant_is_measured_and_reported(tmp_path: Path) -> None:
    name = HELD_OUT_NAMES[0]
    argv = [*cli_command(), "bench-held-out", "--names", name, "--campaign-seconds", "2", "--no-check", "--json"]
    done = subprocess.run([*argv, "--out", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["of"] == doc["measured"] == 1 and doc["interrupted"] is False
    (row,) = doc["variants"]
    assert row["name"] == name and row["campaign"]["ran"] and not row["check"]["ran"]
    assert row["campaign"]["exit_code"] in (0, 1) and row["campaign"]["error"] is None
    assert row["caught_by"] == ("campaign" if row["campaign"]["caught"] else None)
    assert doc["caught"] == (1 if row["caught_by"] else 0)
    assert row["set"] == "seen" and doc["sets"] == {"seen": {"caught": doc["caught"], "of": 1, "measured": 1}}
    if row["campaign"]["caught"]:
        assert row["campaign"]["property"] and row["campaign"]["counterexample_steps"] > 0
        assert 0 < row["campaign"]["seconds_to_detection"] <= row["campaign"]["seconds"]
    assert f"{name}: campaign ..." in done.stderr
    assert (tmp_path / name / "campaign" / "batches").is_dir()  # the campaign wrote under --out, its store too
    assert not (tmp_path / name / "check").exists()


def test_ctrl_c_prints_what_was_measured_and_exits_130(tmp_path: Path) -> None:
    names = ",".join(HELD_OUT_NAMES[:2])
    argv = [*cli_command(), "bench-held-out", "--names", names, "--campaign-seconds", "60", "--no-check"]
    proc = subprocess.Popen([*argv, "--out", str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    batches = tmp_path / HELD_OUT_NAMES[0] / "campaign" / "batches"
    deadline = time.monotonic() + 300
    while not (batches.is_dir() and any(batches.glob("batch-*.jsonl"))) and time.monotonic() < deadline:
        time.sleep(0.5)  # wait for the first campaign to be under way (its first batch written)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err
    first = next(line for line in out.splitlines() if line.startswith(HELD_OUT_NAMES[0]))
    assert "campaign: interrupted" in first and "(1 measured)" in out and " of 2 " in out
    assert "interrupted" in err


def test_unseen_refuses_a_bug_whose_figures_were_seen(capsys: pytest.CaptureFixture[str]) -> None:
    from rmqspec.spec.variants.held_out import HELD_OUT, unseen

    seen = next(n for n, b in HELD_OUT.items() if b.figures_seen)
    assert main(["bench-held-out", "--unseen", "--names", seen, "--no-check"]) == 2
    err = capsys.readouterr().err
    assert "--unseen" in err and seen in err and all(n in err for n in unseen())


def _registered_from(*modules: ModuleType) -> tuple[str, ...]:
    """The held-out names whose variants the given modules plant, in registry order: one set's bugs."""
    from rmqspec.spec.variants.held_out import HELD_OUT_VARIANTS

    return tuple(n for n, cls in HELD_OUT_VARIANTS.items() if cls.__module__ in {m.__name__ for m in modules})


def test_the_first_six_sets_figures_are_seen_once_the_sixth_set_judged_inv27_and_inv28() -> None:
    from rmqspec.spec.variants.held_out import HELD_OUT, broker_fixes, client_fixes, client_lifecycle_fixes

    # the first five sets' figures were read before (docs/held_out.md, "The fifth set, measured")
    assert len(_registered_from(client_fixes)) == 9 and all(HELD_OUT[n].figures_seen for n in HELD_OUT_NAMES[:51])
    # the sixth set (docs/held_out.md, "The sixth set"): its two halves, registered after the five, measured once
    # ("The sixth set, measured")
    sixth = _registered_from(broker_fixes, client_lifecycle_fixes)
    assert sixth == HELD_OUT_NAMES[51:56] and len(sixth) == 5
    assert all(HELD_OUT[n].figures_seen for n in sixth)


def test_the_seventh_set_is_registered_after_the_six_and_its_figures_are_seen_once_it_judged_inv29() -> None:
    from rmqspec.spec.variants.held_out import HELD_OUT, orderly_gate_fixes, unhandled_requests, unseen

    # the seventh set (docs/held_out.md, "The seventh set: written apart from the search"): its two modules,
    # registered after the six sets, measured once ("The seventh set, measured")
    seventh = _registered_from(orderly_gate_fixes, unhandled_requests)
    assert seventh == HELD_OUT_NAMES[56:61] and len(seventh) == 5
    assert all(HELD_OUT[n].figures_seen for n in seventh) and not set(seventh) & set(unseen())


def test_the_eighth_set_is_registered_after_the_seventh_and_its_figures_are_seen_once_it_judged_inv30_to_32() -> None:
    from rmqspec.spec.variants.held_out import HELD_OUT, process_queue_fixes, rust_client_fixes, unseen

    # the eighth set (docs/held_out.md, "The eighth set: written apart from the search"): its two modules, registered
    # after the seven sets, measured once ("The eighth set, measured")
    eighth = _registered_from(rust_client_fixes, process_queue_fixes)
    assert eighth == HELD_OUT_NAMES[61:64] and len(eighth) == 3
    assert all(HELD_OUT[n].figures_seen for n in eighth) and not set(eighth) & set(unseen())


def test_the_ninth_set_is_registered_after_the_eighth_and_its_figures_are_seen_once_it_judged_inv2b_and_inv33() -> None:
    from rmqspec.spec.variants.held_out import HELD_OUT, housekeeping_fixes, unseen

    # the ninth set (docs/held_out.md, "The ninth set: written apart from the search"): its module, registered after
    # the eight sets, measured once ("The ninth set, measured"); the next change of the search or the properties is
    # judged by the tenth set
    ninth = _registered_from(housekeeping_fixes)
    assert ninth == HELD_OUT_NAMES[64:65] and len(ninth) == 1
    assert all(HELD_OUT[n].figures_seen for n in ninth)
    assert not set(ninth) & set(unseen())


def test_the_tenth_set_is_registered_after_the_ninth_and_its_figures_are_seen_once_it_judged_inv34() -> None:
    from rmqspec.spec.variants.held_out import HELD_OUT, channel_events_fixes, unseen

    # the tenth set (docs/held_out.md, "The tenth set: written apart from the search"): its module, registered after
    # the nine sets, measured once ("The tenth set, measured"); the next change of the search or the properties is
    # judged by the eleventh set
    tenth = _registered_from(channel_events_fixes)
    assert tenth == HELD_OUT_NAMES[65:67] and len(tenth) == 2
    assert all(HELD_OUT[n].figures_seen for n in tenth)
    assert not set(tenth) & set(unseen())


def test_the_eleventh_set_is_registered_after_the_tenth_and_its_figures_are_seen_once_it_judged_inv35() -> None:
    from rmqspec.spec.variants.held_out import HELD_OUT, go_push_consumer_fixes, unseen

    # the eleventh set (docs/held_out.md, "The eleventh set: written apart from the search"): its module, registered
    # after the ten sets, measured once ("The eleventh set, measured"); only the twelfth set's bugs are unseen
    eleventh = _registered_from(go_push_consumer_fixes)
    assert eleventh == HELD_OUT_NAMES[67:70] and len(eleventh) == 3
    assert all(HELD_OUT[n].figures_seen for n in eleventh)
    assert not set(eleventh) & set(unseen())


def test_the_twelfth_set_is_registered_after_the_eleventh_part_a_then_part_b_and_its_figures_are_seen() -> None:
    from rmqspec.spec.variants.held_out import HELD_OUT, client_tracker_fixes, java_tracker_fixes, unseen

    # the twelfth set (docs/held_out.md, "The twelfth set, part A" and "part B: written apart from the search"): two
    # modules written side by side by two sessions, registered as one block after the eleventh set, part A first;
    # measured once ("The twelfth set, measured"); only the thirteenth set's bugs are unseen
    twelfth_a = _registered_from(java_tracker_fixes)
    twelfth_b = _registered_from(client_tracker_fixes)
    assert len(twelfth_a) == 3 and len(twelfth_b) == 2
    assert HELD_OUT_NAMES[70:75] == twelfth_a + twelfth_b
    assert all(HELD_OUT[n].figures_seen for n in twelfth_a + twelfth_b)
    assert not set(twelfth_a + twelfth_b) & set(unseen())


def test_the_thirteenth_set_is_registered_after_the_twelfth_and_its_figures_are_unseen() -> None:
    from rmqspec.spec.variants.held_out import HELD_OUT, release_note_fixes, unseen

    # the thirteenth set (docs/held_out.md, "The thirteenth set: written apart from the search"): its module,
    # registered as one block after the twelfth set, not yet measured: its bugs are the only unseen ones
    thirteenth = _registered_from(release_note_fixes)
    assert thirteenth and HELD_OUT_NAMES[75:] == thirteenth
    assert not any(HELD_OUT[n].figures_seen for n in thirteenth)
    assert unseen() == thirteenth


def test_unseen_with_no_unseen_bug_left_says_a_new_set_is_needed(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from dataclasses import replace

    from rmqspec.spec.variants.held_out import HELD_OUT, unseen

    # every bug's figures seen (as after each set's measurement, until the next set is written): --unseen must refuse
    # to measure anything
    for name in unseen():
        monkeypatch.setitem(HELD_OUT, name, replace(HELD_OUT[name], figures_seen=True))
    assert unseen() == ()
    assert main(["bench-held-out", "--unseen", "--no-check"]) == 2
    assert "new" in capsys.readouterr().err


def test_the_table_and_document_give_each_row_its_set_and_caught_n_of_m_per_set() -> None:
    from rmqspec.bench_held_out import SEEN, UNSEEN, Part, Row, document, table

    rows = [
        Row("a", "c", SEEN, campaign=Part(ran=True, exit_code=1, caught=True, property="INV-1")),
        Row("b", "c", UNSEEN, campaign=Part(ran=True, exit_code=0)),
        Row("d", "c", UNSEEN, campaign=Part(ran=True, exit_code=1, caught=True, property="LIV-2")),
    ]
    text = table(rows, 4, {SEEN: 1, UNSEEN: 3})
    lines = text.splitlines()
    assert lines[1].split()[:2] == ["a", SEEN] and lines[2].split()[:2] == ["b", UNSEEN]
    assert "seen: caught 1 of 1" in text and "unseen: caught 1 of 3 (2 measured)" in text
    assert lines[-1] == "caught 2 of 4 (3 measured)"
    doc = document(rows, 4, False, {SEEN: 1, UNSEEN: 3})
    assert [v["set"] for v in doc["variants"]] == [SEEN, UNSEEN, UNSEEN]
    assert doc["sets"] == {
        SEEN: {"caught": 1, "of": 1, "measured": 1},
        UNSEEN: {"caught": 1, "of": 3, "measured": 2},
    }
    assert document(rows[1:2], 1, False)["sets"] == {UNSEEN: {"caught": 0, "of": 1, "measured": 1}}
