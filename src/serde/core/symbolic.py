"""Safe text form of torch's symbolic size expressions: our own tokenizer, parser and printer.

Artifacts are untrusted, so expression text is never handed to ``sympify`` or ``eval``. The
grammar is a small Python-like subset (numbers, symbol names, ``+ - * / // % **``, comparisons,
``& | ~``, parentheses, ``True``/``False``/``oo``/``int_oo``, and calls to an explicit allow-list
of function names); anything else is an error that names the column.

Between text and sympy sits a plain tree of tuples, ``(op, *children)``:

- leaves: ``("Integer", int)``, ``("Rational", p, q)``, ``("Float", repr_text)``,
  ``("Symbol", name)`` and the payload-free constants ``("True",)``, ``("False",)``, ``("oo",)``,
  ``("-oo",)``, ``("int_oo",)``, ``("-int_oo",)``, ``("nan",)``, ``("zoo",)``;
- inner nodes: ``("Add", *terms)``, ``("Mul", *factors)``, ``("Pow", base, exp)``,
  ``("Eq"|"Ne"|"Lt"|"Le"|"Gt"|"Ge", a, b)``, ``("And"|"Or", *args)``, ``("Not", a)``,
  ``("Piecewise", ("ExprCondPair", e, c), ...)`` and one node per allow-listed function
  (``("FloorDiv", a, b)``, ``("Max", ...)``, ...).

The printer sorts the children of commutative nodes by their own printed text, so the text is
canonical without sympy: :func:`rename_symbols` re-sorts after renaming and gives the same text as
renaming in sympy and printing again. Text, tree and symbol-name helpers never import sympy or
torch (the canonicalizer uses them); only the sympy-facing functions do, on first use.
"""

from __future__ import annotations

import functools
import keyword
import math
import re
from collections.abc import Callable
from typing import Any

from serde.errors import MalformedArtifactError, UnsafeArtifactError, UnsupportedConstructError

from .errors import IntegerTooLargeError
from .limits import DEFAULT_LIMITS, too_large

__all__ = [
    "ExprTree",
    "MAX_EXPR_CHARS",
    "MAX_EXPR_DEPTH",
    "print_expr",
    "parse_expr",
    "parse_to_tree",
    "tree_to_sympy",
    "sympy_to_tree",
    "tree_to_str",
    "free_symbol_names",
    "rename_symbols",
    "as_sympy",
    "SYMBOL_CLASS_RE",
    "symbol_assumptions",
    "ARITY",
    "check_sort",
]

ExprTree = tuple
"""``(op, *children)``; JSON lists are accepted wherever a tree is read."""

MAX_EXPR_CHARS = DEFAULT_LIMITS.max_expr_chars
MAX_EXPR_DEPTH = DEFAULT_LIMITS.max_expr_depth
MAX_CALL_ARGS = 256
# Exact powers/shifts of numeric literals beyond this many bits are refused: "9**9**9" would
# otherwise pin a core inside sympy while loading an untrusted file.
_MAX_POWER_BITS = DEFAULT_LIMITS.max_power_bits
# Literals and exponents of unknown bases are bounded too: torch evaluates size expressions on
# their hints, and s0**(2**62) or a 4000-digit literal would pin a core there instead.
_MAX_INT_BITS = DEFAULT_LIMITS.max_int_bits
_MAX_EXPONENT = DEFAULT_LIMITS.max_exponent

# --- the grammar's vocabulary (pure data; no sympy here) -------------------------------------

# name -> (min args, max args or None). Every name the parser accepts as a call, and every inner
# node op a tree may carry (plus "ExprCondPair", only under Piecewise).
_TORCH_FUNCS: dict[str, tuple[int, int | None]] = {
    "FloorDiv": (2, 2), "ModularIndexing": (3, 3), "Where": (3, 3), "PythonMod": (2, 2),
    "Mod": (2, 2), "CleanDiv": (2, 2), "CeilToInt": (1, 1), "FloorToInt": (1, 1),
    "CeilDiv": (2, 2), "IntTrueDiv": (2, 2), "FloatTrueDiv": (2, 2), "LShift": (2, 2),
    "RShift": (2, 2), "IsNonOverlappingAndDenseIndicator": (0, None), "TruncToFloat": (1, 1),
    "TruncToInt": (1, 1), "RoundToInt": (1, 1), "RoundDecimal": (2, 2), "ToFloat": (1, 1),
    "FloatPow": (2, 2), "PowByNatural": (2, 2), "Identity": (1, 1), "Max": (1, None),
    "Min": (1, None),
    "BitwiseFn_bitwise_and": (2, 2), "BitwiseFn_bitwise_or": (2, 2), "BitwiseFn_bitwise_xor": (2, 2),
}
_OPAQUE_UNARY = ("sqrt", "cos", "cosh", "sin", "sinh", "tan", "tanh", "asin", "acos", "atan",
                 "exp", "log", "asinh", "log2")
