"""Shared pieces of the benchmark cases: models, interleaved timing, the one-JSON-line output.

Each case script imports this, measures pt2serde against torch *in the same process and run*, and
prints exactly one JSON line on stdout (``emit``). Seconds never leave the case script: only
ratios, sizes and counts do, because bare times on a shared machine mean nothing.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The zoo is serde.testing.zoo; the breadth and third-party zoos are test modules (tests/zoo_*.py):
# make the repository root importable.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

__all__ = [
    "Timing", "time_interleaved", "ratio", "emit", "main_guard", "base_parser",
    "chain_length_for", "export_chain", "export_transformer", "export_wide", "export_zoo", "ZOO_PROGRAMS",
    "graph_nodes", "calibrate", "callgrind_counts", "installed_env",
]

# torch warns about a missing numpy on import; the JSON line must be the only thing on stdout
# and stderr should stay readable.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")


@dataclass(frozen=True)
class Timing:
    """Per-repeat wall-clock and CPU seconds of one side of a comparison (never printed)."""

    wall: list[float]
    cpu: list[float]


def time_interleaved(fns: dict[str, Callable[[], Any]], repeats: int, inner: int = 1) -> dict[str, Timing]:
    """Time each function ``repeats`` times, alternating between them.

    With ``inner`` > 1 one sample is ``inner`` back-to-back calls (a program of 10 nodes loads in
    about a millisecond: one call alone is mostly timer and scheduler noise).

    Alternating (a, b, a, b, ...) spreads the noise of a shared machine over both sides, so the
    ratio of the minima is fair even when the absolute times drift. A full ``gc.collect()`` runs
    before each call so one side does not pay for the other's garbage; gc stays enabled inside
    the call, as it is for users.
    """
    wall: dict[str, list[float]] = {k: [] for k in fns}
    cpu: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            gc.collect()
            c0, t0 = time.process_time(), time.perf_counter()
            for _ in range(inner):
                fn()
            t1, c1 = time.perf_counter(), time.process_time()
            wall[name].append(t1 - t0)
            cpu[name].append(c1 - c0)
    return {k: Timing(wall[k], cpu[k]) for k in fns}


def calibrate(fn: Callable[[], Any], target: float = 0.05, cap: int = 200) -> int:
    """How many back-to-back calls of ``fn`` make one sample of at least ``target`` seconds."""
    t0 = time.perf_counter()
    fn()
    dt = time.perf_counter() - t0
    return max(1, min(cap, int(target / dt) + 1)) if dt < target else 1


def ratio(num: Timing, den: Timing) -> dict[str, float]:
    """``num / den`` three ways: by the minimum wall time (the headline), by the median wall time,
    and by the minimum CPU time (steadier when other processes compete for the cores)."""
    return {
        "min": _r(min(num.wall), min(den.wall)),
        "median": _r(statistics.median(num.wall), statistics.median(den.wall)),
        "cpu": _r(min(num.cpu), min(den.cpu)),
    }


def _r(a: float, b: float) -> float:
    return round(a / b, 3) if b > 0 else float("inf")


def emit(record: dict[str, Any]) -> None:
    """Print the case's one JSON line."""
    sys.stdout.write(json.dumps(record, sort_keys=True) + "\n")
    sys.stdout.flush()


def base_parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--case", required=True, help="name reported in the JSON line")
    p.add_argument("--repeats", type=int, default=3, help="timed repeats per side (default 3)")
    return p


def main_guard(case: str, body: Callable[[], dict[str, Any]]) -> int:
    """Run a case body and emit its JSON line; a failure is reported as a JSON line too."""
    load_before = _loadavg()
    try:
        record = body()
    except Exception as e:  # the runner shows the message; the traceback goes to stderr
        traceback.print_exc()
        emit({"case": case, "error": f"{type(e).__name__}: {e}"})
        return 1
    # How busy the machine was: a ratio measured at load 4 on 2 cores deserves less trust.
    emit({"case": case, **record, "loadavg": [load_before, _loadavg()], "cpus": os.cpu_count()})
    return 0


def _loadavg() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):  # not on every platform
        return None


# ---------------------------------------------------------------- fresh processes as installed

_ROOT = Path(__file__).resolve().parents[1]
_BYTECODE: dict[str, str] = {}


