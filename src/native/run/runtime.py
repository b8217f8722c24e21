"""The reference runtime: executes a native program with ``torch.ops`` and the ``symbolic::`` ops.

``Method(program)`` prepares once: weights become tensors viewing one aligned copy of the
constant segment (buffers the program writes get private copies), every operator is resolved,
and every instruction becomes a small closure. ``run`` then binds the inputs, checks them
against the program (count, dtype, rank, every size expression and symbol range) and executes
the chain. Buffer mutations are ``aten::copy_`` instructions into the state tensors the method
holds, so they persist across runs exactly as with ``ep.module()``.

Options:

- ``arena=True``: tensors with a slot in the memory plan are written by the op's out= variant
  into one arena. With fixed sizes the arena and its views are made once; with symbolic sizes the
  slots are re-packed for each distinct set of input sizes (:func:`native.format.memory.pack`, cached),
  so the arena is as large as that run needs and never larger than the plan's bound. A file whose
  operators declare fewer aliases than this process's kernels may produce is refused, and a
  functional kernel that returns arena memory anyway stops the run (``ArenaAliasError``). Every
  planned call's results must have their declared dtypes and sizes, or the run stops
  (``NativeRuntimeError``, the C++ runtime's message): an out= kernel would resize its slot's
  view over its neighbours'. A planned call run functionally (see ``out_min_bytes``) whose result
  is not what the program declares is run again out=, into a tensor of the declared dtype and
  sizes, before it is judged: the C++ runtime runs every planned call out=, and an out= kernel
  casts a result to its output's dtype where it may.
- ``out_min_bytes`` (default ``OUT_MIN_BYTES``): planned tensors smaller than this in a run are
  allocated by their functional kernel instead (0: every planned tensor is written out=).
- ``max_loop_instructions`` (default 10,000,000; None: no limit): a run whose loops execute more
  instructions than this fails with NativeRuntimeError instead of hanging on a loop whose condition
  never becomes false (the program is untrusted input). Each iteration is charged its loop's length
  (from the head to the backward jump, branches not taken included), so the bound holds whatever a
  loop's body holds; straight-line code runs once and is bounded by the file.
- ``check=True`` (tests): freed values are poisoned and any later read fails; every kernel's
  outputs are checked against their declared dtype and sizes; values left alive at the end are
  reported; functional kernels may not return arena memory; ``executed`` collects the
  instructions that ran (to show that both branches of a ``cond`` were taken).

This is the reference runtime, and its one engine is specialized by hand: the C++ runtime
(``native_cpp/``, bound by :mod:`native.run.cpp_engine`) is the fast engine, and the closures here
are kept fast enough to test every program in both modes. Every specialization lives here, and
each is a closure that computes exactly what the generic one computes:

- the generic closure per kind (``_INSTRUCTIONS``): a kernel call reads its arguments through one
  getter each, calls the operator with positional and keyword arguments, and stores its results
  (``_kernel``: functional, or the out= variant into arena views, ``_out_variant``); moves, jumps,
  frees and allocations have one closure each;
- ``_simple_kernel``: a call with plain (non-list) arguments and one plain result, without the
  getters and keyword mapping; ``_static_out``: its out= form when the plan is fixed, with the
  arena views made once; ``_planned_simple``: a planned call run functionally, whose result's dtype
  and sizes are compared with the declaration in line (anything else goes to ``_judge``, which runs
  it out= as the C++ runtime does and judges that);
- ``_fuse_frees``: a run of frees folded into the instruction before it, unless a jump lands there;
- the checking wrappers, only where they can fire: ``_guarded`` (a functional kernel that may see
  arena memory must not return it), ``_declared`` (planned results as declared) and, with
  ``check=True``, ``_alias_checked``.

``Method._compiled`` builds the code once per set of calls that run out= and caches it.
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Callable, Sequence
from typing import Any, BinaryIO

import torch

from native.errors import ArenaAliasError, InputMismatchError, NativeFormatError, NativeRuntimeError
from native.format import memory
from native.format import program as P
from native.format.exprs import UnboundSymbolError, evaluate
from native.format.kernels import actual_aliases, resolve_overload
from native.format.kinds import check_kinds
from native.format.prim import NAMESPACE, PRIM_OPS
from native.format.verify import read_program
from serde.bridge.enums import SCALAR_TO_DTYPE, SCHEMA_TO_LAYOUT, SCHEMA_TO_MEMORY_FORMAT
from serde.core import schema, wire
from serde.core.dtypes import ITEMSIZE

__all__ = ["Method", "load", "run", "DEFAULT_MAX_LOOP_INSTRUCTIONS"]

DEFAULT_MAX_LOOP_INSTRUCTIONS = P.DEFAULT_MAX_LOOP_INSTRUCTIONS
# Below this many bytes a planned tensor is allocated by its functional kernel rather than written
# out= into its slot (unless the op's functional form may alias: then out= is required). Calling
# the out= variant from Python costs a few microseconds of argument checks, more than a small
# allocation; above the allocator's mmap threshold (128 KiB) each allocation costs page faults.
OUT_MIN_BYTES = 128 * 1024


class _Freed:
    def __repr__(self) -> str:
        return "<freed>"


_FREED = _Freed()
# The end of a planned result's message (Method._check_results; method.cpp kUndeclared).
_UNDECLARED = ("; in arena mode every planned result must be what the program declares, so the file is damaged or "
               "was not written by pt2serde")


def load(src: P.NativeProgram | str | os.PathLike | BinaryIO | bytes, *, engine: str = "python",
         propagate: bool = False, **options: Any) -> Method:
    """A :class:`Method` for a program object or file.

    ``engine="cpp"``: the C++ runtime (:mod:`native.run.cpp_engine`) loads, verifies and runs it
    instead; the returned object has the same call interface.

    ``propagate=True`` also runs every kernel call on meta tensors of its declared operands and
    compares the results with its declared outputs (:mod:`native.run.propagate`), so that a call
    its kernel would refuse is refused at load rather than when the program runs. With the C++
    engine the program is also decoded and checked in Python first, then handed to the C++ loader.

    Raises:
        PropagationError: (``propagate=True``) a kernel call refuses its declared operands or
            computes other results than declared.
    """
    if engine == "cpp":
        from native.run.cpp_engine import load as load_cpp

        if propagate:
            data = _bytes_of(src)
            native = read_program(data, verify=options.get("verify", True))
            check_kinds(native.program, _name_of(src))  # (Method's check, which the pass relies on)
            _propagated(native, _name_of(src))
            src = data
        return load_cpp(src, **options)
    if engine != "python":
        raise ValueError(f"unknown engine {engine!r}: 'python' or 'cpp'")
    if not isinstance(src, P.NativeProgram):
        src = read_program(src)
    method = Method(src, **options)
    if propagate:  # after Method's own checks (kinds, operators), which the pass relies on
        _propagated(src, _name_of(src))
    return method


def _propagated(native: P.NativeProgram, what: str) -> None:
    from native.run.propagate import check_propagation

    check_propagation(native, what=what)


def _bytes_of(src: P.NativeProgram | str | os.PathLike | BinaryIO | bytes) -> bytes:
    from native.format import container

    if isinstance(src, P.NativeProgram):
        return src.encode()
    if isinstance(src, (bytes, bytearray, memoryview)):
        return bytes(src)
    return bytes(container.read_bytes(src, _name_of(src)))


def _name_of(src: Any) -> str:
    return os.fspath(src) if isinstance(src, (str, os.PathLike)) else "native program"


def run(src: P.NativeProgram | str | os.PathLike | bytes, *args: Any, **kwargs: Any) -> Any:
    """One-shot ``load(src).run(*args, **kwargs)``."""
    return load(src).run(*args, **kwargs)


class Method:
    """An executable native program with its weights and state (see the module docstring)."""

    def __init__(self, native: P.NativeProgram, *, arena: bool = False, check: bool = False,
                 max_loop_instructions: int | None = DEFAULT_MAX_LOOP_INSTRUCTIONS,
                 out_min_bytes: int = OUT_MIN_BYTES) -> None:
        self.program = p = native.program
        check_kinds(p, "native program")
        self.check = check
        self.max_loop_instructions = max_loop_instructions
        self._loop_budget = [0]  # loop instructions left in the current run (negative: no limit)
        self.use_arena = arena
        self._segment = _aligned_copy(native.segment)
        self._ops = [_resolve(op, i) for i, op in enumerate(p.operators)]
        self._initial: list[Any] = [_CONSTANTS[type(v)](self, v) for v in p.values]
        self._state: dict[str, torch.Tensor] = {}
        for s in p.state:
            t = self._initial[s.value]
            if s.mutable:  # identical bytes may be shared in the segment; a written buffer needs its own
                t = self._initial[s.value] = t.clone()
            self._state[s.name] = t
        self._alloc = {a.value: a for a in p.memory_plan.allocations} if arena else {}
        if self._alloc:
            _check_aliases(p)
        self._dynamic_plan = any(_symbolic(p.values[v]) for v in self._alloc)
        self._offsets = {v: a.offset for v, a in self._alloc.items()}
        self._order = sorted(self._alloc.values(), key=lambda a: (-a.nbytes, a.start, a.value))
        self._plans: dict[tuple, tuple[dict[int, int], int]] = {}
        self._static_views: dict[int, torch.Tensor] = {}
        # Declared sizes of planned values, per plan (or per set of symbol values without one).
        self._sizes: dict[int, tuple[int, ...] | None] = {}
        self._sizes_by_symbols: dict[tuple, dict[int, tuple[int, ...] | None]] = {}
        # Calls with slots for all outputs run out= only when it pays (``OUT_MIN_BYTES``): for
        # small tensors the out= checks cost more than an allocation. Run functionally, their
        # results are fresh as declared, or (ops whose functional form may hand back an argument,
        # where the plan has no alias edge because it expects out=) copied out of the arena when
        # they land there: the plan's lifetimes hold either way. ``_out_calls``: the calls that
        # run out= for some allowed sizes (by the slots' upper bounds); the rest run functionally
        # whatever the sizes. With ``check=True`` every planned call runs out=.
        self._planned_calls = planned = memory.out_calls(p) if self._alloc else set()
        self._out_calls = planned if check else {
            pc for pc in planned if all(self._alloc[o].nbytes >= out_min_bytes for o in p.instructions[pc].outs)}
        self._out_min_bytes = out_min_bytes
        if not self._out_calls and not any(isinstance(i, P.AllocCall) and i.value in self._alloc
                                           for i in p.instructions):
            self._alloc = {}  # nothing is ever placed: no arena at all, the heap mode's code
            self._dynamic_plan = False
        static_size = p.memory_plan.arena_size if self._alloc and not self._dynamic_plan else 0
        self._arena = torch.empty(static_size, dtype=torch.uint8)
        self._arena_span = (self._arena.data_ptr(), self._arena.data_ptr() + self._arena.numel())
        self.executed: set[int] = set()  # instructions run so far (check=True only)
        self._exprs: list[int | None] = []
        self._syms: list[int | None] = []
        # The code is compiled for one set of calls that run out= (with a dynamic plan: per set
        # met, usually few as it grows with the sizes), so a run whose out= calls place nothing
        # a call reads pays neither a per-call choice nor arena guards on that call.
        self._lifetimes = memory.analyze(p) if self._alloc else None
        self._codes: dict[frozenset[int], tuple[list[Callable], dict[int, tuple[tuple, tuple]]]] = {}
        self._use_out: frozenset[int] = frozenset()
        if self._alloc and not self._dynamic_plan:
            self._use_out = self._choose_out()
        self._code, self._may_see_arena = self._compiled(self._use_out)
        self._in_spec = self._out_spec = None
        if (p.in_spec is None) != (p.out_spec is None):
            raise NativeFormatError("native program: it has an in_spec or an out_spec but not both; the emitter "
                                    "writes both or neither, so the file is damaged")
        if p.in_spec is not None:
            from serde.bridge.treespec import deserialize_treespec

            self._in_spec = deserialize_treespec(wire.decode(p.in_spec, schema.TreeSpec), "program.in_spec")
            self._out_spec = deserialize_treespec(wire.decode(p.out_spec, schema.TreeSpec), "program.out_spec")
            if self._out_spec.num_leaves != len(p.outputs):
                raise NativeFormatError(
                    f"native program: out_spec holds {self._out_spec.num_leaves} outputs but the program "
                    f"returns {len(p.outputs)}; the file is damaged")

    # ------------------------------------------------------------ public

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Parameters, buffers and constants as the method holds them (mutations included)."""
        return dict(self._state)

    def run(self, *args: Any, **kwargs: Any) -> Any:
        """Run on ``(args, kwargs)`` as ``ep.module()`` would be called; returns its output pytree.

        Raises:
            InputMismatchError: the inputs do not fit the program (structure, dtype, sizes, ranges).
            NativeRuntimeError: a kernel failed (names the instruction and operator).
        """
        import torch.utils._pytree as pytree

        leaves, spec = pytree.tree_flatten((args, kwargs))
        if self._in_spec is not None and spec != self._in_spec:
            raise InputMismatchError(f"the inputs have structure {spec} but the program takes {self._in_spec}; "
                                     "call it with the same (args, kwargs) structure it was exported with")
        outs = self.run_flat(leaves)
        return pytree.tree_unflatten(outs, self._out_spec) if self._out_spec is not None else outs

    def run_profiled(self, *args: Any, **kwargs: Any) -> tuple[Any, list[tuple[int, int]]]:
        """:meth:`run`, also returning (instruction index, nanoseconds) per executed instruction.

        Summarize with :func:`native.run.profile.summarize`. Frees that follow a kernel are timed with it.
        """
        import torch.utils._pytree as pytree

        leaves, spec = pytree.tree_flatten((args, kwargs))
        if self._in_spec is not None and spec != self._in_spec:
            raise InputMismatchError(f"the inputs have structure {spec} but the program takes {self._in_spec}")
        timings: list[tuple[int, int]] = []
        outs = self.run_flat(leaves, timings=timings)
        return (pytree.tree_unflatten(outs, self._out_spec) if self._out_spec is not None else outs), timings

    def run_flat(self, leaves: Sequence[Any], *, timings: list[tuple[int, int]] | None = None,
                 trace: Callable[[int, list], bool] | None = None) -> list[Any] | None:
        """Run on the flattened user inputs; returns the flattened user outputs.

        ``timings``: when given, (instruction index, nanoseconds) of every executed step is appended.
        ``trace``: when given, called as ``trace(pc, values)`` after every executed instruction,
        before any free that follows it (frees are not folded into kernels then), so it sees each
        result while it lives (in arena mode, before its slot is reused). When it returns True the
        run stops there and returns None (``native.run.compare`` stops at the first gap).
        """
        p = self.program
        values = list(self._initial)
        self._bind(values, leaves)
        if self._dynamic_plan:
            self._replan()
        elif self._planned_calls:  # (a dynamic plan caches them per plan)
            sizes = self._sizes_by_symbols
            key = tuple(self._syms)
            got = sizes.get(key)
            if got is None:
                if len(sizes) >= 64:
                    sizes.clear()
                got = sizes[key] = {}
            self._sizes = got
        code = self._code
        pc, n = 0, len(code)
        limit = self.max_loop_instructions
        self._loop_budget[0] = -1 if limit is None else limit
        try:
            with torch.no_grad():
                if trace is not None:
                    code = self._unfused()
                    while pc < n:
                        nxt = code[pc](values, pc)
                        if trace(pc, values):
                            return None
                        pc = nxt
                elif timings is not None:
                    clock = time.perf_counter_ns
                    while pc < n:
                        t0 = clock()
                        nxt = code[pc](values, pc)
                        timings.append((pc, clock() - t0))
                        pc = nxt
                elif self.check:
                    executed = self.executed
                    while pc < n:
                        executed.add(pc)
                        pc = code[pc](values, pc)
                else:
                    while pc < n:
                        pc = code[pc](values, pc)
        except (InputMismatchError, NativeRuntimeError):
            raise
        except Exception as e:
            raise NativeRuntimeError(f"{self.where(pc)} failed: {type(e).__name__}: {e}") from e
        if self.check:
            self._check_leaks(values)
        return [values[o] for o in p.outputs]

    def describe(self, pc: int) -> str:
        """The instruction's operator (or kind), node and module, e.g. ``aten::linear.default, node
        'linear_1' in module 'layers.0'``."""
        p = self.program
        ins = p.instructions[pc]
        if isinstance(ins, P.KernelCall):
            op = p.operators[ins.op]
            what = f"{op.name}.{op.overload}"
        else:
            what = type(ins).__name__
        h = p.instruction_handles[pc] if pc < len(p.instruction_handles) else -1
        if h < 0:
            return what
        d = p.debug_handles[h]
        return f"{what}, node {d.node!r}" + (f" in module {d.module!r}" if d.module else "")

    def where(self, pc: int) -> str:
        return f"instruction {pc} ({self.describe(pc)})"

    def _compiled(self, use_out: frozenset[int]) -> tuple[list[Callable], dict[int, tuple[tuple, tuple]]]:
        """The code (and its guarded calls) for runs in which exactly ``use_out`` run out= (cached)."""
        got = self._codes.get(use_out)
        if got is not None:
            return got
        p = self.program
        self._use_out = use_out
        self._may_see_arena = (_arena_readers(p, self._lifetimes, self._planned_calls, self._placed())
                               if self._alloc else {})
        code = [_INSTRUCTIONS[type(ins)](self, ins, pc) for pc, ins in enumerate(p.instructions)]
        if self.check:
            for pc, ins in enumerate(p.instructions):
                if isinstance(ins, P.KernelCall) and pc not in self._out_calls \
                        and not p.operators[ins.op].name.startswith(NAMESPACE + "::"):
                    code[pc] = _alias_checked(self, ins, pc, code[pc])
        else:
            code = _fuse_frees(self, code)
        got = self._codes[use_out] = (code, self._may_see_arena)
        return got

    def _unfused(self) -> list[Callable]:
        """The current code with every FreeCall its own step (for ``trace``; built per run, as tracing
        is a debugging aid and the plain code is what the timed runs use)."""
        p = self.program
        return [_INSTRUCTIONS[type(ins)](self, ins, pc) for pc, ins in enumerate(p.instructions)]

    def _placed(self) -> set[int]:
        """Values this run may put in the arena: outputs of its out= calls and allocated values."""
        p = self.program
        placed = {o for pc in self._use_out for o in p.instructions[pc].outs}
        return placed | {ins.value for ins in p.instructions if isinstance(ins, P.AllocCall) and ins.value in self._alloc}

    def _choose_out(self) -> frozenset[int]:
        """The out= calls to run out= for the current sizes (all of them with ``check=True``)."""
        if self.check:
            return frozenset(self._out_calls)
        p = self.program
        return frozenset(pc for pc in self._out_calls
                         if all(self._span_bytes(o) >= self._out_min_bytes for o in p.instructions[pc].outs))

    def _replan(self) -> None:
        """Slot offsets, arena size and out= calls for this run's sizes (cached per set of symbols)."""
        key = tuple(self._syms)
        plan = self._plans.get(key)
        if plan is None:
            sizes = []
            for a in self._order:
                sizes.append((self._span_bytes(a.value), a.start, a.end))
            offsets, size = memory.pack(sizes)
            if size > self.program.memory_plan.arena_size:  # first-fit is not monotone: keep the bound
                plan = ({v: a.offset for v, a in self._alloc.items()}, self.program.memory_plan.arena_size)
            else:
                plan = ({a.value: off for a, off in zip(self._order, offsets, strict=True)}, size)
            plan = (*plan, self._choose_out(), {}, {})
            self._plans[key] = plan
        self._offsets, size, use_out, self._static_views, self._sizes = plan
        self._code, self._may_see_arena = self._compiled(use_out)
        self._use_out = use_out
        if size > self._arena.numel():
            self._arena = torch.empty(size, dtype=torch.uint8)
            ptr = self._arena.data_ptr()
            self._arena_span = (ptr, ptr + size)
            for other in self._plans.values():  # their views point into the old arena
                other[3].clear()

    def _span_bytes(self, value: int) -> int:
        t = self.program.values[value]
        sizes, strides, offset = self._dims(t)
        span = 0 if 0 in sizes else (offset + 1 + sum((n - 1) * s for n, s in zip(sizes, strides, strict=True)))
        return span * ITEMSIZE[schema.ScalarType(t.dtype)]

    # ------------------------------------------------------------ inputs, sizes

    def _bind(self, values: list[Any], leaves: Sequence[Any]) -> None:
        p = self.program
        if len(leaves) != len(p.inputs):
            raise InputMismatchError(f"the program takes {len(p.inputs)} inputs "
                                     f"({', '.join(i.name for i in p.inputs)}), got {len(leaves)}")
        for inp, leaf in zip(p.inputs, leaves, strict=True):
            if inp.constant:
                want = values[inp.value]
                if type(leaf) is not type(want) or leaf != want:
                    raise InputMismatchError(f"input {inp.name!r}: the program was exported for the constant "
                                             f"{want!r}, got {leaf!r}; re-export to use another value")
                continue
            _check_kind(p.values[inp.value], leaf, inp.name)
            values[inp.value] = leaf
        syms: list[int | None] = [None] * len(p.symbols)
        for k, s in enumerate(p.symbols):
            if s.input < 0:
                continue
            inp = p.inputs[s.input]
            leaf = leaves[s.input]
            what = f"input {inp.name!r}" + (f" dimension {s.dim}" if s.dim >= 0 else "")
            # A file may bind a symbol to any input and dimension: the checks above compared each
            # input with its declared value, not with the symbols (as the C++ runtime does).
            if s.dim < 0:
                if not isinstance(leaf, int):  # (a bool is an int, as in the C++ runtime)
                    raise InputMismatchError(f"{what}: expected an int, got {type(leaf).__name__}")
                raw = leaf
            else:
                if not isinstance(leaf, torch.Tensor) or leaf.dim() <= s.dim:
                    raise InputMismatchError(f"{what}: the input has no such dimension")
                raw = leaf.shape[s.dim]
            v, r = divmod(raw - s.offset, s.scale)
            if r or v < 0:
                raise InputMismatchError(f"{what} is {raw}, which is not {s.scale}*{s.name} + {s.offset} for any "
                                         f"natural {s.name}")
            if (s.min is not None and v < s.min) or (s.max is not None and v > s.max):
                raise InputMismatchError(f"{what} is {raw}, so {s.name} = {v}, outside its allowed range "
                                         f"[{s.min}, {s.max if s.max is not None else 'inf'}]")
            syms[k] = v
        self._syms = syms
        self._exprs = [None] * len(p.exprs)
        for inp, leaf in zip(p.inputs, leaves, strict=True):
            t = p.values[inp.value]
            if inp.constant or not isinstance(t, P.Tensor):
                continue
            for d, want in enumerate(t.sizes):
                got = leaf.shape[d]
                if isinstance(want, P.Sym):
                    try:
                        want = self._eval(want.expr)
                    except UnboundSymbolError:
                        raise NativeRuntimeError(f"input {inp.name!r}: dimension {d} depends on a symbol no input "
                                                 "binds; the program is malformed") from None
                if got != want:
                    raise InputMismatchError(f"input {inp.name!r}: dimension {d} is {got} but the program "
                                             f"requires {want} (sizes {list(leaf.shape)})")
        for k, text in zip(p.guards, p.guard_texts, strict=True):
            try:
                ok = self._eval(k)
            except UnboundSymbolError:
                raise NativeRuntimeError(f"guard {text} depends on a symbol no input binds; the program is "
                                         "malformed") from None
            if not ok:
                raise InputMismatchError(f"the inputs fail the export guard {text} (sizes "
                                         f"{[list(x.shape) if hasattr(x, 'shape') else x for x in leaves]})")

    def _eval(self, k: int) -> int:
        v = self._exprs[k]
        if v is None:
            try:
                v = self._exprs[k] = evaluate(self.program.exprs[k], self._syms)
            except ZeroDivisionError:
                raise NativeRuntimeError(f"size expression e{k} divides by zero for these inputs") from None
            except UnboundSymbolError:
                raise  # an unbacked size: callers that can do without it catch this
            except ValueError as e:
                raise NativeRuntimeError(f"size expression e{k}: {e}") from None
        return v

    def _dims(self, t: P.Tensor) -> tuple[list[int], list[int], int]:
        def ev(d: P.Dim) -> int:
            return self._eval(d.expr) if isinstance(d, P.Sym) else d

        return [ev(d) for d in t.sizes], [ev(d) for d in t.strides], ev(t.storage_offset)

    def _new_tensor(self, value: int) -> torch.Tensor:
        """Memory for ``value``: its arena slot when planned, else a fresh allocation."""
        t = self.program.values[value]
        sizes, strides, offset = self._dims(t)
        dtype = SCALAR_TO_DTYPE[schema.ScalarType(t.dtype)]
        a = self._alloc.get(value)
        if a is None:
            return torch.empty_strided(sizes, strides, dtype=dtype)
        itemsize = ITEMSIZE[schema.ScalarType(t.dtype)]
        span = 0 if 0 in sizes else (offset + 1 + sum((n - 1) * s for n, s in zip(sizes, strides, strict=True)))
        if span * itemsize > a.nbytes:
            raise NativeRuntimeError(f"value {value} needs {span * itemsize} bytes but its arena slot has "
                                     f"{a.nbytes}; the program's size bounds are wrong")
        return torch.empty(0, dtype=dtype).set_(self._arena.untyped_storage(),
                                                self._offsets[value] // itemsize + offset, sizes, strides)

    def _arena_view(self, value: int) -> torch.Tensor:
        """The value's view of the arena, made once per plan (one per distinct set of sizes)."""
        t = self._static_views.get(value)
        if t is None:
            t = self._static_views[value] = self._new_tensor(value)
        return t

    # ------------------------------------------------------------ planned results (arena mode)

    def _declared_sizes(self, value: int) -> tuple[int, ...] | None:
        """The value's declared sizes in this run (None: they depend on data), cached per plan."""
        got = self._sizes.get(value, _FREED)
        if got is _FREED:
            try:
                got = tuple(self._eval(d.expr) if isinstance(d, P.Sym) else d for d in self.program.values[value].sizes)
            except UnboundSymbolError:
                got = None
            self._sizes[value] = got
        return got

    def _check_results(self, pc: int, outs: Sequence[int], values: list) -> None:
        """A planned call's results have their declared dtypes and sizes (native_cpp/method.cpp
        check_results: the same order and messages). An out= kernel that resized its slot's view
        gets the view's declared shape back before the run stops."""
        for o in outs:
            t = values[o]
            if not isinstance(t, torch.Tensor):
                raise NativeRuntimeError(f"{self.where(pc)}: returned no tensor for value {o}{_UNDECLARED}")
            want = SCALAR_TO_DTYPE[schema.ScalarType(self.program.values[o].dtype)]
            if t.dtype != want:
                raise NativeRuntimeError(f"{self.where(pc)}: value {o} has dtype {t.dtype}, declared {want}{_UNDECLARED}")
            sizes = self._declared_sizes(o)
            if sizes is not None and tuple(t.shape) != sizes:
                got = list(t.shape)
                view = self._static_views.get(o)
                if t is view:
                    _, strides, _ = self._dims(self.program.values[o])
                    view.as_strided_(sizes, strides)
                    ptr = self._arena.data_ptr()  # a grown storage moved the arena
                    self._arena_span = (ptr, ptr + self._arena.numel())
                raise NativeRuntimeError(f"{self.where(pc)}: value {o} has sizes {got}, declared {list(sizes)}"
                                         f"{_UNDECLARED}")

    # ------------------------------------------------------------ checks (check=True)

    def _check_out(self, pc: int, value: int, got: Any) -> None:
        meta = self.program.values[value]
        where = self.where(pc)
        if isinstance(meta, P.Tensor):
            if not isinstance(got, torch.Tensor):
                raise NativeRuntimeError(f"{where}: returned {type(got).__name__} for tensor value {value}")
            want = SCALAR_TO_DTYPE[schema.ScalarType(meta.dtype)]
            if got.dtype != want:
                raise NativeRuntimeError(f"{where}: value {value} has dtype {got.dtype}, declared {want}")
            try:
                sizes, _, _ = self._dims(meta)
            except UnboundSymbolError:  # a data-dependent size: nothing to compare against
                return
            if list(got.shape) != sizes:
                raise NativeRuntimeError(f"{where}: value {value} has sizes {list(got.shape)}, declared {sizes}")
            if self._alloc and value not in self._alloc and got.numel() and self._arena.numel() \
                    and got.untyped_storage().data_ptr() == self._arena.untyped_storage().data_ptr():
                aliases = self.program.operators[self.program.instructions[pc].op].returns_alias
                if not any(aliases):
                    raise ArenaAliasError(f"{where}: a functional kernel returned arena memory")
        elif isinstance(meta, (P.SymInt, P.SymBool)) and meta.expr >= 0:
            try:
                want = self._eval(meta.expr)
            except UnboundSymbolError:
                return
            if int(got) != want:
                raise NativeRuntimeError(f"{where}: value {value} is {got}, its expression gives {want}")

    def _check_leaks(self, values: list[Any]) -> None:
        p = self.program
        keep = {i.value for i in p.inputs} | {s.value for s in p.state} | set(p.outputs)
        for i, (v, meta) in enumerate(zip(values, p.values, strict=True)):
            if i in keep or v is None or v is _FREED or isinstance(meta, _CONSTANT_TYPES):
                continue
            raise NativeRuntimeError(f"value {i} ({type(meta).__name__}) is still alive after the last "
                                     "instruction: a FreeCall is missing")


# ---------------------------------------------------------------- preparation


def _device(v: P.Device) -> torch.device:
    try:
        return torch.device(v.kind, v.index) if v.index is not None else torch.device(v.kind)
    except RuntimeError as e:
        raise NativeFormatError(f"native program: device {v.kind!r}:{v.index!r} is not a torch device "
                                f"({str(e).splitlines()[0][:120]}); the file is damaged") from None


def _aligned_copy(segment: bytes | memoryview) -> torch.Tensor:
    """One 64-byte aligned, writable copy of the segment (torch allocations are aligned)."""
    buf = torch.empty(len(segment), dtype=torch.uint8)
    if len(segment):
        ctypes.memmove(buf.data_ptr(), bytes(segment) if isinstance(segment, memoryview) else segment, len(segment))
    return buf


def _resolve(op: P.Operator, i: int) -> tuple[Callable, int, tuple[str, ...]]:
    """(callable, number of positional args or -1 for all, keyword-only argument names)."""
    ns, name = op.name.split("::", 1)
    if ns == NAMESPACE:
        fn = PRIM_OPS.get(name)
        if fn is None or op.overload != "default":
            raise NativeRuntimeError(f"operators[{i}]: unknown symbolic op {op.name}.{op.overload}")
        return fn, -1, ()
    try:  # the dispatcher's operators, as the C++ runtime resolves them: not TorchScript-only ones
        torch._C._dispatch_find_schema_or_throw(op.name, "" if op.overload == "default" else op.overload)
        overload = getattr(getattr(getattr(torch.ops, ns), name), op.overload)
    except (RuntimeError, AttributeError):
        raise NativeRuntimeError(f"operators[{i}]: operator {op.name}.{op.overload} is not registered in this "
                                 "process; import the library that defines it before loading the program") from None
    args = overload._schema.arguments
    kw = tuple(a.name for a in args if a.kwarg_only and not a.is_out)
    return overload, len(args) - len(kw) - sum(a.is_out for a in args), kw


def _getter(m: Method, i: int) -> Callable[[list], Any]:
    """Read value ``i`` at run time; boxed lists are rebuilt from their items on every read."""
    v = m.program.values[i]
    if isinstance(v, P.List):
        items = [_getter(m, j) for j in v.items]
        return lambda values: [g(values) for g in items]
    if m.check:
        def checked(values: list) -> Any:
            x = values[i]
            if x is _FREED:
                raise NativeRuntimeError(f"value {i} is read after it was freed")
            return x
        return checked
    return lambda values: values[i]


def _kernel(m: Method, ins: P.KernelCall, pc: int) -> Callable[[list, int], int]:
    fn, npos, kw = m._ops[ins.op]
    simple = all(not isinstance(m.program.values[a], P.List) for a in ins.args) and not m.check
    getters = [_getter(m, a) for a in ins.args]
    if npos < 0:
        npos = len(ins.args)
    kw_pairs = list(zip(kw, range(npos, len(ins.args)), strict=False))
    store = _storer(m, ins, pc)
    if pc in m._use_out:
        return _out_variant(m, ins, getters, npos, kw_pairs, store)
    return _functional(m, ins, pc, fn, simple, npos, kw_pairs, getters, store)


def _functional(m: Method, ins: P.KernelCall, pc: int, fn: Callable, simple: bool, npos: int, kw_pairs: list,
                getters: list, store: Callable) -> Callable[[list, int], int]:
    plain = bool(ins.outs) and ins.outs[0] >= 0 and not isinstance(m.program.values[ins.outs[0]], P.List)
    if pc in m._planned_calls and pc not in m._may_see_arena:
        fast = _planned_simple(m, ins, pc, ())
        if fast is not None:
            return fast
    call = _functional_call(ins, fn, simple, npos, kw_pairs, getters, store, plain)
    if pc in m._planned_calls:
        call = _declared(m, ins, call, _judge(m, ins, getters, npos, kw_pairs, store))
    return _guarded(m, pc, call) if pc in m._may_see_arena else call


def _declared(m: Method, ins: P.KernelCall, inner: Callable, judge: Callable) -> Callable[[list, int], int]:
    def checked(values: list, pc: int) -> int:
        nxt = inner(values, pc)
        judge(values, pc)
        return nxt
    return checked


def _judge(m: Method, ins: P.KernelCall, getters: list, npos: int, kw_pairs: list, store: Callable
           ) -> Callable[[list, int], None]:
    """For a planned call run functionally: a result other than declared is computed again as the C++
    runtime computes it, out= into a tensor of the declared dtype, sizes and strides (the out=
    kernel may cast it, resize it or refuse), and then judged (``Method._check_results``)."""
    vals = m.program.values
    outs = tuple(ins.outs)
    dtypes = tuple(SCALAR_TO_DTYPE[schema.ScalarType(vals[o].dtype)] for o in outs)
    declared = m._declared_sizes

    def redo(values: list, pc: int) -> None:
        out_fn = m._ops[ins.out_op][0]
        args = [g(values) for g in getters]
        kwargs = {k: args[j] for k, j in kw_pairs}
        for a, o, dtype in zip([a for a in out_fn._schema.arguments if a.is_out], outs, dtypes, strict=True):
            sizes, strides, _ = m._dims(vals[o])
            kwargs[a.name] = torch.empty_strided(sizes, strides, dtype=dtype)
        store(values, out_fn(*args[:npos], **kwargs))
        m._check_results(pc, outs, values)

    def judge(values: list, pc: int) -> None:
        for o, dtype in zip(outs, dtypes, strict=True):
            t, sizes = values[o], declared(o)
            if not isinstance(t, torch.Tensor) or t.dtype != dtype or (sizes is not None and t.shape != sizes):
                redo(values, pc)
                return
    return judge


def _planned_simple(m: Method, ins: P.KernelCall, pc: int, frees: tuple[int, ...]) -> Callable | None:
    """The hot path of a planned call run functionally, with plain arguments and one result: the
    result's dtype and sizes are compared with the declaration in line (about 0.25 us a call);
    any doubt goes to ``_judge``."""
    vals = m.program.values
    if m.check or len(ins.outs) != 1 or any(isinstance(vals[a], P.List) for a in ins.args):
        return None
    o = ins.outs[0]
    sizes = tuple(vals[o].sizes) if all(isinstance(d, int) for d in vals[o].sizes) else None
    fn, npos, kw = m._ops[ins.op]
    idx = tuple(ins.args)
    npos = len(idx) if npos < 0 else npos
    getters = [_getter(m, a) for a in idx]
    kw_pairs = list(zip(kw, range(npos, len(idx)), strict=False))
    judge = _judge(m, ins, getters, npos, kw_pairs, _storer(m, ins, pc))
    fn = getattr(fn, "_op", fn)
    pos, kw_items, step = idx[:npos], tuple(zip(kw, idx[npos:], strict=False)), 1 + len(frees)
    dtype = SCALAR_TO_DTYPE[schema.ScalarType(vals[o].dtype)]
    if sizes is None or kw_items:  # keywords, or sizes of this run's (cached per plan)
        declared = m._declared_sizes

        def pkw(values: list, pc: int) -> int:
            r = values[o] = fn(*[values[i] for i in pos], **{k: values[i] for k, i in kw_items})
            try:
                if r.dtype is not dtype or r.shape != (sizes if sizes is not None else declared(o)):
                    judge(values, pc)
            except AttributeError:  # not a tensor
                judge(values, pc)
            for v in frees:
                values[v] = None
            return pc + step
        return pkw

    if len(pos) == 1 and len(frees) == 1:
        (a,), (f,) = pos, frees

        def p1(values: list, pc: int) -> int:
            r = values[o] = fn(values[a])
            try:
                if r.dtype is not dtype or r.shape != sizes:
                    judge(values, pc)
            except AttributeError:  # not a tensor
                judge(values, pc)
            values[f] = None
            return pc + step
        return p1

    def pn(values: list, pc: int) -> int:
        r = values[o] = fn(*[values[i] for i in pos])
        try:
            if r.dtype is not dtype or r.shape != sizes:
                judge(values, pc)
        except AttributeError:  # not a tensor
            judge(values, pc)
        for v in frees:
            values[v] = None
        return pc + step
    return pn


def _functional_call(ins: P.KernelCall, fn: Callable, simple: bool, npos: int, kw_pairs: list, getters: list,
                     store: Callable, plain: bool) -> Callable[[list, int], int]:
    if simple and not kw_pairs:
        idx = tuple(ins.args)
        if len(ins.outs) == 1 and ins.outs[0] >= 0 and plain:
            o = ins.outs[0]

            def call1(values: list, pc: int) -> int:
                values[o] = fn(*[values[i] for i in idx])
                return pc + 1
            return call1

        def call(values: list, pc: int) -> int:
            store(values, fn(*[values[i] for i in idx]))
            return pc + 1
        return call

    def call_kw(values: list, pc: int) -> int:
        args = [g(values) for g in getters]
        store(values, fn(*args[:npos], **{k: args[j] for k, j in kw_pairs}))
        return pc + 1
    return call_kw


def _symbolic(t: P.Tensor) -> bool:
    return any(isinstance(d, P.Sym) for d in (*t.sizes, *t.strides, t.storage_offset))


def _check_aliases(p: P.Program) -> None:
    """Refuse a plan built on fewer aliases than this process's kernels may produce."""
    called = {ins.op for ins in p.instructions if isinstance(ins, P.KernelCall)}  # out= variants return ``out``
    for i, op in enumerate(p.operators):
        if i not in called or op.name.startswith(NAMESPACE + "::"):
            continue
        overload = resolve_overload(op.name, op.overload)
        if overload is None:
            continue  # _resolve names the missing operator
        for j, may in enumerate(actual_aliases(overload)):
            have = set(op.returns_alias[j]) if j < len(op.returns_alias) else set()
            if not set(may) <= have:
                raise NativeFormatError(
                    f"native program: operators[{i}] ({op.name}.{op.overload}): return {j} may share storage with "
                    f"arguments {list(may)} in this process's kernels, but the file declares {sorted(have)}; its "
                    "memory plan could reuse live memory. Re-emit the program with this torch version, or run it "
                    "with arena=False")


def _leaves(p: P.Program, v: int) -> list[int]:
    val = p.values[v]
    return [x for i in val.items for x in _leaves(p, i)] if isinstance(val, P.List) else [v]


def _arena_readers(p: P.Program, lt: memory.Lifetimes, planned: set[int], placed: set[int]) -> dict[int, tuple[tuple, tuple]]:
    """Calls that, run functionally, may read arena memory: (results that claim fresh storage,
    results to copy out of the arena).

    A result declared fresh that lands in the arena is a kernel breaking its promise: the run
    stops. A planned call (the plan expects it to run out=, so it has no alias edge) whose op may
    hand back an argument gets its result copied when that result is arena memory.
    """
    roots = {lt.root[v] for v in placed}
    found: dict[int, tuple[tuple, tuple]] = {}
    for pos, ins in enumerate(p.instructions):
        if not isinstance(ins, P.KernelCall) or not any(lt.root[x] in roots for a in ins.args for x in _leaves(p, a)):
            continue
        aliases = p.operators[ins.op].returns_alias
        fresh, copy = [], []
        for j, o in enumerate(ins.outs):
            if o < 0:
                continue
            may_alias = j < len(aliases) and bool(aliases[j])
            if may_alias and pos not in planned:
                continue  # a declared alias: the plan keeps the argument alive as long
            (copy if may_alias else fresh).extend(x for x in _leaves(p, o) if isinstance(p.values[x], P.Tensor))
        if fresh or copy:
            found[pos] = (tuple(fresh), tuple(copy))
    return found


def _guarded(m: Method, pc: int, inner: Callable) -> Callable:
    fresh, copy = m._may_see_arena[pc]

    def guarded(values: list, pc: int) -> int:
        nxt = inner(values, pc)
        lo, hi = m._arena_span
        for o in fresh:
            t = values[o]
            if isinstance(t, torch.Tensor) and t.numel() and lo <= t.data_ptr() < hi:
                raise ArenaAliasError(f"{m.where(pc)}: the kernel returned arena memory (value {o}) although its "
                                      "operator declares a fresh result; the plan would reuse that memory while the "
                                      "value is alive. Run with arena=False")
        for o in copy:
            t = values[o]
            if isinstance(t, torch.Tensor) and t.numel() and lo <= t.data_ptr() < hi:
                values[o] = t.clone()
        return nxt
    return guarded


def _storages(x: Any) -> set[int]:
    if isinstance(x, torch.Tensor):
        return {x.untyped_storage().data_ptr()} if x.numel() else set()
    if isinstance(x, (list, tuple)):
        return set().union(*(_storages(y) for y in x)) if x else set()
    return set()


def _alias_checked(m: Method, ins: P.KernelCall, pc: int, inner: Callable) -> Callable:
    """(check=True) Results the operator declares fresh must not share storage with any argument.

    This is the invariant the memory plan relies on, checked on what kernels actually return.
    """
    p = m.program
    aliases = p.operators[ins.op].returns_alias
    fresh = [o for j, o in enumerate(ins.outs) if o >= 0 and not (j < len(aliases) and aliases[j])]
    getters = [_getter(m, a) for a in ins.args]

    def checked(values: list, pc: int) -> int:
        before = _storages([g(values) for g in getters])
        nxt = inner(values, pc)
        for o in fresh:
            got = _storages([values[x] for x in _leaves(p, o)])
            if got & before:
                raise ArenaAliasError(f"{m.where(pc)}: value {o} shares storage with an argument, but the operator "
                                      "declares a fresh result; the memory plan relies on that declaration")
        return nxt
    return checked


def _fuse_frees(m: Method, code: list[Callable]) -> list[Callable]:
    """Fold each run of FreeCalls into the instruction before it (one closure call instead of many).

    A FreeCall that a jump lands on keeps its own closure; the folded ones are never reached.
    """
    p = m.program
    targets = {i.target for i in p.instructions if isinstance(i, P.JumpFalseCall)}
    out = list(code)
    n = len(code)
    pc = 0
    while pc < n:
        k = 0
        while pc + 1 + k < n and isinstance(p.instructions[pc + 1 + k], P.FreeCall) and pc + 1 + k not in targets:
            k += 1
        if k and not isinstance(p.instructions[pc], P.JumpFalseCall):
            frees = tuple(p.instructions[pc + 1 + j].value for j in range(k))
            out[pc] = _simple_kernel(m, p.instructions[pc], pc, frees) or _with_frees(code[pc], frees)
        pc += 1 + k
    return out


def _with_frees(inner: Callable, frees: tuple[int, ...]) -> Callable:
    step = 1 + len(frees)

    def fused(values: list, pc: int) -> int:
        inner(values, pc)
        for v in frees:
            values[v] = None
        return pc + step
    return fused


def _simple_kernel(m: Method, ins: P.Instruction, pc: int, frees: tuple[int, ...]) -> Callable | None:
    """The hot path: a kernel with plain arguments and one plain result, then frees."""
    if not isinstance(ins, P.KernelCall) or pc in m._may_see_arena:
        return None
    if pc in m._use_out:
        return _static_out(m, ins, frees)
    if pc in m._planned_calls:
        return _planned_simple(m, ins, pc, frees)
    fn, npos, kw = m._ops[ins.op]
    vals = m.program.values
    if len(ins.outs) != 1 or ins.outs[0] < 0 \
            or isinstance(vals[ins.outs[0]], P.List) or any(isinstance(vals[a], P.List) for a in ins.args):
        return None
    fn = getattr(fn, "_op", fn)  # OpOverload.__call__ only forwards to it: one Python frame less per call
    o, step, idx = ins.outs[0], 1 + len(frees), tuple(ins.args)
    if kw and npos >= 0 and len(idx) > npos:
        pos, kw_items = idx[:npos], tuple(zip(kw, idx[npos:], strict=False))

        def kkw(values: list, pc: int) -> int:
            values[o] = fn(*[values[i] for i in pos], **{k: values[i] for k, i in kw_items})
            for v in frees:
                values[v] = None
            return pc + step
        return kkw
    if len(idx) == 1 and len(frees) == 1:
        (a,), (f,) = idx, frees

        def k1(values: list, pc: int) -> int:
            values[o] = fn(values[a])
            values[f] = None
            return pc + step
        return k1
    if len(idx) == 3 and len(frees) == 1:
        (a, b, c), (f,) = idx, frees

        def k3(values: list, pc: int) -> int:
            values[o] = fn(values[a], values[b], values[c])
            values[f] = None
            return pc + step
        return k3

    def kn(values: list, pc: int) -> int:
        values[o] = fn(*[values[i] for i in idx])
        for v in frees:
            values[v] = None
        return pc + step
    return kn


def _static_out(m: Method, ins: P.KernelCall, frees: tuple[int, ...]) -> Callable | None:
    """An out= call with plain arguments and one result, then frees.

    With a fixed plan the arena view is made once; the call goes to the operator's C++ entry directly, because forwarding
    keywords through ``OpOverload.__call__`` costs more than the allocation the arena saves.
    """
    vals = m.program.values
    _, npos, kw = m._ops[ins.op]
    if m.check or len(ins.outs) != 1 or any(isinstance(vals[a], P.List) for a in ins.args):
        return None
    out_fn = m._ops[ins.out_op][0]
    raw = getattr(out_fn, "_op", out_fn)
    name = next(a.name for a in out_fn._schema.arguments if a.is_out)
    npos = len(ins.args) if npos < 0 else npos
    idx, o, step = tuple(ins.args[:npos]), ins.outs[0], 1 + len(frees)
    kw_items = tuple(zip(kw, ins.args[npos:], strict=False))
    if m._dynamic_plan:  # the view changes with the sizes: look it up per run (cached per plan)
        view_of, declared = m._arena_view, m._declared_sizes

        def outd(values: list, pc: int) -> int:
            kwargs = {k: values[i] for k, i in kw_items}
            kwargs[name] = view_of(o)
            r = values[o] = raw(*[values[i] for i in idx], **kwargs)
            if r.shape != declared(o):
                m._check_results(pc, (o,), values)
            for v in frees:
                values[v] = None
            return pc + step
        return outd
    view = m._arena_view(o)
    # An out= kernel returns its out= argument, resized when the arguments call for other sizes.
    sizes = view.shape
    if kw_items:
        def outkw(values: list, pc: int) -> int:
            kwargs = {k: values[i] for k, i in kw_items}
            kwargs[name] = view
            r = values[o] = raw(*[values[i] for i in idx], **kwargs)
            if r.shape != sizes:
                m._check_results(pc, (o,), values)
            for v in frees:
                values[v] = None
            return pc + step
        return outkw
    kwargs = {name: view}
    if len(idx) == 1 and len(frees) == 1:
        (a,), (f,) = idx, frees

        def out1(values: list, pc: int) -> int:
            r = values[o] = raw(values[a], **kwargs)
            if r.shape != sizes:
                m._check_results(pc, (o,), values)
            values[f] = None
            return pc + step
        return out1

    def outn(values: list, pc: int) -> int:
        r = values[o] = raw(*[values[i] for i in idx], **kwargs)
        if r.shape != sizes:
            m._check_results(pc, (o,), values)
        for v in frees:
            values[v] = None
        return pc + step
    return outn


def _out_variant(m: Method, ins: P.KernelCall, getters: list, npos: int, kw_pairs: list, store: Callable) -> Callable:
    out_fn = m._ops[ins.out_op][0]
    out_names = [a.name for a in out_fn._schema.arguments if a.is_out]
    outs = list(ins.outs)
    fast = _static_out(m, ins, ())
    if fast is not None:
        return fast

    def call_out(values: list, pc: int) -> int:
        args = [g(values) for g in getters]
        kwargs = {k: args[j] for k, j in kw_pairs}
        for name, o in zip(out_names, outs, strict=True):
            kwargs[name] = m._arena_view(o)
        res = out_fn(*args[:npos], **kwargs)
        store(values, res)
        m._check_results(pc, outs, values)
        return pc + 1
    return call_out


def _storer(m: Method, ins: P.KernelCall, pc: int) -> Callable[[list, Any], None]:
    """Assign a kernel's result(s) to its outs: tuples element-wise, list outs item-wise."""
    outs = list(ins.outs)
    values_meta = m.program.values

    def put(values: list, o: int, r: Any) -> None:
        if o == -1:
            return
        meta = values_meta[o]
        if isinstance(meta, P.List):
            if len(r) != len(meta.items):
                raise NativeRuntimeError(f"{m.where(pc)}: returned {len(r)} tensors, the "
                                         f"program expects {len(meta.items)}")
            for item, x in zip(meta.items, r, strict=True):
                put(values, item, x)
            return
        if m.check:
            m._check_out(pc, o, r)
        values[o] = r

    if len(outs) == 1:
        o = outs[0]
        return lambda values, r: put(values, o, r)
    if not outs:
        return lambda values, r: None

    def put_all(values: list, r: Any) -> None:
        for o, x in zip(outs, r, strict=True):
            put(values, o, x)
    return put_all


def _move(m: Method, ins: P.MoveCall, pc: int) -> Callable:
    src, dst = ins.src, ins.dst
    get = _getter(m, src)

    def move(values: list, pc: int) -> int:
        values[dst] = get(values)
        return pc + 1
    return move


def _jump_false(m: Method, ins: P.JumpFalseCall, pc: int) -> Callable:
    cond, target = ins.cond, ins.target
    always = P.is_unconditional(m.program, ins)
    get = _getter(m, cond)
    if target > pc:
        if always:
            return lambda values, pc: target
        return lambda values, pc: pc + 1 if get(values) else target
    # A backward jump closes one iteration of the loop [target, pc]: it is charged that loop's
    # length, so the budget bounds the instructions a run executes in loops, not just the jumps
    # (a loop whose body restarts the whole program costs what it runs).
    budget, cost = m._loop_budget, pc - target + 1

    def jump_back(values: list, pc: int) -> int:
        if not always and get(values):
            return pc + 1
        if 0 <= budget[0] < cost:
            raise NativeRuntimeError(
                f"{m.where(pc)}: loops ran more than {m.max_loop_instructions} instructions in this run; "
                "a loop's condition may never become false. Pass Method(..., max_loop_instructions=N) "
                "(None: no limit) if the program really runs that long")
        budget[0] -= cost
        return target
    return jump_back


def _free(m: Method, ins: P.FreeCall, pc: int) -> Callable:
    v = ins.value
    poison = _FREED if m.check else None

    def free(values: list, pc: int) -> int:
        values[v] = poison
        return pc + 1
    return free


def _alloc_call(m: Method, ins: P.AllocCall, pc: int) -> Callable:
    v = ins.value

    def alloc(values: list, pc: int) -> int:
        values[v] = m._new_tensor(v)
        return pc + 1
    return alloc


_INSTRUCTIONS: dict[type, Callable[[Method, Any, int], Callable[[list, int], int]]] = {
    P.KernelCall: _kernel, P.MoveCall: _move, P.JumpFalseCall: _jump_false, P.FreeCall: _free,
    P.AllocCall: _alloc_call,
}
assert set(_INSTRUCTIONS) == set(P.INSTRUCTION_TYPES), "instruction dispatch is incomplete"


def _weight(m: Method, t: P.Tensor) -> torch.Tensor | None:
    if t.data < 0:
        return None  # a run-time slot
    c = m.program.constants[t.data]
    st = schema.ScalarType(t.dtype)
    # Blobs start 64-byte aligned, so the offset is a whole number of elements; the validator
    # checked that the view stays inside the blob.
    return torch.empty(0, dtype=SCALAR_TO_DTYPE[st]).set_(
        m._segment.untyped_storage(), c.offset // ITEMSIZE[st] + t.storage_offset, t.sizes, t.strides)


_CONSTANTS: dict[type, Callable[[Method, Any], Any]] = {
    P.NoneValue: lambda m, v: None,
    P.Int: lambda m, v: v.v,
    P.Float: lambda m, v: v.v,
    P.Bool: lambda m, v: v.v,
    P.String: lambda m, v: v.v,
    P.IntList: lambda m, v: list(v.v),
    P.FloatList: lambda m, v: list(v.v),
    P.BoolList: lambda m, v: list(v.v),
    P.StringList: lambda m, v: list(v.v),
    P.Complex: lambda m, v: complex(v.real, v.imag),
    P.ScalarType: lambda m, v: SCALAR_TO_DTYPE[schema.ScalarType(v.v)],
    P.Layout: lambda m, v: SCHEMA_TO_LAYOUT[schema.Layout(v.v)],
    P.MemoryFormat: lambda m, v: SCHEMA_TO_MEMORY_FORMAT[schema.MemoryFormat(v.v)],
    P.Device: lambda m, v: _device(v),
    P.Tensor: _weight,
    P.List: lambda m, v: None,
    P.SymInt: lambda m, v: None,
    P.SymFloat: lambda m, v: None,
    P.SymBool: lambda m, v: None,
}
assert set(_CONSTANTS) == set(P.VALUE_TYPES), "value dispatch is incomplete"
_CONSTANT_TYPES = tuple(t for t in P.VALUE_TYPES if t not in (P.Tensor, P.SymInt, P.SymFloat, P.SymBool))


def _check_kind(meta: P.Value, leaf: Any, name: str) -> None:
    if isinstance(meta, P.Tensor):
        if not isinstance(leaf, torch.Tensor):
            raise InputMismatchError(f"input {name!r}: expected a tensor, got {type(leaf).__name__}")
        want = SCALAR_TO_DTYPE[schema.ScalarType(meta.dtype)]
        if leaf.dtype != want:
            raise InputMismatchError(f"input {name!r}: expected dtype {want}, got {leaf.dtype}")
        if leaf.dim() != len(meta.sizes):
            raise InputMismatchError(f"input {name!r}: expected {len(meta.sizes)} dimensions, got {leaf.dim()} "
                                     f"(sizes {list(leaf.shape)})")
    elif isinstance(meta, P.SymInt) and (not isinstance(leaf, int) or isinstance(leaf, bool)):
        raise InputMismatchError(f"input {name!r}: expected an int, got {type(leaf).__name__}")
    elif isinstance(meta, P.SymBool) and not isinstance(leaf, bool):
        raise InputMismatchError(f"input {name!r}: expected a bool, got {type(leaf).__name__}")
    elif isinstance(meta, P.SymFloat) and not isinstance(leaf, (int, float)):
        raise InputMismatchError(f"input {name!r}: expected a float, got {type(leaf).__name__}")
