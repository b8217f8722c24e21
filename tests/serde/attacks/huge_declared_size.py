"""Huge declared size: weights.json claims ~4 GiB so a naive reader allocates or decodes that much."""

from __future__ import annotations

import struct

from serde.archive import SizeLimitError
from tests.serde.attacks._attack_kit import Base, entry, patch

ERROR = SizeLimitError
MATCH = r"member 'weights\.json' declares 4294967280 bytes, more than the limit of \d+ \(Limits\.max_json_bytes\)"


def build(base: Base) -> bytes:
    e = entry(base.archive, "weights.json")
    huge = struct.pack("<II", 0xFFFFFFF0, 0xFFFFFFF0)
    data = patch(base.archive, e.cd_pos + 20, huge)
    return patch(data, e.lho + 18, huge)
