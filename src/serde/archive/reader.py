"""Reading an archive: the file read once, then checked end to end before any member is handed out.

Reading never trusts the file: the whole file is read once into one private buffer (or mapped,
see :func:`read_archive`), the zip structure is checked end to end (sizes, offsets, contiguity,
alignment, names), then the manifest is decoded (after its CRC-32 is checked: no sha256 covers it)
and every member's digests verified (its sha256 and its XXH3-128 when the manifest has one; with
``sha256=False``, as ``serde.load`` reads, the XXH3-128 alone where there is one), and finally
every byte of zip framing is compared with what :func:`~serde.archive.write_archive` would write
for those members (so dates, versions, attributes, padding and the CRC-32 of every member are
exact; a payload's CRC-32 is recomputed unless ``payload_crc=False``, and then must agree between
its two copies), before any member is handed out as a zero-copy ``memoryview`` over that buffer.
``lazy=True`` defers the payloads' and extra files' hashes to their first
:meth:`ArchiveContents.member`.
"""

from __future__ import annotations

import os
from typing import BinaryIO

from serde.core import schema, wire
from serde.core.limits import DEFAULT_LIMITS, Limits
from serde.core.version import FORMAT_VERSION
from serde.errors import ForeignArtifactError, MalformedArtifactError, SerializeError
from serde.fileio.reader import ReadPolicy, describe, read_all

from .contents import ArchiveContents
from .digests import Job, MappedSpan, Want, check_digest, crc32, verify_hashes
from .errors import (
    FIX,
    ChecksumMismatchError,
    FormatVersionError,
    ManifestMismatchError,
    MissingMemberError,
    SizeLimitError,
    UnknownMemberError,
)
from .layout import check_framing
from .members import (
    EXTRA_PREFIX,
    FORMAT_NAME,
    MANIFEST,
    PAYLOAD_PREFIX,
    PROGRAMS_PREFIX,
    SHA256_RE,
    XXH3_RE,
    check_required,
    is_json_member,
)
from .parse import big_spans, central_directory, check_members, reject_foreign, torch_writer

