"""Huge fake storage: a storage saved without data claims 2**70 bytes, beyond what any tensor can
address. The decoder's int64 bound refuses it (validate_weights' own range check, PayloadSizeError,
stays behind it for the bytes counts int64 holds)."""

from __future__ import annotations

from serde.errors import MalformedArtifactError
from tests.serde.attacks._attack_kit import Base, rewrite_weights

ERROR = MalformedArtifactError
MATCH = r"weights\.json: (after upgrading, )?does not match schema Weights: Expected `int` <= 9223372036854775807 - at `\$\.storages\[0\]\.nbytes`"


def build(base: Base) -> bytes:
    def fake(w: dict) -> None:
        w["storages"][0] = {"sha256": "", "nbytes": 2**70, "device": {"type": "cpu"}}
    return rewrite_weights(base, fake)
