"""The fork server of the cold samples (``benchmarks/_harness.py``): a hang or a crash of a forked
child is an error, not a wait; OpenMP work before a fork does not hang the children; the pages a
call writes are the child's own before its clock starts; and the corpus case runs through it."""

from __future__ import annotations

import json
import math
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))

import _harness  # noqa: E402

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork, /proc/self/pagemap and madvise are Linux's")


@linux
def test_a_hung_child_is_killed_and_reported():
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match=r"no answer in 1s \(hung\?\); killed"):
        _harness._in_child(lambda: time.sleep(60), timeout=1)
    assert time.monotonic() - t0 < 30


@linux
def test_a_failing_child_is_reported():
    def boom():
        raise ValueError("boom")

    with pytest.raises(RuntimeError, match="ValueError: boom"):
        _harness._in_child(boom, timeout=60)
    assert _harness._in_child(lambda: {"x": 1}, timeout=60) == {"x": 1}


_BIG = [{"a": i} for i in range(300_000)]  # tens of megabytes of small objects, shared after a fork


def _faults_of_a_walk() -> int:
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    n = 0
    for d in _BIG:  # reads only, but every reference count it moves is a write to a shared page
        n += d["a"]
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0


@linux
def test_pages_a_call_writes_are_owned_before_the_clock():
    plain = _harness._in_child(_faults_of_a_walk, timeout=120)
    runs = _harness._in_child(lambda: _harness.shared_pages_written(_faults_of_a_walk), timeout=120)
    owned = _harness._in_child(lambda: (_harness.make_own(runs), _faults_of_a_walk())[1], timeout=120)
    assert plain > 1000, plain  # copy-on-write faults a fresh process would not take
    assert sum(n for _, n in runs) >= plain * 0.9
    assert owned < plain / 20, (owned, plain)


_SERVER = """
import sys
sys.path.insert(0, {bench!r})
import _harness


def work():
    import torch
    x = torch.randn(2_000_000)
    for _ in range(5):
        x.add_(1).mul_(0.5)  # large enough for OpenMP's parallel regions
    return float(x.sum())


def call(side, subject):
    import torch
    work()
    return {{"side": side, "subject": subject, "threads": torch.get_num_threads()}}


if __name__ == "__main__":
    sys.exit(_harness.serve_forks(work, lambda spec: (work(), spec)[1], call))
"""


@linux
def test_children_run_after_parallel_work_in_the_server_and_the_preparer(tmp_path):
    # GNU OpenMP hangs a child forked after its parent ran a parallel region; the server and the
    # preparing process run torch single-threaded, and each child gets the default thread count back.
    import torch

    script = tmp_path / "server.py"
    script.write_text(_SERVER.format(bench=str(BENCH)))
    with _harness.ForkServer(str(script), env=dict(os.environ), timeout=60) as server:
        got = server.calls([{"side": "load", "subject": "f"}] * 2)
        assert got == [{"side": "load", "subject": "f", "threads": torch.get_num_threads()}] * 2
        got = server.calls([{"side": "save"}] * 2, prepare="the program")
        assert [g["subject"] for g in got] == ["the program"] * 2


@linux
@pytest.mark.slow
def test_corpus_case_runs_its_cold_samples_forked():
    proc = subprocess.run([sys.executable, str(BENCH / "bench_corpus.py"), "--case", "corpus", "--models", "hf/llama",
                           "--repeats", "1"], capture_output=True, text=True, timeout=1200, cwd=BENCH.parent)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    r = json.loads(lines[-1])
    assert not r["failed"], r["failed"]
    m = r["models"]["hf/llama"]
    for key in ("cold_save", "cold_load", "warm_save", "warm_load"):
        assert m[key]["min"] > 0 and math.isfinite(m[key]["median"]), (key, m[key])
    assert r["ops"] > 0 and m["nodes"] > r["ops"]
