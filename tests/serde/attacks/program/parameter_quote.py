"""Parameter FQN with a quote: fx writes getattr(self..., "<segment>") for it, so the segment runs as code."""

from __future__ import annotations

from serde.core.errors import UnsafeNameError
from tests.serde.attacks.program._program_kit import rename

ERROR = UnsafeNameError
MATCH = r"weights\.state_dict\[.*is neither an ASCII identifier, a decimal index, nor printable ASCII text without quotes"
RUNS_CODE = True


def build(base: bytes, canary: str) -> bytes:
    return rename(base, "blocks.0.lin.weight", f'blocks.0.lin.w",open({canary!r},"w"),"')
