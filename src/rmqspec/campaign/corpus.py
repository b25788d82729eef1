"""The coverage-guided campaign's corpus: runs that reached something new, and the plans of the next round.

A guided campaign (``rmqspec campaign``, the default ``--search guided``) runs in rounds, one per batch of units.
Every run reports its *features* (properties/features.py: the actions and their parameters, the effect of each
step on each field of the state, the facts the model's enabling conditions and properties test and their pairs,
consecutive actions, the ghost's causes, sometimes-conditions and fates), and a measured unit its spec/ arcs
(``branch_features``). Between rounds the driver merges the
rows in unit order: a run that reached a feature no earlier run had becomes a corpus *entry* (its configuration
and its walk's actions). The next round's units are planned from the corpus (``Scheduler.plans``):

- a unit is either *fresh*: a configuration and swarm profile drawn from the unit's seed, as the random search
  does, so the swarm keeps finding configurations the corpus lacks; or it takes a parent entry, chosen with
  *energy*: the sum over the parent's features of 1 / (runs that reached it), divided by the square root of how
  often it was picked already (AFL's favoured entries, HypoFuzz's rare branches), and applies one operator to it:
  **cut** (replay a prefix of the parent, then walk at random from the unit's seed), **perturb** (the prefix with
  a few edits: an action dropped, repeated, two swapped, a ``Tick`` inserted), **splice** (a prefix of the parent,
  then a piece of another entry's walk) or **reconfigure** (one knob of the parent's configuration redrawn, then
  its prefix). A planned prefix is replayed action by action, each skipped where it is not enabled
  (``run_unit``), then the unit walks at random; its budgets are the parent's (a planned unit's profile name says
  only whether its listener may fail);
- which of these five *arms* a unit takes is decided by what they have yielded (a bandit, as AFL++'s MOpt schedules
  its mutators, here by Thompson sampling as Karamcheti et al.'s "Adaptive grey-box fuzz-testing with Thompson
  sampling" does): each arm's yield, the new features per run of its units, is a Poisson rate with a Gamma
  posterior, and a unit takes the arm whose drawn rate is highest. The counts behind each posterior are
  discounted by ``YIELD_DISCOUNT`` per round, since yields fall as coverage grows: an arm is judged by what it
  found lately, not by the first rounds' easy features. A share ``ARM_FLOOR`` of each arm's units is drawn
  uniformly, so every arm is measured again as the corpus grows (MOpt's pilot runs). Early on fresh draws find
  the most (a new configuration opens whole families of features) and take nearly every unit; as the swarm's
  draws repeat themselves and their yield falls below the corpus's, the corpus's arms take over.

Everything the scheduler decides comes from ``random.Random`` seeded by the campaign's seed and the round, and from
the rows of earlier rounds merged in unit order, so a campaign is deterministic for its seed on any number of
executors. The corpus is written to ``<out>/corpus/`` after every round (``save``) and a later campaign can start
from it (``--corpus DIR``, ``load``), as fuzzers keep theirs. The random search (``--search random``) is the same
loop with no corpus: every unit fresh, exactly the campaign of before.
"""

from __future__ import annotations

import json
import math
import os
import random
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rmqspec.jsonin import InputError, iter_lines
from rmqspec.properties.serialize import action_from_json, action_to_json, config_from_json, config_to_json
from rmqspec.spec import actions as act
from rmqspec.spec.config import (
    BROADCASTING,
    CLUSTERING,
    CONSUME_FROM_WHERE,
    V5_X,
    VERSIONS,
    Config,
    ConfigError,
)

OPERATORS = ("cut", "perturb", "splice", "reconfigure")
ARMS = ("fresh", *OPERATORS)
# Each arm is drawn uniformly for this share of a round's units, so that its yield is measured again as the corpus
# grows (MOpt's pilot fuzzing): with rounds of 32 units, five arms at 3 % are about one unit each per round, and
# 85 % of the units go where the posterior says the features are.
ARM_FLOOR = 0.03
# Per merged round, the earlier rounds' runs and new features weigh this much less in each arm's posterior: a
# round's weight halves in two rounds (0.7 ** 2 ~ 0.5), so a two-minute campaign of about ten rounds judges each
# arm by its last three or four, where the swarm's fresh draws have stopped finding what the first rounds found.
YIELD_DISCOUNT = 0.7
# perturb: up to this many edits of the prefix (AFL's havoc stacks 1-16 small edits; a walk of a few hundred steps
# whose actions are skipped where not enabled tolerates few before it is a different walk)
MAX_EDITS = 4
CORPUS_FORMAT = "rmqspec-corpus"


