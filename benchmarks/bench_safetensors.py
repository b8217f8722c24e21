"""Safetensors weights and structure-only loads.

    python benchmarks/bench_safetensors.py --layers 16 --width 4096     # 1 GiB of float32 weights

* ``structure``: ``serde.load(path, weights=None)`` of the big artifact and of the same graph
  with 8x8 weights, in a fresh process each (modules imported, ``serde.api`` included, before
  timing): the first load, a second one, and the resident memory the first adds (VmRSS after
  minus before).
* ``external``: ``serde.save`` and ``serde.load`` with ``weights="model.safetensors"`` against
  the embedded artifact, warm (one process, files in the page cache), as ratios external/embedded.

Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

_CHILD = r"""
import json, os, sys, time
import torch, serde, serde.api
from serde.api import load

def rss():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmRSS:"))

before = rss()
t = time.perf_counter()
ep = load(sys.argv[1], weights=None)
took = time.perf_counter() - t
added = rss() - before
del ep
t = time.perf_counter()
ep = load(sys.argv[1], weights=None)
again = time.perf_counter() - t
print(json.dumps({"seconds": took, "again": again, "rss_added": added}))
"""


def _model(layers: int, width: int):
    import torch

    torch.manual_seed(0)
    m = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])
    return torch.export.export(m, (torch.randn(2, width),))


def _fresh(path: str, repeat: int) -> dict:
    runs = []
    for _ in range(repeat):
        out = subprocess.run([sys.executable, "-c", _CHILD, path], capture_output=True, text=True, check=True)
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return {"first_seconds_median": statistics.median(r["seconds"] for r in runs),
            "second_seconds_median": statistics.median(r["again"] for r in runs),
            "first_rss_added_mb_max": max(r["rss_added"] for r in runs) / 2**20}


def _best(fn, n: int) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--width", type=int, default=4096)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    import serde

    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as d:
        big = _model(args.layers, args.width)
        tiny = _model(args.layers, 8)  # the same graph with 8x8 weights
        emb, ext, small = (os.path.join(d, n) for n in ("emb.pt2s", "model.pt2s", "tiny.pt2s"))
        serde.save(tiny, small)
        save_emb = _best(lambda: serde.save(big, emb), 2)
        save_ext = _best(lambda: serde.save(big, ext, weights="model.safetensors"), 2)
        load_emb = _best(lambda: serde.load(emb), args.repeat)
        load_ext = _best(lambda: serde.load(ext), args.repeat)
        nbytes = sum(t.numel() * t.element_size() for t in big.state_dict.values())
        print(json.dumps({
            "weights_mb": nbytes / 2**20,
            "structure_big": _fresh(ext, args.repeat),
            "structure_big_embedded": _fresh(emb, args.repeat),
            "structure_tiny": _fresh(small, args.repeat),
            "save_external_vs_embedded": save_ext / save_emb,
            "load_external_vs_embedded": load_ext / load_emb,
        }))


if __name__ == "__main__":
    main()