__all__ = ["read_archive", "is_torch_export_archive"]


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
        MalformedArtifactError and UnsafeArtifactError subclasses (see serde.archive.errors),
        FormatVersionError.
    """
    where = describe(src)
    buf, mapped, early, held = read_all(src, _policy(limits, where), mmap or lazy, private=not lazy, hashed=verify)
    records, cd_off = central_directory(buf, limits, where)
    reject_foreign(records, where)
    views, starts = check_members(buf, records, cd_off, limits, where, held)
    recorded = {r.name: r.crc for r in records}
    manifest, programs = _check_manifest(views, recorded.get(MANIFEST, 0), where)
    want = {}
    for n, m in manifest.members.items():
        # the CRC-32 is recomputed unless a digest covers the same bytes (see payload_crc)
        crc = recorded[n] if payload_crc or not n.startswith(PAYLOAD_PREFIX) else None
        want[n] = Want(m.sha256 if sha256 or m.xxh3 is None else None, m.xxh3, crc)
    later = {n: want[n] for n in views if lazy and not is_json_member(n)}
    trusted = set() if verify else {n for n in manifest.members if n.startswith(PAYLOAD_PREFIX)}
    now = [n for n in sorted(manifest.members) if n not in later and n not in trusted]
    # A member hashed while it was read (see serde.fileio.reader) needs nothing more when that is the one
    # digest to check: its bytes have not changed since.
    hashed = {n: hit[1] for n in now if want[n].sha256 is None and want[n].crc is None
              and (hit := early.get(starts[n])) is not None and hit[0] == len(views[n])}
    for n, xxh3 in hashed.items():
        check_digest(n, Want(None, xxh3, None), want[n], where)
    now = [n for n in now if n not in hashed]
    # A mapped member is hashed a piece at a time, its pages unmapped after each (see serde.archive.digests).
    jobs = [Job(MappedSpan(buf.obj, starts[n], len(views[n])) if mapped else views[n], want[n]) for n in now]
    crcs = verify_hashes(now, jobs, want, where)
    crcs[MANIFEST] = crc32(views[MANIFEST])
    # A member whose CRC-32 is not computed (yet) is framed with the one the zip records: the
    # local header must then agree with the central directory, so a flipped byte in either is
    # still caught; member() checks a lazy member's CRC-32 when its bytes are first asked for.
    check_framing(buf, records, cd_off, views, {**recorded, **crcs}, where)
    return ArchiveContents(manifest, views, later, where, programs)


def is_torch_export_archive(src: str | os.PathLike | BinaryIO | bytes | bytearray | memoryview) -> bool:
    """True if ``src`` is a zip written by ``torch.export.save`` (or ``torch.save``); loads nothing."""
    try:
        where = describe(src)
        records, _ = central_directory(read_all(src, _policy(DEFAULT_LIMITS, where))[0], DEFAULT_LIMITS, where)
    except SerializeError:
        return False
    return torch_writer(records) is not None


def _policy(limits: Limits, where: str) -> ReadPolicy:
    """How the file reader serves an archive: files over the limit refused, big members read into
    buffers of their own (as the zip directory places them)."""
    return ReadPolicy(lambda n, at: _check_file_size(n, limits, at),
                      lambda buf, read_at: big_spans(buf, read_at, limits, where))


def _check_file_size(n: int, limits: Limits, where: str) -> None:
    if n > limits.max_file_bytes:
        raise SizeLimitError(f"{where} is larger than {limits.max_file_bytes} bytes (Limits.max_file_bytes); "
                             "if the file is trusted, pass a larger limit")


def _check_manifest(views: dict[str, memoryview], manifest_crc: int,
                    where: str) -> tuple[schema.Manifest, list[str] | None]:
    """The manifest, checked against the members, and the programs of a multi-program archive."""
    if MANIFEST not in views:
        raise MissingMemberError(f"{where} has no {MANIFEST}; it is incomplete or not a pt2serde archive: {FIX}")
    programs = check_required(set(views), where)
    # Nothing else covers the manifest's bytes (it holds everybody else's sha256), so its CRC-32
    # is checked before a single field of it is trusted; the framing check covers the CRC field.
    if crc32(views[MANIFEST]) != manifest_crc:
        raise ChecksumMismatchError(f"{where}: {MANIFEST} is corrupt: its CRC-32 differs from the one in "
                                    f"the zip directory; {FIX}")
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
                                     f"{manifest.format_version}; {FIX}")
    if manifest.format_version < 3 and programs:
        raise UnknownMemberError(f"{where}: members under {PROGRAMS_PREFIX} need format version 3, but "
                                 f"{MANIFEST} says {manifest.format_version}; {FIX}")
    if manifest.format_version < 2 and (extra := next((n for n in views if n.startswith(EXTRA_PREFIX)), None)):
        raise UnknownMemberError(f"{where}: member {extra!r} is an extra file, which format version "
                                 f"{manifest.format_version} does not have; {FIX}")
    present = set(views) - {MANIFEST}
    listed = set(manifest.members)
    if unlisted := sorted(present - listed):
        raise ManifestMismatchError(f"{where}: member {unlisted[0]!r} is in the archive but not listed in "
                                    f"{MANIFEST}; the file was modified after saving: {FIX}")
    if absent := sorted(listed - present):
        raise ManifestMismatchError(f"{where}: {MANIFEST} lists member {absent[0]!r}, but the archive has "
                                    f"no such member; the file was modified after saving: {FIX}")
    for name in sorted(listed):
        m = manifest.members[name]
        if m.size != len(views[name]):
            raise ManifestMismatchError(f"{where}: {MANIFEST} says member {name!r} has {m.size} bytes, "
                                        f"the archive holds {len(views[name])}; {FIX}")
        if not SHA256_RE.fullmatch(m.sha256) or (name.startswith("data/") and m.sha256 != name[5:]):
            raise ManifestMismatchError(f"{where}: {MANIFEST} records an invalid sha256 {m.sha256!r} for "
                                        f"member {name!r}; {FIX}")
        if m.xxh3 is not None and not XXH3_RE.fullmatch(m.xxh3):
            raise ManifestMismatchError(f"{where}: {MANIFEST} records an invalid xxh3 {m.xxh3!r} for member "
                                        f"{name!r} (expected 32 lowercase hex digits); {FIX}")
    return manifest, programs
