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
    dots) or the tree cannot be rebuilt from its spec: such programs' inputs go by name only."""
    import torch.utils._pytree as pytree

    try:
        tree = pytree.tree_unflatten(list(range(spec.num_leaves)), spec)
        paths = [path for path, _ in pytree.tree_flatten_with_path(tree)[0]]
    except Exception:  # a registered class whose unflatten needs real leaves: no keys, names still work
        return []
    keys = []
    for path in paths:
        parts = [_segment(k) for k in path]
        if inputs:
            if not parts or parts[0] not in ("0", "1"):
                return []
            parts[0] = "args" if parts[0] == "0" else "kwargs"
        else:
            parts.insert(0, "output")
        keys.append(".".join(parts))
    return keys if len(set(keys)) == len(keys) else []
