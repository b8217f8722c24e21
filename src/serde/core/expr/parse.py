"""Expression text to trees: our own tokenizer and parser of size-expression text.

Artifacts are untrusted, so expression text is never handed to ``sympify`` or ``eval``. The
grammar is a small Python-like subset (numbers, symbol names, ``+ - * / // % **``, comparisons,
``& | ~``, parentheses, ``True``/``False``/``oo``/``int_oo``, and calls to an explicit allow-list
of function names, :data:`.tree.FUNCS`); anything else is an error that names the column.
"""

from __future__ import annotations

import keyword
import math
import re
from typing import Any

from serde.errors import MalformedArtifactError, UnsafeArtifactError

from .text import ADD, AND, CMP, MUL, OR, render
from .tree import (
    COEFF_LEAVES,
    CONSTANTS,
    FLATTEN,
    FUNCS,
    MAX_CALL_ARGS,
    MAX_EXPR_CHARS,
    MAX_EXPR_DEPTH,
    PARSE_ALIASES,
    ExprTree,
    snippet,
)

__all__ = ["parse_to_tree", "Parser"]

_CMP_OPS = {"<": "Lt", "<=": "Le", ">": "Gt", ">=": "Ge", "==": "Eq", "!=": "Ne"}
_BIN_PREC = {"|": OR, "&": AND, "+": ADD, "-": ADD, "*": MUL, "/": MUL, "//": MUL,
             "%": MUL, **{op: CMP for op in _CMP_OPS}}


_TOKEN_RE = re.compile(
    r"(?P<ws>[ \t]+)"
    r"|(?P<float>(?:\d+\.\d*|\.\d+)(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)"
    r"|(?P<int>\d+)"
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<op>\*\*|//|<=|>=|==|!=|[-+*/%<>&|~(),])"
)
# Characters that only make sense as code: reported as unsafe rather than merely malformed.
_UNSAFE_CHARS = {
    "'": "a string literal", '"': "a string literal", ".": "attribute access",
    "[": "a subscript", "]": "a subscript", ":": "a lambda or slice", ";": "a statement separator",
    "=": "an assignment", "@": "a decorator or matmul", "{": "a dict or set", "}": "a dict or set",
    "\\": "a line continuation", "#": "a comment", "`": "a backtick",
}


def parse_to_tree(text: str, *, where: str) -> ExprTree:
    """Parse expression text into a canonical tree (children of commutative nodes sorted).

    ``parse_to_tree(tree_to_str(t)) == t`` for every tree :func:`sympy_to_tree` returns.

    Raises:
        MalformedArtifactError: bad syntax, too long, too deep, wrong arity, bad values.
        UnsafeArtifactError: code-like input (strings, attributes, dunders, unknown calls, ...).
    """
    return render(Parser(text, where).parse(), where, 0).tree


