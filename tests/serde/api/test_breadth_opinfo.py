"""Every operator torch describes in its OpInfo database (:mod:`tests.opinfo`): each sample that
``torch.export`` can export is saved, loaded and run, and must compute what the exported program
computes on the same inputs and seed (outputs, and inputs an op writes to).

A sample torch cannot export is torch's limit and is only counted; a program we refuse to save must
be refused for one of the reasons in :data:`REFUSALS`, and any other failure fails the test. When
slow: more samples per operator, every dtype it supports, every input dimension dynamic, and its
in-place form, which writes to the program's inputs.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field

import pytest
import torch

import serde
from serde.errors import SerializeError
from tests.opinfo import CHUNKS, Sample, chunk_params, export, resized_inputs, same, samples

# (pattern of our refusal, why it is right). torch.export.save refuses it as well.
REFUSALS = (
    (r"tensors with layout torch\.sparse_\w+ are not supported; only strided tensors are",
     "sparse tensors: the schema describes strided tensors only"),
)


@dataclass
class _Tally:
    samples: int = 0
    export_failed: int = 0
    refused: dict[str, int] = field(default_factory=dict)
    compared: int = 0
    # dynamic programs run again at other sizes: both computed the same, or both refused the inputs
    resized_compared: int = 0
    resized_refused: int = 0
    failures: list[str] = field(default_factory=list)


def _check(s: Sample, tally: _Tally) -> None:
    tally.samples += 1
    try:
        ep = export(s)
    except Exception:  # noqa: BLE001 -- torch's own limits; counted, not ours to judge
        tally.export_failed += 1
        return
    buf = io.BytesIO()
    try:
        serde.save(ep, buf)
    except SerializeError as e:
        reason = next((why for pattern, why in REFUSALS if re.search(pattern, str(e))), None)
        if reason is None:
            tally.failures.append(f"{s.name}: refused for a reason not in REFUSALS: {type(e).__name__}: {e}")
        else:
            tally.refused[reason] = tally.refused.get(reason, 0) + 1
        return
    except Exception as e:  # noqa: BLE001 -- the point is to name every foreign exception
        tally.failures.append(f"{s.name}: save raised {type(e).__name__}: {e}")
        return
    try:
        buf.seek(0)
        # Every operator runs again on the stored fake values: the stored results must be what it computes.
        loaded = serde.load(buf, propagate=True)
    except Exception as e:  # noqa: BLE001
        tally.failures.append(f"{s.name}: load raised {type(e).__name__}: {e}")
        return
    if _compare(s.name, s, ep.module(), loaded.module(), s.inputs, tally) == "compared":
        tally.compared += 1
    if s.dynamic:
        _check_resized(s, ep, loaded, tally)


def _compare(at: str, s: Sample, want_fn: torch.nn.Module, got_fn: torch.nn.Module,
             inputs: tuple[torch.Tensor, ...], tally: _Tally) -> str | None:
    """Run both programs on copies of ``inputs``: "compared" or "refused" when they agree (computed
    the same, or both refused the inputs), else None with the difference added to the failures."""
    want_in, got_in = [t.clone() for t in inputs], [t.clone() for t in inputs]
    try:
        torch.manual_seed(1234)
        want = want_fn(*want_in)
    except Exception:  # noqa: BLE001 -- refused (a guard) or failed (the kernel): the loaded one must too
        want = _REFUSED
    try:
        torch.manual_seed(1234)
        got = got_fn(*got_in)
    except Exception as e:  # noqa: BLE001
        if want is _REFUSED:
            return "refused"
        tally.failures.append(f"{at}: the loaded program raised {type(e).__name__}: {e} (the exported one ran)")
        return None
    if want is _REFUSED:
        tally.failures.append(f"{at}: the loaded program ran on inputs the exported one refused")
    elif not same(want, got, s.uninitialized):
        tally.failures.append(f"{at}: outputs differ from the exported program's")
    elif not same(want_in, got_in):
        tally.failures.append(f"{at}: the inputs it writes to differ from the exported program's")
    else:
        return "compared"
    return None


def _check_resized(s: Sample, ep: torch.export.ExportedProgram, loaded: torch.export.ExportedProgram,
                   tally: _Tally) -> None:
    """Run both programs at other sizes: the loaded one must accept exactly the inputs the exported
    one accepts (its guards came through the file) and compute the same on them."""
    want_fn, got_fn = ep.module(), loaded.module()
    threads = torch.get_num_threads()
    # One thread: the zero index inputs made here can scatter several values to one place, and
    # with threads, which one lands would vary from run to run (max_unpool does).
    torch.set_num_threads(1)
    try:
        for label, inputs in resized_inputs(ep, s.inputs):
            at = f"{s.name} at {label} sizes {[tuple(t.shape) for t in inputs]}"
            outcome = _compare(at, s, want_fn, got_fn, inputs, tally)
            if outcome == "compared":
                tally.resized_compared += 1
            elif outcome == "refused":
                tally.resized_refused += 1
    finally:
        torch.set_num_threads(threads)


_REFUSED = object()


def _judge(chunk: int, samples_per_op: int, variant: str = "float32") -> None:
    tally = _Tally()
    for s in samples(chunk, samples_per_op, variant):
        _check(s, tally)
    assert not tally.failures, "\n".join(tally.failures)
    # Not vacuous: in torch 2.13 about nine samples in ten export, and most of those run.
    assert tally.export_failed < tally.samples * 0.25, tally
    assert tally.compared > (tally.samples - tally.export_failed) * 0.8, tally
    if variant == "dynamic":
        # Not vacuous either: most dynamic programs run at other sizes, and some inputs are refused.
        assert tally.resized_compared > tally.compared, tally
        assert tally.resized_refused > 0, tally


@pytest.mark.parametrize("chunk", chunk_params(fast=0))
def test_opinfo_samples_compute_like_the_exported_program(chunk: int) -> None:
    _judge(chunk, samples_per_op=1)


# Operators whose dynamic programs carry guards on their input sizes (found by the slow run):
# run at other sizes, their loaded programs must refuse exactly the inputs torch's refuse.
GUARDED = frozenset({"chunk", "unsafe_chunk", "nn.functional.channel_shuffle", "nn.functional.max_unpool2d",
                     "fft.hfft2", "_segment_reduce.offsets"})


def test_guarded_dynamic_samples_refuse_what_the_exported_program_refuses() -> None:
    tally = _Tally()
    for s in samples(0, 1, "dynamic", only=GUARDED):
        _check(s, tally)
    assert not tally.failures, "\n".join(tally.failures)
    assert tally.compared == len(GUARDED), tally
    assert tally.resized_refused >= len(GUARDED) and tally.resized_compared > 0, tally


@pytest.mark.slow
@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_opinfo_samples_compute_like_the_exported_program_more_samples(chunk: int) -> None:
    _judge(chunk, samples_per_op=4)


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["dtypes", "dynamic", "inplace"])
@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_opinfo_variants_compute_like_the_exported_program(chunk: int, variant: str) -> None:
    _judge(chunk, samples_per_op=1, variant=variant)
