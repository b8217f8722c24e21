"""A seeded structural fuzzer for the read path of big files.

Files of 8 MB and more are read by parallel positional reads whose plan (which spans get buffers
of their own) comes from the zip directory before anything is verified. These tests change the
zip structure of a real artifact of that size, field by field (local headers, directory records,
end record) and byte by byte (in the structure and in the big members' data), and check, for a
plain read and for ``mmap=True``, that every changed file is refused with a ``SerializeError`` and
nothing else, and that an unchanged file reads back exactly.
"""

from __future__ import annotations

import os
import random
import struct
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

import serde
from serde import archive
from serde.errors import SerializeError
from serde.fileio import reader
from tests.serde.attacks._attack_kit import entries

FAST_CASES = 160
SLOW_CASES = 4_000

_EOCD_SIZE = 22
_LFH_SIZE = 30
# (name, offset in the record, width in bytes) of every field a mutation may change
_CD_FIELDS = [("made_by", 4, 2), ("needed", 6, 2), ("flags", 8, 2), ("method", 10, 2), ("time", 12, 2),
              ("date", 14, 2), ("crc", 16, 4), ("csize", 20, 4), ("usize", 24, 4), ("nlen", 28, 2),
              ("elen", 30, 2), ("clen", 32, 2), ("disk", 34, 2), ("iattr", 36, 2), ("eattr", 38, 4),
              ("offset", 42, 4)]
_LFH_FIELDS = [("needed", 4, 2), ("flags", 6, 2), ("method", 8, 2), ("time", 10, 2), ("date", 12, 2),
               ("crc", 14, 4), ("csize", 18, 4), ("usize", 22, 4), ("nlen", 26, 2), ("elen", 28, 2)]
_EOCD_FIELDS = [("disk", 4, 2), ("cd_disk", 6, 2), ("disk_entries", 8, 2), ("entries", 10, 2),
                ("cd_size", 12, 4), ("cd_offset", 16, 4), ("comment", 20, 2)]


