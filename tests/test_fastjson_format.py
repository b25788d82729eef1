"""Tests of ``fastjson_format``: the offset files exactly as RocketMQ 4.9.8 writes them (R1.8, R3.6),
the lenient reader of them and of the canonical format, its error messages, and the file stores
writing and loading the real format (R1.16, R3.7). Every test name states the claim it checks.

The fixtures in ``tests/data/fastjson/`` were written by hand from a reading of fastjson's writer;
see the README there.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rmqspec.reference import mixall
from rmqspec.reference.consumer_offset_manager import ConsumerOffsetManager, split_topic_at_group
from rmqspec.reference.exceptions import MQClientException
from rmqspec.reference.fastjson_format import (
    encode_broker_offset_file,
    encode_client_offset_file,
    parse_fastjson,
    quote_string,
    read_broker_offset_file,
    read_client_offset_file,
    write_broker_offset_file,
    write_client_offset_file,
)
from rmqspec.reference.local_file_offset_store import LocalFileOffsetStore
from rmqspec.reference.message_queue import MessageQueue
from rmqspec.reference.offset_serialize import (
    INT_MAX,
    INT_MIN,
    LONG_MAX,
    LONG_MIN,
    OffsetFileFormatError,
    encode_broker_offset_table,
    encode_client_offset_table,
)
from rmqspec.reference.offset_store import ReadOffsetType

DATA = Path(__file__).parent / "data" / "fastjson"
EMPTY_FILE = '{\n\t"offsetTable":{}\n}'
CLIENT_ID = "10.0.0.1@DEFAULT"
GROUP = "G"

# The fixtures' tables, in the fixtures' (Java ConcurrentHashMap) order.
BROKER_4_9_8_TABLE = {
    "%RETRY%ns1%billing_group@ns1%billing_group": {0: 0},
    "TopicTest@audit_group": {0: 9876543210, 1: 9876543187, 2: 9876543222, 3: 9876543199},
    "%RETRY%audit_group@audit_group": {0: 2},
    "ns1%Payments@ns1%billing_group": {0: 0, 1: 17, 2: 3, 3: 41, 4: 0, 5: 8, 6: 12, 7: 5},
    "TopicTest@order_consumer": {0: 1250, 1: 1248, 2: 1251, 3: 1249},
    "%RETRY%order_consumer@order_consumer": {0: 14},
}


def mq(broker_name: str, queue_id: int, topic: str = "TopicTest") -> MessageQueue:
    return MessageQueue(topic, broker_name, queue_id)


CLIENT_4_9_8_TABLE = {
    mq("broker-a", 3): 250,
    mq("broker-a", 2): 251,
    mq("broker-b", 3): 249,
    mq("broker-b", 0): 248,
    mq("broker-a", 1): 249,
    mq("broker-b", 2): 250,
    mq("broker-a", 0): 250,
    mq("broker-b", 1): 252,
}


def fixture_text(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


# --- the writers produce 4.9.8's bytes ---------------------------------------------------------------------


def test_broker_writer_reproduces_a_hand_written_4_9_8_broker_file_byte_for_byte() -> None:
    assert write_broker_offset_file(BROKER_4_9_8_TABLE) == fixture_text("consumerOffset-4.9.8.json")


def test_client_writer_reproduces_a_hand_written_4_9_8_client_file_byte_for_byte() -> None:
    assert write_client_offset_file(CLIENT_4_9_8_TABLE) == fixture_text("offsets-4.9.8.json")


def test_broker_file_has_unquoted_queue_ids_on_the_key_line_and_tab_indentation() -> None:
    text = write_broker_offset_file({"T@G": {0: 123, 1: 45}, "U@G": {7: 1}})
    assert text == '{\n\t"offsetTable":{\n\t\t"T@G":{0:123,1:45\n\t\t},\n\t\t"U@G":{7:1\n\t\t}\n\t}\n}'


def test_client_file_pretty_prints_each_message_queue_key_with_fields_in_alphabetical_order() -> None:
    text = write_client_offset_file({MessageQueue("T", "broker-a", 0): 42})
    assert text == (
        '{\n\t"offsetTable":{{\n\t\t\t"brokerName":"broker-a",\n\t\t\t"queueId":0,\n\t\t\t"topic":"T"\n\t\t}:42\n\t}\n}'
    )


def test_empty_tables_are_written_as_an_empty_offset_table_in_both_files() -> None:
    assert write_broker_offset_file({}) == write_client_offset_file({}) == EMPTY_FILE
    assert read_broker_offset_file(EMPTY_FILE) == {}
    assert read_client_offset_file(EMPTY_FILE) == {}


def test_an_empty_queue_map_is_written_as_braces_on_the_key_line() -> None:
    text = write_broker_offset_file({"T@G": {}})
    assert text == '{\n\t"offsetTable":{\n\t\t"T@G":{}\n\t}\n}'
    assert read_broker_offset_file(text) == {"T@G": {}}


def test_writers_keep_the_mapping_order_and_the_store_encoders_sort() -> None:
    table = {"b@G": {2: 1, 0: 1}, "a@G": {1: 1}}
    assert write_broker_offset_file(table).index('"b@G"') < write_broker_offset_file(table).index('"a@G"')
    assert "{2:1,0:1" in write_broker_offset_file(table)
    assert encode_broker_offset_file(table) == write_broker_offset_file({"a@G": {1: 1}, "b@G": {0: 1, 2: 1}})
    clients = {mq("b", 1): 5, mq("a", 0): 6}
    assert encode_client_offset_file(clients) == write_client_offset_file({mq("a", 0): 6, mq("b", 1): 5})


def test_the_canonical_format_is_still_available_through_the_store_encoders() -> None:
    assert encode_broker_offset_file({"T@G": {0: 1}}, "canonical") == encode_broker_offset_table({"T@G": {0: 1}})
    assert encode_client_offset_file({mq("a", 0): 1}, "canonical") == encode_client_offset_table({mq("a", 0): 1})


@pytest.mark.parametrize(
    ("text", "written"),
    [
        ('say "hi"', '"say \\"hi\\""'),
        ("back\\slash/and/slash", '"back\\\\slash/and/slash"'),
        ("\b\f\n\r\t", '"\\b\\f\\n\\r\\t"'),
        ("\x00\x01\x0b\x1f", '"\\u0000\\u0001\\u000B\\u001F"'),
        ("\x7f\x9f", '"\\u007F\\u009F"'),
        ("\xa0é€😀", '"\xa0é€😀"'),
        ("\u2028\u2029", '"\\u2028\\u2029"'),
        ("%RETRY%ns|G-1_x", '"%RETRY%ns|G-1_x"'),
    ],
)
def test_strings_are_escaped_exactly_as_fastjson_escapes_them(text: str, written: str) -> None:
    assert quote_string(text) == written
    assert read_broker_offset_file(f'{{"offsetTable":{{{quote_string(text + "@G")}:{{}}}}}}') == {text + "@G": {}}


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"TG": {0: 1}}, "topic@group"),
        ({"T@G": {2**31: 1}}, "queue id must fit a Java int"),
        ({"T@G": {0: 2**63}}, "must fit a Java long"),
        ({"T@G": {0: True}}, "must be an integer"),
        ({"T\ud800@G": {0: 1}}, "lone surrogate"),
    ],
)
def test_broker_writer_refuses_values_the_reader_would_refuse(table: dict[str, dict[int, int]], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        write_broker_offset_file(table)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({mq("b", 2**31): 0}, "queueId must fit a Java int"),
        ({mq("b", 0): LONG_MIN - 1}, "offset must fit a Java long"),
        ({MessageQueue(5, "b", 0): 0}, "topic must be a string"),  # type: ignore[arg-type]
    ],
)
def test_client_writer_refuses_values_the_reader_would_refuse(table: dict[MessageQueue, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        write_client_offset_file(table)


# --- round trips ------------------------------------------------------------------------------------------------

names = st.text(max_size=12)
queue_ids = st.integers(INT_MIN, INT_MAX) | st.integers(0, 40)
offsets = st.integers(LONG_MIN, LONG_MAX) | st.integers(-1, 10_000)
broker_keys = st.builds(lambda topic, group: f"{topic}@{group}", names, names)
broker_tables = st.dictionaries(broker_keys, st.dictionaries(queue_ids, offsets, max_size=6), max_size=6)
client_tables = st.dictionaries(st.builds(MessageQueue, names, names, queue_ids), offsets, max_size=8)

# Whitespace between tokens that must not change what a file means. The writer escapes TAB and
# newlines inside strings, so replacing them anywhere in its output only touches the layout.
LAYOUTS: dict[str, Callable[[str], str]] = {
    "as written": lambda text: text,
    "CRLF": lambda text: text.replace("\n", "\r\n"),
    "spaces for tabs": lambda text: text.replace("\t", "    "),
    "no whitespace": lambda text: text.replace("\n", "").replace("\t", ""),
    "trailing newlines": lambda text: text + "\n\r\n \t\n",
    "byte-order mark": lambda text: "\ufeff" + text,
    "form feeds": lambda text: text.replace("\n", "\n\f"),
}


@settings(max_examples=150, deadline=None)
@given(broker_tables, st.sampled_from(sorted(LAYOUTS)))
def test_broker_file_round_trips_with_unquoted_queue_ids_in_any_layout(
    table: dict[str, dict[int, int]], layout: str
) -> None:
    text = LAYOUTS[layout](write_broker_offset_file(table))
    read = read_broker_offset_file(text)
    assert read == table
    assert [list(queues) for queues in read.values()] == [list(queues) for queues in table.values()]  # file order
    assert read_broker_offset_file(encode_broker_offset_table(table)) == table


@settings(max_examples=150, deadline=None)
@given(client_tables, st.sampled_from(sorted(LAYOUTS)))
def test_client_file_round_trips_with_message_queue_keys_in_any_layout(
    table: dict[MessageQueue, int], layout: str
) -> None:
    text = LAYOUTS[layout](write_client_offset_file(table))
    read = read_client_offset_file(text)
    assert read == table
    assert list(read) == list(table)
    assert read_client_offset_file(encode_client_offset_table(table)) == table


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_the_4_9_8_fixtures_read_the_same_in_every_layout(layout: str) -> None:
    assert read_broker_offset_file(LAYOUTS[layout](fixture_text("consumerOffset-4.9.8.json"))) == BROKER_4_9_8_TABLE
    assert read_client_offset_file(LAYOUTS[layout](fixture_text("offsets-4.9.8.json"))) == CLIENT_4_9_8_TABLE


def test_java_long_and_int_extremes_and_negative_offsets_round_trip() -> None:
    table = {"T@G": {0: LONG_MAX, 1: LONG_MIN, -1: -1, INT_MAX: 0, INT_MIN: -2}}
    text = write_broker_offset_file(table)
    assert "{0:9223372036854775807,1:-9223372036854775808,-1:-1,2147483647:0,-2147483648:-2\n" in text
    assert read_broker_offset_file(text) == table
    clients = {mq("b", INT_MIN): LONG_MIN, mq("b", INT_MAX): LONG_MAX}
    assert read_client_offset_file(write_client_offset_file(clients)) == clients


@pytest.mark.parametrize(
    "key",
    [
        "%RETRY%ns1%billing_group@ns1%billing_group",  # retry topic and namespace: '%' is a name character
        "Topic|x-1_y@group|a-b_c",  # every other character RocketMQ allows in names
        "T@G@extra",  # more than one '@': the key is kept whole
        "@",
        "T@",
        '"quoted"\\@\n\tgroup',
    ],
)
def test_broker_keys_are_opaque_strings_that_round_trip_unchanged(key: str) -> None:
    assert read_broker_offset_file(write_broker_offset_file({key: {0: 1}})) == {key: {0: 1}}


@pytest.mark.parametrize(
    ("key", "split"),
    [
        ("TopicTest@G", ("TopicTest", "G")),
        ("%RETRY%G@G", ("%RETRY%G", "G")),
        ("ns%T@ns%G", ("ns%T", "ns%G")),
        ("@G", ("", "G")),
        ("T@G@", ("T", "G")),  # Java's split drops trailing empty parts
        ("T@G@x", None),  # neither the first nor the last '@': 4.9.8 skips the key
        ("T@@G", None),
        ("T@", None),
        ("TG", None),
    ],
)
def test_keys_split_as_java_split_at_at_sign_with_exactly_two_parts(key: str, split: tuple[str, str] | None) -> None:
    assert split_topic_at_group(key) == split


def test_a_5x_broker_file_reads_its_offset_table_and_skips_data_version_and_group_topic_map() -> None:
    assert read_broker_offset_file(fixture_text("consumerOffset-5.x.json")) == {
        "TopicTest@order_consumer": {0: 1250, 1: 1248, 2: 1251, 3: 1249},
        "%RETRY%order_consumer@order_consumer": {0: 14},
    }


def test_single_quotes_bare_property_names_and_quoted_queue_ids_are_read_as_fastjson_reads_them() -> None:
    text = "{offsetTable:{'T@G':{0:5,'1':6,\"2\":7}}}"
    assert read_broker_offset_file(text) == {"T@G": {0: 5, 1: 6, 2: 7}}
    client = "{'offsetTable':{{topic:'T','brokerName':\"b\",queueId:3}:9}}"
    assert read_client_offset_file(client) == {MessageQueue("T", "b", 3): 9}


def test_a_root_without_offset_table_reads_as_an_empty_table_as_in_java() -> None:
    assert read_broker_offset_file("{}") == {}
    assert read_client_offset_file('{"somethingElse":[1,2]}') == {}


def test_parse_keeps_object_keys_and_positions() -> None:
    root = parse_fastjson('{\n\t"offsetTable":{{"topic":"T"}:1}}')
    [(key, table)] = root.members
    assert (key.kind, key.value, key.line, key.column) == ("string", "offsetTable", 2, 2)
    [(queue_key, offset)] = table.members
    assert queue_key.kind == "object" and offset.value == 1 and (offset.line, offset.column) == (2, 31)


# --- errors name the file, the line, the column and what was expected ----------------------------------------

TRUNCATED_BROKER = fixture_text("consumerOffset-4.9.8.json")[:150]  # torn writes: this one ends inside an offset,
TRUNCATED_CLIENT = fixture_text("offsets-4.9.8.json")[:100]  # this one after the '{' of a MessageQueue key


@pytest.mark.parametrize(
    ("text", "line", "column", "detail"),
    [
        pytest.param(TRUNCATED_BROKER, 5, 75, "expected ',' or '}' after a value in an object, got the end", id="torn"),
        pytest.param("\ufffd\ufffd garbage", 1, 1, "expected '{' to start the offset file, got '\ufffd'", id="garbage"),
        pytest.param(" \n\t", 2, 2, "expected '{' to start the offset file, got the end of the file", id="blank"),
        pytest.param(
            '{"offsetTable":{\n"T@G":{0:1},\n"T@G":{1:2}}}',
            3,
            1,
            'duplicate key "T@G" (first at line 2, column 1)',
            id="duplicate-key",
        ),
        pytest.param(
            '{"offsetTable":{"T@G":{0:1,\n "0":2}}}',
            2,
            2,
            "T@G: duplicate queue id 0 (first at line 1, column 24)",
            id="duplicate-queue",
        ),
        pytest.param(
            '{"offsetTable":{},\n"offsetTable":{}}', 2, 1, 'duplicate key "offsetTable"', id="duplicate-property"
        ),
        pytest.param(
            '{"offsetTable":{"T@G":{0:"5"}}}',
            1,
            26,
            'T@G: offset of queue 0 must be an integer (a Java long), got the string "5"',
            id="string-offset",
        ),
        pytest.param('{"offsetTable":{"T@G":{0:1.5}}}', 1, 26, "got the number 1.5", id="decimal-offset"),
        pytest.param('{"offsetTable":{"T@G":{0:null}}}', 1, 26, "got null", id="null-offset"),
        pytest.param('{"offsetTable":{"T@G":{0:true}}}', 1, 26, "got true", id="bool-offset"),
        pytest.param(
            '{"offsetTable":{"T@G":{0:9223372036854775808}}}', 1, 26, "must fit a Java long", id="offset-range"
        ),
        pytest.param('{"offsetTable":{"T@G":{2147483648:0}}}', 1, 24, "queue id must fit a Java int", id="qid-range"),
        pytest.param(
            '{"offsetTable":{"T@G":{"x":0}}}', 1, 24, 'queue id must be a Java int, got the string "x"', id="qid"
        ),
        pytest.param(
            '{"offsetTable":{"T@G":{{"a":1}:0}}}', 1, 24, "queue id must be a Java int, got an object", id="qo"
        ),
        pytest.param('{"offsetTable":{"TG":{}}}', 1, 17, 'key "TG" must have the form "topic@group"', id="no-at"),
        pytest.param('{"offsetTable":{"T@G":[1]}}', 1, 23, "T@G: expected an object mapping queue ids", id="list"),
        pytest.param('{"offsetTable":[]}', 1, 16, 'offsetTable must be an object keyed by "topic@group"', id="tl"),
        pytest.param('{"offsetTable":null}', 1, 16, "got null", id="null-table"),
        pytest.param('{"offsetTable":{"T@G":{0:1 1:2}}}', 1, 28, "expected ',' or '}'", id="missing-comma"),
        pytest.param('{"offsetTable":{"T@G":{0:1,}}}', 1, 28, "expected a key", id="trailing-comma"),
        pytest.param('{"offsetTable":{}}}', 1, 19, "expected the end of the file after the closing '}'", id="extra"),
        pytest.param('{"offsetTable":{}} /* c */', 1, 20, "expected the end of the file", id="comment"),
        pytest.param('{"offsetTable":{"T@G', 1, 17, 'the string starting here has no closing "', id="unterminated"),
        pytest.param(
            '{"offsetTable":{"T\n@G":{}}}', 1, 19, "U+000A inside a string must be written as an escape", id="nl"
        ),
        pytest.param('{"offsetTable":{"T\\x@G":{}}}', 1, 19, "invalid escape in a string", id="bad-escape"),
        pytest.param('{"offsetTable":{"T@G":{0:-}}}', 1, 26, "expected a digit after '-'", id="lone-minus"),
        pytest.param('{"offsetTable":{"T@G":{0:abc}}}', 1, 26, "expected a value", id="bare-value"),
        pytest.param('{"offsetTable":{"T@G":{0:\u0663}}}', 1, 26, "got '\u0663'", id="arabic-indic-digit"),
        pytest.param('{"offsetTable":{"\\uD800@G":{}}}', 1, 18, "half of a surrogate pair", id="lone-surrogate"),
        pytest.param("[" * 40, 1, 1, "expected '{'", id="array-root"),
        pytest.param('{"a":' + "[" * 40, 1, 37, "nested deeper than 32", id="too-deep"),
    ],
)
def test_unreadable_broker_files_are_refused_naming_file_line_column_and_expectation(
    text: str, line: int, column: int, detail: str
) -> None:
    with pytest.raises(OffsetFileFormatError) as info:
        read_broker_offset_file(text, "consumerOffset.json")
    assert str(info.value).startswith(f"consumerOffset.json: line {line}, column {column}: ")
    assert (info.value.line, info.value.column) == (line, column)
    assert detail in info.value.detail


MQ_KEY = '{"brokerName":"b","queueId":0,"topic":"T"}'


@pytest.mark.parametrize(
    ("text", "line", "column", "detail"),
    [
        pytest.param(
            TRUNCATED_CLIENT, 7, 4, "expected a key (a quoted name, a number or an object), got the end", id="torn"
        ),
        pytest.param(
            '{"offsetTable":{"T":5}}',
            1,
            17,
            'expected a MessageQueue object {"brokerName":...,"queueId":...,"topic":...} as the key, got the string',
            id="string-key",
        ),
        pytest.param(
            '{"offsetTable":{\n{"brokerName":"b","queueId":0}:5}}',
            2,
            1,
            'MessageQueue key: missing key "topic"',
            id="missing-topic",
        ),
        pytest.param(
            '{"offsetTable":{{"brokerName":"b","queueId":"0","topic":"T"}:5}}',
            1,
            45,
            'MessageQueue key: queueId must be an integer (a Java int), got the string "0"',
            id="string-queue-id",
        ),
        pytest.param(
            '{"offsetTable":{{"brokerName":1,"queueId":0,"topic":"T"}:5}}',
            1,
            31,
            "MessageQueue key: brokerName must be a string, got the number 1",
            id="number-broker",
        ),
        pytest.param(
            '{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T","x":1}:5}}',
            1,
            59,
            'MessageQueue key: unexpected key "x" (expected brokerName, queueId, topic)',
            id="extra-field",
        ),
        pytest.param(
            '{"offsetTable":{{"brokerName":"b","queueId":0,"queueId":1,"topic":"T"}:5}}',
            1,
            47,
            'MessageQueue key: duplicate key "queueId"',
            id="duplicate-field",
        ),
        pytest.param(
            '{"offsetTable":{' + MQ_KEY + ":5,\n" + MQ_KEY + ":6}}",
            2,
            1,
            "duplicate entry for MessageQueue [topic=T, brokerName=b, queueId=0] (first at line 1, column 17)",
            id="duplicate-queue",
        ),
        pytest.param(
            '{"offsetTable":{' + MQ_KEY + ':"42"}}',
            1,
            60,
            "offset of MessageQueue [topic=T, brokerName=b, queueId=0] must be an integer (a Java long), got the str",
            id="string-offset",
        ),
        pytest.param('{"offsetTable":7}', 1, 16, "offsetTable must be an object keyed by MessageQueue", id="number"),
        pytest.param(
            '{"offsetTable":[\n{"topic":"T","brokerName":"b","queueId":0}]}',
            2,
            1,
            'entry 1: missing key "offset"',
            id="canonical-missing-offset",
        ),
        pytest.param('{"offsetTable":[5]}', 1, 17, "entry 1: expected an object with keys", id="canonical-number"),
    ],
)
def test_unreadable_client_files_are_refused_naming_file_line_column_and_expectation(
    text: str, line: int, column: int, detail: str
) -> None:
    with pytest.raises(OffsetFileFormatError) as info:
        read_client_offset_file(text, "offsets.json")
    assert str(info.value).startswith(f"offsets.json: line {line}, column {column}: ")
    assert (info.value.line, info.value.column) == (line, column)
    assert detail in info.value.detail


def test_column_counts_tabs_and_carriage_returns_as_one_character() -> None:
    with pytest.raises(OffsetFileFormatError) as info:
        read_broker_offset_file('{\r\n\t"offsetTable":{\r\n\t\t"T@G":{0:x}}}', "f")
    assert (info.value.line, info.value.column) == (3, 12)


# --- the file stores write the real format and read both (R1.16, R3.7) --------------------------------------------


def broker_file(root: Path) -> Path:
    return root / "config" / "consumerOffset.json"


def bak_of(path: Path) -> Path:
    return Path(f"{path}.bak")


def put_file(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode("utf-8"))


def test_consumer_offset_manager_persists_the_4_9_8_text_sorted() -> None:
    manager = ConsumerOffsetManager("/nonexistent")
    manager.commit_offset("h", "G", "T", 1, 45)
    manager.commit_offset("h", "G", "T", 0, 123)
    manager.commit_offset("h", "G", "%RETRY%G", 0, 0)
    assert manager.encode() == (
        '{\n\t"offsetTable":{\n\t\t"%RETRY%G@G":{0:0\n\t\t},\n\t\t"T@G":{0:123,1:45\n\t\t}\n\t}\n}'
    )


def test_consumer_offset_manager_loads_a_4_9_8_broker_file_and_writes_it_back_readable(tmp_path: Path) -> None:
    put_file(broker_file(tmp_path), fixture_text("consumerOffset-4.9.8.json"))
    manager = ConsumerOffsetManager(tmp_path)
    assert manager.load() is True
    assert manager.offset_table == BROKER_4_9_8_TABLE
    assert manager.query_offset("audit_group", "TopicTest", 0) == 9876543210
    manager.commit_offset("h", "order_consumer", "TopicTest", 0, 1300)
    manager.persist()
    assert read_broker_offset_file(broker_file(tmp_path).read_text())["TopicTest@order_consumer"][0] == 1300
    assert bak_of(broker_file(tmp_path)).read_text() == fixture_text("consumerOffset-4.9.8.json")


def test_consumer_offset_manager_loads_a_5x_broker_file(tmp_path: Path) -> None:
    put_file(broker_file(tmp_path), fixture_text("consumerOffset-5.x.json"))
    manager = ConsumerOffsetManager(tmp_path)
    assert manager.load() is True
    assert manager.query_offset("order_consumer", "TopicTest", 2) == 1251


def test_broker_load_falls_back_to_bak_when_main_is_a_torn_fastjson_file(tmp_path: Path) -> None:
    """R3.7: an unparsable main makes ``load`` use ``.bak``."""
    put_file(broker_file(tmp_path), TRUNCATED_BROKER)
    put_file(bak_of(broker_file(tmp_path)), fixture_text("consumerOffset-4.9.8.json"))
    manager = ConsumerOffsetManager(tmp_path)
    assert manager.load() is True
    assert manager.offset_table == BROKER_4_9_8_TABLE


def test_broker_load_fails_when_main_and_bak_are_both_torn_fastjson_files(tmp_path: Path) -> None:
    """R3.7: ``loadBak`` returns false when ``.bak`` does not decode, and the broker does not start."""
    put_file(broker_file(tmp_path), TRUNCATED_BROKER)
    put_file(bak_of(broker_file(tmp_path)), TRUNCATED_BROKER[:-20])
    manager = ConsumerOffsetManager(tmp_path)
    assert manager.load() is False
    assert manager.offset_table == {}


def test_canonical_broker_format_writes_strict_json_and_still_loads_fastjson(tmp_path: Path) -> None:
    manager = ConsumerOffsetManager(tmp_path, file_format="canonical")
    manager.commit_offset("h", "G", "T", 0, 5)
    manager.persist()
    assert json.loads(broker_file(tmp_path).read_text()) == {"offsetTable": {"T@G": {"0": 5}}}
    fastjson_manager = ConsumerOffsetManager(tmp_path)
    assert fastjson_manager.load() is True  # reads the canonical file
    fastjson_manager.persist()
    assert broker_file(tmp_path).read_text() == '{\n\t"offsetTable":{\n\t\t"T@G":{0:5\n\t\t}\n\t}\n}'
    assert manager.load() is True and manager.offset_table == {"T@G": {0: 5}}  # and back


def test_an_unknown_file_format_is_refused_by_both_stores() -> None:
    with pytest.raises(ValueError, match="unknown offset file format 'json'; expected one of fastjson, canonical"):
        ConsumerOffsetManager("/x", "json")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown offset file format 'xml'"):
        LocalFileOffsetStore(CLIENT_ID, GROUP, "/x", "xml")  # type: ignore[arg-type]


def client_store(tmp_path: Path, file_format: str = "fastjson") -> LocalFileOffsetStore:
    return LocalFileOffsetStore(CLIENT_ID, GROUP, tmp_path, file_format)  # type: ignore[arg-type]


def test_local_file_offset_store_loads_a_4_9_8_client_file(tmp_path: Path) -> None:
    store = client_store(tmp_path)
    put_file(store.store_path, fixture_text("offsets-4.9.8.json"))
    store.load()
    assert store.offset_table == CLIENT_4_9_8_TABLE
    assert store.read_offset(mq("broker-b", 1), ReadOffsetType.READ_FROM_STORE) == 252


def test_local_file_offset_store_persists_the_4_9_8_text_in_message_queue_order(tmp_path: Path) -> None:
    store = client_store(tmp_path)
    for queue, offset in CLIENT_4_9_8_TABLE.items():
        store.update_offset(queue, offset, False)
    store.persist_all(set(CLIENT_4_9_8_TABLE))
    assert store.store_path.read_text() == write_client_offset_file(dict(sorted(CLIENT_4_9_8_TABLE.items())))


def test_local_file_offset_store_falls_back_to_bak_when_main_is_a_torn_fastjson_file(tmp_path: Path) -> None:
    """R1.16 row 2, with the real format: ``.bak`` is used, and ``persist_all`` merges into it."""
    store = client_store(tmp_path)
    put_file(store.store_path, TRUNCATED_CLIENT)
    put_file(bak_of(store.store_path), fixture_text("offsets-4.9.8.json"))
    store.load()
    assert store.offset_table == CLIENT_4_9_8_TABLE
    store.update_offset(mq("broker-c", 0), 7, False)
    store.persist_all({mq("broker-c", 0)})
    assert read_client_offset_file(store.store_path.read_text()) == CLIENT_4_9_8_TABLE | {mq("broker-c", 0): 7}
    assert mixall.file2string(bak_of(store.store_path)) == TRUNCATED_CLIENT  # the torn main was copied over .bak


def test_local_file_offset_store_refuses_to_start_when_both_files_are_torn(tmp_path: Path) -> None:
    """R1.16 row 4, with the real format."""
    store = client_store(tmp_path)
    put_file(store.store_path, TRUNCATED_CLIENT)
    put_file(bak_of(store.store_path), TRUNCATED_CLIENT)
    with pytest.raises(MQClientException):
        store.load()


def test_client_files_of_either_format_are_interchangeable_between_stores(tmp_path: Path) -> None:
    canonical = client_store(tmp_path, "canonical")
    canonical.update_offset(mq("a", 0), 5, False)
    canonical.persist_all({mq("a", 0)})
    assert json.loads(canonical.store_path.read_text())["offsetTable"][0]["offset"] == 5
    real = client_store(tmp_path)
    real.load()
    assert real.offset_table == {mq("a", 0): 5}
    real.update_offset(mq("a", 1), 6, False)
    real.persist_all({mq("a", 1)})
    assert canonical.store_path.read_text() == write_client_offset_file({mq("a", 0): 5, mq("a", 1): 6})
    assert canonical.read_offset(mq("a", 1), ReadOffsetType.READ_FROM_STORE) == 6
