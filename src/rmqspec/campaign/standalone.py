"""A throwaway Spark standalone cluster (one master, N workers) on 127.0.0.1, for tests, docs and benchmarks.

The pip package of pyspark has no ``sbin/start-*.sh``, so the daemons are started the way those
scripts would, with ``bin/spark-class``::

    with StandaloneCluster(workers=2) as cluster:
        run_campaign(CampaignOptions(out=..., master=cluster.master_url, runs=12))

Every daemon runs in its own process group (``start_new_session``), with its logs, work and
scratch directories in one temporary directory. ``stop()`` (and leaving the ``with`` block,
whatever happened) sends SIGTERM to each group, then SIGKILL to any group still alive after a
grace period, which also ends the executor JVMs and Python workers the workers started. Readiness
is read from the master's web UI (``/json/``: ``status`` ALIVE, ``aliveworkers``) within a bounded
time; a daemon that exits or misses the deadline raises :class:`StandaloneClusterError` with the
tail of its log. Only 127.0.0.1 is ever bound (``SPARK_LOCAL_IP``); the master's REST submission
server is switched off.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import IO, Any

HOST = "127.0.0.1"


class StandaloneClusterError(Exception):
    """The cluster could not be started (the message says which daemon and quotes its log)."""


def spark_home() -> Path:
    """The Spark distribution inside the installed pyspark package (it holds bin/ and jars/)."""
    import pyspark

    home = Path(pyspark.__file__).resolve().parent
    if not (home / "bin" / "spark-class").exists():  # pragma: no cover - a broken pyspark install
        raise StandaloneClusterError(f"{home}: no bin/spark-class in this pyspark installation")
    return home


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the daemons bind it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        port: int = s.getsockname()[1]
        return port


class StandaloneCluster:
    """One master and ``workers`` workers of ``cores`` cores and ``memory`` each, on 127.0.0.1."""

    def __init__(
        self,
        workers: int = 2,
        cores: int = 1,
        memory: str = "1g",
        timeout: float = 60.0,
        base_dir: Path | None = None,
        python: str = sys.executable,
        daemon_memory: str = "512m",
    ) -> None:
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.timeout = timeout
        self.python = python
        self.daemon_memory = daemon_memory
        self._base_dir = base_dir
        self.dir: Path | None = None
        self.port = 0
        self.webui_port = 0
        self._procs: list[tuple[str, subprocess.Popen[bytes], Path]] = []
        self._logs: list[IO[bytes]] = []
        self.startup_seconds = 0.0

    # -- public interface ---------------------------------------------------------------------

    @property
    def master_url(self) -> str:
        return f"spark://{HOST}:{self.port}"

    @property
    def webui_url(self) -> str:
        return f"http://{HOST}:{self.webui_port}"

    def __enter__(self) -> StandaloneCluster:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        """Start the master, then the workers; return when all workers are registered and ALIVE."""
        started = time.monotonic()
        deadline = started + self.timeout
        try:
            self.dir = Path(tempfile.mkdtemp(prefix="rmqspec-standalone-", dir=self._base_dir))
            for sub in ("logs", "work", "tmp"):
                (self.dir / sub).mkdir()
            self.port, self.webui_port = free_port(), free_port()
            self._spawn(
                "master",
                [
                    "org.apache.spark.deploy.master.Master",
                    "--host",
                    HOST,
                    "--port",
                    str(self.port),
                    "--webui-port",
                    str(self.webui_port),
                ],
            )
            self._wait(lambda s: s.get("status") == "ALIVE", "the master to become ALIVE", deadline)
            for n in range(self.workers):
                self._spawn(
                    f"worker-{n + 1}",
                    [
                        "org.apache.spark.deploy.worker.Worker",
                        "--host",
                        HOST,
                        "--cores",
                        str(self.cores),
                        "--memory",
                        self.memory,
                        "--webui-port",
                        str(free_port()),
                        "--work-dir",
                        str(self.dir / "work" / f"worker-{n + 1}"),
                        self.master_url,
                    ],
                )
            self._wait(
                lambda s: s.get("aliveworkers", 0) >= self.workers,
                f"{self.workers} workers to register",
                deadline,
            )
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = round(time.monotonic() - started, 2)

    def status(self) -> dict[str, Any]:
        """The master's ``/json/`` document (workers, cores, applications, status)."""
        with urllib.request.urlopen(f"{self.webui_url}/json/", timeout=2) as response:
            doc: dict[str, Any] = json.loads(response.read().decode("utf-8"))
            return doc

    def stop(self, grace: float = 10.0) -> None:
        """Stop every daemon (workers first) and delete the cluster's directory. Idempotent."""
        for _, proc, _ in reversed(self._procs):
            _signal_group(proc, signal.SIGTERM)
        end = time.monotonic() + grace
        for _, proc, _ in reversed(self._procs):
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.1, end - time.monotonic()))
            # The group may hold executors or Python workers even when the daemon itself is gone.
            _signal_group(proc, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        self._procs.clear()
        for f in self._logs:
            f.close()
        self._logs.clear()
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def log_tail(self, lines: int = 20) -> str:
        """The last lines of every daemon's log, for error messages."""
        parts = []
        for name, _, path in self._procs:
            try:
                text = path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:]
            except OSError:
                text = ["(no log)"]
            parts.append(f"--- {name} ({path.name}) ---\n" + "\n".join(text))
        return "\n".join(parts)

    # -- internals ----------------------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        assert self.dir is not None
        env = dict(os.environ)
        env.update(
            {
                "SPARK_HOME": str(spark_home()),
                "SPARK_LOCAL_IP": HOST,
                "SPARK_LOCAL_HOSTNAME": HOST,
                "SPARK_LOG_DIR": str(self.dir / "logs"),
                "SPARK_WORKER_DIR": str(self.dir / "work"),
                "SPARK_LOCAL_DIRS": str(self.dir / "tmp"),
                "SPARK_DAEMON_MEMORY": self.daemon_memory,
                "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
                "PYSPARK_PYTHON": self.python,
            }
        )
        return env

    def _spawn(self, name: str, args: list[str]) -> None:
        assert self.dir is not None
        log_path = self.dir / "logs" / f"{name}.log"
        log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self._logs.append(log)
        proc = subprocess.Popen(
            [str(spark_home() / "bin" / "spark-class"), *args],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self._env(),
            cwd=self.dir,
            start_new_session=True,  # its own process group: stop() kills the daemon and its children
        )
        self._procs.append((name, proc, log_path))

    def _wait(self, ready: Any, what: str, deadline: float) -> None:
        last = "no answer from the master's web UI yet"
        while True:
            for name, proc, _ in self._procs:
                if proc.poll() is not None:
                    raise StandaloneClusterError(
                        f"{name} exited with code {proc.returncode} while waiting for {what}\n{self.log_tail()}"
                    )
            try:
                doc = self.status()
                if ready(doc):
                    return
                last = f"master status {doc.get('status')}, {doc.get('aliveworkers')} alive workers"
            except (OSError, urllib.error.URLError, ValueError) as err:
                last = f"master web UI {self.webui_url}: {err}"
            if time.monotonic() >= deadline:
                raise StandaloneClusterError(
                    f"timed out after {self.timeout:.0f} s waiting for {what} ({last})\n{self.log_tail()}"
                )
            time.sleep(0.25)


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)  # start_new_session: the group id is the daemon's pid
