"""Loading from streams (bytes, BytesIO, file objects) and the trusted path (verify=False).

A stream is copied once into private memory, as a path is read: the program matches the one
loaded from the path and torch's own pair, owns its bytes (the source may change afterwards), and
every byte is verified. ``verify=False`` skips the payloads' digests only: a flipped weight byte
then loads (the default refuses it), and a structurally damaged file is still refused.
"""

from __future__ import annotations

import io
import os
import subprocess

import pytest
import torch

import serde
from serde import archive
from serde.errors import SerializeError

# 3 x 4 MB payloads: over the size from which files are read by several threads, each big
# member into a buffer of its own and hashed as it is copied
SIZES = {"small": (2, 32), "big": (3, 1024)}


def _program(layers: int, width: int):
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)]).eval()
    args = (torch.randn(3, width),)
    return torch.export.export(model, args, strict=False), args


@pytest.fixture(scope="module", params=sorted(SIZES))
def saved(request, tmp_path_factory):
    ep, args = _program(*SIZES[request.param])
    d = tmp_path_factory.mktemp(request.param)
    ours, theirs = d / "m.pt2s", d / "m.pt2"
    serde.save(ep, ours)
    torch.export.save(ep, theirs)
    return ep, args, ours, theirs


def _same(ep_a, ep_b, args) -> None:
    torch.testing.assert_close(ep_a.module()(*args), ep_b.module()(*args), rtol=0, atol=0)
    assert ep_a.state_dict.keys() == ep_b.state_dict.keys()
    for k, v in ep_a.state_dict.items():
        assert torch.equal(v, ep_b.state_dict[k]), k


class _NoFileno(io.RawIOBase):
    """A seekable binary file object without a file descriptor (as a wrapper of a remote blob is)."""

    def __init__(self, data: bytes) -> None:
        self._b = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        return self._b.readinto(b)

    def seek(self, pos: int, whence: int = 0) -> int:
        return self._b.seek(pos, whence)

    def tell(self) -> int:
        return self._b.tell()


SOURCES = {
    "bytes": lambda data, path: data,
    "bytesio": lambda data, path: io.BytesIO(data),
    "file": lambda data, path: open(path, "rb"),  # noqa: SIM115 - closed by the test
    "buffered_no_fileno": lambda data, path: io.BufferedReader(_NoFileno(data)),
    "raw_no_fileno": lambda data, path: _NoFileno(data),
}


@pytest.mark.parametrize("kind", sorted(SOURCES))
def test_a_stream_loads_what_its_path_loads(saved, kind):
    ep, args, ours, theirs = saved
    data = ours.read_bytes()
    src = SOURCES[kind](data, ours)
    try:
        got = serde.load(src)
    finally:
        if hasattr(src, "close"):
            src.close()
    _same(got, serde.load(ours), args)
    _same(got, torch.export.load(theirs), args)
    _same(got, ep, args)


def test_an_unseekable_stream_loads(saved):
    ep, args, ours, _ = saved
    with subprocess.Popen(["cat", str(ours)], stdout=subprocess.PIPE) as pipe:
        got = serde.load(pipe.stdout)
    _same(got, ep, args)


def test_a_bytesio_is_read_from_its_position_and_left_at_its_end(saved):
    ep, args, ours, _ = saved
    data = ours.read_bytes()
    prefix = b"header of another format " * 3
    f = io.BytesIO(prefix + data)
    f.seek(len(prefix))
    got = serde.load(f)
    assert f.tell() == len(prefix) + len(data)
    _same(got, ep, args)


@pytest.mark.parametrize("kind", ["bytes", "bytesio"])
def test_a_program_from_memory_owns_its_bytes(saved, kind):
    # the source's memory is copied, never wrapped: changing or reusing it afterwards leaves the
    # weights alone, and writing to a weight leaves the source alone
    ep, args, ours, _ = saved
    data = ours.read_bytes()
    src = bytearray(data) if kind == "bytes" else io.BytesIO(data)
    got = serde.load(bytes(src) if kind == "bytes" else src)
    expected = {k: v.clone() for k, v in got.state_dict.items()}
    if kind == "bytesio":
        src.seek(0)
        src.write(b"\xff" * len(data))  # overwrites the buffer the BytesIO shared
    next(iter(got.state_dict.values())).data.add_(1)
    next(iter(expected.values())).add_(1)
    for k, v in got.state_dict.items():
        assert torch.equal(v, expected[k]), k
    if kind == "bytes":
        assert bytes(src) == data


