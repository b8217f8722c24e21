"""Parsing what a file claims to be: the zip's end records and central directory, each member's
local header, name, flags and size, and the members laid out without gap or overlap. Nothing
here is trusted until the digests and the framing check (:mod:`serde.archive.layout`) agree.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

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
from .layout import (
    ALIGNMENT,
    CDH,
    EOCD,
    EOCD64,
    FLAG_ENCRYPTED,
    FLAG_UTF8,
    LFH,
    LOC64,
    SIG_CDH,
    SIG_EOCD,
    SIG_EOCD64,
    SIG_LFH,
    SIG_LOC64,
    ZIP64_ID,
    ZIP64_LIMIT,
    Record,
)
from .members import check_name, is_json_member

__all__ = ["big_spans", "central_directory", "torch_writer", "reject_foreign", "check_members"]


def big_spans(buf: memoryview, read_at: ReadAt, limits: Limits, where: str) -> list[tuple[int, int]]:
    """Where the data of the big members lies in ``buf``, as the zip directory (already read into
    the end of ``buf``) and the local headers (read with ``read_at``) say; empty when they make no
    sense (the verifying read then finds out why)."""
    end = len(buf)
    try:
        records, _ = central_directory(buf, limits, where)
    except SerializeError:
        return []
    spans, header = [], bytearray(LFH.size)
    for rec in records:
        if rec.usize < PARALLEL_BYTES or rec.offset + LFH.size > end:
            continue
        if read_at(memoryview(header), rec.offset) != LFH.size:
            return []
        nlen, elen = struct.unpack_from("<HH", header, 26)
        lo = rec.offset + LFH.size + nlen + elen
        spans.append((lo, lo + rec.usize))
    return spans


def central_directory(buf: memoryview, limits: Limits, where: str) -> tuple[list[Record], int]:
    """Locate and parse the central directory, checking every bound; also return its offset."""
    size = len(buf)
    if size < EOCD.size or bytes(buf[-EOCD.size:-EOCD.size + 4]) != SIG_EOCD:
        head = bytes(buf[:4])
        if head != SIG_LFH and head != SIG_EOCD:
            raise NotAnArchiveError(f"{where} is not a pt2serde archive (not a zip file); "
                                    "save programs with serde.save(ep, path)")
        tail = bytes(buf[-(EOCD.size + 0xFFFF):])
        if SIG_EOCD in tail:
            raise CorruptZipError(f"{where}: extra bytes follow the zip end record (a zip comment or "
                                  f"appended data), which pt2serde archives never have; {FIX}")
        raise TruncatedArchiveError(f"{where} is truncated: {size} bytes and no zip end record (an "
                                    f"interrupted download or copy?); {FIX}")
    eocd_pos = size - EOCD.size
    _, disk, cd_disk, n_disk, n, cd_size, cd_off, comment = EOCD.unpack_from(buf, eocd_pos)
    if comment:
        raise CorruptZipError(f"{where}: the zip end record declares a {comment}-byte comment; {FIX}")
    cd_end = eocd_pos
    loc_pos = eocd_pos - LOC64.size
    if loc_pos >= 0 and bytes(buf[loc_pos:loc_pos + 4]) == SIG_LOC64:
        _, _, e64_off, _ = LOC64.unpack_from(buf, loc_pos)
        if e64_off + EOCD64.size != loc_pos or bytes(buf[e64_off:e64_off + 4]) != SIG_EOCD64:
            raise CorruptZipError(f"{where}: the zip64 end record is not where its locator says; {FIX}")
        (_, _, _, _, disk64, cd_disk64, n_disk64, n64, cd_size64, cd_off64) = EOCD64.unpack_from(buf, e64_off)
        for small, big, what in ((n, n64, "entry count"), (cd_size, cd_size64, "directory size"),
                                 (cd_off, cd_off64, "directory offset")):
            if small not in (0xFFFF, ZIP64_LIMIT, big):
                raise CorruptZipError(f"{where}: the zip and zip64 end records disagree on the {what}; {FIX}")
        disk, cd_disk, n_disk, n, cd_size, cd_off = disk64, cd_disk64, n_disk64, n64, cd_size64, cd_off64
        cd_end = e64_off
    if disk or cd_disk or n_disk != n:
        raise CorruptZipError(f"{where}: multi-volume zips are not supported; {FIX}")
    if n > limits.max_members:
        raise SizeLimitError(f"{where} declares {n} members, more than Limits.max_members="
                             f"{limits.max_members}; if the file is trusted, pass a larger limit")
    if cd_off + cd_size != cd_end or n * CDH.size > cd_size:
        raise CorruptZipError(f"{where}: the central directory ({cd_size} bytes at offset {cd_off}, "
                              f"{n} entries) does not fit before the end record; {FIX}")
    records, pos = [], cd_off
    for i in range(n):
        if pos + CDH.size > cd_end or bytes(buf[pos:pos + 4]) != SIG_CDH:
            raise CorruptZipError(f"{where}: central directory entry {i} is damaged; {FIX}")
        f = CDH.unpack_from(buf, pos)
        flags, method, csize, usize = f[3], f[4], f[8], f[9]
        nlen, elen, clen, offset = f[10], f[11], f[12], f[16]
        end = pos + CDH.size + nlen + elen + clen
        if end > cd_end:
            raise CorruptZipError(f"{where}: central directory entry {i} runs past the directory; {FIX}")
        raw = bytes(buf[pos + CDH.size:pos + CDH.size + nlen])
        rec = Record(i, raw, flags, method, csize, usize, offset, f[7])
        _apply_zip64(rec, buf[pos + CDH.size + nlen:pos + CDH.size + nlen + elen], where)
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
    if ZIP64_LIMIT not in (rec.usize, rec.csize, rec.offset):
        return  # the common case, tested without building the list below
    wanted = [f for f in ("usize", "csize", "offset") if getattr(rec, f) == ZIP64_LIMIT]
    for bid, block in _extra_blocks(extra, f"{where}: central directory entry {rec.index}"):
        if bid == ZIP64_ID:
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
        if rec.flags & FLAG_ENCRYPTED:
            raise CorruptZipError(f"{_at(where, rec.name)} is encrypted; pt2serde archives are never encrypted: {FIX}")
        if rec.method != 0:
            raise CompressedMemberError(
                f"{_at(where, rec.name)} is compressed (zip method {rec.method}); pt2serde stores members uncompressed, and "
                f"a compressed member may be a zip bomb. Do not recompress archives: {FIX}"
            )
        if rec.flags & ~FLAG_UTF8:
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
    if off + LFH.size > len(buf) or bytes(buf[off:off + 4]) != SIG_LFH:
        raise CorruptZipError(f"{_at(where, rec.name)}: no local header at offset {off}; {FIX}")
    _, _, flags, method, _, _, _, csize, usize, nlen, elen = LFH.unpack_from(buf, off)
    name_end = off + LFH.size + nlen
    data_start = name_end + elen
    if data_start > len(buf):
        raise TruncatedArchiveError(f"{_at(where, rec.name)}: the local header runs past the end of the file; {FIX}")
    if bytes(buf[off + LFH.size:name_end]) != rec.raw_name:
        raise CorruptZipError(f"{_at(where, rec.name)}: the local header names a different member; {FIX}")
    if ZIP64_LIMIT in (csize, usize):
        for bid, block in _extra_blocks(buf[name_end:data_start], _at(where, rec.name)):
            if bid == ZIP64_ID and len(block) >= 16:
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
