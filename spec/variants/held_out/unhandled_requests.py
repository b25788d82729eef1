"""The seventh held-out set's request half (docs/held_out.md, "The seventh set: written apart from the search"): three
bugs of mxsm/rocketmq-rust, each a request or timer of 4.9.8's offset management that the Rust broker or client
received and did nothing with until a later commit implemented it as the Java code has it: the slave's sync of the
consumer offsets, the client's handling of an admin reset, the client's handling of the broker's notice that the
group's consumers changed. Each is planted by what the code did before its fix (the registry's ``citation``),
overriding one helper of the model. Written apart from the search: nothing about the search or its properties was
read to choose or plant them; their catch figures were read once, when the set was measured
(``HeldOutBug.figures_seen`` True)."""

from __future__ import annotations

from rmqspec.spec.admin_reset import ClientResetReceive
from rmqspec.spec.slave import SlaveSync
from rmqspec.spec.state import State
from rmqspec.spec.state import put_at as _put
from rmqspec.spec.variants import Variant
from rmqspec.spec.variants.held_out import HeldOutBug, held_out

# figures_seen of every bug of this module: their catch figures were read when the seventh set judged INV-29 and the
# guided search's Thompson-sampling bandit (docs/held_out.md, "The seventh set, measured"), so they judge no later
# change of the search or the properties
_FIGURES_SEEN = True


@held_out(
    "slave_offset_sync_stub",
    HeldOutBug(
        "the slave's SlaveSynchronize runs on its timer, but its consumer-offset sync is a stub that only logs 'not "
        "implemented yet': the slave never copies the master's offset table (GET_ALL_CONSUMER_OFFSET and putAll), so "
        "while the master is down every offset query the slave answers reads only what consumers committed to the "
        "slave itself, and a queue nobody committed there during an outage is positioned by consumeFromWhere (or the "
        "young-queue 0) instead of by the group's committed offset",
        ("R3.8", "R2.4", "R10.1"),
        "mxsm/rocketmq-rust: SlaveSynchronize's consumer-offset sync was a stub that only logged an error ('... is "
        "not implemented yet'), from the slave-synchronization scaffolding of issue #3804 (PR #3805, commit "
        "4c0ccc449, 2025-08-23), whose sync_all was itself a stub, through #3871 (PR #3872, commit 6de089116, "
        "2025-08-28: sync_all calls sync_consumer_offset, still a stub) until issue #3891, PR #3892 'Implement "
        "master→slave consumer offset sync and add BrokerOuterAPI.get_all_consumer_offset' (commit 1522a3158, "
        "2025-08-31), which fetches the master's table, extends the "
        "slave's with it and persists it, as Java's SlaveSynchronize.syncConsumerOffset does)",
        ("INV-32",),
        _FIGURES_SEEN,
    ),
)
class SlaveOffsetSyncStub(Variant):
    """SlaveSync: the timer fires and is re-armed as before; the slave's table is left as it is (no copy, whether
    the master is up or not)."""

    def _slave_sync(self, s: State, a: SlaveSync) -> State:
        t = super()._slave_sync(s, a)  # enabled exactly when the correct timer is due
        sl, ticked = s.slave, t.slave
        if sl is None or ticked is None:
            return t
        return s._replace(slave=sl._replace(next_sync=ticked.next_sync))


@held_out(
    "client_reset_request_unsupported",
    HeldOutBug(
        "the client's remoting processor answers RESET_CONSUMER_CLIENT_OFFSET, the broker's call of a 4.9.8 admin "
        "reset (Broker2Client.resetOffset, which tells the clients and writes no offset of its own), with an "
        "'unsupported' response and drops it: MQClientInstance.resetOffset never runs, so no pq is paused, dropped or "
        "re-created and no memory offset is set to the reset's target; the consumer goes on from where it was and its "
        "next commits overwrite whatever the reset meant, so the admin reset does nothing",
        ("R3.10a",),
        "mxsm/rocketmq-rust issue #7272, PR #7273 'add reset consumer client offset and get consumer status request "
        "handling' (commit 8fee0477d, 2026-05-02): ClientRemotingProcessor matched `RequestCode::"
        "ResetConsumerClientOffset | RequestCode::GetConsumerStatusFromClient | RequestCode::GetConsumerRunningInfo "
        "=> Ok(Some(Self::unsupported_client_callback_response(request_code)))`; the fix routes the reset to "
        "MQClientInstance::reset_offset",
        ("INV-31",),
        _FIGURES_SEEN,
    ),
)
class ClientResetRequestUnsupported(Variant):
    """ClientResetReceive (4.9.8): the oldest RESET_CONSUMER_CLIENT_OFFSET leaves the client's inbox and nothing else
    happens: no suspend, no drop, no 10 s sleep, no ClientResetWake."""

    def _client_reset_receive(self, s: State, a: ClientResetReceive) -> State:
        super()._client_reset_receive(s, a)  # enabled exactly when the correct client takes the request
        cl = s.clients[a.client]
        return s._replace(clients=_put(s.clients, a.client, cl._replace(reset_inbox=cl.reset_inbox[1:])))


@held_out(
    "consumer_ids_changed_ignored",
    HeldOutBug(
        "the client's remoting processor has no handler for NOTIFY_CONSUMER_IDS_CHANGED: the broker's notice that a "
        "consumer of the group joined or left (a new channel, an unregister, a closed or expired channel) never calls "
        "rebalanceImmediately, so the group rebalances only when each consumer's RebalanceService wait runs out (or "
        "at its own start): a queue a leaving consumer gave up waits up to a rebalance interval for its new owner, and "
        "a joining consumer's queues stay with their old owners, pulled and committed by them, for that long",
        ("R9.1", "R4.2"),
        "mxsm/rocketmq-rust issue #990, PR #993 'Support NOTIFY_CONSUMER_IDS_CHANGED(request code 40) for client' "
        "(commit 8e9207339, 2024-09-24): before it ClientRemotingProcessor::process_request matched only "
        "PushReplyMessageToClient, so the notice (RequestCode 40) was dropped; the fix handles it by waking the "
        "rebalance, as Java's ClientRemotingProcessor.notifyConsumerIdsChanged does (mqClientFactory."
        "rebalanceImmediately()); the Rust push consumer's clustering consume had come with PR #980 four days before)",
        ("INV-30",),
        _FIGURES_SEEN,
    ),
)
class ConsumerIdsChangedIgnored(Variant):
    """The broker's NOTIFY_CONSUMER_IDS_CHANGED (master or slave) reaches no rebalance: no client's
    ``rebalance_requested`` is set by it. A consumer's own start still wakes its rebalance (Start), and the timer
    still runs."""

    def _notify(self, s: State, slave: bool = False) -> State:
        return s
