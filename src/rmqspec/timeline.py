"""Counterexample pictures: a run of the model drawn as lanes over its steps, as one self-contained SVG.

``render_timeline(config, actions, violations)`` replays ``actions`` on ``Model(config)`` and draws one lane
per consumer, one for the broker and, with ``Config.slave``, one for the slave, over the step index (logical
time, ``State.now`` in ms, is labelled beneath: many steps share one ``now``). A consumer's lane has a row
per queue: a bar while it owns the queue (one ProcessQueue per bar), its deliveries (circles holding the
offset, amber when the offset was delivered before), the commits it sends (green pills holding the offset,
with their cause; hollow when piggy-backed on a pull, grey and struck when lost) and where a new
ProcessQueue was positioned (blue rings), with the consumer's memory offset (its OffsetStore) beneath; its
starts, crashes and shutdowns cross the lane, which is shaded while the consumer is not running. The
broker's lane has three rows per queue: the messages produced, the ConsumerOffsetManager table (labelled
segments tinted by the consumer whose commit wrote the value, red where the value fell) and
``consumerOffset.json`` as its flushes left it; crashes shade the lane. A red line marks the step where the
property broke, labelled ``INV-n name: detail`` with the rules the property cites; hovering any mark or step
column shows its step's action (``<title>`` elements; no script).

A run longer than ``STEPS_PER_BAND`` steps wraps into bands stacked downwards; one longer than
``MAX_DRAWN_STEPS`` (a liveness counterexample's quiescence can take thousands) is drawn in windows, its
first steps, those up to the break and around the start of its quiescence, and its last, with a note of the
steps left out. ``render_timeline_html`` wraps the SVG with the step table in one HTML page. The pictures are
what ``rmqspec run`` writes as ``counterexample.svg`` and the campaign's failure store beside each failure;
any other producer of a counterexample (a shortest path from a model checker, a hand-written list) calls the
same two functions. A list of actions that the model does not accept raises ``TimelineError`` naming the
step.
"""

from __future__ import annotations

import html
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, fields, is_dataclass
from typing import NamedTuple, TypeVar

from rmqspec.spec.actions import (
    PERTURBING,
    Action,
    BrokerCrash,
    BrokerFlush,
    BrokerRestart,
    Crash,
    Produce,
    Shutdown,
    Start,
    action_name,
)
from rmqspec.spec.config import BROADCASTING, Config
from rmqspec.spec.invariants import ACTION_PROPERTIES, INVARIANTS, check_state, check_step
from rmqspec.spec.model import ActionNotEnabled, Model
from rmqspec.spec.property_types import ActionProperty, Invariant, Violation
from rmqspec.spec.state import Event, PullRequestMsg, State, history_list

__all__ = [
    "MAX_DRAWN_STEPS",
    "STEPS_PER_BAND",
    "TimelineError",
    "render_timeline",
    "render_timeline_html",
    "step_table",
    "violation_label",
]

_T = TypeVar("_T")

STEPS_PER_BAND = 40  # a longer run wraps into bands of this many steps
# A run longer than this is drawn in windows: its first steps, the steps before the break and where the
# quiescence begins, and its last steps; a note says which steps were left out (their state carries over).
MAX_DRAWN_STEPS = 240
_HEAD, _AROUND, _TAIL = 80, 60, 120

# Geometry (px). Text widths are estimated at 0.6 em per character.
_LEFT = 150  # lane and row labels
_RIGHT = 24
_MAX_WIDTH = 1240  # of the step columns of one band
_COL_MIN, _COL_MAX = 30, 64
_ACTION_HEADER = 118  # rotated action names above each band
_BREAK_STRIP = 20  # the breaking property's tag and the quiescence marker
_LANE_HEADER = 17  # a lane's name and its process events (start, crash, flush)
_CLIENT_ROW = 34  # marks above, the memory offset (OffsetStore) beneath
_BROKER_ROW = 19
_AXIS = 44  # step numbers and now
_BAND_GAP = 26
_FONT = "DejaVu Sans, Verdana, Arial, sans-serif"

# Colours with one meaning each (the legend repeats them).
_CLIENT_HUES = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f")
_DELIVER = "#37474f"
_REDELIVER = "#e69f00"
_COMMIT = "#1b7837"
_LOST = "#9e9e9e"
_POSITION = "#1565c0"
_EVENT = "#7b1fa2"
_MESSAGE = "#78909c"
_TABLE_TEXT = "#0d2b4e"
_FILE = "#8d5524"
_FALL = "#c62828"
_BREAK = "#d50000"
_DOWN = "#e6e6e6"
_FAULT_TEXT = "#b71c1c"


class TimelineError(ValueError):
    """The actions cannot be drawn: one of them is not enabled where it comes (the message names the step)."""


class _Mark(NamedTuple):
    """Something drawn in one cell: step ``step`` (1-based) of a lane's row."""

    step: int
    lane: str  # "c<i>", "broker", "slave"
    queue: int
    kind: str  # deliver, redeliver, commit, piggyback, lost, position, event, produce
    label: str
    title: str


class _LaneEvent(NamedTuple):
    """A process event drawn across a whole lane: a start, crash, shutdown, flush, restart."""

    step: int
    lane: str
    kind: str  # start, crash, shutdown, flush, restart
    title: str


