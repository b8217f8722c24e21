"""A user input renamed `getattr`: the forward's parameter shadows the builtin fx's code calls raw
(`getattr(self.blocks, "0").lin.weight`), so ep.module() calls the input tensor."""

from __future__ import annotations

from serde.core.errors import UnsafeNameError
from tests.serde.attacks.program._program_kit import rename

ERROR = UnsafeNameError
MATCH = r"graph\.tensor_values\['getattr'\]: name 'getattr' is reserved"
RUNS_CODE = False


def build(base: bytes, canary: str) -> bytes:
    return rename(base, "x", "getattr")
