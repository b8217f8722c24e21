"""Large weights: files of 8 MB and more are read by parallel positional reads (each member of
1 MB or more into a heap buffer of its own, the rest into an anonymous mapping), or mapped
copy-on-write with ``load(..., mmap=True)``. Both must give the same program,
bit for bit, and the mapped one must never write to, or be changed by replacing, the file."""

from __future__ import annotations

import hashlib
import os
import zlib
from pathlib import Path

import pytest
import torch

import serde
from serde import archive
from serde.archive import ChecksumMismatchError
from serde.fileio import reader
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
    assert path.stat().st_size >= reader._BIG_READ_BYTES  # takes the parallel-read path
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
    payload = os.urandom(3 * reader._READ_CHUNK + 123)
    path.write_bytes(payload)
    fd = os.open(path, os.O_RDONLY)
    try:
        buf, got, early, held = reader._pread_parallel(fd, len(payload), 0, reader.ANY_FILE, "x")
        assert (got, early, held) == (len(payload), {}, {})  # not a zip: no member is read apart
        assert bytes(buf) == payload
        _, got, _, _ = reader._pread_parallel(fd, len(payload) + reader._READ_CHUNK, 0, reader.ANY_FILE, "x")
        assert got == len(payload)  # the first range that came up short decides
    finally:
        os.close(fd)


# ---------------------------------------------------------------- what is verified when


def _payload_spans(data: bytes) -> dict[str, tuple[int, int]]:
    """Where each payload member sits in the intact file ``data``: name -> (start, end)."""
    contents = archive.read_archive(data)
    spans = {}
    for name in contents.names:
        if name.startswith("data/"):
            start = data.index(bytes(contents.member(name)))
            spans[name] = (start, start + contents.size(name))
    return spans


