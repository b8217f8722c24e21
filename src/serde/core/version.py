"""Schema version. Keep in step with the header of ``schema.thrift``.

The version history (date, what changed, compatibility) is kept in one place: the header of
``schema.thrift``, where `pt2serde schema check` requires a line for the current version.
"""

from __future__ import annotations

__all__ = ["SCHEMA_VERSION", "MIN_SUPPORTED", "FORMAT_VERSION"]

SCHEMA_VERSION: tuple[int, int] = (2, 5)
# Oldest schema version this reader still loads (through upgraders/).
MIN_SUPPORTED: tuple[int, int] = (1, 0)
# Version of the archive layout (zip members, manifest); independent of the schema.
# 2 adds extra/<name> members (written as 1 when there are none); 3 holds several programs under
# programs/<name>/ (written only for those).
FORMAT_VERSION: int = 3
