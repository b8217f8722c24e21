"""The guard grammar: the limits and the tables that the parser and the printer share.

A guard is Python text over input sources (``L['x'].size()[0] >= 2``); these tables are the
allow-list of what it may hold beyond sources (operators, calls, constants) and the one place that
says how each ``schema.Expr`` member is written back as Python.
"""

from __future__ import annotations

import ast
import re

from ... import schema

__all__ = [
    "MAX_GUARDS", "MAX_GUARD_CHARS", "MAX_SOURCES", "MAX_PATH", "MAX_INDEX", "INT_LIMIT", "ALLOWED_CHARS",
    "BINOPS", "CMPOPS", "CALLS", "MAX_MIN_ARITY", "SPELLINGS", "MAX_MIN_TEXT", "OPAQUE", "OPAQUE_TEXT",
    "CALL_TEXT", "NAMED_CONSTANTS", "CONSTANT_TEXT", "INFIX", "BINARY_ONLY",
]


MAX_GUARDS = 10_000
MAX_GUARD_CHARS = 16 * 1024
MAX_SOURCES = 10_000
MAX_PATH = 32
MAX_INDEX = 1 << 31
INT_LIMIT = 1 << 63

# Characters any guard torch prints can contain; everything else is refused before parsing.
ALLOWED_CHARS = re.compile(r"[A-Za-z0-9_ ()\[\]'.,+\-*/%<>=!&|^]*\Z")

BINOPS: dict[type, str] = {
    ast.Add: "add", ast.Mult: "mul", ast.Div: "float_true_div", ast.FloorDiv: "floor_div",
    ast.Mod: "python_mod", ast.Pow: "pow", ast.BitAnd: "bitwise_and", ast.BitOr: "bitwise_or",
    ast.BitXor: "bitwise_xor",
}
CMPOPS: dict[type, str] = {
    ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge",
}
# Functions torch's ShapeGuardPythonPrinter emits, with their Expr member and arity (min, max).
# torch 2.13 prints sympy's Max/Min as the builtins, n-ary; 2.14 as torch.sym_max/sym_min, binary
# and nested to the right (max(a, b, c) is torch.sym_max(a, torch.sym_max(b, c))), since the
# builtins fail on unbacked sizes. Both spellings parse to one n-ary tree (nested max/min of the
# same kind are merged), so an artifact's bytes do not depend on the torch that wrote it.
CALLS: dict[str, tuple[str, int, int]] = {
    "abs": ("abs", 1, 1), "max": ("max", 2, 64), "min": ("min", 2, 64),
    "torch.sym_max": ("max", 2, 2), "torch.sym_min": ("min", 2, 2),
    "math.floor": ("floor_to_int", 1, 1), "math.ceil": ("ceil_to_int", 1, 1),
    "math.trunc": ("trunc_to_int", 1, 1), "torch.sym_float": ("to_float", 1, 1),
    "round": ("round_to_int", 1, 1),
}
MAX_MIN_ARITY = 64
# How max/min print: "builtin" as torch 2.13 writes them, "sym" as torch 2.14 does. A loaded
# program's guards are printed the way the running torch prints its own, so that its guard
# function compiles there and fails with the message torch's would.
SPELLINGS = ("builtin", "sym")
MAX_MIN_TEXT = {"builtin": {"max": "max", "min": "min"}, "sym": {"max": "torch.sym_max", "min": "torch.sym_min"}}
OPAQUE: dict[str, str] = {"torch._sym_sqrt": "sqrt", **{f"math.{f}": f for f in (
    "cos", "cosh", "sin", "sinh", "tan", "tanh", "asin", "acos", "atan", "log2")}}
OPAQUE_TEXT = {fn: text for text, fn in OPAQUE.items()}
CALL_TEXT = {m: text for text, (m, _, _) in CALLS.items() if m not in ("max", "min")}
NAMED_CONSTANTS = {"math.inf": schema.ExprConstant.INFINITY, "math.nan": schema.ExprConstant.NAN}
CONSTANT_TEXT = {
    schema.ExprConstant.TRUE: "True", schema.ExprConstant.FALSE: "False",
    schema.ExprConstant.INFINITY: "math.inf", schema.ExprConstant.NEG_INFINITY: "(-math.inf)",
    schema.ExprConstant.NAN: "math.nan",
}
INFIX = {"add": " + ", "mul": " * ", "float_true_div": " / ", "floor_div": " // ", "python_mod": " % ",
         "pow": " ** ", "bitwise_and": " & ", "bitwise_or": " | ", "bitwise_xor": " ^ ",
         "eq": " == ", "ne": " != ", "lt": " < ", "le": " <= ", "gt": " > ", "ge": " >= ",
         "logical_and": " and ", "logical_or": " or "}
BINARY_ONLY = {"float_true_div", "floor_div", "python_mod", "pow", "eq", "ne", "lt", "le", "gt", "ge"}
