"""Expression trees: the vocabulary of the size-expression grammar and the checks of one node.

Between text and sympy sits a plain tree of tuples, ``(op, *children)``:

- leaves: ``("Integer", int)``, ``("Rational", p, q)``, ``("Float", repr_text)``,
  ``("Symbol", name)`` and the payload-free constants ``("True",)``, ``("False",)``, ``("oo",)``,
  ``("-oo",)``, ``("int_oo",)``, ``("-int_oo",)``, ``("nan",)``, ``("zoo",)``;
- inner nodes: ``("Add", *terms)``, ``("Mul", *factors)``, ``("Pow", base, exp)``,
  ``("Eq"|"Ne"|"Lt"|"Le"|"Gt"|"Ge", a, b)``, ``("And"|"Or", *args)``, ``("Not", a)``,
  ``("Piecewise", ("ExprCondPair", e, c), ...)`` and one node per allow-listed function
  (``("FloorDiv", a, b)``, ``("Max", ...)``, ...).

The tables here are the one list of what a tree may hold: the parser accepts these calls, the
printer and the sympy bridge validate every node with :func:`node_shape` before reading it, and
the stored form (``schema.Expr``) maps them one to one. Pure data and checks: no sympy, no torch.
"""

from __future__ import annotations

import keyword
import math
import re
from collections.abc import Callable
from typing import Any

from serde.errors import MalformedArtifactError

from ..limits import DEFAULT_LIMITS

__all__ = [
    "ExprTree", "MAX_EXPR_CHARS", "MAX_EXPR_DEPTH", "MAX_CALL_ARGS", "ARITY", "SYMBOL_CLASS_RE",
    "symbol_assumptions", "TORCH_FUNCS", "FUNCS", "PARSE_ALIASES", "CONSTANTS", "NUMERIC_LEAVES",
    "COEFF_LEAVES", "COMMUTATIVE", "FLATTEN", "clip", "snippet", "bad_tree", "check_symbol_name",
    "node_shape", "walk_symbols", "renamed", "degree",
]

ExprTree = tuple
"""``(op, *children)``; JSON lists are accepted wherever a tree is read."""

MAX_EXPR_CHARS = DEFAULT_LIMITS.max_expr_chars
MAX_EXPR_DEPTH = DEFAULT_LIMITS.max_expr_depth
MAX_CALL_ARGS = 256

