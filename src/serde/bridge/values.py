"""Symbolic scalars and tensor metas: ``serialize_*`` functions and their inverse, ``SymbolicContext``.

Writing reads sympy expressions off SymInt/SymFloat/SymBool nodes and prints them with our own
printer. Reading rebuilds them in a fresh ShapeEnv through our restricted parser (never sympify),
creating each symbol once, with the assumptions torch gives that kind of symbol.
"""

from __future__ import annotations

from typing import Any

import sympy
import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.fx.experimental import symbolic_shapes
from torch.fx.experimental.sym_node import _NO_HINT, SymNode
from torch.utils._sympy.numbers import int_oo
from torch.utils._sympy.value_ranges import ValueRanges

from serde.core import schema
from serde.core.expr import (
    BOOL,
    NUM,
    SYMBOL_CLASS_RE,
    check_sort,
    expr_from_sympy,
    expr_text,
    expr_to_tree,
    symbol_assumptions,
    tree_to_str,
    tree_to_sympy,
)
from serde.core.memo import Memo
from serde.errors import MalformedArtifactError, UnsupportedConstructError

from .enums import deserialize_dtype, deserialize_layout, serialize_dtype, serialize_layout
from .loaded_env import LoadedShapeEnv

__all__ = [
    "serialize_sym_int", "serialize_sym_float", "serialize_sym_bool", "sym_int_key", "serialize_tensor_meta",
    "tensor_meta_of", "serialize_device", "deserialize_device", "serialize_range_constraints", "SymbolicContext",
]

# ---------------------------------------------------------------- writing


def _expr_of(v: Any) -> sympy.Basic:
    return v.node.expr


# Every expression converted to a tree in this process, keyed by the sympy expression (equality is
# structural and tells numbers of other types apart: 2 != 2.0). A program's metas repeat a few
# expressions many times over (a 4-block transformer's 259 symbolic sizes and strides are 5
# distinct expressions), and a program saved again repeats all of them. A failed conversion raises
# and is not remembered, so its message names its own place.
_CONVERTED = Memo(1 << 12, "expr_trees")


def _tree(expr: sympy.Basic, where: str) -> schema.Expr:
    tree = _CONVERTED.get(expr)
    if tree is None:
        tree = _CONVERTED.remember(expr, expr_from_sympy(expr, where=where))
    return tree


def _sym_expr(v: Any, expr: sympy.Basic, where: str, hint_member: str, convert: Any) -> schema.SymExpr:
    """The expression of a symbolic scalar, with its example value when it has one."""
    hint = v.node.hint
    return schema.SymExpr(
        expr=_tree(expr, where),
        hint=None if hint is None else schema.SymExprHint(**{hint_member: convert(hint)}),
    )


# Ints and symbolic ints serialized in this process: by the int, or by the expression and the
# example value, which are all the serialized form is made of. Tensor metas repeat a few sizes (the
# batch, the sequence, their products, small strides) in every value's sizes and strides, and a
# program saved again repeats them all; SymInt structs are immutable, so one object serves them all.
_SYM_INTS = Memo(1 << 12, "sym_ints")


def sym_int_key(v: int | torch.SymInt) -> Any:
    """All that :func:`serialize_sym_int` makes of ``v``: the int itself, or a SymInt's expression
    and example value. Values with equal keys serialize equally (the memo below, and the graph
    writer's sharing of equal symbolic metas, rely on it)."""
    return v if type(v) is int else (_expr_of(v), v.node.hint)


def serialize_sym_int(v: int | torch.SymInt, where: str = "value") -> schema.SymInt:
    if type(v) is int:
        out = _SYM_INTS.get(v)
        return out if out is not None else _SYM_INTS.remember(v, schema.SymInt(as_int=v))
    if isinstance(v, torch.SymInt):
        key = sym_int_key(v)
        expr = key[0]
        if isinstance(expr, sympy.Integer):
            return schema.SymInt(as_int=int(expr))
        try:
            out = _SYM_INTS.get(key)
        except TypeError:  # an unhashable example value: converted each time
            return schema.SymInt(as_expr=_sym_expr(v, expr, where, "as_int", int))
        if out is None:
            out = _SYM_INTS.remember(key, schema.SymInt(as_expr=_sym_expr(v, expr, where, "as_int", int)))
        return out
    if isinstance(v, int) and not isinstance(v, bool):  # an int subclass (an IntEnum...): as its value
        return schema.SymInt(as_int=int(v))
    raise UnsupportedConstructError(f"{where}: expected an int or SymInt, got {type(v).__name__}")


