"""``rmqspec campaign --resume`` never resumes into a wrong result: a batch on disk that does not hold
exactly its own runs, each valid and unedited, is named and re-run; a bad manifest is refused with exit 2.
SIGINT and SIGTERM sent to the campaign's driver alone stop it with one line (what is saved, the command
that resumes) and leave none of its processes behind; so do they, and Ctrl-C, stop ``check --spark``, which
stops through the campaign's path.

One campaign (8 runs in 4 batches of 2) is run once; each case corrupts a copy of its directory."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from rmqspec.campaign.runner import ROW_DIGEST, CampaignOptions, _row_digest, _spark_session, run_campaign
from rmqspec.cli import build_parser, main

RUNS, BATCH, STEPS = 8, 2, 30
SETTINGS = ["--master", "local[2]", "--steps", str(STEPS), "--batch-size", str(BATCH), "--no-lockstep"]
SETTINGS += ["--no-liveness", "--coverage-every", "0"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[tuple[int, str]]]:
    """A finished campaign's directory and its runs as (unit, trace hash)."""
    out = tmp_path_factory.mktemp("finished") / "campaign"
    options = CampaignOptions(
        out=out,
        master="local[2]",
        runs=RUNS,
        steps=STEPS,
        batch_size=BATCH,
        lockstep=False,
        liveness=False,
        coverage_every=0,
    )
    result = run_campaign(options)
    runs = [(r["unit"], r["trace_hash"]) for r in result.rows]
    assert [u for u, _ in runs] == list(range(RUNS))
    return out, runs


@pytest.fixture
def copy(finished: tuple[Path, list[tuple[int, str]]], tmp_path: Path) -> Path:
    shutil.copytree(finished[0], tmp_path / "campaign")
    shutil.rmtree(tmp_path / "campaign" / "runs.parquet")  # the resumed campaign must write its own
    return tmp_path / "campaign"


