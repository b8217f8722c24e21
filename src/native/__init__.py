"""Native programs: the canonical graph flattened into instructions that a runtime executes.

Three subpackages, with imports going one way (``emit`` and ``run`` use ``format``, never each other):

- :mod:`native.format`: the file (``program``, ``container``), what a loader verifies before running
  (``verify``, ``kinds``, ``memory``'s plan check), the operators a program may call (``kernels``:
  the dispatcher's schemas, out= variants, aliasing; ``prim``: the scalar ops), the expression
  code, the key convention of inputs and outputs, and listings;
- :mod:`native.emit`: canonical Structs + weights -> a program (``emitter``, ``lower``, ``tables``,
  the memory planners' report);
- :mod:`native.run`: the Python runtime (``runtime``, ``profile``), the kernel checks of
  ``load(..., propagate=True)`` (``propagate``), the binding of the
  C++ runtime (``cpp_engine``; ``native_cpp/`` is its mirror in C++), input and output files
  (``io``) and the numeric gap against eager (``compare``).

Importing this package does not import torch; the names below load on first use.
"""

from serde.core.lazy import lazy_exports

# name -> the module (under native) that defines it, imported on first use.
# (``native.emit`` and ``native.run`` are the subpackages: their functions are
# ``native.emit.emitter.emit`` and ``native.run.runtime.run``.)
_LAZY = {
    "emit_artifact": "emit.emitter", "load": "run.runtime", "Method": "run.runtime",
    "NativeProgram": "format.program", "read_program": "format.verify", "write_program": "format.program",
    "write_inputs": "run.io", "read_inputs": "run.io",
}

__all__ = list(_LAZY)
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
