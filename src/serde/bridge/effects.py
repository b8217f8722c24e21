"""Order-relevant facts of call targets, read from the operators' schemas and tags.

The torch side of :mod:`serde.core.opfacts`: :func:`op_facts` resolves a wire target name (through the
same allow-list as loading) and derives its :class:`~serde.core.opfacts.OpFacts` from the dispatcher
schema, never from a list of operator names:

- writes: arguments whose alias annotation is a write (``Tensor(a!)``, ``Tensor(a!)[]``, ``out=``),
  and arguments named in :data:`UNANNOTATED_WRITES`, which kernels write without saying so;
- views: returns that share an alias set with an argument (``Tensor(a)`` views, ``Tensor(a!)``
  in-place results). A list return (``Tensor(a)[]``) carries its alias set on the element type,
  which the TorchScript binding does not expose, so it aliases every argument with an alias set.
  Unannotated returns of an operator that may hand back an argument anyway alias every tensor
  argument: a CompositeImplicitAutograd operator returns whatever its decomposition does
  (``type_as``, ``atleast_2d``, ``contiguous`` and ``dropout`` in eval mode return their input),
  and the few kernels of :data:`UNANNOTATED_VIEWS` return an argument or a view of it while
  their schemas promise a fresh tensor;
- seeded: the ``nondeterministic_seeded`` tag;
- effectful: a custom-object argument (script objects are mutable state), or a schema marked
  mutable whose written arguments cannot be named (then also ``writes_all``);
- check: no returns and no writes, so the call can only be observed by raising (asserts,
  ``sym_constrain_range``).

Higher-order ops are pure by themselves (the canonicalizer looks into their subgraphs), except
``with_effects`` and ``call_torchbind``, whose effects are the wrapped call's: opaque. Extension
targets have no schema: opaque too.
"""

from __future__ import annotations

import torch

from serde.core.opfacts import OPAQUE, PURE, STATEFUL, STATEFUL_TARGETS, OpFacts

from .operators import PREDISPATCH_TARGETS, SYMBOLIC_TARGETS, deserialize_target

__all__ = ["op_facts", "written_arguments", "UNANNOTATED_WRITES", "UNANNOTATED_VIEWS", "may_return_arguments"]

# Arguments that kernels write although their schemas do not annotate it: batch norm's running
# statistics, updated in place in training mode by batch_norm, native_batch_norm,
# _batch_norm_impl_index, instance_norm (with use_input_stats) and the cuDNN/MIOpen kernels, whose
# schemas declare plain ``Tensor?``. They count as written by every op taking them: an order edge
# too many (eval mode, the functional and backward variants) costs nothing, a missing one lets a
# read of the statistics move across their update.
UNANNOTATED_WRITES = frozenset({"running_mean", "running_var"})

# Operators (every overload) with kernels of their own, not decompositions, that may return an
# argument or a view of it although their schemas declare fresh returns: the aten ops named
# "unsafe" whose results share their input's storage (views their schemas hide from autograd on
# purpose; the others, such as _unsafe_index, compute fresh results), and ``dequantize``, which
# returns a tensor that is not quantized as it is. The native runtime's check mode verifies on
# every call of its OpInfo sweep that no other kernel does so. native_cpp/method.cpp
# (kUnannotatedViews) holds the same list.
UNANNOTATED_VIEWS = frozenset({"aten::_unsafe_view", "aten::unsafe_split", "aten::unsafe_split_with_sizes",
                               "aten::unsafe_chunk", "aten::dequantize"})

_OPAQUE_HOPS = frozenset({"with_effects", "call_torchbind"})
_PLAIN_CALLABLES = tuple(SYMBOLIC_TARGETS.values()) + tuple(PREDISPATCH_TARGETS.values())

# target -> facts. Only successful lookups are kept: a failure names the node it was asked for.
_CACHE: dict[str, OpFacts] = {}


def op_facts(target: str, where: str) -> OpFacts:
    """Facts of the call target ``target`` (a wire name, e.g. ``"torch.ops.aten.add_.Tensor"``).

    Args:
        target: the node's target as stored in an artifact.
        where: the node, for error messages.

    Raises:
        UnsafeArtifactError: the target is outside the allow-list.
        UnknownOperatorError: the operator is not registered in this process (its schema, and so
            what it writes, is unknown).
    """
    facts = _CACHE.get(target)
    if facts is None:
        facts = _CACHE[target] = _resolve(target, where)
    return facts


def _resolve(target: str, where: str) -> OpFacts:
    if target in STATEFUL_TARGETS:
        return STATEFUL
    fn = deserialize_target(target, where=where)
    if isinstance(fn, torch._ops.OpOverload):
        return _schema_facts(fn)
    if isinstance(fn, torch._ops.HigherOrderOperator):
        return OPAQUE if fn.name() in _OPAQUE_HOPS else PURE
    if any(fn is c for c in _PLAIN_CALLABLES):
        return PURE  # size arithmetic, getitem, vmap batch-dim calls (fenced by the STATEFUL ones)
    return OPAQUE  # an extension's target: nothing is known about it


def written_arguments(s: torch.FunctionSchema) -> tuple[str, ...]:
    """Names of the arguments a call of ``s`` may write, in schema order (see UNANNOTATED_WRITES)."""
    return tuple(a.name for a in s.arguments
                 if (a.alias_info is not None and a.alias_info.is_write) or a.name in UNANNOTATED_WRITES)


def may_return_arguments(op: torch._ops.OpOverload) -> bool:
    """Whether ``op``'s unannotated returns may still be (views of) its arguments (see the module doc)."""
    return op._schema.name in UNANNOTATED_VIEWS or op.has_kernel_for_dispatch_key(
        torch._C.DispatchKey.CompositeImplicitAutograd)


def _holds_tensors(t: torch.JitType) -> bool:
    if isinstance(t, (torch.OptionalType, torch.ListType)):
        return _holds_tensors(t.getElementType())
    return isinstance(t, torch.TensorType)


def _schema_facts(op: torch._ops.OpOverload) -> OpFacts:
    s = op._schema
    args = s.arguments
    writes = written_arguments(s)
    aliased = [a for a in args if a.alias_info is not None and a.alias_info.before_set]
    views: list[tuple[int, str]] = []
    unannotated_alias = may_return_arguments(op)
    for k, r in enumerate(s.returns):
        ai = r.alias_info
        if ai is not None and ai.before_set:
            views += [(k, a.name) for a in aliased if a.alias_info.before_set & ai.before_set]
        elif isinstance(r.type, torch.ListType) and aliased:
            views += [(k, a.name) for a in aliased]
        elif unannotated_alias and _holds_tensors(r.type):
            views += [(k, a.name) for a in args if _holds_tensors(a.type)]
    seeded = torch.Tag.nondeterministic_seeded in op.tags
    objects = any(isinstance(a.type, torch.ClassType) for a in args)
    if s.is_mutable and not writes:
        return OPAQUE  # mutable, but no argument says which: assume it may write anything
    return OpFacts(
        writes=writes, views=tuple(views), seeded=seeded, effectful=objects,
        check=not s.returns and not writes and not seeded and not objects,
    )
