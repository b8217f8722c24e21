"""Wrong HOP operands: cond passes its branches one operand fewer than they take."""

from __future__ import annotations

from serde.bridge.errors import InconsistentProgramError
from tests.serde.attacks._attack_kit import Base, nodes, rewrite_program

ERROR = InconsistentProgramError
MATCH = r"graph\.nodes\['cond'\]\.inputs\[1\]: the branch in inputs\[1\] takes 4 inputs but the call passes 3 operands"
LOAD_ONLY = FULL_LOAD = True


def build(base: Base) -> bytes:
    def drop(p: dict) -> None:
        nodes(p)["cond"]["inputs"][3]["arg"]["as_tensors"].pop()
    return rewrite_program("cond", drop)