def serialize_sym_float(v: float | torch.SymFloat, where: str = "value") -> schema.SymFloat:
    if isinstance(v, float):
        return schema.SymFloat(as_float=schema.to_f64(v))
    if isinstance(v, torch.SymFloat):
        expr = _expr_of(v)
        if isinstance(expr, (sympy.Float, sympy.Integer)):
            return schema.SymFloat(as_float=schema.to_f64(float(expr)))
        return schema.SymFloat(as_expr=_sym_expr(v, expr, where, "as_float", lambda h: schema.to_f64(float(h))))
    raise UnsupportedConstructError(f"{where}: expected a float or SymFloat, got {type(v).__name__}")


def serialize_sym_bool(v: bool | torch.SymBool, where: str = "value") -> schema.SymBool:
    if isinstance(v, bool):
        return schema.SymBool(as_bool=v)
    if isinstance(v, torch.SymBool):
        expr = _expr_of(v)
        if expr in (sympy.true, sympy.false):
            return schema.SymBool(as_bool=bool(expr))
        return schema.SymBool(as_expr=_sym_expr(v, expr, where, "as_bool", bool))
    raise UnsupportedConstructError(f"{where}: expected a bool or SymBool, got {type(v).__name__}")


def serialize_device(d: torch.device) -> schema.Device:
    return schema.Device(type=d.type, index=d.index)


def deserialize_device(d: schema.Device) -> torch.device:
    try:
        return torch.device(d.type, d.index) if d.index is not None else torch.device(d.type)
    except RuntimeError as e:
        raise MalformedArtifactError(f"invalid device {d.type!r}:{d.index!r} ({e})") from None


def serialize_tensor_meta(t: torch.Tensor, where: str = "tensor") -> schema.TensorMeta:
    if t.layout != torch.strided:
        raise UnsupportedConstructError(
            f"{where}: tensors with layout {t.layout} are not supported; only strided tensors are"
        )
    return tensor_meta_of(t.dtype, t.layout, t.device, t.requires_grad, t.storage_offset(), t.shape, t.stride(),
                          where)


def tensor_meta_of(dtype: torch.dtype, layout: torch.layout, device: torch.device, requires_grad: bool,
                   storage_offset: Any, sizes: Any, strides: Any, where: str = "tensor") -> schema.TensorMeta:
    """The meta of a tensor with these properties, read already (a tensor's getters cost more than
    this, and a writer that keys its metas by them has them at hand)."""
    return schema.TensorMeta(
        dtype=serialize_dtype(dtype, where),
        sizes=[serialize_sym_int(s, where) for s in sizes],
        requires_grad=requires_grad,
        device=serialize_device(device),
        strides=[serialize_sym_int(s, where) for s in strides],
        storage_offset=serialize_sym_int(storage_offset, where),
        layout=serialize_layout(layout, where),
    )


def _bound(v: Any, is_lower: bool) -> int | None:
    if v in (int_oo, -int_oo, sympy.oo, -sympy.oo):
        return None
    if isinstance(v, sympy.Integer) or isinstance(v, int):
        return int(v)
    # Fractional bounds do not occur for integer symbols; round inwards so the range stays valid.
    f = sympy.ceiling(v) if is_lower else sympy.floor(v)
    return int(f)


def serialize_range_constraints(rc: dict[sympy.Basic, ValueRanges]) -> list[schema.RangeConstraint]:
    out = [
        schema.RangeConstraint(
            expr=_tree(k, "range_constraints"),
            min_val=_bound(v.lower, True), max_val=_bound(v.upper, False),
        )
        for k, v in rc.items()
    ]
    return sorted(out, key=lambda r: expr_text(r.expr))


# ---------------------------------------------------------------- reading


def _hint_of(e: schema.SymExpr, member: str, where: str) -> Any:
    """The stored example value of a symbolic number, which must be of the number's own kind: torch
    asserts (an AssertionError, deep in SymNode) on a SymInt with a float hint."""
    h = e.hint
    if h is None:
        return None
    value = getattr(h, member)
    if value is None:
        raise MalformedArtifactError(
            f"{where}.as_expr.hint: a {_HINT_KINDS[member]}'s example value must be {member}, got {h.kind}; "
            "the artifact is damaged or was edited after saving: re-save the program")
    return value


