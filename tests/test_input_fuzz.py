"""Every command that reads a file answers malformed input with exit 2 and one line naming the file
(and the line or the field where there is one), never an internal error; and ``conform`` survives
hostile adapters: a malformed reply of either protocol version is a SUT failure (exit 5), a flooding
stderr is capped, an extra reply line is a SUT failure, a long reply is read in linear time.

The readers: traces (check-trace), histories (check-history), Config files (run), check configuration files
(check --config, campaign --config), coverage files (coverage --from), conform scripts (--replay), known
differences (conform --known, versions 1 and 2) and adapter replies. The malformed inputs are generated from
a valid input of each kind by a seeded generator, one class of damage at a time (see ``CLASSES``). How many
per reader and class: ``RMQSPEC_FUZZ_INPUTS`` if set, else the active Hypothesis profile's ``max_examples``
/ 20 (dev 3, ci 10, nightly 150). With ``RMQSPEC_FUZZ_TALLY=FILE`` the inputs tried and their exit codes,
per reader, are written to FILE as JSON at the end of the module.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import random
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from rmqspec.cli import EXIT_BAD_INPUT, EXIT_SUT_FAILED, EXIT_VIOLATION, main
from rmqspec.conform import sut as sut_module
from rmqspec.conform.reference_adapter import ReferenceAdapter, serve
from rmqspec.properties.serialize import config_to_json
from rmqspec.spec.config import Config
from rmqspec.spec_coverage import analyze, coverage_document

DATA = Path(__file__).parent / "data"
SERVE = f"{sys.executable} -m rmqspec.cli serve-reference"
PER_CLASS = int(os.environ.get("RMQSPEC_FUZZ_INPUTS", "0")) or max(3, settings().max_examples // 20)
INT_DIGITS = sys.get_int_max_str_digits()


# --- the valid files the damage is done to ------------------------------------------------------
def _lines(values: list[Any]) -> list[str]:
    return [json.dumps(v) for v in values]


TRACE = (DATA / "traces" / "conforming.jsonl").read_text(encoding="utf-8").splitlines()
HISTORY = _lines(
    [
        {
            "format": "rmqspec-history",
            "version": 1,
            "mode": "CLUSTERING",
            "consumption": "concurrent",
            "rocketmq": "4.9.8",
            "group": "G",
        },
        {"time": 1, "type": "produce", "topic": "T", "queue": 0, "offset": 0},
        {"time": 2, "type": "deliver", "consumer": "c0", "topic": "T", "queue": 0, "offset": 0},
        {"time": 3, "type": "commit", "consumer": "c0", "topic": "T", "queue": 0, "offset": 1},
    ]
)
SCRIPT = _lines(
    [
        {"format": "rmqspec-conform-script", "version": 1},
        {"op": "pq.new", "args": {"pq": "p"}},
        {"op": "pq.put", "args": {"pq": "p", "msgs": [{"queueOffset": 0, "bodySize": 1}]}},
        {"op": "pq.state", "args": {"pq": "p"}},
    ]
)
CONFIG = json.dumps(config_to_json(Config(consumers=2, queues=2)), indent=1).splitlines()  # one field a line
# A check configuration (check --config FILE, campaign --config FILE): one field a line, the Config's included.
CHECK_CONFIG = json.dumps(
    {
        "description": "fuzzed",
        "config": {"consumers": 1, "queues": 1, "messages_per_queue": 1, "client_crashes": 0},
        "bounds": {"max_channel": 1, "horizon_ms": 0, "max_states": 50},
    },
    indent=1,
).splitlines()
_COVERAGE_DOC = coverage_document(analyze({}), source="fuzzed", runs=3, measured=2, curve=[(1, 5), (2, 7)])
_COVERAGE_DOC["unreached"] = _COVERAGE_DOC["unreached"][:3]  # a few of each list keep the file small
_COVERAGE_DOC["excluded"] = _COVERAGE_DOC["excluded"][:3]
_COVERAGE_DOC["arcs"] = {"model.py": [1, 2, 3, 4]}
COVERAGE = json.dumps(_COVERAGE_DOC, indent=1).splitlines()
KNOWN = _lines(
    [
        {"format": "rmqspec-conform-known", "version": 1},
        {"op": "store.read", "difference": "result:offset", "note": "on purpose"},
        {"op": "pq.state", "difference": "*"},
    ]
)
KNOWN_V2 = _lines(
    [
        {"format": "rmqspec-conform-known", "version": 2},
        {"fingerprint": "store.read offset:changed", "reason": "on purpose"},
        {"op": "consumer.observe", "path": "tasks[pull *].due", "shape": "changed", "reason": "our pulls wait"},
        {"path": "table[*].offset", "sut": "-2|0", "reference": r"\d+", "reason": "a reset writes 0"},
    ]
)
DOCUMENTS = (CONFIG, CHECK_CONFIG, COVERAGE)  # whole JSON documents, not JSON Lines


def _is_document(lines: list[str]) -> bool:
    return any(lines is d for d in DOCUMENTS)


# JSON values of the wrong type for each Config annotation (bool is not an integer, null only where
# the annotation allows None). A field whose annotation is not listed is skipped.
WRONG: dict[str, list[Any]] = {
    "int": [True, False, "2", 2.5, None, [], {}],
    "bool": [1, 0, "true", None, [], {}],
    "str": [5, True, None, [], {"v": "T"}, 1.5],
    "str | None": [5, True, [], {"v": "T"}],
    "tuple[str, ...]": [[{"a": 1}], "A", [1], {}, 5, None, [True]],
    "tuple[str, ...] | None": [[{"a": 1}], "A", [1], {}, 5, [None]],
    "tuple[tuple[int, ...], ...] | None": [[["a"]], [1], "x", [[True]], [[1.5]], {}],
    "frozenset[str]": [[[1]], "x", [1], {}, 5, None],
}
CONFIG_FIELDS = [(f.name, str(f.type)) for f in dataclasses.fields(Config) if str(f.type) in WRONG]
HISTORY_HEADER_FIELDS = {"format": 1, "version": "1", "mode": 5, "consumption": [], "rocketmq": 4.9, "group": 7}
HISTORY_EVENT_FIELDS = {"time": "1", "type": 5, "topic": 5, "queue": "0", "offset": [0], "consumer": {}}


@dataclasses.dataclass
class Bad:
    """One malformed input: its bytes and what the error must name."""

    data: bytes
    line: int | None = None
    field: str | None = None


# --- the classes of damage: each takes the valid lines and a seeded rng -------------------------
def _pick(rng: random.Random, lines: list[str]) -> int:
    return rng.randrange(len(lines))


def _join(lines: list[str]) -> bytes:
    return ("\n".join(lines) + "\n").encode()


# An integer value: after ':', '[' or ',' (and a space), not part of a decimal or a string.
_INTEGER = re.compile(r"(?:(?<=[:\[,])|(?<=[:\[,] ))-?[0-9]+(?![0-9.eE])")


def huge_int(lines: list[str], rng: random.Random) -> Bad:
    """One integer value made longer than int() converts: Python's JSON parser raises ValueError."""
    i = rng.choice([k for k, line in enumerate(lines) if _INTEGER.search(line)])
    m = rng.choice(list(_INTEGER.finditer(lines[i])))
    digits = str(rng.randint(1, 9)) + "".join(
        rng.choice("0123456789") for _ in range(INT_DIGITS + rng.randint(0, 3000))
    )
    line = lines[i][: m.start()] + rng.choice(["", "-"]) + digits + lines[i][m.end() :]
    return Bad(_join([*lines[:i], line, *lines[i + 1 :]]), i + 1)


