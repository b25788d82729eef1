"""``check-history --spark``: the history checker on PySpark, for histories too large for one process.

The work is the local checker's, distributed: every line (JSON Lines, read with ``textFile`` and
numbered with ``zipWithIndex``) or row (Parquet, numbered by its ``seq`` column) is validated by
the same ``validate_event``; the group's join/leave/view records, which are few, are collected to
build the membership ``Timeline`` on the driver, which is broadcast; the per-queue records are
grouped with ``groupByKey`` on (topic, queue), sorted by line, and analysed by the same
``analyze_queue``; the partial reports are assembled by the same ``assemble_report``, which also merges
the per-queue fates, fault harm and redelivery causes. So the report is the local path's, field for
field (tests/test_history.py checks it on a small history).
RDDs are used rather than ``mapInPandas`` so that pandas is not needed.

A Parquet history is one row per JSON Lines line: a ``seq`` column with the line number (the
header is the row with ``seq`` 1) and one nullable column per field (``write_parquet``
writes one from a JSON Lines file). Errors name the ``seq`` of the bad row.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from rmqspec.properties.history import (
    BLANK,
    OWN,
    HistoryError,
    _show,
    analyze_queue,
    assemble_report,
    build_timeline,
    parse_header,
    parse_text,
    validate_event,
)


def _session(master: str, quick_start: bool = False) -> Any:
    """A Spark session like the campaign's. ``quick_start`` (tests) trades JIT quality for a JVM that
    starts seconds sooner: C1 only, serial GC."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    log4j = Path(__file__).parent / "campaign" / "log4j2.properties"
    builder = (
        SparkSession.builder.master(master)
        .appName("rmqspec-check-history")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "4")
    )
    opts = [f"-Dlog4j2.configurationFile=file:{log4j}"] if log4j.exists() else []
    if quick_start:
        opts += ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]
    if opts:
        builder = builder.config("spark.driver.extraJavaOptions", " ".join(opts))
        builder = builder.config("spark.executor.extraJavaOptions", " ".join(opts))
    try:
        spark = builder.getOrCreate()
    except Exception as err:
        raise HistoryError(
            None, None, f"cannot start Spark with master {master!r}: {str(err).splitlines()[0]}"
        ) from None
    spark.sparkContext.setLogLevel("ERROR")
    return spark


# --- per-line work (runs on the executors) --------------------------------------------------------
def _check_text(item: tuple[int, str]) -> list[tuple[Any, ...]]:
    line, text = item
    try:
        obj = parse_text(text, line)
        if obj is BLANK:
            return [("H", line, None, True)] if line == 1 else []
        if line == 1:
            return [("H", line, obj, False)]
        return [("V", line, *validate_event(obj, line))]
    except HistoryError as err:
        return [("E", line, err.field, err.message)]


def _check_row(item: tuple[int, dict[str, Any]]) -> list[tuple[Any, ...]]:
    seq, obj = item
    if seq == 1:
        return [("H", seq, obj, False)]
    try:
        return [("V", seq, *validate_event(obj, seq))]
    except HistoryError as err:
        return [("E", seq, err.field, err.message)]


def _records(v: tuple[Any, ...]) -> list[tuple[Any, Any]]:
    _, _, _, key, rec, fkey, frec = v
    out = [(key, rec)]
    if fkey is not None:
        out.append((fkey, frec))
    return out


def _summarize(index: int, it: Any) -> list[tuple[Any, ...]]:
    """One partition (in line order): its header item, first error, first and last (line, time),
    first time going back, event count, membership records and owned topics."""
    header = error = first = last = bad = None
    n = 0
    membership = []
    owned: set[str] = set()
    for item in it:
        tag = item[0]
        if tag == "V":
            line, t, key, rec = item[1], item[2], item[3], item[4]
            n += 1
            if first is None:
                first = (line, t)
            elif bad is None and t < last[1]:  # type: ignore[index]
                bad = (line, t, last[1])  # type: ignore[index]
            last = (line, t)
            if key is None:
                membership.append(rec)
            elif rec[2] == OWN:
                owned.add(key[0])
        elif tag == "E":
            if error is None or item[1] < error[1]:
                error = item
        else:
            header = item
    return [(index, header, error, first, last, bad, n, membership, owned)]


def _analyze(item: tuple[tuple[str, int], Any], timeline: Any) -> tuple[tuple[str, int], dict[str, Any]]:
    key, recs = item
    records = sorted(recs, key=lambda r: (r[0], r[2]))
    return key, analyze_queue(key[0], key[1], records, timeline)


def _is_parquet(path: Path) -> bool:
    if path.suffix == ".parquet":
        return True
    return path.is_dir() and any(p.suffix == ".parquet" for p in path.iterdir())


