"""Property: for random exported programs, run(emit(canonicalize(ep))) == ep.module() (issue 6 §5)."""

from __future__ import annotations

import torch
from _native_util import assert_runs_like_eager, emit_ep
from _random_programs import build, recipes
from hypothesis import given


def _check(recipe, arena: bool) -> None:
    model, example, others, dyn = build(recipe)
    try:
        ep = torch.export.export(model, example, dynamic_shapes=dyn, strict=False)
    except Exception as e:  # e.g. a recipe whose dynamic batch export specializes: not our subject
        raise AssertionError(f"export failed: {type(e).__name__}: {e}") from e
    native = emit_ep(ep)  # canonicalizes first, exactly as save does
    assert_runs_like_eager(ep, native, [(example, {})] + [(o, {}) for o in others], arena=arena)


@given(recipes())
def test_random_programs_run_like_eager(recipe):
    _check(recipe, arena=False)


@given(recipes())
def test_random_programs_run_like_eager_in_the_arena(recipe):
    _check(recipe, arena=True)
