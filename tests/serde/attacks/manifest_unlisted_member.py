"""Unlisted member: the zip holds a debug.json that manifest.json does not list (smuggled in later)."""

from __future__ import annotations

from serde.archive import ManifestMismatchError
from tests.serde.attacks._attack_kit import Base, manifest_json, raw_zip

ERROR = ManifestMismatchError
MATCH = r"member 'debug\.json' is in the archive but not listed in manifest\.json"


def build(base: Base) -> bytes:
    files = dict(base.members)
    files["manifest.json"] = manifest_json(base.members)
    files["debug.json"] = b'{"note": "added after saving"}'
    return raw_zip(sorted(files.items()))
