"""Foreign archive: a real torch.export.save file (pickle inside) handed to the pt2serde loader."""

from __future__ import annotations

import io

import torch

from serde.archive import TorchArchiveError
from tests.serde.attacks._attack_kit import Base

ERROR = TorchArchiveError
MATCH = r"written by torch\.export\.save.*pt2serde import IN OUT"


def build(base: Base) -> bytes:
    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(3, 2)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(x).relu()

    torch.manual_seed(0)
    ep = torch.export.export(Tiny(), (torch.randn(2, 3),))
    buf = io.BytesIO()
    torch.export.save(ep, buf)
    return buf.getvalue()
