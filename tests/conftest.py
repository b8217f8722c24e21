"""Suite-wide pytest configuration: hypothesis profiles.

``fast`` (the default, ``make test``) keeps property tests to a handful of examples; ``thorough``
(``HYPOTHESIS_PROFILE=thorough``, what ``make test-all`` sets) runs at least 200. Both are
derandomized, so a run is reproducible and CI never flakes on a new random seed. ``hunt``
(``HYPOTHESIS_PROFILE=hunt``, run by hand) draws 500 fresh examples per test on every run, to find
what the fixed examples miss.

The torch-free unit tier (``make test-unit``) is every test marked ``unit``. It sets
``PT2SERDE_UNIT_TIER=1``, under which this file refuses any import of torch in the test process and
collects only the test files that mark something ``unit``: a unit test that reaches torch, directly
or through the code under test, fails there naming the import instead of silently getting slow.
"""

from __future__ import annotations

import importlib.abc
import os
import re
import sys

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

UNIT_TIER = os.environ.get("PT2SERDE_UNIT_TIER") == "1"


class _NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ImportError(f"the unit tier runs without torch, but `{name}` was imported: keep the import "
                              "out of this test's path, or drop its `unit` mark (it then runs in `make test`)")
        return None


if UNIT_TIER:
    if "torch" in sys.modules:
        raise RuntimeError("the unit tier must start without torch, but a pytest plugin imported it")
    sys.meta_path.insert(0, _NoTorch())


# Cases of a fast test that run only in the slow suite (`make test-all`), where marking the case in
# its own file is not possible (a module fixture's parameter shared with other tests) or would touch
# a test body other work is editing. Node id pattern -> what still covers that path in `make test`.
SLOW_CASES: dict[str, str] = {
    "tests/serde/core/test_guards.py::test_decomposed_loaded_program_rejects_what_the_decomposed_exported_one_rejects[*_strict]":
        "the same programs exported non-strict are decomposed after a load; the strict ones' guards are "
        "loaded and compared by test_loaded_program_rejects_what_the_exported_one_rejects[*_strict]",
    "tests/serde/core/test_guards.py::test_saved_derived_program_stores_the_exported_derivations_guards[*_strict]":
        "the non-strict cases save their decomposed programs; strict sources are stored by "
        "test_strict_export_stores_the_guards_of_the_non_strict_one",
    "tests/serde/core/test_guards.py::test_every_derivation_keeps_the_guards[run_decompositions_twice]":
        "[run_decompositions]: the second decomposition takes the path of the first",
    "tests/serde/bridge/test_guard_ranges.py::test_decomposed_loaded_program_rejects_what_the_decomposed_exported_one_does"
    "[convnext_hw]":
        "[convnext] (derived dims of one input) and [pooled_skip] (over two inputs) decompose after a load",
}


# `*` is the only wildcard: node ids hold brackets.
_SLOW_CASES = {p: re.compile(".*".join(map(re.escape, p.split("*"))) + r"\Z") for p in SLOW_CASES}


@pytest.hookimpl(tryfirst=True)  # before `-m "not slow"` deselects
def pytest_collection_modifyitems(config, items):
    matched, files = set(), {item.nodeid.split("::")[0] for item in items}
    for item in items:
        for pattern, rx in _SLOW_CASES.items():
            if rx.match(item.nodeid):
                item.add_marker(pytest.mark.slow)
                matched.add(pattern)
    # A renamed test or case would silently move its whole sweep back into the fast suite.
    stale = [p for p in SLOW_CASES if p.split("::")[0] in files and p not in matched]
    whole_files = not any("::" in a for a in config.args) and not config.getoption("keyword")
    if stale and whole_files and not config.getoption("deselect"):
        raise pytest.UsageError(f"tests/conftest.py SLOW_CASES names no collected test: {stale}; update it")


def pytest_ignore_collect(collection_path, config):
    """In the unit tier, skip test files that mark nothing ``unit``: importing them may import torch.
    A text search, because the marks are only known after the import this avoids."""
    if (UNIT_TIER and collection_path.suffix == ".py" and collection_path.name.startswith("test_")
            and "mark.unit" not in collection_path.read_text()):
        return True
    return None  # not False: that would override --ignore and the other hooks


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A test that needs a case this torch build cannot make (tests.zoo_breadth.UnavailableOnThisTorch,
    raised by the case itself, never by pt2serde) is a listed skip naming the reason, not an error."""
    outcome = yield
    report = outcome.get_result()
    # Only a test that imported tests.zoo_breadth can raise its exception; importing it here for any
    # other failure would pull torch into the torch-free unit tier.
    zoo_breadth = sys.modules.get("tests.zoo_breadth")
    if call.excinfo is not None and report.failed and zoo_breadth is not None:
        UnavailableOnThisTorch = zoo_breadth.UnavailableOnThisTorch
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
