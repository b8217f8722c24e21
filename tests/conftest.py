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
