"""File input and output below the archive, without torch: the atomic writer, the whole-file
reader (one system call, a mapping, or parallel positional reads) and the I/O thread pool.

The archive and ``native`` share them; neither reaches into the other for file handling.
"""

from .atomic import write_atomic, write_stream
from .errors import (
    ArtifactIOError,
    ArtifactIsADirectoryError,
    ArtifactNotFoundError,
    ArtifactPermissionError,
    os_error,
)
from .pool import PROGRESS_MIN_BYTES, digest_all
from .reader import ReadPolicy, read_all

__all__ = [
    "write_atomic", "write_stream", "read_all", "ReadPolicy", "digest_all", "PROGRESS_MIN_BYTES",
    "ArtifactIOError", "ArtifactNotFoundError", "ArtifactPermissionError", "ArtifactIsADirectoryError", "os_error",
]
