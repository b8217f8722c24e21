"""A loaded program's ShapeEnv (serde.bridge.loaded_env): while loading, what it records names the
artifact as its origin, so a first load does not import torch's compile stack to find a user
frame; after the load it records user frames as torch's own env does."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from torch.fx.experimental.symbolic_shapes import ShapeEnv

import serde
from serde.bridge.loaded_env import LOADING_LOC
from serde.testing import zoo


def _shape_env(ep):
    for n in ep.graph.nodes:
        v = n.meta.get("val")
        if isinstance(v, torch.Tensor) and hasattr(v, "fake_mode") and v.fake_mode.shape_env is not None:
            return v.fake_mode.shape_env
    raise AssertionError("no fake value with a ShapeEnv in the graph")


def test_ranges_name_the_artifact_and_later_records_name_the_user(tmp_path) -> None:
    ep = zoo.export_case(zoo.get("mlp"))  # a dynamic batch: one symbol with a range
    serde.save(ep, tmp_path / "m.pt2")
    loaded = serde.load(tmp_path / "m.pt2")
    env = _shape_env(loaded)
    assert type(env) is ShapeEnv  # torch's own class once the load is over
    slocs = list(env.var_to_range_sloc.values())
    # Each bound names the artifact: the file's range (LOADING_LOC), or the assumption a loaded
    # guard source adds (a dynamic size is at least 2), which guard_env names on its own.
    assert slocs and all(LOADING_LOC in str(s.upper) and "pt2serde:" in str(s.lower) for s in slocs)
    # The load is over: what a derivation records from here on names the user's frame, as torch's does.
    assert LOADING_LOC not in str(env._get_sloc())
    assert "test_loaded_env.py" in str(env._get_sloc())
    # And the loaded program behaves as the exported one at other sizes.
    x = torch.randn(5, *ep.example_inputs[0][0].shape[1:])
    torch.testing.assert_close(loaded.module()(x), ep.module()(x))


@pytest.mark.slow
def test_a_first_load_imports_no_compile_stack(tmp_path) -> None:
    # torch's env finds the user frame of a range by importing torch.export's tracer, AOTAutograd
    # and Inductor's code cache (its "uninteresting files"); a load in a fresh process needs none.
    ep = zoo.export_case(zoo.get("mlp"))
    serde.save(ep, tmp_path / "m.pt2")
    script = textwrap.dedent(f"""
        import sys
        import torch, serde
        import serde.testing.zoo  # the zoo's custom ops, as the exporting process had them
        serde.load({str(tmp_path / "m.pt2")!r})
        heavy = [m for m in ("torch.export._trace", "torch._functorch.aot_autograd", "torch._inductor.codecache")
                 if m in sys.modules]
        print("HEAVY", heavy)
    """)
    root = Path(__file__).resolve().parents[3]
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=root,
                         env={**__import__("os").environ, "PYTHONPATH": f"{root / 'src'}:{root}"}, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "HEAVY []" in out.stdout, out.stdout
