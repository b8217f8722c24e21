"""The corpus the differential harness runs: every program we can get hold of.

- ``zoo/<name>`` and ``breadth/<name>``: every case of :mod:`serde.testing.zoo` and :mod:`tests.zoo_breadth`,
  with its other inputs;
- ``fixture/v<N>/<name>``: every frozen fixture, loaded by us, with the runs of its ``io.json``
  (the loaded fixture is the reference; its stored results are checked too);
- ``exportdb/<name>/<strict|nonstrict>[-aten]``: every supported ExportDB example torch ships, in
  both export modes, each also after ``run_decompositions()``;
- ``pattern/<name>``: what people export and what is easy to get wrong: buffer and input mutation
  (also through views), KV caches, batch norm and dropout in train mode, RNG, RMSNorm with
  ``type_as``, ``cond`` returning ints, ``cond`` inside submodules (then unflattened), derived dims.

A :class:`CorpusCase` makes its program lazily; :func:`run_case` makes it and runs the harness.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
import torch.utils._pytree as pytree
from torch.export import Dim, ExportedProgram

import serde
from serde.bridge.bundle import load_tree
from serde.testing import zoo
from tests import zoo_breadth
from tests.serde._differential import Inputs, Result, differential, isolate, same

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"


@dataclass(frozen=True)
class CorpusCase:
    name: str
    make: Callable[[], tuple[ExportedProgram, list[Inputs]]]
    """() -> (program, inputs); raising means torch could not export it (or, for a fixture, we
    could not load it)."""
    ours_makes: bool = False   # make() is our own load (fixtures): its failure is ours
    check: Callable[[ExportedProgram], str | None] | None = None  # an extra check of the reference


def run_case(case: CorpusCase) -> Result:
    try:
        ep, inputs = case.make()
    except Exception as e:  # recorded in the result: the tests assert on it
        res = Result(case.name)
        msg = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
        if case.ours_makes:
            res.note("load", msg)
        else:
            res.torch_fails["export"] = msg
        return res
    res = differential(ep, inputs, name=case.name)
    if case.ours_makes and "unflatten" in res.torch_fails:
        # The reference is our own load here: when it cannot be unflattened, that is ours.
        res.note("unflatten", res.torch_fails.pop("unflatten"))
    if case.check is not None:
        msg = case.check(ep)
        if msg:
            res.note("fixture_io", msg)
    return res


# ---------------------------------------------------------------- zoo and breadth zoo


def _zoo_case(prefix: str, c: zoo.Case) -> CorpusCase:
    def make():
        ep = zoo.export_case(c)
        torch.manual_seed(1)
        return ep, [ep.example_inputs, *c.other_inputs()]
    return CorpusCase(f"{prefix}/{c.name}", make)


def zoo_cases() -> list[CorpusCase]:
    zoo_breadth.load_torchbind_test_classes()
    return [_zoo_case("zoo", c) for c in zoo.CASES] + [_zoo_case("breadth", c) for c in zoo_breadth.CASES]


# ---------------------------------------------------------------- frozen fixtures


def _fixture_case(d: Path) -> CorpusCase:
    def runs():
        return load_tree(d / "io.json")

    def make():
        ep = serde.load(d / "model.pt2s")
        return ep, [tuple(r["inputs"]) for r in runs()]

    def check(ep: ExportedProgram) -> str | None:
        for i, r in enumerate(runs()):
            args, kwargs = copy.deepcopy(r["inputs"])
            m = isolate(ep.module())
            try:
                with torch.no_grad():
                    out = m(*args, **kwargs)
            except Exception as e:  # the reference is our load: its failure is a difference
                return f"run {i}: raises {type(e).__name__}: {str(e)[:200]}"
            for what, got, want in (("outputs", out, r["outputs"]),
                                    ("inputs_after", [list(args), kwargs], r["inputs_after"]),
                                    ("buffers_after", dict(m.named_buffers()), r["buffers_after"])):
                d = _close(got, want)
                if d:
                    return f"run {i}: {what} differ from io.json: {d}"
        return None

    return CorpusCase(f"fixture/{d.parent.name}/{d.name}", make, ours_makes=True, check=check)


def _close(got: Any, want: Any) -> str | None:
    """io.json holds eager results from another process and machine: floats to assert_close's
    default tolerance (as tests/compat does), everything else exactly."""
    lg, sg = pytree.tree_flatten(got)
    lw, sw = pytree.tree_flatten(want)
    if str(sg) != str(sw):
        return f"structure {sg} != {sw}"
    for i, (g, w) in enumerate(zip(lg, lw, strict=True)):
        if isinstance(w, torch.Tensor) and isinstance(g, torch.Tensor) and (w.is_floating_point() or w.is_complex()):
            try:
                torch.testing.assert_close(g, w, equal_nan=True)
            except AssertionError as e:
                return f"[{i}]: {str(e).splitlines()[0]}"
        else:
            d = same(g, w)
            if d:
                return f"[{i}]: {d}"
    return None


def fixture_cases() -> list[CorpusCase]:
    return [_fixture_case(p.parent) for p in sorted(FIXTURES.glob("v*/*/model.pt2s"))]


# ---------------------------------------------------------------- ExportDB


def exportdb_cases() -> list[CorpusCase]:
    from torch._export.db.case import SupportLevel
    from torch._export.db.examples import all_examples

    out = []
    for name, ex in sorted(all_examples().items()):
        if ex.support_level != SupportLevel.SUPPORTED:
            continue
        for strict in (True, False):
            for aten in (False, True):
                label = f"exportdb/{name}/{'strict' if strict else 'nonstrict'}{'-aten' if aten else ''}"
                out.append(CorpusCase(label, _exportdb_maker(ex, strict, aten)))
    return out


def _exportdb_maker(ex: Any, strict: bool, aten: bool) -> Callable[[], tuple[ExportedProgram, list[Inputs]]]:
    def make():
        torch._dynamo.reset()
        torch.manual_seed(0)
        # ExportDB cases share their module and inputs between exports: work on copies.
        model, args, kwargs = copy.deepcopy((ex.model, ex.example_args, ex.example_kwargs))
        ep = torch.export.export(model, args, kwargs, dynamic_shapes=ex.dynamic_shapes, strict=strict)
        if aten:
            ep = ep.run_decompositions()
        return ep, [copy.deepcopy((args, kwargs))]
    return make


# ---------------------------------------------------------------- patterns people export


class BufferReadThenUpdate(nn.Module):
    """Reads a buffer, then updates it in place: the read must see the old value."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("buf", torch.ones(3))

    def forward(self, x):
        y = x * self.buf
        self.buf.add_(10)
        return y


