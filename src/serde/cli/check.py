"""``pt2serde check FILE``: verify an artifact end to end and report its versions. No torch needed."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

from serde.archive.artifact import read_artifacts
from serde.bridge.weights import validate_weights

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
    extra_files: tuple[tuple[str, int], ...] = ()   # (name, bytes), sorted by name
    programs: tuple[str, ...] = ()   # names, for an artifact holding several programs

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
        if self.programs:
            out.append(f"programs:        {', '.join(self.programs)}")
        for name, size in self.extra_files:
            out.append(f"extra file:      {name} ({size} bytes)")
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
    # The same verify -> upgrade -> decode path as serde.load, without torch.
    artifacts = read_artifacts(path)
    artifact = next(iter(artifacts.values()))
    contents, version = artifact.contents, artifact.written_version
    used: set[str] = set()
    storages = tensors = 0
    for one in artifacts.values():
        weights = one.weights
        validate_weights(weights, lambda name: len(contents.member(name)))
        used.update(f"data/{s.sha256}" for s in weights.storages if s.sha256)
        storages += len(weights.storages)
        tensors += len(weights.state_dict) + len(weights.constants)
        if weights.example_inputs is not None:
            tensors += sum(leaf.as_tensor is not None for leaf in weights.example_inputs.leaves)
    payloads = [n for n in contents.names if n.startswith("data/")]
    return CheckReport(
        path=os.fspath(path),
        format_version=contents.manifest.format_version,
        schema_version=version,
        torch_version=contents.manifest.torch_version,
        members=len(contents.names),
        payload_bytes=sum(len(contents.member(n)) for n in payloads),
        storages=storages,
        tensors=tensors,
        unreferenced_payloads=tuple(n for n in payloads if n not in used),
        extra_files=tuple(sorted((name, len(data)) for name, data in artifact.extra_files().items())),
        programs=tuple(n for n in artifacts if n is not None),
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="a .pt2s artifact written by serde.save")


def run(args: argparse.Namespace) -> int:
    for line in verify(args.file).lines():
        print(line)
    return 0
