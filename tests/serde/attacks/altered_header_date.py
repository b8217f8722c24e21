"""Altered header date: a central directory entry's modification date changed (a re-stamp by a tool)."""

from __future__ import annotations

from serde.archive import CorruptZipError
from tests.serde.attacks._attack_kit import Base, entry, patch

ERROR = CorruptZipError
MATCH = r"byte \d+ \(in the central directory or end record\) differs from what pt2serde writes"


def build(base: Base) -> bytes:
    e = entry(base.archive, "program.json")
    return patch(base.archive, e.cd_pos + 14, b"\x21\x5a")  # 2025-01-01 instead of 1980-01-01
