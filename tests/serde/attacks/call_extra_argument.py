"""Extra argument: aten.relu (one input) is called with two, which torch would only notice when it runs."""

from __future__ import annotations

from serde.bridge.errors import InconsistentProgramError
from tests.serde.attacks._attack_kit import Base, nodes, rewrite_program

ERROR = InconsistentProgramError
MATCH = r"graph\.nodes\['relu'\]\.inputs\[1\]: torch\.ops\.aten\.relu\.default takes at most 1 positional arguments"
LOAD_ONLY = FULL_LOAD = True


def build(base: Base) -> bytes:
    def extra(p: dict) -> None:
        relu = nodes(p)["relu"]
        relu["inputs"].append(dict(relu["inputs"][0], name="other"))
    return rewrite_program("mlp", extra)
