"""The key of each input and output of a native program in a safetensors file.

An input is keyed by its path in ``(args, kwargs)`` (``args.0``, ``args.1.0``, ``kwargs.scale``, dict
keys and namedtuple fields by name), an output by its path under ``output`` (``output``,
``output.0``, ``output.1.logits``). The emitter stores these keys in the program (``input_keys``,
``output_keys``) so that a runtime without pytrees (the C++ one) binds a file's tensors by key.
"""

from __future__ import annotations

from typing import Any

__all__ = ["leaf_keys"]


def _segment(k: Any) -> str:
    import torch.utils._pytree as pytree

    if isinstance(k, pytree.SequenceKey):
        return str(k.idx)
    if isinstance(k, pytree.MappingKey):
        return str(k.key)
    if isinstance(k, pytree.GetAttrKey):
        return k.name
    return str(k)


def leaf_keys(spec: Any, *, inputs: bool) -> list[str]:
    """The safetensors key of every leaf of ``spec`` (a torch TreeSpec): of ``(args, kwargs)`` when
    ``inputs``, else of an output tree. ``[]`` when the keys would not be distinct (dict keys with
    dots) or a registered class's subtree cannot be rebuilt from its spec: such programs' inputs go
    by name only."""
    paths = _paths(spec)
    if paths is None:
        return []
    keys = []
    for parts in paths:
        parts = list(parts)
        if inputs:
            if not parts or parts[0] not in ("0", "1"):
                return []
            parts[0] = "args" if parts[0] == "0" else "kwargs"
        else:
            parts.insert(0, "output")
        keys.append(".".join(parts))
    return keys if len(set(keys)) == len(keys) else []


def _paths(spec: Any) -> list[tuple[str, ...]] | None:
    """The path of each leaf of ``spec``, in leaf order; ``None`` when a registered class's subtree
    cannot be rebuilt from placeholder leaves."""
    import collections

    import torch.utils._pytree as pytree

    if spec.is_leaf():
        return [()]
    t, ctx = spec.type, spec.context
    if t in (tuple, list):
        names = [str(i) for i in range(spec.num_children)]
    elif t in (dict, collections.OrderedDict):
        names = [str(k) for k in ctx]
    elif t is collections.defaultdict:
        names = [str(k) for k in ctx[1]]
    elif t is pytree.namedtuple or isinstance(ctx, type) and issubclass(ctx, tuple) and hasattr(ctx, "_fields"):
        names = list(ctx._fields)
    else:
        return _registered_paths(spec)
    if len(names) != spec.num_children:  # a context that does not name every child: no keys to give
        return None
    out: list[tuple[str, ...]] = []
    for name, child in zip(names, spec.children(), strict=True):
        sub = _paths(child)
        if sub is None:
            return None
        out += [(name, *rest) for rest in sub]
    return out


def _registered_paths(spec: Any) -> list[tuple[str, ...]] | None:
    """Paths under a class registered with torch's pytree, whose keys only its own flatten-with-keys
    function knows: rebuild it from placeholder leaves and ask."""
    import torch.utils._pytree as pytree

    try:
        tree = pytree.tree_unflatten(list(range(spec.num_leaves)), spec)
        found = pytree.tree_flatten_with_path(tree)[0]
    # What a class's own unflatten or flatten-with-keys raises when its leaves are ints rather than
    # the tensors it expects; anything else is a bug and surfaces.
    except (TypeError, ValueError, AttributeError, KeyError, IndexError, AssertionError):
        return None
    return [tuple(_segment(k) for k in path) for path, _ in found]