def deep_nesting(lines: list[str], rng: random.Random) -> Bad:
    """Arrays or objects nested deeper than any reader accepts; closed or not, up to 100,000 deep."""
    i = _pick(rng, lines)
    depth = rng.choice([101, 500, 999, 1001, 5000, 100_000]) + rng.randint(0, 50)
    opener, closer = rng.choice([("[", "]"), ('{"a":', "}")])
    value = opener * depth + (closer * depth if rng.random() < 0.5 and opener == "[" else "")
    at = lines[i].find(":")
    line = lines[i][: at + 1] + " " + value if at >= 0 else value
    return Bad(_join([*lines[:i], line, *lines[i + 1 :]]), i + 1)


INVALID_UTF8 = [b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\x80", b"\xe2\x82", b"\xc0\xaf"]


def non_utf8(lines: list[str], rng: random.Random) -> Bad:
    """Bytes that are not UTF-8 somewhere in one line (a Latin-1 file, a lone byte, an overlong form)."""
    i = _pick(rng, lines)
    raw = lines[i].encode()
    at = rng.randint(0, len(raw))
    data = [line.encode() for line in lines]
    data[i] = raw[:at] + rng.choice(INVALID_UTF8) + raw[at:]
    return Bad(b"\n".join(data) + b"\n", i + 1)


def truncated(lines: list[str], rng: random.Random) -> Bad:
    """The file ends inside a line (a writer killed mid-write)."""
    i = rng.randint(1, len(lines) - 2) if _is_document(lines) else _pick(rng, lines)  # not the braces
    line = lines[i].rstrip()
    cut = rng.randint(1, len(line) - 1)
    return Bad("\n".join([*lines[:i], line[:cut]]).encode(), i + 1)


def non_object(lines: list[str], rng: random.Random) -> Bad:
    """A line (or the whole config) that is JSON but not an object."""
    value = rng.choice(["[1, 2]", '"text"', "42", "null", "true", "[]", "-0.5"])
    if _is_document(lines):
        return Bad(value.encode())
    i = _pick(rng, lines)
    return Bad(_join([*lines[:i], value, *lines[i + 1 :]]), i + 1)


def not_json(lines: list[str], rng: random.Random) -> Bad:
    """A line that is not JSON at all."""
    i = _pick(rng, lines)
    junk = rng.choice(
        [
            "{not json",
            '{"a":}',
            "{'single': 1}",
            '{"a": 1,}',
            "x" + "".join(rng.choice("abcdefgh ,:{}[]") for _ in range(rng.randint(0, 40))),
            '{"a": "unterminated',
            '{"a": 1} {"b": 2}',
            '{"a": tru}',
        ]
    )
    if _is_document(lines) and i in (0, len(lines) - 1):
        i = 1  # keep the braces: the junk is inside the object
    return Bad(_join([*lines[:i], junk, *lines[i + 1 :]]), i + 1)


def empty(lines: list[str], rng: random.Random) -> Bad:
    """Nothing, or only whitespace."""
    return Bad(rng.choice([b"", b"\n", b"\n\n  \n", b"\t"]))


CLASSES: dict[str, Callable[[list[str], random.Random], Bad]] = {
    "huge_int": huge_int,
    "deep_nesting": deep_nesting,
    "non_utf8": non_utf8,
    "truncated": truncated,
    "non_object": non_object,
    "not_json": not_json,
    "empty": empty,
}


# --- wrong types: per command, every field the file has --------------------------------------------
def _config_with(name: str, value: Any) -> dict[str, Any]:
    return {**config_to_json(Config(consumers=2, queues=2)), name: value}


def wrong_types(command: str, rng: random.Random) -> list[Bad]:
    """Every field once with one wrong value, then PER_CLASS more drawn at random."""
    out: list[Bad] = []
    if command in ("run", "check-trace"):
        cases = [(name, rng.choice(WRONG[kind])) for name, kind in CONFIG_FIELDS]
        cases += [(name, rng.choice(WRONG[kind])) for name, kind in rng.choices(CONFIG_FIELDS, k=PER_CLASS)]
        for name, value in cases:
            config = _config_with(name, value)
            if command == "run":
                text = json.dumps(config, indent=1)
                out.append(Bad(text.encode(), None, f"{name}: got"))
            else:
                header = {**json.loads(TRACE[0]), "config": config}
                out.append(Bad(_join([json.dumps(header), *TRACE[1:]]), 1, f"header.config.{name}"))
    elif command == "check-history":
        fields = [(0, k, v) for k, v in HISTORY_HEADER_FIELDS.items()]
        fields += [(i, k, v) for i in (1, 2, 3) for k, v in HISTORY_EVENT_FIELDS.items() if k in json.loads(HISTORY[i])]
        for i, name, value in fields + rng.choices(fields, k=PER_CLASS):
            lines = list(HISTORY)
            lines[i] = json.dumps({**json.loads(lines[i]), name: value})
            out.append(Bad(_join(lines), i + 1, name))
    elif command in ("check", "campaign-config"):
        doc = json.loads("\n".join(CHECK_CONFIG))
        bounds = [(k, v) for k in BOUND_FIELDS for v in WRONG_BOUNDS[k]]
        for name, value in bounds + rng.choices(bounds, k=PER_CLASS):
            text = json.dumps({**doc, "bounds": {**doc["bounds"], name: value}}, indent=1)
            out.append(Bad(text.encode(), None, f"bounds.{name}: got"))
        for raw in ("NaN", "Infinity", "-Infinity", "1e400"):  # not JSON, but Python's reader takes them
            text = json.dumps({**doc, "bounds": {"max_channel": 1, "horizon_ms": "RAW"}}).replace('"RAW"', raw)
            out.append(Bad(text.encode(), None, "bounds.horizon_ms: got"))
        cases = [(name, rng.choice(WRONG[kind])) for name, kind in rng.choices(CONFIG_FIELDS, k=PER_CLASS)]
        for name, value in cases:
            out.append(Bad(json.dumps({**doc, "config": {name: value}}).encode(), None, f"{name}: got"))
        out.append(Bad(json.dumps({**doc, "config": {"consumers": 0}}).encode(), None, "consumers: got 0"))
        out.append(Bad(json.dumps({"bounds": doc["bounds"]}).encode(), None, '"config"'))
        out.append(Bad(json.dumps({**doc, "config": [1]}).encode(), None, '"config"'))
        out.append(Bad(json.dumps({**doc, "default_run": "no"}).encode(), None, "default_run"))
        out.append(Bad(json.dumps({**doc, "bound": {}}).encode(), None, "'bound'"))
    elif command == "coverage":
        fields = [(k, v) for k in (*COVERAGE_FIELDS, "arcs") for v in (None, True, "x", 1.5, [[]], {"a": []})]
        for name, value in fields + rng.choices(fields, k=PER_CLASS):
            if value == {"a": []} and name in ("files", "excluded_by_category", "totals", "arcs"):
                value = {"a": "x"} if name != "arcs" else {"a": [1]}  # wrong records, not an empty one
            if value == "x" and name in ("digest", "source"):
                value = ["x"]
            text = json.dumps({**_COVERAGE_DOC, name: value}, indent=1)
            out.append(Bad(text.encode(), None, f"'{name}"))
        for name in COVERAGE_FIELDS:
            out.append(
                Bad(json.dumps({k: v for k, v in _COVERAGE_DOC.items() if k != name}).encode(), None, f"'{name}")
            )
    elif command == "conform-known":
        cases = [("op", [1]), ("op", {"a": 1}), ("op", 5), ("op", None), ("op", "no.such.op"), ("difference", 5)]
        cases += [("difference", ""), ("difference", ["*"]), ("note", 5), ("note", {}), ("extra", 1)]
        for name, value in cases + rng.choices(cases, k=PER_CLASS):
            i = rng.randint(1, len(KNOWN) - 1)
            lines = list(KNOWN)
            lines[i] = json.dumps({**json.loads(lines[i]), name: value})
            out.append(Bad(_join(lines), i + 1, name))
    elif command == "conform-known-v2":
        cases = [("reason", None), ("reason", ""), ("reason", 5), ("reason", ["why"]), ("op", 5), ("op", "no.op")]
        cases += [("fingerprint", 5), ("fingerprint", ""), ("fingerprint", "store.read"), ("path", "a[b")]
        cases += [("path", 5), ("shape", "moved"), ("shape", 1), ("sut", "("), ("reference", [1]), ("note", "v1")]
        for name, value in cases + rng.choices(cases, k=PER_CLASS):
            i = rng.randint(1, len(KNOWN_V2) - 1)
            lines = list(KNOWN_V2)
            entry = {**json.loads(lines[i]), name: value}
            if value is None:
                del entry[name]
            lines[i] = json.dumps(entry)
            out.append(Bad(_join(lines), i + 1, name))
    else:  # conform --replay: the request's op, its args and its handle names
        cases = [("op", 5), ("op", None), ("op", "no.such.op"), ("args", [1]), ("args", "x"), ("pq", 5), ("pq", None)]
        for name, value in cases + rng.choices(cases, k=PER_CLASS):
            i = rng.randint(1, len(SCRIPT) - 1)
            request = json.loads(SCRIPT[i])
            if name == "pq":
                request["args"]["pq"] = value
            else:
                request[name] = value
            lines = list(SCRIPT)
            lines[i] = json.dumps(request)
            out.append(Bad(_join(lines), i + 1, name))
    return out


# Values a bound must refuse (exhaustive.BOUND_RANGES): of the wrong type, out of range, not finite.
BOUND_FIELDS = ("horizon_ms", "max_channel", "max_states", "max_depth", "max_seconds", "clamp_ms")
WRONG_BOUNDS: dict[str, list[Any]] = {
    "horizon_ms": [-1, 1.5, True, "25000", [], 2**63],
    "max_channel": [0, -1, 1.0, False, "1", {}],
    "max_states": [0, -5, 2.5, True, "50"],
    "max_depth": [-1, 0.5, True, [3]],
    "max_seconds": [-0.5, 1e300, True, "10", [1]],
    "clamp_ms": [None, 0, 1000, 150_000, 10**7, 6e5, True],
}
COVERAGE_FIELDS = ("digest", "source", "runs", "measured_runs", "totals", "files", "excluded_by_category")
COVERAGE_FIELDS += ("unreached", "excluded_but_reached", "stale_exclusions")

COMMANDS: dict[str, list[str]] = {
    "check-trace": TRACE,
    "check-history": HISTORY,
    "run": CONFIG,
    "conform": SCRIPT,
    "check": CHECK_CONFIG,
    "campaign-config": CHECK_CONFIG,
    "coverage": COVERAGE,
    "conform-known": KNOWN,
    "conform-known-v2": KNOWN_V2,
}
SUFFIX = {"run": ".json", "check": ".json", "campaign-config": ".json", "coverage": ".json"}


def _argv(command: str, path: Path, tmp_path: Path) -> list[str]:
    if command == "run":
        return ["run", "--config", str(path), "--out", str(tmp_path / "out")]
    if command == "check":
        return ["check", "--config", str(path), "--quiet", "--no-liveness", "--out", str(tmp_path / "out")]
    if command == "campaign-config":  # refused before Spark starts
        return ["campaign", "--config", str(path), "--runs", "1", "--out", str(tmp_path / "out")]
    if command == "coverage":
        return ["coverage", "--from", str(path)]
    if command.startswith("conform-known"):  # the file is refused before the adapter is started
        return ["conform", "--sut", SERVE, "--known", str(path), "--out", str(tmp_path / "out")]
    if command == "conform":  # the script is refused before the adapter is started
        return ["conform", "--sut", SERVE, "--replay", str(path), "--out", str(tmp_path / "out")]
    return [command, str(path)]


TALLY: dict[str, Counter[int]] = {}  # reader -> exit code -> inputs (RMQSPEC_FUZZ_TALLY)


@pytest.fixture(scope="module", autouse=True)
def _write_tally() -> Iterator[None]:
    yield
    if os.environ.get("RMQSPEC_FUZZ_TALLY"):
        tally = {reader: {str(code): n for code, n in sorted(c.items())} for reader, c in sorted(TALLY.items())}
        Path(os.environ["RMQSPEC_FUZZ_TALLY"]).write_text(json.dumps(tally, indent=1) + "\n", encoding="utf-8")


def _reader(argv: list[str]) -> str:
    for flag in ("--known", "--replay", "--from", "--config"):
        if flag in argv:
            return f"{argv[0]} {flag}"
    return argv[0]


def assert_bad_input(capsys: pytest.CaptureFixture[str], argv: list[str], path: Path, bad: Bad) -> None:
    code = main(argv)
    TALLY.setdefault(_reader(argv), Counter())[code] += 1
    err = capsys.readouterr().err
    context = f"{argv[0]} on {bad.data[:300]!r}: {err[:1000]}"
    assert code == EXIT_BAD_INPUT, context
    assert "Traceback" not in err and "internal error" not in err, context
    assert len(err.strip().splitlines()) == 1, context
    assert str(path) in err, context
    if bad.line is not None:
        assert re.search(rf"\bline {bad.line}\b", err), f"expected line {bad.line}: {context}"
    if bad.field is not None:
        assert bad.field in err, f"expected field {bad.field}: {context}"


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("damage", list(CLASSES))
def test_malformed_input_is_bad_input_naming_the_file_and_line(
    command: str, damage: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = random.Random(f"{command}/{damage}")
    path = tmp_path / ("input" + SUFFIX.get(command, ".jsonl"))
    for _ in range(PER_CLASS):
        bad = CLASSES[damage](COMMANDS[command], rng)
        path.write_bytes(bad.data)
        assert_bad_input(capsys, _argv(command, path, tmp_path), path, bad)


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_field_of_the_wrong_type_is_bad_input_naming_the_field(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / ("input" + SUFFIX.get(command, ".jsonl"))
    for bad in wrong_types(command, random.Random(f"{command}/wrong_type")):
        path.write_bytes(bad.data)
        assert_bad_input(capsys, _argv(command, path, tmp_path), path, bad)


def test_the_config_fields_with_a_checked_type_are_all_the_fields() -> None:
    """A field whose annotation has no wrong values above would go unfuzzed: add its annotation."""
    assert len(CONFIG_FIELDS) == len(dataclasses.fields(Config))


def test_a_config_with_a_huge_integer_is_bad_input_not_an_internal_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"consumers": 2,\n "queues": ' + "7" * (INT_DIGITS + 1) + "}\n")
    assert_bad_input(capsys, _argv("run", path, tmp_path), path, Bad(b"", 2))


@pytest.mark.parametrize(
    ("config", "field"),
    [({"topic": {"v": "T"}}, "topic"), ({"topic": 5}, "topic"), ({"tags": [{"a": 1}]}, "tags")],
)
def test_a_config_field_of_the_wrong_type_is_named_with_what_it_accepts(
    config: dict[str, Any], field: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert main(_argv("run", path, tmp_path)) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert f"{field}: got" in err and "accepted: " in err and "not iterable" not in err


# --- conform --replay: requests the reference rejects ---------------------------------------------
@pytest.mark.parametrize(
    "msgs",
    [
        [{"queueOffset": "x", "bodySize": 1}],  # ValueError inside the reference
        [{"queueOffset": 1e400, "bodySize": 1}],  # OverflowError: infinity as an offset
        [5],  # AttributeError: a message that is not an object
    ],
    ids=["not-a-number", "infinite-offset", "not-an-object"],
)
def test_a_replayed_request_the_reference_rejects_is_bad_input_naming_the_script_line(
    msgs: list[Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "script.jsonl"
    lines = [SCRIPT[0], SCRIPT[1], "", json.dumps({"op": "pq.put", "args": {"pq": "p", "msgs": msgs}})]
    path.write_text("\n".join(lines) + "\n")
    assert main(_argv("conform", path, tmp_path)) == EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert f"{path}: line 4: the reference rejects this request" in err and "generated" not in err


@pytest.mark.parametrize(
    "args",
    [
        {"pq": "p", "msgs": [{"queueOffset": 1e400, "bodySize": 1}]},
        {"pq": "p", "msgs": [{"queueOffset": 0, "bodySize": 10**30}]},
        {"pq": "p", "msgs": [5]},
        {"pq": "p", "msgs": ["text"]},
    ],
    ids=["infinite-offset", "body-size-beyond-an-index", "int-message", "string-message"],
)
def test_reference_adapter_answers_overflow_and_wrong_types_with_a_protocol_error(args: dict[str, Any]) -> None:
    adapter = ReferenceAdapter()
    try:
        assert adapter.handle("pq.new", {"pq": "p"})["ok"]
        reply = adapter.handle("pq.put", args)
    finally:
        adapter.close()
    assert reply["ok"] is False and reply["error"]["type"] == "ProtocolError"


def test_serve_reference_answers_unparseable_lines_with_a_protocol_error() -> None:
    lines = [
        "[" * 100_000,
        '{"id": 1, "op": "pq.new", "args": {"pq": ' + "9" * (INT_DIGITS + 1) + "}}",
        json.dumps({"id": 2, "op": "pq.new", "args": {"pq": "p"}}),
    ]
    out = io.StringIO()
    serve(lines, out)
    replies = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [r["ok"] for r in replies] == [False, False, True]
    assert "nested more than" in replies[0]["error"]["message"]
    assert "digits" in replies[1]["error"]["message"]


# --- conform against hostile adapters -----------------------------------------------------------
ADAPTER_PRELUDE = """
import json, os, sys
from rmqspec.conform.reference_adapter import ReferenceAdapter
adapter = ReferenceAdapter()
def reply_to(line):
    request = json.loads(line)
    reply = adapter.handle(request["op"], request.get("args", {}))
    reply["id"] = request["id"]
    return request, reply
"""


def _adapter(tmp_path: Path, body: str) -> str:
    path = tmp_path / "adapter.py"
    path.write_text(ADAPTER_PRELUDE + body)
    return f"{sys.executable} {path}"


def test_a_flooding_adapter_stderr_log_keeps_head_and_tail_and_counts_what_was_dropped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flood = 5_000_000
    sut = _adapter(
        tmp_path,
        f"""
sys.stderr.write("HEAD" + "x" * {flood} + "TAIL-END")
sys.stderr.flush()
for line in sys.stdin:
    request, reply = reply_to(line)
    print(json.dumps(reply), flush=True)
""",
    )
    out = tmp_path / "out"
    assert main(["conform", "--sut", sut, "--examples", "2", "--out", str(out)]) == 0
    log = (out / "sut-stderr.log").read_bytes()
    keep = sut_module.STDERR_KEEP
    dropped = 4 + flood + 8 - 2 * keep
    assert len(log) < 2 * keep + 200
    assert log.startswith(b"HEADxxx") and log.endswith(b"xxxTAIL-END")
    assert f"{dropped} bytes of the SUT's stderr dropped here".encode() in log
    capsys.readouterr()


def test_an_adapter_writing_an_extra_reply_line_is_a_sut_failure_naming_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # After its first reset, the adapter also answers the next request before it is asked: taken
    # for that request's reply, this once made Hypothesis report a flaky test (an internal error). The extra
    # line goes out in one write with the reply (a pipe write under PIPE_BUF is atomic), so it is always there
    # when the reply is read: written separately, it sometimes came after the next request was sent, and
    # was taken for that request's reply (the id matches), a divergence instead of a SUT failure.
    sut = _adapter(
        tmp_path,
        """
resets = 0
for line in sys.stdin:
    request, reply = reply_to(line)
    out = json.dumps(reply) + "\\n"
    if request["op"] == "reset":
        resets += 1
        if resets == 1:  # in the same write as the reply: both are there when the reply is read
            out += json.dumps({**reply, "id": request["id"] + 1, "extra": "EXTRA-LINE"}) + "\\n"
    os.write(1, out.encode())
""",
    )
    code = main(["conform", "--sut", sut, "--examples", "5", "--shrink-seconds", "5", "--out", str(tmp_path / "o")])
    err = capsys.readouterr()
    assert code == EXIT_SUT_FAILED, err
    assert "no request asked for" in err.out and "EXTRA-LINE" in err.out


def test_a_12_mib_reply_is_read_within_a_2_second_timeout_even_in_4_kib_pieces(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every read returns at most 4 KiB, as when the adapter writes slowly: 3,072 pieces. Rescanning
    # and copying the whole buffer per piece took about 8 s here; searching only the new piece, 1 s.
    real_read = os.read
    monkeypatch.setattr(sut_module.os, "read", lambda fd, n: real_read(fd, min(n, 4096)))
    size = 12 * 1024 * 1024
    sut = _adapter(
        tmp_path,
        f"""
for line in sys.stdin:
    request, reply = reply_to(line)
    if request["op"] not in ("hello", "reset"):
        reply = {{"id": request["id"], "ok": True, "result": {{"padding": "x" * {size}}}, "sent": []}}
    data = (json.dumps(reply) + "\\n").encode()
    for i in range(0, len(data), 8192):  # as a JVM's 8 KiB buffered stream writes
        os.write(1, data[i : i + 8192])
""",
    )
    argv = ["conform", "--sut", sut, "--examples", "1", "--timeout", "2", "--shrink-seconds", "0"]
    code = main([*argv, "--out", str(tmp_path / "o")])
    out = capsys.readouterr().out
    assert code == EXIT_VIOLATION, out[:2000]  # the padded reply diverges: it was read, not timed out
    assert "DIVERGENCE" in out and "hung" not in out


# --- adapter replies: a malformed reply of either protocol version is a SUT failure ------------------------
FUZZ_ADAPTER = """
import json, sys
from rmqspec.conform.reference_adapter import ReferenceAdapter
adapter = ReferenceAdapter()
damaged, at, protocol = open(sys.argv[1], "rb").read(), int(sys.argv[2]), int(sys.argv[3])
for n, line in enumerate(sys.stdin):
    request = json.loads(line)
    args = request.get("args", {})
    if request["op"] == "hello":
        args = {**args, "protocol": protocol}
    reply = adapter.handle(request["op"], args)
    reply["id"] = request["id"]
    if n == at:
        sys.stdout.buffer.write(damaged)
        sys.stdout.flush()
        if not damaged.endswith(b"\\n"):
            sys.exit(0)  # a reply cut short: the adapter dies mid-line
    else:
        print(json.dumps(reply), flush=True)
"""
# The replies damaged: to hello (n 0), to reset (1) and to an operation (2 and on).
REPLY = [json.dumps({"id": 3, "ok": True, "result": {"offset": 7, "found": True}, "sent": [{"code": "X"}]})]


@pytest.mark.parametrize("protocol", [1, 2])
@pytest.mark.parametrize("damage", list(CLASSES))
def test_a_malformed_adapter_reply_is_a_sut_failure_never_an_internal_error(
    damage: str, protocol: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = random.Random(f"reply/{damage}/{protocol}")
    adapter = tmp_path / "adapter.py"
    adapter.write_text(FUZZ_ADAPTER)
    damaged = tmp_path / "reply"
    for _ in range(PER_CLASS):
        bad = CLASSES[damage](REPLY, rng)
        data = bad.data if damage == "truncated" else bad.data.rstrip(b"\n") + b"\n"
        if damage == "empty":
            data = b" \n"  # a blank reply line: an empty one is skipped by no reader, it is not JSON
        damaged.write_bytes(data)
        at = rng.choice([0, 1, 2, 3, 5])
        sut = f"{sys.executable} {adapter} {damaged} {at} {protocol}"
        argv = ["conform", "--sut", sut, "--examples", "1", "--shrink-seconds", "0", "--out", str(tmp_path / "o")]
        code = main(argv)
        TALLY.setdefault("conform (adapter replies)", Counter())[code] += 1
        captured = capsys.readouterr()
        context = f"reply {data[:200]!r} to request {at}: {captured.err[-2000:]} {captured.out[-2000:]}"
        # a reply the protocol does not accept is the SUT's failure; a well-formed one that differs, a divergence
        assert code in (EXIT_SUT_FAILED, EXIT_VIOLATION), context
        assert code == EXIT_SUT_FAILED or damage == "non_object", context
        assert "Traceback" not in captured.err + captured.out and "internal error" not in captured.err, context


def test_an_adapter_reply_nested_50000_deep_is_a_sut_failure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    adapter = tmp_path / "adapter.py"
    adapter.write_text(FUZZ_ADAPTER)
    (tmp_path / "reply").write_bytes(
        b'{"id": 2, "ok": true, "result": {"a": ' + b"[" * 50_000 + b"]" * 50_000 + b"}}\n"
    )
    sut = f"{sys.executable} {adapter} {tmp_path / 'reply'} 2 2"
    code = main(["conform", "--sut", sut, "--examples", "1", "--shrink-seconds", "0", "--out", str(tmp_path / "o")])
    out = capsys.readouterr().out
    assert code == EXIT_SUT_FAILED, out[-2000:]
    assert "nested more than" in out


def test_a_grandchild_of_the_adapter_that_left_its_process_group_does_not_outlive_conform(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pid_file = tmp_path / "grandchild.pid"
    sut = _adapter(
        tmp_path,
        f"""
import subprocess, time
code = "import os, sys, time; os.setsid(); open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(600)"
subprocess.Popen([sys.executable, "-c", code, {str(pid_file)!r}])
while not os.path.exists({str(pid_file)!r}) or not open({str(pid_file)!r}).read():
    time.sleep(0.05)  # the grandchild has left the process group once it wrote its pid
for line in sys.stdin:
    request, reply = reply_to(line)
    print(json.dumps(reply), flush=True)
""",
    )
    assert main(["conform", "--sut", sut, "--examples", "1", "--out", str(tmp_path / "o")]) == 0
    capsys.readouterr()
    grandchild = int(pid_file.read_text())
    # conform's close() killed it with SIGKILL before returning; reap-or-gone is all that can be left
    stat = Path(f"/proc/{grandchild}/stat")
    assert not stat.exists() or stat.read_bytes().rsplit(b")", 1)[1].split()[0] == b"Z"


def _exit_code(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exit:  # argparse refuses an option's value with exit code 2
        return int(exit.code or 0)


@pytest.mark.parametrize(
    "flags",
    [
        ["--max-seconds", "nan"],
        ["--max-seconds", "inf"],
        ["--max-seconds", "-1"],
        ["--max-channel", "0"],
        ["--horizon", "-1"],
        ["--max-states", "0"],
        ["--max-depth", "-2"],
    ],
)
def test_a_bound_given_as_an_option_is_checked_before_the_search(
    flags: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _exit_code(["check", "--config", "one-message", *flags, "--quiet", "--out", str(tmp_path)])
    captured = capsys.readouterr()
    assert code == EXIT_BAD_INPUT, captured.err
    assert flags[0] in captured.err and flags[1] in captured.err and captured.out == ""


@pytest.mark.parametrize(
    "argv",
    [
        ["bench-counterexamples", "--seconds", "nan"],
        ["campaign", "--duration", "nan"],
        ["campaign", "--duration", "inf"],
        ["campaign", "--duration", "0"],
        ["coverage", "--duration", "-5"],
        ["conform", "--sut", "x", "--timeout", "nan"],
        ["conform", "--sut", "x", "--shrink-seconds", "inf"],
        ["bench-campaign", "--budget", "nan"],
        ["bench-trace", "--max-seconds", "nan"],
    ],
)
def test_a_time_given_as_an_option_is_finite_and_in_range(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert _exit_code(argv) == EXIT_BAD_INPUT
    assert "number of seconds" in capsys.readouterr().err
