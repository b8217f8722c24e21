"""Truncated file: the archive is cut off part-way (an interrupted download or copy)."""

from __future__ import annotations

from _attack_kit import Base

from serde.archive import TruncatedArchiveError

ERROR = TruncatedArchiveError
MATCH = r"truncated"


def build(base: Base) -> bytes:
    return base.archive[: len(base.archive) * 3 // 5]
