"""Programs made from torch's OpInfo database (``torch.testing._internal``'s ``op_db``): one program
per operator sample, its tensors as the program's inputs and everything else as constants; and
from its ModuleInfo database (``module_db``): one per ``nn.Module`` sample, in eval and train mode.

Used by the serde and native breadth tests. These programs are torch's, not ours: they reach
argument kinds no hand-written program here does (memory formats, layouts, dtype and optional
lists, complex scalars, named-tuple returns).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

import pytest
import torch
from torch.export import Dim, ExportedProgram

__all__ = ["CHUNKS", "chunk_params", "OTHER_DTYPES", "UNINITIALIZED", "Sample", "samples", "export", "resized_inputs", "same",
           "ModuleSample", "module_samples"]

# Tests split the operators into this many parametrized chunks (one pytest item is a few seconds).
CHUNKS = 16


def chunk_params(fast: int) -> list:
    """``range(CHUNKS)`` as test parameters, every chunk but ``fast`` marked slow: ``make test`` sweeps
    every CHUNKS-th operator (or module) from ``fast`` on, a spread over the whole database, and
    ``make test-all`` sweeps them all. Tests of different runtimes keep different chunks, so that
    the fast suite as a whole reaches more operators."""
    return [c if c == fast else pytest.param(c, marks=pytest.mark.slow) for c in range(CHUNKS)]

# The dtypes the "dtypes" variant tries, where an operator supports them (float32 is the default's).
OTHER_DTYPES = (torch.float64, torch.float16, torch.bfloat16, torch.complex64, torch.int64, torch.int32,
                torch.uint8, torch.bool)

# Ops whose result is uninitialized memory: only its metadata is defined, so only that is compared.
UNINITIALIZED = frozenset({"empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided",
                           "empty_permuted"})


@cache
def _ops() -> list:
    # Imported on first use: it takes seconds, and it changes process state other test files could
    # see (torch.backends flags become read-only, TorchScript calls are wrapped); none sets them.
    from torch.testing._internal.common_methods_invocations import op_db

    return sorted(op_db, key=lambda op: (op.name, op.variant_test_name))


class _Call(torch.nn.Module):
    """``fn(*args, **kwargs)`` with the sample's tensors as the program's inputs, the rest constants."""

    def __init__(self, fn: Any, args: list[tuple[str, Any]], kwargs: dict[str, tuple[str, Any]]) -> None:
        super().__init__()
        self.fn, self.args, self.kw = fn, args, kwargs

    def forward(self, *tensors: torch.Tensor) -> Any:
        def value(kind: str, v: Any) -> Any:
            return tensors[v] if kind == "input" else v

        return self.fn(*[value(k, v) for k, v in self.args], **{n: value(k, v) for n, (k, v) in self.kw.items()})


@dataclass(frozen=True)
class Sample:
    name: str                           # "add[0] (torch.float32, float32)"
    module: _Call
    inputs: tuple[torch.Tensor, ...]
    dynamic: bool                       # export with every input dimension dynamic
    uninitialized: bool                 # compare the result's metadata only


def _sample(fn: Any, sample: Any, name: str, dynamic: bool, uninitialized: bool) -> Sample:
    tensors: list[torch.Tensor] = []

    def place(v: Any) -> tuple[str, Any]:
        if isinstance(v, torch.Tensor):
            tensors.append(v)
            return "input", len(tensors) - 1
        return "constant", v

    args = [place(v) for v in (sample.input, *sample.args)]
    kwargs = {k: place(v) for k, v in sample.kwargs.items()}
    return Sample(name, _Call(fn, args, kwargs), tuple(tensors), dynamic, uninitialized)


def samples(chunk: int, samples_per_op: int, variant: str = "float32",
            only: frozenset[str] | None = None) -> Iterator[Sample]:
    """The samples of every ``CHUNKS``-th operator from ``chunk`` on, ``samples_per_op`` each
    (with ``only``: of every operator whose name is in it, ``chunk`` ignored).

    ``variant``: "float32" (else the operator's first dtype), "dtypes" (each of OTHER_DTYPES it
    supports), "dynamic" (float32, every input dimension dynamic) or "inplace" (float32, the
    operator's in-place form where it has one, which writes to the program's inputs).
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecation notices of torch's own samples
        for op in (_ops()[chunk::CHUNKS] if only is None else _ops()):
            name = f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name
            if only is not None and name not in only:
                continue
            supported = op.supported_dtypes("cpu")
            if variant == "dtypes":
                dtypes = [d for d in OTHER_DTYPES if d in supported]
            else:
                first = min(supported, key=str, default=None)
                dtypes = [torch.float32 if torch.float32 in supported else first] if supported else []
            fn = op.inplace_variant if variant == "inplace" else op.op
            if fn is None:
                continue
            for dtype in dtypes:
                torch.manual_seed(0)
                for k, s in enumerate(list(op.sample_inputs("cpu", dtype, requires_grad=False))[:samples_per_op]):
                    yield _sample(fn, s, f"{name}[{k}] ({dtype}, {variant})", variant == "dynamic",
                                  op.name in UNINITIALIZED)


