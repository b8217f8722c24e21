"""A zoo of real exported programs covering what the core format must round-trip.

The one zoo of the project: the tests, the frozen fixtures, the benchmarks and ``pt2serde demo``
import it, and further zoos (the tests' breadth and third-party models) build on its :class:`Case`.
Every case builds its model and inputs from a fixed seed, so exports are reproducible; importing
this module exports nothing.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils._pytree as pytree
from torch.export import Dim, ExportedProgram

__all__ = ["Case", "CASES", "export_case", "get", "find_case", "decompose"]


@dataclass(frozen=True)
class Case:
    name: str
    build: Callable[[], tuple[nn.Module, tuple, dict, Any]]
    """() -> (model, args, kwargs, dynamic_shapes)"""
    post: Callable[[ExportedProgram], ExportedProgram] | None = None
    """Optional transformation of the exported program (e.g. run_decompositions)."""
    other_inputs: Callable[[], list[tuple[tuple, dict]]] = field(default=lambda: [])
    """Further inputs to run on (other sizes for dynamic cases)."""
    tags: tuple[str, ...] = ()


def export_case(case: Case) -> ExportedProgram:
    """Export ``case`` (seed 0, eval mode); non-strict unless the case is tagged ``"strict"``."""
    torch.manual_seed(0)
    model, args, kwargs, dynamic_shapes = case.build()
    model.eval()
    ep = torch.export.export(model, args, kwargs, dynamic_shapes=dynamic_shapes, strict="strict" in case.tags)
    return case.post(ep) if case.post else ep


def find_case(cases: list[Case], name: str, what: str) -> Case:
    """The case called ``name`` in ``cases``; KeyError listing the known names."""
    for c in cases:
        if c.name == name:
            return c
    raise KeyError(f"no {what} case {name!r}; known: {[c.name for c in cases]}")


def get(name: str) -> Case:
    return find_case(CASES, name, "zoo")


def decompose(ep: ExportedProgram) -> ExportedProgram:
    """The core ATen IR of ``ep``."""
    return ep.run_decompositions()


# ---------------------------------------------------------------- models


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 32)
        self.fc3 = nn.Linear(32, 4)

    def forward(self, x):
        return self.fc3(F.gelu(self.fc2(F.relu(self.fc1(x)))))


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2)
        self.bn2 = nn.BatchNorm2d(16)
        self.head = nn.Linear(16, 10)
        for bn in (self.bn1, self.bn2):  # non-trivial running statistics
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 1.5)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.max_pool2d(x, 2)
        x = F.relu(self.bn2(self.conv2(x)))
        return self.head(x.mean(dim=(2, 3)))


class Block(nn.Module):
    """Pre-norm transformer block with multi-head self-attention."""

    def __init__(self, d: int = 32, heads: int = 4) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.heads = heads

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.reshape(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class MultiOutput(nn.Module):
    def forward(self, x):
        a, b, c = x.split([2, 3, 3], dim=1)
        v, i = x.topk(3, dim=1)
        m, j = x.max(dim=0)
        return a * 2, b + c[:, :3].sum(), v, i, m, j


class DynamicArith(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x, y):
        n = x.shape[0] // 2
        h = self.lin(x).reshape(n, 2, 8)
        z = torch.cat([x, y], dim=0)           # size d + 2*d
        return h.sum(1), z, x.shape[0] * 3 + 1  # a SymInt output


class Signature(nn.Module):
    """Parameters, persistent and non-persistent buffers, a tensor constant, non-tensor inputs."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 4))
        self.register_buffer("running", torch.zeros(4))
        self.register_buffer("scratch", torch.ones(4), persistent=False)
        self.table = torch.arange(4.0)  # a plain tensor attribute: lifted as a tensor constant

    def forward(self, x, k: int, flag: bool, alpha: float, mode: str, nothing=None):
        y = x @ self.w + self.scratch * alpha + self.table
        if flag and mode == "double":
            y = y * 2
        self.running.add_(y.mean(0))           # buffer mutation
        return y + k


