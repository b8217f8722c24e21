"""``Memo``: a result remembered per process, keyed by exact content, bounded in size.

Loading or saving the same program again in one process repeats work whose outcome depends only on
its content (a guard's printout, a built expression, an operator's accepted call shape). Each such
result is kept in a ``Memo`` under a key that is that content itself, so other content never hits
it, and only after the work succeeded, so a refusal is never remembered. A full memo forgets
everything at once: no per-hit bookkeeping, and a program's results are back after one load.
:func:`forget_all` empties every memo, so that the next load or save of a program does all of its
work again (what the first one in a process does; benchmarks measure it that way).

Every memo of the package has a name, unique in the process, and :func:`registered` lists the live ones by name:
docs/guide.md ("What is remembered per process") has one row per name, saying what it keys on, its bound and the
workload it serves (the first save or load of a program, or saving or loading it again), and a
test holds the two to each other. A memo is kept only where it pays off in one of those.
"""

from __future__ import annotations

import weakref
from typing import Any

__all__ = ["Memo", "forget_all", "registered"]


class Memo(dict):
    """A dict that holds at most ``cap`` entries; :meth:`remember` clears it when it is full.
    Reads are plain dict reads (``get``, ``in``); a key-only memo stores True."""

    __slots__ = ("cap", "name", "__weakref__")

    def __init__(self, cap: int, name: str = "") -> None:
        super().__init__()
        self.cap = cap
        self.name = name
        _ALL.append(weakref.ref(self))

    def remember(self, key: Any, value: Any = True) -> Any:
        if len(self) >= self.cap:
            self.clear()
        self[key] = value
        return value


# Every memo made (the module-level ones live as long as the process; a test's goes with the test).
# By reference, not in a set: memos are dicts, and two empty ones are equal.
_ALL: list[weakref.ref[Memo]] = []


def forget_all() -> None:
    """Empty every memo of the process."""
    alive = []
    for ref in list(_ALL):
        memo = ref()
        if memo is not None:
            memo.clear()
            alive.append(ref)
    _ALL[:] = alive


def registered() -> dict[str, Memo]:
    """Every live named memo of the process, by name (a name made again, as a forked child's
    archive state makes its own, names the newest). A memo without a name (a test's own) is not
    listed; forget_all empties it all the same."""
    out: dict[str, Memo] = {}
    for ref in _ALL:
        memo = ref()
        if memo is not None and memo.name:
            out[memo.name] = memo
    return out
