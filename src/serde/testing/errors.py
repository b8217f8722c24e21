"""The failure every comparison in :mod:`serde.testing` reports."""

from __future__ import annotations

__all__ = ["ProgramMismatch"]


class ProgramMismatch(AssertionError):
    """Two programs differ; the message says where."""
