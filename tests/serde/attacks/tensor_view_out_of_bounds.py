"""Out-of-bounds view: a tensor's sizes are enlarged so it would read past its storage."""

from __future__ import annotations

from serde.core.errors import TensorOutOfBoundsError
from tests.serde.attacks._attack_kit import Base, rewrite_weights

ERROR = TensorOutOfBoundsError
MATCH = r"weights\.state_dict\['emb\.weight'\]: the view .* reaches byte \d+ of storage \d+, which has only \d+ bytes"


def build(base: Base) -> bytes:
    def grow(w: dict) -> None:
        w["state_dict"]["emb.weight"]["sizes"][0] += 1
    return rewrite_weights(base, grow)
