"""The unit of work of a campaign: one run, a pure function of (seed, swarm profile, config sample).

A run draws a configuration from the seed, walks the model with the actions its swarm profile
allows, drives the reference implementation in lockstep (the refinement check), checks every
invariant and action property at every step, then (unless ``liveness`` is off) quiesces the end state
and checks liveness (docs/spec.md, "Liveness at quiescence"), telling a dead task's harm from a violation, and returns a
flat, JSON-friendly result. Given the
same inputs and code version it returns the same result, trace hash included; that is what lets
Spark retry a lost task and what the campaign's determinism self-check verifies.

Swarm profiles follow swarm testing: each switches whole action families on or off and sets the
perturbation budgets (crashes, shutdowns, broker crashes, send-back failures); healing actions
(restart, channel expiry, timers, network delivery) are always on and never budgeted.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rmqspec.properties.canonical import stable_fingerprint
from rmqspec.properties.exhaustive import Bounds
from rmqspec.properties.explore import (
    Counterexample,
    liveness_counterexample,
    lost_counterexample,
    replay,
    shrink,
)
from rmqspec.properties.fates import message_fates
from rmqspec.properties.features import Features
from rmqspec.properties.liveness import DeadTask, check_liveness, death
from rmqspec.properties.rocketmq_bugs import candidate, classify
from rmqspec.properties.scenario_starts import STARTS, Start
from rmqspec.properties.search_coverage import count_sometimes
from rmqspec.properties.serialize import action_to_json, config_to_json
from rmqspec.spec import actions as act
from rmqspec.spec.config import (
    AVG,
    AVG_BY_CIRCLE,
    BROADCASTING,
    CLUSTERING,
    CONFIG,
    CONSISTENT_HASH,
    CONSUME_FROM_WHERE,
    MACHINE_ROOM,
    MACHINE_ROOM_NEARBY,
    NEARBY_INNER_STRATEGIES,
    V4_9_8,
    VERSIONS,
    Config,
)
from rmqspec.spec.invariants import ACTION_PROPERTIES, INVARIANTS, Violation, check_state, check_step
from rmqspec.spec.model import Model
from rmqspec.spec.state import State

if TYPE_CHECKING:
    from rmqspec.campaign.corpus import Plan

# Action families a profile can switch off. Healing and progress families are always on.
PERTURBING_FAMILIES: dict[str, tuple[type, ...]] = {
    "client_crashes": (act.Crash,),
    "client_shutdowns": (act.Shutdown,),
    "broker_crashes": (act.BrokerCrash,),
    "produce": (act.Produce, act.CoolQueueHead),
}
_FAMILY_OF: dict[type, str] = {
    act.Tick: "tick",
    act.Produce: "produce",
    act.CoolQueueHead: "produce",
    act.BrokerFlush: "broker_timer",
    act.DeliverScheduled: "broker_timer",
    act.BrokerCrash: "broker_crash",
    act.BrokerRestart: "broker_heal",
    act.ExpireChannel: "broker_heal",
    act.SlaveReplicate: "broker_heal",  # slaves: HA catching up and the offset sync (a timer) heal
    act.SlaveSync: "broker_timer",
    act.BrokerReceive: "network",
    act.Start: "client_start",
    act.Shutdown: "client_stop",
    act.Crash: "client_stop",
    act.Heartbeat: "client_timer",
    act.PersistOffsets: "client_timer",
    act.OffsetFileWriteLands: "client_timer",  # a lagging persistAll's write of offsets.json (docs/spec.md, "What is
    # real, ranked")
    act.CleanExpiredMsg: "client_timer",
    act.Rebalance: "rebalance",
    act.RebalanceQueryError: "rebalance",
    act.SendPull: "pull",
    act.ReceivePull: "pull",
    act.StartConsume: "consume",
    act.FinishConsume: "consume",
    act.ApplyConsumeOffset: "consume",
    act.OrphanReturns: "consume",  # an orderly listener that outlived a Shutdown returns (docs/spec.md, "What is real,
    # ranked")
    act.LockAll: "client_timer",  # orderly
    act.RetentionDelete: "retention",  # retention (R5.5)
    act.AdminReset: "admin_reset",  # admin reset
    act.ClientResetReceive: "admin_reset",  # admin reset
    act.ClientResetWake: "client_timer",  # admin reset: the end of resetOffset's sleep is a timer
    act.FixOffsetIllegal: "offset_fix",  # the OFFSET_ILLEGAL task (R5.7)
    act.TryLockLater: "client_timer",  # orderly consume loop: the service's scheduled tasks
    act.DelayedUnlock: "client_timer",
    act.Stall: "stall",  # drawn only when a config sets client_stalls
    act.LoseCommit: "network",  # faults, drawn only when a config sets their budgets
    act.RebalanceWithoutSelf: "rebalance",
    act.TaskDies: "client_stop",
    act.CorruptOffsetFile: "broker_crash",
    act.CorruptLocalOffsetFile: "client_stop",
}


@dataclass(frozen=True)
class SwarmProfile:
    """Which perturbations a run may use, and how many of each (healing stays free)."""

    name: str
    client_crashes: int
    client_shutdowns: int
    broker_crashes: int
    send_back_failures: int
    failing_listener: bool  # may the listener answer RECONSUME_LATER / partial acks?
    faults: bool = True  # keep the faults sample_config drew (with_faults)? The calm profile has none

    def apply(self, config: Config) -> Config:
        config = replace(
            config,
            client_crashes=self.client_crashes,
            client_shutdowns=self.client_shutdowns,
            broker_crashes=self.broker_crashes,
            send_back_failures=self.send_back_failures,
        )
        if self.faults:
            return config
        return replace(
            config,
            client_stalls=0,
            commit_losses=0,
            view_faults=0,
            duplicate_client_id=False,
            offset_file_corruptions=0,
            local_offset_file_corruptions=0,
            task_deaths=0,
        )


PROFILES: tuple[SwarmProfile, ...] = (
    SwarmProfile("calm", 0, 0, 0, 0, False, faults=False),
    SwarmProfile("churn", 0, 3, 0, 0, False),
    SwarmProfile("crashes", 3, 0, 0, 0, True),
    SwarmProfile("broker-failover", 0, 0, 2, 0, True),
    SwarmProfile("retries", 0, 0, 0, 3, True),
    SwarmProfile("everything", 2, 2, 1, 2, True),
)
PROFILE_BY_NAME = {p.name: p for p in PROFILES}


def sample_config(
    rng: random.Random, mutations: frozenset[str] = frozenset(), profile: SwarmProfile | None = None
) -> Config:
    """A small configuration; every field a campaign varies is drawn from ``rng``. ``profile``, the run's
    swarm profile, only weighs the slave draw (a slave matters while the master is down)."""
    messages = rng.randint(1, 5)
    tags: tuple[str, ...] = ("A",)
    subscription: tuple[str, ...] | None = None
    if rng.random() < 0.25:
        tags, subscription = ("A", "B"), rng.choice((None, ("A",)))
    version = rng.choice(VERSIONS)
    # Offset-query errors under both versions: under 4.9.8 a violation they cause is RMQ-14, reported as a reproduced
    # RocketMQ bug (properties/rocketmq_bugs.py), and the 4.9.8 paths they open are where real 4.x clients run.
    query_errors = rng.randint(0, 1)
    config = Config(
        consumers=rng.randint(1, 4),
        queues=rng.randint(1, 6),
        messages_per_queue=messages,
        backlog=rng.randint(0, messages),
        backlog_head_hot=rng.random() < 0.5,
        mode=CLUSTERING if rng.random() < 0.75 else BROADCASTING,
        strategy=rng.choice((AVG, AVG_BY_CIRCLE, CONSISTENT_HASH)),
        consume_from_where=rng.choice(CONSUME_FROM_WHERE),
        consume_timestamp=rng.choice((0, 15_000, 60_000)),
        pull_batch_size=rng.randint(1, 4),
        consume_batch_size=rng.randint(1, 2),
        pull_threshold_for_queue=rng.randint(1, 6),
        max_reconsume_times=rng.randint(1, 3),
        tags=tags,
        subscription=subscription,
        version=version,
        query_errors=query_errors,
        mutations=mutations,
    )
    config = with_allocation_strategy(rng, config)
    # orderly: one run in four is an orderly consumer (R8.1-R8.4), drawn last to keep the other draws
    config = replace(config, orderly=rng.random() < 0.25)
    # admin reset: one CLUSTERING, non-orderly 5.x run in three gets an admin reset
    # (R3.10b). Under 4.9.8 a reset is RMQ-26, which INV-18 reports (tests/test_admin_reset.py). Drawn
    # last, after the draws above, so that those keep their values for a given seed.
    # Drawn under both versions: under 4.9.8 a violation it causes there is RMQ-26, reported as a reproduced RocketMQ
    # bug (properties/rocketmq_bugs.py).
    if config.mode == CLUSTERING and not config.orderly and rng.random() < 1 / 3:
        config = replace(config, admin_resets=1)
    # retention: one run in three gets commit-log retention (RetentionDelete, hence OFFSET_ILLEGAL).
    # The draw is made for every run, so later draws keep their values for a given seed, but under 4.9.8 it is
    # dropped: there the 10 s OFFSET_ILLEGAL window is a real bug INV-17 reports (S9, apache/rocketmq#7645;
    # tests/test_pull_expiry_and_offset_illegal.py reproduces it), and no configuration keeps a rebalance from
    # removing the pq inside the window: one consumer or BROADCASTING still drops a pull-expired pq (R6.6,
    # R9.4), which the quiescence at the end of every run reaches. Drawn last.
    # Under 4.9.8 too, in both modes: a violation of the late correction's window is reported as a reproduced RocketMQ
    # bug (properties/rocketmq_bugs.py), and 4.9.8's delayed OFFSET_ILLEGAL task (FixOffsetIllegal) is reached.
    if rng.random() < 1 / 3:
        config = replace(config, retention_deletes=rng.randint(1, 2))
    config = with_faults(rng, config)
    # orderly consume loop: one orderly run in four leaves autoCommit off (R8.6), drawn after the above
    if config.orderly and rng.random() < 1 / 4:
        config = replace(config, orderly_auto_commit=False)
    # slaves: one run in four of those it is modelled for (no orderly, admin reset, stalls or dead tasks) gets a
    # slave (docs/spec.md, section slave), drawn last; offset_check_in_slave never (it restores RMQ-17, which INV-21
    # reports) Branch coverage (docs/campaign.md, "Branch coverage"): one in two where retention is on, so that a slave
    # serving pulls meets OFFSET_ILLEGAL (broker_rules.slave_pull_result) in a default campaign, and one in two under
    # the profiles with broker crashes, so that more runs fail over to it (a slave in about one run in eight before, one
    # in six now).
    failover = profile is not None and profile.broker_crashes > 0
    if not (config.orderly or config.admin_resets or config.client_stalls or config.task_deaths) and rng.random() < (
        1 / 2 if config.retention_deletes or failover else 1 / 4
    ):
        config = replace(config, slave=True)
    # Branch coverage: maxReconsumeTimes -1 (the default: 16, or Integer.MAX_VALUE for an orderly consumer;
    # Config.effective_max_reconsume_times) in one run in eight, drawn last.
    if rng.random() < 1 / 8:
        config = replace(config, max_reconsume_times=-1)
    # Branch coverage: a short consumeTimeout (cleanExpiredMsg, R6.8) in one concurrent run in four, drawn last.
    # At the default 15 s only the p99 listener outlives it (Config.consume_timeout: about 2 runs in 100
    # remove a message); at 2 s a listener left running over one or two Ticks does, so these runs send
    # expired messages back and meet their listener's late answer (5.x: the skip of R7.3). Measured at 3 s
    # in one run in six: a message removed in 11 of 52 such runs, the late failure answer in none.
    if not config.orderly and rng.random() < 1 / 4:
        config = replace(config, consume_timeout=SHORT_CONSUME_TIMEOUT)
    # Flow control (the pull's pullThresholdForQueue clause, PullMixin._send_pull) in one run in four, drawn last: a
    # threshold of 1 or 2 under a pull batch of at least 2 and at least three more messages per queue than the
    # threshold, so that a pq holds more than the threshold while its listener is slow and its pull is deferred.
    # Without it the draws above rarely engage flow control (3 of 96 runs that could, measured).
    if rng.random() < 1 / 4:
        threshold = rng.choice((1, 2))
        config = replace(
            config,
            pull_threshold_for_queue=threshold,
            pull_batch_size=max(config.pull_batch_size, 2),
            messages_per_queue=min(60, max(config.messages_per_queue, threshold + 3)),
        )
    return config


# Long horizons: one run in four is *patient* (``patient_run``): whenever time may pass, its walk lets it pass with
# probability PATIENT_TICK before choosing a family, so the run lasts past the broker's and the clients' longer
# periods (the retry topic's delay levels of a minute and more, the 120 s pull and channel expiry, the 30 s lock
# expiry, consumeTimeout) while its busy steps still interleave. A quarter keeps three quarters of the runs at the
# walks the other figures were measured on.
PATIENT_SHARE = 1 / 4
PATIENT_TICK = 1 / 3


def patient_run(seed: int) -> bool:
    """Is the run with ``seed`` patient? Drawn from its own stream, so the run's other draws keep their values."""
    return random.Random(f"patient {seed}").random() < PATIENT_SHARE


