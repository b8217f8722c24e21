"""``pt2serde demo`` runs end to end on the shared zoo's models: it exports, saves, loads, compares
and shows, and the artifact it keeps holds the zoo case's model, weights bit for bit."""

from __future__ import annotations

import torch

import serde
from serde import cli
from serde.cli.demo import MODELS
from serde.testing import zoo


def test_demo_keeps_the_zoo_model_and_prints_each_step(tmp_path, capsys):
    out = tmp_path / "mlp.pt2s"
    assert cli.main(["demo", "--model", "mlp", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    steps = [line.split()[0] for line in printed.splitlines() if line[:2] in {"1.", "2.", "3.", "4.", "5."}]
    assert steps == ["1.", "2.", "3.", "4.", "5."]
    assert "user_input x: f32[s0, 16]" in printed  # the show of the zoo's MLP, batch dynamic
    torch.manual_seed(0)  # as zoo.export_case seeds it
    model = zoo.get("mlp").build()[0]
    saved = serde.load(out).state_dict
    expected = model.state_dict()
    assert sorted(saved) == sorted(expected)
    assert all(torch.equal(saved[k], expected[k]) for k in expected)


def test_every_demo_model_is_a_zoo_case():
    assert [zoo.get(name).name for name in MODELS] == list(MODELS)
