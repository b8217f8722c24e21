"""torch.export input guards, torch-free: Python guard text <-> ``schema.InputGuards``.

:mod:`.code` saves and loads them (parse with :mod:`.parse`, print with :mod:`.printer`, over the
tables of :mod:`.grammar`), :mod:`.sources` names the inputs they read, and :mod:`.evaluate`
checks them at the program's example values."""

from .code import canonical_guards, guard_texts, guards_from_code, guards_to_code
from .evaluate import failing_guard
from .grammar import MAX_GUARD_CHARS, MAX_GUARDS, SPELLINGS
from .sources import (
    ATTR,
    STRICT_FLAT_ARGS,
    SourceKey,
    flat_input_paths,
    input_arguments,
    input_leaves,
    input_paths,
    source_key,
    source_problem,
    source_resolver,
    source_text,
)

__all__ = [
    "MAX_GUARDS", "MAX_GUARD_CHARS", "ATTR", "SPELLINGS", "SourceKey", "guards_from_code", "guards_to_code",
    "canonical_guards", "source_key", "source_text", "guard_texts", "input_paths", "flat_input_paths",
    "STRICT_FLAT_ARGS", "source_resolver", "input_arguments", "input_leaves", "source_problem", "failing_guard",
]
