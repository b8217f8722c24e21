"""``pt2serde check FILE``: verify an artifact end to end and report its versions. No torch needed."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

from . import schema, wire
from .archive import DEBUG, PROGRAM, WEIGHTS, read_archive
from .errors import MalformedArtifactError, SchemaVersionError
from .version import MIN_SUPPORTED, SCHEMA_VERSION
from .weights import validate_weights

__all__ = ["HELP", "CheckReport", "verify", "add_arguments", "run"]

HELP = "verify an artifact (structure, checksums, schema, tensor views) and print its versions"


@dataclass(frozen=True)
class CheckReport:
    """What :func:`verify` found in a valid artifact."""

    path: str
    format_version: int
    schema_version: tuple[int, int]
    torch_version: str
    members: int
    payload_bytes: int
    storages: int
    tensors: int
    unreferenced_payloads: tuple[str, ...]

    def lines(self) -> list[str]:
        major, minor = self.schema_version
        out = [
            f"file:            {self.path}",
            f"format version:  {self.format_version}",
            f"schema version:  {major}.{minor}",
            f"torch version:   {self.torch_version}",
            f"members:         {self.members}",
            f"payload bytes:   {self.payload_bytes}",
            f"storages:        {self.storages} ({self.tensors} tensors)",
        ]
        if self.unreferenced_payloads:
            out.append(f"warning: {len(self.unreferenced_payloads)} payload(s) not used by weights.json: "
                       + ", ".join(self.unreferenced_payloads))
        return out + ["OK"]


def verify(path: str | os.PathLike) -> CheckReport:
    """Read and verify the archive at ``path``: zip structure, manifest, checksums, the schema of
    program.json and weights.json, and every stored tensor view.

    Raises:
        SerializeError subclasses saying what is wrong and where.
    """
    contents = read_archive(path)
    version = contents.schema_version
    _check_schema_version(version)
    # TODO(lead): route program.json / weights.json through the upgrader runner before decoding.
    program = wire.decode(contents.member(PROGRAM), schema.ExportedProgram, where=PROGRAM)
    weights = wire.decode(contents.member(WEIGHTS), schema.Weights, where=WEIGHTS)
    if DEBUG in contents:
        wire.decode_json(contents.member(DEBUG), where=DEBUG)
    declared = (program.schema_version.major, program.schema_version.minor)
    if declared != version:
        raise MalformedArtifactError(
            f"{PROGRAM}: schema_version {declared[0]}.{declared[1]} disagrees with manifest.json "
            f"({version[0]}.{version[1]}); the file was edited after saving: re-save it with pt2serde")
    validate_weights(weights, lambda name: len(contents.member(name)))
    payloads = [n for n in contents.names if n.startswith("data/")]
    used = {f"data/{s.sha256}" for s in weights.storages}
    n_examples = 0
    if weights.example_inputs is not None:
        n_examples = sum(leaf.as_tensor is not None for leaf in weights.example_inputs.leaves)
    return CheckReport(
        path=os.fspath(path),
        format_version=contents.manifest.format_version,
        schema_version=version,
        torch_version=contents.manifest.torch_version,
        members=len(contents.names),
        payload_bytes=sum(len(contents.member(n)) for n in payloads),
        storages=len(weights.storages),
        tensors=len(weights.state_dict) + len(weights.constants) + n_examples,
        unreferenced_payloads=tuple(n for n in payloads if n not in used),
    )


def _check_schema_version(version: tuple[int, int]) -> None:
    if version[0] > SCHEMA_VERSION[0]:
        raise SchemaVersionError(
            f"the artifact uses schema {version[0]}.{version[1]}, newer than this pt2serde "
            f"(schema {SCHEMA_VERSION[0]}.{SCHEMA_VERSION[1]}); upgrade pt2serde to read it")
    if version < MIN_SUPPORTED:
        raise SchemaVersionError(
            f"the artifact uses schema {version[0]}.{version[1]}, older than the oldest this pt2serde "
            f"reads ({MIN_SUPPORTED[0]}.{MIN_SUPPORTED[1]}); load it with an older pt2serde and re-save")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="a .pt2s artifact written by serde.save")


def run(args: argparse.Namespace) -> int:
    for line in verify(args.file).lines():
        print(line)
    return 0