def resume(out: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    """Exit code and stderr's lines of ``rmqspec campaign --resume`` on ``out``."""
    code = main(
        ["campaign", "--resume", "--out", str(out), "--runs", str(RUNS), "--store", str(out / "store"), *SETTINGS]
    )
    return code, capsys.readouterr().err.splitlines()


def parquet_runs(out: Path) -> list[tuple[int, str]]:
    spark = _spark_session("local[1]")
    try:
        rows = spark.read.parquet(str(out / "runs.parquet")).select("unit", "trace_hash").collect()
    finally:
        spark.stop()
    return sorted((r["unit"], r["trace_hash"]) for r in rows)


def batch(out: Path, index: int) -> Path:
    return out / "batches" / f"batch-{index:06d}.jsonl"


def edit_row(path: Path, line: int, change: Callable[[dict[str, object]], None], digest: bool = False) -> None:
    """Change row ``line`` (1-based) of a batch file in place; with ``digest`` also recompute its digest."""
    lines = path.read_text().splitlines()
    row = json.loads(lines[line - 1])
    change(row)
    if digest:
        row[ROW_DIGEST] = _row_digest({k: v for k, v in row.items() if k != ROW_DIGEST})
    lines[line - 1] = json.dumps(row, sort_keys=True)
    path.write_text("\n".join(lines) + "\n")


def lines_of(path: Path, keep: Callable[[list[str]], list[str]]) -> None:
    path.write_text("".join(line + "\n" for line in keep(path.read_text().splitlines())))


def set_field(name: str, value: object) -> Callable[[dict[str, object]], None]:
    return lambda row: row.__setitem__(name, value)


# (corruption of the copy, the batch re-run or None, what the one line on stderr must say)
CORRUPTIONS: dict[str, tuple[Callable[[Path], None], int | None, str]] = {
    "empty batch file": (lambda d: batch(d, 1).write_text(""), 1, "batch-000001.jsonl: holds no runs"),
    "dropped line": (lambda d: lines_of(batch(d, 1), lambda ls: ls[:1]), 1, "missing 1 of units 2..3, unit 3 first"),
    "duplicated line": (
        lambda d: lines_of(batch(d, 1), lambda ls: [*ls, ls[0]]),
        1,
        "batch-000001.jsonl: line 3: unit 2 a second time",
    ),
    "edited unit": (
        lambda d: edit_row(batch(d, 1), 1, set_field("unit", 3)),
        1,
        "batch-000001.jsonl: line 1: row_sha256 does not match the row",
    ),
    "edited unit with its digest recomputed": (
        lambda d: edit_row(batch(d, 1), 1, set_field("unit", 3), digest=True),
        1,
        "batch-000001.jsonl: line 1: seed is not the one the manifest's seed 0 gives unit 3",  # unit 2's seed
    ),
    "edited trace_hash": (
        lambda d: edit_row(batch(d, 2), 2, set_field("trace_hash", "0" * 64)),
        2,
        "batch-000002.jsonl: line 2: row_sha256 does not match the row",
    ),
    "seed edited with its digest recomputed": (
        lambda d: edit_row(batch(d, 2), 2, set_field("seed", 99), digest=True),
        2,
        "line 2: seed is not the one the manifest's seed 0 gives unit 5",
    ),
    "batch copied to another index": (
        lambda d: shutil.copyfile(batch(d, 1), batch(d, 3)),
        3,
        "batch-000003.jsonl: line 1: unit 2 is not one of this batch's units 6..7",
    ),
    "row {}": (
        lambda d: lines_of(batch(d, 0), lambda ls: ["{}", ls[1]]),
        0,
        "batch-000000.jsonl: line 1: no field 'row_sha256'",
    ),
    "row null": (
        lambda d: lines_of(batch(d, 0), lambda ls: [ls[0], "null"]),
        0,
        "batch-000000.jsonl: line 2: expected a JSON object (a run's row), got null",
    ),
    "non-UTF-8 batch": (
        lambda d: batch(d, 2).write_bytes(batch(d, 2).read_bytes().replace(b'"unit"', b'"\xffunit"', 2)),
        2,
        "batch-000002.jsonl: line 1: not UTF-8 text",
    ),
    "deleted batches/": (lambda d: shutil.rmtree(d / "batches"), None, "batches: missing; re-running every batch"),
}


@pytest.mark.parametrize("case", list(CORRUPTIONS))
def test_resume_reruns_a_batch_that_does_not_verify_and_ends_with_every_run_once(
    case: str, copy: Path, finished: tuple[Path, list[tuple[int, str]]], capsys: pytest.CaptureFixture[str]
) -> None:
    corrupt, rerun, message = CORRUPTIONS[case]
    before = {p.name: p.read_bytes() for p in (copy / "batches").iterdir()}
    corrupt(copy)
    code, err = resume(copy, capsys)
    assert code == 0, err
    notices = [line for line in err if line.startswith("rmqspec: ")]
    assert len(notices) == 1 and message in notices[0], notices
    assert parquet_runs(copy) == finished[1]  # every unit once, with its own trace hash
    after = {p.name: p.read_bytes() for p in (copy / "batches").iterdir()}
    assert after.keys() == before.keys()
    if rerun is not None:
        assert f"re-running batch {rerun} " in notices[0]
        rewritten = batch(copy, rerun).name
        assert {k: v for k, v in after.items() if k != rewritten} == {k: v for k, v in before.items() if k != rewritten}


def test_resume_keeps_every_batch_that_verifies(copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stamps = {p.name: p.stat().st_mtime_ns for p in (copy / "batches").iterdir()}
    code, err = resume(copy, capsys)
    assert code == 0 and not [line for line in err if line.startswith("rmqspec: ")], err
    assert "resuming: 4 batches (8 runs) already on disk" in err
    assert {p.name: p.stat().st_mtime_ns for p in (copy / "batches").iterdir()} == stamps  # nothing re-run


def test_resume_ignores_a_stray_file_among_the_batches(
    copy: Path, finished: tuple[Path, list[tuple[int, str]]], capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copyfile(batch(copy, 1), copy / "batches" / "batch-abc.jsonl")
    code, err = resume(copy, capsys)
    notices = [line for line in err if line.startswith("rmqspec: ")]
    assert code == 0 and len(notices) == 1 and "batch-abc.jsonl: not a batch file" in notices[0], err
    assert parquet_runs(copy) == finished[1]


def test_resume_reruns_a_batch_file_it_cannot_read(
    copy: Path,
    finished: tuple[Path, list[tuple[int, str]]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    unreadable = batch(copy, 2)
    unreadable.chmod(0)
    if os.access(unreadable, os.R_OK):  # root reads it anyway: refuse the read as the kernel would
        import rmqspec.jsonin

        def refuse(path: object, *args: object, **kwargs: object) -> object:
            if Path(str(path)) == unreadable:
                raise PermissionError(13, "Permission denied", str(path))
            return open(path, *args, **kwargs)  # type: ignore[call-overload]

        monkeypatch.setattr(rmqspec.jsonin, "open", refuse, raising=False)
    code, err = resume(copy, capsys)
    notices = [line for line in err if line.startswith("rmqspec: ")]
    assert code == 0 and len(notices) == 1, err
    assert "batch-000002.jsonl: cannot read: Permission denied; re-running batch 2" in notices[0]
    assert parquet_runs(copy) == finished[1]


@pytest.mark.parametrize(("text", "kind"), [("null", "null"), ("[1, 2]", "list"), ('"seed"', "str")])
def test_resume_refuses_a_manifest_that_is_not_an_object_naming_it(
    copy: Path, capsys: pytest.CaptureFixture[str], text: str, kind: str
) -> None:
    (copy / "manifest.json").write_text(text)
    code, err = resume(copy, capsys)
    assert code == 2 and len(err) == 1, err
    assert f"manifest.json: expected a JSON object of the campaign's settings, got {kind}" in err[0]
    assert "restore it, or start afresh without --resume" in err[0]


def test_resume_refuses_a_manifest_that_is_not_utf8_naming_its_line(
    copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (copy / "manifest.json").write_bytes(b'{\n"seed": "\xff"}')
    code, err = resume(copy, capsys)
    assert code == 2 and len(err) == 1 and "manifest.json: line 2: not UTF-8 text" in err[0], err


# --- interrupts -------------------------------------------------------------------------------------------


def descendants(pid: int) -> dict[int, bytes]:
    """Every process below ``pid``, each with its start time (to tell it from a later process of that pid)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := _stat(int(entry))) is not None:
            children.setdefault(int(stat[1]), []).append(int(entry))
    found: dict[int, bytes] = {}
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if (stat := _stat(child)) is not None:
                found[child] = stat[19]
                todo.append(child)
    return found


def _stat(pid: int) -> list[bytes] | None:
    """The fields of /proc/PID/stat after the command name (state first), or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None


def still_running(processes: dict[int, bytes]) -> list[int]:
    return [
        pid for pid, start in processes.items() if (s := _stat(pid)) is not None and s[19] == start and s[0] != b"Z"
    ]


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="walks /proc for the campaign's processes")
@pytest.mark.parametrize(
    ("signum", "code", "said"), [(signal.SIGINT, 130, "interrupted"), (signal.SIGTERM, 143, "terminated (SIGTERM)")]
)
def test_a_signal_to_the_driver_stops_the_campaign_in_one_line_and_leaves_no_process(
    tmp_path: Path, signum: int, code: int, said: str
) -> None:
    out = tmp_path / "campaign"
    rmqspec = Path(sys.executable).with_name("rmqspec")
    argv = [str(rmqspec), "campaign", "--out", str(out), "--store", str(tmp_path / "store"), "--runs", "100000"]
    driver = subprocess.Popen(
        [*argv, *SETTINGS], stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 120
        while not batch(out, 0).exists() and driver.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert batch(out, 0).exists(), "no batch was saved"
        started = descendants(driver.pid)
        assert any(b"java" in Path(f"/proc/{pid}/cmdline").read_bytes() for pid in started if _stat(pid)), started
        os.kill(driver.pid, signum)  # the driver alone, not its process group
        _, stderr = driver.communicate(timeout=60)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
    err = stderr.decode()
    assert driver.returncode == code, err
    assert "Traceback" not in err and "py4j" not in err and "Exception" not in err, err
    [line] = [line for line in err.splitlines() if line.startswith("rmqspec: ")]
    saved = sorted((out / "batches").glob("batch-*.jsonl"))
    runs = sum(len(p.read_text().splitlines()) for p in saved)
    assert line.startswith(f"rmqspec: {said}: {len(saved)} batches ({runs} runs) saved in {out}; resume with: "), line
    command = shlex.split(line.split("resume with: ", 1)[1])
    args = build_parser().parse_args(command[1:])
    assert command[:2] == ["rmqspec", "campaign"] and args.resume and Path(args.out) == out
    assert (args.runs, args.steps, args.batch_size, args.no_lockstep, args.no_liveness) == (
        100000,
        STEPS,
        BATCH,
        True,
        True,
    )
    deadline = time.monotonic() + 10
    while still_running(started) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not still_running(started), [Path(f"/proc/{p}/cmdline").read_bytes()[:80] for p in still_running(started)]


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="walks /proc for the search's processes")
@pytest.mark.parametrize(
    ("signum", "group", "code", "said"),
    [
        (signal.SIGINT, False, 130, "interrupted"),
        (signal.SIGTERM, False, 143, "terminated (SIGTERM)"),
        (signal.SIGINT, True, 130, "interrupted"),  # Ctrl-C: the terminal signals the whole process group
    ],
    ids=["sigint", "sigterm", "ctrl-c"],
)
def test_a_signal_to_check_spark_stops_it_in_one_line_and_leaves_no_process(
    tmp_path: Path, signum: int, group: bool, code: int, said: str
) -> None:
    """``check --spark`` stops through the campaign's path (spark_session.own_spark_session)."""
    rmqspec = Path(sys.executable).with_name("rmqspec")
    argv = [str(rmqspec), "check", "--spark", "--master", "local[1]", "--config", "two-consumers-instant"]
    log = tmp_path / "stderr"
    with open(log, "wb") as stderr:
        driver = subprocess.Popen(
            [*argv, "--out", str(tmp_path / "out")], stdout=subprocess.PIPE, stderr=stderr, start_new_session=True
        )
    try:
        deadline = time.monotonic() + 120
        while b"states/s" not in log.read_bytes() and driver.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)  # the first level is done: Spark and its JVM are up, the search is under way
        assert b"states/s" in log.read_bytes(), log.read_text()
        started = descendants(driver.pid)
        assert any(b"java" in Path(f"/proc/{pid}/cmdline").read_bytes() for pid in started if _stat(pid)), started
        if group:
            os.killpg(driver.pid, signum)
        else:
            os.kill(driver.pid, signum)
        driver.communicate(timeout=60)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
    err = log.read_text()
    assert driver.returncode == code, err
    assert "Traceback" not in err and "py4j" not in err and "Exception" not in err, err
    [line] = [line for line in err.splitlines() if "rmqspec: " in line]
    assert line.endswith(f"rmqspec: {said}; nothing was checked to the end"), line
    deadline = time.monotonic() + 10
    while still_running(started) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not still_running(started), [Path(f"/proc/{p}/cmdline").read_bytes()[:80] for p in still_running(started)]


# --- a full disk at the end ---------------------------------------------------------------------------------
def test_a_full_disk_at_the_final_writes_is_bad_input_naming_the_file_and_resuming_writes_them(
    copy: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    from rmqspec import outfiles

    real_fsync = os.fsync

    def full_at_rules(fd: int) -> None:  # the disk fills up as the third picture is written
        if os.readlink(f"/proc/self/fd/{fd}").endswith("rules.svg.tmp"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fsync(fd)

    monkeypatch.setattr(outfiles.os, "fsync", full_at_rules)
    code, err = resume(copy, capsys)
    assert code == 2, err
    [line] = [line for line in err if line.startswith("rmqspec: ")]
    assert line.startswith(f"rmqspec: error: {copy / 'rules.svg'}: cannot write: No space left on device"), line
    assert "rmqspec campaign --resume" in line
    assert not (copy / "rules.svg").exists() and not (copy / "rules.svg.tmp").exists()
    assert not (copy / "report.md").exists()  # written last: no report of a campaign whose results are not all there
    monkeypatch.setattr(outfiles.os, "fsync", real_fsync)
    code, err = resume(copy, capsys)
    assert code == 0, err
    assert (copy / "rules.svg").stat().st_size > 0 and (copy / "report.md").exists()
