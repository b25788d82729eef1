"""A campaign on a real Spark standalone cluster gives exactly the runs it gives on ``local[2]``.

A master and two one-core workers are started on 127.0.0.1 from the pyspark installation
(``rmqspec.campaign.standalone``); the same small lockstep campaign is run through the CLI against
``spark://127.0.0.1:<port>`` and against ``local[2]``, each in its own driver process with a hard
timeout, and every field of every run except its duration must agree. The cluster is torn down
whatever happens (its daemons' process groups are killed), so the test cannot leave Java
processes behind or hang; it takes about a minute on two cores.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from rmqspec.campaign.standalone import StandaloneCluster

CAMPAIGN = ["--runs", "12", "--steps", "60", "--batch-size", "6", "--seed", "3"]
DRIVER_TIMEOUT = 120.0  # seconds for one campaign driver, Spark start-up included


def _start_campaign(master: str, out: Path) -> subprocess.Popen[str]:
    """Start ``rmqspec campaign`` in a driver process (and process group) of its own."""
    cmd = [sys.executable, "-m", "rmqspec.cli", "campaign", "--master", master, "--out", str(out), *CAMPAIGN]
    cmd += ["--store", str(out / "failures")]  # never the repository's failures/
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable}
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, start_new_session=True, text=True
    )


def _finish(proc: subprocess.Popen[str], master: str) -> tuple[int, str]:
    """Wait for a campaign driver; kill its process group on timeout (or on any error)."""
    try:
        output, _ = proc.communicate(timeout=DRIVER_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate(timeout=10)
        raise AssertionError(f"campaign on {master} did not finish in {DRIVER_TIMEOUT:.0f} s:\n{output}") from None
    return proc.returncode, output


def _kill(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:  # the test failed early: leave no driver JVM behind
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def _rows(out: Path) -> dict[int, dict[str, Any]]:
    rows = [json.loads(line) for path in sorted((out / "batches").glob("*.jsonl")) for line in path.open()]
    # seconds is the one field that differs between two executions, and the row digest covers it
    return {r["unit"]: {k: v for k, v in r.items() if k not in ("seconds", "row_sha256")} for r in rows}


def test_standalone_cluster_campaign_equals_local(tmp_path: Path) -> None:
    # The local[2] driver runs while the cluster starts: both are mostly JVM start-up.
    drivers = [_start_campaign("local[2]", tmp_path / "local")]
    try:
        with StandaloneCluster(workers=2, cores=1, memory="1g", timeout=60.0, base_dir=tmp_path) as cluster:
            drivers.append(_start_campaign(cluster.master_url, tmp_path / "cluster"))
            on_cluster, cluster_output = _finish(drivers[1], cluster.master_url)
            apps = cluster.status()
        on_local, local_output = _finish(drivers[0], "local[2]")
    finally:
        for proc in drivers:
            _kill(proc)
    assert on_cluster in (0, 1), f"campaign on {cluster.master_url} failed (exit {on_cluster}):\n{cluster_output}"
    assert [a["name"] for a in apps["completedapps"]] == ["rmqspec-campaign"], apps["completedapps"]
    assert apps["completedapps"][0]["cores"] == 2  # both workers' executors took part
    summary = json.loads((tmp_path / "cluster" / "summary.json").read_text())
    assert summary["master"] == cluster.master_url and summary["parallelism"] == 2
    assert summary["determinism_checks"] == 1
    assert on_local == on_cluster, f"local[2] exit {on_local}, cluster exit {on_cluster}:\n{local_output}"

    cluster_rows, local_rows = _rows(tmp_path / "cluster"), _rows(tmp_path / "local")
    assert sorted(cluster_rows) == list(range(12))
    for unit in range(12):
        assert cluster_rows[unit] == local_rows[unit], f"unit {unit} differs between the cluster and local[2]"
