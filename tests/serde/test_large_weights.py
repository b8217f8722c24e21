"""Large weights: files of 8 MB and more are read by parallel positional reads into an anonymous
mapping, or mapped copy-on-write with ``load(..., mmap=True)``. Both must give the same program,
bit for bit, and the mapped one must never write to, or be changed by replacing, the file."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
import torch

import serde
from serde import archive
from serde.archive import ChecksumMismatchError
from serde.testing import assert_programs_equal


class _Wide(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(1024, 1024)   # 4 MB
        self.b = torch.nn.Linear(1024, 1536)   # 6 MB
        self.register_buffer("scale", torch.full((1536,), 0.5))

    def forward(self, x):
        return self.b(self.a(x).relu()) * self.scale


@pytest.fixture(scope="module")
def wide(tmp_path_factory) -> tuple[torch.export.ExportedProgram, Path]:
    torch.manual_seed(0)
    ep = torch.export.export(_Wide().eval(), (torch.randn(2, 1024),))
    path = tmp_path_factory.mktemp("wide") / "wide.pt2s"
    serde.save(ep, path)
    assert path.stat().st_size >= archive._BIG_READ_BYTES  # takes the parallel-read path
    return ep, path


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("mmap", [False, True], ids=["read", "mmap"])
def test_large_weights_come_back_bit_exact(wide, mmap):
    ep, path = wide
    loaded = serde.load(path, mmap=mmap)
    assert_programs_equal(ep, loaded)
    for name, t in ep.state_dict.items():
        assert torch.equal(loaded.state_dict[name], t), name
    with open(path, "rb") as f:  # a file object at offset 0 maps too
        assert_programs_equal(ep, serde.load(f, mmap=mmap))


def test_mapped_weights_are_copy_on_write(wide):
    ep, path = wide
    before = _sha(path)
    loaded = serde.load(path, mmap=True)
    w = loaded.state_dict["a.weight"]
    with torch.no_grad():
        w.add_(1.0)
    assert torch.equal(w, ep.state_dict["a.weight"] + 1.0)
    assert _sha(path) == before
    assert torch.equal(serde.load(path, mmap=True).state_dict["a.weight"], ep.state_dict["a.weight"])


def test_saving_over_a_mapped_artifact_leaves_the_loaded_program_intact(wide, tmp_path):
    ep, src = wide
    path = tmp_path / "model.pt2s"
    path.write_bytes(src.read_bytes())
    loaded = serde.load(path, mmap=True)
    x = torch.randn(2, 1024)
    expected = ep.module()(x)
    other = torch.export.export(_Wide().eval(), (torch.randn(2, 1024),))
    serde.save(other, path)  # atomic rename: the mapping keeps the old file's pages
    torch.testing.assert_close(loaded.module()(x), expected, rtol=0, atol=0)


def test_mapped_corrupt_payload_is_still_caught(wide, tmp_path):
    _, src = wide
    data = bytearray(src.read_bytes())
    contents = archive.read_archive(bytes(data))
    name = max((n for n in contents.names if n.startswith("data/")), key=lambda n: len(contents.member(n)))
    start = bytes(data).index(bytes(contents.member(name)[:64]))
    data[start + 1000] ^= 0xFF
    bad = tmp_path / "bad.pt2s"
    bad.write_bytes(bytes(data))
    with pytest.raises(ChecksumMismatchError, match=name):
        serde.load(bad, mmap=True)
    with pytest.raises(ChecksumMismatchError, match=name):
        serde.load(bad)


def test_mmap_of_bytes_and_a_positioned_file_falls_back_to_reading(wide, tmp_path):
    ep, src = wide
    assert_programs_equal(ep, serde.load(src.read_bytes(), mmap=True))
    prefixed = tmp_path / "prefixed.bin"
    prefixed.write_bytes(b"HEAD" + src.read_bytes())
    with open(prefixed, "rb") as f:
        f.seek(4)
        assert_programs_equal(ep, serde.load(f, mmap=True))


def test_parallel_read_reports_a_short_file(tmp_path):
    path = tmp_path / "short.bin"
    payload = os.urandom(3 * archive._READ_CHUNK + 123)
    path.write_bytes(payload)
    fd = os.open(path, os.O_RDONLY)
    try:
        buf = archive._aligned_buffer(len(payload))
        assert archive._pread_parallel(fd, buf, 0) == len(payload)
        assert bytes(buf) == payload
        longer = archive._aligned_buffer(len(payload) + archive._READ_CHUNK)
        got = archive._pread_parallel(fd, longer, 0)
        assert got == len(payload)  # the first range that came up short decides
    finally:
        os.close(fd)
