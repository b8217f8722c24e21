"""Weight target missing: the non-persistent buffer's spec names 'add_rrwtb', a value no weight table holds; torch's verifier let it through and ep.module() failed with a KeyError."""

from __future__ import annotations

from serde.bridge.errors import InconsistentProgramError
from tests.serde.attacks._attack_kit import Base, rewrite_program

ERROR = InconsistentProgramError
MATCH = (r"graph_module\.signature\.input_specs\[2\] \('add_rrwtb'\): a non-persistent buffer is stored in "
         r"weights\.constants, this one is in neither")
LOAD_ONLY = FULL_LOAD = True


def build(base: Base) -> bytes:
    def rename(p: dict) -> None:
        p["graph_module"]["signature"]["input_specs"][2]["buffer"]["buffer_name"] = "add_rrwtb"
    return rewrite_program("signature_kinds", rename)
