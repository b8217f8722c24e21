"""Artifacts written by another torch release emit through the operator upgraders (as serde.load
reads them) and their native programs compute the writer's outputs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from native.emit.emitter import emit_artifact
from native.run.runtime import Method
from serde.bridge.bundle import load_tree
from serde.errors import OperatorChangeError
from serde.opsets import release_of

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "operators"
RUNNING = release_of(torch.__version__)

CASES = [("torch-2.13.0", "cholesky"), ("torch-2.13.0", "qr"), ("torch-2.13.0", "cdist_backward"),
         ("torch-2.14.1", "cdist_backward"), ("torch-2.14.1", "pdist_backward"),
         pytest.param("torch-2.14.1", "linalg_polar", marks=pytest.mark.skipif(
             RUNNING < (2, 14), reason="linalg_polar is new in torch 2.14: refused here (next test)"))]


@pytest.mark.parametrize("folder, name", CASES)
def test_an_artifact_of_either_release_emits_and_computes_the_writers_outputs(folder, name):
    ref = load_tree(FIXTURES / folder / f"{name}.outputs.json")
    out = Method(emit_artifact(FIXTURES / folder / f"{name}.pt2s"), check=True).run(*ref["inputs"])
    out = list(out) if isinstance(out, (tuple, list)) else [out]
    assert len(out) == len(ref["outputs"])
    for i, (a, b) in enumerate(zip(out, ref["outputs"], strict=True)):
        assert torch.equal(a, b), f"output {i}"


@pytest.mark.skipif(RUNNING != (2, 13), reason="runs under torch 2.13, which lacks linalg_polar")
def test_an_operator_this_torch_lacks_is_refused_at_emit_naming_it():
    with pytest.raises(OperatorChangeError, match=r"aten::linalg_polar\.default: it was introduced in torch 2\.14"):
        emit_artifact(FIXTURES / "torch-2.14.1" / "linalg_polar.pt2s")
