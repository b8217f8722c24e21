"""Every operator torch describes in its OpInfo database (``torch.testing._internal``'s ``op_db``):
each sample that ``torch.export`` can export is saved, loaded and run, and must compute what the
exported program computes on the same inputs and seed (outputs, and inputs an op writes to).

These programs are torch's, not ours, and they reach argument kinds no hand-written program here
does (memory formats, layouts, dtype and optional lists, complex scalars, named-tuple returns).
When slow, more samples per operator, every dtype it supports, every input dimension dynamic and
its in-place form, which writes to the program's inputs. A
sample torch cannot export is torch's limit and is only counted; a program we refuse to save must
be refused for one of the reasons in :data:`REFUSALS`, and any other failure fails the test.
"""

from __future__ import annotations

import io
import re
import warnings
from dataclasses import dataclass, field
from functools import cache
from typing import Any

import pytest
import torch
from torch.export import Dim

import serde
from serde.errors import SerializeError

# (pattern of our refusal, why it is right). torch.export.save refuses both as well.
REFUSALS = (
    (r"out_spec: pytree type torch\.return_types\.\w+ has no serialized name",
     "named-tuple results of torch.max, topk, svd...: torch registers them with pytree without a name "
     "to store, so torch.export.save cannot store them either"),
    (r"tensors with layout torch\.sparse_\w+ are not supported; only strided tensors are",
     "sparse tensors: the schema describes strided tensors only"),
)

# Ops whose result is uninitialized memory: only its metadata is defined, so only that is compared.
UNINITIALIZED = frozenset({"empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided",
                           "empty_permuted"})

CHUNKS = 8


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


def _program(fn: Any, sample: Any) -> tuple[_Call, tuple[torch.Tensor, ...]]:
    tensors: list[torch.Tensor] = []

    def place(v: Any) -> tuple[str, Any]:
        if isinstance(v, torch.Tensor):
            tensors.append(v)
            return "input", len(tensors) - 1
        return "constant", v

    args = [place(v) for v in (sample.input, *sample.args)]
    kwargs = {k: place(v) for k, v in sample.kwargs.items()}
    return _Call(fn, args, kwargs), tuple(tensors)


def _same(a: Any, b: Any, metadata_only: bool) -> bool:
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
        # Bit for bit, NaNs in the same places: the same kernels ran on the same inputs.
        return bool(torch.equal(a, b) or ((a.is_floating_point() or a.is_complex())
                                          and torch.allclose(a, b, rtol=0, atol=0, equal_nan=True)))
    if isinstance(a, (tuple, list)):
        return (type(a) is type(b) and len(a) == len(b)
                and all(_same(x, y, metadata_only) for x, y in zip(a, b, strict=True)))
    return a == b or (a != a and b != b)  # (a float NaN equals itself here)


@dataclass
class _Tally:
    samples: int = 0
    export_failed: int = 0
    refused: dict[str, int] = field(default_factory=dict)
    compared: int = 0
    failures: list[str] = field(default_factory=list)


def _check_sample(op: Any, fn: Any, sample: Any, dynamic: bool, name: str, tally: _Tally) -> None:
    tally.samples += 1
    module, inputs = _program(fn, sample)
    # Every dimension of every input dynamic (torch specializes what the op needs static): symbolic
    # sizes, strides and guards in every kind of operator.
    dims = (tuple({d: Dim.AUTO for d in range(t.dim())} for t in inputs),) if dynamic else None
    try:
        ep = torch.export.export(module, tuple(t.clone() for t in inputs), dynamic_shapes=dims, strict=False)
    except Exception:  # noqa: BLE001 -- torch's own limits; counted, not ours to judge
        tally.export_failed += 1
        return
    buf = io.BytesIO()
    try:
        serde.save(ep, buf)
    except SerializeError as e:
        reason = next((why for pattern, why in REFUSALS if re.search(pattern, str(e))), None)
        if reason is None:
            tally.failures.append(f"{name}: refused for a reason not in REFUSALS: {type(e).__name__}: {e}")
        else:
            tally.refused[reason] = tally.refused.get(reason, 0) + 1
        return
    except Exception as e:  # noqa: BLE001 -- the point is to name every foreign exception
        tally.failures.append(f"{name}: save raised {type(e).__name__}: {e}")
        return
    try:
        buf.seek(0)
        loaded = serde.load(buf)
    except Exception as e:  # noqa: BLE001
        tally.failures.append(f"{name}: load raised {type(e).__name__}: {e}")
        return
    want_in, got_in = [t.clone() for t in inputs], [t.clone() for t in inputs]
    try:
        torch.manual_seed(1234)
        want = ep.module()(*want_in)
    except Exception:  # noqa: BLE001 -- the exported program itself fails: nothing to compare with
        return
    try:
        torch.manual_seed(1234)
        got = loaded.module()(*got_in)
    except Exception as e:  # noqa: BLE001
        tally.failures.append(f"{name}: the loaded program raised {type(e).__name__}: {e} (the exported one ran)")
        return
    tally.compared += 1
    if not _same(want, got, op.name in UNINITIALIZED):
        tally.failures.append(f"{name}: outputs differ from the exported program's")
    elif not _same(want_in, got_in, False):
        tally.failures.append(f"{name}: the inputs it writes to differ from the exported program's")


# The dtypes the "dtypes" variant tries, where an operator supports them (float32 is the default's).
OTHER_DTYPES = (torch.float64, torch.float16, torch.bfloat16, torch.complex64, torch.int64, torch.int32,
                torch.uint8, torch.bool)


def _run(chunk: int, samples_per_op: int, variant: str = "float32") -> _Tally:
    """``variant``: "float32" (else the operator's first dtype), "dtypes" (each of OTHER_DTYPES it
    supports), "dynamic" (float32, every input dimension dynamic) or "inplace" (float32, the
    operator's in-place form where it has one)."""
    tally = _Tally()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecation notices of torch's own samples
        for op in _ops()[chunk::CHUNKS]:
            name = f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name
            supported = op.supported_dtypes("cpu")
            if variant == "dtypes":
                dtypes = [d for d in OTHER_DTYPES if d in supported]
            else:
                dtypes = [torch.float32 if torch.float32 in supported else min(supported, key=str, default=None)]
            fn = op.inplace_variant if variant == "inplace" else op.op
            if fn is None:
                continue
            for dtype in dtypes:
                if dtype is None:
                    continue
                torch.manual_seed(0)
                samples = list(op.sample_inputs("cpu", dtype, requires_grad=False))[:samples_per_op]
                for k, sample in enumerate(samples):
                    _check_sample(op, fn, sample, variant == "dynamic", f"{name}[{k}] ({dtype}, {variant})", tally)
    return tally


def _judge(tally: _Tally) -> None:
    assert not tally.failures, "\n".join(tally.failures)
    # Not vacuous: in torch 2.13 about nine samples in ten export, and most of those run.
    assert tally.export_failed < tally.samples * 0.25, tally
    assert tally.compared > (tally.samples - tally.export_failed) * 0.8, tally


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_opinfo_samples_compute_like_the_exported_program(chunk: int) -> None:
    _judge(_run(chunk, samples_per_op=1))


@pytest.mark.slow
@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_opinfo_samples_compute_like_the_exported_program_more_samples(chunk: int) -> None:
    _judge(_run(chunk, samples_per_op=4))


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["dtypes", "dynamic", "inplace"])
@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_opinfo_variants_compute_like_the_exported_program(chunk: int, variant: str) -> None:
    _judge(_run(chunk, samples_per_op=1, variant=variant))
