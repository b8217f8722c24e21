"""Writing a file whole or not at all, with few system calls.

:func:`write_atomic` puts the bytes in a file without a name (``O_TMPFILE``), fsyncs it, names it
and renames it over the target, so that a reader sees the old file or the complete new one
whatever happens; :func:`write_stream` writes the same chunks to a file object. The archive and
the native program writer share them.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import re
from collections.abc import Iterable, Iterator
from typing import BinaryIO

from serde.core.memo import Memo

from .errors import ArtifactIOError, os_error

__all__ = ["write_atomic", "write_stream"]


def write_atomic(path: str | os.PathLike, chunks: Iterable[bytes | bytearray | memoryview]) -> None:
    """Write the concatenated ``chunks`` to ``path`` so that ``path`` holds either its previous
    file or the complete new one, whatever happens (exceptions, SIGKILL, power loss).

    The bytes go to a file without a name (Linux ``O_TMPFILE``), which the kernel discards if the
    process dies; it is fsynced, given a name (``.<target>.<pid>.<hex>.tmp``), renamed over
    ``path`` and the directory fsynced. A kill between naming and renaming (microseconds) leaves
    that name behind. Where ``O_TMPFILE`` is unavailable the file is created under that name
    directly, and a kill at any time during the write leaves it. Such files left by writers whose
    pid is dead are removed before writing: by every save where ``O_TMPFILE`` is unavailable, and
    by the first save to ``path`` in a process where it is (listing the directory costs a small
    program's save 1.5% in an empty directory, and more the more files it holds). The file
    gets the mode of the file it replaces, or 0666 minus the umask.

    Raises:
        ArtifactIOError: the OS refused (missing directory, permissions, disk full, a directory
            at ``path``); nothing changed at ``path``.
    """
    path = os.fspath(path)
    directory, base = os.path.split(os.path.abspath(path))
    try:
        dfd = os.open(directory or "/", os.O_RDONLY | os.O_DIRECTORY)
    except OSError as e:
        raise os_error(e, f"cannot save to {path!r}: cannot create a temporary file in "
                          f"{directory!r} ({e.strerror}); check the directory exists and is writable") from None
    try:
        swept = (directory, base)
        if swept not in _THIS.swept:
            _remove_stale_temps(dfd, base)
        if _write_and_rename(dfd, base, chunks, path):
            _THIS.swept.remember(swept)
        with contextlib.suppress(OSError):  # some filesystems cannot fsync a directory
            os.fsync(dfd)
    finally:
        os.close(dfd)


_USE_O_TMPFILE = hasattr(os, "O_TMPFILE")  # tests switch it off to exercise the fallback


class _ThisProcess:
    """This process's id and the suffixes of its temporary names, asked of the OS once per process
    instead of once per save each (``getpid`` and ``getrandom`` are system calls). A forked child
    takes its own; the suffixes start at a random point so that a dead writer's leftover under a
    reused pid does not take the name a save wants."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.suffixes = itertools.count(int.from_bytes(os.urandom(4), "big"))
        # whether /proc/self/fd/N has named an open file here yet (see _open_unnamed)
        self.proc_fd_works = False
        # (directory, target) pairs this process has saved to through an unnamed file, after
        # removing the stale temporary files there (see write_atomic)
        self.swept = Memo(1 << 12, "swept_dirs")


_THIS = _ThisProcess()


def _new_process() -> None:
    global _THIS
    _THIS = _ThisProcess()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_process)


def _temp_name(base: str) -> str:
    return f".{base}.{_THIS.pid}.{next(_THIS.suffixes) & 0xFFFFFFFF:08x}.tmp"


