"""Subgraph attribute name with a quote: fx reaches submodules through getattr(self, "<name>")."""

from __future__ import annotations

from serde.core.errors import UnsafeNameError
from tests.serde.attacks.program._program_kit import rename

ERROR = UnsafeNameError
MATCH = r"subgraph\[0\]\.name: attribute name"
RUNS_CODE = False
BASE = "cond"


def build(base: bytes, canary: str) -> bytes:
    return rename(base, "true_graph_0", f'g",open({canary!r},"w"),"')
