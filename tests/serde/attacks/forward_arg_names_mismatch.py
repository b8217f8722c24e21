"""Forward argument names: the root signature's last name, 'nothing' (a keyword argument of the in_spec), becomes 'c_table'; ep.module() generated forward(..., c_table) and every call failed to bind 'nothing'."""

from __future__ import annotations

from serde.bridge.errors import InconsistentProgramError
from tests.serde.attacks._attack_kit import Base, rewrite_program

ERROR = InconsistentProgramError
MATCH = (r"module_call_graph\[0\] \(''\)\.forward_arg_names: \['x', 'k', 'flag', 'alpha', 'mode', 'c_table'\] does "
         r"not name the 5 positional arguments and then the keyword arguments \['nothing'\] of the in_spec")
LOAD_ONLY = FULL_LOAD = True


def build(base: Base) -> bytes:
    def rename(p: dict) -> None:
        p["graph_module"]["module_call_graph"][0]["signature"]["forward_arg_names"][5] = "c_table"
    return rewrite_program("signature_kinds", rename)
