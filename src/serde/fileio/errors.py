"""The one error family of file input and output: the operating system refused to read or write.

Each class carries a ``reason`` (a short, stable word: ``os``, ``not_found``, ``permission``,
``is_a_directory``) for code that reports or counts failures without matching on messages.
"""

from __future__ import annotations

from typing import ClassVar

from serde.errors import SerializeError

__all__ = ["ArtifactIOError", "ArtifactNotFoundError", "ArtifactPermissionError", "ArtifactIsADirectoryError",
           "os_error"]


class ArtifactIOError(SerializeError, OSError):
    """The operating system refused to read or write the file (missing, permissions, disk full).

    It is an ``OSError`` as well, and :func:`os_error` picks the subclass that matches the cause,
    so ``except FileNotFoundError:`` around ``serde.load`` works as it does around ``open``.
    """

    reason: ClassVar[str] = "os"

    def __str__(self) -> str:
        # OSError would print "[Errno 2] ...: path" once errno is set, losing what to do about it.
        return str(self.args[0]) if self.args else super().__str__()


class ArtifactNotFoundError(ArtifactIOError, FileNotFoundError):
    """The path does not exist."""

    reason = "not_found"


class ArtifactPermissionError(ArtifactIOError, PermissionError):
    """The operating system denies access to the path."""

    reason = "permission"


class ArtifactIsADirectoryError(ArtifactIOError, IsADirectoryError):
    """The path is a directory."""

    reason = "is_a_directory"


_OS_ERROR_CLASSES: tuple[tuple[type[OSError], type[ArtifactIOError]], ...] = (
    (FileNotFoundError, ArtifactNotFoundError),
    (PermissionError, ArtifactPermissionError),
    (IsADirectoryError, ArtifactIsADirectoryError),
)


def os_error(cause: OSError, message: str) -> ArtifactIOError:
    """An ArtifactIOError saying ``message``, of the OSError subclass ``cause`` has, with its errno."""
    cls = next((ours for theirs, ours in _OS_ERROR_CLASSES if isinstance(cause, theirs)), ArtifactIOError)
    err = cls(message)
    err.errno, err.strerror, err.filename = cause.errno, cause.strerror, cause.filename
    return err
