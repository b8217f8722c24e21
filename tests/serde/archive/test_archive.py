"""serde.archive: deterministic aligned zips, full verification on read, atomic saves; `pt2serde check`."""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import struct
import subprocess
import sys
import zipfile
import zlib
from pathlib import Path

import pytest
import xxhash

from serde import archive
from serde.archive import (
    ALIGNMENT,
    ArtifactIOError,
    ChecksumMismatchError,
    FormatVersionError,
    Limits,
    MissingMemberError,
    NotAnArchiveError,
    SizeLimitError,
    UnknownMemberError,
    UnsafeMemberNameError,
    extra_member,
    payload_name,
    read_archive,
    write_archive,
)
from serde.archive import layout as archive_layout
from serde.cli import check as cmd_check
from serde.core import schema, wire
from serde.core.version import FORMAT_VERSION, SCHEMA_VERSION
from serde.errors import MalformedArtifactError, SerializeError

pytestmark = pytest.mark.unit

TORCH = "2.13.0"


def _payload(data: bytes) -> tuple[str, bytes]:
    return payload_name(hashlib.sha256(data).hexdigest()), data


def _members(seed: int = 0, n_payloads: int = 5) -> dict[str, bytes]:
    rng = random.Random(seed)
    members = {"program.json": b'{"graph": "g"}', "weights.json": b'{"storages": []}', "debug.json": b"{}"}
    for i in range(n_payloads):
        # Sizes chosen so that padding takes many different lengths (the 6..69-byte pad paths).
        members.update([_payload(rng.randbytes(rng.randrange(0, 300) + i))])
    return members


def _zip_layout(data: bytes) -> list[dict]:
    """Our own reading of the zip directory, independent of serde.archive."""
    eocd = len(data) - 22
    assert data[eocd:eocd + 4] == b"PK\x05\x06"
    n, _, cd_off = struct.unpack_from("<HII", data, eocd + 10)
    out, pos = [], cd_off
    for _ in range(n):
        (sig, made_by, _, flags, method, mtime, mdate, _, csize, usize, nlen, elen, clen, _, _, ext_attr,
         lho) = struct.unpack_from("<4sHHHHHHIIIHHHHHII", data, pos)
        assert sig == b"PK\x01\x02"
        name = data[pos + 46:pos + 46 + nlen].decode()
        lnlen, lelen = struct.unpack_from("<HH", data, lho + 26)
        out.append(dict(name=name, flags=flags, method=method, time=mtime, date=mdate, csize=csize,
                        usize=usize, attr=ext_attr, made_by=made_by, lho=lho, data=lho + 30 + lnlen + lelen))
        pos += 46 + nlen + elen + clen
    return out


def _edit_manifest(data: bytes, old: bytes, new: bytes) -> bytes:
    """Replace ``old`` by ``new`` (same length) in manifest.json and fix its CRC-32 fields, so
    that only the checks of the manifest's meaning can object."""
    manifest = next(e for e in _zip_layout(data) if e["name"] == "manifest.json")
    body = data[manifest["data"]:manifest["data"] + manifest["usize"]]
    edited = body.replace(old, new)
    assert len(edited) == len(body) and edited != body
    crc_old, crc_new = (struct.pack("<I", zlib.crc32(b)) for b in (body, edited))
    assert data.count(crc_old) == 2  # local header and central directory
    return data.replace(body, edited).replace(crc_old, crc_new)


def _to_bytes(members: dict[str, bytes], **kw) -> bytes:
    buf = io.BytesIO()
    write_archive(buf, members, schema_version=kw.get("schema_version", (1, 0)), torch_version=TORCH)
    return buf.getvalue()


# ---------------------------------------------------------------- round trip and layout


def test_round_trip_through_a_path(tmp_path: Path) -> None:
    members = _members()
    path = tmp_path / "m.pt2s"
    write_archive(path, members, schema_version=SCHEMA_VERSION, torch_version=TORCH)
    got = read_archive(path)
    assert set(got.names) == set(members) | {"manifest.json"}
    assert got.names == tuple(sorted(got.names))
    for name, data in members.items():
        assert bytes(got.member(name)) == data
    assert got.schema_version == SCHEMA_VERSION
    m = got.manifest
    assert (m.format, m.format_version, m.torch_version) == ("pt2serde", 1, TORCH)  # no extra files: 1
    assert m.members == {k: schema.Member(sha256=hashlib.sha256(v).hexdigest(), size=len(v),
                                          xxh3=xxhash.xxh3_128(v).hexdigest())
                         for k, v in members.items()}