def _corrupt_every_payload(src: Path, dest: Path) -> None:
    data = bytearray(src.read_bytes())
    for start, end in _payload_spans(bytes(data)).values():
        data[(start + end) // 2] ^= 0xFF
    dest.write_bytes(bytes(data))


def test_show_and_diff_do_not_read_payloads_but_check_and_load_do(wide, tmp_path, capsys):
    from serde.cli import main

    _, src = wide
    bad = tmp_path / "bad.pt2s"
    _corrupt_every_payload(src, bad)
    assert main(["show", "--no-pager", str(bad)]) == 0
    assert main(["show", "--no-pager", "--summary", str(bad)]) == 0
    shown = capsys.readouterr().out
    assert "a.weight" in shown or "parameters" in shown
    assert main(["diff", str(src), str(bad)]) == 0  # weights.json is the same: nothing to read
    assert main(["check", str(bad)]) == 2
    assert "is corrupt" in capsys.readouterr().err
    for mmap in (False, True):
        with pytest.raises(ChecksumMismatchError, match="data/"):
            serde.load(bad, mmap=mmap)


def test_diff_verifies_the_payloads_it_reads(wide, tmp_path, capsys):
    from serde.cli import main

    ep, src = wide
    with torch.no_grad():
        ep.state_dict["scale"].add_(1.0)
    try:
        changed = tmp_path / "changed.pt2s"
        serde.save(ep, changed)
    finally:
        with torch.no_grad():
            ep.state_dict["scale"].sub_(1.0)
    assert main(["diff", str(src), str(changed)]) == 1
    assert "scale" in capsys.readouterr().out
    bad = tmp_path / "bad.pt2s"
    _corrupt_every_payload(changed, bad)
    # the changed buffer's bytes are read for its max abs difference, and verified first
    assert main(["diff", str(src), str(bad)]) == 2
    assert "is corrupt" in capsys.readouterr().err


def test_lazy_read_verifies_a_payload_each_time_it_is_asked_for_until_it_passes(wide, tmp_path):
    _, src = wide
    bad = tmp_path / "bad.pt2s"
    _corrupt_every_payload(src, bad)
    contents = archive.read_archive(bad, lazy=True)
    payloads = [n for n in contents.names if n.startswith("data/")]
    assert payloads
    for name in payloads:
        assert contents.size(name) > 0  # sizes come from the zip directory, nothing is read
        for _ in range(2):
            with pytest.raises(ChecksumMismatchError, match=name):
                contents.member(name)
    good = archive.read_archive(src, lazy=True)
    assert all(bytes(good.member(n)) == bytes(archive.read_archive(src).member(n)) for n in payloads)


def test_big_payloads_are_hashed_while_they_are_read(wide):
    # what the parallel read hands to the verification: the xxh3 of every big payload, at its
    # data offset, equal to the manifest's (a flipped byte in one fails the load above)
    _, src = wide
    data = src.read_bytes()
    manifest = archive.read_archive(data).manifest
    _, mapped, early, _ = reader.read_all(src, archive.reader._policy(archive.DEFAULT_LIMITS, str(src)))
    big = {name: span for name, span in _payload_spans(data).items() if span[1] - span[0] >= 1 << 20}
    assert not mapped and len(big) == 2
    assert early == {start: (end - start, manifest.members[name].xxh3) for name, (start, end) in big.items()}



def test_big_members_of_a_read_file_have_buffers_of_their_own(wide):
    # each payload of 1 MB or more is read into a heap buffer of its own (writable, 64-byte
    # aligned, holding exactly the file's bytes), so a tensor keeps only its own member alive;
    # the rest of the file stays in the one whole-file buffer
    _, src = wide
    data = src.read_bytes()
    contents = archive.read_archive(src)
    spans = _payload_spans(data)
    big = {name for name, (start, end) in spans.items() if end - start >= 1 << 20}
    assert len(big) == 2
    owners = {}
    for name in contents.names:
        view = contents.member(name)
        start, end = spans.get(name, (None, None))
        if start is not None:
            assert bytes(view) == data[start:end]
        owners[name] = view.obj
        if name in big:
            assert not view.readonly
            address = torch.frombuffer(view, dtype=torch.uint8).data_ptr()
            assert address % archive.ALIGNMENT == 0
    whole = owners[archive.MANIFEST]
    assert all(owners[n] is not whole for n in big)
    assert len({id(owners[n]) for n in big}) == 2
    assert all(owners[n] is whole for n in contents.names if n not in big)


@pytest.mark.parametrize("where", ["header", "first", "middle", "last", "directory"])
def test_a_flipped_byte_in_a_big_read_file_is_caught(wide, tmp_path, where):
    # the big members' bytes live apart from the whole-file buffer: a flip in their data, in
    # their local header or in the directory that locates them must still fail the read
    _, src = wide
    data = bytearray(src.read_bytes())
    start, end = max(_payload_spans(bytes(data)).values(), key=lambda span: span[1] - span[0])
    at = {"header": start - 40, "first": start, "middle": (start + end) // 2, "last": end - 1,
          "directory": len(data) - 30}[where]
    data[at] ^= 0x01
    bad = tmp_path / "bad.pt2s"
    bad.write_bytes(bytes(data))
    with pytest.raises(serde.MalformedArtifactError):
        serde.load(bad)

def test_load_leaves_payload_crcs_to_check(wide):
    """serde.load verifies a payload by its xxh3 and its zip CRC-32 fields by their agreement
    (local header and central directory); the default read (`pt2serde check`) recomputes them."""
    ep, src = wide
    data = src.read_bytes()
    start, end = max(_payload_spans(data).values(), key=lambda span: span[1] - span[0])
    crc = zlib.crc32(data[start:end]).to_bytes(4, "little")
    assert data.count(crc) == 2  # once in the local header, once in the central directory
    other = (int.from_bytes(crc, "little") ^ 1).to_bytes(4, "little")
    both = data.replace(crc, other)  # what a tool rewriting only the CRCs would leave
    assert_programs_equal(ep, serde.load(both))  # every tensor byte is still verified by xxh3
    with pytest.raises(archive.CorruptZipError, match="local header"):
        archive.read_archive(both)  # the default, as `pt2serde check` reads: every CRC-32 recomputed
    for copy in range(2):  # one copy alone flipped: serde.load catches it
        at = data.index(crc) if copy == 0 else data.rindex(crc)
        one = data[:at] + other + data[at + 4:]
        with pytest.raises(archive.CorruptZipError):
            serde.load(one)


def _rss_file() -> int:
    """Resident bytes of file-backed mappings: a mapped artifact's pages that were read and not
    written count here, and the C heap, which earlier tests' freed programs may shrink or grow
    meanwhile, does not."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("RssFile:"))


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs /proc (Linux)")
def test_mmap_load_takes_no_memory_for_weights_until_they_are_touched(wide):
    ep, path = wide
    weights = sum(t.untyped_storage().nbytes() for t in ep.state_dict.values())
    serde.load(path, mmap=True)  # first calls paid
    before = _rss_file()
    loaded = serde.load(path, mmap=True)
    assert _rss_file() - before < weights // 4
    for t in loaded.state_dict.values():
        t.sum()
    assert _rss_file() - before > weights // 2
