"""The committed offset: the position every restart and every new owner resumes from, and why it may fall.

A committed offset is the broker's table entry in CLUSTERING (the master's, and the slave's while the master
is down; ``ConsumerOffsetManager``, last writer wins (BrokerMixin._land_commit), the slave routing (SlaveMixin)) or a
consumer's ``offsets.json`` entry in BROADCASTING (persistAll, ConsumerProcessMixin._persist_all). Its properties: every
offset below it was handled or is a declared skip (INV-9, the no-silent-loss guarantee), it lies in ``[0, maxOffset]``
(INV-16), and the broker's falls only with a cause the run shows (INV-8: never by the pq that wrote it; INV-8r: only by
a cause of ``DECLARED_DECREASE_CAUSES``, each a ``DecreaseCause``: failover, admin reset, a stale owner's commit, the
OFFSET_ILLEGAL correction, a request the broker's pools overtook, an orderly overwrite). The slave's table has its own
property, INV-8s (``slave.py``), which reads the same attribution (``_landed_commit``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

from rmqspec.spec.admin_reset import RESET_APPLY_CAUSES, AdminReset
from rmqspec.spec.broker import BrokerCrash, BrokerReceive, BrokerRestart
from rmqspec.spec.faults import CorruptOffsetFile
from rmqspec.spec.property_types import ActionProperty, Invariant
from rmqspec.spec.rebalance import POSITIONED_WITHOUT_OFFSET
from rmqspec.spec.state import Commit, State, pq_key
from rmqspec.spec.state import lowest_offset as _low

if TYPE_CHECKING:
    from rmqspec.spec.actions import Action
    from rmqspec.spec.model import Model


def _committed(m: Model, s: State) -> list[tuple[int, int, int]]:
    """(ledger, queue, committed offset) for every committed position the group resumes from."""
    if m.clustering:
        out = [(0, q, o) for q, o in enumerate(s.broker.offsets) if o is not None]
        if s.slave is not None:  # slaves: a restart while the master is down resumes from the slave's table
            out += [(0, q, o) for q, o in enumerate(s.slave.offsets) if o is not None]
        return out
    return [(i, q, o) for i, cl in enumerate(s.clients) for q, o in enumerate(cl.file) if o is not None]


def _at_least_once(m: Model, s: State) -> str | None:
    g = s.ghost
    for ledger, q, offset in _committed(m, s):
        if offset <= 0:
            continue
        idx = ledger * m.q_count + q
        low = s.broker.queues[q].min_offset
        owed = ((1 << offset) - 1) & ~((1 << low) - 1)
        missing = owed & ~(g.handled[idx] | g.skipped[idx])
        if missing:
            who = "the group" if m.clustering else f"client {ledger}"
            return f"queue {q}: committed {offset} but {who} never handled offset {_low(missing)}"
    return None


AT_LEAST_ONCE = Invariant(
    "INV-9",
    "at_least_once",
    "Every offset below a committed position was handled (success or send-back) or is a declared skip.",
    "R6.3, R7.3, R10.4",
    "This is the no-silent-loss guarantee itself: a committed offset is where every restart resumes.",
    _at_least_once,
)


def _committed_in_range(m: Model, s: State) -> str | None:
    for ledger, q, offset in _committed(m, s):
        high = s.broker.queues[q].max_offset
        if not 0 <= offset <= high:
            where = "broker" if m.clustering else f"client {ledger} file"
            return f"queue {q}: {where} offset {offset} outside [0, {high}]"
    return None


COMMITTED_IN_RANGE = Invariant(
    "INV-16",
    "committed_in_range",
    "Every committed offset lies in [0, maxOffset].",
    "R3.2, R6.3",
    "The broker validates nothing (R3.2); an offset past maxOffset skips future messages.",
    _committed_in_range,
)


class DecreaseCause(NamedTuple):
    """A declared cause of a falling broker offset (INV-8r): ``applies(model, before, action, after,
    queue)`` says whether this step's decrease of ``queue`` has that cause."""

    name: str
    rules: str
    why: str
    applies: Callable[[Model, State, Action, State, int], bool]


