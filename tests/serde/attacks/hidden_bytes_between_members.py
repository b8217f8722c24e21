"""Hidden bytes: data smuggled into a gap between two members, outside every member."""

from __future__ import annotations

import struct

from serde.archive import CorruptZipError
from tests.serde.attacks._attack_kit import Base, entries, patch

ERROR = CorruptZipError
MATCH = r"\d+ unaccounted bytes before it"


def build(base: Base) -> bytes:
    first, second = entries(base.archive)[:2]
    # Shift every later header by 64 bytes (alignment kept), fixing the offsets that point past the gap.
    gap = b"SMUGGLED" * 8
    data = base.archive[:second.lho] + gap + base.archive[second.lho:]
    for e in entries(base.archive):
        cd = e.cd_pos + len(gap)
        if e.lho >= second.lho:
            data = patch(data, cd + 42, struct.pack("<I", e.lho + len(gap)))
    eocd = len(data) - 22
    cd_off = struct.unpack_from("<I", data, eocd + 16)[0]
    return patch(data, eocd + 16, struct.pack("<I", cd_off + len(gap)))
