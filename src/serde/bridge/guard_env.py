"""A loaded program's input guards, recorded in its ShapeEnv the way tracing records them.

torch derives programs from a program (``run_decompositions``, ``ExportedProgram._update`` and
the passes built on it) by constructing a new ExportedProgram, and that constructor computes
``_guards_code`` afresh from the ShapeEnv it finds in the graph's values: every guard the env
recorded (``shape_env.guards``), printed over the sources its symbols were created from
(``shape_env.var_to_sources``). A loaded program's ShapeEnv is built from the file, so unless the
stored guards are recorded in it, every program derived from a loaded one has no guards, accepts
inputs the exported program rejects, and saves none.

So loading records them as tracing would have: each source a guard reads gets a symbol with that
source (the graph's own symbol when the input's value is that symbol, as it is for a traced input;
a symbol of its own when the value is an expression of others, as torch keeps a derived
dimension's symbol beside its replacement, which is recorded too, with the range of what it
stands for), and each stored check becomes the sympy expression torch prints back to the same
text. Every input dimension that is a symbol gets its source, and the assumption tracing made of
it (at least 2), so that what a derivation records anew is what it records for the exported
program.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import Any

import sympy
import torch
import torch.utils._sympy.functions as tf
from torch._dynamo.source import GetItemSource, LocalSource, TensorProperty, TensorPropertySource
from torch._guards import ShapeGuard, SLoc
from torch.fx.experimental.symbolic_shapes import ShapeEnv, ShapeGuardPythonPrinter
from torch.utils._sympy.symbol import SymT, symbol_is_type
from torch.utils._sympy.value_ranges import ValueRanges, bound_sympy

from serde.core import schema, wire
from serde.core.errors import IntegerTooLargeError
from serde.core.expr import as_sympy
from serde.core.expr.guards import source_key
from serde.core.memo import Memo
from serde.errors import MalformedArtifactError

__all__ = ["guard_spelling", "record_guards"]

P = schema.GuardProperty

# Where a recorded guard says it came from (torch prints this when a guard fails to simplify).
_SLOC = SLoc(framework_loc="pt2serde: guards stored in the artifact", maybe_user_loc=None)


@functools.cache
def guard_spelling() -> str:
    """How the running torch prints max and min in guards (one of serde.core.expr.guards.SPELLINGS).

    Asked of torch's own guard printer rather than read off its version: torch 2.13 prints
    ``max(a, b)``, 2.14 ``torch.sym_max(a, b)``, and a loaded program's guards must compile and fail
    there as the exported program's do.
    """
    a, b = sympy.symbols("pt2serde_a pt2serde_b", integer=True, positive=True)
    sources = {a: [LocalSource("a")], b: [LocalSource("b")]}
    try:
        printer = ShapeGuardPythonPrinter(sources, lambda s: s.name, sources)
        text = printer.doprint(tf.Max(a, b))
    except Exception:  # a torch whose printer takes other arguments: the spelling of 2.13
        return "builtin"
    return "sym" if text.startswith("torch.sym_max(") else "builtin"


def record_guards(g: schema.InputGuards | None, shape_env: ShapeEnv, values: Mapping[tuple, Any],
                  *, where: str = "guards") -> None:
    """Give ``shape_env``, the ShapeEnv of a loaded graph, its inputs' sources and the stored guards ``g``.

    ``values`` maps each nameable user input's path (as :func:`serde.core.expr.guards.input_arguments`
    keys them) to its value in the loaded graph (a fake tensor, SymInt, int...). ``g`` must already
    be validated (:func:`serde.bridge.program.deserialize_guards`).

    Every input dimension (and int or float input) that is a symbol gets its source, as tracing
    gives it: a guard torch records while deriving a program (a decomposition may add one, as it
    would for the exported program) is then printed over the inputs instead of being dropped.

    Raises:
        MalformedArtifactError: a check torch cannot build as a symbolic expression.
    """
    owned: dict[tuple, sympy.Symbol] = {}
    for path, value in values.items():
        if isinstance(value, torch.Tensor):
            for d, size in enumerate(value.size()):
                _own(shape_env, as_sympy(size), (path, int(P.SIZE), d), owned, size=True)
        elif isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            _own(shape_env, as_sympy(value), (path, int(P.VALUE), -1), owned, size=False)
    if g is None:
        _bump(shape_env)
        return
    symbols: dict[str, sympy.Symbol] = {}
    kinds: dict[str, str] = {}
    replaced: dict[sympy.Symbol, Any] = {}
    for i, s in enumerate(g.sources):
        key = source_key(s)
        path, prop, dim = key
        value = _read(values[path], prop, dim)
        kinds[s.symbol] = _kind_of(value)
        sym = owned.get(key)
        if sym is None:
            # The input is another input's symbol, an expression of symbols, or a number: tracing made
            # this source a symbol of its own (then replaced it, as for a derived dimension). A name no
            # ShapeEnv makes, so that it never meets one of the env's symbols.
            expr = as_sympy(value)
            sym = sympy.Symbol(f"pt2serde_guard_{i}", **_assumptions(expr, kinds[s.symbol]))
            shape_env.var_to_sources[sym] = [_torch_source(path, prop, dim)]
            if kinds[s.symbol] == "int":
                replaced[sym] = expr
        symbols[s.symbol] = sym
    # Building the checks and what tracing derives from them is sympy work worth a good part of a
    # small load: remembered per process by everything it depends on (the stored guards, the symbols
    # they stand for with their assumptions, ranges and replacements; an env that had replacements
    # before is not remembered).
    remember = not shape_env.replacements
    _give_ranges(shape_env, replaced)
    key = None
    if remember:
        key = (wire.encode(g), tuple((k, sym.name, tuple(sorted(sym.assumptions0.items())), kinds[k],
                                      _range_key(shape_env, sym), str(replaced.get(sym)))
                                     for k, sym in symbols.items()))
        done = _RECORDED.get(key)
        if done is not None:
            for expr, implied in done:
                shape_env.guards.append(ShapeGuard(expr, _SLOC, size_oblivious=False))
                shape_env.axioms.update(implied)
            _replace(shape_env, replaced)
            _bump(shape_env)
            return
    recorded = []
    work = 0
    # Building a check in sympy takes a millisecond or more (its comparison asks sympy's assumption
    # system), so a file with ten thousand checks would take tens of seconds: only the first
    # _MAX_RECORDED are recorded. The loaded program itself keeps every guard (_guards_code); a
    # program derived from one with more checks keeps only those, far more than torch writes.
    for i, check in enumerate(g.checks[:_MAX_RECORDED]):
        w = f"{where}.checks[{i}]"
        expr, _ = _Builder(symbols, kinds, w).build(check)
        if isinstance(expr, sympy.logic.boolalg.BooleanAtom) or not isinstance(expr, sympy.logic.boolalg.Boolean):
            # Decided without any input (deserialize_guards found it true at the example values):
            # torch records no such guard.
            continue
        terms = _expanded_terms(expr)
        work += terms * terms
        if terms > _MAX_TERMS or work > _MAX_WORK:
            # torch expands every guard it records (simplify) and compares its terms pairwise, and a
            # derivation simplifies them again: ((x + y + 1) ** 64) ** 64 has millions of terms,
            # and even a few hundred take a tenth of a second. The guards torch writes expand to a
            # handful of terms each.
            raise IntegerTooLargeError(
                f"{w}: the check expands to {terms if terms <= _MAX_TERMS else f'more than {_MAX_TERMS}'} terms "
                f"(powers of sums){'' if terms > _MAX_TERMS else ', too many over all the checks'}; at most "
                f"{_MAX_TERMS} per check and {_MAX_WORK} for the squares of all checks' terms. The artifact "
                "is damaged or was written by a faulty tool")
        shape_env.guards.append(ShapeGuard(expr, _SLOC, size_oblivious=False))
        # What tracing derives from a guard it records: facts later evaluations use.
        try:
            implied = dict(shape_env.get_implications(shape_env.simplify(expr)))
        except Exception as err:  # sympy/torch cannot reason about it (a comparison of comparisons...)
            raise MalformedArtifactError(
                f"{w}: torch cannot simplify the check {str(expr)[:80]}: {type(err).__name__}; torch.export "
                "records only checks it simplifies, so the guards were edited or written by another tool") from None
        shape_env.axioms.update(implied)
        recorded.append((expr, implied))
    if key is not None:
        _RECORDED.remember(key, recorded)
    _replace(shape_env, replaced)
    _bump(shape_env)


# At most this many terms in a check once its powers of sums are multiplied out, and at most this
# sum of their squares over all the checks of a program (see record_guards): a few seconds of sympy
# at the most, against a few terms per check in what torch writes.
_MAX_TERMS = 128
_MAX_WORK = 20_000
_MAX_RECORDED = 512


def _expanded_terms(e: Any) -> int:
    """How many terms ``e`` has once multiplied out, or a number above ``_MAX_TERMS`` (other
    functions count as the terms of their arguments)."""
    if isinstance(e, sympy.Symbol) or not e.args:
        return 1
    if isinstance(e, sympy.Pow):
        base, exp = e.args
        k = _expanded_terms(base)
        if exp.is_Integer and k > 1:  # a sum of k terms to the n-th: C(k + n - 1, n) terms
            n = min(abs(int(exp)), 2 * _MAX_TERMS)
            return min(math.comb(k + n - 1, n), _MAX_TERMS + 1)
        return min(k + _expanded_terms(exp), _MAX_TERMS + 1)
    parts = [_expanded_terms(a) for a in e.args]
    if isinstance(e, sympy.Mul):
        return min(math.prod(parts), _MAX_TERMS + 1)
    return min(sum(parts), _MAX_TERMS + 1)


# (stored guards, their symbols) -> [(check, what it implies)] (see record_guards)
_RECORDED = Memo(1 << 10, "recorded_guards")


def _range_key(shape_env: ShapeEnv, sym: sympy.Symbol) -> tuple:
    vr = shape_env.var_to_range.get(sym)
    return (None, None) if vr is None else (vr.lower, vr.upper)


def _bump(shape_env: ShapeEnv) -> None:
    """The env caches answers that depend on its guards and ranges: tell it they changed."""
    bump = getattr(shape_env, "_update_version_counter", None)
    if callable(bump):
        bump()


def _own(shape_env: ShapeEnv, expr: Any, key: tuple, owned: dict[tuple, sympy.Symbol], *, size: bool) -> None:
    """Make ``expr`` the symbol of the input source ``key`` when it is a symbol no source has yet."""
    if not isinstance(expr, sympy.Symbol) or expr in shape_env.var_to_sources:
        return
    shape_env.var_to_sources[expr] = [_torch_source(*key)]
    owned[key] = expr
    if size and symbol_is_type(expr, SymT.SIZE):
        # Tracing assumes a dynamic size is at least 2 (sizes 0 and 1 specialize; the program's
        # range constraints may still admit them), and a derived program is traced under that
        # assumption: without it, deriving one records guards (size != 1) the exported program's
        # derivation never does, and rejects inputs that one accepts.
        vr = shape_env.var_to_range.get(expr)
        hint = shape_env.backed_var_to_val.get(expr) if hasattr(shape_env, "backed_var_to_val") else None
        if vr is not None and vr.upper >= 2 and vr.lower < 2 and (hint is None or hint >= 2):
            # What constrain_symbol_range(min=2) leaves, set directly: its intersection of the two
            # ranges (sympy Max/Min) cost more than the rest of this step. record_guards tells the
            # env that its ranges changed.
            shape_env.var_to_range[expr] = ValueRanges(sympy.Integer(2), vr.upper)
            sloc = shape_env.var_to_range_sloc.get(expr)
            if sloc is not None:
                sloc.lower = _SLOC


def _give_ranges(shape_env: ShapeEnv, replaced: Mapping[sympy.Symbol, Any]) -> None:
    """Give each integer source symbol of its own the range of the expression its input's value is:
    torch reasons about a check from the ranges of its symbols, and refuses one with a symbol it has
    none for (H = W = 32*h gives each dim's source a symbol of its own). A dim specialized to a
    number gets only what its assumptions say (a size: at least 1), as tracing recorded the checks
    over it before it specialized: implied by a range of that one number, they would tell derived
    programs more than the exported program's ShapeEnv knows."""
    for sym, expr in replaced.items():
        try:
            vr = bound_sympy(sym if expr.is_number else expr, shape_env.var_to_range)
        except Exception:  # an expression torch cannot bound: any integer
            vr = ValueRanges.unknown_int()
        shape_env.var_to_range[sym] = vr


def _replace(shape_env: ShapeEnv, replaced: Mapping[sympy.Symbol, Any]) -> None:
    """Replace each integer source symbol of its own by the expression its input's value is, as
    tracing leaves a derived (or specialized) dimension's symbol once the checks over it are
    recorded: a replaced symbol is no range constraint of a program torch derives from this one, as
    for the exported program, and what torch derives from the checks (recorded before, as tracing
    records a check before it learns the replacement) stays over the source symbols."""
    for sym, expr in replaced.items():
        shape_env.replacements[sym] = expr
        shape_env.replacements_slocs[sym] = _SLOC
    if replaced and hasattr(shape_env, "_replacements_version_counter"):
        shape_env._replacements_version_counter += 1  # what torch's own replacements bump (cached replace)


def _read(value: Any, prop: int, dim: int) -> Any:
    if prop == P.VALUE:
        return value
    if prop == P.SIZE:
        return value.size()[dim]
    if prop == P.STRIDE:
        return value.stride()[dim]
    return value.storage_offset()


def _kind_of(value: Any) -> str:
    if isinstance(value, (bool, torch.SymBool)):
        return "bool"
    if isinstance(value, (float, torch.SymFloat)):
        return "float"
    return "int"


def _assumptions(expr: Any, kind: str) -> dict[str, bool]:
    """What torch assumes of a symbol standing for ``expr`` (a size: a positive integer...)."""
    if kind == "float":
        return {"real": True}
    if kind == "bool":
        return {}
    out = {"integer": True}
    if getattr(expr, "is_positive", None):
        out["positive"] = True
    elif getattr(expr, "is_nonnegative", None):
        out["nonnegative"] = True
    return out


def _torch_source(path: tuple, prop: int, dim: int) -> Any:
    """The source tracing gives an input at ``path``: its ``name`` is the text guards print."""
    base: Any = LocalSource(path[0])
    for k in path[1:]:
        base = GetItemSource(base, k)
    if prop == P.VALUE:
        return base
    if prop == P.STORAGE_OFFSET:
        return TensorPropertySource(base, TensorProperty.STORAGE_OFFSET)
    return TensorPropertySource(base, TensorProperty.SIZE if prop == P.SIZE else TensorProperty.STRIDE, dim)


_CONSTANTS: dict[schema.ExprConstant, tuple[Any, str]] = {
    schema.ExprConstant.TRUE: (sympy.true, "bool"), schema.ExprConstant.FALSE: (sympy.false, "bool"),
    schema.ExprConstant.INFINITY: (sympy.oo, "float"), schema.ExprConstant.NEG_INFINITY: (-sympy.oo, "float"),
    schema.ExprConstant.NAN: (sympy.nan, "float"),
}


# Guard tree member -> (sympy function, kind of its value), where the printed text alone decides
# the function; "%", "/" and "**" depend on their operands (see _Builder.build).
_FUNCTIONS: dict[str, tuple[Any, str | None]] = {
    "add": (sympy.Add, None), "mul": (sympy.Mul, None), "floor_div": (tf.FloorDiv, None),
    "bitwise_and": (tf.BitwiseFn_bitwise_and, "int"), "bitwise_or": (tf.BitwiseFn_bitwise_or, "int"),
    "bitwise_xor": (tf.BitwiseFn_bitwise_xor, "int"),
    "eq": (sympy.Eq, "bool"), "ne": (sympy.Ne, "bool"), "lt": (sympy.Lt, "bool"), "le": (sympy.Le, "bool"),
    "gt": (sympy.Gt, "bool"), "ge": (sympy.Ge, "bool"), "logical_and": (sympy.And, "bool"),
    "logical_or": (sympy.Or, "bool"), "logical_not": (sympy.Not, "bool"),
    "round_decimal": (tf.RoundDecimal, "float"), "abs": (sympy.Abs, None), "max": (tf.Max, None),
    "min": (tf.Min, None), "floor_to_int": (tf.FloorToInt, "int"), "ceil_to_int": (tf.CeilToInt, "int"),
    "trunc_to_int": (tf.TruncToInt, "int"), "round_to_int": (tf.RoundToInt, "int"),
    "to_float": (tf.ToFloat, "float"),
}


class _Builder:
    """The sympy expression torch would have recorded for a validated guard tree.

    Python text does not say which sympy function made it; torch chose by the operands, and so does
    this, with torch's rules (torch.fx.experimental.sym_node): ``a % b`` is Mod when both are
    known non-negative and PythonMod otherwise, ``a / b`` IntTrueDiv of two ints and FloatTrueDiv
    otherwise, ``a ** b`` PowByNatural of an int to a natural power and FloatPow otherwise.
    """

    def __init__(self, symbols: Mapping[str, sympy.Symbol], kinds: Mapping[str, str], where: str) -> None:
        self.symbols, self.kinds, self.where = symbols, kinds, where

    def build(self, e: schema.Expr) -> tuple[Any, str]:
        """(expression, "int" | "float" | "bool")."""
        kind = e.kind
        v = getattr(e, kind)
        if kind == "symbol":
            return self.symbols[v], self.kinds[v]
        if kind == "integer":
            return sympy.Integer(v), "int"
        if kind == "floating":
            return sympy.Float(schema.from_f64(v)), "float"
        if kind == "constant":
            if v not in _CONSTANTS:
                raise MalformedArtifactError(f"{self.where}: constant {v.name} does not occur in guards")
            return _CONSTANTS[v]
        if kind == "opaque_unary":
            fn = getattr(tf, f"OpaqueUnaryFn_{v.fn}", None)
            if fn is None:
                raise MalformedArtifactError(f"{self.where}: function {v.fn!r} does not occur in guards")
            return self._make(fn, [self.build(v.arg)[0]]), "float"
        kids = [self.build(x) for x in v]
        args = [a for a, _ in kids]
        ks = [k for _, k in kids]
        numeric = "float" if "float" in ks else "int"
        if kind == "ite":
            return self._make(sympy.Piecewise, [(args[1], args[0]), (args[2], True)]), ks[1]
        if kind == "python_mod":
            a, b = args
            mod = tf.Mod if a.is_nonnegative and b.is_nonnegative else tf.PythonMod
            return self._make(mod, args), numeric
        if kind == "float_true_div":
            return self._make(tf.IntTrueDiv if numeric == "int" else tf.FloatTrueDiv, args), "float"
        if kind == "pow":
            natural = numeric == "int" and v[1].kind == "integer" and v[1].integer >= 0
            return self._make(tf.PowByNatural if natural else tf.FloatPow, args), "int" if natural else "float"
        if kind not in _FUNCTIONS:
            raise MalformedArtifactError(f"{self.where}: expression member {kind!r} does not occur in guards")
        fn, out = _FUNCTIONS[kind]
        return self._make(fn, args), out or (ks[0] if kind == "abs" else numeric)

    def _make(self, fn: Any, args: list) -> Any:
        try:
            return fn(*args)
        except Exception as err:  # sympy/torch refuse the operands: a damaged check, not a bug here
            raise MalformedArtifactError(
                f"{self.where}: torch cannot build {getattr(fn, '__name__', fn)} of "
                f"{', '.join(str(a)[:40] for a in args)}: {type(err).__name__}; the artifact is damaged") from None
