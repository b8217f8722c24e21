"""A new user's walk-through: a fresh venv, `pip install` of this checkout, and the Python snippets of
the README and the guide executed verbatim from their text (no conftest, no hypothesis profiles of
ours). tests/test_docs_snippets.py runs every block of the manual from the checkout; this runs the
first steps a user takes from an installed package."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = (ROOT / "README.md", ROOT / "docs" / "guide.md")


def _python_blocks() -> list[str]:
    return [b for page in PAGES for b in re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)]


def _block(marker: str) -> str:
    (block,) = [b for b in _python_blocks() if marker in b]
    return block


def _run(cmd: list[str], cwd: Path, env: dict) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, f"{cmd}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    assert "Failed to initialize NumPy" not in r.stderr, r.stderr
    return r


@pytest.mark.slow
def test_new_user_walk_through(tmp_path):
    venv = tmp_path / "venv"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "HYPOTHESIS_PROFILE", "VIRTUAL_ENV")}
    _run([sys.executable, "-m", "venv", str(venv)], tmp_path, env)
    py, pip = str(venv / "bin" / "python"), [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    # torch first, as the README says, so pip never resolves a different build for it
    _run([*pip, "torch==2.13.0"], tmp_path, env)
    _run([*pip, f"{ROOT}[test]", "pytest"], tmp_path, env)
    work = tmp_path / "project"
    work.mkdir()
    # the README's save/load block, as a script
    _run([py, "-c", _block("assert torch.equal(ep2.module()")], work, env)
    assert (work / "model.pt2s").is_file()
    # the guide's testing blocks, pasted into one test file of the user's own project
    (work / "test_pasted.py").write_text(_block("def test_my_model_roundtrips") + "\n" + _block("@given"))
    r = _run([py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_pasted.py"], work, env)
    assert "2 passed" in r.stdout, r.stdout
    # the command line from the venv
    pt2serde = str(venv / "bin" / "pt2serde")
    assert _run([pt2serde, "--version"], work, env).stdout.startswith("pt2serde 0.")
    assert "parameters: 2 tensors" in _run([pt2serde, "show", "--summary", "model.pt2s"], work, env).stdout
    assert _run([pt2serde, "check", "model.pt2s"], work, env).stdout.rstrip().endswith("OK")
