"""Negative dimension: a value's tensor meta has size -3, which torch refuses deep inside fake tensors."""

from __future__ import annotations

from serde.errors import MalformedArtifactError
from tests.serde.attacks._attack_kit import Base, rewrite_program

ERROR = MalformedArtifactError
MATCH = r"graph\.tensor_values\['relu'\]: sizes \[s0, -3\], .* do not describe a tensor \(.*negative dimension"
LOAD_ONLY = FULL_LOAD = True


def build(base: Base) -> bytes:
    def negate(p: dict) -> None:
        p["graph_module"]["graph"]["tensor_values"]["relu"]["sizes"][-1] = {"as_int": -3}
    return rewrite_program("mlp", negate)
