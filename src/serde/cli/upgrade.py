"""``pt2serde upgrade``: rewrite an artifact from an older schema version at the current one."""

from __future__ import annotations

import argparse

HELP = "rewrite an artifact written by an older schema version at the current version"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("input", help="artifact to upgrade")
    p.add_argument("output", help="where to write the upgraded artifact (may equal input)")


def run(args: argparse.Namespace) -> int:
    from serde.archive.artifact import read_artifact, write_artifact
    from serde.core.version import SCHEMA_VERSION

    a = read_artifact(args.input)
    from canonical.canonicalize import attach_debug, canonicalize
    from serde.bridge.effects import op_facts

    program = a.program if a.debug is None else attach_debug(a.program, a.debug)
    # Debug info is keyed by canonical node names: re-derive it with the (re)canonicalized program.
    program, debug = canonicalize(program, facts=op_facts, keep_debug=a.debug is not None)
    write_artifact(args.output, program, a.weights, a.payloads(), debug, torch_version=a.manifest.torch_version,
                   extra_files=a.extra_files())
    old = ".".join(map(str, a.written_version))
    new = ".".join(map(str, SCHEMA_VERSION))
    print(f"{args.input}: schema {old} -> {new}, wrote {args.output}")
    return 0
