"""Buffer FQN that concatenates a call into the attribute string fx generates: "+str(open(...))+"."""

from __future__ import annotations

from serde.core.errors import UnsafeNameError
from tests.serde.attacks.program._program_kit import rename

ERROR = UnsafeNameError
MATCH = r"weights\.state_dict\[.*FQN .* has segment"
RUNS_CODE = True


def build(base: bytes, canary: str) -> bytes:
    return rename(base, "scale", f's"+str(open({canary!r},"w"))+"y')
