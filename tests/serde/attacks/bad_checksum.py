"""Bad checksum: manifest.json records a sha256 for program.json that its bytes do not have (and
the manifest's own CRC-32 was fixed to match the edit)."""

from __future__ import annotations

from serde.archive import ChecksumMismatchError
from tests.serde.attacks._attack_kit import Base, entry, fix_crc, patch

ERROR = ChecksumMismatchError
MATCH = r"member 'program\.json' is corrupt: its sha256 is [0-9a-f]{64}, but manifest\.json records"


def build(base: Base) -> bytes:
    m = entry(base.archive, "manifest.json")
    text = base.archive[m.data_start:m.data_start + m.size]
    at = m.data_start + text.index(b'"program.json":{"sha256":"') + len(b'"program.json":{"sha256":"')
    digit = base.archive[at:at + 1]
    return fix_crc(patch(base.archive, at, b"0" if digit != b"0" else b"1"), "manifest.json")
