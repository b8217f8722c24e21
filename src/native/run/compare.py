"""Numeric gap: a native run's intermediate values against the loaded program's eager ones.

:func:`compare` runs the program's ``ExportedProgram`` (as ``serde.load`` gives it) in eager
through an ``torch.fx.Interpreter`` over ``ep.module()``'s graph, which records every node's
value by name, then runs the native program on the same inputs with a trace
(:meth:`native.run.runtime.Method.run_flat`) that compares each kernel call's results with the eager
value of the node its debug handle names, right after the call (in arena mode before its slot is
reused). Both sides name nodes canonically: the emitter's debug handles carry the artifact's node
names, which ``serde.load`` keeps.

Compared are the kernel calls of top-level nodes that the node's only kernel call computes (most
nodes: an op, a symbolic size op). Not compared, and counted: instructions inside control flow
(``cond`` branches, loop bodies: their nodes are subgraph nodes that eager does not record per
run, and a loop runs them many times), nodes lowered to several kernel calls
(``auto_functionalized``), and results the program never reads. The program's outputs, then its
state (buffers, and parameters it writes: their updates are copies of no node), are compared at
the end. A gap inside control flow shows at the first top-level node that reads its result.

A value is within tolerance where ``|native - eager| <= atol + rtol * |eager|`` elementwise
(``torch.isclose``'s rule), equal values always (NaN equals NaN, inf equals inf); the defaults
(0, 0) ask for equal values. Dtype or shape differences are gaps whatever the tolerance.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx
import torch.utils._pytree as pytree

from native.format import program as P
from native.run.runtime import Method
from serde.errors import SerializeError

__all__ = ["Gap", "Comparison", "Eager", "EagerRunError", "eager_values", "compare", "format_comparison"]


class EagerRunError(SerializeError):
    """The loaded program failed in eager on inputs the native program accepts (the reference side
    of a comparison): the program cannot be compared on those inputs."""

_HOP = "torch.ops.higher_order."


@dataclass(frozen=True)
class Gap:
    pc: int  # the instruction (-1: the program's outputs)
    node: str
    module: str
    op: str
    max_abs: float
    max_rel: float
    ok: bool
    note: str = ""  # why it is a gap beyond numbers (dtype, shape, kind)


@dataclass
class Comparison:
    rows: list[Gap] = field(default_factory=list)  # in execution order
    first_gap: Gap | None = None  # the first row beyond tolerance; the run stopped there
    not_compared: int = 0  # kernel calls of no comparable node (see the module docstring)
    atol: float = 0.0
    rtol: float = 0.0

    @property
    def ok(self) -> bool:
        return self.first_gap is None


class _Recorder(torch.fx.Interpreter):
    """Keeps a snapshot of every node's value: a later in-place op must not change what was seen."""

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        super().__init__(gm)
        self.seen: dict[str, Any] = {}

    def run_node(self, n: torch.fx.Node) -> Any:
        out = super().run_node(n)
        if n.op == "call_function":
            self.seen[n.name] = pytree.tree_map_only(torch.Tensor, lambda t: t.detach().clone(), out)
        return out


@dataclass(frozen=True)
class Eager:
    """What one eager run of the loaded program gives :func:`compare`."""

    values: dict[str, Any]  # every top-level call_function node's value, by node name
    outputs: list[Any]  # the flat user outputs
    targets: dict[str, str]  # node name -> its target as the program spells it (see _target_name)
    state: dict[str, torch.Tensor]  # buffers and written parameters after the run, by name


