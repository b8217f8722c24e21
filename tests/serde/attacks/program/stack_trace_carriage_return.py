"""Stack trace with a carriage return: fx prints stack traces into comments split on "\\n" only."""

from __future__ import annotations

from serde.core.errors import UnsafeNameError
from tests.serde.attacks.program._program_kit import edit_program

ERROR = UnsafeNameError
MATCH = r"graph\.nodes\[0\]\.metadata\.stack_trace: text holds the control character '\\r'"
RUNS_CODE = False


def build(base: bytes, canary: str) -> bytes:
    def change(program: dict, weights: dict) -> None:
        node = program["graph_module"]["graph"]["nodes"][0]
        node["metadata"]["stack_trace"] = (f'File "m.py", line 3, in forward\n    y = f(x)\rimport os; '
                                           f'open({canary!r}, "w")\n')
    return edit_program(base, change)
