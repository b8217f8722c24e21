"""The pt2serde archive: one deterministic zip with a checksummed manifest. No torch here.

Layout (format_version 1; 2 when the archive has extra files):

* A plain zip (readable by ``unzip``) whose members are all *stored* (never compressed), sorted by
  name, with fixed timestamps (1980-01-01 00:00), fixed attributes (regular file, mode 0644), no
  comments and no data descriptors. Zip64 records appear only when a size or offset needs them.
* Every member's data starts at a file offset that is a multiple of 64; the gap is filled by a
  padding block (id ``0xD935``, as Android's zipalign) in the local header's extra field.
* Members: ``manifest.json``, ``program.json``, ``weights.json``, optional ``debug.json``, tensor
  payloads ``data/<sha256 of the bytes>`` (so identical payloads are stored once) and the user's
  extra files ``extra/<name>`` (``save(..., extra_files=...)``, like ``torch.export.save``).
  An archive with extra files says format_version 2, so that a reader that does not know them
  refuses it by version rather than by member name; one without says 1, and every reader loads it.
* Several programs in one archive (``serde.save({"prefill": ep1, "decode": ep2}, path)``): each
  program's JSON members sit under ``programs/<name>/`` (``program.json``, ``weights.json``,
  optional ``debug.json``) instead of at the top, and all of them share the ``data/`` payloads,
  so a tensor that several programs hold is stored once. Such an archive says format_version 3.
* ``manifest.json`` (:class:`serde.core.schema.Manifest`) names the format, its version, the schema
  version, the torch version and the sha256, the XXH3-128 (from schema 2.4 on) and the size of
  every other member.

The same members always give byte-identical files, whatever the order of the input mapping.

Reading never trusts the file: the whole file is read once into one private buffer (or mapped,
see :func:`read_archive`), the zip structure is checked end to end (sizes, offsets, contiguity,
alignment, names), then the manifest is decoded (after its CRC-32 is checked: no sha256 covers it)
and every member's digests verified (its sha256 and its XXH3-128 when the manifest has one; with
``sha256=False``, as ``serde.load`` reads, the XXH3-128 alone where there is one), and finally every byte of zip framing is compared with what
:func:`write_archive` would write for those members (so dates, versions, attributes, padding and
the CRC-32 of every member are exact; a payload's CRC-32 is recomputed unless ``payload_crc=False``,
and then must agree between its two copies), before any member is handed out as a zero-copy
``memoryview`` over that buffer. ``lazy=True`` defers the payloads' and extra files' hashes to
their first :meth:`ArchiveContents.member`. Each failure raises its own
:class:`~serde.errors.SerializeError` subclass, defined below.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import hashlib
import io
import itertools
import mmap
import os
import re
import stat
import struct
import sys
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, BinaryIO, NamedTuple

import xxhash

try:
    # ISA-L's CRC-32: the zip polynomial, zlib's values, about ten times zlib's speed here (every
    # byte a save writes and `pt2serde check` reads goes through it).
    from isal.isal_zlib import crc32
except ImportError:  # a platform without an isal wheel: the same values, slower
    from zlib import crc32

from serde.core import schema, wire
from serde.core.limits import DEFAULT_LIMITS, Limits
from serde.core.memo import Memo
from serde.core.version import FORMAT_VERSION
from serde.core.wire import sha256_hex
from serde.errors import (
    ForeignArtifactError,
    MalformedArtifactError,
    SchemaVersionError,
    SerializeError,
    UnsafeArtifactError,
)

__all__ = [
    "MANIFEST", "PROGRAM", "WEIGHTS", "DEBUG", "FORMAT_NAME", "ALIGNMENT",
    "Limits", "DEFAULT_LIMITS", "ArchiveContents",
    "write_archive", "write_atomic", "read_archive", "is_torch_export_archive", "payload_name",
    "ArtifactIOError", "NotAnArchiveError", "TorchArchiveError", "TruncatedArchiveError",
    "CorruptZipError", "OverlappingMembersError", "DuplicateMemberError", "UnsafeMemberNameError",
    "UnknownMemberError", "CompressedMemberError", "SizeLimitError", "MissingMemberError",
    "ManifestMismatchError", "ChecksumMismatchError", "FormatVersionError", "EXTRA_PREFIX", "extra_member",
    "PROGRAMS_PREFIX", "PROGRAM_NAME_RE", "program_member", "program_names", "check_program_name",
    "SHA256_RE", "XXH3_RE", "sha256_hex", "xxh3_hex", "digest_all",
]

EXTRA_PREFIX = "extra/"
MANIFEST = "manifest.json"
PROGRAM = "program.json"
WEIGHTS = "weights.json"
DEBUG = "debug.json"
FORMAT_NAME = "pt2serde"
ALIGNMENT = 64

PROGRAMS_PREFIX = "programs/"
_JSON_MEMBERS = frozenset({MANIFEST, PROGRAM, WEIGHTS, DEBUG})
# A program's name in a multi-program archive: what a Python identifier may be, and short.
PROGRAM_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_PROGRAM_MEMBER_RE = re.compile(r"programs/([A-Za-z_][A-Za-z0-9_]{0,63})/(program|weights|debug)\.json")
_PAYLOAD_PREFIX = "data/"
_PAYLOAD_RE = re.compile(r"data/[0-9a-f]{64}")
SHA256_RE = re.compile(r"[0-9a-f]{64}")  # a sha256 as the format writes it: 64 lowercase hex digits
XXH3_RE = re.compile(r"[0-9a-f]{32}")  # an XXH3-128 as the format writes it: 32 lowercase hex digits
_FIX = "re-save the program with pt2serde, or fetch an intact copy of the file"


# ---------------------------------------------------------------- errors


class ArtifactIOError(SerializeError, OSError):
    """The operating system refused to read or write the file (missing, permissions, disk full).

    It is an ``OSError`` as well, and :func:`os_error` picks the subclass that matches the cause,
    so ``except FileNotFoundError:`` around ``serde.load`` works as it does around ``open``.
    """

    def __str__(self) -> str:
        # OSError would print "[Errno 2] ...: path" once errno is set, losing what to do about it.
        return str(self.args[0]) if self.args else super().__str__()


class ArtifactNotFoundError(ArtifactIOError, FileNotFoundError):
    """The path does not exist."""


class ArtifactPermissionError(ArtifactIOError, PermissionError):
    """The operating system denies access to the path."""


class ArtifactIsADirectoryError(ArtifactIOError, IsADirectoryError):
    """The path is a directory."""


_OS_ERROR_CLASSES: tuple[tuple[type[OSError], type[ArtifactIOError]], ...] = (
    (FileNotFoundError, ArtifactNotFoundError),
    (PermissionError, ArtifactPermissionError),
    (IsADirectoryError, ArtifactIsADirectoryError),
)


def os_error(cause: OSError, message: str) -> ArtifactIOError:
    """An ArtifactIOError saying ``message``, of the OSError subclass ``cause`` has, with its errno."""
    cls = next((ours for theirs, ours in _OS_ERROR_CLASSES if isinstance(cause, theirs)), ArtifactIOError)
    err = cls(message)
    err.errno, err.strerror, err.filename = cause.errno, cause.strerror, cause.filename
    return err


class NotAnArchiveError(ForeignArtifactError):
    """The bytes are not a zip archive at all."""


class TorchArchiveError(ForeignArtifactError):
    """The zip was written by ``torch.export.save`` or ``torch.save`` (pickle-based)."""


class TruncatedArchiveError(MalformedArtifactError):
    """The file ends before the zip's end-of-central-directory record."""


class CorruptZipError(MalformedArtifactError):
    """The zip structure is inconsistent (bad signatures, headers that disagree, gaps, misalignment)."""


class OverlappingMembersError(MalformedArtifactError):
    """Two members claim the same bytes of the file."""


class DuplicateMemberError(UnsafeArtifactError):
    """A member name occurs twice; different readers could see different contents."""


class UnsafeMemberNameError(UnsafeArtifactError):
    """A member name could escape an extraction directory (``..``, absolute, backslash, control chars)."""


class UnknownMemberError(MalformedArtifactError):
    """A member name is not one the format defines."""


class CompressedMemberError(UnsafeArtifactError):
    """A member is compressed; pt2serde stores members raw, so this may be a zip bomb."""


class SizeLimitError(UnsafeArtifactError):
    """A size or count exceeds :class:`Limits`."""


class MissingMemberError(MalformedArtifactError):
    """A required member (manifest.json, program.json, weights.json, a payload) is absent."""


class ManifestMismatchError(MalformedArtifactError):
    """manifest.json disagrees with the members actually present."""


class ChecksumMismatchError(MalformedArtifactError):
    """A member's sha256 or XXH3-128 (or its zip CRC-32) differs from the one recorded."""


class FormatVersionError(SchemaVersionError):
    """The archive layout version is newer than this reader."""


# ---------------------------------------------------------------- public API


# Limits lives in serde.core.limits (one object for the archive and the program); re-exported here.


def payload_name(sha256_hex: str) -> str:
    """Member name of a tensor payload whose bytes hash to ``sha256_hex``."""
    return f"data/{sha256_hex}"


def xxh3_hex(view: memoryview | bytes) -> str:
    """The XXH3-128 of ``view`` as the manifest records it (the canonical big-endian form, in
    lowercase hex). The reference C implementation releases the GIL on large buffers."""
    return xxhash.xxh3_128(view).hexdigest()


