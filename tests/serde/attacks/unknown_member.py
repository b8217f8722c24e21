"""Unknown member: a run.py member, listed in the manifest, that the format does not define."""

from __future__ import annotations

from serde.archive import UnknownMemberError
from tests.serde.attacks._attack_kit import Base, manifest_json, raw_zip

ERROR = UnknownMemberError
MATCH = r"member name 'run\.py' is not part of the pt2serde format"


def build(base: Base) -> bytes:
    members = {**base.members, "run.py": b"import os; os.system('id')\n"}
    return raw_zip(sorted(members.items()) + [("manifest.json", manifest_json(members))])
