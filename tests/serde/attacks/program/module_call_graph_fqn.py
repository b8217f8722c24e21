"""Module call graph FQN with a quote: torch.export.unflatten builds submodules and code from it."""

from __future__ import annotations

from serde.core.errors import UnsafeNameError
from tests.serde.attacks.program._program_kit import rename

ERROR = UnsafeNameError
MATCH = r"module_call_graph\[2\]\.fqn: FQN"
RUNS_CODE = False


def build(base: bytes, canary: str) -> bytes:
    return rename(base, "blocks.0", f'blocks.0",open({canary!r},"w"),"',
                  where=lambda path: "module_call_graph" in path)