_TORCH_FUNCS.update({f"OpaqueUnaryFn_{n}": (1, 1) for n in _OPAQUE_UNARY})

_SYMPY_FUNCS: dict[str, tuple[int, int | None]] = {
    "Add": (1, None), "Mul": (1, None), "Pow": (2, 2),
    "Eq": (2, 2), "Ne": (2, 2), "Lt": (2, 2), "Le": (2, 2), "Gt": (2, 2), "Ge": (2, 2),
    "And": (1, None), "Or": (1, None), "Not": (1, 1),
    "Abs": (1, 1), "floor": (1, 1), "ceiling": (1, 1), "Piecewise": (1, None),
    "ITE": (3, 3),  # sympy folds nested Piecewise conditions into ITE
}
_FUNCS: dict[str, tuple[int, int | None]] = {**_TORCH_FUNCS, **_SYMPY_FUNCS}
# Accepted in text only, rewritten while parsing (sympy prints Pow(x, 1/2) as sqrt(x)).
_PARSE_ALIASES = {"sqrt": 1}

_CONSTANTS = ("True", "False", "oo", "-oo", "int_oo", "-int_oo", "nan", "zoo")
_NUMERIC_LEAVES = frozenset({"Integer", "Rational", "Float", "oo", "-oo", "int_oo", "-int_oo",
                             "nan", "zoo"})
_COEFF_LEAVES = frozenset({"Integer", "Rational", "Float"})
_COMMUTATIVE = frozenset({"Add", "Mul", "And", "Or", "Max", "Min"})
_FLATTEN = frozenset({"Add", "Mul", "And", "Or"})

# Python's precedence, lowest first. The printer parenthesizes by these, so the text reads (and
# parses) exactly as Python would.
_CMP, _OR, _AND, _ADD, _MUL, _UNARY, _POW, _ATOM = range(1, 9)
_CMP_OPS = {"<": "Lt", "<=": "Le", ">": "Gt", ">=": "Ge", "==": "Eq", "!=": "Ne"}
_CMP_TEXT = {"Lt": "<", "Le": "<=", "Gt": ">", "Ge": ">="}  # Eq/Ne print as calls, like sympy
_BIN_PREC = {"|": _OR, "&": _AND, "+": _ADD, "-": _ADD, "*": _MUL, "/": _MUL, "//": _MUL,
             "%": _MUL, **{op: _CMP for op in _CMP_OPS}}

_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
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


# Every call op's (min args, max args or None): the readers of stored trees check a node's
# children against it before anything indexes them.
ARITY: dict[str, tuple[int, int | None]] = dict(_FUNCS)

# The sorts of expressions: a boolean (a relation, a connective, True/False) or a number (every
# other op and leaf). torch builds size, stride and SymInt/SymFloat values from numbers, and
# SymBool values and guards from booleans; sympy refuses most mixes only when it builds them (or
# not at all: Eq(2, 2) is True), and the native runtime would evaluate a boolean as 0 or 1.
BOOL, NUM = "bool", "number"
_RELATIONS = frozenset({"Lt", "Le", "Gt", "Ge"})
_CONNECTIVES = frozenset({"And", "Or", "Not"})
_CHOICES = frozenset({"ITE", "Where"})  # (condition, then, else)


# --- public API --------------------------------------------------------------------------------


def check_sort(tree: Any, want: str, *, where: str) -> None:
    """Check that ``tree`` (a tuple tree whose shape was checked) is of sort ``want`` (:data:`BOOL`
    or :data:`NUM`) and that every operand inside it is of the sort its op takes.

    Raises:
        MalformedArtifactError: naming the first operand of the wrong sort.
    """
    got = _sort(tree, where, 0)
    if got != want:
        raise _bad_tree(where, f"{_snippet(_op_text(tree))} is a {got} where a {want} is expected")


