"""The fate of every message at the end of a run: consumed, skipped with its cause, or lost.

A run ends in some state; :func:`message_fates` gives each message of each ledger (the group in
CLUSTERING, each consumer in BROADCASTING) exactly one fate, read from the model's ghost:

* ``consumed-and-committed``: handled (acknowledged, or sent back to the retry topic, R7.3) and below the
  committed offset a restart resumes from;
* ``consumed-not-yet-committed``: handled, its commit not landed yet (the unpersisted window);
* ``skipped: <cause>``: never owed, with the cause the ghost recorded (``Ghost.skips``): a position
  consumeFromWhere chose ("consume-from-last: first-start", or the fault that removed the offset,
  "consume-from-last: broker-crash"), an admin reset's target, a BROADCASTING failure dropped (R7.3);
* ``filtered-by-tag``: its tag is not subscribed (R5.5);
* ``deleted-by-retention``: commit-log retention removed it before anyone consumed it (R5.5);
* ``not-allocated: <anomaly>``: pending on a queue that the allocation strategy deals to none of the running
  consumers, a design choice of RocketMQ named by its allocation anomaly (``unowned-by-configuration``,
  R11.4; ``unowned-outside-consumeridcs``, R11.5; ``unowned-with-no-virtual-nodes``, R11.3): nobody will ever
  pull it while the group stays as it is;
* ``pending``: not consumed yet and not passed by a commit (after quiescence there should be none);
  ``pending: <cause>`` when the run's liveness check showed what left it undone (a task that died,
  ``TaskDies(<task>)``; an autoCommit-false orderly listener holding messages): that cause's harm;
* ``lost``: passed by the committed offset but never handled nor declared skipped (INV-9 refutes it).

``harm`` lists the fates a modelled fault caused (a skip whose cause is a fault): they are tolerated
because the run shows the fault, and reported so that nobody mistakes them for a clean run.
Copies in ``%RETRY%<group>`` are counted under ``retry:`` and the dead-letter queue as
``dead-lettered``. Pure: reads a state, returns counts.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from rmqspec.spec.anomalies import _tolerated
from rmqspec.spec.config import CLUSTERING
from rmqspec.spec.model import Model
from rmqspec.spec.rebalance import _dealt, _nobody_is_dealt
from rmqspec.spec.state import State

# Skip causes that name a modelled fault rather than a design choice of RocketMQ (Model.missing_offset_cause,
# Ghost.offset_lost): a fate with one of them is the fault's harm.
FAULT_CAUSES = frozenset(
    {
        "broker-crash",
        "corrupt-offset-file",
        "corrupt-local-offset-file",
        "query-error",
        "failover-to-a-replica-lacking-the-offset",
        "slave-only-commit",
        "file-write-race",  # not injected: RocketMQ's unlocked offsets.json writers (docs/spec.md, "What is real,
        # ranked")
    }
)

CONSUMED = "consumed-and-committed"
UNCOMMITTED = "consumed-not-yet-committed"
FILTERED = "filtered-by-tag"
RETENTION = "deleted-by-retention"
PENDING = "pending"
LOST = "lost"
NOT_ALLOCATED = "not-allocated"


@dataclass
class Fates:
    """Counts per fate, the fates that are a fault's harm, and the lost messages (ledger, queue, offset)."""

    counts: Counter[str] = field(default_factory=Counter)
    harm: Counter[str] = field(default_factory=Counter)
    lost: list[tuple[int, int, int]] = field(default_factory=list)

    def merge(self, other: Fates) -> None:
        self.counts.update(other.counts)
        self.harm.update(other.harm)
        self.lost.extend(other.lost)

    def as_dict(self) -> dict[str, object]:
        return {"fates": dict(sorted(self.counts.items())), "harm": dict(sorted(self.harm.items()))}

    def summary(self) -> str:
        """One line: each fate with its count, then the fault harm among them."""
        parts = [f"{name} {n}" for name, n in sorted(self.counts.items())]
        text = ", ".join(parts) if parts else "no messages"
        if self.harm:
            text += "; fault harm: " + ", ".join(f"{name} {n}" for name, n in sorted(self.harm.items()))
        return text


def is_harm(cause: str) -> bool:
    """Whether a skip cause ("consume-from-last: broker-crash") names a modelled fault."""
    return cause.rsplit(": ", 1)[-1] in FAULT_CAUSES


