"""Liveness and memory planning.

- :func:`frees_after` is the emitter's liveness analysis: one reverse walk over a graph's nodes
  gives, for each node, the values whose last use (or definition, for dead values) it is.
- :func:`plan_memory` gives intermediate tensors offsets in one arena. It works on the emitted
  program alone (no torch): storages are union-find classes of values joined by ``MoveCall`` and
  by aliasing. A kernel that runs functionally may return storage of the arguments its
  ``Operator.returns_alias`` lists (views, in-place ops, and composite ops that hand back an
  input unchanged, see :func:`native.format.kernels.actual_aliases`); a kernel whose out= variant runs
  (every output has an arena slot) writes fresh memory. Which calls run out= and the aliasing
  depend on each other, so planning iterates to a fixpoint: it assumes every out= call runs out=,
  and each call that then cannot be planned gets its aliasing back, until nothing changes. A
  class lives from its first to its last event (write, read or free), stretched over any loop it
  is touched in. Planned are the tensors a kernel's out= variant or an ``AllocCall`` writes,
  outside loops, not reachable from inputs, state or outputs, with an upper bound on their size
  that one arena may hold (``Limits.max_arena_bytes``):
  sizes, strides and offset are evaluated as intervals over the symbols' ranges
  (``range_constraints``). Packing is chosen by ``planner`` (:data:`PLANNERS`):

  - ``greedy`` (the default; NativeRT's and TFLite's greedy by size for offset calculation):
    largest first, each at the lowest 64-byte aligned offset free over its whole lifetime.
    :func:`pack` is this packing, which both runtimes rerun with the actual sizes of a run when
    sizes are symbolic (keeping the stored offsets when that arena would be larger).
  - ``shared-objects`` (ExecuTorch's greedy, greedy by size for shared objects): largest first,
    each into the smallest existing buffer none of whose tensors is live at the same time, or a
    new buffer; the buffers are then laid end to end (:func:`pack_shared_objects`).
  - ``naive``: no reuse, every tensor its own bytes (the arena is the naive size).
- :func:`verify_plan` re-derives lifetimes and bounds from the program under exactly the runtime's
  rule (a call runs out= iff all of its outputs have slots) and checks that no two tensors that
  are live at the same time overlap. The loader runs it on every program file.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from native.errors import MemoryPlanError
from native.format import exprs as E
from native.format import program as P
from native.format.container import ALIGN
from serde.core import schema
from serde.core.dtypes import ITEMSIZE
from serde.core.limits import DEFAULT_LIMITS
from serde.core.walk import argument_names, output_leaves

__all__ = ["frees_after", "plan_memory", "verify_plan", "Lifetimes", "analyze", "upper_nbytes", "pack",
           "pack_shared_objects", "pack_naive", "PLANNERS", "DEFAULT_PLANNER", "out_calls", "outermost_loops",
           "peak_live_bytes", "symbol_ranges", "code_overflow"]

_BUCKET = 64  # instructions per time bucket of the packing index


# ---------------------------------------------------------------- liveness (emit time)


def frees_after(nodes: Sequence[schema.Node], keep: Iterable[str]) -> list[list[str]]:
    """For each node, the names to free after it: their last use, or their definition if unused.

    Names in ``keep`` (graph outputs, values read after the graph) are never listed. The caller
    frees only the names its graph defines (inputs belong to the enclosing scope).
    """
    seen = set(keep)
    frees: list[list[str]] = [[] for _ in nodes]
    for i in range(len(nodes) - 1, -1, -1):
        n = nodes[i]
        for na in n.inputs:
            for name in argument_names(na.arg):
                if name not in seen:
                    seen.add(name)
                    frees[i].append(name)
        for _, _, name in output_leaves(n.outputs):
            if name not in seen:  # defined and never used
                seen.add(name)
                frees[i].append(name)
    return frees


# ---------------------------------------------------------------- lifetimes (program level)


class _UnionFind:
    def __init__(self, n: int) -> None:
        self.parent = list(range(n))

    def find(self, x: int) -> int:
        p = self.parent
        while p[x] != x:
            p[x] = p[p[x]]
            x = p[x]
        return x

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


@dataclass
class Lifetimes:
    """Per storage class: first and last instruction touching it; fresh producers; pinned classes."""

    root: list[int]  # value -> class representative
    start: dict[int, int]
    end: dict[int, int]
    producers: dict[int, int]  # value -> instruction writing it into fresh memory
    calls: dict[int, list[int]]  # instruction -> the tensor values its out= variant writes
    pinned: set[int]  # classes holding inputs, state or outputs: never planned
    loops: list[tuple[int, int]]  # (first, last) instruction of each outermost loop, in order

    def interval(self, value: int) -> tuple[int, int] | None:
        """Lifetime of ``value``'s storage from its producer, or None when it cannot be planned."""
        pos = self.producers.get(value)
        r = self.root[value]
        if pos is None or r in self.pinned:
            return None
        lo, hi = pos, self.end[r]
        # Loops nest or are disjoint (the loader checks it; the emitter writes no other shape), so a
        # value inside or overlapping any loop is inside or overlapping an outermost one, and those
        # are sorted and disjoint: two bisections instead of a walk over every loop per value.
        loops = self.loops
        k = bisect_right(loops, pos, key=lambda ab: ab[0]) - 1  # the last loop starting at or before pos
        if k >= 0 and pos <= loops[k][1]:
            return None  # written on every iteration: left to the allocator
        first = bisect_left(loops, lo, key=lambda ab: ab[1])  # the first loop ending at or after lo
        last = bisect_right(loops, hi, key=lambda ab: ab[0])  # past the last loop starting at or before hi
        if first < last:  # touched inside loops: live across all of them
            lo, hi = min(lo, loops[first][0]), max(hi, loops[last - 1][1])
        return lo, hi