def test_golden_bytes() -> None:
    members = {
        "program.json": b'{"program": 1}',
        "weights.json": b'{"weights": 2}',
        **dict([_payload(bytes(range(256)) * 3), _payload(b"\x00" * 10), _payload(b"")]),
    }
    data = _to_bytes(members)
    # Pinned: any change to the layout (padding, headers, manifest encoding) must be deliberate and
    # come with a FORMAT_VERSION decision.
    assert hashlib.sha256(data).hexdigest() == GOLDEN_SHA256
    assert len(data) == GOLDEN_SIZE


GOLDEN_SHA256 = "2a129100bfc340266ca9323a5b41d41cdf00e0d94013891625742002da2b9d58"
GOLDEN_SIZE = 2732


def test_extra_files_are_members_of_format_version_2() -> None:
    members = {**_members(), extra_member("config.json", "t"): b'{"lr": 0.1}', extra_member("notes_v2.txt", "t"): b""}
    got = read_archive(_to_bytes(members))
    assert got.manifest.format_version == 2
    assert bytes(got.member("extra/config.json")) == b'{"lr": 0.1}' and bytes(got.member("extra/notes_v2.txt")) == b""
    # a format-1 archive cannot hold them: a reader that predates extra files refuses by version
    data = _to_bytes(members)
    old = _edit_manifest(data, b'"format_version":2', b'"format_version":1')
    with pytest.raises(UnknownMemberError, match="'extra/config.json' is an extra file, which format version 1"):
        read_archive(old)


@pytest.mark.parametrize("name", ["", ".hidden", "a/b", "../x", "x" * 201, "tab\tname", "naïve", 3])
def test_extra_file_names_are_restricted(name) -> None:
    with pytest.raises(UnsafeMemberNameError, match="extra file name"):
        extra_member(name, "save(extra_files)")


def test_same_members_in_any_order_give_identical_bytes() -> None:
    members = _members(seed=1, n_payloads=12)
    items = list(members.items())
    expected = _to_bytes(members)
    rng = random.Random(7)
    for _ in range(5):
        rng.shuffle(items)
        assert _to_bytes(dict(items)) == expected
    # bytes, bytearray and memoryview inputs are the same content.
    assert _to_bytes({k: memoryview(bytearray(v)) for k, v in items}) == expected
    assert _to_bytes(members) != _to_bytes({**members, "program.json": b'{"graph": "h"}'})


def test_layout_is_aligned_sorted_stored_and_fixed(tmp_path: Path) -> None:
    for seed in range(4):
        data = _to_bytes(_members(seed=seed, n_payloads=20))
        layout = _zip_layout(data)
        names = [e["name"] for e in layout]
        assert names == sorted(names)
        prev_end = 0
        for e in layout:
            assert e["data"] % ALIGNMENT == 0, e
            assert (e["method"], e["flags"], e["time"], e["date"]) == (0, 0, 0, (1 << 5) | 1)
            assert e["csize"] == e["usize"]
            assert e["attr"] == 0o100644 << 16
            assert e["lho"] == prev_end  # contiguous: nothing hidden between members
            prev_end = e["data"] + e["usize"]
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            assert z.testzip() is None  # CRCs are right for other tools
            assert [i.date_time for i in z.infolist()] == [(1980, 1, 1, 0, 0, 0)] * len(layout)
            assert [i.header_offset for i in z.infolist()] == [e["lho"] for e in layout]


