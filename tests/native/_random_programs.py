"""A small random program generator: DAGs of aten ops over [B, F] tensors, exported for real.

A recipe is drawn by hypothesis; :func:`build` turns it into a module, its example inputs, other
inputs (another batch size when the batch is dynamic) and dynamic shapes. Values are all of shape
[B, F], so any op can take any earlier value; ``cond`` steps branch on data.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from hypothesis import strategies as st
from torch.export import Dim

UNARY = {
    "relu": torch.relu, "sin": torch.sin, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "neg": torch.neg,
    "abs": torch.abs, "exp": lambda v: torch.exp(v.clamp(-3, 3)), "square": lambda v: v * v,
    "softmax": lambda v: torch.softmax(v, dim=-1), "center": lambda v: v - v.mean(-1, keepdim=True),
    "cumsum": lambda v: torch.cumsum(v, dim=1), "colsum": lambda v: v.sum(0, keepdim=True) + v,
    "transpose": lambda v: v.t().contiguous().t(), "scale": lambda v: v * 0.5 + 1.25,
}
# Ops whose kernels return their input itself (or a view of it) although the schema promises a
# fresh tensor, next to the declared views: the arena plan must keep their input alive.
IDENTITY = {
    "dropout_eval": lambda v: torch.nn.functional.dropout(v, 0.5, training=False),
    "feature_dropout_eval": lambda v: torch.feature_dropout(v, 0.5, False),
    "alpha_dropout_eval": lambda v: torch.alpha_dropout(v, 0.5, False),
    "type_as_same": lambda v: v.type_as(v),
    "einsum_identity": lambda v: torch.einsum("ij->ij", v),
    "atleast_2d": torch.atleast_2d,
    "sum_to_size_same": lambda v: v.sum_to_size(v.shape),
    "contiguous": lambda v: v.contiguous(),
    "to_same": lambda v: v.to(v.dtype),
    "reshape_same": lambda v: v.reshape(v.shape),
    "flatten_2d": lambda v: v.flatten(1),
    "view_as": lambda v: v.view_as(v),
    "expand_as": lambda v: v.expand_as(v),
}
BINARY = {
    "add": torch.add, "mul": torch.mul, "sub": torch.sub, "maximum": torch.maximum,
    "where": lambda a, b: torch.where(a > b, a, b),
    "catsplit": lambda a, b: torch.cat([a, b], dim=1).split(a.shape[1], dim=1)[1] * 2,
}


@dataclass(frozen=True)
class Recipe:
    batch: int
    features: int
    dynamic: bool
    steps: tuple[tuple[str, str, int, int], ...]  # (kind, op, i, j): unary/binary/matmul/cond/identity
    outputs: tuple[int, ...]
    mutate_buffer: bool


@st.composite
def recipes(draw: st.DrawFn) -> Recipe:
    n = draw(st.integers(1, 7))
    steps = []
    for k in range(n):
        avail = 2 + k  # x, y, then each step's result
        kind = draw(st.sampled_from(["unary", "unary", "binary", "binary", "matmul", "cond"]))
        op = ""
        if kind == "unary":
            op = draw(st.sampled_from(sorted(UNARY)))
        elif kind == "binary":
            op = draw(st.sampled_from(sorted(BINARY)))
        steps.append((kind, op, draw(st.integers(0, avail - 1)), draw(st.integers(0, avail - 1))))
    last = 1 + n
    extra = draw(st.lists(st.integers(0, last), max_size=2))
    # Batch and feature sizes never coincide: export would duck-size them into one symbol.
    return Recipe(draw(st.integers(6, 9)), draw(st.integers(2, 5)), draw(st.booleans()), tuple(steps),
                  (last, *extra), draw(st.booleans()))


@st.composite
def alias_recipes(draw: st.DrawFn) -> Recipe:
    """Mostly identity-returning ops between out= kernels (matmul, unary, binary): every identity
    op's input is a candidate for slot reuse if the plan believed its result were fresh."""
    n = draw(st.integers(2, 10))
    steps = []
    for k in range(n):
        avail = 2 + k
        kind = draw(st.sampled_from(["identity", "identity", "identity", "matmul", "unary", "binary"]))
        table = {"identity": IDENTITY, "unary": UNARY, "binary": BINARY}.get(kind, {"": None})
        op = draw(st.sampled_from(sorted(table)))
        # Mostly the latest value: long chains through identity ops are where slots get reused.
        i = draw(st.one_of(st.just(avail - 1), st.integers(0, avail - 1)))
        steps.append((kind, op, i, draw(st.integers(0, avail - 1))))
    last = 1 + n
    extra = draw(st.lists(st.integers(0, last), max_size=2))
    return Recipe(draw(st.integers(6, 9)), draw(st.integers(2, 5)), draw(st.booleans()), tuple(steps),
                  (last, *extra), False)


class RandomProgram(torch.nn.Module):
    def __init__(self, r: Recipe) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(hash(r.steps) % (1 << 31))
        self.r = r
        self.w = torch.nn.Parameter(torch.randn(r.features, r.features, generator=g) / r.features)
        self.register_buffer("acc", torch.zeros(r.features))

    def forward(self, x: torch.Tensor, y: torch.Tensor):
        vals = [x, y]
        for kind, op, i, j in self.r.steps:
            a, b = vals[i], vals[j]
            if kind == "unary":
                v = UNARY[op](a)
            elif kind == "binary":
                v = BINARY[op](a, b)
            elif kind == "identity":
                v = IDENTITY[op](a)
            elif kind == "matmul":
                v = a @ self.w
            else:
                v = torch.cond(a.sum() > b.sum(), lambda a, b: a + b.sin(), lambda a, b: a * b - 1, (a, b))
            vals.append(v)
        if self.r.mutate_buffer:
            self.acc.add_(vals[-1].mean(0))
        return tuple(vals[k] for k in self.r.outputs)


def build(r: Recipe):
    """(module, example inputs, other inputs, dynamic_shapes)."""
    g = torch.Generator().manual_seed(r.batch * 31 + r.features)

    def inputs(b: int):
        return (torch.randn(b, r.features, generator=g), torch.randn(b, r.features, generator=g))

    dyn = None
    others = []
    if r.dynamic:
        d = Dim("batch", min=2, max=16)
        dyn = ({0: d}, {0: d})
        others.append(inputs(r.batch + 3))
    others.append(inputs(r.batch))  # same size, other data: the other side of data-dependent branches
    return RandomProgram(r), inputs(r.batch), others, dyn
