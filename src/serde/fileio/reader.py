"""Reading a whole file into memory that torch can wrap without a copy, as fast as the machine allows.

:func:`read_all` takes a path, a file object or bytes and returns one buffer, 64-byte aligned and
private (or a copy-on-write mapping of the file): a small file in one system call, a big one by
positional reads on several threads, its big spans (which the caller's :class:`ReadPolicy` finds,
the archive's from its zip directory) into buffers of their own and hashed while in cache. Nothing
read here is trusted: the caller verifies what it gets.
"""

from __future__ import annotations

import ctypes
import errno
import io
import mmap
import os
import stat
import threading
from collections.abc import Callable
from typing import BinaryIO, NamedTuple

import xxhash

from serde.errors import SerializeError

from .errors import ArtifactIOError, os_error
from .pool import PIECE_BYTES, pool, progress

__all__ = ["TAIL_BYTES", "ReadPolicy", "ANY_FILE", "ReadAt", "Early", "Held", "as_bytes_view", "describe", "read_all"]

# Buffers start on this boundary, so that data the file aligns to it stays aligned for torch
# (the archive aligns every member's data to 64 bytes).
_ALIGNMENT = 64

# reads file bytes into the whole of a buffer from a file offset (relative to where the read
# started); the count read, short at the end of the file
ReadAt = Callable[[memoryview, int], int]


def _no_spans(buf: memoryview, read_at: ReadAt) -> list[tuple[int, int]]:
    return []


def _any_size(n: int, where: str) -> None:
    return None


class ReadPolicy(NamedTuple):
    """What the caller decides of a read: ``check_size(n, where)`` raises when a file of ``n``
    bytes is too big for it; ``find_spans(buf, read_at)``, given a big file's buffer whose last
    ``TAIL_BYTES`` are read (an archive's index lies there) and a way to read more of the file,
    returns the ``(start, end)`` spans of the buffer to read into buffers of their own and hash
    while read (empty: none, or the index makes no sense; spans that run past the buffer or
    overlap are all ignored)."""

    check_size: Callable[[int, str], None] = _any_size
    find_spans: Callable[[memoryview, ReadAt], list[tuple[int, int]]] = _no_spans


ANY_FILE = ReadPolicy()  # no size cap, no spans apart


def as_bytes_view(data: object, where: str) -> memoryview:
    """``data`` as a flat view of bytes, without a copy; SerializeError naming ``where`` if it is
    not a contiguous buffer."""
    try:
        view = memoryview(data)  # type: ignore[arg-type]
        return view if view.format == "B" and view.ndim == 1 else view.cast("B")
    except TypeError as e:
        raise SerializeError(f"{where}: expected bytes, bytearray or a contiguous memoryview ({e})") from None


def describe(src: object) -> str:
    """How messages name ``src``: its path, its file object's name, or ``<archive bytes>``."""
    if isinstance(src, (str, os.PathLike)):
        return repr(os.fspath(src))
    name = getattr(src, "name", None)
    return repr(name) if isinstance(name, str) else "<archive bytes>"


_ANON_FLAGS = getattr(mmap, "MAP_PRIVATE", 0) | getattr(mmap, "MAP_ANONYMOUS", 0)


# Held here for the life of the process: ctypes caches array types only weakly, so ``c_char * 1``
# written inline is a new class (~15 us) after every garbage collection that freed the last one.
_ONE_BYTE = ctypes.c_char * 1

# A bytearray whose bytes are not zeroed first (the C API's PyByteArray_FromStringAndSize with no
# source): every buffer below is overwritten by the file's bytes before it is read, and zeroing
# a big one costs as much as filling it.
_new_bytearray = ctypes.pythonapi.PyByteArray_FromStringAndSize
_new_bytearray.restype = ctypes.py_object
_new_bytearray.argtypes = (ctypes.c_char_p, ctypes.c_ssize_t)


def _aligned_buffer(n: int) -> memoryview:
    """A writable n-byte buffer whose first byte is 64-byte aligned in memory, so that aligned
    members stay aligned for torch. Its bytes are not zeroed: the caller fills all of them.

    A big one is an anonymous mapping whose pages cost nothing until they are written (the big
    members of a file are read into buffers of their own, so most of it may never be). No huge
    pages and no populating are asked for: on the test machine, a virtual machine, loads of 41 MB
    and 104 MB of weights in members under 1 MB each, which fill the whole mapping, took a tenth
    longer by the median with huge pages advised.
    """
    if n >= _BIG_READ_BYTES:
        return memoryview(mmap.mmap(-1, n, flags=_ANON_FLAGS))
    return _heap_buffer(n)