class _Scan:
    """One pass over the instructions: events per value, alias unions, producers, loops."""

    def __init__(self, p: P.Program) -> None:
        nv, n = len(p.values), len(p.instructions)
        self.p = p
        self.uf = _UnionFind(nv)
        self.first = [n] * nv
        self.last = [-1] * nv
        self.freed = [False] * nv
        self.producers: dict[int, int] = {}
        self.calls: dict[int, list[int]] = {}
        self.loops: list[tuple[int, int]] = []
        self.aliases: list[tuple[int, int, int]] = []  # (instruction, argument, result) it may alias

    def touch(self, v: int, pos: int) -> None:
        if pos < self.first[v]:
            self.first[v] = pos
        if pos > self.last[v]:
            self.last[v] = pos
        val = self.p.values[v]
        if isinstance(val, P.List):
            for item in val.items:
                self.touch(item, pos)

    def leaves(self, v: int) -> list[int]:
        val = self.p.values[v]
        if isinstance(val, P.List):
            return [x for item in val.items for x in self.leaves(item)]
        return [v]

    def join(self, a: int, b: int) -> None:
        for src in self.leaves(a):
            for dst in self.leaves(b):
                self.uf.union(src, dst)

    def kernel(self, ins: P.KernelCall, pos: int) -> None:
        for a in ins.args:
            self.touch(a, pos)
        aliases = self.p.operators[ins.op].returns_alias
        for j, o in enumerate(ins.outs):
            if o == -1:
                continue
            self.touch(o, pos)
            for k in (aliases[j] if j < len(aliases) else ()):
                if k < len(ins.args):
                    self.aliases.append((pos, ins.args[k], o))
        outs = [o for o in ins.outs if o != -1]
        if ins.out_op >= 0 and outs and all(isinstance(self.p.values[o], P.Tensor) for o in outs):
            self.calls[pos] = outs
            for o in outs:
                self.producers.setdefault(o, pos)

    def move(self, ins: P.MoveCall, pos: int) -> None:
        self.touch(ins.src, pos)
        self.touch(ins.dst, pos)
        self.aliases.append((-1, ins.src, ins.dst))

    def jump(self, ins: P.JumpFalseCall, pos: int) -> None:
        self.touch(ins.cond, pos)
        if ins.target <= pos:
            self.loops.append((ins.target, pos))

    def free(self, ins: P.FreeCall, pos: int) -> None:
        self.touch(ins.value, pos)
        self.freed[ins.value] = True

    def alloc(self, ins: P.AllocCall, pos: int) -> None:
        self.touch(ins.value, pos)
        self.producers.setdefault(ins.value, pos)


