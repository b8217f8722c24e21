"""Huge fake storage: a storage saved without data claims 2**70 bytes, beyond what any tensor can address."""

from __future__ import annotations

from serde.bridge.weights import PayloadSizeError
from tests.serde.attacks._attack_kit import Base, rewrite_weights

ERROR = PayloadSizeError
MATCH = r"weights\.storages\[0\]: nbytes \d+ is out of range"


def build(base: Base) -> bytes:
    def fake(w: dict) -> None:
        w["storages"][0] = {"sha256": "", "nbytes": 2**70, "device": {"type": "cpu"}}
    return rewrite_weights(base, fake)