def _heap_buffer(n: int) -> memoryview:
    """n writable bytes from the C heap (malloc), 64-byte aligned, not zeroed.

    Each big member of a read file gets one of these rather than a slice of one whole-file
    mapping. The C heap hands memory freed by an earlier load (or by anything else) back without
    faulting in fresh pages, as torch's own loads get theirs; a fresh mapping has every page
    faulted and zeroed by the kernel on each load. And a member's buffer is freed with the last
    tensor viewing it, not with the last tensor of the whole file.

    No huge pages are asked for (torch asks for none either): on the test machine, a virtual
    machine, a fresh process's first load of 134 MB took 62 to 73 ms with 4 KB pages and 95 to
    209 ms with the buffers' huge pages advised, and repeated loads had 200 ms outliers.
    """
    raw = _new_bytearray(None, n + _ALIGNMENT)
    addr = ctypes.addressof(_ONE_BYTE.from_buffer(raw))
    shift = (-addr) % _ALIGNMENT
    return memoryview(raw)[shift:shift + n]


# what _read_file hashed as it read: data offset -> (byte count, XXH3-128 hex)
Early = dict[int, tuple[int, str]]
# what _read_file read into buffers of their own: data offset -> the bytes from there
Held = dict[int, memoryview]


def read_all(src: object, policy: ReadPolicy = ANY_FILE, use_mmap: bool = False, *, private: bool = False,
             hashed: bool = True) -> tuple[memoryview, bool, Early, Held]:
    """The whole file (from a file object's position) in one buffer, whether that buffer maps the
    file (an ``mmap.mmap``), the XXH3-128 of the spans hashed while they were read, and the spans
    read into buffers of their own (their bytes in the whole-file buffer are left unwritten: never read them there).

    ``private``: ``bytes`` (read-only) are copied into private, writable memory as a file is read,
    so that tensors wrap them without a copy of each member later; without it they are used in
    place (``pt2serde show`` reads no payload). A bytearray or writable memoryview is always used
    in place. ``hashed=False``: nothing is hashed while read (``verify=False``).
    """
    if isinstance(src, (bytes, bytearray, memoryview)):
        view = as_bytes_view(src, "read_archive")
        policy.check_size(len(view), "<archive bytes>")
        if not private or not view.readonly:
            return view, False, {}, {}
        return _copy_in(view, policy, "<archive bytes>", hashed)
    where = describe(src)
    try:
        if isinstance(src, (str, os.PathLike)):
            path = os.fspath(src)
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
            try:
                st = os.fstat(fd)
                if stat.S_ISDIR(st.st_mode):
                    raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
                if (not use_mmap and stat.S_ISREG(st.st_mode) and st.st_size < _BIG_READ_BYTES
                        and hasattr(os, "readv")):
                    return _read_small_file(fd, st.st_size, policy, where), False, {}, {}
                # Unbuffered: the reads go straight into the aligned buffer, so a BufferedReader
                # would only add an object and a copy path per load.
                with open(fd, "rb", buffering=0, closefd=False) as f:
                    return _map_or_read(f, policy, where, use_mmap, hashed)
            finally:
                os.close(fd)
        if isinstance(src, io.BytesIO):
            return _read_bytesio(src, policy, where, hashed)
        return _map_or_read(src, policy, where, use_mmap, hashed)  # type: ignore[arg-type]
    except ArtifactIOError:
        raise
    except OSError as e:
        raise os_error(e, f"cannot read {where}: {e.strerror or e}; check the path and permissions") from None


def _copy_in(view: memoryview, policy: ReadPolicy, where: str, hashed: bool) -> tuple[memoryview, bool, Early, Held]:
    """An in-memory archive copied once into private memory as a file of its size is read: a
    small one into one aligned buffer, a big one by the parallel reader (big members into buffers
    of their own, hashed while the copied bytes are in cache)."""
    if len(view) >= _BIG_READ_BYTES:
        buf, got, early, held = _read_parallel(_MemorySource(view), len(view), 0, policy, where, hashed)
        return buf, False, early, held
    buf = _aligned_buffer(len(view))
    buf[:] = view
    return buf, False, {}, {}


