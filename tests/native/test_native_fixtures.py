"""Every frozen fixture (fixtures/v*/) emits from its artifact (through the upgraders) and its native
program reproduces the stored eager results: outputs, mutated inputs and buffers. Fixtures of
constructs the emitter refuses on purpose (_native_util.UNSUPPORTED) must be refused with their
error."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import torch.utils._pytree as pytree

from native.emit.emitter import emit_artifact
from native.run.runtime import Method
from serde.bridge.bundle import load_tree
from tests.native._native_util import UNSUPPORTED, assert_same

ROOT = Path(__file__).resolve().parents[2] / "fixtures"
FIXTURES = sorted(p.parent for p in ROOT.glob("v*/*/model.pt2s"))


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_fixture_emits_and_runs_like_its_stored_results(fixture: Path):
    if fixture.name in UNSUPPORTED:
        from serde.errors import UnsupportedConstructError

        with pytest.raises(UnsupportedConstructError, match=re.escape(UNSUPPORTED[fixture.name])):
            emit_artifact(fixture / "model.pt2s")
        return
    method = Method(emit_artifact(fixture / "model.pt2s"), check=True)
    runs = load_tree(fixture / "io.json")
    assert runs
    for i, run in enumerate(runs):
        args, kwargs = copy.deepcopy(run["inputs"])
        out = method.run(*args, **kwargs)
        where = f"{fixture.name} run {i}"
        assert_same(out, run["outputs"], f"{where} outputs")
        assert_same([list(args), kwargs], run["inputs_after"], f"{where} inputs after the call")
        state = method.state_dict()
        for name, want in run["buffers_after"].items():
            assert_same(state[name], want, f"{where} buffer {name!r}")


def test_fixtures_exist():
    assert len(FIXTURES) >= 12


def test_harness_notices_a_wrong_output():
    fixture = next(f for f in FIXTURES if f.name == "mlp")
    run = load_tree(fixture / "io.json")[0]
    out = Method(emit_artifact(fixture / "model.pt2s")).run(*copy.deepcopy(run["inputs"][0]))
    leaves, spec = pytree.tree_flatten(out)
    leaves[0] = leaves[0] + 1e-2
    with pytest.raises(AssertionError):
        assert_same(pytree.tree_unflatten(leaves, spec), run["outputs"], "perturbed")
