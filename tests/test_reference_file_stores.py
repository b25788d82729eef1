"""Tests of the file-backed reference pieces: mixall, the canonical offset formats,
LocalFileOffsetStore (R1.5–R1.16, one test per row of the R1.16 table) and the broker's
ConsumerOffsetManager (R3.1–R3.3, R3.6, R3.7). Every test name states the claim it checks.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqspec.reference import mixall
from rmqspec.reference.consumer_offset_manager import ConsumerOffsetManager
from rmqspec.reference.exceptions import MQClientException
from rmqspec.reference.fastjson_format import read_broker_offset_file, read_client_offset_file
from rmqspec.reference.local_file_offset_store import (
    LOCAL_OFFSET_STORE_DIR_ENV,
    LocalFileOffsetStore,
    default_local_offset_store_dir,
)
from rmqspec.reference.message_queue import MessageQueue
from rmqspec.reference.offset_serialize import (
    INT_MAX,
    INT_MIN,
    LONG_MAX,
    LONG_MIN,
    OffsetFileFormatError,
    decode_broker_offset_table,
    decode_client_offset_table,
    encode_broker_offset_table,
    encode_client_offset_table,
)
from rmqspec.reference.offset_store import OffsetStore, ReadOffsetType

MQ0 = MessageQueue("T", "broker-a", 0)
MQ1 = MessageQueue("T", "broker-a", 1)
MQ2 = MessageQueue("T", "broker-b", 0)
OTHER_TOPIC_MQ = MessageQueue("U", "broker-a", 0)
CORRUPT = '{"offsetTable": [ {"topic": "T", '  # a torn write
CLIENT_ID = "10.0.0.1@DEFAULT"
GROUP = "G"


def bak_of(path: Path) -> Path:
    return Path(f"{path}.bak")


def tmp_of(path: Path) -> Path:
    return Path(f"{path}.tmp")


# --- mixall ------------------------------------------------------------------------------------------


def test_file2string_returns_none_for_a_missing_file(tmp_path: Path) -> None:
    assert mixall.file2string(tmp_path / "absent.json") is None


def test_file2string_returns_none_for_an_unreadable_path(tmp_path: Path) -> None:
    assert mixall.file2string(tmp_path) is None  # a directory cannot be read as a file


def test_file2string_returns_empty_text_for_an_empty_file(tmp_path: Path) -> None:
    (tmp_path / "empty").write_bytes(b"")
    assert mixall.file2string(tmp_path / "empty") == ""


def test_file2string_reads_invalid_utf8_as_text_not_as_missing(tmp_path: Path) -> None:
    (tmp_path / "garbage").write_bytes(b"\xff\xfe\x00garbage")
    text = mixall.file2string(tmp_path / "garbage")
    assert text is not None and text.endswith("garbage")


def test_string2file_creates_parent_directories_and_leaves_no_tmp(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "f.json"
    mixall.string2file("hello", path)
    assert path.read_text() == "hello"
    assert not tmp_of(path).exists()
    assert not bak_of(path).exists()  # there was no previous main to back up


def test_string2file_copies_the_previous_main_to_bak(tmp_path: Path) -> None:
    path = tmp_path / "f.json"
    mixall.string2file("v1", path)
    mixall.string2file("v2", path)
    assert path.read_text() == "v2"
    assert bak_of(path).read_text() == "v1"


def test_string2file_backs_up_an_unparsable_previous_main_byte_for_byte(tmp_path: Path) -> None:
    path = tmp_path / "f.json"
    path.write_bytes(b"\xff garbage")
    mixall.string2file("new", path)
    assert bak_of(path).read_bytes() == b"\xff garbage"


def test_crash_after_tmp_leaves_previous_main_and_bak_untouched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "f.json"
    mixall.string2file("v1", path)
    mixall.string2file("v2", path)
    monkeypatch.setattr(mixall, "crash_after", "tmp")
    with pytest.raises(mixall.SimulatedCrash):
        mixall.string2file("v3", path)
    assert path.read_text() == "v2"
    assert bak_of(path).read_text() == "v1"
    assert tmp_of(path).read_text() == "v3"


def test_crash_between_bak_and_rename_leaves_previous_version_readable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "f.json"
    mixall.string2file("v1", path)
    monkeypatch.setattr(mixall, "crash_after", "bak")
    with pytest.raises(mixall.SimulatedCrash):
        mixall.string2file("v2", path)
    assert mixall.file2string(path) == "v1"  # 4.9.8 would have deleted main here (RMQ-21)
    assert mixall.file2string(bak_of(path)) == "v1"


@pytest.mark.parametrize("step", mixall.CRASH_POINTS)
def test_main_is_never_missing_whatever_step_the_writer_crashes_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step: mixall.CrashPoint
) -> None:
    path = tmp_path / "f.json"
    mixall.string2file("old", path)
    monkeypatch.setattr(mixall, "crash_after", step)
    with pytest.raises(mixall.SimulatedCrash):
        mixall.string2file("new", path)
    assert mixall.file2string(path) == ("new" if step == "replace" else "old")


def test_a_leftover_tmp_is_overwritten_by_the_next_write(tmp_path: Path) -> None:
    path = tmp_path / "f.json"
    tmp_of(path).write_text("stale tmp from a crash, much longer than the new content")
    mixall.string2file("new", path)
    assert path.read_text() == "new"
    assert not tmp_of(path).exists()


# --- canonical formats -----------------------------------------------------------------------------

names = st.text(min_size=0, max_size=12)
queue_ids = st.integers(INT_MIN, INT_MAX)
offsets = st.integers(LONG_MIN, LONG_MAX)
message_queues = st.builds(MessageQueue, names, names, queue_ids)
client_tables = st.dictionaries(message_queues, offsets, max_size=8)
broker_keys = st.builds(lambda t, g: f"{t}@{g}", names, names)
broker_tables = st.dictionaries(broker_keys, st.dictionaries(queue_ids, offsets, max_size=5), max_size=5)


@settings(max_examples=100, deadline=None)
@given(client_tables)
def test_client_format_round_trips(table: dict[MessageQueue, int]) -> None:
    text = encode_client_offset_table(table)
    assert decode_client_offset_table(text) == table
    assert encode_client_offset_table(dict(reversed(table.items()))) == text  # insertion order is irrelevant


@settings(max_examples=100, deadline=None)
@given(broker_tables)
def test_broker_format_round_trips(table: dict[str, dict[int, int]]) -> None:
    text = encode_broker_offset_table(table)
    assert decode_broker_offset_table(text) == table
    assert encode_broker_offset_table(dict(reversed(table.items()))) == text


def _reject_constant(name: str) -> None:
    raise AssertionError(f"non-finite constant {name} in output")


def test_client_encoding_is_strict_json_sorted_by_message_queue() -> None:
    table = {MessageQueue("T", "b", 10): 7, MessageQueue("T", "b", 2): 5, MessageQueue("A", "z", 0): 1}
    text = encode_client_offset_table(table)
    entries = json.loads(text, parse_constant=_reject_constant)["offsetTable"]
    assert [(e["topic"], e["queueId"]) for e in entries] == [("A", 0), ("T", 2), ("T", 10)]
    assert entries[0] == {"topic": "A", "brokerName": "z", "queueId": 0, "offset": 1}
    assert text.endswith("\n") and "\n  " in text  # indented


def test_broker_encoding_is_strict_json_with_queue_ids_in_numeric_order() -> None:
    text = encode_broker_offset_table({"T@G": {10: 1, 2: 3}, "A@G": {0: 0}})
    document = json.loads(text, parse_constant=_reject_constant)
    assert list(document["offsetTable"]) == ["A@G", "T@G"]
    assert list(document["offsetTable"]["T@G"].items()) == [("2", 3), ("10", 1)]


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({MessageQueue("T", "b", 2**31): 0}, "queueId must fit a Java int"),
        ({MQ0: 2**63}, "offset must fit a Java long"),
        ({MQ0: True}, "offset must be an integer"),
    ],
)
def test_client_encoder_refuses_values_the_decoder_would_refuse(table: dict[MessageQueue, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        encode_client_offset_table(table)


def test_broker_encoder_refuses_a_key_without_separator() -> None:
    with pytest.raises(ValueError, match="topic@group"):
        encode_broker_offset_table({"TG": {0: 1}})


CLIENT_ENTRY_3_BAD = """{
  "offsetTable": [
    {"topic": "T", "brokerName": "b", "queueId": 0, "offset": 1},
    {"topic": "T", "brokerName": "b", "queueId": 1, "offset": 1},
    {
      "topic": "T",
      "brokerName": "b",
      "queueId": "2",
      "offset": 1
    }
  ]
}
"""


def test_malformed_client_entry_error_names_file_line_entry_and_expectation() -> None:
    with pytest.raises(OffsetFileFormatError) as info:
        decode_client_offset_table(CLIENT_ENTRY_3_BAD, "/x/offsets.json")
    assert info.value.line == 8
    assert str(info.value) == '/x/offsets.json: line 8: entry 3: queueId must be an integer, got "2"'


def test_invalid_json_error_names_file_and_line() -> None:
    text = '{\n  "offsetTable": [\n    {"topic": "T",, }\n  ]\n}\n'
    with pytest.raises(OffsetFileFormatError) as info:
        decode_client_offset_table(text, "offsets.json")
    assert info.value.line == 3
    assert str(info.value).startswith("offsets.json: line 3: invalid JSON at column 19: ")


def client_entry(**raw: str) -> str:
    """One client entry as JSON text, with some values replaced by raw JSON text."""
    fields = {"topic": '"T"', "brokerName": '"b"', "queueId": "0", "offset": "1"} | raw
    return "{" + ", ".join(f'"{key}": {value}' for key, value in fields.items() if value) + "}"


def client_file(*entries: str) -> str:
    return '{"offsetTable": [\n' + ",\n".join(entries) + "\n]}"


@pytest.mark.parametrize(
    ("text", "line", "detail"),
    [
        pytest.param("", 1, "invalid JSON at column 1: Expecting value", id="empty"),
        pytest.param("[]", 1, "expected an object", id="top-level-list"),
        pytest.param("{}", 1, 'missing key "offsetTable"', id="no-table"),
        pytest.param('{"offsetTable": [], "x": 1}', 1, 'unexpected key "x"', id="unknown-top-key"),
        pytest.param('{"offsetTable": {}}', 1, "offsetTable must be a list", id="table-not-list"),
        pytest.param(client_file("5"), 2, "entry 1: expected an object", id="entry-not-object"),
        pytest.param(client_file(client_entry(offset="")), 2, 'entry 1: missing key "offset"', id="missing-key"),
        pytest.param(client_file(client_entry(topic="1")), 2, "topic must be a string", id="topic-not-string"),
        pytest.param(client_file(client_entry(offset="1.0")), 2, "offset must be an integer", id="float"),
        pytest.param(client_file(client_entry(offset="true")), 2, "got true", id="bool"),
        pytest.param(client_file(client_entry(offset="NaN")), 2, "invalid JSON", id="nan"),
        pytest.param(
            client_file(client_entry(queueId="2147483648")),
            2,
            "queueId must fit a Java int",
            id="queue-id-range",
        ),
        pytest.param(
            client_file(client_entry(), client_entry(offset="2")),
            3,
            "entry 2: duplicate entry",
            id="duplicate-mq",
        ),
        pytest.param('{"offsetTable": [],\n "offsetTable": []}', 2, 'duplicate key "offsetTable"', id="dup-key"),
        pytest.param('{"offsetTable": []} trailing', 1, "Extra data", id="trailing-data"),
    ],
)
def test_malformed_client_files_are_refused_with_line_and_reason(text: str, line: int, detail: str) -> None:
    with pytest.raises(OffsetFileFormatError) as info:
        decode_client_offset_table(text, "f.json")
    assert info.value.line == line
    assert str(info.value).startswith(f"f.json: line {line}: ")
    assert detail in info.value.detail


@pytest.mark.parametrize(
    ("text", "line", "detail"),
    [
        pytest.param('{"offsetTable": []}', 1, "offsetTable must be an object", id="table-not-object"),
        pytest.param('{"offsetTable": {\n"TG": {}}}', 2, 'key "TG" must have the form "topic@group"', id="no-at"),
        pytest.param('{"offsetTable": {\n"T@G": [1]}}', 2, "T@G: expected an object mapping", id="queues-list"),
        pytest.param('{"offsetTable": {"T@G": {\n"0": 1,\n"x": 2}}}', 3, 'queue id "x" must be', id="qid-text"),
        pytest.param('{"offsetTable": {"T@G": {"01": 2}}}', 1, 'queue id "01"', id="qid-leading-zero"),
        pytest.param('{"offsetTable": {"T@G": {"2147483648": 2}}}', 1, 'queue id "2147483648"', id="qid-range"),
        pytest.param(
            '{"offsetTable": {"T@G": {"0": "5"}}}',
            1,
            'T@G: offset of queue 0 must be an integer, got "5"',
            id="offset-string",
        ),
        pytest.param(
            '{"offsetTable": {"T@G": {"0": 9223372036854775808}}}',
            1,
            "must fit a Java long",
            id="offset-range",
        ),
        pytest.param('{"offsetTable": {"T@G": {"0": 1,\n"0": 2}}}', 2, 'duplicate key "0"', id="dup-queue"),
    ],
)
def test_malformed_broker_files_are_refused_with_line_and_reason(text: str, line: int, detail: str) -> None:
    with pytest.raises(OffsetFileFormatError) as info:
        decode_broker_offset_table(text, "consumerOffset.json")
    assert info.value.line == line
    assert str(info.value).startswith(f"consumerOffset.json: line {line}: ")
    assert detail in info.value.detail


def test_negative_offsets_and_queue_ids_are_valid_in_the_broker_file() -> None:
    assert decode_broker_offset_table('{"offsetTable": {"T@G": {"-1": -5}}}') == {"T@G": {-1: -5}}


# --- LocalFileOffsetStore ----------------------------------------------------------------------------


def new_store(tmp_path: Path) -> LocalFileOffsetStore:
    return LocalFileOffsetStore(CLIENT_ID, GROUP, tmp_path)


def write_client_file(path: Path, table: dict[MessageQueue, int]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(encode_client_offset_table(table))


def read_client_file(path: Path) -> dict[MessageQueue, int]:
    return read_client_offset_file(path.read_text(), str(path))  # the store writes fastjson's format


def test_local_file_offset_store_is_an_offset_store(tmp_path: Path) -> None:
    assert isinstance(new_store(tmp_path), OffsetStore)
    assert {t.name for t in ReadOffsetType} == {
        "READ_FROM_MEMORY",
        "READ_FROM_STORE",
        "MEMORY_FIRST_THEN_STORE",
    }


def test_store_path_is_dir_client_id_group_offsets_json(tmp_path: Path) -> None:
    assert new_store(tmp_path).store_path == tmp_path / CLIENT_ID / GROUP / "offsets.json"


def test_default_dir_is_the_env_variable_else_home_rocketmq_offsets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(LOCAL_OFFSET_STORE_DIR_ENV, str(tmp_path / "env"))
    assert LocalFileOffsetStore(CLIENT_ID, GROUP).store_path == tmp_path / "env" / CLIENT_ID / GROUP / "offsets.json"
    monkeypatch.delenv(LOCAL_OFFSET_STORE_DIR_ENV)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_local_offset_store_dir() == tmp_path / "home" / ".rocketmq_offsets"


def test_update_offset_ignores_a_none_queue(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    store.update_offset(None, 5, False)
    assert store.offset_table == {}


def test_update_offset_inserts_a_new_entry_as_given_even_when_increase_only(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    store.update_offset(MQ0, -7, True)
    assert store.read_offset(MQ0, ReadOffsetType.READ_FROM_MEMORY) == -7


def test_update_offset_increase_only_keeps_the_maximum(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    store.update_offset(MQ0, 10, True)
    store.update_offset(MQ0, 4, True)
    assert store.read_offset(MQ0, ReadOffsetType.READ_FROM_MEMORY) == 10
    store.update_offset(MQ0, 12, True)
    assert store.read_offset(MQ0, ReadOffsetType.READ_FROM_MEMORY) == 12


def test_update_offset_without_increase_only_may_move_backwards(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    store.update_offset(MQ0, 10, False)
    store.update_offset(MQ0, 3, False)
    assert store.read_offset(MQ0, ReadOffsetType.READ_FROM_MEMORY) == 3


@pytest.mark.parametrize("read_type", list(ReadOffsetType))
def test_read_offset_of_none_queue_is_minus_one(tmp_path: Path, read_type: ReadOffsetType) -> None:
    assert new_store(tmp_path).read_offset(None, read_type) == -1


def test_read_from_memory_is_minus_one_without_an_entry_and_ignores_the_file(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    write_client_file(store.store_path, {MQ0: 9})
    assert store.read_offset(MQ0, ReadOffsetType.READ_FROM_MEMORY) == -1


def test_memory_first_then_store_prefers_memory_and_falls_back_to_the_file(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    write_client_file(store.store_path, {MQ0: 9, MQ1: 4})
    store.update_offset(MQ0, 20, False)
    assert store.read_offset(MQ0, ReadOffsetType.MEMORY_FIRST_THEN_STORE) == 20
    assert store.read_offset(MQ1, ReadOffsetType.MEMORY_FIRST_THEN_STORE) == 4
    assert store.offset_table[MQ1] == 4  # the fall-back seeds memory


def test_read_from_store_overwrites_memory_with_the_file_value_even_if_lower(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    write_client_file(store.store_path, {MQ0: 9})
    store.update_offset(MQ0, 50, False)
    assert store.read_offset(MQ0, ReadOffsetType.READ_FROM_STORE) == 9
    assert store.offset_table[MQ0] == 9


def test_read_from_store_without_a_file_entry_is_minus_one_and_keeps_memory(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    write_client_file(store.store_path, {MQ1: 9})
    store.update_offset(MQ0, 50, False)
    assert store.read_offset(MQ0, ReadOffsetType.READ_FROM_STORE) == -1
    assert store.offset_table[MQ0] == 50


def test_load_adds_file_entries_without_clearing_memory(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    write_client_file(store.store_path, {MQ0: 9})
    store.update_offset(MQ0, 1, False)
    store.update_offset(MQ1, 2, False)
    store.load()
    assert store.offset_table == {MQ0: 9, MQ1: 2}


def test_persist_all_with_no_queues_writes_nothing(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    store.update_offset(MQ0, 1, False)
    store.persist_all(set())
    store.persist_all(None)
    assert not store.store_path.exists()


def test_persist_all_keeps_file_entries_of_unowned_queues(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    write_client_file(store.store_path, {MQ0: 1, MQ2: 33})
    store.update_offset(MQ0, 5, False)
    store.update_offset(MQ1, 6, False)
    store.persist_all({MQ0, MQ1})
    assert read_client_file(store.store_path) == {MQ0: 5, MQ1: 6, MQ2: 33}


def test_persist_all_neither_writes_nor_removes_memory_entries_outside_the_set(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    store.update_offset(MQ0, 5, False)
    store.update_offset(MQ1, 6, False)
    store.persist_all({MQ0})
    assert read_client_file(store.store_path) == {MQ0: 5}
    assert store.offset_table == {MQ0: 5, MQ1: 6}


def test_persist_merges_one_entry_and_ignores_queues_not_in_memory(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    write_client_file(store.store_path, {MQ1: 3})
    store.update_offset(MQ0, 5, False)
    store.update_offset(MQ2, 8, False)
    store.persist(MQ0)
    assert read_client_file(store.store_path) == {MQ0: 5, MQ1: 3}
    before = store.store_path.read_bytes()
    store.persist(OTHER_TOPIC_MQ)
    assert store.store_path.read_bytes() == before


def test_remove_offset_removes_memory_only_and_the_file_keeps_the_entry(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    store.update_offset(MQ0, 5, False)
    store.persist_all({MQ0})
    store.remove_offset(MQ0)
    assert store.read_offset(MQ0, ReadOffsetType.READ_FROM_MEMORY) == -1
    assert read_client_file(store.store_path) == {MQ0: 5}


def test_clone_offset_table_is_a_snapshot_filtered_by_non_blank_topic(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    store.update_offset(MQ0, 1, False)
    store.update_offset(OTHER_TOPIC_MQ, 2, False)
    assert store.clone_offset_table(None) == store.clone_offset_table("  ") == {MQ0: 1, OTHER_TOPIC_MQ: 2}
    clone = store.clone_offset_table("T")
    assert clone == {MQ0: 1}
    clone[MQ0] = 99
    assert store.offset_table[MQ0] == 1


def test_update_consume_offset_to_broker_is_a_no_op(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    store.update_consume_offset_to_broker(MQ0, 5, True)
    assert store.offset_table == {} and not store.store_path.exists()


def test_persisted_offsets_reload_in_a_fresh_store(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    for offset, mq in enumerate([MQ0, MQ1, MQ2, OTHER_TOPIC_MQ]):
        store.update_offset(mq, offset * 10, False)
    store.persist_all(set(store.offset_table))
    reloaded = new_store(tmp_path)
    reloaded.load()
    assert reloaded.offset_table == store.offset_table


# R1.16 table, one test per row. States of a file: good, missing, empty, unparsable.


def set_file(path: Path, state: str, table: dict[MessageQueue, int]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if state == "good":
        path.write_text(encode_client_offset_table(table))
    elif state == "empty":
        path.write_bytes(b"")
    elif state == "unparsable":
        path.write_text(CORRUPT)


@pytest.mark.parametrize("bak_state", ["good", "missing", "empty", "unparsable"])
def test_r1_16_row1_good_main_is_used_whatever_the_bak(tmp_path: Path, bak_state: str) -> None:
    store = new_store(tmp_path)
    set_file(store.store_path, "good", {MQ0: 10, MQ2: 30})
    set_file(bak_of(store.store_path), bak_state, {MQ0: 1})
    store.load()
    assert store.offset_table == {MQ0: 10, MQ2: 30}
    assert new_store(tmp_path).read_offset(MQ0, ReadOffsetType.READ_FROM_STORE) == 10
    store.update_offset(MQ1, 20, False)
    store.persist_all({MQ1})
    assert read_client_file(store.store_path) == {MQ0: 10, MQ1: 20, MQ2: 30}  # merged into main
    assert read_client_file(bak_of(store.store_path)) == {MQ0: 10, MQ2: 30}


@pytest.mark.parametrize("main_state", ["missing", "empty", "unparsable"])
def test_r1_16_row2_bad_main_falls_back_to_a_good_bak(tmp_path: Path, main_state: str) -> None:
    store = new_store(tmp_path)
    set_file(store.store_path, main_state, {})
    set_file(bak_of(store.store_path), "good", {MQ0: 7, MQ2: 30})
    store.load()
    assert store.offset_table == {MQ0: 7, MQ2: 30}
    assert new_store(tmp_path).read_offset(MQ0, ReadOffsetType.READ_FROM_STORE) == 7
    store.update_offset(MQ1, 20, False)
    store.persist_all({MQ1})
    assert read_client_file(store.store_path) == {MQ0: 7, MQ1: 20, MQ2: 30}  # .bak content merged
    bak_text = mixall.file2string(bak_of(store.store_path))
    expected_bak = {
        "missing": encode_client_offset_table({MQ0: 7, MQ2: 30}),
        "empty": "",
        "unparsable": CORRUPT,
    }
    assert bak_text == expected_bak[main_state]  # a readable bad main is copied over .bak


@pytest.mark.parametrize("main_state", ["missing", "empty", "unparsable"])
@pytest.mark.parametrize("bak_state", ["missing", "empty"])
def test_r1_16_row3_no_usable_file_is_a_first_start_without_error(
    tmp_path: Path, main_state: str, bak_state: str
) -> None:
    store = new_store(tmp_path)
    set_file(store.store_path, main_state, {})
    set_file(bak_of(store.store_path), bak_state, {})
    store.load()
    assert store.offset_table == {}
    assert store.read_offset(MQ0, ReadOffsetType.READ_FROM_STORE) == -1
    store.update_offset(MQ0, 5, False)
    store.update_offset(MQ1, 6, False)
    store.persist_all({MQ0})
    assert read_client_file(store.store_path) == {MQ0: 5}  # a new file


def test_both_files_corrupt_fails_load(tmp_path: Path) -> None:
    """R1.16 row 4: load throws, READ_FROM_STORE gives -1, persist_all aborts silently every time."""
    store = new_store(tmp_path)
    set_file(store.store_path, "unparsable", {})
    set_file(bak_of(store.store_path), "unparsable", {})
    with pytest.raises(MQClientException, match="readLocalOffset Exception, maybe fastjson version too low") as info:
        store.load()
    assert isinstance(info.value.__cause__, OffsetFileFormatError)
    assert store.read_offset(MQ0, ReadOffsetType.READ_FROM_STORE) == -1
    store.update_offset(MQ0, 5, False)
    for _ in range(2):
        store.persist_all({MQ0})
        store.persist(MQ0)
        assert mixall.file2string(store.store_path) == CORRUPT
        assert mixall.file2string(bak_of(store.store_path)) == CORRUPT


def test_load_falls_back_to_bak_when_main_is_corrupt(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    set_file(store.store_path, "unparsable", {})
    set_file(bak_of(store.store_path), "good", {MQ0: 3})
    store.load()
    assert store.offset_table == {MQ0: 3}


def test_the_tmp_file_is_never_read(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    set_file(tmp_of(store.store_path), "good", {MQ0: 3})
    store.load()
    assert store.offset_table == {}


def test_persist_all_crash_between_bak_and_rename_reloads_the_previous_offsets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = new_store(tmp_path)
    store.update_offset(MQ0, 5, False)
    store.persist_all({MQ0})
    store.update_offset(MQ0, 9, False)
    monkeypatch.setattr(mixall, "crash_after", "bak")
    with pytest.raises(mixall.SimulatedCrash):
        store.persist_all({MQ0})
    monkeypatch.setattr(mixall, "crash_after", None)
    restarted = new_store(tmp_path)
    restarted.load()
    assert restarted.offset_table == {MQ0: 5}  # only the newest write is lost


def test_persist_all_logs_and_survives_an_unwritable_directory(tmp_path: Path) -> None:
    (tmp_path / CLIENT_ID).write_text("a file where the group directory should go")
    store = new_store(tmp_path)
    store.update_offset(MQ0, 5, False)
    store.persist_all({MQ0})  # the OSError is logged, not raised (R1.12 step 4)
    assert store.offset_table == {MQ0: 5}


# --- ConsumerOffsetManager -----------------------------------------------------------------------------


def offset_file(root: Path) -> Path:
    return root / "config" / "consumerOffset.json"


def test_commit_offset_is_last_writer_wins_even_backwards_and_negative() -> None:
    manager = ConsumerOffsetManager("/nonexistent")
    manager.commit_offset("10.0.0.1:1", "G", "T", 0, 100)
    manager.commit_offset("10.0.0.2:1", "G", "T", 0, 40)
    assert manager.query_offset("G", "T", 0) == 40
    manager.commit_offset("10.0.0.2:1", "G", "T", 0, -3)
    assert manager.query_offset("G", "T", 0) == -3
    assert manager.offset_table == {"T@G": {0: -3}}


def test_query_offset_is_minus_one_when_key_or_queue_is_absent() -> None:
    manager = ConsumerOffsetManager("/nonexistent")
    manager.commit_offset("h", "G", "T", 0, 5)
    assert manager.query_offset("G", "T", 1) == -1
    assert manager.query_offset("H", "T", 0) == -1
    assert manager.query_offset("G", "U", 0) == -1


def test_clone_table_is_a_deep_copy() -> None:
    manager = ConsumerOffsetManager("/nonexistent")
    manager.commit_offset("h", "G", "T", 0, 5)
    clone = manager.clone_table()
    clone["T@G"][0] = 99
    clone["U@G"] = {0: 1}
    assert manager.offset_table == {"T@G": {0: 5}}


def test_broker_persist_writes_config_consumer_offset_json_and_reloads(tmp_path: Path) -> None:
    manager = ConsumerOffsetManager(tmp_path)
    manager.commit_offset("h", "G", "T", 0, 5)
    manager.commit_offset("h", "G", "T", 12, 7)
    manager.persist()
    assert manager.config_file_path() == offset_file(tmp_path)
    assert read_broker_offset_file(offset_file(tmp_path).read_text()) == {"T@G": {0: 5, 12: 7}}
    restarted = ConsumerOffsetManager(tmp_path)
    assert restarted.load() is True
    assert restarted.offset_table == {"T@G": {0: 5, 12: 7}}


def test_broker_persist_copies_the_previous_file_to_bak(tmp_path: Path) -> None:
    manager = ConsumerOffsetManager(tmp_path)
    manager.commit_offset("h", "G", "T", 0, 5)
    manager.persist()
    manager.commit_offset("h", "G", "T", 0, 6)
    manager.persist()
    assert read_broker_offset_file(bak_of(offset_file(tmp_path)).read_text()) == {"T@G": {0: 5}}


def write_broker_file(path: Path, state: str, table: dict[str, dict[int, int]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if state == "good":
        path.write_text(encode_broker_offset_table(table))
    elif state == "empty":
        path.write_bytes(b"")
    elif state == "unparsable":
        path.write_text('{"offsetTable": {"T@G": {0: 5')  # a torn write


@pytest.mark.parametrize("main_state", ["missing", "empty", "unparsable"])
def test_broker_load_falls_back_to_bak_when_main_is_corrupt_empty_or_missing(tmp_path: Path, main_state: str) -> None:
    write_broker_file(offset_file(tmp_path), main_state, {})
    write_broker_file(bak_of(offset_file(tmp_path)), "good", {"T@G": {0: 5}})
    manager = ConsumerOffsetManager(tmp_path)
    assert manager.load() is True
    assert manager.offset_table == {"T@G": {0: 5}}


@pytest.mark.parametrize("main_state", ["missing", "empty", "unparsable"])
@pytest.mark.parametrize("bak_state", ["missing", "empty"])
def test_broker_load_without_a_usable_file_succeeds_with_an_empty_table(
    tmp_path: Path, main_state: str, bak_state: str
) -> None:
    write_broker_file(offset_file(tmp_path), main_state, {})
    write_broker_file(bak_of(offset_file(tmp_path)), bak_state, {})
    manager = ConsumerOffsetManager(tmp_path)
    assert manager.load() is True
    assert manager.offset_table == {}  # every group now looks new (R3.7, RMQ-21)


@pytest.mark.parametrize("main_state", ["missing", "empty", "unparsable"])
def test_broker_load_fails_when_main_is_unusable_and_bak_is_corrupt(tmp_path: Path, main_state: str) -> None:
    write_broker_file(offset_file(tmp_path), main_state, {})
    write_broker_file(bak_of(offset_file(tmp_path)), "unparsable", {})
    assert ConsumerOffsetManager(tmp_path).load() is False


def test_broker_load_uses_a_good_main_even_if_bak_is_corrupt(tmp_path: Path) -> None:
    write_broker_file(offset_file(tmp_path), "good", {"T@G": {0: 9}})
    write_broker_file(bak_of(offset_file(tmp_path)), "unparsable", {})
    manager = ConsumerOffsetManager(tmp_path)
    assert manager.load() is True
    assert manager.offset_table == {"T@G": {0: 9}}


def test_broker_persist_crash_between_bak_and_rename_reloads_the_previous_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = ConsumerOffsetManager(tmp_path)
    manager.commit_offset("h", "G", "T", 0, 5)
    manager.persist()
    manager.commit_offset("h", "G", "T", 0, 9)
    monkeypatch.setattr(mixall, "crash_after", "bak")
    with pytest.raises(mixall.SimulatedCrash):
        manager.persist()
    restarted = ConsumerOffsetManager(tmp_path)
    assert restarted.load() is True
    assert restarted.offset_table == {"T@G": {0: 5}}
