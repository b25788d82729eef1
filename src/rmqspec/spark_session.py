"""The Spark session of the campaign and of the Spark model check: loopback for local masters (this
machine's network is loopback only), a failed task re-run up to four times (units and search levels are
deterministic), no UI, quiet logs (``campaign/log4j2.properties``).

``start_spark`` raises ``SparkStartError`` with one line naming the master; each caller turns it into its
own command's error. ``own_spark_session`` is the one stop protocol of a run that starts its own session: SIGINT
and SIGTERM stop Spark and its JVM quietly, and the caller's own interruption error is raised (exit 130 or 143).
"""

from __future__ import annotations

import logging
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

LOG4J = Path(__file__).parent / "campaign" / "log4j2.properties"


class SparkStartError(RuntimeError):
    """Spark could not start; the message is one line naming the master."""


def start_spark(master: str, app: str, *, quick_start: bool = False) -> Any:
    """A SparkSession on ``master`` named ``app``. ``quick_start`` (tests) trades JIT quality for a JVM that
    starts seconds sooner: C1 only, serial GC."""
    try:
        from pyspark.sql import SparkSession
    except ImportError as err:  # pragma: no cover - pyspark is a dependency
        raise SparkStartError(f"pyspark is not installed: {err}") from None
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Local mode retries a failed task only when told how often: local[N] -> local[N,4].
    local = re.fullmatch(r"local(?:\[(\d+|\*)\])?", master)
    if local:
        master = f"local[{local.group(1) or 1},4]"
    builder = SparkSession.builder.master(master).appName(app)
    if master.startswith("local") or "127.0.0.1" in master:
        # Everything is on this machine: keep Spark on loopback. On a real cluster the driver's address
        # comes from spark-submit or spark-defaults, so the executors can reach it.
        builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
    opts = [f"-Dlog4j2.configurationFile=file:{LOG4J}"] if LOG4J.exists() else []
    if quick_start:
        opts += ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]
    builder = (
        builder.config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.task.maxFailures", "4")
        .config("spark.sql.shuffle.partitions", "4")
    )
    if opts:
        builder = builder.config("spark.driver.extraJavaOptions", " ".join(opts))
        builder = builder.config("spark.executor.extraJavaOptions", " ".join(opts))
    try:
        spark = builder.getOrCreate()
    except Exception as err:
        raise SparkStartError(f"cannot start Spark with master {master!r}: {str(err).splitlines()[0]}") from None
    spark.sparkContext.setLogLevel("ERROR")
    return spark


class _Signalled(KeyboardInterrupt):
    """Raised by the SIGINT/SIGTERM handler of a run that owns its Spark session; a KeyboardInterrupt, so that
    py4j, interrupted in the middle of a call, closes that connection instead of leaving it half read."""


class _SignalsInterrupt:
    """While a run that owns its Spark session goes on, SIGINT and SIGTERM raise ``_Signalled`` in the main thread
    (the first one only, and only while ``raising``: not while the run stops Spark and its JVM) and silence logging:
    py4j logs the interrupted call's traceback through the root logger. Outside the main thread (where
    ``signal.signal`` is refused) it does nothing."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.signum: int | None = None
        self.raising = True
        self.previous: dict[signal.Signals, Any] | None = None
        self.logging_disabled = logging.root.manager.disable
        self.install()

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        previous = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
        if self.previous is None:
            self.previous = previous

    def uninstall(self) -> None:
        if self.previous is not None:
            for s, handler in self.previous.items():
                signal.signal(s, handler)
            self.previous = None
        logging.disable(self.logging_disabled)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum is not None:
            return
        self.signum = signum
        logging.disable(logging.CRITICAL)
        if self.raising:
            raise _Signalled(signum)


def _stop_spark(spark: Any, stop_jvm: bool) -> None:
    """Stop the SparkSession; with ``stop_jvm`` (an interrupt or an error) quietly, within a bound, and
    then its JVM too. After a clean run the JVM stays for the next session in this process, and
    exits with it (it reads its stdin until the driver's end closes)."""
    if not stop_jvm:
        if spark is not None:
            spark.stop()
        return
    if spark is not None:
        with suppress(Exception):
            spark.sparkContext.setLogLevel("OFF")  # the executors' errors about the cancelled tasks
        with suppress(Exception):
            # pyspark's accumulator server (a socketserver thread in this process) prints the traceback of a
            # task's update that the stop cuts short (EOFError); the interrupt has its one line already
            server = spark.sparkContext._accumulatorServer
            server.handle_error = lambda request, client_address: None

        def stop() -> None:
            with suppress(Exception):
                spark.stop()

        stopper = threading.Thread(target=stop, daemon=True)
        stopper.start()
        stopper.join(JVM_STOP_SECONDS)
    _stop_jvm()


JVM_STOP_SECONDS = 15.0  # how long an interrupted run waits for spark.stop(), then for its JVM to exit


def _stop_jvm() -> None:
    """End the py4j gateway's JVM (``SparkContext._gateway.proc``, the JVM that spark-submit exec'd
    into): close its stdin, on which it exits, then kill it if it is still there. A JVM whose launch was
    interrupted before pyspark kept its handle is found among this process's children."""
    try:
        from pyspark import SparkContext
    except ImportError:  # pragma: no cover - pyspark is a dependency
        return
    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    if gateway is not None:
        with suppress(Exception):
            gateway.close()
        SparkContext._gateway = None  # a later session in this process launches a new JVM
        SparkContext._jvm = None
    pids = [proc.pid] if proc is not None else _spark_children()
    if proc is not None:
        with suppress(Exception):
            proc.stdin.close()
    deadline = time.monotonic() + JVM_STOP_SECONDS
    for pid in pids:
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if _alive(pid):
            with suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    if proc is not None:
        with suppress(Exception):
            proc.wait(5)  # reap it


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)  # no /proc: ask the kernel
        except OSError:
            return False
        return True


def _spark_children() -> list[int]:
    """This process's children that are Spark's launcher or JVM (``pyspark-shell`` on their command line)."""
    me, found = os.getpid(), []
    with suppress(OSError):
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            with suppress(OSError, IndexError, ValueError):
                with open(f"/proc/{entry}/stat", "rb") as f:
                    ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if ppid == me and b"pyspark-shell" in f.read():
                        found.append(int(entry))
    return found


@contextmanager
def own_spark_session(start: Callable[[], Any], interrupted: Callable[[int], BaseException]) -> Iterator[Any]:
    """The one stop protocol of a run that starts its own Spark session (a campaign, ``check --spark``): the
    session ``start()`` returns, with SIGINT and SIGTERM handled from before the JVM starts. A signal raises
    ``_Signalled`` in the main thread once; leaving the block stops Spark (and, after a signal or an error, its
    JVM, within ``JVM_STOP_SECONDS``) while later signals are only recorded, then raises ``interrupted(signum)``
    in place of whatever the signal cut short. An error with no signal propagates as it is."""
    signals = _SignalsInterrupt()  # installed from here: a signal while the JVM starts is one too
    spark: Any = None
    completed = False
    try:
        try:
            spark = start()
            signals.install()  # again: the SparkContext put its own SIGINT handler, which calls into the JVM
            yield spark
            completed = True
        finally:
            signals.raising = False  # from here a signal is only recorded: it must not cut the stopping short
            try:
                _stop_spark(spark, stop_jvm=not completed or signals.signum is not None)
            finally:
                signals.uninstall()
    except BaseException:
        if signals.signum is None:
            raise
    if signals.signum is not None:  # a signal, even one that came while Spark was stopping after the work
        raise interrupted(signals.signum) from None
