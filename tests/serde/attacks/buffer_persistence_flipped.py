"""Buffer persistence flipped: the non-persistent buffer 'scratch' is marked persistent, so ep.module() looks for it in the state dict, which does not hold it (a KeyError inside torch at run time)."""

from __future__ import annotations

from serde.bridge.errors import InconsistentProgramError
from tests.serde.attacks._attack_kit import Base, rewrite_program

ERROR = InconsistentProgramError
MATCH = (r"graph_module\.signature\.input_specs\[2\] \('scratch'\): a persistent buffer is stored in "
         r"weights\.state_dict, this one is in weights\.constants")
LOAD_ONLY = FULL_LOAD = True


def build(base: Base) -> bytes:
    def flip(p: dict) -> None:
        p["graph_module"]["signature"]["input_specs"][2]["buffer"]["persistent"] = True
    return rewrite_program("signature_kinds", flip)
