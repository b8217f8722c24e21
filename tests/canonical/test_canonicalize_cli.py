"""`pt2serde canonicalize IN OUT` on real artifacts."""

from __future__ import annotations

import functools
import subprocess
import sys

import pytest
import torch

import serde
from serde.archive import read_archive
from serde.archive.artifact import write_artifact
from serde.bridge.program import serialize_program
from serde.bridge.weights import serialize_weights
from serde.cli import main
from serde.testing import zoo


@functools.cache
def _ep(name: str):
    return zoo.export_case(zoo.get(name))


def _raw_artifact(ep, path) -> None:
    """An artifact as torch names and orders it: serialized but never canonicalized."""
    weights, payloads = serialize_weights(ep.state_dict, dict(ep.constants), ep.example_inputs)
    write_artifact(path, serialize_program(ep), weights, payloads, torch_version=str(torch.__version__))


@pytest.mark.parametrize("name", ["mlp", "cond", "dynamic_arith"])
def test_canonicalizing_a_raw_artifact_gives_what_save_writes(tmp_path, name, capsys):
    ep = _ep(name)
    raw, out, ref = tmp_path / "raw.pt2s", tmp_path / "out.pt2s", tmp_path / "ref.pt2s"
    _raw_artifact(ep, raw)
    serde.save(ep, ref)
    assert raw.read_bytes() != ref.read_bytes()
    assert main(["canonicalize", str(raw), "--check"]) == 1
    assert main(["canonicalize", str(raw), str(out)]) == 0
    assert "canonicalized" in capsys.readouterr().out
    assert out.read_bytes() == ref.read_bytes()
    assert main(["canonicalize", str(out), "--check"]) == 0
    torch.testing.assert_close(serde.load(out).module()(*ep.example_inputs[0]),
                               ep.module()(*ep.example_inputs[0]))


def test_debug_member_is_kept_rekeyed_or_dropped(tmp_path, capsys):
    ep = _ep("mlp")
    src, kept, dropped = tmp_path / "a.pt2s", tmp_path / "kept.pt2s", tmp_path / "dropped.pt2s"
    serde.save(ep, src, debug_info=True)
    assert main(["canonicalize", str(src), str(kept)]) == 0
    assert "already canonical" in capsys.readouterr().out
    assert kept.read_bytes() == src.read_bytes()
    assert main(["canonicalize", str(src), str(dropped), "--drop-debug"]) == 0
    assert "debug.json" in read_archive(str(kept)) and "debug.json" not in read_archive(str(dropped))
    traces = [n.meta.get("stack_trace") for n in serde.load(kept).graph.nodes if n.op == "call_function"]
    assert traces and all(traces)


def test_in_place_and_missing_output(tmp_path, capsys):
    ep = _ep("mlp")
    path = tmp_path / "m.pt2s"
    _raw_artifact(ep, path)
    assert main(["canonicalize", str(path), str(path)]) == 0
    assert main(["canonicalize", str(path), "--check"]) == 0
    assert main(["canonicalize", str(path)]) == 2
    assert "needs an OUTPUT" in capsys.readouterr().err


def test_damaged_input_is_a_clean_error(tmp_path, capsys):
    bad = tmp_path / "bad.pt2s"
    bad.write_bytes(b"not an archive")
    assert main(["canonicalize", str(bad), str(tmp_path / "o.pt2s")]) == 2
    assert "pt2serde canonicalize: error:" in capsys.readouterr().err


def test_subcommand_does_not_import_torch():
    code = "import sys, serde.cli.canonicalize; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