def eager_values(ep: torch.export.ExportedProgram, args: tuple, kwargs: dict) -> Eager:
    """Run ``ep.module()`` on copies of the inputs and of the state it writes (see :class:`Eager`)."""
    gm = ep.module()
    # The module shares the program's buffers and parameters: a mutating program would change them
    # for the next run, while the native side starts from the saved values. So every buffer is
    # copied (a training-IR graph writes them in place, through views too), and a parameter when
    # the signature or a mutating op's argument says it is written.
    kinds = {getattr(torch.export.graph_signature.OutputKind, k, None) for k in ("BUFFER_MUTATION", "PARAMETER_MUTATION")}
    written = {s.target for s in ep.graph_signature.output_specs if s.kind in kinds}
    for n in gm.graph.nodes:
        if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload) and n.target._schema.is_mutable:
            written.update(a.target for a in pytree.tree_leaves((n.args, n.kwargs))
                           if isinstance(a, torch.fx.Node) and a.op == "get_attr")
    buffers = dict(gm.named_buffers())
    state = [name for name, _ in [*buffers.items(), *gm.named_parameters()] if name in buffers or name in written]
    for name, t in [*buffers.items(), *gm.named_parameters()]:
        if name in state:
            owner, _, attr = name.rpartition(".")
            copy_ = t.detach().clone()
            setattr(gm.get_submodule(owner) if owner else gm, attr,
                    torch.nn.Parameter(copy_, requires_grad=t.requires_grad) if isinstance(t, torch.nn.Parameter)
                    else copy_)
    leaves = pytree.tree_leaves(copy.deepcopy((args, kwargs)))
    rec = _Recorder(gm)
    with torch.no_grad():
        outs = rec.run(*leaves, enable_io_processing=False)
    targets = {n.name: _target_name(n.target) for n in gm.graph.nodes if n.op == "call_function"}
    after = {**dict(gm.named_buffers()), **dict(gm.named_parameters())}
    return Eager(rec.seen, list(outs) if isinstance(outs, (list, tuple)) else [outs], targets,
                 {name: after[name].detach() for name in state})


def _target_name(t: Any) -> str:
    """A node target as the canonical program spells it, without ``torch.ops.``: ``aten.add.Tensor``,
    ``_operator.floordiv``, ``torch.sym_max``."""
    if isinstance(t, torch._ops.OpOverload):
        return str(t)
    name = getattr(t, "__name__", None)
    mod = getattr(t, "__module__", None)
    return f"{mod}.{name}" if name and mod else str(t)


def _comparable(p: P.Program, targets: dict[str, str]) -> dict[int, int]:
    """Instruction -> its debug handle, for the kernel calls compared (see the module docstring)."""
    calls: dict[int, list[int]] = {}
    spans: dict[int, list[int]] = {}  # top-level higher-order node's handle -> [first, last] instruction
    hp = p.instruction_handles
    for pc, ins in enumerate(p.instructions):
        h = hp[pc] if pc < len(hp) else -1
        if h < 0:
            continue
        d = p.debug_handles[h]
        if d.op.startswith(_HOP) and d.node in targets:
            span = spans.setdefault(h, [pc, pc])
            span[1] = pc
        if isinstance(ins, P.KernelCall):
            calls.setdefault(h, []).append(pc)
    inside = sorted(spans.values())
    out: dict[int, int] = {}
    for h, pcs in calls.items():
        d = p.debug_handles[h]
        if len(pcs) != 1 or targets.get(d.node) != d.op.removeprefix("torch.ops."):  # not this node
            continue
        pc = pcs[0]
        if any(a < pc < b for a, b in inside):
            continue
        out[pc] = h
    return out


def _native_leaves(p: P.Program, values: list, o: int) -> list[Any]:
    v = p.values[o]
    if isinstance(v, P.List):
        return [x for item in v.items for x in _native_leaves(p, values, item)]
    return [values[o]]


def _eager_leaves(x: Any) -> list[Any]:
    if isinstance(x, (list, tuple)):
        return [y for item in x for y in _eager_leaves(item)]
    return [x]


