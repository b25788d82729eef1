"""Features of a run: what a coverage-guided campaign counts as new, derived from the model alone.

A feature is a short string naming something the run did or a state it was in. Every kind is derived from the
model's own structure, never from a list of known bugs:

- ``a:<Action>[:<params>]``, the *action* taken, with its non-index parameters (a listener's answer, a partial
  ack, a failed send-back, an overtaking delivery, a stall's length, the task that died): each transition kind
  and each of its parameterised branches.
- ``e:<Action>:<path>:<change>``, the *effect*: which field of the state the step changed and how, found by a
  structural diff of the two states (records field by field, per-queue and per-client tuples element by element
  with the index collapsed, counts up or down, an entry set or cleared, a collection grown or shrunk, a ghost
  cause by its name). A broker offset that goes down, a pq removed, a retry counter raised: each is an effect
  branch of some transition, named by the state it touches.
- ``s:<fact>``, a *state fact*: the conditions the model's enabling predicates and properties test, evaluated on
  the state after each step (``FACTS``: a pq held by flow control, a pq gone while its listener still runs, a
  memory entry of a queue the client no longer holds, an expired listener, a broker entry missing for a queue
  the group committed, a lock expired under a running orderly listener, ...), plus ``p:<fact>+<fact>``, the
  *pairs* of facts that hold in one state, since the preconditions of harm are combinations.
- ``n:<Action>><Action>``, the *order* of two consecutive transitions (AFL's edge, for actions).
- ``c:<cause>``, the causes the ghost records (a redelivery's cause, a skip's cause, an offset lost and why), and
  ``k:<name>`` the sometimes-conditions met (``properties/exhaustive.SOMETIMES``).

``Features`` accumulates them over a run: ``observe`` after each step, cheap enough to run on every step of
every campaign unit (the diff walks only the records a step replaced: unchanged records are shared between the
two states, so ``is`` ends the descent). A campaign's corpus keeps the runs that reached a feature no earlier
run had (src/rmqspec/campaign/corpus.py). ``BEHAVIOURS`` names, per action and per fact, the configuration knob
that gates it, so a report can say how many runs could express a behaviour beside how many reached it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import fields, is_dataclass
from typing import Any

from rmqspec.spec import actions as act
from rmqspec.spec.config import CLUSTERING, V4_9_8, Config
from rmqspec.spec.model import Model
from rmqspec.spec.state import PULL_READY, Commit, PullRequestMsg, State

# Action fields that index a client, queue, pq or request: they say where, not which branch, so they are left out
# of an action's feature (a campaign of 4 consumers x 6 queues would otherwise count 24 copies of one branch).
# ``late_reply`` (ClientResetWake) is a pq uid too, ``target`` (AdminReset) an offset or a store time: values, not
# branches, unbounded over a campaign.
_INDEX_FIELDS = frozenset({"client", "queue", "q", "rid", "pq_uid", "uid", "late_reply", "target"})
# State fields the diff does not descend into: the clock (every Tick changes it) and the event history (a linked
# list that every step extends; its content is the actions themselves).
_SKIP = frozenset({"now", "history"})
# How deep the diff goes: State > Client > ProcessQueue > a tuple field is 4 levels; deeper are values inside
# ghost tuples, whose change the level above already names.
_DEPTH = 5


def action_feature(action: act.Action) -> str:
    """``a:<Action>`` plus the action's non-index parameters."""
    name = type(action).__name__
    if not is_dataclass(action):
        return f"a:{name}"
    params = []
    for f in fields(action):
        if f.name in _INDEX_FIELDS:
            continue
        value = getattr(action, f.name)
        if f.name == "ack_index" and isinstance(action, act.FinishConsume):
            continue  # a partial ack is an effect (the retry count, the offsets removed), not a name
        params.append(f"{f.name}={value}")  # each a small set: a stall's length, a task, an answer, a target offset
    return f"a:{name}" + (":" + ",".join(params) if params else "")


def _bucket(n: int) -> str:
    """AFL's hit-count buckets: 0, 1, 2, 3, 4-7, 8-15, 16+ (and negatives as such)."""
    if n < 0:
        return "neg"
    if n < 4:
        return str(n)
    return "4-7" if n < 8 else "8-15" if n < 16 else "16+"