def export(s: Sample) -> ExportedProgram:
    """The sample's program, exported non-strict (raises what torch raises when it cannot)."""
    dims = (tuple({d: Dim.AUTO for d in range(t.dim())} for t in s.inputs),) if s.dynamic else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.export.export(s.module, tuple(t.clone() for t in s.inputs), dynamic_shapes=dims, strict=False)


def resized_inputs(ep: ExportedProgram, inputs: tuple[torch.Tensor, ...]) -> list[tuple[str, tuple[torch.Tensor, ...]]]:
    """Other inputs for a dynamic program: ``(label, inputs)`` with every size symbol set another way.

    ``"grown"`` sets each symbol one above its sample value (within its range), ``"lowest"`` to the
    lowest value its range allows, and ``"below"`` one under that. The exported program refuses
    such inputs where one of its guards fails; in torch 2.13 it still accepts size 1 where a
    dimension's range starts at 2, so the caller compares what both programs do. Floating and
    complex inputs are random (seeded); integer and bool inputs are zeros, a valid index and mask
    for any size. Empty when the program has no size symbol, or one that no input dimension is
    equal to (its value could not be chosen freely).
    """
    import sympy

    placeholders = {n.name: n.meta.get("val") for n in ep.graph.nodes if n.op == "placeholder"}
    vals = [placeholders[name] for name in ep.graph_signature.user_inputs]
    if len(vals) != len(inputs) or not all(isinstance(v, torch.Tensor) for v in vals):
        return []
    sample_value: dict[Any, int] = {}
    exprs: list[list[Any]] = []
    for v, t in zip(vals, inputs, strict=True):
        dims = []
        for d, size in zip(v.shape, t.shape, strict=True):
            e = d.node.expr if isinstance(d, torch.SymInt) else int(d)
            if isinstance(e, sympy.Symbol):
                sample_value[e] = size
            dims.append(e)
        exprs.append(dims)
    free = {s for dims in exprs for e in dims if isinstance(e, sympy.Expr) for s in e.free_symbols}
    if not free or free - set(sample_value):
        return []
    def finite(bound: Any) -> int | None:
        # (torch's int_oo is a sympy number whose is_finite is not reliably False)
        return int(bound) if isinstance(bound, (int, sympy.Integer)) else None

    lo: dict[Any, int] = {}
    hi: dict[Any, int | None] = {}
    for s in free:
        r = ep.range_constraints.get(s)
        lo[s] = (finite(r.lower) if r is not None else None) or 0
        hi[s] = finite(r.upper) if r is not None else None
    grown = {s: v + 1 if hi[s] is None or v + 1 <= hi[s] else v for s, v in sample_value.items()}
    lowest = dict(lo)
    below = {s: lo[s] - 1 if lo[s] > 0 else lo[s] for s in free}
    out = []
    for label, values in (("grown", grown), ("lowest", lowest), ("below", below)):
        if values == sample_value or (label == "below" and values == lowest):
            continue
        gen = torch.Generator().manual_seed(0)
        made = []
        for dims, t in zip(exprs, inputs, strict=True):
            shape = [int(e.subs(values)) if isinstance(e, sympy.Expr) else e for e in dims]
            if min(shape, default=0) < 0:
                break
            if t.dtype.is_complex:
                made.append(torch.randn(shape, generator=gen, dtype=torch.complex64).to(t.dtype))
            elif t.dtype.is_floating_point:  # (drawn in float32: torch has no normal kernel for float8)
                made.append(torch.randn(shape, generator=gen).to(t.dtype))
            else:
                made.append(torch.zeros(shape, dtype=t.dtype))
        else:
            out.append((label, tuple(made)))
    return out