@dataclass(frozen=True)
class Plan:
    """What a planned unit runs: ``config`` (without the campaign's mutations, which ``run_unit`` adds), the actions
    replayed first (each skipped where not enabled), and where the plan came from (``origin``, kept in the row)."""

    config: Config
    prefix: tuple[act.Action, ...]
    origin: str


@dataclass
class Entry:
    """A corpus entry: a run that reached a feature no earlier run had."""

    id: int
    unit: int  # the unit of the campaign that found it (-1: loaded from another campaign's corpus)
    config: Config
    actions: tuple[act.Action, ...]
    features: frozenset[str]  # every feature of the run
    new: tuple[str, ...]  # the features it was the first to reach
    picks: int = 0


@dataclass
class Scheduler:
    """The corpus and the planner of a guided campaign (``guided``) or the plain random one (not ``guided``)."""

    seed: int
    steps: int
    guided: bool = True
    fixed: bool = False  # every unit walks one named configuration: reconfigure is not an operator
    entries: list[Entry] = field(default_factory=list)
    hits: Counter[str] = field(default_factory=Counter)  # feature -> runs that reached it
    curve: list[dict[str, Any]] = field(default_factory=list)  # per round: runs, features, entries, seconds
    # per arm: the runs merged and the features they were first to reach, each round's discounted by YIELD_DISCOUNT
    # per later round
    arm_runs: dict[str, float] = field(default_factory=dict)
    arm_new: dict[str, float] = field(default_factory=dict)

    # --- planning ------------------------------------------------------------------------------------------------
    def plans(self, units: list[int], round_index: int) -> dict[int, Plan | None]:
        """Each unit's plan for this round; None is a fresh unit (its seed draws everything, as in the random
        search)."""
        out: dict[int, Plan | None] = dict.fromkeys(units)
        if not self.guided or not self.entries:
            return out
        rng = random.Random(f"rmqspec corpus {self.seed} round {round_index}")
        rarity = [self.rarity(e) for e in self.entries]  # once per round: the hits change only between rounds
        for unit in units:
            arm = self._arm(rng)
            if arm == "fresh":
                continue
            out[unit] = self._apply(rng, arm, self._pick(rng, rarity))
        return out

    def _arms(self) -> list[str]:
        return [a for a in ARMS if not (self.fixed and a == "reconfigure")]

    def _arm(self, rng: random.Random) -> str:
        """One unit's arm: uniform with probability ``ARM_FLOOR`` per arm, else the arm whose yield drawn from its
        posterior, Gamma(new + 1, 1 / (runs + 1)) over the discounted counts, is highest (an arm never measured
        draws from Gamma(1, 1): one new feature a run, as the first guess)."""
        arms = self._arms()
        if rng.random() < ARM_FLOOR * len(arms):
            return arms[rng.randrange(len(arms))]
        return self._best(rng, arms)

    def _best(self, rng: random.Random, arms: list[str]) -> str:
        drawn = [rng.gammavariate(self.arm_new.get(a, 0.0) + 1, 1 / (self.arm_runs.get(a, 0.0) + 1)) for a in arms]
        return arms[max(range(len(arms)), key=drawn.__getitem__)]

    def shares(self) -> dict[str, float]:
        """Each arm's expected share of the next round's units under the planner (``_arm``): ``ARM_FLOOR``, plus the
        rest times the chance that its drawn yield is the highest, estimated from 2,000 draws of a generator of its
        own (so that asking changes no plan)."""
        arms = self._arms()
        rng = random.Random(f"rmqspec corpus {self.seed} shares")
        best = Counter(self._best(rng, arms) for _ in range(2000))
        spare = 1 - ARM_FLOOR * len(arms)
        return {a: ARM_FLOOR + spare * best[a] / 2000 for a in arms}

    def snapshot(self) -> list[int]:
        """What ``plans`` changes (the entries' pick counts), for ``restore``."""
        return [e.picks for e in self.entries]

    def restore(self, picks: list[int]) -> None:
        """Undo the ``plans`` calls since ``snapshot`` (a resumed batch that failed its check is planned again)."""
        for e, n in zip(self.entries, picks, strict=True):
            e.picks = n

    def _pick(self, rng: random.Random, rarity: list[float]) -> Entry:
        weights = [r / (1 + e.picks) ** 0.5 + 1e-9 for r, e in zip(rarity, self.entries, strict=True)]
        entry = rng.choices(self.entries, weights=weights)[0]
        entry.picks += 1
        return entry

    def rarity(self, entry: Entry) -> float:
        """The sum over the entry's features of 1 / (runs that reached it), summed in a fixed order (a float sum
        must not depend on a set's iteration order, which differs between processes)."""
        return math.fsum(1.0 / max(1, self.hits[f]) for f in sorted(entry.features))

    def energy(self, entry: Entry) -> float:
        """The entry's rarity over the square root of the times it was picked: rare features draw the search, and a
        parent picked often gives way."""
        return self.rarity(entry) / (1 + entry.picks) ** 0.5 + 1e-9

    def _apply(self, rng: random.Random, op: str, parent: Entry) -> Plan:
        actions = parent.actions
        cut = rng.randint(1, len(actions)) if actions else 0
        prefix = actions[:cut]
        config = parent.config
        if op == "perturb" and prefix:
            prefix = _perturb(rng, prefix)
        elif op == "splice" and len(self.entries) > 1:
            other = self.entries[rng.randrange(len(self.entries))]
            if other is not parent and other.actions:
                start = rng.randrange(len(other.actions))
                prefix = prefix + other.actions[start : start + max(1, self.steps - len(prefix))]
                op = f"splice {parent.id}+{other.id}"
        elif op == "reconfigure":
            changed = reconfigure(rng, config)
            if changed is None:
                op = "cut"  # no valid change of one knob: the plan is a cut, and counts as one
            else:
                config, knob = changed
                op = f"reconfigure {knob}"
        prefix = prefix[: self.steps]
        origin = op if " " in op else f"{op} {parent.id}"
        return Plan(config, prefix, origin)

    # --- merging --------------------------------------------------------------------------------------------------
    def absorb(self, rows: list[dict[str, Any]]) -> set[int]:
        """Merge a round's rows, in unit order: count their features and make each run that reached a new one an
        entry. Returns the units that became entries (their rows keep their actions; the others need not)."""
        kept: set[int] = set()
        for arm in self.arm_runs:  # the rounds merged before weigh less in each arm's posterior
            self.arm_runs[arm] *= YIELD_DISCOUNT
            self.arm_new[arm] *= YIELD_DISCOUNT
        for row in sorted(rows, key=lambda r: r["unit"]):
            features = row.get("features") or []
            arcs = branch_features(row.get("spec_arcs"))
            new = tuple(f for f in features if f not in self.hits) + tuple(f for f in arcs if f not in self.hits)
            self.hits.update(features)
            self.hits.update(arcs)
            arm = str(row.get("origin", "fresh")).split(" ")[0]
            arm = arm if arm in ARMS else "fresh"  # "start <key>": a fresh unit's directed start
            self.arm_runs[arm] = self.arm_runs.get(arm, 0.0) + 1
            self.arm_new[arm] = self.arm_new.get(arm, 0.0) + len(new)
            if not new or not self.guided or row.get("actions") is None:
                continue
            try:
                config = replace(config_from_json(json.loads(row["config"])), mutations=frozenset())
                actions = tuple(action_from_json(a) for a in row["actions"])
            except (InputError, ConfigError, ValueError, TypeError):
                continue
            self.entries.append(Entry(len(self.entries), row["unit"], config, actions, frozenset(features), new))
            kept.add(row["unit"])
        return kept

    def record_round(self, runs: int, seconds: float | None, steps: int) -> None:
        """A point of the feature curve: after ``runs`` runs and ``seconds`` of the campaign (None for a batch a
        resumed campaign found on disk), ``steps`` walked."""
        self.curve.append(
            {
                "runs": runs,
                "seconds": None if seconds is None else round(seconds, 2),
                "steps": steps,
                "features": len(self.hits),
                "entries": len(self.entries),
            }
        )

    def rarest(self, n: int = 20) -> list[tuple[str, int]]:
        """The ``n`` features reached by the fewest runs (ties by name)."""
        return sorted(self.hits.items(), key=lambda kv: (kv[1], kv[0]))[:n]

    # --- on disk --------------------------------------------------------------------------------------------------
    def save(self, directory: Path) -> None:
        """Write the corpus to ``directory`` (``entries.jsonl`` and ``features.json``), each file atomically."""
        directory.mkdir(parents=True, exist_ok=True)
        lines = []
        for e in self.entries:
            lines.append(
                json.dumps(
                    {
                        "id": e.id,
                        "unit": e.unit,
                        "config": config_to_json(e.config),
                        "actions": [action_to_json(a) for a in e.actions],
                        "new": list(e.new),
                        "features": sorted(f for f in e.features if not f.startswith("b:")),
                    },
                    sort_keys=True,
                )
            )
        _atomic(directory / "entries.jsonl", "".join(line + "\n" for line in lines))
        doc = {"format": CORPUS_FORMAT, "features": dict(sorted(self.hits.items())), "curve": self.curve}
        _atomic(directory / "features.json", json.dumps(doc, indent=1) + "\n")

    def load(self, directory: Path) -> int:
        """Seed the corpus with the entries of another campaign's ``directory`` (``--corpus DIR``): configurations,
        actions and features (which give them their energy; the runs that reached each are this campaign's own
        count). Returns how many entries were loaded. Raises ``InputError`` naming the file and line of a bad
        entry."""
        path = directory / "entries.jsonl"
        if not path.is_file():
            raise InputError(str(path), "no corpus here (a campaign writes <out>/corpus/entries.jsonl)")
        for n, value in iter_lines(path, str(path)):
            if not isinstance(value, dict) or not isinstance(value.get("actions"), list):
                raise InputError(str(path), "expected an object with 'config' and 'actions'", n)
            try:
                config = replace(config_from_json(value.get("config"), "config"), mutations=frozenset())
                actions = tuple(action_from_json(a, f"actions[{k}]") for k, a in enumerate(value["actions"]))
            except ValueError as err:  # ConfigError too
                raise InputError(str(path), str(err), n) from None
            features = value.get("features", [])
            if not isinstance(features, list) or not all(isinstance(f, str) for f in features):
                raise InputError(str(path), "'features' must be a list of strings", n)
            self.entries.append(Entry(len(self.entries), -1, config, actions, frozenset(features), ()))
        return len(self.entries)


