"""A node named `lambda`: a Python keyword is a SyntaxError in the generated forward."""

from __future__ import annotations

from serde.core.errors import UnsafeNameError
from tests.serde.attacks.program._program_kit import rename

ERROR = UnsafeNameError
MATCH = r"name 'lambda' is reserved"
RUNS_CODE = False


def build(base: bytes, canary: str) -> bytes:
    return rename(base, "mul", "lambda")
