"""Invalid bool bytes: a bool buffer holds the byte 0x02, which torch kernels assume never happens."""

from __future__ import annotations

import hashlib
import json

from serde.core.errors import InvalidBoolError
from tests.serde.attacks._attack_kit import Base, rewrite_members

ERROR = InvalidBoolError
MATCH = r"weights\.state_dict\['mask'\]: a bool tensor holds bytes other than 0 and 1"


LOAD_ONLY = True  # needs torch to inspect the values; `pt2serde check` does not import torch


def build(base: Base) -> bytes:
    index = base.weights["state_dict"]["mask"]["storage"]
    old = "data/" + base.weights["storages"][index]["sha256"]
    bad = bytes([2]) * len(base.members[old])
    sha = hashlib.sha256(bad).hexdigest()

    def swap(members: dict) -> None:
        w = json.loads(members["weights.json"])
        w["storages"][index]["sha256"] = sha
        members["weights.json"] = json.dumps(w, sort_keys=True).encode()
        members["data/" + sha] = bad
        if all(s["sha256"] != old[5:] for s in w["storages"]):
            del members[old]

    return rewrite_members(base, swap)