def branch_features(encoded: Any) -> list[str]:
    """The spec/ arcs a measured unit executed (its row's ``spec_arcs``, one unit in ``COVERAGE_EVERY``), as
    features ``b:<file>:<from>><to>``: branch coverage of the model counts as new too. They are counted and make an
    entry, but are not kept with it (a few thousand per run)."""
    if not isinstance(encoded, dict):
        return []
    return [
        f"b:{name}:{flat[k]}>{flat[k + 1]}"
        for name, flat in sorted(encoded.items())
        if isinstance(flat, list)
        for k in range(0, len(flat) - 1, 2)
    ]


def _perturb(rng: random.Random, prefix: tuple[act.Action, ...]) -> tuple[act.Action, ...]:
    out = list(prefix)
    for _ in range(rng.randint(1, MAX_EDITS)):
        if not out:
            break
        k = rng.randrange(len(out))
        edit = rng.randrange(4)
        if edit == 0:
            del out[k]
        elif edit == 1:
            out.insert(k, out[k])
        elif edit == 2 and k + 1 < len(out):
            out[k], out[k + 1] = out[k + 1], out[k]
        else:
            out.insert(k, act.Tick())
    return tuple(out)


# reconfigure: the knobs it may redraw, each with the values the swarm draws (units.sample_config) and a few more
# at the edges a behaviour needs (a flow-control threshold of 1, a query error under either version).
def _knob_values(config: Config) -> dict[str, tuple[Any, ...]]:
    return {
        "version": VERSIONS,
        "mode": (CLUSTERING, BROADCASTING),
        "consume_from_where": CONSUME_FROM_WHERE,
        "pull_threshold_for_queue": (1, 2, 3),
        "pull_batch_size": (1, 2, 4),
        "messages_per_queue": (config.messages_per_queue + 1, config.messages_per_queue + 3),
        "consume_timeout": (2_000, 5_000, 15_000),
        "max_reconsume_times": (0, 1, 2, -1),
        "client_crashes": (1, 2),
        "client_shutdowns": (1, 2),
        "broker_crashes": (1, 2),
        "send_back_failures": (1, 2),
        "query_errors": (1, 2),
        "retention_deletes": (1, 2),
        "commit_losses": (1,),
        "view_faults": (1,),
        "client_stalls": (1,),
        "task_deaths": (1,),
        "slave": (True, False),
        "orderly": (True, False),
        "consumers": (1, 2, 3),
    }


def reconfigure(rng: random.Random, config: Config) -> tuple[Config, str] | None:
    """``config`` with one knob redrawn, and the knob's name; None if five draws all gave an invalid Config."""
    values = _knob_values(config)
    names = sorted(values)
    for _ in range(5):
        knob = names[rng.randrange(len(names))]
        value = rng.choice(values[knob])
        if knob == "messages_per_queue":
            value = min(60, value)
        try:
            changed = replace(config, **{knob: value})
        except ConfigError:
            continue
        if changed != config and _clean_combination(changed):
            return changed, knob
    return None


def _clean_combination(config: Config) -> bool:
    """Not the one configuration the swarm never draws because the correct model reproduces a 4.9.8 bug there with no
    mechanism of its own to tell it by: a broker crash under a 4.9.8 CLUSTERING orderly consumer (INV-19; run_unit
    switches the crashes off for it). The others (an offset-query error, retention, an admin reset under 4.9.8) are
    drawn, and their findings told apart by properties/rocketmq_bugs.py."""
    if config.version == V5_X:
        return True
    return not (config.orderly and config.mode == CLUSTERING and config.broker_crashes)


def _atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
