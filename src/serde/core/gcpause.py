"""``paused_gc()``: run a block with the cyclic garbage collector paused.

Saving, loading and canonicalizing allocate hundreds of thousands of short-lived containers; a
full collection in the middle walks every object the exported program holds and costs more than
the work itself. Schema objects are trees, so no cycles are left for the collector to find.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["paused_gc"]


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