class ArchiveContents:
    """A verified archive. Members are zero-copy views into one buffer holding the whole file,
    except that a file of 8 MB or more read (not mapped) has each member of 1 MB or more in a
    buffer of its own.

    The buffers are a private, writable copy of the file when read from a path, a file object or
    ``bytes`` (so ``torch.frombuffer`` can wrap payloads without copying; ``bytes`` stay read-only
    views with ``lazy=True``), and the caller's own memory when given a bytearray or a writable
    memoryview.
    """

    __slots__ = ("manifest", "names", "schema_version", "_views", "_pending", "_where")

    def __init__(self, manifest: schema.Manifest, views: dict[str, memoryview],
                 pending: dict[str, _Want] | None = None, where: str = "<archive>") -> None:
        self.manifest = manifest
        self.names: tuple[str, ...] = tuple(sorted(views))
        self.schema_version: tuple[int, int] = (manifest.schema_version.major, manifest.schema_version.minor)
        self._views = views
        # members read with lazy=True and not yet verified: name -> the digests to check
        self._pending = dict(pending or {})
        self._where = where

    def __contains__(self, name: object) -> bool:
        return name in self._views

    def member(self, name: str) -> memoryview:
        """The bytes of member ``name``; MissingMemberError if there is no such member.

        A member left unverified by ``read_archive(..., lazy=True)`` is verified here (with the
        digests ``read_archive`` would have used), the first time it is asked for:
        ChecksumMismatchError if it is corrupt.
        """
        try:
            view = self._views[name]
        except KeyError:
            raise MissingMemberError(
                f"archive member {name!r} is missing (the archive has {len(self._views)} members); "
                f"the file is incomplete: {_FIX}"
            ) from None
        if name in self._pending:
            want = self._pending[name]
            _check_digest(name, _digest(_Job(view, want)), want, self._where)
            self._pending.pop(name, None)
        return view

    def size(self, name: str) -> int:
        """The byte length of member ``name``, without reading or verifying it."""
        if name not in self._views:
            self.member(name)  # raises MissingMemberError
        return len(self._views[name])


def write_archive(
    dest: str | os.PathLike | BinaryIO,
    members: Mapping[str, bytes | bytearray | memoryview],
    *,
    schema_version: tuple[int, int],
    torch_version: str,
    min_format_version: int = 1,
) -> None:
    """Write ``members`` plus a generated manifest.json as one pt2serde archive.

    Args:
        dest: a path, written atomically by :func:`write_atomic` (a previous file at ``dest`` is
            replaced only by the complete new one), or a binary file object, written from its
            current position (until every byte is taken, for raw streams) and *not* atomic.
        members: ``program.json``, ``weights.json``, optional ``debug.json`` and ``data/<sha256>``
            payloads. Must not contain ``manifest.json``. A payload's name is trusted to be the
            sha256 of its bytes (not re-hashed here; a wrong name makes the file fail to load).
        schema_version: ``(major, minor)`` recorded in the manifest.
        torch_version: recorded in the manifest (informational).
        min_format_version: the least format_version to record (4: some storages are in
            safetensors files next to the archive, which the members alone do not show).

    Raises:
        UnsafeMemberNameError, UnknownMemberError, MissingMemberError: bad ``members``.
        ArtifactIOError: the OS refused the write.
    """
    chunks = _plan(members, schema_version, torch_version, _ZIP64_THRESHOLD, min_format_version)
    if isinstance(dest, (str, os.PathLike)):
        write_atomic(dest, chunks)
        return
    try:
        # A run of small chunks goes in one write call (a file object may make a system call of
        # each, and a BytesIO costs a call and a check per write either way).
        for run in _runs(chunks, _JOIN_BYTES):
            _write_stream(dest, run[0] if len(run) == 1 else b"".join(run))
        dest.flush()
    except (OSError, TypeError, ValueError, AttributeError) as e:
        raise ArtifactIOError(f"cannot write the archive to {dest!r}: {e}; pass a path or a file "
                              "object opened in binary write mode ('wb')") from None


def read_archive(
    src: str | os.PathLike | BinaryIO | bytes | bytearray | memoryview,
    *,
    limits: Limits = DEFAULT_LIMITS,
    mmap: bool = False,
    lazy: bool = False,
    payload_crc: bool = True,
    sha256: bool = True,
    verify: bool = True,
) -> ArchiveContents:
    """Read and fully verify an archive (structure, names, sizes, manifest, digests of every member).

    Args:
        src: a path, a binary file object (read from its current position to the end) or the bytes.
        limits: caps on file size, member count, member size and JSON member size.
        mmap: map a path (or a real file at offset 0) copy-on-write instead of reading it; see
            :func:`serde.load`. Other sources are read as usual. The mapped members are verified
            through the mapping a piece at a time, each piece's pages dropped from this process
            (``MADV_DONTNEED``; the page cache keeps them) once hashed, so they take no memory
            of this process until they are touched.
        lazy: for tools that need the program, not the weights (``pt2serde show``, ``diff``):
            the file is mapped as with ``mmap`` and everything is verified as usual except the
            payloads (``data/...``) and extra files, which are neither read nor hashed here but
            verified (sha256 and CRC-32) by :meth:`ArchiveContents.member` when first asked for.
            As with ``mmap``, the file must not be truncated or rewritten in place meanwhile.
        payload_crc: recompute the zip's CRC-32 of the payloads too (``pt2serde check``). With
            False (``serde.load``) a payload's bytes are verified by their sha256 alone, which
            covers the same bytes, and its CRC-32 fields by agreeing between its local header and
            the central directory: every flipped byte is still caught, at 60% of the hashing cost.
        sha256: recompute the sha256 of every member (``pt2serde check``). With False
            (``serde.load``, ``show``, ``diff``) a member whose manifest entry has an ``xxh3``
            (schema 2.4 on) is verified by that digest alone, ~15x cheaper than its sha256 and
            covering every byte just as well against damage; one without is verified by its sha256.
        verify: False (``serde.load(..., verify=False)``, for files the user trusts) leaves the
            payloads (``data/...``) unhashed: neither read nor hashed here, nor ever after. Every
            other check still runs: the zip structure, names, sizes and offsets, the manifest
            (its CRC-32) and the digests of the JSON members and extra files, and the framing,
            where each payload's CRC-32 must agree between its two headers. A payload byte that
            changed is then not noticed.

    Returns:
        ArchiveContents whose members are memoryviews of the file's bytes (see ArchiveContents).

    Raises:
        ArtifactIOError, ForeignArtifactError (NotAnArchiveError, TorchArchiveError),
        MalformedArtifactError and UnsafeArtifactError subclasses defined in this module,
        FormatVersionError.
    """
    where = _describe(src)
    buf, mapped, early, held = _read_all(src, limits, mmap or lazy, private=not lazy, hashed=verify)
    records, cd_off = _central_directory(buf, limits, where)
    _reject_foreign(records, where)
    views, starts = _check_members(buf, records, cd_off, limits, where, held)
    recorded = {r.name: r.crc for r in records}
    manifest = _check_manifest(views, recorded.get(MANIFEST, 0), where)
    want = {}
    for n, m in manifest.members.items():
        # the CRC-32 is recomputed unless a digest covers the same bytes (see payload_crc)
        crc = recorded[n] if payload_crc or not n.startswith(_PAYLOAD_PREFIX) else None
        want[n] = _Want(m.sha256 if sha256 or m.xxh3 is None else None, m.xxh3, crc)
    later = {n: want[n] for n in views if lazy and not _is_json_member(n)}
    trusted = set() if verify else {n for n in manifest.members if n.startswith(_PAYLOAD_PREFIX)}
    now = [n for n in sorted(manifest.members) if n not in later and n not in trusted]
    # A member hashed while it was read (see _read_file) needs nothing more when that is the one
    # digest to check: its bytes have not changed since.
    hashed = {n: hit[1] for n in now if want[n].sha256 is None and want[n].crc is None
              and (hit := early.get(starts[n])) is not None and hit[0] == len(views[n])}
    for n, xxh3 in hashed.items():
        _check_digest(n, _Want(None, xxh3, None), want[n], where)
    now = [n for n in now if n not in hashed]
    # A mapped member is hashed a piece at a time, its pages unmapped after each (see _pieces).
    jobs = [_Job(_MappedSpan(buf.obj, starts[n], len(views[n])) if mapped else views[n], want[n]) for n in now]
    crcs = _verify_hashes(now, jobs, want, where)
    crcs[MANIFEST] = crc32(views[MANIFEST])
    # A member whose CRC-32 is not computed (yet) is framed with the one the zip records: the
    # local header must then agree with the central directory, so a flipped byte in either is
    # still caught; member() checks a lazy member's CRC-32 when its bytes are first asked for.
    _check_framing(buf, records, cd_off, views, {**recorded, **crcs}, where)
    return ArchiveContents(manifest, views, later, where)


def is_torch_export_archive(src: str | os.PathLike | BinaryIO | bytes | bytearray | memoryview) -> bool:
    """True if ``src`` is a zip written by ``torch.export.save`` (or ``torch.save``); loads nothing."""
    try:
        records, _ = _central_directory(_read_all(src, DEFAULT_LIMITS)[0], DEFAULT_LIMITS, _describe(src))
    except SerializeError:
        return False
    return _torch_writer(records) is not None


# ---------------------------------------------------------------- zip records

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


# The header fields the writer writes, defined once: _layout packs them, and the reader's framing
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
class _Record:
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


# ---------------------------------------------------------------- writing


class _Entry:
    __slots__ = ("name", "data", "sha", "crc", "xxh")

    def __init__(self, name: str, data: memoryview, sha: str, crc: int, xxh: str = "") -> None:
        self.name, self.data, self.sha, self.crc, self.xxh = name, data, sha, crc, xxh


def _plan(members: Mapping[str, bytes | bytearray | memoryview], schema_version: tuple[int, int],
          torch_version: str, zip64_limit: int, min_format_version: int = 1) -> Iterator[bytes | memoryview]:
    """Validate members now; return the file as chunks made as they are taken.

    The CRC-32 and XXH3-128 of the big members start on the I/O threads at once, in file order,
    and a member's local header (which holds its CRC-32) waits only for its own: the file is
    written while later members are still being hashed, instead of after all of them.
    """
    names = sorted(members)
    views = []
    for name in names:
        where = f"write_archive: member {name!r}"
        if name == MANIFEST:
            raise UnknownMemberError(f"{where}: manifest.json is generated by write_archive; drop it")
        _check_name(name, where)
        views.append(_as_bytes_view(members[name], where))
    _check_required(set(names), "write_archive: members")
    ahead = {n: _pool().submit(_crc32_and_xxh3, v) for n, v in zip(names, views, strict=True)
             if len(v) >= _PARALLEL_HASH_BYTES}
    return _layout(_entries(names, views, ahead, schema_version, torch_version, min_format_version), zip64_limit)


