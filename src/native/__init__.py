"""Native emitter: flattens canonical programs into an instruction program, plus a reference runtime.

``emit`` (canonical Structs + weights -> :class:`~native.program.NativeProgram`), the binary
format (:mod:`native.program`), ``load``/``Method`` (the reference runtime) and the inputs-file
helpers. Importing this package does not import torch; the names below load on first use.
"""

from __future__ import annotations

__all__ = ["emit", "emit_artifact", "load", "run", "Method", "NativeProgram", "read_program", "write_program",
           "write_inputs", "read_inputs"]

_LAZY = {
    "emit": "emit", "emit_artifact": "emit", "load": "runtime", "run": "runtime", "Method": "runtime",
    "NativeProgram": "program", "read_program": "verify", "write_program": "program",
    "write_inputs": "io", "read_inputs": "io",
}


def __getattr__(name: str):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'native' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{mod}", __name__), name)
    globals()[name] = value
    return value
