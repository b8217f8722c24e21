"""The native program file: layout, determinism, and hostile files rejected with clear errors."""

from __future__ import annotations

import hashlib
import struct

import msgspec
import pytest

from native.errors import NativeFormatError, NativeVersionError
from native.format import program as P
from native.format.program import MAGIC, write_program
from native.format.verify import decode, read_program
from serde.errors import MalformedArtifactError, SchemaVersionError
from tests.native._native_util import emit_ep, emitted, exported


def _replace(native: P.NativeProgram, **fields) -> bytes:
    p = msgspec.structs.replace(native.program, **fields)
    return P.NativeProgram(p, native.segment).encode()


def test_layout_prefix_and_alignment():
    data = emitted("mlp").encode()
    magic, version, reserved, hlen, seg_off, seg_len = struct.unpack_from("<8sIIQQQ", data)
    assert (magic, version, reserved) == (MAGIC, P.FORMAT_VERSION, 0)
    assert seg_off % 64 == 0 and seg_off >= 40 + hlen + 32 and seg_off + seg_len == len(data)
    assert data[40 + hlen:40 + hlen + 32] == hashlib.sha256(data[:40 + hlen]).digest()
    assert not any(data[40 + hlen + 32:seg_off])
    p = emitted("mlp").program
    assert all(c.offset % 64 == 0 for c in p.constants)
    for c in p.constants:
        assert hashlib.sha256(data[seg_off + c.offset:seg_off + c.offset + c.nbytes]).hexdigest() == c.sha256


def test_roundtrip_and_deterministic_bytes(tmp_path):
    a = emit_ep(exported("transformer_block")).encode()
    b = emit_ep(exported("transformer_block")).encode()
    assert a == b
    path = tmp_path / "m.pt2n"
    write_program(path, decode(a))
    back = read_program(path)
    assert back.program == decode(a).program and bytes(back.segment) == bytes(decode(a).segment)


def test_not_a_program():
    with pytest.raises(NativeFormatError, match=r"not a native program: the file starts with b'PK\\x03\\x04"):
        decode(b"PK\x03\x04" + bytes(60))
    with pytest.raises(NativeFormatError, match=r"5 bytes is too short to be a native program"):
        decode(b"PT2SN")


def test_newer_format_version_names_both_versions():
    data = bytearray(emitted("mlp").encode())
    struct.pack_into("<I", data, 8, P.FORMAT_VERSION + 1)
    with pytest.raises(NativeVersionError, match=rf"format version {P.FORMAT_VERSION + 1} is not supported; this "
                                                 rf"reader handles versions {P.MIN_FORMAT_VERSION}..{P.FORMAT_VERSION}") as e:
        decode(bytes(data))
    assert isinstance(e.value, SchemaVersionError)


def test_truncated_and_trailing_bytes():
    data = emitted("mlp").encode()
    with pytest.raises(NativeFormatError, match=r"must end exactly at the end of the file"):
        decode(data[:-1])
    with pytest.raises(NativeFormatError, match=r"must end exactly at the end of the file"):
        decode(data + b"\0")
    with pytest.raises(NativeFormatError, match=r"header length \d+ runs past the end"):
        decode(data[:60])


def test_version_1_files_are_refused_naming_both_versions():
    # Version 1 had no header checksum; its files are re-emitted from their .pt2s, never guessed at.
    native = emitted("mlp")
    header = msgspec.msgpack.encode(native.program)
    seg_off = (40 + len(header) + 63) // 64 * 64
    old = struct.pack("<8sIIQQQ", MAGIC, 1, 0, len(header), seg_off, len(native.segment)) + header
    old += bytes(seg_off - len(old)) + bytes(native.segment)
    with pytest.raises(NativeVersionError, match=r"native program format version 1 is not supported; this reader "
                                                 r"handles versions 3\.\.3\. Re-emit it"):
        decode(old)


def test_version_2_files_are_refused_naming_both_versions():
    # Version 2 plans trusted op schemas that composite kernels break (an identity-returning op
    # could share an arena slot with a live tensor): such a file is re-emitted, never run.
    native = emitted("mlp")
    data = bytearray(native.encode())
    struct.pack_into("<I", data, 8, 2)
    with pytest.raises(NativeVersionError, match=r"native program format version 2 is not supported; this reader "
                                                 r"handles versions 3\.\.3\. Re-emit it"):
        decode(bytes(data))


def test_damaged_header_fails_its_checksum():
    data = bytearray(emitted("mlp").encode())
    data[40] ^= 0xFF
    with pytest.raises(NativeFormatError, match=r"the header does not match its sha256"):
        decode(bytes(data))


def test_every_single_byte_flip_before_the_segment_is_detected():
    # A flipped header byte used to change results silently: now every byte before the segment is
    # checksummed (prefix, header, the checksum itself) or must be zero (padding).
    data = emitted("mlp").encode()
    seg_off = struct.unpack_from("<Q", data, 24)[0]
    assert seg_off > 1000  # a real header, not a trivial one
    for pos in range(seg_off):
        for flip in (0x01, 0x80):
            bad = bytearray(data)
            bad[pos] ^= flip
            with pytest.raises((NativeFormatError, NativeVersionError)):
                decode(bytes(bad))


