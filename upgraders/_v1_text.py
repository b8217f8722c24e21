"""Schema 1.x expression text, frozen: read what the 1.x writer printed back into tuple trees.

A frozen copy on purpose, not an import of ``serde.core.expr``: an upgrader step is a pure
function fixed at its release, so later changes to the live grammar cannot change what a 1.x
artifact becomes. It reads only the language the 1.x printer wrote: integers, floats, symbol
names, the constants, ``+ - * / **``, ``< <= > >=``, ``& | ~``, parentheses, and calls to the
functions allow-listed in 1.0 (``Piecewise`` with ``(expr, cond)`` pairs). That printer wrote
sympy's expressions in canonical order (children of commutative nodes sorted), so the trees come
out in canonical order as read, without re-sorting (a hand-written text may give another order of
the same meaning). The text is untrusted and never evaluated; anything else is an error naming
the column.

Trees: ``("Integer", n)``, ``("Rational", p, q)``, ``("Float", repr)``, ``("Symbol", name)``,
``(constant,)`` and ``(op, *children)``; ``-x`` is spelled as the printer spelled negative terms.
"""

from __future__ import annotations

import keyword
import math
import re

from serde.errors import MalformedArtifactError, UnsafeArtifactError

__all__ = ["MAX_EXPR_DEPTH", "parse"]

MAX_EXPR_CHARS = 64 * 1024
MAX_EXPR_DEPTH = 200
MAX_CALL_ARGS = 256

# call name -> (min args, max args or None), as allow-listed in 1.0
_CALLS: dict[str, tuple[int, int | None]] = {
    "FloorDiv": (2, 2), "ModularIndexing": (3, 3), "Where": (3, 3), "PythonMod": (2, 2),
    "Mod": (2, 2), "CleanDiv": (2, 2), "CeilToInt": (1, 1), "FloorToInt": (1, 1),
    "CeilDiv": (2, 2), "IntTrueDiv": (2, 2), "FloatTrueDiv": (2, 2), "LShift": (2, 2),
    "RShift": (2, 2), "IsNonOverlappingAndDenseIndicator": (0, None), "TruncToFloat": (1, 1),
    "TruncToInt": (1, 1), "RoundToInt": (1, 1), "RoundDecimal": (2, 2), "ToFloat": (1, 1),
    "FloatPow": (2, 2), "PowByNatural": (2, 2), "Identity": (1, 1), "Max": (1, None),
    "Min": (1, None),
    "BitwiseFn_bitwise_and": (2, 2), "BitwiseFn_bitwise_or": (2, 2), "BitwiseFn_bitwise_xor": (2, 2),
    "Add": (1, None), "Mul": (1, None), "Pow": (2, 2),
    "Eq": (2, 2), "Ne": (2, 2), "Lt": (2, 2), "Le": (2, 2), "Gt": (2, 2), "Ge": (2, 2),
    "And": (1, None), "Or": (1, None), "Not": (1, 1),
    "Abs": (1, 1), "floor": (1, 1), "ceiling": (1, 1), "Piecewise": (1, None), "ITE": (3, 3),
    **{f"OpaqueUnaryFn_{n}": (1, 1) for n in ("sqrt", "cos", "cosh", "sin", "sinh", "tan", "tanh",
                                                "asin", "acos", "atan", "exp", "log", "asinh", "log2")},
}
_FLATTEN = frozenset({"Add", "Mul", "And", "Or"})
_CONSTANTS = ("True", "False", "oo", "-oo", "int_oo", "-int_oo", "nan", "zoo")
_NEG_CONST = {"oo": "-oo", "-oo": "oo", "int_oo": "-int_oo", "-int_oo": "int_oo", "nan": "nan", "zoo": "zoo"}
_COEFFS = frozenset({"Integer", "Rational", "Float"})