def _sort(tree: Any, where: str, depth: int) -> str:
    if depth > MAX_EXPR_DEPTH:
        raise _bad_tree(where, f"nesting is deeper than {MAX_EXPR_DEPTH}")
    op = tree[0]
    if op in ("True", "False"):
        return BOOL
    if len(tree) == 1 or op in ("Integer", "Rational", "Float", "Symbol"):
        return NUM  # the other leaves and constants (oo, nan, ...) are numbers
    kids = tree[1:]
    d = depth + 1
    if op in _CONNECTIVES:
        _want_all(kids, BOOL, op, where, d)
        return BOOL
    if op in _RELATIONS:
        _want_all(kids, NUM, op, where, d)
        return BOOL
    if op in ("Eq", "Ne"):
        sorts = {_sort(k, where, d) for k in kids}
        if len(sorts) > 1:
            raise _bad_tree(where, f"{op} compares a {BOOL} with a {NUM}")
        return BOOL
    if op in _CHOICES:
        if _sort(kids[0], where, d) != BOOL:
            raise _bad_tree(where, f"the condition of {op} is a {NUM}, not a {BOOL}")
        return _same(kids[1:], op, where, d)
    if op == "Piecewise":
        for pair in kids:
            if _sort(pair[2], where, d + 1) != BOOL:
                raise _bad_tree(where, f"a condition of Piecewise is a {NUM}, not a {BOOL}")
        return _same([pair[1] for pair in kids], op, where, d + 1)
    _want_all(kids, NUM, op, where, d)
    return NUM


def _want_all(kids: Any, want: str, op: str, where: str, depth: int) -> None:
    for k in kids:
        if _sort(k, where, depth) != want:
            raise _bad_tree(where, f"{op} takes {want}s, got {_snippet(_op_text(k))}, a "
                                   f"{BOOL if want == NUM else NUM}")


def _same(kids: Any, op: str, where: str, depth: int) -> str:
    sorts = {_sort(k, where, depth) for k in kids}
    if len(sorts) != 1:
        raise _bad_tree(where, f"the branches of {op} mix {BOOL}s and {NUM}s")
    return sorts.pop()


def _op_text(tree: Any) -> str:
    try:
        return tree_to_str(tree, where="expression")
    except (MalformedArtifactError, UnsafeArtifactError):
        return repr(tree)


def print_expr(e: Any) -> str:
    """Print a sympy expression (or a torch SymInt/SymFloat/SymBool) as canonical text.

    Args:
        e: a sympy expression built from the allow-listed classes, or a torch symbolic value.

    Returns:
        Deterministic text such as ``"2*s0 + 1"`` or ``"FloorDiv(s0, 2)"``; stable across processes.

    Raises:
        UnsupportedConstructError: ``e`` uses a class or value the text form cannot carry.
    """
    return _print_cached(as_sympy(e))


def parse_expr(text: str, symbol: Callable[[str], Any], *, where: str) -> Any:
    """Parse expression text into sympy, built as torch builds it.

    Args:
        text: expression text from an artifact (untrusted).
        symbol: called once per distinct symbol name; returns the ``sympy.Symbol`` to use (the
            caller chooses its assumptions and registers it, e.g. in a ShapeEnv).
        where: location for error messages, e.g. ``graph.sym_int_values['s0']``.

    Returns:
        A sympy expression; ``parse_expr(print_expr(e), ...) == e`` for expressions torch makes.

    Raises:
        MalformedArtifactError: bad syntax, too long, too deep, wrong arity, bad values.
        UnsafeArtifactError: code-like input (strings, attributes, dunders, unknown calls, ...).
    """
    return tree_to_sympy(_Parser(text, where).parse(), symbol, where=where)


def parse_to_tree(text: str, *, where: str) -> ExprTree:
    """Parse expression text into a canonical tree (children of commutative nodes sorted).

    ``parse_to_tree(tree_to_str(t)) == t`` for every tree :func:`sympy_to_tree` returns.

    Raises:
        MalformedArtifactError, UnsafeArtifactError: as :func:`parse_expr`.
    """
    return _render(_Parser(text, where).parse(), where, 0).tree


