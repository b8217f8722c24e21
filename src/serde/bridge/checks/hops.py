"""Higher-order ops (cond, while_loop, map, scan, ...) get the operands their subgraphs take.

Each gets as many operands as its subgraphs take, each the tensor (dtype, rank, sizes) the subgraph
was traced with, and returns what they return (a loop body what it carries); cond's predicate has one
element and while_loop's condition is a 0-dim boolean; the inputs map and scan iterate over are
tensors of one length whose slices are what the subgraph takes, and scan's carry is what its combine
function takes and returns. vmap levels open and close in pairs (:func:`check_vmap_nesting`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx

from serde.core import schema

from ..errors import FIX_EDITED, InconsistentProgramError

__all__ = ["HOPS", "BATCH_DIM_AT", "check_batch_dim_result", "check_vmap_nesting"]


def _subgraph(a: Any, what: str, where: str, subs: dict[str, Any]) -> torch.fx.Graph:
    if isinstance(a, torch.fx.Node) and a.op == "get_attr":
        gm = subs.get(a.target)
        if isinstance(gm, torch.fx.GraphModule):
            return gm.graph
    raise InconsistentProgramError(f"{where}: {what} must be a subgraph, got {_kind(a)}; {FIX_EDITED}")


def _kind(a: Any) -> str:
    return f"value {a.name!r}" if isinstance(a, torch.fx.Node) else type(a).__name__


def _operands(a: Any, what: str, where: str) -> tuple:
    if not isinstance(a, (tuple, list)):
        raise InconsistentProgramError(f"{where}: {what} must be a tuple of operands, got {_kind(a)}; {FIX_EDITED}")
    return tuple(a)


def _placeholders(g: torch.fx.Graph) -> list[torch.fx.Node]:
    return [n for n in g.nodes if n.op == "placeholder"]


def _returned(g: torch.fx.Graph) -> list[Any]:
    out = g.output_node().args[0]
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _inputs(g: torch.fx.Graph) -> int:
    return len(_placeholders(g))


def _outputs(g: torch.fx.Graph) -> int:
    return len(_returned(g))


def _arity(args: Sequence[Any], n: int, name: str, where: str, at_least: bool = False) -> None:
    if len(args) < n or (len(args) != n and not at_least):
        raise InconsistentProgramError(
            f"{where}: {name} takes {'at least ' if at_least else ''}{n} arguments, the node passes "
            f"{len(args)}; {FIX_EDITED}")


def _takes(g: torch.fx.Graph, n: int, what: str, where: str) -> None:
    if _inputs(g) != n:
        raise InconsistentProgramError(
            f"{where}: {what} takes {_inputs(g)} inputs but the call passes {n} operands; {FIX_EDITED}")


def _returns(n_out: int, n: int, what: str, where: str) -> None:
    if n_out != n:
        raise InconsistentProgramError(f"{where}: {what} returns {n_out} values, expected {n}; {FIX_EDITED}")


def _node_outputs(node: schema.Node) -> int:
    return len(node.outputs)


def _tensor_val(v: Any) -> torch.Tensor | None:
    v = v.meta.get("val") if isinstance(v, torch.fx.Node) else v
    return v if isinstance(v, (torch.Tensor, _SliceMeta)) else None


def _same_size(x: Any, y: Any) -> bool:
    if type(x) is int or type(y) is int:
        return x == y if type(x) is type(y) else False
    # The reader shares one SymInt per stored expression, so one node: the usual case, and cheap.
    return x.node is y.node or x.node.expr == y.node.expr


def _fits(outer: Sequence[Any], inner: Sequence[Any], what: str, where: str, same_sizes: bool = True) -> None:
    """Each value a subgraph receives (or returns) is the tensor the other side has: the same dtype,
    rank and sizes. The subgraph was traced with those (the operands' very sizes, symbols included);
    handing it others (the operands in another order, say) fails inside a kernel at run time or
    computes something else. With ``same_sizes`` False only fixed sizes are compared: a loop body's
    results may carry sizes tracing named anew."""
    for i, (a, b) in enumerate(zip(outer, inner, strict=False)):
        ta, tb = _tensor_val(a), _tensor_val(b)
        if ta is None or tb is None:
            continue
        sa, sb = ta.shape, tb.shape  # each read builds the size tuple anew
        if same_sizes:
            sizes_differ = not all(_same_size(x, y) for x, y in zip(sa, sb, strict=False))
        else:
            sizes_differ = any(type(x) is int and type(y) is int and x != y for x, y in zip(sa, sb, strict=False))
        if ta.dtype != tb.dtype or len(sa) != len(sb) or sizes_differ:
            raise InconsistentProgramError(
                f"{where}: {what} {i} is {ta.dtype} {list(sa)} on one side and {tb.dtype} {list(sb)} "
                f"on the other; {FIX_EDITED}")


def _cond(args: Sequence[Any], node: schema.Node, where: str, subs: dict[str, Any]) -> None:
    _arity(args, 4, "cond", where)
    pred = args[0].meta.get("val") if isinstance(args[0], torch.fx.Node) else args[0]
    if isinstance(pred, torch.Tensor):
        # cond runs `if pred:`, which only a one-element tensor answers; a symbolic size could be
        # any size (export specializes a predicate's sizes, so one it wrote has none).
        if any(type(n) is not int or n != 1 for n in pred.shape):
            raise InconsistentProgramError(
                f"{where}.inputs[0]: cond's predicate must be a boolean or a one-element tensor, it has the "
                f"shape {list(pred.shape)}; {FIX_EDITED}")
    elif not isinstance(pred, (bool, torch.SymBool)):
        raise InconsistentProgramError(
            f"{where}.inputs[0]: cond's predicate must be a boolean or a one-element tensor, got "
            f"{_kind(args[0])} ({type(pred).__name__}); {FIX_EDITED}")
    ops = _operands(args[3], "cond's operands (inputs[3])", f"{where}.inputs[3]")
    branches = [_subgraph(args[i], f"cond's branch (inputs[{i}])", f"{where}.inputs[{i}]", subs) for i in (1, 2)]
    for i, g in zip((1, 2), branches, strict=True):
        _takes(g, len(ops), f"the branch in inputs[{i}]", f"{where}.inputs[{i}]")
    _returns(_outputs(branches[1]), _outputs(branches[0]), "the false branch (inputs[2])", f"{where}.inputs[2]")
    for i, g in zip((1, 2), branches, strict=True):
        _fits(ops, _placeholders(g), "operand", f"{where}.inputs[{i}]")
    _fits(_returned(branches[0]), _returned(branches[1]), "result", f"{where}.inputs[2]", same_sizes=False)
    if not node.is_hop_single_tensor_return:
        _returns(_node_outputs(node), _outputs(branches[0]), "cond's branch", f"{where}.outputs")


def _while_loop(args: Sequence[Any], node: schema.Node, where: str, subs: dict[str, Any]) -> None:
    _arity(args, 4, "while_loop", where)
    carried = _operands(args[2], "the carried inputs (inputs[2])", f"{where}.inputs[2]")
    extra = _operands(args[3], "the additional inputs (inputs[3])", f"{where}.inputs[3]")
    cond = _subgraph(args[0], "the loop condition (inputs[0])", f"{where}.inputs[0]", subs)
    body = _subgraph(args[1], "the loop body (inputs[1])", f"{where}.inputs[1]", subs)
    for i, g in ((0, cond), (1, body)):
        _takes(g, len(carried) + len(extra), f"the subgraph in inputs[{i}]", f"{where}.inputs[{i}]")
    _returns(_outputs(cond), 1, "the loop condition", f"{where}.inputs[0]")
    out = cond.output_node().args[0]
    if isinstance(out, (tuple, list)):
        # while_loop tests the value cond_fn returns: a one-element tuple is neither bool nor tensor.
        raise InconsistentProgramError(
            f"{where}.inputs[0]: the loop condition must return its value bare, not in a tuple (its "
            f"graph's is_single_tensor_return); {FIX_EDITED}")
    val = out.meta.get("val") if isinstance(out, torch.fx.Node) else None
    if not (isinstance(val, (torch.SymBool, bool))
            or (isinstance(val, torch.Tensor) and val.dtype == torch.bool and val.dim() == 0)):
        # What while_loop checks of the condition on every iteration.
        raise InconsistentProgramError(
            f"{where}.inputs[0]: the loop condition must compute a boolean or a 0-dim boolean tensor, it "
            f"returns {out!r}; {FIX_EDITED}")
    _returns(_outputs(body), len(carried), "the loop body", f"{where}.inputs[1]")
    for i, g in ((0, cond), (1, body)):
        _fits([*carried, *extra], _placeholders(g), "operand", f"{where}.inputs[{i}]")
    # The body's results are the next iteration's carried values.
    _fits(list(carried), _returned(body), "carried value", f"{where}.inputs[1]", same_sizes=False)
    if not node.is_hop_single_tensor_return:
        _returns(_node_outputs(node), len(carried), node.target, f"{where}.outputs")


def _map_impl(args: Sequence[Any], node: schema.Node, where: str, subs: dict[str, Any]) -> None:
    _arity(args, 3, "map_impl", where)
    xs = _operands(args[1], "the mapped inputs (inputs[1])", f"{where}.inputs[1]")
    rest = _operands(args[2], "the extra inputs (inputs[2])", f"{where}.inputs[2]")
    g = _subgraph(args[0], "the mapped function (inputs[0])", f"{where}.inputs[0]", subs)
    _takes(g, len(xs) + len(rest), "the subgraph in inputs[0]", f"{where}.inputs[0]")
    ph = _placeholders(g)
    _slices_fit(xs, ph[:len(xs)], "mapped input", f"{where}.inputs[1]")
    _fits(rest, ph[len(xs):], "extra input", f"{where}.inputs[2]", same_sizes=False)


def _slices_fit(xs: Sequence[Any], inner: Sequence[Any], what: str, where: str) -> None:
    """Each of ``xs`` is a tensor of rank >= 1, all of one length, whose slice along dim 0 is the
    tensor the subgraph takes (dtype, rank and fixed sizes): map and scan iterate over dim 0, and a
    scalar, a length mismatch or another slice fails inside the loop at run time."""
    length = None
    for i, x in enumerate(xs):
        t = _tensor_val(x)
        if t is None or t.dim() == 0:
            raise InconsistentProgramError(
                f"{where}: {what} {i} must be a tensor of rank 1 or more (it is iterated over dim 0), got "
                f"{_kind(x)}{'' if t is None else ' of rank 0'}; {FIX_EDITED}")
        n = t.shape[0]
        if type(n) is int:
            if length is not None and n != length:
                raise InconsistentProgramError(
                    f"{where}: {what} {i} has {n} rows, another has {length}: all are iterated together; {FIX_EDITED}")
            length = n
    outer = [_SliceMeta(_tensor_val(x)) for x in xs]
    _fits(outer, inner, what + " slice", where, same_sizes=False)


class _SliceMeta:
    """A tensor's slice along dim 0, as far as ``_fits`` looks: its dtype and shape."""

    __slots__ = ("dtype", "shape")

    def __init__(self, t: torch.Tensor) -> None:
        self.dtype, self.shape = t.dtype, t.shape[1:]


def _scan(args: Sequence[Any], node: schema.Node, where: str, subs: dict[str, Any]) -> None:
    _arity(args, 4, "scan", where)
    init = _operands(args[1], "the initial carry (inputs[1])", f"{where}.inputs[1]")
    xs = _operands(args[2], "the scanned inputs (inputs[2])", f"{where}.inputs[2]")
    extra = _operands(args[3], "the additional inputs (inputs[3])", f"{where}.inputs[3]")
    g = _subgraph(args[0], "the combine function (inputs[0])", f"{where}.inputs[0]", subs)
    _takes(g, len(init) + len(xs) + len(extra), "the subgraph in inputs[0]", f"{where}.inputs[0]")
    if _outputs(g) < len(init):
        raise InconsistentProgramError(
            f"{where}.inputs[0]: the combine function returns {_outputs(g)} values, fewer than the "
            f"{len(init)} carried ones; {FIX_EDITED}")
    ph = _placeholders(g)
    _fits(init, ph[:len(init)], "carried value", f"{where}.inputs[1]", same_sizes=False)
    # The combine function's first results are the next step's carry.
    _fits(init, _returned(g)[:len(init)], "carried value", f"{where}.inputs[0]", same_sizes=False)
    _slices_fit(xs, ph[len(init):len(init) + len(xs)], "scanned input", f"{where}.inputs[2]")
    _fits(extra, ph[len(init) + len(xs):], "additional input", f"{where}.inputs[3]", same_sizes=False)
    if not node.is_hop_single_tensor_return:
        _returns(_node_outputs(node), _outputs(g), "scan", f"{where}.outputs")


def _associative_scan(args: Sequence[Any], node: schema.Node, where: str, subs: dict[str, Any]) -> None:
    _arity(args, 3, "associative_scan", where)
    xs = _operands(args[1], "the scanned inputs (inputs[1])", f"{where}.inputs[1]")
    extra = _operands(args[2], "the additional inputs (inputs[2])", f"{where}.inputs[2]")
    g = _subgraph(args[0], "the combine function (inputs[0])", f"{where}.inputs[0]", subs)
    _takes(g, 2 * len(xs) + len(extra), "the subgraph in inputs[0]", f"{where}.inputs[0]")
    _returns(_outputs(g), len(xs), "the combine function", f"{where}.inputs[0]")


def _invoke_subgraph(args: Sequence[Any], node: schema.Node, where: str, subs: dict[str, Any]) -> None:
    _arity(args, 2, "invoke_subgraph", where, at_least=True)
    if not (args[1] is None or isinstance(args[1], str)):
        raise InconsistentProgramError(
            f"{where}.inputs[1]: invoke_subgraph's identifier is a string or None, got {_kind(args[1])}; {FIX_EDITED}")
    _subgraph_then_operands(0, 2)(args, node, where, subs)


def _subgraph_then_operands(graph_at: int, operands_at: int
                             ) -> Callable[[Sequence[Any], schema.Node, str, dict[str, Any]], None]:
    """HOPs called as ``hop(..., subgraph, ..., *operands)``, the subgraph taking the operands."""

    def check(args: Sequence[Any], node: schema.Node, where: str, subs: dict[str, Any]) -> None:
        _arity(args, operands_at, node.target, where, at_least=True)
        g = _subgraph(args[graph_at], f"inputs[{graph_at}]", f"{where}.inputs[{graph_at}]", subs)
        _takes(g, len(args) - operands_at, f"the subgraph in inputs[{graph_at}]", f"{where}.inputs[{graph_at}]")
        _fits(args[operands_at:], _placeholders(g), "operand", f"{where}.inputs[{graph_at}]")

    return check


def _flex_attention(args: Sequence[Any], node: schema.Node, where: str, subs: dict[str, Any]) -> None:
    # (query, key, value, score_mod, block_mask, scale, kernel_options, score_mod_other_buffers,
    #  mask_mod_other_buffers): score_mod takes (score, batch, head, q_idx, kv_idx, *its buffers)
    _arity(args, 9, "flex_attention", where)
    block_mask = _operands(args[4], "the block mask (inputs[4])", f"{where}.inputs[4]")
    _attention_operands(args[:3], bool(block_mask), where)
    buffers = _operands(args[7], "score_mod's buffers (inputs[7])", f"{where}.inputs[7]")
    g = _subgraph(args[3], "score_mod (inputs[3])", f"{where}.inputs[3]", subs)
    _takes(g, 5 + len(buffers), "score_mod (inputs[3])", f"{where}.inputs[3]")
    mask_buffers = _operands(args[8], "mask_mod's buffers (inputs[8])", f"{where}.inputs[8]")
    if block_mask:  # its last element is mask_mod, taking (batch, head, q_idx, kv_idx, *its buffers)
        g = _subgraph(block_mask[-1], "mask_mod (the block mask's last element)", f"{where}.inputs[4]", subs)
        _takes(g, 4 + len(mask_buffers), "mask_mod (the block mask's last element)", f"{where}.inputs[4]")


def _attention_operands(qkv: Sequence[Any], has_block_mask: bool, where: str) -> None:
    """Query, key and value as ``torch.nn.attention.flex_attention`` accepts them (it checks them
    before the operator is traced, so an exported call passed): floating tensors of rank 4 (batch,
    heads, length, embedding), query and key of one embedding size, key and value of one batch,
    head count and length, query heads a multiple of key heads, and one batch size unless a block
    mask maps the query's batch. Sizes are compared where both are fixed; the kernel fails at run
    time on any other call."""
    names = ("query", "key", "value")
    ts = []
    for i, (a, name) in enumerate(zip(qkv, names, strict=True)):
        t = _tensor_val(a)
        if not isinstance(t, torch.Tensor) or t.dim() != 4 or not (t.is_floating_point() or t.is_complex()):
            got = _kind(a) if not isinstance(t, torch.Tensor) else f"{t.dtype} {list(t.shape)}"
            raise InconsistentProgramError(
                f"{where}.inputs[{i}]: flex_attention's {name} must be a floating tensor of rank 4 (batch, heads, "
                f"length, embedding), got {got}; {FIX_EDITED}")
        ts.append(t)
    q, k, v = (t.shape for t in ts)

    def differ(x: Any, y: Any) -> bool:
        return type(x) is int and type(y) is int and x != y

    pairs = [(q[3], k[3], "query's and key's embedding sizes (dim 3)", 1),
             (k[0], v[0], "key's and value's batch sizes (dim 0)", 2),
             (k[1], v[1], "key's and value's head counts (dim 1)", 2),
             (k[2], v[2], "key's and value's lengths (dim 2)", 2)]
    if not has_block_mask:
        pairs.append((q[0], k[0], "query's and key's batch sizes (dim 0) without a block mask", 1))
    for x, y, what, at in pairs:
        if differ(x, y):
            raise InconsistentProgramError(f"{where}.inputs[{at}]: flex_attention's {what} differ: {x} and {y}; "
                                           f"{FIX_EDITED}")
    if type(q[1]) is int and type(k[1]) is int and (k[1] == 0 or q[1] % k[1]):
        raise InconsistentProgramError(
            f"{where}.inputs[1]: flex_attention's query has {q[1]} heads, not a multiple of the key's {k[1]}; "
            f"{FIX_EDITED}")


def _with_effects(args: Sequence[Any], node: schema.Node, where: str, subs: dict[str, Any]) -> None:
    _arity(args, 2, "with_effects", where, at_least=True)
    if not isinstance(args[1], (torch._ops.OpOverload, torch._ops.HigherOrderOperator)):
        raise InconsistentProgramError(
            f"{where}.inputs[1]: with_effects runs an operator, got {_kind(args[1])}; {FIX_EDITED}")


HOPS: dict[str, Callable[[Sequence[Any], schema.Node, str, dict[str, Any]], None]] = {
    "cond": _cond,
    "while_loop": _while_loop,
    "while_loop_stack_output": _while_loop,
    "map_impl": _map_impl,
    "scan": _scan,
    "associative_scan": _associative_scan,
    "invoke_subgraph": _invoke_subgraph,                          # (subgraph, identifier, *operands)
    "wrap_with_set_grad_enabled": _subgraph_then_operands(1, 2),  # (enabled, subgraph, *operands)
    "wrap_with_autocast": _subgraph_then_operands(4, 5),          # (device, dtype, enabled, cache, subgraph, *operands)
    "with_effects": _with_effects,                                # (token, op, *args)
    "flex_attention": _flex_attention,
}


BATCH_DIM_AT = {"torch._functorch.predispatch._add_batch_dim": (1, 0),
                "torch._functorch.predispatch._remove_batch_dim": (3, 1)}


def check_batch_dim_result(target: str, fx_node: torch.fx.Node, where: str) -> None:
    """A batch-dim call's stored result is its operand with the batch dim taken out (``_add_batch_dim``)
    or put back (``_remove_batch_dim``): the graph after it was traced on that shape, and another
    (a batch dim moved by an edit) fails inside functorch or a kernel when the program runs."""
    args = fx_node.args
    src, out = _tensor_val(args[0]) if args else None, _tensor_val(fx_node)
    if not isinstance(src, torch.Tensor) or not isinstance(out, torch.Tensor):
        return
    shape = list(src.shape)
    if target.endswith("_add_batch_dim"):
        dim = args[1]
        if type(dim) is not int or not -len(shape) <= dim < len(shape):
            return
        del shape[dim]
    else:
        size, dim = args[2], args[3]
        if type(dim) is not int or not -len(shape) - 1 <= dim <= len(shape):
            return
        shape.insert(dim if dim >= 0 else len(shape) + 1 + dim, size)
    got = list(out.shape)
    if out.dtype != src.dtype or len(got) != len(shape) or any(
            type(x) is int and type(y) is int and x != y for x, y in zip(shape, got, strict=True)):
        raise InconsistentProgramError(
            f"{where}.outputs: {target.rsplit('.', 1)[1]} of a {src.dtype} {list(src.shape)} tensor at dim "
            f"{dim} gives {src.dtype} {shape}, the node stores {out.dtype} {got}; {FIX_EDITED}")


_VMAP_IN = "torch._functorch.predispatch._vmap_increment_nesting"
_VMAP_OUT = "torch._functorch.predispatch._vmap_decrement_nesting"
# Which input of a batch-dim call is its vmap level.
_LEVEL_AT = {"torch._functorch.predispatch._add_batch_dim": 2, "torch._functorch.predispatch._remove_batch_dim": 1}


def check_vmap_nesting(g: schema.Graph, where: str, top_level: bool = False) -> None:
    """vmap levels open and close in pairs within a graph, as tracing through torch.func leaves them;
    an unbalanced graph would leave the interpreter inside a vmap level after it returns. In the
    program's own graph, batch dims are added and removed only inside a level it opened."""
    # The open levels, innermost last: (the entering node's index, which names this entry of the
    # level, and the batch size its _vmap_increment_nesting says).
    levels: list[tuple[int, int | None]] = []
    owner: dict[str, int] = {}  # a value made inside a level -> the entry of that level
    for i, sn in enumerate(g.nodes):
        if owner:
            _check_batched_operands(sn, owner, levels, f"{where}.nodes[{sn.name!r}]")
        if sn.target == _VMAP_IN:
            levels.append((i, sn.inputs[0].arg.as_int if sn.inputs else None))
        elif sn.target == _VMAP_OUT:
            if not levels:
                raise InconsistentProgramError(
                    f"{where}.nodes[{sn.name!r}]: leaves a vmap level that was never entered; {FIX_EDITED}")
            levels.pop()
        depth = len(levels)
        # What a node inside a level computes is batched at it; _remove_batch_dim gives the
        # level outside its own back.
        inner = depth - (1 if sn.target.endswith("_remove_batch_dim") else 0)
        if top_level and inner > 0:
            for name in _tensor_names(sn.outputs):
                owner[name] = levels[inner - 1][0]
        at = _LEVEL_AT.get(sn.target)
        if at is not None and top_level and depth == 0:
            raise InconsistentProgramError(
                f"{where}.nodes[{sn.name!r}]: {sn.target.rsplit('.', 1)[1]} outside any vmap level; {FIX_EDITED}")
        if at is not None and at < len(sn.inputs):
            # Levels count from 1; functorch meets any other with a C++ internal assert, not an
            # error. (A subgraph may use levels its caller opened, so no upper bound here.)
            level = sn.inputs[at].arg.as_int
            if level is not None and level < 1:
                raise InconsistentProgramError(
                    f"{where}.nodes[{sn.name!r}].inputs[{at}]: vmap level {level}; levels count from 1; {FIX_EDITED}")
            if level is not None and top_level:
                _check_level_open(level, depth, f"{where}.nodes[{sn.name!r}].inputs[{at}]")
                if sn.target.endswith("_add_batch_dim") and level <= depth:
                    _check_batch_size(g, sn, levels[level - 1][1], level, f"{where}.nodes[{sn.name!r}]")
    if levels:
        raise InconsistentProgramError(f"{where}: enters {len(levels)} vmap level(s) it never leaves; {FIX_EDITED}")


def _tensor_names(args: Sequence[Any]) -> list[str]:
    out = []
    for a in args:
        a = getattr(a, "arg", a)  # a NamedArgument's argument
        if a.as_tensor is not None:
            out.append(a.as_tensor.name)
        elif a.as_tensors is not None:
            out.extend(t.name for t in a.as_tensors)
    return out


def _check_batched_operands(sn: schema.Node, owner: dict[str, int], levels: list[tuple[int, int | None]],
                            where: str) -> None:
    """A tensor batched at a vmap level is used only while that very level is open: after it
    closes, or in another entry of the same level (another vmap call, with its own batch size),
    its batch dim means nothing, and operators mix it with others of another batch size."""
    for name in _tensor_names(sn.inputs):
        made = owner.get(name)
        if made is not None and all(entry != made for entry, _ in levels):
            raise InconsistentProgramError(
                f"{where}: takes {name!r}, which is batched at a vmap level that is no longer open here; "
                f"{FIX_EDITED}")


def _check_batch_size(g: schema.Graph, sn: schema.Node, batch_size: int | None, level: int, where: str) -> None:
    """A vmap level maps over one batch size, the one tracing entered it with: a tensor whose batch
    dim has another size is batched anyway, and the level's operators then fail on operands of two
    batch sizes when the program runs (or compute with the wrong one)."""
    if batch_size is None or len(sn.inputs) < 2:
        return
    t, dim = sn.inputs[0].arg.as_tensor, sn.inputs[1].arg.as_int
    meta = g.tensor_values.get(t.name) if t is not None else None
    if meta is None or dim is None or not -len(meta.sizes) <= dim < len(meta.sizes):
        return
    size = meta.sizes[dim].as_int
    if size is not None and size != batch_size:
        raise InconsistentProgramError(
            f"{where}.inputs[0]: {t.name!r} has {size} elements at its batch dim {dim}, but vmap level {level} "
            f"maps over {batch_size}; {FIX_EDITED}")


def _check_level_open(level: int, depth: int, where: str) -> None:
    # The program's own graph runs outside any vmap: only the levels it opened exist, and functorch
    # meets another with an internal assert.
    if level > depth:
        raise InconsistentProgramError(
            f"{where}: vmap level {level}, but only {depth} level(s) are open here; {FIX_EDITED}")