_SCAN = {P.KernelCall: _Scan.kernel, P.MoveCall: _Scan.move, P.JumpFalseCall: _Scan.jump,
         P.FreeCall: _Scan.free, P.AllocCall: _Scan.alloc}
assert set(_SCAN) == set(P.INSTRUCTION_TYPES), "instruction dispatch is incomplete"


def _scan(p: P.Program) -> _Scan:
    sc = _Scan(p)
    for pos, ins in enumerate(p.instructions):
        _SCAN[type(ins)](sc, ins, pos)
    return sc


def out_calls(p: P.Program) -> set[int]:
    """Instructions the runtime runs with their out= variant: every output has an arena slot."""
    planned = {a.value for a in p.memory_plan.allocations}
    return {pos for pos, ins in enumerate(p.instructions)
            if isinstance(ins, P.KernelCall) and ins.out_op >= 0 and ins.outs
            and all(o in planned for o in ins.outs)}


def analyze(p: P.Program, runs_out: set[int] | None = None, *, _sc: _Scan | None = None) -> Lifetimes:
    """Storage classes and their lifetimes, from the instructions alone.

    ``runs_out``: the calls that run their out= variant (their results are fresh); default: as
    the runtime decides from the program's memory plan (:func:`out_calls`).
    """
    sc = _sc if _sc is not None else _scan(p)
    if runs_out is None:
        runs_out = out_calls(p)
    uf = _UnionFind(len(p.values))
    sc.uf = uf
    for pos, a, o in sc.aliases:
        if pos not in runs_out:
            sc.join(a, o)
    nv, n = len(p.values), len(p.instructions)
    first, last, freed = sc.first, sc.last, sc.freed
    producers, calls, loops = sc.producers, sc.calls, sc.loops

    root = [uf.find(v) for v in range(nv)]
    start: dict[int, int] = {}
    end: dict[int, int] = {}
    for v in range(nv):
        if last[v] < 0:
            continue
        r = root[v]
        start[r] = min(start.get(r, n), first[v])
        # A value nobody frees lives to the end of the program.
        end[r] = max(end.get(r, -1), last[v] if freed[v] else n)
    pinned = {root[i.value] for i in p.inputs} | {root[s.value] for s in p.state} | {root[o] for o in p.outputs}
    # Outputs are read after the last instruction; values written more than once by different
    # producers (a cond output) keep the class's whole span anyway.
    return Lifetimes(root, start, end, producers, calls, pinned, outermost_loops(loops))


