"""pt2serde: save and load ``torch.export.ExportedProgram`` through a versioned, pickle-free schema.

``import serde`` does not import torch; ``serde.save`` / ``serde.load`` do on first use.
"""

from __future__ import annotations

from serde.core.version import SCHEMA_VERSION

from .errors import (
    ForeignArtifactError,
    MalformedArtifactError,
    SchemaVersionError,
    SerializeError,
    UnknownOperatorError,
    UnsafeArtifactError,
    UnsupportedConstructError,
    UpgradeError,
)

__all__ = [
    "SCHEMA_VERSION",
    "save",
    "load",
    "Limits",
    "SerializeError",
    "UnsupportedConstructError",
    "SchemaVersionError",
    "MalformedArtifactError",
    "UnsafeArtifactError",
    "ForeignArtifactError",
    "UnknownOperatorError",
    "UpgradeError",
    "register_tensor_subclass",
    "unregister_tensor_subclass",
    "UnknownTensorSubclassError",
]

_LAZY = {"save": "api", "load": "api", "Limits": "core.limits", "register_tensor_subclass": "bridge.subclasses",
         "unregister_tensor_subclass": "bridge.subclasses", "UnknownTensorSubclassError": "bridge.subclasses"}


def __getattr__(name: str):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'serde' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{mod}", __name__), name)
    globals()[name] = value
    return value
