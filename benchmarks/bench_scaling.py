"""Case: how ``serde.save`` and ``serde.load`` scale with the number of nodes.

    python benchmarks/bench_scaling.py --case scaling --sizes 1000,5000,20000

Exports the chain (``tests.zoo.Chain``) at each size and times ``serde.save`` and ``serde.load``
of it. Prints one JSON line with the time per node at each size, in microseconds (the one place a
benchmark prints time: the question is its shape, not a comparison), and the linearity of each
side: the time per node at the largest size divided by the time per node at the smallest. A cost
linear in nodes gives about 1 (a little less, as fixed costs spread); a quadratic one grows with
the size ratio.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile

from _harness import base_parser, export_chain, graph_nodes, main_guard, time_interleaved


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
    return {
        "bench": "scaling",
        "size": last["size"],
        "nodes": last["nodes"],
        "ops": last["ops"],
        "repeats": repeats,
        "sizes": per_size,
        "save_linearity": _linearity(first["save_us_per_node"], last["save_us_per_node"],
                                     first["save_cpu_us_per_node"], last["save_cpu_us_per_node"]),
        "load_linearity": _linearity(first["load_us_per_node"], last["load_us_per_node"],
                                     first["load_cpu_us_per_node"], last["load_cpu_us_per_node"]),
    }


def _per_node(wall: list[float], nodes: int) -> dict[str, float]:
    return {"min": round(1e6 * min(wall) / nodes, 2), "median": round(1e6 * statistics.median(wall) / nodes, 2)}


def _linearity(first: dict, last: dict, first_cpu: float, last_cpu: float) -> dict[str, float]:
    return {"min": round(last["min"] / first["min"], 3), "median": round(last["median"] / first["median"], 3),
            "cpu": round(last_cpu / first_cpu, 3)}


def main() -> int:
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--sizes", default="1000,5000,20000", help="comma-separated op counts, smallest first")
    a = p.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    return main_guard(a.case, lambda: run(sizes, a.repeats))


if __name__ == "__main__":
    sys.exit(main())