def _write_and_rename(dfd: int, base: str, chunks: Iterable[bytes | bytearray | memoryview], path: str) -> bool:
    """Write, name and rename the new file; True when it was written unnamed (O_TMPFILE)."""
    tmp: str | None = None   # the temporary name, once there is one to remove on failure
    fd = -1
    try:
        try:
            if _USE_O_TMPFILE:
                fd = _open_unnamed(dfd)
            if fd < 0:
                tmp = _temp_name(base)
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600, dir_fd=dfd)
        except OSError as e:
            raise os_error(e, f"cannot save to {path!r}: cannot create a temporary file in its directory "
                              f"({e.strerror}); check the directory exists and is writable") from None
        _write_all(fd, chunks)
        os.fchmod(fd, _target_mode(dfd, base))
        os.fsync(fd)
        unnamed = tmp is None
        if unnamed:
            name = _temp_name(base)
            os.link(f"/proc/self/fd/{fd}", name, src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=True)
            tmp = name
        os.replace(tmp, base, src_dir_fd=dfd, dst_dir_fd=dfd)
        tmp = None
        return unnamed
    except BaseException as e:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
        if isinstance(e, OSError) and not isinstance(e, ArtifactIOError):
            raise os_error(e, f"cannot save to {path!r}: {e.strerror or e}; nothing was written there "
                              "(check free space, permissions, and that the path is not a directory)") from None
        raise
    finally:
        if fd >= 0:
            os.close(fd)


def _open_unnamed(dfd: int) -> int:
    """An O_TMPFILE file in the directory, or -1 where that (or naming it via /proc) is unsupported."""
    try:
        fd = os.open(".", os.O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC, 0o600, dir_fd=dfd)
    except OSError:  # EOPNOTSUPP (filesystem), EISDIR (old kernel), ...: the fallback reports real errors
        return -1
    if not _THIS.proc_fd_works:  # no /proc: the file could never be named (once it could, it can)
        if not os.path.exists(f"/proc/self/fd/{fd}"):
            os.close(fd)
            return -1
        _THIS.proc_fd_works = True
    return fd


def _write_all(fd: int, chunks: Iterable[bytes | bytearray | memoryview]) -> None:
    """Write every chunk, in order, with few system calls: each run of small chunks in one
    ``writev``, each big chunk in a call of its own.

    An archive is two chunks per member (header, data) and the directory: one ``write`` each
    made twenty system calls for a small program, where one ``writev`` takes them all (each
    system call costs a few microseconds in a virtual machine, and leaves the caches colder for
    the work after it). Big chunks stay alone because of what the page cache makes of one write
    that spans them and their neighbours: on Linux 6.18 with ext4 the whole file in one call
    became large folios, and a ``mmap=True`` load that then parses the JSON members at the end
    of the file had 2 MB of the file resident (the folio holding them and the last payload's
    tail) instead of 86 kB.
    """
    for run in _runs(chunks):
        _writev(fd, run)


def _runs(chunks: Iterable[bytes | bytearray | memoryview], cap: int | None = None) -> Iterator[list[memoryview]]:
    """The non-empty chunks as lists to write together: each big chunk (``_ALONE_BYTES`` or more)
    alone, and each run of small ones between them, cut when given a ``cap`` as soon as it holds
    that many bytes (so a run exceeds it by less than one small chunk)."""
    run: list[memoryview] = []
    size = 0
    for c in chunks:
        view = memoryview(c).cast("B")
        if len(view) >= _ALONE_BYTES:
            if run:
                yield run
                run, size = [], 0
            yield [view]
        elif view:
            run.append(view)
            size += len(view)
            if cap is not None and size >= cap:
                yield run
                run, size = [], 0
    if run:
        yield run


def _writev(fd: int, views: list[memoryview]) -> None:
    """Write ``views`` in order; a call may write less than it was given, the rest goes in the next."""
    if not hasattr(os, "writev"):
        for view in views:
            while view:
                view = view[os.write(fd, view[:_WRITE_BYTES]):]
        return
    i = 0
    while i < len(views):
        batch, size = [], 0
        for view in views[i:i + _IOV_MAX]:
            batch.append(view)
            size += len(view)
            if size >= _WRITE_BYTES:
                break
        done = os.writev(fd, batch)
        if done <= 0:  # a regular file takes at least one byte or raises (ENOSPC, EIO ...)
            raise OSError(errno.EIO, "the file took none of the bytes written to it")
        # Skip what was written: whole chunks, then the written head of the next one.
        while i < len(views) and done >= len(views[i]):
            done -= len(views[i])
            i += 1
        if done:
            views[i] = views[i][done:]


