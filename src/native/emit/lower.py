"""Higher-order ops as jumps: ``cond`` as two branches, ``map``, ``scan`` and ``while_loop`` as loops.

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

scan is map with carried values threaded through the body (outputs: carries, then stacked ys).

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
from typing import Any, Protocol

from native.format import program as P
from native.format.prim import prim_name
from serde.core import schema
from serde.core.walk import argument_names
from serde.errors import MalformedArtifactError, UnsupportedConstructError

__all__ = ["HOP_LOWERINGS", "Emitter", "Scope"]

Scope = dict[str, int]
"""Graph value name -> program value index, for one graph being emitted."""


class Emitter(Protocol):
    """What a lowering needs from the emitter (the emitter of :mod:`native.emit.emitter` provides it)."""

    b: Any  # native.emit.tables.ProgramBuilder
    false: int
    zero: int
    one: int

    def arg(self, a: schema.Argument, scope: Scope, where: str) -> int: ...
    def call(self, info: Any, args: list[int], outs: list[int], where: str) -> None: ...
    def define_outputs(self, node: schema.Node, g: schema.Graph, scope: Scope, where: str,
                       defined: set[str]) -> list[int]: ...
    def free_all(self, values: set[int] | list[int]) -> None: ...
    def kernel_info(self, target: str, where: str) -> Any: ...
    def new_value(self, kind: str, name: str, g: schema.Graph, where: str) -> int: ...
    def schema_args(self, info: Any, positional: list[int], keyword: dict[str, int], where: str) -> list[int]: ...
    def subgraph(self, ga: schema.GraphArgument, operands: list[int], where: str) -> tuple[list[int], set[int]]: ...
    def tensor(self, meta: schema.TensorMeta, where: str) -> P.Tensor: ...

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


def _elements(em: Emitter, a: schema.Argument, scope: Scope, where: str) -> list[int]:
    """The values of a list argument (operands), or of a single one."""
    k = a.kind
    item = _LIST_KINDS.get(k)
    if item is None:
        if k in ("as_ints", "as_floats", "as_bools"):
            const = {"as_ints": P.Int, "as_floats": P.Float, "as_bools": P.Bool}[k]
            return [em.b.const(const(x)) for x in a.value]
        return [em.arg(a, scope, where)]
    return [em.arg(schema.Argument(**{item: x}), scope, f"{where}[{i}]") for i, x in enumerate(a.value)]


def _move_out(em: Emitter, srcs: list[int], local: set[int], outs: list[int], where: str) -> None:
    if len(srcs) != len(outs):
        raise MalformedArtifactError(f"{where}: the subgraph returns {len(srcs)} values for {len(outs)} outputs")
    for src, dst in zip(srcs, outs, strict=True):
        if dst != -1:
            em.b.emit(P.MoveCall(src, dst))
    em.free_all(local)


_FIX = "the artifact is damaged or was edited after saving: re-save the program with pt2serde"


def _values(em: Emitter) -> list[P.Value]:
    return em.b.values  # type: ignore[attr-defined]  # the ProgramBuilder's value table


def _shape(t: P.Tensor) -> str:
    return "[" + ", ".join(str(d) if isinstance(d, int) else "(symbolic)" for d in t.sizes) + "]"


def _check_predicate(em: Emitter, v: int, where: str) -> None:
    """cond's predicate: a boolean or a one-element tensor, as the load's consistency check
    (serde.bridge.checks) requires; a symbolic size could be any size."""
    t = _values(em)[v]
    if isinstance(t, P.Tensor) and any(type(n) is not int or n != 1 for n in t.sizes):
        raise MalformedArtifactError(f"{where}: cond's predicate must be a boolean or a one-element tensor, "
                                     f"it has the shape {_shape(t)}; {_FIX}")
    if not isinstance(t, (P.Tensor, P.Bool, P.SymBool)):
        raise MalformedArtifactError(f"{where}: cond's predicate must be a boolean or a one-element tensor, "
                                     f"got a {type(t).__name__}; {_FIX}")


def _check_loop_condition(em: Emitter, v: int, where: str) -> None:
    """What while_loop checks of its condition's value on every iteration, checked once here as
    the load checks it: otherwise a loop condition that never becomes false runs into the runtime's
    loop cap instead of being refused."""
    t = _values(em)[v]
    if isinstance(t, P.Tensor) and t.dtype == schema.ScalarType.BOOL and t.sizes == []:
        return
    if not isinstance(t, (P.Bool, P.SymBool)):
        got = (f"a {schema.ScalarType(t.dtype).name} tensor of shape {_shape(t)}" if isinstance(t, P.Tensor)
               else f"a {type(t).__name__}")
        raise MalformedArtifactError(f"{where}: the loop condition must compute a boolean or a 0-dim boolean "
                                     f"tensor, it returns {got}; {_FIX}")


def _cond(em: Emitter, node: schema.Node, g: schema.Graph, scope: Scope, where: str, defined: set[str]) -> None:
    args = _positional(node, 4, where)
    pred = em.arg(args[0], scope, f"{where}.pred")
    _check_predicate(em, pred, f"{where}.inputs[0]")
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


def _map(em: Emitter, node: schema.Node, g: schema.Graph, scope: Scope, where: str, defined: set[str]) -> None:
    args = _positional(node, 3, where)
    xs = _elements(em, args[1], scope, f"{where}.xs")
    extra = _elements(em, args[2], scope, f"{where}.additional") if len(args) > 2 else []
    outs = em.define_outputs(node, g, scope, where, defined)
    _scan_loop(em, _graph(args[0], where), [], xs, extra, outs, where)


def _scan(em: Emitter, node: schema.Node, g: schema.Graph, scope: Scope, where: str, defined: set[str]) -> None:
    args = _positional(node, 3, where)
    init = _elements(em, args[1], scope, f"{where}.init")
    xs = _elements(em, args[2], scope, f"{where}.xs")
    extra = _elements(em, args[3], scope, f"{where}.additional_inputs") if len(args) > 3 else []
    outs = em.define_outputs(node, g, scope, where, defined)
    _scan_loop(em, _graph(args[0], where), init, xs, extra, outs, where)


def _scan_loop(em: Emitter, body: schema.GraphArgument, init: list[int], xs: list[int], extra: list[int],
               outs: list[int], where: str) -> None:
    """``scan``: carries threaded through the body, ``xs`` sliced on dim 0, ``ys`` stacked on dim 0.

    ``map`` is a scan without carries. Stacked outputs are allocated before the loop and filled
    row by row.
    """
    b = em.b
    nc = len(init)
    if not xs or any(not isinstance(b.values[x], P.Tensor) for x in xs):
        raise UnsupportedConstructError(f"{where}: needs at least one tensor to scan over")
    if len(outs) < nc:
        raise MalformedArtifactError(f"{where}: {len(outs)} outputs for {nc} carried values")
    stacked = outs[nc:]
    for o in stacked:
        t = b.values[o] if o != -1 else None
        if not isinstance(t, P.Tensor):
            raise UnsupportedConstructError(f"{where}: stacked outputs must be tensors")
        _require_bound(em, t, where)
    carry = _carry_slots(em, body, init, where)
    select = b.op("aten::select", "int", [[0]])
    copy = b.op("aten::copy_", "default", [[0]])
    n = b.new(P.SymInt())
    b.emit(P.KernelCall(b.op("aten::sym_size", "int"), [xs[0], em.zero], [n]))
    for o in stacked:
        b.emit(P.AllocCall(o))
    i = b.new(P.SymInt())
    b.emit(P.MoveCall(em.zero, i))
    head = b.here()
    t = b.new(P.SymBool())
    b.emit(P.KernelCall(b.op(prim_name("lt"), "default"), [i, n], [t]))
    to_end = b.emit(P.JumpFalseCall(t, -1))
    slices = []
    for k, x in enumerate(xs):
        name = _input_name(body, nc + k)
        meta = body.graph.tensor_values.get(name) if name else None
        if meta is None:
            raise MalformedArtifactError(f"{where}: sliced input {k} of the body has no tensor meta")
        s = b.new(em.tensor(meta, f"{where} body input {nc + k}"))
        b.emit(P.KernelCall(select, [x, em.zero, i], [s]))
        slices.append(s)
    srcs, local = em.subgraph(body, carry + slices + extra, f"{where} body")
    if len(srcs) != len(outs):
        raise MalformedArtifactError(f"{where}: the body returns {len(srcs)} values for {len(outs)} outputs")
    for src, o in zip(srcs[nc:], stacked, strict=True):
        if not isinstance(b.values[src], P.Tensor):
            raise UnsupportedConstructError(f"{where}: scanned bodies must return tensors")
        dst = b.new(b.values[src])
        b.emit(P.KernelCall(select, [o, em.zero, i], [dst]))
        b.emit(P.KernelCall(copy, [dst, src, em.false], [-1]))
        b.emit(P.FreeCall(dst))
    temps = _parallel_move(em, srcs[:nc], carry)
    em.free_all(local | temps | set(slices))
    b.emit(P.KernelCall(b.op(prim_name("add"), "default"), [i, em.one], [i]))
    b.emit(P.JumpFalseCall(em.false, head))
    b.patch_jump(to_end, b.here())
    em.free_all([t, i, n])
    _move_carry_out(em, carry, outs[:nc])


def _input_name(body: schema.GraphArgument, k: int) -> str | None:
    inputs = body.graph.inputs
    return next(iter(argument_names(inputs[k])), None) if k < len(inputs) else None


def _carry_slots(em: Emitter, body: schema.GraphArgument, init: list[int], where: str) -> list[int]:
    """Slots of their own for loop-carried values, initialized from ``init``."""
    carry = []
    for k, v in enumerate(init):
        name = _input_name(body, k)
        if name is None:
            raise MalformedArtifactError(f"{where}: carried value {k} has no body input")
        c = em.new_value(body.graph.inputs[k].kind, name, body.graph, f"{where} carried value {k}")
        em.b.emit(P.MoveCall(v, c))
        carry.append(c)
    return carry


def _parallel_move(em: Emitter, srcs: list[int], carry: list[int]) -> set[int]:
    """``carry[k] = srcs[k]`` for all k at once; returns the temporaries used (to free)."""
    b = em.b
    if len(set(srcs)) == len(srcs) and not set(srcs) & set(carry):
        for src, c in zip(srcs, carry, strict=True):
            b.emit(P.MoveCall(src, c))
        return set()
    # A new value that is itself a carried slot (or repeated) is read through a temporary, so
    # that no slot is overwritten before it is read.
    temps = [b.new(b.values[c]) for c in carry]
    for src, tmp in zip(srcs, temps, strict=True):
        b.emit(P.MoveCall(src, tmp))
    for tmp, c in zip(temps, carry, strict=True):
        b.emit(P.MoveCall(tmp, c))
    return set(temps)


def _move_carry_out(em: Emitter, carry: list[int], outs: list[int]) -> None:
    for c, o in zip(carry, outs, strict=True):
        if o != -1:
            em.b.emit(P.MoveCall(c, o))
    em.free_all(carry)


def _require_bound(em: Emitter, t: P.Tensor, where: str) -> None:
    """AllocCall evaluates sizes at run time: only symbols bound from inputs may appear."""
    for d in (*t.sizes, *t.strides, t.storage_offset):
        if isinstance(d, P.Sym) and _uses_unbacked(em, d.expr):
            raise UnsupportedConstructError(f"{where}: a stacked output whose size depends on data cannot be "
                                            "preallocated")


def _uses_unbacked(em: Emitter, expr: int) -> bool:
    from native.format.exprs import OPS, SYM

    code = em.b.exprs[expr]
    i = 0
    while i < len(code):
        if code[i] == SYM and em.b.symbols[code[i + 1]].input < 0:
            return True
        i += 2 if OPS[code[i]][1] else 1
    return False


def _while(em: Emitter, node: schema.Node, g: schema.Graph, scope: Scope, where: str, defined: set[str]) -> None:
    args = _positional(node, 3, where)
    cond_g, body_g = _graph(args[0], where), _graph(args[1], where)
    init = _elements(em, args[2], scope, f"{where}.carried_inputs")
    extra = _elements(em, args[3], scope, f"{where}.additional_inputs") if len(args) > 3 else []
    outs = em.define_outputs(node, g, scope, where, defined)
    if len(outs) != len(init):
        raise MalformedArtifactError(f"{where}: {len(init)} carried values but {len(outs)} outputs")
    b = em.b
    carry = _carry_slots(em, body_g, init, where)
    head = b.here()
    preds, cond_local = em.subgraph(cond_g, carry + extra, f"{where} cond")
    if len(preds) != 1:
        raise MalformedArtifactError(f"{where}: the cond graph returns {len(preds)} values instead of 1")
    _check_loop_condition(em, preds[0], f"{where}.inputs[0]")
    to_end = b.emit(P.JumpFalseCall(preds[0], -1))
    em.free_all(cond_local)
    srcs, local = em.subgraph(body_g, carry + extra, f"{where} body")
    if len(srcs) != len(carry):
        raise MalformedArtifactError(f"{where}: the body returns {len(srcs)} values for {len(carry)} carried")
    temps = _parallel_move(em, srcs, carry)
    em.free_all(local | temps)
    b.emit(P.JumpFalseCall(em.false, head))
    b.patch_jump(to_end, b.here())
    em.free_all(cond_local)
    _move_carry_out(em, carry, outs)


def _inline(graph_at: int, operands_from: int) -> Callable:
    """A wrapper op that just calls its subgraph (grad-mode and subgraph-sharing wrappers)."""
    def lower(em: Emitter, node: schema.Node, g: schema.Graph, scope: Scope, where: str, defined: set[str]) -> None:
        args = _positional(node, operands_from, where)
        sub = _graph(args[graph_at], where)
        operands = [v for i, a in enumerate(args[operands_from:])
                    for v in _elements(em, a, scope, f"{where}.args[{operands_from + i}]")]
        outs = em.define_outputs(node, g, scope, where, defined)
        srcs, local = em.subgraph(sub, operands, where)
        _move_out(em, srcs, local, outs, where)
    return lower


def _operator(a: schema.NamedArgument, where: str) -> str:
    if a.arg.as_operator is None:
        raise MalformedArtifactError(f"{where}: expected an operator argument, got {a.arg.kind}")
    return a.arg.as_operator


def _with_effects(em: Emitter, node: schema.Node, g: schema.Graph, scope: Scope, where: str,
                  defined: set[str]) -> None:
    """``with_effects(token, op, *args)``: call ``op`` in program order; the token is a placeholder."""
    if len(node.inputs) < 2:
        raise MalformedArtifactError(f"{where}: with_effects takes a token and an operator")
    info = em.kernel_info(_operator(node.inputs[1], where), where)
    positional, keyword = _split(em, node.inputs[2:], scope, where)
    outs = em.define_outputs(node, g, scope, where, defined)
    em.call(info, em.schema_args(info, positional, keyword, where), outs[1:1 + len(info.returns)], where)
    if outs and outs[0] != -1:
        em.b.emit(P.MoveCall(em.b.const(P.NoneValue()), outs[0]))


def _split(em: Emitter, inputs: list[schema.NamedArgument], scope: Scope, where: str
           ) -> tuple[list[int], dict[str, int]]:
    positional, keyword = [], {}
    for i, na in enumerate(inputs):
        v = em.arg(na.arg, scope, f"{where}.inputs[{i}]")
        if na.kind == schema.ArgumentKind.KEYWORD:
            keyword[na.name] = v
        else:
            positional.append(v)
    return positional, keyword


def _clone(em: Emitter, v: int) -> int:
    c = em.b.new(em.b.values[v])
    em.b.emit(P.KernelCall(em.b.op("aten::clone", "default"), [v, em.b.const(P.NoneValue())], [c]))
    return c


def _auto_functionalized(em: Emitter, node: schema.Node, g: schema.Graph, scope: Scope, where: str,
                         defined: set[str]) -> None:
    """``auto_functionalized(op, **kwargs)``: clone each mutable argument, call ``op`` on the clones,
    return ``(*op results, *clones)``."""
    info = em.kernel_info(_operator(node.inputs[0], where), where)
    _, keyword = _split(em, node.inputs[1:], scope, where)
    only = keyword.pop("_only_clone_these_tensors", None)
    only_names = em.b.values[only].v if only is not None and isinstance(em.b.values[only], P.StringList) else None
    mutated, temps = [], []
    for a in info.args:
        if a.is_write and a.name in keyword:
            v = keyword[a.name]
            if isinstance(em.b.values[v], P.Tensor) and (only_names is None or a.name in only_names):
                keyword[a.name] = _clone(em, v)
                temps.append(keyword[a.name])
            mutated.append(keyword[a.name])
    outs = em.define_outputs(node, g, scope, where, defined)
    _call_and_return(em, info, em.schema_args(info, [], keyword, where), outs, mutated, where)
    em.free_all(temps)


def _auto_functionalized_v2(em: Emitter, node: schema.Node, g: schema.Graph, scope: Scope, where: str,
                            defined: set[str]) -> None:
    """``auto_functionalized_v2(op, _all_bases=[...], _<arg>_base_index=k, **kwargs)``: clone the
    bases, pass each mutable argument as (an alias of) its base's clone, return ``(*op results,
    *new bases)``. Arguments that are strided or sliced views of a base are not supported."""
    info = em.kernel_info(_operator(node.inputs[0], where), where)
    named = {na.name: na.arg for na in node.inputs[1:]}
    bases = _elements(em, named.pop("_all_bases"), scope, f"{where}._all_bases") if "_all_bases" in named else []
    only = named.pop("_only_clone_these_bases", None)
    clone_set = set(range(len(bases))) if only is None or only.as_none else set(_ints(only, where))
    new_bases = [_clone(em, v) if k in clone_set else v for k, v in enumerate(bases)]
    temps = [v for k, v in enumerate(new_bases) if k in clone_set]
    keyword: dict[str, int] = {}
    for a in info.args:
        if not a.is_write:
            continue
        prefix = f"_{a.name}"
        if f"{prefix}_base_index" not in named:
            raise UnsupportedConstructError(f"{where}: mutable argument {a.name!r} of {info} has no base index "
                                            "(tensor-list arguments are not supported natively)")
        k = named.pop(f"{prefix}_base_index")
        if k.as_none:
            keyword[a.name] = em.b.const(P.NoneValue())
            continue
        if any(f"{prefix}{suffix}" in named for suffix in ("_size", "_stride", "_storage_offset", "_slice_dim")):
            raise UnsupportedConstructError(f"{where}: argument {a.name!r} of {info} is a strided or sliced view "
                                            "of its base; regenerating views is not supported natively")
        if k.as_int is None or not 0 <= k.as_int < len(new_bases):
            raise MalformedArtifactError(f"{where}: base index of {a.name!r} is out of range")
        base = new_bases[k.as_int]
        if named.pop(f"{prefix}_alias", None) is not None:
            view = em.b.new(em.b.values[base])
            em.b.emit(P.KernelCall(em.b.op("aten::alias", "default", [[0]]), [base], [view]))
            base = view
            temps.append(view)
        keyword[a.name] = base
    for name, arg in named.items():
        keyword[name] = em.arg(arg, scope, f"{where}.inputs[{name!r}]")
    outs = em.define_outputs(node, g, scope, where, defined)
    _call_and_return(em, info, em.schema_args(info, [], keyword, where), outs, new_bases, where)
    em.free_all(temps)


def _ints(a: schema.Argument, where: str) -> list[int]:
    if a.as_ints is None:
        raise MalformedArtifactError(f"{where}: expected a list of ints, got {a.kind}")
    return list(a.as_ints)


def _call_and_return(em: Emitter, info: object, args: list[int], outs: list[int], extra: list[int],
                     where: str) -> None:
    """Outputs are (op results, or one None for an op without results, then ``extra``)."""
    n_op = max(1, len(info.returns))  # type: ignore[attr-defined]
    if len(outs) != n_op + len(extra):
        raise MalformedArtifactError(f"{where}: {len(outs)} outputs for {n_op} results and {len(extra)} "
                                     "mutated values")
    em.call(info, args, outs[:len(info.returns)], where)  # type: ignore[attr-defined]
    for src, dst in zip(extra, outs[n_op:], strict=True):
        if dst != -1:
            em.b.emit(P.MoveCall(src, dst))


HOP_LOWERINGS: dict[str, Callable] = {
    "cond": _cond,
    "map_impl": _map,
    "scan": _scan,
    "while_loop": _while,
    "invoke_subgraph": _inline(0, 2),  # (subgraph, identifier, *operands)
    "wrap_with_set_grad_enabled": _inline(1, 2),  # (enabled, subgraph, *operands): inference ignores grad mode
    "with_effects": _with_effects,
    "auto_functionalized": _auto_functionalized,
    "auto_functionalized_v2": _auto_functionalized_v2,
}
