"""The names inside an archive: which members the format has, where each program's members and
the extra files live, and the checks every name passes before a byte of it is trusted.

A single-program archive holds ``manifest.json``, ``program.json``, ``weights.json``, optional
``debug.json``, payloads ``data/<sha256>`` and extra files ``extra/<name>``; a multi-program one
holds each program's JSON members under ``programs/<name>/`` instead of at the top.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from .errors import FIX, MissingMemberError, UnknownMemberError, UnsafeMemberNameError

__all__ = [
    "MANIFEST", "PROGRAM", "WEIGHTS", "DEBUG", "FORMAT_NAME", "EXTRA_PREFIX", "PROGRAMS_PREFIX", "PAYLOAD_PREFIX",
    "PROGRAM_NAME_RE", "SHA256_RE", "XXH3_RE", "payload_name", "extra_member", "program_member", "program_names",
    "check_program_name", "format_version", "check_required", "is_json_member", "check_name",
]

EXTRA_PREFIX = "extra/"
MANIFEST = "manifest.json"
PROGRAM = "program.json"
WEIGHTS = "weights.json"
DEBUG = "debug.json"
FORMAT_NAME = "pt2serde"

PROGRAMS_PREFIX = "programs/"
_JSON_MEMBERS = frozenset({MANIFEST, PROGRAM, WEIGHTS, DEBUG})
# A program's name in a multi-program archive: what a Python identifier may be, and short.
PROGRAM_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_PROGRAM_MEMBER_RE = re.compile(r"programs/([A-Za-z_][A-Za-z0-9_]{0,63})/(program|weights|debug)\.json")
PAYLOAD_PREFIX = "data/"
_PAYLOAD_RE = re.compile(r"data/[0-9a-f]{64}")
SHA256_RE = re.compile(r"[0-9a-f]{64}")  # a sha256 as the format writes it: 64 lowercase hex digits
XXH3_RE = re.compile(r"[0-9a-f]{32}")  # an XXH3-128 as the format writes it: 32 lowercase hex digits


def payload_name(sha256_hex: str) -> str:
    """Member name of a tensor payload whose bytes hash to ``sha256_hex``."""
    return f"data/{sha256_hex}"


_EXTRA_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,199}")


def extra_member(name: str, where: str) -> str:
    """Member name of the extra file ``name``; raises UnsafeMemberNameError for names that are not
    1 to 200 letters, digits, ``_``, ``-`` and ``.`` (not starting with a dot)."""
    if not isinstance(name, str) or not _EXTRA_NAME_RE.fullmatch(name):
        raise UnsafeMemberNameError(
            f"{where}: extra file name {name!r} must be 1 to 200 letters, digits, '_', '-' and '.', not "
            "starting with '.' (no directories); rename it"
        )
    return EXTRA_PREFIX + name


def program_member(program: str | None, member: str) -> str:
    """The member name of ``member`` (program.json, weights.json, debug.json) of one program: at the
    top for a single-program archive (``program`` None), under ``programs/<program>/`` otherwise."""
    return member if program is None else f"{PROGRAMS_PREFIX}{program}/{member}"


def program_names(names: Iterable[str]) -> list[str] | None:
    """The programs of a multi-program archive with these members, sorted; None for a single one."""
    found = sorted({m.group(1) for n in names if (m := _PROGRAM_MEMBER_RE.fullmatch(n))})
    return found or None


def check_program_name(name: object, where: str) -> str:
    """``name`` if it can name a program of a multi-program archive, else UnsafeMemberNameError."""
    if not isinstance(name, str) or not PROGRAM_NAME_RE.fullmatch(name):
        raise UnsafeMemberNameError(
            f"{where}: program name {name!r} must be a Python identifier of 1 to 64 ASCII letters, digits "
            "and '_'; rename it")
    return name


def format_version(names: Iterable[str]) -> int:
    names = list(names)
    if program_names(names):
        return 3
    return 2 if any(n.startswith(EXTRA_PREFIX) for n in names) else 1


def check_required(names: set[str], where: str) -> list[str] | None:
    """A single-program archive has program.json and weights.json at the top; a multi-program one
    has them under every ``programs/<name>/`` and none at the top. Returns the programs, as
    :func:`program_names` does."""
    programs = program_names(names)
    if programs is None:
        for req in (PROGRAM, WEIGHTS):
            if req not in names:
                raise MissingMemberError(f"{where} has no {req!r}; it is incomplete or not a pt2serde archive: {FIX}")
        return None
    if stray := sorted(names & {PROGRAM, WEIGHTS, DEBUG}):
        raise UnknownMemberError(f"{where}: {stray[0]} at the top of an archive with several programs "
                                 f"({', '.join(programs)}); each program's members live under programs/<name>/: {FIX}")
    for name in programs:
        for req in (PROGRAM, WEIGHTS):
            if program_member(name, req) not in names:
                raise MissingMemberError(f"{where}: program {name!r} has no {program_member(name, req)}; {FIX}")
    return programs


def is_json_member(name: str) -> bool:
    return name in _JSON_MEMBERS or _PROGRAM_MEMBER_RE.fullmatch(name) is not None


# A control character anywhere in a member name (one regex search instead of a loop over characters).
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")


def check_name(name: str, where: str) -> None:
    """Reject names that could escape a directory, then names the format does not define."""
    if name in _JSON_MEMBERS or _PAYLOAD_RE.fullmatch(name):
        return  # the names every program's archive has: fixed, or data/ and 64 hex digits, none can escape
    if (not name or name.startswith(("/", "\\")) or "\\" in name or ".." in name.split("/")
            or (len(name) > 1 and name[1] == ":") or _CONTROL_RE.search(name)):
        raise UnsafeMemberNameError(
            f"{where}: member name {name!r} could escape an extraction directory (absolute path, '..', "
            f"backslash or control character); the file is hostile or damaged: {FIX}"
        )
    if (not is_json_member(name) and not _PAYLOAD_RE.fullmatch(name)
            and not (name.startswith(EXTRA_PREFIX) and _EXTRA_NAME_RE.fullmatch(name[len(EXTRA_PREFIX):]))):
        raise UnknownMemberError(
            f"{where}: member name {name!r} is not part of the pt2serde format (expected manifest.json, "
            f"program.json, weights.json, debug.json, programs/<name>/<one of those three>, "
            f"data/<64 hex digits> or extra/<name>); {FIX}"
        )
