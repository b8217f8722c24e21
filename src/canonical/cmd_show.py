"""``pt2serde show FILE``: print an artifact's program as stable, diff-friendly text.

Also the git textconv: with ``*.pt2s diff=pt2serde`` in ``.gitattributes`` and
``git config diff.pt2serde.textconv "pt2serde show"``, ``git diff`` compares this text.
"""

from __future__ import annotations

import argparse
import sys

__all__ = ["HELP", "add_arguments", "run"]

HELP = "print an artifact readably: signature, graph with shapes, range constraints, weights"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="a pt2serde artifact (.pt2s)")
    p.add_argument("--no-weights", action="store_true", help="leave out the state_dict/constants summary")


def run(args: argparse.Namespace) -> int:
    from serde.artifact import read_artifact

    from .render import render

    art = read_artifact(args.file)
    sys.stdout.write(render(art.program, None if args.no_weights else art.weights))
    extra = art.extra_files()
    if extra:  # load(..., extra_files={name: ""}) reads them; list the names so users can find them
        sys.stdout.write("\nextra files:\n" + "".join(
            f"  {name}: {len(data)} bytes\n" for name, data in sorted(extra.items())))
    sys.stdout.flush()
    return 0