def _entries(names: list[str], views: list[memoryview], ahead: dict[str, Any], schema_version: tuple[int, int],
             torch_version: str, min_format_version: int = 1) -> Iterator[_Entry]:
    """The members and the manifest in file order, each once its digests are known."""
    done: dict[str, _Entry] = {}

    def entry(name: str, view: memoryview) -> _Entry:
        crc, xxh = ahead[name].result() if name in ahead else _crc32_and_xxh3(view)
        # A payload's name is its sha256, computed by the caller moments ago; hashing it again
        # would double the cost of saving large weights. read_archive verifies every byte.
        sha = name[5:] if name.startswith("data/") else sha256_hex(view)
        return _Entry(name, view, sha, crc, xxh)

    view_of = dict(zip(names, views, strict=True))
    for name in sorted([*names, MANIFEST]):
        if name != MANIFEST:
            if name not in done:
                done[name] = entry(name, view_of[name])
            yield done[name]
            continue
        for n in names:  # the manifest lists every member, also those after it (small JSON)
            if n not in done:
                done[n] = entry(n, view_of[n])
        major, minor = schema_version
        manifest = schema.Manifest(
            format=FORMAT_NAME,
            format_version=max(_format_version(names), min_format_version),
            schema_version=schema.SchemaVersion(major=int(major), minor=int(minor)),
            torch_version=str(torch_version),
            # the xxh3 is a 2.4 field: a manifest of an older version (upgrade tests) goes without
            members={n: schema.Member(sha256=e.sha, size=len(e.data), xxh3=e.xxh if (major, minor) >= (2, 4) else None)
                     for n, e in done.items()},
        )
        mdata = memoryview(wire.encode(manifest))
        yield _Entry(MANIFEST, mdata, sha256_hex(mdata), crc32(mdata))


def _layout(entries: Iterable[_Entry], zip64_limit: int) -> Iterator[bytes | memoryview]:
    """The file as chunks (local header, data, ..., central directory and end records), each
    made when taken, so that an entry is needed only once the chunks before it are written."""
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


def write_atomic(path: str | os.PathLike, chunks: Iterable[bytes | bytearray | memoryview]) -> None:
    """Write the concatenated ``chunks`` to ``path`` so that ``path`` holds either its previous
    file or the complete new one, whatever happens (exceptions, SIGKILL, power loss).

    The bytes go to a file without a name (Linux ``O_TMPFILE``), which the kernel discards if the
    process dies; it is fsynced, given a name (``.<target>.<pid>.<hex>.tmp``), renamed over
    ``path`` and the directory fsynced. A kill between naming and renaming (microseconds) leaves
    that name behind. Where ``O_TMPFILE`` is unavailable the file is created under that name
    directly, and a kill at any time during the write leaves it. Such files left by writers whose
    pid is dead are removed before writing: by every save where ``O_TMPFILE`` is unavailable, and
    by the first save to ``path`` in a process where it is (listing the directory costs a small
    program's save 1.5% in an empty directory, and more the more files it holds). The file
    gets the mode of the file it replaces, or 0666 minus the umask.

    Raises:
        ArtifactIOError: the OS refused (missing directory, permissions, disk full, a directory
            at ``path``); nothing changed at ``path``.
    """
    path = os.fspath(path)
    directory, base = os.path.split(os.path.abspath(path))
    try:
        dfd = os.open(directory or "/", os.O_RDONLY | os.O_DIRECTORY)
    except OSError as e:
        raise os_error(e, f"cannot save to {path!r}: cannot create a temporary file in "
                          f"{directory!r} ({e.strerror}); check the directory exists and is writable") from None
    try:
        swept = (directory, base)
        if swept not in _THIS.swept:
            _remove_stale_temps(dfd, base)
        if _write_and_rename(dfd, base, chunks, path):
            _THIS.swept.remember(swept)
        with contextlib.suppress(OSError):  # some filesystems cannot fsync a directory
            os.fsync(dfd)
    finally:
        os.close(dfd)


_USE_O_TMPFILE = hasattr(os, "O_TMPFILE")  # tests switch it off to exercise the fallback


class _ThisProcess:
    """This process's id and the suffixes of its temporary names, asked of the OS once per process
    instead of once per save each (``getpid`` and ``getrandom`` are system calls). A forked child
    takes its own; the suffixes start at a random point so that a dead writer's leftover under a
    reused pid does not take the name a save wants."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.suffixes = itertools.count(int.from_bytes(os.urandom(4), "big"))
        # whether /proc/self/fd/N has named an open file here yet (see _open_unnamed)
        self.proc_fd_works = False
        # (directory, target) pairs this process has saved to through an unnamed file, after
        # removing the stale temporary files there (see write_atomic)
        self.swept = Memo(1 << 12, "swept_dirs")


_THIS = _ThisProcess()


def _new_process() -> None:
    global _THIS
    _THIS = _ThisProcess()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_process)


def _temp_name(base: str) -> str:
    return f".{base}.{_THIS.pid}.{next(_THIS.suffixes) & 0xFFFFFFFF:08x}.tmp"


def _write_and_rename(dfd: int, base: str, chunks: Iterable[bytes | bytearray | memoryview], path: str) -> bool:
    """Write, name and rename the new file; True when it was written unnamed (O_TMPFILE)."""
    tmp: str | None = None   # the temporary name, once there is one to remove on failure
    fd = -1
    try:
        try:
            if _USE_O_TMPFILE:
                fd = _open_unnamed(dfd)
            if fd < 0:
                tmp = _temp_name(base)
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600, dir_fd=dfd)
        except OSError as e:
            raise os_error(e, f"cannot save to {path!r}: cannot create a temporary file in its directory "
                              f"({e.strerror}); check the directory exists and is writable") from None
        _write_all(fd, chunks)
        os.fchmod(fd, _target_mode(dfd, base))
        os.fsync(fd)
        unnamed = tmp is None
        if unnamed:
            name = _temp_name(base)
            os.link(f"/proc/self/fd/{fd}", name, src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=True)
            tmp = name
        os.replace(tmp, base, src_dir_fd=dfd, dst_dir_fd=dfd)
        tmp = None
        return unnamed
    except BaseException as e:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
        if isinstance(e, OSError) and not isinstance(e, ArtifactIOError):
            raise os_error(e, f"cannot save to {path!r}: {e.strerror or e}; nothing was written there "
                              "(check free space, permissions, and that the path is not a directory)") from None
        raise
    finally:
        if fd >= 0:
            os.close(fd)


def _open_unnamed(dfd: int) -> int:
    """An O_TMPFILE file in the directory, or -1 where that (or naming it via /proc) is unsupported."""
    try:
        fd = os.open(".", os.O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC, 0o600, dir_fd=dfd)
    except OSError:  # EOPNOTSUPP (filesystem), EISDIR (old kernel), ...: the fallback reports real errors
        return -1
    if not _THIS.proc_fd_works:  # no /proc: the file could never be named (once it could, it can)
        if not os.path.exists(f"/proc/self/fd/{fd}"):
            os.close(fd)
            return -1
        _THIS.proc_fd_works = True
    return fd


def _write_all(fd: int, chunks: Iterable[bytes | bytearray | memoryview]) -> None:
    """Write every chunk, in order, with few system calls: each run of small chunks in one
    ``writev``, each big chunk in a call of its own.

    An archive is two chunks per member (header, data) and the directory: one ``write`` each
    made twenty system calls for a small program, where one ``writev`` takes them all (each
    system call costs a few microseconds in a virtual machine, and leaves the caches colder for
    the work after it). Big chunks stay alone because of what the page cache makes of one write
    that spans them and their neighbours: on Linux 6.18 with ext4 the whole file in one call
    became large folios, and a ``mmap=True`` load that then parses the JSON members at the end
    of the file had 2 MB of the file resident (the folio holding them and the last payload's
    tail) instead of 86 kB.
    """
    for run in _runs(chunks):
        _writev(fd, run)


def _runs(chunks: Iterable[bytes | bytearray | memoryview], cap: int | None = None) -> Iterator[list[memoryview]]:
    """The non-empty chunks as lists to write together: each big chunk (``_ALONE_BYTES`` or more)
    alone, and each run of small ones between them, cut when given a ``cap`` as soon as it holds
    that many bytes (so a run exceeds it by less than one small chunk)."""
    run: list[memoryview] = []
    size = 0
    for c in chunks:
        view = memoryview(c).cast("B")
        if len(view) >= _ALONE_BYTES:
            if run:
                yield run
                run, size = [], 0
            yield [view]
        elif view:
            run.append(view)
            size += len(view)
            if cap is not None and size >= cap:
                yield run
                run, size = [], 0
    if run:
        yield run


def _writev(fd: int, views: list[memoryview]) -> None:
    """Write ``views`` in order; a call may write less than it was given, the rest goes in the next."""
    if not hasattr(os, "writev"):
        for view in views:
            while view:
                view = view[os.write(fd, view[:_WRITE_BYTES]):]
        return
    i = 0
    while i < len(views):
        batch, size = [], 0
        for view in views[i:i + _IOV_MAX]:
            batch.append(view)
            size += len(view)
            if size >= _WRITE_BYTES:
                break
        done = os.writev(fd, batch)
        if done <= 0:  # a regular file takes at least one byte or raises (ENOSPC, EIO ...)
            raise OSError(errno.EIO, "the file took none of the bytes written to it")
        # Skip what was written: whole chunks, then the written head of the next one.
        while i < len(views) and done >= len(views[i]):
            done -= len(views[i])
            i += 1
        if done:
            views[i] = views[i][done:]


# Chunks at least this big are written alone (see _write_all); a run of smaller ones written to a
# file object is joined into one bytes object of at most about this size.
_ALONE_BYTES = 64 << 10
_JOIN_BYTES = 1 << 20


# Chunks per writev (POSIX guarantees at least 16; Linux and macOS take 1024), and about the
# bytes per write call (Linux writes at most 2 GiB - 4 KiB in one).
def _iov_max() -> int:
    try:
        n = os.sysconf("SC_IOV_MAX")
    except (AttributeError, ValueError, OSError):
        return 16
    return min(n, 1024) if n > 0 else 16


_IOV_MAX = _iov_max()
_WRITE_BYTES = 1 << 30


def _remove_stale_temps(dfd: int, base: str) -> None:
    """Remove temporary files of earlier saves to ``base`` whose writer process no longer exists."""
    pattern = re.compile(rf"\.{re.escape(base)}\.(\d+)\.[0-9a-f]{{8}}\.tmp")
    with contextlib.suppress(OSError):
        for name in os.listdir(dfd):
            m = pattern.fullmatch(name)
            if m is None or int(m.group(1)) == _THIS.pid or _pid_alive(int(m.group(1))):
                continue
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=dfd)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):  # alive under another user; or no pid of ours: keep
        return True
    return True


def _target_mode(dfd: int, base: str) -> int:
    """Keep the mode of a file being replaced; a new file gets 0666 minus the umask."""
    try:
        st = os.stat(base, dir_fd=dfd)
        if (st.st_mode & 0o170000) == 0o100000:
            return st.st_mode & 0o777
    except OSError:
        pass
    umask = 0o022
    # Reading the umask via os.umask() would briefly change it for every thread; /proc does not.
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status") as f:
        for line in f:
            if line.startswith("Umask:"):
                umask = int(line.split()[1], 8)
    return 0o666 & ~umask


def _write_stream(dest: BinaryIO, chunk: bytes | memoryview) -> None:
    """Write all of ``chunk``: a raw stream's write() may take fewer bytes than given."""
    view = memoryview(chunk).cast("B")
    while view:
        n = dest.write(view)
        if n is None:
            raise ArtifactIOError(
                f"cannot write the archive to {dest!r}: write() returned None, which a non-blocking stream "
                "does when it would block, so part of the archive was not written; pass a blocking file, "
                "a path, or a file object whose write() returns the number of bytes written")
        if not isinstance(n, int) or not 0 < n <= len(view):
            raise ArtifactIOError(
                f"cannot write the archive to {dest!r}: write() of {len(view)} bytes returned {n!r}; the "
                "archive is incomplete. Pass a path or a file object opened in binary write mode ('wb')")
        view = view[n:]


