"""Operator targets <-> wire names, through an explicit allow-list.

A node target in an artifact is untrusted text. It resolves only to:

- an ``OpOverload`` registered with the dispatcher: ``"torch.ops.<ns>.<op>.<overload>"``
  (looked up through the dispatcher's schema registry first, so no module is imported and no
  attribute of ``torch.ops`` other than a real operator is ever returned);
- an allow-listed higher-order op: ``"torch.ops.higher_order.<name>"``;
- one of the Python callables torch.export emits for symbolic size arithmetic
  (``"_operator.add"``, ``"math.floor"``, ``"torch.sym_max"``, ...);
- a name under a prefix claimed by :func:`register_extension`.

Anything else is an :class:`~serde.errors.UnsafeArtifactError`.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable
from typing import Any

import torch
import torch._functorch.predispatch as predispatch

from serde.core.opfacts import STATEFUL_TARGETS
from serde.errors import SerializeError, UnknownOperatorError, UnsafeArtifactError, UnsupportedConstructError

__all__ = [
    "SYMBOLIC_TARGETS",
    "PREDISPATCH_TARGETS",
    "STATEFUL_TARGETS",
    "HIGHER_ORDER_OPS",
    "serialize_target",
    "deserialize_target",
    "register_extension",
]

# The Python callables torch.export leaves as call_function targets for SymInt/SymFloat/SymBool
# arithmetic (the dunder methods of torch.SymInt & co. trace to these), plus getitem for
# multi-output ops: each was seen in a torch 2.13 export (tests/serde/bridge/test_operators.py harvests
# them). Not here on purpose: operator.xor (export rejects it) and torch._sym_cos & co. (math.cos
# of a size specializes instead of tracing). Wire name -> callable; the name is the callable's
# own ``__module__.__name__``, as torch's serializer writes it.
SYMBOLIC_TARGETS: dict[str, Callable] = {
    **{f"_operator.{n}": getattr(operator, n) for n in (
        "add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "neg", "pos", "abs",
        "eq", "ne", "lt", "le", "gt", "ge", "and_", "or_", "lshift", "rshift", "getitem",
    )},
    **{f"math.{n}": getattr(math, n) for n in ("floor", "ceil", "trunc")},
    "builtins.round": round,
    **{f"torch.{n}": getattr(torch, n) for n in (
        "sym_not", "sym_float", "sym_int", "sym_ite", "sym_max", "sym_min", "sym_sum",
        "_sym_sqrt",  # math.sqrt / torch.sym_sqrt of a size; torch.sym_sqrt is this object
    )},
}

# Training-IR graphs of vmap-based ops (associative_scan) trace through torch.func and keep these
# torch._functorch.predispatch calls. The nesting calls change the interpreter's vmap level: the
# batch-dim calls between them only mean something inside that level, so the canonical order keeps
# every node on its side of a stateful call (serde.core.opfacts.STATEFUL_TARGETS, re-exported here).
# Not here: the grad/jvp wrappers, which no export seen with torch 2.13 emits.
PREDISPATCH_TARGETS: dict[str, Callable] = {
    f"torch._functorch.predispatch.{n}": getattr(predispatch, n) for n in (
        "_add_batch_dim", "_remove_batch_dim", "_vmap_increment_nesting",
        "_vmap_decrement_nesting", "lazy_load_decompositions",
    )
}
# Accepted when reading, never written.
_READ_ALIASES: dict[str, str] = {"torch.sym_sqrt": "torch._sym_sqrt", "operator.getitem": "_operator.getitem"}

# Higher-order ops whose operands are graphs and values the schema can carry. Deliberately not all
# of torch's: e.g. inline_asm_elementwise, inductor_compiled_code and flat_apply take code or
# arbitrary callables, and print formats an artifact-supplied string.
HIGHER_ORDER_OPS: frozenset[str] = frozenset({
    "cond", "while_loop", "while_loop_stack_output", "map_impl", "scan", "associative_scan",
    "wrap_with_set_grad_enabled", "wrap_with_autocast", "auto_functionalized",
    "auto_functionalized_v2", "with_effects", "invoke_subgraph", "out_dtype", "hints_wrapper",
    "call_torchbind", "flex_attention", "flex_attention_backward", "tag_activation_checkpoint",
    "_export_tracepoint",
})

_CALLABLE_TARGETS: dict[str, Callable] = {**SYMBOLIC_TARGETS, **PREDISPATCH_TARGETS}
_TARGET_TO_NAME: dict[Any, str] = {fn: name for name, fn in _CALLABLE_TARGETS.items()}
assert len(_TARGET_TO_NAME) == len(_CALLABLE_TARGETS), "callable target tables are not one-to-one"

_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_OP_RE = re.compile(rf"torch\.ops\.({_IDENT})\.({_IDENT})(?:\.({_IDENT}))?\Z")
_HOP_PREFIX = "torch.ops.higher_order."
_RESERVED_PREFIXES = ("torch", "_operator", "operator", "math", "builtins")

# prefix -> (resolve, name_of)
_EXTENSIONS: dict[str, tuple[Callable[[str], Callable], Callable[[Any], str | None]]] = {}


def serialize_target(target: Any, *, where: str) -> str:
    """Wire name of a call_function target.

    Args:
        target: an OpOverload, an allow-listed HigherOrderOperator or symbolic callable, or a
            target an extension claims.
        where: location for error messages, e.g. ``graph.nodes[3]``.

    Returns:
        e.g. ``"torch.ops.aten.add.Tensor"``, ``"torch.ops.higher_order.cond"``, ``"_operator.add"``.

    Raises:
        UnsupportedConstructError: the target is none of the above (names it).
    """
    if isinstance(target, torch._ops.OpOverload):
        return f"torch.ops.{target.namespace}.{target._opname}.{target._overloadname}"
    if isinstance(target, torch._ops.HigherOrderOperator):
        name = target.name()
        if name not in HIGHER_ORDER_OPS:
            raise UnsupportedConstructError(
                f"{where}: higher-order op {name!r} is not supported by pt2serde "
                f"(supported: {', '.join(sorted(HIGHER_ORDER_OPS))})."
            )
        return _HOP_PREFIX + name
    try:
        name = _TARGET_TO_NAME.get(target)
    except TypeError:  # unhashable target
        name = None
    if name is not None:
        return name
    for prefix, (_resolve, name_of) in _EXTENSIONS.items():
        ext_name = name_of(target)
        if ext_name is not None:
            if not ext_name.startswith(prefix):
                raise UnsupportedConstructError(
                    f"{where}: extension {prefix!r} named target {target!r} {ext_name!r}, which is "
                    f"outside its prefix; fix the extension's name_of."
                )
            return ext_name
    raise UnsupportedConstructError(
        f"{where}: call target {_describe(target)} cannot be saved: only torch.ops operators, "
        "supported higher-order ops and symbolic size arithmetic (operator.*, math.floor/ceil/trunc, "
        "torch.sym_*) are allowed. Register the function as a custom op (torch.library.custom_op) "
        "or call serde.register_extension for it."
    )


def deserialize_target(name: str, *, where: str) -> Callable:
    """Resolve a wire name to the callable, refusing anything outside the allow-list.

    Args:
        name: the target text from the artifact (untrusted).
        where: location for error messages.

    Returns:
        The OpOverload, HigherOrderOperator, symbolic callable or extension target.

    Raises:
        UnsafeArtifactError: the name is outside the allow-list (e.g. ``builtins.eval``).
        UnknownOperatorError: a well-formed operator that is not registered in this process.
    """
    if not isinstance(name, str):
        raise UnsafeArtifactError(f"{where}: node target must be a string, got {type(name).__name__}.")
    name = _READ_ALIASES.get(name, name)
    fn = _CALLABLE_TARGETS.get(name)
    if fn is not None:
        return fn
    if name.startswith(_HOP_PREFIX):
        return _resolve_hop(name[len(_HOP_PREFIX):], name, where)
    if name.startswith("torch.ops."):
        return _resolve_op(name, where)
    for prefix, (resolve, _name_of) in _EXTENSIONS.items():
        if name.startswith(prefix):
            return _resolve_extension(prefix, resolve, name, where)
    raise _unsafe(name, where)


def register_extension(
    prefix: str, resolve: Callable[[str], Callable], name_of: Callable[[Any], str | None]
) -> None:
    """Allow targets outside torch.ops, under a wire-name prefix of your own (e.g. ``"mylib."``).

    Args:
        prefix: the names this extension owns; must not overlap torch, operator, math or builtins
            names, nor another extension's prefix.
        resolve: wire name -> callable, called only for names under ``prefix``. It must not import
            or evaluate anything the name chooses; raise a SerializeError for unknown names.
        name_of: target -> wire name under ``prefix``, or None when the target is not its own.

    Raises:
        ValueError: the prefix is empty, reserved, or overlaps a registered one.
    """
    if not prefix or any(prefix.startswith(r) or r.startswith(prefix) for r in _RESERVED_PREFIXES):
        raise ValueError(f"extension prefix {prefix!r} is empty or overlaps a built-in namespace")
    for other in _EXTENSIONS:
        if other != prefix and (other.startswith(prefix) or prefix.startswith(other)):
            raise ValueError(f"extension prefix {prefix!r} overlaps registered prefix {other!r}")
    _EXTENSIONS[prefix] = (resolve, name_of)


# --- helpers ---------------------------------------------------------------------------------


def _describe(target: Any) -> str:
    mod = getattr(target, "__module__", None)
    qual = getattr(target, "__qualname__", None) or getattr(target, "__name__", None)
    return f"{mod}.{qual}" if mod and qual else repr(target)


def _unsafe(name: str, where: str, why: str = "") -> UnsafeArtifactError:
    shown = name if len(name) <= 200 else name[:197] + "..."
    return UnsafeArtifactError(
        f"{where}: node target {shown!r} is not an allowed operator{why}. Only torch.ops operators, "
        "supported higher-order ops, symbolic size arithmetic and registered extensions are "
        "resolved; refusing to load this artifact."
    )


def _resolve_hop(hop: str, name: str, where: str) -> Callable:
    if hop not in HIGHER_ORDER_OPS:
        raise _unsafe(name, where, " (not a supported higher-order op)")
    op = torch._ops._higher_order_ops.get(hop)
    if not isinstance(op, torch._ops.HigherOrderOperator):
        raise UnknownOperatorError(
            f"{where}: higher-order op {name!r} is not registered in this torch "
            f"({torch.__version__}). Load the artifact with the torch version that wrote it."
        )
    return op


def _resolve_op(name: str, where: str) -> Callable:
    m = _OP_RE.match(name)
    if m is None or m.group(3) is None:
        raise _unsafe(name, where, " (expected torch.ops.<namespace>.<op>.<overload>)")
    ns, op_name, overload = m.groups()
    # aten really has dunder ops (aten::__and__); those pass only if the dispatcher knows them.
    if "__" in ns or "__" in overload:
        raise _unsafe(name, where, " (double underscores in namespace or overload)")
    qualname = f"{ns}::{op_name}"
    try:
        torch._C._get_schema(qualname, "" if overload == "default" else overload)
    except RuntimeError:
        if "__" in op_name:
            raise _unsafe(name, where, " (double underscores)") from None
        if _namespace_known(ns):
            # Then importing the namespace's library would not help: it is here without this operator,
            # as when a torch release removed an aten operator (or another version of a library is loaded).
            raise UnknownOperatorError(
                f"{where}: operator {qualname}.{overload} is not in this process (torch {torch.__version__}), "
                f"although namespace {ns!r} is: it was removed or renamed after the torch (or library version) "
                "that wrote the artifact, or is newer than the one here. Load the artifact with the torch and "
                "libraries that wrote it (`pt2serde check FILE` prints its torch)."
            ) from None
        raise UnknownOperatorError(
            f"{where}: operator {qualname}.{overload} is not registered in this process. Import "
            f"the Python library that defines namespace {ns!r} (e.g. the module with its "
            "torch.library.custom_op / torch.library.Library definitions), or call "
            "torch.ops.load_library(<path>) for a C++ extension, before loading."
        ) from None
    # The schema exists, so these getattrs bind a real operator rather than some other attribute
    # of the namespace objects; the isinstance check makes that certain.
    packet = getattr(getattr(torch.ops, ns), op_name, None)
    op = getattr(packet, overload, None) if isinstance(packet, torch._ops.OpOverloadPacket) else None
    if not isinstance(op, torch._ops.OpOverload):
        raise _unsafe(name, where, " (does not resolve to an OpOverload)")
    return op


def _namespace_known(ns: str) -> bool:
    prefix = f"{ns}::"
    return any(s.name.startswith(prefix) for s in torch._C._jit_get_all_schemas())


def _resolve_extension(prefix: str, resolve: Callable[[str], Callable], name: str, where: str) -> Callable:
    try:
        return resolve(name)
    except SerializeError:
        raise
    except Exception as e:
        raise UnknownOperatorError(
            f"{where}: extension {prefix!r} could not resolve target {name!r}: {type(e).__name__}: {e}"
        ) from None
