"""Each kernel call of a native program run on meta tensors of its declared operands, at load.

The loaders prove that a program's tables fit each other: indices in range, calls that bind their
operators' schemas with arguments of the right kinds (:mod:`native.format.kinds`), sizes that stay
within int64. They do not prove that a kernel accepts what the program passes it: a file whose
call was edited to another operator (``reshape`` called on a ``conv2d``'s operands), whose scalar
argument was edited (a ``reshape`` to a shape of another element count) or whose value metas were
edited (a dtype, a size) loads, and its kernel refuses it when the program runs. This pass runs
every kernel call, in branches and loop bodies alike (they are inline in the one instruction
chain), on meta tensors built from the declared metas of its operands, and compares the results
with the declared metas of its outputs, as tracing computed them.

Sizes with symbols are evaluated at up to two points of the symbols' ranges that satisfy the
export guards: every symbol at its lower bound, and every symbol a few steps above it (a valid
program runs at both; two points tell a size expression edited to one that agrees at one of
them). At each point a call is refused when

* its operator's meta kernel refuses the operands with its operand check (the exception types of
  ``torch._check`` / ``TORCH_CHECK``, see :func:`serde.bridge.propagation.contract_failure`), or
  :func:`serde.bridge.checks.kernels.kernel_refusal` names them (checks the meta kernels do not
  make);
* a result's kind, dtype or rank differs from its declared output, or a size differs where the
  declared size is known at that point (sizes over data-dependent symbols are not compared);
* a ``symbolic::`` op (size arithmetic) computes another number than the expression its output
  declares;
* a declared size of an operand is negative, or a size expression divides by zero, at that point:
  no input the program accepts could run it.

No verdict (the call is skipped at that point) when an operand cannot be built: a size over a
data-dependent symbol, a boolean or float scalar computed at run time. A run-time integer with no
expression (a loop counter, a data-dependent value) is passed as 0: the results are still
compared (a size that does not depend on data cannot depend on it), but the kernel's refusal is
no verdict (an index of 0 may be out of range where the real one is not). Failures that say a
kernel cannot run on meta tensors (data-dependent outputs, no meta kernel, reading data) are no
verdict either. When no point satisfies the guards, every symbol counts as data-dependent.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from native.errors import PropagationError
from native.format import program as P
from native.format.exprs import UnboundSymbolError, evaluate
from native.format.kernels import resolve_overload
from native.format.prim import NAMESPACE, PRIM_OPS
from serde.bridge.checks.kernels import kernel_refusal
from serde.bridge.enums import SCALAR_TO_DTYPE, SCHEMA_TO_LAYOUT, SCHEMA_TO_MEMORY_FORMAT
from serde.bridge.propagation import contract_failure
from serde.core import schema

__all__ = ["check_propagation", "points"]

_FIX = "the file was edited after it was written, or written by another tool: re-emit it from its .pt2s artifact"
_META = torch.device("meta")
# Each symbol's values up to this far above its lower bound (the others at theirs) are tried for
# divisions by zero in size expressions, which the runtimes refuse only when given such inputs.
_SWEEP = 16
# A kernel returning a list is not run on an operand with a dimension larger than this: the list's
# length may be that dimension (unbind), and a hostile size would make the load hang.
_MAX_LIST_DIM = 1 << 16
# Steps above the lower bounds tried for the second point, each symbol k getting step + k (distinct
# values, so that an expression that reads the wrong symbol differs there).
_STEPS = (3, 5, 8, 13, 1, 2)


class _Skip(Exception):
    """An operand cannot be built at this point: no verdict on the call."""


class _Zero(Exception):
    """A size expression divides by zero at this point."""

    def __init__(self, expr: int) -> None:
        self.expr = expr


def check_propagation(native: P.NativeProgram | P.Program, *, what: str = "native program") -> int:
    """Run every kernel call of ``native`` on meta tensors of its declared operands (see the module
    docstring); the program's tables must already be verified (:func:`native.format.verify.decode`,
    :func:`native.format.kinds.check_kinds`).

    Returns the number of (call, point) pairs whose verdict was reached.

    Raises:
        PropagationError: a call's kernel refuses its declared operands or computes results other
            than its declared outputs; names the instruction, node, operator and operand.
    """
    p = native.program if isinstance(native, P.NativeProgram) else native
    ops = [_resolve(op) for op in p.operators]
    compared = 0
    cache: dict[tuple, tuple[str, Any]] = {}
    read = _read(p)
    with torch.no_grad():
        for syms in points(p, what):
            run = _Point(p, syms, what, cache, read)
            for pc, ins in enumerate(p.instructions):
                if isinstance(ins, P.KernelCall) and ops[ins.op] is not None:
                    compared += run.call(pc, ins, ops[ins.op])
    return compared


def points(p: P.Program, what: str = "native program") -> list[list[int | None]]:
    """One or two assignments of the symbols (None for data-dependent ones, and for every symbol
    when no assignment is found) that inputs can realize, within the symbols' ranges and
    satisfying every guard: the lower bounds first when they do, then a point above them.

    Raises:
        PropagationError: at a point inputs can realize (each symbol at most ``_SWEEP`` above its
            lower bound, the others at theirs), a size expression divides by zero.
    """
    bound = [k for k, s in enumerate(p.symbols) if s.input >= 0]
    unbound: list[int | None] = [None] * len(p.symbols)
    if not bound:
        return [unbound]
    lows = {k: max(0, p.symbols[k].min or 0) for k in bound}
    candidates = [{k: lows[k] for k in bound}]
    candidates += [{k: lows[k] + step + i for i, k in enumerate(bound)} for step in _STEPS]
    candidates += [{k: lows[k] + step for k in bound} for step in _STEPS]
    candidates += [{**lows, k: lows[k] + step} for k in bound for step in range(1, _SWEEP + 1)]
    found: list[list[int | None]] = []
    for c in candidates:
        syms = list(unbound)
        for k, v in c.items():
            hi = p.symbols[k].max
            syms[k] = min(v, hi) if hi is not None else v
        if _realizable(p, syms, what) and syms not in found:
            _divisions(p, syms, what)
            found.append(syms)
    return found[:2] or [unbound]


def _realizable(p: P.Program, syms: list[int | None], what: str) -> bool:
    """Whether some inputs bind the symbols to ``syms`` and pass the runtimes' input checks, which
    evaluate the inputs' sizes and then the guards, in order (``Method._bind``)."""
    dims: dict[tuple[int, int], int] = {}
    for k, s in enumerate(p.symbols):
        if s.input >= 0:
            real = s.scale * syms[k] + s.offset
            if real < 0 or dims.setdefault((s.input, s.dim), real) != real:
                return False
    try:
        for i, inp in enumerate(p.inputs):
            t = p.values[inp.value]
            if inp.constant or not isinstance(t, P.Tensor):
                continue
            for d, size in enumerate(t.sizes):
                where = f"inputs[{i}] ({inp.name!r}) dimension {d}"
                n = _evaluate(p, size.expr, syms, where, what) if isinstance(size, P.Sym) else size
                if n < 0 or dims.get((i, d), n) != n:
                    return False
        return all(_evaluate(p, g, syms, f"guards[{j}]", what) for j, g in enumerate(p.guards))
    except (ValueError, OverflowError):  # past int64 (the loaders refuse what they can), or a data-dependent size
        return False


