"""Constant input as a tensor: the graph takes a tensor where the signature says the constant 2.0 goes, so
running it would hand a float to kernels expecting a tensor."""

from __future__ import annotations

import copy

from serde.bridge.errors import InconsistentProgramError
from tests.serde.attacks._attack_kit import Base, rewrite_program

ERROR = InconsistentProgramError
MATCH = r"signature\.input_specs\[3\]: a constant_input spec for graph\.inputs\[3\] \(as_tensor\)"
LOAD_ONLY = FULL_LOAD = True


def build(base: Base) -> bytes:
    def retype(p: dict) -> None:
        g = p["graph_module"]["graph"]
        g["inputs"][3] = {"as_tensor": {"name": "scale"}}
        g["tensor_values"]["scale"] = copy.deepcopy(g["tensor_values"]["cfg_bias"])
    return rewrite_program("pytrees", retype)