def diff(before: Any, after: Any, path: str, out: set[str], depth: int = 0) -> None:
    """Add to ``out`` one ``<path>:<change>`` per field that differs between ``before`` and ``after``."""
    if before is after or before == after:
        return
    if before is None or after is None:
        out.add(f"{path}:{'set' if before is None else 'cleared'}")
        return
    if isinstance(before, bool) or isinstance(after, bool):
        out.add(f"{path}:{'on' if after else 'off'}")
        return
    if isinstance(before, int) and isinstance(after, int):
        out.add(f"{path}:{'up' if after > before else 'down'}")
        return
    if depth >= _DEPTH:
        out.add(f"{path}:changed")
        return
    names = getattr(type(before), "_fields", None)
    if names is not None and type(before) is type(after):  # a record
        for name, x, y in zip(names, before, after, strict=True):
            if name not in _SKIP:
                diff(x, y, f"{path}.{name}" if path else name, out, depth + 1)
        return
    if isinstance(before, frozenset) and isinstance(after, frozenset):
        out.add(f"{path}:{'grew' if len(after) > len(before) else 'shrank' if len(after) < len(before) else 'changed'}")
        return
    if isinstance(before, tuple) and isinstance(after, tuple):
        if _keyed(before) or _keyed(after):  # ghost tables keyed by a name: (cause, count), ...
            old, new = dict(_pairs(before)), dict(_pairs(after))
            for key in old.keys() | new.keys():
                if old.get(key) != new.get(key):
                    out.add(f"{path}[{key}]:{'set' if key not in old else 'cleared' if key not in new else 'changed'}")
            return
        if len(before) != len(after):
            out.add(f"{path}:{'grew' if len(after) > len(before) else 'shrank'}")
            if not before or not after or getattr(type(before[0]), "_fields", None) is not None:
                return  # a queue of records (requests, pulls, channel): its length says what happened
        for x, y in zip(before, after, strict=False):
            diff(x, y, f"{path}[]", out, depth + 1)
        return
    out.add(f"{path}:changed")


def _keyed(t: tuple[Any, ...]) -> bool:
    return bool(t) and isinstance(t[0], tuple) and bool(t[0]) and isinstance(t[0][0], str)


def _pairs(t: tuple[Any, ...]) -> Iterable[tuple[str, Any]]:
    for item in t:
        if isinstance(item, tuple) and item and isinstance(item[0], str):
            yield item[0], item[1:]


# --- state facts ------------------------------------------------------------------------------------------------
# Each is a condition an enabling predicate or a property of the model tests (its source in the comment), evaluated
# on a whole state; a fact holds if it holds for some client or queue.


def _flow_held(m: Model, s: State) -> bool:
    # SendPull's flow-control clause (Model.enabled; PullMixin._send_pull): a ready pq over pullThresholdForQueue
    c = m.config
    return any(
        pq is not None and not pq.dropped and pq.pull_state == PULL_READY and pq.msg_count > c.pull_threshold_for_queue
        for cl in s.clients
        if cl.running
        for pq in cl.pqs
    )


def _listener_of_gone_pq(m: Model, s: State) -> bool:
    # processConsumeResult's dropped check (ConcurrentConsumeMixin): a request runs for a pq no longer in the table
    for cl in s.clients:
        live = {pq.uid for pq in cl.pqs if pq is not None and not pq.dropped}
        if any(r.pq_uid not in live for r in cl.consuming) or any(r.pq_uid not in live for r in cl.requests):
            return True
    return False


def _pq_recreated_under_listener(m: Model, s: State) -> bool:
    # the same, where the queue already has a new pq: the successor pulls while the predecessor's listener runs
    for cl in s.clients:
        for r in cl.consuming:
            pq = cl.pqs[r.queue]
            if pq is not None and pq.uid != r.pq_uid:
                return True
    return False


def _stale_memory(m: Model, s: State) -> bool:
    # persistAll's pruning (R2.7): a memory entry of a queue the running client no longer holds
    return any(
        cl.running and any(v is not None and pq is None for v, pq in zip(cl.mem, cl.pqs, strict=True))
        for cl in s.clients
    )


def _broker_entry_missing(m: Model, s: State) -> bool:
    # the offset query's "no offset" answer (broker_rules.query_consumer_offset) for a queue the group committed
    # (CLUSTERING: the group's ledger is the broker's table, Ghost.committed bit q; GhostMixin.missing_offset_cause)
    b = s.broker
    if m.config.mode != CLUSTERING or not b.up:
        return False
    return any(o is None and s.ghost.committed >> q & 1 for q, o in enumerate(b.offsets[: m.q_count]))


