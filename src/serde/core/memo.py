"""``Memo``: a result remembered per process, keyed by exact content, bounded in size.

Loading or saving the same program again in one process repeats work whose outcome depends only on
its content (a guard's printout, a built expression, an operator's accepted call shape). Each such
result is kept in a ``Memo`` under a key that is that content itself, so other content never hits
it, and only after the work succeeded, so a refusal is never remembered. A full memo forgets
everything at once: no per-hit bookkeeping, and a program's results are back after one load.
:func:`forget_all` empties every memo, so that the next load or save of a program does all of its
work again (what the first one in a process does; benchmarks measure it that way).
"""

from __future__ import annotations

import weakref
from typing import Any

__all__ = ["Memo", "forget_all"]


class Memo(dict):
    """A dict that holds at most ``cap`` entries; :meth:`remember` clears it when it is full.
    Reads are plain dict reads (``get``, ``in``); a key-only memo stores True."""

    __slots__ = ("cap", "__weakref__")

    def __init__(self, cap: int) -> None:
        super().__init__()
        self.cap = cap
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
