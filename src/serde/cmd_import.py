"""``pt2serde import``: convert a torch.export.save archive into a pt2serde artifact (trusted files only)."""

from __future__ import annotations

import argparse

HELP = "convert a torch.export.save (.pt2) archive to a pt2serde artifact; only for files you trust"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("input", help="archive written by torch.export.save")
    p.add_argument("output", help="pt2serde artifact to write")
    p.add_argument("--debug-info", action="store_true", help="keep stack traces in a debug member")


def run(args: argparse.Namespace) -> int:
    import torch

    import serde

    # torch.export.load may unpickle parts of its archive: that is why this is an explicit,
    # one-off conversion of a file the user trusts, never something serde.load does.
    extra_files = dict.fromkeys(_torch_extra_file_names(args.input), "")
    ep = torch.export.load(args.input, extra_files=extra_files)
    serde.save(ep, args.output, debug_info=args.debug_info, extra_files=extra_files)
    print(f"wrote {args.output}" + (f" (extra files: {', '.join(sorted(extra_files))})" if extra_files else ""))
    return 0


def _torch_extra_file_names(path: str) -> list[str]:
    """Names torch.export.save stored with ``extra_files`` (members ``<archive>/extra/<name>``)."""
    import zipfile

    with zipfile.ZipFile(path) as z:
        return [n.split("/extra/", 1)[1] for n in z.namelist()
                if "/extra/" in n and n.count("/") == 2 and not n.endswith("/")]
