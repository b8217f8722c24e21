"""Operator schema snapshots: one frozen file per supported torch release, read without torch.

A snapshot (``torch-<major>.<minor>.json`` in this package, written by ``python -m
serde.dev.opsnapshot``) holds every operator schema of that release as torch prints it, one per line,
sorted, plus the higher-order ops pt2serde allows that the release defines. The schema text is the
whole contract an artifact's call relies on (argument names, types with alias and write
annotations, defaults, which arguments are keyword-only, returns), so parsing it here needs no torch.

A release is named by its ``(major, minor)``: patch releases do not change operator schemas, and the
file records which patch release it was taken from.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from importlib import resources

from serde.core.version import torch_release
from serde.errors import SerializeError

__all__ = ["Arg", "OpSchema", "Schemas", "Snapshot", "Release", "release_of", "release_text", "parse_schema",
           "snapshot_releases", "load_snapshot", "parse_snapshot", "op_key", "target_key",
           "UnknownReleaseError"]

Release = tuple[int, int]

_SNAPSHOT = re.compile(r"torch-(\d+)\.(\d+)\.json\Z")
_OP_TARGET = re.compile(r"torch\.ops\.([A-Za-z_][A-Za-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*)\Z")


class UnknownReleaseError(SerializeError):
    """A torch release was asked for that has no operator snapshot (or is not a version at all)."""


@dataclass(frozen=True)
class Arg:
    """One argument (or return) of a schema: ``type`` keeps alias annotations (``Tensor(a!)``)."""

    name: str
    type: str
    default: str | None = None
    kwarg_only: bool = False

    def text(self) -> str:
        out = f"{self.type} {self.name}".rstrip()
        return out if self.default is None else f"{out}={self.default}"


@dataclass(frozen=True)
class OpSchema:
    """A parsed operator schema; ``key`` is ``ns::name.overload`` (``default`` for the empty overload)."""

    qualname: str
    overload: str
    args: tuple[Arg, ...]
    returns: tuple[Arg, ...]
    text: str

    @property
    def key(self) -> str:
        return op_key(self.qualname, self.overload)

    def arg(self, name: str) -> Arg | None:
        return next((a for a in self.args if a.name == name), None)


class Schemas(Mapping):
    """key -> :class:`OpSchema`, each parsed when first asked for (a release has over 4,000, and a
    program uses a few dozen); ``texts`` holds the schema text of every key."""

    def __init__(self, texts: dict[str, str]) -> None:
        self.texts = texts
        self._parsed: dict[str, OpSchema] = {}

    def __getitem__(self, key: str) -> OpSchema:
        s = self._parsed.get(key)
        if s is None:
            s = self._parsed[key] = parse_schema(self.texts[key])
        return s

    def __contains__(self, key: object) -> bool:
        return key in self.texts

    def __iter__(self) -> Iterator[str]:
        return iter(self.texts)

    def __len__(self) -> int:
        return len(self.texts)


@dataclass(frozen=True)
class Snapshot:
    """The operators of one torch release."""

    release: Release
    torch_version: str           # the exact release it was taken from, e.g. "2.14.1"
    build: str                   # "cpu", "cu130", ...: CUDA builds register a few more namespaces
    ops: Schemas                 # key -> schema
    higher_order_ops: frozenset[str]


def op_key(qualname: str, overload: str) -> str:
    return f"{qualname}.{overload or 'default'}"


def target_key(target: str) -> str | None:
    """``torch.ops.aten.add.Tensor`` -> ``aten::add.Tensor``; None for anything else."""
    m = _OP_TARGET.match(target)
    return None if m is None else f"{m.group(1)}::{m.group(2)}.{m.group(3)}"


def release_of(version: str) -> Release | None:
    """``"2.14.1+cu130"`` -> ``(2, 14)``; None when the text does not start with a version."""
    return torch_release(version)


def release_text(release: Release) -> str:
    return f"{release[0]}.{release[1]}"


@functools.cache
def snapshot_releases() -> tuple[Release, ...]:
    """The releases with a committed snapshot, oldest first."""
    found = []
    for entry in resources.files(__package__).iterdir():
        m = _SNAPSHOT.match(entry.name)
        if m:
            found.append((int(m.group(1)), int(m.group(2))))
    return tuple(sorted(found))


@functools.cache
def load_snapshot(release: Release) -> Snapshot:
    """The committed snapshot of ``release``.

    Raises:
        UnknownReleaseError: there is none (names the releases there are).
    """
    if release not in snapshot_releases():
        raise UnknownReleaseError(
            f"no operator snapshot for torch {release_text(release)}; pt2serde has snapshots for "
            f"{', '.join(release_text(r) for r in snapshot_releases())}")
    text = resources.files(__package__).joinpath(f"torch-{release_text(release)}.json").read_text("utf-8")
    return parse_snapshot(text)


def parse_snapshot(text: str) -> Snapshot:
    doc = json.loads(text)
    release = release_of(doc["torch"])
    if release is None:
        raise UnknownReleaseError(f"operator snapshot names torch {doc['torch']!r}, which is not a version")
    texts = {}
    for line in doc["schemas"]:
        qualname, _, overload = line[:line.index("(")].partition(".")
        texts[op_key(qualname, overload)] = line
    return Snapshot(release, doc["torch"], doc.get("build", ""), Schemas(texts), frozenset(doc["higher_order_ops"]))


def parse_schema(text: str) -> OpSchema:
    """Parse a schema as torch prints it: ``ns::name[.overload](args) -> returns``."""
    open_at = text.index("(")
    name = text[:open_at]
    close_at = _matching(text, open_at)
    qualname, _, overload = name.partition(".")
    args, kwarg_only = [], False
    for part in _split(text[open_at + 1:close_at]):
        if part == "*":
            kwarg_only = True
            continue
        args.append(_arg(part, kwarg_only))
    rest = text[close_at + 1:].strip()
    if not rest.startswith("->"):
        raise ValueError(f"schema without returns: {text!r}")
    ret = rest[2:].strip()
    if ret.startswith("(") and _matching(ret, 0) == len(ret) - 1:
        returns = tuple(_arg(p, False) for p in _split(ret[1:-1]))
    else:
        returns = (_arg(ret, False),)
    return OpSchema(qualname, overload, tuple(args), returns, text)


# --- helpers ---------------------------------------------------------------------------------


def _unquoted(text: str, start: int = 0) -> Iterator[tuple[int, str, int]]:
    """(index, character, bracket depth after it) of every character of ``text`` from ``start`` that
    is outside a quoted string; quotes and their contents are passed over."""
    depth, quote, escaped = 0, None, False
    for i in range(start, len(text)):
        c = text[i]
        if quote:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == quote:
                quote = None
            continue
        if c in "\"'":
            quote = c
            continue
        if c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        yield i, c, depth


def _matching(text: str, at: int) -> int:
    """Index of the bracket closing the one at ``at`` (quotes respected)."""
    for i, c, depth in _unquoted(text, at):
        if c in ")]" and depth == 0:
            return i
    raise ValueError(f"unbalanced brackets in schema {text!r}")


def _split(text: str, sep: str = ",") -> list[str]:
    """``text`` split at top-level ``sep`` (outside brackets and quotes), parts stripped."""
    parts, start = [], 0
    for i, c, depth in _unquoted(text):
        if c == sep and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    last = text[start:].strip()
    if last or parts:
        parts.append(last)
    return parts


def _arg(text: str, kwarg_only: bool) -> Arg:
    eq = _split(text, "=")
    decl, default = (eq[0], "=".join(eq[1:])) if len(eq) > 1 else (text, None)
    words = _split(decl, " ")
    words = [w for w in words if w]
    # A return may be unnamed ("Tensor"); an annotation may hold spaces ("Tensor(a -> *)"), which
    # _split keeps inside its brackets.
    if len(words) == 1 or decl == "...":
        return Arg("", decl, default, kwarg_only)
    return Arg(words[-1], " ".join(words[:-1]), default, kwarg_only)
