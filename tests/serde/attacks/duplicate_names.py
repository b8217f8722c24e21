"""Duplicate names: program.json appears twice, so two zip readers can see two different programs."""

from __future__ import annotations

from serde.archive import DuplicateMemberError
from tests.serde.attacks._attack_kit import Base, manifest_json, raw_zip

ERROR = DuplicateMemberError
MATCH = r"member 'program\.json' occurs twice"


def build(base: Base) -> bytes:
    other = b'{"shadow": true}'
    files = sorted(base.members.items()) + [("manifest.json", manifest_json(base.members)), ("program.json", other)]
    return raw_zip(files)
