"""Wrong argument type: aten.linear's weight is a list of ints instead of a tensor."""

from __future__ import annotations

from serde.bridge.errors import InconsistentProgramError
from tests.serde.attacks._attack_kit import Base, nodes, rewrite_program

ERROR = InconsistentProgramError
MATCH = r"graph\.nodes\['fc2_linear'\]\.inputs\[1\]: the arguments do not fit torch\.ops\.aten\.linear\.default: .*'weight'"
LOAD_ONLY = FULL_LOAD = True


def build(base: Base) -> bytes:
    def retype(p: dict) -> None:
        nodes(p)["fc2_linear"]["inputs"][1]["arg"] = {"as_ints": [3, 4]}
    return rewrite_program("mlp", retype)