def test_a_header_that_passes_its_checksum_is_still_validated():
    native = emitted("mlp")
    from native.format import container

    data = container.pack(MAGIC, P.FORMAT_VERSION, b"\xc1 not msgpack", native.segment)
    with pytest.raises(NativeFormatError, match=r"the header does not match the program schema"):
        decode(data)


def test_damaged_constant_bytes_fail_their_hash():
    native = emitted("mlp")
    data = bytearray(native.encode())
    seg_off = struct.unpack_from("<Q", data, 24)[0]
    data[seg_off + native.program.constants[0].offset] ^= 1
    with pytest.raises(NativeFormatError, match=r"constants\[0\]: the blob's bytes do not hash to its sha256"):
        decode(bytes(data))
    decode(bytes(data), verify=False)  # hashing is what caught it


@pytest.mark.parametrize("edit, msg", [
    (lambda p: {"instructions": [P.KernelCall(0, [10_000], [1])]}, r"instructions\[0\].args\[0\]: value 10000 is out of range"),
    (lambda p: {"instructions": [P.JumpFalseCall(0, 10_000)]}, r"instructions\[0\]: jump target 10000 is outside"),
    (lambda p: {"instructions": [P.KernelCall(99, [], [])]}, r"instructions\[0\]: operator 99/-1 is out of range"),
    (lambda p: {"instructions": [P.AllocCall(0)]}, r"instructions\[0\]: only tensors can be allocated"),
    (lambda p: {"values": [*p.values, P.List([len(p.values)])]}, r"items\[0\]: value \d+ must precede the list"),
    (lambda p: {"values": [*p.values, P.Tensor(7, [1], [1, 1])]}, r"1 sizes but 2 strides"),
    (lambda p: {"values": [*p.values, P.Tensor(7, [P.Sym(50)], [1])]}, r"sizes\[0\]: expression 50 is out of range"),
    (lambda p: {"values": [*p.values, P.Tensor(99, [1], [1])]}, r"unknown scalar type 99"),
    (lambda p: {"values": [*p.values, P.Tensor(7, [10_000], [1], 0, 0)]},
     r"the view reaches byte 40000 of a \d+-byte constant"),
    (lambda p: {"constants": [P.Constant(p.constants[0].sha256, 1, 4)]}, r"must start at a multiple of 64"),
    (lambda p: {"constants": [P.Constant(p.constants[0].sha256, 0, 1 << 40)]}, r"fit in the \d+-byte segment"),
    (lambda p: {"constants": [P.Constant("xyz", 0, 4)]}, r"sha256 'xyz' is not 64 lowercase hex digits"),
    (lambda p: {"exprs": [[E_ADD, 2]]}, r"exprs\[0\]: opcode add at position 0 pops 2 of 0 values"),
    (lambda p: {"symbols": [P.Symbol("s0", 7, 0)]}, r"symbols\[0\]: input 7 is out of range"),
    (lambda p: {"operators": [P.Operator("os.system", "")]}, r"operators\[0\]: 'os.system'.'' is not an operator name"),
    (lambda p: {"outputs": [10_000]}, r"outputs\[0\]: value 10000 is out of range"),
    (lambda p: {"state": [P.State("w", "parameter", 0)]}, r"state\[0\]: state must be a tensor backed by a constant"),
])
def test_hostile_programs_are_rejected(edit, msg):
    native = emitted("mlp")
    with pytest.raises(NativeFormatError, match=msg) as e:
        decode(_replace(native, **edit(native.program)))
    assert isinstance(e.value, MalformedArtifactError)
    assert "the file is damaged" in str(e.value)


E_ADD = 2


def test_decoding_and_listing_do_not_import_torch(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "m.pt2n"
    write_program(path, emitted("cond"))
    code = ("import sys\nfrom native.format.verify import read_program\nfrom native.format.render import render\n"
            f"p = read_program({str(path)!r})\nassert 'jump_false' in render(p.program)\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\nprint('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]


def test_written_like_an_artifact_normal_mode_no_temp_left(tmp_path):
    # The native writer is serde.archive.write_atomic: mode 0666 minus the umask (not mkstemp's
    # 0600), the replaced file's mode kept, nothing left behind when the write fails.
    import os

    from serde.archive import ArtifactIOError

    umask = os.umask(0)
    os.umask(umask)
    path = tmp_path / "m.pt2n"
    write_program(path, emitted("mlp"))
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask
    os.chmod(path, 0o640)
    write_program(path, emitted("mlp"))
    assert path.stat().st_mode & 0o777 == 0o640
    (tmp_path / "dir.pt2n").mkdir()
    with pytest.raises(ArtifactIOError, match="nothing was written there"):
        write_program(tmp_path / "dir.pt2n", emitted("mlp"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir.pt2n", "m.pt2n"]
    assert read_program(path).encode() == emitted("mlp").encode()
