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

- ``load_vs_floor``: ``serde.load`` time / the floor, the time torch takes to build the same
  ExportedProgram from the original's own graph without a file: a copy of its FX graph that keeps
  every node's ``meta``, with each ``meta["val"]`` rebuilt as a fresh value (same sizes, strides,
  dtype, device and symbolic expressions) in a fresh ShapeEnv, handed to ``ExportedProgram`` with
  the original's signature, state dict, constants, ranges and module call graph. That is the work
  no loader can skip; the rest of a load is reading, decoding and checking. The floor generates
  the graph module's Python code, as ``ExportedProgram`` does; ``serde.load`` defers it to first
  use (``load_codegen``), so ``load_call_vs_floor`` is the comparison where both pay it.
- ``load_vs_floor_shared``: the same against the floor of earlier releases, which keeps the
  original's own ``meta["val"]`` objects (no fake values built at all).
- ``load_call_speedup``: load and then the first call, ``load(path).module()(*args)``, torch's
  pair against ours. ``serde.load`` defers the Python code generation of its graph modules to
  first use (torch's load and the floor generate it while building the program, as
  ``ExportedProgram`` always does), so this pair is where that deferred work is paid.
- ``load_call_vs_floor``: the same pair against the floor's, ``build_floor(ep).module()(*args)``.
- ``save_mem_speedup``: both saves into an ``io.BytesIO``: each library's own work, with no disk.
  ``save_speedup`` saves to a file, where ``serde.save`` is durable (fsync of the file and of its
  directory) and ``torch.export.save`` is not.
- ``save_first_mem_speedup`` and ``load_first_speedup``: the save into memory and the load with
  every per-process memo of pt2serde emptied before each call (``serde.core.memo.forget_all``),
  as in the first save or load of a program in a process; the other metrics time back-to-back
  calls, of which all but the first find the memos filled.
- ``cold_save_speedup`` and ``cold_load_speedup``: the first save (into an ``io.BytesIO``) and the
  first load (from the path, the file in the page cache) of a *fresh process*, one process per side
  and repeat (``--cold-repeats``, default 3), torch's time over ours by the minimum and the median.
  The save child exports the program itself first (untimed), as a user saves after exporting; the
  load child imports torch (and for a zoo program the module that defines it, whose custom ops and
  classes the exporting process had registered) and loads. Nothing else is warmed up: lazy
  imports, operator registries and first-call caches are in the timed call, on both sides. The
  children are forks (``_harness.ForkServer``): a server process imports once and forks each load
  child, and a process that exported the program once forks each save child, each in the state a
  fresh process would be in after the same untimed work (``--cold-mode spawn``: a new interpreter
  per sample, as before; ``both`` adds the spawned figures as ``cold_save_spawn`` and
  ``cold_load_spawn``).
- ``save_durable_bound``: ``torch.export.save`` to a file over serde.save's durable write alone
  (temporary file, fsync, rename, fsync of the directory) of the same artifact's bytes, already in
  memory: the highest ``save_speedup`` any save that writes durably can reach on this disk.

    python benchmarks/bench_save_load.py --case floor_instructions --instructions --models mutation,sym_ops

