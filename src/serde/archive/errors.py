"""The archive's errors: five families, each class carrying a ``reason``.

A family says what the caller can do; its ``reason`` (a short, stable word, as safetensors'
errors carry one) says which check refused the file, for code that reports or counts failures
without matching on messages. Each reason keeps the class it always had, so ``except
ChecksumMismatchError`` still works:

=======================  ============================  ============================================
family                   base                          reasons (class)
=======================  ============================  ============================================
ArtifactIOError          SerializeError, OSError       os, not_found, permission, is_a_directory
ForeignArchiveError      ForeignArtifactError          not_a_zip (NotAnArchiveError),
                                                       torch (TorchArchiveError)
ArchiveFormatError       MalformedArtifactError        truncated, corrupt_zip, overlapping_members,
                                                       unknown_member, missing_member,
                                                       manifest_mismatch, checksum_mismatch
ArchiveSafetyError       UnsafeArtifactError           duplicate_member, unsafe_member_name,
                                                       compressed_member, size_limit
FormatVersionError       SchemaVersionError            format_version
=======================  ============================  ============================================

ArtifactIOError lives with the file I/O below the archive (:mod:`serde.fileio`), which raises it.
"""

from __future__ import annotations

from typing import ClassVar

from serde.errors import ForeignArtifactError, MalformedArtifactError, SchemaVersionError, UnsafeArtifactError
from serde.fileio.errors import (
    ArtifactIOError,
    ArtifactIsADirectoryError,
    ArtifactNotFoundError,
    ArtifactPermissionError,
    os_error,
)

__all__ = [
    "ArtifactIOError", "ArtifactNotFoundError", "ArtifactPermissionError", "ArtifactIsADirectoryError", "os_error",
    "ForeignArchiveError", "NotAnArchiveError", "TorchArchiveError",
    "ArchiveFormatError", "TruncatedArchiveError", "CorruptZipError", "OverlappingMembersError",
    "UnknownMemberError", "MissingMemberError", "ManifestMismatchError", "ChecksumMismatchError",
    "ArchiveSafetyError", "DuplicateMemberError", "UnsafeMemberNameError", "CompressedMemberError",
    "SizeLimitError", "FormatVersionError", "FIX",
]

# How to mend a damaged archive, the end of most messages below.
FIX = "re-save the program with pt2serde, or fetch an intact copy of the file"


class ForeignArchiveError(ForeignArtifactError):
    """The file is not a pt2serde archive; ``reason`` says what it is instead."""

    reason: ClassVar[str] = "foreign"


class NotAnArchiveError(ForeignArchiveError):
    """The bytes are not a zip archive at all."""

    reason = "not_a_zip"


class TorchArchiveError(ForeignArchiveError):
    """The zip was written by ``torch.export.save`` or ``torch.save`` (pickle-based)."""

    reason = "torch"


class ArchiveFormatError(MalformedArtifactError):
    """The archive breaks the format (damaged, or assembled by another tool), or the members given to
    :func:`write_archive` would; ``reason`` says how."""

    reason: ClassVar[str] = "format"


class TruncatedArchiveError(ArchiveFormatError):
    """The file ends before the zip's end-of-central-directory record."""

    reason = "truncated"


class CorruptZipError(ArchiveFormatError):
    """The zip structure is inconsistent (bad signatures, headers that disagree, gaps, misalignment)."""

    reason = "corrupt_zip"


class OverlappingMembersError(ArchiveFormatError):
    """Two members claim the same bytes of the file."""

    reason = "overlapping_members"


class UnknownMemberError(ArchiveFormatError):
    """A member name is not one the format defines."""

    reason = "unknown_member"


class MissingMemberError(ArchiveFormatError):
    """A required member (manifest.json, program.json, weights.json, a payload) is absent."""

    reason = "missing_member"


class ManifestMismatchError(ArchiveFormatError):
    """manifest.json disagrees with the members actually present."""

    reason = "manifest_mismatch"


class ChecksumMismatchError(ArchiveFormatError):
    """A member's sha256 or XXH3-128 (or its zip CRC-32) differs from the one recorded."""

    reason = "checksum_mismatch"


class ArchiveSafetyError(UnsafeArtifactError):
    """The archive is refused because reading it could be unsafe; ``reason`` says why."""

    reason: ClassVar[str] = "safety"


class DuplicateMemberError(ArchiveSafetyError):
    """A member name occurs twice; different readers could see different contents."""

    reason = "duplicate_member"


class UnsafeMemberNameError(ArchiveSafetyError):
    """A member name could escape an extraction directory (``..``, absolute, backslash, control chars)."""

    reason = "unsafe_member_name"


class CompressedMemberError(ArchiveSafetyError):
    """A member is compressed; pt2serde stores members raw, so this may be a zip bomb."""

    reason = "compressed_member"


class SizeLimitError(ArchiveSafetyError):
    """A size or count exceeds :class:`Limits`."""

    reason = "size_limit"


class FormatVersionError(SchemaVersionError):
    """The archive layout version is newer than this reader."""

    reason: ClassVar[str] = "format_version"