def _as_bytes_view(data: object, where: str) -> memoryview:
    try:
        view = memoryview(data)  # type: ignore[arg-type]
        return view if view.format == "B" and view.ndim == 1 else view.cast("B")
    except TypeError as e:
        raise SerializeError(f"{where}: expected bytes, bytearray or a contiguous memoryview ({e})") from None


# ---------------------------------------------------------------- reading: bytes in


def _describe(src: object) -> str:
    if isinstance(src, (str, os.PathLike)):
        return repr(os.fspath(src))
    name = getattr(src, "name", None)
    return repr(name) if isinstance(name, str) else "<archive bytes>"


_ANON_FLAGS = getattr(mmap, "MAP_PRIVATE", 0) | getattr(mmap, "MAP_ANONYMOUS", 0)


# Held here for the life of the process: ctypes caches array types only weakly, so ``c_char * 1``
# written inline is a new class (~15 us) after every garbage collection that freed the last one.
_ONE_BYTE = ctypes.c_char * 1

# A bytearray whose bytes are not zeroed first (the C API's PyByteArray_FromStringAndSize with no
# source): every buffer below is overwritten by the file's bytes before it is read, and zeroing
# a big one costs as much as filling it.
_new_bytearray = ctypes.pythonapi.PyByteArray_FromStringAndSize
_new_bytearray.restype = ctypes.py_object
_new_bytearray.argtypes = (ctypes.c_char_p, ctypes.c_ssize_t)


def _aligned_buffer(n: int) -> memoryview:
    """A writable n-byte buffer whose first byte is 64-byte aligned in memory, so that aligned
    members stay aligned for torch. Its bytes are not zeroed: the caller fills all of them.

    A big one is an anonymous mapping whose pages cost nothing until they are written (the big
    members of a file are read into buffers of their own, so most of it may never be). No huge
    pages and no populating are asked for: on the test machine, a virtual machine, loads of 41 MB
    and 104 MB of weights in members under 1 MB each, which fill the whole mapping, took a tenth
    longer by the median with huge pages advised.
    """
    if n >= _BIG_READ_BYTES:
        return memoryview(mmap.mmap(-1, n, flags=_ANON_FLAGS))
    return _heap_buffer(n)


def _heap_buffer(n: int) -> memoryview:
    """n writable bytes from the C heap (malloc), 64-byte aligned, not zeroed.

    Each big member of a read file gets one of these rather than a slice of one whole-file
    mapping. The C heap hands memory freed by an earlier load (or by anything else) back without
    faulting in fresh pages, as torch's own loads get theirs; a fresh mapping has every page
    faulted and zeroed by the kernel on each load. And a member's buffer is freed with the last
    tensor viewing it, not with the last tensor of the whole file.

    No huge pages are asked for (torch asks for none either): on the test machine, a virtual
    machine, a fresh process's first load of 134 MB took 62 to 73 ms with 4 KB pages and 95 to
    209 ms with the buffers' huge pages advised, and repeated loads had 200 ms outliers.
    """
    raw = _new_bytearray(None, n + ALIGNMENT)
    addr = ctypes.addressof(_ONE_BYTE.from_buffer(raw))
    shift = (-addr) % ALIGNMENT
    return memoryview(raw)[shift:shift + n]


# what _read_file hashed as it read: data offset -> (byte count, XXH3-128 hex)
_Early = dict[int, tuple[int, str]]
# what _read_file read into buffers of their own: data offset -> the bytes from there
_Held = dict[int, memoryview]


def _read_all(src: object, limits: Limits, use_mmap: bool = False, *, private: bool = False,
              hashed: bool = True) -> tuple[memoryview, bool, _Early, _Held]:
    """The whole archive in one buffer, whether that buffer maps the file (an ``mmap.mmap``),
    the XXH3-128 of the spans hashed while they were read, and the spans read into buffers of
    their own (their bytes in the whole-file buffer are left unwritten: never read them there).

    ``private``: ``bytes`` (read-only) are copied into private, writable memory as a file is read,
    so that tensors wrap them without a copy of each member later; without it they are used in
    place (``pt2serde show`` reads no payload). A bytearray or writable memoryview is always used
    in place. ``hashed=False``: nothing is hashed while read (``verify=False``).
    """
    if isinstance(src, (bytes, bytearray, memoryview)):
        view = _as_bytes_view(src, "read_archive")
        _check_file_size(len(view), limits, "<archive bytes>")
        if not private or not view.readonly:
            return view, False, {}, {}
        return _copy_in(view, limits, "<archive bytes>", hashed)
    where = _describe(src)
    try:
        if isinstance(src, (str, os.PathLike)):
            path = os.fspath(src)
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
            try:
                st = os.fstat(fd)
                if stat.S_ISDIR(st.st_mode):
                    raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
                if (not use_mmap and stat.S_ISREG(st.st_mode) and st.st_size < _BIG_READ_BYTES
                        and hasattr(os, "readv")):
                    return _read_small_file(fd, st.st_size, limits, where), False, {}, {}
                # Unbuffered: the reads go straight into the aligned buffer, so a BufferedReader
                # would only add an object and a copy path per load.
                with open(fd, "rb", buffering=0, closefd=False) as f:
                    return _map_or_read(f, limits, where, use_mmap, hashed)
            finally:
                os.close(fd)
        if isinstance(src, io.BytesIO):
            return _read_bytesio(src, limits, where, hashed)
        return _map_or_read(src, limits, where, use_mmap, hashed)  # type: ignore[arg-type]
    except ArtifactIOError:
        raise
    except OSError as e:
        raise os_error(e, f"cannot read {where}: {e.strerror or e}; check the path and permissions") from None


def _copy_in(view: memoryview, limits: Limits, where: str, hashed: bool) -> tuple[memoryview, bool, _Early, _Held]:
    """An in-memory archive copied once into private memory as a file of its size is read: a
    small one into one aligned buffer, a big one by the parallel reader (big members into buffers
    of their own, hashed while the copied bytes are in cache)."""
    if len(view) >= _BIG_READ_BYTES:
        buf, got, early, held = _read_parallel(_MemorySource(view), len(view), 0, limits, where, hashed)
        return buf, False, early, held
    buf = _aligned_buffer(len(view))
    buf[:] = view
    return buf, False, {}, {}


def _read_bytesio(f: io.BytesIO, limits: Limits, where: str, hashed: bool) -> tuple[memoryview, bool, _Early, _Held]:
    """A BytesIO from its position to its end, copied once into private memory, and the position
    moved to the end as a read leaves it.

    ``getvalue()`` hands out the BytesIO's own buffer without a copy (it is shared until the next
    write to the BytesIO, which then copies on its side), where ``getbuffer()`` first copies a
    buffer the BytesIO shares with the ``bytes`` it was made from (``io.BytesIO(data)``): 134 MB
    of weights loaded in 0.40 s that way against 0.06 s from a path. The copy made here is private,
    so the caller may write to or reuse the BytesIO while the program lives.
    """
    start = f.tell()
    data = f.getvalue()
    view = memoryview(data)[start:]
    _check_file_size(len(view), limits, where)
    out = _copy_in(view, limits, where, hashed)
    f.seek(start + len(view))
    return out