_HINT_KINDS = {"as_int": "SymInt", "as_float": "SymFloat", "as_bool": "SymBool"}


def _solve_linear(expr: sympy.Basic, s: sympy.Symbol, value: int) -> int | None:
    """The integer ``s`` for which ``expr`` (linear in ``s``, constant coefficients) equals
    ``value``; None when there is none or ``expr`` is not of that form.

    Remembered per process (bounded), keyed by the expression (sympy compares structurally, symbol
    assumptions included), the symbol and the value: building the polynomial is most of a derived
    dimension's load cost, and the answer depends on nothing else.
    """
    key = (expr, s, value)
    if key in _SOLVED:
        return _SOLVED[key]
    out = None
    poly = sympy.Poly(expr, s) if expr.is_polynomial(s) else None
    if poly is not None and poly.degree() == 1:
        a, b = poly.all_coeffs()
        if not (a.free_symbols or b.free_symbols):
            val = (sympy.Integer(value) - b) / a
            if val.is_Integer:
                out = int(val)
    return _SOLVED.remember(key, out)


_SOLVED = Memo(1 << 12, "solved_hints")  # (values: int | None)


def _built(tree: tuple, symbol: Any, where: str) -> sympy.Basic:
    """``tree_to_sympy(tree, symbol)``, remembered per process (bounded) by the tree itself.

    The tree is the exact content of the stored expression (``expr_to_tree`` of a decoded Expr:
    op names, ints, symbol names and floats as text, never a bool), so equal trees build equal
    expressions, and every check the builder makes on the tree alone passed when it was
    remembered. What depends on the load is asked again on every hit: each of the expression's
    symbols goes through this load's ``symbol``, in the order the builder first met them, which
    checks the name against the program's ranges (raising as a build would) and registers it
    with the load's ShapeEnv. A hit is used only when ``symbol`` hands back the very symbols the
    remembered expression holds; otherwise the expression is built again.
    """
    hit = _BUILT.get(tree)
    if hit is not None:
        expr, syms = hit
        if all(symbol(s.name) is s for s in syms):
            return expr
    met: list[sympy.Symbol] = []

    def record(name: str) -> sympy.Symbol:
        sym = symbol(name)
        met.append(sym)
        return sym

    expr = tree_to_sympy(tree, record, where=where)
    _BUILT.remember(tree, (expr, tuple(met)))
    return expr


_BUILT = Memo(1 << 12, "built_exprs")  # (values: the expression, its symbols in the order the builder met them)


