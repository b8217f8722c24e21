"""Held-out style corpus: every zoo and breadth case and every supported ExportDB example, each as
exported and after ``run_decompositions()``, runs in heap and arena mode like eager (with the
runtime's checks on: use after free, declared sizes, and that no kernel declared fresh returns
storage of its arguments). Refusals are listed with the words their error must contain."""

from __future__ import annotations

import pytest
from tests.native._corpus import Case, cases, outcome

_HOP = "is not supported by the native emitter"
# Emit-time refusals, on purpose. Any other failure (export, save, emit or a run) fails the test.
REFUSED = {
    "zoo/associative_scan": "lazy_load_decompositions",
    "zoo/flex_attention": "lazy_load_decompositions",
    "zoo/flex_attention@aten": f"higher-order op 'flex_attention' {_HOP}",
    "zoo/flex_attention_aten": f"higher-order op 'flex_attention' {_HOP}",
    "zoo/flex_attention_aten@aten": f"higher-order op 'flex_attention' {_HOP}",
    "zoo/autocast": f"higher-order op 'wrap_with_autocast' {_HOP}",
    "zoo/hints_wrapper": f"higher-order op 'hints_wrapper' {_HOP}",
    "zoo/hints_wrapper@aten": f"higher-order op 'hints_wrapper' {_HOP}",
    **{f"zoo/{n}{ir}": "custom object inputs are not supported"
       for n in ("opaque_object", "torchbind", "torchbind_aten") for ir in ("", "@aten")},
    **{f"zoo/{n}{ir}": "loss outputs (joint or effectful graphs) are not supported"
       for n in ("classifier_joint", "regressor_joint") for ir in ("", "@aten")},
}
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