def _divisions(p: P.Program, syms: list[int | None], what: str) -> None:
    """Every size expression over the bound symbols is defined at a point inputs realize."""
    for k in range(len(p.exprs)):
        try:
            _evaluate(p, k, syms, f"exprs[{k}]", what)
        except (ValueError, OverflowError):
            continue


def _evaluate(p: P.Program, k: int, syms: list[int | None], where: str, what: str) -> int:
    try:
        return evaluate(p.exprs[k], syms)
    except ZeroDivisionError:
        named = ", ".join(f"{s.name}={v}" for s, v in zip(p.symbols, syms, strict=True) if v is not None)
        raise PropagationError(
            f"{what}: {where}: expression {k} divides by zero at {named}, which inputs within the symbols' "
            f"ranges and guards realize: the runtimes would refuse every such input; {_FIX}") from None


def _read(p: P.Program) -> set[int]:
    """Values the program reads (operands, moved, jumped on, outputs, state) and their list items."""
    read = set(p.outputs) | {st.value for st in p.state}
    for ins in p.instructions:
        if isinstance(ins, P.KernelCall):
            read.update(ins.args)
        elif isinstance(ins, P.MoveCall):
            read.add(ins.src)
        elif isinstance(ins, P.JumpFalseCall):
            read.add(ins.cond)
    todo = list(read)
    while todo:
        v = p.values[todo.pop()]
        if isinstance(v, P.List):
            new = set(v.items) - read
            read |= new
            todo.extend(new)
    return read