# Fault timing, drawn per run like the swarm's families: a budgeted fault (``actions.PERTURBING``: crashes,
# shutdowns, offset-query errors, retention, resets, stalls, lost commits, ...) is enabled from a run's first step
# and picked like any action, so its timing was one shape for every run: of 115 faults in 20 sampled runs, 51 came
# in the first 20 steps (before commits, cached messages, locks or a second consumer existed for them to meet) and
# 14 after step 150. Each run draws how long its faults wait: a third offer them like any action, a third hold
# every offered fault back with probability 3/4, a third with 19/20 (a fault offered at every step is then taken
# about once in 160 steps, the middle of a default 300-step run). Measured on 40 runs that hold: 16 of 114 faults
# in the first 20 steps, 26 after step 150; they spend less of their budgets, which the third that does not hold
# still spends. The family-specific holds (HOLD_*) still apply.
FAULT_HOLDS = (0.0, 3 / 4, 19 / 20)


def fault_hold(seed: int) -> float:
    """How often the run with ``seed`` holds an offered fault back (``FAULT_HOLDS``). Drawn from its own stream,
    so the run's other draws keep their values."""
    return FAULT_HOLDS[random.Random(f"fault hold {seed}").randrange(len(FAULT_HOLDS))]


SHORT_CONSUME_TIMEOUT = 2_000  # ms; sample_config's short consumeTimeout (the default is 15 s)


