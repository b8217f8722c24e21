"""Run a save in a fresh Python process: the byte-stability tests compare artifacts written by
different processes (other hash seeds, object ids and source paths)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path


def save_in_subprocess(driver: str, *args: str, hash_seed: str | None = None) -> None:
    """Run ``driver`` (Python source) with ``args`` as sys.argv[1:]; raise with its stderr on failure."""
    env = dict(os.environ) if hash_seed is None else {**os.environ, "PYTHONHASHSEED": hash_seed}
    r = subprocess.run([sys.executable, "-c", driver, *args], timeout=600, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        raise AssertionError(f"the save subprocess failed ({r.returncode}):\n{r.stderr[-3000:]}")


def save_model_source(tmp_path: Path, driver: str, source: str, folder: str, filename: str, *extra: str) -> bytes:
    """Write ``source`` to ``tmp_path/folder/filename``, let ``driver`` export and save it to
    ``model.pt2s`` next to it (argv: model file, output file, ``extra``), and return the bytes."""
    d = tmp_path / folder
    d.mkdir(parents=True, exist_ok=True)
    model = d / filename
    model.write_text(textwrap.dedent(source))
    out = d / "model.pt2s"
    save_in_subprocess(driver, str(model), str(out), *extra)
    return out.read_bytes()