def _read_small_file(fd: int, size: int, limits: Limits, where: str) -> memoryview:
    """The ``size`` bytes of the regular file open at ``fd`` (under ``_BIG_READ_BYTES``), read with
    one system call: with the open, fstat and close around it, four in all.

    A Python file object costs three more (a second fstat, a seek to learn the position, a read
    at the end to see that nothing follows). In a virtual machine each system call costs a few
    microseconds, and it leaves caches colder for the work after it: together a few percent of
    loading a small program. The buffer is one byte longer than the file, so a read that fills
    it shows the file grew while being read, without a read more.
    """
    _check_file_size(size, limits, where)
    buf = _aligned_buffer(size + 1)
    got = 0
    while n := os.readv(fd, (buf[got:],)):
        got += n
        if got >= size:  # a read short of the buffer's end was at the end of the file
            break
    if got != size:
        raise _changed_size(where)
    return buf[:size]


def _changed_size(where: str) -> ArtifactIOError:
    return ArtifactIOError(f"{where} changed size while being read; retry once nothing is writing to it")


def _map_or_read(f: BinaryIO, limits: Limits, where: str, use_mmap: bool,
                 hashed: bool = True) -> tuple[memoryview, bool, _Early, _Held]:
    mapped = _map_file(f, limits, where) if use_mmap else None
    if mapped is not None:
        return mapped, True, {}, {}
    return _read_file(f, limits, where, hashed)


def _map_file(f: BinaryIO, limits: Limits, where: str) -> memoryview | None:
    """The whole file mapped copy-on-write (writable; writes never reach the file), or None when
    ``f`` is not a regular file at offset 0 or is empty (then it is read instead)."""
    try:
        fd = f.fileno()
        if f.tell() != 0:
            return None
        size = os.fstat(fd).st_size
    except (OSError, AttributeError, ValueError, io.UnsupportedOperation):
        return None
    if size == 0:
        return None
    _check_file_size(size, limits, where)
    try:
        return memoryview(mmap.mmap(fd, 0, access=mmap.ACCESS_COPY))
    except (OSError, ValueError):  # not mappable (a pipe, some network file systems): read it
        return None


def _read_file(f: BinaryIO, limits: Limits, where: str, hashed: bool = True) -> tuple[memoryview, bool, _Early, _Held]:
    if isinstance(f, io.TextIOBase):
        raise ArtifactIOError(f"cannot read {where}: open the file in binary mode ('rb')")
    try:
        size = os.fstat(f.fileno()).st_size - f.tell()
        regular = hasattr(f, "readinto")
    except (OSError, AttributeError, ValueError):  # BytesIO, pipes, wrappers without a real file
        regular = False
    if not regular:
        size = _remaining(f)
        if size is None:
            return _read_stream(f, limits, where, hashed)
    _check_file_size(size, limits, where)
    early: _Early = {}
    held: _Held = {}
    if size >= _BIG_READ_BYTES and (not regular or hasattr(os, "preadv")):
        start = f.tell()
        source = _FileSource(f.fileno()) if regular else _SeekableSource(f)
        buf, got, early, held = _read_parallel(source, size, start, limits, where, hashed)
        f.seek(start + got)
    else:
        # a seekable object of known size: read straight into the aligned buffer, once
        buf = _aligned_buffer(size)
        got = 0
        while got < size:
            n = f.readinto(buf[got:])  # type: ignore[attr-defined]
            if not n:
                break
            got += n
    if got != size or f.read(1):
        raise _changed_size(where)
    return buf, False, early, held


def _remaining(f: BinaryIO) -> int | None:
    """The bytes from the position of a seekable file object that has ``readinto`` to its end;
    None for anything else (a pipe, a socket, a wrapper that cannot seek)."""
    try:
        if not (hasattr(f, "readinto") and f.seekable()):
            return None
        start = f.tell()
        end = f.seek(0, os.SEEK_END)
        f.seek(start)
    except (OSError, AttributeError, ValueError, TypeError):
        return None
    return end - start if isinstance(end, int) and end >= start else None


def _read_stream(f: BinaryIO, limits: Limits, where: str, hashed: bool) -> tuple[memoryview, bool, _Early, _Held]:
    """A stream of unknown length: read in bounded chunks (read(huge) may preallocate huge), then
    copied once into private memory as bytes of that size are (see _copy_in)."""
    parts, total = [], 0
    while chunk := f.read(1 << 24):
        if not isinstance(chunk, (bytes, bytearray)):
            raise ArtifactIOError(f"cannot read {where}: open the file in binary mode ('rb')")
        parts.append(chunk)
        total += len(chunk)
        _check_file_size(total, limits, where)
    data = parts[0] if len(parts) == 1 else b"".join(parts)  # one chunk is used as it is
    if not parts:
        data = b""
    del parts
    return _copy_in(memoryview(data), limits, where, hashed)


# Files at least this big are read by several threads at once (see _pread_parallel): the
# kernel's page faults and copies then run on every core (134 MB: 0.13 s -> 0.07 s on 2 cores).
_BIG_READ_BYTES = 8 << 20
_READ_CHUNK = 8 << 20


def _pread_parallel(fd: int, size: int, start: int, limits: Limits, where: str,
                    hashed: bool = True) -> tuple[memoryview, int, _Early, _Held]:
    """Read ``size`` bytes from file offset ``start`` with positional reads on a few threads.

    The zip directory at the end is read first; each big member's data is then read, into a
    buffer of its own (see _heap_buffer), by one task that hashes every piece (XXH3-128) while it
    is still in cache, which spares a second pass over the bytes when the manifest turns out to
    record that digest (``hashed=False``: no hashing, for ``verify=False``). Nothing read here is
    trusted: the spans come from an unverified directory, and a span's buffer and hash count only
    for a member whose verified data start and size are the span's (see read_archive).

    Returns a buffer of ``size`` bytes holding everything but the big members' data, the number
    of bytes read before the first short read (less than ``size`` when the file shrank meanwhile;
    the file position is not used), the spans' digests and the spans' buffers.
    """
    return _read_parallel(_FileSource(fd), size, start, limits, where, hashed)


class _FileSource:
    """Positional reads of an open file (the system call releases the GIL)."""

    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def read_into(self, buf: memoryview, lo: int, hi: int, start: int) -> int:
        return _pread_all(self.fd, buf, lo, hi, start)


class _SeekableSource:
    """Reads of a seekable file object without a file descriptor (a wrapper of a BytesIO, say),
    one at a time: it is read as a file is, into the same buffers, while other threads hash
    what it has read."""

    __slots__ = ("f", "lock")

    def __init__(self, f: BinaryIO) -> None:
        self.f, self.lock = f, threading.Lock()

    def read_into(self, buf: memoryview, lo: int, hi: int, start: int) -> int:
        with self.lock:
            self.f.seek(start + lo)
            off = lo
            while off < hi:
                n = self.f.readinto(buf[off:hi])  # type: ignore[attr-defined]
                if not n:
                    break
                off += n
        return off - lo


class _MemorySource:
    """The bytes of an in-memory archive (``bytes``, a BytesIO's buffer), copied out with
    ``memmove`` through ctypes, which releases the GIL: copies of several members then run on
    every core, as a file's positional reads do."""

    __slots__ = ("view", "addr")

    def __init__(self, view: memoryview) -> None:
        self.view, self.addr = view, _address(view)

    def read_into(self, buf: memoryview, lo: int, hi: int, start: int) -> int:
        hi = max(lo, min(hi, len(self.view) - start))
        if hi > lo:
            ctypes.memmove(_address(buf) + lo, self.addr + start + lo, hi - lo)
        return hi - lo


class _PyBuffer(ctypes.Structure):
    _fields_ = [("buf", ctypes.c_void_p), ("obj", ctypes.c_void_p), ("len", ctypes.c_ssize_t),
                ("itemsize", ctypes.c_ssize_t), ("readonly", ctypes.c_int), ("ndim", ctypes.c_int),
                ("format", ctypes.c_char_p), ("shape", ctypes.c_void_p), ("strides", ctypes.c_void_p),
                ("suboffsets", ctypes.c_void_p), ("internal", ctypes.c_void_p)]


_get_buffer = ctypes.pythonapi.PyObject_GetBuffer
_get_buffer.argtypes = (ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int)
_get_buffer.restype = ctypes.c_int
_release_buffer = ctypes.pythonapi.PyBuffer_Release
_release_buffer.argtypes = (ctypes.POINTER(_PyBuffer),)
_release_buffer.restype = None


def _address(view: memoryview) -> int:
    """The address of a contiguous buffer's first byte, read-only ones (``bytes``) included,
    which ``ctypes.c_char.from_buffer`` refuses. The caller keeps ``view`` alive while it uses
    the address; the buffer request is released at once (a memoryview holds its own)."""
    b = _PyBuffer()
    _get_buffer(view, ctypes.byref(b), 0)  # PyBUF_SIMPLE: the memoryviews here are contiguous bytes
    try:
        return b.buf or 0
    finally:
        _release_buffer(ctypes.byref(b))


def _read_parallel(source: _FileSource | _SeekableSource | _MemorySource, size: int, start: int, limits: Limits, where: str,
                   hashed: bool = True) -> tuple[memoryview, int, _Early, _Held]:
    """:func:`_pread_parallel` for any source: a file, or an archive already in memory."""
    buf = _aligned_buffer(size)
    tail = min(size, _TAIL_BYTES)
    got_tail = source.read_into(buf, size - tail, size, start)
    spans = _big_spans(source, buf, start, limits, where) if got_tail == tail else []
    held: _Held = {lo: _heap_buffer(hi - lo) for lo, hi in spans}
    tasks, pos, rest = [], 0, size - tail  # rest: where the bytes not read yet end
    for lo, hi in spans:  # a span may reach into the tail: reading the tail's bytes again is harmless
        gap = min(lo, rest)
        tasks += [(a, min(gap, a + _READ_CHUNK), False) for a in range(pos, gap, _READ_CHUNK)]
        tasks.append((lo, hi, True))
        pos = hi
    tasks += [(a, min(rest, a + _READ_CHUNK), False) for a in range(pos, rest, _READ_CHUNK)]
    tasks.sort(key=lambda t: t[0] - t[1])  # biggest first, so that none starts last and runs alone

    def run(task: tuple[int, int, bool], done: Callable[[int], None]) -> tuple[int, str | None]:
        lo, hi, own = task
        # a span goes to its own buffer, whose byte 0 is file byte start + lo
        dest, base = (held[lo], lo) if own else (buf, 0)
        h = xxhash.xxh3_128() if own and hashed else None
        off = lo
        while off < hi:
            n = source.read_into(dest, off - base, min(hi, off + _PIECE if own else hi) - base, start + base)
            if h is not None:
                h.update(dest[off - base:off - base + n])
            off += n
            done(n)
            if n == 0 or (not own and off < hi):
                break
        return off - lo, (h.hexdigest() if h is not None and off == hi else None)

    with _progress(size, "reading") as done:
        results = list(_pool().map(lambda t: run(t, done), tasks))
    short = [lo + n for (lo, hi, _), (n, _) in zip(tasks, results, strict=True) if n != hi - lo]
    if short or got_tail != tail:
        return buf, min(short or [size - tail + got_tail]), {}, {}
    early = {lo: (hi - lo, d) for (lo, hi, _), (_, d) in zip(tasks, results, strict=True) if d is not None}
    return buf, size, early, held


