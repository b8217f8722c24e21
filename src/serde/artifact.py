"""Artifacts as schema Structs, without torch: verify -> upgrade (plain dicts) -> decode, and encode -> write.

``read_artifact`` is what ``load``, ``show``, ``diff``, ``check`` and ``upgrade`` share.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, BinaryIO

import msgspec

from . import archive, schema, wire
from .errors import MalformedArtifactError
from .upgrade import check_readable, document_version, upgrade_documents
from .version import SCHEMA_VERSION

__all__ = ["Artifact", "read_artifact", "write_artifact", "encode_members"]

Source = str | os.PathLike | BinaryIO | bytes | bytearray | memoryview


@dataclass(frozen=True)
class Artifact:
    """A verified artifact at the current schema version."""

    manifest: schema.Manifest
    program: schema.ExportedProgram
    weights: schema.Weights
    debug: schema.DebugInfo | None
    contents: archive.ArchiveContents
    written_version: tuple[int, int]

    def payload(self, sha256: str) -> memoryview:
        """Raw bytes of the storage with this content hash."""
        return self.contents.member(archive.payload_name(sha256))

    def extra_files(self) -> dict[str, bytes]:
        """The extra files saved with the program (name -> bytes)."""
        n = len(archive.EXTRA_PREFIX)
        return {m[n:]: bytes(self.contents.member(m)) for m in self.contents.names if m.startswith(archive.EXTRA_PREFIX)}

    def payloads(self) -> dict[str, memoryview]:
        """Every payload member (``data/<sha256>`` -> bytes), as ``write_artifact`` takes them."""
        return {n: self.contents.member(n) for n in self.contents.names if n.startswith("data/")}


def read_artifact(src: Source, *, limits: archive.Limits = archive.DEFAULT_LIMITS, mmap: bool = False) -> Artifact:
    """Read, verify, upgrade and decode an artifact (``mmap``: see :func:`serde.load`).

    Raises:
        SerializeError subclasses: ForeignArtifactError (not ours, e.g. torch.export.save output),
        MalformedArtifactError / UnsafeArtifactError (damaged or hostile), SchemaVersionError
        (outside the supported window), UpgradeError (no upgrader step).
    """
    contents = archive.read_archive(src, limits=limits, mmap=mmap)
    version = contents.schema_version
    check_readable(version)
    names = [archive.PROGRAM, archive.WEIGHTS] + ([archive.DEBUG] if archive.DEBUG in contents else [])
    if version[0] == SCHEMA_VERSION[0]:
        # Same major: unknown optional fields from a newer minor are ignored by the typed decoder.
        program = wire.decode(contents.member(archive.PROGRAM), schema.ExportedProgram, where=archive.PROGRAM)
        weights = wire.decode(contents.member(archive.WEIGHTS), schema.Weights, where=archive.WEIGHTS)
        debug = (wire.decode(contents.member(archive.DEBUG), schema.DebugInfo, where=archive.DEBUG)
                 if archive.DEBUG in contents else None)
        _check_agrees((program.schema_version.major, program.schema_version.minor), version)
    else:
        docs = {n.removesuffix(".json"): wire.decode_json(contents.member(n), where=n) for n in names}
        _check_agrees(document_version(docs["program"], where=archive.PROGRAM), version)
        docs = upgrade_documents(docs, version)
        program = _convert(docs["program"], schema.ExportedProgram, archive.PROGRAM)
        weights = _convert(docs["weights"], schema.Weights, archive.WEIGHTS)
        debug = None if docs.get("debug") is None else _convert(docs["debug"], schema.DebugInfo, archive.DEBUG)
    return Artifact(contents.manifest, program, weights, debug, contents, version)


def _check_agrees(declared: tuple[int, int], manifest: tuple[int, int]) -> None:
    if declared != manifest:
        raise MalformedArtifactError(
            f"{archive.PROGRAM}: schema_version {declared[0]}.{declared[1]} disagrees with manifest.json "
            f"({manifest[0]}.{manifest[1]}); the file was edited or assembled after saving: re-save it with pt2serde"
        )


def _convert(doc: Any, type_: type, where: str) -> Any:
    try:
        return wire.convert(doc, type_)
    except msgspec.ValidationError as e:
        raise MalformedArtifactError(f"{where}: after upgrading, does not match schema {type_.__name__}: {e}") from None


def encode_members(program: schema.ExportedProgram, weights: schema.Weights, debug: Any | None = None
                   ) -> dict[str, bytes]:
    """JSON members of an artifact (payloads are added by the caller)."""
    members = {archive.PROGRAM: wire.encode(program), archive.WEIGHTS: wire.encode(weights)}
    if debug is not None:
        members[archive.DEBUG] = wire.encode(debug)
    return members


def write_artifact(dest: str | os.PathLike | BinaryIO, program: schema.ExportedProgram, weights: schema.Weights,
                   payloads: dict[str, Any], debug: Any | None = None, *, torch_version: str,
                   extra_files: dict[str, bytes] | None = None) -> None:
    """Encode and write an artifact atomically (payloads: member name -> bytes; extra_files: name ->
    bytes, see :func:`serde.save`)."""
    members: dict[str, Any] = encode_members(program, weights, debug)
    members.update(payloads)
    for name, data in (extra_files or {}).items():
        members[archive.extra_member(name, "extra_files")] = data
    version = (program.schema_version.major, program.schema_version.minor)
    archive.write_archive(dest, members, schema_version=version, torch_version=torch_version)