@dataclass
class _Replay:
    """What the picture shows of a run, step by step (index 0 is the initial state)."""

    config: Config
    model: Model
    actions: list[Action]
    now: list[int] = field(default_factory=list)
    running: list[tuple[bool, ...]] = field(default_factory=list)
    owners: list[tuple[tuple[int | None, ...], ...]] = field(default_factory=list)  # [step][client][queue] pq uid
    mem: list[tuple[tuple[int | None, ...], ...]] = field(default_factory=list)  # [step][client][queue] OffsetStore
    file: list[tuple[tuple[int | None, ...], ...]] = field(default_factory=list)  # BROADCASTING: offsets.json
    broker_up: list[bool] = field(default_factory=list)
    table: list[tuple[int | None, ...]] = field(default_factory=list)
    writer: list[tuple[int | None, ...]] = field(default_factory=list)  # client whose commit landed the value
    flushed: list[tuple[int | None, ...]] = field(default_factory=list)
    slave_table: list[tuple[int | None, ...]] = field(default_factory=list)
    marks: list[_Mark] = field(default_factory=list)
    lane_events: list[_LaneEvent] = field(default_factory=list)
    landed: dict[tuple[int, int], list[str]] = field(default_factory=dict)  # (step, queue): what landed
    stored_at_start: tuple[int, ...] = ()  # per queue, messages in the broker's queue in the initial state
    break_step: int = 0
    broke_at_step: bool = False  # a check failed at break_step; else the violation is about the end state


def _rules(violation: Violation) -> str:
    props: tuple[Invariant | ActionProperty, ...] = (*INVARIANTS, *ACTION_PROPERTIES)
    for prop in props:
        if prop.id == violation.id:
            return prop.rules
    return ""


def violation_label(violation: Violation) -> str:
    """``INV-n name: detail (rules ...)``: how the picture names a broken property."""
    rules = _rules(violation)
    return f"{violation.id} {violation.name}: {violation.detail}" + (f" (rules {rules})" if rules else "")


def _short(action: Action) -> str:
    """The action's name with its client and queue, e.g. ``SendPull c0 q1``."""
    parts = [action_name(action)]
    if is_dataclass(action):
        values = {f.name: getattr(action, f.name) for f in fields(action)}
        if isinstance(values.get("client"), int):
            parts.append(f"c{values['client']}")
        if isinstance(values.get("queue"), int):
            parts.append(f"q{values['queue']}")
        if isinstance(values.get("status"), str):
            parts.append(str(values["status"]).replace("CONSUME_", "").lower())
    return " ".join(parts)


def _queue_name(config: Config, q: int) -> str:
    return "retry q" if config.has_retry_queue and q == config.queues else f"q{q}"


def _replay(config: Config, actions: list[Action], violations: list[Violation]) -> _Replay:
    model = Model(config)
    state = model.initial()
    r = _Replay(config, model, list(actions))
    r.break_step = len(actions)
    targets = {v.id for v in violations}
    _snapshot(r, state)
    r.stored_at_start = tuple(queue.max_offset for queue in state.broker.queues)
    seen: set[tuple[int, int, int]] = set()  # (ledger, queue, offset) delivered so far
    events_before = len(history_list(state))
    for k, action in enumerate(actions, 1):
        try:
            after = model.step(state, action)
        except ActionNotEnabled as err:
            raise TimelineError(f"step {k}: {action!r} is not enabled after the steps before it ({err})") from None
        events = history_list(after)
        new_events, events_before = events[events_before:], len(events)
        _record_step(r, k, action, state, after, new_events, seen)
        if targets and not r.broke_at_step:
            found = check_step(model, state, action, after) + check_state(model, after)
            if targets & {v.id for v in found}:
                r.break_step, r.broke_at_step = k, True
        _snapshot(r, after)
        state = after
    return r


def _snapshot(r: _Replay, s: State) -> None:
    r.now.append(s.now)
    r.running.append(tuple(c.running for c in s.clients))
    r.owners.append(tuple(tuple(None if pq is None else pq.uid for pq in c.pqs) for c in s.clients))
    r.mem.append(tuple(c.mem for c in s.clients))
    r.file.append(tuple(c.file for c in s.clients))
    r.broker_up.append(s.broker.up)
    r.table.append(s.broker.offsets)
    r.writer.append(tuple(None if w is None or w < 0 else w % 16 for w in s.ghost.last_writer))
    r.flushed.append(s.broker.flushed)
    if s.slave is not None:
        r.slave_table.append(s.slave.offsets)


def _record_step(
    r: _Replay, k: int, action: Action, s: State, t: State, events: list[Event], seen: set[tuple[int, int, int]]
) -> None:
    where = f"step {k} (now {t.now} ms): {action!r}"
    for e in events:
        lane = "broker" if e.client < 0 else f"c{e.client}"
        if e.kind == "deliver":
            ledger = e.client if r.config.mode == BROADCASTING else 0
            kind = "redeliver" if (ledger, e.queue, e.offset) in seen else "deliver"
            seen.add((ledger, e.queue, e.offset))
            text = f"{'redelivered' if kind == 'redeliver' else 'delivered'} offset {e.offset} ({e.cause})"
            r.marks.append(_Mark(k, lane, e.queue, kind, str(e.offset), f"{where}\n{text}"))
        elif e.kind == "commit-sent":
            text = f"commit sent: offset {e.offset}, cause {e.cause}"
            r.marks.append(_Mark(k, lane, e.queue, "commit", str(e.offset), f"{where}\n{text}"))
        elif e.kind == "commit-lost":
            text = f"commit lost: offset {e.offset}, cause {e.cause}"
            r.marks.append(_Mark(k, lane, e.queue, "lost", str(e.offset), f"{where}\n{text}"))
        elif e.kind == "position":
            text = f"new ProcessQueue positioned at offset {e.offset} ({e.cause})"
            r.marks.append(_Mark(k, lane, e.queue, "position", str(e.offset), f"{where}\n{text}"))
        elif e.kind in ("commit-landed", "commit-landed-on-slave"):
            who = "admin" if e.client < 0 else f"client {e.client}"
            on = " on the slave" if e.kind.endswith("slave") else ""
            r.landed.setdefault((k, e.queue), []).append(f"{who}'s commit of {e.offset} landed{on} ({e.cause})")
        elif e.kind != "start" and e.queue >= 0:
            offset = "" if e.offset < 0 else f" offset {e.offset}"
            r.marks.append(_Mark(k, lane, e.queue, "event", "", f"{where}\n{e.kind}{offset} ({e.cause})"))
    for i, (before, after) in enumerate(zip(s.clients, t.clients, strict=True)):
        new = Counter(after.channel) - Counter(before.channel)
        for item in new.elements():
            if isinstance(item, PullRequestMsg) and item.commit_flag:
                text = f"commit piggy-backed on a pull: offset {item.commit_offset}"
                r.marks.append(_Mark(k, f"c{i}", item.queue, "piggyback", str(item.commit_offset), f"{where}\n{text}"))
    if isinstance(action, Produce):
        stored = t.broker.queues[action.queue].max_offset - 1
        r.marks.append(_Mark(k, "broker", action.queue, "produce", str(stored), f"{where}\nmessage {stored} stored"))
    lane_kinds: dict[type, tuple[str, str]] = {
        Start: ("start", "c"),
        Crash: ("crash", "c"),
        Shutdown: ("shutdown", "c"),
        BrokerCrash: ("crash", "broker"),
        BrokerRestart: ("restart", "broker"),
        BrokerFlush: ("flush", "broker"),
    }
    if type(action) in lane_kinds:
        kind, lane = lane_kinds[type(action)]
        if lane == "c":
            lane = f"c{getattr(action, 'client', 0)}"
        r.lane_events.append(_LaneEvent(k, lane, kind, where))


