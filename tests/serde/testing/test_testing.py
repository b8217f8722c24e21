"""serde.testing's comparison of programs that draw random numbers.

Both programs must run from the same random state, or a faithful round trip of a program with
dropout in train mode, ``torch.rand`` or a lifted ``torch.Generator`` would compare unequal; and
running them must not advance anything the caller or the programs own.
"""

from __future__ import annotations

import io

import pytest
import torch

import serde
from serde.testing import ProgramMismatch, assert_programs_equal, assert_roundtrip


class _GlobalDraws(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.nn.functional.dropout(self.lin(x), 0.5, training=True) + torch.rand(4)


class _GeneratorDraws(torch.nn.Module):
    def __init__(self, seed: int) -> None:
        super().__init__()
        self.gen = torch.Generator().manual_seed(seed)

    def forward(self, x):
        return x + torch.randn(4, generator=self.gen)


def _generators(ep: torch.export.ExportedProgram) -> list[torch.Tensor]:
    return [c.get_state() for c in ep.constants.values() if isinstance(c, torch.Generator)]


@pytest.mark.parametrize("model", [_GlobalDraws(), _GeneratorDraws(3)], ids=["global_rng", "lifted_generator"])
def test_programs_that_draw_compare_equal_to_their_round_trip_and_nothing_advances(model):
    torch.manual_seed(0)
    ep = torch.export.export(model, (torch.ones(2, 4),))
    before_program = _generators(ep)
    before_caller = torch.get_rng_state()
    loaded = assert_roundtrip(ep)
    assert torch.equal(torch.get_rng_state(), before_caller)
    assert all(torch.equal(a, b) for a, b in zip(_generators(ep), before_program, strict=True))
    assert all(torch.equal(a, b) for a, b in zip(_generators(loaded), before_program, strict=True))


def test_a_generator_in_another_state_is_a_mismatch():
    x = (torch.ones(4),)
    a = torch.export.export(_GeneratorDraws(3), x)
    b = torch.export.export(_GeneratorDraws(4), x)
    buf = io.BytesIO()
    serde.save(b, buf)
    with pytest.raises(ProgramMismatch, match=r"constants\['lifted_custom_0'\]: custom object state differs"):
        assert_programs_equal(a, serde.load(buf.getvalue()))