# The symbol classes torch creates (s: sizes, u: unbacked ints, zf/zuf: floats): class, number.
SYMBOL_CLASS_RE = re.compile(r"^(zuf|zf|s|u)(\d+)$")
_SYMBOL_ASSUMPTIONS: dict[str, dict[str, bool]] = {
    "s": {"integer": True, "positive": True},
    "u": {"integer": True},
    "zf": {"real": True},
    "zuf": {},
}


def symbol_assumptions(name: str) -> dict[str, bool]:
    """The sympy assumptions torch gives a symbol of this name (``s3``: a positive integer...)."""
    m = SYMBOL_CLASS_RE.match(name)
    return dict(_SYMBOL_ASSUMPTIONS[m.group(1)]) if m else {"integer": True}


def tree_to_sympy(tree: Any, symbol: Callable[[str], Any], *, where: str = "expression") -> Any:
    """Build the sympy expression for ``tree`` (tuples or JSON lists), validating it on the way.

    Raises:
        MalformedArtifactError: unknown op, wrong arity or payload, too deep, or sympy refuses
            the arguments (e.g. ``FloorDiv(s0, 0)``).
    """
    return _Builder(symbol, where).build(tree, 0)


def sympy_to_tree(e: Any, *, where: str = "expression") -> ExprTree:
    """Convert a sympy expression (or torch SymInt/SymFloat/SymBool) into a canonical tree.

    Raises:
        UnsupportedConstructError: a class outside the allow-list, a symbol name the grammar cannot
            carry, or a Float with more than double precision.
    """
    return _render(_from_sympy(as_sympy(e), where, 0), where, 0).tree


def tree_to_str(tree: Any, *, where: str = "expression") -> str:
    """Print a tree as canonical text (commutative children sorted, minimal parentheses).

    Raises:
        MalformedArtifactError: the tree is not well formed.
    """
    return _render(tree, where, 0).text


def free_symbol_names(text: str, *, where: str = "expression") -> set[str]:
    """Names of the symbols in expression text, without sympy.

    Raises:
        MalformedArtifactError, UnsafeArtifactError: as :func:`parse_expr`.
    """
    names: set[str] = set()
    _walk_symbols(_Parser(text, where).parse(), names.add)
    return names


def rename_symbols(
    text: str, mapping: dict[str, str], *, normalize_relations: bool = False, where: str = "expression"
) -> str:
    """Rename symbols (names missing from ``mapping`` stay) and re-print canonically, without sympy.

    The result equals ``print_expr`` of the sympy expression renamed by ``xreplace`` and rebuilt:
    sympy orients the relations in Piecewise conditions by symbol name (``Relational.canonical``)
    and Abs extracts a sign by symbol order, so an expression with either is rebuilt through sympy
    with the new names and the assumptions torch gives them (rare: ``torch.sym_ite``, ``abs`` of a
    size), and a loader's sympy gives back exactly this text.

    Args:
        normalize_relations: also write every relation in one orientation (``Eq``/``Ne``
            operands sorted, ``a > b`` as ``b < a``, ``a >= b`` as ``b <= a``). Equivalent
            meaning, independent of the original names; but the parsed sympy object is no longer
            structurally equal to the original, so use it for comparing, not for storing.

    Raises:
        MalformedArtifactError, UnsafeArtifactError: as :func:`parse_expr`, or a new name that
            is not a valid symbol name.
    """
    for new in mapping.values():
        _check_symbol_name(new, where, MalformedArtifactError)
    tree = _rename(_Parser(text, where).parse(), mapping)
    if normalize_relations:
        tree = _normalize_relations(tree, where)
    elif "Piecewise(" in text or "Abs(" in text:
        import sympy

        built = tree_to_sympy(tree, lambda n: sympy.Symbol(n, **symbol_assumptions(n)), where=where)
        tree = _from_sympy(built, where, 0)
    return _render(tree, where, 0).text


# --- tokenizer and parser ------------------------------------------------------------------------


def _snippet(text: str) -> str:
    return repr(text if len(text) <= 80 else text[:77] + "...")


