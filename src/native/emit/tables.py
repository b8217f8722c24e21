"""The emitter's tables: values, operators, expressions, symbols and constants, each deduplicated.

Constants (scalars, lists, dtypes, boxed lists of the same items) get one entry per distinct
encoding; run-time slots (tensors and scalars that instructions write) are always new.
"""

from __future__ import annotations

from typing import Any

import msgspec

from native.format import program as P
from native.format.container import SegmentBuilder
from native.format.exprs import compile_tree

__all__ = ["ProgramBuilder", "Binding"]

_key_encoder = msgspec.msgpack.Encoder()

Binding = tuple[int, int, int, int]
"""(input position, dim or -1, scale, offset): ``input dim = scale * symbol + offset``."""


class ProgramBuilder:
    """Accumulates a :class:`native.format.program.Program` while the emitter walks the graph."""

    def __init__(self, bindings: dict[str, Binding], ranges: dict[str, tuple[int | None, int | None]]) -> None:
        self.values: list[P.Value] = []
        self.instructions: list[P.Instruction] = []
        self.operators: list[P.Operator] = []
        self.exprs: list[list[int]] = []
        self.symbols: list[P.Symbol] = []
        self.constants: list[P.Constant] = []
        self.inputs: list[P.Input] = []
        self.outputs: list[int] = []
        self.state: list[P.State] = []
        self.segment = SegmentBuilder()
        self.debug_handles: list[P.DebugHandle] = []
        self.instruction_handles: list[int] = []
        self.handle = -1  # the node instructions are emitted for now
        self._bindings = bindings
        self._ranges = ranges
        self._const_index: dict[bytes, int] = {}
        self._op_index: dict[tuple[str, str], int] = {}
        self._expr_index: dict[tuple[int, ...], int] = {}
        self._sym_index: dict[str, int] = {}
        self._blob_index: dict[str, int] = {}

    # -- values

    def const(self, v: P.Value) -> int:
        """Index of constant ``v``, shared with every equal constant (equal by encoding: 1 != 1.0 != True)."""
        key = _key_encoder.encode(v)
        i = self._const_index.get(key)
        if i is None:
            i = self._const_index[key] = self.new(v)
        return i

    def new(self, v: P.Value) -> int:
        """A fresh value entry (a run-time slot)."""
        self.values.append(v)
        return len(self.values) - 1

    # -- operators, expressions, symbols, blobs

    def op(self, name: str, overload: str, returns_alias: Any = ()) -> int:
        key = (name, overload)
        i = self._op_index.get(key)
        if i is None:
            i = self._op_index[key] = len(self.operators)
            self.operators.append(P.Operator(name, overload, [list(a) for a in returns_alias]))
        return i

    def expr(self, tree: tuple, where: str) -> int:
        code = tuple(compile_tree(tree, self.symbol, where=where))
        i = self._expr_index.get(code)
        if i is None:
            i = self._expr_index[code] = len(self.exprs)
            self.exprs.append(list(code))
        return i

    def dim(self, tree: tuple, where: str) -> P.Dim:
        """A literal for constant sizes, else an expression reference."""
        if tree[0] == "Integer" and tree[1] >= 0:
            return tree[1]
        return P.Sym(self.expr(tree, where))

    def symbol(self, name: str) -> int:
        i = self._sym_index.get(name)
        if i is None:
            i = self._sym_index[name] = len(self.symbols)
            inp, dim, scale, offset = self._bindings.get(name, (-1, -1, 1, 0))
            lo, hi = self._ranges.get(name, (None, None))
            self.symbols.append(P.Symbol(name, inp, dim, scale, offset, lo, hi))
        return i

    def is_bound(self, name: str) -> bool:
        return name in self._bindings

    def blob(self, sha256: str, data: bytes | memoryview) -> int:
        """Constant index of a weight storage (one per distinct content)."""
        i = self._blob_index.get(sha256)
        if i is None:
            _, offset, nbytes = self.segment.add(data, sha256)
            i = self._blob_index[sha256] = len(self.constants)
            self.constants.append(P.Constant(sha256, offset, nbytes))
        return i

    # -- instructions

    def emit(self, ins: P.Instruction) -> int:
        self.instructions.append(ins)
        self.instruction_handles.append(self.handle)
        return len(self.instructions) - 1

    def new_handle(self, h: P.DebugHandle) -> int:
        self.debug_handles.append(h)
        return len(self.debug_handles) - 1

    def here(self) -> int:
        return len(self.instructions)

    def patch_jump(self, pos: int, target: int) -> None:
        j = self.instructions[pos]
        assert isinstance(j, P.JumpFalseCall)
        self.instructions[pos] = P.JumpFalseCall(j.cond, target)

    def build(self, **extra: Any) -> P.Program:
        return P.Program(
            values=self.values, operators=self.operators, instructions=self.instructions, exprs=self.exprs,
            symbols=self.symbols, constants=self.constants, inputs=self.inputs, outputs=self.outputs,
            state=self.state, debug_handles=self.debug_handles, instruction_handles=self.instruction_handles,
            **extra,
        )
