"""forward_arg_names entry `x=open(...)`: ep.module() writes these names into `def forward(self, ...)`."""

from __future__ import annotations

from serde.core.errors import UnsafeNameError
from tests.serde.attacks.program._program_kit import rename

ERROR = UnsafeNameError
MATCH = r"module_call_graph\[0\]\.signature\.forward_arg_names\[0\]"
RUNS_CODE = False  # without the check: a SyntaxError when ep.module() compiles forward


def build(base: bytes, canary: str) -> bytes:
    return rename(base, "x", f"x=open({canary!r},'w')", where=lambda path: "forward_arg_names" in path)
