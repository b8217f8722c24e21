"""Case: the C++ runtime of native programs against ``ep.module()`` and the Python runtime, same run.

    python benchmarks/bench_native_cpp.py --case native_cpp_chain_5000 --model chain --size 5000
    python benchmarks/bench_native_cpp.py --case native_cpp_transformer --model transformer --size 4

Untimed: export, save, emit, one checked run of each engine (the C++ outputs must equal the
Python runtime's bit for bit). Timed, interleaved: ``ep.module()``, the Python runtime and the
C++ runtime (heap and arena) on the same input. Then ``CppMethod.kernel_floor`` times runs in
C++ with a clock around every kernel call: ``overhead_us_per_instruction`` is the fastest run's
time outside its kernel calls divided by its instructions, what the runtime adds on top of the
kernels (an upper bound: the clock reads count as overhead). Prints one JSON line.
"""

from __future__ import annotations

import os
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
    from native.run import cpp_engine
    from native.run.runtime import Method
    from serde.archive.artifact import read_artifact

    if not cpp_engine.available():
        return {"bench": "native_cpp", "skipped": cpp_engine.unavailable_reason()}
    ep, args = export_chain(size) if model == "chain" else export_transformer(size)
    with tempfile.TemporaryDirectory(prefix="pt2serde-bench-") as d:
        art_path = os.path.join(d, "m.pt2s")
        serde.save(ep, art_path)
        art = read_artifact(art_path)
        native = decode(emit(art.program, art.weights, art.payload).encode())
    module = ep.module()
    py = Method(native)
    cpp = cpp_engine.load(native)
    cpp_arena = cpp_engine.load(native, arena=True)
    x = args[0]
    want = py.run(x)
    # out= kernels may round differently from functional ones: each mode against its Python twin
    # (the C++ runtime runs every call whose outputs all have slots out=, i.e. out_min_bytes=0).
    for m, twin in ((cpp, py), (cpp_arena, Method(native, arena=True, out_min_bytes=0))):
        assert torch.equal(m.run(x), twin.run(x)), "the C++ runtime's result differs from the Python runtime's"
    torch.testing.assert_close(want, module(x))
    inner = 20 if model == "chain" else 5  # runs per timed call: one run takes milliseconds
    with torch.no_grad():
        t = time_interleaved({
            "eager": lambda: [module(x) for _ in range(inner)],
            "python": lambda: [py.run(x) for _ in range(inner)],
            "cpp": lambda: [cpp.run(x) for _ in range(inner)],
            "cpp_arena": lambda: [cpp_arena.run(x) for _ in range(inner)],
        }, repeats)
    p = native.program
    n_ins = len(p.instructions)
    kernels = sum(type(i).__name__ == "KernelCall" for i in p.instructions)
    per_run = {k: min(v.wall) / inner for k, v in t.items()}
    best_run, floor = cpp.kernel_floor([x], inner * repeats)
    return {
        "bench": "native_cpp",
        "model": model,
        "size": size,
        **graph_nodes(ep),
        "repeats": repeats,
        "instructions": n_ins,
        "kernel_calls": kernels,
        "cpp_vs_eager": ratio(t["cpp"], t["eager"]),
        "cpp_arena_vs_eager": ratio(t["cpp_arena"], t["eager"]),
        "cpp_vs_python_runtime": ratio(t["cpp"], t["python"]),
        "us_per_instruction": round(per_run["cpp"] / n_ins * 1e6, 3),
        "overhead_us_per_instruction": round((best_run - floor) / n_ins * 1e6, 3),
        "eager_us_per_op": round(per_run["eager"] / kernels * 1e6, 3),
        "python_runtime_us_per_instruction": round(per_run["python"] / n_ins * 1e6, 3),
    }


def main() -> int:
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--model", choices=("chain", "transformer"), default="chain")
    p.add_argument("--size", type=int, required=True, help="ops in the chain, or transformer blocks")
    a = p.parse_args()
    return main_guard(a.case, lambda: run(a.model, a.size, a.repeats))


if __name__ == "__main__":
    sys.exit(main())
