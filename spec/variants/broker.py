"""Planted bugs of the broker (``spec/broker.py``): its offset table and QUERY_CONSUMER_OFFSET."""

from __future__ import annotations

from rmqspec.spec.broker import CHANNEL_EXPIRED_TIMEOUT
from rmqspec.spec.state import Broker, State
from rmqspec.spec.variants import Variant, planted


@planted("broker_answers_minus_one", breaks=("R3.5",), refuted_by=("INV-7",))
class BrokerAnswersMinusOne(Variant):
    """QUERY_CONSUMER_OFFSET answers SUCCESS(-1) where the correct broker answers 0 or QUERY_NOT_FOUND."""

    def _query_consumer_offset(self, b: Broker, q: int) -> int | None:
        stored = b.offsets[q]
        return stored if stored is not None and stored >= 0 else -1


@planted("empty_group_loses_offsets", breaks=("R3.1", "R10.4"), refuted_by=("INV-9a",))
class EmptyGroupLosesOffsets(Variant):
    """The master forgets the group's offsets when its last consumer leaves."""

    def _last_consumer_left(self, s: State) -> State:
        return s._replace(broker=s.broker._replace(offsets=(None,) * self.q_count))


@planted("update_offset_stores_one_less", breaks=("R3.2", "R5.4"), refuted_by=("INV-8r",))
class UpdateOffsetStoresOneLess(Variant):
    """updateConsumerOffset stores commitOffset - 1 (a positive one) for an UPDATE_CONSUMER_OFFSET."""

    def _stored_commit_offset(self, offset: int) -> int:
        return offset - 1 if offset > 0 else offset


@planted("channel_expiry_in_seconds", breaks=("R4.3",), refuted_by=("INV-38",))
class ChannelExpiryInSeconds(Variant):
    """The idle-channel scan reads its 120 s timeout as a number of seconds against a lastUpdateTimestamp in
    milliseconds: a silent consumer's channel is closed 120 ms after its last heartbeat, not 120 s."""

    def _channel_expired_timeout(self) -> int:
        return CHANNEL_EXPIRED_TIMEOUT // 1000
