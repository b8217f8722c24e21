"""Node metadata in canonical form, and the debug-only part kept apart from it.

Debug-only (removed from the canonical program, returned in :class:`DebugInfo` on request):
``stack_trace`` (absolute paths, line numbers) and ``from_node`` (pass names and per-process graph
ids). ``DebugInfo.module_types`` is read back from artifacts written before module types were kept
in the program, and no longer written.

Semantic (kept, made stable):

- ``nn_module_stack`` keys, paths and module types. ``torch.export.unflatten`` uses keys and
  paths; pt2e quantizers and partitioners select nodes by module type (a qualified class name,
  ``torch.nn.modules.linear.Linear``: no path, so the same in every process). Strict export keys a
  frame by ``id(module)``, which differs per process; such a key becomes ``L__self__<path>`` (what
  non-strict export writes), keeping its ``@<call index>`` suffix.
- ``source_fn_stack`` and ``torch_fn``: their names only group nodes that came from one call
  (``get_source_partitions`` relies on that) but are numbered in tracing order, so each distinct
  name is replaced by the canonical name of the first node (canonical order) that carries it.
- ``custom`` as stored (already JSON with sorted keys).
"""

from __future__ import annotations

import json

import msgspec

from serde.core import schema

from .names import sanitize
from .order import EMPTY_STACK_KEY

__all__ = ["NodeDebug", "DebugInfo", "ModuleKeys", "Labels", "frame_of", "scope_of", "frames_and_scopes",
           "canonical_metadata", "with_debug", "debug_info"]


# The wire form of debug.json lives in the schema; these names stay for existing callers.
NodeDebug = schema.NodeDebug
DebugInfo = schema.DebugInfo


def frame_of(m: schema.NodeMetadata) -> tuple[str, ...] | None:
    """Module-call frame of a node (its stack keys, outermost first), None when unknown."""
    stack = m.nn_module_stack
    if not stack or all(e.key == EMPTY_STACK_KEY for e in stack):
        return None
    return tuple(e.key for e in stack)


def scope_of(m: schema.NodeMetadata) -> str:
    """Sanitized path of the innermost module a node runs in ("" at the root or when unknown)."""
    stack = m.nn_module_stack
    if not stack or stack[-1].key == EMPTY_STACK_KEY or not stack[-1].path:
        return ""
    return sanitize(stack[-1].path)


def frames_and_scopes(metas: list[schema.NodeMetadata]) -> tuple[list[tuple[str, ...] | None], list[str]]:
    """``frame_of`` and ``scope_of`` of every node; once per stack list that several nodes share."""
    frames: list[tuple[str, ...] | None] = []
    scopes: list[str] = []
    seen: dict[int, tuple[tuple[str, ...] | None, str]] = {}  # id(stack list) -> both (the metas keep it alive)
    for m in metas:
        stack = m.nn_module_stack
        both = seen.get(id(stack)) if stack is not None else None
        if both is None:
            both = (frame_of(m), scope_of(m))
            if stack is not None:
                seen[id(stack)] = both
        frames.append(both[0])
        scopes.append(both[1])
    return frames, scopes


class ModuleKeys:
    """Program-wide map from stored ``nn_module_stack`` keys to stable ones."""

    def __init__(self) -> None:
        self._bases: dict[str, str] = {}
        self._taken: set[str] = set()
        # (stored key, path, type) -> canonical entry: nodes of one module share their stack entries
        self.entries: dict[tuple[str, str, str | None], schema.ModuleStackEntry] = {}
        # id(stored stack list) -> (the stored list, canonical list): nodes that share a stored
        # stack share the canonical one (the stored list is kept so its id stays its own)
        self.stacks: dict[int, tuple[list, list[schema.ModuleStackEntry]]] = {}

    def key(self, key: str, path: str) -> str:
        base, at, call = key.partition("@")
        new = self._bases.get(base)
        if new is None:
            new = f"L__self__{path}" if base.isdigit() else base
            cand, k = new, 0
            while cand in self._taken:
                k += 1
                cand = f"{new}_{k}"
            self._bases[base] = cand
            self._taken.add(cand)
            new = cand
        return new + at + call


class Labels:
    """Per-graph maps from stored source-function names to canonical ones."""

    def __init__(self) -> None:
        self._maps: dict[str, dict[str, str]] = {"source_fn": {}, "torch_fn": {}}
        self._taken: dict[str, set[str]] = {"source_fn": set(), "torch_fn": set()}

    def label(self, field: str, name: str, node_name: str) -> str:
        m = self._maps[field]
        new = m.get(name)
        if new is None:
            taken = self._taken[field]
            new, k = node_name, 0
            while new in taken:
                k += 1
                new = f"{node_name}_{k}"
            m[name] = new
            taken.add(new)
        return new


