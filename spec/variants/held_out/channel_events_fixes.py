"""The tenth held-out set (docs/held_out.md, "The tenth set: written apart from the search"): bugs of the broker's
consumer table in mxsm/rocketmq-rust, each a request or event the Rust broker received and did nothing with until a
later commit made it do what Apache RocketMQ's ``ConsumerManager`` does. Planted by what the code did before its fix
(the registry's ``citation``), overriding helpers of the model. Written apart from the search: nothing about the search
or its properties was read to choose or plant them, and their catch figures were read once, when the set was measured
(``HeldOutBug.figures_seen`` True)."""

from __future__ import annotations

from rmqspec.spec.actions import ExpireChannel
from rmqspec.spec.broker import CHANNEL_EXPIRED_TIMEOUT
from rmqspec.spec.state import Commit, Event, History, State
from rmqspec.spec.state import put_at as _put
from rmqspec.spec.variants import Variant
from rmqspec.spec.variants.held_out import HeldOutBug, held_out

# figures_seen of every bug of this module: their catch figures were read when the tenth set judged INV-34
# (docs/held_out.md, "The tenth set, measured"), so they judge no later change of the search or the properties
_FIGURES_SEEN = True


@held_out(
    "channel_close_keeps_consumer",
    HeldOutBug(
        "the broker's ConsumerManager does nothing on a channel's close event: a consumer whose process is gone (a "
        "crash, a connection that closed) stays in the group's channel table, so the others keep dealing it its "
        "queues and nobody is told to rebalance; the channel goes only by the idle-channel scan, 120 s after its "
        "last heartbeat, which removes it without telling the group, so the remaining members take its queues only "
        "at their next periodic rebalance",
        ("R4.3", "R9.7"),
        "mxsm/rocketmq-rust issue #3082, PR #3083 '[ISSUE #3082] Implement ConsumerManager#do_channel_close_event "
        "method' (commit 2da9ceadd, 2025-04-11): `ConsumerManager::do_channel_close_event` was an empty body; the fix "
        "removes the channel from every group that lists it, fires CLIENT_UNREGISTER, a CHANGE to the remaining "
        "channels (CLUSTERING) and UNREGISTER for a group left empty, as Apache RocketMQ's doChannelCloseEvent does; "
        "the idle-channel scan (#3073, 91066c80c) and the housekeeping task that runs it (#3080, 2312ba89a) had "
        "landed earlier the same day",
        ("INV-30",),
        _FIGURES_SEEN,
    ),
)
class ChannelCloseKeepsConsumer(Variant):
    """The master ignores the close of a gone process's channel. The channel goes only by scanNotActiveChannel: once
    its last heartbeat is more than 120 s old (in a configuration that does not time heartbeats, the scan is untimed:
    any time), removed and closed without a notification, what the process left on the wire lost. The slave's table
    is the correct model's (the model times no slave channel). A running consumer's expiry is unchanged."""

    def _channel_expirable(self, s: State, i: int) -> bool:
        if s.clients[i].running:
            return super()._channel_expirable(s, i)
        b, sl = s.broker, s.slave
        scanned = (
            b.up and i in b.registered and (not b.heartbeat_at or s.now - b.heartbeat_at[i] > CHANNEL_EXPIRED_TIMEOUT)
        )
        return scanned or (sl is not None and i in sl.registered)

    def _expire_channel(self, s: State, a: ExpireChannel) -> State:
        i = a.client
        cl = s.clients[i]
        if cl.running:
            return super()._expire_channel(s, a)
        if not self._channel_expirable(s, i):
            return super()._expire_channel(s, a)  # refuses: no stale channel
        b, sl = s.broker, s.slave
        if b.up and i in b.registered and (not b.heartbeat_at or s.now - b.heartbeat_at[i] > CHANNEL_EXPIRED_TIMEOUT):
            # scanNotActiveChannel: removed and closed, nobody told; what was on the wire is lost
            hist = s.history
            for item in cl.channel:
                if isinstance(item, Commit):
                    hist = History(Event(s.now, "commit-lost", i, item.queue, item.offset, item.cause), hist)
            s = s._replace(
                broker=self._unregister(b, i),
                clients=_put(s.clients, i, cl._replace(channel=())),
                history=hist,
                ghost=self._lost_overtaken(s.ghost, i),
            )
        if sl is not None and i in sl.registered:  # the slave closes the channel and tells its members
            s = self._notify(s._replace(slave=sl._replace(registered=sl.registered - {i})), slave=True)
        return s


@held_out(
    "consumer_unregister_unimplemented",
    HeldOutBug(
        "the broker does not handle UNREGISTER_CLIENT for a consumer group (the handler's consumer branch was "
        "`unimplemented!()`): a consumer that shuts down stays in the group's channel table, and nobody is told, "
        "until its connection closes; meanwhile the others' rebalances keep dealing it its queues, which nobody "
        "consumes",
        ("R4.4", "R9.7"),
        "mxsm/rocketmq-rust issue #3075, PR #3079 '[ISSUE #3075] ClientManageProcessor supports "
        "UnregisterClient(request code:35)' (commit 1a7b64f1e, 2025-04-11): `ClientManageProcessor::unregister_client` "
        "answered a request naming a consumer group with `unimplemented!()`; the fix calls "
        "`ConsumerManager::unregister_consumer(group, channel, notifyConsumerIdsChangedEnable)`, as Apache RocketMQ's "
        "unregisterClient does",
        ("INV-35",),
        _FIGURES_SEEN,
    ),
)
class ConsumerUnregisterUnimplemented(Variant):
    """UNREGISTER_CLIENT changes nothing at the master or the slave: the shut-down consumer stays listed until its
    channel closes (ExpireChannel, the close event, unchanged), which then unregisters it and tells the group."""

    def _leave(self, s: State, i: int, closed: bool) -> State:
        if not closed:
            return s
        return super()._leave(s, i, closed)
