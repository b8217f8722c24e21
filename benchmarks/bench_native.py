"""Case: the native emitter and reference runtime, against torch in the same run.

    python benchmarks/bench_native.py --case native_chain_5000 --size 5000
    python benchmarks/bench_native.py --case native_transformer --model transformer --size 4

Models: the pointwise chain (``--size`` ops; per-instruction overhead dominates) or ``--size``
transformer blocks with dynamic batch and sequence (kernels dominate). Untimed: export,
``serde.save`` (canonical artifact), one emit to warm up. Timed, interleaved:

- run: ``Method.run`` (heap and arena) against ``ep.module()`` on the same input; both execute
  the same aten kernels, so the difference is interpreter overhead. ``overhead_per_instruction``
  is that difference per executed instruction, as a fraction of eager's average time per op.
- emit: ``emit`` on the decoded artifact, against ``torch.export.save`` of the same program.

Sizes: the emitted program file against the artifact. Prints one JSON line.
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
    from native.emit import emit
    from native.verify import decode
    from native.runtime import Method
    from serde.artifact import read_artifact

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
        "overhead_per_instruction": round(overhead / eager_per_op, 3),
        "emit_vs_torch_save": ratio(t["emit"], t["torch_save"]),
        "emitted_vs_artifact_size": round(emitted_bytes / artifact_bytes, 3),
        "emitted_bytes": emitted_bytes,
        "artifact_bytes": artifact_bytes,
        "arena_bytes": p.memory_plan.arena_size,
        "naive_bytes": p.memory_plan.naive_size,
        "median_spread": round(statistics.median(t["native"].wall) / min(t["native"].wall), 3),
    }


def main() -> int:
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--model", choices=("chain", "transformer"), default="chain")
    p.add_argument("--size", type=int, required=True, help="ops in the chain, or transformer blocks")
    a = p.parse_args()
    return main_guard(a.case, lambda: run(a.model, a.size, a.repeats))


if __name__ == "__main__":
    sys.exit(main())