def _read_bytesio(f: io.BytesIO, policy: ReadPolicy, where: str, hashed: bool) -> tuple[memoryview, bool, Early, Held]:
    """A BytesIO from its position to its end, copied once into private memory, and the position
    moved to the end as a read leaves it.

    ``getvalue()`` hands out the BytesIO's own buffer without a copy (it is shared until the next
    write to the BytesIO, which then copies on its side), where ``getbuffer()`` first copies a
    buffer the BytesIO shares with the ``bytes`` it was made from (``io.BytesIO(data)``): 134 MB
    of weights loaded in 0.40 s that way against 0.06 s from a path. The copy made here is private,
    so the caller may write to or reuse the BytesIO while the program lives.
    """
    start = f.tell()
    data = f.getvalue()
    view = memoryview(data)[start:]
    policy.check_size(len(view), where)
    out = _copy_in(view, policy, where, hashed)
    f.seek(start + len(view))
    return out


def _read_small_file(fd: int, size: int, policy: ReadPolicy, where: str) -> memoryview:
    """The ``size`` bytes of the regular file open at ``fd`` (under ``_BIG_READ_BYTES``), read with
    one system call: with the open, fstat and close around it, four in all.

    A Python file object costs three more (a second fstat, a seek to learn the position, a read
    at the end to see that nothing follows). In a virtual machine each system call costs a few
    microseconds, and it leaves caches colder for the work after it: together a few percent of
    loading a small program. The buffer is one byte longer than the file, so a read that fills
    it shows the file grew while being read, without a read more.
    """
    policy.check_size(size, where)
    buf = _aligned_buffer(size + 1)
    got = 0
    while n := os.readv(fd, (buf[got:],)):
        got += n
        if got >= size:  # a read short of the buffer's end was at the end of the file
            break
    if got != size:
        raise _changed_size(where)
    return buf[:size]


def _changed_size(where: str) -> ArtifactIOError:
    return ArtifactIOError(f"{where} changed size while being read; retry once nothing is writing to it")


def _map_or_read(f: BinaryIO, policy: ReadPolicy, where: str, use_mmap: bool,
                 hashed: bool = True) -> tuple[memoryview, bool, Early, Held]:
    mapped = _map_file(f, policy, where) if use_mmap else None
    if mapped is not None:
        return mapped, True, {}, {}
    return _read_file(f, policy, where, hashed)


def _map_file(f: BinaryIO, policy: ReadPolicy, where: str) -> memoryview | None:
    """The whole file mapped copy-on-write (writable; writes never reach the file), or None when
    ``f`` is not a regular file at offset 0 or is empty (then it is read instead)."""
    try:
        fd = f.fileno()
        if f.tell() != 0:
            return None
        size = os.fstat(fd).st_size
    except (OSError, AttributeError, ValueError, io.UnsupportedOperation):
        return None
    if size == 0:
        return None
    policy.check_size(size, where)
    try:
        return memoryview(mmap.mmap(fd, 0, access=mmap.ACCESS_COPY))
    except (OSError, ValueError):  # not mappable (a pipe, some network file systems): read it
        return None


def _read_file(f: BinaryIO, policy: ReadPolicy, where: str, hashed: bool = True) -> tuple[memoryview, bool, Early, Held]:
    if isinstance(f, io.TextIOBase):
        raise ArtifactIOError(f"cannot read {where}: open the file in binary mode ('rb')")
    try:
        size = os.fstat(f.fileno()).st_size - f.tell()
        regular = hasattr(f, "readinto")
    except (OSError, AttributeError, ValueError):  # BytesIO, pipes, wrappers without a real file
        regular = False
    if not regular:
        size = _remaining(f)
        if size is None:
            return _read_stream(f, policy, where, hashed)
    policy.check_size(size, where)
    early: Early = {}
    held: Held = {}
    if size >= _BIG_READ_BYTES and (not regular or hasattr(os, "preadv")):
        start = f.tell()
        source = _FileSource(f.fileno()) if regular else _SeekableSource(f)
        buf, got, early, held = _read_parallel(source, size, start, policy, where, hashed)
        f.seek(start + got)
    else:
        # a seekable object of known size: read straight into the aligned buffer, once
        buf = _aligned_buffer(size)
        got = 0
        while got < size:
            n = f.readinto(buf[got:])  # type: ignore[attr-defined]
            if not n:
                break
            got += n
    if got != size or f.read(1):
        raise _changed_size(where)
    return buf, False, early, held


