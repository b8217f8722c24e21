"""``schema.Expr`` to guard text: fully parenthesised Python, as torch writes guards.

Only the members the parser produces are printed; anything else is refused as malformed, so the
text that torch compiles never holds more than the allow-list (and is re-parsed before it does).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

from serde.errors import MalformedArtifactError

from ... import schema
from ..tree import MAX_EXPR_DEPTH
from .grammar import (
    BINARY_ONLY,
    CALL_TEXT,
    CALLS,
    CONSTANT_TEXT,
    INFIX,
    MAX_MIN_ARITY,
    MAX_MIN_TEXT,
    OPAQUE_TEXT,
)
from .sources import source_names

__all__ = ["Printer", "printed_checks"]


def printed_checks(g: schema.InputGuards, where: str, spelling: str = "builtin") -> Iterator[tuple[str, str]]:
    """(location, printed Python text) of every check, in stored order."""
    names = source_names(g, where)
    for i, e in enumerate(g.checks):
        w = f"{where}.checks[{i}]"
        yield w, Printer(names, w, spelling).expr(e, 0)


class Printer:
    """Fully parenthesised Python text; only Expr members the parser produces are accepted.
    ``spelling`` is one of SPELLINGS: how max and min are printed."""

    def __init__(self, names: Mapping[str, str], where: str, spelling: str = "builtin") -> None:
        self.names, self.where = names, where
        self.max_min = MAX_MIN_TEXT[spelling]
        self.fold = spelling == "sym"

    def expr(self, e: schema.Expr, depth: int) -> str:
        if depth > MAX_EXPR_DEPTH:
            raise MalformedArtifactError(f"{self.where}: expression nested deeper than {MAX_EXPR_DEPTH}")
        d = depth + 1
        kind = e.kind
        v = getattr(e, kind)  # (e.value would find the kind again)
        if kind == "symbol":
            if v not in self.names:
                raise MalformedArtifactError(f"{self.where}: symbol {v!r} is not in guards.sources")
            return self.names[v]
        if kind == "integer":
            return str(v) if v >= 0 else f"({v})"
        if kind == "floating":
            x = schema.from_f64(v)
            if not math.isfinite(x):
                raise MalformedArtifactError(f"{self.where}: non-finite float {v!r}; use a constant")
            return repr(x) if x >= 0 else f"({x!r})"
        if kind == "constant":
            if v not in CONSTANT_TEXT:
                raise MalformedArtifactError(f"{self.where}: constant {v.name} does not occur in guards")
            return CONSTANT_TEXT[v]
        if kind == "opaque_unary":
            if v.fn not in OPAQUE_TEXT:
                raise MalformedArtifactError(f"{self.where}: function {v.fn!r} does not occur in guards")
            return f"{OPAQUE_TEXT[v.fn]}({self.expr(v.arg, d)})"
        if kind in INFIX:
            if len(v) < 2 or (kind in BINARY_ONLY and len(v) != 2):
                raise MalformedArtifactError(f"{self.where}: {kind} with {len(v)} operands")
            if kind == "add":
                return "(" + "".join(self._term(x, i, d) for i, x in enumerate(v)) + ")"
            return "(" + INFIX[kind].join(self.expr(x, d) for x in v) + ")"
        if kind == "logical_not" and len(v) == 1:
            return f"(not {self.expr(v[0], d)})"
        if kind == "ite" and len(v) == 3:
            return f"({self.expr(v[1], d)} if {self.expr(v[0], d)} else {self.expr(v[2], d)})"
        if kind == "round_decimal" and len(v) == 2:
            return f"round({self.expr(v[0], d)}, {self.expr(v[1], d)})"
        if kind in self.max_min and 2 <= len(v) <= MAX_MIN_ARITY:
            fn = self.max_min[kind]
            args = [self.expr(x, d) for x in v]
            if not self.fold:
                return f"{fn}({', '.join(args)})"
            text = args[-1]
            for a in reversed(args[:-1]):  # as torch 2.14 folds an n-ary Max into binary calls
                text = f"{fn}({a}, {text})"
            return text
        if kind in CALL_TEXT:
            _, lo, hi = CALLS[CALL_TEXT[kind]]
            if lo <= len(v) <= hi:
                return f"{CALL_TEXT[kind]}({', '.join(self.expr(x, d) for x in v)})"
        raise MalformedArtifactError(f"{self.where}: expression member {kind!r} (arity {_arity(v)}) "
                                     "does not occur in guards")

    def _term(self, x: schema.Expr, i: int, d: int) -> str:
        """Terms of a sum; ``-1 * t`` prints as ``- t`` so guards read like torch's."""
        if x.mul is not None and len(x.mul) == 2 and x.mul[0].integer == -1:
            return ("-" if i == 0 else " - ") + self.expr(x.mul[1], d)
        return ("" if i == 0 else " + ") + self.expr(x, d)


def _arity(v: Any) -> int | str:
    return len(v) if isinstance(v, list) else "-"
