"""Placeholder named `x=open(...)`: it becomes a default value in `def forward(...)`, evaluated on load."""

from __future__ import annotations

from serde.core.errors import UnsafeNameError
from tests.serde.attacks.program._program_kit import rename

ERROR = UnsafeNameError
MATCH = r"graph\.tensor_values\[.x=open.*is not an ASCII Python identifier"
RUNS_CODE = True


def build(base: bytes, canary: str) -> bytes:
    return rename(base, "x", f"x=open({canary!r},'w')")