def test_zip64_records_are_written_and_read(monkeypatch: pytest.MonkeyPatch) -> None:
    members = _members(seed=3, n_payloads=6)
    for limit in (1, 200):  # every size/offset in zip64, or only some of them
        monkeypatch.setattr(archive_layout, "_ZIP64_THRESHOLD", limit)  # for the writer and the reader
        data = _to_bytes(members)
        got = read_archive(data)
        for name, value in members.items():
            assert bytes(got.member(name)) == value
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            assert z.testzip() is None
            assert {n: z.read(n) for n in members} == members
            for info in z.infolist():
                lnlen, lelen = struct.unpack_from("<HH", data, info.header_offset + 26)
                assert (info.header_offset + 30 + lnlen + lelen) % ALIGNMENT == 0
        assert data[-42:-38] == b"PK\x06\x07"
    # The reader demands the layout the writer makes under the threshold in force.
    monkeypatch.setattr(archive_layout, "_ZIP64_THRESHOLD", 1)
    with pytest.raises(archive.CorruptZipError, match="differs from what pt2serde writes"):
        read_archive(data)
    monkeypatch.undo()
    with pytest.raises(archive.CorruptZipError, match="differs from what pt2serde writes"):
        read_archive(data)


def test_framing_is_compared_field_by_field_unless_zip64(monkeypatch: pytest.MonkeyPatch) -> None:
    # The field comparison must accept every layout the writer makes without zip64 (each padding
    # length among them), or every load pays for regenerating the headers; with zip64 it must
    # leave the file to the byte comparison, which accepts it. Its rejections are tested by
    # test_corruption's bit flips, which only it sees for bytes such as dates and versions.
    answers: list[bool] = []
    check = archive_layout._framing_as_written
    monkeypatch.setattr(archive_layout, "_framing_as_written", lambda *a: answers.append(check(*a)) or answers[-1])
    for seed in range(8):
        read_archive(_to_bytes(_members(seed=seed, n_payloads=12)))
    assert answers == [True] * 8
    answers.clear()
    for limit in (1, 200):
        monkeypatch.setattr(archive_layout, "_ZIP64_THRESHOLD", limit)
        read_archive(_to_bytes(_members(seed=3, n_payloads=6)))
    assert answers == [False, False]


def test_file_objects_and_bytes(tmp_path: Path) -> None:
    members = _members()
    data = _to_bytes(members)
    path = tmp_path / "a.pt2s"
    path.write_bytes(data)
    with open(path, "rb") as f:
        assert bytes(read_archive(f).member("program.json")) == members["program.json"]
    assert bytes(read_archive(io.BytesIO(data)).member("weights.json")) == members["weights.json"]
    with subprocess.Popen(["cat", str(path)], stdout=subprocess.PIPE) as pipe:  # not seekable
        assert read_archive(pipe.stdout).names == read_archive(data).names
    with open(path) as text, pytest.raises(ArtifactIOError, match=r"binary mode \('rb'\)"):
        read_archive(text)
    # bytes are copied once into private, writable memory, as a file is read (tensors then wrap
    # payloads without a copy each); a tool that reads no payload (lazy) uses them in place
    from_bytes = read_archive(data)
    assert not from_bytes.member("program.json").readonly
    assert read_archive(data, lazy=True).member("program.json").readonly
    with pytest.raises(ArtifactIOError, match="binary"):
        write_archive(io.StringIO(), members, schema_version=(1, 0), torch_version=TORCH)


def test_a_path_reads_what_its_bytes_read(tmp_path: Path) -> None:
    data = _to_bytes(_members(seed=3))
    path = tmp_path / "a.pt2s"
    path.write_bytes(data)
    from_path, from_bytes = read_archive(path), read_archive(data)
    assert from_path.names == from_bytes.names
    for name in from_bytes.names:
        assert bytes(from_path.member(name)) == bytes(from_bytes.member(name)), name
    path.write_bytes(b"")
    with pytest.raises(NotAnArchiveError):
        read_archive(path)


@pytest.mark.parametrize("told", [-1, +1], ids=["grew", "shrank"])
def test_a_file_whose_size_changes_while_read_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          told: int) -> None:
    """The size fstat reports and the bytes one read returns must agree (a writer racing the load)."""
    import os

    data = _to_bytes(_members(seed=3))
    path = tmp_path / "a.pt2s"
    path.write_bytes(data)
    real_fstat = os.fstat

    def fstat(fd: int) -> os.stat_result:
        st = real_fstat(fd)
        fields = list(st)
        fields[6] = st.st_size + told  # st_size: what the file had when fstat asked
        return os.stat_result(fields)

    monkeypatch.setattr(os, "fstat", fstat)
    with pytest.raises(ArtifactIOError, match="changed size while being read"):
        read_archive(path)


