"""Flipped manifest byte: the recorded torch version changed; the manifest still decodes and no
sha256 covers it (it holds everybody else's)."""

from __future__ import annotations

from serde.archive import ChecksumMismatchError
from tests.serde.attacks._attack_kit import Base, entry, patch

ERROR = ChecksumMismatchError
MATCH = r"manifest\.json is corrupt: its CRC-32 differs"


def build(base: Base) -> bytes:
    m = entry(base.archive, "manifest.json")
    at = base.archive.index(b'"torch_version":"', m.data_start) + len(b'"torch_version":"')
    return patch(base.archive, at, b"9" if base.archive[at:at + 1] != b"9" else b"8")
