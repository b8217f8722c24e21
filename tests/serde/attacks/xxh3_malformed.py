"""Malformed xxh3: manifest.json records a member's XXH3-128 as something other than 32 lowercase hex digits."""

from __future__ import annotations

import json

from serde.archive import ManifestMismatchError
from tests.serde.attacks._attack_kit import Base, manifest_json, raw_zip

ERROR = ManifestMismatchError
MATCH = r"records an invalid xxh3 'ABCDEF0123456789ABCDEF0123456789' for member 'program\.json' \(expected 32 lowercase hex digits\)"


def build(base: Base) -> bytes:
    doc = json.loads(manifest_json(base.members, schema_version={"major": 2, "minor": 4}))
    doc["members"]["program.json"]["xxh3"] = "ABCDEF0123456789ABCDEF0123456789"  # upper case
    manifest = json.dumps(doc, sort_keys=True).encode()
    return raw_zip(sorted(base.members.items()) + [("manifest.json", manifest)])
