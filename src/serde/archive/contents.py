"""A verified archive's members, handed out as zero-copy views; a member that ``lazy=True`` left
unverified is verified the first time it is asked for."""

from __future__ import annotations

from serde.core import schema

from .digests import Job, Want, check_digest, digest
from .errors import FIX, MissingMemberError

__all__ = ["ArchiveContents"]


class ArchiveContents:
    """A verified archive. Members are zero-copy views into one buffer holding the whole file,
    except that a file of 8 MB or more read (not mapped) has each member of 1 MB or more in a
    buffer of its own.

    The buffers are a private, writable copy of the file when read from a path, a file object or
    ``bytes`` (so ``torch.frombuffer`` can wrap payloads without copying; ``bytes`` stay read-only
    views with ``lazy=True``), and the caller's own memory when given a bytearray or a writable
    memoryview.
    """

    __slots__ = ("manifest", "names", "programs", "schema_version", "_views", "_pending", "_where")

    def __init__(self, manifest: schema.Manifest, views: dict[str, memoryview],
                 pending: dict[str, Want] | None = None, where: str = "<archive>",
                 programs: list[str] | None = None) -> None:
        self.manifest = manifest
        self.names: tuple[str, ...] = tuple(sorted(views))
        # the programs of a multi-program archive, sorted, as read_archive found them; None: one program
        self.programs = programs
        self.schema_version: tuple[int, int] = (manifest.schema_version.major, manifest.schema_version.minor)
        self._views = views
        # members read with lazy=True and not yet verified: name -> the digests to check
        self._pending = dict(pending or {})
        self._where = where

    def __contains__(self, name: object) -> bool:
        return name in self._views

    def member(self, name: str) -> memoryview:
        """The bytes of member ``name``; MissingMemberError if there is no such member.

        A member left unverified by ``read_archive(..., lazy=True)`` is verified here (with the
        digests ``read_archive`` would have used), the first time it is asked for:
        ChecksumMismatchError if it is corrupt.
        """
        try:
            view = self._views[name]
        except KeyError:
            raise MissingMemberError(
                f"archive member {name!r} is missing (the archive has {len(self._views)} members); "
                f"the file is incomplete: {FIX}"
            ) from None
        if name in self._pending:
            want = self._pending[name]
            check_digest(name, digest(Job(view, want)), want, self._where)
            self._pending.pop(name, None)
        return view

    def size(self, name: str) -> int:
        """The byte length of member ``name``, without reading or verifying it."""
        if name not in self._views:
            self.member(name)  # raises MissingMemberError
        return len(self._views[name])
