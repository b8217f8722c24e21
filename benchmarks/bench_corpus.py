"""Case: the real-model corpus (``tests/zoo_models.py``: transformers and timm models built from
small configs), cold and warm, against torch's pair.

    python benchmarks/bench_corpus.py --case corpus                        # every model, 3 repeats
    python benchmarks/bench_corpus.py --case corpus --models hf/llama,timm/resnet18 --repeats 1

For each model:

* **cold**: the first save (into an ``io.BytesIO``) and the first load (from the path, the file in
  the page cache) of a fresh process, one process per side and repeat, sides alternating. A save
  process has imported torch, transformers and timm and built and exported the model itself
  (untimed), as a user saves after exporting; a load process has imported torch, transformers and
  timm and the modules that define the program's input and output classes (a load needs their pytree
  registrations, as the exporting process had them: transformers defines its output dataclasses in
  modules its package imports lazily) and nothing of pt2serde.
  ``import torch`` is outside the clock; every lazy import of either side is inside it, with
  pt2serde's modules compiled to bytecode beforehand as an installed package's are
  (``_harness.installed_env``). (The corpus's models are defined with ``serde.testing.zoo``'s
  ``Case``, so a save process has imported that and what it imports before its clock starts.)

  The processes are forks (``_harness.ForkServer``): one server process imports the libraries
  once; for each model it forks a process that exports the model and then forks one child per
  timed save, and it forks one child per timed load itself. Each child is in the state a fresh
  process would be in after the same untimed work, without paying that work again (the model
  libraries' import and the export took most of an hour when every sample was a new interpreter).
  Before its clock starts, each child copies the pages its call will write that it still shares
  with its parent (found by one untimed probe child per side): a fresh process's pages are its
  own, and a copy-on-write fault inside the clock (tens of microseconds a page on a virtual
  machine) would otherwise add tens of milliseconds to a first save of a few.
  ``--cold-mode spawn`` runs every sample as a new interpreter instead, ``both`` runs both and
  reports the spawned figures beside the forked ones (``cold_save_spawn``, ``cold_load_spawn``),
  with the median seconds of every side (``cold_seconds``, for the reader).
* **warm**: the same save and load in one process, back to back after one untimed call each,
  sides alternating (``_harness.time_interleaved``): the process that exported the model, once its
  cold save children are done (with ``--cold-mode spawn`` or ``--no-cold``, the case's own process,
  which exports each model first).

Prints one JSON line: per model the four speedups (torch's time / ours, min and median over the
repeats), and over the models their geometric mean and minimum. A model whose export, save or load
fails on either side is listed under ``failed`` with the first line of its error and left out of
the summary.
"""

from __future__ import annotations

import io
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _harness import ForkServer, main_guard, ratio, run_child, serve_forks, time_interleaved, timed_call

HERE = Path(__file__).resolve().parent
SIDES = ("serde_save", "torch_save", "serde_load", "torch_load")


def _cases():
    from tests import zoo_models

    return zoo_models


def _libraries() -> None:
    """What a load process imports before its clock: torch and the model libraries, nothing of pt2serde."""
    import tests.zoo_model_libs  # noqa: F401


def _pytree_modules(ep) -> list[str]:
    """The modules defining the classes of ``ep``'s input and output trees, beyond the builtins and
    torch: a process that loads ``ep`` imports them first (``CLIPVisionModelOutput`` is registered
    only once ``transformers.models.clip.modeling_clip`` is imported)."""
    out: set[str] = set()
    todo = [ep.call_spec.in_spec, ep.call_spec.out_spec]
    while todo:
        spec = todo.pop()
        if spec is None:
            continue
        mod = getattr(spec.type, "__module__", None) or "builtins"
        if mod.split(".")[0] not in ("builtins", "collections", "torch", "typing"):
            out.add(mod)
        todo.extend(spec.children_specs)
    return sorted(out)


def _import(modules: list[str]) -> None:
    import importlib

    for m in modules:
        importlib.import_module(m)


def _export(name: str):
    zoo_models = _cases()  # imports transformers and timm: registers their pytree classes
    return zoo_models.export_model(zoo_models.get(name))