class KVCache(nn.Module):
    """Writes new keys/values into cache buffers at given positions (index_copy_ and a slice copy_)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("k", torch.zeros(8, 4))
        self.register_buffer("v", torch.zeros(1, 8, 4))

    def forward(self, k_new, v_new, pos):
        self.k.index_copy_(0, pos, k_new)
        n = v_new.shape[1]
        self.v[:, :n].copy_(v_new)
        return self.k.sum(0) + self.v.mean(), self.k[pos]


class BatchNormTrain(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bn = nn.BatchNorm1d(4)
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(self.bn(x))


class DropoutTrain(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.drop(x) + torch.rand_like(x)


class RngOrder(nn.Module):
    """Independent random draws: their order fixes which numbers each one gets."""

    def forward(self, x):
        b = torch.randn(3)
        a = torch.rand(3)
        c = torch.bernoulli(torch.full((3,), 0.5))
        return x + a, b, c


class RngGenerators(nn.Module):
    """Draws from a generator the module holds, from one that forward seeds, and from the global
    RNG, interleaved: export lifts both generators into constants, whose states runs advance."""

    def __init__(self) -> None:
        super().__init__()
        self.gen = torch.Generator().manual_seed(7)

    def forward(self, x):
        local = torch.Generator().manual_seed(3)
        a = torch.rand(3, generator=self.gen)
        b = torch.randn(3)
        c = torch.randint(0, 100, (3,), generator=local)
        d = torch.randn(3, generator=self.gen)
        return x + d, b, c, a


class RMSNorm(nn.Module):
    def __init__(self, d: int = 8) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, d))

    def forward(self, x):
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)
        return self.weight * h.type_as(x)


class CondInt(nn.Module):
    """cond whose branches return ints (an unbacked int output)."""

    def forward(self, x):
        n = torch.cond(x.sum() > 0, lambda x: 3, lambda x: 5, (x,))
        return x * n, n


class CondSizes(nn.Module):
    """cond whose branches return tensors of the (dynamic) size of the input."""

    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda x: x.new_ones(x.shape[0]) * x.shape[0],
                          lambda x: x.new_zeros(x.shape[0]) - x.shape[0], (x,))


class CondInner(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls.add_(1)
        return torch.cond(x.sum() > 0, lambda x: self.lin(x), lambda x: x - 1, (x,))


class SubmoduleWithCond(nn.Module):
    """A submodule with control flow: torch.export.unflatten must rebuild it."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = CondInner()
        self.head = nn.Linear(3, 2)

    def forward(self, x):
        return self.head(self.inner(x) * 2)


class InputInplace(nn.Module):
    """Mutates a user input, through a view too, and reads it in between."""

    def forward(self, x, y):
        x.add_(1)
        z = x * y
        x[:, 0].mul_(2)
        y.sub_(z.mean())
        return z + x


