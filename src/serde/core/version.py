"""Schema version. Keep in step with the header of ``schema.thrift``.

The version history (date, what changed, compatibility) is kept in one place: the header of
``schema.thrift``, where `pt2serde schema check` requires a line for the current version.
"""

from __future__ import annotations

import re

__all__ = ["SCHEMA_VERSION", "MIN_SUPPORTED", "FORMAT_VERSION", "SUPPORTED_TORCH", "torch_release"]

SCHEMA_VERSION: tuple[int, int] = (2, 6)
# Oldest schema version this reader still loads (through upgraders/).
MIN_SUPPORTED: tuple[int, int] = (1, 0)
# Version of the archive layout (zip members, manifest); independent of the schema.
# 2 adds extra/<name> members (written as 1 when there are none); 3 holds several programs under
# programs/<name>/ (written only for those); 4 keeps some storages in safetensors files next to
# the archive (written only for those).
FORMAT_VERSION: int = 4

# The torch releases (major, minor) the whole test suite runs under, every patch release of each
# included (`make test` on the first, `make test-torch TORCH=<version>` on each other; CI runs
# both). Artifacts written under any of them load under every other, in both directions: see
# docs/compatibility.md, "Torch releases". Adding a release means its lane passes, its
# operator-schema snapshot is committed, and every operator change since the previous one has an
# upgrader or a listed refusal.
SUPPORTED_TORCH: tuple[tuple[int, int], ...] = ((2, 13), (2, 14))


_RELEASE = re.compile(r"(\d+)\.(\d+)")


def torch_release(version: str) -> tuple[int, int] | None:
    """``"2.14.1+cu130"`` -> ``(2, 14)``; None for anything that does not start with a version."""
    m = _RELEASE.match(version) if isinstance(version, str) else None
    return None if m is None else (int(m.group(1)), int(m.group(2)))
