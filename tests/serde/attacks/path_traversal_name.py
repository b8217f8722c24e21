"""Path traversal: a member named data/../../../etc/cron.d/pwn escapes an extraction directory."""

from __future__ import annotations

from serde.archive import UnsafeMemberNameError
from tests.serde.attacks._attack_kit import Base, manifest_json, raw_zip

ERROR = UnsafeMemberNameError
MATCH = r"member name 'data/\.\./\.\./\.\./etc/cron\.d/pwn' could escape"


def build(base: Base) -> bytes:
    members = {**base.members, "data/../../../etc/cron.d/pwn": b"* * * * * root sh -c id\n"}
    return raw_zip(sorted(members.items()) + [("manifest.json", manifest_json(members))])
