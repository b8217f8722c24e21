"""``pt2serde check FILE``: verify an artifact end to end and report its versions.

The structure (archive, checksums, schema, tensor views) is checked without torch. When torch can
be imported, every operator of every program is also resolved against it, after the operator
upgraders from the artifact's torch to this one: the report lists the upgrades a load applies and
what a load would refuse (then the check fails). Without torch the report says that it checked
the structure only.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

from serde.archive.artifact import read_artifacts
from serde.archive.safetensors import external_payloads
from serde.core.checks import validate_weights
from serde.errors import SerializeError

__all__ = ["HELP", "CheckReport", "OperatorReport", "verify", "check_operators", "add_arguments", "run"]

HELP = ("verify an artifact (structure, checksums, schema, tensor views; operators against this torch "
        "when it is importable) and print its versions")


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
    written_for: str | None = None   # the torch its operators are for, when not torch_version (target_torch)

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
        if self.written_for is not None:
            out.insert(4, f"written for:     torch {self.written_for} (saved with target_torch)")
        if self.programs:
            out.append(f"programs:        {', '.join(self.programs)}")
        for name, size in self.extra_files:
            out.append(f"extra file:      {name} ({size} bytes)")
        if self.unreferenced_payloads:
            out.append(f"warning: {len(self.unreferenced_payloads)} payload(s) not used by weights.json: "
                       + ", ".join(self.unreferenced_payloads))
        return out + ["OK"]


@dataclass(frozen=True)
class OperatorReport:
    """What :func:`check_operators` found: ``torch`` is None when torch cannot be imported."""

    torch: str | None
    operators: int = 0                  # distinct operator targets resolved
    upgraded: tuple[str, ...] = ()      # one line per rewrite a load applies
    refused: tuple[str, ...] = ()       # one line per operator use a load would refuse

    def lines(self) -> list[str]:
        if self.torch is None:
            return ["operators:       not checked (torch not imported): this checked the structure only"]
        out = [f"operators:       {self.operators} resolved against torch {self.torch}"
               + (f", {len(self.upgraded)} upgraded" if self.upgraded else "")]
        out += [f"upgrade:         {line}" for line in self.upgraded]
        out += [f"refused:         {line}" for line in self.refused]
        return out


def verify(path: str | os.PathLike) -> CheckReport:
    """Read and verify the archive at ``path``: zip structure, manifest, checksums, the schema of
    program.json and weights.json, and every stored tensor view. Needs no torch.

    Raises:
        SerializeError subclasses saying what is wrong and where.
    """
    return _verify(path)[0]


def check_operators(artifacts: dict) -> OperatorReport:
    """Resolve every operator of each program (``read_artifacts``' result) against the running
    torch, after the operator upgraders a load would apply; torch is imported here, if it can be."""
    try:
        import torch
    except ImportError:
        return OperatorReport(None)
    from serde.bridge.operators import deserialize_target
    from serde.opsets import convert

    running = str(torch.__version__)
    upgraded, refused, seen = [], [], set()
    for name, artifact in artifacts.items():
        program = artifact.program
        at = "" if name is None else f"programs[{name!r}]."
        done = convert(program, program.torch_version, running)
        upgraded += [at + line for line in done.applied]
        if done.refused:
            refused += [f"{at}{line} (written by torch {program.torch_version})" for line in done.refused]
            continue
        for target, where in _targets(done.program.graph_module.graph, "graph"):
            if target in seen:
                continue
            try:
                deserialize_target(target, where=where)
            except SerializeError as e:
                refused.append(f"{at}{e}")
            seen.add(target)
    return OperatorReport(running, len(seen), tuple(upgraded), tuple(refused))


def _targets(graph, where: str):
    """(target, where) of every call and operator operand, subgraphs included."""
    for node in graph.nodes:
        at = f"{where}.nodes[{node.name!r}]"
        yield node.target, at
        for j, na in enumerate(node.inputs):
            if na.arg.as_operator is not None:
                yield na.arg.as_operator, f"{at}.inputs[{j}]"
            elif na.arg.as_graph is not None:
                yield from _targets(na.arg.as_graph.graph, f"{at}.inputs[{j}].graph")


def _verify(path: str | os.PathLike) -> tuple[CheckReport, dict]:
    # The same verify -> upgrade -> decode path as serde.load, without torch.
    artifacts = read_artifacts(path)
    artifact = next(iter(artifacts.values()))
    contents, version = artifact.contents, artifact.written_version
    used: set[str] = set()
    storages = tensors = 0
    for one in artifacts.values():
        weights = one.weights
        validate_weights(weights, lambda name: len(contents.member(name)))
        if weights.files:  # safetensors files next to the artifact: size, sha256, XXH3-128, headers
            external_payloads(weights, os.path.dirname(os.path.abspath(path)), sha256=True)
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
        written_for=next((a.program.torch_version for a in artifacts.values()
                          if a.program.torch_version != contents.manifest.torch_version), None),
    ), artifacts


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="a .pt2s artifact written by serde.save")
    parser.add_argument("--structure-only", action="store_true",
                        help="do not import torch to resolve the operators (faster; checks the structure only)")


def run(args: argparse.Namespace) -> int:
    report, artifacts = _verify(args.file)
    ops = OperatorReport(None) if getattr(args, "structure_only", False) else check_operators(artifacts)
    for line in report.lines()[:-1] + ops.lines():
        print(line)
    if ops.refused:
        print(f"FAILED: a load under torch {ops.torch} would refuse {len(ops.refused)} operator use(s)")
        return 1
    print("OK" if ops.torch is not None else "OK (structure only)")
    return 0
