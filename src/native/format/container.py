"""The binary container of native program files.

Layout (all integers little-endian)::

    0   magic            8 bytes (b"PT2SNATV")
    8   format version   u32
    12  reserved         u32, always 0
    16  header length    u64
    24  segment offset   u64, a multiple of 64, >= 40 + header length
    32  segment length   u64
    40  header           msgpack, ``header length`` bytes
    40+header length     sha256 of bytes 0 .. 40+header length (prefix and header), 32 bytes
        zero padding up to ``segment offset``
        segment          raw bytes; every blob in it starts at a multiple of 64
    EOF exactly at segment offset + segment length

The header says where each blob lives (offset within the segment, length) and the sha256 of each
blob; the header checksum covers the prefix and the header itself, so every byte before the
segment is either checksummed or required to be zero. Inside the segment the bytes between blobs
(alignment padding) must be zero too (``native.format.verify``, which knows the blobs), so every byte of
the file is one or the other. The reader checks the checksum before it decodes the header, and
every number before anything is sliced.
"""

from __future__ import annotations

import hashlib
import os
import struct
from typing import BinaryIO

from native.errors import NativeFormatError, NativeVersionError
from serde.fileio import ArtifactIOError, read_all

__all__ = ["ALIGN", "pack", "unpack", "SegmentBuilder", "read_bytes", "check_blob"]

ALIGN = 64
_PREFIX = struct.Struct("<8sIIQQQ")
MAX_HEADER_BYTES = 1 << 31
CHECKSUM_BYTES = 32


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def pack(magic: bytes, version: int, header: bytes, segment: bytes | bytearray | memoryview) -> bytes:
    """Assemble a container; ``segment`` is stored verbatim after 64-byte aligned padding."""
    if len(magic) != 8:
        raise ValueError(f"a container magic is 8 bytes, got {magic!r}")
    seg_off = _align(_PREFIX.size + len(header) + CHECKSUM_BYTES)
    out = bytearray(_PREFIX.pack(magic, version, 0, len(header), seg_off, len(segment)))
    out += header
    out += hashlib.sha256(out).digest()
    out += bytes(seg_off - len(out))
    out += segment
    return bytes(out)


def unpack(buf: bytes | bytearray | memoryview, magic: bytes, versions: range, what: str
           ) -> tuple[int, memoryview, memoryview]:
    """Check the prefix of a container and return ``(version, header, segment)`` views.

    Raises:
        NativeFormatError: wrong magic, truncated, bad offsets, trailing bytes, a header checksum
            mismatch or non-zero padding.
        NativeVersionError: the version is outside ``versions``.
    """
    view = memoryview(buf).cast("B")
    if len(view) < _PREFIX.size:
        raise NativeFormatError(f"{what}: {len(view)} bytes is too short to be a {_kind(magic)} "
                                f"(the fixed prefix alone is {_PREFIX.size} bytes)")
    got, version, reserved, hlen, seg_off, seg_len = _PREFIX.unpack_from(view)
    if got != magic:
        raise NativeFormatError(f"{what}: not a {_kind(magic)}: the file starts with {bytes(got)!r}, "
                                f"expected {magic!r}. Write one with {_writer(magic)}.")
    if version not in versions:
        raise NativeVersionError(
            f"{what}: {_kind(magic)} format version {version} is not supported; this reader handles "
            f"versions {versions.start}..{versions.stop - 1}. Re-emit it with this pt2serde.")
    if reserved != 0:
        raise NativeFormatError(f"{what}: reserved prefix field is {reserved}, expected 0; the file is damaged")
    head_end = _PREFIX.size + hlen
    if hlen > MAX_HEADER_BYTES or head_end + CHECKSUM_BYTES > len(view):
        raise NativeFormatError(f"{what}: header length {hlen} runs past the end of the {len(view)}-byte file; "
                                "the file is truncated or damaged")
    if seg_off % ALIGN or seg_off < head_end + CHECKSUM_BYTES:
        raise NativeFormatError(f"{what}: segment offset {seg_off} must be a multiple of {ALIGN} at or after "
                                f"the header checksum's end ({head_end + CHECKSUM_BYTES}); the file is damaged")
    if seg_off + seg_len != len(view):
        raise NativeFormatError(
            f"{what}: the segment ({seg_off} + {seg_len} bytes) must end exactly at the end of the file "
            f"({len(view)} bytes); the file is truncated or has trailing bytes")
    stored = bytes(view[head_end:head_end + CHECKSUM_BYTES])
    if hashlib.sha256(view[:head_end]).digest() != stored:
        raise NativeFormatError(f"{what}: the header does not match its sha256 (stored {stored.hex()}); the "
                                "file is damaged or was edited after it was written. Re-emit it.")
    if any(view[head_end + CHECKSUM_BYTES:seg_off]):
        raise NativeFormatError(f"{what}: the padding before the segment (bytes {head_end + CHECKSUM_BYTES}.."
                                f"{seg_off}) is not zero; the file is damaged")
    return version, view[_PREFIX.size:head_end], view[seg_off:]


def check_blob(offset: int, nbytes: int, segment_len: int, where: str) -> None:
    """A blob must start 64-byte aligned and lie inside the segment."""
    if offset < 0 or nbytes < 0 or offset % ALIGN or offset + nbytes > segment_len:
        raise NativeFormatError(
            f"{where}: blob at offset {offset} with {nbytes} bytes must start at a multiple of {ALIGN} and fit "
            f"in the {segment_len}-byte segment; the file is damaged")


class SegmentBuilder:
    """Blobs deduplicated by sha256, each placed at a 64-byte aligned offset."""

    def __init__(self) -> None:
        self._chunks: list[bytes | memoryview] = []
        self._size = 0
        self.index: dict[str, tuple[int, int]] = {}  # sha256 -> (offset, nbytes)

    def add(self, data: bytes | memoryview, sha256: str | None = None) -> tuple[str, int, int]:
        """Add ``data`` (once per content); returns ``(sha256, offset, nbytes)``."""
        sha = sha256 or hashlib.sha256(data).hexdigest()
        hit = self.index.get(sha)
        if hit is not None:
            return sha, hit[0], hit[1]
        pad = _align(self._size) - self._size
        if pad:
            self._chunks.append(bytes(pad))
            self._size += pad
        self.index[sha] = (self._size, len(data))
        self._chunks.append(data)
        self._size += len(data)
        return sha, self._size - len(data), len(data)

    def build(self) -> bytes:
        return b"".join(bytes(c) if isinstance(c, memoryview) else c for c in self._chunks)


def read_bytes(src: str | os.PathLike | BinaryIO | bytes | bytearray | memoryview, what: str) -> memoryview:
    """The whole file as a writable buffer (paths and file objects) or a view of the given bytes."""
    try:
        return read_all(src)[0]
    except ArtifactIOError as e:
        raise NativeFormatError(f"{what}: cannot read the file: {e}") from None


def _kind(magic: bytes) -> str:
    return "native program" if magic == b"PT2SNATV" else f"{magic!r} file"


def _writer(magic: bytes) -> str:
    return "`pt2serde emit`" if magic == b"PT2SNATV" else "pt2serde"
