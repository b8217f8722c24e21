"""getitem out of range: a node unpacks element 2 of topk, which returns two values."""

from __future__ import annotations

import copy

from serde.bridge.errors import InconsistentProgramError
from tests.serde.attacks._attack_kit import Base, rewrite_program

ERROR = InconsistentProgramError
MATCH = r"graph\.nodes\['topk_2'\]\.inputs\[1\]: getitem index 2 does not exist: 'topk' holds 2 values"
LOAD_ONLY = FULL_LOAD = True


def build(base: Base) -> bytes:
    def unpack(p: dict) -> None:
        g = p["graph_module"]["graph"]
        at = next(i for i, n in enumerate(g["nodes"]) if n["name"] == "topk") + 1
        g["nodes"].insert(at, {
            "target": "_operator.getitem", "name": "topk_2", "metadata": {},
            "inputs": [{"name": "", "kind": 1, "arg": {"as_tensor": {"name": "topk"}}},
                       {"name": "", "kind": 1, "arg": {"as_int": 2}}],
            "outputs": [{"as_tensor": {"name": "topk_2"}}],
        })
        g["tensor_values"]["topk_2"] = copy.deepcopy(g["tensor_values"]["topk_0"])
    return rewrite_program("multi_output", unpack)