class Parser:
    """Precedence-climbing parser producing a raw tree (flattened, not yet sorted)."""

    def __init__(self, text: Any, where: str):
        self.where = where
        if not isinstance(text, str):
            raise MalformedArtifactError(
                f"{where}: symbolic expression must be a string, got {type(text).__name__}. "
                "The artifact is damaged or was written by an incompatible tool."
            )
        if len(text) > MAX_EXPR_CHARS:
            raise MalformedArtifactError(
                f"{where}: symbolic expression is {len(text)} characters long; the limit is "
                f"{MAX_EXPR_CHARS}. The artifact is damaged or hostile."
            )
        self.text = text
        self.toks = self._tokenize(text)
        self.i = 0
        self.depth = 0

    # errors -------------------------------------------------------------------------------
    def _fail(self, msg: str, col: int, exc: type[Exception] = MalformedArtifactError) -> None:
        fix = (
            "Refusing to load it: expressions may only use numbers, symbol names, arithmetic, "
            "comparisons and allow-listed functions."
            if exc is UnsafeArtifactError
            else "The artifact is damaged or was written by an incompatible tool."
        )
        raise exc(f"{self.where}: symbolic expression {snippet(self.text)}: {msg} at column {col + 1}. {fix}")

    def _tokenize(self, text: str) -> list[tuple[str, str, int]]:
        toks: list[tuple[str, str, int]] = []
        pos = 0
        n = len(text)
        while pos < n:
            m = _TOKEN_RE.match(text, pos)
            if m is None:
                ch = text[pos]
                if ch in _UNSAFE_CHARS:
                    self._fail(f"{_UNSAFE_CHARS[ch]} ({ch!r}) is not allowed", pos, UnsafeArtifactError)
                self._fail(f"unexpected character {ch!r}", pos)
            kind = m.lastgroup
            if kind != "ws":
                toks.append((kind, m.group(), pos))
            pos = m.end()
        toks.append(("end", "", n))
        return toks

    # cursor ----------------------------------------------------------------------------------
    def _peek(self) -> tuple[str, str, int]:
        return self.toks[self.i]

    def _next(self) -> tuple[str, str, int]:
        tok = self.toks[self.i]
        self.i += 1
        return tok

    def _expect(self, value: str) -> None:
        kind, val, col = self._next()
        if val != value or kind != "op":
            self._fail(f"expected {value!r}, found {_describe(kind, val)}", col)

    def _enter(self, col: int) -> None:
        self.depth += 1
        if self.depth > MAX_EXPR_DEPTH:
            self._fail(f"nesting is deeper than {MAX_EXPR_DEPTH}", col)

    # grammar ---------------------------------------------------------------------------------
    def parse(self) -> ExprTree:
        tree = self._expr(CMP)
        kind, val, col = self._peek()
        if kind != "end":
            self._fail(f"unexpected {_describe(kind, val)}", col)
        return tree

    def _expr(self, min_prec: int) -> ExprTree:
        left = self._unary()
        saw_cmp = False
        while True:
            kind, op, col = self._peek()
            prec = _BIN_PREC.get(op) if kind == "op" else None
            if prec is None or prec < min_prec:
                return left
            if prec == CMP:
                if saw_cmp:  # Python would chain `a < b < c`; we refuse rather than guess.
                    self._fail("chained comparisons are not supported; use And(...)", col)
                saw_cmp = True
            self._next()
            self._enter(col)
            right = self._expr(prec + 1)
            self.depth -= 1
            left = self._binary(op, left, right, col)

    def _binary(self, op: str, a: ExprTree, b: ExprTree, col: int) -> ExprTree:
        if op in _CMP_OPS:
            return (_CMP_OPS[op], a, b)
        if op == "+":
            return _flat("Add", a, b)
        if op == "-":
            return _flat("Add", a, _neg(b))
        if op == "*":
            return _flat("Mul", a, b)
        if op == "/":
            if a[0] == "Integer" and b[0] == "Integer":
                if b[1] == 0:
                    self._fail("division by zero", col)
                return _rational(a[1], b[1])
            return _flat("Mul", a, ("Pow", b, ("Integer", -1)))
        if op == "//":
            return ("FloorDiv", a, b)
        if op == "%":
            return ("PythonMod", a, b)  # Python's `%` takes the divisor's sign, as PythonMod does
        if op == "&":
            return _flat("And", a, b)
        return _flat("Or", a, b)

    def _unary(self) -> ExprTree:
        prefixes: list[tuple[str, int]] = []
        while True:
            kind, val, col = self._peek()
            if kind == "op" and val in ("-", "+", "~"):
                self._next()
                self._enter(col)
                prefixes.append((val, col))
            else:
                break
        node = self._primary()
        kind, val, col = self._peek()
        if kind == "op" and val == "**":  # binds tighter than a unary prefix: -a**b == -(a**b)
            self._next()
            self._enter(col)
            node = ("Pow", node, self._unary())
            self.depth -= 1
        for val, _col in reversed(prefixes):
            self.depth -= 1
            if val == "-":
                node = _neg(node)
            elif val == "~":
                node = ("Not", node)
        return node

    def _primary(self) -> ExprTree:
        kind, val, col = self._next()
        if kind == "int":
            try:
                return ("Integer", int(val))
            except ValueError:  # beyond sys.int_max_str_digits
                self._fail(f"integer literal of {len(val)} digits is too long", col)
        if kind == "float":
            f = float(val)
            if not math.isfinite(f):
                self._fail(f"float literal {val!r} overflows a double; write oo for infinity", col)
            return ("Float", repr(f))
        if kind == "name":
            return self._name(val, col)
        if kind == "op" and val == "(":
            self._enter(col)
            inner = self._expr(CMP)
            self._expect(")")
            self.depth -= 1
            return inner
        self._fail(f"expected a number, symbol or '(', found {_describe(kind, val)}", col)
        raise AssertionError("unreachable")

    def _pair(self) -> ExprTree:
        """A Piecewise argument: ``(expr, cond)``. Pairs exist nowhere else in the grammar."""
        col = self._peek()[2]
        self._expect("(")
        self._enter(col)
        e = self._expr(CMP)
        self._expect(",")
        c = self._expr(CMP)
        self._expect(")")
        self.depth -= 1
        return ("ExprCondPair", e, c)

    def _name(self, name: str, col: int) -> ExprTree:
        is_call = self._peek()[1] == "(" and self._peek()[0] == "op"
        if "__" in name:
            self._fail(f"name {name!r} contains a double underscore", col, UnsafeArtifactError)
        if keyword.iskeyword(name) and name not in ("True", "False"):
            self._fail(f"Python keyword {name!r} is not allowed", col, UnsafeArtifactError)
        if not is_call:
            if name in CONSTANTS:
                return (name,)
            if name in FUNCS or name in PARSE_ALIASES:
                self._fail(f"function name {name!r} used without arguments", col)
            return ("Symbol", name)
        if name not in FUNCS and name not in PARSE_ALIASES:
            self._fail(f"call to {name!r}, which is not an allow-listed function", col, UnsafeArtifactError)
        self._next()  # "("
        self._enter(col)
        args: list[ExprTree] = []
        if not (self._peek()[0] == "op" and self._peek()[1] == ")"):
            while True:
                args.append(self._pair() if name == "Piecewise" else self._expr(CMP))
                if len(args) > MAX_CALL_ARGS:
                    self._fail(f"{name}() has more than {MAX_CALL_ARGS} arguments", col)
                kind, val, c = self._peek()
                if kind == "op" and val == ",":
                    self._next()
                    continue
                break
        self._expect(")")
        self.depth -= 1
        if name == "sqrt":
            lo = hi = 1
        else:
            lo, hi = FUNCS[name]
        if len(args) < lo or (hi is not None and len(args) > hi):
            want = str(lo) if lo == hi else f"at least {lo}" if hi is None else f"{lo}..{hi}"
            self._fail(f"{name}() takes {want} argument(s), got {len(args)}", col)
        if name == "sqrt":
            return ("Pow", args[0], ("Rational", 1, 2))
        if name in FLATTEN:
            return _flat(name, *args)
        return (name, *args)


