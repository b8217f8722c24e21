"""What a program's memory plan costs: arena, peak live bytes, naive size and the largest slots.

``pt2serde emit --plan`` prints :func:`format_plan`. Torch-free: it reads the program alone, and
names each slot by the debug handle of the instruction that writes it.
"""

from __future__ import annotations

from dataclasses import dataclass

from native.format import program as P
from native.format.memory import peak_live_bytes

__all__ = ["Slot", "PlanReport", "plan_report", "format_plan"]


@dataclass(frozen=True)
class Slot:
    value: int
    offset: int
    nbytes: int
    start: int
    end: int
    node: str  # the writing instruction's node ("<program>" when it has no debug handle)
    module: str


@dataclass(frozen=True)
class PlanReport:
    arena: int
    peak_live: int  # a lower bound on any planner's arena for these lifetimes
    naive: int  # no reuse at all
    planned: int
    unplanned: int
    slots: list[Slot]  # largest first


def plan_report(p: P.Program) -> PlanReport:
    mp = p.memory_plan
    writer: dict[int, int] = {}
    for pc, ins in enumerate(p.instructions):
        if isinstance(ins, P.KernelCall):
            for o in ins.outs:
                writer.setdefault(o, pc)
        elif isinstance(ins, P.AllocCall):
            writer.setdefault(ins.value, pc)
    slots = []
    for a in mp.allocations:
        pc = writer.get(a.value, -1)
        h = p.instruction_handles[pc] if 0 <= pc < len(p.instruction_handles) else -1
        d = p.debug_handles[h] if 0 <= h < len(p.debug_handles) else None
        slots.append(Slot(a.value, a.offset, a.nbytes, a.start, a.end,
                          d.node if d else "<program>", d.module if d else ""))
    slots.sort(key=lambda s: (-s.nbytes, s.start, s.value))
    return PlanReport(mp.arena_size, peak_live_bytes(mp), mp.naive_size, len(mp.allocations), mp.unplanned, slots)


def _bytes(n: int) -> str:
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k:
            return f"{n / k:.1f} {unit}"
    return f"{n} B"


def format_plan(r: PlanReport, *, top: int = 10, planner: str | None = None) -> str:
    """The totals, then the ``top`` largest slots with their nodes, modules and lifetimes."""
    def pct(n: int) -> str:
        return f" ({100 * n / r.naive:.0f}% of naive)" if r.naive else ""

    head = f"memory plan{f' ({planner})' if planner else ''}: {r.planned} tensors in the arena, " \
           f"{r.unplanned} left to the allocator"
    lines = [head,
             f"  arena       {r.arena:>14,d} bytes  {_bytes(r.arena)}{pct(r.arena)}",
             f"  peak live   {r.peak_live:>14,d} bytes  {_bytes(r.peak_live)}{pct(r.peak_live)}"
             "  (no plan of these lifetimes is smaller)",
             f"  naive       {r.naive:>14,d} bytes  {_bytes(r.naive)}  (every tensor its own bytes)"]
    if r.slots:
        lines += ["", f"largest slots ({min(top, len(r.slots))} of {len(r.slots)}):",
                  f"  {'bytes':>12}  {'offset':>12}  {'live':>13}  {'value':>6}  node (module)"]
        for s in r.slots[:top]:
            where = f"{s.node}" + (f" ({s.module})" if s.module else "")
            lines.append(f"  {s.nbytes:>12,d}  {s.offset:>12,d}  {f'{s.start}..{s.end}':>13}  {s.value:>6}  {where}")
    return "\n".join(lines)
