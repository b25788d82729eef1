"""The twelfth held-out set, part A (docs/held_out.md, "The twelfth set, part A: written apart from the search"):
consumer-offset bugs of Apache RocketMQ's own Java code, each found in apache/rocketmq's history (its fix commits and
the reports they answer) and planted by what the code did before its fix (the registry's ``citation``), overriding
helpers of the model. Written apart from the search: nothing about the search or its properties was read to choose or
plant them, and their catch figures were read once, when the set was measured (``HeldOutBug.figures_seen`` True)."""

from __future__ import annotations

from rmqspec.spec import broker_rules as br
from rmqspec.spec.broker import CHANNEL_EXPIRED_TIMEOUT
from rmqspec.spec.state import Broker, PullResult, State
from rmqspec.spec.state import put_at as _put
from rmqspec.spec.variants import Variant
from rmqspec.spec.variants.held_out import HeldOutBug, held_out

# figures_seen of every bug of this module: their catch figures were read when the twelfth set judged INV-24b, INV-24c,
# INV-36, INV-6d, INV-37 and INV-34's broker-down clause (docs/held_out.md, "The twelfth set, measured"), so they judge
# no later change of the search or the properties
_FIGURES_SEEN = True


@held_out(
    "heartbeat_keeps_first_channel_stamp",
    HeldOutBug(
        "the broker's consumer heartbeat keeps the lastUpdateTimestamp the channel's ClientChannelInfo got when it was "
        "first registered: a later heartbeat on the same channel refreshes only the group's timestamp, so the 120 s "
        "idle-channel scan closes and removes every live consumer's channel 120 s after it connected, whatever its "
        "heartbeats; the scan tells nobody, requests on the wire are lost and pulls in flight fail, and the consumer "
        "is back only at its next heartbeat (a new channel, which the broker announces), so every 120 to 150 s the "
        "group's consumer list lacks it for up to 30 s and a rebalance meanwhile deals its queues to the others",
        ("R4.3", "R9.3"),
        "apache/rocketmq commit c0627fb15e (2013-09-25, '#258 consumer注册时，要更新最后变更时间', RocketMQ's internal "
        "issue #258, 'when a consumer registers, the last update time must be updated'): "
        "ConsumerGroupInfo.updateChannel stamped only the group's lastUpdateTimestamp; the ClientChannelInfo kept in "
        "channelInfoTable was the one of the channel's first heartbeat, stamped at its construction, and each later "
        "heartbeat's new ClientChannelInfo was dropped, so ConsumerManager.scanNotActiveChannel, added the day "
        "before by commit 4d96925c1f (the same issue, run every 10 s by ClientHousekeepingService), expired live "
        "consumers; the fix sets the kept info's lastUpdateTimestamp at every registration, as 4.9.8 does. The "
        "producer table had had the same fault, fixed by commit 6ae8cfb7e4 (2013-05-18, "
        "'修复Broker在管理Producer心跳超时的逻辑错误，需要定时更新连接最后更新时间')",
        ("INV-38",),  # a property written after this set's figures were read (docs/held_out.md)
        _FIGURES_SEEN,
    ),
)
class HeartbeatKeepsFirstChannelStamp(Variant):
    """The master's channel table keeps, for each registered consumer, the time of the heartbeat that registered it
    (``Broker.heartbeat_at``, kept whatever the configuration, so the scan has something to read): a heartbeat of a
    consumer already registered leaves it; a new registration (after a broker restart, a closed or expired channel)
    stamps it anew. The idle-channel scan (``ExpireChannel``) then closes any registered consumer's channel whose stamp
    is more than 120 s old, running or not, heartbeating or not; the correct scan can only find a silent one (a
    stalled process, a dead heartbeat task), since every heartbeat refreshes the stamp. The slave is unchanged (it is
    not modelled with the scan)."""

    def initial(self) -> State:
        s = super().initial()
        if s.broker.heartbeat_at:
            return s
        return s._replace(broker=s.broker._replace(heartbeat_at=(0,) * self.config.consumers))

    def _register(self, s: State, i: int) -> State:
        b = s.broker
        if not b.up:
            return super()._register(s, i)
        registered = i in b.registered
        kept = b.heartbeat_at[i] if b.heartbeat_at else 0
        t = super()._register(s, i)
        tb = t.broker
        if not tb.heartbeat_at:
            return t
        # updateChannel: a channel already in channelInfoTable keeps its first ClientChannelInfo and its time
        stamp = kept if registered else s.now
        return t._replace(broker=tb._replace(heartbeat_at=_put(tb.heartbeat_at, i, stamp)))

    def _channel_idle(self, s: State, i: int) -> bool:
        b = s.broker
        if not b.heartbeat_at or i not in b.registered:
            return False
        return s.now - b.heartbeat_at[i] > CHANNEL_EXPIRED_TIMEOUT


