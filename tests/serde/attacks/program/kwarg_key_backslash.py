r"""Keyword argument names `\` and `:0, 1:<call>}), self._in_spec)#` with no quote: fx pastes them raw between quotes into the forward."""

from __future__ import annotations

import json

from serde.core.errors import UnsafeNameError
from tests.serde.attacks.program._program_kit import edit_program, rename

ERROR = UnsafeNameError
MATCH = r"in_spec\.children\[1\]\.context\[0\]: the keyword argument name of an input '\\\\' holds '\\\\'"
RUNS_CODE = True
# The forward's argument names (kwa, kwb) no longer match the in_spec's keywords: the module call
# graph check refuses that too.
ALSO_STOPPED_BY = (("serde.bridge.program", "check_module_call_graph"),)
BASE = "inputs"


def build(base: bytes, canary: str) -> bytes:
    # The forward fx generates binds its inputs with
    #     tree_flatten_spec(([x, cfg, mode], {'kwa':kwa, 'kwb':kwb}), self._in_spec)
    # A name '\' escapes its closing quote, so the literal runs on to the next name's opening
    # quote, and the next name is code: a dict entry whose value creates the canary
    # (os.open(path, O_WRONLY | O_CREAT | O_TRUNC)), then a comment over the rest of the line. No
    # quote is needed: the strings are bytes([...]).decode().
    def text(s: str) -> str:
        return f"bytes({list(s.encode())}).decode()"

    call = f"__import__({text('os')}).open({text(canary)}, 577)"
    names = ["\\", f":0, 1:{call}}}), self._in_spec)#"]
    # Only the module call graph's in_spec: the forward still takes kwa and kwb (forward_arg_names),
    # and a user calling m.forward(...) directly skips the hook that would compare the two. The file
    # drops its example inputs, which must have the in_spec's structure and bind to the forward.
    renamed = rename(base, json.dumps(["kwa", "kwb"], separators=(",", ":")), json.dumps(names, separators=(",", ":")),
                     where=lambda path: "example_inputs" not in path)
    return edit_program(renamed, lambda program, weights: weights.pop("example_inputs"))
