"""Symbolic scalars written while serializing a program: each distinct expression is converted once
per process (a program saved again converts none)."""

from __future__ import annotations

from torch.fx.experimental.symbolic_shapes import ShapeEnv

from serde.bridge import values
from serde.bridge.values import serialize_sym_float, serialize_sym_int
from serde.core.exprs import expr_from_sympy
from serde.core.memo import Memo


def _exprs(env: ShapeEnv) -> list:
    u, v = env.create_unbacked_symint(), env.create_unbacked_symint()
    f = env.create_unbacked_symfloat()
    # equal expressions built twice (other objects), and look-alikes that differ only in a constant,
    # an operator or a number type
    return [u * 2, u * 2, u * 3, u + 2, v * 2, u * v, (u * 2) // 3, f * 2.5, f * 2.5, f + 2.5, f * 2, u * 2.0]


def test_each_distinct_expression_is_converted_once_and_to_the_same_tree(monkeypatch) -> None:
    monkeypatch.setattr(values, "_CONVERTED", Memo(values._CONVERTED.cap))
    values_ = _exprs(ShapeEnv())

    def write(x):
        return (serialize_sym_float if isinstance(x, type(values_[7])) else serialize_sym_int)(x)

    memo = [write(x) for x in values_]
    trees = [m.as_expr.expr for m in memo]
    assert trees == [expr_from_sympy(x.node.expr) for x in values_]  # every tree as converted on its own
    assert trees[0] is trees[1] and trees[7] is trees[8]  # equal expressions: one conversion
    assert len({id(t) for t in trees}) == len({str(x.node.expr) for x in values_}) == 10
    assert trees[10] != trees[7] and trees[11] != trees[0]  # f*2 is not f*2.5, u*2.0 is not u*2
    # another ShapeEnv's equal expressions (same symbol names) hit the same trees
    again = [write(x).as_expr.expr for x in _exprs(ShapeEnv())]
    assert all(a is b for a, b in zip(again, trees, strict=True))
