"""Hypothesis settings profiles: ``dev``, ``ci`` and ``nightly``.

``ci`` is chosen automatically when the environment variable ``CI`` is ``true``; otherwise
``RMQSPEC_PROFILE`` names a profile, and ``dev`` is the default. The budgets are sized so that the
``ci`` run of the stateful suites still reaches client crashes, broker crashes, rebalances,
send-backs and DLQ routing (the suite's rule statistics show it), while finishing in a few minutes
on two cores.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

# A state machine step costs ~50 µs in the spec and ~1 ms with the reference in lockstep, so
# example counts differ per suite; each suite scales these with ``scaled``.
PROFILES: dict[str, dict[str, object]] = {
    # Quick feedback while editing.
    "dev": {"max_examples": 60, "stateful_step_count": 80},
    # Enough for every action family to fire many times (see the note in the foundation issue).
    "ci": {"max_examples": 200, "stateful_step_count": 120},
    # Long runs: many more walks, longer walks.
    "nightly": {"max_examples": 3000, "stateful_step_count": 300},
}

for _name, _values in PROFILES.items():
    if _name == "ci":  # CI results must not depend on the run or on a database left behind
        _values = {**_values, "derandomize": True, "database": None}
    settings.register_profile(
        _name,
        deadline=None,  # step cost depends on the state size; a deadline would flake
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
        print_blob=True,
        **_values,  # type: ignore[arg-type]
    )


def active_profile() -> str:
    """The profile this process should use."""
    if os.environ.get("CI", "").lower() == "true":
        return "ci"
    name = os.environ.get("RMQSPEC_PROFILE", "dev")
    if name not in PROFILES:
        raise SystemExit(f"RMQSPEC_PROFILE={name!r} is not a profile; use one of {sorted(PROFILES)}")
    return name


def load_active_profile() -> str:
    name = active_profile()
    settings.load_profile(name)
    return name


def scaled(factor: float) -> settings:
    """The active profile with ``max_examples`` scaled by ``factor`` (at least 5)."""
    current = settings()
    return settings(current, max_examples=max(5, int(current.max_examples * factor)))