class _Parser:
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
        raise exc(f"{self.where}: symbolic expression {_snippet(self.text)}: {msg} at column {col + 1}. {fix}")

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
        tree = self._expr(_CMP)
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
            if prec == _CMP:
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
            inner = self._expr(_CMP)
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
        e = self._expr(_CMP)
        self._expect(",")
        c = self._expr(_CMP)
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
            if name in _CONSTANTS:
                return (name,)
            if name in _FUNCS or name in _PARSE_ALIASES:
                self._fail(f"function name {name!r} used without arguments", col)
            return ("Symbol", name)
        if name not in _FUNCS and name not in _PARSE_ALIASES:
            self._fail(f"call to {name!r}, which is not an allow-listed function", col, UnsafeArtifactError)
        self._next()  # "("
        self._enter(col)
        args: list[ExprTree] = []
        if not (self._peek()[0] == "op" and self._peek()[1] == ")"):
            while True:
                args.append(self._pair() if name == "Piecewise" else self._expr(_CMP))
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
            lo, hi = _FUNCS[name]
        if len(args) < lo or (hi is not None and len(args) > hi):
            want = str(lo) if lo == hi else f"at least {lo}" if hi is None else f"{lo}..{hi}"
            self._fail(f"{name}() takes {want} argument(s), got {len(args)}", col)
        if name == "sqrt":
            return ("Pow", args[0], ("Rational", 1, 2))
        if name in _FLATTEN:
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
        if (first[0] in _COEFF_LEAVES or first[0] in _NEG_CONST) and rest:
            coeff = _neg(first)
            if coeff == ("Integer", 1):
                return rest[0] if len(rest) == 1 else ("Mul", *rest)
            return ("Mul", coeff, *rest)
        return ("Mul", ("Integer", -1), *node[1:])
    return ("Mul", ("Integer", -1), node)


# --- printer -----------------------------------------------------------------------------------


class _Out:
    """A rendered subtree: its text, the precedence of that text, the canonical tree, and the
    text without a leading numeric coefficient (the sort key that groups like terms)."""

    __slots__ = ("text", "prec", "tree", "core")

    def __init__(self, text: str, prec: int, tree: ExprTree, core: str | None = None):
        self.text, self.prec, self.tree = text, prec, tree
        self.core = text if core is None else core


def _bad_tree(where: str, msg: str) -> MalformedArtifactError:
    return MalformedArtifactError(
        f"{where}: malformed expression tree: {msg}. "
        "The artifact is damaged or was written by an incompatible tool."
    )


def _check_symbol_name(name: Any, where: str, exc: type[Exception]) -> None:
    if (
        not isinstance(name, str)
        or not _NAME_RE.match(name)
        or "__" in name
        or keyword.iskeyword(name)
        or name in _CONSTANTS
        or name in _FUNCS
        or name in _PARSE_ALIASES
    ):
        raise exc(
            f"{where}: {name!r} cannot be a symbol name: it must be an identifier without '__' "
            "that is not a keyword, constant or function name."
        )


def _shape(tree: Any, where: str, depth: int) -> tuple[str, tuple]:
    """Validate the outer shape of a (possibly JSON-decoded) tree node; return (op, rest)."""
    if depth > MAX_EXPR_DEPTH:
        raise _bad_tree(where, f"nesting is deeper than {MAX_EXPR_DEPTH}")
    if not isinstance(tree, (tuple, list)) or not tree or not isinstance(tree[0], str):
        raise _bad_tree(where, f"expected [op, ...children], got {_snippet(repr(tree))}")
    op, rest = tree[0], tuple(tree[1:])
    if op == "Integer":
        if len(rest) != 1 or type(rest[0]) is not int:
            raise _bad_tree(where, "Integer takes one int")
    elif op == "Rational":
        if len(rest) != 2 or type(rest[0]) is not int or type(rest[1]) is not int or rest[1] <= 1 \
                or math.gcd(rest[0], rest[1]) != 1:
            raise _bad_tree(where, "Rational takes coprime ints p, q with q > 1")
    elif op == "Float":
        if len(rest) != 1 or not isinstance(rest[0], str) or not _float_text_ok(rest[0]):
            raise _bad_tree(where, f"Float takes the repr of a finite float, got {rest!r}")
    elif op == "Symbol":
        if len(rest) != 1:
            raise _bad_tree(where, "Symbol takes one name")
        try:
            _check_symbol_name(rest[0], where, MalformedArtifactError)
        except MalformedArtifactError:
            raise _bad_tree(where, f"{rest[0]!r} cannot be a symbol name") from None
    elif op in _CONSTANTS:
        if rest:
            raise _bad_tree(where, f"{op} takes no children")
    elif op == "ExprCondPair":
        if len(rest) != 2:
            raise _bad_tree(where, "ExprCondPair takes two children")
    elif op in _FUNCS:
        lo, hi = _FUNCS[op]
        if len(rest) < lo or (hi is not None and len(rest) > hi):
            raise _bad_tree(where, f"{op} has {len(rest)} children")
        if op == "Piecewise":
            if any(not isinstance(c, (tuple, list)) or not c or c[0] != "ExprCondPair" for c in rest):
                raise _bad_tree(where, "Piecewise children must be ExprCondPair")
    else:
        raise _bad_tree(where, f"unknown op {op!r}")
    return op, rest


