"""The Spark session of the campaign and of the Spark model check: loopback for local masters (this
machine's network is loopback only), a failed task re-run up to four times (units and search levels are
deterministic), no UI, quiet logs (``campaign/log4j2.properties``).

``start_spark`` raises ``SparkStartError`` with one line naming the master; each caller turns it into its
own command's error.
"""

from __future__ import annotations

import os
import re
import sys
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