def outermost_loops(loops: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The loops no other loop holds, sorted; overlapping ones (never in a verified program) merge."""
    out: list[tuple[int, int]] = []
    for a, b in sorted(loops):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


# ---------------------------------------------------------------- size bounds


def upper_nbytes(p: P.Program, value: int) -> int | None:
    """Upper bound of the bytes a tensor value spans, over every allowed input; None if unbounded."""
    t = p.values[value]
    assert isinstance(t, P.Tensor)
    ranges = [(s.min, s.max) if s.input >= 0 and s.min is not None and s.max is not None else None
              for s in p.symbols]

    def hi(d: P.Dim) -> int | None:
        if not isinstance(d, P.Sym):
            return d
        lo_, hi_ = code_bounds(p.exprs[d.expr], ranges)
        return None if hi_ is None or lo_ is None or lo_ < 0 else hi_

    sizes = [hi(d) for d in t.sizes]
    strides = [hi(d) for d in t.strides]
    offset = hi(t.storage_offset)
    if any(x is None for x in (*sizes, *strides, offset)):
        return None
    if any(s == 0 for s in sizes):
        return 0
    span = offset + 1 + sum((s - 1) * st for s, st in zip(sizes, strides, strict=True))
    return span * ITEMSIZE[schema.ScalarType(t.dtype)]


def code_bounds(code: Sequence[int], ranges: Sequence[tuple[int, int] | None]) -> tuple[int | None, int | None]:
    """Interval of an expression over symbol intervals (None = unbounded on that side)."""
    inf = float("inf")
    stack: list[tuple[float, float]] = []
    i = 0
    while i < len(code):
        op = code[i]
        if op == E.PUSH:
            stack.append((code[i + 1], code[i + 1]))
            i += 2
            continue
        if op == E.SYM:
            r = ranges[code[i + 1]]
            stack.append((r[0], r[1]) if r is not None else (-inf, inf))
            i += 2
            continue
        name, has_imm, arity = E.OPS[op]
        k = code[i + 1] if has_imm else arity
        args = stack[len(stack) - k:]
        del stack[len(stack) - k:]
        stack.append(_interval(op, args))
        i += 2 if has_imm else 1
    lo, hi = stack[0]
    return (None if lo == -inf else int(lo), None if hi == inf else int(hi))


def symbol_ranges(p: P.Program) -> list[tuple[float, float]]:
    """Each symbol's values as the runtimes allow them: an input's symbol is a natural number within
    its declared range; an unbacked one (input -1) is any int64."""
    inf = float("inf")
    return [(max(0, s.min if s.min is not None else 0), s.max if s.max is not None else inf) if s.input >= 0
            else (-inf, inf) for s in p.symbols]


_INT64_LO, _INT64_HI = -(1 << 63), (1 << 63) - 1
# The operations whose result the runtimes refuse when it leaves int64 (the others cannot leave it).
_OVERFLOWING = {E.ADD: "add", E.MUL: "mul", E.POW: "pow"}
# Bounds saturate here, as in the C++ loader's interval arithmetic (plan.cpp): past it they count as
# unbounded, so both loaders decide every expression alike.
_SAT = 1 << 100
# A bound that far from zero decides nothing: the C++ loader's saturated values are not sticky
# (-2**100 + 1 is its -inf plus one), so both loaders leave everything past 2**99 undecided.
_DECIDED = 1 << 99


def _sat(v: float) -> float:
    inf = float("inf")
    return inf if v >= _SAT else -inf if v <= -_SAT else v


def _pow_bound(b: float, e: float) -> float:
    if e == 0:
        return 1
    if b in (0, 1):
        return b
    if float("inf") in (b, e) or e >= 100:  # b >= 2: past the saturation either way
        return float("inf")
    return _sat(int(b) ** int(e))


def code_overflow(code: Sequence[int], ranges: Sequence[tuple[float, float]]) -> tuple[int, int] | None:
    """(position, value) of the first add, mul or pow in ``code`` (checked by ``check_code``) whose result
    surely leaves int64 for some symbol values in ``ranges``, or None.

    Surely: a bound of that interval that is finite and past int64. The interval of each operation is
    attained by some symbol values unless operands share a symbol, so a program whose sizes are
    products of bounded symbols is refused exactly when the runtimes would refuse its extreme inputs.
    An unbounded side (an unbacked or open-ended symbol) decides nothing.
    """
    inf = float("inf")
    stack: list[tuple[float, float]] = []
    i = 0
    while i < len(code):
        op = code[i]
        if op in (E.PUSH, E.SYM):
            lo, hi = (code[i + 1], code[i + 1]) if op == E.PUSH else ranges[code[i + 1]]
            stack.append((_sat(lo), _sat(hi)))
            i += 2
            continue
        _, has_imm, arity = E.OPS[op]
        k = code[i + 1] if has_imm else arity
        args = stack[len(stack) - k:]
        del stack[len(stack) - k:]
        if op == E.POW:
            (alo, ahi), (elo, ehi) = args
            r = (_pow_bound(alo, elo), _pow_bound(ahi, ehi)) if alo >= 0 and elo >= 0 else (-inf, inf)
        else:
            r = _interval(op, args)
            r = (_sat(r[0]), _sat(r[1]))
        if op in _OVERFLOWING:
            for bound in r:
                if abs(bound) < _DECIDED and not _INT64_LO <= bound <= _INT64_HI:
                    return i, int(bound)
        stack.append(r)
        i += 2 if has_imm else 1
    return None


def _interval(op: int, args: list[tuple[float, float]]) -> tuple[float, float]:
    inf = float("inf")
    if op == E.ADD:
        return (sum(a[0] for a in args), sum(a[1] for a in args))
    if op == E.MUL:
        lo, hi = args[0]
        for alo, ahi in args[1:]:
            prods = [0 if (x == 0 or y == 0) else x * y for x in (lo, hi) for y in (alo, ahi)]
            lo, hi = min(prods), max(prods)
        return (lo, hi)
    if op in (E.MAX, E.MIN):
        f = max if op == E.MAX else min
        return (f(a[0] for a in args), f(a[1] for a in args))
    if op in (E.FLOORDIV, E.CEILDIV):
        (alo, ahi), (blo, bhi) = args
        if alo >= 0 and blo > 0:
            lo = 0 if bhi == inf else alo // bhi
            hi = inf if ahi == inf else -(-ahi // blo)
            return (lo, hi)
    elif op == E.MOD:
        blo, bhi = args[1]
        if blo > 0:
            return (0, bhi - 1)
    elif op == E.POW:
        (alo, ahi), (elo, ehi) = args
        if alo >= 0 and elo >= 0:
            return (alo ** elo, inf if inf in (ahi, ehi) else ahi ** ehi)
    elif op == E.WHERE:
        return (min(args[1][0], args[2][0]), max(args[1][1], args[2][1]))
    elif op in (E.EQ, E.NE, E.LT, E.LE, E.GT, E.GE, E.AND, E.OR, E.NOT):
        return (0, 1)
    return (-inf, inf)


# ---------------------------------------------------------------- planning


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def plan_memory(p: P.Program, planner: str = "greedy") -> P.MemoryPlan:
    """Arena offsets for the program's plannable tensors (see the module docstring).

    Raises:
        ValueError: ``planner`` is not one of :data:`PLANNERS`.
    """
    packer = PLANNERS.get(planner)
    if packer is None:
        raise ValueError(f"unknown memory planner {planner!r}: one of {', '.join(PLANNERS)}")
    sc = _scan(p)
    runs_out = set(sc.calls)
    while True:  # each round only removes calls, so this ends
        lt = analyze(p, runs_out, _sc=sc)
        cands, planned_calls = _candidates(p, lt, runs_out)
        if planned_calls == runs_out:
            break
        runs_out = planned_calls
    cands.sort(key=lambda c: (-c[0], c[1], c[3]))
    offsets, arena = packer([(nb, s, e) for nb, s, e, _ in cands])
    allocations = [P.Allocation(v, off, nb, s, e) for (nb, s, e, v), off in zip(cands, offsets, strict=True)]
    allocations.sort(key=lambda a: a.value)
    return P.MemoryPlan(arena_size=arena, naive_size=sum(_align(c[0]) for c in cands), allocations=allocations,
                        unplanned=_count_unplanned(p, {a.value for a in allocations}))


def _plannable_nbytes(p: P.Program, value: int) -> int | None:
    """``upper_nbytes``, or None when the bound is more than one arena may hold: such a tensor is
    allocated at run time, as an unbounded one is. (Symbol ranges near int64 make bounds past
    anything the format or a loader's arena cap accepts.)"""
    nb = upper_nbytes(p, value)
    return nb if nb is not None and nb <= DEFAULT_LIMITS.max_arena_bytes else None


def _candidates(p: P.Program, lt: Lifetimes, runs_out: set[int]) -> tuple[list[tuple[int, int, int, int]], set[int]]:
    """(nbytes, start, end, value) of every plannable tensor, and the out= calls all of whose outputs are."""
    cands: list[tuple[int, int, int, int]] = []
    planned_calls = set()
    for pos, outs in lt.calls.items():
        if pos not in runs_out:
            continue
        got = []
        for o in outs:
            iv = lt.interval(o) if lt.producers.get(o) == pos else None
            nb = _plannable_nbytes(p, o) if iv is not None else None
            if iv is None or nb is None:
                break
            got.append((nb, iv[0], iv[1], o))
        if len(got) == len(outs):  # an out= call writes all of its outputs or none
            cands.extend(got)
            planned_calls.add(pos)
    for v, pos in lt.producers.items():
        if isinstance(p.instructions[pos], P.AllocCall):
            iv = lt.interval(v)
            nb = _plannable_nbytes(p, v) if iv is not None else None
            if iv is not None and nb is not None:
                cands.append((nb, iv[0], iv[1], v))
    return cands, planned_calls


def pack(items: Sequence[tuple[int, int, int]]) -> tuple[list[int], int]:
    """First-fit packing of (nbytes, start, end) in the given order: each at the lowest aligned offset
    free over its whole lifetime. Returns the offsets and the arena size."""
    buckets: dict[int, list[tuple[int, int, int, int]]] = {}  # time bucket -> (offset, size, start, end)
    offsets = []
    arena = 0
    for nb, s, e in items:
        size = _align(nb)
        seen = set()
        busy = []
        for b in range(s // _BUCKET, e // _BUCKET + 1):
            for blk in buckets.get(b, ()):
                if blk[2] <= e and s <= blk[3] and id(blk) not in seen:
                    seen.add(id(blk))
                    busy.append(blk)
        busy.sort()
        off = 0
        for boff, bsize, _, _ in busy:
            if off + size <= boff:
                break
            off = max(off, boff + bsize)
        blk = (off, size, s, e)
        for b in range(s // _BUCKET, e // _BUCKET + 1):
            buckets.setdefault(b, []).append(blk)
        offsets.append(off)
        arena = max(arena, off + size)
    return offsets, arena


def pack_shared_objects(items: Sequence[tuple[int, int, int]]) -> tuple[list[int], int]:
    """Greedy by size for shared objects, over (nbytes, start, end) in the given order (largest
    first): each tensor joins the smallest buffer whose tensors are all dead while it lives (best
    fit), or opens a new one; buffers are sized by their largest tensor and laid end to end in the
    order they were opened. Returns the offsets and the arena size."""
    sizes: list[int] = []  # per buffer: its size (its first, largest tensor's)
    starts: list[list[int]] = []  # per buffer: its tensors' lifetimes, sorted and disjoint
    ends: list[list[int]] = []
    which = []
    for nb, s, e in items:
        size = _align(nb)
        best = -1
        for k, bsize in enumerate(sizes):
            if bsize < size or (best >= 0 and bsize >= sizes[best]):
                continue
            # Lifetimes in one buffer are disjoint, so sorted by start they are sorted by end too:
            # only the last one starting at or before ``e`` can reach into [s, e].
            j = bisect_right(starts[k], e) - 1
            if j < 0 or ends[k][j] < s:
                best = k
        if best < 0:
            best = len(sizes)
            sizes.append(size)
            starts.append([])
            ends.append([])
        j = bisect_left(starts[best], s)
        starts[best].insert(j, s)
        ends[best].insert(j, e)
        which.append(best)
    base = []
    total = 0
    for size in sizes:
        base.append(total)
        total += size
    return [base[k] for k in which], total


def pack_naive(items: Sequence[tuple[int, int, int]]) -> tuple[list[int], int]:
    """No reuse: every (nbytes, start, end) gets its own bytes, in the given order."""
    offsets = []
    total = 0
    for nb, _, _ in items:
        offsets.append(total)
        total += _align(nb)
    return offsets, total


# Planner name -> packing of (nbytes, start, end) items sorted largest first.
PLANNERS = {"greedy": pack, "shared-objects": pack_shared_objects, "naive": pack_naive}
DEFAULT_PLANNER = "greedy"


def peak_live_bytes(plan: P.MemoryPlan) -> int:
    """The most slot bytes (each rounded up to 64) live at one instruction: no planner's arena is
    smaller, since tensors live at the same time never share bytes."""
    events: list[tuple[int, int]] = []
    for a in plan.allocations:
        size = _align(a.nbytes)
        events.append((a.start, size))
        events.append((a.end + 1, -size))
    events.sort()  # at one instruction, slots ending before it leave (-size) before new ones count
    peak = live = 0
    for _, d in events:
        live += d
        peak = max(peak, live)
    return peak


def _count_unplanned(p: P.Program, planned: set[int]) -> int:
    """Tensors written by instructions (intermediates) that got no arena slot."""
    written = set()
    for ins in p.instructions:
        if isinstance(ins, P.KernelCall):
            for o in ins.outs:
                if o != -1 and isinstance(p.values[o], P.Tensor):
                    written.add(o)
                elif o != -1 and isinstance(p.values[o], P.List):
                    written.update(i for i in p.values[o].items if isinstance(p.values[i], P.Tensor))
        elif isinstance(ins, P.AllocCall):
            written.add(ins.value)
    return len(written - planned)


def verify_plan(p: P.Program) -> None:
    """Check the program's memory plan against lifetimes derived from its instructions.

    The lifetimes follow what the runtime will do: a call runs its out= variant exactly when every
    output has a slot, and any other call's results share storage with the arguments its operator
    lists in ``returns_alias``.

    Raises:
        MemoryPlanError: an allocation for a tensor that cannot be planned, of another size than
            the tensor's upper bound, with another lifetime than the derived one, written by a call
            only some of whose outputs have slots, or overlapping another allocation live at the
            same time.
    """
    planned = {a.value for a in p.memory_plan.allocations}
    for pos, ins in enumerate(p.instructions):
        if isinstance(ins, P.KernelCall):
            got = [o for o in ins.outs if o in planned]
            if got and (ins.out_op < 0 or len(got) != len(ins.outs)):
                raise MemoryPlanError(f"instructions[{pos}]: values {got} have arena slots but the call does not run "
                                      "an out= variant writing all of its outputs, so nothing would write them")
    lt = analyze(p)
    items = []
    for a in p.memory_plan.allocations:
        iv = lt.interval(a.value)
        if iv is None:
            raise MemoryPlanError(f"allocation for value {a.value}: the value is not a fresh intermediate "
                                  "outside loops (inputs, state, outputs and loop bodies are never planned)")
        if (a.start, a.end) != iv:
            raise MemoryPlanError(f"allocation for value {a.value}: lifetime {a.start}..{a.end} differs from the "
                                  f"derived {iv[0]}..{iv[1]}")
        nb = upper_nbytes(p, a.value)
        if nb is None or nb > a.nbytes:
            raise MemoryPlanError(f"allocation for value {a.value}: {a.nbytes} bytes cannot hold the tensor's "
                                  f"upper bound of {nb if nb is not None else 'unbounded'} bytes")
        if nb < a.nbytes:  # plan_memory sizes every slot exactly: a bigger one only inflates the arena
            raise MemoryPlanError(f"allocation for value {a.value}: {a.nbytes} bytes is more than the tensor's "
                                  f"upper bound of {nb} bytes")
        items.append((iv[0], iv[1], a.offset, a.offset + a.nbytes, a.value))
    check_no_overlap(items)


def check_no_overlap(items: list[tuple[int, int, int, int, int]]) -> None:
    """``items``: (start, end, first byte, end byte, value). No two live at once may share bytes."""
    items = sorted(items)
    active: list[tuple[int, int, int, int, int]] = []
    for it in items:
        s, e, lo, hi, v = it
        active = [a for a in active if a[1] >= s]
        for a in active:
            if lo < a[3] and a[2] < hi and hi > lo and a[3] > a[2]:
                raise MemoryPlanError(
                    f"values {a[4]} and {v} are live together (instructions {a[0]}..{a[1]} and {s}..{e}) "
                    f"but their arena bytes [{a[2]}, {a[3]}) and [{lo}, {hi}) overlap")
        active.append(it)
