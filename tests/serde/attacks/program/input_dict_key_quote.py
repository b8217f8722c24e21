"""Dict input key `"+open(...).name+"`: ep.module() pastes the input's path into each guard's "Guard failed: ..." message."""

from __future__ import annotations

import json

from serde.core.errors import UnsafeNameError
from tests.serde.attacks.program._program_kit import rename

ERROR = UnsafeNameError
MATCH = r"weights\.example_inputs\.spec\.children\[0\]\.children\[1\]\.context\[0\]: the dict key of an input .* holds '\"'"
RUNS_CODE = True
BASE = "inputs"


def build(base: bytes, canary: str) -> bytes:
    # Double quotes only: repr() then keeps the key in single quotes, so it reaches the message as
    # it is. The canary's path goes as hex, which needs no quotes of the other kind.
    key = f'"+open(bytes.fromhex("{canary.encode().hex()}").decode(), "w").name+"'
    # The module call graph's in_spec (what the call is checked against) and the example inputs'
    # spec (where ep.module() takes the paths of its guards from) list the key.
    return rename(base, json.dumps(["cfgkey"], separators=(",", ":")), json.dumps([key], separators=(",", ":")))
