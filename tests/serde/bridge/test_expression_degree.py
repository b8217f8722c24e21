"""The degree cap (Limits.max_degree) against real programs: the sizes torch writes, even of a
tensor whose every dim is dynamic, stay under it; a stored check past it is refused."""

from __future__ import annotations

import io

import pytest
import torch
from torch.export import Dim

import serde
from serde.core.expr.guards.parse import Parser
from serde.errors import UnsupportedConstructError


class _Flatten(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(-1)[1:] * 2


def test_a_flattened_tensor_with_ten_dynamic_dims_round_trips():
    # Its size is the product of ten symbols, a monomial: degree 1 as factoring costs it.
    torch.manual_seed(0)
    ep = torch.export.export(_Flatten(), (torch.randn(*([2] * 10)),),
                             dynamic_shapes=({i: Dim(f"d{i}", min=2, max=8) for i in range(10)},))
    buf = io.BytesIO()
    serde.save(ep, buf)
    loaded = serde.load(io.BytesIO(buf.getvalue()))
    y = torch.randn(3, 2, 2, 2, 2, 2, 2, 2, 2, 4)
    assert torch.equal(loaded.module()(y), ep.module()(y))


def test_a_check_past_the_degree_cap_is_refused_naming_it():
    size = "L['x'].size()[0]"
    Parser("g").guard(" * ".join(f"L['x'].size()[{i}]" for i in range(10)) + " >= 2", "g")
    text = " * ".join(f"({size} + {i})" for i in range(1, 10)) + " >= 2"
    with pytest.raises(UnsupportedConstructError, match=r"its degree is 9, more than Limits\.max_degree=8"):
        Parser("g").guard(text, "g")
