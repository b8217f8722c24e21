"""Suite-wide pytest configuration: hypothesis profiles.

``fast`` (the default, ``make test``) keeps property tests to a handful of examples; ``thorough``
(``HYPOTHESIS_PROFILE=thorough``, what ``make test-all`` sets) runs at least 200. Both are
derandomized, so a run is reproducible and CI never flakes on a new random seed. ``hunt``
(``HYPOTHESIS_PROFILE=hunt``, run by hand) draws 500 fresh examples per test on every run, to find
what the fixed examples miss.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

_COMMON = dict(
    derandomize=True,
    deadline=None,  # exports take a variable, machine-dependent time
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

settings.register_profile("fast", max_examples=12, **_COMMON)
settings.register_profile("thorough", max_examples=200, **_COMMON)
# Fresh random examples on every run, for hunting new failures (a failure prints its blob to replay).
settings.register_profile("hunt", max_examples=500, **{**_COMMON, "derandomize": False})
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fast"))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A test that needs a case this torch build cannot make (tests.zoo_breadth.UnavailableOnThisTorch,
    raised by the case itself, never by pt2serde) is a listed skip naming the reason, not an error."""
    outcome = yield
    report = outcome.get_result()
    if call.excinfo is not None and report.failed:
        from tests.zoo_breadth import UnavailableOnThisTorch

        chain, e = [], call.excinfo.value
        while e is not None and len(chain) < 16:
            chain.append(e)
            e = e.__cause__ or e.__context__
        found = next((x for x in chain if isinstance(x, UnavailableOnThisTorch)), None)
        if found is not None:
            report.outcome = "skipped"
            report.longrepr = (str(item.path), item.location[1] or 0, f"Skipped: {found}")



@pytest.fixture(scope="session")
def breadth_program():
    """``name -> ExportedProgram`` for :mod:`tests.zoo_breadth` cases, exported once per session."""
    from tests import zoo_breadth

    cache: dict = {}

    def get(name: str):
        if name not in cache:
            cache[name] = zoo_breadth.export_case(zoo_breadth.get(name))
        return cache[name]

    return get