# The end of a big file read first, for its zip directory (pt2serde's is ~100 bytes a member).
_TAIL_BYTES = 1 << 20


def _pread_all(fd: int, buf: memoryview, lo: int, hi: int, start: int) -> int:
    """Read file bytes ``start + lo .. start + hi`` into ``buf[lo:hi]``; the count read (short at
    the end of the file)."""
    off = lo
    while off < hi:
        n = os.preadv(fd, [buf[off:hi]], start + off)
        if n <= 0:
            break
        off += n
    return off - lo


def _big_spans(source: _FileSource | _SeekableSource | _MemorySource, buf: memoryview, start: int, limits: Limits,
               where: str) -> list[tuple[int, int]]:
    """Where the data of the big members lies in ``buf``, as the zip directory (already read into
    the end of ``buf``) and the local headers say; empty when they make no sense (the verifying
    read then finds out why)."""
    end = len(buf)
    try:
        records, _ = _central_directory(buf, limits, where)
    except SerializeError:
        return []
    spans, header = [], bytearray(_LFH.size)
    for rec in records:
        if rec.usize < _PARALLEL_HASH_BYTES or rec.offset + _LFH.size > end:
            continue
        if source.read_into(memoryview(header), 0, _LFH.size, start + rec.offset) != _LFH.size:
            return []
        nlen, elen = struct.unpack_from("<HH", header, 26)
        lo = rec.offset + _LFH.size + nlen + elen
        spans.append((lo, lo + rec.usize))
    spans.sort()
    if any(hi > end for _, hi in spans) or any(a[1] > b[0] for a, b in zip(spans, spans[1:], strict=False)):
        return []
    return spans


def _check_file_size(n: int, limits: Limits, where: str) -> None:
    if n > limits.max_file_bytes:
        raise SizeLimitError(f"{where} is larger than {limits.max_file_bytes} bytes (Limits.max_file_bytes); "
                             "if the file is trusted, pass a larger limit")


# ---------------------------------------------------------------- reading: zip structure


def _central_directory(buf: memoryview, limits: Limits, where: str) -> tuple[list[_Record], int]:
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
                                  f"appended data), which pt2serde archives never have; {_FIX}")
        raise TruncatedArchiveError(f"{where} is truncated: {size} bytes and no zip end record (an "
                                    f"interrupted download or copy?); {_FIX}")
    eocd_pos = size - _EOCD.size
    _, disk, cd_disk, n_disk, n, cd_size, cd_off, comment = _EOCD.unpack_from(buf, eocd_pos)
    if comment:
        raise CorruptZipError(f"{where}: the zip end record declares a {comment}-byte comment; {_FIX}")
    cd_end = eocd_pos
    loc_pos = eocd_pos - _LOC64.size
    if loc_pos >= 0 and bytes(buf[loc_pos:loc_pos + 4]) == _SIG_LOC64:
        _, _, e64_off, _ = _LOC64.unpack_from(buf, loc_pos)
        if e64_off + _EOCD64.size != loc_pos or bytes(buf[e64_off:e64_off + 4]) != _SIG_EOCD64:
            raise CorruptZipError(f"{where}: the zip64 end record is not where its locator says; {_FIX}")
        (_, _, _, _, disk64, cd_disk64, n_disk64, n64, cd_size64, cd_off64) = _EOCD64.unpack_from(buf, e64_off)
        for small, big, what in ((n, n64, "entry count"), (cd_size, cd_size64, "directory size"),
                                 (cd_off, cd_off64, "directory offset")):
            if small not in (0xFFFF, _ZIP64_LIMIT, big):
                raise CorruptZipError(f"{where}: the zip and zip64 end records disagree on the {what}; {_FIX}")
        disk, cd_disk, n_disk, n, cd_size, cd_off = disk64, cd_disk64, n_disk64, n64, cd_size64, cd_off64
        cd_end = e64_off
    if disk or cd_disk or n_disk != n:
        raise CorruptZipError(f"{where}: multi-volume zips are not supported; {_FIX}")
    if n > limits.max_members:
        raise SizeLimitError(f"{where} declares {n} members, more than Limits.max_members="
                             f"{limits.max_members}; if the file is trusted, pass a larger limit")
    if cd_off + cd_size != cd_end or n * _CDH.size > cd_size:
        raise CorruptZipError(f"{where}: the central directory ({cd_size} bytes at offset {cd_off}, "
                              f"{n} entries) does not fit before the end record; {_FIX}")
    records, pos = [], cd_off
    for i in range(n):
        if pos + _CDH.size > cd_end or bytes(buf[pos:pos + 4]) != _SIG_CDH:
            raise CorruptZipError(f"{where}: central directory entry {i} is damaged; {_FIX}")
        f = _CDH.unpack_from(buf, pos)
        flags, method, csize, usize = f[3], f[4], f[8], f[9]
        nlen, elen, clen, offset = f[10], f[11], f[12], f[16]
        end = pos + _CDH.size + nlen + elen + clen
        if end > cd_end:
            raise CorruptZipError(f"{where}: central directory entry {i} runs past the directory; {_FIX}")
        raw = bytes(buf[pos + _CDH.size:pos + _CDH.size + nlen])
        rec = _Record(i, raw, flags, method, csize, usize, offset, f[7])
        _apply_zip64(rec, buf[pos + _CDH.size + nlen:pos + _CDH.size + nlen + elen], where)
        records.append(rec)
        pos = end
    if pos != cd_end:
        raise CorruptZipError(f"{where}: {cd_end - pos} unexplained bytes in the central directory; {_FIX}")
    return records, cd_off


def _extra_blocks(extra: memoryview, where: str) -> Iterator[tuple[int, memoryview]]:
    pos = 0
    while pos < len(extra):
        if pos + 4 > len(extra):
            raise CorruptZipError(f"{where}: a zip extra field is cut short; {_FIX}")
        bid, blen = struct.unpack_from("<HH", extra, pos)
        if pos + 4 + blen > len(extra):
            raise CorruptZipError(f"{where}: a zip extra field block runs past its field; {_FIX}")
        yield bid, extra[pos + 4:pos + 4 + blen]
        pos += 4 + blen


def _apply_zip64(rec: _Record, extra: memoryview, where: str) -> None:
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
    raise CorruptZipError(f"{where}: central directory entry {rec.index} lacks its zip64 sizes; {_FIX}")


# Member names (last path component) that only torch's zip writers produce.
_TORCH_EXPORT_MARKERS = ("archive_format", "serialized_exported_program.json", "models/model.json")
_TORCH_SAVE_MARKERS = ("data.pkl",)


def _torch_writer(records: list[_Record]) -> str | None:
    names = [r.raw_name.decode("utf-8", "replace") for r in records]
    if any(n.endswith(_TORCH_EXPORT_MARKERS) for n in names):
        return "torch.export.save"
    if any(n.endswith(_TORCH_SAVE_MARKERS) for n in names):
        return "torch.save"
    return None


def _reject_foreign(records: list[_Record], where: str) -> None:
    writer = _torch_writer(records)
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


_EXTRA_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,199}")


def extra_member(name: str, where: str) -> str:
    """Member name of the extra file ``name``; raises UnsafeMemberNameError for names that are not
    1 to 200 letters, digits, ``_``, ``-`` and ``.`` (not starting with a dot)."""
    if not isinstance(name, str) or not _EXTRA_NAME_RE.fullmatch(name):
        raise UnsafeMemberNameError(
            f"{where}: extra file name {name!r} must be 1 to 200 letters, digits, '_', '-' and '.', not "
            "starting with '.' (no directories); rename it"
        )
    return EXTRA_PREFIX + name


def program_member(program: str | None, member: str) -> str:
    """The member name of ``member`` (program.json, weights.json, debug.json) of one program: at the
    top for a single-program archive (``program`` None), under ``programs/<program>/`` otherwise."""
    return member if program is None else f"{PROGRAMS_PREFIX}{program}/{member}"


def program_names(names: Iterable[str]) -> list[str] | None:
    """The programs of a multi-program archive with these members, sorted; None for a single one."""
    found = sorted({m.group(1) for n in names if (m := _PROGRAM_MEMBER_RE.fullmatch(n))})
    return found or None


def check_program_name(name: object, where: str) -> str:
    """``name`` if it can name a program of a multi-program archive, else UnsafeMemberNameError."""
    if not isinstance(name, str) or not PROGRAM_NAME_RE.fullmatch(name):
        raise UnsafeMemberNameError(
            f"{where}: program name {name!r} must be a Python identifier of 1 to 64 ASCII letters, digits "
            "and '_'; rename it")
    return name


def _format_version(names: Iterable[str]) -> int:
    names = list(names)
    if program_names(names):
        return 3
    return 2 if any(n.startswith(EXTRA_PREFIX) for n in names) else 1