def installed_env() -> dict[str, str]:
    """The environment for a child process whose first call is timed: pt2serde's modules compiled
    to bytecode once (as an installed package's are), not compiled again on every import.

    Without it, a checkout run with ``PYTHONDONTWRITEBYTECODE`` (as the test and bench environment
    is) compiles every pt2serde module from source on its first import in each process, while
    torch's come compiled from site-packages: the first save or load would pay a cost no installed
    pt2serde pays. The bytecode goes to a cache directory of this process (``PYTHONPYCACHEPREFIX``),
    filled once by ``compileall``; the checkout itself is not written to.
    """
    if "dir" not in _BYTECODE:
        d = tempfile.mkdtemp(prefix="pt2serde-bench-pycache-")
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | {"PYTHONPYCACHEPREFIX": d}
        subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "0",
                        *(str(_ROOT / p) for p in ("src", "tests", "benchmarks", "upgraders") if (_ROOT / p).exists())],
                       env=env, check=False, capture_output=True)
        # With a cache prefix, Python reads no bytecode from site-packages' own __pycache__ either:
        # the heavy torch modules both sides import on first use are compiled into it here, untimed.
        subprocess.run([sys.executable, "-c", "import torch, torch._dynamo, torch.export, sympy, "
                        "torch._export.serde.serialize, torch.fx.experimental.symbolic_shapes, serde.api"],
                       env=env, check=False, capture_output=True, cwd=_ROOT)
        _BYTECODE["dir"] = d
        import atexit

        atexit.register(shutil.rmtree, d, ignore_errors=True)
    return {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | {"PYTHONPYCACHEPREFIX": _BYTECODE["dir"]}


# ---------------------------------------------------------------- instruction counts

# A child counted by callgrind runs each measured call through sys.call_tracing, a C function
# nothing else calls: callgrind counts only inside it (--toggle-collect) and writes one file as
# each such call ends (--dump-after).
_COUNTED = "sys_call_tracing"


def callgrind_counts(code: str, args: list[str], calls: int) -> list[int]:
    """Machine instructions of each of the ``calls`` calls that ``python -c code *args`` makes
    through ``sys.call_tracing``, counted by valgrind's callgrind (imports and anything else the
    child does are not counted). The same child gives the same counts from run to run, whatever
    else the machine does, and cache misses do not change them."""
    if shutil.which("valgrind") is None:
        raise RuntimeError("instruction counts need valgrind (apt-get install valgrind)")
    with tempfile.TemporaryDirectory(prefix="pt2serde-callgrind-") as d:
        proc = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--toggle-collect={_COUNTED}", f"--dump-after={_COUNTED}",
             f"--callgrind-out-file={d}/cg.out", sys.executable, "-c", code, *args],
            capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
        if proc.returncode != 0:
            raise RuntimeError(f"the child under callgrind failed (exit {proc.returncode}): "
                               + "\n".join(proc.stderr.strip().splitlines()[-10:]))
        # cg.out.1 ... cg.out.<calls>: the dumps after the counted calls (cg.out holds the rest)
        counts = [_callgrind_total(Path(d) / f"cg.out.{k}") for k in range(1, calls + 1)]
    if not all(counts):
        raise RuntimeError(f"callgrind counted nothing inside {_COUNTED}: this Python's library has no "
                           "symbol of that name (stripped?); the instruction counts need one that has")
    return counts


def _callgrind_total(f: Path) -> int:
    if not f.exists():
        return 0
    m = re.search(r"^(?:summary|totals): (\d+)", f.read_text(), re.M)
    return int(m.group(1)) if m else 0


# ---------------------------------------------------------------- models


def chain_length_for(ops: int) -> int:
    """Smallest ``n`` such that ``serde.testing.zoo.Chain(n)`` exports to at least ``ops`` op nodes.

    Every third step of the chain is ``x * a + b`` (two ops), the others one pointwise op.
    """
    n = 0
    while n + (n + 2) // 3 < ops:
        n += 1
    return n


def export_chain(ops: int, insert_at: int | None = None):
    """Export a chain of ``ops`` pointwise ops on a (4, 8) input.

    With ``insert_at``, one extra op (``x * 0.5``) is inserted after step ``insert_at``: the
    minimal edit of the diff-locality case.
    """
    import torch

    from serde.testing.zoo import Chain

    class _Edited(Chain):
        def forward(self, x):
            ops_ = (torch.sin, torch.cos, torch.tanh, torch.sigmoid, torch.relu, torch.exp)
            for i in range(self.n):
                x = ops_[i % len(ops_)](x) if i % 3 else x * (1.0 + (i % 97) / 1000.0) + (i % 13) / 10.0
                if i == insert_at:
                    x = x * 0.5
            return x

    n = chain_length_for(ops)
    model = Chain(n) if insert_at is None else _Edited(n)
    torch.manual_seed(0)
    args = (torch.randn(4, 8),)
    return torch.export.export(model.eval(), args, strict=False), args


