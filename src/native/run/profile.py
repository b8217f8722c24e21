"""Per-node and per-module time from per-instruction timings, for any engine.

An engine reports a run's profile as ``(instruction index, nanoseconds)`` pairs (an instruction
may appear many times: loops); :func:`summarize` maps them through the program's debug handles
(:class:`native.format.program.DebugHandle`) to nodes and to modules. A module's time includes its
submodules' (``layers`` includes ``layers.0.attn``); instructions of no node are reported as
``<program>``. Torch-free: the C++ runtime's timings go through the same code.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from native.format import program as P

__all__ = ["Row", "Profile", "summarize", "format_profile"]

_NO_NODE = "<program>"


@dataclass(frozen=True)
class Row:
    name: str  # node name, or module path ("" is the whole program)
    detail: str  # the node's op and module, or the number of nodes in the module
    ns: int
    calls: int


@dataclass(frozen=True)
class Profile:
    total_ns: int
    nodes: list[Row]  # slowest first
    modules: list[Row]  # slowest first


def summarize(p: P.Program, timings: Iterable[tuple[int, int]]) -> Profile:
    """Aggregate ``timings`` by node and by module (inclusive), each sorted slowest first.

    Raises:
        ValueError: an instruction index outside the program (an engine bug, not bad input).
    """
    handles, per_ins = p.debug_handles, p.instruction_handles
    node_ns: dict[int, list[int]] = {}
    total = 0
    for pc, ns in timings:
        if not 0 <= pc < len(p.instructions):
            raise ValueError(f"profile names instruction {pc}; the program has {len(p.instructions)}")
        h = per_ins[pc] if pc < len(per_ins) else -1
        acc = node_ns.setdefault(h, [0, 0])
        acc[0] += ns
        acc[1] += 1
        total += ns
    nodes = []
    modules: dict[str, list] = {}
    for h, (ns, calls) in node_ns.items():
        if h < 0:
            nodes.append(Row(_NO_NODE, "signature copies and frees", ns, calls))
            continue
        d = handles[h]
        nodes.append(Row(d.node, f"{d.op.removeprefix('torch.ops.')}" + (f" in {d.module}" if d.module else ""),
                         ns, calls))
        parts = d.module.split(".") if d.module else []
        for k in range(len(parts) + 1):
            acc = modules.setdefault(".".join(parts[:k]), [0, 0, set()])
            acc[0] += ns
            acc[1] += calls
            acc[2].add(h)
    nodes.sort(key=lambda r: (-r.ns, r.name))
    mods = [Row(m, f"{len(a[2])} nodes", a[0], a[1]) for m, a in modules.items()]
    mods.sort(key=lambda r: (-r.ns, r.name))
    return Profile(total, nodes, mods)


def format_profile(prof: Profile, *, top: int = 20) -> str:
    """Two tables, nodes then modules, slowest first, with each row's share of the total."""
    def pct(ns: int) -> str:
        return f"{100 * ns / prof.total_ns:5.1f}%" if prof.total_ns else "    -"

    lines = [f"profile: {prof.total_ns / 1e6:.3f} ms in total", "", "per node (slowest first):"]
    for r in prof.nodes[:top]:
        lines.append(f"  {r.ns / 1e3:10.1f} us {pct(r.ns)}  {r.calls:6d}x  {r.name}  ({r.detail})")
    if len(prof.nodes) > top:
        lines.append(f"  ... {len(prof.nodes) - top} more nodes")
    lines += ["", "per module, submodules included (slowest first):"]
    for r in prof.modules[:top]:
        lines.append(f"  {r.ns / 1e3:10.1f} us {pct(r.ns)}  {r.name or '<root>'}  ({r.detail})")
    if len(prof.modules) > top:
        lines.append(f"  ... {len(prof.modules) - top} more modules")
    return "\n".join(lines)
