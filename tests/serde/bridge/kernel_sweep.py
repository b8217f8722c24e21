"""Differential sweep: where an operator's CPU kernel refuses an operand dtype its meta kernel accepts.

Every aten operator called by the zoo, breadth and frozen fixture programs is called the way the
program calls it (its recorded operands' sizes and values), once per tensor operand and other
dtype: that one operand made bool, an integer, half, bfloat16, float64 or complex, the rest as
recorded. Where the meta kernel accepts the call and the CPU kernel refuses it, a load that checks
only with meta (or fake) kernels lets an edited program through that fails when it runs; such
disagreements must be refused by :mod:`serde.bridge.checks.kernels`. ``python -m
tests.serde.bridge.kernel_sweep`` prints them with the verdict of ``kernel_refusal`` on each.
"""

from __future__ import annotations

import contextlib
import functools
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import torch
import torch.utils._pytree as pytree

ROOT = Path(__file__).resolve().parents[3]
DTYPES = (torch.bool, torch.uint8, torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.float32,
          torch.float64, torch.complex64)
# Nodes of one operator swept at most: their calls differ in arguments, not in kernels.
_PER_OP = 3


class Call(NamedTuple):
    op: torch._ops.OpOverload
    args: tuple
    kwargs: dict
    where: str


class Disagreement(NamedTuple):
    op: str
    argument: str      # the operand path in the call (``args[1]``, ``weight``)
    was: torch.dtype
    now: torch.dtype
    message: str       # the CPU kernel's first line
    refused: bool      # whether kernel_refusal refuses the meta call


def _programs() -> Iterator[tuple[str, torch.export.ExportedProgram]]:
    import serde
    from serde.testing import zoo
    from tests import zoo_breadth

    for version in sorted((ROOT / "fixtures").glob("v*")):
        for d in sorted(version.iterdir()):
            if (d / "model.pt2s").is_file():
                with contextlib.suppress(Exception):  # (a fixture this torch cannot load is another test's)
                    yield f"fixtures/{version.name}/{d.name}", serde.load(d / "model.pt2s").exported_program
    for case in zoo.CASES + zoo_breadth.CASES:
        try:
            ep = zoo.export_case(case)
        except Exception:  # noqa: BLE001,S112 -- cases for other torch versions or platforms
            continue
        yield case.name, ep


def corpus_calls() -> list[Call]:
    """At most ``_PER_OP`` calls of each aten operator of the corpus, with their recorded operands."""
    seen: dict[tuple, int] = {}
    calls = []
    for name, ep in _programs():
        for gm in ep.graph_module.modules():
            if not isinstance(gm, torch.fx.GraphModule):
                continue
            for node in gm.graph.nodes:
                op = node.target
                if node.op != "call_function" or not isinstance(op, torch._ops.OpOverload) or op.namespace != "aten":
                    continue
                try:
                    args, kwargs = pytree.tree_map_only(torch.fx.Node, lambda n: n.meta["val"], (node.args, node.kwargs))
                except KeyError:
                    continue
                shape = tuple(_shape_key(x) for x in pytree.tree_leaves((args, kwargs)))
                if seen.get(op, 0) >= _PER_OP or (op, shape) in seen:
                    continue
                seen[op] = seen.get(op, 0) + 1
                seen[(op, shape)] = 1
                calls.append(Call(op, args, kwargs, f"{name}: {node.name}"))
    return calls


def _shape_key(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return (x.dtype, tuple(map(_hint, x.shape)))
    return type(x).__name__


def _hint(n: Any) -> int:
    if isinstance(n, torch.SymInt):
        return n.node.hint if n.node.hint is not None else 2
    return int(n)


def _concrete(x: Any, device: str, dtype: torch.dtype | None = None) -> Any:
    """``x`` (a fake tensor, a SymInt, ...) as a CPU or meta value; a tensor of ``dtype`` when given."""
    if isinstance(x, torch.Tensor):
        dtype = dtype or x.dtype
        sizes = [_hint(n) for n in x.shape]
        if device == "meta":
            return torch.empty(sizes, dtype=dtype, device="meta")
        g = torch.Generator().manual_seed(0)
        if dtype.is_floating_point or dtype.is_complex:
            return torch.rand(sizes, generator=g).to(dtype)  # in [0, 1): valid probabilities, logs, ...
        return torch.zeros(sizes, dtype=dtype)  # (valid indices)
    if isinstance(x, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        hint = x.node.hint
        return {torch.SymInt: int, torch.SymFloat: float, torch.SymBool: bool}[type(x)](2 if hint is None else hint)
    if isinstance(x, torch.device):
        return torch.device(device)
    return x


def _run(op: torch._ops.OpOverload, args: tuple, kwargs: dict) -> Exception | None:
    try:
        with torch.no_grad(), contextlib.redirect_stderr(io.StringIO()):
            op(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 -- the verdict is whether it raised
        return e
    return None


def _operands(args: tuple, kwargs: dict) -> list[tuple[str, Any]]:
    """(path, leaf) of every tensor operand, through lists."""
    leaves, _ = pytree.tree_flatten_with_path((args, kwargs))
    return [(pytree.keystr(path), v) for path, v in leaves if isinstance(v, torch.Tensor)]


def _replace(args: tuple, kwargs: dict, target: str, device: str, dtype: torch.dtype) -> tuple[tuple, dict]:
    leaves, spec = pytree.tree_flatten_with_path((args, kwargs))
    out = [_concrete(v, device, dtype if pytree.keystr(path) == target else None) for path, v in leaves]
    return pytree.tree_unflatten(out, spec)


def sweep(calls: list[Call] | None = None) -> list[Disagreement]:
    from serde.bridge.checks.kernels import kernel_refusal

    found: dict[tuple, Disagreement] = {}
    for call in corpus_calls() if calls is None else calls:
        op = call.op
        base = _replace(call.args, call.kwargs, "", "cpu", torch.float32)
        if _run(op, *base) is not None:
            continue  # (an operand the recorded sizes do not make valid data for: no baseline)
        for path, t in _operands(call.args, call.kwargs):
            for dtype in DTYPES:
                if dtype == t.dtype or (op, path, t.dtype, dtype) in found:
                    continue
                meta = _replace(call.args, call.kwargs, path, "meta", dtype)
                if _run(op, *meta) is not None:
                    continue
                cpu = _replace(call.args, call.kwargs, path, "cpu", dtype)
                e = _run(op, *cpu)
                if e is None or not isinstance(e, (RuntimeError, NotImplementedError, TypeError, ValueError)):
                    continue
                try:
                    refused = kernel_refusal(op, *meta, probe=True) is not None
                except Exception:  # noqa: BLE001 -- a rule that breaks is a finding too
                    refused = False
                lines = str(e).strip().splitlines() or [type(e).__name__]
                found[(op, path, t.dtype, dtype)] = Disagreement(str(op), path, t.dtype, dtype, lines[0][:160],
                                                                 refused)
    return list(found.values())


@functools.cache
def cached_calls() -> tuple[Call, ...]:
    return tuple(corpus_calls())


if __name__ == "__main__":
    import sys

    rows = sweep()
    for d in sorted(rows, key=lambda d: (d.refused, d.op, d.argument, str(d.was), str(d.now))):
        print(f"{'REFUSED' if d.refused else 'MISSED '} {d.op} {d.argument} {d.was}->{d.now}: {d.message}")
    print(f"{len(rows)} disagreements, {sum(not d.refused for d in rows)} not refused", file=sys.stderr)
