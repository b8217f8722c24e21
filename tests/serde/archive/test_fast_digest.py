"""Schema 2.4's fast digest: every manifest member carries an XXH3-128, which serde.load verifies
instead of the sha256; `pt2serde check` verifies both; older artifacts are verified by sha256."""

from __future__ import annotations

import io
import json
import shutil
import struct
import zipfile
from pathlib import Path

import pytest
import torch
import xxhash
from hypothesis import given
from hypothesis import strategies as st

import serde
from serde.archive import ChecksumMismatchError, read_archive, write_archive
from serde.archive.artifact import read_artifacts
from serde.cli.check import verify
from serde.core.version import SCHEMA_VERSION

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures"


class _Two(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(64, 64)
        self.b = torch.nn.Linear(64, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(x)))


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> tuple[bytes, Path]:
    torch.manual_seed(0)
    ep = torch.export.export(_Two().eval(), (torch.randn(2, 64),))
    path = tmp_path_factory.mktemp("digest") / "two.pt2s"
    serde.save(ep, path)
    return path.read_bytes(), path.parent


def _payloads(data: bytes) -> list[tuple[str, int, int]]:
    """(name, data offset, size) of every non-empty payload member."""
    out = []
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        for info in z.infolist():
            if info.filename.startswith("data/") and info.file_size:
                name_len, extra_len = struct.unpack_from("<HH", data, info.header_offset + 26)
                out.append((info.filename, info.header_offset + 30 + name_len + extra_len, info.file_size))
    return sorted(out)


def test_every_member_records_the_xxh3_of_its_bytes(saved: tuple[bytes, Path]) -> None:
    data, _ = saved
    contents = read_archive(data)
    assert contents.schema_version == SCHEMA_VERSION >= (2, 4)
    members = contents.manifest.members
    assert set(members) == set(contents.names) - {"manifest.json"}
    for name, m in members.items():
        assert m.xxh3 == xxhash.xxh3_128(bytes(contents.member(name))).hexdigest(), name


@given(pick=st.integers(0, 10**9), where=st.floats(0, 1, exclude_max=True), mask=st.integers(1, 255))
def test_a_flipped_payload_byte_is_caught_by_its_xxh3_at_load_and_by_check(
        saved: tuple[bytes, Path], pick: int, where: float, mask: int) -> None:
    data, d = saved
    payloads = _payloads(data)
    name, start, size = payloads[pick % len(payloads)]
    bad = bytearray(data)
    bad[start + int(where * size)] ^= mask
    path = d / "flipped.pt2s"
    path.write_bytes(bad)
    for mmap in (False, True):
        # load checks the xxh3 alone: the message names the member and that digest
        with pytest.raises(ChecksumMismatchError, match=rf"member '{name}' is corrupt: its xxh3 is [0-9a-f]{{32}}, "
                                                        r"but manifest\.json records"):
            serde.load(path, mmap=mmap)
    with pytest.raises(ChecksumMismatchError, match=rf"member '{name}' is corrupt: its sha256 is"):
        verify(path)


def test_show_and_diff_verify_a_payload_by_xxh3_when_first_read(saved: tuple[bytes, Path]) -> None:
    data, d = saved
    name, start, _ = _payloads(data)[0]
    bad = bytearray(data)
    bad[start] ^= 0x80
    path = d / "lazy.pt2s"
    path.write_bytes(bad)
    (art,) = read_artifacts(path, lazy=True, payload_crc=False, sha256=False).values()  # as show and diff read
    with pytest.raises(ChecksumMismatchError, match=rf"member '{name}' is corrupt: its xxh3 is"):
        art.contents.member(name)


def test_a_right_xxh3_under_a_wrong_sha256_loads_but_check_refuses_it(saved: tuple[bytes, Path]) -> None:
    # What docs/format.md promises: load verifies every byte against the xxh3 (damage), and only
    # check recomputes the sha256 that names the payload.
    data, d = saved
    contents = read_archive(data)
    members = {n: bytes(contents.member(n)) for n in contents.names if n != "manifest.json"}
    name = _payloads(data)[0][0]
    members[name] = bytes(b ^ 0x01 for b in members[name])
    buf = io.BytesIO()
    write_archive(buf, members, schema_version=SCHEMA_VERSION, torch_version=str(torch.__version__))
    path = d / "renamed.pt2s"
    path.write_bytes(buf.getvalue())
    serde.load(path)
    serde.load(path, mmap=True)
    with pytest.raises(ChecksumMismatchError, match=rf"member '{name}' is corrupt: its sha256 is"):
        verify(path)


@pytest.mark.parametrize("case", ["mlp", "tied_weights"])
def test_a_2_3_artifact_has_no_xxh3_and_is_verified_by_sha256(case: str, tmp_path: Path) -> None:
    src = FIXTURES / "v2.3" / case / "model.pt2s"
    data = src.read_bytes()
    manifest = json.loads(zipfile.ZipFile(src).read("manifest.json"))
    assert all("xxh3" not in m for m in manifest["members"].values())
    shutil.copy(src, tmp_path / "intact.pt2s")
    serde.load(tmp_path / "intact.pt2s")
    verify(tmp_path / "intact.pt2s")
    name, start, size = _payloads(data)[-1]
    bad = bytearray(data)
    bad[start + size - 1] ^= 0x04
    path = tmp_path / "flipped.pt2s"
    path.write_bytes(bad)
    for mmap in (False, True):
        with pytest.raises(ChecksumMismatchError, match=rf"member '{name}' is corrupt: its sha256 is"):
            serde.load(path, mmap=mmap)
    with pytest.raises(ChecksumMismatchError, match=rf"member '{name}' is corrupt: its sha256 is"):
        verify(path)


def test_a_manifest_of_an_older_version_is_written_without_xxh3(saved: tuple[bytes, Path]) -> None:
    # the field is 2.4's: write_archive asked for a 2.3 manifest leaves it out, as a 2.3 writer did
    contents = read_archive(saved[0])
    members = {n: bytes(contents.member(n)) for n in contents.names if n != "manifest.json"}
    buf = io.BytesIO()
    write_archive(buf, members, schema_version=(2, 3), torch_version=str(torch.__version__))
    assert all(m.xxh3 is None for m in read_archive(buf.getvalue()).manifest.members.values())


def _mapping_rss(path: Path) -> int:
    """Resident bytes of this process's mappings of ``path`` (from /proc/self/smaps)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            first = line.split()[0]
            if "-" in first and not first.endswith(":"):
                inside = line.rstrip().endswith(str(path))
            elif inside and first == "Rss:":
                total += int(line.split()[1]) * 1024
    return total


def test_mmap_load_verifies_without_keeping_the_payload_pages(tmp_path: Path) -> None:
    torch.manual_seed(0)
    ep = torch.export.export(torch.nn.Linear(1024, 2048), (torch.randn(1, 1024),))  # an 8 MB weight
    path = tmp_path / "big.pt2s"
    serde.save(ep, path)
    loaded = serde.load(path, mmap=True)
    weight = loaded.state_dict["weight"]
    assert _mapping_rss(path) < weight.nbytes // 4  # every byte was hashed, few stay mapped
    assert torch.equal(weight, ep.state_dict["weight"])  # and the pages come back when touched
    assert _mapping_rss(path) >= weight.nbytes
