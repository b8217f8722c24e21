"""The errors of the torch bridge: a program whose parts contradict each other, and classes an artifact
names that this process has not registered.

The errors of the checks that need no torch (names, caps, stored tensors) are in :mod:`serde.core.errors`.
"""

from __future__ import annotations

from serde.errors import MalformedArtifactError, UnknownOperatorError

__all__ = ["InconsistentProgramError", "UnknownTensorSubclassError", "UnknownCustomObjectError", "FIX_EDITED"]

# How to fix an InconsistentProgramError, the end of each of their messages.
FIX_EDITED = "the artifact is damaged or was edited after saving: re-save the program with pt2serde"


class InconsistentProgramError(MalformedArtifactError):
    """The artifact decodes, but its parts contradict each other (a call that does not bind to its
    operator, a graph output the signature does not describe, ...)."""


class UnknownTensorSubclassError(UnknownOperatorError):
    """An artifact holds a tensor subclass whose class is not registered in this process."""


class UnknownCustomObjectError(UnknownOperatorError):
    """An artifact holds a custom object whose class has no decoder registered in this process."""