With ``--instructions`` the load and the floor of each small program are counted in machine
instructions instead of timed: one child process under valgrind's callgrind calls each a few
times uncounted (the timed case's samples are many back-to-back calls) and once counted. A count
does not depend on what else the machine does or on cache misses, so the gap between the time
ratio and the instruction ratio is what cold caches cost a program this small. The child builds the floor from the program
``serde.load`` gives back: exporting under valgrind would take many minutes, and the floor of the
program ``torch.export.load`` gives back fails torch's own check for ``mutation`` (its verifier
finds fake tensors of two fake modes). The timed case checks that the loaded program computes
what the exported one does: the same graph, values, signature and weights.
"""

from __future__ import annotations

import argparse
import importlib
import io
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from _harness import (
    ZOO_PROGRAMS,
    ForkServer,
    base_parser,
    calibrate,
    callgrind_counts,
    export_chain,
    export_transformer,
    export_wide,
    export_zoo,
    graph_nodes,
    main_guard,
    ratio,
    run_child,
    serve_forks,
    time_interleaved,
    timed_call,
)

_MODELS = {
    # model -> (exporter of the measured program, size of the small warm-up program)
    "chain": (export_chain, 30),
    "transformer": (export_transformer, 1),
    "wide": (export_wide, 1),
}


def run(model: str, size: int, repeats: int, sample: float, cold_repeats: int = 3, cold_mode: str = "fork") -> dict:
    import torch

    import serde
    from serde.archive import write_atomic
    from serde.core.memo import forget_all

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

        # The ``_mem`` pair saves into memory: no disk on either side, so it compares the two
        # libraries' own work; the file pair adds serde.save's fsyncs, which torch does not do.
        # ``durable`` is serde.save's durable write alone, of the artifact's bytes already in
        # memory: no save that writes durably can take less, so torch / durable is the most any
        # such save can reach on this disk (``save_durable_bound``).
        serde.save(ep, ours)
        artifact = Path(ours).read_bytes()
        alone = os.path.join(d, "durable.pt2s")
        save_fns = {"serde": lambda: serde.save(ep, ours), "torch": lambda: torch.export.save(ep, theirs),
                    "serde_mem": lambda: serde.save(ep, io.BytesIO()),
                    "torch_mem": lambda: torch.export.save(ep, io.BytesIO()),
                    "durable": lambda: write_atomic(alone, [artifact])}
        inner = calibrate(save_fns["torch"], sample)
        save = time_interleaved(save_fns, repeats, inner)
        loaded: dict = {}
        load_fns = {"serde": lambda: loaded.__setitem__("serde", serde.load(ours)),
                    "serde_mmap": lambda: loaded.__setitem__("serde_mmap", serde.load(ours, mmap=True)),
                    "torch": lambda: loaded.__setitem__("torch", torch.export.load(theirs)),
                    "floor": lambda: loaded.__setitem__("floor", build_floor(ep)),
                    "floor_shared": lambda: loaded.__setitem__("floor_shared", build_floor(ep, fresh_values=False))}
        inner = calibrate(load_fns["torch"], sample)
        load = time_interleaved(load_fns, repeats, inner)
        # The first save and load of a program in a process: every per-process memo emptied
        # before each call (which costs microseconds), against torch's pair timed beside them.
        # Apart from the samples above, whose back-to-back calls would otherwise find the
        # memos empty after each of these; saves and loads apart, as above (a load of large
        # weights between saves changes what memory the next save gets).
        inner_save = calibrate(save_fns["torch_mem"], sample)
        first_save = time_interleaved({"serde_mem": lambda: (forget_all(), serde.save(ep, io.BytesIO())),
                                       "torch_mem": save_fns["torch_mem"]}, repeats, inner_save)
        first_load = time_interleaved({"serde": lambda: (forget_all(), serde.load(ours)),
                                       "torch": lambda: torch.export.load(theirs)}, repeats, inner)
        call = time_interleaved({"serde": lambda: serde.load(ours).module()(*args),
                                 "torch": lambda: torch.export.load(theirs).module()(*args),
                                 "floor": lambda: build_floor(ep).module()(*args)},
                                repeats, inner)
        sizes = {"serde_bytes": os.path.getsize(ours), "torch_bytes": os.path.getsize(theirs)}
        cold = cold_ratios(model, size, ours, theirs, cold_repeats, cold_mode) if cold_repeats else {}

    # When serde.load's graph module got its Python code: at load, or at first use (it has none yet).
    codegen = "load" if "_code" in vars(loaded["serde"].graph_module) else "first use"
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
        "save_mem_speedup": ratio(save["torch_mem"], save["serde_mem"]),
        "save_durable_bound": ratio(save["torch"], save["durable"]),
        "save_first_mem_speedup": ratio(first_save["torch_mem"], first_save["serde_mem"]),
        "load_speedup": ratio(load["torch"], load["serde"]),
        "load_mmap_speedup": ratio(load["torch"], load["serde_mmap"]),
        "load_first_speedup": ratio(first_load["torch"], first_load["serde"]),
        "load_vs_floor": ratio(load["serde"], load["floor"]),
        "load_vs_floor_shared": ratio(load["serde"], load["floor_shared"]),
        "load_call_speedup": ratio(call["torch"], call["serde"]),
        "load_call_vs_floor": ratio(call["serde"], call["floor"]),
        "load_codegen": codegen,
        **cold,
        **sizes,
        "size_ratio": round(sizes["serde_bytes"] / sizes["torch_bytes"], 3),
        "outputs_match": True,
    }


def build_floor(ep, fresh_values: bool = True):
    """The same ExportedProgram as ``ep``, built by torch from ``ep``'s own graph: no file, no decoding.

    Every node is copied with its ``meta``; its ``meta["val"]`` is rebuilt as a fresh value with
    the same sizes, strides, offset, dtype, device and symbolic expressions (the original's sympy
    expressions, not reparsed) in a fresh ShapeEnv and FakeTensorMode, as every loaded program
    needs its own (the original's belong to the original's fake mode). Subgraphs are copied the
    same way; weights, constants, signature, ranges and module call graph are ``ep``'s.

    With ``fresh_values=False`` the copy keeps the original's ``meta["val"]`` objects themselves
    (the floor of earlier releases, printed as ``load_vs_floor_shared``): less than any loader can
    do, since a loaded program cannot share the original's fake mode.
    """
    from torch.export import ExportedProgram

    values = _FreshValues(ep) if fresh_values else None
    root, graph = _copy_graph(ep.graph_module, values)
    return ExportedProgram(root=root, graph=graph, graph_signature=ep.graph_signature,
                           state_dict=ep.state_dict, range_constraints=ep.range_constraints,
                           module_call_graph=ep.module_call_graph, example_inputs=ep.example_inputs,
                           constants=ep.constants, verifiers=ep.verifiers)


class _FreshValues:
    """Fresh ``meta["val"]`` values in a new ShapeEnv, by the cheapest construction torch offers:
    each symbol registered once with its range and example value, each distinct expression made a
    SymInt once, each tensor built by the meta kernel and wrapped in a FakeTensor directly (no
    fake-mode dispatch)."""

    def __init__(self, ep) -> None:
        import torch
        from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
        from torch.fx.experimental.symbolic_shapes import ShapeEnv
        from torch.utils._sympy.numbers import int_oo
        from torch.utils._sympy.value_ranges import ValueRanges

        self.torch, self.FakeTensor = torch, FakeTensor
        self.old_env = next((v.fake_mode.shape_env for n in ep.graph.nodes
                             if isinstance(v := n.meta.get("val"), FakeTensor)), None)
        self.env = ShapeEnv(assume_static_by_default=True)
        self.mode = FakeTensorMode(allow_fallback_kernels=False, allow_non_fake_inputs=True, shape_env=self.env)
        self.unbounded = ValueRanges(-int_oo, int_oo)
        self.syms: dict = {}
        for sym, vr in ep.range_constraints.items():
            self.env.constrain_symbol_range(sym, compiler_min=vr.lower, compiler_max=vr.upper)
            self._symbol(sym)

    def _symbol(self, sym) -> None:
        if sym in self.syms:
            return
        self.syms[sym] = True
        old = self.old_env
        if old is not None and sym in old.backed_var_to_val:
            self.env.add_backed_var_to_val(sym, old.backed_var_to_val[sym])
        elif sym not in self.env.var_to_range:
            self.env.var_to_range[sym] = self.unbounded

    def sym(self, v, create):
        expr = v.node.expr
        for s in expr.free_symbols:
            self._symbol(s)
        key = (create, expr)
        out = self.syms.get(key)
        if out is None:
            out = self.syms[key] = getattr(self.env, create)(expr, hint=v.node.hint) \
                if create != "create_symboolnode" else self.env.create_symboolnode(expr)
        return out

    def val(self, v):
        torch = self.torch
        if isinstance(v, torch.Tensor):
            return self.tensor(v)
        if isinstance(v, torch.SymInt):
            return self.sym(v, "create_symintnode")
        if isinstance(v, torch.SymFloat):
            return self.sym(v, "create_symfloatnode")
        if isinstance(v, torch.SymBool):
            return self.sym(v, "create_symboolnode")
        if isinstance(v, (list, tuple)):
            return type(v)(self.val(x) for x in v)
        return v  # None, numbers, custom object references: plain data

    def tensor(self, t):
        torch = self.torch
        sizes = [self.val(s) for s in t.shape]
        strides = [self.val(s) for s in t.stride()]
        offset = self.val(t.storage_offset())
        with torch._C._DisableTorchDispatch():
            if isinstance(offset, int) and offset == 0:
                elem = torch.empty_strided(sizes, strides, dtype=t.dtype, device="meta")
            else:
                extent = offset + 1
                for size, stride in zip(sizes, strides, strict=True):
                    extent = extent + (size - 1) * stride
                elem = torch.empty(extent, dtype=t.dtype, device="meta").as_strided(sizes, strides, offset)
        return self.FakeTensor(self.mode, elem, t.device, requires_grad=t.requires_grad)


def _copy_graph(gm, values: _FreshValues | None):
    import torch

    root = torch.nn.Module()
    graph = torch.fx.Graph()
    graph._codegen = gm.graph._codegen
    val_map: dict = {}
    out = graph.graph_copy(gm.graph, val_map, return_output_node=True)
    for old, new in val_map.items():
        if new.name != old.name:
            new.name = old.name  # fx renames some names (builtins such as `input`); the program's name wins
        if values is not None and "val" in new.meta:
            new.meta["val"] = values.val(old.meta["val"])
    # graph_copy stops before the output node: add it back with its meta
    (value, node) = out
    new_out = graph.output(value)
    new_out.meta = dict(node.meta)
    for n in gm.graph.nodes:
        if n.op == "get_attr":
            attr = getattr(gm, n.target)
            if isinstance(attr, torch.fx.GraphModule):
                attr = torch.fx.GraphModule(*_copy_graph(attr, values))
            setattr(root, n.target, attr)
    return root, graph


def run_instructions(models: list[str]) -> dict:
    import serde

    per_model = {}
    with tempfile.TemporaryDirectory(prefix="pt2serde-bench-") as d:
        paths = []
        for model in models:
            ep, _ = export_zoo(model)
            paths.append(os.path.join(d, f"{model}.pt2s"))
            serde.save(ep, paths[-1])
            per_model[model] = graph_nodes(ep)
        counts = callgrind_counts(_FLOOR_CHILD, [str(Path(__file__).resolve().parent), *paths], 2 * len(models))
    for k, model in enumerate(models):
        serde_n, floor_n = counts[2 * k:2 * k + 2]
        per_model[model].update(load_instructions=serde_n, floor_instructions=floor_n,
                                load_vs_floor=round(serde_n / floor_n, 3))
    return {
        "bench": "floor_instructions",
        "nodes": sum(m["nodes"] for m in per_model.values()),
        "ops": sum(m["ops"] for m in per_model.values()),
        "programs": per_model,
    }


# Per program: the calls the timed case makes, a few times to warm up (imports, first-call caches
# and the per-process memos a repeated load hits), then once each through sys.call_tracing, counted.
_FLOOR_CHILD = """
import gc, importlib, sys
sys.path.insert(0, sys.argv[1])
import serde
from _harness import ZOO_PROGRAMS
from bench_save_load import build_floor
for module in {m for m, _ in ZOO_PROGRAMS.values()}:  # their custom operators, registered on import
    importlib.import_module(module)
