"""A node named `torch`: the local would shadow the `torch` every later line of the forward calls through."""

from __future__ import annotations

from serde.core.errors import UnsafeNameError
from tests.serde.attacks.program._program_kit import rename

ERROR = UnsafeNameError
MATCH = r"name 'torch' is reserved"
RUNS_CODE = False


def build(base: bytes, canary: str) -> bytes:
    return rename(base, "mul", "torch")
