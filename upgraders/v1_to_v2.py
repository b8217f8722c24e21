"""1.x -> 2.0: symbolic expressions become structured trees (schema.Expr) instead of strings.

- Every SymExpr ``{"expr_str": "2*s0 + 1", "hint": ...}`` becomes ``{"expr": <tree>, "hint": ...}``.
- ``range_constraints`` goes from a map keyed by expression text to a list of
  ``{"expr": <tree>, "min_val": ..., "max_val": ...}`` (sorted by the old key).

The text is read by a frozen copy of the 1.x expression grammar (``_v1_text``), never sympify or
eval, and the tree -> JSON table below is a frozen copy of the 2.0 ``Expr`` union: this step must
keep producing exactly 2.0 documents whatever later versions do to the live parser or to
serde.core.expr, so it imports neither (an import contract in pyproject.toml checks this).
"""

from __future__ import annotations

import math
from typing import Any

from serde.errors import UpgradeError

from ._helpers import has_keys, map_values_at
from ._v1_text import MAX_EXPR_DEPTH, parse

FROM = (1, 0)
TO = (2, 0)
DATE = "2026-11-22"
SUMMARY = "symbolic expressions become structured trees; range_constraints becomes a list"

_FUNCTIONS = {
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
_CONSTANTS = {"True": 1, "False": 2, "oo": 3, "-oo": 4, "int_oo": 5, "-int_oo": 6, "nan": 7, "zoo": 8}


def _float(text: str) -> Any:
    x = float(text)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def tree_to_json(t: tuple, depth: int = 0) -> dict[str, Any]:
    """A tuple tree from ``_v1_text.parse`` -> the 2.0 JSON form of ``Expr``."""
    if depth > MAX_EXPR_DEPTH:
        raise UpgradeError(f"expression nested deeper than {MAX_EXPR_DEPTH}")
    op = t[0]
    if op == "Symbol":
        return {"symbol": t[1]}
    if op == "Integer":
        return {"integer": int(t[1])}
    if op == "Float":
        return {"floating": _float(t[1])}
    if op == "Rational":
        return {"rational": {"p": int(t[1]), "q": int(t[2])}}
    if op in _CONSTANTS:
        return {"constant": _CONSTANTS[op]}
    if op == "Piecewise":
        return {"piecewise": [tree_to_json(x, depth + 1) for pair in t[1:] for x in pair[1:]]}
    if op.startswith("OpaqueUnaryFn_"):
        return {"opaque_unary": {"fn": op[len("OpaqueUnaryFn_"):], "arg": tree_to_json(t[1], depth + 1)}}
    if op not in _FUNCTIONS:
        raise UpgradeError(f"expression op {op!r} has no 2.0 form")
    return {_FUNCTIONS[op]: [tree_to_json(c, depth + 1) for c in t[1:]]}


def _expr(text: Any, where: str) -> dict[str, Any]:
    if not isinstance(text, str):
        raise UpgradeError(f"{where}: expected expression text, got {type(text).__name__}")
    return tree_to_json(parse(text, where=where))


def _sym_expr(d: dict[str, Any], path: str) -> dict[str, Any]:
    out = {k: v for k, v in d.items() if k != "expr_str"}
    out["expr"] = _expr(d["expr_str"], f"program.json: {path}")
    return out


def upgrade(docs: dict[str, Any]) -> dict[str, Any]:
    """Pure: returns new documents; ``docs`` is not modified."""
    program = docs["program"]
    if not isinstance(program, dict):
        raise UpgradeError("program.json: expected an object")
    new_program = map_values_at(program, has_keys("expr_str"), _sym_expr, with_path=True)
    ranges = program.get("range_constraints", {})
    if not isinstance(ranges, dict):
        raise UpgradeError("program.json: range_constraints: expected an object in 1.x")
    new_program["range_constraints"] = [
        {**rc, "expr": _expr(key, f"program.json: range_constraints[{key!r}]")}
        for key, rc in sorted(ranges.items())
    ]
    return {**docs, "program": new_program}