@held_out(
    "consumer_list_request_fails",
    HeldOutBug(
        "the broker's GET_CONSUMER_LIST_BY_GROUP handler throws before it answers, so every request for a group's "
        "consumer ids gets an error, which findConsumerIdList turns into null: every CLUSTERING rebalance then leaves "
        "the consumer's pq table as it is, so a consumer that starts never gets a queue, nothing of the topic or the "
        "retry topic is pulled, consumed or committed, and a consumer that did own queues (none can, from a start) "
        "would keep them whoever joins or leaves; BROADCASTING, which asks for no consumer list, is unaffected",
        ("R9.3",),
        "apache/rocketmq commit 2c5d749964 (2013-06-14, "
        "'#1 开发push consumer，修复服务器无法响应获取ConsumerId列表的问题', "
        "'fix the broker being unable to answer the request for the consumer id list', twin 9cdbf4ef18): "
        "ClientManageProcessor's handler of GET_CONSUMER_LIST_BY_GROUP, written the day before with the rebalance "
        "(commit 91d75a41c4, 2013-06-13, '#4 开发PushConsumer， 开发Rebalance功能'), cast the response's custom header "
        "to GetConsumerListByGroupRequestHeader instead of GetConsumerListByGroupResponseHeader, so the handler threw "
        "a ClassCastException before answering and the client's getConsumerIdListByGroup failed; "
        "MQClientFactory.findConsumerIdList logged the exception and returned null, on which "
        "RebalanceImpl.rebalanceByTopic changes nothing; the fix casts to the response header",
        ("LIV-1",),
        _FIGURES_SEEN,
    ),
)
class ConsumerListRequestFails(Variant):
    """GET_CONSUMER_LIST_BY_GROUP fails at every broker (the master and its slave run the same handler): the
    CLUSTERING rebalance's consumer list is always null, as with no broker to ask, so each rebalance keeps the pqs it
    has (none, from a start). The other uses of the list source (whether a query error or a missing own id can strike
    a rebalance) see no list either."""

    def _list_source(self, s: State) -> Broker | None:
        return None


@held_out(
    "tag_filter_never_matches",
    HeldOutBug(
        "the broker's message filter looks the unit's tags hash code up as a Long in the subscription's set of "
        "Integer hash codes, which never finds it: for a group subscribed to tags (not '*') every message is "
        "filtered out, so every pull of the topic answers NO_MATCHED_MSG past what it scanned, the client's "
        "correctTagsOffset raises the memory offset over the messages it never received and the next persist "
        "commits it: every subscribed message is lost to the group, never delivered, not retried; a '*' "
        "subscription, the retry topic's included, still matches everything",
        ("R5.5", "R5.7"),
        "apache/rocketmq commit d60c705843 (2016-01-22, 'tag 过滤 bugfix', tag filtering bugfix): "
        "DefaultMessageFilter.isMessageMatched(SubscriptionData, Long tagsCode) returned "
        "subscriptionData.getCodeSet().contains(tagsCode), a boxed Long looked up in a Set<Integer>, which is always "
        "false; the fix looks up tagsCode.intValue(). The mistake came with commit b27811536c (2016-01-06, "
        "'解决多 tag 长轮询空推的问题', the long-polling fix for several tags, which made tagsCode a Long and dropped "
        "the (int) cast), and repeats one fixed in 2013 by commit 3dc2eb44c2 (2013-06-19, '#1 修复消息过滤tag失败的问题"
        "，原因是 long与 int 的问题', tag filtering failed because of long versus int: a Set of int values queried "
        "with a long finds nothing)",
        ("FATES", "INV-9", "LIV-5"),
        _FIGURES_SEEN,
    ),
)
class TagFilterNeverMatches(Variant):
    """DefaultMessageStore#getMessage's filter (the pull statuses, ``broker_rules.pull_result``) on the master and
    the slave alike: a tag subscription matches no message, as if it named no tag; a '*' subscription (the retry
    queue's, or ``subscription`` None) matches every message as before."""

    def _pull_result(self, s: State, q: int, offset: int, from_slave: bool = False) -> PullResult:
        sub = None if q == self.retry_queue else self.config.subscription
        if sub is None:
            return super()._pull_result(s, q, offset, from_slave)
        batch = min(self.config.pull_batch_size, br.MAX_TRANSFER_COUNT_ON_MESSAGE_IN_MEMORY)
        if from_slave and s.slave is not None:
            return br.slave_pull_result(s.slave.queues[q], offset, batch, (), self.config.offset_check_in_slave)
        return br.pull_result(s.broker.queues[q], offset, batch, ())
