"""Run saves in fresh Python processes: the byte-stability tests compare artifacts written by
different processes (other hash seeds, object ids and source paths)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

# The drivers import the model zoo from tests/, so the repository root goes on their path.
ROOT = str(Path(__file__).resolve().parents[2])


def save_in_subprocesses(driver: str, *runs: tuple[tuple[str, ...], str]) -> None:
    """Run ``driver`` (Python source) once per ``(argv, hash seed)`` in ``runs``, all at the same
    time (they are independent); raise with the stderr of each one that failed."""
    procs = []
    for args, seed in runs:
        err = tempfile.TemporaryFile(mode="w+")  # a file, not a pipe: a chatty process never blocks on it
        path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH", "")) if p)
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": path}
        procs.append((subprocess.Popen([sys.executable, "-c", driver, *args], stdout=subprocess.DEVNULL,
                                       stderr=err, text=True, env=env), err))
    failures = []
    for proc, err in procs:
        with err:
            try:
                code = proc.wait(timeout=600)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                code = "timeout"
            if code != 0:
                err.seek(0)
                failures.append(f"the save subprocess failed ({code}):\n{err.read()[-3000:]}")
    if failures:
        raise AssertionError("\n".join(failures))