class _Big(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(1024, 1024)   # 4 MB: a member with a buffer of its own
        self.b = torch.nn.Linear(1024, 1280)   # 5 MB
        self.c = torch.nn.Linear(64, 64)       # 16 kB: stays in the whole-file buffer

    def forward(self, x):
        return self.c(self.b(self.a(x))[:, :64])


@dataclass(frozen=True)
class _Layout:
    """Where the zip structures of the artifact lie (parsed by the attack kit, not by the reader)."""

    eocd: int
    records: list[int]          # offset of each central directory record
    headers: list[int]          # offset of each local header
    data: list[tuple[int, int]]  # (start, size) of each member's data


def _layout(data: bytes) -> _Layout:
    es = entries(data)  # asserts a plain (non-zip64) zip: no zip64 at this size
    return _Layout(len(data) - _EOCD_SIZE, [e.cd_pos for e in es], [e.lho for e in es],
                   [(e.data_start, e.size) for e in es])


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> tuple[bytes, _Layout, dict[str, bytes]]:
    torch.manual_seed(0)
    ep = torch.export.export(_Big().eval(), (torch.randn(2, 1024),))
    path = tmp_path_factory.mktemp("big") / "big.pt2s"
    serde.save(ep, path)
    data = path.read_bytes()
    assert len(data) >= reader._BIG_READ_BYTES
    lay = _layout(data)
    assert sum(size >= 1 << 20 for _, size in lay.data) >= 2  # the big-member path is taken
    contents = archive.read_archive(path)
    members = {n: bytes(contents.member(n)) for n in contents.names}
    return data, lay, members


def _values(rng: random.Random, orig: int, width: int, data: bytes, lay: _Layout) -> int:
    top = (1 << (8 * width)) - 1
    interesting = [0, 1, top, orig + 1, orig - 1, orig + 64, orig - 64, orig + 4096, orig - 4096,
                   orig ^ (1 << rng.randrange(8 * width)), rng.randrange(top + 1), len(data), len(data) - 1,
                   *(s for s, _ in lay.data), *(s + n for s, n in lay.data), *lay.headers, lay.eocd]
    return rng.choice(interesting) & top


def _mutate(rng: random.Random, data: bytes, lay: _Layout) -> tuple[str, bytes]:
    out = bytearray(data)
    kind = rng.choice(["cd", "lfh", "eocd", "flip_structure", "flip_big_data", "resize"])
    if kind in ("cd", "lfh", "eocd"):
        fields, base = {"cd": (_CD_FIELDS, rng.choice(lay.records)),
                        "lfh": (_LFH_FIELDS, rng.choice(lay.headers)),
                        "eocd": (_EOCD_FIELDS, lay.eocd)}[kind]
        name, off, width = rng.choice(fields)
        fmt = "<H" if width == 2 else "<I"
        orig = struct.unpack_from(fmt, out, base + off)[0]
        new = _values(rng, orig, width, data, lay)
        struct.pack_into(fmt, out, base + off, new)
        return f"{kind}@{base}.{name}: {orig} -> {new}", bytes(out)
    if kind == "flip_structure":
        regions = [(h, _LFH_SIZE) for h in lay.headers] + [(lay.records[0], len(data) - lay.records[0])]
        start, n = rng.choice(regions)
        at = start + rng.randrange(n)
    elif kind == "flip_big_data":
        start, n = rng.choice([s for s in lay.data if s[1] >= 1 << 20])
        at = start + rng.choice([0, n - 1, rng.randrange(n)])
    else:
        cut = rng.choice([-1, -7, 1, 13])
        if cut < 0:
            return f"truncated by {-cut}", bytes(out[:cut])
        at = rng.choice([lay.records[0], lay.headers[-1], len(data)])
        return f"{cut} bytes inserted at {at}", bytes(out[:at]) + b"\0" * cut + bytes(out[at:])
    out[at] ^= 1 << rng.randrange(8)
    return f"bit flipped at {at} ({kind})", bytes(out)


def _run(big, tmp_path: Path, n: int, seed: int) -> dict[str, int]:
    data, lay, members = big
    rng = random.Random(seed)
    path = tmp_path / "case.pt2s"
    outcomes = {"refused": 0, "unchanged": 0}
    for i in range(n):
        what, mutated = _mutate(rng, data, lay)
        path.write_bytes(mutated)
        for use_mmap in (False, True):
            where = f"case {i} ({what}), mmap={use_mmap}"
            try:
                got = archive.read_archive(path, mmap=use_mmap)
            except SerializeError:
                assert mutated != data, f"{where}: an unchanged file was refused"
                outcomes["refused"] += 1
                continue
            except Exception as e:  # noqa: BLE001 - the point: nothing but SerializeError may escape
                pytest.fail(f"{where}: {type(e).__name__}: {e}")
            assert mutated == data, f"{where}: a changed file was read without an error"
            assert {k: bytes(got.member(k)) for k in got.names} == members, where
            outcomes["unchanged"] += 1
    os.remove(path)
    return outcomes


def test_changed_structure_is_always_refused(big, tmp_path):
    outcomes = _run(big, tmp_path, FAST_CASES, seed=0)
    assert outcomes["refused"] >= FAST_CASES  # both modes refused most cases: the mutator really changes files


@pytest.mark.slow
def test_changed_structure_is_always_refused_long(big, tmp_path):
    outcomes = _run(big, tmp_path, SLOW_CASES, seed=1)
    assert outcomes["refused"] >= SLOW_CASES


def test_the_unchanged_file_reads_back(big, tmp_path):
    data, _, members = big
    path = tmp_path / "same.pt2s"
    path.write_bytes(data)
    for use_mmap in (False, True):
        got = archive.read_archive(path, mmap=use_mmap)
        assert {k: bytes(got.member(k)) for k in got.names} == members