def _check_required(names: set[str], where: str) -> None:
    """A single-program archive has program.json and weights.json at the top; a multi-program one
    has them under every ``programs/<name>/`` and none at the top."""
    programs = program_names(names)
    if programs is None:
        for req in (PROGRAM, WEIGHTS):
            if req not in names:
                raise MissingMemberError(f"{where} has no {req!r}; it is incomplete or not a pt2serde archive: {_FIX}")
        return
    if stray := sorted(names & {PROGRAM, WEIGHTS, DEBUG}):
        raise UnknownMemberError(f"{where}: {stray[0]} at the top of an archive with several programs "
                                 f"({', '.join(programs)}); each program's members live under programs/<name>/: {_FIX}")
    for name in programs:
        for req in (PROGRAM, WEIGHTS):
            if program_member(name, req) not in names:
                raise MissingMemberError(f"{where}: program {name!r} has no {program_member(name, req)}; {_FIX}")


def _is_json_member(name: str) -> bool:
    return name in _JSON_MEMBERS or _PROGRAM_MEMBER_RE.fullmatch(name) is not None


# A control character anywhere in a member name (one regex search instead of a loop over characters).
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


def _check_name(name: str, where: str) -> None:
    """Reject names that could escape a directory, then names the format does not define."""
    if name in _JSON_MEMBERS or _PAYLOAD_RE.fullmatch(name):
        return  # the names every program's archive has: fixed, or data/ and 64 hex digits, none can escape
    if (not name or name.startswith(("/", "\\")) or "\\" in name or ".." in name.split("/")
            or (len(name) > 1 and name[1] == ":") or _CONTROL_RE.search(name)):
        raise UnsafeMemberNameError(
            f"{where}: member name {name!r} could escape an extraction directory (absolute path, '..', "
            f"backslash or control character); the file is hostile or damaged: {_FIX}"
        )
    if (not _is_json_member(name) and not _PAYLOAD_RE.fullmatch(name)
            and not (name.startswith(EXTRA_PREFIX) and _EXTRA_NAME_RE.fullmatch(name[len(EXTRA_PREFIX):]))):
        raise UnknownMemberError(
            f"{where}: member name {name!r} is not part of the pt2serde format (expected manifest.json, "
            f"program.json, weights.json, debug.json, programs/<name>/<one of those three>, "
            f"data/<64 hex digits> or extra/<name>); {_FIX}"
        )


def _at(where: str, name: str) -> str:
    """``where: member 'name'``, for messages: formatted only when one is raised (most loads build none)."""
    return f"{where}: member {name!r}"


def _check_members(buf: memoryview, records: list[_Record], cd_off: int, limits: Limits, where: str,
                   held: _Held) -> tuple[dict[str, memoryview], dict[str, int]]:
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
            raise UnsafeMemberNameError(f"{where}: member name {rec.raw_name!r} is not valid UTF-8; {_FIX}") from None
        _check_name(rec.name, where)
        if rec.name in seen:
            raise DuplicateMemberError(
                f"{_at(where, rec.name)} occurs twice in the zip directory; tools may disagree on which copy is real, so "
                f"the archive is rejected: {_FIX}"
            )
        seen.add(rec.name)
        if rec.flags & _FLAG_ENCRYPTED:
            raise CorruptZipError(f"{_at(where, rec.name)} is encrypted; pt2serde archives are never encrypted: {_FIX}")
        if rec.method != 0:
            raise CompressedMemberError(
                f"{_at(where, rec.name)} is compressed (zip method {rec.method}); pt2serde stores members uncompressed, and "
                f"a compressed member may be a zip bomb. Do not recompress archives: {_FIX}"
            )
        if rec.flags & ~_FLAG_UTF8:
            raise CorruptZipError(f"{_at(where, rec.name)} has unsupported zip flags 0x{rec.flags:04x}; {_FIX}")
        is_json = _is_json_member(rec.name)
        cap = limits.max_json_bytes if is_json else limits.max_member_bytes
        if rec.usize > cap or rec.csize > cap:
            raise SizeLimitError(
                f"{_at(where, rec.name)} declares {max(rec.usize, rec.csize)} bytes, more than the limit of {cap} "
                f"(Limits.{'max_json_bytes' if is_json else 'max_member_bytes'}); "
                "the file is hostile or damaged. If it is trusted, pass a larger limit"
            )
        if rec.csize != rec.usize:
            raise CorruptZipError(f"{_at(where, rec.name)}: stored size {rec.csize} != size {rec.usize}; {_FIX}")
        spans.append((rec.offset, _local_data_start(buf, rec, where), rec.usize, rec.name))
    views: dict[str, memoryview] = {}
    starts: dict[str, int] = {}
    pos = 0
    for start, data_start, size, name in sorted(spans):
        if start < pos:
            raise OverlappingMembersError(
                f"{_at(where, name)} starts at offset {start}, inside the previous member (which ends at {pos}); two "
                f"members share bytes, so the file is hostile or damaged: {_FIX}"
            )
        if start > pos:
            raise CorruptZipError(f"{_at(where, name)}: {start - pos} unaccounted bytes before it (offset {pos}); {_FIX}")
        pos = data_start + size
        own = held.get(data_start)
        views[name] = own if own is not None and len(own) == size else buf[data_start:pos]
        starts[name] = data_start
    if pos > cd_off:
        raise OverlappingMembersError(f"{where}: the last member ends at offset {pos}, inside the central "
                                      f"directory (which starts at {cd_off}); {_FIX}")
    if pos < cd_off:
        raise CorruptZipError(f"{where}: {cd_off - pos} unaccounted bytes before the central directory; {_FIX}")
    return views, starts


def _local_data_start(buf: memoryview, rec: _Record, where: str) -> int:
    """Check the local header agrees with the central directory; return where the data starts."""
    off = rec.offset
    if off + _LFH.size > len(buf) or bytes(buf[off:off + 4]) != _SIG_LFH:
        raise CorruptZipError(f"{_at(where, rec.name)}: no local header at offset {off}; {_FIX}")
    _, _, flags, method, _, _, _, csize, usize, nlen, elen = _LFH.unpack_from(buf, off)
    name_end = off + _LFH.size + nlen
    data_start = name_end + elen
    if data_start > len(buf):
        raise TruncatedArchiveError(f"{_at(where, rec.name)}: the local header runs past the end of the file; {_FIX}")
    if bytes(buf[off + _LFH.size:name_end]) != rec.raw_name:
        raise CorruptZipError(f"{_at(where, rec.name)}: the local header names a different member; {_FIX}")
    if _ZIP64_LIMIT in (csize, usize):
        for bid, block in _extra_blocks(buf[name_end:data_start], _at(where, rec.name)):
            if bid == _ZIP64_ID and len(block) >= 16:
                usize, csize = struct.unpack_from("<QQ", block, 0)
                break
    if (flags, method, csize, usize) != (rec.flags, rec.method, rec.csize, rec.usize):
        raise CorruptZipError(f"{_at(where, rec.name)}: the local header disagrees with the central directory on flags, "
                              f"method or size; {_FIX}")
    if data_start % ALIGNMENT:
        raise CorruptZipError(f"{_at(where, rec.name)}: data at offset {data_start} is not {ALIGNMENT}-byte aligned, so the "
                              f"file was not written by pt2serde (or was rewritten by another zip tool); {_FIX}")
    if data_start + rec.usize > len(buf):
        raise TruncatedArchiveError(f"{_at(where, rec.name)}: declares {rec.usize} bytes but the file ends first; {_FIX}")
    return data_start


# ---------------------------------------------------------------- reading: manifest and checksums


def _check_manifest(views: dict[str, memoryview], manifest_crc: int, where: str) -> schema.Manifest:
    if MANIFEST not in views:
        raise MissingMemberError(f"{where} has no {MANIFEST}; it is incomplete or not a pt2serde archive: {_FIX}")
    _check_required(set(views), where)
    # Nothing else covers the manifest's bytes (it holds everybody else's sha256), so its CRC-32
    # is checked before a single field of it is trusted; the framing check covers the CRC field.
    if crc32(views[MANIFEST]) != manifest_crc:
        raise ChecksumMismatchError(f"{where}: {MANIFEST} is corrupt: its CRC-32 differs from the one in "
                                    f"the zip directory; {_FIX}")
    manifest = wire.decode(views[MANIFEST], schema.Manifest, where=f"{where}: {MANIFEST}")
    if manifest.format != FORMAT_NAME:
        raise ForeignArtifactError(f"{where}: {MANIFEST} names format {manifest.format!r}, not "
                                   f"{FORMAT_NAME!r}; this file was written by another tool")
    if manifest.format_version > FORMAT_VERSION:
        raise FormatVersionError(
            f"{where} uses archive format version {manifest.format_version}, but this pt2serde reads "
            f"format versions 1..{FORMAT_VERSION}; upgrade pt2serde to load it"
        )
    if manifest.format_version < 1:
        raise MalformedArtifactError(f"{where}: {MANIFEST} has invalid format_version "
                                     f"{manifest.format_version}; {_FIX}")
    if manifest.format_version < 3 and program_names(views):
        raise UnknownMemberError(f"{where}: members under {PROGRAMS_PREFIX} need format version 3, but "
                                 f"{MANIFEST} says {manifest.format_version}; {_FIX}")
    if manifest.format_version < 2 and (extra := next((n for n in views if n.startswith(EXTRA_PREFIX)), None)):
        raise UnknownMemberError(f"{where}: member {extra!r} is an extra file, which format version "
                                 f"{manifest.format_version} does not have; {_FIX}")
    present = set(views) - {MANIFEST}
    listed = set(manifest.members)
    if unlisted := sorted(present - listed):
        raise ManifestMismatchError(f"{where}: member {unlisted[0]!r} is in the archive but not listed in "
                                    f"{MANIFEST}; the file was modified after saving: {_FIX}")
    if absent := sorted(listed - present):
        raise ManifestMismatchError(f"{where}: {MANIFEST} lists member {absent[0]!r}, but the archive has "
                                    f"no such member; the file was modified after saving: {_FIX}")
    for name in sorted(listed):
        m = manifest.members[name]
        if m.size != len(views[name]):
            raise ManifestMismatchError(f"{where}: {MANIFEST} says member {name!r} has {m.size} bytes, "
                                        f"the archive holds {len(views[name])}; {_FIX}")
        if not SHA256_RE.fullmatch(m.sha256) or (name.startswith("data/") and m.sha256 != name[5:]):
            raise ManifestMismatchError(f"{where}: {MANIFEST} records an invalid sha256 {m.sha256!r} for "
                                        f"member {name!r}; {_FIX}")
        if m.xxh3 is not None and not XXH3_RE.fullmatch(m.xxh3):
            raise ManifestMismatchError(f"{where}: {MANIFEST} records an invalid xxh3 {m.xxh3!r} for member "
                                        f"{name!r} (expected 32 lowercase hex digits); {_FIX}")
    return manifest


