"""The model's configuration: what is being checked, how large, and with which fault budgets.

A :class:`Config` fixes everything the model does not choose by itself: the number of consumers and
queues, the consumption mode and strategy, where a new group starts, the RocketMQ constants that a
small model needs scaled down (batch sizes, thresholds), the budgets of the perturbing actions, and
the planted bugs (``mutations``) a test wants the checker to refute. Every value is validated on
construction; a bad one raises :class:`ConfigError` naming the field and what it accepts.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Final

# Message models and strategies the model explores (semantics R1.3, R11.1-R11.3).
CLUSTERING: Final = "CLUSTERING"
BROADCASTING: Final = "BROADCASTING"
MODES: Final = (CLUSTERING, BROADCASTING)

AVG: Final = "AVG"
AVG_BY_CIRCLE: Final = "AVG_BY_CIRCLE"
CONSISTENT_HASH: Final = "CONSISTENT_HASH"
STRATEGIES: Final = (AVG, AVG_BY_CIRCLE, CONSISTENT_HASH)

# ConsumeFromWhere (R10.1). The three deprecated values behave exactly like LAST in 4.9.8.
FROM_LAST: Final = "CONSUME_FROM_LAST_OFFSET"
FROM_FIRST: Final = "CONSUME_FROM_FIRST_OFFSET"
FROM_TIMESTAMP: Final = "CONSUME_FROM_TIMESTAMP"
DEPRECATED_AS_LAST: Final = (
    "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
    "CONSUME_FROM_MIN_OFFSET",
    "CONSUME_FROM_MAX_OFFSET",
)
CONSUME_FROM_WHERE: Final = (FROM_LAST, FROM_FIRST, FROM_TIMESTAMP, *DEPRECATED_AS_LAST)

VERSIONS: Final = ("4.9.8",)

# Planted bugs, each described by what it breaks; tests/test_planted_bugs.py names the property that
# must refute each one and proves it does.
MUTATIONS: Final[dict[str, str]] = {
    "watermark_highest_consumed": "RMQ-01: removeMessage returns highest removed + 1 instead of lowest held",
    "commit_before_send_back": "RMQ-03: messages whose send-back failed are removed and committed anyway",
    "dropped_pq_commits": "RMQ-05: processConsumeResult still updates the offset of a dropped pq",
    "ignore_increase_only": "updateOffset overwrites even when increaseOnly is true (R1.5)",
    "no_persist_all_pruning": "remote persistAll keeps memory entries of queues it no longer owns (R2.7)",
    "local_remove_offset_deletes_file": "LocalFileOffsetStore.removeOffset also deletes the file entry (R1.14)",
    "broker_answers_minus_one": "QUERY_CONSUMER_OFFSET answers SUCCESS(-1) for a group with no offset (R3.5)",
    "dlq_one_retry_late": "send-back routes to the DLQ only when reconsumeTimes > max (R7.5)",
    "piggyback_next_offset": "the pull piggy-backs the pull cursor instead of the stored offset (R5.2)",
    "count_not_decremented": "ProcessQueue.removeMessage forgets to decrement msgCount (R6.3)",
    "commit_past_cached": "removeMessage returns queueOffsetMax + 2 when the tree empties (R6.3)",
    "resume_ignores_stored_offset": "computePullFromWhere ignores the broker offset and uses consumeFromWhere",
    "avg_blocks_overlap": "AVG gives every consumer a block starting one queue early (R11.1)",
}


class ConfigError(ValueError):
    """A configuration value is out of range; the message names the field and what is accepted."""


@dataclass(frozen=True, slots=True)
class Config:
    """What the model checks. Defaults are RocketMQ 4.9.8's where RocketMQ has one.

    The scaled-down values are chosen so that a random walk of a few hundred steps reaches the
    interesting states: a pull batch of 2 with at most 4 cached messages per queue makes flow
    control and partially consumed batches common, where RocketMQ's 32 and 1000 would need
    thousands of messages.
    """

    consumers: int = 2
    queues: int = 4
    messages_per_queue: int = 4  # how many Produce actions each queue of the topic accepts
    backlog: int = 0  # messages already in each queue at time 0 (counted in messages_per_queue)
    backlog_head_hot: bool = True  # is message 0 of a backlog still in page cache (R3.5)?
    mode: str = CLUSTERING
    strategy: str = AVG
    consume_from_where: str = FROM_LAST
    consume_timestamp: int = 0  # logical ms; CONSUME_FROM_TIMESTAMP looks it up (R10.3)
    pull_batch_size: int = 2  # RocketMQ: 32 (R5.2)
    consume_batch_size: int = 1  # consumeMessageBatchMaxSize, RocketMQ default 1 (R7.1)
    pull_threshold_for_queue: int = 4  # RocketMQ: 1000 (R5.1)
    max_reconsume_times: int = 16  # -1 means 16 for concurrent consumers (R7.4)
    tags: tuple[str, ...] = ("A",)  # tags producers attach
    subscription: tuple[str, ...] | None = None  # None is "*"; otherwise the subscribed tags
    virtual_node_cnt: int = 10  # consistent hash (R11.3)
    client_crashes: int = 1
    client_shutdowns: int = 1
    broker_crashes: int = 1
    send_back_failures: int = 1
    version: str = "4.9.8"
    group: str = "G"
    topic: str = "T"
    broker_name: str = "broker-a"
    mutations: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        _check_range("consumers", self.consumers, 1, 8)
        _check_range("queues", self.queues, 1, 32)
        _check_range("messages_per_queue", self.messages_per_queue, 0, 60)
        _check_range("backlog", self.backlog, 0, self.messages_per_queue)
        _check_choice("mode", self.mode, MODES)
        _check_choice("strategy", self.strategy, STRATEGIES)
        _check_choice("consume_from_where", self.consume_from_where, CONSUME_FROM_WHERE)
        _check_range("consume_timestamp", self.consume_timestamp, 0, 10**12)
        _check_range("pull_batch_size", self.pull_batch_size, 1, 1024)
        _check_range("consume_batch_size", self.consume_batch_size, 1, 1024)
        _check_range("pull_threshold_for_queue", self.pull_threshold_for_queue, 1, 65535)
        if self.max_reconsume_times != -1:
            _check_range("max_reconsume_times", self.max_reconsume_times, 0, 16)
        if not self.tags or any(not t for t in self.tags):
            raise ConfigError(f"tags: got {self.tags!r}; accepted: a non-empty tuple of non-empty strings")
        if self.subscription is not None and not self.subscription:
            raise ConfigError("subscription: got (); accepted: None (meaning '*') or a non-empty tuple of tags")
        _check_range("virtual_node_cnt", self.virtual_node_cnt, 1, 1000)
        for budget in ("client_crashes", "client_shutdowns", "broker_crashes", "send_back_failures"):
            _check_range(budget, getattr(self, budget), 0, 100)
        _check_choice("version", self.version, VERSIONS)
        for name in ("group", "topic", "broker_name"):
            value = getattr(self, name)
            if not value or "@" in value:
                raise ConfigError(f"{name}: got {value!r}; accepted: a non-empty name without '@'")
        unknown = sorted(set(self.mutations) - set(MUTATIONS))
        if unknown:
            raise ConfigError(f"mutations: unknown {unknown}; accepted: {sorted(MUTATIONS)}")

    @property
    def effective_max_reconsume_times(self) -> int:
        """-1 means 16 for a concurrent consumer (R7.4)."""
        return 16 if self.max_reconsume_times == -1 else self.max_reconsume_times

    @property
    def retry_topic(self) -> str:
        return "%RETRY%" + self.group

    @property
    def dlq_topic(self) -> str:
        return "%DLQ%" + self.group

    @property
    def has_retry_queue(self) -> bool:
        """CLUSTERING push consumers also subscribe to %RETRY%<group> (R7.8)."""
        return self.mode == CLUSTERING

    @property
    def queue_count(self) -> int:
        """Queues the model tracks: the topic's, plus the retry topic's one queue in CLUSTERING."""
        return self.queues + (1 if self.has_retry_queue else 0)

    @classmethod
    def from_mapping(cls, values: dict[str, object], where: str = "config") -> Config:
        """Build a Config from parsed JSON/TOML, naming unknown keys and wrong types."""
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ConfigError(f"{where}: unknown field(s) {unknown}; accepted: {sorted(known)}")
        converted: dict[str, object] = {}
        for key, value in values.items():
            if key in ("tags", "subscription") and isinstance(value, list):
                value = tuple(value)
            if key == "mutations" and isinstance(value, list):
                value = frozenset(value)
            converted[key] = value
        try:
            return cls(**converted)  # type: ignore[arg-type]
        except TypeError as err:
            raise ConfigError(f"{where}: {err}") from None


def _check_range(name: str, value: object, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(f"{name}: got {value!r}; accepted: an integer from {low} to {high}")


def _check_choice(name: str, value: object, accepted: tuple[str, ...]) -> None:
    if value not in accepted:
        raise ConfigError(f"{name}: got {value!r}; accepted: {', '.join(accepted)}")
