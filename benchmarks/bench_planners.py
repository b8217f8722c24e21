"""Case: the native memory planners on the zoo, arena bytes and planning time per planner.

    python benchmarks/bench_planners.py --case native_planners --chain 5000 --blocks 4

Programs: every zoo program the native emitter supports (``--zoo N`` > 0: the first N), ``--blocks``
transformer blocks with dynamic batch and sequence (slots at their upper bounds), and a pointwise
chain of ``--chain`` ops (planning time at scale). Each is exported, saved and emitted untimed; then
``plan_memory`` runs with every planner (:data:`native.format.memory.PLANNERS`), timed (the minimum of
``--repeats``; most of it is the lifetime analysis all planners share), and its plan goes through
the loader's verifier; the packing alone is timed too (``pack_ms``). Reported per program and summed:
the arena bytes of each planner, the peak live bytes (no plan of these lifetimes is smaller) and
the naive size (no reuse). Prints one JSON line.
"""

from __future__ import annotations

import sys
import time

from _harness import base_parser, export_chain, export_transformer, graph_nodes, main_guard


def run(zoo_limit: int, blocks: int, chain: int, repeats: int) -> dict:
    import msgspec

    from native.emit.emitter import emit
    from native.format import program as P
    from native.format.memory import PLANNERS, peak_live_bytes, plan_memory, verify_plan
    from native.format.verify import decode
    from serde.api import to_artifact_parts
    from serde.archive import payload_name
    from serde.errors import SerializeError
    from serde.testing import zoo

    eps = [(c.name, lambda c=c: zoo.export_case(c)) for c in zoo.CASES[:zoo_limit or None]]
    if blocks:
        eps.append((f"transformer_{blocks}", lambda: export_transformer(blocks)[0]))
    if chain:
        eps.append((f"chain_{chain}", lambda: export_chain(chain)[0]))
    programs = {}
    refused = []
    counts = {"nodes": 0, "ops": 0}
    for name, export in eps:
        ep = export()
        try:
            program, weights, payloads, _ = to_artifact_parts(ep)
            native = emit(program, weights, lambda sha, payloads=payloads: payloads[payload_name(sha)], plan=False)
        except SerializeError:  # not a native program (loss outputs, custom objects, ...): listed
            refused.append(name)
            continue
        for k, v in graph_nodes(ep).items():
            counts[k] += v
        p = native.program
        row: dict = {}
        plan_memory(p)  # untimed: the first call of a process pays for lazy imports and caches
        for planner in PLANNERS:
            best = float("inf")
            for _ in range(repeats):
                t0 = time.perf_counter()
                plan = plan_memory(p, planner)
                best = min(best, time.perf_counter() - t0)
            planned = msgspec.structs.replace(p, memory_plan=plan)
            verify_plan(planned)
            decode(P.NativeProgram(planned, native.segment).encode())  # the loader's checks, tightness included
            # The packing alone, on the items plan_memory packs (the lifetimes are the same for all).
            items = [(a.nbytes, a.start, a.end) for a in sorted(plan.allocations,
                                                                key=lambda a: (-a.nbytes, a.start, a.value))]
            pack_best = float("inf")
            for _ in range(repeats):
                t0 = time.perf_counter()
                PLANNERS[planner](items)
                pack_best = min(pack_best, time.perf_counter() - t0)
            row[planner] = {"arena_bytes": plan.arena_size, "plan_ms": round(best * 1e3, 3),
                            "pack_ms": round(pack_best * 1e3, 3)}
        row["tensors"] = len(plan.allocations)
        row["peak_live_bytes"] = peak_live_bytes(plan)
        row["naive_bytes"] = plan.naive_size
        programs[name] = row
    totals = {pl: {"arena_bytes": sum(r[pl]["arena_bytes"] for r in programs.values()),
                   "plan_ms": round(sum(r[pl]["plan_ms"] for r in programs.values()), 3),
                   "pack_ms": round(sum(r[pl]["pack_ms"] for r in programs.values()), 3)} for pl in PLANNERS}
    return {
        "bench": "native_planners",
        **counts,
        "repeats": repeats,
        "planners": list(PLANNERS),
        "programs": programs,
        "refused": refused,
        "totals": totals,
        "peak_live_bytes": sum(r["peak_live_bytes"] for r in programs.values()),
        "naive_bytes": sum(r["naive_bytes"] for r in programs.values()),
        # programs where shared buffers beat offsets, and the other way round
        "shared_smaller": sorted(n for n, r in programs.items()
                                 if r["shared-objects"]["arena_bytes"] < r["greedy"]["arena_bytes"]),
        "greedy_smaller": sorted(n for n, r in programs.items()
                                 if r["greedy"]["arena_bytes"] < r["shared-objects"]["arena_bytes"]),
    }


def main() -> int:
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--zoo", type=int, default=0, help="the first N zoo programs (0: all)")
    p.add_argument("--blocks", type=int, default=4, help="transformer blocks (0: none)")
    p.add_argument("--chain", type=int, default=5000, help="ops of the pointwise chain (0: none)")
    a = p.parse_args()
    return main_guard(a.case, lambda: run(a.zoo, a.blocks, a.chain, a.repeats))


if __name__ == "__main__":
    sys.exit(main())