def export_transformer(layers: int, d: int = 128, heads: int = 4):
    """Export ``layers`` pre-norm transformer blocks (``serde.testing.zoo.Block``) with dynamic batch and
    sequence length."""
    import torch
    from torch.export import Dim

    from serde.testing.zoo import Block

    torch.manual_seed(0)
    model = torch.nn.Sequential(*[Block(d, heads) for _ in range(layers)]).eval()
    args = (torch.randn(2, 16, d),)
    dyn = ({0: Dim("batch", min=1, max=32), 1: Dim("seq", min=2, max=128)},)
    return torch.export.export(model, args, dynamic_shapes=dyn, strict=False), args


def export_wide(layers: int, width: int = 2048):
    """Export ``layers`` Linear(width, width) layers: few nodes, large weights (``layers`` * 16 MB
    at the default width), so save and load time is payload I/O and hashing."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)]).eval()
    args = (torch.randn(2, width),)
    return torch.export.export(model, args, strict=False), args


def graph_nodes(ep) -> dict[str, int]:
    """Node counts of the exported graph: all nodes and ``call_function`` nodes (ops)."""
    nodes = list(ep.graph.nodes)
    return {"nodes": len(nodes), "ops": sum(n.op == "call_function" for n in nodes)}


# Small programs of the zoo, each a different kind of graph (8 to 18 nodes): a benchmark name ->
# (zoo module, case name).
ZOO_PROGRAMS = {
    "mlp": ("serde.testing.zoo", "mlp"),                    # dynamic batch
    "cond": ("serde.testing.zoo", "cond"),                  # torch.cond with two subgraphs, dynamic batch
    "custom_op": ("tests.zoo_breadth", "custom_ops"),       # custom ops of a test-local namespace
    "mutation": ("serde.testing.zoo", "input_mutation_aten"),  # a buffer mutation in core ATen IR
    "sym_ops": ("serde.testing.zoo", "dynamic_arith"),      # symbolic sizes and int ops on them (add, mul, floordiv)
}


def export_zoo(name: str):
    """Export the small zoo program ``name`` (a key of ``ZOO_PROGRAMS``); returns (ep, args)."""
    import importlib

    import torch

    module, case_name = ZOO_PROGRAMS[name]
    zoo = importlib.import_module(module)
    case = zoo.get(case_name)
    torch.manual_seed(0)
    _, args, kwargs, _ = case.build()
    if kwargs:
        raise ValueError(f"zoo program {name!r} takes keyword inputs; the benchmark passes positional ones")
    return zoo.export_case(case), args


def timed_call(side: str, subject: Any) -> dict[str, float]:
    """Seconds of one ``serde`` or ``torch.export`` save of the program ``subject`` into memory
    (``side`` ``serde_save`` / ``torch_save``), or load of the file ``subject`` (``serde_load`` /
    ``torch_load``). The cold children call it once, so it times a fresh process's first call, with
    whatever the library imports on first use inside the clock."""
    import io

    import torch

    t0 = time.perf_counter()
    if side == "serde_save":
        import serde

        serde.save(subject, io.BytesIO())
    elif side == "torch_save":
        torch.export.save(subject, io.BytesIO())
    elif side == "serde_load":
        import serde

        serde.load(subject)
    else:
        torch.export.load(subject)
    return {"seconds": time.perf_counter() - t0}


def run_child(script: str, argv: list[str], *, case: str = "child", env: dict[str, str] | None = None) -> dict:
    """The last JSON line a fresh process of ``script --case CASE *argv`` printed, run from the
    repository root with ``env`` (default :func:`installed_env`: pt2serde's bytecode cached as an
    installed copy has it)."""
    proc = subprocess.run([sys.executable, str(Path(script).resolve()), "--case", case, *argv],
                          capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1],
                          env=installed_env() if env is None else env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"{case} {argv} failed (exit {proc.returncode}): {proc.stderr[-3000:]}")
    return json.loads(lines[-1])


def proc_status(field: str) -> int:
    """A byte count of this process from /proc/self/status (``VmRSS``, ``VmHWM``)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/self/status")