def test_a_fifo_is_read_to_its_end(tmp_path: Path) -> None:
    import os
    import threading

    data = _to_bytes(_members(seed=3))
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    writer = threading.Thread(target=fifo.write_bytes, args=(data,))
    writer.start()
    try:
        assert read_archive(fifo).names == read_archive(data).names
    finally:
        writer.join()


def test_members_are_zero_copy_aligned_views_of_one_buffer(tmp_path: Path) -> None:
    import ctypes

    members = _members(seed=5, n_payloads=8)
    path = tmp_path / "a.pt2s"
    write_archive(path, members, schema_version=(1, 0), torch_version=TORCH)
    got = read_archive(path)
    owners = {id(got.member(n).obj) for n in got.names}
    assert len(owners) == 1
    for name in got.names:
        view = got.member(name)
        assert not view.readonly
        if len(view):
            addr = ctypes.addressof(ctypes.c_char.from_buffer(view))
            assert addr % ALIGNMENT == 0, name


def test_manifest_version_checks() -> None:
    data = _to_bytes(_members())
    newer = _edit_manifest(data, b'"format_version":1', f'"format_version":{FORMAT_VERSION + 1}'.encode())
    with pytest.raises(FormatVersionError, match=rf"format version {FORMAT_VERSION + 1}, but this pt2serde reads "
                                                 rf"format versions 1\.\.{FORMAT_VERSION}"):
        read_archive(newer)
    other = _edit_manifest(data, b'"format":"pt2serde"', b'"format":"pt2serdX"')
    with pytest.raises(SerializeError, match="names format 'pt2serdX'"):
        read_archive(other)


# ---------------------------------------------------------------- writer input validation


@pytest.mark.parametrize("name, error", [
    ("../x", UnsafeMemberNameError), ("/abs", UnsafeMemberNameError), ("data\\x", UnsafeMemberNameError),
    ("a\x00b", UnsafeMemberNameError), ("notes.txt", UnknownMemberError), ("data/ABC", UnknownMemberError),
    ("manifest.json", UnknownMemberError),
])
def test_writer_rejects_bad_names(name: str, error: type, tmp_path: Path) -> None:
    with pytest.raises(error, match="write_archive"):
        write_archive(tmp_path / "x.pt2s", {**_members(), name: b"1"}, schema_version=(1, 0), torch_version=TORCH)
    assert list(tmp_path.iterdir()) == []


def test_writer_requires_program_and_weights() -> None:
    with pytest.raises(MissingMemberError, match="'weights.json'"):
        _to_bytes({"program.json": b"{}"})


# ---------------------------------------------------------------- reader edge cases


def test_limits_are_enforced() -> None:
    members = _members(seed=2)
    data = _to_bytes(members)
    big = max(len(v) for k, v in members.items() if k.startswith("data/"))
    with pytest.raises(SizeLimitError, match="max_file_bytes"):
        read_archive(data, limits=Limits(max_file_bytes=len(data) - 1))
    with pytest.raises(SizeLimitError, match="max_members"):
        read_archive(data, limits=Limits(max_members=len(members)))
    with pytest.raises(SizeLimitError, match="max_member_bytes"):
        read_archive(data, limits=Limits(max_member_bytes=big - 1))
    with pytest.raises(SizeLimitError, match="max_json_bytes"):
        read_archive(data, limits=Limits(max_json_bytes=10))
    read_archive(data, limits=Limits(max_file_bytes=len(data), max_members=len(members) + 1,
                                     max_member_bytes=big, max_json_bytes=1 << 20))


def test_every_truncation_is_a_clean_error() -> None:
    data = _to_bytes(_members(seed=4, n_payloads=2))
    for cut in range(0, len(data), 7):
        with pytest.raises((MalformedArtifactError, NotAnArchiveError)):
            read_archive(data[:cut])


def test_missing_files_and_directories(tmp_path: Path) -> None:
    with pytest.raises(ArtifactIOError, match="cannot read"):
        read_archive(tmp_path / "nope.pt2s")
    with pytest.raises(ArtifactIOError, match="cannot read"):
        read_archive(tmp_path)
    with pytest.raises(NotAnArchiveError):
        read_archive(b"")


def test_misnamed_payload_is_caught_on_read() -> None:
    # write_archive trusts content addresses (no second hash on save); the reader does not.
    data = _to_bytes({**_members(), payload_name("0" * 64): b"not zeros"})
    with pytest.raises(ChecksumMismatchError, match="member 'data/0000"):
        read_archive(data)