def committed_positions(model: Model, state: State) -> dict[tuple[int, int], int]:
    """(ledger, queue) -> the committed offset a restart resumes from (the higher of master and slave)."""
    out: dict[tuple[int, int], int] = {}
    if model.clustering:
        tables = [state.broker.offsets] + ([state.slave.offsets] if state.slave is not None else [])
        for table in tables:
            for q, value in enumerate(table):
                if value is not None:
                    out[(0, q)] = max(out.get((0, q), 0), value)
    else:
        for i, cl in enumerate(state.clients):
            for q, value in enumerate(cl.file):
                if value is not None:
                    out[(i, q)] = value
    return out


def message_fates(model: Model, state: State, stalled_by: str = "") -> Fates:
    """One fate for every message of every ledger in ``state`` (module docstring). ``stalled_by``: the causes
    the liveness check showed for what the quiescence left undone (a task still dead, an autoCommit-false
    listener holding messages; liveness.Harm); a message still pending then is ``pending: <those causes>``,
    counted as their harm, instead of plain ``pending``."""
    g = state.ghost
    qn = model.q_count
    ledgers = 1 if model.config.mode == CLUSTERING else model.config.consumers
    committed = committed_positions(model, state)
    sub = model.config.subscription
    causes: dict[int, list[tuple[str, int]]] = {}
    for idx, cause, mask in g.skips:
        causes.setdefault(idx, []).append((cause, mask))
    fates = Fates()
    unowned = _unallocated(model, state)
    for ledger in range(ledgers):
        for q in range(qn):
            idx = ledger * qn + q
            queue = state.broker.queues[q]
            retry = q == model.retry_queue
            prefix = "retry: " if retry else ""
            position = committed.get((ledger, q), 0)
            for o in range(queue.max_offset):
                filtered = not retry and sub is not None and queue.messages[o].tag not in sub
                fate = _fate(o, g.handled[idx], g.skipped[idx], causes.get(idx, []), position, queue.min_offset)
                if filtered and fate not in (CONSUMED, UNCOMMITTED):
                    fate = FILTERED
                elif fate == PENDING and q in unowned:
                    fate = f"{NOT_ALLOCATED}: {unowned[q]}"
                elif fate == PENDING and stalled_by:
                    fate = f"{PENDING}: {stalled_by}"
                    fates.harm[prefix + fate] += 1
                fates.counts[prefix + fate] += 1
                if fate.startswith("skipped: ") and is_harm(fate[len("skipped: ") :]):
                    fates.harm[prefix + fate] += 1
                if fate == LOST:
                    fates.lost.append((ledger, q, o))
    if state.broker.dlq:
        fates.counts["dead-lettered"] += len(state.broker.dlq)
    return fates


def _unallocated(model: Model, state: State) -> dict[int, str]:
    """Queues no running CLUSTERING consumer owns and the strategy deals to none of them, each with the
    allocation anomaly that explains it (spec/anomalies.py ALLOCATION_ANOMALIES, DUPLICATE_CLIENT_ID_ANOMALIES)."""
    if not model.clustering:
        return {}
    running = tuple(sorted((i for i, cl in enumerate(state.clients) if cl.running), key=lambda j: model.cids[j]))
    if not running:
        return {}
    names = sorted(a for a in _tolerated(model.config) if a.startswith("unowned-"))
    out: dict[int, str] = {}
    for q in range(model.q_count):
        if any(state.clients[i].pqs[q] is not None for i in running):
            continue
        if _nobody_is_dealt(model, running, q):
            out[q] = "/".join(n for n in names if n != "unowned-by-duplicate-client-id") or "unowned"
        elif model.config.duplicate_client_id and not _dealt(model, running, q):  # RMQ-11: an index nobody finds
            out[q] = "unowned-by-duplicate-client-id"
    return out


def _fate(o: int, handled: int, skipped: int, causes: list[tuple[str, int]], position: int, low: int) -> str:
    if handled >> o & 1:
        return CONSUMED if o < position else UNCOMMITTED
    if skipped >> o & 1:
        for cause, mask in reversed(causes):
            if mask >> o & 1:
                return f"skipped: {cause}"
    if o < low:
        return RETENTION
    if skipped >> o & 1:
        return "skipped: unrecorded"  # an unsubscribed tag is the only one; the caller names it (R5.5)
    if o < position:
        return LOST
    return PENDING
