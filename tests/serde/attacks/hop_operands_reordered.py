"""Reordered subgraph inputs: cond's true branch takes its first and last inputs swapped, so the [s0, 6] input lands where the branch was traced with the [6, 6] weight; the call failed to broadcast at run time."""

from __future__ import annotations

from serde.bridge.errors import InconsistentProgramError
from tests.serde.attacks._attack_kit import Base, nodes, rewrite_program

ERROR = InconsistentProgramError
MATCH = (r"graph\.nodes\['cond'\]\.inputs\[1\]: operand 0 is torch\.float32 \[s0, 6\] on one side and "
         r"torch\.float32 \[6, 6\] on the other")
LOAD_ONLY = FULL_LOAD = True


def build(base: Base) -> bytes:
    def swap(p: dict) -> None:
        inputs = nodes(p)["cond"]["inputs"][1]["arg"]["as_graph"]["graph"]["inputs"]
        inputs[0]["as_tensor"]["name"], inputs[3]["as_tensor"]["name"] = \
            inputs[3]["as_tensor"]["name"], inputs[0]["as_tensor"]["name"]
    return rewrite_program("cond", swap)
