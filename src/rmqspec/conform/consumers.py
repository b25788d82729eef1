"""Generation of protocol 2 requests: whole push consumers, steered towards the states where offset
bugs live.

A :class:`ConsumerScenario` belongs to one generated sequence. Its first step sets up one or two
consumers of one group (concurrent or orderly, CLUSTERING or BROADCASTING, one to three queues);
each later step picks one thing that can happen next, reading what can from the reference's last
observation of the consumer (``consumer.observe``: the tasks due, the pulls waiting, the listener
calls running, the cached messages): a task that is due runs (a rebalance, a pull, the persist timer,
lockAll, the 4.9.8 OFFSET_ILLEGAL task, an orderly re-lock or delayed unlock), a waiting pull gets a
reply, a consume thread starts or a listener returns, time moves (mostly to the next due time), the
broker's consumer list changes, a consumer shuts down. After each step the consumer is observed, so
a wrong state shows where it was made.

The weights steer towards the states :data:`REACHED` names (a rebalance while messages are in flight,
an error reply to a query during a rebalance, OFFSET_ILLEGAL with cached messages, ...), and each is
counted when a sequence reaches it (``Session.reached``), so a passing run says what it exercised.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from functools import partial
from typing import Any, Final

from rmqspec.conform import protocol as p

TOPIC: Final = "T"
GROUP: Final = "G"
RETRY_TOPIC: Final = f"%RETRY%{GROUP}"
CLIENT_IDS: Final = ("10.0.0.1@101", "10.0.0.2@102", "10.0.0.3@103")
# The interesting states, with what each means; a passing run reports how often it reached each.
REACHED: Final[dict[str, str]] = {
    "rebalanceWhileInFlight": "a rebalance ran while the consumer held cached or consuming messages",
    "queueTakenWhileInFlight": "a rebalance took away a queue whose messages were cached or consuming",
    "queryErrorDuringRebalance": "a QUERY_CONSUMER_OFFSET of a rebalance was answered by an error or a timeout",
    "offsetIllegalWithCached": "a pull was answered OFFSET_ILLEGAL while its queue held cached messages",
    "offsetIllegalTaskRan": "the 4.9.8 OFFSET_ILLEGAL task ran (10 s after the reply)",
    "sendBackFailed": "a send-back of a failed message was answered by an error or a timeout",
    "listenerReturnedAfterDrop": "a listener returned after its queue was taken away",
    "persistTimerRan": "persistAllConsumerOffset ran on its timer",
    "lockRefused": "an orderly lock request was refused or failed",
    "orderlySuspended": "an orderly listener answered SUSPEND_CURRENT_QUEUE_A_MOMENT",
    "broadcastingRestart": "a BROADCASTING consumer started again on its predecessor's offset file",
}


def _one_in(rng: random.Random, n: int) -> bool:
    return rng.randrange(n) == 0


def _mq(queue_id: int, topic: str = TOPIC) -> dict[str, Any]:
    return p.mq(topic, "broker-a", queue_id)


def _match(queue: tuple[str, int]) -> dict[str, Any]:
    """An answer's ``match`` of the queue (topic, queueId): it answers only a request about that queue."""
    return {"topic": queue[0], "queueId": queue[1]}


def _error_or_timeout(rng: random.Random) -> dict[str, Any]:
    return rng.choice(({"responseCode": 1}, {"responseCode": 22}, {"timeout": True}))


