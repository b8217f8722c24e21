"""Output kind: aten.tanh is swapped for aten._local_scalar_dense, which binds the same argument but returns a number, while the node still stores a tensor that the next linear takes."""

from __future__ import annotations

from serde.bridge.errors import InconsistentProgramError
from tests.serde.attacks._attack_kit import Base, nodes, rewrite_program

ERROR = InconsistentProgramError
MATCH = (r"graph\.nodes\['tanh'\]\.outputs\[0\]: return 0 of torch\.ops\.aten\._local_scalar_dense\.default "
         r"is number, the node stores as_tensor")
LOAD_ONLY = FULL_LOAD = True


def build(base: Base) -> bytes:
    def swap(p: dict) -> None:
        nodes(p)["tanh"]["target"] = "torch.ops.aten._local_scalar_dense.default"
    return rewrite_program("tied_weights", swap)
