"""Pytrees of tensors and scalars as one small, pickle-free JSON file.

Used for the expected outputs of frozen fixtures and for ``pt2serde run --inputs``. The tree is
stored exactly like an artifact's example inputs (a :class:`serde.core.schema.Weights` whose
``example_inputs`` holds it); payload bytes travel inline as base64 and are checked against their
sha256 on load. Meant for inputs and outputs, not for large weights.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

import msgspec

from serde.archive import payload_name, write_atomic
from serde.core import schema, wire
from serde.errors import MalformedArtifactError

__all__ = ["save_tree", "load_tree", "dumps_tree", "loads_tree", "MAX_BUNDLE_BYTES"]

FORMAT = "pt2serde-bundle"
VERSION = 1
MAX_BUNDLE_BYTES = 1 << 30


class Bundle(msgspec.Struct, kw_only=True, frozen=True):
    format: str
    version: int
    weights: schema.Weights
    payloads: dict[str, bytes]  # sha256 -> raw little-endian bytes (base64 in JSON)


def dumps_tree(tree: Any) -> bytes:
    """Encode a pytree (tensors, None, bool, int, float, str in tuples/lists/dicts/namedtuples)."""
    from .weights import serialize_weights

    weights, payloads = serialize_weights({}, {}, ((tree,), {}))
    blobs = {name.removeprefix("data/"): bytes(data) for name, data in payloads.items()}
    return wire.encode(Bundle(format=FORMAT, version=VERSION, weights=weights, payloads=blobs))


def loads_tree(data: bytes, *, where: str = "bundle") -> Any:
    """Inverse of :func:`dumps_tree`."""
    from .weights import deserialize_weights

    if len(data) > MAX_BUNDLE_BYTES:
        raise MalformedArtifactError(f"{where}: {len(data)} bytes exceeds the {MAX_BUNDLE_BYTES}-byte bundle cap")
    b = wire.decode(data, Bundle, where=where)
    if b.format != FORMAT or b.version != VERSION:
        raise MalformedArtifactError(
            f"{where}: not a pt2serde bundle version {VERSION} (format {b.format!r}, version {b.version})")
    for sha, blob in b.payloads.items():
        if hashlib.sha256(blob).hexdigest() != sha:
            raise MalformedArtifactError(f"{where}: payload {sha[:16]}... does not match its sha256")
    views = {payload_name(sha): memoryview(bytearray(blob)) for sha, blob in b.payloads.items()}

    def member(name: str) -> memoryview:
        try:
            return views[name]
        except KeyError:
            raise MalformedArtifactError(f"{where}: missing payload {name!r}") from None

    _, _, example = deserialize_weights(b.weights, member)
    if example is None or len(example[0]) != 1:
        raise MalformedArtifactError(f"{where}: holds no tree")
    return example[0][0]


def save_tree(tree: Any, path: str | os.PathLike) -> None:
    """Write a pytree to ``path`` atomically (see :func:`serde.archive.write_atomic`).

    Raises:
        ArtifactIOError: the OS refused the write; nothing changed at ``path``.
    """
    write_atomic(path, [dumps_tree(tree)])


def load_tree(path: str | os.PathLike) -> Any:
    """Read a pytree written by :func:`save_tree`."""
    with open(path, "rb") as f:
        data = f.read(MAX_BUNDLE_BYTES + 1)
    return loads_tree(data, where=os.fspath(path))