def child(side: str, name: str, path: str, modules: list[str]) -> dict:
    """A spawned cold sample (``--cold-mode spawn``): this fresh process's first save or load."""
    if side.endswith("_save"):
        return timed_call(side, _export(name))
    _libraries()
    _import(modules)
    return timed_call(side, path)


def _call(side: str, subject) -> dict:
    """A forked cold sample: a save of the program ``subject``, or a load of ``subject["path"]``
    after importing ``subject["modules"]`` (untimed)."""
    if isinstance(subject, dict):
        _import(subject["modules"])
        subject = subject["path"]
    return timed_call(side, subject)


def warm(ep, d: str, repeats: int) -> dict:
    """The warm figures of ``ep`` (save into memory, load from ``d``'s files, in this process, back to
    back after one untimed call each), with its size; leaves ``d/m.pt2s`` and ``d/m.pt2`` behind."""
    import torch

    import serde

    ours, theirs = os.path.join(d, "m.pt2s"), os.path.join(d, "m.pt2")
    serde.save(ep, ours)
    torch.export.save(ep, theirs)
    fns = {"serde_save": lambda: serde.save(ep, io.BytesIO()),
           "torch_save": lambda: torch.export.save(ep, io.BytesIO()),
           "serde_load": lambda: serde.load(ours),
           "torch_load": lambda: torch.export.load(theirs)}
    for fn in fns.values():  # untimed first calls
        fn()
    t = time_interleaved(fns, repeats)
    return {"nodes": len(ep.graph.nodes), "ops": sum(n.op == "call_function" for n in ep.graph.nodes),
            "modules": _pytree_modules(ep), "warm_save": ratio(t["torch_save"], t["serde_save"]),
            "warm_load": ratio(t["torch_load"], t["serde_load"])}


def _finish(ep, spec: dict) -> dict:
    return warm(ep, spec["dir"], spec["repeats"])


def serve() -> int:
    """The fork server of the cold samples (``_harness.ForkServer``)."""
    return serve_forks(_libraries, _export, _call, _finish)


def forked(server: ForkServer, name: str, d: str, repeats: int) -> tuple[dict, dict[str, list[float]]]:
    """The warm figures and the seconds of each cold sample of ``name``, forked. The process that
    exports the model forks one child per cold save and then measures the warm figures (its first
    save is then behind it) and writes the files the cold loads read; the server forks the loads.
    Sides alternate within each repeat."""
    out = server.request([{"side": s} for _ in range(repeats) for s in ("serde_save", "torch_save")],
                         prepare=name, finish={"dir": d, "repeats": repeats})
    saves, rec = out["answers"], out["finish"]
    ours, theirs = os.path.join(d, "m.pt2s"), os.path.join(d, "m.pt2")
    loads = server.calls([{"side": s, "subject": {"path": ours if s == "serde_load" else theirs,
                                                  "modules": rec["modules"]}}
                          for _ in range(repeats) for s in ("serde_load", "torch_load")])
    return rec, _by_side(saves, loads)


def _by_side(saves: list[dict], loads: list[dict]) -> dict[str, list]:
    """Seconds per side from the answers of alternating saves and loads (serde first); under
    ``detail:SIDE`` every answer (seconds, CPU seconds, page faults), for ``--cold-mode both``."""
    out: dict[str, list] = {}
    for side, answers in (("serde_save", saves[0::2]), ("torch_save", saves[1::2]),
                          ("serde_load", loads[0::2]), ("torch_load", loads[1::2])):
        out[side] = [a["seconds"] for a in answers]
        out["detail:" + side] = answers
    return out


def cold_spawned(name: str, ours: str, theirs: str, repeats: int, modules: list[str]) -> dict[str, list[float]]:
    """Seconds of each cold sample, one new interpreter per side and repeat, sides alternating."""
    answers: dict[str, list[dict]] = {s: [] for s in SIDES}
    for _ in range(repeats):
        for side in SIDES:
            path = theirs if side.startswith("torch") else ours
            answers[side].append(run_child(__file__, ["--child", side, "--model", name, "--path", path,
                                                      "--modules", ",".join(modules)]))
    return {**{s: [a["seconds"] for a in v] for s, v in answers.items()},
            **{"detail:" + s: v for s, v in answers.items()}}


def _wall(num: list[float], den: list[float]) -> dict[str, float]:
    return {"min": round(min(num) / min(den), 3), "median": round(statistics.median(num) / statistics.median(den), 3)}


