"""A tensor meta of 2**120 elements: no int64 numel holds it."""

from __future__ import annotations

from serde.core.errors import TensorSizeError
from tests.serde.attacks.program._program_kit import edit_program

ERROR = TensorSizeError
MATCH = r"graph\.tensor_values\['mul'\]\.sizes: the number of elements is \d+, more than Limits\.max_tensor_elements"
RUNS_CODE = False


def build(base: bytes, canary: str) -> bytes:
    def change(program: dict, weights: dict) -> None:
        meta = program["graph_module"]["graph"]["tensor_values"]["mul"]
        meta.update(sizes=[{"as_int": 1 << 40}] * 3, strides=[{"as_int": 1}] * 3)
    return edit_program(base, change)
