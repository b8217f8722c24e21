"""Where a fresh process's first save or load goes, ours beside torch's (not part of ``make bench``).

    .venv/bin/python benchmarks/profile_cold.py --model chain_5000
    .venv/bin/python benchmarks/profile_cold.py --model whisper_encoder --side save --top 25

``--model`` is ``chain_5000``, ``transformer`` or a real-model corpus name (``tests/zoo_models.py``).
Each side's call is profiled with cProfile in a process of its own, set up as the cold benchmarks
set theirs up (``_harness.installed_env``: bytecode compiled as an installed copy has it; torch
and, for a load, the model's libraries imported before the clock). Printed per side: the call's
wall time under the profiler, the share of it spent importing modules on first use, the share of
each stage of our pipeline, and the functions with the most cumulative time. cProfile slows
Python-heavy code more than C calls, so the shares, not the seconds, are the finding.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
import tempfile
import time
from pathlib import Path

from _harness import export_chain, export_transformer, run_child

# Our stages: (function, file suffix) whose cumulative time is worth its own line.
_STAGES = [
    ("read_archive", "serde/archive/reader.py"), ("deserialize_weights", "serde/bridge/weights.py"),
    ("deserialize_program", "serde/bridge/program.py"), ("check_program", "serde/bridge/checks/__init__.py"),
    ("deserialize_guards", "serde/bridge/program.py"), ("serialize_program", "serde/bridge/program.py"),
    ("serialize_weights", "serde/bridge/weights.py"), ("canonicalize", "canonical/canonicalize.py"),
    ("write_archive", "serde/archive/writer.py"), ("recompile", "torch/fx/graph_module.py"),
]


def _export(model: str):
    if model == "chain_5000":
        return export_chain(5000)[0]
    if model == "transformer":
        return export_transformer(4)[0]
    from tests import zoo_models

    return zoo_models.export_model(zoo_models.get(model))


def _prepare(model: str) -> None:
    """What a loading process has imported before its clock: the model's libraries."""
    if model not in ("chain_5000", "transformer"):
        import tests.zoo_model_libs  # noqa: F401
        from tests import zoo_models  # noqa: F401 -- registers the libraries' pytree classes


def child(side: str, who: str, model: str, path: str, top: int) -> dict:
    import torch

    subject = _export(model) if side == "save" else path
    if side == "load":
        _prepare(model)
    if who == "serde":
        call = (lambda: __import__("serde").save(subject, io.BytesIO())) if side == "save" else \
            (lambda: __import__("serde").load(subject))
    else:
        call = (lambda: torch.export.save(subject, io.BytesIO())) if side == "save" else \
            (lambda: torch.export.load(subject))
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.runcall(call)
    seconds = time.perf_counter() - t0
    stats = pstats.Stats(prof, stream=io.StringIO())
    raw = stats.stats  # type: ignore[attr-defined]  # {(file, line, fn): (cc, nc, tt, ct, callers)}
    total = stats.total_tt
    # importlib's _find_and_load counts once per outermost import (cProfile folds recursion)
    imports = sum(ct for (file, _, name), (_, _, _, ct, _) in raw.items()
                  if name == "_find_and_load" and "importlib" in file)
    stages = {name: 100 * ct / total for (file, _, name), (_, _, _, ct, _) in raw.items()
              for fn, suffix in _STAGES if name == fn and file.endswith(suffix)}
    ranked = sorted(raw.items(), key=lambda kv: kv[1][3], reverse=True)[:top]
    return {"seconds": seconds, "imports_pct": 100 * imports / total, "stages": stages,
            "top": [[round(100 * ct / total, 1), round(100 * tt / total, 1), _short(file), line, name]
                    for (file, line, name), (_, _, tt, ct, _) in ranked]}


def _short(file: str) -> str:
    for mark in ("site-packages/", "/src/", "/benchmarks/"):
        if mark in file:
            return file.split(mark, 1)[1]
    return file


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="chain_5000")
    p.add_argument("--side", choices=("load", "save"), default="load")
    p.add_argument("--top", type=int, default=20)
    p.add_argument("--case", default=None)
    p.add_argument("--who", default="serde")
    p.add_argument("--path", default="")
    a = p.parse_args()
    if a.case == "child":
        print(json.dumps(child(a.side, a.who, a.model, a.path, a.top)))
        return 0
    with tempfile.TemporaryDirectory() as d:
        paths = {"serde": str(Path(d) / "m.pt2s"), "torch": str(Path(d) / "m.pt2")}
        if a.side == "load":
            import torch

            import serde

            ep = _export(a.model)
            serde.save(ep, paths["serde"])
            torch.export.save(ep, paths["torch"])
        out = {who: run_child(__file__, ["--side", a.side, "--who", who, "--model", a.model, "--path", paths[who],
                                         "--top", str(a.top)]) for who in ("serde", "torch")}
    for who, r in out.items():
        print(f"== {who} {a.side} of {a.model}, first call of a fresh process: {r['seconds']:.3f} s under cProfile; "
              f"{r['imports_pct']:.1f}% importing modules on first use")
        for name, pct in sorted(r["stages"].items(), key=lambda kv: -kv[1]):
            print(f"   stage {name:22} {pct:5.1f}% cumulative")
        print("   cum%   own%  function")
        for cum, own, file, line, name in r["top"]:
            print(f"   {cum:5.1f}  {own:5.1f}  {file}:{line}({name})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