def _expired_listener(m: Model, s: State) -> bool:
    # cleanExpiredMsg's age test (ConcurrentConsumeMixin._clean_expired_msg, R6.8)
    limit = m.config.consume_timeout
    return any(s.now - t > limit for cl in s.clients for pq in cl.pqs if pq is not None for _, t in pq.consume_started)


def _lock_expired_under_listener(m: Model, s: State) -> bool:
    # the orderly loop's isLockExpired (R8.5) while a listener of that pq runs
    for cl in s.clients:
        running = {r.pq_uid for r in cl.consuming}
        for pq in cl.pqs:
            if pq is not None and pq.uid in running and pq.locked and s.now - pq.last_lock > 30_000:
                return True
    return False


def _commit_below_broker(m: Model, s: State) -> bool:
    # updateOffset's increaseOnly and the broker's last-writer-wins (R1.5, INV-8): a commit in flight below the
    # broker's entry
    b = s.broker
    for cl in s.clients:
        for msg in cl.channel:
            offset = getattr(msg, "offset", None) if isinstance(msg, Commit) else getattr(msg, "commit_offset", None)
            stored = b.offsets[msg.queue]
            if isinstance(msg, PullRequestMsg) and not msg.commit_flag:
                continue
            if offset is not None and stored is not None and offset < stored:
                return True
    return False


def _memory_behind_broker(m: Model, s: State) -> bool:
    # a running client's memory offset below the broker's entry: a persist would lower it (R2.7, R1.5)
    b = s.broker
    return any(
        cl.running and any(v is not None and o is not None and v < o for v, o in zip(cl.mem, b.offsets, strict=True))
        for cl in s.clients
    )


def _broker_down_with_traffic(m: Model, s: State) -> bool:
    # the slave routing and the failed-request paths: the master is down while requests wait on a channel
    return not s.broker.up and any(cl.channel for cl in s.clients)


def _two_owners(m: Model, s: State) -> bool:
    # INV-4's double ownership (CLUSTERING): two running clients hold a live pq of one queue
    if m.config.mode != CLUSTERING:
        return False
    seen: set[int] = set()
    for cl in s.clients:
        if not cl.running:
            continue
        for q, pq in enumerate(cl.pqs):
            if pq is not None and not pq.dropped:
                if q in seen:
                    return True
                seen.add(q)
    return False


def _orphan_queue(m: Model, s: State) -> bool:
    # LIV-1's "every queue owned" after a rebalance placed queues: a topic queue with messages past the group's
    # committed offset that no running client holds, while some running client has rebalanced (a view)
    if not any(cl.running and cl.view is not None for cl in s.clients):
        return False
    held = {q for cl in s.clients if cl.running for q, pq in enumerate(cl.pqs) if pq is not None}
    offsets = s.broker.offsets
    return any(q not in held and bq.max_offset > (offsets[q] or 0) for q, bq in enumerate(s.broker.queues[: m.q_count]))


def _below_min_offset(m: Model, s: State) -> bool:
    # the OFFSET_ILLEGAL branch of the pull statuses (broker_rules.pull_result): a pq whose next pull is below minOffset
    qs = s.broker.queues
    return any(pq is not None and pq.next_offset < qs[q].min_offset for cl in s.clients for q, pq in enumerate(cl.pqs))


def _retry_pending(m: Model, s: State) -> bool:
    # the schedule topic (DeliverScheduled, R7.4): a sent-back message waits for its delay level
    return bool(s.broker.scheduled)


def _in_dlq(m: Model, s: State) -> bool:
    return bool(s.broker.dlq)  # the DLQ (R7.5)


def _offset_fix_pending(m: Model, s: State) -> bool:
    return any(cl.offset_fixes for cl in s.clients)  # 4.9.8's delayed OFFSET_ILLEGAL task (R5.7)


def _reset_sleeping(m: Model, s: State) -> bool:
    return any(cl.reset_wake is not None for cl in s.clients)  # resetOffset's sleep (R3.10a)


def _stalled(m: Model, s: State) -> bool:
    return any(cl.stalled_until is not None and cl.stalled_until > s.now for cl in s.clients)  # Stall


