"""String constant input `fast' == '' or open(...) or '`: ep.module() pastes it between quotes into its guard code."""

from __future__ import annotations

from serde.core.errors import UnsafeNameError
from tests.serde.attacks.program._program_kit import rename

ERROR = UnsafeNameError
MATCH = r"signature\.input_specs\[\d\]\.constant_input\.value\.as_string: the string constant input .* holds \"'\""
RUNS_CODE = True
BASE = "inputs"


def build(base: bytes, canary: str) -> bytes:
    # The graph input, its signature entry and the stored example input all hold it, as they must.
    return rename(base, "fast", f"fast' == '' or open({canary!r}, 'w') or '")
