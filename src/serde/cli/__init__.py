"""The ``pt2serde`` command line (:mod:`serde.cli.app`); each subcommand is a module of this package.

A subcommand module defines ``HELP`` (one line), ``add_arguments(parser)`` and
``run(args) -> int``; importing it must not import torch (torch is imported inside ``run``).
The command's own errors are in :mod:`serde.cli.errors`.
"""

from . import app, errors
from .app import *  # noqa: F403
from .errors import *  # noqa: F403

__all__ = [*app.__all__, *errors.__all__]
