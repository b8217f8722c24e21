"""A buffer renamed to `forward`: registering it replaces the module's forward or breaks construction."""

from __future__ import annotations

from serde.core.errors import UnsafeNameError
from tests.serde.attacks.program._program_kit import rename

ERROR = UnsafeNameError
MATCH = r"weights\.state_dict\['forward'\]: FQN 'forward' uses 'forward', which is reserved"
RUNS_CODE = False


def build(base: bytes, canary: str) -> bytes:
    return rename(base, "scale", "forward")
