"""Pytree spec vs signature: the root module's in_spec takes two positional inputs, the program one."""

from __future__ import annotations

from serde.bridge.errors import InconsistentProgramError
from tests.serde.attacks._attack_kit import Base, rewrite_program

ERROR = InconsistentProgramError
MATCH = r"module_call_graph\[0\] \(''\)\.in_spec: the pytree spec holds 2 leaves but the signature has 1"
LOAD_ONLY = FULL_LOAD = True


def build(base: Base) -> bytes:
    def grow(p: dict) -> None:
        spec = p["graph_module"]["module_call_graph"][0]["signature"]["in_spec"]
        spec["children"][0]["children"].append({"type": "*"})
    return rewrite_program("mlp", grow)
