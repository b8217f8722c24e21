"""Unhashable dict key: the in_spec's keyword-argument dict names a list as its key; pytree and torch's example-inputs check met it with a TypeError."""

from __future__ import annotations

import json

from serde.errors import MalformedArtifactError
from tests.serde.attacks._attack_kit import Base, rewrite_program

ERROR = MalformedArtifactError
MATCH = (r"module_call_graph\[0\] \(''\)\.in_spec\.children\[1\]\.context: expected a list of distinct str, int, "
         r"float, bool or null keys, one per child")
LOAD_ONLY = FULL_LOAD = True


def build(base: Base) -> bytes:
    def nest(p: dict) -> None:
        p["graph_module"]["module_call_graph"][0]["signature"]["in_spec"]["children"][1]["context"] = \
            json.dumps([["nothing"]])
    return rewrite_program("signature_kinds_aten", nest)
