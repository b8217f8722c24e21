"""Unregistered subclass: a tensor claims the class this.Zen, so a naive loader imports a module (running its code)."""

from __future__ import annotations

from serde.bridge.errors import UnknownTensorSubclassError
from tests.serde.attacks._attack_kit import Base, rewrite_weights

ERROR = UnknownTensorSubclassError
MATCH = (r"(?s)weights\.state_dict\['scale'\]: the tensor subclass 'this\.Zen' is not registered in this process.*"
         r"serde\.register_tensor_subclass")
LOAD_ONLY = True  # the name is well formed: only loading asks the registry (`pt2serde check` never builds tensors)


def build(base: Base) -> bytes:
    def wrap(w: dict) -> None:
        inner = w["state_dict"]["scale"]
        w["state_dict"]["scale"] = {**inner, "storage": -1, "subclass": {
            "class_name": "this.Zen", "inner": {"a": inner}, "context": {"as_none": True}}}
    return rewrite_weights(base, wrap)