# Directed starts (properties/scenario_starts.py): how often a run begins with a scripted prefix that brings the
# walk to a rare precondition. One run in seven: seven is prime to the six swarm profiles (unit k runs profile
# k mod 6), so the directed runs meet every profile, and six runs in seven stay with what sample_config draws.
DIRECTED_EVERY = 7
DIRECTED_SHARE = 1 / DIRECTED_EVERY


def directed_start(seed: int) -> Start | None:
    """The directed start of the run with ``seed``, or None (a walk from ``initial()``). The runs with seed 6, 13,
    20, ... take the starts in rounds: every round of ``len(STARTS)`` directed runs deals each start once, in an
    order shuffled per round, so any campaign of ``DIRECTED_EVERY * len(STARTS)`` runs from a seed that begins a
    round (0, the default, does) runs every start, where a random draw per run would leave each start unmet
    in about one 400-run campaign in four. The run's own draws come from ``random.Random(seed)`` either way."""
    if seed % DIRECTED_EVERY != DIRECTED_EVERY - 1:
        return None
    k = seed // DIRECTED_EVERY
    order = list(range(len(STARTS)))
    random.Random(f"directed starts round {k // len(STARTS)}").shuffle(order)
    return STARTS[order[k % len(STARTS)]]


def _with_profile(config: Config, profile: SwarmProfile, mutations: frozenset[str]) -> Config:
    """A directed start's configuration under a swarm profile: the profile's perturbation budgets on top of
    the script's own (which its prefix may have spent), the listener's failures as the profile allows, the
    mutations of the campaign. The script's own faults (a stall) stay even under the calm profile: its prefix
    needs them."""
    return replace(
        config,
        client_crashes=config.client_crashes + profile.client_crashes,
        client_shutdowns=config.client_shutdowns + profile.client_shutdowns,
        broker_crashes=config.broker_crashes + profile.broker_crashes,
        send_back_failures=config.send_back_failures + profile.send_back_failures,
        mutations=mutations,
    )


