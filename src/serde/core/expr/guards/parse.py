"""Guard text to ``schema.Expr``: an allow-list walk over :func:`ast.parse` (which only parses).

Sources get symbols ``g<i>`` in order of first appearance; :mod:`.code` numbers them in sorted
order. Anything outside the allow-list of :mod:`.grammar` is refused, naming the guard and why.
"""

from __future__ import annotations

import ast
import math
from typing import Any

from serde.errors import UnsupportedConstructError

from ... import schema
from ...errors import IntegerTooLargeError
from ...limits import DEFAULT_LIMITS, too_large
from ..stored import expr_to_tree
from ..tree import MAX_EXPR_DEPTH, clip, degree
from .grammar import (
    ALLOWED_CHARS,
    BINOPS,
    CALLS,
    CMPOPS,
    INT_LIMIT,
    MAX_GUARD_CHARS,
    MAX_INDEX,
    MAX_MIN_ARITY,
    MAX_PATH,
    MAX_SOURCES,
    NAMED_CONSTANTS,
    OPAQUE,
)
from .sources import ATTR, KEY_RE, SourceKey

__all__ = ["Parser"]

E = schema.Expr
P = schema.GuardProperty


class Parser:
    """Allow-list walk over ``ast.parse(..., mode="eval")``; sources get symbols in order of first
    appearance, which :func:`_number` puts in sorted-source order."""

    def __init__(self, where: str, *, stored: bool = False) -> None:
        """``stored``: the text is printed from a stored check (a load), not torch's (a save)."""
        self.where = where
        self.stored = stored
        self.sources: dict[SourceKey, str] = {}

    def guard(self, text: Any, where: str) -> schema.Expr:
        self.at = where
        if not isinstance(text, str):
            self._refuse(repr(text)[:80], f"a guard must be text, got {type(text).__name__}")
        if len(text) > MAX_GUARD_CHARS:
            self._refuse(text[:80] + "...", f"longer than {MAX_GUARD_CHARS} characters")
        if not ALLOWED_CHARS.match(text):
            bad = sorted({c for c in text if not ALLOWED_CHARS.match(c)})
            self._refuse(text, f"characters outside the guard grammar: {bad!r}")
        self.text = text
        try:
            tree = ast.parse(text.strip(), mode="eval")
        except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
            self._refuse(text, f"not a Python expression ({type(e).__name__})")
        expr = self._expr(tree.body, 0)
        if (d := degree(expr_to_tree(expr, where=where))) > _MAX_DEGREE:
            # (torch factors checks it simplifies: see Limits.max_degree)
            if self.stored:
                raise IntegerTooLargeError(too_large(where, f"the degree of the check {clip(text)!r}", d,
                                                     "max_degree", _MAX_DEGREE, per_load=False))
            self._refuse(text, f"its degree is {d}, more than Limits.max_degree={_MAX_DEGREE}")
        return expr

    def _refuse(self, text: str, why: str) -> Any:
        raise UnsupportedConstructError(
            f"{self.at}: cannot store guard {text!r}: {why}. pt2serde stores guards as expressions "
            "over input sizes, strides and values; export without this guard (e.g. other "
            "dynamic_shapes) or report the guard form."
        )

    def _expr(self, n: ast.AST, depth: int) -> schema.Expr:
        if depth > MAX_EXPR_DEPTH:
            self._refuse(self.text, f"nested deeper than {MAX_EXPR_DEPTH}")
        d = depth + 1
        src = self._source(n)
        if src is not None:
            # In order of first appearance; _number renames them into sorted-source order, which
            # is the identity whenever the two orders agree (one source, or sources met sorted).
            return E(symbol=self.sources.setdefault(src, f"g{len(self.sources)}"))
        if isinstance(n, ast.Constant):
            return self._constant(n.value)
        if isinstance(n, ast.BinOp) and type(n.op) in BINOPS:
            left, right = self._expr(n.left, d), self._expr(n.right, d)
            if isinstance(n.op, ast.Pow) and not _small_literal(right):
                # torch compiles the guard and runs it on every call: x ** <an input's size> could
                # take any time and memory there.
                self._refuse(self.text, f"the exponent of `{_snippet(n)}` is not a number from "
                                        f"-{_MAX_EXPONENT} to {_MAX_EXPONENT}")
            return E(**{BINOPS[type(n.op)]: [left, right]})
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Sub):
            return E(add=[self._expr(n.left, d), _negate(self._expr(n.right, d))])
        if isinstance(n, ast.UnaryOp):
            if isinstance(n.op, ast.USub):
                return _negate(self._expr(n.operand, d))
            if isinstance(n.op, ast.UAdd):
                return self._expr(n.operand, d)
            if isinstance(n.op, ast.Not):
                return E(logical_not=[self._expr(n.operand, d)])
        if isinstance(n, ast.BoolOp):
            member = "logical_and" if isinstance(n.op, ast.And) else "logical_or"
            return E(**{member: [self._expr(v, d) for v in n.values]})
        if isinstance(n, ast.Compare) and all(type(op) in CMPOPS for op in n.ops):
            operands = [self._expr(x, d) for x in (n.left, *n.comparators)]
            pairs = [E(**{CMPOPS[type(op)]: [operands[i], operands[i + 1]]}) for i, op in enumerate(n.ops)]
            return pairs[0] if len(pairs) == 1 else E(logical_and=pairs)
        if isinstance(n, ast.IfExp):
            return E(ite=[self._expr(n.test, d), self._expr(n.body, d), self._expr(n.orelse, d)])
        if isinstance(n, ast.Call):
            return self._call(n, d)
        if isinstance(n, ast.Attribute) and _dotted(n) in NAMED_CONSTANTS:
            return E(constant=NAMED_CONSTANTS[_dotted(n)])
        return self._refuse(self.text, f"{type(n).__name__} `{_snippet(n)}` is not allowed in a guard")

    def _constant(self, v: Any) -> schema.Expr:
        if isinstance(v, bool):
            return E(constant=schema.ExprConstant.TRUE if v else schema.ExprConstant.FALSE)
        if isinstance(v, int):
            if abs(v) >= INT_LIMIT:
                self._refuse(self.text, f"integer {v} does not fit in 64 bits")
            return E(integer=v)
        if isinstance(v, float) and math.isfinite(v):
            return E(floating=v)
        return self._refuse(self.text, f"constant {v!r} of type {type(v).__name__} is not allowed")

    def _call(self, n: ast.Call, d: int) -> schema.Expr:
        name = _dotted(n.func)
        if n.keywords or any(isinstance(a, ast.Starred) for a in n.args):
            self._refuse(self.text, f"call of {name or _snippet(n.func)} with keyword or starred arguments")
        args = [self._expr(a, d) for a in n.args] if name in CALLS or name in OPAQUE else []
        if name == "round" and len(args) == 2:
            return E(round_decimal=args)
        if name in CALLS:
            member, lo, hi = CALLS[name]
            if not lo <= len(args) <= hi:
                self._refuse(self.text, f"{name} takes {lo}..{hi} arguments, got {len(args)}")
            if member in ("max", "min"):
                # max(a, max(b, c)) is max(a, b, c): torch 2.14 nests what 2.13 writes flat
                args = [x for a in args for x in (getattr(a, member) if a.kind == member else [a])]
                if len(args) > MAX_MIN_ARITY:
                    self._refuse(self.text, f"{member} of more than {MAX_MIN_ARITY} arguments")
            return E(**{member: args})
        if name in OPAQUE and len(args) == 1:
            return E(opaque_unary=schema.OpaqueUnary(fn=OPAQUE[name], arg=args[0]))
        allowed = sorted([*CALLS, *OPAQUE])
        return self._refuse(self.text, f"call of `{_snippet(n.func)}` is not one of {allowed}")

    def _source(self, n: ast.AST) -> SourceKey | None:
        """``L[...]...[k]``, optionally ``.size()[i]``/``.stride()[i]``/``.storage_offset()``."""
        if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Call) and _method(n.value) in ("size", "stride"):
            dim = _int_key(n.slice)
            if dim is None:
                self._refuse(self.text, f"`{_snippet(n)}`: a dimension must be a non-negative integer")
            prop = P.SIZE if _method(n.value) == "size" else P.STRIDE
            return self._path(n.value.func.value), int(prop), dim
        if isinstance(n, ast.Call) and _method(n) == "storage_offset":
            return self._path(n.func.value), int(P.STORAGE_OFFSET), -1
        if isinstance(n, ast.Name) or (isinstance(n, (ast.Subscript, ast.Attribute)) and _rooted_at_l(n)):
            return self._path(n), int(P.VALUE), -1
        return None

    def _path(self, n: ast.AST) -> tuple[str | int, ...]:
        keys: list[str | int] = []
        while isinstance(n, (ast.Subscript, ast.Attribute)) and len(keys) <= MAX_PATH:
            if isinstance(n, ast.Attribute):  # a field of a dataclass or namedtuple input: .a
                if not KEY_RE.match(n.attr):
                    self._refuse(self.text, f"input attribute {n.attr!r} is not a plain identifier")
                keys.append(ATTR + n.attr)
                n = n.value
                continue
            k = _int_key(n.slice)
            if k is None and isinstance(n.slice, ast.Constant) and isinstance(n.slice.value, str):
                k = n.slice.value
                if not KEY_RE.match(k):
                    self._refuse(self.text, f"input key {k!r} is not a plain identifier")
            if k is None:
                self._refuse(self.text, f"`{_snippet(n)}`: an input key must be a name or an index")
            keys.append(k)
            n = n.value
        if not (isinstance(n, ast.Name) and n.id == "L"):
            self._refuse(self.text, f"`{_snippet(n)}` is not an input (inputs are L[<name>]...)")
        keys.reverse()
        if not keys or not isinstance(keys[0], str) or keys[0].startswith(ATTR) or len(keys) > MAX_PATH:
            self._refuse(self.text, f"an input path starts with a name and has 1..{MAX_PATH} keys")
        if len(self.sources) >= MAX_SOURCES:
            self._refuse(self.text, f"more than {MAX_SOURCES} distinct inputs")
        return tuple(keys)


