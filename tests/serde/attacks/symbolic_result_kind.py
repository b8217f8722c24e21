"""Symbolic result kind: floordiv(size, 2) becomes floordiv(size, 2.0), which computes a float where the node still stores a SymInt; aten.zeros then got a float size at run time."""

from __future__ import annotations

from serde.bridge.errors import InconsistentProgramError
from tests.serde.attacks._attack_kit import Base, nodes, rewrite_program

ERROR = InconsistentProgramError
MATCH = (r"graph\.nodes\['floordiv'\]\.outputs: _operator\.floordiv of \(int, float\) computes float, "
         r"the node stores as_sym_int")
LOAD_ONLY = FULL_LOAD = True


def build(base: Base) -> bytes:
    def to_float(p: dict) -> None:
        nodes(p)["floordiv"]["inputs"][1]["arg"] = {"as_float": 2.0}
    return rewrite_program("dynamic_arith", to_float)
