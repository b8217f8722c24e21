"""Input and output files for ``pt2serde run``, without pickle.

An inputs file is a :mod:`serde.bridge.bundle` (a small JSON file holding tensors and scalars the way
an artifact stores its example inputs) whose tree is ``(args, kwargs)``; write one with
:func:`write_inputs`. A pt2serde artifact (``.pt2s``) also works as an inputs file: its example
inputs are used. Outputs are written as a bundle of the output pytree.
"""

from __future__ import annotations

import os
from typing import Any

from serde.errors import MalformedArtifactError

__all__ = ["write_inputs", "read_inputs", "write_outputs", "read_outputs"]

_ZIP_MAGIC = b"PK\x03\x04"


def write_inputs(path: str | os.PathLike, args: tuple | list, kwargs: dict | None = None) -> None:
    """Write ``(args, kwargs)`` for ``pt2serde run --inputs`` (tensors, None, bool, int, float, str,
    nested in tuples, lists, dicts and namedtuples)."""
    from serde.bridge.bundle import save_tree

    save_tree((tuple(args), dict(kwargs or {})), path)


def read_inputs(path: str | os.PathLike) -> tuple[tuple, dict]:
    """``(args, kwargs)`` from an inputs file or from an artifact's example inputs.

    Raises:
        MalformedArtifactError: the file is neither, or an artifact without example inputs.
    """
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError as e:
        raise MalformedArtifactError(f"{os.fspath(path)}: cannot read the inputs file: {e}") from None
    if head == _ZIP_MAGIC:
        from serde.archive.artifact import read_artifact
        from serde.bridge.weights import deserialize_weights

        a = read_artifact(path)
        _, _, example = deserialize_weights(a.weights, a.contents.member)
        if example is None:
            raise MalformedArtifactError(f"{os.fspath(path)}: the artifact has no example inputs; write an "
                                         "inputs file with native.io.write_inputs")
        return example
    from serde.bridge.bundle import load_tree

    tree = load_tree(path)
    if isinstance(tree, tuple) and len(tree) == 2 and isinstance(tree[0], tuple) and isinstance(tree[1], dict):
        return tree
    raise MalformedArtifactError(f"{os.fspath(path)}: an inputs file holds (args, kwargs); this one holds a "
                                 f"{type(tree).__name__}. Write it with native.io.write_inputs")


def write_outputs(path: str | os.PathLike, outputs: Any) -> None:
    from serde.bridge.bundle import save_tree

    save_tree(outputs, path)


def read_outputs(path: str | os.PathLike) -> Any:
    from serde.bridge.bundle import load_tree

    return load_tree(path)
