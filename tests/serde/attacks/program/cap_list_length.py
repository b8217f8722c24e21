"""A one-million-element int list argument (22 s of work before failing, unchecked)."""

from __future__ import annotations

from serde.core.errors import ListTooLongError
from tests.serde.attacks.program._program_kit import edit_program

ERROR = ListTooLongError
MATCH = r"graph\.nodes\[0\]\.inputs\[3\]: the list length is 1000000, more than Limits\.max_list_len=65536"
RUNS_CODE = False


def build(base: bytes, canary: str) -> bytes:
    def change(program: dict, weights: dict) -> None:
        node = program["graph_module"]["graph"]["nodes"][0]
        node["inputs"].append({"name": "", "arg": {"as_ints": list(range(1_000_000))}, "kind": 1})
    return edit_program(base, change)
