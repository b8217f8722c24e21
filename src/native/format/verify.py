"""Reading an untrusted native program file: decode, then check every index, size and blob.

A program file is untrusted input. After :func:`validate_program` the runtime can index its
tables without further checks: a damaged file fails here with a message naming the field.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable
from typing import BinaryIO

import msgspec

from native.errors import ArenaTooLargeError, FlowTooLargeError, MemoryPlanError, NativeFormatError
from native.format import container
from native.format import program as P
from native.format.container import ALIGN, check_blob
from native.format.exprs import OPS, SYM, check_code
from native.format.memory import code_overflow, symbol_ranges, verify_plan
from serde.core import schema
from serde.core.dtypes import ITEMSIZE
from serde.core.limits import DEFAULT_LIMITS, Limits, too_large

__all__ = ["damaged", "decode", "read_program", "validate_program"]

_decoder = msgspec.msgpack.Decoder(P.Program)

_SHA_RE = re.compile(r"[0-9a-f]{64}\Z")
_OP_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*::[A-Za-z_][A-Za-z0-9_]*\Z")
_OVERLOAD_RE = re.compile(r"[A-Za-z0-9_]*\Z")
_INT64_MAX = (1 << 63) - 1
_ZERO_CHUNK = 1 << 20  # padding is compared in bounded pieces
_SCALAR_TYPES = frozenset(int(s) for s in ITEMSIZE)
# Unknown (0) has no torch layout or memory format: the runtimes could not turn it into one (the
# C++ loader refuses it; the Python runtime failed with a KeyError when the value was first used).
_LAYOUTS = frozenset(int(x) for x in schema.Layout if x != schema.Layout.Unknown)
_FORMATS = frozenset(int(x) for x in schema.MemoryFormat if x != schema.MemoryFormat.Unknown)


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
    v.control_flow()
    v.signature()
    v.bound_symbols()
    v.overflow()
    v.definite_assignment()
    v.handles()
    v.memory_plan()


def damaged(what: str, where: str, msg: str) -> NativeFormatError:
    """The error for a file whose ``where`` breaks a rule of the format (``msg``)."""
    return NativeFormatError(f"{what}: {where}: {msg}; the file is damaged or was not written by pt2serde")


class _Validator:
    def __init__(self, p: P.Program, segment: memoryview, what: str, limits: Limits) -> None:
        self.p, self.segment, self.what, self.limits = p, segment, what, limits
        self.nv = len(p.values)
        self.loop_depth = 0
        self.merges = 0  # jumps plus distinct jump targets (control_flow)
        self.heads: dict[int, int] = {}  # a loop's head -> the backward jump closing it (control_flow)
        self.list_depth: dict[int, int] = {}  # a boxed list's nesting depth (1: items are not lists)

    def fail(self, where: str, msg: str) -> None:
        raise damaged(self.what, where, msg)

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
        self.padding()

    def padding(self) -> None:
        """Every segment byte outside the blobs (the alignment padding between them) is zero, so
        that every byte of the file is either covered by a checksum or required to be zero."""
        end = 0
        for start, stop in sorted((c.offset, c.offset + c.nbytes) for c in self.p.constants):
            if start > end:
                self.zeros(end, start)
            end = max(end, stop)
        if end < len(self.segment):
            self.zeros(end, len(self.segment))

    def zeros(self, start: int, stop: int) -> None:
        for at in range(start, stop, _ZERO_CHUNK):
            chunk = bytes(self.segment[at:min(stop, at + _ZERO_CHUNK)])
            nonzero = len(chunk) - len(chunk.lstrip(b"\0"))
            if nonzero < len(chunk):
                self.fail("segment", f"byte {at + nonzero} lies between blobs (padding {start}..{stop}) and is "
                                     f"{chunk[nonzero]:#04x}, not zero")

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
        # Reading a list reads its items, recursively: bound the depth of every walk over them.
        depth = 1 + max((self.list_depth.get(item, 0) for item in val.items), default=0)
        if depth > P.MAX_LIST_DEPTH:
            self.fail(where, f"lists nest more than {P.MAX_LIST_DEPTH} deep")
        self.list_depth[i] = depth

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

    def control_flow(self) -> None:
        """Jumps must form the structured loops and branches the emitter writes.

        A loop is a backward jump, always unconditional, to a head no other loop uses; loops nest
        or are disjoint; a forward jump never enters a loop's body from outside nor leaves its
        innermost loop past the loop's end; and every loop has a conditional jump to its end.
        The memory plan's liveness and the runtimes' loop budget rest on this shape, and a file
        whose jumps were edited into some other shape is refused here, before anything runs.
        """
        p = self.p
        jumps = [(pc, ins) for pc, ins in enumerate(p.instructions) if type(ins) is P.JumpFalseCall]
        heads = self.heads  # head -> the backward jump closing that loop
        self.merges = len(jumps) + len({ins.target for _, ins in jumps})
        for pc, ins in jumps:
            if ins.target > pc:
                continue
            if not P.is_unconditional(self.p, ins):
                self.fail(f"instructions[{pc}]", f"a backward jump (to instruction {ins.target}) must be "
                                                 "unconditional: a loop is left through a forward jump")
            if ins.target in heads:
                self.fail(f"instructions[{pc}]", f"a second loop jumps back to instruction {ins.target} "
                                                 f"(instructions[{heads[ins.target]}] closes one there)")
            heads[ins.target] = pc
        if not heads:
            return  # forward jumps alone cannot enter, leave or repeat anything
        ends = [heads[h] for h in sorted(heads)]
        parent: dict[int, int] = {}  # a loop's head -> the head of the loop just around it
        stack: list[int] = []
        for h, end in zip(sorted(heads), ends, strict=True):
            while stack and heads[stack[-1]] < h:
                stack.pop()
            if stack and heads[stack[-1]] < end:
                self.fail(f"instructions[{end}]", f"the loop [{h}, {end}] overlaps the loop [{stack[-1]}, "
                                                  f"{heads[stack[-1]]}] without nesting in it")
            if stack:
                parent[h] = stack[-1]
            stack.append(h)
            if len(stack) > P.MAX_LOOP_DEPTH:
                self.fail(f"instructions[{end}]", f"loops are nested more than {P.MAX_LOOP_DEPTH} deep")
            self.loop_depth = max(self.loop_depth, len(stack))
        inner = self.innermost_loops(heads)
        exits: set[int] = set()
        for pc, ins in jumps:
            x = ins.target
            if x <= pc:
                continue
            h = inner[pc]
            if h != -1 and x > heads[h] + 1:
                self.fail(f"instructions[{pc}]", f"the jump to instruction {x} leaves the loop [{h}, {heads[h]}] "
                                                 "past its end")
            g = inner[x] if x < len(inner) else -1
            if g == x:
                g = parent.get(g, -1)  # landing on a loop's head enters it from its start
            if g != -1 and not g <= pc <= heads[g]:
                self.fail(f"instructions[{pc}]", f"the jump to instruction {x} enters the body of the loop "
                                                 f"[{g}, {heads[g]}] from outside it")
            if h != -1 and x == heads[h] + 1 and not P.is_unconditional(self.p, ins):
                exits.add(h)
        for h in sorted(heads):
            if h not in exits:
                self.fail(f"instructions[{heads[h]}]", f"the loop [{h}, {heads[h]}] has no conditional jump to "
                                                       f"its end (instruction {heads[h] + 1}): it could never stop")

    def definite_assignment(self) -> None:
        """Every read is of a value written on every path to it and not freed since.

        The runtimes hold an unwritten or freed value as None and would hand it to a kernel; a file
        whose edits reorder writes and reads is refused here instead. Constants, weights and the
        inputs are written before the first instruction; a kernel's list result writes its items,
        and reading a list reads its items. Jump targets meet the states of every edge into them;
        loops take as many passes as they are deep (at most ``MAX_LOOP_DEPTH`` + 2).
        """
        p = self.p
        defined = bytearray(self.nv)
        for i, val in enumerate(p.values):
            unset = isinstance(val, (P.List, P.SymInt, P.SymFloat, P.SymBool)) or (
                isinstance(val, P.Tensor) and val.data < 0)
            defined[i] = not unset
        for inp in p.inputs:
            defined[inp.value] = 1
        back_in = dict.fromkeys(self.heads, b"\x01" * self.nv)
        cells = 0
        for passes in range(1, self.loop_depth + 3):
            # A pass copies or meets the whole state at every jump and target: bound that before
            # a file with many jumps over many values makes it quadratic in the file's size.
            cells += self.merges * self.nv
            if cells > self.limits.max_flow_cells:
                raise FlowTooLargeError(too_large(
                    f"{self.what}: instructions", f"the data-flow check's work ({self.merges} jumps and jump "
                    f"targets x {self.nv} values x {passes} passes)", cells, "max_flow_cells",
                    self.limits.max_flow_cells))
            flow = _Assignment(self, bytes(defined), back_in)
            flow.run()
            if flow.back_out == back_in:
                if flow.error:
                    self.fail(*flow.error)
                return
            back_in = flow.back_out
        self.fail("instructions", "the loops' definite assignment did not settle")

    def innermost_loops(self, heads: dict[int, int]) -> list[int]:
        """For each instruction, the head of the innermost loop holding it (-1: none)."""
        inner = [-1] * len(self.p.instructions)
        stack: list[int] = []
        order = sorted(heads)
        k = 0
        for pc in range(len(inner)):
            while stack and heads[stack[-1]] < pc:
                stack.pop()
            while k < len(order) and order[k] == pc:
                stack.append(order[k])
                k += 1
            if stack:
                inner[pc] = stack[-1]
        return inner

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
        for field, n in (("input_keys", len(self.p.inputs)), ("output_keys", len(self.p.outputs))):
            keys = getattr(self.p, field)
            if keys and len(keys) != n:
                self.fail(field, f"{len(keys)} keys for {n} {field.removesuffix('_keys')}s")
            if len(set(keys)) != len(keys):
                self.fail(field, "the keys are not distinct")

    def bound_symbols(self) -> None:
        """An input's sizes and the guards are evaluated when the inputs are bound, before any kernel
        runs: an unbacked symbol (input -1) has no value yet, so neither may depend on one."""
        p = self.p
        for i, inp in enumerate(p.inputs):
            t = p.values[inp.value]
            if inp.constant or not isinstance(t, P.Tensor):
                continue
            for d, size in enumerate(t.sizes):
                if isinstance(size, P.Sym):
                    self.unbound(size.expr, f"inputs[{i}]", f"dimension {d} of input {inp.name!r}")
        for k, e in enumerate(p.guards):
            self.unbound(e, f"guards[{k}]", "the guard")

    def unbound(self, e: int, where: str, what: str) -> None:
        code = self.p.exprs[e]
        for pos, s in _symbols_in(code):
            sym = self.p.symbols[s]
            if sym.input < 0:
                self.fail(where, f"{what} is expression {e}, which reads symbol {s} ({sym.name!r}) at position {pos}; "
                                 "no input binds that symbol (its input is -1, a data-dependent size), so it has "
                                 "no value when the inputs are checked. Bind it to an input dimension or re-emit "
                                 "the program")

    def overflow(self) -> None:
        """The runtimes refuse a size expression whose add, mul or pow leaves int64; one that does so
        for inputs within the symbols' ranges is refused here, before it can be run."""
        ranges = symbol_ranges(self.p)
        for k, code in enumerate(self.p.exprs):
            found = code_overflow(code, ranges)
            if found is not None:
                pos, bound = found
                names = sorted({self.p.symbols[s].name for _, s in _symbols_in(code)})
                self.fail(f"exprs[{k}]", f"the {OPS[code[pos]][0]} at position {pos} reaches {bound} for "
                                         f"some values of {', '.join(names) or 'its constants'} within their "
                                         "ranges, past int64; narrow the symbols' ranges or re-emit the program")

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


