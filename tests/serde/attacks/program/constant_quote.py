"""Tensor-constant FQN with a quote, reaching the same getattr(...) code as a parameter."""

from __future__ import annotations

from serde.core.errors import UnsafeNameError
from tests.serde.attacks.program._program_kit import rename

ERROR = UnsafeNameError
MATCH = r"weights\.constants\[.*FQN .* has segment"
RUNS_CODE = True


def build(base: bytes, canary: str) -> bytes:
    return rename(base, "offset", f'o",open({canary!r},"w"),"')