def _remaining(f: BinaryIO) -> int | None:
    """The bytes from the position of a seekable file object that has ``readinto`` to its end;
    None for anything else (a pipe, a socket, a wrapper that cannot seek)."""
    try:
        if not (hasattr(f, "readinto") and f.seekable()):
            return None
        start = f.tell()
        end = f.seek(0, os.SEEK_END)
        f.seek(start)
    except (OSError, AttributeError, ValueError, TypeError):
        return None
    return end - start if isinstance(end, int) and end >= start else None


def _read_stream(f: BinaryIO, policy: ReadPolicy, where: str, hashed: bool) -> tuple[memoryview, bool, Early, Held]:
    """A stream of unknown length: read in bounded chunks (read(huge) may preallocate huge), then
    copied once into private memory as bytes of that size are (see _copy_in)."""
    parts, total = [], 0
    while chunk := f.read(1 << 24):
        if not isinstance(chunk, (bytes, bytearray)):
            raise ArtifactIOError(f"cannot read {where}: open the file in binary mode ('rb')")
        parts.append(chunk)
        total += len(chunk)
        policy.check_size(total, where)
    data = parts[0] if len(parts) == 1 else b"".join(parts)  # one chunk is used as it is
    if not parts:
        data = b""
    del parts
    return _copy_in(memoryview(data), policy, where, hashed)


# Files at least this big are read by several threads at once (see _pread_parallel): the
# kernel's page faults and copies then run on every core (134 MB: 0.13 s -> 0.07 s on 2 cores).
_BIG_READ_BYTES = 8 << 20
_READ_CHUNK = 8 << 20


def _pread_parallel(fd: int, size: int, start: int, policy: ReadPolicy, where: str,
                    hashed: bool = True) -> tuple[memoryview, int, Early, Held]:
    """Read ``size`` bytes from file offset ``start`` with positional reads on a few threads.

    The end of the file is read first, where the policy finds the big spans (an archive's big
    members' data); each is then read, into a buffer of its own (see _heap_buffer), by one task
    that hashes every piece (XXH3-128) while it is still in cache, which spares a second pass
    over the bytes when the caller turns out to know that digest (``hashed=False``: no hashing,
    for ``verify=False``). Nothing read here is trusted: the spans come from an unverified index,
    and a span's buffer and hash count only for a member whose verified data start and size are
    the span's (see serde.archive.read_archive).

    Returns a buffer of ``size`` bytes holding everything but the spans' data, the number
    of bytes read before the first short read (less than ``size`` when the file shrank meanwhile;
    the file position is not used), the spans' digests and the spans' buffers.
    """
    return _read_parallel(_FileSource(fd), size, start, policy, where, hashed)


class _FileSource:
    """Positional reads of an open file (the system call releases the GIL)."""

    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def read_into(self, buf: memoryview, lo: int, hi: int, start: int) -> int:
        return _pread_all(self.fd, buf, lo, hi, start)


class _SeekableSource:
    """Reads of a seekable file object without a file descriptor (a wrapper of a BytesIO, say),
    one at a time: it is read as a file is, into the same buffers, while other threads hash
    what it has read."""

    __slots__ = ("f", "lock")

    def __init__(self, f: BinaryIO) -> None:
        self.f, self.lock = f, threading.Lock()

    def read_into(self, buf: memoryview, lo: int, hi: int, start: int) -> int:
        with self.lock:
            self.f.seek(start + lo)
            off = lo
            while off < hi:
                n = self.f.readinto(buf[off:hi])  # type: ignore[attr-defined]
                if not n:
                    break
                off += n
        return off - lo


class _MemorySource:
    """The bytes of an in-memory archive (``bytes``, a BytesIO's buffer), copied out with
    ``memmove`` through ctypes, which releases the GIL: copies of several members then run on
    every core, as a file's positional reads do."""

    __slots__ = ("view", "addr")

    def __init__(self, view: memoryview) -> None:
        self.view, self.addr = view, _address(view)

    def read_into(self, buf: memoryview, lo: int, hi: int, start: int) -> int:
        hi = max(lo, min(hi, len(self.view) - start))
        if hi > lo:
            ctypes.memmove(_address(buf) + lo, self.addr + start + lo, hi - lo)
        return hi - lo


class _PyBuffer(ctypes.Structure):
    _fields_ = [("buf", ctypes.c_void_p), ("obj", ctypes.c_void_p), ("len", ctypes.c_ssize_t),
                ("itemsize", ctypes.c_ssize_t), ("readonly", ctypes.c_int), ("ndim", ctypes.c_int),
                ("format", ctypes.c_char_p), ("shape", ctypes.c_void_p), ("strides", ctypes.c_void_p),
                ("suboffsets", ctypes.c_void_p), ("internal", ctypes.c_void_p)]


