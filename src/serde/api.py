"""Public API: ``save`` and ``load``."""

from __future__ import annotations

import os
from typing import BinaryIO

import torch
from torch.export import ExportedProgram

from canonical.canonicalize import attach_debug, canonicalize

from . import archive
from .artifact import Artifact, read_artifact, write_artifact
from .custom_objects import encode_constants
from .errors import SerializeError
from .gcpause import paused_gc
from .program import deserialize_program, serialize_program
from .weights import deserialize_weights, serialize_weights

__all__ = ["save", "load", "to_artifact_parts", "from_artifact"]

PathOrFile = str | os.PathLike | BinaryIO


def save(ep: ExportedProgram, f: PathOrFile, *, debug_info: bool = False) -> None:
    """Save ``ep`` as a pt2serde artifact.

    Args:
        ep: the program, as returned by ``torch.export.export``.
        f: a path (written atomically: a crash never leaves a partial file there) or a binary
            file object.
        debug_info: also keep debug-only metadata (stack traces, provenance) in a separate
            ``debug.json`` member that fingerprints and ``pt2serde diff`` ignore.

    Raises:
        UnsupportedConstructError: ``ep`` holds something the schema cannot express; the message
            names the node and the construct.
        SerializeError: any other failure, e.g. the file cannot be written.
    """
    if not isinstance(ep, ExportedProgram):
        raise SerializeError(f"save() expects a torch.export.ExportedProgram, got {type(ep).__name__}")
    with paused_gc():
        program, weights, payloads, debug = to_artifact_parts(ep, debug_info=debug_info)
        write_artifact(f, program, weights, payloads, debug, torch_version=str(torch.__version__))


def to_artifact_parts(ep: ExportedProgram, *, debug_info: bool = False):
    """``ep`` -> (program Struct, weights Struct, payload members, debug info or None)."""
    program = serialize_program(ep)
    # Custom objects become uint8 tensors through their registered codec (never pickle).
    weights, payloads = serialize_weights(ep.state_dict, encode_constants(ep.constants), ep.example_inputs)
    program, debug = canonicalize(program, keep_debug=debug_info)
    return program, weights, payloads, debug


def load(f: PathOrFile | bytes, *, limits: archive.Limits = archive.DEFAULT_LIMITS,
         mmap: bool = False) -> ExportedProgram:
    """Load an artifact written by :func:`save` (any supported schema version).

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
        return from_artifact(read_artifact(f, limits=limits, mmap=mmap))


def from_artifact(a: Artifact) -> ExportedProgram:
    """Build the ExportedProgram described by a decoded artifact."""
    state_dict, constants, example_inputs = deserialize_weights(a.weights, a.contents.member)
    program = a.program
    if a.debug is not None:
        program = attach_debug(program, a.debug)
    return deserialize_program(program, state_dict, constants, example_inputs)
