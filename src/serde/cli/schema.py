"""``pt2serde schema check|snapshot``: guard schema evolution.

``check`` compares schema.thrift with the Python Structs and with the snapshot of the last released
schema, lists every change as compatible or breaking, and fails (exit 1) when the version bump, the
upgrader step or the v<N> fixtures a change needs are missing. ``make test`` runs it.

``snapshot`` is run once per release, after ``check`` passes: it records the released schema in
src/serde/schema_snapshot.json (checksummed, never edited by hand); commit the result.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from serde.cli.errors import NotACheckoutError

__all__ = ["HELP", "add_arguments", "run"]

HELP = "check schema.thrift against the Python Structs and the released snapshot, or write the snapshot"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="schema_command", required=True, metavar="ACTION")
    c = sub.add_parser(
        "check",
        help="report IDL/Python disagreements and changes since the last release; exit 1 on failure",
    )
    s = sub.add_parser(
        "snapshot",
        help="record the current schema as released (run at release time, then commit the file)",
    )
    for p in (c, s):
        p.add_argument("--root", type=Path, default=None,
                       help="repository root (default: nearest directory with schema.thrift)")
    s.add_argument("--force", action="store_true",
                   help="overwrite even if the check fails or the same version changes "
                        "(only for a version that was never published)")


def run(args: argparse.Namespace) -> int:
    try:
        from serde.dev import schema_check
    except ImportError:
        raise NotACheckoutError("the schema tools work only in a pt2serde source checkout (an editable "
                                "install, `pip install -e .`), next to schema.thrift") from None

    root = args.root if args.root is not None else schema_check.find_root()
    if args.schema_command == "check":
        report = schema_check.check(root)
        print(report.render())
        return 0 if report.ok else 1
    path, report = schema_check.write_snapshot(root, force=args.force)
    if not report.ok:
        print(report.render(), file=sys.stderr)
    print(f"wrote {path} (schema {report.current[0]}.{report.current[1]})")
    return 0
