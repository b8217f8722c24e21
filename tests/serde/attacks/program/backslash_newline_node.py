"""Node name with a newline and a backslash: a SyntaxError, or a different statement, in the forward."""

from __future__ import annotations

from serde.core.errors import UnsafeNameError
from tests.serde.attacks.program._program_kit import rename

ERROR = UnsafeNameError
MATCH = r"is not an ASCII Python identifier"
RUNS_CODE = False  # without the check: a SyntaxError when the forward compiles


def build(base: bytes, canary: str) -> bytes:  # noqa: ARG001
    return rename(base, "mul", "m\\\nul")
