"""Held-out style corpus: every zoo and breadth case and every supported ExportDB example, each as
exported and after ``run_decompositions()``, runs in heap and arena mode like eager (with the
runtime's checks on: use after free, declared sizes, and that no kernel declared fresh returns
storage of its arguments). Refusals are listed with the words their error must contain."""

from __future__ import annotations

import pytest

from tests.native._corpus import REFUSED, Case, cases, outcome

CASES = cases()


def test_refusal_list_names_corpus_cases():
    assert set(REFUSED) <= {c.name for c in CASES}


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_corpus_runs_like_eager_in_heap_and_arena_mode(case: Case):
    stage, err = outcome(case)
    if case.name in REFUSED:
        assert stage == "emit" and REFUSED[case.name] in str(err), f"{stage}: {err}"
    else:
        assert stage == "ok", f"{stage}: {type(err).__name__}: {err}"
