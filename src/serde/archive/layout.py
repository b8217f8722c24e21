"""The zip layout of a pt2serde archive: the records, the file the writer lays out, and the
check that a file read is exactly that file.

Layout (format_version 1; 2 when the archive has extra files; 3 with several programs; 4 when
storages are kept in safetensors files next to it):

* A plain zip (readable by ``unzip``) whose members are all *stored* (never compressed), sorted by
  name, with fixed timestamps (1980-01-01 00:00), fixed attributes (regular file, mode 0644), no
  comments and no data descriptors. Zip64 records appear only when a size or offset needs them.
* Every member's data starts at a file offset that is a multiple of 64; the gap is filled by a
  padding block (id ``0xD935``, as Android's zipalign) in the local header's extra field.
* The members (:mod:`serde.archive.members`) and a ``manifest.json`` (:class:`serde.core.schema.Manifest`)
  naming the format, its version, the schema version, the torch version and the sha256, the
  XXH3-128 (from schema 2.4 on) and the size of every other member.

The same members always give byte-identical files, whatever the order of the input mapping; the
reader demands exactly those bytes around the members' data (:func:`check_framing`). The parser
of what a file claims is :mod:`serde.archive.parse`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from .errors import FIX, CorruptZipError

__all__ = ["ALIGNMENT", "Record", "Entry", "layout", "check_framing", "LFH", "CDH", "EOCD", "EOCD64", "LOC64",
           "SIG_LFH", "SIG_CDH", "SIG_EOCD", "SIG_EOCD64", "SIG_LOC64", "ZIP64_LIMIT", "ZIP64_ID",
           "FLAG_ENCRYPTED", "FLAG_UTF8"]

ALIGNMENT = 64

LFH = struct.Struct("<4sHHHHHIIIHH")           # local file header, 30 bytes
CDH = struct.Struct("<4sHHHHHHIIIHHHHHII")     # central directory header, 46 bytes
EOCD = struct.Struct("<4sHHHHIIH")             # end of central directory, 22 bytes
EOCD64 = struct.Struct("<4sQHHIIQQQQ")         # zip64 end of central directory, 56 bytes
LOC64 = struct.Struct("<4sIQI")                # zip64 end of central directory locator, 20 bytes
SIG_LFH, SIG_CDH = b"PK\x03\x04", b"PK\x01\x02"
SIG_EOCD, SIG_EOCD64, SIG_LOC64 = b"PK\x05\x06", b"PK\x06\x06", b"PK\x06\x07"
ZIP64_LIMIT = 0xFFFFFFFF   # a 32-bit field holding this value means "see the zip64 extra"
# Sizes, offsets and counts from this value on are written in zip64 records. Writer and reader both
# read it at call time (tests lower it to exercise zip64 without 4 GiB files).
_ZIP64_THRESHOLD = ZIP64_LIMIT
ZIP64_ID, _PAD_ID = 0x0001, 0xD935
_DOS_DATE, _DOS_TIME = (0 << 9) | (1 << 5) | 1, 0   # 1980-01-01 00:00:00
_MADE_BY = (3 << 8) | 20                            # unix, spec 2.0
_EXTERNAL_ATTR = 0o100644 << 16                     # regular file, rw-r--r--
FLAG_ENCRYPTED, FLAG_UTF8 = 0x1, 0x800
_PAD_HEAD = struct.Struct("<HHH")                   # padding block: id, length, alignment
_ZEROS = bytes(ALIGNMENT)


# The header fields the writer writes, defined once: layout packs them, and the reader's framing
# check compares the fields it unpacks with them.
def _local_header(need: int, crc: int, size32: int, nlen: int, elen: int) -> tuple:
    return (SIG_LFH, need, 0, 0, _DOS_TIME, _DOS_DATE, crc, size32, size32, nlen, elen)


def _directory_entry(need: int, crc: int, size32: int, nlen: int, elen: int, offset32: int) -> tuple:
    return (SIG_CDH, _MADE_BY, need, 0, 0, _DOS_TIME, _DOS_DATE, crc, size32, size32, nlen, elen, 0, 0, 0,
            _EXTERNAL_ATTR, offset32)


def _end_record(n16: int, cd_size32: int, cd_off32: int) -> tuple:
    return (SIG_EOCD, 0, 0, n16, n16, cd_size32, cd_off32, 0)


def _padding(base: int) -> int:
    """Length of the padding block that puts data following ``base`` on a 64-byte boundary (its
    4-byte block header and 2-byte alignment value included, as zipalign writes it)."""
    return (-base - 6) % ALIGNMENT + 6


def _zip64_end(n: int, cd_size: int, cd_off: int, zip64_limit: int) -> bool:
    """Whether the writer adds zip64 end records for this entry count and directory."""
    return n >= min(0xFFFF, zip64_limit) or cd_size >= zip64_limit or cd_off >= zip64_limit


@dataclass
class Record:
    """One central directory entry, as declared (not yet trusted)."""

    index: int
    raw_name: bytes
    flags: int
    method: int
    csize: int
    usize: int
    offset: int
    crc: int
    name: str = ""


class Entry:
    __slots__ = ("name", "data", "sha", "crc", "xxh")

    def __init__(self, name: str, data: memoryview, sha: str, crc: int, xxh: str = "") -> None:
        self.name, self.data, self.sha, self.crc, self.xxh = name, data, sha, crc, xxh


def layout(entries: Iterable[Entry], zip64_limit: int | None = None) -> Iterator[bytes | memoryview]:
    """The file as chunks (local header, data, ..., central directory and end records), each
    made when taken, so that an entry is needed only once the chunks before it are written
    (``zip64_limit``: by default the module's threshold, read when the first chunk is taken)."""
    if zip64_limit is None:
        zip64_limit = _ZIP64_THRESHOLD
    n = 0
    central: list[bytes] = []
    pos = 0
    for e in entries:
        name = e.name.encode("ascii")
        size = len(e.data)
        big = size >= zip64_limit
        extra = struct.pack("<HHQQ", ZIP64_ID, 16, size, size) if big else b""
        # Pad with one extra block so the data lands on a 64-byte boundary.
        base = pos + LFH.size + len(name) + len(extra)
        pad = _padding(base)
        extra += _PAD_HEAD.pack(_PAD_ID, pad - 4, ALIGNMENT) + _ZEROS[:pad - 6]
        need = 45 if big else 20
        s32 = ZIP64_LIMIT if big else size
        yield LFH.pack(*_local_header(need, e.crc, s32, len(name), len(extra))) + name + extra
        yield e.data
        n += 1
        cd_extra = b""
        off32 = pos
        if big:
            cd_extra += struct.pack("<QQ", size, size)
        if pos >= zip64_limit:
            cd_extra += struct.pack("<Q", pos)
            off32 = ZIP64_LIMIT
        if cd_extra:
            need = 45
            cd_extra = struct.pack("<HH", ZIP64_ID, len(cd_extra)) + cd_extra
        central.append(CDH.pack(*_directory_entry(need, e.crc, s32, len(name), len(cd_extra), off32))
                       + name + cd_extra)
        pos = base + pad + size
    cd = b"".join(central)
    cd_off = pos
    tail = b""
    if _zip64_end(n, len(cd), cd_off, zip64_limit):
        eocd64_off = cd_off + len(cd)
        tail += EOCD64.pack(SIG_EOCD64, EOCD64.size - 12, _MADE_BY, 45, 0, 0, n, n, len(cd), cd_off)
        tail += LOC64.pack(SIG_LOC64, 0, eocd64_off, 1)
        n16, cd_size32, cd_off32 = 0xFFFF, ZIP64_LIMIT, ZIP64_LIMIT
    else:
        n16, cd_size32, cd_off32 = n, len(cd), cd_off
    tail += EOCD.pack(*_end_record(n16, cd_size32, cd_off32))
    yield cd + tail


def check_framing(buf: memoryview, records: list[Record], cd_off: int, views: dict[str, memoryview],
                   crcs: dict[str, int], where: str) -> None:
    """Demand that every byte outside the members' data is what :func:`write_archive` writes for
    these members: the writer is deterministic, so any other byte (a date, a version, padding,
    attributes, a CRC) is damage or tampering that the structural checks let through."""
    if _framing_as_written(buf, records, cd_off, crcs):
        return
    names = sorted(views)
    chunks = list(layout([Entry(n, views[n], "", crcs[n]) for n in names], _ZIP64_THRESHOLD))
    pos = 0
    for k, chunk in enumerate(chunks):
        if k % 2:  # member data, already checked by sha256
            pos += len(chunk)
            continue
        got = buf[pos:pos + len(chunk)]
        if got != chunk:
            at = pos + next((i for i in range(len(got)) if got[i] != chunk[i]), len(got))
            part = (f"the local header of member {names[k // 2]!r}" if k < len(chunks) - 1
                    else "the central directory or end record")
            raise CorruptZipError(f"{where}: byte {at} (in {part}) differs from what pt2serde writes for "
                                  f"these members; the file was damaged or rewritten by another tool: {FIX}")
        pos += len(chunk)
    if pos != len(buf):
        raise CorruptZipError(f"{where}: {len(buf) - pos} unexplained bytes at the end; {FIX}")


def _framing_as_written(buf: memoryview, records: list[Record], cd_off: int, crcs: dict[str, int]) -> bool:
    """True when the bytes outside the members' data are, field by field, those :func:`layout`
    writes for these members; False when they are not, or when any record needs zip64.

    Regenerating the headers and comparing bytes costs a few percent of loading a small program;
    comparing the unpacked fields with those the writer packs costs a fraction of that. Every byte is
    still accounted for: in file order, each local header, its name, its padding block and zeros,
    its data, then each directory entry and the end record, with nothing between or after. The
    structural checks have already tied names, sizes, flags and methods of the two headers
    together and laid the data out without gaps; what is compared here is everything else. A
    False answer sends the caller to the byte comparison, which also says which byte differs.
    """
    limit = _ZIP64_THRESHOLD
    n = len(records)
    eocd = len(buf) - EOCD.size
    if _zip64_end(n, eocd - cd_off, cd_off, limit):
        return False
    if EOCD.unpack_from(buf, eocd) != _end_record(n, eocd - cd_off, cd_off):
        return False
    pos, cd, prev = 0, cd_off, ""
    for r in records:
        name, size, nlen = r.name, r.usize, len(r.raw_name)
        if name <= prev or r.offset != pos or size >= limit:
            return False  # not in the writer's (sorted) order, or a zip64 member
        crc = crcs[name]
        base = pos + LFH.size + nlen
        pad = _padding(base)
        if (LFH.unpack_from(buf, pos) != _local_header(20, crc, size, nlen, pad)
                or _PAD_HEAD.unpack_from(buf, base) != (_PAD_ID, pad - 4, ALIGNMENT)
                or buf[base + 6:base + pad] != _ZEROS[:pad - 6]
                or CDH.unpack_from(buf, cd) != _directory_entry(20, crc, size, nlen, 0, pos)):
            return False
        prev, pos, cd = name, base + pad + size, cd + CDH.size + nlen
    return pos == cd_off and cd == eocd
