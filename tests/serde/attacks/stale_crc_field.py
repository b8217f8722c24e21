"""Stale CRC field: a payload's CRC-32 in its local header no longer matches (other zip tools would
refuse the file, even though the payload's sha256 is right)."""

from __future__ import annotations

from serde.archive import CorruptZipError
from tests.serde.attacks._attack_kit import Base, entries, patch

ERROR = CorruptZipError
MATCH = r"byte \d+ \(in the local header of member 'data/[0-9a-f]{64}'\) differs from what pt2serde writes"


def build(base: Base) -> bytes:
    e = next(e for e in entries(base.archive) if e.name.startswith("data/"))
    return patch(base.archive, e.lho + 14, bytes([base.archive[e.lho + 14] ^ 0x01]))
