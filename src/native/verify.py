"""Reading an untrusted native program file: decode, then check every index, size and blob.

A program file is untrusted input. After :func:`validate_program` the runtime can index its
tables without further checks: a damaged file fails here with a message naming the field.
"""

from __future__ import annotations

import hashlib
import os
import re
from typing import BinaryIO

import msgspec

from serde.bridge.weights import ITEMSIZE
from serde.core import schema
from serde.core.limits import DEFAULT_LIMITS, Limits, too_large

from . import container
from . import program as P
from .container import ALIGN, check_blob
from .errors import ArenaTooLargeError, MemoryPlanError, NativeFormatError
from .exprs import check_code
from .memory import verify_plan

__all__ = ["decode", "read_program", "validate_program"]

_decoder = msgspec.msgpack.Decoder(P.Program)

_SHA_RE = re.compile(r"[0-9a-f]{64}\Z")
_OP_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*::[A-Za-z_][A-Za-z0-9_]*\Z")
_OVERLOAD_RE = re.compile(r"[A-Za-z0-9_]*\Z")
_INT64_MAX = (1 << 63) - 1
_SCALAR_TYPES = frozenset(int(s) for s in ITEMSIZE)
_LAYOUTS = frozenset(int(x) for x in schema.Layout)
_FORMATS = frozenset(int(x) for x in schema.MemoryFormat)


def decode(buf: bytes | bytearray | memoryview, *, what: str = "native program", verify: bool = True,
           limits: Limits = DEFAULT_LIMITS) -> P.NativeProgram:
    """Parse and validate a native program file.

    Args:
        verify: also check the sha256 of every constant blob.
        limits: ``max_arena_bytes`` bounds the memory plan before any runtime allocates it.

    Raises:
        NativeFormatError: damaged, truncated or hostile file (names the field).
        NativeVersionError: written in a format version this reader does not support.
        ArenaTooLargeError: the memory plan asks for more than ``limits.max_arena_bytes``.
    """
    _, header, segment = container.unpack(buf, P.MAGIC, range(P.MIN_FORMAT_VERSION, P.FORMAT_VERSION + 1), what)
    try:
        program = _decoder.decode(header)
    except (msgspec.ValidationError, msgspec.DecodeError) as e:
        raise NativeFormatError(f"{what}: the header does not match the program schema: {e}") from None
    except UnicodeDecodeError as e:
        raise NativeFormatError(f"{what}: the header holds a string that is not UTF-8 ({e.reason}); "
                                "the file is damaged") from None
    validate_program(program, segment, what=what, verify_hashes=verify, limits=limits)
    return P.NativeProgram(program, segment)


def read_program(src: str | os.PathLike | BinaryIO | bytes, *, verify: bool = True,
                 limits: Limits = DEFAULT_LIMITS) -> P.NativeProgram:
    """Read and validate a native program file (see :func:`decode`)."""
    what = os.fspath(src) if isinstance(src, (str, os.PathLike)) else "native program"
    return decode(container.read_bytes(src, what), what=what, verify=verify, limits=limits)


def validate_program(p: P.Program, segment: memoryview, *, what: str, verify_hashes: bool = True,
                     limits: Limits = DEFAULT_LIMITS) -> None:
    """Check ``p`` against itself and its segment.

    Raises:
        NativeFormatError: the first inconsistency, e.g. ``instructions[12].args[3]: value 900 is
            out of range (there are 40 values)``.
        ArenaTooLargeError: the memory plan's arena exceeds ``limits.max_arena_bytes``.
    """
    v = _Validator(p, segment, what, limits)
    v.constants(verify_hashes)
    v.exprs()
    v.symbols()
    v.values_table()
    v.operators()
    v.instructions()
    v.signature()
    v.handles()
    v.memory_plan()


