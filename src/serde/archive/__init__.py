"""The pt2serde archive: one deterministic, checksummed zip, read and written without torch.

Where each part lives: the members and their names (:mod:`.members`), the zip layout and the
framing check (:mod:`.layout`), the zip parser (:mod:`.parse`), the digests (:mod:`.digests`),
writing (:mod:`.writer`), reading and verifying (:mod:`.reader`), the verified contents
(:mod:`.contents`), the errors (:mod:`.errors`), and the step up to schema Structs
(:mod:`.artifact`). Files are read and written by :mod:`serde.fileio`.
"""

from serde.core.limits import DEFAULT_LIMITS, Limits
from serde.core.wire import sha256_hex
from serde.fileio import digest_all, write_atomic

from .contents import ArchiveContents
from .digests import xxh3_hex
from .errors import (
    ArchiveFormatError,
    ArchiveSafetyError,
    ArtifactIOError,
    ArtifactIsADirectoryError,
    ArtifactNotFoundError,
    ArtifactPermissionError,
    ChecksumMismatchError,
    CompressedMemberError,
    CorruptZipError,
    DuplicateMemberError,
    ForeignArchiveError,
    FormatVersionError,
    ManifestMismatchError,
    MissingMemberError,
    NotAnArchiveError,
    OverlappingMembersError,
    SizeLimitError,
    TorchArchiveError,
    TruncatedArchiveError,
    UnknownMemberError,
    UnsafeMemberNameError,
)
from .layout import ALIGNMENT
from .members import (
    DEBUG,
    EXTRA_PREFIX,
    FORMAT_NAME,
    MANIFEST,
    PROGRAM,
    PROGRAM_NAME_RE,
    PROGRAMS_PREFIX,
    SHA256_RE,
    WEIGHTS,
    XXH3_RE,
    check_program_name,
    extra_member,
    payload_name,
    program_member,
    program_names,
)
from .reader import is_torch_export_archive, read_archive
from .writer import write_archive

__all__ = [
    "MANIFEST", "PROGRAM", "WEIGHTS", "DEBUG", "FORMAT_NAME", "ALIGNMENT", "EXTRA_PREFIX", "PROGRAMS_PREFIX",
    "PROGRAM_NAME_RE", "SHA256_RE", "XXH3_RE", "Limits", "DEFAULT_LIMITS", "ArchiveContents",
    "write_archive", "write_atomic", "read_archive", "is_torch_export_archive",
    "payload_name", "extra_member", "program_member", "program_names", "check_program_name",
    "sha256_hex", "xxh3_hex", "digest_all",
    "ArtifactIOError", "ArtifactNotFoundError", "ArtifactPermissionError", "ArtifactIsADirectoryError",
    "ForeignArchiveError", "NotAnArchiveError", "TorchArchiveError",
    "ArchiveFormatError", "TruncatedArchiveError", "CorruptZipError", "OverlappingMembersError",
    "UnknownMemberError", "MissingMemberError", "ManifestMismatchError", "ChecksumMismatchError",
    "ArchiveSafetyError", "DuplicateMemberError", "UnsafeMemberNameError", "CompressedMemberError",
    "SizeLimitError", "FormatVersionError",
]
