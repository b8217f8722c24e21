"""Cases: large weights. Load speed, ``show``/``diff`` time, and peak memory of a load.

    python benchmarks/bench_weights.py --case weights_134mb --goal load --layers 8
    python benchmarks/bench_weights.py --case weights_1gb_tools --goal tools --layers 16 --width 4096
    python benchmarks/bench_weights.py --case weights_1gb_memory --goal memory --layers 16 --width 4096

The model is ``--layers`` ``Linear(width, width)`` layers (2048: 16 MB each, 4096: 64 MB each).

* ``load``: ``serde.load`` (plain and ``mmap=True``) against ``torch.export.load`` of the same
  program, both files in the page cache (each side loads its file once untimed first). Measured two
  ways: (1) in one process, alternating sides, as ``bench_save_load.py`` does; a side's previous
  program is dropped before its next load, so freed memory is reused the way each implementation
  reuses it (both sides take their tensors' bytes from the C heap, which hands freed memory back
  with its pages already faulted in); (2) the first large load of a fresh process, one process
  per side and repeat, as a program is usually loaded once. Also the floor of eager verification: reading the file into fresh memory plus the digest
  load verifies every byte with (the XXH3-128 a 2.4 manifest records), on every core, with nothing
  else (no zip, no CRC-32, no program); and the same floor with the sha256 instead, the digest
  of artifacts written before schema 2.4 (and what ``pt2serde check`` adds).
* ``tools``: wall-clock seconds of ``pt2serde show A`` and ``pt2serde diff A B`` as a user runs
  them (a new process each, its modules' bytecode cached as an installed package's is), where B is
  A with one bias changed; ``pt2serde check A`` (which reads and verifies every byte) and
  ``pt2serde --help`` (the start-up every command pays) for comparison.
* ``memory``: peak resident memory (VmHWM, reset just before the load) of one load in a fresh
  process, minus the resident memory just before it, as a fraction of the weights' bytes: plain,
  ``mmap=True`` (before and after touching every weight) and ``torch.export.load``.

* ``streams``: ``serde.load`` from ``bytes``, an ``io.BytesIO`` and an open file against the
  load from the path, and the trusted path ``serde.load(path, mmap=True, verify=False)``, each
  also against ``torch.export.load`` (from the path, and from a BytesIO for the stream sides);
  warm (one process, sides alternating) and cold (the first load of a fresh process, one
  process per side and repeat). The copies of each side are measured as the peak resident
  memory a cold load adds (its source already in memory), as a fraction of the weights: one
  private copy is 1.0x.

Prints one JSON line. Times leave the script only as ratios, except the tools' seconds, whose bar
is in seconds.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import mmap
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import xxhash

from _harness import base_parser, graph_nodes, main_guard, proc_status, ratio, run_child, time_interleaved

HERE = Path(__file__).resolve().parent


def _export(layers: int, width: int):
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)]).eval()
    args = (torch.randn(2, width),)
    return torch.export.export(model, args, strict=False), args


def _weights_bytes(ep) -> int:
    return sum(t.untyped_storage().nbytes() for t in ep.state_dict.values())


def _stats(values: list[float]) -> dict[str, float]:
    return {"min": round(min(values), 3), "median": round(statistics.median(values), 3)}


# ---------------------------------------------------------------- goal: load speed


def run_load(layers: int, width: int, repeats: int, fresh: bool = True) -> dict:
    import torch

    import serde

    ep, args = _export(layers, width)
    with tempfile.TemporaryDirectory(prefix="pt2serde-bench-") as d:
        ours, theirs = os.path.join(d, "model.pt2s"), os.path.join(d, "model.pt2")
        serde.save(ep, ours)
        torch.export.save(ep, theirs)
        loaded: dict = {}

        def load(side: str, fn) -> None:
            loaded.pop(side, None)  # drop this side's previous program first
            loaded[side] = fn()

        sides = {"serde": lambda: load("serde", lambda: serde.load(ours)),
                 "serde_mmap": lambda: load("serde_mmap", lambda: serde.load(ours, mmap=True)),
                 "torch": lambda: load("torch", lambda: torch.export.load(theirs))}
        for fn in sides.values():  # untimed: first calls, and both files in the page cache
            fn()
        t = time_interleaved(sides, repeats)
        firsts = _fresh_loads(ours, theirs, repeats) if fresh else None
        floor = [read_and_digest(ours, "xxh3") for _ in range(repeats)]
        floor_sha = [read_and_digest(ours, "sha256") for _ in range(repeats)]
        expected = ep.module()(*args)
        for side, ep2 in loaded.items():
            torch.testing.assert_close(ep2.module()(*args), expected, rtol=0, atol=0,
                                       msg=lambda m, side=side: f"{side} round trip changed the outputs: {m}")
        size = os.path.getsize(ours)
    return {
        "bench": "weights_load",
        **graph_nodes(ep),
        "weights_bytes": _weights_bytes(ep),
        "serde_bytes": size,
        "repeats": repeats,
        "load_speedup": ratio(t["torch"], t["serde"]),
        "load_mmap_speedup": ratio(t["torch"], t["serde_mmap"]),
        **({"first_load_speedup": _wall_ratio(firsts["torch"], firsts["serde"]),
            "first_load_mmap_speedup": _wall_ratio(firsts["torch"], firsts["serde_mmap"])} if firsts else {}),
        # the best any eager verification could do: torch's load time over (read + the digest)
        "floor_digest": "xxh3_128",
        "floor_speedup": _wall_ratio(t["torch"].wall, floor),
        "floor_vs_serde": _wall_ratio(t["serde"].wall, floor),
        "floor_sha256_speedup": _wall_ratio(t["torch"].wall, floor_sha),
        "outputs_match": True,
    }


def _wall_ratio(num: list[float], den: list[float]) -> dict[str, float]:
    return {"min": round(min(num) / min(den), 3), "median": round(statistics.median(num) / statistics.median(den), 3)}


def _fresh_loads(ours: str, theirs: str, repeats: int) -> dict[str, list[float]]:
    """Seconds of the first large load of a new process, per side, alternating sides."""
    out: dict[str, list[float]] = {"serde": [], "serde_mmap": [], "torch": []}
    for _ in range(repeats):
        for side in out:
            path = theirs if side == "torch" else ours
            rec = run_child(__file__, ["--child", "load", "--side", side, "--path", path], env=dict(os.environ))
            out[side].append(rec["seconds"])
    return out


def read_and_digest(path: str, digest: str) -> float:
    """Seconds to read the file into fresh memory and hash all of it with ``digest`` ("xxh3":
    XXH3-128, or "sha256"), split over every core (each thread reads and hashes its share in 1 MB
    pieces while they are in cache). The memory is a fresh anonymous mapping backed by huge pages
    where the kernel allows them (serde.load reads its big members into the C heap instead, whose
    freed memory a later load may get back: it can beat this floor)."""
    size = os.path.getsize(path)
    workers = os.cpu_count() or 1
    step = -(-size // workers)
    t0 = time.perf_counter()
    fd = os.open(path, os.O_RDONLY)
    mm = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        mm.madvise(mmap.MADV_HUGEPAGE)
    buf = memoryview(mm)
    new = xxhash.xxh3_128 if digest == "xxh3" else hashlib.sha256

    def share(lo: int) -> str:
        h, off, hi = new(), lo, min(size, lo + step)
        while off < hi:
            n = os.preadv(fd, [buf[off:min(hi, off + (1 << 20))]], off)
            h.update(buf[off:off + n])
            off += n
        return h.hexdigest()

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(share, range(0, size, step)))
    os.close(fd)
    seconds = time.perf_counter() - t0
    buf.release()
    return seconds


# ---------------------------------------------------------------- goal: streams and verify=False

# serde's sides of the streams goal, and the torch side each is compared with
_STREAM_SIDES = {"serde": "torch", "serde_bytes": "torch_bytesio", "serde_bytesio": "torch_bytesio",
                 "serde_file": "torch", "serde_trusted": "torch"}


def _stream_load(side: str, path: str, data: bytes | None):
    """One load of ``side``; ``data`` is the file's bytes (for the in-memory sides)."""
    import io

    import torch

    import serde

    if side == "torch":
        return torch.export.load(path)
    if side == "torch_bytesio":
        return torch.export.load(io.BytesIO(data))
    if side == "serde_bytes":
        return serde.load(data)
    if side == "serde_bytesio":
        return serde.load(io.BytesIO(data))
    if side == "serde_file":
        with open(path, "rb") as f:
            return serde.load(f)
    if side == "serde_trusted":
        return serde.load(path, mmap=True, verify=False)
    return serde.load(path)


