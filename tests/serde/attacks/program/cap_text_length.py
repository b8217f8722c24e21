"""A 2 MiB stack trace: metadata text fx may print is bounded by Limits.max_text_chars."""

from __future__ import annotations

from serde.core.errors import NameTooLongError
from tests.serde.attacks.program._program_kit import edit_program

ERROR = NameTooLongError
MATCH = r"graph\.nodes\[0\]\.metadata\.stack_trace: the text length is 2097152, more than Limits\.max_text_chars"
RUNS_CODE = False


def build(base: bytes, canary: str) -> bytes:
    def change(program: dict, weights: dict) -> None:
        program["graph_module"]["graph"]["nodes"][0]["metadata"]["stack_trace"] = "x" * (2 << 20)
    return edit_program(base, change)
