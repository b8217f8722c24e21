"""The native program: msgspec Structs, their binary encoding, and a structural validator.

A program is a flat, self-contained description a runtime executes without torch.export:

- ``values``: every value the program touches, by index. Scalars and lists are constants;
  ``Tensor`` carries dtype, sizes, strides and storage offset (each an int or ``Sym(expr)``, an
  index into ``exprs`` evaluated at run time) and, for weights, the constant blob it views;
  ``List`` boxes other values (tensor lists, int lists with run-time elements);
  ``SymInt``/``SymFloat``/``SymBool`` are scalars produced at run time.
- ``operators``: (name, overload) pairs, deduplicated. ``aten::add`` / ``Tensor`` is a torch
  operator; the ``symbolic::`` namespace holds the scalar ops of :mod:`native.format.prim`.
- ``instructions``: one chain. ``KernelCall`` lists every argument in schema order (defaults
  filled in) and the values that receive the returns (-1 discards one); ``MoveCall`` copies a
  reference; ``JumpFalseCall`` jumps when its condition is false (a constant-false condition is
  an unconditional jump); ``FreeCall`` drops a value at its last use; ``AllocCall`` allocates a
  tensor from its entry in ``values`` (map outputs).
- ``exprs``: postfix code over ``symbols`` (see :mod:`native.format.exprs`).
- ``symbols``: each bound at run time from an input dimension (``dim = scale * sym + offset``)
  or, with ``input = -1``, unbacked (data-dependent, never evaluated by this runtime).
- ``constants``: sha256, offset and size of each weight blob in the segment (deduplicated).
- ``memory_plan``: arena offsets of intermediate tensors (see :mod:`native.format.memory`).
- ``debug_handles`` / ``instruction_handles``: where each instruction comes from (see below).

File format: :mod:`native.format.container` with magic ``b"PT2SNATV"``, header = msgpack ``Program``.

Format version history:
  1  2026-11-22  First version.
  2  2026-11-23  A sha256 of the prefix and header follows the header, and the padding before the
                 segment must be zero: a flipped header byte used to change results silently.
                 Program.guards / guard_texts: export's input guards, checked before running (a
                 version-1 reader would ignore them and accept inputs the program rejects).
                 Version 1 files are refused (NativeVersionError naming both versions): re-emit
                 them from their .pt2s artifact, which is the source of truth.
  3  2026-11-23  Sound arena plans and debug handles. Version 2 plans trusted schemas that say
                 "fresh result" for composite ops that return an input unchanged (dropout in eval,
                 type_as to the same dtype, ...), so an arena run could compute wrong numbers; version
                 3 operators list those aliases in ``returns_alias`` and the runtime refuses files
                 that list fewer than its kernels may produce. New fields (a C++ reader takes them
                 by key; all have defaults, but a version 3 writer always fills them):

                 - ``Allocation.start`` / ``Allocation.end`` (ints, array positions 3 and 4 after
                   value, offset, nbytes): the first and last instruction during which the slot is
                   live. ``verify_plan`` checks them against the lifetimes it derives. A runtime may
                   re-pack the slots for the actual sizes of one run: visit allocations ordered by
                   (-nbytes, start, value), give each the lowest 64-byte aligned offset not used by
                   an already placed slot whose [start, end] intersects its own (``memory.pack``);
                   if that arena is larger than ``arena_size``, use the stored offsets instead.
                 - ``Program.debug_handles``: a list of ``DebugHandle`` arrays
                   ``[node, op, module]``: the canonical node name (``linear_1``), the node's
                   target (``torch.ops.aten.linear.default``) and the innermost
                   ``nn_module_stack`` path (``layers.0.attn``; "" at the top level). Source
                   locations are not stored: stack traces stay out of the canonical program.
                 - ``Program.instruction_handles``: one int per instruction, an index into
                   ``debug_handles``, or -1 for instructions of no node (copies of mutated
                   buffers into their state at the end, frees at the end of the program).

                 A run-time profile is a list of (instruction index, nanoseconds) from any
                 engine; :mod:`native.run.profile` maps it to nodes and modules. Version 2 files are
                 refused: re-emit them from their .pt2s artifact.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Annotated, Union

import msgspec

from native.format import container
from serde.fileio import write_atomic

__all__ = [
    "MAGIC", "FORMAT_VERSION", "MIN_FORMAT_VERSION", "DEFAULT_MAX_LOOP_INSTRUCTIONS",
    "Sym", "Dim", "NoneValue", "Int", "Float", "Bool", "String", "IntList", "FloatList", "BoolList",
    "StringList", "Complex", "ScalarType", "Layout", "MemoryFormat", "Device", "Tensor", "List",
    "SymInt", "SymFloat", "SymBool", "Value", "VALUE_TYPES",
    "KernelCall", "MoveCall", "JumpFalseCall", "FreeCall", "AllocCall", "Instruction", "INSTRUCTION_TYPES",
    "Operator", "Constant", "Symbol", "Input", "State", "Allocation", "MemoryPlan", "DebugHandle", "Program",
    "NativeProgram", "encode", "is_unconditional", "write_program",
]

# Instructions a run may execute inside loops before it is stopped, unless the caller sets another
# limit (each iteration is charged its loop's length); both engines apply it, so a hostile or
# runaway program cannot hang either.
DEFAULT_MAX_LOOP_INSTRUCTIONS = 10_000_000

# Loops nested deeper than this are refused: the emitter nests one loop per higher-order op, and
# the loader's analysis of what each instruction may read takes a pass per level.
MAX_LOOP_DEPTH = 64
# Boxed lists nested deeper than this are refused: reading a list reads its items, recursively.
MAX_LIST_DEPTH = 64

MAGIC = b"PT2SNATV"
FORMAT_VERSION = 3
MIN_FORMAT_VERSION = 3


# Every integer of the format is an int64 (as the C++ runtime reads it): msgpack's unsigned 64-bit
# integers above that are refused by the decoder, naming the field.
I64 = Annotated[int, msgspec.Meta(ge=-(1 << 63), le=(1 << 63) - 1)]


class _S(msgspec.Struct, frozen=True, array_like=True):
    """Compact base: encoded as arrays (``["int", 3]``), tagged where part of a union."""


class Sym(_S, tag="sym"):
    """A size, stride or offset given by expression ``exprs[expr]``."""

    expr: I64


Dim = Union[I64, Sym]


# ---------------------------------------------------------------- values


class NoneValue(_S, tag="none"):
    pass


class Int(_S, tag="int"):
    v: I64


class Float(_S, tag="float"):
    v: float


class Bool(_S, tag="bool"):
    v: bool


class String(_S, tag="str"):
    v: str


class IntList(_S, tag="ints"):
    v: list[I64]


class FloatList(_S, tag="floats"):
    v: list[float]


class BoolList(_S, tag="bools"):
    v: list[bool]


class StringList(_S, tag="strs"):
    v: list[str]


class Complex(_S, tag="complex"):
    real: float
    imag: float


class ScalarType(_S, tag="dtype"):
    v: I64  # serde.core.schema.ScalarType


class Layout(_S, tag="layout"):
    v: I64  # serde.core.schema.Layout


class MemoryFormat(_S, tag="memory_format"):
    v: I64  # serde.core.schema.MemoryFormat


class Device(_S, tag="device"):
    kind: str  # "cpu", "cuda", ...
    index: I64 | None = None


class Tensor(_S, tag="tensor"):
    dtype: I64  # serde.core.schema.ScalarType
    sizes: list[Dim]
    strides: list[Dim]
    storage_offset: Dim = 0
    data: I64 = -1  # index into Program.constants for weights; -1 otherwise


class List(_S, tag="list"):
    items: list[I64]  # value indices; elements may be produced at run time


class SymInt(_S, tag="symint"):
    expr: I64 = -1  # its value as an expression over symbols, when known


class SymFloat(_S, tag="symfloat"):
    pass


class SymBool(_S, tag="symbool"):
    expr: I64 = -1


Value = Union[NoneValue, Int, Float, Bool, String, IntList, FloatList, BoolList, StringList, Complex,
              ScalarType, Layout, MemoryFormat, Device, Tensor, List, SymInt, SymFloat, SymBool]
VALUE_TYPES: tuple[type, ...] = Value.__args__  # type: ignore[attr-defined]


# ---------------------------------------------------------------- instructions


class KernelCall(_S, tag="kernel"):
    op: I64
    args: list[I64]
    outs: list[I64]
    out_op: I64 = -1  # the op's out= variant, usable when every output has an arena slot


class MoveCall(_S, tag="move"):
    src: I64
    dst: I64


class JumpFalseCall(_S, tag="jump_false"):
    cond: I64
    target: I64


class FreeCall(_S, tag="free"):
    value: I64


class AllocCall(_S, tag="alloc"):
    value: I64


Instruction = Union[KernelCall, MoveCall, JumpFalseCall, FreeCall, AllocCall]
INSTRUCTION_TYPES: tuple[type, ...] = Instruction.__args__  # type: ignore[attr-defined]


# ---------------------------------------------------------------- tables


class Operator(_S):
    name: str  # "aten::add", "symbolic::floordiv"
    overload: str  # "Tensor", "default"
    # Per return: the argument positions it may alias (views, in-place ops); empty = fresh results.
    returns_alias: list[list[I64]] = []


class Constant(_S):
    sha256: str
    offset: I64  # within the segment, a multiple of 64
    nbytes: I64


class Symbol(_S):
    name: str
    input: I64  # index into Program.inputs; -1: unbacked (data-dependent)
    dim: I64  # dimension of that input; -1: the input is the integer itself
    scale: I64 = 1  # input dim = scale * symbol + offset
    offset: I64 = 0
    min: I64 | None = None
    max: I64 | None = None


class Input(_S):
    name: str
    value: I64
    constant: bool = False  # the program was specialized to values[value]; other inputs are refused


class State(_S):
    name: str  # state_dict / constants key
    kind: str  # "parameter", "buffer" or "constant"
    value: I64
    mutable: bool = False  # a buffer the program updates: the runtime gives it private memory


class Allocation(_S):
    value: I64
    offset: I64
    nbytes: I64  # upper bound over every allowed input size
    start: I64 = 0  # first instruction the slot is live at
    end: I64 = 0  # last instruction the slot is live at


class DebugHandle(_S):
    node: str  # canonical node name
    op: str  # the node's target
    module: str = ""  # innermost nn_module_stack path; "" at the top level


class MemoryPlan(_S):
    arena_size: I64 = 0
    naive_size: I64 = 0  # the sum of every planned tensor's upper bound, i.e. no reuse
    allocations: list[Allocation] = []
    unplanned: I64 = 0  # intermediate tensors left to the allocator (unbounded or in loops)


class Program(msgspec.Struct, frozen=True, kw_only=True):
    values: list[Value]
    operators: list[Operator]
    instructions: list[Instruction]
    exprs: list[list[I64]]
    symbols: list[Symbol]
    constants: list[Constant]
    inputs: list[Input]
    outputs: list[I64]
    state: list[State]
    memory_plan: MemoryPlan = MemoryPlan()
    in_spec: str | None = None  # JSON of serde.core.schema.TreeSpec (args, kwargs)
    guards: list[I64] = []  # expressions (indices into exprs) every input set must make nonzero
    guard_texts: list[str] = []  # each guard as torch prints it, for error messages only
    out_spec: str | None = None
    torch_version: str = ""
    debug_handles: list[DebugHandle] = []
    instruction_handles: list[I64] = []  # per instruction: index into debug_handles, or -1
    # The key of each input and output in a safetensors file (native.format.keys.leaf_keys): the leaf's path in
    # (args, kwargs) or in the output tree. Empty in files of older emitters, whose inputs are then
    # found by name only.
    input_keys: list[str] = []
    output_keys: list[str] = []


@dataclass(frozen=True)
class NativeProgram:
    """A program plus its constant segment (weights, 64-byte aligned, deduplicated by sha256)."""

    program: Program
    segment: bytes | memoryview

    def encode(self) -> bytes:
        return encode(self)


_encoder = msgspec.msgpack.Encoder()


def is_unconditional(p: Program, ins: JumpFalseCall) -> bool:
    """Whether the jump's condition is the constant False: the jump is always taken. Loaders and
    runtimes decide it from the value table alone, never from what a run wrote into the slot."""
    c = p.values[ins.cond]
    return isinstance(c, Bool) and not c.v


def encode(p: NativeProgram) -> bytes:
    """The binary file contents of ``p``."""
    return container.pack(MAGIC, FORMAT_VERSION, _encoder.encode(p.program), p.segment)


def write_program(path: str | os.PathLike, p: NativeProgram) -> None:
    """Write ``p`` atomically (see :func:`serde.fileio.write_atomic`).

    Raises:
        ArtifactIOError: the OS refused the write; nothing changed at ``path``.
    """
    write_atomic(path, [encode(p)])