for path in sys.argv[2:]:
    ep = serde.load(path)
    for _ in range(3):  # the steady state of the timed case's back-to-back calls
        serde.load(path), build_floor(ep)
    # a full collection first, as before each timed sample: otherwise whether a counted call
    # happens to run an older generation's collection depends on what ran before it
    gc.collect()
    sys.call_tracing(serde.load, (path,))
    gc.collect()
    sys.call_tracing(build_floor, (ep,))
"""


# ---------------------------------------------------------------- cold: fresh processes

COLD_SIDES = ("serde_save", "torch_save", "serde_load", "torch_load")


def cold_ratios(model: str, size: int, ours: str, theirs: str, repeats: int, mode: str = "fork") -> dict:
    """The first save and the first load of a fresh process, one process per side and repeat,
    sides alternating: torch's seconds over ours (min and median over the repeats)."""
    out: dict = {"cold_repeats": repeats, "cold_mode": mode}
    ways = {"fork": ("",), "spawn": ("",), "both": ("", "_spawn")}[mode]
    for suffix in ways:
        if suffix == "" and mode != "spawn":
            secs = _cold_forked(model, size, ours, theirs, repeats)
        else:
            answers: dict[str, list[dict]] = {side: [] for side in COLD_SIDES}
            for _ in range(repeats):
                for side in COLD_SIDES:
                    path = theirs if side.startswith("torch") else ours
                    answers[side].append(run_child(__file__, ["--cold-child", side, "--model", model, "--size", str(size),
                                                      "--path", path], case="cold"))
            secs = {**{s: [a["seconds"] for a in v] for s, v in answers.items()},
                    **{"detail:" + s: v for s, v in answers.items()}}
        out["cold_save_speedup" + suffix] = wall_ratio(secs["torch_save"], secs["serde_save"])
        out["cold_load_speedup" + suffix] = wall_ratio(secs["torch_load"], secs["serde_load"])
        if mode == "both":  # medians per side and way: wall seconds, CPU seconds and page faults inside the call
            out.setdefault("cold_seconds", {}).update(
                {side + suffix: {k: round(statistics.median(a[k] for a in secs["detail:" + side]), 4)
                                 for k in ("seconds", "cpu", "minor_faults")} for side in COLD_SIDES})
    return out


