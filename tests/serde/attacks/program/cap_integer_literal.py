"""A 4001-digit integer literal inside a size expression."""

from __future__ import annotations

from serde.core.errors import IntegerTooLargeError
from tests.serde.attacks.program._program_kit import edit_program

ERROR = IntegerTooLargeError
MATCH = r"tensor_values\['x'\]\.sizes\[0\]: an integer literal's size in bits is 13288, more than Limits\.max_int_bits=128"
RUNS_CODE = False


def build(base: bytes, canary: str) -> bytes:
    def change(program: dict, weights: dict) -> None:
        size = program["graph_module"]["graph"]["tensor_values"]["x"]["sizes"][0]
        size["as_expr"]["expr"] = {"add": [{"symbol": "s0"}, {"integer": 10 ** 4000}]}
    return edit_program(base, change)