def run_streams(layers: int, width: int, repeats: int, fresh: bool = True) -> dict:
    import torch

    ep, args = _export(layers, width)
    import serde

    with tempfile.TemporaryDirectory(prefix="pt2serde-bench-") as d:
        ours, theirs = os.path.join(d, "model.pt2s"), os.path.join(d, "model.pt2")
        serde.save(ep, ours)
        torch.export.save(ep, theirs)
        files = {side: theirs if side.startswith("torch") else ours
                 for side in (*_STREAM_SIDES, "torch", "torch_bytesio")}
        data = {p: Path(p).read_bytes() for p in (ours, theirs)}
        loaded: dict = {}

        def side_fn(side: str):
            def fn() -> None:
                loaded.pop(side, None)  # drop this side's previous program first
                loaded[side] = _stream_load(side, files[side], data[files[side]])
            return fn

        sides = {side: side_fn(side) for side in files}
        for fn in sides.values():  # untimed: first calls, and the files in the page cache
            fn()
        t = time_interleaved(sides, repeats)
        expected = ep.module()(*args)
        for side, ep2 in loaded.items():
            torch.testing.assert_close(ep2.module()(*args), expected, rtol=0, atol=0,
                                       msg=lambda m, side=side: f"{side} round trip changed the outputs: {m}")
        loaded.clear()
        cold: dict[str, list[float]] = {side: [] for side in files}
        copies: dict[str, float] = {}
        if fresh:
            for _ in range(repeats):
                for side in files:
                    cold[side].append(run_child(__file__, ["--child", "stream", "--side", side, "--path", files[side]], env=dict(os.environ))["seconds"])
            weights = _weights_bytes(ep)
            for side in files:
                rec = run_child(__file__, ["--child", "stream_memory", "--side", side, "--path", files[side]], env=dict(os.environ))
                copies[side] = round(rec["peak_bytes"] / weights, 3)
    out: dict = {"bench": "weights_streams", **graph_nodes(ep), "weights_bytes": _weights_bytes(ep),
                 "repeats": repeats, "vs_path": {}, "vs_torch": {}, "cold_vs_path": {}, "cold_vs_torch": {},
                 "copies": copies, "outputs_match": True}
    for side, theirs_side in _STREAM_SIDES.items():
        # vs_path: time of this side / time of the load from the path (<= 1: no slower)
        out["vs_path"][side] = ratio(t[side], t["serde"])
        out["vs_torch"][side] = ratio(t[theirs_side], t[side])
        if fresh:
            out["cold_vs_path"][side] = _wall_ratio(cold[side], cold["serde"])
            out["cold_vs_torch"][side] = _wall_ratio(cold[theirs_side], cold[side])
    return out


