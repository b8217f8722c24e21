"""Property: for random exported programs, run(emit(canonicalize(ep))) == ep.module().

Two generators: the breadth issue's ``serde.strategies`` (when present) and a small local one
(``_random_programs``) that also draws ``cond``. Programs torch cannot export, or that eager itself
cannot run, are not subjects: hypothesis rejects them rather than counting them as passes.
"""

from __future__ import annotations

import copy

import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

from tests.native._native_util import assert_runs_like_eager, emit_ep
from tests.native._random_programs import build, recipes

try:
    from serde.strategies import export_spec, program_specs
except ImportError:  # the breadth generator has not landed
    export_spec = program_specs = None


def _eager_runs(ep, inputs) -> bool:
    try:
        m = copy.deepcopy(ep).module()
        for args, kwargs in inputs:
            m(*copy.deepcopy(args), **copy.deepcopy(kwargs))
    except Exception:
        return False
    return True


def _check(ep, inputs, arena: bool) -> None:
    assume(_eager_runs(ep, inputs))
    native = emit_ep(ep)  # canonicalizes first, exactly as save does
    assert_runs_like_eager(ep, native, inputs, arena=arena)


def _local(recipe):
    model, example, others, dyn = build(recipe)
    try:
        ep = torch.export.export(model, example, dynamic_shapes=dyn, strict=False)
    except Exception:
        assume(False)
    return ep, [(example, {})] + [(o, {}) for o in others]


@given(recipes(), st.booleans())
def test_random_programs_run_like_eager(recipe, arena):
    _check(*_local(recipe), arena=arena)


if program_specs is not None:
    @given(program_specs())
    def test_breadth_generator_programs_run_like_eager(spec):
        try:
            ep, built = export_spec(spec)
        except Exception:
            assume(False)
        _check(ep, [(built.args, {})] + list(built.other_inputs), arena=True)
else:
    def test_breadth_generator_programs_run_like_eager():
        pytest.skip("serde.strategies (the breadth issue's generator) is not available")
