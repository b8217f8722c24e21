"""Byte stability of real artifacts: real exports, real files, real processes."""

from __future__ import annotations

import hashlib
import io

import pytest

import serde
from serde import zoo
from tests.canonical._procs import save_in_subprocess, save_model_source

MODEL_A = """
import torch

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.left = torch.nn.Linear(8, 8)
        self.right = torch.nn.Linear(8, 8)

    def forward(self, x, y):
        p = self.left(x).relu()
        q = self.right(y).sigmoid()
        parts = torch.split(p, 4, dim=1)
        return p * q + parts[0].sum(), q - 1
"""

# Same program: other local names, the two independent branches computed in the other order.
# (The parameter names x, y stay: they are the calling convention, usable as keywords.)
MODEL_B = """
import torch

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.left = torch.nn.Linear(8, 8)
        self.right = torch.nn.Linear(8, 8)

    def forward(self, x, y):
        gate = self.right(y).sigmoid()
        hidden = self.left(x).relu()
        chunks = torch.split(hidden, 4, dim=1)
        return hidden * gate + chunks[0].sum(), gate - 1
"""

DRIVER = """
import importlib.util, sys, torch, serde
from torch.export import Dim
spec = importlib.util.spec_from_file_location("user_model", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
torch.manual_seed(0)
model = mod.Net().eval()
args = (torch.randn(4, 8), torch.randn(4, 8))
batch = Dim("batch", min=2, max=64)
names = list(model.forward.__code__.co_varnames[1:3])
ep = torch.export.export(model, args, dynamic_shapes={names[0]: {0: batch}, names[1]: {0: batch}})
if sys.argv[3] == "aten":
    ep = ep.run_decompositions()
serde.save(ep, sys.argv[2])
"""


def _export_in_subprocess(tmp_path, source: str, folder: str, filename: str, ir: str) -> bytes:
    return save_model_source(tmp_path, DRIVER, source, folder, filename, ir)


@pytest.mark.parametrize("ir", ["training", "aten"])
def test_same_model_from_two_files_and_processes_gives_identical_bytes(tmp_path, ir):
    # (a) and (g): different source files, paths and processes; default save
    a = _export_in_subprocess(tmp_path, MODEL_A, "first", "model_a.py", ir)
    b = _export_in_subprocess(tmp_path, MODEL_A, "second/nested/dir", "other_name.py", ir)
    assert hashlib.sha256(a).hexdigest() == hashlib.sha256(b).hexdigest()


def test_renamed_locals_and_reordered_statements_give_identical_bytes(tmp_path):
    # (b): MODEL_B renames every local and computes the independent branches in the other order
    a = _export_in_subprocess(tmp_path, MODEL_A, "a", "m.py", "training")
    b = _export_in_subprocess(tmp_path, MODEL_B, "b", "m.py", "training")
    assert hashlib.sha256(a).hexdigest() == hashlib.sha256(b).hexdigest()


def test_debug_info_does_not_change_the_program_member(tmp_path):
    from serde.archive import read_archive

    ep = zoo.export_case(zoo.get("mlp"))
    plain, debug = io.BytesIO(), io.BytesIO()
    serde.save(ep, plain)
    serde.save(ep, debug, debug_info=True)
    pa, pb = read_archive(plain.getvalue()), read_archive(debug.getvalue())
    assert bytes(pa.member("program.json")) == bytes(pb.member("program.json"))
    assert "debug.json" in pb and "debug.json" not in pa


@pytest.mark.parametrize("name", [c.name for c in zoo.CASES])
def test_resaving_a_loaded_artifact_gives_the_same_bytes(name):
    # (f): save(load(A)) == A, including multi-output views (split) whose offsets torch's own round trip changes
    a = io.BytesIO()
    serde.save(zoo.export_case(zoo.get(name)), a)
    b = io.BytesIO()
    serde.save(serde.load(a.getvalue()), b)
    assert a.getvalue() == b.getvalue()


def _savable_breadth_cases() -> list[str]:
    from serde import zoo_breadth

    return [c.name for c in zoo_breadth.CASES]


@pytest.mark.parametrize("name", _savable_breadth_cases())
def test_resaving_a_loaded_breadth_artifact_gives_the_same_bytes(name, breadth_program):
    """The same for control flow, vmap fences (associative_scan), mixed tuples (flex_attention),
    custom ops, unbacked symbols, custom objects and joint graphs."""
    a = io.BytesIO()
    serde.save(breadth_program(name), a)
    b = io.BytesIO()
    serde.save(serde.load(a.getvalue()), b)
    assert a.getvalue() == b.getvalue()


_BREADTH_DRIVER = """
import sys
import serde
from serde import zoo_breadth
for name in sys.argv[2:]:
    serde.save(zoo_breadth.export_case(zoo_breadth.get(name)), f"{sys.argv[1]}/{name}.pt2s")
"""


def test_breadth_programs_are_byte_stable_across_processes(tmp_path):
    """Two processes (different hash seeds, different object ids) write the same bytes for vmap
    fences, mixed tuples, Piecewise conditions, unbacked symbols and control flow."""
    names = ["associative_scan", "flex_attention_aten", "sym_scalars", "unbacked", "cond_nested"]
    digests = []
    for run, seed in (("one", "1"), ("two", "2")):
        out = tmp_path / run
        out.mkdir()
        save_in_subprocess(_BREADTH_DRIVER, str(out), *names, hash_seed=seed)
        digests.append({n: hashlib.sha256((out / f"{n}.pt2s").read_bytes()).hexdigest() for n in names})
    assert digests[0] == digests[1]
