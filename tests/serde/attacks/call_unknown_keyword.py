"""Unknown keyword: a call passes a keyword argument its operator does not have."""

from __future__ import annotations

from serde.bridge.errors import InconsistentProgramError
from tests.serde.attacks._attack_kit import Base, nodes, rewrite_program

ERROR = InconsistentProgramError
MATCH = r"graph\.nodes\['fc3_linear'\]\.inputs\[2\]: torch\.ops\.aten\.linear\.default has no argument 'scale'"
LOAD_ONLY = FULL_LOAD = True


def build(base: Base) -> bytes:
    def rename(p: dict) -> None:
        bias = nodes(p)["fc3_linear"]["inputs"][2]
        bias["name"], bias["kind"] = "scale", 2
    return rewrite_program("mlp", rename)