def _describe(kind: str, val: str) -> str:
    return "end of text" if kind == "end" else repr(val)


def _rational(p: int, q: int) -> ExprTree:
    if q < 0:
        p, q = -p, -q
    g = math.gcd(p, q)
    p, q = p // g, q // g
    return ("Integer", p) if q == 1 else ("Rational", p, q)


def _flat(op: str, *args: ExprTree) -> ExprTree:
    out: list[ExprTree] = []
    for a in args:
        if a[0] == op:
            out.extend(a[1:])
        else:
            out.append(a)
    return (op, *out)


_NEG_CONST = {"oo": "-oo", "-oo": "oo", "int_oo": "-int_oo", "-int_oo": "int_oo", "nan": "nan",
              "zoo": "zoo"}


def _neg(node: ExprTree) -> ExprTree:
    """``-node``, spelled the way the printer spells negative terms (so printing inverts it)."""
    op = node[0]
    if op == "Integer":
        return ("Integer", -node[1])
    if op == "Rational":
        return ("Rational", -node[1], node[2])
    if op == "Float":
        text = node[1]
        return ("Float", text[1:] if text.startswith("-") else "-" + text)
    if op in _NEG_CONST:
        return (_NEG_CONST[op],)
    if op == "Mul":
        first, rest = node[1], node[2:]
        if (first[0] in COEFF_LEAVES or first[0] in _NEG_CONST) and rest:
            coeff = _neg(first)
            if coeff == ("Integer", 1):
                return rest[0] if len(rest) == 1 else ("Mul", *rest)
            return ("Mul", coeff, *rest)
        return ("Mul", ("Integer", -1), *node[1:])
    return ("Mul", ("Integer", -1), node)
