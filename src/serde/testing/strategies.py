"""Hypothesis strategies for round-trip testing: random *exported* programs, and random schema Structs.

Random programs are DAGs of aten ops over tensors whose shapes broadcast to ``[B, F]``, with random
input dtypes and layouts, optional dynamic batch and feature dims, parameters, a buffer mutation,
multi-output ops, size arithmetic and ``cond``. A :class:`ProgramSpec` is plain data (hypothesis
shrinks it); :func:`build_program` turns it into a module, inputs and dynamic shapes, and
:func:`exported_programs` exports it for real::

    from hypothesis import given
    from serde.testing import assert_roundtrip, exported_programs

    @given(exported_programs())
    def test_my_format(ep):
        assert_roundtrip(ep)

Requires ``hypothesis`` (a test dependency); ``serde.testing`` re-exports these names lazily.
"""

from __future__ import annotations

import enum
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

import torch
from hypothesis import strategies as st
from torch.export import Dim, ExportedProgram

from serde.core import schema

__all__ = ["ProgramSpec", "BuiltProgram", "program_specs", "build_program", "exported_programs",
           "schema_structs", "OPS", "export_spec"]

# ---------------------------------------------------------------- ops
# Every op maps values that broadcast to [B, F] to a value that still does, so any step may use
# any earlier value. `m` is the module (parameters and buffers), `k` a small drawn integer.


def _f(v: torch.Tensor) -> torch.Tensor:
    return v if v.is_floating_point() else v.to(torch.float32)


def _cond(m: Any, a: torch.Tensor, b: torch.Tensor, k: int) -> torch.Tensor:
    # torch.cond merges its branches' output strides, and fails (an AssertionError, or "the sorted
    # order of strides ... doesn't match") on a transposed value with a size-1 dim, whose strides
    # tie: a contiguous copy keeps every drawn program exportable.
    a, b = _f(a).clone(memory_format=torch.contiguous_format), _f(b)
    return torch.cond(a.sum() > b.sum(), lambda a, b: a * 2 + b.mean(), lambda a, b: a - b.amax(), (a, b))


