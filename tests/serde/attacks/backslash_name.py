"""Backslash name: ..\\..\\evil.bat is a traversal on Windows extractors."""

from __future__ import annotations

from serde.archive import UnsafeMemberNameError
from tests.serde.attacks._attack_kit import Base, manifest_json, raw_zip

ERROR = UnsafeMemberNameError
MATCH = r"could escape an extraction directory"


def build(base: Base) -> bytes:
    members = {**base.members, "..\\..\\evil.bat": b"echo pwned\r\n"}
    return raw_zip(sorted(members.items()) + [("manifest.json", manifest_json(members))])
