"""Every corrupted byte of a saved artifact is detected by serde.load.

The writer is deterministic, so the reader accepts exactly the bytes it would write: member data is
covered by its XXH3-128 (in the manifest; serde.load does not recompute the sha256 of a member that
has one), the manifest by its CRC-32, and every byte of zip framing by a
comparison of each header field with what the writer writes (of the bytes themselves with the
regenerated framing, for a file with zip64 records).
"""

from __future__ import annotations

import io
import random

import pytest
import torch

import serde
from serde.errors import SerializeError


class _Small(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 2)
        self.register_buffer("scale", torch.tensor([0.5, 2.0]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.lin(x)) * self.scale


@pytest.fixture(scope="module")
def artifact() -> bytes:
    torch.manual_seed(0)
    ep = torch.export.export(_Small(), (torch.randn(4, 3),))
    buf = io.BytesIO()
    serde.save(ep, buf, extra_files={"note.txt": "hello"})
    data = buf.getvalue()
    serde.load(data)  # the intact artifact loads: otherwise every flip "is detected" for free
    return data


def _undetected(data: bytes, flips: list[dict[int, int]]) -> list[dict[int, int]]:
    missed = []
    for flip in flips:
        bad = bytearray(data)
        for at, mask in flip.items():
            bad[at] ^= mask
        try:
            serde.load(bytes(bad))
        except SerializeError:
            continue
        missed.append(flip)  # any other exception propagates and fails the test by itself
    return missed


@pytest.mark.parametrize("mask", [0xFF, 0x01])
def test_every_single_byte_flip_is_detected(artifact: bytes, mask: int) -> None:
    assert _undetected(artifact, [{at: mask} for at in range(len(artifact))]) == []


def _random_flips(data: bytes, n: int, seed: int) -> list[dict[int, int]]:
    rng = random.Random(seed)
    flips = []
    for _ in range(n):
        k = rng.choice([2, 3, 4, 8, 32])
        if rng.random() < 0.5:  # a burst, as a bad sector or a torn write gives
            lo = rng.randrange(len(data) - k)
            flips.append({at: rng.randrange(1, 256) for at in range(lo, lo + k)})
        else:
            flips.append({rng.randrange(len(data)): rng.randrange(1, 256) for _ in range(k)})
    return flips


def test_random_multi_byte_flips_are_detected(artifact: bytes) -> None:
    assert _undetected(artifact, _random_flips(artifact, 2000, seed=1)) == []


@pytest.mark.slow
def test_exhaustive_flips_are_detected(artifact: bytes) -> None:
    # every bit of every byte, then many random multi-byte flips
    assert _undetected(artifact, [{at: 1 << b} for at in range(len(artifact)) for b in range(8)]) == []
    assert _undetected(artifact, _random_flips(artifact, 50000, seed=2)) == []