def _payload_offset(data: bytes) -> int:
    """The file offset of the middle of the biggest payload."""
    contents = archive.read_archive(data)
    name = max((n for n in contents.names if n.startswith("data/")), key=contents.size)
    payload = bytes(contents.member(name))
    at = data.find(payload)
    assert at > 0 and data.find(payload, at + 1) == -1
    return at + len(payload) // 2


def _flipped(data: bytes, at: int) -> bytes:
    out = bytearray(data)
    out[at] ^= 0x01
    return bytes(out)


@pytest.mark.parametrize("kind", ["path", "bytes", "bytesio"])
def test_a_flipped_payload_byte_fails_a_stream_load(saved, tmp_path, kind):
    _, _, ours, _ = saved
    bad = _flipped(ours.read_bytes(), _payload_offset(ours.read_bytes()))
    path = tmp_path / "bad.pt2s"
    path.write_bytes(bad)
    src = {"path": path, "bytes": bad, "bytesio": io.BytesIO(bad)}[kind]
    with pytest.raises(archive.ChecksumMismatchError, match="is corrupt"):
        serde.load(src)


@pytest.mark.parametrize("mmap", [True, False])
def test_verify_false_skips_payload_digests_only(saved, tmp_path, mmap):
    ep, args, ours, theirs = saved
    data = ours.read_bytes()
    # an intact file: the same program as the verified load and torch's pair
    trusted = serde.load(ours, mmap=mmap, verify=False)
    _same(trusted, serde.load(ours), args)
    _same(trusted, torch.export.load(theirs), args)

    # a flipped weight byte: the default refuses it, verify=False loads a different weight
    path = tmp_path / "flipped.pt2s"
    path.write_bytes(_flipped(data, _payload_offset(data)))
    with pytest.raises(archive.ChecksumMismatchError):
        serde.load(path, mmap=mmap)
    changed = serde.load(path, mmap=mmap, verify=False)
    differs = [k for k, v in changed.state_dict.items() if not torch.equal(v, ep.state_dict[k])]
    assert len(differs) == 1


# Structural damage verify=False must still refuse, each with the check that catches it.
def _truncated(data: bytes) -> bytes:
    return data[: len(data) - 100]


def _json_flipped(data: bytes) -> bytes:
    contents = archive.read_archive(data)
    program = bytes(contents.member("program.json"))
    return _flipped(data, data.find(program) + len(program) // 2)


def _local_header_flipped(data: bytes) -> bytes:
    # the size field of the biggest payload's local header (14 bytes into a 30-byte header before
    # its name and padding): it then disagrees with the central directory
    contents = archive.read_archive(data)
    name = max((n for n in contents.names if n.startswith("data/")), key=contents.size)
    header = data.rfind(b"PK\x03\x04", 0, data.find(name.encode()) + 1)
    return _flipped(data, header + 22)


def _payload_crc_flipped(data: bytes) -> bytes:
    # the CRC-32 of a payload in its local header: no digest is computed with verify=False, so
    # the two copies of the CRC must agree
    contents = archive.read_archive(data)
    name = max((n for n in contents.names if n.startswith("data/")), key=contents.size)
    header = data.rfind(b"PK\x03\x04", 0, data.find(name.encode()) + 1)
    return _flipped(data, header + 14)


DAMAGE = {"truncated": _truncated, "program_json_byte": _json_flipped,
          "local_header_size": _local_header_flipped, "payload_crc_field": _payload_crc_flipped}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
@pytest.mark.parametrize("mmap", [True, False])
def test_verify_false_still_refuses_a_damaged_file(saved, tmp_path, damage, mmap):
    _, _, ours, _ = saved
    path = tmp_path / "damaged.pt2s"
    path.write_bytes(DAMAGE[damage](ours.read_bytes()))
    with pytest.raises(SerializeError):
        serde.load(path, mmap=mmap, verify=False)


def test_verify_false_maps_without_reading_the_weights(saved):
    # with mmap=True and verify=False the weights are the file's pages: a tensor's memory lies in
    # a mapping of the file (not in an anonymous or heap buffer) and writes stay private
    ep, args, ours, _ = saved
    before = ours.read_bytes()
    got = serde.load(ours, mmap=True, verify=False)
    t = next(iter(got.state_dict.values()))
    addr = t.untyped_storage().data_ptr()
    with open("/proc/self/maps") as f:
        regions = [line.split() for line in f]
    mine = [r for r in regions if int(r[0].split("-")[0], 16) <= addr < int(r[0].split("-")[1], 16)]
    assert mine and len(mine[0]) >= 6 and os.path.samefile(mine[0][5], ours)
    t.data.add_(1)
    assert ours.read_bytes() == before
