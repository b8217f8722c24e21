"""Size expressions, torch-free: trees (:mod:`.tree`), their text (:mod:`.parse`, :mod:`.text`),
their sorts (:mod:`.sorts`), symbol names (:mod:`.symbols`), the sympy bridge (:mod:`.sympy_bridge`),
the stored form ``schema.Expr`` (:mod:`.stored`), and input guards (:mod:`.guards`)."""

from .parse import parse_to_tree
from .sorts import BOOL, NUM, check_sort
from .stored import (
    FUNCTION_MEMBERS,
    expr_from_sympy,
    expr_from_text,
    expr_from_tree,
    expr_key,
    expr_symbols,
    expr_text,
    expr_to_sympy,
    expr_to_tree,
    ranges_by_text,
)
from .symbols import free_symbol_names, rename_symbols
from .sympy_bridge import as_sympy, parse_expr, print_expr, sympy_to_tree, tree_to_sympy
from .text import tree_to_str
from .tree import ARITY, MAX_EXPR_CHARS, MAX_EXPR_DEPTH, SYMBOL_CLASS_RE, ExprTree, symbol_assumptions

__all__ = [
    "ARITY", "BOOL", "NUM", "MAX_EXPR_CHARS", "MAX_EXPR_DEPTH", "SYMBOL_CLASS_RE", "ExprTree", "FUNCTION_MEMBERS",
    "as_sympy", "check_sort", "expr_from_sympy", "expr_from_text", "expr_from_tree", "expr_key", "expr_symbols",
    "expr_text", "expr_to_sympy", "expr_to_tree", "free_symbol_names", "parse_expr", "parse_to_tree", "print_expr",
    "ranges_by_text", "rename_symbols", "symbol_assumptions", "sympy_to_tree", "tree_to_str", "tree_to_sympy",
]
