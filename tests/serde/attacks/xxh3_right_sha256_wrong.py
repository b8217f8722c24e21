"""Right xxh3, wrong sha256: a payload's bytes were replaced and its XXH3-128 and CRC-32 recomputed, but it still carries its old sha256 name; serde.load checks only the xxh3, pt2serde check both."""

from __future__ import annotations

import io

import torch

from serde.archive import ChecksumMismatchError, write_archive
from tests.serde.attacks._attack_kit import Base

ERROR = ChecksumMismatchError
MATCH = r"member 'data/[0-9a-f]{64}' is corrupt: its sha256 is [0-9a-f]{64}, but manifest\.json records"


def build(base: Base) -> bytes:
    members = dict(base.members)
    name = next(n for n in sorted(members) if n.startswith("data/") and members[n])
    members[name] = bytes(b ^ 0x01 for b in members[name])  # same size; write_archive trusts the name
    buf = io.BytesIO()
    write_archive(buf, members, schema_version=(2, 4), torch_version=str(torch.__version__))
    return buf.getvalue()