class _Validator:
    def __init__(self, p: P.Program, segment: memoryview, what: str, limits: Limits) -> None:
        self.p, self.segment, self.what, self.limits = p, segment, what, limits
        self.nv = len(p.values)

    def fail(self, where: str, msg: str) -> None:
        raise NativeFormatError(f"{self.what}: {where}: {msg}; the file is damaged or was not written by pt2serde")

    def value(self, i: int, where: str, allow_discard: bool = False) -> None:
        if not (0 <= i < self.nv or (allow_discard and i == -1)):
            self.fail(where, f"value {i} is out of range (there are {self.nv} values)")

    def constants(self, verify_hashes: bool) -> None:
        for i, c in enumerate(self.p.constants):
            where = f"constants[{i}]"
            if not _SHA_RE.match(c.sha256):
                self.fail(where, f"sha256 {c.sha256!r} is not 64 lowercase hex digits")
            try:
                check_blob(c.offset, c.nbytes, len(self.segment), f"{self.what}: {where}")
            except NativeFormatError:
                raise
            if verify_hashes and hashlib.sha256(self.segment[c.offset:c.offset + c.nbytes]).hexdigest() != c.sha256:
                self.fail(where, "the blob's bytes do not hash to its sha256")

    def exprs(self) -> None:
        for i, code in enumerate(self.p.exprs):
            check_code(code, len(self.p.symbols), f"{self.what}: exprs[{i}]")

    def symbols(self) -> None:
        for i, s in enumerate(self.p.symbols):
            where = f"symbols[{i}]"
            if s.input != -1 and not 0 <= s.input < len(self.p.inputs):
                self.fail(where, f"input {s.input} is out of range")
            if s.dim < -1 or s.scale < 1:
                self.fail(where, f"dim {s.dim} / scale {s.scale} is invalid")

    def dim(self, d: P.Dim, where: str) -> None:
        if isinstance(d, P.Sym):
            if not 0 <= d.expr < len(self.p.exprs):
                self.fail(where, f"expression {d.expr} is out of range (there are {len(self.p.exprs)})")
        elif not 0 <= d <= _INT64_MAX:
            self.fail(where, f"{d} is not a valid size")

    def values_table(self) -> None:
        for i, val in enumerate(self.p.values):
            _VALUE_CHECKS[type(val)](self, val, i, f"values[{i}]")

    def boxed(self, val: P.List, i: int, where: str) -> None:
        for j, item in enumerate(val.items):
            # Items come first, so boxed lists cannot form cycles.
            if not 0 <= item < i:
                self.fail(f"{where}.items[{j}]", f"value {item} must precede the list itself")

    def enum(self, val: P.Value, allowed: frozenset[int], what: str, where: str) -> None:
        if val.v not in allowed:
            self.fail(where, f"unknown {what} {val.v}")

    def sym(self, val: P.SymInt | P.SymBool, where: str) -> None:
        if not -1 <= val.expr < len(self.p.exprs):
            self.fail(where, f"expression {val.expr} is out of range")

    def tensor(self, t: P.Tensor, where: str) -> None:
        if t.dtype not in _SCALAR_TYPES:
            self.fail(where, f"unknown scalar type {t.dtype}")
        if len(t.sizes) != len(t.strides):
            self.fail(where, f"{len(t.sizes)} sizes but {len(t.strides)} strides")
        for k, d in enumerate(t.sizes):
            self.dim(d, f"{where}.sizes[{k}]")
        for k, d in enumerate(t.strides):
            self.dim(d, f"{where}.strides[{k}]")
        self.dim(t.storage_offset, f"{where}.storage_offset")
        if t.data == -1:
            return
        if not 0 <= t.data < len(self.p.constants):
            self.fail(where, f"constant {t.data} is out of range")
        dims = [*t.sizes, *t.strides, t.storage_offset]
        if any(isinstance(d, P.Sym) for d in dims):
            self.fail(where, "a weight must have concrete sizes, strides and offset")
        numel_end = t.storage_offset + (sum((n - 1) * s for n, s in zip(t.sizes, t.strides, strict=True)) + 1
                                        if all(t.sizes) else 0)
        end = numel_end * ITEMSIZE[schema.ScalarType(t.dtype)]
        if end > self.p.constants[t.data].nbytes:
            self.fail(where, f"the view reaches byte {end} of a {self.p.constants[t.data].nbytes}-byte constant")

    def operators(self) -> None:
        for i, op in enumerate(self.p.operators):
            if not _OP_RE.match(op.name) or not _OVERLOAD_RE.match(op.overload):
                self.fail(f"operators[{i}]", f"{op.name!r}.{op.overload!r} is not an operator name")
            for j, positions in enumerate(op.returns_alias):
                if any(k < 0 for k in positions):
                    self.fail(f"operators[{i}].returns_alias[{j}]", f"argument positions {positions} must be >= 0")

    def instructions(self) -> None:
        for i, ins in enumerate(self.p.instructions):
            _INSTRUCTION_CHECKS[type(ins)](self, ins, f"instructions[{i}]")

    def kernel(self, ins: P.KernelCall, where: str) -> None:
        n_ops = len(self.p.operators)
        if not 0 <= ins.op < n_ops or not -1 <= ins.out_op < n_ops:
            self.fail(where, f"operator {ins.op}/{ins.out_op} is out of range ({n_ops} operators)")
        for j, a in enumerate(ins.args):
            self.value(a, f"{where}.args[{j}]")
        for j, o in enumerate(ins.outs):
            self.value(o, f"{where}.outs[{j}]", allow_discard=True)

    def jump(self, ins: P.JumpFalseCall, where: str) -> None:
        self.value(ins.cond, f"{where}.cond")
        if not 0 <= ins.target <= len(self.p.instructions):
            self.fail(where, f"jump target {ins.target} is outside the {len(self.p.instructions)} instructions")

    def alloc(self, ins: P.AllocCall, where: str) -> None:
        self.value(ins.value, f"{where}.value")
        if not isinstance(self.p.values[ins.value], P.Tensor):
            self.fail(where, "only tensors can be allocated")

    def signature(self) -> None:
        if len(self.p.guards) != len(self.p.guard_texts):
            self.fail("guards", f"{len(self.p.guards)} guards but {len(self.p.guard_texts)} guard texts")
        for i, k in enumerate(self.p.guards):
            if not 0 <= k < len(self.p.exprs):
                self.fail(f"guards[{i}]", f"expression {k} is out of range (there are {len(self.p.exprs)})")
        for i, inp in enumerate(self.p.inputs):
            self.value(inp.value, f"inputs[{i}].value")
        for i, o in enumerate(self.p.outputs):
            self.value(o, f"outputs[{i}]")
        for i, s in enumerate(self.p.state):
            self.value(s.value, f"state[{i}].value")
            t = self.p.values[s.value]
            if not isinstance(t, P.Tensor) or t.data < 0:
                self.fail(f"state[{i}]", "state must be a tensor backed by a constant")
            if s.kind not in ("parameter", "buffer", "constant"):
                self.fail(f"state[{i}]", f"unknown kind {s.kind!r}")

    def handles(self) -> None:
        p = self.p
        if len(p.instruction_handles) != len(p.instructions):
            self.fail("instruction_handles", f"{len(p.instruction_handles)} handles for {len(p.instructions)} "
                                             "instructions")
        n = len(p.debug_handles)
        for i, h in enumerate(p.instruction_handles):
            if not -1 <= h < n:
                self.fail(f"instruction_handles[{i}]", f"handle {h} is out of range (there are {n})")

    def memory_plan(self) -> None:
        mp = self.p.memory_plan
        if not 0 <= mp.arena_size <= self.limits.max_arena_bytes:
            raise ArenaTooLargeError(too_large(f"{self.what}: memory_plan.arena_size", "the arena", mp.arena_size,
                                               "max_arena_bytes", self.limits.max_arena_bytes))
        seen: set[int] = set()
        for i, a in enumerate(mp.allocations):
            where = f"memory_plan.allocations[{i}]"
            self.value(a.value, where)
            if not isinstance(self.p.values[a.value], P.Tensor) or a.value in seen:
                self.fail(where, "an allocation must name a distinct tensor")
            seen.add(a.value)
            if a.offset < 0 or a.nbytes < 0 or a.offset % ALIGN or a.offset + a.nbytes > mp.arena_size:
                self.fail(where, f"[{a.offset}, +{a.nbytes}) does not fit the {mp.arena_size}-byte arena aligned")
        tight = max((-(-(a.offset + a.nbytes) // ALIGN) * ALIGN for a in mp.allocations), default=0)
        if mp.arena_size != tight:
            self.fail("memory_plan.arena_size", f"{mp.arena_size} bytes, but the allocations end at {tight}; a plan "
                                                "asks for exactly the arena its slots use")
        if mp.allocations:
            try:
                verify_plan(self.p)
            except MemoryPlanError as e:  # only the plan's own findings: a bug elsewhere stays a bug
                self.fail("memory_plan", str(e))


def _no_check(v: _Validator, val: P.Value, i: int, where: str) -> None:
    return None


_VALUE_CHECKS = {
    **{t: _no_check for t in (P.NoneValue, P.Int, P.Float, P.Bool, P.String, P.IntList, P.FloatList, P.BoolList,
                             P.StringList, P.Complex, P.Device, P.SymFloat)},
    P.ScalarType: lambda v, val, i, w: v.enum(val, _SCALAR_TYPES, "scalar type", w),
    P.Layout: lambda v, val, i, w: v.enum(val, _LAYOUTS, "layout", w),
    P.MemoryFormat: lambda v, val, i, w: v.enum(val, _FORMATS, "memory format", w),
    P.Tensor: lambda v, val, i, w: v.tensor(val, w),
    P.List: lambda v, val, i, w: v.boxed(val, i, w),
    P.SymInt: lambda v, val, i, w: v.sym(val, w),
    P.SymBool: lambda v, val, i, w: v.sym(val, w),
}
_INSTRUCTION_CHECKS = {
    P.KernelCall: _Validator.kernel,
    P.MoveCall: lambda v, ins, w: (v.value(ins.src, f"{w}.src"), v.value(ins.dst, f"{w}.dst")),
    P.JumpFalseCall: _Validator.jump,
    P.FreeCall: lambda v, ins, w: v.value(ins.value, f"{w}.value"),
    P.AllocCall: _Validator.alloc,
}
assert set(_VALUE_CHECKS) == set(P.VALUE_TYPES), "value checks are incomplete"
assert set(_INSTRUCTION_CHECKS) == set(P.INSTRUCTION_TYPES), "instruction checks are incomplete"
