"""How much of an exhausted configuration's state space each random searcher reaches: the seeded walks of
``rmqspec run``, the Hypothesis machine ``SpecMachine`` and a campaign's units, with the growth of the count
against the steps each one takes (docs/check.md, "A denominator for random search").

``exhaust(named)`` runs the exhaustive search of a named configuration and rebuilds every state it reached
from its parent pointers, to fingerprint each with ``canonical.stable_fingerprint``: the fingerprint every
process computes alike, so that a campaign's units, run on Spark executors, report states the driver can
count against the same set. Each searcher's runs are then fed to a ``Reached``: a run's states count until
it first leaves the constrained space (``Bounds.admits``), after which its states are outside the
denominator. A state inside the constraints whose fingerprint is not in the exhaustive set is counted as
``unmatched``; it would mean the searcher and the exhaustive search disagree on which states are one.

The random search also counts how many transitions meet each sometimes-condition (``SOMETIMES``);
``sometimes_figures`` turns the counts into the flat fields the run summary and the campaign report hold, and
``vacuous_lines`` names each condition no transition met.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from rmqspec.properties.canonical import stable_fingerprint
from rmqspec.properties.exhaustive import SOMETIMES, NamedConfig, check, named_configs
from rmqspec.spec.config import Config
from rmqspec.spec.model import Model
from rmqspec.spec.state import State

Fingerprint = Callable[[State, Config, bool, int], int]

# The default budgets measured (docs/check.md): rmqspec run's walks; a campaign's units, whose default
# campaign (120 s, 300-step units) runs about 700 to 1,100 units on the two-core development machine.
RUN_WALKS, RUN_STEPS = 40, 400
CAMPAIGN_RUNS, CAMPAIGN_STEPS = 1_000, 300


@dataclass(frozen=True)
class StateSpace:
    """An exhausted named configuration: the fingerprints of its distinct states and how to fingerprint one."""

    named: NamedConfig
    fingerprints: frozenset[int]
    relative_time: bool
    seconds: float
    fingerprint: Fingerprint = stable_fingerprint

    @property
    def size(self) -> int:
        return len(self.fingerprints)

    def key(self, state: State) -> int:
        return self.fingerprint(state, self.named.config, self.relative_time, self.named.bounds.clamp_ms)

    def keys_of_run(self, states: Iterable[State]) -> tuple[list[int], bool]:
        """The fingerprints of a run's states up to (not including) the first outside the constraints, and
        whether the run left them."""
        out: list[int] = []
        for s in states:
            if not self.named.bounds.admits(s):
                return out, True
            out.append(self.key(s))
        return out, False


def exhaust(named: NamedConfig, fingerprint: Fingerprint = stable_fingerprint) -> StateSpace:
    """Exhaust ``named`` (its bounds must make it finite; a time limit is dropped) and fingerprint each of its
    distinct states with ``fingerprint``. The search keeps, per state, its parent and the index of the action
    taken from it (breadth first, so a parent comes before its children): each state is rebuilt by one step
    from its parent, and a parent is dropped once its last child is built. With the portable fingerprint the
    count must equal the search's own (``fingerprint``, Python's hash): ValueError if it does not."""
    search = check(named.config, replace(named.bounds, max_seconds=None), stop_at_first=False)
    if not search.result.exhausted:
        raise ValueError(f"{named.name}: the exhaustive search did not finish ({search.result.stopped_by})")
    model, graph, config = search.model, search.graph, named.config
    relative = named.bounds.time_is_relative(config)
    clamp = named.bounds.clamp_ms
    children: dict[int, list[int]] = {}
    for k in range(1, len(graph.parent)):
        children.setdefault(graph.parent[k], []).append(k)
    states: dict[int, State] = {0: model.initial()}
    keys = set()
    for k in range(len(graph.parent)):
        s = states.pop(k)
        keys.add(fingerprint(s, config, relative, clamp))
        kids = children.pop(k, ())
        if kids:
            enabled = model.enabled(s)
            for c in kids:
                states[c] = model.step(s, enabled[graph.via[c]])
    if fingerprint is stable_fingerprint and len(keys) != search.result.distinct_states:
        raise ValueError(
            f"{named.name}: the portable fingerprint gives {len(keys):,} distinct states where the search counted "
            f"{search.result.distinct_states:,}: the two fingerprints disagree on which states are one"
        )
    return StateSpace(named, frozenset(keys), relative, search.result.seconds, fingerprint)


@dataclass
class Reached:
    """A searcher's running count against a ``StateSpace``: ``curve`` holds (steps taken so far, distinct
    states of the space reached so far) after each run, from (0, 0)."""

    space: StateSpace
    searcher: str
    budget: str = ""
    keys: set[int] = field(default_factory=set)
    curve: list[tuple[int, int]] = field(default_factory=lambda: [(0, 0)])
    runs: int = 0
    steps: int = 0
    left: int = 0  # runs that left the constrained space
    inside: int = 0  # states counted: those of each run before it left the constrained space
    unmatched: int = 0  # states inside the constraints whose fingerprint the exhaustive search never met

    def add_keys(self, keys: Iterable[int], steps: int, left: bool = False, inside: int | None = None) -> None:
        """One run: the fingerprints of its states inside the constraints, the steps it took, whether it left
        the constraints, and how many of its states were inside them (default: one per key)."""
        keys = list(keys)
        self.inside += len(keys) if inside is None else inside
        for key in keys:
            if key in self.space.fingerprints:
                self.keys.add(key)
            else:
                self.unmatched += 1
        self.runs += 1
        self.steps += steps
        self.left += left
        self.curve.append((self.steps, len(self.keys)))

    def add_run(self, states: list[State], steps: int) -> None:
        """One run given as its states, the initial one first."""
        keys, left = self.space.keys_of_run(states)
        self.add_keys(keys, steps, left)

    @property
    def count(self) -> int:
        return len(self.keys)

    @property
    def fraction(self) -> float:
        return self.count / self.space.size if self.space.size else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "searcher": self.searcher,
            "budget": self.budget,
            "runs": self.runs,
            "steps": self.steps,
            "reached": self.count,
            "fraction": round(self.fraction, 4),
            "runs_that_left_the_constraints": self.left,
            "states_inside_per_run": round(self.inside / self.runs, 1) if self.runs else 0.0,
            "unmatched": self.unmatched,
            "curve": self.curve,
        }


def run_coverage(space: StateSpace, walks: int = RUN_WALKS, steps: int = RUN_STEPS, first_seed: int = 0) -> Reached:
    """The seeded walks of ``rmqspec run`` (``explore.walk``, seeds ``first_seed`` on): the states of their steps
    (the quiescence after each walk is not counted: it is not a random choice)."""
    from rmqspec.properties.explore import walk

    model = Model(space.named.config)
    reached = Reached(space, "rmqspec run", f"{walks} walks x {steps} steps")
    for seed in range(first_seed, first_seed + walks):
        states: list[State] = [model.initial()]
        walk(model, seed, steps, on_state=states.append, check=False)
        reached.add_run(states, len(states) - 1)
    return reached


def hypothesis_settings(profile: str | None = None, **overrides: Any) -> Any:
    """The settings the test suite gives ``SpecMachine`` (``tests/test_spec_machine.py``: the active Hypothesis
    profile, ``properties/profiles.py``, at scale 1), derandomized and without a database, so that a measurement
    is the same every time; ``overrides`` replace single settings (``max_examples``, ``stateful_step_count``)."""
    from hypothesis import HealthCheck, settings

    from rmqspec.properties.profiles import active_profile, load_active_profile

    if profile is None:
        load_active_profile()
        profile = active_profile()
    base = settings.get_profile(profile)
    return settings(
        base,
        derandomize=True,
        database=None,
        deadline=None,
        print_blob=False,
        suppress_health_check=list(HealthCheck),
        **overrides,
    )


def hypothesis_coverage(space: StateSpace, hyp_settings: Any = None) -> Reached:
    """``SpecMachine`` pinned to the space's configuration (``machines.machine_for``), run under
    ``hyp_settings`` (default ``hypothesis_settings()``): each example's states, the initial one and one per
    step. The observing subclass only records states through the machine's hooks (``on_start``, ``on_step``);
    its liveness check at teardown is off, since the quiescence's states are not the machine's choices and
    its verdict is not what is measured."""
    from hypothesis import strategies as st
    from hypothesis.stateful import run_state_machine_as_test

    from rmqspec.properties.machines import SpecMachine, machine_for

    hyp_settings = hyp_settings if hyp_settings is not None else hypothesis_settings()
    examples: list[list[State]] = []

    class Observed(SpecMachine):
        liveness: ClassVar[bool] = False

        def on_start(self, config: Config) -> None:
            assert self.state is not None
            examples.append([self.state])

        def on_step(self, action: Any, after: State) -> None:
            examples[-1].append(after)

    machine = machine_for(st.just(space.named.config), base=Observed)
    run_state_machine_as_test(machine, settings=hyp_settings)
    budget = f"{hyp_settings.max_examples} examples x \u2264 {hyp_settings.stateful_step_count} steps"
    reached = Reached(space, "Hypothesis SpecMachine", budget)
    for states in examples:
        reached.add_run(states, len(states) - 1)
    return reached


def campaign_coverage(
    space: StateSpace, runs: int = CAMPAIGN_RUNS, steps: int = CAMPAIGN_STEPS, seed: int = 0
) -> Reached:
    """A campaign's units on the space's configuration (``rmqspec campaign --config NAME``), run in this process
    without the reference or the quiescence: neither changes a unit's walk, only what it checks. Each unit
    reports the fingerprints of its states inside the constraints (``named_states``), as on Spark."""
    from rmqspec.campaign.runner import CampaignOptions, unit_spec
    from rmqspec.campaign.units import run_unit

    options = CampaignOptions(out=None, seed=seed, steps=steps)  # type: ignore[arg-type]
    reached = Reached(space, "campaign units", f"{runs} runs x {steps} steps")
    for k in range(runs):
        unit, unit_seed, profile = unit_spec(k, options)
        row = run_unit(
            unit,
            unit_seed,
            profile,
            steps,
            lockstep=False,
            liveness=False,
            fixed_config=space.named.config,
            bounds=space.named.bounds,
        )
        reached.add_keys(row.named_states, row.steps, row.left_constraints, row.states_inside)
    return reached


def shipped_named(config: Config) -> NamedConfig | None:
    """The shipped named configuration whose Config equals ``config``, if any."""
    return next((nc for nc in named_configs().values() if nc.config == config), None)


# --- sometimes-conditions met by the random search --------------------------------------------------------
def count_sometimes(model: Model, before: State, action: Any, after: State, hits: dict[str, int]) -> None:
    """Add one to ``hits[name]`` for each sometimes-condition this transition meets."""
    for st in SOMETIMES:
        if st.holds(model, before, action, after):
            hits[st.name] = hits.get(st.name, 0) + 1


def sometimes_figures(hits: Mapping[str, int]) -> dict[str, Any]:
    """The flat fields a summary holds: ``sometimes_hits`` (every condition, 0 included) and
    ``sometimes_vacuous`` (the names no transition met)."""
    counts = {st.name: int(hits.get(st.name, 0)) for st in SOMETIMES}
    return {"sometimes_hits": counts, "sometimes_vacuous": [name for name, n in counts.items() if not n]}


def vacuous_lines(hits: Mapping[str, int], searched: str = "the walks") -> list[str]:
    """One line per sometimes-condition no transition met."""
    return [
        f"no transition reached {st.name}: {searched} or their configurations never got there"
        for st in SOMETIMES
        if not hits.get(st.name, 0)
    ]


def sometimes_line(hits: Mapping[str, int]) -> str:
    """The transitions that met each sometimes-condition, on one line."""
    return "sometimes-conditions met (transitions): " + ", ".join(
        f"{st.name} {hits.get(st.name, 0):,}" for st in SOMETIMES
    )


# --- the picture ------------------------------------------------------------------------------------------
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd")


def growth_svg(
    space: StateSpace, searchers: list[Reached], subtitle: str = "each searcher at its default budget"
) -> str:
    """One line chart, a curve per searcher: distinct states of the space reached (y) against the steps taken
    (x, logarithmic: the budgets differ by orders of magnitude), each curve ending in a dot, with its count,
    fraction and budget in the legend. The exhaustive count is the title's denominator; ``subtitle`` says what
    the budgets are."""
    import math
    from html import escape

    width, height, left, right, top, bottom = 800, 420, 80, 230, 56, 56
    firsts = [x for s in searchers for x, _ in s.curve[1:2]] or [10]
    x_hi = max([s.steps for s in searchers] + [10])
    lx_lo = math.floor(math.log10(max(1, min(firsts))))
    lx_hi = max(lx_lo + 1, math.ceil(math.log10(x_hi)))
    y_raw = max([s.count for s in searchers] + [1])
    tick = _nice_step(y_raw / 4)
    y_hi = tick * math.ceil(y_raw / tick)

    def sx(steps: float) -> float:
        lx = math.log10(max(steps, 1))
        return left + (width - left - right) * (lx - lx_lo) / (lx_hi - lx_lo)

    def sy(n: float) -> float:
        return height - bottom - (height - bottom - top) * n / y_hi

    name = escape(space.named.name)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
        'font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{left}" y="22" font-size="15" font-weight="bold">{name}: distinct states reached, of '
        f"{space.size:,} in all (exhaustive)</text>",
        f'<text x="{left}" y="40" fill="#555">{escape(subtitle)}; a run counts until it first leaves the '
        "constraints</text>",
    ]
    for e in range(lx_lo, lx_hi + 1):  # x grid: powers of ten
        x = sx(10**e)
        parts.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{sy(0):.1f}" stroke="#e5e5e5"/>')
        parts.append(f'<text x="{x:.1f}" y="{sy(0) + 16:.1f}" text-anchor="middle">{10**e:,}</text>')
    n = 0
    while n <= y_hi:  # y grid
        y = sy(n)
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{width - right}" y2="{y:.1f}" stroke="#e5e5e5"/>')
        parts.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{n:,}</text>')
        n += tick
    parts += [
        f'<line x1="{left}" y1="{sy(0):.1f}" x2="{width - right}" y2="{sy(0):.1f}" stroke="#333"/>',
        f'<line x1="{left}" y1="{top}" x2="{left}" y2="{sy(0):.1f}" stroke="#333"/>',
        f'<text x="{(left + width - right) / 2:.1f}" y="{height - 14}" text-anchor="middle">budget: steps taken '
        "(log scale)</text>",
        f'<text transform="translate(22 {(top + sy(0)) / 2:.1f}) rotate(-90)" text-anchor="middle">distinct states '
        "reached</text>",
    ]
    for k, s in enumerate(searchers):
        color = COLORS[k % len(COLORS)]
        pts = [(sx(x), sy(y)) for x, y in s.curve if x > 0]
        if pts:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
            parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{path}"/>')
            ex, ey = pts[-1]
            parts.append(f'<circle cx="{ex:.1f}" cy="{ey:.1f}" r="3.5" fill="{color}"/>')
        ly = top + 12 + 66 * k
        lx = width - right + 16
        parts += [
            f'<line x1="{lx}" y1="{ly - 4}" x2="{lx + 18}" y2="{ly - 4}" stroke="{color}" stroke-width="3"/>',
            f'<text x="{lx + 24}" y="{ly}" fill="{color}" font-weight="bold">{escape(s.searcher)}</text>',
            f'<text x="{lx + 24}" y="{ly + 15}" fill="#333">{s.count:,} states ({s.fraction:.1%})</text>',
            f'<text x="{lx + 24}" y="{ly + 30}" fill="#777" font-size="11">{escape(s.budget)}</text>',
            f'<text x="{lx + 24}" y="{ly + 44}" fill="#777" font-size="11">{s.steps:,} steps taken</text>',
        ]
    parts.append("</svg>\n")
    return "\n".join(parts)


def _nice_step(raw: float) -> int:
    """The smallest of 1, 2 and 5 times a power of ten that is at least ``raw`` (and at least 1)."""
    power = 1
    while True:
        for m in (1, 2, 5):
            if m * power >= raw:
                return m * power
        power *= 10
