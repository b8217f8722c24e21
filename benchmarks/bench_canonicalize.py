"""Case: canonicalize + encode of a large graph, as a fraction of ``torch.export.save`` on it.

    python benchmarks/bench_canonicalize.py --case canonicalize_20000 --size 20000

The program is serialized to schema Structs once, untimed (``serde.bridge.program.serialize_program``);
the timed work is ``canonical.canonicalize.canonicalize`` followed by ``serde.core.wire.encode`` of the
result. Prints one JSON line whose ``cost_fraction`` is (our time / torch.export.save time), so
< 1 means cheaper; the parts (canonicalize alone, encode alone) are reported the same way.
"""

from __future__ import annotations

import os
import sys
import tempfile

from _harness import base_parser, export_chain, graph_nodes, main_guard, ratio, time_interleaved


def run(size: int, repeats: int) -> dict:
    import torch

    from canonical.canonicalize import canonicalize
    from serde.bridge.effects import op_facts
    from serde.bridge.program import serialize_program
    from serde.core import wire

    ep, _ = export_chain(size)
    small, _ = export_chain(30)
    program = serialize_program(ep)
    canon, _ = canonicalize(program, facts=op_facts)
    with tempfile.TemporaryDirectory(prefix="pt2serde-bench-") as d:
        path = os.path.join(d, "model.pt2")
        wire.encode(canonicalize(serialize_program(small), facts=op_facts)[0])  # warm-up, as for torch below
        torch.export.save(small, os.path.join(d, "warm.pt2"))
        t = time_interleaved({
            "ours": lambda: wire.encode(canonicalize(program, facts=op_facts)[0]),
            "canonicalize": lambda: canonicalize(program, facts=op_facts),
            "encode": lambda: wire.encode(canon),
            "torch": lambda: torch.export.save(ep, path),
        }, repeats)
    return {
        "bench": "canonicalize",
        "size": size,
        **graph_nodes(ep),
        "repeats": repeats,
        "cost_fraction": ratio(t["ours"], t["torch"]),
        "canonicalize_fraction": ratio(t["canonicalize"], t["torch"]),
        "encode_fraction": ratio(t["encode"], t["torch"]),
        "program_json_bytes": len(wire.encode(canon)),
    }


def main() -> int:
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--size", type=int, required=True, help="ops in the chain")
    a = p.parse_args()
    return main_guard(a.case, lambda: run(a.size, a.repeats))


if __name__ == "__main__":
    sys.exit(main())
