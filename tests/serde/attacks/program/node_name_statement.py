"""Node name that is an expression: fx writes `<name> = torch.ops...` and `f(<name>)` into the forward."""

from __future__ import annotations

from serde.core.errors import UnsafeNameError
from tests.serde.attacks.program._program_kit import rename

ERROR = UnsafeNameError
MATCH = r"graph\.tensor_values\[.\[open.*is not an ASCII Python identifier"
RUNS_CODE = False  # torch 2.13 re-sanitizes node names when ExportedProgram copies the graph


def build(base: bytes, canary: str) -> bytes:
    return rename(base, "mul", f'[open({canary!r},"w"),mul][1]')