def with_faults(rng: random.Random, config: Config) -> Config:
    """Faults (docs/spec.md, sections orderly_consume and faults), drawn after every other draw of ``sample_config`` so
    that those keep their values for a given seed, and each one independently: a stop-the-world ``Stall``, a lost oneway
    commit, a consumer list without oneself, two consumers sharing a clientId (RMQ-11), an unreadable broker or
    (BROADCASTING) consumer offset file, a background task that dies (``TaskDies``), each a budget of 1 as in
    ``properties/machines.configs``.

    Each fault is in about one run in eight (1/8 of all runs; a shared clientId 1/4 of the runs that allow
    it, a local file 1/3 of the BROADCASTING runs): about half the runs keep the fault-free configurations
    the other areas were tuned and measured on, while a few hundred runs still draw every fault dozens of
    times, and a run with several faults at once stays rare enough for its counterexample to shrink. A
    budget is spent only where the walk enables it: the broker's file is corrupted while the broker is
    down, so only under the swarm profiles with broker crashes; a consumer's file while that consumer is
    down, before its first start included.

    A dead task fails liveness by design (tests/test_liveness.py): the run's liveness check reports what
    the task's absence leaves undone as that fault's harm, not as a violation (``liveness.explains``), so
    the correct model stays clean; it is drawn last, so that the other draws keep their values for a seed.
    ``Config`` refuses the admin reset together with stalls, lost commits, view faults, a shared clientId and
    dead tasks, so a run with an admin reset draws none of these (and a run with a dead task no slave)."""
    free = not config.admin_resets  # Config.__post_init__: not modelled together with the admin reset (yet)
    # Branch coverage: one orderly run in three stalls, so that a lock expires under a queued consume request
    # (a stall outlasts the 30 s lock: tryLockLaterAndReconsume, R8.5); about one run in six in all stalls.
    if free and rng.random() < (1 / 3 if config.orderly else 1 / 8):
        config = replace(config, client_stalls=1)
    if free and rng.random() < 1 / 8:
        config = replace(config, commit_losses=1)
    if free and rng.random() < 1 / 8:
        config = replace(config, view_faults=1)
    # RMQ-11 needs two consumers in CLUSTERING; MACHINE_ROOM_NEARBY keys rooms by clientId (Config refuses it)
    duplicable = config.mode == CLUSTERING and config.consumers >= 2 and config.strategy != MACHINE_ROOM_NEARBY
    if free and duplicable and rng.random() < 1 / 4:  # about half the runs allow it
        config = replace(config, duplicate_client_id=True)
    if rng.random() < 1 / 8:  # at most 1 (Config): a second would leave the broker unable to start
        config = replace(config, offset_file_corruptions=1)
    if config.mode == BROADCASTING and rng.random() < 1 / 3:  # only a BROADCASTING consumer has a local file
        config = replace(config, local_offset_file_corruptions=1)
    if free and rng.random() < 1 / 8:
        config = replace(config, task_deaths=1)
    # offsets.json's unlocked writers (docs/spec.md, "What is real, ranked") in half the BROADCASTING runs: two lagging
    # persistAlls, so one can still race a removal's persist(mq) after the other landed before anything else wrote
    if config.mode == BROADCASTING and rng.random() < 1 / 2:
        config = replace(config, lagging_file_writes=2)
    return config


def with_allocation_strategy(rng: random.Random, config: Config) -> Config:
    """Two runs in five switch to a strategy with parameters (R11.3-R11.6): CONFIG lists, MACHINE_ROOM
    rooms, MACHINE_ROOM_NEARBY around a partitioning strategy, or consistent hashing with 0 or 1
    virtual nodes. Some leave queues to nobody; ``spec.anomalies.ALLOCATION_ANOMALIES`` says which."""
    if rng.random() >= 0.4:
        return config
    kind = rng.choice((CONFIG, MACHINE_ROOM, MACHINE_ROOM_NEARBY, CONSISTENT_HASH))
    if kind == CONFIG:
        queues = range(config.queue_count)
        lists = tuple(tuple(q for q in queues if rng.random() < 0.5) for _ in range(config.consumers))
        return replace(config, strategy=CONFIG, allocate_config_queues=lists)
    if kind == MACHINE_ROOM:
        # "r1@broker-a@": Java's split drops the trailing empty part (allocation.java_split), so it is r1's too
        broker = rng.choice(("r1@broker-a", "r1@broker-a", "r2@broker-a", "broker-a", "r1@broker-a@"))
        idcs = rng.choice((("r1",), ("r1", "r2"), ("r2",), None))
        return replace(config, strategy=MACHINE_ROOM, broker_name=broker, consumeridcs=idcs)
    if kind == MACHINE_ROOM_NEARBY:
        rooms = tuple(rng.choice(("r1", "r2")) for _ in range(config.consumers))
        return replace(
            config,
            strategy=MACHINE_ROOM_NEARBY,
            nearby_inner=rng.choice(NEARBY_INNER_STRATEGIES),
            broker_room=rng.choice(("r1", "r2")),
            consumer_rooms=rooms,
        )
    return replace(config, strategy=CONSISTENT_HASH, virtual_node_cnt=rng.choice((0, 1)))


