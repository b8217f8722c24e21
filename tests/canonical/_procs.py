"""Run a save in a fresh Python process: the byte-stability tests compare artifacts written by
different processes (other hash seeds, object ids and source paths)."""

from __future__ import annotations

import os
import subprocess
import sys


def save_in_subprocess(driver: str, *args: str, hash_seed: str | None = None) -> None:
    """Run ``driver`` (Python source) with ``args`` as sys.argv[1:]; raise with its stderr on failure."""
    env = dict(os.environ) if hash_seed is None else {**os.environ, "PYTHONHASHSEED": hash_seed}
    r = subprocess.run([sys.executable, "-c", driver, *args], timeout=600, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise AssertionError(f"the save subprocess failed ({r.returncode}):\n{r.stderr[-3000:]}")
