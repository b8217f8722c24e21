"""The threads that read and hash big files, and the progress bar over such work.

One pool per process, shared by the file reader, the archive's writer and verifier and the
bridge's payload hashing; a forked child starts its own.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

__all__ = ["PARALLEL_BYTES", "PIECE_BYTES", "PROGRESS_MIN_BYTES", "digest_all", "pool", "progress"]

# Buffers at least this big are worth a thread of their own (hashing them releases the GIL).
PARALLEL_BYTES = 1 << 20


def digest_all(fn: Callable[[Any], Any], views: list[Any], label: str = "hashing") -> list[Any]:
    """``[fn(v) for v in views]``, with the big views on several threads.

    hashlib and zlib release the GIL on large buffers, so sha256 and crc32 of big payloads run on
    every core; small ones are not worth a thread hand-off. Over ``PROGRESS_MIN_BYTES`` a progress
    bar (``label``) goes to stderr when it is a terminal.
    """
    sizes = [len(v) for v in views]
    total = sum(sizes)
    if total < PROGRESS_MIN_BYTES and sum(n >= PARALLEL_BYTES for n in sizes) < 2:
        # No bar and no thread for so little work: the loop below would do just this.
        return [fn(v) for v in views]
    out: list[Any] = [None] * len(views)
    with progress(total, label) as done:
        # biggest first, so that one large view does not start last and run alone
        big = sorted((i for i, v in enumerate(views) if len(v) >= PARALLEL_BYTES), key=lambda i: -len(views[i]))
        if len(big) > 1:
            for i, d in zip(big, pool().map(lambda i: fn(views[i]), big), strict=True):
                out[i] = d
                done(len(views[i]))
        result = []
        for v, d in zip(views, out, strict=True):
            if d is None:
                d = fn(v)
                done(len(v))
            result.append(d)
    return result


_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def pool() -> ThreadPoolExecutor:
    """The threads that read and hash big files, one set per process: starting threads anew for
    every load costs up to 2 ms each on a busy machine. Its tasks never wait on the pool."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=min(os.cpu_count() or 1, 8), thread_name_prefix="pt2serde-io")
        return _POOL


def _forget_pool() -> None:
    """In a forked child: the parent's pool threads do not exist there (the pool would wait on them)."""
    global _POOL, _POOL_LOCK
    _POOL, _POOL_LOCK = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


# Work on fewer bytes than this takes well under a second: no progress bar for it.
PROGRESS_MIN_BYTES = 512 << 20


@contextlib.contextmanager
def progress(total: int, label: str) -> Iterator[Callable[[int], None]]:
    """A callback counting bytes done: a tqdm bar on stderr when it is a terminal and the work is
    big, else nothing (never in logs, pipes or files)."""
    stream = sys.stderr
    if total < PROGRESS_MIN_BYTES or stream is None or not stream.isatty():
        yield lambda n: None
        return
    from tqdm import tqdm

    with tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=f"pt2serde: {label}",
              file=stream, leave=False) as bar:
        yield bar.update



# Work on a big buffer goes a cache-sized piece at a time (see serde.archive.digests).
PIECE_BYTES = 1 << 20