_FLOAT_TEXT_RE = re.compile(r"-?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?\Z")


def _float_text_ok(text: str) -> bool:
    return bool(_FLOAT_TEXT_RE.match(text)) and math.isfinite(float(text))


def _render(tree: Any, where: str, depth: int) -> _Out:
    op, rest = _shape(tree, where, depth)
    if op == "Integer":
        n = rest[0]
        return _Out(str(n), _ATOM if n >= 0 else _UNARY, ("Integer", n))
    if op == "Rational":
        return _Out(f"{rest[0]}/{rest[1]}", _MUL, ("Rational", rest[0], rest[1]))
    if op == "Float":
        text = repr(float(rest[0]))
        return _Out(text, _UNARY if text.startswith("-") else _ATOM, ("Float", text))
    if op == "Symbol":
        return _Out(rest[0], _ATOM, ("Symbol", rest[0]))
    if op in _CONSTANTS:
        return _Out(op, _UNARY if op.startswith("-") else _ATOM, (op,))
    if op == "ExprCondPair":
        e, c = (_render(ch, where, depth + 1) for ch in rest)
        return _Out(f"({e.text}, {c.text})", _ATOM, (op, e.tree, c.tree))

    kids = [_render(ch, where, depth + 1) for ch in rest]
    if op == "Add":
        kids.sort(key=lambda k: (k.tree[0] in _NUMERIC_LEAVES, k.core, k.text))
        parts = [_paren(kids[0], _ADD)]
        for k in kids[1:]:
            t = _paren(k, _ADD)
            parts.append(f" - {t[1:]}" if t.startswith("-") else f" + {t}")
        return _Out("".join(parts), _ADD, _tree(op, kids))
    if op == "Mul":
        kids.sort(key=lambda k: (k.tree[0] not in _NUMERIC_LEAVES, k.text))
        rest_kids = kids[1:] if kids[0].tree[0] in _COEFF_LEAVES and len(kids) > 1 else kids
        core = "*".join(_paren(k, _MUL + 1) for k in rest_kids)
        if rest_kids is kids:
            text = core
        elif kids[0].tree == ("Integer", -1):
            text = "-" + (core if len(rest_kids) > 1 or rest_kids[0].prec >= _UNARY
                          else f"({core})")
        else:
            text = f"{kids[0].text}*{core}"
        return _Out(text, _MUL, _tree(op, kids), core)
    if op == "Pow":
        base, exp = kids
        return _Out(f"{_paren(base, _POW + 1)}**{_paren(exp, _POW)}", _POW, _tree(op, kids))
    if op in _CMP_TEXT:
        a, b = kids
        return _Out(f"{_paren(a, _CMP + 1)} {_CMP_TEXT[op]} {_paren(b, _CMP + 1)}", _CMP, _tree(op, kids))
    if op in ("And", "Or"):
        kids.sort(key=lambda k: k.text)
        prec = _AND if op == "And" else _OR
        sep = " & " if op == "And" else " | "
        return _Out(sep.join(_paren(k, prec + 1) for k in kids), prec, _tree(op, kids))
    if op == "Not":
        return _Out("~" + _paren(kids[0], _UNARY), _UNARY, _tree(op, kids))
    if op in _COMMUTATIVE:  # Max, Min
        kids.sort(key=lambda k: k.text)
    return _Out(f"{op}({', '.join(k.text for k in kids)})", _ATOM, _tree(op, kids))


def _paren(k: _Out, min_prec: int) -> str:
    return k.text if k.prec >= min_prec else f"({k.text})"


def _tree(op: str, kids: list[_Out]) -> ExprTree:
    return (op, *(k.tree for k in kids))


