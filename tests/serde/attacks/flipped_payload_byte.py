"""Flipped payload byte: one bit of a tensor payload changed after saving (bit rot, tampering)."""

from __future__ import annotations

from serde.archive import ChecksumMismatchError
from tests.serde.attacks._attack_kit import Base, entries, patch

ERROR = ChecksumMismatchError
MATCH = r"member 'data/[0-9a-f]{64}' is corrupt"


def build(base: Base) -> bytes:
    e = next(e for e in entries(base.archive) if e.name.startswith("data/") and e.size)
    at = e.data_start + e.size // 2
    return patch(base.archive, at, bytes([base.archive[at] ^ 0x10]))
