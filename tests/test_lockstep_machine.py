"""Refinement under Hypothesis: the model and the reference implementation, driven by the same
actions, agree after every step (the reference seen through its abstraction function)."""

from __future__ import annotations

from rmqspec.properties.machines import LockstepMachine, configs, machine_for
from rmqspec.properties.profiles import scaled
from rmqspec.spec.config import BROADCASTING, CLUSTERING

# A lockstep step costs ~20x a model step (real files, fsync), hence the smaller share of the budget.
TestLockstepClustering = machine_for(configs(mode=CLUSTERING), base=LockstepMachine).TestCase
TestLockstepClustering.settings = scaled(0.15)

TestLockstepBroadcasting = machine_for(configs(mode=BROADCASTING), base=LockstepMachine).TestCase
TestLockstepBroadcasting.settings = scaled(0.1)
