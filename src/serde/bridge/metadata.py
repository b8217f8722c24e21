"""Node metadata (``node.meta``) <-> ``schema.NodeMetadata``.

Kept: stack_trace, nn_module_stack, source_fn_stack, torch_fn, custom and from_node. Function
objects in source_fn_stack are stored by qualified name and come back as strings: loading never
imports or resolves code named by an artifact.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from serde.core import schema
from serde.core.schema import I64
from serde.errors import MalformedArtifactError, UnsupportedConstructError

__all__ = ["serialize_node_metadata", "deserialize_node_metadata", "serialize_custom", "deserialize_custom",
           "MAX_PROVENANCE_DEPTH"]


def _qualname(fn: Any) -> str:
    if isinstance(fn, str):
        return fn
    module = getattr(fn, "__module__", None)
    qual = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    if qual is None:
        return str(fn)
    return f"{module}.{qual}" if module else qual


def serialize_custom(custom: Any, where: str) -> str:
    try:
        return json.dumps(custom, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as e:
        raise UnsupportedConstructError(
            f"{where}: meta['custom'] must be JSON-serializable (str/int/float/bool/None, lists, "
            f"str-keyed dicts): {e}"
        ) from None


def deserialize_custom(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as e:
        raise MalformedArtifactError(f"{where}.custom: invalid JSON ({e})") from None
    except RecursionError:
        raise MalformedArtifactError(f"{where}.custom: JSON nested too deeply to decode; the file is damaged "
                                     "or hostile") from None


def _serialize_from_node(value: Any) -> str | None:
    try:
        items = [s.to_dict() for s in value]
        return json.dumps(items, sort_keys=True, separators=(",", ":"), default=str)
    except (AttributeError, TypeError, ValueError):
        return None  # provenance is debug-only: drop it rather than fail a save


class _Provenance(msgspec.Struct):
    """One entry of torch's ``from_node`` provenance, as ``NodeSource.to_dict`` writes it."""

    name: str = ""
    target: str = ""
    graph_id: I64 = -1
    pass_name: str = ""
    action: str = ""
    from_node: list[_Provenance] = []


_provenance_decoder = msgspec.json.Decoder(list[_Provenance])
# Provenance nests one level per pass a node went through (canonical.debuginfo keeps the same cap
# when it renumbers graph ids); torch's NodeSource._from_dict recurses once per level.
MAX_PROVENANCE_DEPTH = 64


def _deserialize_from_node(text: str) -> Any:
    """torch's provenance objects, or None for text that is not what torch writes: provenance is
    debug-only, and a bad entry is dropped rather than failing the load (docs/canonical.md, "Debug metadata")."""
    from torch.fx.traceback import NodeSource

    try:
        items = _provenance_decoder.decode(text)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError, UnicodeDecodeError):
        return None
    stack = [(p, 1) for p in items]
    while stack:
        p, depth = stack.pop()
        if depth > MAX_PROVENANCE_DEPTH:
            return None
        stack.extend((c, depth + 1) for c in p.from_node)
    return [NodeSource._from_dict(d) for d in msgspec.to_builtins(items)]


def serialize_node_metadata(meta: dict[str, Any], where: str,
                            entries: dict[tuple, schema.ModuleStackEntry] | None = None,
                            stacks: dict[tuple, list[schema.ModuleStackEntry]] | None = None
                            ) -> schema.NodeMetadata:
    """``entries``: (key, path, module class) -> entry, and ``stacks``: the stack's items -> its
    entry list, filled and reused across the nodes of a graph (the nodes of one module share their
    stack; Structs are immutable and nothing edits their lists)."""
    stack = meta.get("nn_module_stack")
    if stack is not None and stacks is not None:
        try:
            items = tuple(stack.items())
            entry_list = stacks.get(items)
        except (TypeError, AttributeError):  # unhashable paths or classes, or not a dict: not shared
            pass
        else:
            if entry_list is None:
                entry_list = stacks[items] = [_stack_entry(k, v, entries) for k, v in items]
            return _metadata(meta, entry_list, where)
    return _metadata(meta, None if stack is None else [_stack_entry(k, v, entries) for k, v in stack.items()],
                     where)


def _metadata(meta: dict[str, Any], stack: list[schema.ModuleStackEntry] | None, where: str) -> schema.NodeMetadata:
    sfs = meta.get("source_fn_stack")
    torch_fn = meta.get("torch_fn")
    custom = meta.get("custom")
    from_node = meta.get("from_node")
    return schema.NodeMetadata(
        stack_trace=meta.get("stack_trace"),
        nn_module_stack=stack,
        source_fn_stack=None if sfs is None else [
            schema.SourceFn(name=name, target=_qualname(fn)) for name, fn in sfs
        ],
        torch_fn=None if torch_fn is None else schema.SourceFn(name=torch_fn[0], target=torch_fn[1]),
        custom=None if custom is None else serialize_custom(custom, where),
        from_node=None if not from_node else _serialize_from_node(from_node),
    )


def _stack_entry(key: str, v: tuple, entries: dict[tuple, schema.ModuleStackEntry] | None
                 ) -> schema.ModuleStackEntry:
    try:
        ck = (key, v[0], v[1])
        hash(ck)
    except TypeError:  # an unhashable path or class: not shared
        ck = None
    e = entries.get(ck) if entries is not None and ck is not None else None
    if e is None:
        e = schema.ModuleStackEntry(key=key, path=v[0], type_name=_qualname(v[1]))
        if entries is not None and ck is not None:
            entries[ck] = e
    return e


def deserialize_node_metadata(m: schema.NodeMetadata, where: str) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    if m.stack_trace is not None:
        meta["stack_trace"] = m.stack_trace
    if m.nn_module_stack is not None:
        meta["nn_module_stack"] = {e.key: (e.path, e.type_name or "") for e in m.nn_module_stack}
    if m.source_fn_stack is not None:
        meta["source_fn_stack"] = [(e.name, e.target) for e in m.source_fn_stack]
    if m.torch_fn is not None:
        meta["torch_fn"] = (m.torch_fn.name, m.torch_fn.target)
    if m.custom is not None:
        meta["custom"] = deserialize_custom(m.custom, where)
    if m.from_node is not None:
        fn = _deserialize_from_node(m.from_node)
        if fn is not None:
            meta["from_node"] = fn
    return meta