def _cold_forked(model: str, size: int, ours: str, theirs: str, repeats: int) -> dict[str, list]:
    with ForkServer(__file__, ["--model", model, "--size", str(size)]) as server:
        saves = server.calls([{"side": s} for _ in range(repeats) for s in ("serde_save", "torch_save")],
                             prepare=[model, size])
        loads = server.calls([{"side": s, "subject": ours if s == "serde_load" else theirs}
                              for _ in range(repeats) for s in ("serde_load", "torch_load")])
    out: dict[str, list] = {}
    for side, got in (("serde_save", saves[0::2]), ("torch_save", saves[1::2]),
                      ("serde_load", loads[0::2]), ("torch_load", loads[1::2])):
        out[side] = [a["seconds"] for a in got]
        out["detail:" + side] = got
    return out


def _export(spec: list) -> object:
    """The program a save child saves, exported in this process (untimed)."""
    model, size = spec
    return export_zoo(model)[0] if model in ZOO_PROGRAMS else _MODELS[model][0](size)[0]


def _load_setup(model: str) -> None:
    """What a load child imports before its clock: for a zoo program, the module that defines it
    (its custom ops and classes registered, as the exporting process had them)."""
    if model in ZOO_PROGRAMS:
        importlib.import_module(ZOO_PROGRAMS[model][0])


