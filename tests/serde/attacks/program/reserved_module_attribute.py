"""A parameter path through `_modules`: it would overwrite nn.Module bookkeeping instead of adding a weight."""

from __future__ import annotations

from serde.core.errors import UnsafeNameError
from tests.serde.attacks.program._program_kit import rename

ERROR = UnsafeNameError
MATCH = r"uses '_modules', which is reserved"
RUNS_CODE = False


def build(base: bytes, canary: str) -> bytes:
    return rename(base, "blocks.0.lin.bias", "_modules.lin.bias")
