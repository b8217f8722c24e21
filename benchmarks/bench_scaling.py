"""Case: how ``serde.save`` and ``serde.load`` scale with the number of nodes.

    python benchmarks/bench_scaling.py --case scaling --sizes 1000,5000,20000

Exports the chain (``serde.testing.zoo.Chain``) at each size and times ``serde.save`` and ``serde.load``
of it. Prints one JSON line with the time per node at each size, in microseconds (the one place a
benchmark prints time: the question is its shape, not a comparison), and the linearity of each
side: the time per node at the largest size divided by the time per node at the smallest. A cost
linear in nodes gives about 1 (a little less, as fixed costs spread); a quadratic one grows with
the size ratio.

    python benchmarks/bench_scaling.py --case scaling_instructions --instructions --sizes 1000,20000

With ``--instructions`` the same question is asked in machine instructions instead of time:
each size's artifact is loaded and saved once in a child process under valgrind's callgrind,
which counts the instructions executed inside the call and nothing else. A count is the same
from run to run and whatever else the machine does, and it grows with the work done, not with
cache misses: a per-node count that stays flat while the per-node time grows says the growth
is the memory hierarchy, not an algorithm. The child saves the program it just loaded (no
export under valgrind, which would take an hour at 20,000 nodes): the same graph, metadata and
weights as the exported one.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile

from _harness import base_parser, callgrind_counts, export_chain, graph_nodes, main_guard, time_interleaved


def run(sizes: list[int], repeats: int) -> dict:
    import serde

    per_size = []
    with tempfile.TemporaryDirectory(prefix="pt2serde-bench-") as d:
        path = os.path.join(d, "model.pt2s")
        warm, _ = export_chain(30)
        serde.save(warm, path)
        serde.load(path)
        for size in sizes:
            ep, _ = export_chain(size)
            nodes = graph_nodes(ep)
            t = time_interleaved({"save": lambda ep=ep: serde.save(ep, path)}, repeats)["save"]
            t_load = time_interleaved({"load": lambda: serde.load(path)}, repeats)["load"]
            per_size.append({"size": size, **nodes,
                             "save_us_per_node": _per_node(t.wall, nodes["nodes"]),
                             "load_us_per_node": _per_node(t_load.wall, nodes["nodes"]),
                             "save_cpu_us_per_node": round(1e6 * min(t.cpu) / nodes["nodes"], 2),
                             "load_cpu_us_per_node": round(1e6 * min(t_load.cpu) / nodes["nodes"], 2)})
    first, last = per_size[0], per_size[-1]
    return _record("scaling", per_size, repeats=repeats,
                   save_linearity=_linearity(first["save_us_per_node"], last["save_us_per_node"],
                                             first["save_cpu_us_per_node"], last["save_cpu_us_per_node"]),
                   load_linearity=_linearity(first["load_us_per_node"], last["load_us_per_node"],
                                             first["load_cpu_us_per_node"], last["load_cpu_us_per_node"]))


def run_instructions(sizes: list[int]) -> dict:
    import serde

    per_size = []
    with tempfile.TemporaryDirectory(prefix="pt2serde-bench-") as d:
        warm = os.path.join(d, "warm.pt2s")
        serde.save(export_chain(30)[0], warm)
        for size in sizes:
            ep, _ = export_chain(size)
            nodes = graph_nodes(ep)
            path = os.path.join(d, f"chain{size}.pt2s")
            serde.save(ep, path)
            del ep
            # one load of the artifact, then one save of the program it gave
            load, save = callgrind_counts(_CHILD, [path, warm], 2)
            per_size.append({"size": size, **nodes,
                             "load_instructions_per_node": round(load / nodes["nodes"]),
                             "save_instructions_per_node": round(save / nodes["nodes"])})
    first, last = per_size[0], per_size[-1]
    return _record("scaling_instructions", per_size,
                   save_linearity=round(last["save_instructions_per_node"] / first["save_instructions_per_node"], 3),
                   load_linearity=round(last["load_instructions_per_node"] / first["load_instructions_per_node"], 3))


def _record(bench: str, per_size: list[dict], **fields) -> dict:
    """The JSON record of a scaling case: its sizes, with the largest as the case's size."""
    last = per_size[-1]
    return {"bench": bench, "size": last["size"], "nodes": last["nodes"], "ops": last["ops"], "sizes": per_size,
            **fields}


_CHILD = """
import gc, io, sys, serde
path, warm = sys.argv[1], sys.argv[2]
serde.save(serde.load(warm), io.BytesIO())  # imports and first-call caches, not counted
gc.collect()  # as before each timed sample: no older generation's collection left pending
ep = sys.call_tracing(serde.load, (path,))
gc.collect()
sys.call_tracing(serde.save, (ep, io.BytesIO()))
"""


def _per_node(wall: list[float], nodes: int) -> dict[str, float]:
    return {"min": round(1e6 * min(wall) / nodes, 2), "median": round(1e6 * statistics.median(wall) / nodes, 2)}


def _linearity(first: dict, last: dict, first_cpu: float, last_cpu: float) -> dict[str, float]:
    return {"min": round(last["min"] / first["min"], 3), "median": round(last["median"] / first["median"], 3),
            "cpu": round(last_cpu / first_cpu, 3)}


def main() -> int:
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1000,5000,20000", help="comma-separated op counts, smallest first")
    p.add_argument("--instructions", action="store_true",
                   help="count instructions under valgrind's callgrind instead of timing (ignores --repeats)")
    a = p.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    if a.instructions:
        return main_guard(a.case, lambda: run_instructions(sizes))
    return main_guard(a.case, lambda: run(sizes, a.repeats))


if __name__ == "__main__":
    sys.exit(main())
