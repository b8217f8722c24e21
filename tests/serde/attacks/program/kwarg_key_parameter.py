"""A kwargs key `y=open(...)` in the root in_spec with no forward_arg_names: ep.module() names forward's parameters after those keys."""

from __future__ import annotations

import json

from serde.core.errors import UnsafeNameError
from tests.serde.attacks.program._program_kit import edit_program

ERROR = UnsafeNameError
MATCH = r"module_call_graph\[0\]\.signature\.in_spec\.children\[1\]\.context\[0\]: name .y=open"
RUNS_CODE = False


def build(base: bytes, canary: str) -> bytes:
    def change(program: dict, weights: dict) -> None:
        sig = program["graph_module"]["module_call_graph"][0]["signature"]
        sig.pop("forward_arg_names", None)
        kwargs = sig["in_spec"]["children"][1]
        kwargs["context"] = json.dumps([f"y=open({canary!r},'w')"])
        kwargs["children"] = [{"type": "*"}]
    return edit_program(base, change)
