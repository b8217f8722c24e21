"""The ``pt2serde`` command line (:mod:`serde.cli.app`); each subcommand is a module of this package.

A subcommand module defines ``HELP`` (one line), ``add_arguments(parser)`` and
``run(args) -> int``; importing it must not import torch (torch is imported inside ``run``).
"""

from .app import *  # noqa: F403
from .app import __all__  # noqa: F401
