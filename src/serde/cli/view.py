"""``pt2serde view FILE -o graph.html``: a picture of the program (see :mod:`canonical.view`)."""

from __future__ import annotations

import argparse
import os

__all__ = ["HELP", "add_arguments", "run"]

HELP = ("draw the program as a self-contained HTML page: module calls as boxes with their in/out shapes, "
        "opened on click; search; ops coloured by kind (docs/view.md)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="a pt2serde artifact (.pt2s)")
    p.add_argument("-o", "--output", required=True, help="the HTML page to write")


def run(args: argparse.Namespace) -> int:
    from canonical.view import program_page
    from serde.archive import write_atomic
    from serde.archive.artifact import read_artifacts

    programs = {name: art.program for name, art in read_artifacts(args.file).items()}
    page = program_page(programs, os.path.basename(args.file))
    write_atomic(args.output, [page.encode("utf-8")])
    nodes = sum(len(p.graph_module.graph.nodes) for p in programs.values())
    print(f"wrote {args.output} ({nodes} nodes)")
    return 0
