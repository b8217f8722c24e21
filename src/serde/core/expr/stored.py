"""Stored expressions: schema 2.0 trees (``schema.Expr``) <-> the tuple trees of :mod:`.tree`.

One table maps each tuple-tree op to its ``Expr`` union member; both directions use it.
Conversions are depth-bounded. Everything here is torch-free; only ``*_sympy`` touch sympy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from serde.errors import MalformedArtifactError

from .. import schema
from .parse import parse_to_tree
from .sympy_bridge import sympy_to_tree, tree_to_sympy
from .text import tree_to_str
from .tree import ARITY, MAX_EXPR_DEPTH

__all__ = [
    "expr_from_tree", "expr_to_tree", "expr_from_sympy", "expr_to_sympy", "expr_text", "expr_symbols", "expr_renamed",
    "expr_key", "expr_from_text", "ranges_by_text", "FUNCTION_MEMBERS",
]

E = schema.Expr

# tuple-tree op -> Expr member holding list<Expr> of its children, in order.
FUNCTION_MEMBERS: dict[str, str] = {
    "Add": "add", "Mul": "mul", "Pow": "pow",
    "Eq": "eq", "Ne": "ne", "Lt": "lt", "Le": "le", "Gt": "gt", "Ge": "ge",
    "And": "logical_and", "Or": "logical_or", "Not": "logical_not", "ITE": "ite",
    "Abs": "abs", "floor": "floor", "ceiling": "ceiling",
    "FloorDiv": "floor_div", "Mod": "mod", "PythonMod": "python_mod", "CleanDiv": "clean_div",
    "CeilDiv": "ceil_div", "ModularIndexing": "modular_indexing", "Where": "where",
    "CeilToInt": "ceil_to_int", "FloorToInt": "floor_to_int", "TruncToInt": "trunc_to_int",
    "TruncToFloat": "trunc_to_float", "RoundToInt": "round_to_int", "RoundDecimal": "round_decimal",
    "ToFloat": "to_float", "IntTrueDiv": "int_true_div", "FloatTrueDiv": "float_true_div",
    "PowByNatural": "pow_by_natural", "FloatPow": "float_pow", "LShift": "lshift", "RShift": "rshift",
    "Identity": "identity", "Max": "max", "Min": "min",
    "IsNonOverlappingAndDenseIndicator": "is_non_overlapping_and_dense",
    "BitwiseFn_bitwise_and": "bitwise_and", "BitwiseFn_bitwise_or": "bitwise_or",
    "BitwiseFn_bitwise_xor": "bitwise_xor",
}
_MEMBER_OPS = {m: op for op, m in FUNCTION_MEMBERS.items()}
_CONSTANTS: dict[str, schema.ExprConstant] = {
    "True": schema.ExprConstant.TRUE, "False": schema.ExprConstant.FALSE,
    "oo": schema.ExprConstant.INFINITY, "-oo": schema.ExprConstant.NEG_INFINITY,
    "int_oo": schema.ExprConstant.INT_INFINITY, "-int_oo": schema.ExprConstant.NEG_INT_INFINITY,
    "nan": schema.ExprConstant.NAN, "zoo": schema.ExprConstant.COMPLEX_INFINITY,
}
_CONSTANT_OPS = {v: k for k, v in _CONSTANTS.items()}
_OPAQUE = "OpaqueUnaryFn_"
_LEAVES = {"symbol", "integer", "floating", "rational", "constant", "opaque_unary", "piecewise"}

if set(FUNCTION_MEMBERS.values()) | _LEAVES != set(schema.Expr.__struct_fields__):  # exhaustive, at import
    raise AssertionError(
        f"stored-expression tables out of sync with schema.Expr: "
        f"{(set(FUNCTION_MEMBERS.values()) | _LEAVES) ^ set(schema.Expr.__struct_fields__)}")
if set(_CONSTANT_OPS) != set(schema.ExprConstant):
    raise AssertionError("ExprConstant values out of sync with stored._CONSTANTS")


def expr_from_tree(t: Any, *, where: str = "expression", _depth: int = 0) -> schema.Expr:
    """Tuple tree (as the parser and the sympy bridge produce it) -> schema.Expr."""
    if _depth > MAX_EXPR_DEPTH:
        raise MalformedArtifactError(f"{where}: expression nested deeper than {MAX_EXPR_DEPTH}")
    op = t[0]
    if op == "Symbol":
        return E(symbol=t[1])
    if op == "Integer":
        return E(integer=int(t[1]))
    if op == "Float":
        return E(floating=schema.to_f64(float(t[1])))
    if op == "Rational":
        return E(rational=schema.Rational(p=int(t[1]), q=int(t[2])))
    if op in _CONSTANTS:
        return E(constant=_CONSTANTS[op])
    if op == "Piecewise":
        flat = [expr_from_tree(x, where=where, _depth=_depth + 1) for pair in t[1:] for x in pair[1:]]
        return E(piecewise=flat)
    if op.startswith(_OPAQUE):
        return E(opaque_unary=schema.OpaqueUnary(
            fn=op[len(_OPAQUE):], arg=expr_from_tree(t[1], where=where, _depth=_depth + 1)))
    member = FUNCTION_MEMBERS.get(op)
    if member is None:
        raise MalformedArtifactError(f"{where}: unknown expression op {op!r}")
    return E(**{member: [expr_from_tree(c, where=where, _depth=_depth + 1) for c in t[1:]]})


def expr_to_tree(e: schema.Expr, *, where: str = "expression", _depth: int = 0) -> tuple:
    """schema.Expr -> tuple tree (validated later, when built or printed)."""
    if _depth > MAX_EXPR_DEPTH:
        raise MalformedArtifactError(f"{where}: expression nested deeper than {MAX_EXPR_DEPTH}")
    # The leaves, most of a tree, without the union dispatch.
    if (v := e.symbol) is not None:
        return ("Symbol", v)
    if (v := e.integer) is not None:
        return ("Integer", v)
    kind = e.kind
    v = getattr(e, kind)
    if kind == "floating":
        return ("Float", repr(schema.from_f64(v)))
    if kind == "rational":
        return ("Rational", v.p, v.q)
    if kind == "constant":
        return (_CONSTANT_OPS[v],)
    d = _depth + 1
    if kind == "piecewise":
        if len(v) % 2 or not v:
            raise MalformedArtifactError(f"{where}: piecewise needs (expression, condition) pairs")
        kids = [expr_to_tree(x, where=where, _depth=d) for x in v]
        return ("Piecewise", *(("ExprCondPair", kids[i], kids[i + 1]) for i in range(0, len(kids), 2)))
    if kind == "opaque_unary":
        return (_OPAQUE + v.fn, expr_to_tree(v.arg, where=where, _depth=d))
    op = _MEMBER_OPS[kind]
    lo, hi = ARITY[op]
    if len(v) < lo or (hi is not None and len(v) > hi):
        # Checked here, where every reader gets its tree (the native emitter indexes operands)
        raise MalformedArtifactError(
            f"{where}: {kind} takes {_count(lo, hi)}, got {len(v)}; the artifact is damaged or was written "
            "by an incompatible tool")
    return (op, *(expr_to_tree(x, where=where, _depth=d) for x in v))


def _count(lo: int, hi: int | None) -> str:
    if lo == hi:
        return f"{lo} operand" + ("" if lo == 1 else "s")
    return f"{lo} or more operands" if hi is None else f"{lo} to {hi} operands"


def expr_from_sympy(e: Any, *, where: str = "expression") -> schema.Expr:
    return expr_from_tree(sympy_to_tree(e, where=where), where=where)


def expr_to_sympy(e: schema.Expr, symbol: Callable[[str], Any], *, where: str = "expression") -> Any:
    return tree_to_sympy(expr_to_tree(e, where=where), symbol, where=where)


def expr_text(e: schema.Expr, *, where: str = "expression") -> str:
    """Canonical readable text, e.g. ``2*s0 + 1``."""
    return tree_to_str(expr_to_tree(e, where=where), where=where)


def expr_key(e: schema.Expr, *, where: str = "expression") -> tuple:
    """A hashable key for an expression (its tuple tree)."""
    return expr_to_tree(e, where=where)


def expr_renamed(e: schema.Expr, rename: Callable[[str], str], *, where: str = "expression",
                 _depth: int = 0) -> schema.Expr:
    """``e`` with each symbol ``s`` replaced by ``rename(s)``."""
    if _depth > MAX_EXPR_DEPTH:
        raise MalformedArtifactError(f"{where}: expression nested deeper than {MAX_EXPR_DEPTH}")
    kind = e.kind
    v = getattr(e, kind)  # (e.value would find the kind again)
    d = _depth + 1
    if kind == "symbol":
        return E(symbol=rename(v))
    if kind == "opaque_unary":
        return E(opaque_unary=schema.OpaqueUnary(fn=v.fn, arg=expr_renamed(v.arg, rename, where=where, _depth=d)))
    if isinstance(v, list):
        return E(**{kind: [expr_renamed(x, rename, where=where, _depth=d) for x in v]})
    return e


def expr_symbols(e: schema.Expr) -> set[str]:
    """Names of the symbols in ``e``."""
    out: set[str] = set()
    stack = [e]
    while stack:
        x = stack.pop()
        kind = x.kind
        v = getattr(x, kind)
        if kind == "symbol":
            out.add(v)
        elif kind == "opaque_unary":
            stack.append(v.arg)
        elif isinstance(v, list):
            stack.extend(v)
    return out


def expr_from_text(text: str, *, where: str = "expression") -> schema.Expr:
    """Parse canonical expression text (our restricted grammar) into a tree."""
    return expr_from_tree(parse_to_tree(text, where=where), where=where)


def ranges_by_text(ranges: list[schema.RangeConstraint]) -> dict[str, schema.RangeConstraint]:
    """Range constraints keyed by the text of their expression."""
    return {expr_text(rc.expr, where=f"range_constraints[{i}]"): rc for i, rc in enumerate(ranges)}
