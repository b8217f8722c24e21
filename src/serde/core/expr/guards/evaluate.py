"""The stored checks at the program's own example values: each must hold there.

torch.export records a guard while tracing the example inputs, so a check that is false at the
example values the file stores (or fails to evaluate) would make the loaded program reject the
very inputs it was exported with. This evaluates checks in Python, as their printed text would.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from ... import schema, wire
from ...memo import Memo
from .printer import Printer
from .sources import input_arguments, source_key, source_names

__all__ = ["failing_guard"]

P = schema.GuardProperty


def failing_guard(g: schema.InputGuards, gm: schema.GraphModule, *, where: str = "guards",
                  arguments: Mapping[tuple, schema.Argument] | None = None) -> str | None:
    """Why a stored check does not hold at the program's own example values, or None when all do.

    torch.export records a guard while tracing the example inputs, so each holds for them; the
    sizes and values the graph stores carry those example values as hints. A check that is false
    there, or that fails to evaluate (a division by zero, a number too large to compute), would make
    the loaded program reject, or raise on, the very inputs it was exported with. Checks naming an
    input without a stored example value (unbacked sizes) are skipped. ``arguments`` is
    :func:`input_arguments` of ``gm`` when the caller has it already.
    """
    values = _example_values(g, gm, input_arguments(gm) if arguments is None else arguments)
    key = (wire.encode(g), tuple((type(v), v) for v in values.values()))  # 1, 1.0 and True differ here
    if key in _HOLDING:
        return None
    names = source_names(g, where)
    for i, e in enumerate(g.checks):
        ev = _Evaluator(values)
        try:
            ok = ev.value(e, 0)
        except _NoHint:
            continue
        except (ArithmeticError, ValueError, TypeError) as err:  # x / 0, 2.0 ** 5000, math domain, 1 & 0.5
            return f"{where}.checks[{i}] ({Printer(names, where).expr(e, 0)}) fails at the example values " \
                   f"({_shown(values, names, ev.used)}): {type(err).__name__}: {err}"
        if ok is not True:
            return f"{where}.checks[{i}] ({Printer(names, where).expr(e, 0)}) is {ok!r} at the example " \
                   f"values ({_shown(values, names, ev.used)}), where torch.export found it true"
    _HOLDING.remember(key)
    return None


# Guard sets that held at a set of example values, shared by every load in the process: the verdict
# depends on the stored checks and those values alone (the key holds both, exactly), and a
# program's guards recur with each load of it. A set that fails is never remembered.
_HOLDING = Memo(1 << 10, "holding_guards")


def _shown(values: Mapping[str, Any], names: Mapping[str, str], used: set[str]) -> str:
    return ", ".join(f"{names[s]} = {values[s]!r}" for s in sorted(used)) or "no inputs"


class _NoHint(Exception):
    pass


_MISSING = object()


def _example_values(g: schema.InputGuards, gm: schema.GraphModule,
                    args: Mapping[tuple, schema.Argument]) -> dict[str, Any]:
    """Symbol -> the example value of its source, or _MISSING where the file stores none."""
    graph = gm.graph
    out: dict[str, Any] = {}
    for s in g.sources:
        path, prop, dim = source_key(s)
        arg = args.get(path)
        v: Any = _MISSING
        if arg is None:
            pass
        elif prop == P.VALUE:
            v = _argument_value(arg, graph)
        elif arg.kind == "as_tensor":
            meta = graph.tensor_values.get(arg.as_tensor.name)
            if meta is not None:
                if prop == P.STORAGE_OFFSET:
                    v = _sym_int_value(meta.storage_offset)
                elif 0 <= dim < len(meta.sizes):
                    v = _sym_int_value((meta.sizes if prop == P.SIZE else meta.strides)[dim])
        out[s.symbol] = v
    return out


def _sym_int_value(s: schema.SymInt) -> Any:
    if s.as_int is not None:
        return s.as_int
    h = s.as_expr.hint
    return h.as_int if h is not None and h.as_int is not None else _MISSING


def _argument_value(arg: schema.Argument, graph: schema.Graph) -> Any:
    kind = arg.kind
    if kind in ("as_int", "as_bool"):
        return getattr(arg, kind)
    if kind == "as_float":
        return schema.from_f64(arg.as_float)
    table = {"as_sym_int": graph.sym_int_values, "as_sym_float": graph.sym_float_values,
             "as_sym_bool": graph.sym_bool_values}.get(kind)
    if table is None:
        return _MISSING
    ref = getattr(arg, kind)
    stored = table.get(ref.as_name) if ref.as_name is not None else None
    if stored is None:
        return _MISSING
    if stored.as_expr is None:
        v = stored.value
        return schema.from_f64(v) if kind == "as_sym_float" else v
    h = stored.as_expr.hint
    if h is None or h.value is None:
        return _MISSING
    return schema.from_f64(h.value) if kind == "as_sym_float" else h.value


# Evaluating hostile checks must stay cheap: an integer power may not grow past this many bits.
_MAX_POW_BITS = 1 << 16


def _power(a: Any, b: Any) -> Any:
    if isinstance(a, int) and isinstance(b, int) and b > 0 and abs(a) > 1 and a.bit_length() * b > _MAX_POW_BITS:
        raise OverflowError(f"{a} ** {b} has more than {_MAX_POW_BITS} bits")
    return a ** b


_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "float_true_div": lambda a, b: a / b, "floor_div": lambda a, b: a // b, "python_mod": lambda a, b: a % b,
    "pow": _power, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b,
}
_FOLDED: dict[str, Callable[[Any, Any], Any]] = {
    "add": lambda a, b: a + b, "mul": lambda a, b: a * b, "bitwise_and": lambda a, b: a & b,
    "bitwise_or": lambda a, b: a | b, "bitwise_xor": lambda a, b: a ^ b,
}
_UNARY: dict[str, Callable[[Any], Any]] = {
    "abs": abs, "floor_to_int": math.floor, "ceil_to_int": math.ceil, "trunc_to_int": math.trunc,
    "to_float": float, "round_to_int": round,
}
_OPAQUE_FN: dict[str, Callable[[Any], Any]] = {"sqrt": math.sqrt, **{f: getattr(math, f) for f in (
    "cos", "cosh", "sin", "sinh", "tan", "tanh", "asin", "acos", "atan", "log2")}}
_CONSTANT_VALUE = {schema.ExprConstant.TRUE: True, schema.ExprConstant.FALSE: False,
                   schema.ExprConstant.INFINITY: math.inf, schema.ExprConstant.NEG_INFINITY: -math.inf,
                   schema.ExprConstant.NAN: math.nan}


class _Evaluator:
    """What the printed check computes in Python, for the members the printer accepts (the check
    was printed, so validated, before this runs): ``and``/``or`` and ``... if ... else ...``
    evaluate lazily, as the printed text does."""

    def __init__(self, values: Mapping[str, Any]) -> None:
        self.values = values
        self.used: set[str] = set()

    def value(self, e: schema.Expr, depth: int) -> Any:
        d = depth + 1
        kind = e.kind
        v = getattr(e, kind)
        if kind == "symbol":
            x = self.values[v]
            if x is _MISSING:
                raise _NoHint
            self.used.add(v)
            return x
        if kind == "integer":
            return v
        if kind == "floating":
            return schema.from_f64(v)
        if kind == "constant":
            return _CONSTANT_VALUE[v]
        if kind == "opaque_unary":
            return _OPAQUE_FN[v.fn](self.value(v.arg, d))
        if kind in _BINARY:
            return _BINARY[kind](self.value(v[0], d), self.value(v[1], d))
        if kind in _FOLDED:
            acc = self.value(v[0], d)
            for x in v[1:]:
                acc = _FOLDED[kind](acc, self.value(x, d))
            return acc
        if kind == "logical_and":
            acc = True
            for x in v:
                acc = self.value(x, d)
                if not acc:
                    break
            return acc
        if kind == "logical_or":
            acc = False
            for x in v:
                acc = self.value(x, d)
                if acc:
                    break
            return acc
        if kind == "logical_not":
            return not self.value(v[0], d)
        if kind == "ite":
            return self.value(v[1], d) if self.value(v[0], d) else self.value(v[2], d)
        if kind == "round_decimal":
            return round(self.value(v[0], d), self.value(v[1], d))
        if kind in ("max", "min"):
            return (max if kind == "max" else min)(self.value(x, d) for x in v)
        if kind in _UNARY:
            return _UNARY[kind](self.value(v[0], d))
        raise AssertionError(f"guard member {kind!r} was printed but has no evaluation")  # printer refuses others
