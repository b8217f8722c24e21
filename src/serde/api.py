"""Public API: ``save`` and ``load``."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, BinaryIO

import torch
from torch.export import ExportedProgram

from canonical.canonicalize import attach_debug, canonicalize

from . import archive
from .artifact import Artifact, read_artifact, write_artifact
from .custom_objects import encode_constants
from .effects import op_facts
from .errors import MalformedArtifactError, SerializeError, UnsupportedConstructError
from .gcpause import paused_gc
from .program import deserialize_program, serialize_program
from .weights import deserialize_weights, serialize_weights

__all__ = ["save", "load", "to_artifact_parts", "from_artifact"]

PathOrFile = str | os.PathLike | BinaryIO


def save(ep: ExportedProgram, f: PathOrFile, *, debug_info: bool = False,
         extra_files: Mapping[str, str] | None = None) -> None:
    """Save ``ep`` as a pt2serde artifact.

    Args:
        ep: the program, as returned by ``torch.export.export``.
        f: a path (written atomically: a crash never leaves a partial file there) or a binary
            file object.
        debug_info: also keep debug-only metadata (stack traces, provenance) in a separate
            ``debug.json`` member that fingerprints and ``pt2serde diff`` ignore.
        extra_files: name -> text to store alongside the program (as ``torch.export.save``'s
            ``extra_files``); read back with ``load(..., extra_files=...)``. Names are 1 to 200
            letters, digits, ``_``, ``-`` and ``.``; the text is stored as UTF-8.

    Raises:
        UnsupportedConstructError: ``ep`` holds something the schema cannot express; the message
            names the node and the construct.
        SerializeError: any other failure, e.g. the file cannot be written.
    """
    if not isinstance(ep, ExportedProgram):
        raise SerializeError(f"save() expects a torch.export.ExportedProgram, got {type(ep).__name__}")
    extras = _encode_extra_files(extra_files)
    with paused_gc():
        program, weights, payloads, debug = to_artifact_parts(ep, debug_info=debug_info)
        write_artifact(f, program, weights, payloads, debug, torch_version=str(torch.__version__),
                       extra_files=extras)


def _encode_extra_files(extra_files: Mapping[str, str] | None) -> dict[str, bytes]:
    if extra_files is None:
        return {}
    if not isinstance(extra_files, Mapping):
        raise UnsupportedConstructError(f"extra_files must be a mapping of name -> str, got {type(extra_files).__name__}")
    out = {}
    for name, text in extra_files.items():
        archive.extra_member(name, "save(extra_files)")  # checks the name
        if not isinstance(text, str):
            raise UnsupportedConstructError(
                f"save(extra_files)[{name!r}]: the content must be a str (as torch.export.save takes), "
                f"got {type(text).__name__}; decode bytes or serialize the object to text first")
        out[name] = text.encode("utf-8")
    return out


def to_artifact_parts(ep: ExportedProgram, *, debug_info: bool = False):
    """``ep`` -> (program Struct, weights Struct, payload members, debug info or None)."""
    program = serialize_program(ep)
    # Custom objects become uint8 tensors through their registered codec (never pickle).
    weights, payloads = serialize_weights(ep.state_dict, encode_constants(ep.constants), ep.example_inputs)
    program, debug = canonicalize(program, facts=op_facts, keep_debug=debug_info)
    return program, weights, payloads, debug


def load(f: PathOrFile | bytes, *, limits: archive.Limits = archive.DEFAULT_LIMITS,
         mmap: bool = False, extra_files: dict[str, Any] | None = None) -> ExportedProgram:
    """Load an artifact written by :func:`save` (any supported schema version).

    ``extra_files``, as with ``torch.export.load``: for each name in the dict, its value is replaced
    by the text saved under that name (MissingMemberError names the ones the artifact has).

    With ``mmap=True`` a path is mapped copy-on-write instead of read: the weights share the page
    cache (no copy, less memory; loading large weights takes about the time of hashing them), and
    writing to a tensor copies just that page, never touching the file. Every byte is still
    verified. The file must then stay as it is while the program lives: truncating or rewriting it
    in place (``cp`` over it, ``torch.save`` to it) makes reading the weights fail with SIGBUS or see
    the new bytes. Replacing it by rename, as :func:`save` does, is safe.

    Raises:
        ForeignArtifactError: the file is not a pt2serde artifact (e.g. a torch.export.save archive;
            convert it once with ``pt2serde import``).
        MalformedArtifactError, UnsafeArtifactError: the file is damaged or hostile.
        SchemaVersionError, UpgradeError: the schema version is outside what this reader supports.
        UnknownOperatorError: an operator is not registered in this process.
    """
    with paused_gc():
        artifact = read_artifact(f, limits=limits, mmap=mmap)
        if extra_files is not None:
            _fill_extra_files(artifact, extra_files)
        return from_artifact(artifact)


def _fill_extra_files(artifact: Artifact, wanted: dict[str, Any]) -> None:
    stored = artifact.extra_files()
    for name in wanted:
        if name not in stored:
            raise archive.MissingMemberError(
                f"load(extra_files): the artifact has no extra file {name!r}; it has "
                f"{sorted(stored) or 'none'}. Save it with serde.save(..., extra_files={{{name!r}: ...}})")
        try:
            wanted[name] = stored[name].decode("utf-8")
        except UnicodeDecodeError:
            raise MalformedArtifactError(f"extra file {name!r} is not valid UTF-8 text; the file is damaged") from None


def from_artifact(a: Artifact) -> ExportedProgram:
    """Build the ExportedProgram described by a decoded artifact."""
    state_dict, constants, example_inputs = deserialize_weights(a.weights, a.contents.member)
    program = a.program
    if a.debug is not None:
        program = attach_debug(program, a.debug)
    return deserialize_program(program, state_dict, constants, example_inputs)
