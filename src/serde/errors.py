"""Typed errors. Every failure the library reports is a :class:`SerializeError`.

Messages say what is wrong, where (``graph.nodes[3].inputs[1]``) and how to fix it.
"""

from __future__ import annotations

__all__ = [
    "SerializeError",
    "UnsupportedConstructError",
    "SchemaVersionError",
    "MalformedArtifactError",
    "UnsafeArtifactError",
    "ForeignArtifactError",
    "UnknownOperatorError",
    "OperatorChangeError",
    "UpgradeError",
]


class SerializeError(Exception):
    """Base class of every error raised by pt2serde."""


class UnsupportedConstructError(SerializeError):
    """Saving met a construct the schema cannot express (names the node and the construct)."""


class SchemaVersionError(SerializeError):
    """The artifact's schema version is outside what this reader supports."""


class MalformedArtifactError(SerializeError):
    """The artifact is damaged or does not follow the format (bad checksum, bad JSON, ...)."""


class UnsafeArtifactError(SerializeError):
    """The artifact asks for something a trusted loader must never do (e.g. resolve ``os.system``)."""


class ForeignArtifactError(SerializeError):
    """The file is not a pt2serde artifact, e.g. one written by ``torch.export.save``."""


class UnknownOperatorError(SerializeError):
    """An operator named by the artifact is allowed but not registered in this process."""


class OperatorChangeError(UnknownOperatorError):
    """An operator the program uses differs between the torch that wrote it and the torch that reads
    it (or the ``target_torch`` of a save), and no operator upgrader covers the change. The message
    names each such operator, where it is used, both torch releases and what changed."""


class UpgradeError(SerializeError):
    """An upgrader step is missing or failed."""
