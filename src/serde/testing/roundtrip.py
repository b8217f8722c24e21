"""Save a program to memory, load it back, and compare the two (:func:`assert_roundtrip`)."""

from __future__ import annotations

import io
from collections.abc import Iterable
from typing import Any

from torch.export import ExportedProgram

from serde.api import load, save

from .compare import DEFAULT_METADATA, assert_programs_equal

__all__ = ["assert_roundtrip"]


def assert_roundtrip(ep: ExportedProgram, *, debug_info: bool = True, metadata: Iterable[str] | None = None,
                     inputs: Any = None, **kwargs: Any) -> ExportedProgram:
    """Save ``ep`` (to memory), load it back, assert the two are equal, return the loaded program.

    With ``debug_info=True`` (the default here) stack traces (debug-only metadata) are kept and
    compared too.
    """
    buf = io.BytesIO()
    save(ep, buf, debug_info=debug_info)
    loaded = load(buf.getvalue())
    if metadata is None:
        metadata = DEFAULT_METADATA + (("stack_trace",) if debug_info else ())
    assert_programs_equal(ep, loaded, metadata=metadata, inputs=inputs, **kwargs)
    return loaded
