"""The C++ runtime as an engine of :func:`native.load` (``engine="cpp"``).

The runtime itself (``native_cpp/`` at the repository root, built by ``make native`` into
``build/native``) loads, verifies and executes a program file through the ATen dispatcher with
no Python in the loop. This module finds its extension ``_pt2n_cpp`` and wraps it in an object
with the call interface of :class:`native.run.runtime.Method`: ``run(*args, **kwargs)``,
``run_flat(leaves)`` and ``state_dict()``. Pytree flattening stays here, in Python; everything
from the flattened inputs on happens in C++.

``PT2SERDE_NATIVE_BUILD`` overrides the build directory.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
from pathlib import Path
from typing import Any, BinaryIO

from native.errors import InputMismatchError, NativeFormatError
from native.format import program as P
from serde.core import schema, wire
from serde.core.limits import DEFAULT_LIMITS, Limits

__all__ = ["CppMethod", "load", "available", "unavailable_reason", "build_dir", "cli_path"]

_module: Any = None
_reason: str | None = None


def build_dir() -> Path:
    """Where ``make native`` puts the extension and ``pt2serde-run``."""
    env = os.environ.get("PT2SERDE_NATIVE_BUILD")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "build" / "native"


def cli_path() -> Path:
    return build_dir() / "pt2serde-run"


def _extension() -> Any:
    global _module, _reason
    if _module is not None or _reason is not None:
        return _module
    d = build_dir()
    found = [d / f"_pt2n_cpp{s}" for s in importlib.machinery.EXTENSION_SUFFIXES if (d / f"_pt2n_cpp{s}").exists()]
    if not found:
        _reason = (f"the C++ runtime is not built (no _pt2n_cpp extension in {d}); run `make native` "
                   "(it needs a C++ compiler, cmake, ninja, libmsgpack-cxx-dev, nlohmann-json3-dev and libssl-dev)")
        return None
    import torch  # noqa: F401  (the extension links libtorch_python: torch must be initialized first)

    spec = importlib.util.spec_from_file_location("_pt2n_cpp", found[0])
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    _module = mod
    return mod


def available() -> bool:
    """True when the C++ runtime is built and loads in this process."""
    return _extension() is not None


def unavailable_reason() -> str | None:
    """Why :func:`available` is False (None when it is True)."""
    _extension()
    return _reason


def load(src: P.NativeProgram | str | os.PathLike | BinaryIO | bytes, *, arena: bool = False, check: bool = False,
         max_loop_instructions: int | None = P.DEFAULT_MAX_LOOP_INSTRUCTIONS, verify: bool = True,
         limits: Limits = DEFAULT_LIMITS) -> CppMethod:
    """A :class:`CppMethod` for a program object or file; the C++ loader verifies it.

    Raises:
        NativeFormatError / NativeVersionError / ArenaTooLargeError: as :func:`native.format.program.decode`.
        NativeRuntimeError: the runtime is not built, or an operator is not registered.
    """
    if check:
        raise ValueError("check=True (poisoned frees, per-kernel output checks) is a feature of the Python "
                         "runtime; use engine='python' for it")
    if isinstance(src, P.NativeProgram):
        data, what = src.encode(), "native program"
    elif isinstance(src, (str, os.PathLike)):
        what = os.fspath(src)
        try:
            data = Path(src).read_bytes()
        except OSError as e:
            raise NativeFormatError(f"{what}: cannot read the file: {e}") from None
    elif isinstance(src, (bytes, bytearray, memoryview)):
        data, what = bytes(src), "native program"
    else:
        data, what = src.read(), "native program"
    return CppMethod(data, what=what, arena=arena, max_loop_instructions=max_loop_instructions, verify=verify,
                     limits=limits)


class CppMethod:
    """An executable native program run by the C++ runtime (same interface as ``Method``)."""

    def __init__(self, data: bytes, *, what: str = "native program", arena: bool = False,
                 max_loop_instructions: int | None = P.DEFAULT_MAX_LOOP_INSTRUCTIONS, verify: bool = True,
                 limits: Limits = DEFAULT_LIMITS) -> None:
        from native.errors import NativeRuntimeError

        ext = _extension()
        if ext is None:
            raise NativeRuntimeError(_reason)
        self.max_loop_instructions = max_loop_instructions
        self.use_arena = arena
        self._m = ext.Method(data, what, arena, max_loop_instructions, verify, limits.max_arena_bytes,
                             limits.max_flow_cells)
        self._data, self._what, self._program = data, what, None
        self._in_spec = self._out_spec = None
        in_spec, out_spec = self._m.in_spec, self._m.out_spec
        if in_spec is not None:
            from serde.bridge.treespec import deserialize_treespec

            self._in_spec = deserialize_treespec(wire.decode(in_spec, schema.TreeSpec), "program.in_spec")
            self._out_spec = deserialize_treespec(wire.decode(out_spec, schema.TreeSpec), "program.out_spec")
            if self._out_spec.num_leaves != self._m.num_outputs:
                raise NativeFormatError(
                    f"native program: out_spec holds {self._out_spec.num_leaves} outputs but the program "
                    f"returns {self._m.num_outputs}; the file is damaged")

    def state_dict(self) -> dict:
        """Parameters, buffers and constants as the method holds them (mutations included)."""
        return self._m.state_dict()

    def run(self, *args: Any, **kwargs: Any) -> Any:
        """Run on ``(args, kwargs)`` as ``ep.module()`` would be called; returns its output pytree."""
        import torch.utils._pytree as pytree

        leaves, spec = pytree.tree_flatten((args, kwargs))
        if self._in_spec is not None and spec != self._in_spec:
            raise InputMismatchError(f"the inputs have structure {spec} but the program takes {self._in_spec}; "
                                     "call it with the same (args, kwargs) structure it was exported with")
        outs = self._m.run_flat(leaves)
        return pytree.tree_unflatten(outs, self._out_spec) if self._out_spec is not None else outs

    @property
    def program(self) -> P.Program:
        """The program as Python structs (decoded on first use, for :mod:`native.run.profile`)."""
        if self._program is None:
            from native.format.verify import decode

            self._program = decode(self._data, what=self._what, verify=False).program
        return self._program

    def run_profiled(self, *args: Any, **kwargs: Any) -> tuple[Any, list[tuple[int, int]]]:
        """:meth:`run`, also returning (instruction index, nanoseconds) per executed instruction,
        timed in C++. Summarize with :func:`native.run.profile.summarize`."""
        import torch.utils._pytree as pytree

        leaves, spec = pytree.tree_flatten((args, kwargs))
        if self._in_spec is not None and spec != self._in_spec:
            raise InputMismatchError(f"the inputs have structure {spec} but the program takes {self._in_spec}")
        outs, timings = self._m.run_profiled(leaves)
        return (pytree.tree_unflatten(outs, self._out_spec) if self._out_spec is not None else outs), timings

    @property
    def arena_bytes(self) -> int:
        """The arena's current size: symbolic plans are re-packed per run and the arena grows to
        the largest run so far (never beyond the plan's ``arena_size``)."""
        return self._m.arena_bytes

    def run_flat(self, leaves: Any) -> list:
        """Run on the flattened user inputs; returns the flattened user outputs."""
        return self._m.run_flat(list(leaves))

    def kernel_floor(self, leaves: Any, repeats: int = 1) -> tuple[float, float]:
        """For benchmarks: seconds of the fastest of ``repeats`` runs on ``leaves``, and the time
        that run spent inside its kernel calls (each timed in C++). The difference is the
        runtime's own overhead."""
        return self._m.kernel_floor(list(leaves), repeats)
