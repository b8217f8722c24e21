"""Missing output spec: the graph returns six values but the signature describes five."""

from __future__ import annotations

from serde.bridge.errors import InconsistentProgramError
from tests.serde.attacks._attack_kit import Base, rewrite_program

ERROR = InconsistentProgramError
MATCH = r"signature\.output_specs: 5 specs for 6 graph outputs"
LOAD_ONLY = FULL_LOAD = True


def build(base: Base) -> bytes:
    def drop(p: dict) -> None:
        p["graph_module"]["signature"]["output_specs"].pop()
    return rewrite_program("multi_output", drop)