_PARALLEL_HASH_BYTES = 1 << 20


def digest_all(fn: Callable[[Any], Any], views: list[Any], label: str = "hashing") -> list[Any]:
    """``[fn(v) for v in views]``, with the big views on several threads.

    hashlib and zlib release the GIL on large buffers, so sha256 and crc32 of big payloads run on
    every core; small ones are not worth a thread hand-off. Over ``PROGRESS_MIN_BYTES`` a progress
    bar (``label``) goes to stderr when it is a terminal.
    """
    sizes = [len(v) for v in views]
    total = sum(sizes)
    if total < PROGRESS_MIN_BYTES and sum(n >= _PARALLEL_HASH_BYTES for n in sizes) < 2:
        # No bar and no thread for so little work: the loop below would do just this.
        return [fn(v) for v in views]
    out: list[Any] = [None] * len(views)
    with _progress(total, label) as done:
        # biggest first, so that one large view does not start last and run alone
        big = sorted((i for i, v in enumerate(views) if len(v) >= _PARALLEL_HASH_BYTES), key=lambda i: -len(views[i]))
        if len(big) > 1:
            for i, d in zip(big, _pool().map(lambda i: fn(views[i]), big), strict=True):
                out[i] = d
                done(len(views[i]))
        result = []
        for v, d in zip(views, out, strict=True):
            if d is None:
                d = fn(v)
                done(len(v))
            result.append(d)
    return result


_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    """The threads that read and hash big files, one set per process: starting threads anew for
    every load costs up to 2 ms each on a busy machine. Its tasks never wait on the pool."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=min(os.cpu_count() or 1, 8), thread_name_prefix="pt2serde-io")
        return _POOL


def _forget_pool() -> None:
    """In a forked child: the parent's pool threads do not exist there (the pool would wait on them)."""
    global _POOL, _POOL_LOCK
    _POOL, _POOL_LOCK = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


# Work on fewer bytes than this takes well under a second: no progress bar for it.
PROGRESS_MIN_BYTES = 512 << 20


@contextlib.contextmanager
def _progress(total: int, label: str) -> Iterator[Callable[[int], None]]:
    """A callback counting bytes done: a tqdm bar on stderr when it is a terminal and the work is
    big, else nothing (never in logs, pipes or files)."""
    stream = sys.stderr
    if total < PROGRESS_MIN_BYTES or stream is None or not stream.isatty():
        yield lambda n: None
        return
    from tqdm import tqdm

    with tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=f"pt2serde: {label}",
              file=stream, leave=False) as bar:
        yield bar.update


class _Want(NamedTuple):
    """What a member must hash to: its sha256 and XXH3-128 (hex) and its CRC-32; None: that
    digest is not computed for it."""

    sha256: str | None
    xxh3: str | None
    crc: int | None


class _Job:
    """Hash ``src`` with the digests ``want`` names."""

    __slots__ = ("src", "want")

    def __init__(self, src: memoryview | bytes | _MappedSpan, want: _Want) -> None:
        self.src, self.want = src, want

    def __len__(self) -> int:
        return len(self.src)


class _MappedSpan:
    """``size`` bytes at offset ``start`` of a file mapping, hashed piece by piece (see _pieces)."""

    __slots__ = ("mm", "start", "size")

    def __init__(self, mm: mmap.mmap, start: int, size: int) -> None:
        self.mm, self.start, self.size = mm, start, size

    def __len__(self) -> int:
        return self.size


_PIECE = 1 << 20
# A mapped span's pages are dropped once per this many bytes hashed (each drop is a system call
# and a TLB flush on every core running the process): hashing 134 MB through the mapping on 2
# cores took 15 ms dropping them every 1 MB, 13 ms every 8 MB, and 12 ms in 8 MB pieces. At most
# this much per hashing thread is mapped at once.
_DROP = 8 << 20
_PAGE = mmap.PAGESIZE


def _pieces(src: memoryview | bytes | _MappedSpan, piece: int = _PIECE) -> Iterator[memoryview | bytes]:
    """``src`` in pieces of ``piece`` bytes: cache-sized by default, so that each piece is hashed
    by every digest while it is in cache (one digest alone gains nothing from that, and fewer,
    bigger calls cost less).

    The pages of a mapped span are dropped from the process (``MADV_DONTNEED``) once every
    ``_DROP`` bytes are hashed, so verifying a mapped file leaves nothing resident. That is safe
    because nothing has written to the (copy-on-write) mapping yet: the page cache still holds the
    file's bytes, which a later touch maps again. Hashing the mapping is twice as fast as
    reading the file into a buffer (no copy), and pieces of neighbouring members may share a
    page: dropping it under another thread only makes that thread fault it in again.
    """
    if not isinstance(src, _MappedSpan):
        for lo in range(0, len(src), piece):
            yield src[lo:lo + piece]
        return
    view = memoryview(src.mm)
    end = src.start + src.size
    try:
        for lo in range(src.start, end, _DROP):
            hi = min(lo + _DROP, end)
            for at in range(lo, hi, piece):
                yield view[at:min(at + piece, hi)]
            first = lo - lo % _PAGE
            with contextlib.suppress(OSError, ValueError, AttributeError):  # a hint only
                src.mm.madvise(mmap.MADV_DONTNEED, first, min(hi - first + (-hi) % _PAGE, len(src.mm) - first))
    finally:
        view.release()


def _digest(job: _Job) -> _Want:
    """The digests of ``job.src`` that ``job.want`` asks for (the others None)."""
    want, src = job.want, job.src
    if not isinstance(src, _MappedSpan) and (len(src) <= _PIECE or (want.sha256 is None and want.crc is None)):
        # One call per digest: a small member fits the cache whole, and the C code hashes a big
        # one alone without the GIL.
        return _Want(None if want.sha256 is None else sha256_hex(src),
                     None if want.xxh3 is None else xxh3_hex(src),
                     None if want.crc is None else crc32(src))
    sha = hashlib.sha256() if want.sha256 is not None else None
    xxh = xxhash.xxh3_128() if want.xxh3 is not None else None
    crc = 0
    size = _DROP if (want.sha256, want.xxh3, want.crc).count(None) == 2 else _PIECE  # one digest
    for piece in _pieces(src, size):
        if sha is not None:
            sha.update(piece)
        if xxh is not None:
            xxh.update(piece)
        if want.crc is not None:
            crc = crc32(piece, crc)
    return _Want(sha and sha.hexdigest(), xxh and xxh.hexdigest(), crc if want.crc is not None else None)


def _crc32_and_xxh3(view: memoryview) -> tuple[int, str]:
    """What the writer records of a member besides its sha256: one pass over cache-sized pieces."""
    crc, xxh = 0, xxhash.xxh3_128()
    for piece in _pieces(view):
        crc = crc32(piece, crc)
        xxh.update(piece)
    return crc, xxh.hexdigest()


def _check_digest(name: str, got: _Want, want: _Want, where: str) -> None:
    """Raise ChecksumMismatchError unless every digest computed in ``got`` is the one in ``want``."""
    for kind, have, expected, whose in (("sha256", got.sha256, want.sha256, MANIFEST),
                                        ("xxh3", got.xxh3, want.xxh3, MANIFEST)):
        if have is not None and have != expected:
            raise ChecksumMismatchError(f"{where}: member {name!r} is corrupt: its {kind} is {have}, but "
                                        f"{whose} records {expected}; {_FIX}")
    if got.crc is not None and got.crc != want.crc:
        raise ChecksumMismatchError(f"{where}: the CRC-32 the zip records for member {name!r} is not that of its "
                                    f"bytes; the file was damaged or rewritten by another tool: {_FIX}")


def _verify_hashes(names: list[str], jobs: list[_Job], want: dict[str, _Want], where: str) -> dict[str, int]:
    """Check the digests of the members ``names``; return the CRC-32 of those whose job computed
    it (for the framing check)."""
    digests = digest_all(_digest, jobs, "verifying")
    for name, got in zip(names, digests, strict=True):
        # the CRC-32 is compared by the framing check, which names the header that disagrees
        _check_digest(name, _Want(got.sha256, got.xxh3, None), want[name], where)
    return {name: got.crc for name, got in zip(names, digests, strict=True) if got.crc is not None}


def _check_framing(buf: memoryview, records: list[_Record], cd_off: int, views: dict[str, memoryview],
                   crcs: dict[str, int], where: str) -> None:
    """Demand that every byte outside the members' data is what :func:`write_archive` writes for
    these members: the writer is deterministic, so any other byte (a date, a version, padding,
    attributes, a CRC) is damage or tampering that the structural checks let through."""
    if _framing_as_written(buf, records, cd_off, crcs):
        return
    names = sorted(views)
    chunks = list(_layout([_Entry(n, views[n], "", crcs[n]) for n in names], _ZIP64_THRESHOLD))
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
                                  f"these members; the file was damaged or rewritten by another tool: {_FIX}")
        pos += len(chunk)
    if pos != len(buf):
        raise CorruptZipError(f"{where}: {len(buf) - pos} unexplained bytes at the end; {_FIX}")


def _framing_as_written(buf: memoryview, records: list[_Record], cd_off: int, crcs: dict[str, int]) -> bool:
    """True when the bytes outside the members' data are, field by field, those :func:`_layout`
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