# name -> (min args, max args or None). Every name the parser accepts as a call, and every inner
# node op a tree may carry (plus "ExprCondPair", only under Piecewise).
TORCH_FUNCS: dict[str, tuple[int, int | None]] = {
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
TORCH_FUNCS.update({f"OpaqueUnaryFn_{n}": (1, 1) for n in _OPAQUE_UNARY})

_SYMPY_FUNCS: dict[str, tuple[int, int | None]] = {
    "Add": (1, None), "Mul": (1, None), "Pow": (2, 2),
    "Eq": (2, 2), "Ne": (2, 2), "Lt": (2, 2), "Le": (2, 2), "Gt": (2, 2), "Ge": (2, 2),
    "And": (1, None), "Or": (1, None), "Not": (1, 1),
    "Abs": (1, 1), "floor": (1, 1), "ceiling": (1, 1), "Piecewise": (1, None),
    "ITE": (3, 3),  # sympy folds nested Piecewise conditions into ITE
}
FUNCS: dict[str, tuple[int, int | None]] = {**TORCH_FUNCS, **_SYMPY_FUNCS}
# Accepted in text only, rewritten while parsing (sympy prints Pow(x, 1/2) as sqrt(x)).
PARSE_ALIASES = {"sqrt": 1}

CONSTANTS = ("True", "False", "oo", "-oo", "int_oo", "-int_oo", "nan", "zoo")
NUMERIC_LEAVES = frozenset({"Integer", "Rational", "Float", "oo", "-oo", "int_oo", "-int_oo",
                             "nan", "zoo"})
COEFF_LEAVES = frozenset({"Integer", "Rational", "Float"})
COMMUTATIVE = frozenset({"Add", "Mul", "And", "Or", "Max", "Min"})
FLATTEN = frozenset({"Add", "Mul", "And", "Or"})

_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")

# Every call op's (min args, max args or None): the readers of stored trees check a node's
# children against it before anything indexes them.
ARITY: dict[str, tuple[int, int | None]] = dict(FUNCS)

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


def clip(text: str) -> str:
    """``text`` cut to 80 characters for an error message."""
    return text if len(text) <= 80 else text[:77] + "..."


def snippet(text: str) -> str:
    return repr(clip(text))


def bad_tree(where: str, msg: str) -> MalformedArtifactError:
    return MalformedArtifactError(
        f"{where}: malformed expression tree: {msg}. "
        "The artifact is damaged or was written by an incompatible tool."
    )


def check_symbol_name(name: Any, where: str, exc: type[Exception]) -> None:
    if (
        not isinstance(name, str)
        or not _NAME_RE.match(name)
        or "__" in name
        or keyword.iskeyword(name)
        or name in CONSTANTS
        or name in FUNCS
        or name in PARSE_ALIASES
    ):
        raise exc(
            f"{where}: {name!r} cannot be a symbol name: it must be an identifier without '__' "
            "that is not a keyword, constant or function name."
        )


def node_shape(tree: Any, where: str, depth: int) -> tuple[str, tuple]:
    """Validate the outer shape of a (possibly JSON-decoded) tree node; return (op, rest)."""
    if depth > MAX_EXPR_DEPTH:
        raise bad_tree(where, f"nesting is deeper than {MAX_EXPR_DEPTH}")
    if not isinstance(tree, (tuple, list)) or not tree or not isinstance(tree[0], str):
        raise bad_tree(where, f"expected [op, ...children], got {snippet(repr(tree))}")
    op, rest = tree[0], tuple(tree[1:])
    if op == "Integer":
        if len(rest) != 1 or type(rest[0]) is not int:
            raise bad_tree(where, "Integer takes one int")
    elif op == "Rational":
        if len(rest) != 2 or type(rest[0]) is not int or type(rest[1]) is not int or rest[1] <= 1 \
                or math.gcd(rest[0], rest[1]) != 1:
            raise bad_tree(where, "Rational takes coprime ints p, q with q > 1")
    elif op == "Float":
        if len(rest) != 1 or not isinstance(rest[0], str) or not _float_text_ok(rest[0]):
            raise bad_tree(where, f"Float takes the repr of a finite float, got {rest!r}")
    elif op == "Symbol":
        if len(rest) != 1:
            raise bad_tree(where, "Symbol takes one name")
        try:
            check_symbol_name(rest[0], where, MalformedArtifactError)
        except MalformedArtifactError:
            raise bad_tree(where, f"{rest[0]!r} cannot be a symbol name") from None
    elif op in CONSTANTS:
        if rest:
            raise bad_tree(where, f"{op} takes no children")
    elif op == "ExprCondPair":
        if len(rest) != 2:
            raise bad_tree(where, "ExprCondPair takes two children")
    elif op in FUNCS:
        lo, hi = FUNCS[op]
        if len(rest) < lo or (hi is not None and len(rest) > hi):
            raise bad_tree(where, f"{op} has {len(rest)} children")
        if op == "Piecewise":
            if any(not isinstance(c, (tuple, list)) or not c or c[0] != "ExprCondPair" for c in rest):
                raise bad_tree(where, "Piecewise children must be ExprCondPair")
    else:
        raise bad_tree(where, f"unknown op {op!r}")
    return op, rest


_FLOAT_TEXT_RE = re.compile(r"-?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?\Z")


def _float_text_ok(text: str) -> bool:
    return bool(_FLOAT_TEXT_RE.match(text)) and math.isfinite(float(text))


_POWERS = frozenset({"Pow", "PowByNatural", "FloatPow"})


def degree(tree: ExprTree) -> int:
    """The polynomial degree of a validated tree as factoring it costs: a symbol 1, a number 0, a
    power by an integer the base's times the exponent, any other node (a sum, a floor division, a
    Max) that of its largest argument, and a product the sum of its factors', except that the
    symbols standing bare in it count by their largest repetition. A product of distinct symbols
    (the size of a flattened tensor whose dims are all dynamic) is a monomial, which factoring
    takes out first and at no cost: s0*s1*s2 is 1, s0*s0 is 2, (s0 + 1)*(s0 + 2)*s1 is 3."""
    op = tree[0]
    if op == "Symbol":
        return 1
    if op in ("Integer", "Rational", "Float") or len(tree) == 1:
        return 0
    if op == "Mul":
        factors, bare, rest = list(tree[1:]), {}, 0
        while factors:  # (a guard's a*b*c is Mul(Mul(a, b), c))
            ch = factors.pop()
            if ch[0] == "Mul":
                factors.extend(ch[1:])
            elif ch[0] == "Symbol":
                bare[ch[1]] = bare.get(ch[1], 0) + 1
            else:
                rest += degree(ch)
        return rest + max(bare.values(), default=0)
    if op in _POWERS and tree[2][0] == "Integer":
        return degree(tree[1]) * abs(tree[2][1])
    return max(degree(ch) for ch in tree[1:])


def walk_symbols(tree: ExprTree, visit: Callable[[str], Any]) -> None:
    if tree[0] == "Symbol":
        visit(tree[1])
    elif tree[0] not in ("Integer", "Rational", "Float"):
        for ch in tree[1:]:
            walk_symbols(ch, visit)


def renamed(tree: ExprTree, mapping: dict[str, str]) -> ExprTree:
    op = tree[0]
    if op == "Symbol":
        return ("Symbol", mapping.get(tree[1], tree[1]))
    if op in ("Integer", "Rational", "Float"):
        return tree
    return (op, *(renamed(ch, mapping) for ch in tree[1:]))
