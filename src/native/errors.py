"""Errors of the native emitter, program format and reference runtime (all SerializeErrors)."""

from __future__ import annotations

from serde.core.errors import LimitError
from serde.errors import MalformedArtifactError, SchemaVersionError, SerializeError

__all__ = ["NativeFormatError", "NativeVersionError", "InputMismatchError", "NativeRuntimeError",
           "MemoryPlanError", "ArenaTooLargeError", "FlowTooLargeError", "ArenaAliasError", "PropagationError"]


class NativeFormatError(MalformedArtifactError):
    """A native program file is damaged, truncated, hostile, or not a native program at all."""


class NativeVersionError(SchemaVersionError):
    """A native program was written in a format version this reader does not support."""


class InputMismatchError(SerializeError):
    """The inputs given to ``run`` do not fit the program (count, structure, dtype, shape, range)."""


class NativeRuntimeError(SerializeError):
    """A kernel failed while the reference runtime executed an instruction (names it)."""


class MemoryPlanError(NativeFormatError):
    """A memory plan contradicts its program: a slot too small or too big, overlapping live tensors."""


class ArenaTooLargeError(LimitError):
    """A memory plan's arena exceeds ``Limits.max_arena_bytes``; refused before anything is allocated."""


class FlowTooLargeError(LimitError):
    """Checking what a program's instructions may read would take more than ``Limits.max_flow_cells``
    steps (its values times its jumps and jump targets, per pass): refused instead of hanging."""


class ArenaAliasError(NativeRuntimeError):
    """In arena mode, a kernel returned arena memory its operator does not declare it may alias.

    The memory plan would hand that memory to another tensor while the result is alive, so the
    run stops instead of computing wrong numbers. Run in heap mode (``arena=False``) meanwhile.
    """


class PropagationError(NativeFormatError):
    """A kernel call's operator refuses the operands the program declares, or computes results other
    than its declared outputs (``native.load(..., propagate=True)``): the file was edited or written
    by another tool, and the program would fail when run."""