@dataclass
class RunResult:
    """One run, flat: what a DataFrame row holds (``as_row``)."""

    unit: int
    seed: int
    profile: str
    config: Config
    start: str = ""  # the directed start's key (scenario_starts.Start.key), "" for a walk from initial()
    start_steps: int = 0  # how many of the walk's first steps were the start's script
    steps: int = 0
    rules: Counter[str] = field(default_factory=Counter)
    abstract_states: list[int] = field(default_factory=list)
    invariant_checks: int = 0
    deliveries: int = 0
    redeliveries: int = 0
    violations: list[dict[str, Any]] = field(default_factory=list)
    # violations that are RocketMQ 4.9.8's own bugs, reproduced by the correct model (properties/rocketmq_bugs.py):
    # recorded like violations, each with its bug's id ("rocketmq_bug"), and reported apart
    reproduced: list[dict[str, Any]] = field(default_factory=list)
    # liveness at quiescence: checked (the walk ended without a violation and liveness is on), the horizon
    # reached or the checks settled within the step bound, settled early, the quiescence's steps, and the
    # checks that failed only where a dead task explains them (each {id, detail, causes})
    liveness_checked: bool = False
    liveness_reached: bool = False
    liveness_settled: bool = False
    quiescence_steps: int = 0
    liveness_harm: list[dict[str, Any]] = field(default_factory=list)
    # the fate of every message at the end (after the quiescence when liveness is on; properties/fates.py):
    # counts per fate, the fates a modelled fault caused, and the redeliveries per cause (Ghost.redelivery_causes)
    fates: dict[str, int] = field(default_factory=dict)
    fate_harm: dict[str, int] = field(default_factory=dict)
    redelivery_causes: dict[str, int] = field(default_factory=dict)
    # transitions of the walk that met each sometimes-condition (properties/exhaustive.py, SOMETIMES)
    sometimes_hits: dict[str, int] = field(default_factory=dict)
    # with a named configuration's bounds: the portable fingerprints of the walk's states up to the first one
    # outside the constraints, and whether the walk left them (properties/search_coverage.py)
    named_states: list[int] = field(default_factory=list)
    left_constraints: bool = False
    states_inside: int = 0  # the walk's states before it left the constraints (the initial one included)
    # the guided campaign (campaign/corpus.py): where the run's plan came from ("fresh": drawn from its seed), its
    # features (properties/features.py) and its walk's actions, which the driver keeps for the corpus entries only
    origin: str = "fresh"
    features: list[str] = field(default_factory=list)
    actions: list[dict[str, Any]] | None = None
    trace_hash: str = ""
    seconds: float = 0.0

    def as_row(self) -> dict[str, Any]:
        return {
            "unit": self.unit,
            "seed": self.seed,
            "profile": self.profile,
            "start": self.start,
            "start_steps": self.start_steps,
            "config": json.dumps(config_to_json(self.config), sort_keys=True),
            "steps": self.steps,
            "rules": dict(self.rules),
            "distinct_abstract_states": len(set(self.abstract_states)),
            "abstract_states": sorted(set(self.abstract_states)),
            "invariant_checks": self.invariant_checks,
            "deliveries": self.deliveries,
            "redeliveries": self.redeliveries,
            "violation_count": len(self.violations),
            "violations": [json.dumps(v, sort_keys=True) for v in self.violations],
            "reproduced": [json.dumps(v, sort_keys=True) for v in self.reproduced],
            "liveness_checked": self.liveness_checked,
            "liveness_reached": self.liveness_reached,
            "liveness_settled": self.liveness_settled,
            "quiescence_steps": self.quiescence_steps,
            "liveness_harm": [json.dumps(h, sort_keys=True) for h in self.liveness_harm],
            "fates": dict(self.fates),
            "fate_harm": dict(self.fate_harm),
            "redelivery_causes": dict(self.redelivery_causes),
            "sometimes_hits": dict(sorted(self.sometimes_hits.items())),
            "named_states": list(self.named_states),
            "left_constraints": self.left_constraints,
            "states_inside": self.states_inside,
            "origin": self.origin,
            "features": list(self.features),
            "actions": self.actions,
            "trace_hash": self.trace_hash,
            "seconds": self.seconds,
        }


def abstract_signature(state: State) -> int:
    """A coarse abstraction of a state for coverage: what is owned, committed and held, without
    the clock, minted ids or ghost data. 64-bit so that per-run sets stay small."""
    clients = tuple(
        (
            cl.running,
            cl.mem,
            tuple(None if pq is None else (pq.msg_count, pq.next_offset, pq.pull_state) for pq in cl.pqs),
            len(cl.requests) + len(cl.consuming),
            len(cl.channel),
        )
        for cl in state.clients
    )
    b = state.broker
    key = (b.up, b.offsets, b.flushed, tuple(q.max_offset for q in b.queues), len(b.scheduled), len(b.dlq), clients)
    return int.from_bytes(hashlib.blake2b(repr(key).encode(), digest_size=8).digest(), "big")


def scratch_dir() -> str | None:
    """Where a run's reference files go: ``RMQSPEC_SCRATCH``, else a tmpfs (``/dev/shm``) when there
    is one, because fsync on a disk makes two parallel runs wait on each other (measured: 1.36x
    slower per run on disk, 1.09x on tmpfs). The refinement tests keep using real disk files."""
    configured = os.environ.get("RMQSPEC_SCRATCH")
    if configured:
        return configured
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


