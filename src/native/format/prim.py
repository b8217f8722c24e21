"""The ``symbolic::`` operators: scalar arithmetic on sizes (SymInt, SymFloat, SymBool) and loop indices.

torch.export leaves Python callables (``_operator.floordiv``, ``torch.sym_max``, ...) as targets
for size arithmetic. The emitter turns each into a ``symbolic::<name>`` operator with overload
``default``; a runtime implements this closed set itself (the table below is the reference).
No torch here: the operands are Python ints, floats and bools.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

__all__ = ["NAMESPACE", "PRIM_OPS", "TARGET_TO_PRIM", "prim_name"]

NAMESPACE = "symbolic"


def _ite(c: Any, a: Any, b: Any) -> Any:
    return a if c else b


def _sym_sum(xs: Any) -> Any:
    return sum(xs)


def _sym_int(x: Any) -> int:
    return math.trunc(x)


# name -> implementation. Every one is total on the values size arithmetic produces.
PRIM_OPS: dict[str, Callable[..., Any]] = {
    "add": operator.add, "sub": operator.sub, "mul": operator.mul, "truediv": operator.truediv,
    "floordiv": operator.floordiv, "mod": operator.mod, "pow": operator.pow, "neg": operator.neg,
    "pos": operator.pos, "abs": abs, "eq": operator.eq, "ne": operator.ne, "lt": operator.lt,
    "le": operator.le, "gt": operator.gt, "ge": operator.ge, "and": operator.and_, "or": operator.or_,
    "lshift": operator.lshift, "rshift": operator.rshift, "floor": math.floor, "ceil": math.ceil,
    "trunc": math.trunc, "round": round, "not": operator.not_, "float": float, "int": _sym_int,
    "ite": _ite, "max": max, "min": min, "sum": _sym_sum, "sqrt": math.sqrt,
}

# Wire name of an exported target (serde.bridge.operators.SYMBOLIC_TARGETS) -> symbolic op name.
TARGET_TO_PRIM: dict[str, str] = {
    **{f"_operator.{n}": n for n in ("add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "neg",
                                     "pos", "abs", "eq", "ne", "lt", "le", "gt", "ge", "lshift", "rshift")},
    "_operator.and_": "and", "_operator.or_": "or",
    "math.floor": "floor", "math.ceil": "ceil", "math.trunc": "trunc", "builtins.round": "round",
    "torch.sym_not": "not", "torch.sym_float": "float", "torch.sym_int": "int", "torch.sym_ite": "ite",
    "torch.sym_max": "max", "torch.sym_min": "min", "torch.sym_sum": "sum", "torch._sym_sqrt": "sqrt",
    "torch.sym_sqrt": "sqrt",
}
assert set(TARGET_TO_PRIM.values()) <= set(PRIM_OPS)


def prim_name(name: str) -> str:
    """Operator-table name of a symbolic op, e.g. ``symbolic::floordiv``."""
    return f"{NAMESPACE}::{name}"