def _resolve(op: P.Operator) -> Any:
    if op.name.startswith(NAMESPACE + "::"):
        fn = PRIM_OPS.get(op.name.split("::", 1)[1])
        return (fn, -1, ()) if fn is not None and op.overload == "default" else None
    overload = resolve_overload(op.name, op.overload)
    if overload is None:
        return None  # the runtimes name the missing operator
    args = overload._schema.arguments
    kw = tuple(a.name for a in args if a.kwarg_only and not a.is_out)
    return overload, len(args) - len(kw) - sum(a.is_out for a in args), kw


class _Point:
    """The checks at one assignment of the symbols."""

    def __init__(self, p: P.Program, syms: list[int | None], what: str, cache: dict, read: set[int]) -> None:
        self.p, self.syms, self.what, self.cache, self.read = p, syms, what, cache, read
        self.exprs: dict[int, int] = {}
        self.approximate = False  # a run-time integer was passed as 0 in the current call

    def call(self, pc: int, ins: P.KernelCall, resolved: tuple) -> int:
        op, npos, kw = resolved
        self.approximate = False
        try:
            args = tuple(self.operand(a) for a in ins.args)
        except _Skip:
            return 0
        except _Zero as z:
            self.fail(pc, f"a size of an operand divides by zero ({self._zero_text(z.expr)})")
        except _Negative as n:
            self.fail(pc, f"operand value {n.value} has size {n.size} at dimension {n.dim}{self._at()}")
        if npos < 0:
            return self.scalar(pc, ins, op, args)
        if any(str(r.type).startswith("List[") for r in op._schema.returns) and any(
                n > _MAX_LIST_DIM for x in args if isinstance(x, _T) for n in x.sizes):
            return 0  # (unbind or split of a dimension that large returns that many tensors, even on meta)
        # Calls of one operator on operands of the same metas compute the same metas (a chain of
        # pointwise ops on one shape runs each kernel once): meta kernels are mostly Python code.
        key = (ins.op, tuple(_key(x) for x in args))
        outcome = self.cache.get(key)
        if outcome is None:
            outcome = self.cache[key] = self.run(pc, op, npos, kw, args)
        kind, got = outcome
        if kind == "skip":
            return 0
        if kind == "refused":
            if self.approximate:
                return 0
            self.fail(pc, f"the kernel refuses the declared operands ({self._operands(ins)}): {got}")
        outs = list(ins.outs)
        if len(outs) == 1:
            self.compare(pc, outs[0], got, "")
        elif outs:
            if not isinstance(got, list) or len(got) != len(outs):
                self.fail(pc, f"the kernel returns {_show(got)}, the program declares {len(outs)} results")
            for j, (o, r) in enumerate(zip(outs, got, strict=True)):
                self.compare(pc, o, r, f" (result {j})")
        return 1

    def scalar(self, pc: int, ins: P.KernelCall, fn: Any, args: tuple) -> int:
        """A ``symbolic::`` op on known integers and booleans: its result must be the value of the
        expression its output declares (a reshape's size computed by another op loads, and the
        reshape fails when run)."""
        outs = [o for o in ins.outs if o >= 0]
        if self.approximate or len(outs) != 1 or any(isinstance(a, (_T, float)) for a in args):
            return 0
        meta = self.p.values[outs[0]]
        if not isinstance(meta, (P.SymInt, P.SymBool)) or meta.expr < 0:
            return 0
        plain = [list(a) if isinstance(a, _L) else a for a in args]
        if any(isinstance(a, list) and any(isinstance(x, (_T, float)) for x in a) for a in plain):
            return 0
        name = self.p.operators[ins.op].name
        if name.endswith(("::pow", "::lshift")) and len(plain) == 2 and isinstance(plain[1], int) and abs(plain[1]) > 64:
            return 0  # (past int64 either way: the runtimes refuse it when run)
        try:
            got = fn(*plain)
            want = self.eval(meta.expr)
        except (_Skip, _Zero, ArithmeticError, ValueError, TypeError):
            return 0
        if not isinstance(got, (int, bool)):
            return 0
        if int(got) != want:
            self.fail(pc, f"it computes {int(got)} from {', '.join(map(repr, plain))}, the program declares value "
                          f"{outs[0]} = expression {meta.expr}, which is {want}{self._at()}")
        return 1

    def run(self, pc: int, op: Any, npos: int, kw: tuple[str, ...], args: tuple) -> tuple[str, Any]:
        """("ok", a summary of the results), ("refused", the kernel's message) or ("skip", None)."""
        try:
            built = [_build(x) for x in args]
        except _Skip:
            return "skip", None
        pos, kwargs = built[:npos], dict(zip(kw, built[npos:], strict=False))
        bad = kernel_refusal(op, pos, kwargs, probe=True)
        if bad is not None:
            return "refused", bad
        try:
            got = op(*pos, **kwargs)
        except Exception as e:  # noqa: BLE001 -- judged by contract_failure
            return ("refused", _first_line(e)) if contract_failure(e, op, concrete=True) else ("skip", None)
        return "ok", _summary(got)

    # ------------------------------------------------------------ operands

    def operand(self, i: int) -> Any:
        """A hashable description of value ``i`` at this point (:func:`_build` makes it an operand)."""
        v = self.p.values[i]
        if isinstance(v, P.Tensor):
            sizes = tuple(self.dim(d) for d in v.sizes)
            for k, n in enumerate(sizes):
                if n < 0:
                    raise _Negative(i, k, n)
            return _T(SCALAR_TO_DTYPE[schema.ScalarType(v.dtype)], sizes, tuple(self.dim(d) for d in v.strides),
                      self.dim(v.storage_offset))
        if isinstance(v, P.List):
            return _L(self.operand(j) for j in v.items)
        if isinstance(v, P.SymInt):
            if v.expr < 0:
                self.approximate = True
                return 0
            return self.eval(v.expr)
        if isinstance(v, P.SymBool):
            if v.expr < 0:
                raise _Skip
            return bool(self.eval(v.expr))
        if isinstance(v, P.SymFloat):
            raise _Skip
        return _CONSTANTS[type(v)](v)

    def dim(self, d: P.Dim) -> int:
        return self.eval(d.expr) if isinstance(d, P.Sym) else d

    def eval(self, k: int) -> int:
        v = self.exprs.get(k)
        if v is None:
            try:
                v = self.exprs[k] = evaluate(self.p.exprs[k], self.syms)
            except UnboundSymbolError:
                raise _Skip from None
            except ZeroDivisionError:
                raise _Zero(k) from None
            except ValueError:
                raise _Skip from None  # past int64: the loaders' overflow check refuses what it can
        return v

    # ------------------------------------------------------------ results

    def compare(self, pc: int, o: int, got: Any, which: str) -> None:
        if o < 0:
            return
        meta = self.p.values[o]
        if o not in self.read and not isinstance(meta, P.List):  # (a list's items are judged one by one)
            # A result nothing reads: where meta and real kernels differ, it is in results no one
            # uses (batch norm's saved statistics in eval mode: [C] on meta, [0] from the CPU
            # kernel, which export recorded).
            return
        if isinstance(meta, P.List):
            if not isinstance(got, list) or len(got) != len(meta.items):
                self.fail(pc, f"the kernel returns {_show(got)}{which}, the program declares value {o} a list of "
                              f"{len(meta.items)}")
            for j, (item, r) in enumerate(zip(meta.items, got, strict=True)):
                self.compare(pc, item, r, f"{which} (item {j})")
            return
        if isinstance(meta, P.Tensor):
            if got is None:
                return  # an undefined result (a gradient not asked for)
            if not isinstance(got, _R):
                self.fail(pc, f"the kernel returns {_show(got)}{which}, the program declares value {o} a tensor")
            declared = SCALAR_TO_DTYPE[schema.ScalarType(meta.dtype)]
            if got.dtype != declared or len(got.shape) != len(meta.sizes):
                self.fail(pc, f"the kernel returns {_show(got)}{which}, the program declares value {o} "
                              f"{_declared(meta, declared)}")
            # (A run-time integer passed as 0 decides no size declared without a data-dependent symbol.)
            for k, d in enumerate(meta.sizes):
                try:
                    want = self.dim(d)
                except _Skip:
                    continue
                except _Zero as z:
                    self.fail(pc, f"value {o}'s size at dimension {k} divides by zero ({self._zero_text(z.expr)})")
                if got.shape[k] != want:
                    self.fail(pc, f"the kernel returns {_show(got)}{which}, the program declares value {o} "
                                  f"{_declared(meta, declared)}, {want} at dimension {k}{self._at()}")
            return
        if isinstance(meta, (P.SymInt, P.SymBool)):
            if isinstance(got, (_R, list)) or (isinstance(meta, P.SymInt) and isinstance(got, float)):
                self.fail(pc, f"the kernel returns {_show(got)}{which}, the program declares value {o} a number")
            if meta.expr < 0 or self.approximate or not isinstance(got, (int, bool)):  # (e.g. an index's)
                return
            try:
                want = self.eval(meta.expr)
            except (_Skip, _Zero):
                return
            if int(got) != want:
                self.fail(pc, f"the kernel returns {got}{which}, the program declares value {o} = "
                              f"expression {meta.expr}, which is {want}{self._at()}")

    # ------------------------------------------------------------ messages

    def where(self, pc: int) -> str:
        p = self.p
        ins = p.instructions[pc]
        op = p.operators[ins.op]
        h = p.instruction_handles[pc] if pc < len(p.instruction_handles) else -1
        node = ""
        if h >= 0:
            d = p.debug_handles[h]
            node = f", node {d.node!r}" + (f" in module {d.module!r}" if d.module else "")
        return f"instructions[{pc}] ({op.name}.{op.overload}{node})"

    def fail(self, pc: int, msg: str) -> None:
        raise PropagationError(f"{self.what}: {self.where(pc)}: {msg}; {_FIX}")

    def _at(self) -> str:
        named = [f"{s.name}={v}" for s, v in zip(self.p.symbols, self.syms, strict=True) if v is not None]
        return f" (at {', '.join(named)})" if named else ""

    def _zero_text(self, k: int) -> str:
        return f"expression {k}{self._at()}, within the symbols' ranges and guards"

    def _operands(self, ins: P.KernelCall) -> str:
        shown = []
        for j, a in enumerate(ins.args):
            v = self.p.values[a]
            if isinstance(v, P.Tensor):
                shown.append(f"args[{j}] = value {a}, {_declared(v, SCALAR_TO_DTYPE[schema.ScalarType(v.dtype)])}")
            elif not isinstance(v, (P.NoneValue, P.List, P.ScalarType, P.Layout, P.MemoryFormat, P.Device)):
                try:
                    shown.append(f"args[{j}] = {self.operand(a)!r}")
                except (_Skip, _Zero, _Negative):
                    shown.append(f"args[{j}] = value {a}")
        return "; ".join(shown)


