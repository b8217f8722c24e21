"""``Memo``: a result remembered per process, keyed by exact content, bounded in size.

Loading the same program again in one process repeats work whose outcome depends only on stored
content (a guard's printout, a built expression, an operator's accepted call shape). Each such
result is kept in a ``Memo`` under a key that is that content itself, so other content never hits
it, and only after the work succeeded, so a refusal is never remembered. A full memo forgets
everything at once: no per-hit bookkeeping, and a program's results are back after one load.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Memo"]


class Memo(dict):
    """A dict that holds at most ``cap`` entries; :meth:`remember` clears it when it is full.
    Reads are plain dict reads (``get``, ``in``); a key-only memo stores True."""

    __slots__ = ("cap",)

    def __init__(self, cap: int) -> None:
        super().__init__()
        self.cap = cap

    def remember(self, key: Any, value: Any = True) -> Any:
        if len(self) >= self.cap:
            self.clear()
        self[key] = value
        return value
