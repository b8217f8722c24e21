"""Symbolic scalars written while serializing a program: each distinct expression is converted once
per process (a program saved again converts none)."""

from __future__ import annotations

from torch.fx.experimental.symbolic_shapes import ShapeEnv

from serde.bridge import values
from serde.bridge.values import serialize_sym_float, serialize_sym_int
from serde.core.expr import expr_from_sympy
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


def test_values_of_equal_symbolic_metas_share_one_meta_and_no_others_do() -> None:
    # The writer keys symbolic metas by each size's expression and example value: values whose metas
    # are equal get one TensorMeta object (the canonicalizer and the checks then take it once), and
    # a meta differing in any part (strides, dtype, a size) is never taken for another.
    import msgspec
    import torch
    from torch.export import Dim

    from serde.bridge.program import serialize_program
    from serde.bridge.values import serialize_tensor_meta

    class M(torch.nn.Module):
        def forward(self, x, y):
            a = x + 1
            b = a.relu()                  # same meta as a
            c = b.t()                     # other sizes and strides
            d = b.to(torch.float64)       # other dtype
            e = torch.cat([b, b])         # sizes 2 * batch
            f = y * 2                     # a second batch size, same static part
            return b, c.contiguous(), d, e, f

    batch = Dim("batch", min=2, max=64)
    ep = torch.export.export(M(), (torch.randn(4, 3), torch.randn(5, 3)),
                             dynamic_shapes=({0: batch}, {0: Dim("other", min=2, max=64)}))
    metas = serialize_program(ep).graph_module.graph.tensor_values
    vals = {n.name: n.meta["val"] for n in ep.graph.nodes if isinstance(n.meta.get("val"), torch.Tensor)}
    assert set(metas) == set(vals)
    for name, meta in metas.items():  # each as written on its own
        assert meta == serialize_tensor_meta(vals[name]), name
    contents = {msgspec.json.encode(m) for m in metas.values()}
    assert len({id(m) for m in metas.values()}) == len(contents) < len(metas)
    assert metas["add"] is metas["relu"]
