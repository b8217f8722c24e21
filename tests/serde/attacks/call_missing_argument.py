"""Missing argument: a call stores fewer arguments than its operator requires (aten.linear without its weight)."""

from __future__ import annotations

from serde.bridge.errors import InconsistentProgramError
from tests.serde.attacks._attack_kit import Base, nodes, rewrite_program

ERROR = InconsistentProgramError
MATCH = r"graph\.nodes\['fc1_linear'\]: torch\.ops\.aten\.linear\.default requires argument 'weight'"
LOAD_ONLY = FULL_LOAD = True


def build(base: Base) -> bytes:
    def drop(p: dict) -> None:
        del nodes(p)["fc1_linear"]["inputs"][1:]
    return rewrite_program("mlp", drop)
