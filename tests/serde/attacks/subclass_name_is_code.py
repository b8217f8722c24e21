"""Code as a class name: a subclass names "os.system('sh')" hoping the loader evaluates or resolves it."""

from __future__ import annotations

from serde.errors import MalformedArtifactError
from tests.serde.attacks._attack_kit import Base, rewrite_weights

ERROR = MalformedArtifactError
MATCH = r"weights\.state_dict\['scale'\]\.subclass\.class_name: class name \"os\.system\('sh'\)\" is not a dotted Python name"


def build(base: Base) -> bytes:
    def wrap(w: dict) -> None:
        inner = w["state_dict"]["scale"]
        w["state_dict"]["scale"] = {**inner, "storage": -1, "subclass": {
            "class_name": "os.system('sh')", "inner": {"a": inner}, "context": {"as_none": True}}}
    return rewrite_weights(base, wrap)
