"""pt2serde: save and load ``torch.export.ExportedProgram`` through a versioned, pickle-free schema.

The names in ``__all__`` are the public API, stable across moves of the modules that define them.
``import serde`` does not import torch; ``serde.save`` / ``serde.load`` and the registries do on first use.
"""

from __future__ import annotations

from serde.core.version import SCHEMA_VERSION

from .errors import (
    ForeignArtifactError,
    MalformedArtifactError,
    OperatorChangeError,
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
    "attach_weights",
    "Limits",
    "SerializeError",
    "UnsupportedConstructError",
    "SchemaVersionError",
    "MalformedArtifactError",
    "UnsafeArtifactError",
    "ForeignArtifactError",
    "UnknownOperatorError",
    "OperatorChangeError",
    "UpgradeError",
    "WeightsFileError",
    "WeightsMismatchError",
    "StructureOnlyError",
    "register_tensor_subclass",
    "unregister_tensor_subclass",
    "UnknownTensorSubclassError",
    "register_custom_object",
    "register_json_custom_object",
    "unregister_custom_object",
    "class_fqn_of",
    "UnknownCustomObjectError",
    "register_extension",
    "save_tree",
    "load_tree",
]

# name -> the module (under serde) that defines it, imported on first use.
_LAZY = {
    "save": "api", "load": "api", "attach_weights": "api", "Limits": "core.limits",
    # weights kept as safetensors files next to the artifact, and structure-only programs
    "WeightsFileError": "archive.safetensors", "WeightsMismatchError": "archive.safetensors",
    "StructureOnlyError": "api",
    # tensor subclasses that loading may rebuild
    "register_tensor_subclass": "bridge.subclasses", "unregister_tensor_subclass": "bridge.subclasses",
    "UnknownTensorSubclassError": "bridge.errors",
    # codecs for custom objects (torchbind and opaque objects)
    "register_custom_object": "bridge.custom_objects", "register_json_custom_object": "bridge.custom_objects",
    "unregister_custom_object": "bridge.custom_objects", "class_fqn_of": "bridge.custom_objects",
    "UnknownCustomObjectError": "bridge.errors",
    # call targets outside torch.ops
    "register_extension": "bridge.operators",
    # pickle-free files of tensors and scalars (inputs/outputs of `pt2serde run`, fixtures' io.json)
    "save_tree": "bridge.bundle", "load_tree": "bridge.bundle",
}


def __getattr__(name: str):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'serde' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{mod}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