# ---------------------------------------------------------------- goal: show and diff


def run_tools(layers: int, width: int, repeats: int) -> dict:
    import torch

    import serde

    ep, _ = _export(layers, width)
    nodes = graph_nodes(ep)
    with tempfile.TemporaryDirectory(prefix="pt2serde-bench-") as d:
        a, b = os.path.join(d, "a.pt2s"), os.path.join(d, "b.pt2s")
        serde.save(ep, a)
        with torch.no_grad():
            ep.state_dict[f"{layers - 1}.bias"].add_(1.0)  # B: one bias fine-tuned
        serde.save(ep, b)
        size = os.path.getsize(a)
        del ep
        small = os.path.join(d, "small.pt2s")  # the same layers, 64 wide: kilobytes of weights
        serde.save(_export(layers, 64)[0], small)
        cmds = {"show": (["show", "--no-pager", a], 0), "diff": (["diff", a, b], 1), "check": (["check", a], 0),
                "show_small": (["show", "--no-pager", small], 0)}
        pycache = os.path.join(d, "pycache")
        for argv, want in cmds.values():  # untimed: both files in the page cache
            _cli(argv, want, pycache)
        secs: dict[str, list[tuple[float, float]]] = {k: [] for k in cmds}
        for _ in range(repeats):
            for k, (argv, want) in cmds.items():
                secs[k].append(_cli(argv, want, pycache))
        secs["startup"] = [_cli(["--help"], 0, pycache) for _ in range(repeats)]  # parses, reads nothing
    return {
        "bench": "weights_tools",
        **nodes,
        "serde_bytes": size,
        "repeats": repeats,
        # wall-clock min and median, and the minimum CPU time (steadier on a busy machine)
        **{f"{k}_seconds": {**_stats([w for w, _ in v]), "cpu": round(min(c for _, c in v), 3)}
           for k, v in secs.items()},
    }


def _cli(argv: list[str], want: int, pycache: str) -> tuple[float, float]:
    """Wall-clock and CPU seconds (user + system) of one ``pt2serde`` process."""
    script = Path(sys.executable).with_name("pt2serde")
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "serde.cli"]
    # As installed: modules compiled once (by the untimed first run), not on every start.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | {"PYTHONPYCACHEPREFIX": pycache}
    r0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    proc = subprocess.run([*cmd, *argv], capture_output=True, text=True, env=env)
    seconds, r1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != want:
        raise RuntimeError(f"pt2serde {' '.join(argv)} exited {proc.returncode}, not {want}: {proc.stderr[-2000:]}")
    return seconds, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


