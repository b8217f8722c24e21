"""Zip bomb: a payload is deflate-compressed, 16 MiB of zeros in a few KiB."""

from __future__ import annotations

import hashlib

from serde.archive import CompressedMemberError
from tests.serde.attacks._attack_kit import Base, manifest_json, raw_zip

ERROR = CompressedMemberError
MATCH = r"member 'data/[0-9a-f]{64}' is compressed \(zip method 8\).*zip bomb"


def build(base: Base) -> bytes:
    bomb = bytes(16 << 20)
    name = "data/" + hashlib.sha256(bomb).hexdigest()
    members = {**base.members, name: bomb}
    files = sorted(members.items()) + [("manifest.json", manifest_json(members))]
    return raw_zip(sorted(files), deflate=frozenset({name}))
