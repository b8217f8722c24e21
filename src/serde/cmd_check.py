"""``pt2serde check FILE``: verify an artifact end to end and report its versions. No torch needed."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

from .artifact import read_artifact
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
    extra_files: tuple[tuple[str, int], ...] = ()   # (name, bytes), sorted by name

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
    artifact = read_artifact(path)
    contents, weights, version = artifact.contents, artifact.weights, artifact.written_version
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
        extra_files=tuple(sorted((name, len(data)) for name, data in artifact.extra_files().items())),
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="a .pt2s artifact written by serde.save")


def run(args: argparse.Namespace) -> int:
    for line in verify(args.file).lines():
        print(line)
    return 0