class _Negative(Exception):
    """A declared size is negative at this point."""

    def __init__(self, value: int, dim: int, size: int) -> None:
        self.value, self.dim, self.size = value, dim, size


def _declared(t: P.Tensor, dtype: torch.dtype) -> str:
    sizes = ", ".join(str(d) if isinstance(d, int) else f"e{d.expr}" for d in t.sizes)
    return f"{dtype} [{sizes}]"


class _T(NamedTuple):
    """A tensor operand: dtype, sizes, strides and storage offset at one point."""

    dtype: torch.dtype
    sizes: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int


class _L(tuple):
    """A list operand (a tuple, so that a call's operands can be a cache key)."""


class _R(NamedTuple):
    """A tensor result: what is compared with the declared output."""

    dtype: torch.dtype
    shape: tuple[int, ...]


def _key(x: Any) -> Any:
    # The type is part of the key: True, 1 and 1.0 are equal but promote differently.
    if isinstance(x, _L):
        return tuple(_key(y) for y in x)
    return x if isinstance(x, _T) else (type(x), x)


def _build(x: Any) -> Any:
    if isinstance(x, _T):
        sizes, strides, offset = x.sizes, x.strides, x.offset
        try:
            if offset == 0:
                return torch.empty_strided(sizes, strides, dtype=x.dtype, device=_META)
            span = 0 if 0 in sizes else offset + 1 + sum((n - 1) * abs(s) for n, s in zip(sizes, strides, strict=True))
            return torch.empty(span, dtype=x.dtype, device=_META).as_strided(sizes, strides, offset)
        except (RuntimeError, ValueError, OverflowError, TypeError):  # (TypeError: a span past int64)
            raise _Skip from None  # strides no storage can have: the runtimes' own checks judge those
    if isinstance(x, _L):
        return [_build(y) for y in x]
    return x


