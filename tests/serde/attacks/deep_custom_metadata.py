"""Deep custom metadata: a node's meta['custom'] JSON nests 100,000 lists, to exhaust the decoder's stack."""

from __future__ import annotations

from serde.errors import MalformedArtifactError
from tests.serde.attacks._attack_kit import Base, rewrite_program

ERROR = MalformedArtifactError
MATCH = r"graph\.nodes\[1\]\.custom: JSON nested too deeply to decode"
LOAD_ONLY = FULL_LOAD = True


def build(base: Base) -> bytes:
    def nest(p: dict) -> None:
        p["graph_module"]["graph"]["nodes"][1]["metadata"]["custom"] = "[" * 100_000 + "]" * 100_000
    return rewrite_program("mlp", nest)
