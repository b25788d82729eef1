"""The twelfth held-out set, part B (docs/held_out.md, "The twelfth set, part B: written apart from the search"):
consumer-offset bugs of RocketMQ 4.x clients other than Apache RocketMQ's Java client, each reported on a client's
tracker or fixed by one of its commits, each a place where the client did something other than the Java client it
follows until the fix made it do what Java does. Planted by what the code did before its fix (the registry's
``citation``), overriding helpers of the model. Written apart from the search: nothing about the search or its
properties was read to choose or plant them, and their catch figures were read once, when the set was
measured (``HeldOutBug.figures_seen`` True)."""

from __future__ import annotations

from rmqspec.spec.actions import ReceivePull, SendPull
from rmqspec.spec.pull import PULL_DELAY_WHEN_EXCEPTION
from rmqspec.spec.state import PULL_DROPPED, PULL_READY, Broker, PullInFlight, PullRequestMsg, State
from rmqspec.spec.state import put_at as _put
from rmqspec.spec.variants import Variant
from rmqspec.spec.variants.held_out import HeldOutBug, held_out

# figures_seen of every bug of this module: their catch figures were read when the twelfth set judged INV-24b, INV-24c,
# INV-36, INV-6d, INV-37 and INV-34's broker-down clause (docs/held_out.md, "The twelfth set, measured"), so they judge
# no later change of the search or the properties
_FIGURES_SEEN = True


@held_out(
    "master_only_broker_lookup",
    HeldOutBug(
        "the client's lookups of a broker for the pull and for the group's consumer list take only the master's "
        "address: with the master down and gone from the route they find none, although the slave's is there, so "
        "every pull of the group fails and is retried, and every rebalance finds no consumer list and changes "
        "nothing, until the master is back; nothing is consumed while the master is down, though the slave serves "
        "the queue (commits and offset queries, looked up by any address of the name, still reach the slave)",
        ("R5.3", "R5.7", "R9.3"),
        "apache/rocketmq-client-cpp#88 'Could not consumer messages from slave broker.' (2019-01-30, client 1.2.0: "
        "with broker-a's master stopped the consumer logged 'The broker not exist' from PullAPIWrapper and consumed "
        "nothing of broker-a's slave), fixed by PR #105 '[ISSUE #88] select slave broker when master broker is "
        "unavailable.' ('can't select slave broker when findConsumerIds. this cause can't consume slave'; commit "
        "d379ba6 'fixed for consume slave.', 2019-03-10, merged as 46ee33b on 2019-04-03, first released in 1.2.2): "
        "before it `MQClientFactory::findBrokerAddressInSubscribe` took the broker id asked for and otherwise only "
        "MASTER_ID, ignoring `onlyThisBroker`, so `PullAPIWrapper::pullKernelImpl` threw and the push consumer "
        "re-queued the pull, and `TopicRouteData::selectBrokerAddr`, which `findConsumerIds` uses, returned only a "
        "master's address, so `Rebalance::doRebalance` threw 'the cidAll is empty'; the fix takes any address of "
        "the name when `onlyThisBroker` is false and a random slave's when no master is listed, as Java's "
        "MQClientInstance#findBrokerAddressInSubscribe and BrokerData#selectBrokerAddr do (the commit names them); "
        "the pull's half of the same lookup in apache/rocketmq-client-go (`namesrvs.FindBrokerAddressInSubscribe` "
        "returned `BrokerAddresses[brokerId]` only) was reported as rocketmq-client-go#631 '[Native] Consumer can not "
        "consume and print 'no broker found for mq'' (client 2.1.0) and #850 'consumer does't get message from slave "
        "when master broker down' (client v2.1.0), and fixed by commit 76dd050 '[ISSUE #631] Support Consuming from "
        "Slave' (2021-07-01, first released in v2.1.1)",
        (),
        _FIGURES_SEEN,
    ),
)
class MasterOnlyBrokerLookup(Variant):
    """SendPull with the master down and a slave present: the pull finds no address and fails at once, as it does
    with no slave at all (the PullRequest stays ready, retried after the exception delay; the C++ client re-queued it
    at once, which the model's retry folds into the same step); nothing goes to the slave. Everything before the
    lookup (lastPullTimestamp, the orderly gate) runs as before. GET_CONSUMER_LIST_BY_GROUP has no broker while the
    master is down (the rebalance keeps its pqs, as for a failed list). Commits and offset queries are unchanged: the
    C++ client looks those up with findBrokerAddressInAdmin, which takes any address of the name."""

    def _list_source(self, s: State) -> Broker | None:
        return s.broker if s.broker.up else None

    def _send_pull(self, s: State, a: SendPull) -> State:
        t = super()._send_pull(s, a)
        if s.broker.up or s.slave is None:
            return t
        i = a.client
        cl = t.clients[i]
        if len(cl.channel) <= len(s.clients[i].channel) or not cl.pulls:
            return t
        sent, pull = cl.channel[-1], cl.pulls[-1]
        if not (isinstance(sent, PullRequestMsg) and sent.to_slave):
            return t
        assert isinstance(pull, PullInFlight) and pull.from_slave and pull.pq_uid == sent.pq_uid
        # findBrokerAddressInSubscribe found nothing: "The broker not exist", the pull is re-queued
        pq = cl.pqs[sent.queue]
        assert pq is not None
        pq = pq._replace(pull_state=PULL_READY, pull_ready_at=t.now + PULL_DELAY_WHEN_EXCEPTION)
        cl = cl._replace(pqs=_put(cl.pqs, sent.queue, pq), channel=cl.channel[:-1], pulls=cl.pulls[:-1])
        return t._replace(clients=_put(t.clients, i, cl))