def _landed_commit(s: State, a: Action, q: int) -> tuple[int, str, int] | None:
    """(pq key, cause, value) of the commit of ``queue`` that BrokerReceive ``a`` lands, if any."""
    if not isinstance(a, BrokerReceive) or not 0 <= a.overtakes < len(s.clients[a.client].channel):
        return None
    item = s.clients[a.client].channel[a.overtakes]  # the request pools may run the second first (docs/spec.md, "Thread
    # boundaries")
    if item.queue != q:
        return None
    if isinstance(item, Commit):
        return pq_key(a.client, item.pq_uid), item.cause, item.offset
    if item.commit_flag:
        return pq_key(a.client, item.pq_uid), "piggyback", item.commit_offset
    return None


def _by_failover(m: Model, s: State, a: Action, t: State, q: int) -> bool:
    """The restart's table is exactly what the broker's files hold: the last flush (a crash loses the
    window since, the broker's flush (BrokerMixin._broker_flush)), or the flush before it when the main file is
    unreadable (the broker's load, BrokerMixin._broker_restart)."""
    if isinstance(a, BrokerCrash):
        return t.broker.offsets[q] == s.broker.flushed[q]
    if isinstance(a, CorruptOffsetFile):
        return s.broker.bak is not None and t.broker.offsets[q] == s.broker.bak[q]
    return False


def _by_admin_reset(m: Model, s: State, a: Action, t: State, q: int) -> bool:
    if isinstance(a, AdminReset):
        return a.queue == q
    landed = _landed_commit(s, a, q)
    targets = s.ghost.reset_targets
    return landed is not None and landed[1] in RESET_APPLY_CAUSES and bool(targets and targets[q] >> landed[2] & 1)


def _by_stale_owner(m: Model, s: State, a: Action, t: State, q: int) -> bool:
    """The race of last-writer-wins (``BrokerMixin._land_commit``, S5): the landing commit comes from a
    pq other than the one that wrote the current value, and that pq did not read the current value as its start
    (Ghost.readers): the value it undercuts landed after its read, or it read another broker (a replica). The two owners
    overlapped, or the commit was computed while its pq still owned the queue and lands after ownership moved. A pq that
    read the value and then commits below it shows no race: its memory went below what it read. Nor does a pq that
    commits below its own start (Ghost.starts): a stale commit carries what that pq consumed, and a pq consumes only
    from where computePullFromWhere put it (RebalanceMixin._compute_pull_from_where: its memory is the offset it read,
    raised by its own removeMessage results, ConcurrentConsumeMixin._remove_message, under updateOffset's increaseOnly
    rule, PullMixin._updated), so a value below its start is one it never read, whatever the race
    (``stale_owner_race`` names the race for the report)."""
    return stale_owner_race(m, s, a, q) is not None


def stale_owner_race(m: Model, s: State, a: Action, q: int) -> str | None:
    """The race that lets the commit ``a`` lands on ``q`` lower the broker's offset, described; ``None``
    when there is none (``_by_stale_owner``): the committing pq is not the last writer, did not read the value it
    undercuts, and commits a value at or above where it started."""
    landed = _landed_commit(s, a, q)
    if landed is None or s.ghost.last_writer[q] == landed[0]:
        return None
    key, _, value = landed
    if s.ghost.readers and key in s.ghost.readers[q]:
        return None
    start = m.start_of(s, key)
    if start is None or (value < start[0] and not _memory_predates_start(m, start[1])):
        return None  # a value below the committing pq's own start: not one it could have read
    client, uid = key % 16, key // 16
    pq = s.clients[client].pqs[q]
    now_owner = "still owns the queue (overlapping owners)" if pq is not None and pq.uid == uid else "no longer owns it"
    read = f"resumed at {start[0]} ({start[1]}), "
    return (
        f"pq {uid} of client {client} {read}commits {value} below {s.broker.offsets[q]}, which it never read "
        f"(landed after its start); it {now_owner}"
    )


