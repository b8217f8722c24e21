"""``pt2serde show --summary`` / ``--module`` / the pager, checked against torch's own view of the program."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from collections import Counter

import pytest
import torch

import serde
from serde import cli


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = torch.nn.Linear(16, 16)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 16))
        self.register_buffer("scale", torch.ones(16))

    def forward(self, x):
        x = x + self.attn(x).relu()
        return (x + self.mlp(x)) * self.scale


class Model(torch.nn.Module):
    def __init__(self, n: int = 6):
        super().__init__()
        torch.manual_seed(0)
        self.layers = torch.nn.ModuleList(Block() for _ in range(n))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    ep = torch.export.export(Model(), (torch.randn(3, 16),),
                             dynamic_shapes=({0: torch.export.Dim("batch", min=1, max=64)},))
    path = tmp_path_factory.mktemp("show") / "m.pt2s"
    serde.save(ep, path, extra_files={"notes.txt": "hi"})
    return ep, path


def test_summary_counts_match_torch(saved, capsys):
    ep, path = saved
    assert cli.main(["show", "--summary", str(path)]) == 0
    out = capsys.readouterr().out
    calls = [n for n in ep.graph.nodes if n.op == "call_function"]
    assert f"nodes: {len(calls)} ({len(calls)} in the top graph, 0 in subgraphs)" in out
    histogram = Counter(str(n.target) for n in calls)
    for target, count in histogram.items():
        assert f"{count:>6}  torch.ops.{target}" in out
    params = list(ep.state_dict.items())
    n_params = sum(1 for k, v in params if isinstance(v, torch.nn.Parameter))
    elements = sum(v.numel() for v in ep.parameters())
    nbytes = sum(v.numel() * v.element_size() for v in ep.parameters())
    assert f"parameters: {n_params} tensors, {elements:,} elements, {nbytes:,} bytes in {n_params} storages" in out
    assert "buffers: 6 tensors, 96 elements, 384 bytes in 6 storages" in out
    assert "dynamic dims:\n  x: f32[s0, 16]\n  range s0: [1, 64]" in out
    assert "extra files: notes.txt (2 bytes)" in out


def test_module_filter_shows_exactly_that_module(saved, capsys):
    ep, path = saved
    assert cli.main(["show", "--module", "layers.2.mlp", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    body = lines[1:]
    expected = [n for n in ep.graph.nodes if n.op == "call_function"
                and list(n.meta.get("nn_module_stack", {}).values())[-1][0].startswith("layers.2.mlp")]
    assert len(body) == len(expected) == 3
    assert all(line.split("  # ")[-1].startswith("layers.2.mlp.") for line in body)
    assert lines[0] == "# module layers.2.mlp: 3 lines"


def test_unknown_module_lists_the_known_ones(saved, capsys):
    _, path = saved
    assert cli.main(["show", "--module", "layers.99", str(path)]) == 2
    err = capsys.readouterr().err
    assert "no node runs in that module" in err and "layers.0.attn" in err


def test_a_terminal_gets_the_pager_and_a_pipe_does_not(saved, tmp_path):
    _, path = saved
    paged = tmp_path / "paged.txt"
    env = dict(os.environ, PAGER=f"cat > {paged}", PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    main, child = pty.openpty()
    try:
        r = subprocess.run([sys.executable, "-m", "serde.cli", "show", str(path)], stdin=child, stdout=child,
                           stderr=subprocess.PIPE, env=env, timeout=120)
    finally:
        os.close(child)
        os.close(main)
    assert r.returncode == 0, r.stderr
    assert paged.read_text().startswith("# pt2serde program: schema")
    piped = subprocess.run([sys.executable, "-m", "serde.cli", "show", str(path)], capture_output=True,
                           text=True, env=env, timeout=120)
    assert piped.stdout.startswith("# pt2serde program: schema") and paged.stat().st_size > 0