# --- drawing ----------------------------------------------------------------------------------------------


def _esc(text: str) -> str:
    return html.escape(text, quote=True)


def _text_width(text: str, size: float) -> float:
    return len(text) * size * 0.6


def _wrap(text: str, width: int) -> list[str]:
    lines: list[str] = []
    line = ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return [*lines, line] if line else lines


def _light(hue: str, amount: float = 0.72) -> str:
    """``hue`` mixed with white."""
    rgb = [int(hue[k : k + 2], 16) for k in (1, 3, 5)]
    return "#" + "".join(f"{round(c + (255 - c) * amount):02x}" for c in rgb)


@dataclass
class _Layout:
    n: int
    col: float
    per_band: int
    bands: list[tuple[int, int]]  # (first, last) step of each band, in order
    queues: list[int]
    broker_queues: list[int]
    idle: frozenset[int]  # consumers that never run and have nothing drawn: a one-line lane
    lanes: list[tuple[str, str, int]]  # (lane id, label, height)
    width: float
    header: float

    def __post_init__(self) -> None:
        self._first = {k: first for first, last in self.bands for k in range(first, last + 1)}

    def x(self, step: int) -> float:
        """Left edge of step ``step``'s column within its band."""
        return _LEFT + (step - self._first.get(step, step)) * self.col

    @property
    def lanes_height(self) -> float:
        return sum(h for _, _, h in self.lanes)

    @property
    def band_height(self) -> float:
        return _ACTION_HEADER + _BREAK_STRIP + self.lanes_height + _AXIS + _BAND_GAP

    def band_top(self, band: int) -> float:
        return self.header + band * self.band_height


def _active_queues(r: _Replay) -> list[int]:
    active = {m.queue for m in r.marks} | {q for _, q in r.landed}
    for owners in r.owners:
        active |= {q for client in owners for q, uid in enumerate(client) if uid is not None}
    for rows in (r.table, r.flushed, r.slave_table):
        active |= {q for values in rows for q, v in enumerate(values) if v is not None}
    return sorted(active) or [0]


def _broker_queues(r: _Replay) -> list[int]:
    active = {m.queue for m in r.marks if m.lane in ("broker", "slave")} | {q for _, q in r.landed}
    active |= {q for q, stored in enumerate(r.stored_at_start) if stored}
    for rows in (r.table, r.flushed, r.slave_table):
        active |= {q for values in rows for q, v in enumerate(values) if v is not None}
    return sorted(active) or _active_queues(r)[:1]


def _bands(n: int, break_step: int, walk_steps: int | None) -> list[tuple[int, int]]:
    """The bands' step ranges: all of 1..n, or for a long run its windows (``MAX_DRAWN_STEPS``)."""
    if n <= MAX_DRAWN_STEPS:
        windows = [(1, n)]
    else:
        wanted = [(1, _HEAD), (break_step - _AROUND + 1, break_step + 10), (n - _TAIL + 1, n)]
        if walk_steps is not None:
            wanted.append((walk_steps - _AROUND // 2 + 1, walk_steps + _AROUND // 2))
        windows = []
        for first, last in sorted((max(1, a), min(n, b)) for a, b in wanted):
            if windows and first <= windows[-1][1] + 1:
                windows[-1] = (windows[-1][0], max(windows[-1][1], last))
            else:
                windows.append((first, last))
    return [
        (k, min(last, k + STEPS_PER_BAND - 1))
        for first, last in windows
        for k in range(first, last + 1, STEPS_PER_BAND)
    ]


def _layout(r: _Replay, header: float, walk_steps: int | None) -> _Layout:
    n = max(1, len(r.actions))
    per_band = min(n, STEPS_PER_BAND)
    col = max(_COL_MIN, min(_COL_MAX, _MAX_WIDTH / per_band))
    queues = _active_queues(r)
    broker_queues = _broker_queues(r)
    drawn = {m.lane for m in r.marks} | {e.lane for e in r.lane_events}
    idle = frozenset(
        i for i in range(r.config.consumers) if f"c{i}" not in drawn and not any(run[i] for run in r.running)
    )
    lanes = [
        (f"c{i}", f"consumer {i}", _LANE_HEADER + (4 if i in idle else _CLIENT_ROW * len(queues)))
        for i in range(r.config.consumers)
    ]
    lanes.append(("broker", "broker (master)", _LANE_HEADER + 3 * _BROKER_ROW * len(broker_queues)))
    if r.slave_table:
        lanes.append(("slave", "slave", _LANE_HEADER + _BROKER_ROW * len(broker_queues)))
    width = _LEFT + per_band * col + _RIGHT + 90  # the last rotated action name leans right
    bands = _bands(len(r.actions), r.break_step, walk_steps) if r.actions else [(1, 0)]
    return _Layout(n, col, per_band, bands, queues, broker_queues, idle, lanes, max(width, 1000.0), header)


class _Svg:
    def __init__(self) -> None:
        self.parts: list[str] = []

    def add(self, element: str) -> None:
        self.parts.append(element)

    def text(
        self,
        x: float,
        y: float,
        text: str,
        size: float = 11,
        fill: str = "#222",
        anchor: str = "start",
        weight: str = "normal",
        extra: str = "",
    ) -> None:
        self.add(
            f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" fill="{fill}" text-anchor="{anchor}" '
            f'font-weight="{weight}"{extra}>{_esc(text)}</text>'
        )

    def inner(
        self,
        x: float,
        y: float,
        text: str,
        size: float,
        fill: str,
        anchor: str = "middle",
        weight: str = "bold",
        css: str = "",
    ) -> None:
        """A label drawn on a mark (``css``: its kind, as the class of the text): the mark beneath keeps the
        hover title."""
        extra = ' pointer-events="none"' + (f' class="{css}"' if css else "")
        self.text(x, y, text, size=size, fill=fill, anchor=anchor, weight=weight, extra=extra)


def render_timeline(
    config: Config,
    actions: list[Action],
    violations: list[Violation],
    *,
    title: str = "",
    walk_steps: int | None = None,
) -> str:
    """A self-contained SVG document (no external resources, no script) picturing the run ``actions`` of
    ``Model(config)`` and where it broke ``violations`` (see the module docstring for what it shows).

    The breaking step is the first whose checks (``check_step`` and ``check_state``) fail one of the
    violations' ids; when none does (a liveness or message-fate violation, found after the run), the
    last step is marked, labelled as the end state. ``walk_steps`` (a liveness counterexample's walk
    length, ``Counterexample.walk_steps``) marks where its quiescence steps begin. ``title`` heads the
    picture (default: the violated ids). Raises ``TimelineError`` if an action is not enabled where it comes.
    """
    r = _replay(config, actions, violations)
    svg = _Svg()
    head_lines = _header_lines(config, r, violations, title)
    header = 16 + 22 + 16 * (len(head_lines) - 1) + 12
    lay = _layout(r, header, walk_steps)
    _draw_header(svg, lay, head_lines, bool(violations))
    for band in range(len(lay.bands)):
        _draw_band(svg, r, lay, band, violations, walk_steps)
    height = _draw_legend(svg, lay, lay.band_top(len(lay.bands)), config.mode == BROADCASTING) + 14
    doc_title = _esc(title or "counterexample timeline")
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{lay.width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {lay.width:.0f} {height:.0f}" font-family="{_FONT}">\n'
        f"<title>{doc_title}</title>\n"
        f'<rect x="0" y="0" width="{lay.width:.0f}" height="{height:.0f}" fill="#ffffff"/>\n'
        + "\n".join(svg.parts)
        + "\n</svg>\n"
    )


def _header_lines(config: Config, r: _Replay, violations: list[Violation], title: str) -> list[tuple[str, str]]:
    """(style, text) lines of the picture's header: title, configuration, each violation."""
    ids = ", ".join(dict.fromkeys(v.id for v in violations)) or "no violation"
    planted = f"; planted bug {', '.join(sorted(config.mutations))}" if config.mutations else ""
    setup = (
        f"{config.consumers} consumers, {config.queues} queues, {config.mode}, {config.strategy}, "
        f"{config.consume_from_where}{', orderly' if config.orderly else ''}{', slave' if config.slave else ''}"
        f"{planted}; {len(r.actions)} steps"
    )
    lines = [("title", title or f"Counterexample: {ids}"), ("setup", setup)]
    chars = 150
    where = f"step {r.break_step}" if r.broke_at_step else "the end state"
    for v in violations:
        for k, line in enumerate(_wrap(f"broke at {where}: {violation_label(v)}", chars)):
            lines.append(("violation" if k == 0 else "violation-more", line))
    return lines


def _draw_header(svg: _Svg, lay: _Layout, lines: list[tuple[str, str]], broke: bool) -> None:
    y = 26.0
    for style, line in lines:
        if style == "title":
            svg.text(14, y, line, size=17, weight="bold")
            y += 20
        elif style == "setup":
            svg.text(14, y, line, size=11.5, fill="#555")
            y += 16
        else:
            svg.text(14, y, line, size=12, fill=_BREAK, weight="bold" if style == "violation" else "normal")
            y += 16
    if broke:
        svg.add(f'<line x1="10" y1="{y - 4:.1f}" x2="{lay.width - 10:.1f}" y2="{y - 4:.1f}" stroke="#ddd"/>')


def _draw_band(
    svg: _Svg, r: _Replay, lay: _Layout, band: int, violations: list[Violation], walk_steps: int | None
) -> None:
    first, last = lay.bands[band]
    top = lay.band_top(band)
    before = lay.bands[band - 1][1] if band else 0
    if first > before + 1:
        gap = f"\u2026 steps {before + 1}-{first - 1} not drawn (their state carries over) \u2026"
        svg.text(14, top + 24, gap, size=12, fill="#555", weight="bold", extra=' font-style="italic"')
    lanes_top = top + _ACTION_HEADER + _BREAK_STRIP
    lanes_bottom = lanes_top + lay.lanes_height
    right = lay.x(last) + lay.col if last else _LEFT + lay.col
    svg.add(f'<g class="band" data-first-step="{first}">')
    # step columns: alternate shading and the action as a hover title
    for k in range(first, last + 1):
        action = r.actions[k - 1]
        fill = "#f7f7f7" if k % 2 else "#ffffff"
        svg.add(
            f'<rect x="{lay.x(k):.1f}" y="{top + _ACTION_HEADER:.1f}" width="{lay.col:.1f}" '
            f'height="{lanes_bottom - top - _ACTION_HEADER + 18:.1f}" fill="{fill}">'
            f"<title>{_esc(f'step {k} (now {r.now[k]} ms): {action!r}')}</title></rect>"
        )
        cx = lay.x(k) + lay.col / 2
        broke = k == r.break_step and violations
        colour = _BREAK if broke else _FAULT_TEXT if isinstance(action, PERTURBING) else "#333"
        svg.add(
            f'<text x="{cx - 1:.1f}" y="{top + _ACTION_HEADER - 4:.1f}" font-size="10.5" fill="{colour}" '
            f'font-weight="{"bold" if broke else "normal"}" transform="rotate(-55 {cx - 1:.1f} '
            f'{top + _ACTION_HEADER - 4:.1f})">{_esc(_short(action)[:30])}<title>{_esc(repr(action))}</title></text>'
        )
    y = lanes_top
    for lane, label, height in lay.lanes:
        svg.add(f'<g class="lane" data-lane="{lane}">')
        _draw_lane(svg, r, lay, lane, label, y, height, first, last, right)
        svg.add("</g>")
        y += height
    _draw_axis(svg, r, lay, lanes_bottom, first, last)
    if walk_steps is not None and first <= walk_steps + 1 <= last:
        x = lay.x(walk_steps + 1)
        svg.add(
            f'<line x1="{x:.1f}" y1="{top + _ACTION_HEADER:.1f}" x2="{x:.1f}" y2="{lanes_bottom:.1f}" '
            f'stroke="#555" stroke-width="1.5" stroke-dasharray="5 3"/>'
        )
        svg.text(x + 3, top + _ACTION_HEADER + 14, "quiescence begins", size=10.5, fill="#555")
    if violations and r.actions and first <= r.break_step <= last:
        x = lay.x(r.break_step) + lay.col / 2
        tag = " ".join(dict.fromkeys(v.id for v in violations)) + " breaks here"
        svg.add(
            f'<line x1="{x:.1f}" y1="{top + _ACTION_HEADER + 2:.1f}" x2="{x:.1f}" y2="{lanes_bottom + 16:.1f}" '
            f'stroke="{_BREAK}" stroke-width="2.5"><title>{_esc(" / ".join(map(violation_label, violations)))}'
            "</title></line>"
        )
        wide = _text_width(tag, 11) + 10
        tx = x - wide - 4 if x + wide + 4 > lay.width - 4 else x + 4
        svg.add(
            f'<rect x="{tx:.1f}" y="{top + _ACTION_HEADER + 2:.1f}" width="{wide:.1f}" height="16" rx="3" '
            f'fill="{_BREAK}"/>'
        )
        svg.text(tx + 5, top + _ACTION_HEADER + 14, tag, size=11, fill="#fff", weight="bold")
    svg.add("</g>")


def _segments(values: Sequence[_T], first: int, last: int) -> list[tuple[int, int, _T]]:
    """Maximal runs (start, end, value) of equal ``values[k]`` for steps first..last."""
    out: list[tuple[int, int, _T]] = []
    for k in range(first, last + 1):
        if out and out[-1][2] == values[k] and out[-1][1] == k - 1:
            out[-1] = (out[-1][0], k, values[k])
        else:
            out.append((k, k, values[k]))
    return out


def _draw_lane(
    svg: _Svg,
    r: _Replay,
    lay: _Layout,
    lane: str,
    label: str,
    top: float,
    height: float,
    first: int,
    last: int,
    right: float,
) -> None:
    bottom = top + height
    # down or not running: shaded
    if lane.startswith("c"):
        i = int(lane[1:])
        alive = [run[i] for run in r.running]
        hue = _CLIENT_HUES[i % len(_CLIENT_HUES)]
    else:
        alive = list(r.broker_up) if lane == "broker" else [True] * len(r.now)
        hue = "#455a64"
    for start, end, up in _segments(list(alive), first, last):
        if not up:
            w = (end - start + 1) * lay.col
            svg.add(
                f'<rect x="{lay.x(start):.1f}" y="{top:.1f}" width="{w:.1f}" height="{height:.1f}" fill="{_DOWN}" '
                f'fill-opacity="0.85"><title>{"not running" if lane.startswith("c") else "down"}</title></rect>'
            )
    svg.add(f'<line x1="8" y1="{top:.1f}" x2="{right:.1f}" y2="{top:.1f}" stroke="#999"/>')
    svg.add(f'<rect x="8" y="{top + 3:.1f}" width="5" height="{height - 6:.1f}" fill="{hue}"/>')
    svg.text(18, top + 13, label, size=12, weight="bold", fill=hue if lane.startswith("c") else "#263238")
    if lane.startswith("c") and int(lane[1:]) in lay.idle:
        svg.text(18 + _text_width(label, 12) + 10, top + 13, "never started", size=10.5, fill="#777")
    elif lane.startswith("c"):
        _draw_client_rows(svg, r, lay, lane, top + _LANE_HEADER, first, last)
    else:
        _draw_broker_rows(svg, r, lay, lane, top + _LANE_HEADER, first, last)
    _draw_lane_events(svg, r, lay, lane, top, bottom, first, last)


def _draw_lane_events(
    svg: _Svg, r: _Replay, lay: _Layout, lane: str, top: float, bottom: float, first: int, last: int
) -> None:
    styles = {
        "start": ("#2e7d32", "start", ""),
        "restart": ("#2e7d32", "restart", ""),
        "crash": ("#c62828", "crash", ""),
        "shutdown": ("#616161", "shutdown", ""),
        "flush": (_FILE, "flush", ' stroke-dasharray="3 2"'),
    }
    taken_until = _LEFT + _text_width("broker (master)", 12) - 130  # the lane's label occupies the left edge
    for ev in r.lane_events:
        if ev.lane != lane or not first <= ev.step <= last:
            continue
        colour, word, dash = styles[ev.kind]
        x = lay.x(ev.step) + lay.col / 2
        svg.add(
            f'<line x1="{x:.1f}" y1="{top + 14:.1f}" x2="{x:.1f}" y2="{bottom:.1f}" stroke="{colour}" '
            f'stroke-width="2"{dash}><title>{_esc(ev.title)}</title></line>'
        )
        w = _text_width(word, 10) + 4
        if x - 2 >= taken_until:
            svg.text(x - 2, top + 12, word, size=10, fill=colour, weight="bold")
            taken_until = x + w


def _draw_client_rows(svg: _Svg, r: _Replay, lay: _Layout, lane: str, top: float, first: int, last: int) -> None:
    i = int(lane[1:])
    hue = _CLIENT_HUES[i % len(_CLIENT_HUES)]
    local = r.config.mode == BROADCASTING  # LocalFileOffsetStore: its offsets.json beside the memory offset
    for row, q in enumerate(lay.queues):
        y = top + row * _CLIENT_ROW
        mid = y + 13
        svg.text(_LEFT - 8, mid + 4, _queue_name(r.config, q), size=10.5, fill="#444", anchor="end")
        beneath = "memory | offsets.json" if local else "memory offset"
        svg.text(_LEFT - 8, y + _CLIENT_ROW - 6, beneath, size=8.5, fill="#777", anchor="end")
        uids = [owners[i][q] if q < len(owners[i]) else None for owners in r.owners]
        for start, end, uid in _segments(list(uids), first, last):
            if uid is None:
                continue
            x0, x1 = lay.x(start) + 1, lay.x(end) + lay.col - 1
            owns = f"consumer {i} owns {_queue_name(r.config, q)}: ProcessQueue {uid}, steps {start}-{end}"
            svg.add(
                f'<rect x="{x0:.1f}" y="{y + 2:.1f}" width="{x1 - x0:.1f}" height="{_CLIENT_ROW - 4:.1f}" rx="4" '
                f'fill="{_light(hue)}" stroke="{hue}" stroke-width="0.8"><title>{_esc(owns)}</title></rect>'
            )
        _draw_cells(svg, r, lay, lane, q, mid, first, last)
        mem = [m[i][q] if q < len(m[i]) else None for m in r.mem]
        file = [f[i][q] if local and q < len(f[i]) else None for f in r.file]
        for start, end, (value, stored) in _segments(list(zip(mem, file, strict=True)), first, last):
            if value is None and stored is None:
                continue
            before = mem[start - 1] if start >= 1 else None
            fell = before is not None and value is not None and value < before
            x0 = lay.x(start) + 3
            what = f"memory offset of {_queue_name(r.config, q)} = {value}"
            label = "-" if value is None else str(value)
            if local:
                what += f", offsets.json holds {stored}"
                label += f"|{'-' if stored is None else stored}"
            svg.add(
                f'<line x1="{x0:.1f}" y1="{y + _CLIENT_ROW - 4:.1f}" x2="{lay.x(end) + lay.col - 3:.1f}" '
                f'y2="{y + _CLIENT_ROW - 4:.1f}" stroke="{_FALL if fell else _TABLE_TEXT}" stroke-width="1">'
                f"<title>{_esc(f'{what}, steps {start}-{end}')}</title></line>"
            )
            svg.text(x0, y + _CLIENT_ROW - 6, label, size=9, fill=_FALL if fell else _TABLE_TEXT, weight="bold")


def _draw_cells(svg: _Svg, r: _Replay, lay: _Layout, lane: str, q: int, mid: float, first: int, last: int) -> None:
    cells: dict[int, list[_Mark]] = {}
    for m in r.marks:
        if m.lane == lane and m.queue == q and first <= m.step <= last:
            cells.setdefault(m.step, []).append(m)
    caption_until = 0.0
    for step in sorted(cells):
        marks = _merge(cells[step])
        slot = lay.col / len(marks)
        for n, m in enumerate(marks):
            cx = lay.x(step) + slot * (n + 0.5)
            _glyph(svg, m, cx, mid, min(slot, lay.col))
        commits = [m for m in marks if m.kind in ("commit", "piggyback")]
        if commits:  # the cause beside the first commit, if the row has room for it
            cause = commits[0].title.split("cause ")[-1] if commits[0].kind == "commit" else "piggy-back"
            x = lay.x(step) + lay.col - 2
            nxt = min((lay.x(s) for s in cells if s > step), default=lay.width - 4)
            if x >= caption_until and x + _text_width(cause, 9) <= nxt:
                svg.text(x, mid + 4, cause, size=9, fill=_COMMIT, extra=' font-style="italic"')
                caption_until = x + _text_width(cause, 9) + 4


def _merge(marks: list[_Mark]) -> list[_Mark]:
    """Marks of one kind in one cell as one mark listing their labels (a batch of deliveries)."""
    out: dict[str, _Mark] = {}
    for m in marks:
        old = out.get(m.kind)
        if old is None:
            out[m.kind] = m
        else:
            label = f"{old.label},{m.label}" if m.label else old.label
            out[m.kind] = old._replace(label=label, title=f"{old.title}\n{m.title.splitlines()[-1]}")
    order = ("position", "produce", "deliver", "redeliver", "event", "commit", "piggyback", "lost")
    return sorted(out.values(), key=lambda m: order.index(m.kind))


def _glyph(svg: _Svg, m: _Mark, cx: float, cy: float, room: float) -> None:
    title = f"<title>{_esc(m.title)}</title>"
    label = m.label if _text_width(m.label, 10) <= room - 4 else m.label.split(",")[0] + "+"
    w = max(16.0, _text_width(label, 10) + 7)
    if m.kind in ("deliver", "redeliver"):
        fill = _DELIVER if m.kind == "deliver" else _REDELIVER
        if len(label) <= 2:
            svg.add(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="8.5" fill="{fill}">{title}</circle>')
        else:
            svg.add(
                f'<rect x="{cx - w / 2:.1f}" y="{cy - 8.5:.1f}" width="{w:.1f}" height="17" rx="8.5" fill="{fill}">'
                f"{title}</rect>"
            )
        svg.inner(cx, cy + 3.6, label, 10, "#fff", css=m.kind)
    elif m.kind in ("commit", "piggyback", "lost"):
        colour = _LOST if m.kind == "lost" else _COMMIT
        filled = m.kind == "commit"
        svg.add(
            f'<rect x="{cx - w / 2:.1f}" y="{cy - 7.5:.1f}" width="{w:.1f}" height="15" rx="3" '
            f'fill="{colour if filled else "#fff"}" stroke="{colour}" stroke-width="1.6">{title}</rect>'
        )
        svg.inner(cx, cy + 3.6, label, 10, "#fff" if filled else colour, css=m.kind)
        if m.kind == "lost":
            svg.add(
                f'<line x1="{cx - w / 2:.1f}" y1="{cy + 7:.1f}" x2="{cx + w / 2:.1f}" y2="{cy - 7:.1f}" '
                f'stroke="{_FALL}" stroke-width="1.5" pointer-events="none"/>'
            )
    elif m.kind == "position":
        svg.add(
            f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="8" fill="#fff" stroke="{_POSITION}" stroke-width="2">{title}'
            "</circle>"
        )
        svg.inner(cx, cy + 3.6, label, 9.5, _POSITION, css=m.kind)
    elif m.kind == "produce":
        svg.add(
            f'<rect x="{cx - w / 2:.1f}" y="{cy - 7:.1f}" width="{w:.1f}" height="14" fill="#fff" '
            f'stroke="{_MESSAGE}" stroke-width="1.2">{title}</rect>'
        )
        svg.inner(cx, cy + 3.5, label, 9.5, "#455a64", weight="normal", css=m.kind)
    else:
        svg.add(
            f'<path d="M {cx:.1f} {cy - 7:.1f} L {cx + 7:.1f} {cy:.1f} L {cx:.1f} {cy + 7:.1f} L {cx - 7:.1f} '
            f'{cy:.1f} Z" fill="{_EVENT}">{title}</path>'
        )


def _draw_broker_rows(svg: _Svg, r: _Replay, lay: _Layout, lane: str, top: float, first: int, last: int) -> None:
    rows: list[tuple[str, str]] = (
        [("messages", "messages"), ("table", "offset table"), ("file", "offsets file")]
        if lane == "broker"
        else [("table", "offset table")]
    )
    y = top
    for q in lay.broker_queues:
        for k, (kind, name) in enumerate(rows):
            mid = y + _BROKER_ROW / 2
            label = f"{_queue_name(r.config, q)} {name}" if k == 0 or len(rows) == 1 else name
            if kind == "messages" and q < len(r.stored_at_start) and r.stored_at_start[q]:
                label += f" ({r.stored_at_start[q]} at start)"
            svg.text(_LEFT - 8, mid + 4, label, size=10, fill="#444" if k == 0 else "#777", anchor="end")
            if kind == "messages":
                _draw_cells(svg, r, lay, lane, q, mid, first, last)
            else:
                source = r.slave_table if lane == "slave" else r.table if kind == "table" else r.flushed
                values = [v[q] if q < len(v) else None for v in source]
                tinted = kind == "table" and lane == "broker"
                writers = [w[q] if q < len(w) else None for w in r.writer] if tinted else None
                _draw_values(svg, r, lay, q, values, writers, kind, y, first, last)
            y += _BROKER_ROW
        svg.add(f'<line x1="{_LEFT - 40}" y1="{y:.1f}" x2="{lay.x(last) + lay.col:.1f}" y2="{y:.1f}" stroke="#eee"/>')


def _draw_values(
    svg: _Svg,
    r: _Replay,
    lay: _Layout,
    q: int,
    values: list[int | None],
    writers: list[int | None] | None,
    kind: str,
    y: float,
    first: int,
    last: int,
) -> None:
    keyed = [(v, None if writers is None else writers[k]) for k, v in enumerate(values)]
    for start, end, (value, writer) in _segments(keyed, first, last):
        if value is None:
            continue
        x0, x1 = lay.x(start) + 1, lay.x(end) + lay.col - 1
        before = values[start - 1] if start >= 1 else None
        fell = before is not None and value < before
        if kind == "file":
            fill, stroke, text = "#fbf3ea", _FILE, _FILE
        else:
            hue = "#90a4ae" if writer is None else _CLIENT_HUES[writer % len(_CLIENT_HUES)]
            fill, stroke, text = _light(hue, 0.6), hue, _TABLE_TEXT
        if fell:
            stroke, text = _FALL, _FALL
        landed = [line for k in range(start, end + 1) for line in r.landed.get((k, q), [])]
        what = "consumerOffset.json" if kind == "file" else "offset table"
        detail = f"{what} {_queue_name(r.config, q)} = {value}, steps {start}-{end}"
        if fell:
            detail += f" (fell from {before})"
        if landed:
            detail += "\n" + "\n".join(landed)
        svg.add(
            f'<rect x="{x0:.1f}" y="{y + 2:.1f}" width="{x1 - x0:.1f}" height="{_BROKER_ROW - 4:.1f}" rx="2" '
            f'fill="{fill}" stroke="{stroke}" stroke-width="{2 if fell else 1}"><title>{_esc(detail)}</title></rect>'
        )
        label = f"{before}\u2192{value}" if fell else str(value)
        if _text_width(label, 10) > x1 - x0 - 4:
            label = str(value)
        svg.inner(x0 + 4, y + _BROKER_ROW - 5.5, label, 10, text, anchor="start")


def _draw_axis(svg: _Svg, r: _Replay, lay: _Layout, top: float, first: int, last: int) -> None:
    svg.add(f'<line x1="{_LEFT}" y1="{top:.1f}" x2="{lay.x(last) + lay.col:.1f}" y2="{top:.1f}" stroke="#333"/>')
    svg.text(_LEFT - 8, top + 13, "step", size=10, fill="#444", anchor="end")
    svg.text(_LEFT - 8, top + 28, "now (ms)", size=10, fill="#444", anchor="end")
    every = 1 if lay.col >= 22 else 5
    for k in range(first, last + 1):
        cx = lay.x(k) + lay.col / 2
        svg.add(f'<line x1="{cx:.1f}" y1="{top:.1f}" x2="{cx:.1f}" y2="{top + 4:.1f}" stroke="#333"/>')
        if k % every == 0 or k == first:
            broke = k == r.break_step and r.broke_at_step
            svg.text(
                cx,
                top + 14,
                str(k),
                size=10,
                anchor="middle",
                fill=_BREAK if broke else "#222",
                weight="bold" if broke else "normal",
            )
    level_until = [0.0, 0.0]
    for n, (start, end, now) in enumerate(_segments(list(r.now), first, last)):
        x0, x1 = lay.x(start) + 1, lay.x(end) + lay.col - 1
        svg.add(
            f'<rect x="{x0:.1f}" y="{top + 19:.1f}" width="{x1 - x0:.1f}" height="4" '
            f'fill="{"#90a4ae" if n % 2 else "#cfd8dc"}"><title>now = {now} ms, steps {start}-{end}</title></rect>'
        )
        label = str(now)
        w = _text_width(label, 9.5)
        cx = max((x0 + x1) / 2, x0 + w / 2)
        for level in (0, 1):
            if cx - w / 2 >= level_until[level]:
                svg.text(cx, top + 33 + 10 * level, label, size=9.5, fill="#37474f", anchor="middle")
                level_until[level] = cx + w / 2 + 4
                break


def _swatch(wide: float, fill: str, stroke: str, rx: float = 0, width: float = 1) -> str:
    return (
        f'<rect x="0" y="-7" width="{wide}" height="14" rx="{rx}" fill="{fill}" stroke="{stroke}" '
        f'stroke-width="{width}"/>'
    )


def _draw_legend(svg: _Svg, lay: _Layout, top: float, local: bool) -> float:
    """The legend from ``top``, wrapped to the picture's width; returns its bottom."""
    svg.add(f'<line x1="10" y1="{top - 10:.1f}" x2="{lay.width - 10:.1f}" y2="{top - 10:.1f}" stroke="#ddd"/>')
    hue = _CLIENT_HUES[0]
    entries: list[tuple[str, str]] = [
        (_swatch(26, _light(hue), hue, rx=4), "owns the queue (one ProcessQueue)"),
        (f'<circle cx="9" cy="0" r="8.5" fill="{_DELIVER}"/>', "delivered offset"),
        (f'<circle cx="9" cy="0" r="8.5" fill="{_REDELIVER}"/>', "redelivered"),
        (f'<circle cx="9" cy="0" r="8" fill="#fff" stroke="{_POSITION}" stroke-width="2"/>', "positioned at"),
        (
            f'<line x1="0" y1="4" x2="26" y2="4" stroke="{_TABLE_TEXT}"/><text x="2" y="2" font-size="9" '
            f'font-weight="bold" fill="{_TABLE_TEXT}">3</text>',
            "consumer's memory offset | its offsets.json" if local else "consumer's memory offset",
        ),
        (_swatch(18, _COMMIT, _COMMIT, rx=3), "commit sent (cause)"),
        (_swatch(18, "#fff", _COMMIT, rx=3, width=1.6), "commit on a pull"),
        (
            _swatch(18, "#fff", _LOST, rx=3, width=1.6)
            + f'<line x1="0" y1="7" x2="18" y2="-7" stroke="{_FALL}" stroke-width="1.5"/>',
            "commit lost",
        ),
        (_swatch(16, "#fff", _MESSAGE), "message stored"),
        (_swatch(26, _light(hue, 0.6), hue, rx=2), "offset table value (tint: its writer)"),
        (_swatch(26, "#fbf3ea", _FILE, rx=2), "flushed file"),
        (_swatch(26, "#fff", _FALL, rx=2, width=2), "value fell"),
        (_swatch(22, _DOWN, _DOWN), "not running / down"),
        (f'<path d="M 8 -7 L 15 0 L 8 7 L 1 0 Z" fill="{_EVENT}"/>', "other event"),
        (f'<line x1="9" y1="-9" x2="9" y2="9" stroke="{_BREAK}" stroke-width="2.5"/>', "property broke"),
    ]
    x, y = 14.0, top + 8
    for glyph, text in entries:
        wide = 32 + _text_width(text, 10.5) + 18
        if x + wide > lay.width - 10:
            x, y = 14.0, y + 24
        svg.add(f'<g transform="translate({x:.1f} {y:.1f})">{glyph}</g>')
        svg.text(x + 32, y + 4, text, size=10.5, fill="#333")
        x += wide
    return y + 12


def step_table(config: Config, actions: list[Action], violations: list[Violation]) -> str:
    """The run as text: each violation, then one line per step with its logical time."""
    model = Model(config)
    state = model.initial()
    lines = [violation_label(v) for v in violations]
    lines.append(f"{'step':>5}  {'now (ms)':>9}  action")
    for k, action in enumerate(actions, 1):
        try:
            state = model.step(state, action)
        except ActionNotEnabled as err:
            raise TimelineError(f"step {k}: {action!r} is not enabled after the steps before it ({err})") from None
        lines.append(f"{k:>5}  {state.now:>9}  {action!r}")
    return "\n".join(lines)


def render_timeline_html(
    config: Config,
    actions: list[Action],
    violations: list[Violation],
    *,
    title: str = "",
    walk_steps: int | None = None,
) -> str:
    """A self-contained HTML page: ``render_timeline``'s SVG above the step table (``step_table``)."""
    svg = render_timeline(config, actions, violations, title=title, walk_steps=walk_steps)
    svg = svg.split("\n", 1)[1]  # the XML declaration has no place inside HTML
    page_title = _esc(title or "Counterexample: " + (", ".join(v.id for v in violations) or "no violation"))
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f"<title>{page_title}</title>\n"
        "<style>body{margin:12px;font-family:sans-serif} pre{font-size:12px;background:#f7f7f7;padding:8px}</style>\n"
        "</head>\n<body>\n"
        f"{svg}"
        f"<h2>Steps</h2>\n<pre>{_esc(step_table(config, actions, violations))}</pre>\n"
        "</body>\n</html>\n"
    )
