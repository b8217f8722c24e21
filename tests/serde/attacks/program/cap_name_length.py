"""A 100,000-character forward_arg_names entry (43 s of work, unchecked)."""

from __future__ import annotations

from serde.core.errors import NameTooLongError
from tests.serde.attacks.program._program_kit import edit_program

ERROR = NameTooLongError
MATCH = r"forward_arg_names\[0\]: the name length is 100000, more than Limits\.max_name_chars=1024"
RUNS_CODE = False


def build(base: bytes, canary: str) -> bytes:
    def change(program: dict, weights: dict) -> None:
        program["graph_module"]["module_call_graph"][0]["signature"]["forward_arg_names"] = ["x" * 100_000]
    return edit_program(base, change)
