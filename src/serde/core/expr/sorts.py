"""The sorts of expression trees: boolean or number, checked before anything evaluates a tree."""

from __future__ import annotations

from typing import Any

from serde.errors import MalformedArtifactError, UnsafeArtifactError

from .text import tree_to_str
from .tree import MAX_EXPR_DEPTH, bad_tree, snippet

__all__ = ["BOOL", "NUM", "check_sort"]

# The sorts of expressions: a boolean (a relation, a connective, True/False) or a number (every
# other op and leaf). torch builds size, stride and SymInt/SymFloat values from numbers, and
# SymBool values and guards from booleans; sympy refuses most mixes only when it builds them (or
# not at all: Eq(2, 2) is True), and the native runtime would evaluate a boolean as 0 or 1.
BOOL, NUM = "bool", "number"
_RELATIONS = frozenset({"Lt", "Le", "Gt", "Ge"})
_CONNECTIVES = frozenset({"And", "Or", "Not"})
_CHOICES = frozenset({"ITE", "Where"})  # (condition, then, else)


def check_sort(tree: Any, want: str, *, where: str) -> None:
    """Check that ``tree`` (a tuple tree whose shape was checked) is of sort ``want`` (:data:`BOOL`
    or :data:`NUM`) and that every operand inside it is of the sort its op takes.

    Raises:
        MalformedArtifactError: naming the first operand of the wrong sort.
    """
    got = _sort(tree, where, 0)
    if got != want:
        raise bad_tree(where, f"{snippet(_op_text(tree))} is a {got} where a {want} is expected")


def _sort(tree: Any, where: str, depth: int) -> str:
    if depth > MAX_EXPR_DEPTH:
        raise bad_tree(where, f"nesting is deeper than {MAX_EXPR_DEPTH}")
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
            raise bad_tree(where, f"{op} compares a {BOOL} with a {NUM}")
        return BOOL
    if op in _CHOICES:
        if _sort(kids[0], where, d) != BOOL:
            raise bad_tree(where, f"the condition of {op} is a {NUM}, not a {BOOL}")
        return _same(kids[1:], op, where, d)
    if op == "Piecewise":
        for pair in kids:
            if _sort(pair[2], where, d + 1) != BOOL:
                raise bad_tree(where, f"a condition of Piecewise is a {NUM}, not a {BOOL}")
        return _same([pair[1] for pair in kids], op, where, d + 1)
    _want_all(kids, NUM, op, where, d)
    return NUM


def _want_all(kids: Any, want: str, op: str, where: str, depth: int) -> None:
    for k in kids:
        if _sort(k, where, depth) != want:
            raise bad_tree(where, f"{op} takes {want}s, got {snippet(_op_text(k))}, a "
                                   f"{BOOL if want == NUM else NUM}")


def _same(kids: Any, op: str, where: str, depth: int) -> str:
    sorts = {_sort(k, where, depth) for k in kids}
    if len(sorts) != 1:
        raise bad_tree(where, f"the branches of {op} mix {BOOL}s and {NUM}s")
    return sorts.pop()


def _op_text(tree: Any) -> str:
    try:
        return tree_to_str(tree, where="expression")
    except (MalformedArtifactError, UnsafeArtifactError):
        return repr(tree)
