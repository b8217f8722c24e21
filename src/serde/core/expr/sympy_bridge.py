"""Expression trees <-> sympy, built as torch builds them (sympy and torch imported on first use).

torch keeps size expressions as sympy objects over its own functions (``FloorDiv``, ``Mod``, ...).
Loading builds them from validated trees (never from text), with literal sizes and exponents
bounded so that a hostile file cannot pin a core inside sympy; saving turns them into trees and
refuses any class outside the allow-list of :mod:`.tree`. Importing this module imports neither
sympy nor torch.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

from serde.errors import MalformedArtifactError, UnsupportedConstructError

from ..errors import IntegerTooLargeError
from ..limits import DEFAULT_LIMITS, too_large
from .parse import Parser
from .text import render
from .tree import (
    CONSTANTS,
    FUNCS,
    MAX_EXPR_DEPTH,
    TORCH_FUNCS,
    ExprTree,
    bad_tree,
    check_symbol_name,
    degree,
    node_shape,
    snippet,
)

__all__ = ["print_expr", "parse_expr", "tree_to_sympy", "sympy_to_tree", "as_sympy", "from_sympy"]

# Exact powers/shifts of numeric literals beyond this many bits are refused: "9**9**9" would
# otherwise pin a core inside sympy while loading an untrusted file.
_MAX_POWER_BITS = DEFAULT_LIMITS.max_power_bits
# Literals and exponents of unknown bases are bounded too: torch evaluates size expressions on
# their hints, and s0**(2**62) or a 4000-digit literal would pin a core there instead.
_MAX_INT_BITS = DEFAULT_LIMITS.max_int_bits
_MAX_EXPONENT = DEFAULT_LIMITS.max_exponent
_MAX_DEGREE = DEFAULT_LIMITS.max_degree

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
    return tree_to_sympy(Parser(text, where).parse(), symbol, where=where)


def tree_to_sympy(tree: Any, symbol: Callable[[str], Any], *, where: str = "expression") -> Any:
    """Build the sympy expression for ``tree`` (tuples or JSON lists), validating it on the way.

    Raises:
        MalformedArtifactError: unknown op, wrong arity or payload, too deep, or sympy refuses
            the arguments (e.g. ``FloorDiv(s0, 0)``).
    """
    built = _Builder(symbol, where).build(tree, 0)
    if degree(tree) > _MAX_DEGREE:
        raise IntegerTooLargeError(too_large(where, f"the degree of {snippet(str(built))}",
                                             degree(tree), "max_degree", _MAX_DEGREE, per_load=False))
    return built


def sympy_to_tree(e: Any, *, where: str = "expression") -> ExprTree:
    """Convert a sympy expression (or torch SymInt/SymFloat/SymBool) into a canonical tree.

    Raises:
        UnsupportedConstructError: a class outside the allow-list, a symbol name the grammar cannot
            carry, or a Float with more than double precision.
    """
    tree = render(from_sympy(as_sympy(e), where, 0), where, 0).tree
    if degree(tree) > _MAX_DEGREE:
        # (a file that no load would take)
        raise UnsupportedConstructError(
            f"{where}: {snippet(str(e))} is a polynomial of degree {degree(tree)}; pt2serde stores size expressions "
            f"up to degree {_MAX_DEGREE} (serde.core.limits.Limits.max_degree), as loading one makes torch factor it. "
            "Mark fewer dims of one tensor dynamic, or keep the size static")
    return tree


# --- sympy side (imports sympy and torch lazily) ---------------------------------------------


@functools.cache
def _sympy_tables() -> tuple[dict[str, Any], dict[type, str], dict[Any, str]]:
    """(op -> constructor, class -> op, singleton -> constant op), built once."""
    import sympy
    import torch.utils._sympy.functions as tf
    from torch.utils._sympy.numbers import int_oo

    ctor: dict[str, Any] = {name: getattr(tf, name) for name in TORCH_FUNCS}
    ctor.update({
        "Add": sympy.Add, "Mul": sympy.Mul, "Pow": sympy.Pow,
        "Eq": sympy.Eq, "Ne": sympy.Ne, "Lt": sympy.Lt, "Le": sympy.Le, "Gt": sympy.Gt,
        "Ge": sympy.Ge, "And": sympy.And, "Or": sympy.Or, "Not": sympy.Not,
        "Abs": sympy.Abs, "floor": sympy.floor, "ceiling": sympy.ceiling,
        "Piecewise": sympy.Piecewise, "ITE": sympy.ITE, "ExprCondPair": sympy.functions.elementary.piecewise.ExprCondPair,
    })
    assert set(ctor) == set(FUNCS) | {"ExprCondPair"}, "constructor table out of sync"
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

        op, rest = node_shape(tree, self.where, depth)
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
        if op in CONSTANTS:
            return _const_value(op)
        args = [self.build(ch, depth + 1) for ch in rest]
        ctor = _sympy_tables()[0][op]
        self._check_size(op, args)
        try:
            return ctor(*args)
        except RecursionError:
            raise bad_tree(self.where, f"{op} is nested too deeply for sympy") from None
        except Exception as e:  # sympy/torch reject the arguments: a bad artifact, not a bug here
            shown = ", ".join(str(a) for a in args)
            raise MalformedArtifactError(
                f"{self.where}: cannot build {op}({snippet(shown)[1:-1]}): {type(e).__name__}: {e}. "
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
                    self.where, f"the exponent of {op}({snippet(str(base))[1:-1]}, ...)", snippet(str(exp)),
                    "max_exponent", _MAX_EXPONENT, per_load=False))
            return
        bits = max(abs(int(base.p)).bit_length(), int(base.q).bit_length())
        if bits > 1 and abs(int(exp)) * bits > _MAX_POWER_BITS:
            raise IntegerTooLargeError(
                f"{self.where}: {op} of {snippet(str(base))} to the {snippet(str(exp))} would "
                f"have more than {_MAX_POWER_BITS} bits; refusing to evaluate it. "
                "The artifact is damaged or hostile."
            )


@functools.lru_cache(maxsize=4096)
def _print_cached(e: Any) -> str:
    # Programs repeat the same few size expressions in every tensor meta; sympy objects are
    # immutable and hash structurally, so caching by the object is safe.
    return render(from_sympy(e, "expression", 0), "expression", 0).text


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


def from_sympy(e: Any, where: str, depth: int) -> ExprTree:
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
        check_symbol_name(e.name, where, UnsupportedConstructError)
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
            f"{where}: symbolic expression {snippet(str(e))} uses {type(e).__name__}, which "
            "pt2serde cannot save yet. Avoid it in size computations, or file an issue."
        )
    return (op, *(from_sympy(a, where, depth + 1) for a in e.args))