def _size_arith(v: torch.Tensor) -> torch.Tensor:
    # Arithmetic on the first and last sizes (symbolic when dynamic). A 0-d value has neither, and
    # counts as one on both: every op here takes values of any rank a generator may hand it.
    first, last = (v.shape[0], v.shape[-1]) if v.dim() else (1, 1)
    return v * (first // 2 + 1) + last % 3


OPS: dict[str, tuple[int, Callable[..., torch.Tensor]]] = {
    # unary
    "relu": (1, lambda m, v, k: torch.relu(v)),
    "sigmoid": (1, lambda m, v, k: torch.sigmoid(_f(v))),
    "tanh": (1, lambda m, v, k: torch.tanh(_f(v))),
    "sin": (1, lambda m, v, k: torch.sin(_f(v))),
    "exp": (1, lambda m, v, k: torch.exp(_f(v).clamp(-4, 4))),
    "neg_abs": (1, lambda m, v, k: -v.abs()),
    "scale": (1, lambda m, v, k: v * (k + 0.5) - k),
    "clamp": (1, lambda m, v, k: _f(v).clamp(-1.0 - k, 1.0 + k)),
    "pow": (1, lambda m, v, k: _f(v).pow(2)),
    "softmax": (1, lambda m, v, k: torch.softmax(_f(v), dim=-1)),
    "cumsum": (1, lambda m, v, k: torch.cumsum(v, dim=-1)),
    "rowsum": (1, lambda m, v, k: v.sum(-1, keepdim=True)),
    "colmean": (1, lambda m, v, k: _f(v).mean(0, keepdim=True)),
    # (clone, not contiguous: with a size-1 dimension contiguous() returns the value itself, an
    # alias that torch.cond refuses beside the value)
    "transposed": (1, lambda m, v, k: v.t().clone(memory_format=torch.contiguous_format).t() if v.dim() == 2
                   else v.flip(-1)),
    "max_dim": (1, lambda m, v, k: (lambda r: r.values + r.indices.to(r.values.dtype) * 0.1)(
        _f(v).max(dim=-1, keepdim=True))),
    "aminmax": (1, lambda m, v, k: (lambda r: r.min * 2 - r.max)(torch.aminmax(v, dim=-1, keepdim=True))),
    "size_arith": (1, lambda m, v, k: _size_arith(v)),
    "new_full": (1, lambda m, v, k: v.new_full((*v.shape[:-1], 1), 0.5 + k) + v),
    "to_double": (1, lambda m, v, k: v.to(torch.float64)),
    "linear": (1, lambda m, v, k: torch.nn.functional.linear((v + m.zero_row).to(m.weight.dtype), m.weight,
                                                           m.bias)),
    # binary
    "add": (2, lambda m, a, b, k: a + b),
    "sub": (2, lambda m, a, b, k: a - b),
    "mul": (2, lambda m, a, b, k: a * b),
    "maximum": (2, lambda m, a, b, k: torch.maximum(_f(a), _f(b))),
    "where": (2, lambda m, a, b, k: torch.where(a > b, a, b)),
    "cond": (2, _cond),
}
_NEEDS_STATIC_FEATURES = frozenset({"linear"})  # parameters have a fixed feature size
_INPUT_DTYPES = ("float32", "float32", "float64", "bfloat16", "int64")
_LAYOUTS = ("full", "full", "row", "col", "vec")  # [B,F], [1,F], [B,1], [F]


@dataclass(frozen=True)
class ProgramSpec:
    """A random program as plain data."""

    batch: int
    features: int
    dynamic_batch: bool
    dynamic_features: bool
    inputs: tuple[tuple[str, str], ...]        # (layout, dtype) per input
    steps: tuple[tuple[str, tuple[int, ...], int], ...]  # (op, value indices, k)
    outputs: tuple[int, ...]                   # value indices returned
    mutate_buffer: bool
    seed: int


@dataclass
class BuiltProgram:
    module: torch.nn.Module
    args: tuple
    dynamic_shapes: Any
    other_inputs: list[tuple[tuple, dict]] = field(default_factory=list)


@st.composite
def program_specs(draw: st.DrawFn, max_inputs: int = 3, max_steps: int = 8,
                  ops: tuple[str, ...] | None = None) -> ProgramSpec:
    """Random :class:`ProgramSpec` (shrinks towards short float32 programs)."""
    names = sorted(ops or OPS)
    inputs = tuple(draw(st.lists(st.tuples(st.sampled_from(_LAYOUTS), st.sampled_from(_INPUT_DTYPES)),
                                 min_size=1, max_size=max_inputs)))
    steps = []
    for i in range(draw(st.integers(1, max_steps))):
        op = draw(st.sampled_from(names))
        avail = len(inputs) + i
        args = tuple(draw(st.integers(0, avail - 1)) for _ in range(OPS[op][0]))
        steps.append((op, args, draw(st.integers(0, 3))))
    last = len(inputs) + len(steps) - 1
    outputs = (last, *draw(st.lists(st.integers(0, last), max_size=2)))
    static_features = any(op in _NEEDS_STATIC_FEATURES for op, _, _ in steps)
    batch = draw(st.integers(3, 7))
    # Batch and features never share an example size: export would give them one symbol.
    features = draw(st.integers(2, 6).filter(lambda f: f != batch))
    return ProgramSpec(
        batch=batch, features=features,
        dynamic_batch=draw(st.booleans()),
        dynamic_features=not static_features and draw(st.booleans()),
        inputs=inputs, steps=tuple(steps), outputs=outputs,
        mutate_buffer=draw(st.booleans()), seed=draw(st.integers(0, 2**16)),
    )


class _Program(torch.nn.Module):
    def __init__(self, spec: ProgramSpec) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(spec.seed)
        f = spec.features
        self.spec = spec
        self.weight = torch.nn.Parameter(torch.randn(f, f, generator=g) / f)
        self.bias = torch.nn.Parameter(torch.randn(f, generator=g))
        self.register_buffer("zero_row", torch.zeros(f))
        self.register_buffer("acc", torch.zeros(()))

    def forward(self, *xs):
        values = list(xs)
        for op, idx, k in self.spec.steps:
            values.append(OPS[op][1](self, *(values[i] for i in idx), k))
        if self.spec.mutate_buffer:
            self.acc.add_(_f(values[-1]).mean().to(self.acc.dtype))
        return tuple(values[i] for i in self.spec.outputs)


def _input(layout: str, dtype: str, b: int, f: int, g: torch.Generator) -> torch.Tensor:
    shape = {"full": (b, f), "row": (1, f), "col": (b, 1), "vec": (f,)}[layout]
    if dtype == "int64":
        return torch.randint(-5, 6, shape, generator=g)
    return (torch.randn(shape, generator=g) * 2).to(getattr(torch, dtype))


def build_program(spec: ProgramSpec) -> BuiltProgram:
    """Module, example inputs, dynamic shapes and (when a dim is dynamic) inputs of other sizes."""
    g = torch.Generator().manual_seed(spec.seed + 1)
    batch, feat = Dim("batch", min=2, max=64), Dim("feat", min=2, max=32)

    def dims(layout: str) -> dict[int, Any] | None:
        d: dict[int, Any] = {}
        if layout in ("full", "col") and spec.dynamic_batch:
            d[0] = batch
        if layout in ("full", "row", "vec") and spec.dynamic_features:
            d[1 if layout != "vec" else 0] = feat
        return d or None

    def inputs(b: int, f: int) -> tuple:
        return tuple(_input(lay, dt, b, f, g) for lay, dt in spec.inputs)

    dyn = tuple(dims(lay) for lay, _ in spec.inputs)
    others = []
    if spec.dynamic_batch or spec.dynamic_features:
        b2 = spec.batch + 4 if spec.dynamic_batch else spec.batch
        f2 = spec.features + 3 if spec.dynamic_features else spec.features
        others.append((inputs(b2, f2), {}))
    # forward(*xs): the dynamic shapes of a var-positional parameter are one tuple
    return BuiltProgram(_Program(spec), inputs(spec.batch, spec.features),
                        (dyn,) if any(d is not None for d in dyn) else None, others)


def export_spec(spec: ProgramSpec) -> tuple[ExportedProgram, BuiltProgram]:
    """Export the program of ``spec``: (program, what it was built from)."""
    # torch.cond compiles its branches with dynamo and caches them across exports; a cached entry
    # from an earlier example can specialize a dim this example marks dynamic.
    torch._dynamo.reset()
    built = build_program(spec)
    ep = torch.export.export(built.module, built.args, dynamic_shapes=built.dynamic_shapes, strict=False)
    return ep, built


def exported_programs(**kwargs: Any) -> st.SearchStrategy[ExportedProgram]:
    """Random programs, exported with ``torch.export.export`` (kwargs go to :func:`program_specs`)."""
    return program_specs(**kwargs).map(lambda spec: export_spec(spec)[0])


# ---------------------------------------------------------------- schema Structs


def schema_structs(type_: type, *, max_depth: int = 4) -> st.SearchStrategy[Any]:
    """Random instances of a schema Struct (or any schema field type), unions with one member set.

    Floats include nan/inf/-inf (as the schema writes them) and -0.0; ints span int64 and beyond
    2**53. Recursive types (Graph -> Node -> Argument -> GraphArgument -> Graph) stop at ``max_depth``.
    """
    return _strategy(type_, max_depth)


_INT = st.one_of(st.integers(-(2**63), 2**63 - 1), st.sampled_from([2**53 + 1, -(2**53) - 1, 0, -1]))
# Finite doubles; nan/inf/-inf are the F64 strings, drawn through its Literal member.
_FLOAT = st.one_of(st.floats(allow_nan=False, allow_infinity=False),
                   st.sampled_from([-0.0, 5e-324, 1.7976931348623157e308]))
_TEXT = st.text(max_size=12)


def _members(t: Any) -> tuple[list[Any], bool]:
    """(non-None members, whether None is allowed) of a possibly Optional / union type."""
    origin = typing.get_origin(t)
    if origin is typing.Union or (origin is not None and str(origin) == "<class 'types.UnionType'>"):
        args = typing.get_args(t)
        return [a for a in args if a is not type(None)], type(None) in args
    return [t], False


def _strategy(t: Any, depth: int, *, allow_none: bool = False) -> st.SearchStrategy[Any]:
    if typing.get_origin(t) is Annotated:
        return _strategy(typing.get_args(t)[0], depth, allow_none=allow_none)
    members, optional = _members(t)
    if len(members) > 1 or optional:
        inner = st.one_of(*(_strategy(m, depth) for m in members))
        return st.one_of(st.none(), inner) if optional and allow_none else inner
    t = members[0]
    origin = typing.get_origin(t)
    if origin is Literal:
        return st.sampled_from(typing.get_args(t))
    if origin is list:
        if depth <= 0:
            return st.just([])
        return st.lists(_strategy(typing.get_args(t)[0], depth - 1), max_size=3)
    if origin is dict:
        if depth <= 0:
            return st.just({})
        k, v = typing.get_args(t)
        return st.dictionaries(_strategy(k, depth - 1), _strategy(v, depth - 1), max_size=3)
    if t is bool:
        return st.booleans()
    if t is int:
        return _INT
    if t is float:
        return _FLOAT
    if t is str:
        return _TEXT
    if isinstance(t, type) and issubclass(t, enum.IntEnum):
        return st.sampled_from(list(t))
    if isinstance(t, type) and issubclass(t, schema.Struct):
        return st.deferred(lambda: _struct(t, depth))
    raise TypeError(f"no strategy for schema type {t!r}")


def _struct(cls: type, depth: int) -> st.SearchStrategy[Any]:
    hints = typing.get_type_hints(cls, include_extras=True)
    fields = cls.__struct_fields__
    if issubclass(cls, schema.Union):
        # Past the depth budget, only members holding plain values (no nested structs or lists).
        options = [f for f in fields if depth > 0 or _is_plain(hints[f])] or list(fields)
        return st.sampled_from(options).flatmap(
            lambda f: _strategy(hints[f], depth - 1).map(lambda v, f=f: cls(**{f: v})))
    parts = {f: _strategy(hints[f], depth - 1, allow_none=True) for f in fields}
    return st.fixed_dictionaries(parts).map(lambda kw: cls(**kw))


def _is_plain(t: Any) -> bool:
    if typing.get_origin(t) is Annotated:
        t = typing.get_args(t)[0]
    members, _ = _members(t)
    return all(m in (bool, int, float, str) or typing.get_origin(m) is Literal
               or (isinstance(m, type) and issubclass(m, enum.IntEnum)) for m in members)
