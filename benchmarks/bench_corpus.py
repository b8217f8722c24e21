"""Case: the real-model corpus (``tests/zoo_models.py``: transformers and timm models built from
small configs), cold and warm, against torch's pair.

    python benchmarks/bench_corpus.py --case corpus                        # every model, 3 repeats
    python benchmarks/bench_corpus.py --case corpus --models hf/llama,timm/resnet18 --repeats 1

For each model (exported once here):

* **cold**: the first save (into an ``io.BytesIO``) and the first load (from the path, the file in
  the page cache) of a fresh process, one process per side and repeat, sides alternating. The
  save child builds and exports the model itself (untimed), as a user saves after exporting; the
  load child imports torch and the model's library (its pytree classes are registered, as in the
  exporting process) and loads. ``import torch`` is outside the clock; pt2serde's own import and
  every lazy import of either side are inside it, with pt2serde's modules compiled to bytecode
  beforehand as an installed package's are (``_harness.installed_env``).
* **warm**: the same save and load in this process, back to back after one untimed call each,
  sides alternating (``_harness.time_interleaved``).

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
from pathlib import Path

from _harness import main_guard, ratio, run_child, time_interleaved, timed_call

HERE = Path(__file__).resolve().parent
SIDES = ("serde_save", "torch_save", "serde_load", "torch_load")


def _cases():
    from tests import zoo_models

    return zoo_models


def child(side: str, name: str, path: str) -> dict:

    zoo_models = _cases()  # imports transformers and timm: registers their pytree classes
    if side.endswith("_save"):
        ep = zoo_models.export_model(zoo_models.get(name))
        return timed_call(side, ep)
    return timed_call(side, path)




def _wall(num: list[float], den: list[float]) -> dict[str, float]:
    return {"min": round(min(num) / min(den), 3), "median": round(statistics.median(num) / statistics.median(den), 3)}


def _geomean(xs: list[float]) -> float:
    return round(math.exp(sum(math.log(x) for x in xs) / len(xs)), 3)


def run(names: list[str] | None, repeats: int, cold: bool) -> dict:
    import torch

    import serde

    zoo_models = _cases()
    names = names or [c.name for c in zoo_models.CASES]
    models: dict[str, dict] = {}
    failed: dict[str, str] = {}
    nodes = ops = 0
    with tempfile.TemporaryDirectory(prefix="pt2serde-bench-corpus-") as d:
        for name in names:
            try:
                ep = zoo_models.export_model(zoo_models.get(name))
                ours, theirs = os.path.join(d, "m.pt2s"), os.path.join(d, "m.pt2")
                serde.save(ep, ours)
                torch.export.save(ep, theirs)
                fns = {"serde_save": lambda ep=ep: serde.save(ep, io.BytesIO()),
                       "torch_save": lambda ep=ep: torch.export.save(ep, io.BytesIO()),
                       "serde_load": lambda p=ours: serde.load(p),
                       "torch_load": lambda p=theirs: torch.export.load(p)}
                for fn in fns.values():  # untimed first calls
                    fn()
                warm = time_interleaved(fns, repeats)
                rec = {"nodes": len(ep.graph.nodes),
                       "warm_save": ratio(warm["torch_save"], warm["serde_save"]),
                       "warm_load": ratio(warm["torch_load"], warm["serde_load"])}
                if cold:
                    secs: dict[str, list[float]] = {s: [] for s in SIDES}
                    for _ in range(repeats):
                        for side in SIDES:
                            path = theirs if side.startswith("torch") else ours
                            secs[side].append(run_child(__file__, ["--child", side, "--model", name, "--path", path])["seconds"])
                    rec["cold_save"] = _wall(secs["torch_save"], secs["serde_save"])
                    rec["cold_load"] = _wall(secs["torch_load"], secs["serde_load"])
            except Exception as e:  # one model's failure is reported, not the end of the corpus
                failed[name] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
                continue
            models[name] = rec
            nodes += rec["nodes"]
            ops += sum(n.op == "call_function" for n in ep.graph.nodes)
    if not models:
        raise RuntimeError(f"no model of the corpus was measured: {failed}")
    summary = {}
    for key in ("cold_save", "cold_load", "warm_save", "warm_load"):
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
    p.add_argument("--child", choices=SIDES, help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--path", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        print(json.dumps(child(a.child, a.model, a.path)))
        return 0
    names = a.models.split(",") if a.models else None
    return main_guard(a.case, lambda: run(names, a.repeats, not a.no_cold))


if __name__ == "__main__":
    sys.exit(main())
