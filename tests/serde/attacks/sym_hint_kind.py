"""Symbolic hint kind: a SymInt's example value is stored as a float (7.0 where it was 7); torch meets that with an AssertionError deep in SymNode."""

from __future__ import annotations

from serde.errors import MalformedArtifactError
from tests.serde.attacks._attack_kit import Base, rewrite_program

ERROR = MalformedArtifactError
MATCH = (r"graph\.sym_int_values\['sym_max'\]\.as_expr\.hint: a SymInt's example value must be as_int, "
         r"got as_float")
LOAD_ONLY = FULL_LOAD = True


def build(base: Base) -> bytes:
    def to_float(p: dict) -> None:
        hint = p["graph_module"]["graph"]["sym_int_values"]["sym_max"]["as_expr"]["hint"]
        hint["as_float"] = float(hint.pop("as_int"))
    return rewrite_program("sym_scalars", to_float)
