"""The ``pt2serde`` command line: the parser over the subcommands, and the one place that turns
an error into an exit status. Each subcommand lives in its own module of :mod:`serde.cli`.

Every subcommand reports bad input the same way: one line on stderr and exit status 2, never a
traceback. Exit status 1 is reserved for an answer ("the artifacts differ", "the check failed").
"""

from __future__ import annotations

import argparse
import importlib
import sys
import warnings

from serde.cli.errors import PluginError
from serde.errors import SerializeError

__all__ = ["main", "build_parser", "COMMANDS", "EXIT_CODES"]

# name -> module implementing it. Order is the order shown in --help.
COMMANDS: dict[str, str] = {
    "demo": "serde.cli.demo",
    "show": "serde.cli.show",
    "view": "serde.cli.view",
    "diff": "serde.cli.diff",
    "canonicalize": "serde.cli.canonicalize",
    "check": "serde.cli.check",
    "schema": "serde.cli.schema",
    "upgrade": "serde.cli.upgrade",
    "import": "serde.cli.import_",
    "export": "serde.cli.export",
    "weights": "serde.cli.weights",
    "emit": "serde.cli.emit",
    "run": "serde.cli.run",
}

EXIT_CODES = ("exit status: 0 success; 1 a negative answer (diff: the artifacts differ; schema check: "
              "the schema change lacks what it needs; check: a load under this torch would refuse an "
              "operator); 2 an error (bad arguments, unreadable or invalid files), reported on one line "
              "on stderr")


def _version() -> str:
    from importlib import metadata

    from serde.core.version import FORMAT_VERSION, SCHEMA_VERSION

    def dist(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"

    # Read from the installed metadata: importing torch only to print a version costs seconds.
    return (f"pt2serde {dist('pt2serde')} (schema {SCHEMA_VERSION[0]}.{SCHEMA_VERSION[1]}, "
            f"archive format {FORMAT_VERSION}; torch {dist('torch')})")


class _VersionAction(argparse.Action):
    """``--version``, reading the installed versions only when asked: importlib.metadata would
    cost every other command a tenth of a second of start-up."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs) -> None:
        super().__init__(option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0,
                         help="show program's version number and exit")

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        sys.stdout.write(_version() + "\n")
        parser.exit()


def _plugin_options() -> argparse.ArgumentParser:
    """Options every subcommand takes: make custom operators and classes known before loading."""
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("custom operators")
    g.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                   help="import this Python module first (it registers custom ops, tensor subclasses or "
                        "custom-object codecs); repeatable")
    g.add_argument("--load-library", dest="libraries", action="append", default=[], metavar="PATH",
                   help="load this shared library with torch.ops.load_library first (custom ops written "
                        "in C++); repeatable")
    return p


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pt2serde", description="Save, load, inspect and diff pickle-free torch.export artifacts.",
        epilog=EXIT_CODES,
    )
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    plugins = _plugin_options()
    for name, modname in COMMANDS.items():
        mod = importlib.import_module(modname)
        p = sub.add_parser(name, help=mod.HELP, description=mod.HELP, parents=[plugins],
                           epilog=getattr(mod, "EXIT_STATUS", EXIT_CODES))
        mod.add_arguments(p)
        p.set_defaults(_run=mod.run)
    return parser


def _load_plugins(args: argparse.Namespace) -> None:
    for name in args.imports:
        try:
            importlib.import_module(name)
        except ImportError as e:
            raise PluginError(f"--import {name}: {e}; check the module name and that it is installed "
                              "in this environment") from None
    if args.libraries:
        import torch

        for path in args.libraries:
            try:
                torch.ops.load_library(path)
            except (OSError, RuntimeError) as e:
                raise PluginError(f"--load-library {path}: {e}") from None


def main(argv: list[str] | None = None) -> int:
    # torch warns on import when numpy is missing; the CLI never needs numpy.
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
    args = build_parser().parse_args(argv)
    try:
        _load_plugins(args)
        return int(args._run(args) or 0)
    except SerializeError as e:
        return _fail(args.command, str(e))
    except BrokenPipeError:  # `pt2serde show x | head`
        return 0
    except OSError as e:  # a path the user gave: missing, a directory, no permission, disk full
        where = f": {e.filename}" if getattr(e, "filename", None) else ""
        return _fail(args.command, f"{e.strerror or e}{where}")
    except KeyboardInterrupt:
        return _fail(args.command, "interrupted", status=130)


def _fail(command: str, message: str, status: int = 2) -> int:
    print(f"pt2serde {command}: error: {message}", file=sys.stderr)
    return status

