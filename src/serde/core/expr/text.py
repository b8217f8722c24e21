"""Expression trees as canonical text: the one printer of size expressions.

The printer sorts the children of commutative nodes by their own printed text, so the text is
canonical without sympy, and parenthesizes by Python's precedence, so the text reads (and parses
back, :mod:`.parse`) exactly as Python would. Every node is validated (:func:`.tree.node_shape`)
before it is read, so a tree from an untrusted file can be printed directly.
"""

from __future__ import annotations

from typing import Any

from .tree import COEFF_LEAVES, COMMUTATIVE, CONSTANTS, NUMERIC_LEAVES, ExprTree, node_shape

__all__ = ["tree_to_str", "render", "Rendered", "CMP", "OR", "AND", "ADD", "MUL", "UNARY", "POW", "ATOM"]

# Python's precedence, lowest first. The printer parenthesizes by these, so the text reads (and
# parses) exactly as Python would.
CMP, OR, AND, ADD, MUL, UNARY, POW, ATOM = range(1, 9)

_CMP_TEXT = {"Lt": "<", "Le": "<=", "Gt": ">", "Ge": ">="}  # Eq/Ne print as calls, like sympy


def tree_to_str(tree: Any, *, where: str = "expression") -> str:
    """Print a tree as canonical text (commutative children sorted, minimal parentheses).

    Raises:
        MalformedArtifactError: the tree is not well formed.
    """
    return render(tree, where, 0).text


class Rendered:
    """A rendered subtree: its text, the precedence of that text, the canonical tree, and the
    text without a leading numeric coefficient (the sort key that groups like terms)."""

    __slots__ = ("text", "prec", "tree", "core")

    def __init__(self, text: str, prec: int, tree: ExprTree, core: str | None = None):
        self.text, self.prec, self.tree = text, prec, tree
        self.core = text if core is None else core


def render(tree: Any, where: str, depth: int) -> Rendered:
    op, rest = node_shape(tree, where, depth)
    if op == "Integer":
        n = rest[0]
        return Rendered(str(n), ATOM if n >= 0 else UNARY, ("Integer", n))
    if op == "Rational":
        return Rendered(f"{rest[0]}/{rest[1]}", MUL, ("Rational", rest[0], rest[1]))
    if op == "Float":
        text = repr(float(rest[0]))
        return Rendered(text, UNARY if text.startswith("-") else ATOM, ("Float", text))
    if op == "Symbol":
        return Rendered(rest[0], ATOM, ("Symbol", rest[0]))
    if op in CONSTANTS:
        return Rendered(op, UNARY if op.startswith("-") else ATOM, (op,))
    if op == "ExprCondPair":
        e, c = (render(ch, where, depth + 1) for ch in rest)
        return Rendered(f"({e.text}, {c.text})", ATOM, (op, e.tree, c.tree))

    kids = [render(ch, where, depth + 1) for ch in rest]
    if op == "Add":
        kids.sort(key=lambda k: (k.tree[0] in NUMERIC_LEAVES, k.core, k.text))
        parts = [_paren(kids[0], ADD)]
        for k in kids[1:]:
            t = _paren(k, ADD)
            parts.append(f" - {t[1:]}" if t.startswith("-") else f" + {t}")
        return Rendered("".join(parts), ADD, _tree(op, kids))
    if op == "Mul":
        kids.sort(key=lambda k: (k.tree[0] not in NUMERIC_LEAVES, k.text))
        rest_kids = kids[1:] if kids[0].tree[0] in COEFF_LEAVES and len(kids) > 1 else kids
        core = "*".join(_paren(k, MUL + 1) for k in rest_kids)
        if rest_kids is kids:
            text = core
        elif kids[0].tree == ("Integer", -1):
            text = "-" + (core if len(rest_kids) > 1 or rest_kids[0].prec >= UNARY
                          else f"({core})")
        else:
            text = f"{kids[0].text}*{core}"
        return Rendered(text, MUL, _tree(op, kids), core)
    if op == "Pow":
        base, exp = kids
        return Rendered(f"{_paren(base, POW + 1)}**{_paren(exp, POW)}", POW, _tree(op, kids))
    if op in _CMP_TEXT:
        a, b = kids
        return Rendered(f"{_paren(a, CMP + 1)} {_CMP_TEXT[op]} {_paren(b, CMP + 1)}", CMP, _tree(op, kids))
    if op in ("And", "Or"):
        kids.sort(key=lambda k: k.text)
        prec = AND if op == "And" else OR
        sep = " & " if op == "And" else " | "
        return Rendered(sep.join(_paren(k, prec + 1) for k in kids), prec, _tree(op, kids))
    if op == "Not":
        return Rendered("~" + _paren(kids[0], UNARY), UNARY, _tree(op, kids))
    if op in COMMUTATIVE:  # Max, Min
        kids.sort(key=lambda k: k.text)
    return Rendered(f"{op}({', '.join(k.text for k in kids)})", ATOM, _tree(op, kids))


def _paren(k: Rendered, min_prec: int) -> str:
    return k.text if k.prec >= min_prec else f"({k.text})"


def _tree(op: str, kids: list[Rendered]) -> ExprTree:
    return (op, *(k.tree for k in kids))