class ConsumerScenario:
    """The consumer part of one generated sequence. ``call`` sends a request to both sides and returns
    the reference's reply (None when the SUT does not support it); ``reached`` counts states reached."""

    def __init__(
        self,
        rng: random.Random,
        call: Callable[[str, dict[str, Any]], dict[str, Any] | None],
        reached: Callable[[str], None],
        orderly_allowed: bool,
    ) -> None:
        self.rng, self.send, self.mark = rng, call, reached
        self.pull_offsets: dict[tuple[str, int], int] = {}
        self.pull_queues: dict[tuple[str, int], str] = {}
        self.orderly_allowed = orderly_allowed
        self.names: list[str] = []
        self.client_ids: dict[str, str] = {}
        self.started: list[str] = []
        self.stopped: list[str] = []
        self.views: dict[str, dict[str, Any]] = {}  # the reference's last observation of each consumer
        self.now = 0
        self.orderly = False
        self.model = "CLUSTERING"
        self.queues = 1
        self.batch = 1

    # --- set-up -----------------------------------------------------------------------------------
    def setup(self) -> None:
        rng = self.rng
        self.orderly = self.orderly_allowed and rng.randrange(2) == 1
        self.model = "BROADCASTING" if _one_in(rng, 4) else "CLUSTERING"
        self.queues = rng.randint(1, 3)
        self.batch = rng.choice((1, 2, 4))
        for k in range(rng.choice((1, 2, 2))):
            self.new_consumer(k, CLIENT_IDS[k])

    def new_consumer(self, k: int, client_id: str) -> None:
        rng, name = self.rng, f"c{len(self.names)}"
        args = {
            "consumer": name,
            "clientId": client_id,
            "group": GROUP,
            "topic": TOPIC,
            "queues": self.queues,
            "orderly": self.orderly,
            "messageModel": self.model,
            "consumeFromWhere": rng.choice(
                ("CONSUME_FROM_LAST_OFFSET", "CONSUME_FROM_FIRST_OFFSET", "CONSUME_FROM_LAST_OFFSET")
            ),
            "pullBatchSize": self.batch,
            "consumeMessageBatchMaxSize": rng.choice((1, 1, 2)),
        }
        self.call("consumer.new", args)
        self.names.append(name)
        self.client_ids[name] = client_id

    # --- one step ---------------------------------------------------------------------------------
    def step(self) -> None:
        if not self.names:
            self.setup()
            return
        choices: list[tuple[int, Callable[[], None]]] = []
        not_started = [n for n in self.names if n not in self.started and n not in self.stopped]
        if not_started:
            choices.append((12 if not self.started else 2, partial(self.start, not_started[0])))
        running = [n for n in self.started if n not in self.stopped]
        for name in running:
            view = self.views.get(name, {})
            due = [t for t in view.get("tasks", []) if t["due"] <= self.now]
            for task in due:
                weight = {"rebalance": 6, "pull": 5, "consume": 6, "persistOffsets": 3}.get(task["task"], 3)
                choices.append((weight, partial(self.run_task, name, task)))
            oldest: dict[str, int] = {}  # pull.reply answers a queue's oldest waiting pull
            for number in view.get("pulls", []):
                oldest.setdefault(self.pull_queues.get((name, number), ""), number)
            for number in oldest.values():
                choices.append((6, partial(self.reply_pull, name, number)))
            for call in view.get("listening", []):
                choices.append((5, partial(self.finish, name, call)))
            if _one_in(self.rng, 12):
                choices.append((1, partial(self.shutdown, name)))
        if self.model == "CLUSTERING" and running:
            choices.append((2, self.change_consumer_list))
        if self.model == "BROADCASTING" and self.stopped and len(self.names) < 4:
            choices.append((2, self.restart))
        choices.append((3, self.advance))
        total = sum(w for w, _ in choices)
        pick = self.rng.randrange(total)
        for weight, action in choices:
            if pick < weight:
                action()
                return
            pick -= weight

    def observe(self, name: str) -> None:
        reply = self.call("consumer.observe", {"consumer": name})
        if reply is not None and reply["ok"]:
            self.views[name] = reply["result"]

    def observe_all(self) -> None:
        for name in self.started:
            if name not in self.stopped:
                self.observe(name)

    def list_consumers(self) -> None:
        running = [self.client_ids[n] for n in self.started if n not in self.stopped]
        self.call("cluster.consumers", {"group": GROUP, "clientIds": running})

    # --- actions ----------------------------------------------------------------------------------
    def start(self, name: str) -> None:
        self.started.append(name)
        if self.model == "CLUSTERING":
            self.list_consumers()
        self.call("consumer.start", {"consumer": name})
        self.observe(name)

    def restart(self) -> None:
        """A BROADCASTING consumer with a stopped one's clientId: it loads that one's offset file."""
        client_id = self.client_ids[self.stopped[-1]]
        self.new_consumer(len(self.names), client_id)
        name = self.names[-1]
        self.mark("broadcastingRestart")
        self.start(name)

    def shutdown(self, name: str) -> None:
        self.call("consumer.shutdown", {"consumer": name, "answers": self.answers()})
        self.stopped.append(name)
        self.views.pop(name, None)
        if self.model == "CLUSTERING":
            self.list_consumers()
        self.observe_all()

    def change_consumer_list(self) -> None:
        """A consumer joins or leaves the broker's list (as its heartbeat arrives or its channel
        closes); the next rebalance of every consumer sees the new list."""
        running = [self.client_ids[n] for n in self.started if n not in self.stopped]
        ids = list(running)
        if ids and _one_in(self.rng, 2):
            ids.remove(self.rng.choice(ids))
        else:
            ids.append(CLIENT_IDS[2])
        self.call("cluster.consumers", {"group": GROUP, "clientIds": sorted(set(ids))})

    def advance(self) -> None:
        rng = self.rng
        dues = [t["due"] for v in self.views.values() for t in v.get("tasks", []) if t["due"] > self.now]
        if dues and not _one_in(rng, 4):
            ms = min(dues) - self.now
        else:
            ms = rng.choice((1000, 3000, 5000, 10_000, 20_000))
        reply = self.call("time.advance", {"ms": ms})
        if reply is not None and reply["ok"]:
            self.now = reply["result"]["now"]

    def answers(self, task: str = "") -> dict[str, list[dict[str, Any]]]:
        """The broker's answers to whatever synchronous requests the step (running ``task``, if one) makes, mostly
        successes; each answer that differs by queue names its queue (``match``), so that the answers a consumer
        gets do not depend on the order it asks in."""
        rng = self.rng
        queries = []
        # one answer per queue the group may ask about (the topic's and the retry topic's), matched by the queue:
        # 4.9.8 walks a rebalance's new queues in HashSet order, so a consumer may ask in any order
        queues = [*((TOPIC, q) for q in range(self.queues)), (RETRY_TOPIC, 0)]
        for topic, queue_id in queues:
            roll = rng.randrange(8)
            if roll < 4:
                answer: dict[str, Any] = {"offset": rng.randint(0, 6)}
            elif roll < 6:
                answer = {"responseCode": 22}
            else:
                answer = _error_or_timeout(rng)
            queries.append({**answer, "match": _match((topic, queue_id))})
        # the same answer for every queue, one per queue: however many a step asks, none runs out first
        most = [{"offset": rng.randint(0, 8)} if not _one_in(rng, 6) else {"timeout": True}] * len(queues)
        answers: dict[str, list[dict[str, Any]]] = {"QUERY_CONSUMER_OFFSET": queries, "GET_MAX_OFFSET": most}
        if self.orderly:
            refusal: dict[str, Any] | None = None
            if _one_in(rng, 4):
                refusal = rng.choice(({"granted": []}, {"timeout": True}, {"responseCode": 1}))
            if task == "lockAll":  # one batch of every queue held
                answers["LOCK_BATCH_MQ"] = [refusal or {"grantAll": True}, {"grantAll": True}]
            else:  # lock(mq) one queue at a time: the refusal (if any) for one queue, the others granted
                refused = rng.choice(queues)
                answers["LOCK_BATCH_MQ"] = [
                    {**(refusal if refusal is not None and q == refused else {"grantAll": True}), "match": _match(q)}
                    for q in queues
                ]
                answers["LOCK_BATCH_MQ"].append({"grantAll": True})
            answers["UNLOCK_BATCH_MQ"] = [{"responseCode": 0}] * (len(queues) + 1)
        return answers

    def run_task(self, name: str, task: dict[str, Any]) -> None:
        kind = task["task"]
        if kind == "consume":
            self.consume(name, task["mq"])
            return
        view = self.views.get(name, {})
        in_flight = any(pq["cached"] or pq["inFlight"] for pq in view.get("pqs", [])) or view.get("listening")
        args: dict[str, Any] = {"consumer": name, "task": kind, "answers": self.answers(kind)}
        if "mq" in task:
            args["mq"] = task["mq"]
        reply = self.call("consumer.run", args)
        if reply is None or not reply["ok"] or not reply["result"].get("ran"):
            self.observe(name)
            return
        sent = reply.get("sent", [])
        if kind == "rebalance":
            if in_flight:
                self.mark("rebalanceWhileInFlight")
            asked = {(s["topic"], s["queueId"]) for s in sent if s["code"] == "QUERY_CONSUMER_OFFSET"}
            answered = args["answers"]["QUERY_CONSUMER_OFFSET"]
            if any("offset" not in a for a in answered if (a["match"]["topic"], a["match"]["queueId"]) in asked):
                self.mark("queryErrorDuringRebalance")
        if kind == "persistOffsets":
            self.mark("persistTimerRan")
        if kind == "fixOffset":
            self.mark("offsetIllegalTaskRan")
        locked = [s["mqs"] for s in sent if s["code"] == "LOCK_BATCH_MQ"]
        refusal = next((a for a in args["answers"].get("LOCK_BATCH_MQ", []) if "grantAll" not in a), None)
        if refusal is not None and locked:
            where = refusal.get("match")
            if where is None or any(
                len(mqs) == 1 and (mqs[0]["topic"], mqs[0]["queueId"]) == (where["topic"], where["queueId"])
                for mqs in locked
            ):
                self.mark("lockRefused")
        before = {p.encode(pq["mq"]) for pq in view.get("pqs", []) if pq["cached"] or pq["inFlight"]}
        self.observe(name)
        after = {p.encode(pq["mq"]) for pq in self.views.get(name, {}).get("pqs", [])}
        if before - after:
            self.mark("queueTakenWhileInFlight")

    def reply_pull(self, name: str, number: int) -> None:
        rng = self.rng
        view = self.views.get(name, {})
        offset = self.pull_offsets.get((name, number), 0)
        roll = rng.randrange(20)
        answer: dict[str, Any]
        if roll < 11:
            count = rng.randint(1, self.batch)
            answer = {"status": "FOUND", "nextBeginOffset": offset + count, "minOffset": 0, "maxOffset": offset + 9}
            answer["msgs"] = list(range(offset, offset + count))
        elif roll < 14:
            status = rng.choice(("NO_NEW_MSG", "NO_MATCHED_MSG"))
            answer = {"status": status, "nextBeginOffset": offset + rng.choice((0, 0, 1, 3)), "minOffset": 0}
            answer["maxOffset"] = offset
        elif roll < 17:
            answer = {"status": "OFFSET_ILLEGAL", "nextBeginOffset": rng.choice((0, 2, offset + 5)), "minOffset": 0}
            answer["maxOffset"] = offset + 5
            mq = self.pull_queues.get((name, number))
            if any(pq["cached"] and p.encode(pq["mq"]) == mq for pq in view.get("pqs", [])):
                self.mark("offsetIllegalWithCached")
        elif roll < 19:
            answer = {"responseCode": rng.choice((24, 25, 1))}
        else:
            answer = {"timeout": True}
        mq = self.pull_queues[(name, number)]
        self.call("pull.reply", {"consumer": name, "mq": json.loads(mq), "answer": answer})
        self.observe(name)

    def consume(self, name: str, mq: dict[str, Any]) -> None:
        self.call("consume.start", {"consumer": name, "mq": mq})
        self.observe(name)

    def finish(self, name: str, call: dict[str, Any]) -> None:
        rng = self.rng
        args: dict[str, Any] = {"consumer": name, "mq": call["mq"]}
        if self.orderly:
            suspend = _one_in(rng, 4)
            args["status"] = "SUSPEND_CURRENT_QUEUE_A_MOMENT" if suspend else "SUCCESS"
            if suspend:
                self.mark("orderlySuspended")
        else:
            later = _one_in(rng, 3)
            args["status"] = "RECONSUME_LATER" if later else "CONSUME_SUCCESS"
            if not later and len(call["msgs"]) > 1 and _one_in(rng, 2):
                args["ackIndex"] = rng.randrange(len(call["msgs"]))
            back = {"responseCode": 0} if not _one_in(rng, 3) else _error_or_timeout(rng)
            fallback = {"responseCode": 0} if not _one_in(rng, 2) else _error_or_timeout(rng)
            args["answers"] = {"CONSUMER_SEND_MSG_BACK": [back] * 4, "SEND_MESSAGE": [fallback] * 4}
            if self.model == "CLUSTERING" and (later or "ackIndex" in args) and back != {"responseCode": 0}:
                self.mark("sendBackFailed")
        view = self.views.get(name, {})
        owned = {p.encode(pq["mq"]) for pq in view.get("pqs", []) if not pq["dropped"]}
        if p.encode(call["mq"]) not in owned:
            self.mark("listenerReturnedAfterDrop")
        self.call("consume.finish", args)
        self.observe(name)

    def call(self, op: str, args: dict[str, Any]) -> dict[str, Any] | None:
        """Send one request; note the offset and queue of each pull it made, for the pull's reply."""
        reply = self.send(op, args)
        if reply is None or "consumer" not in args:
            return reply
        for request in reply.get("sent", []):
            if request.get("code") == "PULL_MESSAGE":
                key = (args["consumer"], int(request["pull"]))
                self.pull_offsets[key] = int(request["queueOffset"])
                self.pull_queues[key] = p.encode(_mq(request["queueId"], request["topic"]))
        return reply
