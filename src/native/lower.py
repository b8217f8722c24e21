"""Higher-order ops as jumps: ``cond`` as two branches, ``map`` and ``while_loop`` as loops.

Subgraphs are emitted inline with their inputs bound to the operands (they never write them);
results leave a branch or a loop body through ``MoveCall``. A jump on the constant ``False``
value is an unconditional jump. Loops count with ``symbolic::`` scalar ops:

map (``xs`` sliced on dim 0, outputs preallocated and filled slice by slice)::

        n = aten::sym_size.int(xs[0], 0); alloc out_j; i = 0
    head:
        t = symbolic::lt(i, n); jump_false t -> end
        x_k = aten::select.int(xs[k], 0, i)      for each mapped input
        <body>
        aten::copy_(aten::select.int(out_j, 0, i), body_out_j)
        i = symbolic::add(i, 1); jump_false False -> head
    end:

while_loop (carried values live in slots of their own, updated as one parallel move)::

        carry_k = init_k
    head:
        <cond graph>; jump_false pred -> end
        <body graph>; carry_k = body_out_k; jump_false False -> head
    end:
        out_k = carry_k
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from canonical.walk import argument_names
from serde import schema
from serde.errors import MalformedArtifactError, UnsupportedConstructError

from . import program as P
from .prim import prim_name

if TYPE_CHECKING:
    from .emit import Scope, _Emitter

__all__ = ["HOP_LOWERINGS"]

_LIST_KINDS = {"as_tensors": "as_tensor", "as_sym_ints": "as_sym_int", "as_sym_bools": "as_sym_bool",
               "as_sym_floats": "as_sym_float", "as_optional_tensors": "as_optional_tensor"}


def _positional(node: schema.Node, n: int, where: str) -> list[schema.Argument]:
    args = [na.arg for na in node.inputs]
    if len(args) < n:
        raise MalformedArtifactError(f"{where}: expects at least {n} arguments, got {len(args)}")
    return args


def _graph(a: schema.Argument, where: str) -> schema.GraphArgument:
    if a.as_graph is None:
        raise MalformedArtifactError(f"{where}: expected a subgraph argument, got {a.kind}")
    return a.as_graph


def _elements(em: _Emitter, a: schema.Argument, scope: Scope, where: str) -> list[int]:
    """The values of a list argument (operands), or of a single one."""
    k = a.kind
    item = _LIST_KINDS.get(k)
    if item is None:
        if k in ("as_ints", "as_floats", "as_bools"):
            const = {"as_ints": P.Int, "as_floats": P.Float, "as_bools": P.Bool}[k]
            return [em.b.const(const(x)) for x in a.value]
        return [em.arg(a, scope, where)]
    return [em.arg(schema.Argument(**{item: x}), scope, f"{where}[{i}]") for i, x in enumerate(a.value)]


def _move_out(em: _Emitter, srcs: list[int], local: set[int], outs: list[int], where: str) -> None:
    if len(srcs) != len(outs):
        raise MalformedArtifactError(f"{where}: the subgraph returns {len(srcs)} values for {len(outs)} outputs")
    for src, dst in zip(srcs, outs, strict=True):
        if dst != -1:
            em.b.emit(P.MoveCall(src, dst))
    em.free_all(local)


def _cond(em: _Emitter, node: schema.Node, g: schema.Graph, scope: Scope, where: str, defined: set[str]) -> None:
    args = _positional(node, 4, where)
    pred = em.arg(args[0], scope, f"{where}.pred")
    true_g, false_g = _graph(args[1], where), _graph(args[2], where)
    operands = _elements(em, args[3], scope, f"{where}.operands")
    outs = em.define_outputs(node, g, scope, where, defined)
    to_false = em.b.emit(P.JumpFalseCall(pred, -1))
    srcs, local = em.subgraph(true_g, operands, f"{where} true branch")
    _move_out(em, srcs, local, outs, where)
    to_end = em.b.emit(P.JumpFalseCall(em.false, -1))
    em.b.patch_jump(to_false, em.b.here())
    srcs, local = em.subgraph(false_g, operands, f"{where} false branch")
    _move_out(em, srcs, local, outs, where)
    em.b.patch_jump(to_end, em.b.here())


def _map(em: _Emitter, node: schema.Node, g: schema.Graph, scope: Scope, where: str, defined: set[str]) -> None:
    args = _positional(node, 3, where)
    body = _graph(args[0], where)
    xs = _elements(em, args[1], scope, f"{where}.xs")
    extra = _elements(em, args[2], scope, f"{where}.additional") if len(args) > 2 else []
    if not xs or any(not isinstance(em.b.values[x], P.Tensor) for x in xs):
        raise UnsupportedConstructError(f"{where}: map needs at least one tensor to map over")
    outs = em.define_outputs(node, g, scope, where, defined)
    for o in outs:
        t = em.b.values[o] if o != -1 else None
        if not isinstance(t, P.Tensor):
            raise UnsupportedConstructError(f"{where}: map outputs must be tensors")
        _require_bound(em, t, where)
    b = em.b
    select = b.op("aten::select", "int", [[0]])
    copy = b.op("aten::copy_", "default", [[0]])
    n = b.new(P.SymInt())
    b.emit(P.KernelCall(b.op("aten::sym_size", "int"), [xs[0], em.zero], [n]))
    for o in outs:
        b.emit(P.AllocCall(o))
    i = b.new(P.SymInt())
    b.emit(P.MoveCall(em.zero, i))
    head = b.here()
    t = b.new(P.SymBool())
    b.emit(P.KernelCall(b.op(prim_name("lt"), "default"), [i, n], [t]))
    to_end = b.emit(P.JumpFalseCall(t, -1))
    slices = []
    for k, x in enumerate(xs):
        inp = body.graph.inputs[k] if k < len(body.graph.inputs) else None
        name = next(iter(argument_names(inp)), None) if inp is not None else None
        meta = body.graph.tensor_values.get(name) if name else None
        if meta is None:
            raise MalformedArtifactError(f"{where}: mapped input {k} of the body has no tensor meta")
        s = b.new(em.tensor(meta, f"{where} body input {k}"))
        b.emit(P.KernelCall(select, [x, em.zero, i], [s]))
        slices.append(s)
    srcs, local = em.subgraph(body, slices + extra, f"{where} body")
    if len(srcs) != len(outs):
        raise MalformedArtifactError(f"{where}: the body returns {len(srcs)} values for {len(outs)} outputs")
    for src, o in zip(srcs, outs, strict=True):
        if not isinstance(b.values[src], P.Tensor):
            raise UnsupportedConstructError(f"{where}: map bodies must return tensors")
        dst = b.new(em.b.values[src])
        b.emit(P.KernelCall(select, [o, em.zero, i], [dst]))
        b.emit(P.KernelCall(copy, [dst, src, em.false], [-1]))
        b.emit(P.FreeCall(dst))
    em.free_all(local | set(slices))
    b.emit(P.KernelCall(b.op(prim_name("add"), "default"), [i, em.one], [i]))
    b.emit(P.JumpFalseCall(em.false, head))
    b.patch_jump(to_end, b.here())
    em.free_all([t, i, n])


def _require_bound(em: _Emitter, t: P.Tensor, where: str) -> None:
    """AllocCall evaluates sizes at run time: only symbols bound from inputs may appear."""
    for d in (*t.sizes, *t.strides, t.storage_offset):
        if isinstance(d, P.Sym) and _uses_unbacked(em, d.expr):
            raise UnsupportedConstructError(f"{where}: a map output whose size depends on data cannot be "
                                            "preallocated")


def _uses_unbacked(em: _Emitter, expr: int) -> bool:
    from .exprs import OPS, SYM

    code = em.b.exprs[expr]
    i = 0
    while i < len(code):
        if code[i] == SYM and em.b.symbols[code[i + 1]].input < 0:
            return True
        i += 2 if OPS[code[i]][1] else 1
    return False


def _while(em: _Emitter, node: schema.Node, g: schema.Graph, scope: Scope, where: str, defined: set[str]) -> None:
    args = _positional(node, 3, where)
    cond_g, body_g = _graph(args[0], where), _graph(args[1], where)
    init = _elements(em, args[2], scope, f"{where}.carried_inputs")
    extra = _elements(em, args[3], scope, f"{where}.additional_inputs") if len(args) > 3 else []
    outs = em.define_outputs(node, g, scope, where, defined)
    if len(outs) != len(init):
        raise MalformedArtifactError(f"{where}: {len(init)} carried values but {len(outs)} outputs")
    b = em.b
    carry = []
    for k, v in enumerate(init):
        inp = body_g.graph.inputs[k] if k < len(body_g.graph.inputs) else None
        name = next(iter(argument_names(inp)), None) if inp is not None else None
        if name is None:
            raise MalformedArtifactError(f"{where}: carried value {k} has no body input")
        c = em.new_value(inp.kind, name, body_g.graph, f"{where} carried value {k}")
        b.emit(P.MoveCall(v, c))
        carry.append(c)
    head = b.here()
    preds, cond_local = em.subgraph(cond_g, carry + extra, f"{where} cond")
    if len(preds) != 1:
        raise MalformedArtifactError(f"{where}: the cond graph returns {len(preds)} values instead of 1")
    to_end = b.emit(P.JumpFalseCall(preds[0], -1))
    em.free_all(cond_local)
    srcs, local = em.subgraph(body_g, carry + extra, f"{where} body")
    if len(srcs) != len(carry):
        raise MalformedArtifactError(f"{where}: the body returns {len(srcs)} values for {len(carry)} carried")
    # The new values are computed from the old ones: move through temporaries when a body output
    # is itself a carried slot (or repeated), so that no slot is overwritten before it is read.
    if len(set(srcs)) != len(srcs) or set(srcs) & set(carry):
        temps = [b.new(b.values[c]) for c in carry]
        for src, tmp in zip(srcs, temps, strict=True):
            b.emit(P.MoveCall(src, tmp))
        srcs_final, local = temps, local | set(temps)
    else:
        srcs_final = srcs
    for src, c in zip(srcs_final, carry, strict=True):
        b.emit(P.MoveCall(src, c))
    em.free_all(local)
    b.emit(P.JumpFalseCall(em.false, head))
    b.patch_jump(to_end, b.here())
    em.free_all(cond_local)
    for c, o in zip(carry, outs, strict=True):
        if o != -1:
            b.emit(P.MoveCall(c, o))
    em.free_all(carry)


def _inline(graph_at: int, operands_from: int) -> Callable:
    """A wrapper op that just calls its subgraph (grad-mode and subgraph-sharing wrappers)."""
    def lower(em: _Emitter, node: schema.Node, g: schema.Graph, scope: Scope, where: str, defined: set[str]) -> None:
        args = _positional(node, operands_from, where)
        sub = _graph(args[graph_at], where)
        operands = [v for i, a in enumerate(args[operands_from:])
                    for v in _elements(em, a, scope, f"{where}.args[{operands_from + i}]")]
        outs = em.define_outputs(node, g, scope, where, defined)
        srcs, local = em.subgraph(sub, operands, where)
        _move_out(em, srcs, local, outs, where)
    return lower


HOP_LOWERINGS: dict[str, Callable] = {
    "cond": _cond,
    "map_impl": _map,
    "while_loop": _while,
    "invoke_subgraph": _inline(0, 2),  # (subgraph, identifier, *operands)
    "wrap_with_set_grad_enabled": _inline(1, 2),  # (enabled, subgraph, *operands): inference ignores grad mode
}
