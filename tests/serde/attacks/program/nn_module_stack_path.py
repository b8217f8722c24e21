"""nn_module_stack path with a quote: unflatten turns these paths into submodule attributes."""

from __future__ import annotations

from serde.core.errors import UnsafeNameError
from tests.serde.attacks.program._program_kit import rename

ERROR = UnsafeNameError
MATCH = r"graph\.nodes\[0\]\.metadata\.nn_module_stack\[1\]\.path"
RUNS_CODE = False


def build(base: bytes, canary: str) -> bytes:
    return rename(base, "blocks.0", f'blocks.0",open({canary!r},"w"),"', where=lambda path: "nn_module_stack" in path)
