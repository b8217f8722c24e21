"""A size that is a product of 16 sums s0 + i: torch factors it while creating the fake tensor,
which took 19 s (a list edit of a stride into (96*s1)**51 took over a minute)."""

from __future__ import annotations

from serde.core.errors import IntegerTooLargeError
from tests.serde.attacks.program._program_kit import edit_program

ERROR = IntegerTooLargeError
MATCH = r"tensor_values\['x'\]\.sizes\[0\]: the degree of .* is 16, more than Limits\.max_degree=8"
RUNS_CODE = False


def build(base: bytes, canary: str) -> bytes:
    def change(program: dict, weights: dict) -> None:
        size = program["graph_module"]["graph"]["tensor_values"]["x"]["sizes"][0]
        size["as_expr"]["expr"] = {"mul": [{"add": [{"symbol": "s0"}, {"integer": i}]} for i in range(1, 17)]}
    return edit_program(base, change)