_MAX_EXPONENT = DEFAULT_LIMITS.max_exponent  # as for stored size expressions
_MAX_DEGREE = DEFAULT_LIMITS.max_degree


def _small_literal(e: schema.Expr) -> bool:
    v = e.integer if e.kind == "integer" else schema.from_f64(e.floating) if e.kind == "floating" else None
    return v is not None and abs(v) <= _MAX_EXPONENT


def _negate(e: schema.Expr) -> schema.Expr:
    if e.kind == "integer" and e.integer != -INT_LIMIT:
        return E(integer=-e.integer)
    if e.kind == "floating":
        return E(floating=-e.floating)
    if e.kind == "constant" and e.constant == schema.ExprConstant.INFINITY:
        return E(constant=schema.ExprConstant.NEG_INFINITY)
    return E(mul=[E(integer=-1), e])


def _dotted(n: ast.AST) -> str | None:
    """``abs`` / ``math.floor`` / ``torch._sym_sqrt`` for a plain (dotted) name, else None."""
    if isinstance(n, ast.Name):
        return n.id
    if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name):
        return f"{n.value.id}.{n.attr}"
    return None


def _method(n: ast.Call) -> str | None:
    if isinstance(n.func, ast.Attribute) and not n.args and not n.keywords:
        return n.func.attr
    return None


def _rooted_at_l(n: ast.AST) -> bool:
    while isinstance(n, (ast.Subscript, ast.Attribute)):
        n = n.value
    return isinstance(n, ast.Name) and n.id == "L"


def _int_key(n: ast.AST) -> int | None:
    if isinstance(n, ast.Constant) and type(n.value) is int and 0 <= n.value < MAX_INDEX:
        return n.value
    return None


def _snippet(n: ast.AST) -> str:
    try:
        text = ast.unparse(n)
    except Exception:  # unparse of odd trees can fail; the message just gets vaguer
        text = type(n).__name__
    return clip(text)
