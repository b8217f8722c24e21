"""Wrong loop body: while_loop carries two values, but its body returns only one of them."""

from __future__ import annotations

from serde.bridge.errors import InconsistentProgramError
from tests.serde.attacks._attack_kit import Base, nodes, rewrite_program

ERROR = InconsistentProgramError
MATCH = r"graph\.nodes\['while_loop'\]\.inputs\[1\]: the loop body returns 1 values, expected 2"
LOAD_ONLY = FULL_LOAD = True


def build(base: Base) -> bytes:
    def shorten(p: dict) -> None:
        body = nodes(p)["while_loop"]["inputs"][1]["arg"]["as_graph"]["graph"]
        body["outputs"].pop()
    return rewrite_program("while_loop", shorten)
