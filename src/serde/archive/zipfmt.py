"""The zip layout of a pt2serde archive: writing it, parsing it, and checking its framing.

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
reader demands exactly those bytes around the members' data (:func:`check_framing`).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from serde.core.limits import Limits
from serde.errors import SerializeError
from serde.fileio.pool import PARALLEL_BYTES
from serde.fileio.reader import Held, ReadAt

from .errors import (
    FIX,
    CompressedMemberError,
    CorruptZipError,
    DuplicateMemberError,
    NotAnArchiveError,
    OverlappingMembersError,
    SizeLimitError,
    TorchArchiveError,
    TruncatedArchiveError,
    UnsafeMemberNameError,
)
from .members import check_name, is_json_member

__all__ = ["ALIGNMENT", "Record", "Entry", "layout", "big_spans", "central_directory", "torch_writer",
           "reject_foreign", "check_members", "check_framing"]

ALIGNMENT = 64

_LFH = struct.Struct("<4sHHHHHIIIHH")           # local file header, 30 bytes
_CDH = struct.Struct("<4sHHHHHHIIIHHHHHII")     # central directory header, 46 bytes
_EOCD = struct.Struct("<4sHHHHIIH")             # end of central directory, 22 bytes
_EOCD64 = struct.Struct("<4sQHHIIQQQQ")         # zip64 end of central directory, 56 bytes
_LOC64 = struct.Struct("<4sIQI")                # zip64 end of central directory locator, 20 bytes
_SIG_LFH, _SIG_CDH = b"PK\x03\x04", b"PK\x01\x02"
_SIG_EOCD, _SIG_EOCD64, _SIG_LOC64 = b"PK\x05\x06", b"PK\x06\x06", b"PK\x06\x07"
_ZIP64_LIMIT = 0xFFFFFFFF   # a 32-bit field holding this value means "see the zip64 extra"
# Sizes, offsets and counts from this value on are written in zip64 records. Writer and reader both
# read it at call time (tests lower it to exercise zip64 without 4 GiB files).
_ZIP64_THRESHOLD = _ZIP64_LIMIT
_ZIP64_ID, _PAD_ID = 0x0001, 0xD935
_DOS_DATE, _DOS_TIME = (0 << 9) | (1 << 5) | 1, 0   # 1980-01-01 00:00:00
_MADE_BY = (3 << 8) | 20                            # unix, spec 2.0
_EXTERNAL_ATTR = 0o100644 << 16                     # regular file, rw-r--r--
_FLAG_ENCRYPTED, _FLAG_UTF8 = 0x1, 0x800
_PAD_HEAD = struct.Struct("<HHH")                   # padding block: id, length, alignment
_ZEROS = bytes(ALIGNMENT)


# The header fields the writer writes, defined once: layout packs them, and the reader's framing
# check compares the fields it unpacks with them.
def _local_header(need: int, crc: int, size32: int, nlen: int, elen: int) -> tuple:
    return (_SIG_LFH, need, 0, 0, _DOS_TIME, _DOS_DATE, crc, size32, size32, nlen, elen)


def _directory_entry(need: int, crc: int, size32: int, nlen: int, elen: int, offset32: int) -> tuple:
    return (_SIG_CDH, _MADE_BY, need, 0, 0, _DOS_TIME, _DOS_DATE, crc, size32, size32, nlen, elen, 0, 0, 0,
            _EXTERNAL_ATTR, offset32)


def _end_record(n16: int, cd_size32: int, cd_off32: int) -> tuple:
    return (_SIG_EOCD, 0, 0, n16, n16, cd_size32, cd_off32, 0)


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
        extra = struct.pack("<HHQQ", _ZIP64_ID, 16, size, size) if big else b""
        # Pad with one extra block so the data lands on a 64-byte boundary.
        base = pos + _LFH.size + len(name) + len(extra)
        pad = _padding(base)
        extra += _PAD_HEAD.pack(_PAD_ID, pad - 4, ALIGNMENT) + _ZEROS[:pad - 6]
        need = 45 if big else 20
        s32 = _ZIP64_LIMIT if big else size
        yield _LFH.pack(*_local_header(need, e.crc, s32, len(name), len(extra))) + name + extra
        yield e.data
        n += 1
        cd_extra = b""
        off32 = pos
        if big:
            cd_extra += struct.pack("<QQ", size, size)
        if pos >= zip64_limit:
            cd_extra += struct.pack("<Q", pos)
            off32 = _ZIP64_LIMIT
        if cd_extra:
            need = 45
            cd_extra = struct.pack("<HH", _ZIP64_ID, len(cd_extra)) + cd_extra
        central.append(_CDH.pack(*_directory_entry(need, e.crc, s32, len(name), len(cd_extra), off32))
                       + name + cd_extra)
        pos = base + pad + size
    cd = b"".join(central)
    cd_off = pos
    tail = b""
    if _zip64_end(n, len(cd), cd_off, zip64_limit):
        eocd64_off = cd_off + len(cd)
        tail += _EOCD64.pack(_SIG_EOCD64, _EOCD64.size - 12, _MADE_BY, 45, 0, 0, n, n, len(cd), cd_off)
        tail += _LOC64.pack(_SIG_LOC64, 0, eocd64_off, 1)
        n16, cd_size32, cd_off32 = 0xFFFF, _ZIP64_LIMIT, _ZIP64_LIMIT
    else:
        n16, cd_size32, cd_off32 = n, len(cd), cd_off
    tail += _EOCD.pack(*_end_record(n16, cd_size32, cd_off32))
    yield cd + tail


def big_spans(buf: memoryview, read_at: ReadAt, limits: Limits, where: str) -> list[tuple[int, int]]:
    """Where the data of the big members lies in ``buf``, as the zip directory (already read into
    the end of ``buf``) and the local headers (read with ``read_at``) say; empty when they make no
    sense (the verifying read then finds out why)."""
    end = len(buf)
    try:
        records, _ = central_directory(buf, limits, where)
    except SerializeError:
        return []
    spans, header = [], bytearray(_LFH.size)
    for rec in records:
        if rec.usize < PARALLEL_BYTES or rec.offset + _LFH.size > end:
            continue
        if read_at(memoryview(header), rec.offset) != _LFH.size:
            return []
        nlen, elen = struct.unpack_from("<HH", header, 26)
        lo = rec.offset + _LFH.size + nlen + elen
        spans.append((lo, lo + rec.usize))
    return spans


def central_directory(buf: memoryview, limits: Limits, where: str) -> tuple[list[Record], int]:
    """Locate and parse the central directory, checking every bound; also return its offset."""
    size = len(buf)
    if size < _EOCD.size or bytes(buf[-_EOCD.size:-_EOCD.size + 4]) != _SIG_EOCD:
        head = bytes(buf[:4])
        if head != _SIG_LFH and head != _SIG_EOCD:
            raise NotAnArchiveError(f"{where} is not a pt2serde archive (not a zip file); "
                                    "save programs with serde.save(ep, path)")
        tail = bytes(buf[-(_EOCD.size + 0xFFFF):])
        if _SIG_EOCD in tail:
            raise CorruptZipError(f"{where}: extra bytes follow the zip end record (a zip comment or "
                                  f"appended data), which pt2serde archives never have; {FIX}")
        raise TruncatedArchiveError(f"{where} is truncated: {size} bytes and no zip end record (an "
                                    f"interrupted download or copy?); {FIX}")
    eocd_pos = size - _EOCD.size
    _, disk, cd_disk, n_disk, n, cd_size, cd_off, comment = _EOCD.unpack_from(buf, eocd_pos)
    if comment:
        raise CorruptZipError(f"{where}: the zip end record declares a {comment}-byte comment; {FIX}")
    cd_end = eocd_pos
    loc_pos = eocd_pos - _LOC64.size
    if loc_pos >= 0 and bytes(buf[loc_pos:loc_pos + 4]) == _SIG_LOC64:
        _, _, e64_off, _ = _LOC64.unpack_from(buf, loc_pos)
        if e64_off + _EOCD64.size != loc_pos or bytes(buf[e64_off:e64_off + 4]) != _SIG_EOCD64:
            raise CorruptZipError(f"{where}: the zip64 end record is not where its locator says; {FIX}")
        (_, _, _, _, disk64, cd_disk64, n_disk64, n64, cd_size64, cd_off64) = _EOCD64.unpack_from(buf, e64_off)
        for small, big, what in ((n, n64, "entry count"), (cd_size, cd_size64, "directory size"),
                                 (cd_off, cd_off64, "directory offset")):
            if small not in (0xFFFF, _ZIP64_LIMIT, big):
                raise CorruptZipError(f"{where}: the zip and zip64 end records disagree on the {what}; {FIX}")
        disk, cd_disk, n_disk, n, cd_size, cd_off = disk64, cd_disk64, n_disk64, n64, cd_size64, cd_off64
        cd_end = e64_off
    if disk or cd_disk or n_disk != n:
        raise CorruptZipError(f"{where}: multi-volume zips are not supported; {FIX}")
    if n > limits.max_members:
        raise SizeLimitError(f"{where} declares {n} members, more than Limits.max_members="
                             f"{limits.max_members}; if the file is trusted, pass a larger limit")
    if cd_off + cd_size != cd_end or n * _CDH.size > cd_size:
        raise CorruptZipError(f"{where}: the central directory ({cd_size} bytes at offset {cd_off}, "
                              f"{n} entries) does not fit before the end record; {FIX}")
    records, pos = [], cd_off
    for i in range(n):
        if pos + _CDH.size > cd_end or bytes(buf[pos:pos + 4]) != _SIG_CDH:
            raise CorruptZipError(f"{where}: central directory entry {i} is damaged; {FIX}")
        f = _CDH.unpack_from(buf, pos)
        flags, method, csize, usize = f[3], f[4], f[8], f[9]
        nlen, elen, clen, offset = f[10], f[11], f[12], f[16]
        end = pos + _CDH.size + nlen + elen + clen
        if end > cd_end:
            raise CorruptZipError(f"{where}: central directory entry {i} runs past the directory; {FIX}")
        raw = bytes(buf[pos + _CDH.size:pos + _CDH.size + nlen])
        rec = Record(i, raw, flags, method, csize, usize, offset, f[7])
        _apply_zip64(rec, buf[pos + _CDH.size + nlen:pos + _CDH.size + nlen + elen], where)
        records.append(rec)
        pos = end
    if pos != cd_end:
        raise CorruptZipError(f"{where}: {cd_end - pos} unexplained bytes in the central directory; {FIX}")
    return records, cd_off


def _extra_blocks(extra: memoryview, where: str) -> Iterator[tuple[int, memoryview]]:
    pos = 0
    while pos < len(extra):
        if pos + 4 > len(extra):
            raise CorruptZipError(f"{where}: a zip extra field is cut short; {FIX}")
        bid, blen = struct.unpack_from("<HH", extra, pos)
        if pos + 4 + blen > len(extra):
            raise CorruptZipError(f"{where}: a zip extra field block runs past its field; {FIX}")
        yield bid, extra[pos + 4:pos + 4 + blen]
        pos += 4 + blen


def _apply_zip64(rec: Record, extra: memoryview, where: str) -> None:
    """Replace 0xFFFFFFFF fields by the values of the zip64 extra block (in the spec's order)."""
    if _ZIP64_LIMIT not in (rec.usize, rec.csize, rec.offset):
        return  # the common case, tested without building the list below
    wanted = [f for f in ("usize", "csize", "offset") if getattr(rec, f) == _ZIP64_LIMIT]
    for bid, block in _extra_blocks(extra, f"{where}: central directory entry {rec.index}"):
        if bid == _ZIP64_ID:
            if len(block) < 8 * len(wanted):
                break
            for k, f in enumerate(wanted):
                setattr(rec, f, struct.unpack_from("<Q", block, 8 * k)[0])
            return
    raise CorruptZipError(f"{where}: central directory entry {rec.index} lacks its zip64 sizes; {FIX}")


# Member names (last path component) that only torch's zip writers produce.
_TORCH_EXPORT_MARKERS = ("archive_format", "serialized_exported_program.json", "models/model.json")
_TORCH_SAVE_MARKERS = ("data.pkl",)


def torch_writer(records: list[Record]) -> str | None:
    names = [r.raw_name.decode("utf-8", "replace") for r in records]
    if any(n.endswith(_TORCH_EXPORT_MARKERS) for n in names):
        return "torch.export.save"
    if any(n.endswith(_TORCH_SAVE_MARKERS) for n in names):
        return "torch.save"
    return None


def reject_foreign(records: list[Record], where: str) -> None:
    writer = torch_writer(records)
    if writer == "torch.export.save":
        raise TorchArchiveError(
            f"{where} was written by torch.export.save, not pt2serde. Convert it once with "
            "`pt2serde import IN OUT` (this runs torch.export.load, which unpickles: only do it for "
            "files you trust), then load OUT with serde.load"
        )
    if writer == "torch.save":
        raise TorchArchiveError(
            f"{where} was written by torch.save (a pickle), not pt2serde; it cannot be loaded without "
            "running pickle. Export the model with torch.export.export and save it with serde.save"
        )


def _at(where: str, name: str) -> str:
    """``where: member 'name'``, for messages: formatted only when one is raised (most loads build none)."""
    return f"{where}: member {name!r}"


def check_members(buf: memoryview, records: list[Record], cd_off: int, limits: Limits, where: str,
                   held: Held) -> tuple[dict[str, memoryview], dict[str, int]]:
    """Check each entry against its local header and lay out all entries without gap or overlap;
    return each member's data and the file offset where it starts.

    A member's data is its span of ``buf``, or the buffer in ``held`` read for exactly its data
    start and size; a span held apart whose bytes ``buf`` lacks is never a verified member's
    otherwise, so reading them here would only find a gap or a header that is not there.
    """
    seen: set[str] = set()
    spans: list[tuple[int, int, int, str]] = []
    for rec in records:
        try:
            rec.name = rec.raw_name.decode("utf-8")
        except UnicodeDecodeError:
            raise UnsafeMemberNameError(f"{where}: member name {rec.raw_name!r} is not valid UTF-8; {FIX}") from None
        check_name(rec.name, where)
        if rec.name in seen:
            raise DuplicateMemberError(
                f"{_at(where, rec.name)} occurs twice in the zip directory; tools may disagree on which copy is real, so "
                f"the archive is rejected: {FIX}"
            )
        seen.add(rec.name)
        if rec.flags & _FLAG_ENCRYPTED:
            raise CorruptZipError(f"{_at(where, rec.name)} is encrypted; pt2serde archives are never encrypted: {FIX}")
        if rec.method != 0:
            raise CompressedMemberError(
                f"{_at(where, rec.name)} is compressed (zip method {rec.method}); pt2serde stores members uncompressed, and "
                f"a compressed member may be a zip bomb. Do not recompress archives: {FIX}"
            )
        if rec.flags & ~_FLAG_UTF8:
            raise CorruptZipError(f"{_at(where, rec.name)} has unsupported zip flags 0x{rec.flags:04x}; {FIX}")
        is_json = is_json_member(rec.name)
        cap = limits.max_json_bytes if is_json else limits.max_member_bytes
        if rec.usize > cap or rec.csize > cap:
            raise SizeLimitError(
                f"{_at(where, rec.name)} declares {max(rec.usize, rec.csize)} bytes, more than the limit of {cap} "
                f"(Limits.{'max_json_bytes' if is_json else 'max_member_bytes'}); "
                "the file is hostile or damaged. If it is trusted, pass a larger limit"
            )
        if rec.csize != rec.usize:
            raise CorruptZipError(f"{_at(where, rec.name)}: stored size {rec.csize} != size {rec.usize}; {FIX}")
        spans.append((rec.offset, _local_data_start(buf, rec, where), rec.usize, rec.name))
    views: dict[str, memoryview] = {}
    starts: dict[str, int] = {}
    pos = 0
    for start, data_start, size, name in sorted(spans):
        if start < pos:
            raise OverlappingMembersError(
                f"{_at(where, name)} starts at offset {start}, inside the previous member (which ends at {pos}); two "
                f"members share bytes, so the file is hostile or damaged: {FIX}"
            )
        if start > pos:
            raise CorruptZipError(f"{_at(where, name)}: {start - pos} unaccounted bytes before it (offset {pos}); {FIX}")
        pos = data_start + size
        own = held.get(data_start)
        views[name] = own if own is not None and len(own) == size else buf[data_start:pos]
        starts[name] = data_start
    if pos > cd_off:
        raise OverlappingMembersError(f"{where}: the last member ends at offset {pos}, inside the central "
                                      f"directory (which starts at {cd_off}); {FIX}")
    if pos < cd_off:
        raise CorruptZipError(f"{where}: {cd_off - pos} unaccounted bytes before the central directory; {FIX}")
    return views, starts


def _local_data_start(buf: memoryview, rec: Record, where: str) -> int:
    """Check the local header agrees with the central directory; return where the data starts."""
    off = rec.offset
    if off + _LFH.size > len(buf) or bytes(buf[off:off + 4]) != _SIG_LFH:
        raise CorruptZipError(f"{_at(where, rec.name)}: no local header at offset {off}; {FIX}")
    _, _, flags, method, _, _, _, csize, usize, nlen, elen = _LFH.unpack_from(buf, off)
    name_end = off + _LFH.size + nlen
    data_start = name_end + elen
    if data_start > len(buf):
        raise TruncatedArchiveError(f"{_at(where, rec.name)}: the local header runs past the end of the file; {FIX}")
    if bytes(buf[off + _LFH.size:name_end]) != rec.raw_name:
        raise CorruptZipError(f"{_at(where, rec.name)}: the local header names a different member; {FIX}")
    if _ZIP64_LIMIT in (csize, usize):
        for bid, block in _extra_blocks(buf[name_end:data_start], _at(where, rec.name)):
            if bid == _ZIP64_ID and len(block) >= 16:
                usize, csize = struct.unpack_from("<QQ", block, 0)
                break
    if (flags, method, csize, usize) != (rec.flags, rec.method, rec.csize, rec.usize):
        raise CorruptZipError(f"{_at(where, rec.name)}: the local header disagrees with the central directory on flags, "
                              f"method or size; {FIX}")
    if data_start % ALIGNMENT:
        raise CorruptZipError(f"{_at(where, rec.name)}: data at offset {data_start} is not {ALIGNMENT}-byte aligned, so the "
                              f"file was not written by pt2serde (or was rewritten by another zip tool); {FIX}")
    if data_start + rec.usize > len(buf):
        raise TruncatedArchiveError(f"{_at(where, rec.name)}: declares {rec.usize} bytes but the file ends first; {FIX}")
    return data_start


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
    eocd = len(buf) - _EOCD.size
    if _zip64_end(n, eocd - cd_off, cd_off, limit):
        return False
    if _EOCD.unpack_from(buf, eocd) != _end_record(n, eocd - cd_off, cd_off):
        return False
    pos, cd, prev = 0, cd_off, ""
    for r in records:
        name, size, nlen = r.name, r.usize, len(r.raw_name)
        if name <= prev or r.offset != pos or size >= limit:
            return False  # not in the writer's (sorted) order, or a zip64 member
        crc = crcs[name]
        base = pos + _LFH.size + nlen
        pad = _padding(base)
        if (_LFH.unpack_from(buf, pos) != _local_header(20, crc, size, nlen, pad)
                or _PAD_HEAD.unpack_from(buf, base) != (_PAD_ID, pad - 4, ALIGNMENT)
                or buf[base + 6:base + pad] != _ZEROS[:pad - 6]
                or _CDH.unpack_from(buf, cd) != _directory_entry(20, crc, size, nlen, 0, pos)):
            return False
        prev, pos, cd = name, base + pad + size, cd + _CDH.size + nlen
    return pos == cd_off and cd == eocd
