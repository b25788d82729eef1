"""The ninth held-out set (docs/held_out.md, "The ninth set: written apart from the search"): a bug of the broker's
client housekeeping from RocketMQ's pre-Apache history, fixed by a commit that gave the consumer table the
idle-channel scan the producer table already had. Planted by what the code did before its fix (the registry's
``citation``), overriding two helpers of the model. Written apart from the search: nothing about the search or its
properties was read to choose or plant it, and its catch figures were read once, when the set was measured
(``HeldOutBug.figures_seen`` True)."""

from __future__ import annotations

from rmqspec.spec.actions import ExpireChannel
from rmqspec.spec.state import State
from rmqspec.spec.variants import Variant
from rmqspec.spec.variants.held_out import HeldOutBug, held_out

# figures_seen of every bug of this module: their catch figures were read when the ninth set judged INV-2b and INV-33
# (docs/held_out.md, "The ninth set, measured"), so they judge no later change of the search or the properties
_FIGURES_SEEN = True


@held_out(
    "consumer_channels_never_scanned",
    HeldOutBug(
        "the broker's ClientHousekeepingService scans only the producer table for channels idle past 120 s: a "
        "consumer whose heartbeats stopped while its connection stays open (its heartbeat task died, the process "
        "still pulling and committing) stays in the group's channel table for good, so every rebalance of the group "
        "keeps dealing it its queues; only a channel with no traffic at all (a paused process) goes, by Netty's idle "
        "handler, as a closed connection: the broker removes it and tells the other members, where the scan removes "
        "it without telling anyone",
        ("R4.3",),
        "apache/rocketmq commit 4d96925c1f (2013-09-24, '#258 Consumer连接管理没有定时检查不可能的连接。', "
        "RocketMQ's internal issue #258, the consumer connection management did not scan for dead connections: "
        "ClientHousekeepingService.scanExceptionChannel called only ProducerManager.scanNotActiveChannel; the fix "
        "added ConsumerManager.scanNotActiveChannel, which closes and removes every consumer channel whose "
        "lastUpdateTimestamp is more than 120 s old, and called it from the same 10 s task)",
        (),
        _FIGURES_SEEN,
    ),
)
class ConsumerChannelsNeverScanned(Variant):
    """The broker's idle-channel scan does not cover consumers. A running consumer's channel expires only when the
    process is paused (no traffic: Netty's ALL_IDLE event), and then as a close event (``doChannelCloseEvent``):
    unregistered, its requests on the wire lost, its pulls failed, and the group's other members told. A consumer
    that still pulls but no longer heartbeats is never expired. A gone process is unchanged (its connection closes)."""

    def _channel_idle(self, s: State, i: int) -> bool:
        return self._stalled(s, s.clients[i]) and super()._channel_idle(s, i)

    def _expire_channel(self, s: State, a: ExpireChannel) -> State:
        running = s.clients[a.client].running
        t = super()._expire_channel(s, a)
        if not running:
            return t
        t = self._notify(t)  # doChannelCloseEvent: unregisterChannel, then CHANGE to the remaining channels
        if not t.broker.registered:
            t = self._last_consumer_left(t)
        return t
