"""The model under Hypothesis' stateful testing: every action family, every property, every step.

The swarm machine draws its configuration; the pinned ones make sure each mode gets a full budget.
The last test shows the machine refutes a planted bug and shrinks it to a short counterexample.
"""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import run_state_machine_as_test

from rmqspec.properties.machines import SpecMachine, configs, machine_for
from rmqspec.properties.profiles import scaled
from rmqspec.spec.config import BROADCASTING, CLUSTERING, Config

TestSwarm = SpecMachine.TestCase
TestSwarm.settings = scaled(1.0)

TestClustering = machine_for(configs(mode=CLUSTERING, consumers=3)).TestCase
TestClustering.settings = scaled(0.5)

TestBroadcasting = machine_for(configs(mode=BROADCASTING)).TestCase
TestBroadcasting.settings = scaled(0.25)

# Few queues and maxReconsumeTimes 1, so that failures go round the retry topic into the DLQ.
TestRetries = machine_for(configs(mode=CLUSTERING, consumers=1, queues=1, max_reconsume_times=1)).TestCase
TestRetries.settings = scaled(0.25)

# slaves: two broker crashes, so that drawn runs also see the master come back and the slave's sync undo
# what it took during the outage (R3.8)
TestSlaves = machine_for(configs(slave=True, broker_crashes=2)).TestCase
TestSlaves.settings = scaled(0.25)


def test_machine_refutes_and_shrinks_a_planted_watermark_bug() -> None:
    # One consumer and one queue, no faults: the bug needs nothing more, and a fixed config keeps
    # the search (and the shrinking) to the action sequence alone.
    buggy_config = Config(
        consumers=1,
        queues=1,
        messages_per_queue=3,
        pull_batch_size=2,
        client_crashes=0,
        client_shutdowns=0,
        broker_crashes=0,
        mutations=frozenset({"watermark_highest_consumed"}),
    )
    buggy = machine_for(st.just(buggy_config))
    # The claim is about the step checks and the shrinker: every candidate the shrinker tries that passes its
    # steps would be quiesced at teardown (the suites' default), which costs 300 s here and adds nothing.
    buggy.liveness = False
    with pytest.raises(AssertionError, match="INV-2") as failure:
        run_state_machine_as_test(
            buggy,
            settings=settings(
                max_examples=300, stateful_step_count=60, derandomize=True, database=None, report_multiple_bugs=False
            ),
        )
    steps = str(failure.value.__notes__).count("state.step(")  # type: ignore[attr-defined]
    assert 0 < steps < 60, f"counterexample not shrunk below the step budget: {steps} steps"
