"""Phantom member: manifest.json lists a payload that the zip does not contain (a dropped member)."""

from __future__ import annotations

from serde.archive import ManifestMismatchError
from tests.serde.attacks._attack_kit import Base, manifest_json, raw_zip

ERROR = ManifestMismatchError
MATCH = r"manifest\.json lists member 'data/[0-9a-f]{64}', but the archive has no such member"


def build(base: Base) -> bytes:
    listed = {**base.members, "data/" + "ab" * 32: b"gone"}
    return raw_zip(sorted(base.members.items()) + [("manifest.json", manifest_json(listed))])
