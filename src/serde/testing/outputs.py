"""Running two programs on the same inputs and comparing what they compute: outputs, inputs
mutated in place, and buffers after the call."""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.export import ExportedProgram

from .errors import ProgramMismatch

__all__ = ["compare_outputs"]


def compare_outputs(a: ExportedProgram, b: ExportedProgram, inputs: Any, rtol: float | None,
                    atol: float | None) -> None:
    """Run ``a`` and ``b`` on ``inputs`` (default: ``a.example_inputs``) from the same random state and
    raise ProgramMismatch unless their outputs, mutated inputs and buffers agree (integers exactly)."""
    if inputs is None:
        inputs = a.example_inputs
    if inputs is None:
        return
    args, kwargs = inputs
    if _is_joint(a):
        # A joint forward-backward graph returns loss and gradients too, which .module() cannot
        # unflatten: call the graph itself on the flat inputs (parameters and buffers first).
        with torch.no_grad():
            oa, ob = _same_draws(
                lambda: a.graph_module(*a._graph_module_flat_inputs(*copy.deepcopy((args, kwargs)))),
                lambda: b.graph_module(*b._graph_module_flat_inputs(*copy.deepcopy((args, kwargs)))))
        _assert_close(oa, ob, "outputs of the joint graph", rtol, atol)
        return
    ma, mb = _fresh_module(a), _fresh_module(b)
    ia = copy.deepcopy((args, kwargs))
    ib = copy.deepcopy((args, kwargs))
    with torch.no_grad():
        oa, ob = _same_draws(lambda: ma(*ia[0], **ia[1]), lambda: mb(*ib[0], **ib[1]))
    _assert_close(oa, ob, "outputs", rtol, atol)
    _assert_close(ia, ib, "inputs after the call (user input mutation)", rtol, atol)
    _assert_close(dict(ma.named_buffers()), dict(mb.named_buffers()), "buffers after the call", rtol, atol)


def _same_draws(*runs: Any) -> list[Any]:
    """The results of ``runs``, each started from the caller's global RNG state (CPU, and CUDA's
    once initialized), which is left as it was: random ops then draw the same numbers in each
    program, so a program that draws compares equal to its round trip."""
    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    with torch.random.fork_rng(devices=list(range(torch.cuda.device_count())) if cuda else []):
        cpu_state = torch.get_rng_state()
        cuda_states = torch.cuda.get_rng_state_all() if cuda else None
        out = []
        for run in runs:
            torch.set_rng_state(cpu_state)
            if cuda_states is not None:
                torch.cuda.set_rng_state_all(cuda_states)
            out.append(run())
    return out


def _fresh_module(ep: ExportedProgram) -> torch.nn.Module:
    """``ep.module()`` with its own copies of parameters, buffers and generators.

    ``module()`` shares tensors and lifted generators with ``ep``; running it would otherwise
    mutate the programs under comparison (buffer mutation, a generator's state) and change what a
    later save writes.
    """
    m = ep.module()
    for mod in m.modules():
        for k, v in list(vars(mod).items()):
            if isinstance(v, torch.Generator):
                setattr(mod, k, copy.deepcopy(v))  # (a generator copies its device and state)
        for k, t in list(mod._buffers.items()):
            if t is not None:
                mod._buffers[k] = t.clone()
        for k, p in list(mod._parameters.items()):
            if p is not None:
                mod._parameters[k] = torch.nn.Parameter(p.detach().clone(), requires_grad=p.requires_grad)
    return m


def _is_joint(ep: ExportedProgram) -> bool:
    from torch.export.graph_signature import OutputKind

    joint = (OutputKind.LOSS_OUTPUT, OutputKind.GRADIENT_TO_PARAMETER, OutputKind.GRADIENT_TO_USER_INPUT)
    return any(s.kind in joint for s in ep.graph_signature.output_specs)


def _assert_close(x: Any, y: Any, where: str, rtol: float | None, atol: float | None) -> None:
    lx, sx = pytree.tree_flatten(x)
    ly, sy = pytree.tree_flatten(y)
    if len(lx) != len(ly) or str(sx) != str(sy):
        raise ProgramMismatch(f"{where}: structure {sx} != {sy}")
    for i, (p, q) in enumerate(zip(lx, ly, strict=True)):
        if isinstance(p, torch.Tensor):
            exact = not (p.is_floating_point() or p.is_complex())
            try:
                torch.testing.assert_close(p, q, rtol=0 if exact else rtol, atol=0 if exact else atol,
                                           equal_nan=True)
            except AssertionError as e:
                raise ProgramMismatch(f"{where}[{i}]: {e}") from None
        elif p != q and not (isinstance(p, float) and p != p and q != q):
            raise ProgramMismatch(f"{where}[{i}]: {p!r} != {q!r}")
