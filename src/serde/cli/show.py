"""``pt2serde show FILE``: print an artifact's program as stable, diff-friendly text.

Also the git textconv: with ``*.pt2s diff=pt2serde`` in ``.gitattributes`` and
``git config diff.pt2serde.textconv "/abs/path/to/pt2serde show"``, ``git diff`` compares this text.
On a terminal the text goes through a pager (``$PAGER``, else ``less``); piped, it is printed as is.
"""

from __future__ import annotations

import argparse
import sys

from serde.cli.errors import UnknownModuleError

__all__ = ["HELP", "add_arguments", "run"]

HELP = "print an artifact readably: signature, graph with shapes, range constraints, weights"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="a pt2serde artifact (.pt2s)")
    p.add_argument("--no-weights", action="store_true", help="leave out the state_dict/constants summary")
    p.add_argument("--summary", action="store_true",
                   help="print counts instead: nodes, op histogram, parameters and bytes, dynamic dims, extra files")
    p.add_argument("--module", metavar="PATH",
                   help="print only the nodes that run in this submodule (e.g. layers.3.attn) or below it")
    p.add_argument("--no-pager", action="store_true", help="never page, even on a terminal")


def run(args: argparse.Namespace) -> int:
    from serde.archive.artifact import read_artifacts

    # the program and weights.json only: payloads are neither read nor hashed (`check` does that)
    arts = read_artifacts(args.file, lazy=True, payload_crc=False, sha256=False)
    parts = []
    for name, art in arts.items():
        text = _one(art, args)
        # an artifact with several programs shows each under its name
        parts.append(text if name is None else f"## program {name}\n{text}")
    extra = next(iter(arts.values())).extra_files()
    text = "\n".join(parts)
    if extra and not args.summary and args.module is None:
        # load(..., extra_files={}) reads them; list the names so users can find them
        text += "\nextra files:\n" + "".join(f"  {name}: {len(data)} bytes\n" for name, data in sorted(extra.items()))
    _write(text, page=not args.no_pager)
    return 0


def _one(art, args: argparse.Namespace) -> str:
    from canonical.render import render
    from canonical.summary import module_lines, module_paths, summary_lines

    weights = None if args.no_weights else art.weights
    if args.summary:
        return "\n".join(summary_lines(art.program, weights, art.extra_files())) + "\n"
    if args.module is not None:
        lines = module_lines(art.program, args.module)
        if lines is None:
            known = module_paths(art.program)
            raise UnknownModuleError(
                f"--module {args.module!r}: no node runs in that module; module paths in this program: "
                + (", ".join(known[:30]) + (" ..." if len(known) > 30 else "") if known else "none"))
        return "\n".join(lines) + "\n"
    return render(art.program, weights)


def _write(text: str, page: bool) -> None:
    if page and sys.stdout.isatty() and sys.stdin.isatty():
        import pydoc

        pydoc.pager(text)
        return
    sys.stdout.write(text)
    sys.stdout.flush()
