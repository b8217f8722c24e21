"""Negative stride: a tensor view walks backwards from its offset, before the start of its storage."""

from __future__ import annotations

from serde.core.errors import InvalidTensorViewError
from tests.serde.attacks._attack_kit import Base, rewrite_weights

ERROR = InvalidTensorViewError
MATCH = r"weights\.state_dict\['emb\.weight'\]: stride -4 is negative"


def build(base: Base) -> bytes:
    def flip(w: dict) -> None:
        w["state_dict"]["emb.weight"]["strides"][0] = -4
    return rewrite_weights(base, flip)
