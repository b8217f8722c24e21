"""Size expressions: from the schema to compact postfix code, evaluated at run time; bounds.

The emitter gets a plain tuple tree for a ``SymExpr`` from :func:`tree_of` (the only place that
knows how the schema stores expressions), compiles it with :func:`compile_tree` into a list of
ints, and the runtime evaluates that list with :func:`evaluate` given the symbol values. All
arithmetic is on Python ints (int64 in a C++ runtime); booleans are 0 and 1.

Code is postfix: each opcode pops its operands and pushes one result.

======  ==========  =========================================================
opcode  operand     meaning
======  ==========  =========================================================
0       k           push the integer k
1       s           push the value of symbol s (index into Program.symbols)
2       n           pop n values, push their sum
3       n           pop n values, push their product
4                   a // b (floor division; b == 0 is an error)
5                   a % b with the sign of b (Python's %, sympy's Mod on sizes)
6                   a ** b (b >= 0)
7       n           max of n values
8       n           min of n values
9..14               a == b, a != b, a < b, a <= b, a > b, a >= b
15      n           logical and of n values
16      n           logical or of n values
17                  logical not
18                  ceil(a / b)
19                  c ? a : b (pops c, a, b in that order of pushing)
======  ==========  =========================================================
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from native.errors import NativeFormatError
from serde.core import schema
from serde.core.errors import IntegerTooLargeError
from serde.core.expr import NUM, check_sort, expr_to_tree, tree_to_str
from serde.core.limits import DEFAULT_LIMITS, too_large
from serde.errors import UnsupportedConstructError

__all__ = ["tree_of", "compile_tree", "evaluate", "check_code", "bounds", "affine_in", "symbols_of", "OPS",
           "UnboundSymbolError"]

PUSH, SYM, ADD, MUL, FLOORDIV, MOD, POW, MAX, MIN = range(9)
EQ, NE, LT, LE, GT, GE, AND, OR, NOT, CEILDIV, WHERE = range(9, 20)

# opcode -> (name, has an immediate operand, fixed arity or None when the immediate is the arity)
OPS: dict[int, tuple[str, bool, int | None]] = {
    PUSH: ("push", True, 0), SYM: ("sym", True, 0), ADD: ("add", True, None), MUL: ("mul", True, None),
    FLOORDIV: ("floordiv", False, 2), MOD: ("mod", False, 2), POW: ("pow", False, 2),
    MAX: ("max", True, None), MIN: ("min", True, None), EQ: ("eq", False, 2), NE: ("ne", False, 2),
    LT: ("lt", False, 2), LE: ("le", False, 2), GT: ("gt", False, 2), GE: ("ge", False, 2),
    AND: ("and", True, None), OR: ("or", True, None), NOT: ("not", False, 1),
    CEILDIV: ("ceildiv", False, 2), WHERE: ("where", False, 3),
}

_NARY = {"Add": ADD, "Mul": MUL, "Max": MAX, "Min": MIN, "And": AND, "Or": OR}
_BINARY = {"FloorDiv": FLOORDIV, "CleanDiv": FLOORDIV, "Mod": MOD, "PythonMod": MOD, "PowByNatural": POW,
           "Eq": EQ, "Ne": NE, "Lt": LT, "Le": LE, "Gt": GT, "Ge": GE, "CeilDiv": CEILDIV,
           "BitwiseFn_bitwise_and": AND, "BitwiseFn_bitwise_or": OR}
_IDENTITY = {"Identity", "CeilToInt", "FloorToInt", "TruncToInt", "RoundToInt"}
_MAX_STACK = 1 << 12


class UnboundSymbolError(ValueError):
    """An expression used a symbol that has no value yet (an unbacked, data-dependent size)."""


def tree_of(e: schema.SymExpr, *, where: str, sort: str = NUM) -> tuple:
    """The plain tuple tree of a schema expression (the one place tied to the schema's encoding),
    which must be of ``sort`` (a number for sizes and SymInts, a boolean for SymBools: the runtime
    would evaluate one as the other).

    Raises:
        MalformedArtifactError: an operand count or sort the op does not take.
        IntegerTooLargeError: a literal outside int64, or a power whose exponent exceeds
            ``Limits.max_exponent``: checked here, before :func:`bounds` or the runtime computes it.
    """
    tree = expr_to_tree(e.expr, where=where)
    check_sort(tree, sort, where=where)
    _check_magnitudes(tree, where)
    return tree


def _check_magnitudes(tree: tuple, where: str) -> None:
    stack = [tree]
    while stack:
        t = stack.pop()
        op = t[0]
        if op in ("Integer", "Rational"):
            for v in t[1:]:
                if not -_INT64 <= v < _INT64:
                    raise IntegerTooLargeError(too_large(where, "an integer literal", f"{abs(v).bit_length()} bits",
                                                         "max_int_bits", 64, per_load=False))
            continue
        if op in ("Pow", "PowByNatural", "LShift") and t[2][0] == "Integer" and abs(t[2][1]) > DEFAULT_LIMITS.max_exponent:
            raise IntegerTooLargeError(too_large(where, f"the exponent of {op}", t[2][1], "max_exponent",
                                                 DEFAULT_LIMITS.max_exponent, per_load=False))
        stack.extend(c for c in t[1:] if isinstance(c, tuple))


def symbols_of(tree: tuple) -> set[str]:
    """Symbol names in ``tree``."""
    out: set[str] = set()

    def walk(t: tuple) -> None:
        if t[0] == "Symbol":
            out.add(t[1])
        elif t[0] not in ("Integer", "Rational", "Float"):
            for c in t[1:]:
                walk(c)

    walk(tree)
    return out


def compile_tree(tree: tuple, symbol_index: Callable[[str], int], *, where: str) -> list[int]:
    """Postfix code for an integer/boolean expression tree.

    Raises:
        UnsupportedConstructError: the expression uses something a native runtime does not
            evaluate (floats, rationals, infinities, transcendental functions); names it.
    """
    code: list[int] = []

    def emit(t: tuple) -> None:
        op = t[0]
        if op == "Integer":
            code.extend((PUSH, t[1]))
        elif op == "Symbol":
            code.extend((SYM, symbol_index(t[1])))
        elif op in ("True", "False"):
            code.extend((PUSH, int(op == "True")))
        elif op in _NARY:
            for c in t[1:]:
                emit(c)
            code.extend((_NARY[op], len(t) - 1))
        elif op == "Pow":
            if t[2][0] != "Integer" or t[2][1] < 0:
                _unsupported(t, "a power with a negative or non-integer exponent", where)
            emit(t[1])
            emit(t[2])
            code.append(POW)
        elif op in _BINARY:
            emit(t[1])
            emit(t[2])
            code.append(_BINARY[op])
            if _BINARY[op] in (AND, OR):
                code.append(2)
        elif op == "ModularIndexing":  # (x // d) % m
            emit(t[1])
            emit(t[2])
            code.append(FLOORDIV)
            emit(t[3])
            code.append(MOD)
        elif op == "Not":
            emit(t[1])
            code.append(NOT)
        elif op in ("Where", "ITE"):
            for c in t[1:]:
                emit(c)
            code.append(WHERE)
        elif op == "Piecewise":
            _piecewise(t[1:], emit, code, where)
        elif op in _IDENTITY:
            emit(t[1])
        else:
            _unsupported(t, f"{op!r}", where)

    emit(tree)
    return code


def _piecewise(pairs: Sequence[tuple], emit: Callable[[tuple], None], code: list[int], where: str) -> None:
    (_, e, c), rest = pairs[0], pairs[1:]
    if not rest:
        if c[0] != "True":
            raise UnsupportedConstructError(f"{where}: a Piecewise without a final True branch cannot be "
                                            "evaluated natively")
        emit(e)
        return
    emit(c)
    emit(e)
    _piecewise(rest, emit, code, where)
    code.append(WHERE)


def _unsupported(t: tuple, what: str, where: str) -> None:
    try:
        text = tree_to_str(t, where=where)
    except Exception:  # a malformed subtree still deserves the message below
        text = repr(t)
    raise UnsupportedConstructError(
        f"{where}: size expression {text!r} uses {what}, which the native runtime does not evaluate "
        "(only integer arithmetic, comparisons and boolean logic over input sizes are supported)")


def check_code(code: Sequence[int], n_symbols: int, where: str) -> None:
    """Validate untrusted code: known opcodes, operands present, stack never underflows, one result.

    Raises:
        NativeFormatError: naming the first bad position.
    """
    try:
        _check_code(code, n_symbols, where)
    except NativeFormatError as e:
        raise NativeFormatError(f"{e}; the file is damaged or was not written by pt2serde") from None


def _check_code(code: Sequence[int], n_symbols: int, where: str) -> None:
    depth = 0
    i = 0
    n = len(code)
    while i < n:
        op = code[i]
        spec = OPS.get(op)
        if spec is None:
            raise NativeFormatError(f"{where}: unknown opcode {op} at position {i}; the file is damaged")
        _, has_imm, arity = spec
        imm = None
        if has_imm:
            if i + 1 >= n:
                raise NativeFormatError(f"{where}: opcode {spec[0]} at position {i} lacks its operand")
            imm = code[i + 1]
        if op == SYM and not 0 <= imm < n_symbols:
            raise NativeFormatError(f"{where}: symbol {imm} at position {i} is out of range ({n_symbols} symbols)")
        pops = arity if arity is not None else imm
        if pops is None or pops < (0 if arity == 0 else 1) or pops > depth:
            raise NativeFormatError(f"{where}: opcode {spec[0]} at position {i} pops {pops} of {depth} values")
        depth += 1 - pops
        if depth > _MAX_STACK:
            raise NativeFormatError(f"{where}: the expression needs more than {_MAX_STACK} stack slots")
        i += 2 if has_imm else 1
    if depth != 1:
        raise NativeFormatError(f"{where}: the expression leaves {depth} values instead of 1")


def evaluate(code: Sequence[int], symbols: Sequence[int | None]) -> int:
    """Run ``code`` (already checked by :func:`check_code`) with the given symbol values.

    Raises:
        ZeroDivisionError / ValueError: the expression divides by zero, overflows int64, or uses an
            unbound symbol (the runtime turns these into clear errors).
    """
    stack: list[int] = []
    push = stack.append
    i = 0
    n = len(code)
    while i < n:
        op = code[i]
        if op == PUSH:
            push(code[i + 1])
            i += 2
            continue
        if op == SYM:
            v = symbols[code[i + 1]]
            if v is None:
                raise UnboundSymbolError(f"symbol {code[i + 1]} is not bound")
            push(v)
            i += 2
            continue
        if OPS[op][1]:
            k = code[i + 1]
            args = stack[-k:]
            del stack[-k:]
            push(_NARY_IMPL[op](args))
            i += 2
            continue
        arity = OPS[op][2]
        args = stack[-arity:]
        del stack[-arity:]
        push(_FIXED_IMPL[op](*args))
        i += 1
    return stack[0]


def _ceildiv(a: int, b: int) -> int:
    return -(-a // b)


_INT64 = 1 << 63


def _int64(v: int) -> int:
    # Sizes are int64 in every runtime; refusing larger values also keeps a hostile "9**9**9" cheap.
    if not -_INT64 <= v < _INT64:
        raise ValueError("the expression overflows int64")
    return v


def _pow(a: int, b: int) -> int:
    if b < 0:
        raise ValueError("negative exponent")
    if abs(a) > 1 and b > 64:
        raise ValueError("the expression overflows int64")
    return _int64(a ** b)


_NARY_IMPL: dict[int, Callable[[list[int]], int]] = {
    ADD: lambda xs: _int64(sum(xs)), MUL: lambda xs: _int64(math.prod(xs)), MAX: max, MIN: min,
    AND: lambda xs: int(all(xs)), OR: lambda xs: int(any(xs)),
}
_FIXED_IMPL: dict[int, Callable[..., int]] = {
    FLOORDIV: lambda a, b: a // b, MOD: lambda a, b: a % b, POW: _pow,
    EQ: lambda a, b: int(a == b), NE: lambda a, b: int(a != b), LT: lambda a, b: int(a < b),
    LE: lambda a, b: int(a <= b), GT: lambda a, b: int(a > b), GE: lambda a, b: int(a >= b),
    NOT: lambda a: int(not a), CEILDIV: _ceildiv, WHERE: lambda c, a, b: a if c else b,
}
assert set(_NARY_IMPL) | set(_FIXED_IMPL) == set(OPS) - {PUSH, SYM}


# ---------------------------------------------------------------- bounds (emit time)

Interval = tuple[float, float]
_INF = math.inf


def bounds(tree: tuple, ranges: dict[str, Interval]) -> Interval:
    """Interval of an integer expression given each symbol's interval (inf when unknown).

    Sound for the operators sizes use; anything else is (-inf, inf).
    """
    op = tree[0]
    if op == "Integer":
        return (tree[1], tree[1])
    if op == "Symbol":
        return ranges.get(tree[1], (-_INF, _INF))
    kids = [bounds(c, ranges) for c in tree[1:]] if op not in ("Rational", "Float") else []
    if op == "Add":
        return (sum(k[0] for k in kids), sum(k[1] for k in kids))
    if op == "Mul":
        lo, hi = kids[0]
        for k in kids[1:]:
            lo, hi = _mul(lo, hi, *k)
        return (lo, hi)
    if op in ("Max", "Min"):
        f = max if op == "Max" else min
        return (f(k[0] for k in kids), f(k[1] for k in kids))
    if op in ("FloorDiv", "CleanDiv", "CeilDiv") and kids[1][0] > 0 and kids[0][0] >= 0:
        (alo, ahi), (blo, bhi) = kids
        lo = alo // bhi if bhi != _INF else 0
        hi = ahi / blo if ahi != _INF else _INF
        return (lo, math.ceil(hi) if hi != _INF else _INF)
    if op in ("Mod", "PythonMod") and kids[1][0] > 0:
        return (0, kids[1][1] - 1)
    if op in ("Pow", "PowByNatural") and kids[1][0] >= 0 and kids[0][0] >= 0:
        (alo, ahi), (elo, ehi) = kids
        return (alo ** elo, ahi ** ehi if ahi != _INF and ehi != _INF else _INF)
    if op in _IDENTITY:
        return kids[0]
    return (-_INF, _INF)


def _mul(alo: float, ahi: float, blo: float, bhi: float) -> Interval:
    prods = []
    for x in (alo, ahi):
        for y in (blo, bhi):
            prods.append(0 if (x == 0 or y == 0) else x * y)
    return (min(prods), max(prods))


def affine_in(tree: tuple) -> tuple[str, int, int] | None:
    """``(symbol, a, b)`` when ``tree`` is ``a*symbol + b`` with integer a > 0, else None."""
    op = tree[0]
    if op == "Symbol":
        return (tree[1], 1, 0)
    if op == "Mul" and len(tree) == 3 and tree[1][0] == "Integer" and tree[2][0] == "Symbol" and tree[1][1] > 0:
        return (tree[2][1], tree[1][1], 0)
    if op == "Add":
        consts = [c for c in tree[1:] if c[0] == "Integer"]
        rest = [c for c in tree[1:] if c[0] != "Integer"]
        if len(rest) == 1 and (inner := affine_in(rest[0])) is not None and inner[2] == 0:
            return (inner[0], inner[1], sum(c[1] for c in consts))
    return None
