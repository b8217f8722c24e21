"""An nn.Module passed as an input to the exported program.

torch.export exports it (its parameters and buffers become inputs) and torch.export.save stores it
by pickling the module into the example inputs; its load unpickles it. pt2serde never pickles, and
a module cannot be rebuilt from its tensors without running its class's code, so saving refuses it
with a message that says why and what to export instead: the module's tensors as a dict, applied
with torch.func.functional_call. That alternative round-trips like any program.
"""

from __future__ import annotations

import io

import pytest
import torch

import serde
from serde.errors import UnsupportedConstructError


class Apply(torch.nn.Module):
    def forward(self, x, m):
        return m(x).relu()


class ApplyParams(torch.nn.Module):
    """What the refusal suggests: the module's tensors as an input dict."""

    def __init__(self, template: torch.nn.Module) -> None:
        super().__init__()
        self.template = template

    def forward(self, x, params):
        return torch.func.functional_call(self.template, params, (x,)).relu()


def test_a_module_input_is_refused_saying_why_and_what_to_do(tmp_path) -> None:
    torch.manual_seed(0)
    ep = torch.export.export(Apply(), (torch.randn(2, 3), torch.nn.Linear(3, 3)))
    with pytest.raises(UnsupportedConstructError, match=r"an input is an nn\.Module \(torch\.nn\.modules\.linear\.Linear\)"
                                                         r".*pickling.*functional_call") as e:
        serde.save(ep, tmp_path / "m.pt2s")
    assert "in_spec" in str(e.value)
    assert not (tmp_path / "m.pt2s").exists()


def test_the_suggested_params_dict_round_trips() -> None:
    torch.manual_seed(0)
    lin = torch.nn.Linear(3, 3)
    params = dict(lin.named_parameters()) | dict(lin.named_buffers())
    ep = torch.export.export(ApplyParams(torch.nn.Linear(3, 3)), (torch.randn(2, 3), params))
    buf = io.BytesIO()
    serde.save(ep, buf)
    ours = serde.load(buf.getvalue()).module()
    other = torch.nn.Linear(3, 3)
    x = torch.randn(2, 3)
    new = {k: v.detach() for k, v in other.named_parameters()}
    assert torch.equal(ours(x, new), ep.module()(x, new))
    assert torch.equal(ours(x, new), other(x).relu())
