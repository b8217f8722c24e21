"""The ``pt2serde`` command line. Each subcommand lives in its own module.

A subcommand module defines ``HELP`` (one line), ``add_arguments(parser)`` and
``run(args) -> int``; importing it must not import torch (torch is imported inside ``run``).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from .errors import SerializeError

__all__ = ["main"]

# name -> module implementing it. Order is the order shown in --help.
COMMANDS: dict[str, str] = {
    "demo": "serde.cmd_demo",
    "show": "canonical.cmd_show",
    "diff": "canonical.cmd_diff",
    "canonicalize": "canonical.cmd_canonicalize",
    "check": "serde.cmd_check",
    "schema": "serde.cmd_schema",
    "upgrade": "serde.cmd_upgrade",
    "import": "serde.cmd_import",
    "emit": "native.cmd_emit",
    "run": "native.cmd_run",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pt2serde", description="Save, load, inspect and diff pickle-free torch.export artifacts."
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, modname in COMMANDS.items():
        mod = importlib.import_module(modname)
        p = sub.add_parser(name, help=mod.HELP, description=mod.HELP)
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args._run(args) or 0)
    except SerializeError as e:
        print(f"pt2serde {args.command}: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `pt2serde show x | head`
        return 0


if __name__ == "__main__":
    sys.exit(main())
