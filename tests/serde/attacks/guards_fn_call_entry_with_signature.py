"""torch's guard function as a called module: a module call graph entry '_guards_fn' with a signature. Re-exporting ep.module() leaves such an entry without one, which unflatten only turns into an empty module; one with a signature describes a module unflatten calls, under the name torch takes for ep.module()'s guard function, so it is refused like every other use of that name."""

from __future__ import annotations

import copy

from serde.core.errors import UnsafeNameError
from tests.serde.attacks._attack_kit import Base, rewrite_program

ERROR = UnsafeNameError
MATCH = r"module_call_graph\[1\]\.fqn: FQN '_guards_fn' uses '_guards_fn', which is reserved"
LOAD_ONLY = FULL_LOAD = True


def build(base: Base) -> bytes:
    def add(p: dict) -> None:
        calls = p["graph_module"]["module_call_graph"]
        calls.insert(1, {**copy.deepcopy(calls[0]), "fqn": "_guards_fn"})
    return rewrite_program("signature_kinds", add)
