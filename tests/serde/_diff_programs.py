"""Random programs with state: what the differential harness must survive.

Extends :mod:`serde.testing.strategies` (whose pure ``OPS`` it reuses) with the hard cases for a loader:
in-place updates of buffers, of user inputs and of views of both, reads interleaved with those
writes, random draws (``rand``/``randn``/``bernoulli``/dropout in train mode, and draws from a
``torch.Generator`` the module holds), and a second input
whose size is derived from the first (``d + 1`` or ``2 * d``) so the program carries a relation
across inputs. A :class:`StatefulSpec` is plain data that hypothesis shrinks; :func:`export_stateful`
exports it for real (non-strict).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from hypothesis import strategies as st
from torch.export import Dim, ExportedProgram

from serde.testing.strategies import OPS

# Pure steps from serde.testing.strategies that keep float values of shape [B, F] or broadcastable to it
# (``linear`` needs its parameters, ``to_double`` would make later in-place steps change dtype).
PURE = tuple(sorted(set(OPS) - {"linear", "to_double"}))


def _rng(kind: str, v: torch.Tensor, gen: torch.Generator, features: int) -> torch.Tensor:
    # (a generator's draws take concrete sizes: torch cannot export rand.generator of a symbolic batch)
    if kind == "gen_rand":
        return v + torch.rand(features, generator=gen)
    if kind == "gen_randn":
        return v * torch.randn(features, generator=gen)
    if kind == "rand":
        return v + torch.rand_like(v)
    if kind == "randn":
        return v * torch.randn(v.shape)
    if kind == "bernoulli":
        return v * torch.bernoulli(torch.full_like(v, 0.5))
    return F.dropout(v, 0.5, training=True)


# Effectful steps: (value indices used, what it does). Each appends one value (a fresh tensor, never
# an alias of state, so later writes cannot change what an earlier step returned).
EFFECTS = {
    "buf_read": 1,        # v * buf
    "buf_add_": 1,        # buf.add_(mean of v)
    "buf_view_mul_": 0,   # buf[:k+1].mul_(0.5)
    "buf_copy_": 1,       # buf.copy_(v[0])
    "state_row_add_": 1,  # state[k % 2].add_(v.sum()) (a view of a 2-d buffer)
    "cache_index_copy_": 1,  # cache.index_copy_(0, [k, k + 2], v[:2]) (a KV-cache write)
    "value_add_": 1,      # v.add_(k): in place on any earlier value (user inputs and views included)
    "value_col_mul_": 1,  # v[..., 0].mul_(2): in place through a view of any earlier value
    "rand": 1, "randn": 1, "bernoulli": 1, "dropout": 1,
    "gen_rand": 1, "gen_randn": 1,  # from a generator the module holds (export lifts it into a constant)
}
RNG = frozenset({"rand", "randn", "bernoulli", "dropout", "gen_rand", "gen_randn"})
WRITES_STATE = frozenset({"buf_add_", "buf_view_mul_", "buf_copy_", "state_row_add_", "cache_index_copy_"})
WRITES_VALUE = frozenset({"value_add_", "value_col_mul_"})


@dataclass(frozen=True)
class StatefulSpec:
    batch: int
    features: int
    dynamic: bool
    derived: str          # how y's size follows x's: "same", "plus1" (d + 1) or "double" (2 * d)
    steps: tuple[tuple[str, tuple[int, ...], int], ...]  # (op, value indices, k)
    outputs: tuple[int, ...]
    seed: int

    def has(self, ops: frozenset[str]) -> bool:
        return any(op in ops for op, _, _ in self.steps)


@st.composite
def stateful_specs(draw: st.DrawFn, max_steps: int = 8) -> StatefulSpec:
    names = sorted(EFFECTS) * 2 + list(PURE)  # effects twice as likely as any one pure op
    steps = []
    for i in range(draw(st.integers(1, max_steps))):
        op = draw(st.sampled_from(names))
        arity = EFFECTS[op] if op in EFFECTS else OPS[op][0]
        steps.append((op, tuple(draw(st.integers(0, 1 + i)) for _ in range(arity)), draw(st.integers(0, 3))))
    last = 1 + len(steps)
    batch = draw(st.integers(3, 6))
    return StatefulSpec(
        batch=batch, features=draw(st.integers(2, 5).filter(lambda f: f != batch)),
        dynamic=draw(st.booleans()), derived=draw(st.sampled_from(["same", "plus1", "double"])),
        steps=tuple(steps), outputs=(last, *draw(st.lists(st.integers(0, last), max_size=2))),
        seed=draw(st.integers(0, 2**16)),
    )


class StatefulProgram(torch.nn.Module):
    def __init__(self, spec: StatefulSpec) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(spec.seed)
        f = spec.features
        self.spec = spec
        self.register_buffer("buf", torch.randn(f, generator=g))
        self.register_buffer("state", torch.randn(2, f, generator=g))
        self.register_buffer("cache", torch.zeros(8, f))
        self.gen = torch.Generator().manual_seed(spec.seed + 1)

    def forward(self, x, y):
        if self.spec.derived == "plus1":
            y = y[1:]                       # a view of the input: writes to it reach the caller
        elif self.spec.derived == "double":
            y = y.reshape(2, -1, y.shape[-1]).sum(0)
        values = [x, y]
        for op, idx, k in self.spec.steps:
            args = [values[i] for i in idx]
            values.append(self._step(op, args, k))
        return tuple(values[i] for i in self.spec.outputs)

    def _step(self, op: str, args: list, k: int) -> torch.Tensor:
        if op in RNG:
            return _rng(op, args[0], self.gen, self.spec.features)
        if op not in EFFECTS:
            return OPS[op][1](self, *args, k)
        v = args[0] if args else None
        if op == "buf_read":
            return v * self.buf
        if op == "buf_add_":
            self.buf.add_(v.mean(0))
        elif op == "buf_view_mul_":
            self.buf[:k + 1].mul_(0.5)
        elif op == "buf_copy_":
            self.buf.copy_(v.reshape(-1, v.shape[-1] if v.dim() else 1)[0])  # (a state-only step's value is 0-d)
        elif op == "state_row_add_":
            self.state[k % 2].add_(v.sum())
        elif op == "cache_index_copy_":
            w = v * torch.ones(1, self.spec.features)  # [B, 1] or [1, F] values: make rows of F
            rows = w.expand(2, -1) if w.shape[0] == 1 else w[:2]
            self.cache.index_copy_(0, torch.tensor([k, k + 2]), rows)
        elif op == "value_add_":
            v.add_(k + 1)
        elif op == "value_col_mul_":
            (v if v.dim() else v.view(1))[..., 0].mul_(2)
        else:
            raise AssertionError(f"unhandled effect {op}")
        return (self.buf.sum() + self.state[0].mean() + self.cache.mean()) * 1 if v is None else v * 1


def inputs_of(spec: StatefulSpec, b: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(spec.seed + b)
    rows = {"same": b, "plus1": b + 1, "double": 2 * b}[spec.derived]
    return torch.randn(b, spec.features, generator=g), torch.randn(rows, spec.features, generator=g)


def export_stateful(spec: StatefulSpec) -> tuple[ExportedProgram, list[tuple[tuple, dict]]]:
    """(program, inputs to run on): the example inputs, and another batch size when dynamic."""
    torch._dynamo.reset()  # cond caches compiled branches across exports (see serde.testing.strategies)
    dyn: Any = None
    if spec.dynamic:
        d = Dim("d", min=2, max=16)
        dyn = ({0: d}, {0: {"same": d, "plus1": d + 1, "double": 2 * d}[spec.derived]})
    x = inputs_of(spec, spec.batch)
    ep = torch.export.export(StatefulProgram(spec), tuple(t.clone() for t in x), dynamic_shapes=dyn, strict=False)
    runs = [(x, {})]
    if spec.dynamic:
        runs.append((inputs_of(spec, spec.batch + 3), {}))
    return ep, runs
