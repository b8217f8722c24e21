"""``pt2serde export IN.pt2s OUT.pt2``: write a pt2serde artifact as a ``torch.export.save`` archive.

The way back to torch's own format at any time: ``torch.export.load`` and tools that read
``.pt2`` files open the result. The program is loaded (and so verified) with ``serde.load`` first.
"""

from __future__ import annotations

import argparse

__all__ = ["HELP", "add_arguments", "run"]

HELP = "convert a pt2serde artifact to a torch.export.save (.pt2) archive, for torch.export.load"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("input", help="a pt2serde artifact (.pt2s)")
    p.add_argument("output", help="the torch archive to write (.pt2)")


def run(args: argparse.Namespace) -> int:
    import torch

    import serde
    from serde.archive.artifact import SeveralProgramsError

    extra_files: dict[str, str] = {}
    ep = serde.load(args.input, extra_files=extra_files)
    if isinstance(ep, dict):  # torch.export.load reads one program per archive
        raise SeveralProgramsError(
            f"{args.input} holds {len(ep)} programs ({', '.join(ep)}); torch.export.save writes one per archive: "
            "load it with serde.load and save each program with torch.export.save")
    torch.export.save(ep, args.output, extra_files=extra_files or None)
    print(f"wrote {args.output}" + (f" (extra files: {', '.join(sorted(extra_files))})" if extra_files else ""))
    return 0