class _Assignment:
    """One pass of the definite-assignment analysis: which values are written at each instruction."""

    def __init__(self, v: _Validator, entry: bytes, back_in: dict[int, bytes]) -> None:
        self.v, self.values, self.lists = v, v.p.values, v.list_depth.keys()
        self.defined = bytearray(entry)
        self.everything = b"\x01" * len(entry)
        self.back_in = back_in
        self.forward: dict[int, bytes] = {}  # jump target -> the meet of the states jumping there
        self.back_out: dict[int, bytes] = {}
        self.error: tuple[str, str] | None = None  # the first read of an unwritten value

    def run(self) -> None:
        instructions = self.v.p.instructions
        for pc, ins in enumerate(instructions):
            if pc in self.forward or pc in self.back_in:
                self.merge(pc)
            _ASSIGNMENT_STEPS[type(ins)](self, ins, pc)
        self.merge(len(instructions))
        for i, o in enumerate(self.v.p.outputs):
            self.read(o, lambda i=i: f"outputs[{i}]")

    def merge(self, pc: int) -> None:
        for edges in (self.forward, self.back_in):
            if pc in edges:
                self.defined[:] = _meet(bytes(self.defined), edges[pc])
        self.forward.pop(pc, None)

    def read(self, v: int, where: Callable[[], str]) -> None:
        if self.error is not None:
            return
        if not isinstance(self.values[v], P.List):
            if not self.defined[v]:
                self.error = (where(), f"value {v} may be read before it is written or after it is freed")
            return
        for leaf in self.leaves(v):
            if not self.defined[leaf]:
                self.error = (where(), f"value {leaf} (an item of value {v}) may be read before it is written or "
                                       "after it is freed")
                return

    def leaves(self, v: int) -> list[int]:
        """The values a read of ``v`` reads: a boxed list's items (themselves maybe lists), else ``v``."""
        val = self.values[v]
        if not isinstance(val, P.List):
            return [v]
        return [leaf for item in val.items for leaf in self.leaves(item)]

    def write(self, v: int) -> None:
        val = self.values[v]
        if isinstance(val, P.List):
            for item in val.items:
                self.write(item)
        else:
            self.defined[v] = 1

    def kernel(self, ins: P.KernelCall, pc: int) -> None:
        defined, lists = self.defined, self.lists
        if self.error is None:
            for j, a in enumerate(ins.args):
                if a in lists or not defined[a]:  # the common case, a written plain value, costs one test
                    self.read(a, lambda j=j: f"instructions[{pc}].args[{j}]")
        for o in ins.outs:
            if o in lists:
                self.write(o)
            elif o != -1:
                defined[o] = 1

    def move(self, ins: P.MoveCall, pc: int) -> None:
        self.read(ins.src, lambda: f"instructions[{pc}].src")
        self.defined[ins.dst] = 1

    def jump(self, ins: P.JumpFalseCall, pc: int) -> None:
        always = P.is_unconditional(self.v.p, ins)
        if not always:
            self.read(ins.cond, lambda: f"instructions[{pc}].cond")
        edges = self.forward if ins.target > pc else self.back_out
        state = bytes(self.defined)
        edges[ins.target] = _meet(edges[ins.target], state) if ins.target in edges else state
        if always:
            self.defined[:] = self.everything  # nothing falls through: what follows is reached by jumps only

    def free(self, ins: P.FreeCall, pc: int) -> None:
        self.defined[ins.value] = 0

    def alloc(self, ins: P.AllocCall, pc: int) -> None:
        self.defined[ins.value] = 1


def _symbols_in(code: list[int]) -> list[tuple[int, int]]:
    """(position, symbol) of each symbol ``code`` (checked by ``check_code``) reads."""
    found = []
    i = 0
    while i < len(code):
        op = code[i]
        if op == SYM:
            found.append((i, code[i + 1]))
        i += 2 if OPS[op][1] else 1
    return found


def _meet(a: bytes, b: bytes) -> bytes:
    return (int.from_bytes(a, "little") & int.from_bytes(b, "little")).to_bytes(len(a), "little")


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
_ASSIGNMENT_STEPS = {
    P.KernelCall: _Assignment.kernel, P.MoveCall: _Assignment.move, P.JumpFalseCall: _Assignment.jump,
    P.FreeCall: _Assignment.free, P.AllocCall: _Assignment.alloc,
}
assert set(_INSTRUCTION_CHECKS) == set(P.INSTRUCTION_TYPES), "instruction checks are incomplete"
assert set(_ASSIGNMENT_STEPS) == set(P.INSTRUCTION_TYPES), "definite-assignment steps are incomplete"
