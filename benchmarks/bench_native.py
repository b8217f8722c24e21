"""Case: the native emitter and reference runtime, against torch in the same run.

    python benchmarks/bench_native.py --case native_chain_5000 --size 5000
    python benchmarks/bench_native.py --case native_transformer --model transformer --size 4
    python benchmarks/bench_native.py --case native_zoo --model zoo --size 0

Models: the pointwise chain (``--size`` ops; per-instruction overhead dominates) or ``--size``
transformer blocks with dynamic batch and sequence (kernels dominate). Untimed: export,
``serde.save`` (canonical artifact), one emit to warm up. Timed, interleaved:

- run: ``Method.run`` (heap and arena) against ``ep.module()`` on the same input; both execute
  the same aten kernels, so the difference is interpreter overhead. ``overhead_per_instruction``
  is that difference per executed instruction, as a fraction of eager's average time per op.
- emit: ``emit`` on the decoded artifact, against ``torch.export.save`` of the same program.

Sizes: the emitted program file against the artifact. Prints one JSON line.

``--model zoo``: every program of the model zoo the native emitter supports (``--size N`` > 0:
the first N), each exported and timed like the run above: heap and arena ``Method.run`` against
``ep.module()`` per program (minimum wall time of calls of ~50 ms each, one intra-op thread),
their geometric means, and the worst arena / heap ratio.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile

from _harness import (
    base_parser,
    export_chain,
    export_transformer,
    graph_nodes,
    main_guard,
    ratio,
    time_interleaved,
)


def run(model: str, size: int, repeats: int) -> dict:
    import torch

    import serde
    from native.emit.emitter import emit
    from native.format.verify import decode
    from native.run.runtime import Method
    from serde.archive.artifact import read_artifact

    ep, args = export_chain(size) if model == "chain" else export_transformer(size)
    with tempfile.TemporaryDirectory(prefix="pt2serde-bench-") as d:
        art_path = os.path.join(d, "m.pt2s")
        serde.save(ep, art_path)
        art = read_artifact(art_path)
        native = decode(emit(art.program, art.weights, art.payload).encode())
        module = ep.module()
        heap = Method(native)
        arena = Method(native, arena=True)
        x = args[0]
        torch.testing.assert_close(heap.run(x), module(x))
        torch.testing.assert_close(arena.run(x), module(x))
        inner = 20 if model == "chain" else 5  # runs per timed call: one run takes milliseconds
        t = time_interleaved({
            "eager": lambda: [module(x) for _ in range(inner)],
            "native": lambda: [heap.run(x) for _ in range(inner)],
            "arena": lambda: [arena.run(x) for _ in range(inner)],
            "emit": lambda: emit(art.program, art.weights, art.payload),
            "torch_save": lambda: torch.export.save(ep, os.path.join(d, "m.pt2")),
        }, repeats)
        artifact_bytes = os.path.getsize(art_path)
        emitted_bytes = len(native.encode())
    p = native.program
    n_ins = len(p.instructions)
    kernels = sum(type(i).__name__ == "KernelCall" for i in p.instructions)
    eager_per_op = min(t["eager"].wall) / inner / kernels
    overhead = (min(t["native"].wall) - min(t["eager"].wall)) / inner / n_ins
    return {
        "bench": "native",
        "model": model,
        "size": size,
        **graph_nodes(ep),
        "repeats": repeats,
        "instructions": n_ins,
        "kernel_calls": kernels,
        "run_vs_eager": ratio(t["native"], t["eager"]),
        "arena_run_vs_eager": ratio(t["arena"], t["eager"]),
        "arena_vs_heap": ratio(t["arena"], t["native"]),
        "overhead_per_instruction": round(overhead / eager_per_op, 3),
        "emit_vs_torch_save": ratio(t["emit"], t["torch_save"]),
        "emitted_vs_artifact_size": round(emitted_bytes / artifact_bytes, 3),
        "emitted_bytes": emitted_bytes,
        "artifact_bytes": artifact_bytes,
        "arena_bytes": p.memory_plan.arena_size,
        "naive_bytes": p.memory_plan.naive_size,
        "median_spread": round(statistics.median(t["native"].wall) / min(t["native"].wall), 3),
    }


def run_zoo(limit: int, repeats: int) -> dict:
    import copy
    import math
    import time

    import torch

    from native.emit.emitter import emit
    from native.format.verify import decode
    from native.run.runtime import Method
    from serde.api import to_artifact_parts
    from serde.archive import payload_name
    from serde.errors import SerializeError
    from serde.testing import zoo

    # One intra-op thread for every side: on a loaded machine a parallel kernel waits for its
    # descheduled sibling thread, which swamps the differences this case measures.
    torch.set_num_threads(1)
    programs = {}
    refused = []
    counts = {"nodes": 0, "ops": 0}
    for case in zoo.CASES[:limit or None]:
        ep = zoo.export_case(case)
        try:
            program, weights, payloads, _ = to_artifact_parts(ep)
            native = decode(emit(program, weights, lambda sha, payloads=payloads: payloads[payload_name(sha)]).encode())
        except SerializeError:  # not a native program (loss outputs, custom objects, ...): listed
            refused.append(case.name)
            continue
        for k, v in graph_nodes(ep).items():
            counts[k] += v
        torch.manual_seed(0)
        _, args, kwargs, _ = case.build()
        module = copy.deepcopy(ep).module()
        heap, arena = Method(native), Method(native, arena=True)
        with torch.no_grad():  # warm up, and size the inner loop so one timed call takes ~50 ms
            for f in (module, heap.run, arena.run):
                f(*copy.deepcopy(args), **copy.deepcopy(kwargs))
            t0 = time.perf_counter()
            heap.run(*copy.deepcopy(args), **copy.deepcopy(kwargs))
            inner = max(3, min(500, int(0.05 / max(time.perf_counter() - t0, 1e-6))))

        def runs(f, args=args, kwargs=kwargs, inner=inner):
            def go():
                with torch.no_grad():
                    for _ in range(inner):
                        f(*copy.deepcopy(args), **copy.deepcopy(kwargs))
            return go
        t = time_interleaved({"eager": runs(module), "native": runs(heap.run), "arena": runs(arena.run)},
                             max(repeats, 9))
        programs[case.name] = {"run_vs_eager": ratio(t["native"], t["eager"])["min"],
                               "arena_run_vs_eager": ratio(t["arena"], t["eager"])["min"],
                               "arena_vs_heap": ratio(t["arena"], t["native"])["min"],
                               "instructions": len(native.program.instructions)}

    def geomean(key: str) -> float:
        return round(math.exp(sum(math.log(r[key]) for r in programs.values()) / len(programs)), 3)

    worst = max(programs, key=lambda k: programs[k]["arena_vs_heap"])
    return {
        "bench": "native_zoo",
        **counts,
        "programs": programs,
        "refused": refused,
        "repeats": repeats,
        "run_vs_eager_geomean": geomean("run_vs_eager"),
        "arena_run_vs_eager_geomean": geomean("arena_run_vs_eager"),
        "arena_vs_heap_geomean": geomean("arena_vs_heap"),
        "arena_vs_heap_worst": programs[worst]["arena_vs_heap"],
        "arena_vs_heap_worst_program": worst,
    }


def main() -> int:
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--model", choices=("chain", "transformer", "zoo"), default="chain")
    p.add_argument("--size", type=int, required=True,
                   help="ops in the chain, transformer blocks, or zoo programs (0: all)")
    a = p.parse_args()
    if a.model == "zoo":
        return main_guard(a.case, lambda: run_zoo(a.size, a.repeats))
    return main_guard(a.case, lambda: run(a.model, a.size, a.repeats))


if __name__ == "__main__":
    sys.exit(main())
