"""Symbolic scalars: SymBool and SymFloat values, sym_not / sym_max / sym_min / sym_ite, and floor
division, modulo and power inside size expressions."""

from __future__ import annotations

import io

import pytest
import torch

import serde
from serde.archive.artifact import read_artifact
from serde.core.expr import expr_text
from serde.testing import assert_programs_equal, assert_roundtrip
from tests import zoo_breadth


@pytest.mark.parametrize("name", ["sym_scalars", "sym_scalars_aten"])
def test_symbolic_scalars_roundtrip_and_run(name, breadth_program):
    ep = breadth_program(name)
    loaded = assert_roundtrip(ep)
    for args, kwargs in zoo_breadth.get(name).other_inputs():
        assert_programs_equal(ep, loaded, inputs=(args, kwargs))


def test_sym_functions_and_scalar_kinds_survive(breadth_program):
    loaded = serde.load(_saved(breadth_program("sym_scalars")))
    targets = {n.target for n in loaded.graph.nodes}
    assert {torch.sym_max, torch.sym_min, torch.sym_ite, torch.sym_not, torch.sym_float} <= targets
    kinds = {type(n.meta.get("val")) for n in loaded.graph.nodes}
    assert {torch.SymInt, torch.SymBool, torch.SymFloat} <= kinds
    outs = loaded.graph.output_node().args[0]
    assert [type(o.meta["val"]).__name__ for o in outs] == ["FakeTensor", "SymInt", "SymBool", "SymFloat",
                                                            "FakeTensor"]


@pytest.mark.parametrize("a, b", [(5, 7), (9, 3), (4, 4), (20, 2)])
def test_values_follow_the_inputs(a, b, breadth_program):
    loaded = serde.load(_saved(breadth_program("sym_scalars")))
    x, y = torch.randn(a), torch.randn(b)
    z, pick, differ, ratio, scaled = loaded.module()(x, y)
    assert z.shape == (max(a, b), min(a, b) + a // 2 + a % 3 + a ** 2)
    assert (pick, differ) == (a if a > b else b, a != b)
    assert ratio == pytest.approx(a / 3.0)
    torch.testing.assert_close(scaled, x * (a / 3.0))


def test_floordiv_mod_pow_are_stored_inside_size_expressions(breadth_program):
    art = read_artifact(_saved(breadth_program("sym_scalars")))
    g = art.program.graph_module.graph
    z = next(m for m in g.tensor_values.values() if len(m.sizes) == 2)
    size = z.sizes[1].as_expr.expr
    assert {"floor_div", "mod", "pow", "min"} <= _ops(size), expr_text(size)
    assert z.sizes[0].as_expr.expr.kind == "max"
    assert any(v.as_expr is not None for v in g.sym_bool_values.values())
    assert any(v.as_expr is not None and "to_float" in _ops(v.as_expr.expr) for v in g.sym_float_values.values())


def _ops(e) -> set[str]:
    """Every operation in an expression tree."""
    out = {e.kind}
    v = e.value
    for x in v if isinstance(v, list) else ([v.arg] if e.kind == "opaque_unary" else []):
        out |= _ops(x)
    return out


def _saved(ep) -> bytes:
    buf = io.BytesIO()
    serde.save(ep, buf)
    return buf.getvalue()
