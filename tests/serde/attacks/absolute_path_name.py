"""Absolute path: a member named /etc/passwd overwrites a system file when extracted."""

from __future__ import annotations

from serde.archive import UnsafeMemberNameError
from tests.serde.attacks._attack_kit import Base, manifest_json, raw_zip

ERROR = UnsafeMemberNameError
MATCH = r"member name '/etc/passwd' could escape"


def build(base: Base) -> bytes:
    members = {**base.members, "/etc/passwd": b"root::0:0::/root:/bin/sh\n"}
    return raw_zip(sorted(members.items()) + [("manifest.json", manifest_json(members))])