def run_unit(
    unit: int,
    seed: int,
    profile_name: str,
    steps: int,
    mutations: frozenset[str] = frozenset(),
    lockstep: bool = True,
    liveness: bool = True,
    fixed_config: Config | None = None,
    bounds: Bounds | None = None,
    plan: Plan | None = None,
) -> RunResult:
    """Execute one run. Deterministic in its arguments (and the code version). With ``liveness`` a walk
    that ends without a violation is quiesced and checked (``liveness.check_liveness``): a failed check
    that a still-dead task explains is recorded as its harm (``liveness_harm``), any other as a violation
    (shrunk, with ``walk_steps``). With ``lockstep`` the reference follows the quiescence steps too.

    ``fixed_config`` (``rmqspec campaign --config``): the run walks that configuration, with the campaign's
    mutations, instead of drawing one, and without a directed start; of its swarm profile only whether the
    listener may fail applies (the budgets stay the configuration's). With ``bounds`` (a named
    configuration's) the run reports the portable fingerprints (``canonical.stable_fingerprint``) of its states
    up to the first outside the constraints (``named_states``, ``left_constraints``).

    ``plan`` (a guided campaign's, campaign/corpus.py): the run walks the plan's configuration with the campaign's
    mutations, replays the plan's prefix (each action taken where enabled, skipped where not), then walks at random
    from its seed. Every run reports its features (properties/features.py) and its walk's actions."""
    import time

    started = time.perf_counter()
    rng = random.Random(seed)
    profile = PROFILE_BY_NAME[profile_name]
    start = None if fixed_config is not None or plan is not None else directed_start(seed)
    prefix: tuple[act.Action, ...] = ()
    planned: tuple[act.Action, ...] = () if plan is None else plan.prefix
    if fixed_config is not None:
        config = replace(fixed_config, mutations=fixed_config.mutations | mutations)
    elif plan is not None:
        config = replace(plan.config, mutations=plan.config.mutations | mutations)
    elif start is None:
        config = profile.apply(sample_config(rng, mutations, profile))
    else:
        config, prefix = start.prefix()
        config = _with_profile(config, profile, mutations)
    if fixed_config is None and config.orderly and config.version == V4_9_8 and config.mode == CLUSTERING:
        # orderly: a broker outage at a 4.9.8 orderly consumer's first locked pull is a real bug that
        # INV-19 reports (tests/test_orderly.py reproduces it): clean runs keep the broker up there.
        config = replace(config, broker_crashes=0)
    model = Model(config)
    result = RunResult(unit, seed, profile_name, config, "" if start is None else start.key)
    result.origin = plan.origin if plan is not None else "fresh" if start is None else f"start {start.key}"
    features = Features(model)
    patient, hold = patient_run(seed), fault_hold(seed)
    tmp: Path | None = None
    reference: Any = None
    if lockstep and not config.mutations:
        from rmqspec.refinement.reference_system import ReferenceSystem

        tmp = Path(tempfile.mkdtemp(prefix="rmqspec-run-", dir=scratch_dir()))
        reference = ReferenceSystem(config, tmp)
    trace = hashlib.sha256()
    state = model.initial()
    taken: list[act.Action] = []
    deaths: list[DeadTask] = []
    violated = False
    checks = len(INVARIANTS) + len(ACTION_PROPERTIES)
    named = _NamedStates(config, bounds) if bounds is not None else None
    if named is not None:
        named.add(state)
    try:
        at = 0  # the next action of the plan's prefix
        for n in range(steps):
            action: act.Action | None = None
            if n < len(prefix) and prefix[n] in model.enabled(state):
                action = prefix[n]  # the directed start's script
                result.start_steps += 1
            elif at < len(planned):  # the plan's prefix: each action where enabled, skipped where not
                enabled = model.enabled(state)
                while action is None and at < len(planned):
                    if planned[at] in enabled:
                        action = planned[at]
                        result.start_steps += 1
                    at += 1
            if action is None:  # past the script, or a planted bug changed what is enabled: the walk goes on at random
                prefix = ()
                action = _choose(rng, model, state, profile, patient, hold)
            if action is None:
                break
            after = model.step(state, action)
            taken.append(action)
            if (dead := death(action, after, len(taken))) is not None:
                deaths.append(dead)
            trace.update(repr(action).encode())
            result.steps += 1
            result.rules[type(action).__name__] += 1
            result.invariant_checks += checks
            count_sometimes(model, state, action, after, result.sometimes_hits)
            features.observe(state, action, after)
            if named is not None:
                named.add(after)
            violations = check_step(model, state, action, after) + check_state(model, after)
            if reference is not None and not violations:
                reference.apply(action)
                if reference.abstract() != (after.now, after.broker, after.clients) or (
                    reference.abstract_slave() != after.slave  # slaves
                ):
                    violations = [Violation("REFINEMENT", "reference_refines_model", f"after {action!r}")]
            state = after
            result.abstract_states.append(abstract_signature(state))
            if violations:
                _record_violations(result, Counterexample(config, seed, taken, violations))
                violated = True
                break
        final = state
        if liveness and not violated:
            final = _check_liveness(result, model, state, taken, deaths, reference, trace)
    finally:
        if reference is not None:
            reference.close()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    if named is not None:
        result.named_states, result.left_constraints = sorted(named.keys), named.left
        result.states_inside = named.inside
    result.deliveries, result.redeliveries = state.ghost.deliveries, state.ghost.redeliveries  # the walk's
    _record_fates(result, model, final, taken, violated)
    g = final.ghost
    causes = [c for c, _ in g.redelivery_causes] + [c for _, c, _ in g.skips] + [c for c in g.offset_lost if c]
    features.add_end(causes, result.sometimes_hits, [*result.fates, *(f"harm:{h}" for h in result.fate_harm)])
    features.names.update(f"v:{v['id']}" for v in result.violations)
    features.names.update(f"l:{h['id']}" for h in result.liveness_harm)
    result.features = sorted(features.names)
    result.actions = [action_to_json(a) for a in taken]
    trace.update(repr(final[:5]).encode())  # the final (quiesced) state without its (ghost) history
    result.trace_hash = trace.hexdigest()
    result.seconds = round(time.perf_counter() - started, 4)
    return result


class _NamedStates:
    """A run's states inside a named configuration's constraints, as portable fingerprints, up to the first
    state outside them."""

    def __init__(self, config: Config, bounds: Bounds) -> None:
        self.config, self.bounds = config, bounds
        self.relative = bounds.time_is_relative(config)
        self.keys: set[int] = set()
        self.left = False
        self.inside = 0

    def add(self, state: State) -> None:
        if self.left:
            return
        if not self.bounds.admits(state):
            self.left = True
            return
        self.inside += 1
        self.keys.add(stable_fingerprint(state, self.config, self.relative, self.bounds.clamp_ms))


def _record_fates(result: RunResult, model: Model, final: State, taken: list[act.Action], violated: bool) -> None:
    """The fate of every message in ``final`` and the redeliveries per cause (properties/fates.py). A lost
    message in a run without a violation means INV-9 and the fates disagree: recorded as a violation
    ``FATES``, its walk shrunk to one that, replayed and quiesced, still loses a message (``shrink``)."""
    causes = dict.fromkeys(c["cause"] for h in result.liveness_harm for c in h["causes"])
    fates = message_fates(model, final, ", ".join(causes))  # pending after the quiescence: its harm's causes
    result.fates = dict(sorted(fates.counts.items()))
    result.fate_harm = dict(sorted(fates.harm.items()))
    result.redelivery_causes = dict(final.ghost.redelivery_causes)
    found = lost_counterexample(model, result.seed, taken, fates)
    if found is not None and not violated and not result.violations and not result.reproduced:
        _record_violations(result, found)


