"""Case: ``serde.save``/``serde.load`` against ``torch.export.save``/``torch.export.load``.

    python benchmarks/bench_save_load.py --case chain_5000 --model chain --size 5000
    python benchmarks/bench_save_load.py --case transformer --model transformer --size 4

``--size`` is the number of ops for ``chain``, the number of blocks for ``transformer`` and the
number of 2048x2048 Linear layers (16 MB each) for ``wide``.
Prints one JSON line: speedups (torch time / serde time, so > 1 means pt2serde is faster),
artifact sizes in bytes, and whether both loaded programs reproduce the original's outputs.
"""

from __future__ import annotations

import os
import sys
import tempfile

from _harness import (
    base_parser,
    export_chain,
    export_transformer,
    export_wide,
    graph_nodes,
    main_guard,
    ratio,
    time_interleaved,
)

_MODELS = {
    # model -> (exporter of the measured program, size of the small warm-up program)
    "chain": (export_chain, 30),
    "transformer": (export_transformer, 1),
    "wide": (export_wide, 1),
}


def run(model: str, size: int, repeats: int) -> dict:
    import torch

    import serde

    export, warm_size = _MODELS[model]
    ep, args = export(size)
    small, _ = export(warm_size)
    with tempfile.TemporaryDirectory(prefix="pt2serde-bench-") as d:
        ours, theirs = os.path.join(d, "model.pt2s"), os.path.join(d, "model.pt2")
        # Warm both sides up on a small program of the same family: imports, op registries and
        # first-call caches are paid before the clock starts, without a full extra run.
        serde.load(_saved(serde.save, small, os.path.join(d, "warm.pt2s")))
        torch.export.load(_saved(torch.export.save, small, os.path.join(d, "warm.pt2")))

        save = time_interleaved({"serde": lambda: serde.save(ep, ours),
                                 "torch": lambda: torch.export.save(ep, theirs)}, repeats)
        loaded: dict = {}
        load = time_interleaved({"serde": lambda: loaded.__setitem__("serde", serde.load(ours)),
                                 "serde_mmap": lambda: loaded.__setitem__("serde_mmap", serde.load(ours, mmap=True)),
                                 "torch": lambda: loaded.__setitem__("torch", torch.export.load(theirs))},
                                repeats)
        sizes = {"serde_bytes": os.path.getsize(ours), "torch_bytes": os.path.getsize(theirs)}

    expected = ep.module()(*args)
    for side, ep2 in loaded.items():
        # A benchmark of a broken load would be meaningless: check before reporting.
        torch.testing.assert_close(ep2.module()(*args), expected, rtol=0, atol=0,
                                   msg=lambda m, side=side: f"{side} round trip changed the outputs: {m}")
    return {
        "bench": "save_load",
        "model": model,
        "size": size,
        **graph_nodes(ep),
        "repeats": repeats,
        "save_speedup": ratio(save["torch"], save["serde"]),
        "load_speedup": ratio(load["torch"], load["serde"]),
        "load_mmap_speedup": ratio(load["torch"], load["serde_mmap"]),
        **sizes,
        "size_ratio": round(sizes["serde_bytes"] / sizes["torch_bytes"], 3),
        "outputs_match": True,
    }


def _saved(save, ep, path: str) -> str:
    save(ep, path)
    return path


def main() -> int:
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--model", choices=sorted(_MODELS), required=True)
    p.add_argument("--size", type=int, required=True, help="ops (chain) or blocks (transformer)")
    a = p.parse_args()
    return main_guard(a.case, lambda: run(a.model, a.size, a.repeats))


if __name__ == "__main__":
    sys.exit(main())
