"""Wrong nbytes: a storage declares more bytes than its payload holds."""

from __future__ import annotations

from serde.core.errors import PayloadSizeError
from tests.serde.attacks._attack_kit import Base, rewrite_weights

ERROR = PayloadSizeError
MATCH = r"weights\.storages\[0\]: payload data/[0-9a-f]{64} has \d+ bytes but the storage declares nbytes=\d+"


def build(base: Base) -> bytes:
    def grow(w: dict) -> None:
        w["storages"][0]["nbytes"] += 64
    return rewrite_weights(base, grow)
