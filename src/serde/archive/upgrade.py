"""Upgrader runner: bring decoded artifact documents from an old schema version to the current one.

Steps live in the top-level ``upgraders`` package, one module per major step, ``v{N}_to_v{N+1}.py``,
each defining ``FROM = (N, x)`` (the last N.x it reads), ``TO = (N+1, 0)``, ``DATE``, ``SUMMARY``
and a pure ``upgrade(docs) -> docs`` on plain JSON dicts. Steps are found by name in that package
only; nothing else is ever imported. Minor versions need no step: within a major, new fields are
optional and readers ignore unknown ones.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from types import ModuleType
from typing import Any

from serde.core import version as _version
from serde.errors import MalformedArtifactError, SchemaVersionError, SerializeError, UpgradeError

__all__ = [
    "PACKAGE",
    "upgrade_documents",
    "check_readable",
    "document_version",
    "step_name",
    "load_step",
    "available_steps",
]

PACKAGE = "upgraders"
_STEP_RE = re.compile(r"v(\d+)_to_v(\d+)")


def check_readable(version: tuple[int, int]) -> None:
    """Raise SchemaVersionError unless this reader loads ``version`` (MIN_SUPPORTED .. current major).

    A newer minor of the current major is readable (unknown optional fields are ignored).
    """
    _check_window(tuple(version), _version.SCHEMA_VERSION, _version.MIN_SUPPORTED)


def upgrade_documents(
    docs: dict[str, Any],
    from_version: tuple[int, int],
    to_version: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """Run the upgrader steps that take ``docs`` from ``from_version`` to ``to_version``.

    Args:
        docs: the artifact's decoded JSON documents, e.g. ``{"program": {...}, "weights": {...}}``.
            Not modified.
        from_version: the schema version the artifact was written with.
        to_version: the target (default: the current ``SCHEMA_VERSION``).

    Returns:
        New documents. When ``from_version`` is older than ``to_version``, every document that has a
        ``schema_version`` field says ``to_version`` afterwards; a same-major newer or equal version is
        returned as an unchanged copy (the reader ignores fields it does not know).

    Raises:
        SchemaVersionError: ``from_version`` is outside MIN_SUPPORTED .. ``to_version``'s major.
        UpgradeError: a step module is missing, malformed or fails.
    """
    src = _as_version(from_version, "from_version")
    dst = _as_version(to_version if to_version is not None else _version.SCHEMA_VERSION, "to_version")
    _check_window(src, dst, _version.MIN_SUPPORTED)
    out = dict(docs)
    if src >= dst:
        return out
    for major in range(src[0], dst[0]):
        step = load_step(major)
        if major == src[0] and src[1] > step.FROM[1]:
            raise UpgradeError(
                f"{PACKAGE}/{step_name(major)}.py reads up to {_fmt(step.FROM)}, but the artifact is "
                f"{_fmt(src)}; extend the step to cover {_fmt(src)}"
            )
        out = _run_step(step, major, out)
    for key, doc in out.items():
        if isinstance(doc, dict) and "schema_version" in doc:
            out[key] = {**doc, "schema_version": {"major": dst[0], "minor": dst[1]}}
    return out


def document_version(doc: Any, *, where: str = "program.json") -> tuple[int, int]:
    """The ``schema_version`` of a decoded document, checked. Raises MalformedArtifactError."""
    sv = doc.get("schema_version") if isinstance(doc, dict) else None
    if not isinstance(sv, dict):
        raise MalformedArtifactError(f"{where}: no schema_version object; the file is not a pt2serde document")
    major, minor = sv.get("major"), sv.get("minor")
    for name, v in (("major", major), ("minor", minor)):
        if type(v) is not int or v < 0:
            raise MalformedArtifactError(
                f"{where}: schema_version.{name} must be a non-negative integer, got {v!r}"
            )
    return major, minor


def step_name(major: int) -> str:
    """Module name of the step from ``major`` to ``major + 1``."""
    return f"v{major}_to_v{major + 1}"


def load_step(major: int) -> ModuleType:
    """Import and validate the step ``upgraders/v{major}_to_v{major+1}.py``."""
    name = step_name(major)
    modname = f"{PACKAGE}.{name}"
    try:
        mod = importlib.import_module(modname)
    except ModuleNotFoundError as e:
        # Only a missing step is "missing"; an import error inside the step is a broken step.
        if e.name not in (modname, PACKAGE):
            raise UpgradeError(f"{PACKAGE}/{name}.py failed to import: {e}") from e
        raise UpgradeError(
            f"no upgrader step {PACKAGE}/{name}.py: cannot upgrade schema {major}.x to {major + 1}.0. "
            f"Write the step (FROM, TO, DATE, SUMMARY, upgrade) or use a pt2serde release that has it"
        ) from None
    except SerializeError:
        raise
    except Exception as e:
        raise UpgradeError(f"{PACKAGE}/{name}.py failed to import: {type(e).__name__}: {e}") from e
    _validate_step(mod, major)
    return mod


def available_steps() -> list[str]:
    """Names of the step modules present in the ``upgraders`` package, in chain order."""
    pkg = importlib.import_module(PACKAGE)
    found = []
    for info in pkgutil.iter_modules(pkg.__path__):
        m = _STEP_RE.fullmatch(info.name)
        if m is not None:
            found.append((int(m.group(1)), info.name))
    return [name for _, name in sorted(found)]


# ---------------------------------------------------------------- private


def _check_window(v: tuple[int, int], current: tuple[int, int], oldest: tuple[int, int]) -> None:
    if v[0] > current[0]:
        raise SchemaVersionError(
            f"the artifact uses schema {_fmt(v)}, newer than this pt2serde reads "
            f"({_fmt(current)}); upgrade pt2serde to read it"
        )
    if v < oldest:
        raise SchemaVersionError(
            f"the artifact uses schema {_fmt(v)}, older than the oldest this pt2serde reads "
            f"({_fmt(oldest)}); upgrade it with an older pt2serde (`pt2serde upgrade IN OUT`) first"
        )


def _validate_step(mod: ModuleType, major: int) -> None:
    where = f"{PACKAGE}/{step_name(major)}.py"
    missing = [n for n in ("FROM", "TO", "DATE", "SUMMARY", "upgrade") if not hasattr(mod, n)]
    if missing:
        raise UpgradeError(f"{where} does not define {', '.join(missing)}")
    frm, to = mod.FROM, mod.TO
    if not (_is_version(frm) and frm[0] == major):
        raise UpgradeError(f"{where}: FROM must be ({major}, <last minor>), got {frm!r}")
    if not (_is_version(to) and to == (major + 1, 0)):
        raise UpgradeError(f"{where}: TO must be ({major + 1}, 0), got {to!r}")
    if not callable(mod.upgrade):
        raise UpgradeError(f"{where}: upgrade must be a function dict -> dict")


def _run_step(step: ModuleType, major: int, docs: dict[str, Any]) -> dict[str, Any]:
    where = f"{PACKAGE}/{step_name(major)}.py"
    try:
        out = step.upgrade(docs)
    except SerializeError:
        raise
    except Exception as e:
        # A step meets plain JSON from an untrusted file: any crash means a document it cannot read.
        raise UpgradeError(
            f"{where} failed ({type(e).__name__}: {e}); the artifact is damaged or the step has a bug"
        ) from e
    if not isinstance(out, dict):
        raise UpgradeError(f"{where}: upgrade() returned {type(out).__name__}, expected a dict of documents")
    return out


def _is_version(v: Any) -> bool:
    return (
        isinstance(v, tuple) and len(v) == 2
        and all(type(x) is int and x >= 0 for x in v)
    )


def _as_version(v: Any, what: str) -> tuple[int, int]:
    t = tuple(v) if isinstance(v, (tuple, list)) else v
    if not _is_version(t):
        raise SchemaVersionError(f"{what} must be a (major, minor) pair of non-negative ints, got {v!r}")
    return t


def _fmt(v: tuple[int, int]) -> str:
    return f"{v[0]}.{v[1]}"
