"""A parameter renamed `Self`: fx names its get_attr node `self`, which shadows the generated forward's
`self`, so every later `self.<attr>` in ep.module() reads the tensor (torch's own load breaks the same way)."""

from __future__ import annotations

from serde.core.errors import UnsafeNameError
from tests.serde.attacks.program._program_kit import rename

ERROR = UnsafeNameError
MATCH = (r"weights\.state_dict\['Self'\]: FQN 'Self' gives the node torch\.fx generates for it the name 'self', "
         r"which shadows the generated forward's 'self'")
RUNS_CODE = False


def build(base: bytes, canary: str) -> bytes:
    return rename(base, "blocks.0.lin.weight", "Self")
