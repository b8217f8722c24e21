"""Swapped input: the signature maps a parameter onto the placeholder of the user input x."""

from __future__ import annotations

from serde.bridge.errors import InconsistentProgramError
from tests.serde.attacks._attack_kit import Base, rewrite_program

ERROR = InconsistentProgramError
MATCH = r"signature\.input_specs\[0\]: describes 'x' but graph\.inputs\[0\] is 'p_fc1_weight'"
LOAD_ONLY = FULL_LOAD = True


def build(base: Base) -> bytes:
    def swap(p: dict) -> None:
        p["graph_module"]["signature"]["input_specs"][0]["parameter"]["arg"]["name"] = "x"
    return rewrite_program("mlp", swap)
