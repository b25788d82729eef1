"""The broker's ``ConsumerOffsetManager`` of RocketMQ 4.9.8: committed offsets and their JSON file.

Mirrors R3.1–R3.3 (table, ``commitOffset``, ``queryOffset``), R3.6 (``ConfigManager.persist`` to
``<storePathRootDir>/config/consumerOffset.json``) and R3.7 (``ConfigManager.load`` with the
fall-back to ``.bak``). The file is written with the crash-safe ``mixall.string2file``, by default in
the text a 4.9.8 broker writes (``fastjson_format``; ``file_format="canonical"`` selects the strict
JSON of ``offset_serialize``), so a real broker's file and ours can replace each other. Loading
reads either format, whatever ``file_format`` says. Request handlers, slave sync and removal (R3.4,
R3.5, R3.8, R3.9) are not part of this class.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Final

from rmqspec.reference import mixall
from rmqspec.reference.fastjson_format import (
    DEFAULT_OFFSET_FILE_FORMAT,
    OffsetFileFormat,
    check_file_format,
    encode_broker_offset_file,
    read_broker_offset_file,
)
from rmqspec.reference.mixall import StrPath
from rmqspec.reference.offset_serialize import TOPIC_GROUP_SEPARATOR, OffsetFileFormatError

CONFIG_DIR_NAME: Final = "config"
CONSUMER_OFFSET_FILE_NAME: Final = "consumerOffset.json"

log = logging.getLogger(__name__)


def get_consumer_offset_path(store_path_root_dir: StrPath) -> Path:
    """``BrokerPathConfigHelper.getConsumerOffsetPath`` (R3.6)."""
    return Path(store_path_root_dir) / CONFIG_DIR_NAME / CONSUMER_OFFSET_FILE_NAME


def split_topic_at_group(key: str) -> tuple[str, str] | None:
    """(topic, group) of a table key as 4.9.8 splits it, or None where 4.9.8 skips the key (R3.1).

    ``scanUnsubscribedTopic``, ``whichTopicByConsumer`` and ``removeOffset`` take
    ``key.split("@")`` and use the key only when that gives exactly two parts. Topic and group names
    may not contain ``@`` (``^[%|a-zA-Z0-9_-]+$``), so for every key a client can produce this is
    the split at the one ``@``. A key with more ``@`` is not split at the first or the last one: it is
    skipped. Java's ``split`` drops trailing empty parts, so ``"T@G@"`` still counts as ``("T", "G")``.
    """
    parts = key.split(TOPIC_GROUP_SEPARATOR)
    while parts and not parts[-1]:
        parts.pop()
    if len(parts) != 2:
        return None
    return parts[0], parts[1]


class ConsumerOffsetManager:
    """The 4.9.8 broker offset table ``"topic@group" -> {queue_id: offset}`` (R3.1) and its file.

    ``file_format`` is what ``persist`` writes: ``"fastjson"`` (the 4.9.8 text, default) or
    ``"canonical"``.
    """

    def __init__(
        self, store_path_root_dir: StrPath, file_format: OffsetFileFormat = DEFAULT_OFFSET_FILE_FORMAT
    ) -> None:
        self.store_path_root_dir = Path(store_path_root_dir)
        self.file_format = check_file_format(file_format)
        self.offset_table: dict[str, dict[int, int]] = {}
        # admin reset: 5.x ``resetOffsetTable``, memory only (R3.10b)
        self.reset_offset_table: dict[str, dict[int, int]] = {}
        self._persist_lock = threading.Lock()  # ConfigManager#persist is synchronized

    def config_file_path(self) -> Path:
        """``ConfigManager#configFilePath``: ``<storePathRootDir>/config/consumerOffset.json``."""
        return get_consumer_offset_path(self.store_path_root_dir)

    # --- table ---------------------------------------------------------------------------------------

    def commit_offset(self, client_host: str, group: str, topic: str, queue_id: int, offset: int) -> None:
        """R3.2: store ``offset`` unconditionally (last writer wins); a lower value only logs a warning."""
        key = topic + TOPIC_GROUP_SEPARATOR + group
        queues = self.offset_table.setdefault(key, {})
        previous = queues.get(queue_id)
        queues[queue_id] = offset
        if previous is not None and offset < previous:
            log.warning(
                "[NOTIFYME]update consumer offset less than store. clientHost=%s, key=%s, queueId=%d, "
                "requestOffset=%d, storeOffset=%d",
                client_host,
                key,
                queue_id,
                offset,
                previous,
            )

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """R3.3: the stored offset, or -1 when the key or the queue is absent; a pending 5.x reset
        (R3.10b) is answered first."""
        pending = self.reset_offset_table.get(topic + TOPIC_GROUP_SEPARATOR + group, {}).get(queue_id)
        if pending is not None:
            return pending
        return self.offset_table.get(topic + TOPIC_GROUP_SEPARATOR + group, {}).get(queue_id, -1)

    # admin reset: the 5.x server-side reset (R3.10b steps 4-6)
    def assign_reset_offset(self, topic: str, group: str, queue_id: int, offset: int) -> None:
        """R3.10b step 4: ignore blank names, a negative queue or offset; else record the pending reset
        and overwrite the offset table."""
        if not topic or not group or queue_id < 0 or offset < 0:
            return
        key = topic + TOPIC_GROUP_SEPARATOR + group
        self.reset_offset_table.setdefault(key, {})[queue_id] = offset
        self.offset_table.setdefault(key, {})[queue_id] = offset

    def has_offset_reset(self, topic: str, group: str, queue_id: int) -> bool:
        """R3.10b step 5, R3.4: a reset of that queue is pending."""
        return queue_id in self.reset_offset_table.get(topic + TOPIC_GROUP_SEPARATOR + group, {})

    def query_then_erase_reset_offset(self, topic: str, group: str, queue_id: int) -> int | None:
        """R3.10b step 6: the pending reset of that queue, taken out of the table (None if none)."""
        return self.reset_offset_table.get(topic + TOPIC_GROUP_SEPARATOR + group, {}).pop(queue_id, None)

    def clone_table(self) -> dict[str, dict[int, int]]:
        """A deep copy of the table, for snapshots (changing it does not touch the manager)."""
        return {key: dict(queues) for key, queues in self.offset_table.items()}

    # --- file (ConfigManager) ----------------------------------------------------------------------------

    def encode(self) -> str:
        """The file text of the current table in ``file_format``, keys and queue ids sorted."""
        return encode_broker_offset_file(self.clone_table(), self.file_format)

    def decode(self, json_string: str, source: str = "<string>") -> None:
        """Replace the table by the file's, in either format (as the Java ``decode`` assigns ``offsetTable``).

        Raises ``OffsetFileFormatError`` and then leaves the table unchanged.
        """
        self.offset_table = read_broker_offset_file(json_string, source)

    def persist(self) -> None:
        """R3.6 ``ConfigManager.persist``: write the table with ``string2file``; an ``OSError`` is logged."""
        with self._persist_lock:
            path = self.config_file_path()
            try:
                mixall.string2file(self.encode(), path)
            except OSError as e:
                log.error("persist file %s exception: %s", path, e)

    def load(self) -> bool:
        """R3.7 ``ConfigManager.load``: main if non-empty and parsable, otherwise ``load_bak()``."""
        path = self.config_file_path()
        content = mixall.file2string(path)
        if not content:
            return self.load_bak()
        try:
            self.decode(content, str(path))
        except OffsetFileFormatError as e:
            log.error("load %s failed, and try to load backup file: %s", path, e)
            return self.load_bak()
        log.info("load %s OK", path)
        return True

    def load_bak(self) -> bool:
        """R3.7 ``ConfigManager.loadBak``: parse ``.bak`` if non-empty (False if unparsable).

        A missing or empty ``.bak`` gives True and leaves the table as it is, which for a broker
        that is starting up means empty: every group then looks new (R3.5, RMQ-21).
        """
        bak_path = f"{self.config_file_path()}.bak"
        content = mixall.file2string(bak_path)
        if not content:
            return True
        try:
            self.decode(content, bak_path)
        except OffsetFileFormatError as e:
            log.error("load %s failed: %s", bak_path, e)
            return False
        log.info("load %s OK", bak_path)
        return True
