"""``pt2serde canonicalize IN OUT``: rewrite an existing artifact in canonical form.

Useful for artifacts written before canonicalization existed, by another tool, or edited by hand.
Weights are copied as they are. A ``debug.json`` member is kept (re-keyed to the new node names)
unless ``--drop-debug`` is given. ``--check`` writes nothing and exits 1 when the artifact is not
canonical, like a formatter's check mode.
"""

from __future__ import annotations

import argparse

__all__ = ["HELP", "add_arguments", "run"]

HELP = "rewrite an artifact in canonical form (stable names, order and symbols)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("input", help="artifact to canonicalize")
    p.add_argument("output", nargs="?", help="where to write the result (may equal input)")
    p.add_argument("--drop-debug", action="store_true", help="leave out debug.json (stack traces, provenance)")
    p.add_argument("--check", action="store_true",
                   help="write nothing; exit 1 if the artifact is not in canonical form, 0 if it is")


def run(args: argparse.Namespace) -> int:

    from canonical.canonicalize import attach_debug, canonicalize
    from serde.archive.artifact import read_artifact, write_artifact
    from serde.bridge.effects import op_facts
    from serde.core import wire
    from serde.errors import SerializeError

    if args.output is None and not args.check:
        raise SerializeError("canonicalize needs an OUTPUT path (or --check to only test the input)")
    a = read_artifact(args.input)
    program = a.program
    keep = a.debug is not None and not args.drop_debug
    if keep:
        program = attach_debug(program, a.debug)
    canon, debug = canonicalize(program, facts=op_facts, keep_debug=keep)
    same = wire.encode(canon) == bytes(a.contents.member("program.json"))
    if args.check:
        print(f"{args.input}: {'canonical' if same else 'not canonical'}")
        return 0 if same else 1
    write_artifact(args.output, canon, a.weights, a.payloads(), debug if keep else None,
                   torch_version=a.manifest.torch_version, extra_files=a.extra_files())
    state = "already canonical" if same else "canonicalized"
    print(f"{args.input}: {state}, wrote {args.output}")
    return 0