class SymbolicContext:
    """One ShapeEnv + FakeTensorMode per loaded program; builds symbolic values and fake tensors."""

    def __init__(self, range_constraints: list[schema.RangeConstraint]) -> None:
        self.shape_env = LoadedShapeEnv(assume_static_by_default=True)
        self.fake_mode = FakeTensorMode(
            allow_fallback_kernels=False, allow_non_fake_inputs=True, shape_env=self.shape_env
        )
        self.symbols: dict[str, sympy.Symbol] = {}
        # Every unbacked symbol of the program (graph._bind_unbacked binds them to nodes).
        self.unbacked_symbols: set[sympy.Symbol] = set()
        self._exprs: dict[tuple, sympy.Basic] = {}  # by the expression's tuple tree
        self._devices: dict[tuple, torch.device] = {}
        self._symints: dict[tuple, int | torch.SymInt] = {}
        # Each range's expression as a tree and as text, made once: the text keys the range, the
        # tree its sympy form in range_constraints().
        self._range_exprs: list[tuple[tuple, str]] = []
        self._ranges: dict[str, ValueRanges] = {}
        max_unbacked = {"u": -1, "zuf": -1}
        for rc in range_constraints:
            tree = expr_to_tree(rc.expr, where="range_constraints")
            check_sort(tree, NUM, where="range_constraints")
            key = tree_to_str(tree, where="range_constraints")
            self._range_exprs.append((tree, key))
            lo = -int_oo if rc.min_val is None else sympy.Integer(rc.min_val)
            hi = int_oo if rc.max_val is None else sympy.Integer(rc.max_val)
            if lo > hi or key in self._ranges:
                why = "its minimum exceeds its maximum" if lo > hi else "the symbol has two ranges"
                raise MalformedArtifactError(
                    f"range_constraints[{key!r}]: [{rc.min_val}, {rc.max_val}] is not a valid range: {why}; "
                    "the artifact is damaged or was edited after saving")
            self._ranges[key] = ValueRanges(lo, hi)
            m = SYMBOL_CLASS_RE.match(key)
            if m and m.group(1) in max_unbacked:
                max_unbacked[m.group(1)] = max(max_unbacked[m.group(1)], int(m.group(2)))
        # Fresh unbacked symbols created later (e.g. by run_decompositions) must not reuse our names.
        self.shape_env.unbacked_symint_counter = max(self.shape_env.unbacked_symint_counter, max_unbacked["u"] + 1)
        self.shape_env.unbacked_symfloat_counter = max(
            self.shape_env.unbacked_symfloat_counter, max_unbacked["zuf"] + 1
        )

    # -- symbols and expressions

    def symbol(self, name: str) -> sympy.Symbol:
        sym = self.symbols.get(name)
        if sym is not None:
            return sym
        m = SYMBOL_CLASS_RE.match(name)
        vr = self._ranges.get(name)
        # torch's ShapeEnv asserts on a symbol it has no range for: refuse such symbols here, by name.
        if m is None:
            raise MalformedArtifactError(
                f"symbol {name[:80]!r}: not a symbol torch.export creates (s<N>, u<N>, zf<N> or zuf<N>); "
                "the artifact is damaged")
        if vr is None and m.group(1) == "s":
            raise MalformedArtifactError(
                f"symbol {name!r} has no entry in range_constraints, which every input dimension symbol "
                "of an exported program has; the artifact is damaged")
        sym = sympy.Symbol(name, **symbol_assumptions(name))
        self.symbols[name] = sym
        # Every range goes in through the ShapeEnv's own update, which also records where each
        # bound came from: torch reads that record whenever a size check later narrows the range.
        # Without a stored range (unbacked and float symbols may lack one) the symbol is unbounded.
        if vr is None:
            vr = ValueRanges(-int_oo, int_oo)
        self.shape_env.constrain_symbol_range(sym, compiler_min=vr.lower, compiler_max=vr.upper)
        if m.group(1) in ("u", "zuf"):
            self.unbacked_symbols.add(sym)
        return sym

    def expr(self, e: schema.Expr, where: str) -> sympy.Basic:
        return self._expr_of_tree(expr_to_tree(e, where=where), where)

    def _expr_of_tree(self, tree: tuple, where: str) -> sympy.Basic:
        """The sympy form of an expression's tuple tree, which is also its key: built once per tree."""
        out = self._exprs.get(tree)
        if out is None:
            out = self._exprs[tree] = _built(tree, self.symbol, where)
        return out

    def _hint(self, expr: sympy.Basic, hint: Any) -> Any:
        """Record the example value of backed symbols; return the hint to attach to the SymNode."""
        if hint is None:
            # Stored without an example value: torch had none, as for a value it derived from an
            # unbacked symbol that a torch._check then replaced by a backed expression. Given None,
            # SymNode would work one out from the backed symbols, and a re-save would write it.
            return _NO_HINT
        if symbolic_shapes.free_unbacked_symbols(expr):
            return None
        if isinstance(expr, sympy.Symbol):
            if expr not in self.shape_env.backed_var_to_val:
                self.shape_env.add_backed_var_to_val(expr, hint)
            return hint
        # A derived dim such as 2*s0 + 1 carries the only example value of s0: solve for it.
        free = [s for s in expr.free_symbols if s not in self.shape_env.backed_var_to_val]
        if len(free) == 1 and isinstance(hint, int):
            val = _solve_linear(expr, free[0], hint)
            if val is not None:
                self.shape_env.add_backed_var_to_val(free[0], val)
        return hint

    def sym_int(self, s: schema.SymInt, where: str) -> int | torch.SymInt:
        if s.as_int is not None:
            return s.as_int
        e = s.as_expr
        stored_hint = _hint_of(e, "as_int", where)
        # SymInts are immutable: one object per distinct (expression, hint), as tracing shares
        # a size among the tensors that have it.
        tree = expr_to_tree(e.expr, where=where)
        key = (tree, stored_hint)
        out = self._symints.get(key)
        if out is not None:
            return out
        check_sort(tree, NUM, where=where)
        expr = self._expr_of_tree(tree, where)
        hint = self._hint(expr, stored_hint)
        out = int(expr) if isinstance(expr, sympy.Integer) else self.shape_env.create_symintnode(expr, hint=hint)
        self._symints[key] = out
        return out

    def sym_float(self, s: schema.SymFloat, where: str) -> float | torch.SymFloat:
        if s.as_expr is None:
            return schema.from_f64(s.as_float)
        e = s.as_expr
        tree = expr_to_tree(e.expr, where=where)
        check_sort(tree, NUM, where=where)
        expr = self._expr_of_tree(tree, where)
        hint = _hint_of(e, "as_float", where)
        hint = None if hint is None else schema.from_f64(hint)
        if symbolic_shapes.free_unbacked_symbols(expr):
            hint = None
        return self.shape_env.create_symfloatnode(expr, hint=hint)

    def sym_bool(self, s: schema.SymBool, where: str) -> bool | torch.SymBool:
        if s.as_expr is None:
            return s.as_bool
        tree = expr_to_tree(s.as_expr.expr, where=where)
        check_sort(tree, BOOL, where=where)
        expr = self._expr_of_tree(tree, where)
        hint = _hint_of(s.as_expr, "as_bool", where)
        if hint is None or symbolic_shapes.free_unbacked_symbols(expr):
            # The stored example value, or none where torch had none (see _hint): the ShapeEnv's
            # create_symboolnode always works one out, so the node is made here.
            hint = _NO_HINT
        return torch.SymBool(SymNode(expr, self.shape_env, bool, hint))

    def tensor_meta(self, m: schema.TensorMeta, where: str) -> torch.Tensor:
        """A FakeTensor with the stored dtype, (symbolic) sizes, strides and offset."""
        # Most sizes are plain ints: only a symbolic one needs the (field path for its) parser.
        sizes = [s.as_int if s.as_int is not None else self.sym_int(s, f"{where}.sizes[{i}]")
                 for i, s in enumerate(m.sizes)]
        strides = [s.as_int if s.as_int is not None else self.sym_int(s, f"{where}.strides[{i}]")
                   for i, s in enumerate(m.strides)]
        if len(sizes) != len(strides):
            raise MalformedArtifactError(f"{where}: {len(sizes)} sizes but {len(strides)} strides")
        layout = deserialize_layout(m.layout, where)
        if layout != torch.strided:
            raise MalformedArtifactError(f"{where}: only strided tensors are supported, got {layout}")
        o = m.storage_offset
        offset = o.as_int if o.as_int is not None else self.sym_int(o, f"{where}.storage_offset")
        dtype = deserialize_dtype(m.dtype, where)
        d = m.device
        device = self._devices.get((d.type, d.index))
        if device is None:
            device = self._devices[(d.type, d.index)] = deserialize_device(d)
        try:
            return self._fake_tensor(sizes, strides, offset, dtype, device, m.requires_grad)
        except (RuntimeError, TypeError, ValueError, OverflowError) as e:  # negative or out-of-range sizes, bad offsets
            raise MalformedArtifactError(
                f"{where}: sizes {sizes}, strides {strides}, storage offset {offset} do not describe a "
                f"tensor ({str(e).splitlines()[0]}); the artifact is damaged") from None

    def _fake_tensor(self, sizes: list, strides: list, offset: Any, dtype: torch.dtype, device: torch.device,
                     requires_grad: bool) -> torch.Tensor:
        # What FakeTensorMode does for a tensor constructor, without its dispatch and cache-key
        # machinery (with symbolic sizes its cache replays every size computation, several times
        # the meta kernel's own cost): the meta kernel builds the tensor (and checks the sizes,
        # strides and offset), FakeTensor wraps it with the stored device. No mode may see the meta
        # calls (load already sets the caller's modes aside).
        with torch._C._DisableTorchDispatch():
            if isinstance(offset, int) and offset == 0:
                elem = torch.empty_strided(sizes, strides, dtype=dtype, device="meta")
            else:
                # A view into a larger storage (e.g. an output of split): keep its offset exactly.
                # Like export's own value (and unlike a view of a fresh base), the result is no view.
                extent = offset + 1
                for size, stride in zip(sizes, strides, strict=True):
                    extent = extent + (size - 1) * stride
                elem = torch.empty(extent, dtype=dtype, device="meta").as_strided(sizes, strides, offset)
        return FakeTensor(self.fake_mode, elem, device, requires_grad=requires_grad)

    def range_constraints(self, where: str = "range_constraints") -> dict[sympy.Basic, ValueRanges]:
        out: dict[sympy.Basic, ValueRanges] = {}
        for i, (tree, key) in enumerate(self._range_exprs):
            out[self._expr_of_tree(tree, f"{where}[{i}]")] = self._ranges[key]
        return out
