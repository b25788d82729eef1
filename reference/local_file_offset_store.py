"""``LocalFileOffsetStore`` of RocketMQ 4.9.8: a BROADCASTING consumer's offsets in a local file.

Mirrors R1.5–R1.16: an in-memory table ``MessageQueue -> offset`` backed by
``<dir>/<clientId>/<group>/offsets.json`` (R1.7), written with the crash-safe ``mixall.string2file``
and read with the 4.9.8 fall-back to ``offsets.json.bak`` (R1.10). The file is written by default in
the text a 4.9.8 client writes (``fastjson_format``, R1.8; ``file_format="canonical"`` selects the
strict JSON of ``offset_serialize``) and read in either format, so a real client's file and ours can
replace each other. What happens for each combination of damaged files is the R1.16 table;
the tests check it row by row.

``<dir>`` stands for the Java system property ``rocketmq.client.localOffsetStoreDir``; here it is a
constructor argument, defaulting to the environment variable ``ROCKETMQ_CLIENT_LOCAL_OFFSET_STORE_DIR``
or else ``~/.rocketmq_offsets`` (read when the store is created, not once per process as in Java).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Final

from rmqspec.reference import mixall
from rmqspec.reference.exceptions import MQClientException
from rmqspec.reference.fastjson_format import (
    DEFAULT_OFFSET_FILE_FORMAT,
    OffsetFileFormat,
    check_file_format,
    encode_client_offset_file,
    read_client_offset_file,
)
from rmqspec.reference.message_queue import MessageQueue
from rmqspec.reference.mixall import StrPath
from rmqspec.reference.offset_serialize import OffsetFileFormatError
from rmqspec.reference.offset_store import OffsetStore, ReadOffsetType, update_offset_table

LOCAL_OFFSET_STORE_DIR_ENV: Final = "ROCKETMQ_CLIENT_LOCAL_OFFSET_STORE_DIR"
DEFAULT_LOCAL_OFFSET_STORE_DIR_NAME: Final = ".rocketmq_offsets"
OFFSETS_FILE_NAME: Final = "offsets.json"
READ_LOCAL_OFFSET_BAK_ERROR: Final = "readLocalOffset Exception, maybe fastjson version too low"

log = logging.getLogger(__name__)


def default_local_offset_store_dir() -> Path:
    """``LOCAL_OFFSET_STORE_DIR`` (R1.7, §14): the env variable if non-empty, else ``~/.rocketmq_offsets``."""
    configured = os.environ.get(LOCAL_OFFSET_STORE_DIR_ENV)
    return Path(configured) if configured else Path.home() / DEFAULT_LOCAL_OFFSET_STORE_DIR_NAME


def _is_blank(text: str | None) -> bool:
    """``UtilAll.isBlank``: None, empty or only whitespace."""
    return text is None or not text.strip()


class LocalFileOffsetStore(OffsetStore):
    """The 4.9.8 ``LocalFileOffsetStore`` (R1.5–R1.16).

    ``file_format`` is what ``persist`` and ``persist_all`` write: ``"fastjson"`` (the 4.9.8 text,
    default) or ``"canonical"``.
    """

    def __init__(
        self,
        client_id: str,
        group_name: str,
        local_offset_store_dir: StrPath | None = None,
        file_format: OffsetFileFormat = DEFAULT_OFFSET_FILE_FORMAT,
    ) -> None:
        base = default_local_offset_store_dir() if local_offset_store_dir is None else Path(local_offset_store_dir)
        self.file_format = check_file_format(file_format)
        self.client_id = client_id
        self.group_name = group_name
        self.store_path: Path = base / client_id / group_name / OFFSETS_FILE_NAME  # R1.7
        self.offset_table: dict[MessageQueue, int] = {}  # R1.4
        self._lock = threading.Lock()  # stands for the AtomicLong CAS of R1.5
        # docs/spec.md, "What is real, ranked": the driver asks the next persist_all to stop before string2File (its
        # thread is slow to write), and keeps what it read and merged until ``write_pending`` runs
        self.lag_next_persist_all = False
        self.pending_write: tuple[dict[MessageQueue, int], dict[MessageQueue, int]] | None = None

    # --- memory --------------------------------------------------------------------------------------

    def update_offset(self, mq: MessageQueue | None, offset: int, increase_only: bool) -> None:
        """R1.5: None is ignored; a new entry is inserted as given; else ``max`` or overwrite."""
        if mq is None:
            return
        with self._lock:
            update_offset_table(self.offset_table, mq, offset, increase_only)

    def remove_offset(self, mq: MessageQueue) -> None:
        """R1.14: drop the memory entry only; the file keeps it."""
        with self._lock:
            self.offset_table.pop(mq, None)

    def clone_offset_table(self, topic: str | None) -> dict[MessageQueue, int]:
        """R1.6: a copy of every entry when ``topic`` is blank, else of that topic's entries."""
        with self._lock:
            items = list(self.offset_table.items())
        return {mq: offset for mq, offset in items if _is_blank(topic) or mq.topic == topic}

    def update_consume_offset_to_broker(self, mq: MessageQueue, offset: int, is_oneway: bool) -> None:
        """R1.14: always a no-op for the local store."""

    # --- file ----------------------------------------------------------------------------------------

    def load(self) -> None:
        """R1.9: add the file's entries to memory (existing entries are not cleared).

        Raises ``MQClientException`` when main and ``.bak`` are both unparsable (R1.16 row 4).
        """
        table = self.read_local_offset()
        if table is None:
            return
        with self._lock:
            self.offset_table.update(table)
        for mq, offset in table.items():
            log.info("load consumer's offset, %s %s %d", self.group_name, mq, offset)

    def read_offset(self, mq: MessageQueue | None, type: ReadOffsetType) -> int:
        """R1.11: -1 when there is no offset; never -2.

        READ_FROM_STORE reads the file and overwrites memory with the file value (increase_only=False).
        """
        if mq is None:
            return -1
        if type is not ReadOffsetType.READ_FROM_STORE:
            in_memory = self.offset_table.get(mq)
            if in_memory is not None:
                return in_memory
            if type is ReadOffsetType.READ_FROM_MEMORY:
                return -1
        try:
            table = self.read_local_offset()
        except MQClientException:
            return -1
        if table is None or mq not in table:
            return -1
        offset = table[mq]
        self.update_offset(mq, offset, False)
        return offset

    def persist_all(self, mqs: AbstractSet[MessageQueue] | None) -> None:
        """R1.12 (4.9.8 merge): write the memory entries of ``mqs`` over the file's, keeping the rest.

        Returns without writing when the file cannot be read (R1.16 row 4). Memory entries outside
        ``mqs`` are neither written nor removed.
        """
        if not mqs:
            return
        try:
            table = self.read_local_offset()
        except MQClientException as e:
            log.error("persistAll consumer offset Exception, %s: %s", self.store_path, e)
            return
        merged = {} if table is None else dict(table)
        with self._lock:
            merged.update((mq, offset) for mq, offset in self.offset_table.items() if mq in mqs)
        if self.lag_next_persist_all:  # the write comes later, over whatever other writers write meanwhile
            self.lag_next_persist_all = False
            self.pending_write = ({} if table is None else dict(table), merged)
            return
        self._write(merged)

    def write_pending(self) -> None:
        """The lagging persistAll's ``string2File`` runs: the table it merged replaces the file, undoing what
        ``persist`` (or another persistAll) wrote since its read; nothing locks the file (docs/spec.md, "What is real,
        ranked")."""
        if self.pending_write is None:
            raise RuntimeError("no persistAll waits to write")
        _, merged = self.pending_write
        self.pending_write = None
        self._write(merged)

    def persist(self, mq: MessageQueue) -> None:
        """R1.13: merge the one memory entry of ``mq`` into the file; nothing if memory lacks ``mq``."""
        offset = self.offset_table.get(mq)
        if offset is None:
            return
        try:
            table = self.read_local_offset()
        except MQClientException as e:
            log.error("persist consumer offset Exception, %s: %s", self.store_path, e)
            return
        merged = {} if table is None else dict(table)
        merged[mq] = offset
        self._write(merged)

    def _write(self, table: dict[MessageQueue, int]) -> None:
        try:
            mixall.string2file(encode_client_offset_file(table, self.file_format), self.store_path)
        except OSError as e:  # IOException is logged, not raised (R1.12 step 4)
            log.error("persist consumer offset Exception, %s: %s", self.store_path, e)

    def read_local_offset(self) -> dict[MessageQueue, int] | None:
        """R1.10 ``readLocalOffset``: main if non-empty and parsable, otherwise ``read_local_offset_bak``."""
        content = mixall.file2string(self.store_path)
        if not content:
            return self.read_local_offset_bak()
        try:
            return read_client_offset_file(content, str(self.store_path))
        except OffsetFileFormatError as e:
            log.warning("readLocalOffset Exception, and try to correct: %s", e)
            return self.read_local_offset_bak()

    def read_local_offset_bak(self) -> dict[MessageQueue, int] | None:
        """R1.10 ``readLocalOffsetBak``: None when ``.bak`` is missing or empty; raises if unparsable."""
        bak_path = f"{self.store_path}.bak"
        content = mixall.file2string(bak_path)
        if not content:
            return None
        try:
            return read_client_offset_file(content, bak_path)
        except OffsetFileFormatError as e:
            raise MQClientException(READ_LOCAL_OFFSET_BAK_ERROR) from e