# Chunks at least this big are written alone (see _write_all); a run of smaller ones written to a
# file object is joined into one bytes object of at most about this size.
_ALONE_BYTES = 64 << 10
_JOIN_BYTES = 1 << 20


# Chunks per writev (POSIX guarantees at least 16; Linux and macOS take 1024), and about the
# bytes per write call (Linux writes at most 2 GiB - 4 KiB in one).
def _iov_max() -> int:
    try:
        n = os.sysconf("SC_IOV_MAX")
    except (AttributeError, ValueError, OSError):
        return 16
    return min(n, 1024) if n > 0 else 16


_IOV_MAX = _iov_max()
_WRITE_BYTES = 1 << 30


def _remove_stale_temps(dfd: int, base: str) -> None:
    """Remove temporary files of earlier saves to ``base`` whose writer process no longer exists."""
    pattern = re.compile(rf"\.{re.escape(base)}\.(\d+)\.[0-9a-f]{{8}}\.tmp")
    with contextlib.suppress(OSError):
        for name in os.listdir(dfd):
            m = pattern.fullmatch(name)
            if m is None or int(m.group(1)) == _THIS.pid or _pid_alive(int(m.group(1))):
                continue
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=dfd)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):  # alive under another user; or no pid of ours: keep
        return True
    return True


def _target_mode(dfd: int, base: str) -> int:
    """Keep the mode of a file being replaced; a new file gets 0666 minus the umask."""
    try:
        st = os.stat(base, dir_fd=dfd)
        if (st.st_mode & 0o170000) == 0o100000:
            return st.st_mode & 0o777
    except OSError:
        pass
    umask = 0o022
    # Reading the umask via os.umask() would briefly change it for every thread; /proc does not.
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status") as f:
        for line in f:
            if line.startswith("Umask:"):
                umask = int(line.split()[1], 8)
    return 0o666 & ~umask


def write_stream(dest: BinaryIO, chunks: Iterable[bytes | bytearray | memoryview]) -> None:
    """Write the concatenated ``chunks`` to the binary file object ``dest`` from its current
    position (until every byte is taken, for raw streams), and flush it; not atomic.

    Raises:
        ArtifactIOError: ``dest`` refused the bytes or is no binary file object.
    """
    try:
        # A run of small chunks goes in one write call (a file object may make a system call of
        # each, and a BytesIO costs a call and a check per write either way).
        for run in _runs(chunks, _JOIN_BYTES):
            _write_chunk(dest, run[0] if len(run) == 1 else b"".join(run))
        dest.flush()
    except (OSError, TypeError, ValueError, AttributeError) as e:
        raise ArtifactIOError(f"cannot write the archive to {dest!r}: {e}; pass a path or a file "
                              "object opened in binary write mode ('wb')") from None


def _write_chunk(dest: BinaryIO, chunk: bytes | memoryview) -> None:
    """Write all of ``chunk``: a raw stream's write() may take fewer bytes than given."""
    view = memoryview(chunk).cast("B")
    while view:
        n = dest.write(view)
        if n is None:
            raise ArtifactIOError(
                f"cannot write the archive to {dest!r}: write() returned None, which a non-blocking stream "
                "does when it would block, so part of the archive was not written; pass a blocking file, "
                "a path, or a file object whose write() returns the number of bytes written")
        if not isinstance(n, int) or not 0 < n <= len(view):
            raise ArtifactIOError(
                f"cannot write the archive to {dest!r}: write() of {len(view)} bytes returned {n!r}; the "
                "archive is incomplete. Pass a path or a file object opened in binary write mode ('wb')")
        view = view[n:]
