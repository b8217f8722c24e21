"""The loader fuzzer (fuzzer.py): a short deterministic slice in ``make test``, a long campaign when slow.

Both assert that no mutated artifact makes a loader raise a foreign exception, crash, hang or run
code, and that the campaign really reached both outcomes (refusals and programs that load and run),
so that a broken mutator cannot pass by producing nothing but garbage or nothing but seeds.
"""

from __future__ import annotations

import os

import pytest

from tests.serde.fuzz.fuzzer import BUGS, campaign, load_seeds, make_case, summarize_bugs

FAST_CASES = 400
SLOW_CASES = 20_000


@pytest.fixture(scope="module")
def seeds():
    return load_seeds()


def _check(report, n: int) -> None:
    counts = report.counts
    assert len(report.results) == n
    assert not report.bugs, f"{len(report.bugs)} bugs\n{summarize_bugs(report)}\n{report.table()}"
    assert counts["rejected"] > n // 4, report.table()
    assert counts["ok"] > 0, report.table()


def test_cases_are_deterministic(seeds) -> None:
    for i in (0, 7, 123):
        a, b = make_case(seeds, 0, i), make_case(seeds, 0, i)
        assert (a.strategy, a.seed.name, a.data) == (b.strategy, b.seed.name, b.data)
    assert make_case(seeds, 0, 5).data != make_case(seeds, 1, 5).data or make_case(seeds, 0, 5).strategy != \
        make_case(seeds, 1, 5).strategy


def test_every_strategy_and_seed_is_used(seeds) -> None:
    cases = [make_case(seeds, 0, i) for i in range(400)]
    assert {c.strategy for c in cases} == {"program", "weights", "manifest", "member_bytes", "pt2s_bytes",
                                           "pt2n_bytes", "pt2n_header"}
    assert {c.seed.name for c in cases} == {s.name for s in seeds}
    assert any(s.native is not None for s in seeds)


def test_fuzz_slice(seeds) -> None:
    report = campaign(FAST_CASES, run_seed=0, jobs=2, seeds=seeds)
    _check(report, FAST_CASES)


@pytest.mark.slow
def test_fuzz_campaign(seeds) -> None:
    # The run seed picks the mutations; another one (PT2SERDE_FUZZ_SEED) is a fresh campaign.
    n = int(os.environ.get("PT2SERDE_FUZZ_CASES", SLOW_CASES))
    run_seed = int(os.environ.get("PT2SERDE_FUZZ_SEED", 1))
    report = campaign(n, run_seed=run_seed, jobs=2, seeds=seeds, progress=True)
    print(report.table())
    print(summarize_bugs(report) or "no findings")
    _check(report, n)
    assert set(BUGS).isdisjoint(report.counts)
