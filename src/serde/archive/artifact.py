"""Artifacts as schema Structs, without torch: verify -> upgrade (plain dicts) -> decode, and encode -> write.

``read_artifact`` is what ``load``, ``show``, ``diff``, ``check`` and ``upgrade`` share.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, BinaryIO

import msgspec

from serde.core import schema, wire
from serde.core.limits import DEFAULT_LIMITS, Limits
from serde.core.version import SCHEMA_VERSION
from serde.errors import MalformedArtifactError, SerializeError

from .contents import ArchiveContents
from .members import (
    DEBUG,
    EXTRA_PREFIX,
    PAYLOAD_PREFIX,
    PROGRAM,
    WEIGHTS,
    extra_member,
    payload_name,
    program_member,
)
from .reader import read_archive
from .upgrade import check_readable, document_version, upgrade_documents
from .writer import write_archive

__all__ = ["Artifact", "SeveralProgramsError", "read_artifact", "read_artifacts", "write_artifact",
           "write_artifacts", "encode_members"]

Source = str | os.PathLike | BinaryIO | bytes | bytearray | memoryview


@dataclass(frozen=True)
class Artifact:
    """A verified program of an artifact, at the current schema version.

    ``name`` is None for the one program of a single-program artifact, else its name in a
    multi-program one (whose programs share ``contents``: payloads, extra files).
    """

    manifest: schema.Manifest
    program: schema.ExportedProgram
    weights: schema.Weights
    debug: schema.DebugInfo | None
    contents: ArchiveContents
    written_version: tuple[int, int]
    name: str | None = None

    def payload(self, sha256: str) -> memoryview:
        """Raw bytes of the storage with this content hash."""
        return self.contents.member(payload_name(sha256))

    def extra_files(self) -> dict[str, bytes]:
        """The extra files saved with the program (name -> bytes)."""
        n = len(EXTRA_PREFIX)
        return {m[n:]: bytes(self.contents.member(m)) for m in self.contents.names if m.startswith(EXTRA_PREFIX)}

    def payloads(self) -> dict[str, memoryview]:
        """Every payload member (``data/<sha256>`` -> bytes), as ``write_artifact`` takes them."""
        return {n: self.contents.member(n) for n in self.contents.names if n.startswith(PAYLOAD_PREFIX)}


class SeveralProgramsError(SerializeError):
    """A tool that handles one program was given an artifact holding several."""


def read_artifact(src: Source, *, limits: Limits = DEFAULT_LIMITS, mmap: bool = False,
                  lazy: bool = False, payload_crc: bool = True, sha256: bool = True) -> Artifact:
    """Read, verify, upgrade and decode a single-program artifact (``mmap``: see :func:`serde.load`;
    ``lazy``, ``payload_crc`` and ``sha256``: see :func:`serde.read_archive`).

    Raises:
        SerializeError subclasses: ForeignArtifactError (not ours, e.g. torch.export.save output),
        MalformedArtifactError / UnsafeArtifactError (damaged or hostile), SchemaVersionError
        (outside the supported window), UpgradeError (no upgrader step), SeveralProgramsError
        (the artifact holds several programs: use :func:`read_artifacts`).
    """
    programs = read_artifacts(src, limits=limits, mmap=mmap, lazy=lazy, payload_crc=payload_crc, sha256=sha256)
    if list(programs) != [None]:
        raise SeveralProgramsError(
            f"the artifact holds {len(programs)} programs ({', '.join(programs)}), and this handles one; "
            "serde.load returns them as a dict")
    return programs[None]


def read_artifacts(src: Source, *, limits: Limits = DEFAULT_LIMITS,
                   mmap: bool = False, lazy: bool = False, payload_crc: bool = True,
                   sha256: bool = True, verify: bool = True) -> dict[str | None, Artifact]:
    """Every program of an artifact, by name (``{None: artifact}`` for a single-program one);
    they share one verified archive (see :func:`read_artifact` for the errors and the options,
    :func:`serde.read_archive` for ``verify``)."""
    contents = read_archive(src, limits=limits, mmap=mmap, lazy=lazy, payload_crc=payload_crc,
                                    sha256=sha256, verify=verify)
    version = contents.schema_version
    check_readable(version)
    names = contents.programs or [None]
    return {name: _read_program(contents, name, version) for name in names}


def _read_program(contents: ArchiveContents, name: str | None, version: tuple[int, int]) -> Artifact:
    types = {program_member(name, m): t for m, t in ((PROGRAM, schema.ExportedProgram), (WEIGHTS, schema.Weights),
                                                     (DEBUG, schema.DebugInfo))}
    program_m, weights_m, debug_m = types
    # Taken before any is decoded: a missing program.json or weights.json raises MissingMemberError.
    views = {n: contents.member(n) for n in types if n != debug_m or n in contents}
    if version[0] == SCHEMA_VERSION[0]:
        # Same major: unknown optional fields from a newer minor are ignored by the typed decoder.
        got = {n: wire.decode(v, types[n], where=n) for n, v in views.items()}
        declared = (got[program_m].schema_version.major, got[program_m].schema_version.minor)
    else:
        docs = {n: wire.decode_json(v, where=n) for n, v in views.items()}
        declared = document_version(docs[program_m], where=program_m)
    if declared != version:
        raise MalformedArtifactError(
            f"{program_m}: schema_version {declared[0]}.{declared[1]} disagrees with manifest.json "
            f"({version[0]}.{version[1]}); the file was edited or assembled after saving: re-save it with pt2serde"
        )
    if version[0] != SCHEMA_VERSION[0]:
        short = {n: n.rsplit("/", 1)[-1].removesuffix(".json") for n in types}  # program, weights, debug
        upgraded = upgrade_documents({short[n]: doc for n, doc in docs.items()}, version)
        got = {}
        for n, type_ in types.items():
            doc = upgraded.get(short[n])
            if n == debug_m and doc is None:
                continue
            try:
                got[n] = wire.convert(doc, type_)
            except msgspec.ValidationError as e:
                raise MalformedArtifactError(f"{n}: after upgrading, does not match schema {type_.__name__}: {e}") from None
    return Artifact(contents.manifest, got[program_m], got[weights_m], got.get(debug_m), contents, version, name)


def encode_members(program: schema.ExportedProgram, weights: schema.Weights, debug: Any | None = None,
                   name: str | None = None) -> dict[str, bytes]:
    """JSON members of one program (payloads are added by the caller); ``name``: its name in a
    multi-program artifact, None for a single-program one."""
    members = {program_member(name, PROGRAM): wire.encode(program),
               program_member(name, WEIGHTS): wire.encode(weights)}
    if debug is not None:
        members[program_member(name, DEBUG)] = wire.encode(debug)
    return members


def write_artifact(dest: str | os.PathLike | BinaryIO, program: schema.ExportedProgram, weights: schema.Weights,
                   payloads: dict[str, Any], debug: Any | None = None, *, torch_version: str,
                   extra_files: dict[str, bytes] | None = None) -> None:
    """Encode and write a single-program artifact atomically (payloads: member name -> bytes;
    extra_files: name -> bytes, see :func:`serde.save`)."""
    write_artifacts(dest, {None: (program, weights, debug)}, payloads, torch_version=torch_version,
                    extra_files=extra_files)


def write_artifacts(dest: str | os.PathLike | BinaryIO,
                    programs: dict[str | None, tuple[schema.ExportedProgram, schema.Weights, Any | None]],
                    payloads: dict[str, Any], *, torch_version: str,
                    extra_files: dict[str, bytes] | None = None) -> None:
    """Encode and write an artifact of one program (key None) or several named ones, which share
    the payloads (member name -> bytes) and extra files."""
    members: dict[str, Any] = {}
    versions = set()
    for name, (program, weights, debug) in programs.items():
        members.update(encode_members(program, weights, debug, name))
        versions.add((program.schema_version.major, program.schema_version.minor))
    members.update(payloads)
    for name, data in (extra_files or {}).items():
        members[extra_member(name, "extra_files")] = data
    (version,) = versions  # every program of one save is written by this schema version
    # Storages kept in safetensors files next to the archive: a reader that does not know them
    # refuses the archive by its format version instead of reporting missing payloads.
    external = any(weights.files for _, weights, _ in programs.values())
    write_archive(dest, members, schema_version=version, torch_version=torch_version,
                          min_format_version=4 if external else 1)