def check_history_spark(path: str | Path, master: str = "local[*]", spark: Any = None) -> dict[str, Any]:
    """Check a JSON Lines or Parquet history with Spark. Raises HistoryError or OSError.

    Three Spark jobs: numbering the lines (Parquet: sorting by seq), one pass that validates every
    line and summarizes each partition (errors, time order, membership), and the per-queue analysis.
    """
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(2, "No such file or directory", str(p))
    spark = spark if spark is not None else _session(master)
    sc = spark.sparkContext
    if _is_parquet(p):
        unit = "seq"
        df = spark.read.parquet(str(p))
        if "seq" not in df.columns:
            raise HistoryError(None, "seq", "a Parquet history needs a seq column (the line number)", unit)
        rows = df.rdd.map(lambda r: r.asDict(recursive=True)).map(lambda d: (d.pop("seq"), d)).sortByKey()
        checked = rows.flatMap(_check_row)
    else:
        unit = "line"
        # minPartitions=1: a small file is one partition, so zipWithIndex needs no extra job; a large one
        # is still split by block size.
        texts = sc.textFile(str(p), minPartitions=1).zipWithIndex().map(lambda x: (x[1] + 1, x[0]))
        checked = texts.flatMap(_check_text)
    checked = checked.cache()
    try:
        return _finish(sc, checked, unit)
    finally:
        checked.unpersist()


def _finish(sc: Any, checked: Any, unit: str) -> dict[str, Any]:
    parts = sorted(checked.mapPartitionsWithIndex(_summarize).collect(), key=lambda part: part[0])
    headers = [part[1] for part in parts if part[1] is not None]
    errors = [part[2] for part in parts if part[2] is not None]
    if not headers and any(e[1] == 1 for e in errors):  # line 1 is not JSON: say so, as the local path does
        _, line, fld, message = next(e for e in errors if e[1] == 1)
        raise HistoryError(line, fld, message, unit)
    if not headers:
        if not any(part[6] or part[2] for part in parts):
            what = "empty file: expected a header line" if unit == "line" else "empty history: expected a header row"
            raise HistoryError(None, None, what, unit)
        raise HistoryError(1, None, f"expected the header on {unit} 1", unit)
    _, _, header_obj, blank = headers[0]
    if blank:
        raise HistoryError(1, None, "expected the header on line 1, got a blank line", unit)
    try:
        header = parse_header(header_obj, 1)
    except HistoryError as err:
        err.unit = unit
        raise
    first_error = None
    if errors:
        _, line, fld, message = min(errors, key=lambda e: e[1])
        first_error = HistoryError(line, fld, message, unit)
    previous = None
    for _, _, _, first, last, bad, n, _, _ in parts:
        if not n:
            continue
        order_error = None
        if previous is not None and first[1] < previous[1]:
            order_error = (first[0], first[1], previous[1])
        elif bad is not None:
            order_error = bad
        if order_error is not None:
            if first_error is None or order_error[0] < first_error.line:
                line, t, before = order_error
                message = f"{_show(t)} is before the previous event's time {_show(before)}"
                first_error = HistoryError(line, "time", message, unit)
            break
        previous = last
    if first_error is not None:
        raise first_error
    membership = [rec for part in parts for rec in part[7]]
    owned_topics = {topic for part in parts for topic in part[8]}
    events = sum(part[6] for part in parts)
    last_time = previous[1] if previous is not None else None
    timeline = build_timeline(header, membership, events, last_time, owned_topics)
    shared = sc.broadcast(timeline)
    partials = (
        checked.filter(lambda v: v[0] == "V" and v[3] is not None)
        .flatMap(_records)
        .groupByKey()
        .map(lambda kv: _analyze(kv, shared.value))
        .collect()
    )
    shared.unpersist()
    return assemble_report(timeline, partials)


# --- Parquet -------------------------------------------------------------------------------------
def write_parquet(spark: Any, jsonl: str | Path, out: str | Path) -> int:
    """Write a JSON Lines history as a Parquet history (one row per line, ``seq`` = line number).

    Fields outside the schema (such as a header's ``generator``) are dropped. Returns the rows written.
    """
    from pyspark.sql.types import (
        ArrayType,
        BooleanType,
        DoubleType,
        LongType,
        StringType,
        StructField,
        StructType,
    )

    from rmqspec.jsonin import iter_lines

    rows = list(iter_lines(jsonl, str(jsonl)))  # (line number, value): the one JSON reader; InputError names the line
    integral = all(type(obj.get("time", 0)) is int for _, obj in rows)
    origin = StructType(
        [StructField("topic", StringType()), StructField("queue", LongType()), StructField("offset", LongType())]
    )
    fields = [
        ("seq", LongType()),
        ("format", StringType()),
        ("version", LongType()),
        ("mode", StringType()),
        ("consumption", StringType()),
        ("rocketmq", StringType()),
        ("group", StringType()),
        ("time", LongType() if integral else DoubleType()),
        ("type", StringType()),
        ("consumer", StringType()),
        ("topic", StringType()),
        ("queue", LongType()),
        ("offset", LongType()),
        ("result", StringType()),
        ("cause", StringType()),
        ("from", LongType()),
        ("to", LongType()),
        ("members", ArrayType(StringType())),
        ("owned", BooleanType()),
        ("origin", origin),
    ]
    schema = StructType([StructField(name, kind, True) for name, kind in fields])
    names = [name for name, _ in fields]
    data = []
    for seq, obj in rows:
        values = {**obj, "seq": seq}
        o = values.get("origin")
        if isinstance(o, dict):
            values["origin"] = (o.get("topic"), o.get("queue"), o.get("offset"))
        data.append(tuple(values.get(n) for n in names))
    spark.createDataFrame(data, schema).coalesce(1).write.mode("overwrite").parquet(str(out))
    return len(data)