class BufferViewInplace(nn.Module):
    """Updates a view of a buffer; reads the buffer before and after."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("state", torch.arange(12.0).reshape(3, 4))

    def forward(self, x):
        before = self.state.sum() * x
        self.state[1].add_(x.sum())
        self.state.narrow(1, 0, 2).mul_(0.5)
        return before, self.state * 1


class AliasedState(nn.Module):
    """State the graph shows as separate inputs that share memory: a buffer registered as a row of
    another, and a tensor attribute (a lifted constant) viewing a column of it. Reads of one and
    writes through the others must stay in order; so must writes through results that are their
    input although the schema says otherwise (type_as)."""

    def __init__(self) -> None:
        super().__init__()
        full = torch.arange(12.0).reshape(3, 4)
        self.register_buffer("full", full)
        self.register_buffer("row", full[1])
        self.col = full[:, 2]

    def forward(self, x):
        before = self.full.sum() * x
        self.row.add_(x)
        mid = self.full * 1
        self.col.mul_(2)
        self.full.type_as(x).sub_(1)
        return before, mid, self.row * 1


class DerivedDims(nn.Module):
    """x: [d], y: [d + 1], z: [2 * d]: one symbol, three relations."""

    def forward(self, x, y, z):
        return x + y[1:] + z.reshape(2, -1).sum(0)


class EqualDims(nn.Module):
    """Relations across inputs: a's columns are b's rows; a's rows equal c's length."""

    def forward(self, a, b, c):
        return (a @ b) * c.unsqueeze(1)


class WrapperSubclassParameter(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        from torch.testing._internal.two_tensor import TwoTensor

        # what a user of such a class does once: allow pt2serde to rebuild it at load
        serde.register_tensor_subclass(TwoTensor)
        self.p = nn.Parameter(TwoTensor(torch.linspace(0, 1, 3), torch.linspace(1, 2, 3)))

    def forward(self, x):
        return x * self.p


def _r(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


_d = Dim("d", min=2, max=16)


def _pattern(name: str, build: Callable[[], tuple[nn.Module, tuple, Any, list[tuple]]], *, train: bool = False,
             strict: bool = False, aten: bool = False) -> CorpusCase:
    def make():
        torch._dynamo.reset()
        torch.manual_seed(0)
        model, args, dyn, others = build()
        model.train(train)
        ep = torch.export.export(model, copy.deepcopy(args), dynamic_shapes=dyn, strict=strict)
        if aten:
            ep = ep.run_decompositions()
        return ep, [(args, {}), *((o, {}) for o in others)]
    return CorpusCase(f"pattern/{name}", make)


def _equal_dims():
    m, k, n = Dim("m", max=32), Dim("k", max=32), Dim("n", max=32)
    return (EqualDims(), (_r(3, 5), _r(5, 2), _r(3)), ({0: m, 1: k}, {0: k, 1: n}, {0: m}),
            [(_r(4, 6), _r(6, 7), _r(4))])


def pattern_cases() -> list[CorpusCase]:
    pos = torch.tensor([1, 5])
    return [
        _pattern("buffer_read_then_update", lambda: (BufferReadThenUpdate(), (torch.ones(3),), None, [])),
        _pattern("kv_cache", lambda: (KVCache(), (_r(2, 4), _r(1, 3, 4), pos), ({}, {1: Dim("t", min=1, max=8)}, {}),
                                      [(_r(2, 4), _r(1, 6, 4), torch.tensor([0, 7]))])),
        _pattern("kv_cache_aten", lambda: (KVCache(), (_r(2, 4), _r(1, 3, 4), pos), None, []), aten=True),
        _pattern("batchnorm_train", lambda: (BatchNormTrain(), (_r(5, 4),), ({0: Dim("b", min=2, max=32)},),
                                             [(_r(7, 4),)]), train=True),
        _pattern("dropout_train", lambda: (DropoutTrain(), (_r(4, 5),), None, []), train=True),
        _pattern("rng_order", lambda: (RngOrder(), (_r(3),), None, [])),
        _pattern("rng_generators", lambda: (RngGenerators(), (_r(3),), None, [(_r(3),)])),
        _pattern("rmsnorm_type_as", lambda: (RMSNorm(), (_r(2, 8).to(torch.bfloat16),), None, [])),
        _pattern("cond_returns_int", lambda: (CondInt(), (_r(4).abs(),), None, [(-_r(4).abs(),)])),
        _pattern("cond_returns_sizes", lambda: (CondSizes(), (_r(4).abs(),), ({0: _d},), [(-_r(6).abs(),)])),
        _pattern("submodule_with_cond", lambda: (SubmoduleWithCond(), (_r(2, 3).abs(),), None, [(-_r(2, 3).abs(),)])),
        _pattern("input_inplace", lambda: (InputInplace(), (_r(3, 4), _r(3, 4)), None, [])),
        _pattern("buffer_view_inplace", lambda: (BufferViewInplace(), (_r(4),), None, [])),
        _pattern("aliased_state", lambda: (AliasedState(), (_r(4),), None, [(_r(4),)])),
        _pattern("derived_dims", lambda: (DerivedDims(), (_r(4), _r(5), _r(8)), ({0: _d}, {0: _d + 1}, {0: 2 * _d}),
                                          [(_r(6), _r(7), _r(12))])),
        _pattern("equal_dims", _equal_dims),
        _pattern("wrapper_subclass_parameter", lambda: (WrapperSubclassParameter(), (_r(3),), None, [])),
    ]


def all_cases() -> list[CorpusCase]:
    return zoo_cases() + fixture_cases() + exportdb_cases() + pattern_cases()