def test_member_lookup_of_absent_name() -> None:
    got = read_archive(_to_bytes(_members()))
    with pytest.raises(MissingMemberError, match="'data/"):
        got.member(payload_name("f" * 64))


@pytest.mark.torch
def test_torch_export_save_is_recognised(tmp_path: Path) -> None:
    import torch

    class Tiny(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x.sin()

    path = tmp_path / "torch.pt2"
    torch.export.save(torch.export.export(Tiny(), (torch.ones(2),)), path)
    assert archive.is_torch_export_archive(path)
    ours = tmp_path / "ours.pt2s"
    write_archive(ours, _members(), schema_version=(1, 0), torch_version=TORCH)
    assert not archive.is_torch_export_archive(ours)
    assert not archive.is_torch_export_archive(b"plain text")


# ---------------------------------------------------------------- pt2serde check


def _check_members(schema_version: tuple[int, int] = SCHEMA_VERSION) -> dict[str, bytes]:
    graph = schema.Graph(inputs=[], outputs=[], nodes=[], tensor_values={}, sym_int_values={},
                         sym_bool_values={}, is_single_tensor_return=False, custom_obj_values={},
                         sym_float_values={})
    program = schema.ExportedProgram(
        graph_module=schema.GraphModule(graph=graph, signature=schema.GraphSignature(input_specs=[], output_specs=[]),
                                        module_call_graph=[]),
        opset_version={}, range_constraints=[],
        schema_version=schema.SchemaVersion(major=schema_version[0], minor=schema_version[1]),
        verifiers=[], torch_version=TORCH)
    name_a, a = _payload(bytes(range(64)))
    name_b, b = _payload(bytes(24))
    weights = schema.Weights(
        storages=[schema.Storage(sha256=name_a[5:], nbytes=64), schema.Storage(sha256=name_b[5:], nbytes=24)],
        state_dict={"w": schema.StoredTensor(dtype=schema.ScalarType.FLOAT, sizes=[4, 4], strides=[4, 1],
                                             storage_offset=0, storage=0, requires_grad=True)},
        constants={"c": schema.StoredTensor(dtype=schema.ScalarType.LONG, sizes=[3], strides=[1],
                                            storage_offset=0, storage=1, requires_grad=False)})
    return {"program.json": wire.encode(program), "weights.json": wire.encode(weights), name_a: a, name_b: b}


@pytest.mark.torch
def test_check_reports_versions_and_sizes(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = tmp_path / "ok.pt2s"
    write_archive(path, _check_members(), schema_version=SCHEMA_VERSION, torch_version=TORCH)
    report = cmd_check.verify(path)
    assert (report.format_version, report.schema_version, report.torch_version) == (1, SCHEMA_VERSION, TORCH)
    assert (report.members, report.payload_bytes, report.storages, report.tensors) == (5, 88, 2, 2)
    assert report.unreferenced_payloads == ()
    import argparse

    assert cmd_check.run(argparse.Namespace(file=str(path))) == 0
    out = capsys.readouterr().out
    assert f"schema version:  {SCHEMA_VERSION[0]}.{SCHEMA_VERSION[1]}" in out and "torch version:   2.13.0" in out
    assert out.rstrip().endswith("OK")


def test_check_rejects_inconsistent_artifacts(tmp_path: Path) -> None:
    path = tmp_path / "bad.pt2s"
    write_archive(path, _check_members(schema_version=(SCHEMA_VERSION[0], SCHEMA_VERSION[1] + 1)), schema_version=SCHEMA_VERSION, torch_version=TORCH)
    with pytest.raises(MalformedArtifactError, match="disagrees with manifest.json"):
        cmd_check.verify(path)
    members = _check_members()
    members["program.json"] = b'{"graph_module": 3}'
    write_archive(path, members, schema_version=SCHEMA_VERSION, torch_version=TORCH)
    with pytest.raises(MalformedArtifactError, match="program.json: does not match schema ExportedProgram"):
        cmd_check.verify(path)
    write_archive(path, _check_members(), schema_version=(SCHEMA_VERSION[0] + 1, 0), torch_version=TORCH)
    with pytest.raises(SerializeError, match="newer than this pt2serde"):
        cmd_check.verify(path)


def test_check_does_not_import_torch(tmp_path: Path) -> None:
    path = tmp_path / "ok.pt2s"
    write_archive(path, _check_members(), schema_version=SCHEMA_VERSION, torch_version=TORCH)
    code = ("import sys; from serde.cli import check as cmd_check; r = cmd_check.verify(sys.argv[1]); "
            "assert 'torch' not in sys.modules, 'torch was imported'; print(r.storages)")
    out = subprocess.run([sys.executable, "-c", code, str(path)], check=True, capture_output=True, text=True)
    assert out.stdout.strip() == "2"


def test_crc32_is_isal_and_agrees_with_zlib() -> None:
    # isal is a dependency: falling back to zlib's slower CRC-32 here would mean a broken install.
    import random

    from isal import isal_zlib

    from serde.archive import digests

    assert digests.crc32 is isal_zlib.crc32
    data = random.Random(0).randbytes(1 << 20)
    for cut in (0, 1, 4095, 1 << 19):
        assert digests.crc32(data[cut:], digests.crc32(data[:cut])) == zlib.crc32(data)


def test_archive_errors_are_families_whose_reason_names_the_failed_check(tmp_path: Path) -> None:
    # Each failure keeps its class and its layer's base, and says which check refused the file
    # as a reason that code may branch on without reading the message.
    from serde.archive import errors

    data = _to_bytes(_members())
    payload = next(n for n in read_archive(data).names if n.startswith("data/"))
    flipped = bytearray(data)
    flipped[data.index(_members()[payload]) + 3] ^= 0x40  # one bit of one payload
    cases = [
        (lambda: read_archive(bytes(flipped)), errors.ArchiveFormatError, ChecksumMismatchError, "checksum_mismatch"),
        (lambda: read_archive(data[:len(data) // 2]), errors.ArchiveFormatError, errors.TruncatedArchiveError, "truncated"),
        (lambda: read_archive(b"not a zip at all"), errors.ForeignArchiveError, NotAnArchiveError, "not_a_zip"),
        (lambda: read_archive(data, limits=Limits(max_file_bytes=len(data) - 1)), errors.ArchiveSafetyError,
         SizeLimitError, "size_limit"),
        (lambda: read_archive(tmp_path / "absent.pt2s"), ArtifactIOError, errors.ArtifactNotFoundError, "not_found"),
        (lambda: extra_member("../up", "here"), errors.ArchiveSafetyError, UnsafeMemberNameError, "unsafe_member_name"),
    ]
    for run, family, cls, reason in cases:
        with pytest.raises(family) as e:
            run()
        assert type(e.value) is cls and e.value.reason == reason, (type(e.value), e.value.reason)
    leaves = [getattr(errors, n) for n in errors.__all__ if n.endswith("Error") and not n.startswith(("Archive", "Foreign"))]
    assert len(leaves) == 18 and len({c.reason for c in leaves}) == 18
    assert all(issubclass(c, SerializeError) for c in leaves)


def test_an_older_major_artifact_is_checked_before_and_after_upgrading() -> None:
    # A frozen 1.0 artifact takes the upgrading path: its program's declared version must agree with
    # the manifest, and the upgraded documents must be valid Structs; the intact file loads.
    from serde.archive.artifact import read_artifact

    src = read_archive(Path(__file__).resolve().parents[3] / "fixtures" / "v1.0" / "mlp" / "model.pt2s")
    assert src.schema_version[0] < SCHEMA_VERSION[0]
    members = {n: bytes(src.member(n)) for n in src.names if n != "manifest.json"}

    def read(**changed: object) -> None:
        docs = {**members, **{f"{k}.json": json.dumps(v).encode() for k, v in changed.items()}}
        read_artifact(_to_bytes(docs, schema_version=src.schema_version))

    read()
    program, weights = json.loads(members["program.json"]), json.loads(members["weights.json"])
    with pytest.raises(MalformedArtifactError, match=r"^program.json: schema_version 1.7 disagrees with manifest.json \(1.0\)"):
        read(program={**program, "schema_version": {"major": 1, "minor": 7}})
    with pytest.raises(MalformedArtifactError, match="^weights.json: after upgrading, does not match schema Weights"):
        read(weights={**weights, "storages": 7})