def _task_dead(m: Model, s: State) -> bool:
    return any(cl.dead_tasks for cl in s.clients)  # TaskDies


def _unflushed(m: Model, s: State) -> bool:
    # the broker's flush timer (R3.6): memory entries a crash would lose
    b = s.broker
    return b.up and b.offsets != b.flushed


def _held_by_shutdown(m: Model, s: State) -> bool:
    return any(cl.orphaned for cl in s.clients)  # a listener that outlived its Shutdown


def _file_write_lagging(m: Model, s: State) -> bool:
    return any(cl.file_write_pending is not None for cl in s.clients)  # offsets.json's unlocked writers


def _slave_serving(m: Model, s: State) -> bool:
    return s.slave is not None and not s.broker.up  # the slave routing (SlaveMixin)


def _consumer_list_changed(m: Model, s: State) -> bool:
    # a running client's last view differs from the broker's registered set: a rebalance is due (R4.2)
    reg = tuple(sorted(s.broker.registered))
    return any(cl.running and cl.view is not None and tuple(sorted(cl.view)) != reg for cl in s.clients)


def _past_pull_expiry(m: Model, s: State) -> bool:
    # the longest window a rule compares a time with: isPullExpired's 120 s (R6.6) and the channel expiry
    return s.now > 120_000


Fact = Callable[[Model, State], bool]

FACTS: dict[str, Fact] = {
    "flow-control-held": _flow_held,
    "listener-of-gone-pq": _listener_of_gone_pq,
    "pq-recreated-under-listener": _pq_recreated_under_listener,
    "stale-memory-entry": _stale_memory,
    "broker-entry-missing-after-commit": _broker_entry_missing,
    "expired-listener": _expired_listener,
    "lock-expired-under-listener": _lock_expired_under_listener,
    "commit-in-flight-below-broker": _commit_below_broker,
    "memory-behind-broker": _memory_behind_broker,
    "broker-down-with-traffic": _broker_down_with_traffic,
    "two-owners": _two_owners,
    "queue-with-messages-unowned": _orphan_queue,
    "pull-below-min-offset": _below_min_offset,
    "retry-pending": _retry_pending,
    "in-dlq": _in_dlq,
    "offset-fix-pending": _offset_fix_pending,
    "reset-sleeping": _reset_sleeping,
    "client-stalled": _stalled,
    "task-dead": _task_dead,
    "broker-unflushed": _unflushed,
    "listener-outlived-shutdown": _held_by_shutdown,
    "offset-file-write-lagging": _file_write_lagging,
    "slave-serving": _slave_serving,
    "consumer-list-changed": _consumer_list_changed,
    "clock-past-pull-expiry": _past_pull_expiry,
}


def state_facts(model: Model, state: State) -> list[str]:
    """The names of the facts that hold in ``state``, in ``FACTS`` order."""
    return [name for name, holds in FACTS.items() if holds(model, state)]


class Features:
    """The features of one run, accumulated step by step (``observe``); ``names`` is the set."""

    __slots__ = ("_last", "_last_facts", "model", "names")

    def __init__(self, model: Model) -> None:
        self.model = model
        self.names: set[str] = set()
        self._last = "-"
        self._last_facts: tuple[str, ...] = ()

    def observe(self, before: State, action: act.Action, after: State) -> None:
        """Record the features of the transition ``before --action--> after``."""
        out = self.names
        name = type(action).__name__
        out.add(action_feature(action))
        out.add(f"n:{self._last}>{name}")
        self._last = name
        changes: set[str] = set()
        diff(before, after, "", changes)
        out.update(f"e:{name}:{c}" for c in changes)
        facts = tuple(state_facts(self.model, after))
        if facts != self._last_facts:  # most steps keep the facts of the step before: their pairs are known
            self._last_facts = facts
            for i, f in enumerate(facts):
                out.add(f"s:{f}")
                for g in facts[i + 1 :]:
                    out.add(f"p:{f}+{g}")

    def add_end(self, causes: Iterable[str], sometimes: Iterable[str], fates: Iterable[str]) -> None:
        """Record what only the end of a run says: the ghost's causes, the sometimes-conditions met, the fates."""
        self.names.update(f"c:{c}" for c in causes)
        self.names.update(f"k:{k}" for k in sometimes)
        self.names.update(f"f:{f}" for f in fates)


