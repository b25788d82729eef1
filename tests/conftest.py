"""Loads the Hypothesis profile (``ci`` when CI=true, else RMQSPEC_PROFILE or ``dev``)."""

from rmqspec.properties.profiles import load_active_profile

PROFILE = load_active_profile()


def pytest_report_header() -> str:
    return f"rmqspec hypothesis profile: {PROFILE}"
