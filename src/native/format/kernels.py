"""Operator schemas at emit time: argument order and defaults, return aliasing, out= variants.

This is the emitter's only use of torch for operators: it reads the dispatcher's schema of each
``torch.ops`` target once (targets resolve through serde's allow-list, never by import).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import torch

from serde.bridge.effects import may_return_arguments, written_arguments
from serde.bridge.operators import deserialize_target
from serde.errors import UnsupportedConstructError

__all__ = ["ArgInfo", "KernelInfo", "lookup", "actual_aliases", "resolve_overload"]

@dataclass(frozen=True)
class ArgInfo:
    name: str
    type: str  # the declared type, e.g. "Tensor", "Optional[ScalarType]", "List[int]"
    kwarg_only: bool
    has_default: bool
    default: Any
    alias_set: frozenset[str]  # alias annotation sets, empty when unannotated
    is_write: bool


@dataclass(frozen=True)
class KernelInfo:
    name: str  # "aten::add"
    overload: str  # "Tensor", or "default" for the unnamed overload
    args: tuple[ArgInfo, ...]
    returns: tuple[str, ...]  # declared return types
    # Per return: positions of the args it may alias when the op runs functionally, by its schema's
    # annotations or because its kernel may hand back an input (see ``actual_aliases``).
    returns_alias: tuple[tuple[int, ...], ...]
    out_overload: str | None  # the out= variant taking the same arguments, if any (fresh results)
    out_args: tuple[str, ...]  # its out argument names, one per return

    def __str__(self) -> str:
        return f"{self.name}.{self.overload}"


@functools.cache
def lookup(target: str) -> KernelInfo:
    """Schema facts for a ``torch.ops.<ns>.<op>.<overload>`` target.

    Raises:
        UnsafeArtifactError / UnknownOperatorError: from serde's allow-list resolution.
        UnsupportedConstructError: the target is not an operator overload.
    """
    op = deserialize_target(target, where=target)
    if not isinstance(op, torch._ops.OpOverload):
        raise UnsupportedConstructError(f"{target} is not an operator overload")
    s = op._schema
    written = set(written_arguments(s))  # (batch norm's running statistics too: their schemas hide the write)
    args = tuple(
        ArgInfo(a.name, str(a.real_type), a.kwarg_only, a.has_default_value(),
                a.default_value if a.has_default_value() else None, _sets(a.alias_info), a.name in written)
        for a in s.arguments
    )
    declared = _declared_aliases(s, args)
    out_overload, out_args = _out_variant(s, args, declared)
    return KernelInfo(
        name=s.name, overload=s.overload_name or "default", args=args,
        returns=tuple(str(r.real_type) for r in s.returns), returns_alias=actual_aliases(op),
        out_overload=out_overload, out_args=out_args,
    )


def resolve_overload(name: str, overload: str) -> Any:
    """The registered ``torch.ops`` overload for ``aten::add`` / ``Tensor``, or None."""
    ns, op = name.split("::", 1)
    try:
        torch._C._get_schema(name, "" if overload == "default" else overload)
        return getattr(getattr(getattr(torch.ops, ns), op), overload)
    except (RuntimeError, AttributeError):
        return None


@functools.cache
def actual_aliases(op: Any) -> tuple[tuple[int, ...], ...]:
    """Per return of ``op`` run functionally: the argument positions its result may share storage with.

    The schema's alias annotations are a promise about views, not about every kernel: a
    CompositeImplicitAutograd op is Python-level composition and hands back an input unchanged
    whenever it has nothing to do (``dropout(train=False)``, ``type_as`` to the same dtype,
    ``einsum('ij->ij')``, ``atleast_2d``, ``sum_to_size``, ``contiguous``, ...), and a few kernels
    return views their schemas hide (``serde.bridge.effects.UNANNOTATED_VIEWS``, which the
    canonical order's storage facts use too). Such a result may alias every tensor argument. Every other op's results are fresh unless
    annotated; the runtime checks this on every call in ``check=True`` mode and before reusing
    arena memory.
    """
    s = op._schema
    args = tuple(ArgInfo(a.name, str(a.real_type), a.kwarg_only, False, None, _sets(a.alias_info), False)
                 for a in s.arguments)
    declared = _declared_aliases(s, args)
    if may_return_arguments(op):
        tensors = tuple(i for i, a in enumerate(args) if "Tensor" in a.type)
        return tuple(tuple(sorted(set(d) | set(tensors))) if "Tensor" in str(r.real_type) else d
                     for d, r in zip(declared, s.returns, strict=True))
    return declared


def _declared_aliases(s: Any, args: tuple[ArgInfo, ...]) -> tuple[tuple[int, ...], ...]:
    aliases = []
    for r in s.returns:
        rs = _sets(r.alias_info)
        if r.alias_info is not None and not rs:
            # A list return (``Tensor(a)[]``) keeps its annotation on the element type, which the
            # bindings do not expose: it may alias every annotated argument.
            aliases.append(tuple(i for i, a in enumerate(args) if a.alias_set))
        else:
            aliases.append(tuple(i for i, a in enumerate(args) if rs and (a.alias_set & rs or "*" in rs)))
    return tuple(aliases)


def _sets(info: Any) -> frozenset[str]:
    if info is None:
        return frozenset()
    return frozenset(str(x) for x in info.before_set) | frozenset(str(x) for x in info.after_set)


def _out_variant(s: Any, args: tuple[ArgInfo, ...], aliases: tuple) -> tuple[str | None, tuple[str, ...]]:
    """The overload ``op.<x>`` whose non-out arguments equal ``s``'s and whose out args match its returns.

    Only for ops whose schema promises fresh plain tensors: writing a view or a list into planned
    memory makes no sense. An out= variant always writes its out arguments, so a composite op
    whose functional form may return an input still gets one.
    """
    if not s.returns or any(aliases) or any(str(r.real_type) != "Tensor" for r in s.returns):
        return None, ()
    if any(a.is_write for a in args):
        return None, ()
    want = [(a.name, a.type) for a in args]
    for cand in torch._C._jit_get_schemas_for_operator(s.name):
        if cand.overload_name == s.overload_name:
            continue
        outs = [a for a in cand.arguments if a.is_out]
        rest = [(a.name, str(a.real_type)) for a in cand.arguments if not a.is_out]
        if (rest == want and len(outs) == len(s.returns)
                and all(a.kwarg_only and str(a.real_type) == "Tensor" for a in outs)):
            return cand.overload_name, tuple(a.name for a in outs)
    return None, ()
