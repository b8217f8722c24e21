"""``pt2serde diff A B``: semantic diff of two artifacts (see :mod:`canonical.diff`).

Exit status as with diff(1): 0 when identical, 1 when different, 2 on errors. ``--json`` prints
``{"a": path, "b": path, **DiffReport.to_json()}`` (shape documented in :mod:`canonical.diff`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

__all__ = ["HELP", "add_arguments", "run"]

HELP = ("semantic diff of two artifacts: signature, nodes, metas, ranges, weights, extra files "
        "(exit 0 same, 1 differ)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("a", help="the old artifact")
    p.add_argument("b", help="the new artifact")
    p.add_argument("--json", action="store_true", help="print a machine-readable JSON report")
    p.add_argument("--html", metavar="FILE",
                   help="also write a page that draws A and B side by side, nodes paired as the diff matched them")


def run(args: argparse.Namespace) -> int:
    from canonical.diff import diff, diff_programs
    from serde.archive import write_atomic
    from serde.archive.artifact import read_artifacts
    from serde.archive.safetensors import payload_reader

    # payloads are read (and verified) only for the max abs difference of changed tensors
    a_all, b_all = (read_artifacts(args.a, lazy=True, payload_crc=False, sha256=False),
                    read_artifacts(args.b, lazy=True, payload_crc=False, sha256=False))
    # weights kept in safetensors files next to an artifact are read from there (when needed)
    readers = {id(x): payload_reader(x.weights, os.path.dirname(os.path.abspath(path)), x.payload)
               for path, arts in ((args.a, a_all), (args.b, b_all)) for x in arts.values()}
    a_first, b_first = next(iter(a_all.values())), next(iter(b_all.values()))
    extras = {"a_extra": a_first.extra_files(), "b_extra": b_first.extra_files()}
    if list(a_all) == [None] and list(b_all) == [None]:
        a, b = a_all[None], b_all[None]
        report = diff(a.program, b.program, a_weights=a.weights, b_weights=b.weights, a_payload=readers[id(a)],
                      b_payload=readers[id(b)], **extras)
        pairs = [(None, a.program, b.program, report)]
    else:  # artifacts with several programs (a single one counts as a program named "")
        def parts(arts):
            return {name or "": (x.program, x.weights, readers[id(x)]) for name, x in arts.items()}

        report, per = diff_programs(parts(a_all), parts(b_all), **extras)
        pairs = [(name, a_all[name or None].program, b_all[name or None].program, r)
                 for name, r in per.items() if r.changes]
    text = report.format_text(args.a, args.b)
    if args.json:
        sys.stdout.write(json.dumps({"a": args.a, "b": args.b, **report.to_json()}, indent=2) + "\n")
    else:
        sys.stdout.write(text)
    if args.html:
        from canonical.view import diff_page

        page = diff_page(pairs, text, f"{args.a} -> {args.b}")
        write_atomic(args.html, [page.encode("utf-8")])
    sys.stdout.flush()
    return 0 if report.identical else 1