def _gap(a: Any, b: Any, atol: float, rtol: float) -> tuple[float, float, bool, str]:
    """(max abs, max rel, within tolerance, note) of native ``a`` against eager ``b``."""
    if isinstance(b, torch.Tensor) or isinstance(a, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return float("inf"), float("inf"), False, f"native {type(a).__name__}, eager {type(b).__name__}"
        if a.dtype != b.dtype:
            return float("inf"), float("inf"), False, f"dtype {a.dtype} vs eager {b.dtype}"
        if a.shape != b.shape:
            return float("inf"), float("inf"), False, f"shape {list(a.shape)} vs eager {list(b.shape)}"
        if a.numel() == 0:
            return 0.0, 0.0, True, ""
        if a.is_complex():
            a, b = torch.view_as_real(a), torch.view_as_real(b)
        eq = a == b
        if a.is_floating_point():
            eq |= a.isnan() & b.isnan()
        a64, b64 = a.to(torch.float64), b.to(torch.float64)
        diff = (a64 - b64).abs()
        diff = torch.where(eq, torch.zeros_like(diff), diff.nan_to_num(nan=float("inf")))
        mag = b64.abs()
        rel = torch.where(diff == 0, torch.zeros_like(diff),
                          torch.where(mag > 0, diff / mag, torch.full_like(diff, float("inf"))))
        ok = bool((eq | (diff <= atol + rtol * mag)).all())
        return float(diff.max()), float(rel.max()), ok, ""
    if isinstance(a, (bool, int, float)) and isinstance(b, (bool, int, float, torch.SymInt, torch.SymFloat)):
        if a == b or (a != a and b != b):
            return 0.0, 0.0, True, ""
        d = abs(float(a) - float(b))
        rel = d / abs(float(b)) if b else float("inf")
        return d, rel, d <= atol + rtol * abs(float(b)), ""
    if a == b:
        return 0.0, 0.0, True, ""
    return float("inf"), float("inf"), False, f"native {a!r}, eager {b!r}"


def _row(pc: int, d: P.DebugHandle | None, pairs: Sequence[tuple[Any, Any]], atol: float, rtol: float) -> Gap:
    mabs = mrel = 0.0
    ok = True
    notes = []
    for a, b in pairs:
        da, dr, good, note = _gap(a, b, atol, rtol)
        mabs, mrel, ok = max(mabs, da), max(mrel, dr), ok and good
        if note:
            notes.append(note)
    node, module, op = (d.node, d.module, d.op.removeprefix("torch.ops.")) if d else ("<outputs>", "", "")
    return Gap(pc, node, module, op, mabs, mrel, ok, "; ".join(notes))


def compare(method: Method, ep: torch.export.ExportedProgram, args: tuple, kwargs: dict, *,
            atol: float = 0.0, rtol: float = 0.0, eager: tuple | None = None) -> Comparison:
    """Run ``ep`` in eager and ``method`` on copies of ``(args, kwargs)``; compare node by node.

    Stops the native run at the first instruction beyond tolerance (``Comparison.first_gap``).
    ``eager``: the result of :func:`eager_values` for these inputs, when already computed.

    Raises:
        InputMismatchError: the inputs do not fit the native program.
        NativeRuntimeError: a kernel failed in the native run.
        EagerRunError: the loaded program failed in eager on inputs the native program accepts.
    """
    p = method.program
    if eager is None:
        try:
            eager = eager_values(ep, args, kwargs)
        except Exception as e:
            # Inputs that do not fit are the usual cause: let the native side name the input.
            method.run_flat(pytree.tree_leaves(copy.deepcopy((args, kwargs))))
            raise EagerRunError(f"the loaded program failed in eager on these inputs, which the native program "
                                f"accepts: {type(e).__name__}: {e}") from e
    seen, eager_outs, targets = eager.values, eager.outputs, eager.targets
    which = _comparable(p, targets)
    res = Comparison(atol=atol, rtol=rtol)
    ncalls = sum(isinstance(i, P.KernelCall) for i in p.instructions)

    def trace(pc: int, values: list) -> bool:
        h = which.get(pc)
        if h is None:
            return False
        d = p.debug_handles[h]
        ins = p.instructions[pc]
        assert isinstance(ins, P.KernelCall)
        want = seen[d.node]
        wants = [want] if len(ins.outs) == 1 else (list(want) if isinstance(want, (list, tuple)) else [want])
        got, exp = [], []
        for o, w in zip(ins.outs, wants, strict=False):
            if o != -1:  # a discarded result
                got += _native_leaves(p, values, o)
                exp += _eager_leaves(w)
        if len(got) != len(exp):
            row = Gap(pc, d.node, d.module, d.op.removeprefix("torch.ops."), float("inf"), float("inf"), False,
                      f"{len(got)} native values, eager {len(exp)}")
        else:
            row = _row(pc, d, list(zip(got, exp, strict=True)), atol, rtol)
        res.rows.append(row)
        if not row.ok:
            res.first_gap = row
            return True
        return False

    leaves = pytree.tree_leaves(copy.deepcopy((args, kwargs)))
    outs = method.run_flat(leaves, trace=trace)
    res.not_compared = ncalls - len(which)
    if outs is not None:
        if len(outs) != len(eager_outs):
            row = Gap(-1, "<outputs>", "", "", float("inf"), float("inf"), False,
                      f"{len(outs)} native outputs, eager {len(eager_outs)}")
        else:
            row = _row(-1, None, list(zip(outs, eager_outs, strict=True)), atol, rtol)
        res.rows.append(row)
        if not row.ok:
            res.first_gap = row
            return res
        # A buffer update is a copy into the state at the end, of no node: compared here.
        mine = method.state_dict()
        for name in sorted(set(eager.state) & set(mine)):
            da, dr, good, note = _gap(mine[name], eager.state[name], atol, rtol)
            row = Gap(-1, f"<state {name}>", "", "", da, dr, good, note)
            res.rows.append(row)
            if not good:
                res.first_gap = row
                return res
    return res


def _num(x: float) -> str:
    return "inf" if x == float("inf") else f"{x:.3g}"


def format_comparison(c: Comparison, describe: Any = None) -> str:
    """One line per compared instruction, then the verdict. ``describe(pc)``: how to name an
    instruction in the verdict (``Method.describe``)."""
    tol = "equal values" if c.atol == 0 and c.rtol == 0 else f"atol {c.atol:g}, rtol {c.rtol:g}"
    lines = [f"numeric gap against eager ({tol}):",
             f"  {'instr':>6}  {'max abs':>9}  {'max rel':>9}  node (module)  op"]
    for r in c.rows:
        where = r.node + (f" ({r.module})" if r.module else "")
        mark = "" if r.ok else "   <- beyond tolerance" + (f": {r.note}" if r.note else "")
        pc = "end" if r.pc < 0 else str(r.pc)
        lines.append(f"  {pc:>6}  {_num(r.max_abs):>9}  {_num(r.max_rel):>9}  {where}  {r.op}{mark}")
    compared = sum(r.pc >= 0 for r in c.rows)
    lines.append(f"{compared} kernel calls compared, {c.not_compared} never compared "
                 "(inside control flow, lowered to several calls, or of no node)")
    if compared == 0 and c.not_compared:
        lines.append("no kernel call was compared: each is inside control flow or lowered to several calls, or the "
                     "program was not emitted from this artifact (its nodes have other names)")
    g = c.first_gap
    if g is None:
        lines.append("no gap: every compared value, every output and the state are within tolerance")
    elif g.pc < 0:
        what = "the outputs" if g.node == "<outputs>" else g.node.strip("<>")
        lines.append(f"gap at {what}: max abs {_num(g.max_abs)}, max rel {_num(g.max_rel)}"
                     + (f" ({g.note})" if g.note else "") + "; every compared intermediate was within tolerance")
    else:
        what = describe(g.pc) if describe else f"node {g.node!r}"
        lines.append(f"first gap: instruction {g.pc} ({what}): max abs {_num(g.max_abs)}, max rel "
                     f"{_num(g.max_rel)}" + (f" ({g.note})" if g.note else "") + "; the run stopped there")
    return "\n".join(lines)