@held_out(
    "pull_callback_keeps_replaced_pq",
    HeldOutBug(
        "the queue's pull callback, reused from pull to pull, is re-pointed at the queue's current PullRequest only "
        "when the request it holds is gone: after a pq is replaced (dropped as pull-idle, or removed and given back by "
        "a rebalance) while its listener still runs, the new pq's pull is answered to the old, dropped request, which "
        "drops the answer and pulls no more; the new pq's PullRequest is lost, so the queue is pulled by nobody until "
        "the new pq in its turn goes pull-idle (120 s) and is replaced, and what it would have pulled waits",
        ("R5.1", "R5.7"),
        "apache/rocketmq-client-cpp#293 'consumer stuck in rebalance and doesn't consume messsages' (2020-03-28, "
        "client at commit b29bf5b: the log repeated 'PullRequest for [...] has been expired' and 'Drop mq:... "
        "according Pull timeout.' while the queue went unconsumed; reopened as #341), fixed by PR #300 (commit "
        "5629226 '[ISSUE #293] reset pull call back by new pull request event time', 2020-04-17, first committed as "
        "8c57263 'Reset pull call back by new pull request event time'): before it "
        "`DefaultMQPushConsumerImpl::getAsyncPullCallBack` kept one AsyncPullCallback per queue in `m_PullCallback` "
        "and re-pointed it at the PullRequest being pulled only `if (asyncPullCallback->getPullRequest().expired())`, "
        "the weak_ptr to the last one, so while a ConsumeRequest still held the dropped request (its listener "
        "running) the new request's reply went to it, and `AsyncPullCallback::onSuccess`/`onException` returned on "
        "`pullRequest->isDropped()` ('Will NOT pull this queue any more') without re-queuing anything; the fix "
        "re-points the callback at every pull ('maybe the pull request has dropped before'), as Java's pullMessage "
        "makes a new PullCallback for its PullRequest at every pull; the reuse with the weak_ptr came with PR #206 "
        "'refactor(rebalance): use smart_ptr to manage pull request' (commit bc5adc5, 2019-12-11) and was in the "
        "2.0.0, 2.0.1, 2.1.0 and 2.2.0 releases (2020-02-17 to 2020-04-02)",
        ("INV-20",),
        _FIGURES_SEEN,
    ),
)
class PullCallbackKeepsReplacedPq(Variant):
    """SendPull of a pq whose queue's previous pq on this client still has a listener running (a ConsumeRequest in
    ``Client.consuming`` with that queue and another pq uid): the pull goes out as before (the broker takes it, its
    piggy-backed commit lands), but its reply belongs to the old, dropped request: the pq's PullRequest is gone
    (``pull_state`` PULL_DROPPED while the pq stays in the table, not dropped), and the reply, whatever it is (FOUND,
    NO_NEW_MSG, an exception), is dropped when it comes. Nothing pulls the pq again; Phase A replaces it once it is
    pull-idle. A pull sent while no old listener runs is answered to its own pq, as before."""

    def _send_pull(self, s: State, a: SendPull) -> State:
        t = super()._send_pull(s, a)
        i, q = a.client, a.queue
        cl = t.clients[i]
        pq = cl.pqs[q] if 0 <= q < self.q_count else None
        if pq is None or pq.dropped or len(cl.pulls) <= len(s.clients[i].pulls) or cl.pulls[-1].pq_uid != pq.uid:
            return t  # nothing was sent (a failed lookup, the orderly gate, a dropped pq's discarded request)
        if not any(r.queue == q and r.pq_uid != pq.uid for r in cl.consuming):
            return t  # the callback's request is gone: getAsyncPullCallBack re-points it at this one
        # the callback still holds the replaced pq's request, kept alive by its running ConsumeRequest
        cl = cl._replace(pqs=_put(cl.pqs, q, pq._replace(pull_state=PULL_DROPPED)))
        return t._replace(clients=_put(t.clients, i, cl))

    def _receive_pull(self, s: State, a: ReceivePull) -> State:
        i = a.client
        cl = s.clients[i]
        at = next((k for k, p in enumerate(cl.pulls) if p.pq_uid == a.pq_uid and p.epoch != -1), None)
        if cl.running and at is not None:
            q = cl.pulls[at].queue
            pq = cl.pqs[q]
            if pq is not None and pq.uid == a.pq_uid and not pq.dropped and pq.pull_state == PULL_DROPPED:
                # onSuccess / onException of the old request: dropped, "Will NOT pull this queue any more"
                cl = cl._replace(pulls=cl.pulls[:at] + cl.pulls[at + 1 :])
                return s._replace(clients=_put(s.clients, i, cl))
        return super()._receive_pull(s, a)