def _memory_predates_start(m: Model, how: str) -> bool:
    """Whether a pq's memory offset may lie below its recorded start (Ghost.starts) without a cause of its own: an
    orderly pq's first locked pull re-reads its position (step 6 of pullMessage, PullMixin._send_pull), and a re-read
    that finds no stored offset positions it by consumeFromWhere without an updateOffset (computePullFromWhere,
    RebalanceMixin._compute_pull_from_where), so the cursor moves and the memory keeps what
    the pq read at its creation, which Ghost.starts no longer holds (it keeps a pq's latest position)."""
    return m.orderly and how in POSITIONED_WITHOUT_OFFSET


def _by_pool_reorder(m: Model, s: State, a: Action, t: State, q: int) -> bool:
    """The broker's request pools (docs/spec.md, "Thread boundaries"): the landing request is the one that the request
    which landed the current value overtook on the same connection (Ghost.overtaken, set by BrokerReceive with
    overtakes=1 and cleared by every other change of the value). In send order it would have landed first."""
    if not isinstance(a, BrokerReceive) or not s.ghost.overtaken or _landed_commit(s, a, q) is None:
        return False
    marker = s.ghost.overtaken[q]
    return marker is not None and marker == (a.client, s.clients[a.client].channel[a.overtakes])


def _by_orderly_overwrite(m: Model, s: State, a: Action, t: State, q: int) -> bool:
    """A commit lands below the last one from a pq whose memory correctTagsOffset raised or the first
    locked pull's re-read overwrote (ghost raised_by_tags)."""
    landed = _landed_commit(s, a, q)
    return m.orderly and landed is not None and landed[0] in s.ghost.raised_by_tags


def _by_offset_illegal_fix(m: Model, s: State, a: Action, t: State, q: int) -> bool:
    landed = _landed_commit(s, a, q)
    return landed is not None and landed[1] == "offset-illegal-fix"


# The declared causes of a falling committed (master) offset, INV-8 and the guarantee I3 of docs/known_bugs.md. The
# slave's table has its own property, INV-8s, whose extra cause is SlaveSync (SlaveMixin._slave_sync).
DECLARED_DECREASE_CAUSES: tuple[DecreaseCause, ...] = (
    DecreaseCause(
        "failover",
        "R3.6, R3.7",
        "A restarted broker loads consumerOffset.json, flushed up to 5 s earlier, or its .bak, one flush older, "
        "when the main file is unreadable (CorruptOffsetFile): the new value must be exactly that file's.",
        _by_failover,
    ),
    DecreaseCause(
        "admin-reset",
        "R3.10a, R3.10b",
        "An admin reset moves offsets either way (forced): the admin's own write (4.9.8's old method, 5.x "
        "assignResetOffset) or a client's commit applying it (4.9.8 resetOffset's persist, 5.x's OFFSET_ILLEGAL "
        "adoption), carrying the reset's target.",
        _by_admin_reset,
    ),
    DecreaseCause(
        "stale-owner",
        "R3.2, S5",
        "Allowed anomaly 'broker-offset-decrease-by-another-owner' (ALLOWED_ANOMALIES): the broker is "
        "last-writer-wins and 4.9.8 lets a stale or overlapping owner's late commit land. Only the race counts: "
        "a commit from a pq other than the last writer, which did not read the value it undercuts (Ghost.readers: "
        "that value landed after its start), of a value that pq could have committed: at or above where it "
        "started (Ghost.starts; computePullFromWhere, R10.1, R9.4). A value below its own start is one it never "
        "read, and no race explains it.",
        _by_stale_owner,
    ),
    DecreaseCause(
        "offset-illegal-fix",
        "R5.7",
        "The OFFSET_ILLEGAL correction commits nextBeginOffset with increaseOnly=false, in either direction.",
        _by_offset_illegal_fix,
    ),
    DecreaseCause(
        "request-pool-reorder",
        "R3.2, R5.4",
        "4.9.8's broker runs each request on the thread pool of its code (NettyRemotingAbstract#processRequestCommand; "
        "BrokerController: PULL_MESSAGE on pullMessageExecutor, UPDATE_CONSUMER_OFFSET on consumerManageExecutor), "
        "and PullMessageProcessor commits a pull's piggy-back when the pull runs: a later commit of the queue from "
        "the same connection can land first, and the overtaken one then lands below it (docs/spec.md, "
        "'Thread boundaries'). Only the request that the current value's writer overtook (Ghost.overtaken), not any "
        "decrease by the same pq.",
        _by_pool_reorder,
    ),
    DecreaseCause(
        "orderly-overwrite",
        "R8.6, R6.7",
        "An orderly consumer writes its memory with increaseOnly=false (the commit, R8.6; the first locked pull's "
        "re-read of the broker, R5.1 step 6): a later commit can land below a value that correctTagsOffset "
        "(R6.7) or the re-read put there (ghost raised_by_tags). INV-3 checks every orderly commit value.",
        _by_orderly_overwrite,
    ),
)