class InputMutation(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("count", torch.zeros(1))

    def forward(self, x, acc):
        acc.add_(x.sum(0))                     # user input mutation
        self.count.add_(1)                     # buffer mutation
        return x * 2


# Saved artifacts record a namedtuple by its qualified name; the frozen fixtures were written when
# the zoo was serde.zoo, so the class keeps that name and fresh saves stay byte-identical to them.
# That module no longer exists, so the class is registered with pytree under the recorded name, as a
# user whose namedtuple lives outside an importable module would: loads then give back this class.
Pair = collections.namedtuple("Pair", ["left", "right"], module="serde.zoo")
pytree._register_namedtuple(Pair, serialized_type_name="serde.zoo.Pair")


class Pytrees(nn.Module):
    def forward(self, xs, cfg, *, scale, pair: Pair):
        a, b = xs
        out = {"sum": a + b * scale, "parts": [a.relu(), (b.sin(), cfg["bias"] * 2)]}
        return out, Pair(pair.left + 1, pair.right - 1)


class Inner(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.register_buffer("shift", torch.full((8,), 0.5))

    def forward(self, x):
        return torch.tanh(self.lin(x)) + self.shift


class Nested(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = Inner()
        self.b = nn.Sequential(Inner(), nn.ReLU(), Inner())

    def forward(self, x):
        return self.b(self.a(x)) * 2


class Annotated(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return F.relu(self.lin(x)) * 3


def _annotate(ep: ExportedProgram) -> ExportedProgram:
    """Attach user metadata the way users do after export: node.meta["custom"]."""
    for n in ep.graph.nodes:
        if n.op == "call_function" and "linear" in str(n.target):
            n.meta["custom"] = {"stage": "encoder", "tags": [1, 2], "ok": True}
    ep.graph_module.meta["custom"] = {"owner": "zoo", "version": 3}
    return ep


_DTYPES = [torch.float16, torch.float32, torch.float64, torch.bfloat16, torch.int8, torch.int16,
           torch.int32, torch.int64, torch.uint8, torch.bool, torch.complex64,
           torch.float8_e4m3fn, torch.float8_e5m2]


class AllDtypes(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(1)
        for i, dt in enumerate(_DTYPES):
            base = torch.randn(3, 5, generator=g) * 10
            if dt == torch.bool:
                t = base > 0
            elif dt.is_complex:
                t = torch.complex(base, base.flip(0))
            else:
                t = base.to(dt)
            self.register_buffer(f"b{i}_{str(dt).split('.')[-1]}", t)
        self.register_buffer("special", torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0, 1e-45]))
        self.w_t = nn.Parameter(torch.randn(4, 6).t())   # non-contiguous parameter
        self.register_buffer("strided", torch.arange(40.0).reshape(8, 5)[::2, 1:4])  # view with offset

    def forward(self, x):
        acc = x @ self.w_t
        for b in self.buffers():
            if b.dtype.is_floating_point and b.dtype.itemsize >= 2 and b.dim() == 2:
                acc = acc + b.to(torch.float32).sum()
        return acc, self.strided * 2, self.special.isnan().sum()


class TiedLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(50, 16)
        self.body = nn.Linear(16, 16)
        self.head = nn.Linear(16, 50, bias=False)
        self.head.weight = self.embed.weight   # tied weights

    def forward(self, ids):
        return self.head(torch.tanh(self.body(self.embed(ids))))


class Chain(nn.Module):
    """A long chain of pointwise ops with varied scalar constants (benchmarks, diff locality)."""

    def __init__(self, n: int = 200) -> None:
        super().__init__()
        self.n = n

    def forward(self, x):
        ops = (torch.sin, torch.cos, torch.tanh, torch.sigmoid, torch.relu, torch.exp)
        for i in range(self.n):
            x = ops[i % len(ops)](x) if i % 3 else x * (1.0 + (i % 97) / 1000.0) + (i % 13) / 10.0
        return x


def _r(*shape: int, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(*shape).to(dtype)


# ---------------------------------------------------------------- cases

_d = Dim("d", min=2, max=64)
_b = Dim("batch", min=1, max=32)
_t = Dim("seq", min=2, max=64)

CASES: list[Case] = [
    Case("mlp", lambda: (MLP(), (_r(8, 16),), {}, ({0: _b},)),
         other_inputs=lambda: [((_r(3, 16),), {}), ((_r(17, 16),), {})], tags=("model", "dynamic")),
    Case("convnet_bn", lambda: (ConvNet(), (_r(2, 3, 16, 16),), {}, None), tags=("model",)),
    Case("transformer_block", lambda: (Block(), (_r(2, 8, 32),), {}, ({0: _b, 1: _t},)),
         other_inputs=lambda: [((_r(1, 5, 32),), {}), ((_r(3, 12, 32),), {})], tags=("model", "dynamic")),
    Case("multi_output", lambda: (MultiOutput(), (_r(6, 8),), {}, None), tags=("multi_output",)),
    Case("dynamic_arith", lambda: (DynamicArith(), (_r(6, 8), _r(12, 8)), {}, ({0: 2 * _d}, {0: 4 * _d})),
         other_inputs=lambda: [((_r(10, 8), _r(20, 8)), {})], tags=("dynamic",)),
    Case("signature_kinds",
         lambda: (Signature(), (_r(3, 4), 3, True, 0.5, "double"), {"nothing": None}, None),
         tags=("signature",)),
    Case("signature_kinds_aten",
         lambda: (Signature(), (_r(3, 4), 3, True, 0.5, "double"), {"nothing": None}, None),
         post=decompose, tags=("signature", "aten")),
    Case("input_mutation_aten", lambda: (InputMutation(), (_r(3, 4), torch.zeros(4)), {}, None),
         post=decompose, tags=("signature", "aten")),
    Case("pytrees",
         lambda: (Pytrees(), ((_r(2, 3), _r(2, 3)), {"bias": _r(3)}),
                  {"scale": 2.0, "pair": Pair(_r(2), _r(2))}, None),
         tags=("pytree",)),
    Case("nested_modules", lambda: (Nested(), (_r(4, 8),), {}, None), tags=("unflatten",)),
    Case("annotated", lambda: (Annotated(), (_r(2, 4),), {}, None), post=_annotate, tags=("metadata",)),
    Case("all_dtypes", lambda: (AllDtypes(), (_r(2, 6),), {}, None), tags=("weights",)),
    Case("tied_weights", lambda: (TiedLM(), (torch.randint(0, 50, (2, 7)),), {}, None), tags=("weights",)),
    Case("chain_200", lambda: (Chain(200), (_r(4, 8),), {}, None), tags=("chain",)),
]


# ---------------------------------------------------------------- control flow and data-dependent shapes


class CondModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(6, 6)

    def forward(self, x, y):
        def true_fn(x, y):
            return (self.lin(x).relu() + y,)

        def false_fn(x, y):
            return (x.cos() - y * 2,)

        (out,) = torch.cond(x.sum() > 0, true_fn, false_fn, (x, y))
        return out


class WhileModel(nn.Module):
    def forward(self, n, x):
        from torch._higher_order_ops.while_loop import while_loop

        def cond_fn(i, x):
            return i < n

        def body_fn(i, x):
            return i + 1, x * 1.5 + 1

        return while_loop(cond_fn, body_fn, (torch.zeros((), dtype=torch.int64), x))


class ItemModel(nn.Module):
    def forward(self, x, k):
        n = k.item()
        torch._check_is_size(n)
        torch._check(n <= x.shape[0])
        return x[:n] * 2, x.nonzero()


def _both_branches() -> list[tuple[tuple, dict]]:
    pos = torch.rand(4, 6) + 0.1
    return [((pos, _r(4, 6)), {}), ((-pos, _r(4, 6)), {}), ((-pos[:3], _r(3, 6)), {})]


CASES += [
    Case("cond", lambda: (CondModel(), (torch.rand(4, 6) + 0.1, _r(4, 6)), {}, ({0: _b}, {0: _b})),
         other_inputs=_both_branches, tags=("control_flow", "dynamic")),
    Case("while_loop", lambda: (WhileModel(), (torch.tensor(3), _r(5)), {}, None),
         other_inputs=lambda: [((torch.tensor(0), _r(5)), {}), ((torch.tensor(6), _r(5)), {})],
         tags=("control_flow",)),
    Case("unbacked_item", lambda: (ItemModel(), (_r(8, 3), torch.tensor(5)), {}, None),
         other_inputs=lambda: [((_r(8, 3), torch.tensor(2)), {})], tags=("unbacked",)),
]


# Saved artifacts name each module's class (nn_module_stack) by its qualified name. The frozen
# fixtures and the cross-release corpus were written while these models lived in tests/zoo.py, so
# the classes keep that recorded name and fresh saves stay byte-identical to them. Loading never
# imports a recorded class, so the name needs no module behind it.
RECORDED_MODULE = "tests.zoo"
for _model in (MLP, ConvNet, Block, MultiOutput, DynamicArith, Signature, InputMutation, Pytrees, Inner, Nested,
               Annotated, AllDtypes, TiedLM, Chain, CondModel, WhileModel, ItemModel):
    _model.__module__ = RECORDED_MODULE
