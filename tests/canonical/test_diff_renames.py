"""Renames that an upstream change causes fold into one line of ``pt2serde diff``; --json keeps them."""

from __future__ import annotations

import json

import pytest
import torch

import serde
from serde import cli


class Layer(torch.nn.Module):
    def __init__(self, scale: bool):
        super().__init__()
        self.q, self.k, self.v, self.o = (torch.nn.Linear(32, 32) for _ in range(4))
        self.ln = torch.nn.LayerNorm(32)
        self.scale = scale

    def forward(self, x):
        b, t, c = x.shape
        h = self.ln(x)
        if self.scale:
            h = h * 1.5

        def heads(y):
            return y.view(b, t, 4, 8).transpose(1, 2)

        a = torch.nn.functional.scaled_dot_product_attention(heads(self.q(h)), heads(self.k(h)), heads(self.v(h)))
        return x + self.o(a.transpose(1, 2).reshape(b, t, c))


class SmallBert(torch.nn.Module):
    def __init__(self, scale: bool):
        super().__init__()
        torch.manual_seed(0)
        self.layers = torch.nn.ModuleList(Layer(scale) for _ in range(2))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    d = tmp_path_factory.mktemp("bert")
    paths = []
    for scale in (False, True):
        p = d / f"bert_{int(scale)}.pt2s"
        serde.save(torch.export.export(SmallBert(scale), (torch.randn(2, 5, 32),)), p)
        paths.append(str(p))
    return paths


def test_text_folds_induced_renames_into_one_line(pair, capsys):
    assert cli.main(["diff", *pair]) == 1
    text = capsys.readouterr().out
    assert "renamed 12 nodes whose structure is unchanged" in text
    assert "(name)" not in text
    assert text.count("  added graph.nodes[") == 2
    assert "8 differences: 6 changed, 2 added, 0 removed, plus 12 nodes renamed" in text


def test_json_keeps_every_rename(pair, capsys):
    assert cli.main(["diff", "--json", *pair]) == 1
    report = json.loads(capsys.readouterr().out)
    renames = [c for c in report["changes"] if c["fields"] == ["name"]]
    assert len(report["changes"]) == 20 and len(renames) == 12
    assert all(c["a"] != c["b"] for c in renames)


def test_a_rename_alone_is_not_folded():
    from canonical.diff import Change, DiffReport

    only = DiffReport(changes=[Change(section="graph", kind="changed", where="graph.nodes[x]",
                                      a="x = f()", b="y = f()", fields=["name"])])
    assert "changed graph.nodes[x] (name)" in only.format_text()
