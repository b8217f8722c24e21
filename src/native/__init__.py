"""Native emitter: flattens canonical programs into an instruction program, plus a reference runtime.

``emit`` (canonical Structs + weights -> :class:`~native.program.NativeProgram`), the binary
format (:mod:`native.program`), ``load``/``Method`` (the reference runtime) and the inputs-file
helpers. Importing this package does not import torch; the names below load on first use.
"""

from serde.core.lazy import lazy_exports

# name -> the module (under native) that defines it, imported on first use.
_LAZY = {
    "emit": "emit", "emit_artifact": "emit", "load": "runtime", "run": "runtime", "Method": "runtime",
    "NativeProgram": "program", "read_program": "verify", "write_program": "program",
    "write_inputs": "io", "read_inputs": "io",
}

__all__ = list(_LAZY)
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
