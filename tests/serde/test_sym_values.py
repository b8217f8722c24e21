"""Symbolic scalars written while serializing a program: each distinct expression is converted once."""

from __future__ import annotations

from torch.fx.experimental.symbolic_shapes import ShapeEnv

from serde.bridge.values import converted_once, serialize_sym_float, serialize_sym_int


def _exprs(env: ShapeEnv) -> list:
    u, v = env.create_unbacked_symint(), env.create_unbacked_symint()
    f = env.create_unbacked_symfloat()
    # equal expressions built twice (other objects), and look-alikes that differ only in a constant,
    # an operator or a number type
    return [u * 2, u * 2, u * 3, u + 2, v * 2, u * v, (u * 2) // 3, f * 2.5, f * 2.5, f + 2.5]


def test_each_distinct_expression_is_converted_once_and_to_the_same_tree() -> None:
    env = ShapeEnv()
    values = _exprs(env)

    def write(x):
        return (serialize_sym_float if isinstance(x, type(values[-1])) else serialize_sym_int)(x)

    plain = [write(x) for x in values]
    with converted_once():
        memo = [write(x) for x in values]
    assert memo == plain  # every tree as converted on its own
    trees = [m.as_expr.expr for m in memo]
    assert trees[0] is trees[1] and trees[7] is trees[8]  # equal expressions: one conversion
    assert len({id(t) for t in trees}) == len({str(x.node.expr) for x in values}) == 8
    # outside the block nothing is remembered
    assert write(values[0]).as_expr.expr is not trees[0]
