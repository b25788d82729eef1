"""Loads the Hypothesis profile (``ci`` when CI=true, else RMQSPEC_PROFILE or ``dev``).

With ``RMQSPEC_COVERAGE=1`` the session also measures the branch coverage of ``spec/`` in this process
(``rmqspec.spec_coverage.SuiteMeasurement``) and writes ``rmqspec-out/test-coverage.json`` (or the path
in ``RMQSPEC_COVERAGE_OUT``), which ``rmqspec coverage --from FILE`` prints. About 3x slower; off by default.

The fixture ``inv27_unwatched`` takes INV-27 (the client timers' cadence) out of every search for one test, so a
test can show what the liveness checks see of a timer bug on their own.
"""

import os
from pathlib import Path
from typing import Any

import pytest

from rmqspec.properties.profiles import load_active_profile

PROFILE = load_active_profile()
_MEASUREMENT: Any = None


@pytest.fixture
def inv27_unwatched(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every search without INV-27: the walks and machines read ``invariants.ACTION_PROPERTIES`` through
    ``check_step`` at each step, the exhaustive checkers hold their own reference to the tuple."""
    from rmqspec.properties import exhaustive, exhaustive_spark
    from rmqspec.spec import invariants

    kept = tuple(p for p in invariants.ACTION_PROPERTIES if p.id != "INV-27")
    for module in (invariants, exhaustive, exhaustive_spark):
        monkeypatch.setattr(module, "ACTION_PROPERTIES", kept)


def pytest_report_header() -> str:
    return f"rmqspec hypothesis profile: {PROFILE}"


def pytest_sessionstart(session: Any) -> None:
    global _MEASUREMENT
    if os.environ.get("RMQSPEC_COVERAGE") == "1":
        from rmqspec.spec_coverage import SuiteMeasurement

        _MEASUREMENT = SuiteMeasurement()
        _MEASUREMENT.start()


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    global _MEASUREMENT
    if _MEASUREMENT is None:
        return
    measurement, _MEASUREMENT = _MEASUREMENT, None
    path = Path(os.environ.get("RMQSPEC_COVERAGE_OUT", "rmqspec-out/test-coverage.json"))
    tests = session.testscollected
    document = measurement.finish(path, f"test suite (profile {PROFILE}, {tests} tests)", tests)
    t = document["totals"]
    print(f"\nspec/ branch coverage of the suite: {t['reached']}/{t['reachable']} reachable ({t['percent']} %): {path}")