# Python's precedence, lowest first.
_CMP, _OR, _AND, _ADD, _MUL = range(1, 6)
_CMP_OPS = {"<": "Lt", "<=": "Le", ">": "Gt", ">=": "Ge"}
_BIN_PREC = {"|": _OR, "&": _AND, "+": _ADD, "-": _ADD, "*": _MUL, "/": _MUL, **dict.fromkeys(_CMP_OPS, _CMP)}
_TOKEN_RE = re.compile(
    r"(?P<ws>[ \t]+)"
    r"|(?P<float>(?:\d+\.\d*|\.\d+)(?:[eE][+-]?\d+)?|\d+[eE][+-]?\d+)"
    r"|(?P<int>\d+)"
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<op>\*\*|<=|>=|[-+*/<>&|~(),])"
)
_UNSAFE_CHARS = frozenset("'\".[]:;=@{}\\#`")


def parse(text: object, *, where: str) -> tuple:
    """1.x expression text -> tuple tree.

    Raises:
        MalformedArtifactError: not text, too long, too deep, bad syntax or arity.
        UnsafeArtifactError: code-like input (quotes, attributes, dunders, unknown calls, ...).
    """
    return _Parser(text, where).parse()


class _Parser:
    def __init__(self, text: object, where: str):
        self.where = where
        if not isinstance(text, str):
            raise MalformedArtifactError(f"{where}: symbolic expression must be a string, got {type(text).__name__}")
        if len(text) > MAX_EXPR_CHARS:
            raise MalformedArtifactError(
                f"{where}: symbolic expression is {len(text)} characters long; the limit is {MAX_EXPR_CHARS}")
        self.text = text
        self.toks = self._tokenize(text)
        self.i = 0
        self.depth = 0

    def _fail(self, msg: str, col: int, exc: type[Exception] = MalformedArtifactError) -> None:
        snippet = repr(self.text if len(self.text) <= 80 else self.text[:77] + "...")
        raise exc(f"{self.where}: 1.x symbolic expression {snippet}: {msg} at column {col + 1}. "
                  "The artifact is damaged or was not written by pt2serde 1.x.")

    def _tokenize(self, text: str) -> list[tuple[str, str, int]]:
        toks, pos = [], 0
        while pos < len(text):
            m = _TOKEN_RE.match(text, pos)
            if m is None:
                ch = text[pos]
                self._fail(f"character {ch!r} is not allowed", pos,
                           UnsafeArtifactError if ch in _UNSAFE_CHARS else MalformedArtifactError)
            if m.lastgroup != "ws":
                toks.append((m.lastgroup, m.group(), pos))
            pos = m.end()
        toks.append(("end", "", len(text)))
        return toks

    def _peek(self) -> tuple[str, str, int]:
        return self.toks[self.i]

    def _next(self) -> tuple[str, str, int]:
        self.i += 1
        return self.toks[self.i - 1]

    def _is_op(self, value: str) -> bool:
        kind, val, _ = self._peek()
        return kind == "op" and val == value

    def _expect(self, value: str) -> None:
        kind, val, col = self._next()
        if kind != "op" or val != value:
            self._fail(f"expected {value!r}, found {val or 'end of text'!r}", col)

    def _enter(self, col: int) -> None:
        self.depth += 1
        if self.depth > MAX_EXPR_DEPTH:
            self._fail(f"nesting is deeper than {MAX_EXPR_DEPTH}", col)

    def parse(self) -> tuple:
        tree = self._expr(_CMP)
        kind, val, col = self._peek()
        if kind != "end":
            self._fail(f"unexpected {val!r}", col)
        return tree

    def _expr(self, min_prec: int) -> tuple:
        left = self._unary()
        saw_cmp = False
        while True:
            kind, op, col = self._peek()
            prec = _BIN_PREC.get(op) if kind == "op" else None
            if prec is None or prec < min_prec:
                return left
            if prec == _CMP:
                if saw_cmp:
                    self._fail("chained comparisons are not 1.x text", col)
                saw_cmp = True
            self._next()
            self._enter(col)
            right = self._expr(prec + 1)
            self.depth -= 1
            left = self._binary(op, left, right, col)

    def _binary(self, op: str, a: tuple, b: tuple, col: int) -> tuple:
        if op in _CMP_OPS:
            return (_CMP_OPS[op], a, b)
        if op == "/":  # the 1.x printer wrote only rationals with "/"
            if a[0] != "Integer" or b[0] != "Integer" or b[1] == 0:
                self._fail("'/' only between integer literals in 1.x text", col)
            return _rational(a[1], b[1])
        return _flat({"+": "Add", "-": "Add", "*": "Mul", "&": "And", "|": "Or"}[op], a, _neg(b) if op == "-" else b)

    def _unary(self) -> tuple:
        prefixes: list[str] = []
        while self._peek()[0] == "op" and self._peek()[1] in ("-", "~"):
            _, val, col = self._next()
            self._enter(col)
            prefixes.append(val)
        node = self._primary()
        if self._is_op("**"):  # binds tighter than a unary prefix: -a**b == -(a**b)
            _, _, col = self._next()
            self._enter(col)
            node = ("Pow", node, self._unary())
            self.depth -= 1
        for val in reversed(prefixes):
            self.depth -= 1
            node = _neg(node) if val == "-" else ("Not", node)
        return node

    def _primary(self) -> tuple:
        kind, val, col = self._next()
        if kind == "int":
            try:
                return ("Integer", int(val))
            except ValueError:  # beyond sys.int_max_str_digits
                self._fail(f"integer literal of {len(val)} digits is too long", col)
        if kind == "float":
            f = float(val)
            if not math.isfinite(f):
                self._fail(f"float literal {val!r} overflows a double", col)
            return ("Float", repr(f))
        if kind == "name":
            return self._name(val, col)
        if kind == "op" and val == "(":
            self._enter(col)
            inner = self._expr(_CMP)
            self._expect(")")
            self.depth -= 1
            return inner
        self._fail(f"expected a number, symbol or '(', found {val or 'end of text'!r}", col)
        raise AssertionError("unreachable")

    def _name(self, name: str, col: int) -> tuple:
        if "__" in name:
            self._fail(f"name {name!r} contains a double underscore", col, UnsafeArtifactError)
        if keyword.iskeyword(name) and name not in ("True", "False"):
            self._fail(f"Python keyword {name!r} is not allowed", col, UnsafeArtifactError)
        if not self._is_op("("):
            if name in _CONSTANTS:
                return (name,)
            if name in _CALLS:
                self._fail(f"function name {name!r} used without arguments", col)
            return ("Symbol", name)
        if name not in _CALLS:
            self._fail(f"call to {name!r}, which is not an allow-listed function", col, UnsafeArtifactError)
        self._next()
        self._enter(col)
        args: list[tuple] = []
        if not self._is_op(")"):
            while True:
                args.append(self._pair() if name == "Piecewise" else self._expr(_CMP))
                if len(args) > MAX_CALL_ARGS:
                    self._fail(f"{name}() has more than {MAX_CALL_ARGS} arguments", col)
                if not self._is_op(","):
                    break
                self._next()
        self._expect(")")
        self.depth -= 1
        lo, hi = _CALLS[name]
        if len(args) < lo or (hi is not None and len(args) > hi):
            self._fail(f"{name}() takes {lo}..{hi or 'any'} argument(s), got {len(args)}", col)
        return _flat(name, *args) if name in _FLATTEN else (name, *args)

    def _pair(self) -> tuple:
        col = self._peek()[2]
        self._expect("(")
        self._enter(col)
        e = self._expr(_CMP)
        self._expect(",")
        c = self._expr(_CMP)
        self._expect(")")
        self.depth -= 1
        return ("ExprCondPair", e, c)


def _rational(p: int, q: int) -> tuple:
    if q < 0:
        p, q = -p, -q
    g = math.gcd(p, q)
    p, q = p // g, q // g
    return ("Integer", p) if q == 1 else ("Rational", p, q)


def _flat(op: str, *args: tuple) -> tuple:
    out: list[tuple] = []
    for a in args:
        out.extend(a[1:] if a[0] == op else (a,))
    return (op, *out)


def _neg(node: tuple) -> tuple:
    """``-node``, spelled the way the 1.x printer spelled negative terms."""
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
        if (first[0] in _COEFFS or first[0] in _NEG_CONST) and rest:
            coeff = _neg(first)
            if coeff == ("Integer", 1):
                return rest[0] if len(rest) == 1 else ("Mul", *rest)
            return ("Mul", coeff, *rest)
        return ("Mul", ("Integer", -1), *node[1:])
    return ("Mul", ("Integer", -1), node)