def _walk_symbols(tree: ExprTree, visit: Callable[[str], Any]) -> None:
    if tree[0] == "Symbol":
        visit(tree[1])
    elif tree[0] not in ("Integer", "Rational", "Float"):
        for ch in tree[1:]:
            _walk_symbols(ch, visit)


_FLIP = {"Gt": "Lt", "Ge": "Le"}


def _normalize_relations(tree: ExprTree, where: str) -> ExprTree:
    op = tree[0]
    if op in ("Integer", "Rational", "Float", "Symbol"):
        return tree
    kids = [_normalize_relations(ch, where) for ch in tree[1:]]
    if op in _FLIP:
        return (_FLIP[op], kids[1], kids[0])
    if op in ("Eq", "Ne"):
        kids.sort(key=lambda k: _render(k, where, 0).text)
    return (op, *kids)


def _rename(tree: ExprTree, mapping: dict[str, str]) -> ExprTree:
    op = tree[0]
    if op == "Symbol":
        return ("Symbol", mapping.get(tree[1], tree[1]))
    if op in ("Integer", "Rational", "Float"):
        return tree
    return (op, *(_rename(ch, mapping) for ch in tree[1:]))


# --- sympy side (imports sympy and torch lazily) ---------------------------------------------


@functools.cache
def _sympy_tables() -> tuple[dict[str, Any], dict[type, str], dict[Any, str]]:
    """(op -> constructor, class -> op, singleton -> constant op), built once."""
    import sympy
    import torch.utils._sympy.functions as tf
    from torch.utils._sympy.numbers import int_oo

    ctor: dict[str, Any] = {name: getattr(tf, name) for name in _TORCH_FUNCS}
    ctor.update({
        "Add": sympy.Add, "Mul": sympy.Mul, "Pow": sympy.Pow,
        "Eq": sympy.Eq, "Ne": sympy.Ne, "Lt": sympy.Lt, "Le": sympy.Le, "Gt": sympy.Gt,
        "Ge": sympy.Ge, "And": sympy.And, "Or": sympy.Or, "Not": sympy.Not,
        "Abs": sympy.Abs, "floor": sympy.floor, "ceiling": sympy.ceiling,
        "Piecewise": sympy.Piecewise, "ITE": sympy.ITE, "ExprCondPair": sympy.functions.elementary.piecewise.ExprCondPair,
    })
    assert set(ctor) == set(_FUNCS) | {"ExprCondPair"}, "constructor table out of sync"
    # Relationals are classes whose names differ from their short spellings.
    cls_to_op: dict[type, str] = {
        sympy.Equality: "Eq", sympy.Unequality: "Ne", sympy.StrictLessThan: "Lt",
        sympy.LessThan: "Le", sympy.StrictGreaterThan: "Gt", sympy.GreaterThan: "Ge",
    }
    for op, c in ctor.items():
        if isinstance(c, type):
            cls_to_op.setdefault(c, op)
    consts: dict[Any, str] = {
        sympy.true: "True", sympy.false: "False", sympy.oo: "oo", -sympy.oo: "-oo",
        int_oo: "int_oo", -int_oo: "-int_oo", sympy.nan: "nan", sympy.zoo: "zoo",
    }
    return ctor, cls_to_op, consts


def _const_value(op: str) -> Any:
    _, _, consts = _sympy_tables()
    for v, name in consts.items():
        if name == op:
            return v
    raise AssertionError(op)


