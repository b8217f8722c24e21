"""Repacked archive: unzipped and re-zipped by another tool (stored, but payloads no longer aligned)."""

from __future__ import annotations

from serde.archive import CorruptZipError
from tests.serde.attacks._attack_kit import Base, manifest_json, raw_zip

ERROR = CorruptZipError
MATCH = r"is not 64-byte aligned"


def build(base: Base) -> bytes:
    files = dict(base.members)
    files["manifest.json"] = manifest_json(base.members)
    return raw_zip(sorted(files.items()), align=1)
