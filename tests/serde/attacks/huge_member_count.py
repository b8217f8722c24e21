"""Huge member count: the zip64 end record declares 2**40 entries so a reader loops or allocates forever."""

from __future__ import annotations

from serde.archive import SizeLimitError
from tests.serde.attacks._attack_kit import Base, manifest_json, raw_zip

ERROR = SizeLimitError
MATCH = r"declares 1099511627776 members, more than Limits\.max_members"


def build(base: Base) -> bytes:
    files = dict(base.members)
    files["manifest.json"] = manifest_json(base.members)
    return raw_zip(sorted(files.items()), zip64_count=1 << 40)