class _Builder:
    def __init__(self, symbol: Callable[[str], Any], where: str):
        self.symbol = symbol
        self.where = where
        self.symbols: dict[str, Any] = {}

    def build(self, tree: Any, depth: int) -> Any:
        import sympy

        op, rest = _shape(tree, self.where, depth)
        if op == "Integer":
            self._check_int(rest[0])
            return sympy.Integer(rest[0])
        if op == "Rational":
            self._check_int(rest[0])
            self._check_int(rest[1])
            return sympy.Rational(rest[0], rest[1])
        if op == "Float":
            return sympy.Float(float(rest[0]))
        if op == "Symbol":
            name = rest[0]
            sym = self.symbols.get(name)
            if sym is None:
                sym = self.symbols[name] = self.symbol(name)
            return sym
        if op in _CONSTANTS:
            return _const_value(op)
        args = [self.build(ch, depth + 1) for ch in rest]
        ctor = _sympy_tables()[0][op]
        self._check_size(op, args)
        try:
            return ctor(*args)
        except RecursionError:
            raise _bad_tree(self.where, f"{op} is nested too deeply for sympy") from None
        except Exception as e:  # sympy/torch reject the arguments: a bad artifact, not a bug here
            shown = ", ".join(str(a) for a in args)
            raise MalformedArtifactError(
                f"{self.where}: cannot build {op}({_snippet(shown)[1:-1]}): {type(e).__name__}: {e}. "
                "The artifact is damaged or was written by an incompatible tool."
            ) from None

    def _check_int(self, v: int) -> None:
        if abs(v).bit_length() > _MAX_INT_BITS:
            raise IntegerTooLargeError(too_large(self.where, "an integer literal's size in bits",
                                                 abs(v).bit_length(), "max_int_bits", _MAX_INT_BITS, per_load=False))

    def _check_size(self, op: str, args: list[Any]) -> None:
        import sympy

        if op in ("Pow", "PowByNatural", "FloatPow"):
            base, exp = args
        elif op == "LShift":
            base, exp = sympy.Integer(2), args[1]
        else:
            return
        if not isinstance(exp, sympy.Integer):
            return
        if not isinstance(base, sympy.Rational):
            if abs(int(exp)) > _MAX_EXPONENT:
                raise IntegerTooLargeError(too_large(
                    self.where, f"the exponent of {op}({_snippet(str(base))[1:-1]}, ...)", _snippet(str(exp)),
                    "max_exponent", _MAX_EXPONENT, per_load=False))
            return
        bits = max(abs(int(base.p)).bit_length(), int(base.q).bit_length())
        if bits > 1 and abs(int(exp)) * bits > _MAX_POWER_BITS:
            raise IntegerTooLargeError(
                f"{self.where}: {op} of {_snippet(str(base))} to the {_snippet(str(exp))} would "
                f"have more than {_MAX_POWER_BITS} bits; refusing to evaluate it. "
                "The artifact is damaged or hostile."
            )


@functools.lru_cache(maxsize=4096)
def _print_cached(e: Any) -> str:
    # Programs repeat the same few size expressions in every tensor meta; sympy objects are
    # immutable and hash structurally, so caching by the object is safe.
    return _render(_from_sympy(e, "expression", 0), "expression", 0).text


def as_sympy(e: Any) -> Any:
    """The sympy value of a torch SymInt/SymFloat/SymBool or Python scalar (other values unchanged)."""
    import sympy

    node = getattr(e, "node", None)
    if node is not None and hasattr(node, "expr"):  # torch.SymInt / SymFloat / SymBool
        return node.expr
    if isinstance(e, bool):
        return sympy.true if e else sympy.false
    if isinstance(e, int):
        return sympy.Integer(e)
    if isinstance(e, float):
        return sympy.Float(e)
    return e


def _from_sympy(e: Any, where: str, depth: int) -> ExprTree:
    import sympy

    if depth > MAX_EXPR_DEPTH:
        raise UnsupportedConstructError(
            f"{where}: symbolic expression is nested deeper than {MAX_EXPR_DEPTH}; it cannot be saved."
        )
    _, cls_to_op, consts = _sympy_tables()
    if isinstance(e, sympy.Integer):
        return ("Integer", int(e))
    if isinstance(e, sympy.Rational):
        return ("Rational", int(e.p), int(e.q))
    if isinstance(e, sympy.Float):
        f = float(e)
        if e._prec > 53 or not math.isfinite(f) or sympy.Float(f) != e:
            raise UnsupportedConstructError(
                f"{where}: Float {e} has more than double precision or is not finite; "
                "only IEEE doubles can be saved."
            )
        return ("Float", repr(f))
    if type(e) is sympy.Symbol:
        _check_symbol_name(e.name, where, UnsupportedConstructError)
        return ("Symbol", e.name)
    try:
        const = consts.get(e)
    except TypeError:
        const = None
    if const is not None:
        return (const,)
    op = cls_to_op.get(type(e))
    if op is None:
        raise UnsupportedConstructError(
            f"{where}: symbolic expression {_snippet(str(e))} uses {type(e).__name__}, which "
            "pt2serde cannot save yet. Avoid it in size computations, or file an issue."
        )
    return (op, *(_from_sympy(a, where, depth + 1) for a in e.args))
