"""Which parameters of a sweep run in ``make test`` and which only under ``-m slow`` (``make test-all``).

CI has 15 minutes on two cores for the whole fast suite, so a sweep over every program keeps a few
in ``make test``, chosen to cover its kinds (control flow, mutation, dynamic sizes, custom ops), and
runs the rest in the thorough suite. Nothing is dropped: every parameter still runs there.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest

# The breadth programs a sweep keeps in make test: every higher-order op family, effects and
# mutation, custom ops and objects, unbacked and symbolic values, a joint graph.
BREADTH_FAST = ("cond_nested_aten", "map", "scan", "associative_scan_aten", "flex_attention",
                "effects_and_mutation_aten", "custom_ops_aten", "opaque_object", "unbacked_in_cond",
                "sym_scalars_aten", "parameter_mutation_aten", "classifier_joint")


def tiered(values: Iterable, fast: Iterable, ids=None) -> list:
    """``values`` as test parameters, those not in ``fast`` marked slow; ``fast`` must name values
    that exist, so a renamed program cannot quietly leave the fast suite empty. A tuple value is
    spread over the test's argument names."""
    values, fast = list(values), list(fast)  # lists: a value need not be hashable
    unknown = [f for f in fast if f not in values]
    assert not unknown, f"fast parameters {unknown} are not among the values"
    ids = list(ids) if ids is not None else [None] * len(values)
    return [pytest.param(*(v if isinstance(v, tuple) else (v,)), id=i, marks=() if v in fast else pytest.mark.slow)
            for v, i in zip(values, ids, strict=True)]
