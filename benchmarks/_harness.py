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
    import resource

    import torch

    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    c0, t0 = time.process_time(), time.perf_counter()
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
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    # page faults inside the call: a forked child pays one for each page it writes that it
    # still shares with its parent, where a fresh process's pages are its own
    return {"seconds": seconds, "cpu": cpu, "minor_faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults}


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


# ---------------------------------------------------------------- cold calls forked from a clean process

# A forked child whose answer takes longer than this is killed and reported: a hang is an error,
# never a wait.
FORK_TIMEOUT = 600.0
_THREADS: dict[str, int] = {}


class ForkServer:
    """A fresh process of ``script --case fork-server --fork-server *argv`` that did its setup once
    (imports) and forks one child per timed call, so that each cold sample is a process in exactly
    the state a fresh one has after that setup, without paying the setup again.

    ``calls(calls)`` forks one child of the server per call, in order, each calling
    ``call(side, subject)`` once and exiting. ``calls(calls, prepare=spec)`` first forks a process
    of its own that runs ``prepare(spec)`` (e.g. builds and exports a model) and then forks one
    child per call from *that* process, with its result as the subject: each child is then "the
    first save of a process that just exported", as a fresh process that exported would be. The
    server itself never runs a call, so every child starts from the same clean state.

    Fork safety: GNU OpenMP cannot be used in a child forked after its parent ran a parallel region
    (the child waits forever for workers it does not have). The server and the preparing process
    therefore run torch single-threaded, and each timed child sets torch's default thread count back
    before its call, as a fresh process's first parallel region would start with. Each child dies
    with its parent and is killed after ``timeout`` seconds, which raises ``RuntimeError``.
    """

    def __init__(self, script: str, argv: list[str] | tuple[str, ...] = (), *, env: dict[str, str] | None = None,
                 timeout: float = FORK_TIMEOUT) -> None:
        self.timeout = timeout
        self._stderr = tempfile.TemporaryFile()
        self._proc = subprocess.Popen(
            [sys.executable, str(Path(script).resolve()), "--case", "fork-server", "--fork-server", *argv],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, cwd=_ROOT,
            env=installed_env() if env is None else env)
        self._buf = b""
        ready = self._read(timeout)  # the setup (imports) done before anything is timed
        if not ready.get("ready"):
            raise RuntimeError(f"fork server did not start: {ready}")

    def calls(self, calls: list[dict[str, Any]], prepare: Any = None) -> list[dict[str, Any]]:
        """One forked child per call (``{"side": ..., "subject": ...}``; with ``prepare`` the subject
        is what ``prepare`` returned): the answers, in order."""
        return self.request(calls, prepare)["answers"]

    def request(self, calls: list[dict[str, Any]], prepare: Any = None, finish: Any = None) -> dict[str, Any]:
        """As :meth:`calls`, and with ``finish`` (needs ``prepare``) the preparing process then runs
        the server's ``finish(subject, finish)`` once its children are done (untimed work that
        needs the subject, e.g. warm measurements): ``{"answers": [...], "finish": result}``."""
        req = {"calls": calls, "timeout": self.timeout, **({"prepare": prepare} if prepare is not None else {}),
               **({"finish": finish} if finish is not None else {})}
        assert self._proc.stdin is not None
        try:
            self._proc.stdin.write((json.dumps(req) + "\n").encode())
            self._proc.stdin.flush()
        except BrokenPipeError:
            pass  # reported below with the server's stderr
        answer = self._read(self.timeout * (len(calls) + 2))
        if "error" in answer:
            raise RuntimeError(f"fork server ({prepare or 'no prepare'}): {answer['error']}")
        return answer

    def _read(self, timeout: float) -> dict[str, Any]:
        import select

        assert self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                self.close()
                raise RuntimeError(f"fork server gave no answer in {timeout:.0f}s; killed")
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                self._proc.wait()
                raise RuntimeError(f"fork server exited {self._proc.returncode}: {self._stderr_tail()}")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def _stderr_tail(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")[-3000:]

    def close(self) -> None:
        if self._proc.poll() is None:
            assert self._proc.stdin is not None
            try:
                self._proc.stdin.close()
                self._proc.wait(timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                self._proc.kill()
                self._proc.wait()
        self._stderr.close()

    def __enter__(self) -> ForkServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve_forks(setup: Callable[[], Any], prepare: Callable[[Any], Any], call: Callable[[str, Any], dict],
                finish: Callable[[Any, Any], Any] | None = None) -> int:
    """The server side of :class:`ForkServer`: ``setup()`` once, then one request per line of stdin,
    one answer per line of stdout. Nothing else may reach the answers' pipe: whatever the setup,
    a preparation or a call prints goes to stderr."""
    import torch

    _THREADS["default"] = torch.get_num_threads()
    torch.set_num_threads(1)  # no OpenMP workers in a process that forks (see ForkServer)
    answers = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    setup()
    os.write(answers, b'{"ready": true}\n')
    for line in sys.stdin:
        req = json.loads(line)
        try:
            if "prepare" in req:
                answer: dict[str, Any] = _in_child(lambda req=req: _prepared(req, prepare, call, finish),
                                                   req["timeout"] * (2 * len(req["calls"]) + 2))
            else:
                answer = {"answers": _forked_calls(None, req, call)}
        except Exception as e:
            answer = {"error": f"{type(e).__name__}: {e}"}
        os.write(answers, (json.dumps(answer) + "\n").encode())
    return 0


def _prepared(req: dict[str, Any], prepare: Callable[[Any], Any], call: Callable[[str, Any], dict],
              finish: Callable[[Any, Any], Any] | None) -> dict[str, Any]:
    """In the preparing process: prepare the subject, fork the timed children, then ``finish``."""
    subject = prepare(req["prepare"])
    out: dict[str, Any] = {"answers": _forked_calls(subject, req, call)}
    if "finish" in req and finish is not None:
        import torch

        torch.set_num_threads(_THREADS["default"])  # this process forks no more
        out["finish"] = finish(subject, req["finish"])
    return out


# side -> the pages a call of the fork server's own children writes (the server's state does not
# change between requests, so one probe per side serves them all)
_PROBED: dict[str, list[list[int]]] = {}


def _forked_calls(subject: Any, req: dict[str, Any], call: Callable[[str, Any], dict]) -> list[dict]:
    """One forked child per call of ``req``. Unless ``req["unshare"]`` is false, a first untimed child
    per side finds the pages its call writes that it shared with this process; every timed child
    makes those pages its own before its clock starts (see :func:`shared_pages_written`)."""
    runs: list[list[int]] = []
    if req.get("unshare", True):
        probed: dict[str, list[list[int]]] = _PROBED if subject is None else {}
        for c in req["calls"]:
            if c["side"] not in probed:
                probed[c["side"]] = _in_child(lambda c=c: shared_pages_written(lambda: _call(subject, c, call)),
                                              req["timeout"])
        runs = [r for side in dict.fromkeys(c["side"] for c in req["calls"]) for r in probed[side]]

    def timed(c: dict[str, Any]) -> dict:
        make_own(runs)
        return _call(subject, c, call)

    return [_in_child(lambda c=c: timed(c), req["timeout"]) for c in req["calls"]]


def _call(subject: Any, c: dict[str, Any], call: Callable[[str, Any], dict]) -> dict:
    import torch

    torch.set_num_threads(_THREADS["default"])  # as a fresh process would run (see ForkServer)
    return call(c["side"], c.get("subject") if subject is None else subject)


def _in_child(fn: Callable[[], Any], timeout: float) -> Any:
    """``fn()`` in a forked child: its JSON-able result, or ``RuntimeError`` when it raised, died or
    took longer than ``timeout`` seconds (then it is killed)."""
    import select
    import signal

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        try:
            os.close(r)
            _die_with_parent()
            out: dict[str, Any] = {"ok": fn()}
        except BaseException as e:  # reported to the parent, which raises
            traceback.print_exc()
            out = {"error": f"{type(e).__name__}: {e}"}
        try:
            data = (json.dumps(out) + "\n").encode()
            while data:
                data = data[os.write(w, data):]
        finally:
            os._exit(0)  # no atexit handlers, no flush of buffers inherited from the parent
    os.close(w)
    buf = b""
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([r], [], [], left)[0]:
                os.kill(pid, signal.SIGKILL)
                raise RuntimeError(f"a forked child gave no answer in {timeout:.0f}s (hung?); killed")
            chunk = os.read(r, 1 << 16)
            if not chunk:
                break
            buf += chunk
    finally:
        os.close(r)
        os.waitpid(pid, 0)
    if not buf:
        raise RuntimeError("a forked child died without an answer (see stderr)")
    out = json.loads(buf)
    if "error" in out:
        raise RuntimeError(out["error"])
    return out["ok"]


def _die_with_parent() -> None:
    """Linux: this process gets SIGKILL when its parent dies (no orphan outlives a killed server)."""
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() == 1:
        os._exit(1)


_MADV_POPULATE_WRITE = 23  # Linux 5.14


def _libc():
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    return libc


def _resident_runs() -> list[list[int]]:
    """[first page address, pages] of every run of resident pages of this process's private
    writable mappings (Linux)."""
    import ctypes
    import mmap

    libc = _libc()
    page = mmap.PAGESIZE
    with open("/proc/self/maps") as f:
        maps = f.read().splitlines()
    runs = []
    for line in maps:
        fields = line.split()
        if not fields[1].startswith("rw") or fields[1][3] != "p":
            continue
        start, end = (int(x, 16) for x in fields[0].split("-"))
        vec = ctypes.create_string_buffer((end - start) // page)
        if libc.mincore(start, end - start, vec) == 0:
            runs += [[start + m.start() * page, m.end() - m.start()] for m in re.finditer(rb"[\x01-\xff]+", vec.raw)]
    return runs


def shared_pages_written(fn: Callable[[], Any]) -> list[list[int]]:
    """Call ``fn`` in this forked child and return the runs ([address, pages]) of the pages it
    shared with its parent before the call and owns after it: the pages the call wrote, each a
    copy-on-write fault (Linux: ``/proc/self/pagemap``'s exclusively-mapped bit).

    A forked child pays a page fault and a copy for the first write to each page it still shares
    with its parent (a reference count, the collector's header of an object), where a fresh
    process's pages are its own: on this kind of machine about 35 microseconds a page, tens of
    milliseconds in a first save. Timed children make these pages their own first
    (:func:`make_own`), so their clock sees what a fresh process's would.
    """
    import mmap
    import struct

    resident = _resident_runs()
    with open("/proc/self/pagemap", "rb") as f:
        def exclusive(run: list[int]) -> list[bool]:
            f.seek(run[0] // mmap.PAGESIZE * 8)
            return [bool(v >> 56 & 1) for v in struct.unpack(f"{run[1]}Q", f.read(8 * run[1]))]

        before = [exclusive(r) for r in resident]
        fn()
        out: list[list[int]] = []
        for run, was in zip(resident, before, strict=True):
            for i, (now, then) in enumerate(zip(exclusive(run), was, strict=True)):
                if now and not then:
                    addr = run[0] + i * mmap.PAGESIZE
                    if out and out[-1][0] + out[-1][1] * mmap.PAGESIZE == addr:
                        out[-1][1] += 1
                    else:
                        out.append([addr, 1])
    return out


def make_own(runs: list[list[int]]) -> None:
    """Copy the pages of ``runs`` ([address, pages]) that this forked child shares with its parent
    into its own memory now, as a write would (``MADV_POPULATE_WRITE``, Linux 5.14)."""
    import mmap

    if not runs:
        return
    libc = _libc()
    for addr, pages in runs:
        libc.madvise(addr, pages * mmap.PAGESIZE, _MADV_POPULATE_WRITE)
