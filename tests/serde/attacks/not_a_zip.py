"""Not a zip: an executable (ELF header) renamed to model.pt2s."""

from __future__ import annotations

from serde.archive import NotAnArchiveError
from tests.serde.attacks._attack_kit import Base

ERROR = NotAnArchiveError
MATCH = r"is not a pt2serde archive \(not a zip file\)"


def build(base: Base) -> bytes:
    return b"\x7fELF\x02\x01\x01" + bytes(4089)
