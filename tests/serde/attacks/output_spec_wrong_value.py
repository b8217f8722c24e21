"""Swapped output: the signature says the first output is 'add' but the graph returns 'mul' there."""

from __future__ import annotations

from serde.bridge.errors import InconsistentProgramError
from tests.serde.attacks._attack_kit import Base, rewrite_program

ERROR = InconsistentProgramError
MATCH = r"signature\.output_specs\[0\]: describes 'add' but graph\.outputs\[0\] is 'mul'"
LOAD_ONLY = FULL_LOAD = True


def build(base: Base) -> bytes:
    def swap(p: dict) -> None:
        p["graph_module"]["signature"]["output_specs"][0]["user_output"]["arg"]["as_tensor"]["name"] = "add"
    return rewrite_program("multi_output", swap)
