"""Order-relevant facts of call targets, read from the operators' schemas and tags.

The torch side of :mod:`serde.core.opfacts`: :func:`op_facts` resolves a wire target name (through the
same allow-list as loading) and derives its :class:`~serde.core.opfacts.OpFacts` from the dispatcher
schema, never from a list of operator names:

- writes: arguments whose alias annotation is a write (``Tensor(a!)``, ``Tensor(a!)[]``, ``out=``);
- views: returns that share an alias set with an argument (``Tensor(a)`` views, ``Tensor(a!)``
  in-place results). A list return (``Tensor(a)[]``) carries its alias set on the element type,
  which the TorchScript binding does not expose, so it aliases every argument with an alias set;
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

__all__ = ["op_facts"]

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


def _schema_facts(op: torch._ops.OpOverload) -> OpFacts:
    s = op._schema
    args = s.arguments
    writes = tuple(a.name for a in args if a.alias_info is not None and a.alias_info.is_write)
    aliased = [a for a in args if a.alias_info is not None and a.alias_info.before_set]
    views: list[tuple[int, str]] = []
    for k, r in enumerate(s.returns):
        ai = r.alias_info
        if ai is not None and ai.before_set:
            views += [(k, a.name) for a in aliased if a.alias_info.before_set & ai.before_set]
        elif isinstance(r.type, torch.ListType):
            views += [(k, a.name) for a in aliased]
    seeded = torch.Tag.nondeterministic_seeded in op.tags
    objects = any(isinstance(a.type, torch.ClassType) for a in args)
    if s.is_mutable and not writes:
        return OPAQUE  # mutable, but no argument says which: assume it may write anything
    return OpFacts(
        writes=writes, views=tuple(views), seeded=seeded, effectful=objects,
        check=not s.returns and not writes and not seeded and not objects,
    )
