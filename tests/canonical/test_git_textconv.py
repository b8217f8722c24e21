"""`pt2serde show` as a git textconv, in a real temporary repository, on real saved models.

Setup under test (the snippet of docs/canonical.md):
    .gitattributes:  *.pt2s diff=pt2serde
    git config diff.pt2serde.textconv "pt2serde show"
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import serde
from canonical import render as R
from serde.archive.artifact import read_artifact
from serde.core.expr import ranges_by_text

PT2SERDE = Path(sys.executable).parent / "pt2serde"

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


class Stack(torch.nn.Module):
    """Twelve linear layers; `swap` replaces the activation after layer `swap` by a sigmoid."""

    def __init__(self, swap: int | None = None):
        super().__init__()
        torch.manual_seed(0)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(16, 16) for _ in range(12))
        self.swap = swap

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            x = torch.sigmoid(x) if i == self.swap else torch.relu(x)
        return x


def save(model, path):
    ep = torch.export.export(model, (torch.randn(4, 16),),
                             dynamic_shapes=({0: torch.export.Dim("batch", min=2, max=64)},))
    serde.save(ep, path)


def git(repo, *args, env):
    return subprocess.run(["git", "-c", "user.name=Test", "-c", "user.email=test@example.com", *args],
                          cwd=repo, env=env, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path):
    env = {
        "HOME": str(tmp_path),  # no global config of the person running the tests leaks in
        "GIT_CONFIG_NOSYSTEM": "1",
        "PATH": f"{PT2SERDE.parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "LANG": "C", "LC_ALL": "C",
    }
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q", env=env)
    (root / ".gitattributes").write_text("*.pt2s diff=pt2serde\n")
    git(root, "config", "diff.pt2serde.textconv", "pt2serde show", env=env)
    return root, env


def changed_lines(patch: str) -> list[str]:
    return [ln for ln in patch.splitlines()
            if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]


def test_git_diff_shows_the_changed_op_in_one_small_hunk(repo):
    root, env = repo
    model = root / "model.pt2s"
    save(Stack(), model)
    git(root, "add", ".gitattributes", "model.pt2s", env=env)
    git(root, "commit", "-q", "-m", "v1", env=env)
    save(Stack(swap=4), model)

    patch = git(root, "diff", "--unified=1", "--", "model.pt2s", env=env)
    assert "Binary files" not in patch
    assert len(re.findall(r"^@@ ", patch, flags=re.M)) == 1, patch
    lines = changed_lines(patch)
    removed = [ln for ln in lines if ln.startswith("-")]
    added = [ln for ln in lines if ln.startswith("+")]
    assert any("aten.relu.default(" in ln for ln in removed), patch
    assert any("aten.sigmoid.default(" in ln for ln in added), patch
    # The swapped op plus the few downstream lines whose names it reaches (canonical names are
    # local); names cascading through the 7 later layers would change ~28 lines.
    assert len(lines) <= 10, patch

    # the hunk is exactly what `pt2serde show` gives for the two files
    a = subprocess.run([str(PT2SERDE), "show", str(model)], env=env, check=True,
                       capture_output=True, text=True).stdout
    assert R.count_changed_lines(git(root, "show", "--textconv", "HEAD:model.pt2s", env=env), a) == len(lines)

    # without the textconv git only sees two different binaries
    raw = git(root, "diff", "--no-textconv", "--", "model.pt2s", env=env)
    assert "Binary files" in raw


def test_git_log_of_an_unchanged_program_is_empty(repo, tmp_path):
    root, env = repo
    model = root / "model.pt2s"
    save(Stack(), model)
    git(root, "add", ".", env=env)
    git(root, "commit", "-q", "-m", "v1", env=env)
    save(Stack(), model)  # exported and saved again, same program
    assert git(root, "diff", "--", "model.pt2s", env=env) == ""


def test_show_prints_the_real_program(tmp_path):
    path = tmp_path / "m.pt2s"
    save(Stack(swap=1), path)
    out = subprocess.run([str(PT2SERDE), "show", str(path)], check=True, capture_output=True, text=True).stdout
    art = read_artifact(path)
    assert out == R.render(art.program, art.weights)
    lines = out.splitlines()
    g = art.program.graph_module.graph
    # one line per node, in graph order, each naming its op
    body = lines[lines.index("graph:") + 1:]
    for node, line in zip(g.nodes, body, strict=False):
        assert line.startswith("  ") and node.target.removeprefix("torch.ops.") + "(" in line
    assert sum("aten.sigmoid.default(" in ln for ln in body) == 1
    assert sum("aten.relu.default(" in ln for ln in body) == 11
    # every parameter, with its dtype and shape
    for name, t in Stack().state_dict().items():
        assert any(ln.startswith(f"  {name}: f32[{', '.join(map(str, t.shape))}]") for ln in lines), name
    # the batch dimension is symbolic, with its range
    (sym, rc), = ranges_by_text(art.program.range_constraints).items()
    assert f"  {sym}: [{rc.min_val}, {rc.max_val}]" in lines and (rc.min_val, rc.max_val) == (2, 64)
    assert f"  user_input x: f32[{sym}, 16]" in lines
    bare = subprocess.run([str(PT2SERDE), "show", "--no-weights", str(path)], check=True, capture_output=True,
                          text=True).stdout
    assert bare == R.render(art.program) and "state_dict:" not in bare


def test_show_of_a_damaged_file_is_a_clean_error(tmp_path):
    bad = tmp_path / "bad.pt2s"
    bad.write_bytes(b"PK\x03\x04 not really a zip")
    r = subprocess.run([str(PT2SERDE), "show", str(bad)], capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.startswith("pt2serde show: error: ") and "Traceback" not in r.stderr


def test_diff_cli_exit_codes(tmp_path):
    a, b = tmp_path / "a.pt2s", tmp_path / "b.pt2s"
    save(Stack(), a)
    save(Stack(swap=0), b)
    same = subprocess.run([str(PT2SERDE), "diff", str(a), str(a)], capture_output=True, text=True)
    assert (same.returncode, same.stdout) == (0, "")
    differ = subprocess.run([str(PT2SERDE), "diff", str(a), str(b)], capture_output=True, text=True)
    assert differ.returncode == 1 and "aten.sigmoid.default" in differ.stdout
    missing = subprocess.run([str(PT2SERDE), "diff", str(a), str(tmp_path / "nope.pt2s")],
                             capture_output=True, text=True)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr
