"""Reordered loop results: while_loop's body returns its two carried values swapped, an int64 counter where the loop carries a float32 [5] tensor; the loop condition then failed at run time."""

from __future__ import annotations

from serde.bridge.errors import InconsistentProgramError
from tests.serde.attacks._attack_kit import Base, nodes, rewrite_program

ERROR = InconsistentProgramError
MATCH = (r"graph\.nodes\['while_loop'\]\.inputs\[1\]: carried value 0 is torch\.int64 \[\] on one side and "
         r"torch\.float32 \[5\] on the other")
LOAD_ONLY = FULL_LOAD = True


def build(base: Base) -> bytes:
    def swap(p: dict) -> None:
        outputs = nodes(p)["while_loop"]["inputs"][1]["arg"]["as_graph"]["graph"]["outputs"]
        outputs[0]["as_tensor"]["name"], outputs[1]["as_tensor"]["name"] = \
            outputs[1]["as_tensor"]["name"], outputs[0]["as_tensor"]["name"]
    return rewrite_program("while_loop", swap)