def _broker_decrease_attributed(m: Model, s: State, a: Action, t: State) -> str | None:
    if isinstance(a, (BrokerCrash, BrokerRestart, CorruptOffsetFile)):
        return None  # failover to the flushed file (or its .bak) is a declared cause
    for q in range(m.q_count):
        old, new = s.broker.offsets[q], t.broker.offsets[q]
        if old is None or new is None or new >= old:
            continue
        if _by_admin_reset(m, s, a, t, q):
            continue  # an admin reset is a declared cause (DECLARED_DECREASE_CAUSES)
        if _by_offset_illegal_fix(m, s, a, t, q):
            continue  # the OFFSET_ILLEGAL correction overwrites either way (the pull-status handling
            # (PullMixin._receive_pull), S5)
        if _by_orderly_overwrite(m, s, a, t, q):
            continue  # orderly consume loop: increaseOnly=false over a correctTagsOffset value (the orderly commit
            # (OrderlyConsumeMixin._orderly_finish), what drops a pq (PullMixin))
        if _by_pool_reorder(m, s, a, t, q):
            continue  # the broker's request pools ran a later request of the connection first (docs/spec.md, "Thread
            # boundaries")
        if t.ghost.last_writer[q] == s.ghost.last_writer[q]:
            return f"queue {q}: broker offset fell {old} -> {new}, written by the same pq"
    return None


BROKER_DECREASE_ATTRIBUTED = ActionProperty(
    "INV-8",
    "broker_decrease_attributed",
    "A broker offset falls only through failover, a commit from a different pq than wrote it, or a request "
    "that the current value's writer overtook in the broker's request pools (docs/spec.md, 'Thread boundaries').",
    "R3.2, R3.7",
    "Last-writer-wins makes stale-owner decreases legal; a pq undercutting itself is a client bug.",
    _broker_decrease_attributed,
)


def _committed_decrease_declared(m: Model, s: State, a: Action, t: State) -> str | None:
    if not m.clustering:
        return None
    for q in range(m.q_count):
        old, new = s.broker.offsets[q], t.broker.offsets[q]
        if old is None or new is None or new >= old:
            continue
        if not any(cause.applies(m, s, a, t, q) for cause in DECLARED_DECREASE_CAUSES):
            return f"queue {q}: broker offset fell {old} -> {new} by {type(a).__name__} with no declared cause" + (
                _below_own_start(m, s, a, q)
            )
    return None


def _below_own_start(m: Model, s: State, a: Action, q: int) -> str:
    """For INV-8r's report: the committing pq's own start, when the value it commits lies below it."""
    landed = _landed_commit(s, a, q)
    start = None if landed is None else m.start_of(s, landed[0])
    if landed is None or start is None or landed[2] >= start[0] or _memory_predates_start(m, start[1]):
        return ""
    return f" (pq {landed[0] // 16} of client {landed[0] % 16} commits {landed[2]} below its own start {start[0]})"


COMMITTED_DECREASE_DECLARED = ActionProperty(
    "INV-8r",
    "committed_decrease_declared",
    "The broker's committed offset falls only with a cause in DECLARED_DECREASE_CAUSES (failover, admin "
    "reset, a stale owner's commit, the OFFSET_ILLEGAL fix-up, a request the broker's pools overtook).",
    "R3.2, R3.7, R3.10a, R3.10b, R5.7",
    "The broker never enforces monotonicity (R3.2), so every decrease must be explained by a declared cause "
    "(INV-8; I3 of docs/known_bugs.md).",
    _committed_decrease_declared,
)