def same(a: Any, b: Any, metadata_only: bool = False) -> bool:
    """Equal outputs: bit for bit (NaNs in the same places), or only shape, dtype, device, layout
    and strides with ``metadata_only``."""
    if isinstance(a, torch.Tensor):
        if not (isinstance(b, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype
                and a.device == b.device and a.layout == b.layout):
            return False
        if metadata_only:
            return a.layout != torch.strided or a.stride() == b.stride()
        if a.layout != torch.strided:
            a, b = a.to_dense(), b.to_dense()
        if a.dtype in (torch.complex32, torch.float16, torch.bfloat16):
            a, b = (a.to(torch.complex64), b.to(torch.complex64)) if a.is_complex() else (a.double(), b.double())
        return bool(torch.equal(a, b) or ((a.is_floating_point() or a.is_complex())
                                          and torch.allclose(a, b, rtol=0, atol=0, equal_nan=True)))
    if isinstance(a, (tuple, list)):
        return (type(a) is type(b) and len(a) == len(b)
                and all(same(x, y, metadata_only) for x, y in zip(a, b, strict=True)))
    return a == b or (a != a and b != b)  # (a float NaN equals itself here)


# Modules whose exported program torch itself cannot run on the database's own sample: both pairs
# refuse it, nothing is compared, and the module sweeps' not-vacuous counts leave them out.
TORCH_CANNOT_RUN = {
    "nn.FractionalMaxPool3d": "torch 2.13's exported program raises 'Expect _random_samples to have the same "
                              "dtype as input' on its own float32 sample",
}


def torch_cannot_run(name: str) -> bool:
    """Whether the module of sample ``name`` ("nn.X[k] (mode)") is one of :data:`TORCH_CANNOT_RUN`."""
    return name.split("[", 1)[0] in TORCH_CANNOT_RUN


@dataclass(frozen=True)
class ModuleSample:
    name: str                           # "nn.BatchNorm2d[0] (train)"
    module: torch.nn.Module
    args: tuple
    kwargs: dict


def module_samples(samples_per_module: int = 2, chunk: int | None = None) -> Iterator[ModuleSample]:
    """Every ``nn.Module`` of torch's ModuleInfo database (with ``chunk``: every ``CHUNKS``-th from
    ``chunk`` on), float32, in eval then train mode (where batch norms update their running
    statistics and dropouts draw)."""
    from torch.testing._internal.common_modules import module_db

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for info in (module_db if chunk is None else module_db[chunk::CHUNKS]):
            for training in (False, True):
                torch.manual_seed(0)
                made = info.module_inputs_func(info, device="cpu", dtype=torch.float32, requires_grad=False,
                                               training=training)
                for k, mi in enumerate(list(made)[:samples_per_module]):
                    if mi.forward_input is None:
                        continue
                    module = info.module_cls(*mi.constructor_input.args, **mi.constructor_input.kwargs)
                    yield ModuleSample(f"{info.name}[{k}] ({'train' if training else 'eval'})",
                                       module.train(training), tuple(mi.forward_input.args),
                                       dict(mi.forward_input.kwargs))