_SourceFn, _NodeMetadata = schema.SourceFn, schema.NodeMetadata  # (looked up once per node otherwise)


def canonical_metadata(m: schema.NodeMetadata, node_name: str, keys: ModuleKeys, labels: Labels,
                       want_debug: bool = True) -> tuple[schema.NodeMetadata, NodeDebug | None]:
    """(canonical metadata, debug-only part or None) of one node; the debug part is always None
    without ``want_debug``."""
    stack = None
    stored = m.nn_module_stack
    if stored is not None:
        known = keys.stacks.get(id(stored))
        if known is not None:
            stack = known[1]
        else:
            stack = []
            entries = keys.entries
            for e in stored:
                new = entries.get((e.key, e.path, e.type_name))
                if new is None:
                    k = keys.key(e.key, e.path) if e.key != EMPTY_STACK_KEY else e.key
                    new = entries[(e.key, e.path, e.type_name)] = schema.ModuleStackEntry(
                        key=k, path=e.path, type_name=e.type_name)
                stack.append(new)
            keys.stacks[id(stored)] = (stored, stack)
    sfs = None
    if m.source_fn_stack is not None:
        sfs = [schema.SourceFn(name=labels.label("source_fn", s.name, node_name), target=s.target)
               for s in m.source_fn_stack]
    tfn = m.torch_fn
    if tfn is not None:
        tfn = _SourceFn(name=labels.label("torch_fn", tfn.name, node_name), target=tfn.target)
    meta = _NodeMetadata(nn_module_stack=stack, source_fn_stack=sfs, torch_fn=tfn, custom=m.custom)
    if not want_debug or (m.stack_trace is None and m.from_node is None):
        return meta, None
    return meta, NodeDebug(stack_trace=m.stack_trace, from_node=m.from_node)


def with_debug(m: schema.NodeMetadata, d: NodeDebug) -> schema.NodeMetadata:
    """Canonical metadata ``m`` with debug-only fields ``d`` put back."""
    stack = m.nn_module_stack
    if stack is not None and d.module_types:
        # an artifact written before module types were part of the program keeps them here; a
        # type the program holds wins
        stack = [schema.ModuleStackEntry(key=e.key, path=e.path,
                                         type_name=e.type_name if e.type_name is not None
                                         else d.module_types.get(e.key))
                 for e in stack]
    return schema.NodeMetadata(
        stack_trace=d.stack_trace, nn_module_stack=stack, source_fn_stack=m.source_fn_stack,
        torch_fn=m.torch_fn, custom=m.custom, from_node=d.from_node,
    )


def debug_info(nodes: dict[str, NodeDebug]) -> DebugInfo:
    """The debug part of a program, nodes in name order, the same bytes in every process.

    torch's provenance (``from_node``) names each graph a node passed through by ``id(graph)``,
    an address that differs from process to process. Each distinct id becomes its ordinal in order
    of first appearance (nodes in name order), which keeps what the ids tell a reader: which nodes
    came through the same graph. Ordinals map to themselves, so this is idempotent.
    """
    ids: dict[int, int] = {}
    out = {}
    for name in sorted(nodes):
        d = nodes[name]
        if d.from_node is not None:
            text = _renumber_graph_ids(d.from_node, ids)
            if text != d.from_node:
                d = msgspec.structs.replace(d, from_node=text)
        out[name] = d
    return DebugInfo(nodes=out)


# Provenance nests one level per pass a node went through; deeper text is left as it is.
_MAX_PROVENANCE_DEPTH = 64


def _renumber_graph_ids(text: str, ids: dict[int, int]) -> str:
    """``text`` (from_node JSON) with every integer ``graph_id`` replaced by its ordinal in ``ids``."""
    try:
        items = json.loads(text)
    except (ValueError, RecursionError):
        return text  # debug-only text that is not JSON stays as stored
    if not _renumber(items, ids, 0):
        return text
    return json.dumps(items, sort_keys=True, separators=(",", ":"))


def _renumber(v: object, ids: dict[int, int], depth: int) -> bool:
    """Renumber in place; False when ``v`` nests deeper than the cap (then nothing is kept)."""
    if depth > _MAX_PROVENANCE_DEPTH:
        return False
    if isinstance(v, dict):
        g = v.get("graph_id")
        if type(g) is int:
            v["graph_id"] = ids.setdefault(g, len(ids))
        return all(_renumber(x, ids, depth + 1) for x in v.values() if isinstance(x, (dict, list)))
    if isinstance(v, list):
        return all(_renumber(x, ids, depth + 1) for x in v if isinstance(x, (dict, list)))
    return True
