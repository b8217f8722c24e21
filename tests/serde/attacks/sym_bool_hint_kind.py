"""Symbolic condition hint kind: a SymBool's example value is stored as an int (0 where it was false); loading keeps a SymBool's stored example value, so it must be a bool."""

from __future__ import annotations

from serde.errors import MalformedArtifactError
from tests.serde.attacks._attack_kit import Base, rewrite_program

ERROR = MalformedArtifactError
MATCH = (r"graph\.sym_bool_values\['gt'\]\.as_expr\.hint: a SymBool's example value must be as_bool, "
         r"got as_int")
LOAD_ONLY = FULL_LOAD = True


def build(base: Base) -> bytes:
    def to_int(p: dict) -> None:
        hint = p["graph_module"]["graph"]["sym_bool_values"]["gt"]["as_expr"]["hint"]
        hint["as_int"] = int(hint.pop("as_bool"))
    return rewrite_program("sym_scalars", to_int)
