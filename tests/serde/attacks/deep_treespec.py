"""Deep pytree spec: the output spec nests 150 one-element tuples, to exhaust pytree's recursion."""

from __future__ import annotations

from serde.errors import MalformedArtifactError
from tests.serde.attacks._attack_kit import Base, rewrite_program

ERROR = MalformedArtifactError
MATCH = r"module_call_graph\[0\] \(''\)\.out_spec(\.children\[0\])+: the pytree spec nests deeper than 100 levels"
LOAD_ONLY = FULL_LOAD = True


def build(base: Base) -> bytes:
    def nest(p: dict) -> None:
        sig = p["graph_module"]["module_call_graph"][0]["signature"]
        spec = sig["out_spec"]
        for _ in range(150):
            spec = {"type": "tuple", "children": [spec]}
        sig["out_spec"] = spec
    return rewrite_program("mlp", nest)