# --- which runs could express a behaviour ------------------------------------------------------------------------
# The configuration knob that gates an action or a fact, read from its enabling condition in Model.enabled (or the
# mixin it calls): a run whose Config fails the gate can never take that action or reach that fact. Actions and
# facts not listed are open to every run. The campaign report's behaviour table counts, per behaviour, the runs
# whose Config passes the gate ("could") beside those that reached it.
Gate = Callable[[Config], bool]
ACTION_GATES: dict[str, Gate] = {
    "Crash": lambda c: c.client_crashes > 0,
    "Shutdown": lambda c: c.client_shutdowns > 0,
    "BrokerCrash": lambda c: c.broker_crashes > 0,
    "BrokerRestart": lambda c: c.broker_crashes > 0,
    "RebalanceQueryError": lambda c: c.query_errors > 0 and c.mode == CLUSTERING,
    "RetentionDelete": lambda c: c.retention_deletes > 0,
    "FixOffsetIllegal": lambda c: c.retention_deletes > 0 and c.version == V4_9_8,  # 4.9.8's delayed task (R5.7)
    "AdminReset": lambda c: c.admin_resets > 0,
    "ClientResetReceive": lambda c: c.admin_resets > 0 and c.version == V4_9_8,  # 4.9.8's client-side reset
    "ClientResetWake": lambda c: c.admin_resets > 0 and c.version == V4_9_8,
    "Stall": lambda c: c.client_stalls > 0,
    "LoseCommit": lambda c: c.commit_losses > 0,
    "RebalanceWithoutSelf": lambda c: c.view_faults > 0,
    "TaskDies": lambda c: c.task_deaths > 0,
    "CorruptOffsetFile": lambda c: c.offset_file_corruptions > 0 and c.broker_crashes > 0,
    "CorruptLocalOffsetFile": lambda c: c.local_offset_file_corruptions > 0,
    "OffsetFileWriteLands": lambda c: c.lagging_file_writes > 0,
    "SlaveReplicate": lambda c: c.slave,
    "SlaveSync": lambda c: c.slave,
    "LockAll": lambda c: c.orderly and c.mode == CLUSTERING,
    "TryLockLater": lambda c: c.orderly,
    "DelayedUnlock": lambda c: c.orderly,
    "OrphanReturns": lambda c: c.orderly and c.client_shutdowns > 0,
    "CleanExpiredMsg": lambda c: not c.orderly,
    "DeliverScheduled": lambda c: not c.orderly,  # orderly: local retries, then the DLQ (OrderlyConsumeMixin)
}
FACT_GATES: dict[str, Gate] = {
    "flow-control-held": lambda c: c.messages_per_queue > c.pull_threshold_for_queue,
    "expired-listener": lambda c: not c.orderly,
    "lock-expired-under-listener": lambda c: c.orderly,
    "two-owners": lambda c: c.mode == CLUSTERING and c.consumers > 1,
    "pull-below-min-offset": lambda c: c.retention_deletes > 0,
    "offset-fix-pending": lambda c: c.retention_deletes > 0 and c.version == V4_9_8,
    "reset-sleeping": lambda c: c.admin_resets > 0 and c.version == V4_9_8,
    "client-stalled": lambda c: c.client_stalls > 0,
    "task-dead": lambda c: c.task_deaths > 0,
    "listener-outlived-shutdown": lambda c: c.orderly and c.client_shutdowns > 0,
    "offset-file-write-lagging": lambda c: c.lagging_file_writes > 0,
    "slave-serving": lambda c: c.slave and c.broker_crashes > 0,
    "broker-down-with-traffic": lambda c: c.broker_crashes > 0,
}


def behaviours() -> list[tuple[str, str, Gate]]:
    """Every behaviour the report's table lists: each action of the model and each fact, with its gate."""
    names = sorted(t.__name__ for t in act.Action.__args__)
    out = [(f"a:{n}", n, ACTION_GATES.get(n, _open)) for n in names]
    out += [(f"s:{f}", f, FACT_GATES.get(f, _open)) for f in FACTS]
    return out


def _open(config: Config) -> bool:
    return True


def reached_behaviour(key: str, names: Iterable[str]) -> bool:
    """Did a run whose features are ``names`` reach behaviour ``key`` (``a:<Action>`` or ``s:<fact>``)?"""
    prefix = key + ":"
    return any(n == key or n.startswith(prefix) for n in names)
