"""The digests an archive records of each member: its sha256, its XXH3-128 (schema 2.4 on) and
the zip's CRC-32, computed together a cache-sized piece at a time on the I/O threads, and checked
against what the manifest and the zip record.
"""

from __future__ import annotations

import contextlib
import hashlib
import mmap
from collections.abc import Iterator
from typing import NamedTuple

import xxhash

try:
    # ISA-L's CRC-32: the zip polynomial, zlib's values, about ten times zlib's speed here (every
    # byte a save writes and `pt2serde check` reads goes through it).
    from isal.isal_zlib import crc32
except ImportError:  # a platform without an isal wheel: the same values, slower
    from zlib import crc32

from serde.core.wire import sha256_hex
from serde.fileio.pool import PIECE_BYTES, digest_all

from .errors import FIX, ChecksumMismatchError
from .members import MANIFEST

__all__ = ["crc32", "sha256_hex", "xxh3_hex", "Want", "Job", "MappedSpan", "digest", "crc32_and_xxh3",
           "check_digest", "verify_hashes"]


def xxh3_hex(view: memoryview | bytes) -> str:
    """The XXH3-128 of ``view`` as the manifest records it (the canonical big-endian form, in
    lowercase hex). The reference C implementation releases the GIL on large buffers."""
    return xxhash.xxh3_128(view).hexdigest()


class Want(NamedTuple):
    """What a member must hash to: its sha256 and XXH3-128 (hex) and its CRC-32; None: that
    digest is not computed for it."""

    sha256: str | None
    xxh3: str | None
    crc: int | None


class Job:
    """Hash ``src`` with the digests ``want`` names."""

    __slots__ = ("src", "want")

    def __init__(self, src: memoryview | bytes | MappedSpan, want: Want) -> None:
        self.src, self.want = src, want

    def __len__(self) -> int:
        return len(self.src)


class MappedSpan:
    """``size`` bytes at offset ``start`` of a file mapping, hashed piece by piece (see _pieces)."""

    __slots__ = ("mm", "start", "size")

    def __init__(self, mm: mmap.mmap, start: int, size: int) -> None:
        self.mm, self.start, self.size = mm, start, size

    def __len__(self) -> int:
        return self.size


# A mapped span's pages are dropped once per this many bytes hashed (each drop is a system call
# and a TLB flush on every core running the process): hashing 134 MB through the mapping on 2
# cores took 15 ms dropping them every 1 MB, 13 ms every 8 MB, and 12 ms in 8 MB pieces. At most
# this much per hashing thread is mapped at once.
_DROP = 8 << 20
_PAGE = mmap.PAGESIZE


def _pieces(src: memoryview | bytes | MappedSpan, piece: int = PIECE_BYTES) -> Iterator[memoryview | bytes]:
    """``src`` in pieces of ``piece`` bytes: cache-sized by default, so that each piece is hashed
    by every digest while it is in cache (one digest alone gains nothing from that, and fewer,
    bigger calls cost less).

    The pages of a mapped span are dropped from the process (``MADV_DONTNEED``) once every
    ``_DROP`` bytes are hashed, so verifying a mapped file leaves nothing resident. That is safe
    because nothing has written to the (copy-on-write) mapping yet: the page cache still holds the
    file's bytes, which a later touch maps again. Hashing the mapping is twice as fast as
    reading the file into a buffer (no copy), and pieces of neighbouring members may share a
    page: dropping it under another thread only makes that thread fault it in again.
    """
    if not isinstance(src, MappedSpan):
        for lo in range(0, len(src), piece):
            yield src[lo:lo + piece]
        return
    view = memoryview(src.mm)
    end = src.start + src.size
    try:
        for lo in range(src.start, end, _DROP):
            hi = min(lo + _DROP, end)
            for at in range(lo, hi, piece):
                yield view[at:min(at + piece, hi)]
            first = lo - lo % _PAGE
            with contextlib.suppress(OSError, ValueError, AttributeError):  # a hint only
                src.mm.madvise(mmap.MADV_DONTNEED, first, min(hi - first + (-hi) % _PAGE, len(src.mm) - first))
    finally:
        view.release()


def digest(job: Job) -> Want:
    """The digests of ``job.src`` that ``job.want`` asks for (the others None)."""
    want, src = job.want, job.src
    if not isinstance(src, MappedSpan) and (len(src) <= PIECE_BYTES or (want.sha256 is None and want.crc is None)):
        # One call per digest: a small member fits the cache whole, and the C code hashes a big
        # one alone without the GIL.
        return Want(None if want.sha256 is None else sha256_hex(src),
                     None if want.xxh3 is None else xxh3_hex(src),
                     None if want.crc is None else crc32(src))
    sha = hashlib.sha256() if want.sha256 is not None else None
    xxh = xxhash.xxh3_128() if want.xxh3 is not None else None
    crc = 0
    size = _DROP if (want.sha256, want.xxh3, want.crc).count(None) == 2 else PIECE_BYTES  # one digest
    for piece in _pieces(src, size):
        if sha is not None:
            sha.update(piece)
        if xxh is not None:
            xxh.update(piece)
        if want.crc is not None:
            crc = crc32(piece, crc)
    return Want(sha and sha.hexdigest(), xxh and xxh.hexdigest(), crc if want.crc is not None else None)


def crc32_and_xxh3(view: memoryview) -> tuple[int, str]:
    """What the writer records of a member besides its sha256: one pass over cache-sized pieces."""
    crc, xxh = 0, xxhash.xxh3_128()
    for piece in _pieces(view):
        crc = crc32(piece, crc)
        xxh.update(piece)
    return crc, xxh.hexdigest()


def check_digest(name: str, got: Want, want: Want, where: str) -> None:
    """Raise ChecksumMismatchError unless every digest computed in ``got`` is the one in ``want``."""
    for kind, have, expected, whose in (("sha256", got.sha256, want.sha256, MANIFEST),
                                        ("xxh3", got.xxh3, want.xxh3, MANIFEST)):
        if have is not None and have != expected:
            raise ChecksumMismatchError(f"{where}: member {name!r} is corrupt: its {kind} is {have}, but "
                                        f"{whose} records {expected}; {FIX}")
    if got.crc is not None and got.crc != want.crc:
        raise ChecksumMismatchError(f"{where}: the CRC-32 the zip records for member {name!r} is not that of its "
                                    f"bytes; the file was damaged or rewritten by another tool: {FIX}")


def verify_hashes(names: list[str], jobs: list[Job], want: dict[str, Want], where: str) -> dict[str, int]:
    """Check the digests of the members ``names``; return the CRC-32 of those whose job computed
    it (for the framing check)."""
    digests = digest_all(digest, jobs, "verifying")
    for name, got in zip(names, digests, strict=True):
        # the CRC-32 is compared by the framing check, which names the header that disagrees
        check_digest(name, Want(got.sha256, got.xxh3, None), want[name], where)
    return {name: got.crc for name, got in zip(names, digests, strict=True) if got.crc is not None}
