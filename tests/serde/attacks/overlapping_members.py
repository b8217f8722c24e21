"""Overlapping members: the first member's size is stretched so its data covers the next member."""

from __future__ import annotations

import struct

from serde.archive import OverlappingMembersError
from tests.serde.attacks._attack_kit import Base, entries, patch

ERROR = OverlappingMembersError
MATCH = r"inside the previous member"


def build(base: Base) -> bytes:
    first, second = entries(base.archive)[:2]
    size = struct.pack("<II", second.data_start + second.size - first.data_start,
                       second.data_start + second.size - first.data_start)
    data = patch(base.archive, first.cd_pos + 20, size)
    return patch(data, first.lho + 18, size)