_get_buffer = ctypes.pythonapi.PyObject_GetBuffer
_get_buffer.argtypes = (ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int)
_get_buffer.restype = ctypes.c_int
_release_buffer = ctypes.pythonapi.PyBuffer_Release
_release_buffer.argtypes = (ctypes.POINTER(_PyBuffer),)
_release_buffer.restype = None


def _address(view: memoryview) -> int:
    """The address of a contiguous buffer's first byte, read-only ones (``bytes``) included,
    which ``ctypes.c_char.from_buffer`` refuses. The caller keeps ``view`` alive while it uses
    the address; the buffer request is released at once (a memoryview holds its own)."""
    b = _PyBuffer()
    _get_buffer(view, ctypes.byref(b), 0)  # PyBUF_SIMPLE: the memoryviews here are contiguous bytes
    try:
        return b.buf or 0
    finally:
        _release_buffer(ctypes.byref(b))


def _read_parallel(source: _FileSource | _SeekableSource | _MemorySource, size: int, start: int, policy: ReadPolicy, where: str,
                   hashed: bool = True) -> tuple[memoryview, int, Early, Held]:
    """:func:`_pread_parallel` for any source: a file, or an archive already in memory."""
    buf = _aligned_buffer(size)
    tail = min(size, TAIL_BYTES)
    got_tail = source.read_into(buf, size - tail, size, start)
    spans = _spans(policy, source, buf, start) if got_tail == tail else []
    held: Held = {lo: _heap_buffer(hi - lo) for lo, hi in spans}
    tasks, pos, rest = [], 0, size - tail  # rest: where the bytes not read yet end
    for lo, hi in spans:  # a span may reach into the tail: reading the tail's bytes again is harmless
        gap = min(lo, rest)
        tasks += [(a, min(gap, a + _READ_CHUNK), False) for a in range(pos, gap, _READ_CHUNK)]
        tasks.append((lo, hi, True))
        pos = hi
    tasks += [(a, min(rest, a + _READ_CHUNK), False) for a in range(pos, rest, _READ_CHUNK)]
    tasks.sort(key=lambda t: t[0] - t[1])  # biggest first, so that none starts last and runs alone

    def run(task: tuple[int, int, bool], done: Callable[[int], None]) -> tuple[int, str | None]:
        lo, hi, own = task
        # a span goes to its own buffer, whose byte 0 is file byte start + lo
        dest, base = (held[lo], lo) if own else (buf, 0)
        h = xxhash.xxh3_128() if own and hashed else None
        off = lo
        while off < hi:
            n = source.read_into(dest, off - base, min(hi, off + PIECE_BYTES if own else hi) - base, start + base)
            if h is not None:
                h.update(dest[off - base:off - base + n])
            off += n
            done(n)
            if n == 0 or (not own and off < hi):
                break
        return off - lo, (h.hexdigest() if h is not None and off == hi else None)

    with progress(size, "reading") as done:
        results = list(pool().map(lambda t: run(t, done), tasks))
    short = [lo + n for (lo, hi, _), (n, _) in zip(tasks, results, strict=True) if n != hi - lo]
    if short or got_tail != tail:
        return buf, min(short or [size - tail + got_tail]), {}, {}
    early = {lo: (hi - lo, d) for (lo, hi, _), (_, d) in zip(tasks, results, strict=True) if d is not None}
    return buf, size, early, held


# The end of a big file, read first: an archive keeps its index there (a pt2serde archive's zip
# directory is ~100 bytes a member).
TAIL_BYTES = 1 << 20


def _pread_all(fd: int, buf: memoryview, lo: int, hi: int, start: int) -> int:
    """Read file bytes ``start + lo .. start + hi`` into ``buf[lo:hi]``; the count read (short at
    the end of the file)."""
    off = lo
    while off < hi:
        n = os.preadv(fd, [buf[off:hi]], start + off)
        if n <= 0:
            break
        off += n
    return off - lo


def _spans(policy: ReadPolicy, source: _FileSource | _SeekableSource | _MemorySource, buf: memoryview,
           start: int) -> list[tuple[int, int]]:
    """The policy's spans, dropped when any runs past the buffer or overlaps the next."""
    spans = sorted(policy.find_spans(buf, lambda dest, off: source.read_into(dest, 0, len(dest), start + off)))
    if any(hi > len(buf) for _, hi in spans) or any(a[1] > b[0] for a, b in zip(spans, spans[1:], strict=False)):
        return []
    return spans
