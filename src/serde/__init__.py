"""pt2serde: save and load ``torch.export.ExportedProgram`` through a versioned, pickle-free schema.

The names in ``__all__`` are the public API, stable across moves of the modules that define them.
``import serde`` does not import torch; ``serde.save`` / ``serde.load`` and the registries do on first use.
"""

from serde.core.lazy import lazy_exports
from serde.core.version import SCHEMA_VERSION

from . import errors
from .errors import *  # noqa: F403

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

__all__ = ["SCHEMA_VERSION", *errors.__all__, *_LAZY]
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
