"""Property: for random exported programs, run(emit(canonicalize(ep))) == ep.module().

Two generators: the breadth generator ``serde.testing.strategies`` and a small local one
(``_random_programs``) that also draws ``cond``. Every program either draws is one torch exports
and eager runs: a failure to export or to run eagerly fails the test (the generator drew a program
it must not draw), it is not skipped.
"""

from __future__ import annotations

import torch
from hypothesis import given
from hypothesis import strategies as st

from serde.testing.strategies import export_spec, program_specs
from tests.native._native_util import assert_runs_like_eager, emit_ep
from tests.native._random_programs import build, recipes


def _check(ep, inputs, arena: bool) -> None:
    native = emit_ep(ep)  # canonicalizes first, exactly as save does
    assert_runs_like_eager(ep, native, inputs, arena=arena)


def _local(recipe):
    model, example, others, dyn = build(recipe)
    ep = torch.export.export(model, example, dynamic_shapes=dyn, strict=False)
    return ep, [(example, {})] + [(o, {}) for o in others]


@given(recipes(), st.booleans())
def test_random_programs_run_like_eager(recipe, arena):
    _check(*_local(recipe), arena=arena)


@given(program_specs())
def test_breadth_generator_programs_run_like_eager(spec):
    ep, built = export_spec(spec)
    _check(ep, [(built.args, {})] + list(built.other_inputs), arena=True)
