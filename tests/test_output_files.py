"""Result files are written whole or not at all (``rmqspec.outfiles``), a file that cannot be written is named
with exit code 2, an unwritable ``--graph`` is refused before the search, and an output directory in use by
another campaign is refused (``campaign.runner.output_lock``)."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rmqspec import outfiles
from rmqspec.campaign.runner import LOCK_NAME, CampaignError, output_lock
from rmqspec.cli import main


def _full_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every write fails as on a full disk, when it is flushed (where a delayed allocation fails)."""

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(outfiles.os, "fsync", full)


def test_a_failed_write_leaves_the_old_file_and_no_temporary_and_names_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "summary.json"
    outfiles.write_atomic(path, "old\n")
    _full_disk(monkeypatch)
    with pytest.raises(OSError) as raised:
        outfiles.write_atomic(path, ["new", "\n"])
    assert raised.value.errno == errno.ENOSPC and raised.value.filename == str(path)
    assert path.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["summary.json"]


def test_run_on_a_full_disk_is_exit_2_naming_the_file_and_leaves_no_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _full_disk(monkeypatch)
    config = tmp_path / "config.json"
    config.write_text('{"consumers": 1, "queues": 1}')
    code = main(["run", "--config", str(config), "--walks", "1", "--steps", "5", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"rmqspec: error: {tmp_path / 'out' / 'run-summary.json'}: cannot write results: No space left" in err
    assert list((tmp_path / "out").iterdir()) == []


@pytest.mark.parametrize("graph", ["no-such-directory/states.graphml", "."])
def test_an_unwritable_graph_is_refused_before_the_search(
    graph: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = str(tmp_path / graph)
    code = main(["check", "--config", "one-message", "--graph", target, "--quiet", "--out", str(tmp_path / "o")])
    captured = capsys.readouterr()
    assert code == 2, captured.err
    assert captured.err.startswith(f"rmqspec: error: --graph {target}: cannot write: ")
    assert captured.out == ""  # nothing was searched: no statistics, no verdict


HOLDER = """
import sys, time
from pathlib import Path
from rmqspec.campaign.runner import output_lock
with output_lock(Path(sys.argv[1])):
    print("held", flush=True)
    time.sleep(600)
"""


def test_a_second_campaign_into_a_directory_in_use_is_refused_and_a_dead_holders_lock_is_taken(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "campaign"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(out)], stdout=subprocess.PIPE)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        (out / "manifest.json").write_text("{}\n")  # as the holder's campaign would have: --resume is refused too
        for extra in ([], ["--resume"]):
            code = main(["campaign", "--out", str(out), "--runs", "1", "--master", "local[1]", *extra])
            err = capsys.readouterr().err
            assert code == 2, err
            assert f"rmqspec: error: {out}: in use by another campaign (pid {holder.pid}, which holds" in err
        assert not (out / "batches").exists() and (out / "manifest.json").read_text() == "{}\n"
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert (out / LOCK_NAME).read_text() == f"{holder.pid}\n"  # left by the killed holder: stale
    with output_lock(out):
        assert (out / LOCK_NAME).read_text() == f"{os.getpid()}\n"
        with pytest.raises(CampaignError, match="in use by another campaign"), output_lock(out):
            pass  # a second holder in this process is refused too


@pytest.mark.parametrize("command", [["run"], ["check", "--config", "one-message", "--quiet"]])
def test_an_out_directory_that_cannot_be_made_is_refused_before_the_work(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("")
    code = main([*command, "--out", str(tmp_path / "file" / "out")])
    captured = capsys.readouterr()
    assert code == 2, captured.err
    assert captured.err.startswith(f"rmqspec: error: --out {tmp_path / 'file' / 'out'}: cannot write")
    assert f"{tmp_path / 'file'} is not a directory" in captured.err and captured.out == ""


def test_a_closed_standard_output_ends_the_command_with_141_and_no_traceback(tmp_path: Path) -> None:
    """``rmqspec ... | head``: the reader closes the pipe; the command exits 141 (a shell's SIGPIPE code), says
    nothing on stderr but its progress, and the files it wrote stay."""
    command = [sys.executable, "-m", "rmqspec.cli", "run", "--walks", "1", "--steps", "5", "--out", str(tmp_path)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()
    err = process.stderr.read().decode()
    assert process.wait(timeout=120) == 141
    assert "Traceback" not in err and "error" not in err
    assert (tmp_path / "run-summary.json").exists()
