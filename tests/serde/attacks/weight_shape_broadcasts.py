"""Weight shape: fc1.bias is stored as one element of its storage where the graph takes 32; it broadcasts, so the program ran and computed something else."""

from __future__ import annotations

from serde.bridge.errors import InconsistentProgramError
from tests.serde.attacks._attack_kit import Base, rewrite_program

ERROR = InconsistentProgramError
MATCH = (r"graph_module\.signature\.input_specs\[1\] \('fc1\.bias'\): the weight is torch\.float32 \[1\] with "
         r"strides \[1\], the graph's placeholder 'p_fc1_bias' takes torch\.float32 \[32\]")
LOAD_ONLY = FULL_LOAD = True


def build(base: Base) -> bytes:
    # A view of the first element of the real storage: valid as a tensor, checksums intact.
    def shrink(w: dict) -> None:
        w["state_dict"]["fc1.bias"]["sizes"] = [1]
    return rewrite_program("mlp", shrink, member="weights.json")
