"""Schema version. Keep in step with the header of ``schema.thrift``.

Version history (date, what changed, compatibility):
  1.0  2026-11-22  First release.
"""

from __future__ import annotations

__all__ = ["SCHEMA_VERSION", "MIN_SUPPORTED", "FORMAT_VERSION"]

SCHEMA_VERSION: tuple[int, int] = (1, 0)
# Oldest schema version this reader still loads (through upgraders/).
MIN_SUPPORTED: tuple[int, int] = (1, 0)
# Version of the archive layout (zip members, manifest); independent of the schema.
FORMAT_VERSION: int = 1
