"""Empty range: a symbol's range constraint has its minimum above its maximum."""

from __future__ import annotations

from serde.errors import MalformedArtifactError
from tests.serde.attacks._attack_kit import Base, rewrite_program

ERROR = MalformedArtifactError
MATCH = r"range_constraints\['s0'\]: \[64, 2\] is not a valid range: its minimum exceeds its maximum"
LOAD_ONLY = FULL_LOAD = True


def build(base: Base) -> bytes:
    def invert(p: dict) -> None:
        rc = next(r for r in p["range_constraints"] if r["expr"] == {"symbol": "s0"})
        rc["min_val"], rc["max_val"] = 64, 2
    return rewrite_program("dynamic_arith", invert)
