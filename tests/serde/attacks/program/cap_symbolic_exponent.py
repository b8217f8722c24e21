"""pow(s0, 2**62) as a tensor size: torch evaluates it on the hint and kept a core busy for minutes."""

from __future__ import annotations

from serde.core.errors import IntegerTooLargeError
from tests.serde.attacks.program._program_kit import edit_program

ERROR = IntegerTooLargeError
MATCH = r"tensor_values\['x'\]\.sizes\[0\]: the exponent of Pow\(s0, \.\.\.\) is '4611686018427387904', more than Limits\.max_exponent=64"
RUNS_CODE = False


def build(base: bytes, canary: str) -> bytes:
    def change(program: dict, weights: dict) -> None:
        size = program["graph_module"]["graph"]["tensor_values"]["x"]["sizes"][0]
        size["as_expr"]["expr"] = {"pow": [{"symbol": "s0"}, {"integer": 1 << 62}]}
    return edit_program(base, change)