def _summary(got: Any) -> Any:
    if isinstance(got, torch.Tensor):
        return _R(got.dtype, tuple(got.shape))
    if isinstance(got, (tuple, list)):
        return [_summary(x) for x in got]
    return got


def _show(v: Any) -> str:
    if isinstance(v, _R):
        return f"a {v.dtype} {list(v.shape)} tensor"
    if isinstance(v, list):
        return f"{len(v)} values"
    return "nothing" if v is None else f"a {type(v).__name__}"


def _first_line(e: Exception) -> str:
    text = str(e).strip().splitlines()
    return text[0][:300] if text else type(e).__name__


_CONSTANTS: dict[type, Any] = {
    P.NoneValue: lambda v: None,
    P.Int: lambda v: v.v,
    P.Float: lambda v: v.v,
    P.Bool: lambda v: v.v,
    P.String: lambda v: v.v,
    P.IntList: lambda v: _L(v.v),
    P.FloatList: lambda v: _L(v.v),
    P.BoolList: lambda v: _L(v.v),
    P.StringList: lambda v: _L(v.v),
    P.Complex: lambda v: complex(v.real, v.imag),
    P.ScalarType: lambda v: SCALAR_TO_DTYPE[schema.ScalarType(v.v)],
    P.Layout: lambda v: SCHEMA_TO_LAYOUT[schema.Layout(v.v)],
    P.MemoryFormat: lambda v: SCHEMA_TO_MEMORY_FORMAT[schema.MemoryFormat(v.v)],
    # Every tensor here is a meta tensor: a device argument keeps the results there.
    P.Device: lambda v: _META,
}

