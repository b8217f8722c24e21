"""A rank-1000 weight (34 s of work, unchecked)."""

from __future__ import annotations

from serde.core.errors import TensorRankError
from tests.serde.attacks.program._program_kit import edit_program

ERROR = TensorRankError
MATCH = r"weights\.state_dict\['scale'\]\.sizes: the rank is 1000, more than Limits\.max_tensor_rank=64"
RUNS_CODE = False


def build(base: bytes, canary: str) -> bytes:
    def change(program: dict, weights: dict) -> None:
        weights["state_dict"]["scale"].update(sizes=[1] * 1000, strides=[1] * 1000)
    return edit_program(base, change)
