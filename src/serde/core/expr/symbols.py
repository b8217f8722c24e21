"""Symbol names in expression text: the free names, and renaming them canonically, without sympy
(the canonicalizer renames every symbol of a program; only Piecewise and Abs go through sympy)."""

from __future__ import annotations

from serde.errors import MalformedArtifactError

from .parse import Parser
from .sympy_bridge import from_sympy, tree_to_sympy
from .text import render
from .tree import ExprTree, check_symbol_name, renamed, symbol_assumptions, walk_symbols

__all__ = ["free_symbol_names", "rename_symbols"]

def free_symbol_names(text: str, *, where: str = "expression") -> set[str]:
    """Names of the symbols in expression text, without sympy.

    Raises:
        MalformedArtifactError, UnsafeArtifactError: as :func:`parse_expr`.
    """
    names: set[str] = set()
    walk_symbols(Parser(text, where).parse(), names.add)
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
        check_symbol_name(new, where, MalformedArtifactError)
    tree = renamed(Parser(text, where).parse(), mapping)
    if normalize_relations:
        tree = _normalize_relations(tree, where)
    elif "Piecewise(" in text or "Abs(" in text:
        import sympy

        built = tree_to_sympy(tree, lambda n: sympy.Symbol(n, **symbol_assumptions(n)), where=where)
        tree = from_sympy(built, where, 0)
    return render(tree, where, 0).text


_FLIP = {"Gt": "Lt", "Ge": "Le"}


def _normalize_relations(tree: ExprTree, where: str) -> ExprTree:
    op = tree[0]
    if op in ("Integer", "Rational", "Float", "Symbol"):
        return tree
    kids = [_normalize_relations(ch, where) for ch in tree[1:]]
    if op in _FLIP:
        return (_FLIP[op], kids[1], kids[0])
    if op in ("Eq", "Ne"):
        kids.sort(key=lambda k: render(k, where, 0).text)
    return (op, *kids)