def _check_liveness(
    result: RunResult,
    model: Model,
    state: State,
    taken: list[act.Action],
    deaths: list[DeadTask],
    reference: Any,
    trace: Any,
) -> State:
    """Quiesce the walk's end state and check liveness (docs/spec.md, "Liveness at quiescence"); returns the quiesced
    state. The reference, if any, follows the quiescence steps and is compared after each (``REFINEMENT``)."""
    outcome = check_liveness(model, state, deaths)
    q = outcome.quiescence
    result.liveness_checked = True
    result.liveness_reached = q.reached
    result.liveness_settled = outcome.settled
    result.quiescence_steps = len(q.steps)
    result.liveness_harm = [
        {
            "id": h.id,
            "detail": h.detail,
            "causes": [c.to_json() for c in h.causes],
        }
        for h in outcome.harms
    ]
    trace.update(f"quiescence {len(q.steps)} {q.reached}".encode())
    trace.update(repr(q.steps).encode())
    if reference is not None:
        after = q.start
        for k, action in enumerate(q.steps, 1):
            after = model.step(after, action)
            reference.apply(action)
            if reference.abstract() != (after.now, after.broker, after.clients) or (
                reference.abstract_slave() != after.slave
            ):
                where = f"after {action!r}, quiescence step {k}"
                found = Counterexample(model.config, result.seed, taken + q.steps[:k], [])
                found.violations = [Violation("REFINEMENT", "reference_refines_model", where)]
                _record_violations(result, found)
                return after
    dead = liveness_counterexample(model, result.seed, taken, outcome)
    if dead is not None:
        _record_violations(result, dead)
    return q.state


# Branch coverage: while the master is down, how often _choose leaves the healing family (its restart) out.
# Picked like any family, the restart comes within a few steps, before a timer brings the clients' commits,
# offset queries and pulls to the slave (R2.4, R2.5, R5.3) or a consumer queries an offset the slave lacks;
# at 3/4 the outage lasts about four times as long, still a small share of the run's 300 steps.
HOLD_OUTAGE = 3 / 4
# Branch coverage: how often _choose holds a master crash back while its offset table equals the last flush
# (half as often while only entries never flushed differ). The crash family is enabled from the first step,
# so the crash came before any commit, and a restart lost nothing; held back, it comes with commits not yet
# flushed (R3.6): the restart loses entries never flushed, so a consumer is positioned without one
# (Model.missing_offset_cause, INV-9a), or lowers flushed ones (INV-8r's failover cause), and commits that
# land on the slave meanwhile meet a master table that has the entry.
HOLD_CRASH = 9 / 10
# Branch coverage: how often _choose holds a stall back while no client has a consume request queued. The
# stall family is enabled from the first step, so a stall came within the first few steps, before any lock
# or request existed; held back, it tends to come with a request queued, and an orderly run then finds its
# lock expired (tryLockLaterAndReconsume, R8.5). At 3/4, 3 of 5 orderly stalls looked at still came in a run's
# first 5 steps; at 9/10 a run without requests still stalls, a few dozen steps in.
HOLD_STALL = 9 / 10
# Branch coverage: how often _choose holds an orderly consumer's Shutdown back while none of the consumers it
# could stop has a listener running. Picked like any stop, the shutdown found a listener in none of 104 orderly
# shutdowns of 150 sampled runs, so a listener outliving its shutdown (Client.orphaned, OrphanReturns,
# docs/spec.md, "What is real, ranked") never came up; held back like a stall, a shutdown tends to come while one runs,
# and one is always preferred when offered.
HOLD_SHUTDOWN = 9 / 10


def _choose(
    rng: random.Random,
    model: Model,
    state: State,
    profile: SwarmProfile,
    patient: bool = False,
    fault_holding: float = 0.0,
) -> act.Action | None:
    """Pick an enabled action the profile allows: a family first, then one of its actions, so that
    rare families are as likely as busy ones. A ``patient`` run lets time pass first with probability
    ``PATIENT_TICK`` whenever it may; with probability ``fault_holding`` (``fault_hold``) every budgeted fault on
    offer is held back for this step, unless nothing else is enabled."""
    by_family: dict[str, list[act.Action]] = {}
    for a in model.enabled(state):
        if isinstance(a, act.FinishConsume) and not profile.failing_listener and not _full_success(state, a):
            continue
        by_family.setdefault(_FAMILY_OF[type(a)], []).append(a)
    if not by_family:
        return None
    if patient and "tick" in by_family and len(by_family) > 1 and rng.random() < PATIENT_TICK:
        return by_family["tick"][0]
    if not state.broker.up and len(by_family) > 1 and "broker_heal" in by_family and rng.random() < HOLD_OUTAGE:
        del by_family["broker_heal"]  # keep the master down a while: see HOLD_OUTAGE
    b = state.broker
    if b.up and "broker_crash" in by_family and len(by_family) > 1:  # see HOLD_CRASH
        reverted = [f for o, f in zip(b.offsets, b.flushed, strict=True) if o != f]  # what a crash would restore
        hold = HOLD_CRASH if not reverted else HOLD_CRASH / 2 if all(f is None for f in reverted) else 0.0
        if hold and rng.random() < hold:
            del by_family["broker_crash"]  # while it is up, BrokerCrash is the family's only action
    if "stall" in by_family:  # stall a client with consume requests queued: see HOLD_STALL
        busy: list[act.Action] = [
            a for a in by_family["stall"] if isinstance(a, act.Stall) and state.clients[a.client].requests
        ]
        if busy:
            by_family["stall"] = busy
        elif len(by_family) > 1 and rng.random() < HOLD_STALL:
            del by_family["stall"]
    stops = by_family.get("client_stop", [])
    if model.orderly and any(isinstance(a, act.Shutdown) for a in stops):  # see HOLD_SHUTDOWN
        others: list[act.Action] = [a for a in stops if not isinstance(a, act.Shutdown)]
        listening = [a for a in stops if isinstance(a, act.Shutdown) and state.clients[a.client].consuming]
        if listening:
            by_family["client_stop"] = listening + others
        elif len(by_family) > 1 and rng.random() < HOLD_SHUTDOWN:
            if others:
                by_family["client_stop"] = others
            else:
                del by_family["client_stop"]
    if fault_holding and any(isinstance(a, act.PERTURBING) for options in by_family.values() for a in options):
        calm: dict[str, list[act.Action]] = {
            f: [a for a in options if not isinstance(a, act.PERTURBING)] for f, options in by_family.items()
        }
        calm = {f: options for f, options in calm.items() if options}
        if calm and rng.random() < fault_holding:  # see FAULT_HOLDS
            by_family = calm
    family = sorted(by_family)[rng.randrange(len(by_family))]
    options = by_family[family]
    return options[rng.randrange(len(options))]