def wall_ratio(num: list[float], den: list[float]) -> dict[str, float]:
    return {"min": round(min(num) / min(den), 3), "median": round(statistics.median(num) / statistics.median(den), 3)}




def cold_child(side: str, model: str, size: int, path: str) -> dict:
    """Seconds of this fresh process's first save (into memory) or first load of the program.

    ``import torch`` is paid before the clock (both sides need it); pt2serde's own import (its API
    module is imported on first use of ``serde.save``/``serde.load``) is inside the timed call, as is
    whatever ``torch.export.save``/``load`` import on their first call."""
    if side.endswith("_save"):
        return timed_call(side, _export([model, size]))
    _load_setup(model)
    return timed_call(side, path)


def _saved(save, ep, path: str) -> str:
    save(ep, path)
    return path


def main() -> int:
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--model", choices=sorted([*_MODELS, *ZOO_PROGRAMS]))
    p.add_argument("--size", type=int, default=0, help="ops (chain), blocks (transformer), layers (wide)")
    p.add_argument("--instructions", action="store_true",
                   help="count the instructions of the load and the floor under valgrind (ignores --repeats)")
    p.add_argument("--models", help="with --instructions: comma-separated small programs")
    p.add_argument("--sample-seconds", type=float, default=0.05,
                   help="back-to-back calls per sample: as many as torch's side takes this long for")
    p.add_argument("--cold-repeats", type=int, default=3,
                   help="fresh processes per side for the first save and load (0: skip them)")
    p.add_argument("--cold-mode", choices=("fork", "spawn", "both"), default="fork",
                   help="cold samples as forks of a process that did the untimed work once (default), as new "
                        "interpreters, or both (the spawned figures beside the forked ones)")
    p.add_argument("--cold-child", choices=COLD_SIDES, help=argparse.SUPPRESS)
    p.add_argument("--fork-server", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--path", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.fork_server:
        return serve_forks(lambda: _load_setup(a.model), _export, timed_call)
    if a.cold_child:
        print(json.dumps(cold_child(a.cold_child, a.model, a.size, a.path)))
        return 0
    if a.instructions:
        if not a.models:
            p.error("--instructions needs --models (comma-separated small programs)")
        models = a.models.split(",")
        unknown = [m for m in models if m not in ZOO_PROGRAMS]
        if unknown:
            p.error(f"--models: {unknown} are not small programs; choose among {sorted(ZOO_PROGRAMS)}")
        return main_guard(a.case, lambda: run_instructions(models))
    if a.model is None:
        p.error("--model is required (or --instructions --models ...)")
    return main_guard(a.case, lambda: run(a.model, a.size, a.repeats, a.sample_seconds, a.cold_repeats,
                                          a.cold_mode))


if __name__ == "__main__":
    sys.exit(main())
