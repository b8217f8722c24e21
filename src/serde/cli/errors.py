"""The errors the ``pt2serde`` command itself reports (the library's are in :mod:`serde.errors`).

Each is a :class:`~serde.errors.SerializeError`, so the command prints it on one line and exits with
status 2.
"""

from __future__ import annotations

from serde.errors import ForeignArtifactError, SerializeError

__all__ = ["PluginError", "UnknownDemoModelError", "NotATorchArchiveError", "NotACheckoutError",
           "UnknownModuleError"]


class PluginError(SerializeError):
    """A module or library named on the command line could not be loaded."""


class UnknownDemoModelError(SerializeError):
    """``--model`` names no built-in model."""


class NotATorchArchiveError(ForeignArtifactError):
    """``pt2serde import`` was given something other than a torch.export.save archive."""


class NotACheckoutError(SerializeError):
    """The release tooling (serde.dev) is not installed: it ships only with a source checkout."""


class UnknownModuleError(SerializeError):
    """``--module`` names a path no node of the program runs in."""
