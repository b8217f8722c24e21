"""Example inputs vs in_spec: the program takes x positionally, the stored example inputs pass it by keyword."""

from __future__ import annotations

from serde.bridge.errors import InconsistentProgramError
from tests.serde.attacks._attack_kit import Base, rewrite_program

ERROR = InconsistentProgramError
MATCH = (r"weights\.example_inputs: not the pytree structure the program takes .*"
         r"module_call_graph\[0\]\.signature\.in_spec\) \(Ran into a kwarg keyword mismatch")
LOAD_ONLY = FULL_LOAD = True


def build(base: Base) -> bytes:
    # Both specs still hold one leaf, so every count check passes; only the structure differs,
    # which torch would report when the program is run on its own example inputs.
    def by_keyword(w: dict) -> None:
        spec = w["example_inputs"]["spec"]
        spec["children"] = [{"type": "tuple", "children": []},
                            {"type": "dict", "context": '["x"]', "children": [{"type": "*"}]}]
    return rewrite_program("mlp", by_keyword, member="weights.json")
