"""Smuggled padding: bytes hidden in the zero fill of a local header's alignment block."""

from __future__ import annotations

from serde.archive import CorruptZipError
from tests.serde.attacks._attack_kit import Base, entries, patch

ERROR = CorruptZipError
MATCH = r"byte \d+ \(in the local header of member '[^']+'\) differs from what pt2serde writes"


def build(base: Base) -> bytes:
    # The padding block's zero fill ends right before the data; its last byte is hidden from every
    # structural check (the block still parses, sizes and offsets are unchanged).
    e = next(e for e in entries(base.archive) if e.data_start - e.lho > 30 + len(e.name) + 6)
    return patch(base.archive, e.data_start - 1, b"\x7f")