# ---------------------------------------------------------------- goal: peak memory


def run_memory(layers: int, width: int, repeats: int) -> dict:
    import torch

    import serde

    ep, _ = _export(layers, width)
    weights, nodes = _weights_bytes(ep), graph_nodes(ep)
    with tempfile.TemporaryDirectory(prefix="pt2serde-bench-") as d:
        ours, theirs = os.path.join(d, "model.pt2s"), os.path.join(d, "model.pt2")
        serde.save(ep, ours)
        torch.export.save(ep, theirs)
        del ep
        out = {side: run_child(__file__, ["--child", "memory", "--side", side, "--path", theirs if side == "torch" else ours], env=dict(os.environ))
               for side in ("serde", "serde_mmap", "torch")}
    frac = {side: round(r["peak_bytes"] / weights, 3) for side, r in out.items()}
    return {
        "bench": "weights_memory",
        **nodes,
        "weights_bytes": weights,
        "peak_fraction": frac,
        "mmap_touched_fraction": round(out["serde_mmap"]["touched_bytes"] / weights, 3),
    }


# ---------------------------------------------------------------- child processes






def child(kind: str, side: str, path: str) -> dict:
    import torch

    import serde

    if kind in ("stream", "stream_memory"):
        return _stream_child(kind, side, path)

    def load():
        if side == "torch":
            return torch.export.load(path)
        return serde.load(path, mmap=side == "serde_mmap")

    # first calls paid on a small program of the same family, not on the timed load
    small, _ = _export(1, 64)
    with tempfile.TemporaryDirectory(prefix="pt2serde-bench-") as d:
        warm = os.path.join(d, "warm")
        (torch.export.save if side == "torch" else serde.save)(small, warm)
        (torch.export.load if side == "torch" else serde.load)(warm)
    if kind == "load":
        t0 = time.perf_counter()
        load()
        return {"seconds": time.perf_counter() - t0}
    with open("/proc/self/clear_refs", "w") as f:  # reset VmHWM to the current RSS
        f.write("5")
    before = proc_status("VmRSS")
    ep = load()
    out = {"peak_bytes": proc_status("VmHWM") - before}
    if side == "serde_mmap":
        for t in ep.state_dict.values():
            t.sum()  # touches every byte
        out["touched_bytes"] = proc_status("VmRSS") - before
    return out


def _stream_child(kind: str, side: str, path: str) -> dict:
    """The first load of ``side`` in this process (its source read into memory first), after first
    calls paid on a small program; its seconds, or the peak resident memory it adds."""
    import torch

    import serde

    small, _ = _export(1, 64)
    with tempfile.TemporaryDirectory(prefix="pt2serde-bench-") as d:
        warm = os.path.join(d, "warm")
        (torch.export.save if side.startswith("torch") else serde.save)(small, warm)
        _stream_load(side, warm, Path(warm).read_bytes())
    data = Path(path).read_bytes() if side in ("serde_bytes", "serde_bytesio", "torch_bytesio") else None
    if kind == "stream":
        t0 = time.perf_counter()
        _stream_load(side, path, data)
        return {"seconds": time.perf_counter() - t0}
    with open("/proc/self/clear_refs", "w") as f:  # reset VmHWM to the current RSS
        f.write("5")
    before = proc_status("VmRSS")
    ep = _stream_load(side, path, data)
    out = {"peak_bytes": proc_status("VmHWM") - before}
    del ep
    return out


def main() -> int:
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--goal", choices=("load", "tools", "memory", "streams"))
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--child", choices=("load", "memory", "stream", "stream_memory"), help=argparse.SUPPRESS)
    p.add_argument("--side", choices=("serde", "serde_mmap", "torch", *_STREAM_SIDES, "torch_bytesio"))
    p.add_argument("--path")
    p.add_argument("--no-fresh", action="store_true", help="load, streams: skip the first loads of fresh processes")
    a = p.parse_args()
    if a.child:
        print(json.dumps(child(a.child, a.side, a.path)))
        return 0
    if a.goal == "load":
        return main_guard(a.case, lambda: run_load(a.layers, a.width, a.repeats, fresh=not a.no_fresh))
    if a.goal == "streams":
        return main_guard(a.case, lambda: run_streams(a.layers, a.width, a.repeats, fresh=not a.no_fresh))
    body = {"tools": run_tools, "memory": run_memory}[a.goal]
    return main_guard(a.case, lambda: body(a.layers, a.width, a.repeats))


if __name__ == "__main__":
    sys.exit(main())
