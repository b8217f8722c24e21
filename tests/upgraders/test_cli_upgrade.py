"""`pt2serde upgrade IN OUT` rewrites a frozen 1.x artifact at the current version."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import serde
from serde.archive import read_archive
from serde.bridge.bundle import load_tree
from serde.core import wire
from serde.core.version import SCHEMA_VERSION
from serde.testing import zoo
from tests.compat.test_fixtures import as_frozen

V1 = Path(__file__).resolve().parents[2] / "fixtures" / "v1.0"


def test_upgrade_cli_rewrites_a_v1_fixture_at_the_current_version(tmp_path):
    src = V1 / "dynamic_arith" / "model.pt2s"
    out = tmp_path / "upgraded.pt2s"
    r = subprocess.run([sys.executable, "-m", "serde.cli", "upgrade", str(src), str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "schema 1.0 -> " in r.stdout
    assert read_archive(src).schema_version == (1, 0)
    assert read_archive(out).schema_version == SCHEMA_VERSION
    program = bytes(read_archive(out).member("program.json"))
    assert b"expr_str" not in program and b'"expr":' in program


def test_upgraded_artifact_runs_and_equals_a_fresh_save(tmp_path):
    src = V1 / "cond" / "model.pt2s"
    out = tmp_path / "upgraded.pt2s"
    subprocess.run([sys.executable, "-m", "serde.cli", "upgrade", str(src), str(out)],
                   check=True, capture_output=True, timeout=300)
    ep = serde.load(out)
    import copy

    import torch
    import torch.utils._pytree as pytree
    for run in load_tree(V1 / "cond" / "io.json"):
        args, kwargs = copy.deepcopy(run["inputs"])
        got = pytree.tree_leaves(ep.module()(*args, **kwargs))
        want = pytree.tree_leaves(run["outputs"])
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(g, w)
    fresh = tmp_path / "fresh.pt2s"
    serde.save(zoo.export_case(zoo.get("cond")), fresh)
    a = wire.decode_json(bytes(read_archive(out).member("program.json")))
    b = wire.decode_json(bytes(read_archive(fresh).member("program.json")))
    a.pop("torch_version"), b.pop("torch_version")
    # a 1.0 artifact cannot hold what later versions added (guards, 2.3): the rest must agree
    b.pop("guards", None)
    assert as_frozen(a) == as_frozen(b)  # (nor module types in the program)