def _geomean(xs: list[float]) -> float:
    return round(math.exp(sum(math.log(x) for x in xs) / len(xs)), 3)


def run(names: list[str] | None, repeats: int, cold: bool, mode: str = "fork") -> dict:
    zoo_models = _cases()
    names = names or [c.name for c in zoo_models.CASES]
    models: dict[str, dict] = {}
    failed: dict[str, str] = {}
    nodes = ops = 0
    server = ForkServer(__file__) if cold and mode in ("fork", "both") else None
    with tempfile.TemporaryDirectory(prefix="pt2serde-bench-corpus-") as d:
        for name in names:
            try:
                ways: dict[str, dict[str, list]] = {}
                t0 = time.monotonic()
                if server is not None:
                    rec, ways[""] = forked(server, name, d, repeats)
                else:  # warm figures in this process
                    rec = warm(_export(name), d, repeats)
                t1 = time.monotonic()
                if cold and mode in ("spawn", "both"):
                    ours, theirs = os.path.join(d, "m.pt2s"), os.path.join(d, "m.pt2")
                    ways["_spawn" if server else ""] = cold_spawned(name, ours, theirs, repeats, rec["modules"])
                # wall seconds this model took, forked and spawned (for planning a run, not a result)
                rec["wall_seconds"] = {"forked" if server else "warm": round(t1 - t0, 1),
                                       **({"spawned": round(time.monotonic() - t1, 1)} if mode != "fork" else {})}
                for suffix, secs in ways.items():
                    rec["cold_save" + suffix] = _wall(secs["torch_save"], secs["serde_save"])
                    rec["cold_load" + suffix] = _wall(secs["torch_load"], secs["serde_load"])
                if mode == "both" and cold:
                    # medians per side and way: wall seconds, CPU seconds and page faults inside the call
                    rec["cold_seconds"] = {
                        f"{side}{suffix}": {k: round(statistics.median(a[k] for a in secs["detail:" + side]), 4)
                                            for k in ("seconds", "cpu", "minor_faults")}
                        for suffix, secs in ways.items() for side in SIDES}
            except Exception as e:  # one model's failure is reported, not the end of the corpus
                failed[name] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
                continue
            nodes += rec["nodes"]
            ops += rec.pop("ops")
            models[name] = rec
    if server is not None:
        server.close()
    if not models:
        raise RuntimeError(f"no model of the corpus was measured: {failed}")
    summary = {}
    for key in ("cold_save", "cold_load", "warm_save", "warm_load", "cold_save_spawn", "cold_load_spawn"):
        vals = [m[key]["median"] for m in models.values() if key in m]
        if vals:
            worst = min(models, key=lambda n: models[n][key]["median"] if key in models[n] else math.inf)
            summary[key] = {"geomean": _geomean(vals), "min": min(vals), "median": round(statistics.median(vals), 3),
                            "worst": worst}
    return {"bench": "corpus", "nodes": nodes, "ops": ops, "repeats": repeats, "models": models,
            "failed": failed, "summary": summary}


def main() -> int:
    import argparse

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", required=True)
    p.add_argument("--repeats", type=int, default=3, help="cold processes per side and warm samples (default 3)")
    p.add_argument("--models", help="comma-separated model names (default: every model of tests/zoo_models.py)")
    p.add_argument("--no-cold", action="store_true", help="warm figures only")
    p.add_argument("--cold-mode", choices=("fork", "spawn", "both"), default="fork",
                   help="cold samples as forks of a process that did the untimed work once (default), as new "
                        "interpreters, or both (the spawned figures beside the forked ones)")
    p.add_argument("--child", choices=SIDES, help=argparse.SUPPRESS)
    p.add_argument("--fork-server", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--path", help=argparse.SUPPRESS)
    p.add_argument("--modules", default="", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.fork_server:
        return serve()
    if a.child:
        print(json.dumps(child(a.child, a.model, a.path, [m for m in a.modules.split(",") if m])))
        return 0
    names = a.models.split(",") if a.models else None
    return main_guard(a.case, lambda: run(names, a.repeats, not a.no_cold, a.cold_mode))


if __name__ == "__main__":
    sys.exit(main())
