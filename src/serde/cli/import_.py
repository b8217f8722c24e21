"""``pt2serde import``: convert a torch.export.save archive into a pt2serde artifact (trusted files only)."""

from __future__ import annotations

import argparse

from serde.archive import MANIFEST, PROGRAM
from serde.cli.errors import NotATorchArchiveError

HELP = "convert a torch.export.save (.pt2) archive to a pt2serde artifact; only for files you trust"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("input", help="archive written by torch.export.save")
    p.add_argument("output", help="pt2serde artifact to write")
    p.add_argument("--debug-info", action="store_true", help="keep stack traces in a debug member")


def run(args: argparse.Namespace) -> int:
    import logging

    import torch

    import serde

    names = _member_names(args.input)
    if MANIFEST in names and PROGRAM in names:
        raise NotATorchArchiveError(
            f"{args.input} is already a pt2serde artifact; load it with serde.load or copy it")
    # torch.export.load may unpickle parts of its archive: that is why this is an explicit,
    # one-off conversion of a file the user trusts, never something serde.load does.
    extra_files = dict.fromkeys(_torch_extra_file_names(names), "")
    export_log = logging.getLogger("torch.export")
    level = export_log.level
    export_log.setLevel(logging.ERROR)  # torch logs a full traceback before raising; we say it in one line
    try:
        ep = torch.export.load(args.input, extra_files=extra_files)
    except (RuntimeError, ValueError, KeyError, EOFError) as e:
        raise NotATorchArchiveError(
            f"{args.input}: torch.export.load cannot read it ({str(e).splitlines()[0] if str(e) else type(e).__name__}); "
            "pass an archive written by torch.export.save") from None
    finally:
        export_log.setLevel(level)
    serde.save(ep, args.output, debug_info=args.debug_info, extra_files=extra_files)
    print(f"wrote {args.output}" + (f" (extra files: {', '.join(sorted(extra_files))})" if extra_files else ""))
    return 0


def _member_names(path: str) -> list[str]:
    import zipfile

    try:
        with zipfile.ZipFile(path) as z:
            return z.namelist()
    except zipfile.BadZipFile:
        raise NotATorchArchiveError(f"{path} is not a zip archive; pass an archive written by "
                                    "torch.export.save") from None


def _torch_extra_file_names(names: list[str]) -> list[str]:
    """Names torch.export.save stored with ``extra_files`` (members ``<archive>/extra/<name>``)."""
    return [n.split("/extra/", 1)[1] for n in names
            if "/extra/" in n and n.count("/") == 2 and not n.endswith("/")]