def _full_success(state: State, a: act.FinishConsume) -> bool:
    request = next(r for r in state.clients[a.client].consuming if r.rid == a.rid)
    return a.status == act.CONSUME_SUCCESS and a.ack_index == len(request.msgs) - 1 and a.send_back_fails == 0


def _record_violations(result: RunResult, found: Counterexample) -> None:
    """Shrink ``found`` and record each of its violations (``_record_shrunk``). Violations that could be a reproduced
    RocketMQ bug (properties/rocketmq_bugs.py) are shrunk apart from the others, so that a step breaking both cannot
    shrink to the bug's property alone and hide the other."""
    maybe = [v for v in found.violations if candidate(result.config, v.id)]
    other = [v for v in found.violations if not candidate(result.config, v.id)]
    if not maybe or not other:
        _record_shrunk(result, found)
        return
    _record_shrunk(result, replace(found, violations=other))
    _record_shrunk(result, replace(found, violations=maybe))


def _record_shrunk(result: RunResult, found: Counterexample) -> None:
    """Shrink ``found`` and record each of its violations. A liveness failure's record counts the steps
    of its walk (``shrunk_steps``, ``original_steps``) and holds ``walk_steps``: ``actions`` is the walk,
    then the quiescence steps from its end; its signature is the walk's shape."""
    # A refinement failure cannot be re-checked by replaying the model alone, so it is kept whole.
    small = found if any(v.id == "REFINEMENT" for v in found.violations) else shrink(found)
    walk = small.actions if small.walk_steps is None else small.actions[: small.walk_steps]
    original = found.actions if found.walk_steps is None else found.actions[: found.walk_steps]
    for v in small.violations:
        actions = [action_to_json(a) for a in small.actions]
        record: dict[str, Any] = {
            "id": v.id,
            "name": v.name,
            "detail": v.detail,
            "signature": signature(v.id, walk, quiesced=small.walk_steps is not None),
            "shrunk_steps": len(walk),
            "original_steps": len(original),
            "actions": actions,
        }
        if small.walk_steps is not None:
            record["walk_steps"] = small.walk_steps
        bug = classify(result.config, v.id, actions)
        if bug is not None and result.config.mutations and not _correct_model_agrees(result.config, small, v.id):
            bug = None  # the planted bug's own violation: the correct model does not break the property on this run
        if bug is None:
            result.violations.append(record)
        else:
            record["rocketmq_bug"] = bug.id
            result.reproduced.append(record)


def _correct_model_agrees(config: Config, found: Counterexample, prop: str) -> bool:
    """Does the correct model (``config`` without its planted bugs) take ``found``'s actions and break ``prop`` on
    them too? Only then is a finding of a campaign with planted bugs the RocketMQ bug it resembles
    (properties/rocketmq_bugs.py) rather than the planted bug's."""
    try:
        _, violations = replay(replace(config, mutations=frozenset()), list(found.actions))
    except act.ActionNotEnabled:
        return False
    return any(v.id == prop for v in violations)


# Kinds that say how a failure came about; plumbing (ticks, pulls, deliveries on the wire,
# heartbeats, produces) varies between runs of the same bug and is left out of the signature.
_DISTINGUISHING = {
    "Crash",
    "Shutdown",
    "BrokerCrash",
    "ExpireChannel",
    "PersistOffsets",
    "CleanExpiredMsg",
    "DeliverScheduled",
    "RebalanceQueryError",
    "Stall",  # orderly consume loop and faults: a counterexample's shape names the faults it needed
    "LoseCommit",
    "RebalanceWithoutSelf",
    "TaskDies",
    "CorruptOffsetFile",
    "CorruptLocalOffsetFile",
}


def signature(prop_id: str, actions: list[act.Action], quiesced: bool = False) -> str:
    """Deduplication key: the property, the kind of the step that broke it, and the shape of the
    shrunk run: which perturbations, timers and listener answers it needed. A liveness failure
    (``quiesced``) is keyed by its walk, ``actions``, and broken by the quiescence that follows it."""
    shape = set()
    for a in actions:
        name = type(a).__name__
        if isinstance(a, act.FinishConsume):
            shape.add(f"{name}:{a.status}{':send-back-failed' if a.send_back_fails else ''}")
        elif name in _DISTINGUISHING:
            shape.add(name)
    last = "quiescence" if quiesced else type(actions[-1]).__name__ if actions else "-"
    key = f"{prop_id}|{last}|{','.join(sorted(shape))}"
    return f"{prop_id}:{hashlib.sha256(key.encode()).hexdigest()[:10]}"
