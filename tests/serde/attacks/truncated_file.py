"""Truncated file: the archive is cut off part-way (an interrupted download or copy)."""

from __future__ import annotations

from serde.archive import TruncatedArchiveError
from tests.serde.attacks._attack_kit import Base

ERROR = TruncatedArchiveError
MATCH = r"truncated"


def build(base: Base) -> bytes:
    return base.archive[: len(base.archive) * 3 // 5]
