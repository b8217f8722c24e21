"""The fake tensors load builds for ``meta["val"]`` are the ones the fake mode's dispatch would build.

Load constructs them directly (meta kernel + ``FakeTensor``) rather than dispatching
``empty_strided`` through ``FakeTensorMode``; here every loaded value is compared with the
dispatched construction in the same ShapeEnv, and the program is retraced.
"""

from __future__ import annotations

import pytest
import sympy
import torch
from torch._subclasses.fake_tensor import FakeTensor

import serde
from serde.testing import zoo
from tests import zoo_breadth

CASES = [(zoo, "mlp"), (zoo, "transformer_block"), (zoo, "dynamic_arith"), (zoo, "cond"),
         (zoo, "unbacked_item"), (zoo_breadth, "sym_scalars"), (zoo_breadth, "classifier")]


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """(module, case name) -> (exported program, the program saved and loaded), each built once."""
    cache: dict = {}

    def get(module, name: str):
        key = (module.__name__, name)
        if key not in cache:
            ep = module.export_case(module.get(name))
            path = tmp_path_factory.mktemp("fake_values") / f"{name}.pt2s"
            serde.save(ep, path)
            cache[key] = ep, serde.load(path)
        return cache[key]

    return get


def _fake_values(gm: torch.fx.GraphModule):
    for node in gm.graph.nodes:
        vals = node.meta.get("val")
        for v in vals if isinstance(vals, (list, tuple)) else (vals,):
            if isinstance(v, torch.Tensor):
                yield node.name, v
    for _, sub in gm.named_children():
        if isinstance(sub, torch.fx.GraphModule):
            yield from _fake_values(sub)


def _expr(n) -> sympy.Expr:
    return n.node.expr if isinstance(n, torch.SymInt) else sympy.Integer(n)


def _dispatched(v: FakeTensor) -> torch.Tensor:
    """The fake mode's own tensor with ``v``'s sizes and strides (at offset 0: the fake mode has no
    constructor that takes an offset)."""
    with v.fake_mode:
        return torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device=v.device,
                                   requires_grad=v.requires_grad)


@pytest.mark.parametrize("module,name", CASES, ids=[n for _, n in CASES])
def test_loaded_values_match_the_fake_mode_construction(module, name, loaded):
    _, program = loaded(module, name)
    values = list(_fake_values(program.graph_module))
    assert values, "no tensor values: the test would check nothing"
    modes = {id(v.fake_mode) for _, v in values}
    assert len(modes) == 1, f"{name}: values in {len(modes)} fake modes"
    for where, v in values:
        assert type(v) is FakeTensor, where
        ref = _dispatched(v)
        assert type(ref) is type(v) and ref.fake_mode is v.fake_mode, where
        assert (v.shape, v.stride()) == (ref.shape, ref.stride()), where
        assert (v.dtype, v.device, v.layout) == (ref.dtype, ref.device, ref.layout), where
        assert v.constant is None and v.fake_device == ref.fake_device, where
        assert set(vars(v)) == set(vars(ref)), where
        offset = v.storage_offset()
        if offset != 0:
            # A value inside a larger storage (e.g. an output of split), and, as export's own
            # value, no view: its storage reaches exactly to its last element.
            assert (v.requires_grad, v.is_leaf, v._is_view()) == (ref.requires_grad, ref.is_leaf, False), where
            last = offset + sum((size - 1) * stride for size, stride in zip(v.shape, v.stride(), strict=True))
            assert sympy.expand(_expr(v.untyped_storage().nbytes()) - _expr((last + 1) * v.itemsize)) == 0, where
            continue
        assert (v.requires_grad, v.is_leaf, v._is_view()) == (ref.requires_grad, ref.is_leaf, ref._is_view()), where
        assert str(v.untyped_storage().nbytes()) == str(ref.untyped_storage().nbytes()), where


@pytest.mark.parametrize("module,name", CASES[:4], ids=[n for _, n in CASES[:4]])
def test_loaded_program_retraces(module, name, loaded):
    ep, program = loaded(module, name)
    decomposed = program.run_decompositions()
    case = module.get(name)
    torch.manual_seed(0)
    _, args, kwargs, _ = case.build()
    torch.testing.assert_close(decomposed.module()(*args, **kwargs), ep.module()(*args, **kwargs))


@pytest.mark.parametrize("coeffs, hint, expected", [
    ((2, 1), 7, 3), ((2, 1), 9, 4), ((3, 1), 7, 2), ((2, 2), 7, None), ((1, -4), 7, 11)],
    ids=["2s+1=7", "2s+1=9", "3s+1=7", "2s+2=7", "s-4=7"])
def test_a_derived_dims_example_value_gives_its_symbols(coeffs, hint, expected):
    # The solve for the symbol is remembered per process: each case here runs after the others in
    # one process, so a memo keyed by less than (expression, symbol, value) gives a wrong answer.
    from serde.bridge.values import SymbolicContext
    from serde.core import schema
    from serde.core.expr import expr_from_sympy, symbol_assumptions

    s0 = sympy.Symbol("s0", **symbol_assumptions("s0"))
    ranges = [schema.RangeConstraint(expr=expr_from_sympy(s0), min_val=2, max_val=64)]
    expr = expr_from_sympy(coeffs[0] * s0 + coeffs[1])
    for _ in range(2):
        ctx = SymbolicContext(ranges)
        ctx.sym_int(schema.SymInt(as_expr=schema.SymExpr(expr=expr, hint=schema.SymExprHint(as_int=hint))), "x")
        assert ctx.shape_env.backed_var_to_val.get(ctx.symbol("s0")) == expected
