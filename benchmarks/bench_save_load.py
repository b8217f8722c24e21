"""Case: ``serde.save``/``serde.load`` against ``torch.export.save``/``torch.export.load``.

    python benchmarks/bench_save_load.py --case chain_5000 --model chain --size 5000
    python benchmarks/bench_save_load.py --case transformer --model transformer --size 4
    python benchmarks/bench_save_load.py --case mlp --model mlp

``--size`` is the number of ops for ``chain``, the number of blocks for ``transformer`` and the
number of 2048x2048 Linear layers (16 MB each) for ``wide``; the small zoo programs (``mlp``,
``cond``, ``custom_op``, ``mutation``, ``sym_ops``; 8 to 18 nodes) have no size. A sample of a
small program is several back-to-back calls, the same number on both sides.

Prints one JSON line: speedups (torch time / serde time, so > 1 means pt2serde is faster),
artifact sizes in bytes, whether every loaded program reproduces the original's outputs, and two
measures of the load itself:

- ``load_vs_floor``: ``serde.load`` time / the floor, the time to build the same ExportedProgram
  from the original's own graph without a file: a copy of its FX graph that keeps every node's
  ``meta`` (so the very same ``meta["val"]`` fake tensors), handed to ``ExportedProgram`` with
  the original's signature, state dict, constants, ranges and module call graph. That is the
  work no loader can skip; the rest of a load is reading, decoding, checking and building
  fake tensors.
- ``load_call_speedup``: load and then the first call, ``load(path).module()(*args)``, torch's
  pair against ours. A loader that defers work (e.g. Python code generation) to first use pays
  it here.
"""

from __future__ import annotations

import os
import sys
import tempfile

from _harness import (
    ZOO_PROGRAMS,
    base_parser,
    calibrate,
    export_chain,
    export_transformer,
    export_wide,
    export_zoo,
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

    if model in ZOO_PROGRAMS:
        ep, args = export_zoo(model)
        small = ep  # small already: the warm-up is the program itself
    else:
        export, warm_size = _MODELS[model]
        ep, args = export(size)
        small, _ = export(warm_size)
    with tempfile.TemporaryDirectory(prefix="pt2serde-bench-") as d:
        ours, theirs = os.path.join(d, "model.pt2s"), os.path.join(d, "model.pt2")
        # Warm both sides up on a small program of the same family: imports, op registries and
        # first-call caches are paid before the clock starts, without a full extra run.
        serde.load(_saved(serde.save, small, os.path.join(d, "warm.pt2s")))
        torch.export.load(_saved(torch.export.save, small, os.path.join(d, "warm.pt2")))
        build_floor(small)

        save_fns = {"serde": lambda: serde.save(ep, ours), "torch": lambda: torch.export.save(ep, theirs)}
        inner = calibrate(save_fns["torch"])
        save = time_interleaved(save_fns, repeats, inner)
        loaded: dict = {}
        load_fns = {"serde": lambda: loaded.__setitem__("serde", serde.load(ours)),
                    "serde_mmap": lambda: loaded.__setitem__("serde_mmap", serde.load(ours, mmap=True)),
                    "torch": lambda: loaded.__setitem__("torch", torch.export.load(theirs)),
                    "floor": lambda: loaded.__setitem__("floor", build_floor(ep))}
        inner = calibrate(load_fns["torch"])
        load = time_interleaved(load_fns, repeats, inner)
        call = time_interleaved({"serde": lambda: serde.load(ours).module()(*args),
                                 "torch": lambda: torch.export.load(theirs).module()(*args)},
                                repeats, inner)
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
        "load_vs_floor": ratio(load["serde"], load["floor"]),
        "load_call_speedup": ratio(call["torch"], call["serde"]),
        **sizes,
        "size_ratio": round(sizes["serde_bytes"] / sizes["torch_bytes"], 3),
        "outputs_match": True,
    }


def build_floor(ep):
    """The same ExportedProgram as ``ep``, built from ``ep``'s own graph: no file, no decoding.

    Every node is copied with its ``meta`` (the same ``meta["val"]`` objects); subgraphs are
    copied the same way; weights, constants, signature, ranges and module call graph are ``ep``'s.
    """
    from torch.export import ExportedProgram

    root, graph = _copy_graph(ep.graph_module)
    return ExportedProgram(root=root, graph=graph, graph_signature=ep.graph_signature,
                           state_dict=ep.state_dict, range_constraints=ep.range_constraints,
                           module_call_graph=ep.module_call_graph, example_inputs=ep.example_inputs,
                           constants=ep.constants, verifiers=ep.verifiers)


def _copy_graph(gm):
    import torch

    root = torch.nn.Module()
    graph = torch.fx.Graph()
    graph._codegen = gm.graph._codegen
    val_map: dict = {}
    out = graph.graph_copy(gm.graph, val_map, return_output_node=True)
    for old, new in val_map.items():
        if new.name != old.name:
            new.name = old.name  # fx renames some names (builtins such as `input`); the program's name wins
    # graph_copy stops before the output node: add it back with its meta
    (value, node) = out
    new_out = graph.output(value)
    new_out.meta = dict(node.meta)
    for n in gm.graph.nodes:
        if n.op == "get_attr":
            attr = getattr(gm, n.target)
            if isinstance(attr, torch.fx.GraphModule):
                attr = torch.fx.GraphModule(*_copy_graph(attr))
            setattr(root, n.target, attr)
    return root, graph


def _saved(save, ep, path: str) -> str:
    save(ep, path)
    return path


def main() -> int:
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--model", choices=sorted([*_MODELS, *ZOO_PROGRAMS]), required=True)
    p.add_argument("--size", type=int, default=0, help="ops (chain), blocks (transformer), layers (wide)")
    a = p.parse_args()
    return main_guard(a.case, lambda: run(a.model, a.size, a.repeats))


if __name__ == "__main__":
    sys.exit(main())
