"""Invalid UTF-8: a string in program.json holds bytes that are not UTF-8 (checksums made to match)."""

from __future__ import annotations

import json

from serde.errors import MalformedArtifactError
from tests.serde.attacks._attack_kit import Base, rewrite_program

ERROR = MalformedArtifactError
MATCH = r"program\.json: invalid UTF-8 at byte \d+"
LOAD_ONLY = FULL_LOAD = True


def build(base: Base) -> bytes:
    return rewrite_program("mlp", lambda p: p["graph_module"]["graph"]["nodes"][0].update(name="MARK"),
                           encode=lambda p: json.dumps(p, sort_keys=True).encode().replace(b"MARK", b"\xff\xfe"))
