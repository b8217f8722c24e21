"""Small generic helpers for upgrader steps. Every helper is pure: it returns new objects and never
modifies its arguments, so a step built from them is pure too.

Typical step body::

    def upgrade(docs):
        program = map_values_at(docs["program"], has_keys("expr_str"), _convert, with_path=True)
        return {**docs, "program": program}
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from serde.errors import UpgradeError

__all__ = [
    "rename_field",
    "add_default",
    "drop_field",
    "map_values_at",
    "has_keys",
    "format_path",
]


def rename_field(obj: dict[str, Any], old: str, new: str) -> dict[str, Any]:
    """Copy of ``obj`` with key ``old`` renamed to ``new`` (same position). Absent ``old``: a plain copy.

    Raises:
        UpgradeError: both ``old`` and ``new`` are present (the rename would lose data).
    """
    if old not in obj:
        return dict(obj)
    if new in obj and new != old:
        raise UpgradeError(f"cannot rename field {old!r} to {new!r}: both are present in the object")
    return {(new if k == old else k): v for k, v in obj.items()}


def add_default(obj: dict[str, Any], name: str, value: Any) -> dict[str, Any]:
    """Copy of ``obj`` with ``name`` set to (a fresh copy of) ``value`` unless it is already present."""
    out = dict(obj)
    if name not in out:
        out[name] = copy.deepcopy(value)
    return out


def drop_field(obj: dict[str, Any], name: str) -> dict[str, Any]:
    """Copy of ``obj`` without key ``name`` (absent: a plain copy)."""
    return {k: v for k, v in obj.items() if k != name}


def has_keys(*keys: str) -> Callable[[dict[str, Any]], bool]:
    """Predicate for :func:`map_values_at`: the dict has every one of ``keys``."""
    want = frozenset(keys)
    return lambda d: want.issubset(d)


def map_values_at(
    tree: Any,
    predicate: Callable[[dict[str, Any]], bool],
    fn: Callable[..., Any],
    *,
    with_path: bool = False,
) -> Any:
    """New copy of ``tree`` (nested dicts/lists) where every dict matching ``predicate`` is replaced
    by ``fn(d)`` (``fn(d, path)`` with ``with_path``, path like ``graph.nodes[3].inputs[1]``).

    The walk is top-down and iterative (no recursion limit). A replacement's children are walked
    too, so matches nested inside a match (subgraphs in graphs) are all mapped; the replacement
    itself is not tested again. Every dict and list in the result is new; leaves are shared.
    """
    holder: list[Any] = [None]
    # (container, key, value, path) with path a parent-linked (parent, key) chain: O(1) per entry.
    stack: list[tuple[Any, Any, Any, Any]] = [(holder, 0, tree, None)]
    while stack:
        container, key, value, path = stack.pop()
        if isinstance(value, dict) and predicate(value):
            value = fn(value, format_path(path)) if with_path else fn(value)
        if isinstance(value, dict):
            new: Any = dict(value)
            for k, v in value.items():
                if isinstance(v, (dict, list)):
                    stack.append((new, k, v, (path, k)))
        elif isinstance(value, list):
            new = list(value)
            for i, v in enumerate(value):
                if isinstance(v, (dict, list)):
                    stack.append((new, i, v, (path, i)))
        else:
            new = value
        container[key] = new
    return holder[0]


def format_path(path: Any) -> str:
    """``(((None, "graph"), "nodes"), 3)`` -> ``graph.nodes[3]``; the root is ``<root>``."""
    parts: list[Any] = []
    while path is not None:
        path, key = path
        parts.append(key)
    out = ""
    for key in reversed(parts):
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else str(key))
    return out or "<root>"
