"""The safe symbolic-expression parser/printer, on expressions harvested from real exports,
random expression trees, and hostile text."""

from __future__ import annotations

import json
import math
import operator
import os
import subprocess
import sys

import pytest
import sympy
import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from torch.export import Dim, export
from torch.utils._sympy import functions as tf
from torch.utils._sympy.numbers import int_oo

from serde.core.errors import IntegerTooLargeError
from serde.core.expr import (
    MAX_EXPR_CHARS,
    MAX_EXPR_DEPTH,
    free_symbol_names,
    parse_expr,
    parse_to_tree,
    print_expr,
    rename_symbols,
    symbol_assumptions,
    sympy_to_tree,
    tree_to_str,
    tree_to_sympy,
)
from serde.core.expr.tree import degree as tree_degree
from serde.errors import MalformedArtifactError, UnsafeArtifactError, UnsupportedConstructError

# --- real expressions -----------------------------------------------------------------------


class _SizeArith(torch.nn.Module):
    """One output per kind of size arithmetic torch traces symbolically."""

    def forward(self, x, y):
        a, b = x.shape[0], y.shape[0]
        f = torch.sym_float(a)
        sizes = [
            a // 2, a % 3 + 1, a ** 2, -operator.neg(a), abs(a - 100), torch.sym_max(a, b), torch.sym_min(a, b),
            math.floor(a / 3), math.ceil(a / 3), math.trunc(f * 1.5), torch.sym_int(torch.sym_sqrt(a)),
            (a & 6) + 1, a | 1, a << 1, a >> 1, a - 1, torch.sym_sum([a, b, 1]),
            torch.sym_int(f ** 0.5), round(f / 3),
            torch.sym_ite(torch.sym_not(a > b), a, b), torch.sym_ite(a == b, a, b),
            torch.sym_ite(a != b, a, b), torch.sym_ite(a < b, a, b), torch.sym_ite(a <= b, a, b),
            torch.sym_ite((a > 3) & (b > 3), a, b), torch.sym_ite((a > 3) | (b > 3), a, b),
        ]
        return [torch.ones(s) for s in sizes], a * 2


class _Bounded(torch.nn.Module):
    """Dim with min/max and derived dims d + 1, 2*d."""

    def forward(self, x, y, z):
        return x + y[1:], z.reshape(2, -1)[0] * x


class _Unbacked(torch.nn.Module):
    """Unbacked sizes from .item() and nonzero, with SymBool guards from torch._check."""

    def forward(self, x, n):
        k = n.item()
        torch._check(k >= 0)
        torch._check(k < 100)
        nz = torch.nonzero(x)
        return torch.zeros(k * 2 + 1), x[:k], nz, nz.shape[0] * 2


def _collect(ep, out: list) -> None:
    def add(v):
        if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            out.append(v.node.expr)
        elif isinstance(v, torch.Tensor):
            for s in (*v.shape, *v.stride(), v.storage_offset()):
                add(s)
        elif isinstance(v, (list, tuple)):
            for item in v:
                add(item)

    for node in ep.graph.nodes:
        add(node.meta.get("val"))
    for sym, vr in ep.range_constraints.items():
        out.extend((sym, vr.lower, vr.upper))


@pytest.fixture(scope="module")
def harvested() -> list:
    torch.manual_seed(0)
    exprs: list = []
    _collect(export(_SizeArith(), (torch.randn(8, 3), torch.randn(5, 3)),
                    dynamic_shapes=({0: Dim.AUTO}, {0: Dim.AUTO})), exprs)
    d = Dim("d", min=2, max=64)
    _collect(export(_Bounded(), (torch.randn(4), torch.randn(5), torch.randn(8)),
                    dynamic_shapes=({0: d}, {0: d + 1}, {0: 2 * d})), exprs)
    _collect(export(_Unbacked(), (torch.tensor([1.0, 0.0, 2.0, 0.0, 3.0]), torch.tensor(3))), exprs)
    unique = {sympy.srepr(e): e for e in exprs if isinstance(e, sympy.Basic)}
    return [unique[k] for k in sorted(unique)]


def _symbols_of(*exprs) -> dict:
    table = {}
    for e in exprs:
        for s in e.free_symbols:
            table[s.name] = s
    return table


def _lookup(table: dict):
    calls: list[str] = []

    def symbol(name: str):
        calls.append(name)
        return table[name]

    symbol.calls = calls  # type: ignore[attr-defined]
    return symbol


def test_harvest_covers_the_required_kinds(harvested):
    kinds = {type(n).__name__ for e in harvested for n in sympy.preorder_traversal(e)}
    names = {s.name[0] for e in harvested for s in e.free_symbols}
    required = {
        "FloorDiv", "Mod", "Pow", "Max", "Min", "Piecewise", "IntTrueDiv", "FloorToInt", "CeilToInt",
        "TruncToInt", "RoundToInt", "ToFloat", "FloatPow", "FloatTrueDiv", "OpaqueUnaryFn_sqrt",
        "BitwiseFn_bitwise_and", "BitwiseFn_bitwise_or", "Abs", "Equality", "Unequality",
        "StrictGreaterThan", "GreaterThan", "LessThan", "StrictLessThan", "And", "Or", "Add", "Mul",
        "Float", "IntInfinity",
    }
    assert required <= kinds, sorted(required - kinds)
    assert {"s", "u"} <= names


def test_harvested_round_trip(harvested):
    for e in harvested:
        text = print_expr(e)
        symbol = _lookup(_symbols_of(e))
        back = parse_expr(text, symbol, where="harvest")
        assert back == e, (text, sympy.srepr(e), sympy.srepr(back))
        assert sorted(symbol.calls) == sorted({s.name for s in e.free_symbols})  # once per name
        tree = sympy_to_tree(e)
        assert parse_to_tree(text, where="harvest") == tree
        assert tree_to_str(tree) == text
        assert tree_to_sympy(json.loads(json.dumps(tree)), symbol) == e
        assert free_symbol_names(text) == {s.name for s in e.free_symbols}


def test_harvested_rename_matches_sympy(harvested):
    for e in harvested:
        names = sorted(s.name for s in e.free_symbols)
        if not names:
            continue
        # Reverse order, so renaming changes which operand sorts first.
        mapping = {old: f"c{len(names) - i}" for i, old in enumerate(names)}
        table = _symbols_of(e)
        renamed = e.xreplace({table[o]: sympy.Symbol(n, **table[o].assumptions0) for o, n in mapping.items()})
        _assert_rename_agrees(e, renamed, mapping)


def _assert_rename_agrees(e, renamed, mapping):
    """Textual renaming means the same as sympy renaming (sympy agrees structurally once it has
    rebuilt the text), and prints the same unless sympy re-normalizes by the new names: Abs
    extracts a sign and Piecewise orients its conditions by symbol order."""
    text = rename_symbols(print_expr(e), mapping)
    assert parse_expr(text, _lookup(_symbols_of(renamed)), where="rename") == renamed
    if not e.has(sympy.Abs, sympy.Piecewise):
        assert text == print_expr(renamed)


def test_symsize_expressions_print_like_sympy(harvested):
    """Plain polynomials print exactly as sympy does, so texts stay familiar."""
    polys = [e for e in harvested if isinstance(e, (sympy.Add, sympy.Mul, sympy.Symbol))
             and all(isinstance(n, (sympy.Add, sympy.Mul, sympy.Symbol, sympy.Integer))
                     for n in sympy.preorder_traversal(e))]
    assert len(polys) >= 5
    for e in polys:
        assert print_expr(e) == str(e)


# --- golden texts ------------------------------------------------------------------------------

s0, s1 = sympy.symbols("s0 s1", integer=True, positive=True)
u0 = sympy.Symbol("u0", integer=True)
GOLDEN = [
    (2 * s0 + 1, "2*s0 + 1"),
    (s0 * s1 + 2 * s0 + 1, "2*s0 + s0*s1 + 1"),
    (tf.FloorDiv(s0, 2), "FloorDiv(s0, 2)"),
    (tf.PythonMod(u0, 3), "PythonMod(u0, 3)"),
    (tf.Max(s1, s0, 3), "Max(3, s0, s1)"),
    (sympy.And(s0 > 2, s1 < 4), "(s0 > 2) & (s1 < 4)"),
    (sympy.Or(s0 > 2, sympy.Eq(s0, s1)), "Eq(s0, s1) | (s0 > 2)"),
    (sympy.Ne(s0, 2), "Ne(s0, 2)"),
    (s0 - sympy.Rational(3, 2) * s1 - sympy.Rational(1, 3), "s0 - 3/2*s1 - 1/3"),
    (-s0 * s1, "-s0*s1"),
    ((s0 + 1) * s1, "(s0 + 1)*s1"),
    (s0 ** -1, "s0**(-1)"),
    ((-2) ** s0, "(-2)**s0"),
    (sympy.Float(0.1) * tf.ToFloat(s0), "0.1*ToFloat(s0)"),
    (s0 + int_oo, "s0 + int_oo"),
    (-int_oo, "-int_oo"),
    (sympy.Piecewise((s0, s1 > 3), (s1, True)), "Piecewise((s0, s1 > 3), (s1, True))"),
    (sympy.true, "True"),
]


@pytest.mark.parametrize(("expr", "text"), GOLDEN, ids=[t for _, t in GOLDEN])
def test_golden_text(expr, text):
    assert print_expr(expr) == text
    assert parse_expr(text, _lookup({"s0": s0, "s1": s1, "u0": u0}), where="g") == expr


def test_torch_symbolic_values_and_python_scalars_print():
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    env = ShapeEnv()
    a = env.create_unbacked_symint()
    assert print_expr(a * 2 + 1) == f"2*{a.node.expr} + 1"
    assert print_expr(a >= 3) == f"{a.node.expr} >= 3"
    assert print_expr(7) == "7"
    assert print_expr(True) == "True"
    assert print_expr(0.25) == "0.25"


def test_floats_survive_exactly():
    for f in (0.1, 1 / 3, 1e-300, 123456789.123456789, 2.0 ** 60, -5e-324):
        e = sympy.Float(f) * s0
        back = parse_expr(print_expr(e), _lookup({"s0": s0}), where="f")
        assert back == e and float(back.args[0]) == f


def _stability_texts() -> str:
    s = sympy.symbols("s0:6", integer=True, positive=True)
    es = [sum((i + 1) * x for i, x in enumerate(s)) + 7, tf.Max(*s), sympy.And(*(x > 2 for x in s)),
          sympy.Mul(*s) * 3, tf.FloorDiv(s[3] * s[1] + s[2], s[0] + 1), sympy.Or(*(sympy.Eq(x, 4) for x in s))]
    return "".join(print_expr(e) + "\n" for e in es)


def test_print_is_stable_across_processes():
    """Another process, with another string-hash seed, prints the same text as this one."""
    code = (
        f"import sys; sys.path.insert(0, {os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))!r})\n"
        "from tests.serde.core import test_symbolic\n"
        "print(test_symbolic._stability_texts(), end='')\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout == _stability_texts()
    assert "s0 + 2*s1 + 3*s2 + 4*s3 + 5*s4 + 6*s5 + 7" in res.stdout


def test_text_helpers_import_neither_sympy_nor_torch():
    code = (
        "import sys\n"
        "from serde.core.expr import free_symbol_names, parse_to_tree, rename_symbols, tree_to_str\n"
        "assert free_symbol_names('FloorDiv(s1, 2) + u0') == {'s1', 'u0'}\n"
        "assert rename_symbols('s1 + 2*s0', {'s0': 'a', 's1': 'b'}) == '2*a + b'\n"
        "assert tree_to_str(parse_to_tree('1 + 2*s0', where='x')) == '2*s0 + 1'\n"
        "bad = sorted(m for m in ('sympy', 'torch') if m in sys.modules)\n"
        "assert not bad, bad\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]


def test_normalize_relations():
    assert rename_symbols("s1 > s0", {}, normalize_relations=True) == "s0 < s1"
    assert rename_symbols("Eq(s1, s0) & (s0 >= 2)", {}, normalize_relations=True) == "(2 <= s0) & Eq(s0, s1)"
    assert rename_symbols("s1 > s0", {}) == "s1 > s0"


@pytest.mark.parametrize("text, mapping", [
    ("Piecewise((s77, s17 < s77), (s17, True))", {"s77": "s0", "s17": "s1"}),
    ("Piecewise((s3, s9 <= s3), (s9 + 1, True))", {"s3": "s1", "s9": "s0"}),
    ("Abs(s17 - s77) + 1", {"s77": "s0", "s17": "s1"}),
    ("Abs(-u4 + u2)", {"u4": "u0", "u2": "u1"}),
])
def test_rename_orients_like_a_loaders_sympy(text, mapping):
    """Piecewise conditions and Abs are re-normalized by sympy by symbol name: the renamed text is
    what sympy prints for the renamed expression, so load -> save is a fixed point."""
    out = rename_symbols(text, mapping)
    made: dict[str, sympy.Symbol] = {}

    def loader_symbol(name):
        return made.setdefault(name, sympy.Symbol(name, **symbol_assumptions(name)))

    rebuilt = parse_expr(out, loader_symbol, where="t")
    assert print_expr(rebuilt) == out
    assert rename_symbols(out, {}) == out
    original = parse_expr(text, loader_symbol, where="t")
    assert rebuilt == original.xreplace({loader_symbol(o): loader_symbol(n) for o, n in mapping.items()})


def test_rename_resorts_and_keeps_unmapped_names():
    assert rename_symbols("s0 + 2*s1", {"s1": "a"}) == "2*a + s0"
    assert rename_symbols("Max(s0, s1, 3)", {"s0": "z"}) == "Max(3, s1, z)"
    assert rename_symbols("s0 - s1", {"s0": "s1", "s1": "s0"}) == "-s0 + s1"
    with pytest.raises(MalformedArtifactError, match="cannot be a symbol name"):
        rename_symbols("s0", {"s0": "__class__"})


def test_sympy_to_tree_rejects_what_it_cannot_carry():
    with pytest.raises(UnsupportedConstructError, match="sin"):
        sympy_to_tree(sympy.sin(s0), where="graph.nodes[2]")
    with pytest.raises(UnsupportedConstructError, match="double precision"):
        print_expr(sympy.Float("0.1", 40) * s0)
    with pytest.raises(UnsupportedConstructError, match="symbol name"):
        print_expr(sympy.Symbol("Max") + 1)
    with pytest.raises(UnsupportedConstructError, match="Dummy"):
        print_expr(sympy.Dummy("x") + 1)


# --- random trees ------------------------------------------------------------------------------

_POOL = [*sympy.symbols("s0:4", integer=True, positive=True), sympy.Symbol("u0", integer=True),
         sympy.Symbol("u1", integer=True)]


def _safe(build):
    def go(args):
        try:
            return build(*args)
        except Exception:  # sympy/torch refused the combination (e.g. FloorDiv by 0)
            return None
    return go


_INT_OPS = [
    lambda a, b: a + b, lambda a, b: a - b, lambda a, b: a * b, tf.FloorDiv, tf.PythonMod, tf.Mod,
    tf.CeilDiv, lambda a, b: tf.Max(a, b), lambda a, b: tf.Min(a, b), tf.BitwiseFn_bitwise_and,
    lambda a, b: tf.ModularIndexing(a, 1, b), lambda a, b: a * sympy.Rational(3, 2) - b,
    lambda a, b: tf.Where(sympy.Gt(a, b), a, b), lambda a, b: sympy.Piecewise((a, sympy.Le(a, b)), (b, True)),
    lambda a, b: tf.TruncToInt(tf.FloatTrueDiv(tf.ToFloat(a), tf.ToFloat(b))),
    lambda a, b: tf.FloorToInt(tf.IntTrueDiv(a, b)), lambda a, b: tf.RoundToInt(tf.ToFloat(a) * 0.25),
    lambda a, b: tf.CeilToInt(tf.FloatPow(tf.ToFloat(a), 0.5)), lambda a, b: a ** 2 + b ** 3,
    lambda a, b: tf.TruncToInt(tf.OpaqueUnaryFn_sqrt(tf.ToFloat(a))) - b, lambda a, b: sympy.Abs(a - b),
    lambda a, b: tf.LShift(a, 2) + tf.RShift(b, 1), lambda a, b: -a, lambda a, b: a + int_oo,
]
_BOOL_OPS = [sympy.Eq, sympy.Ne, sympy.Lt, sympy.Le, sympy.Gt, sympy.Ge]

_int_leaves = st.one_of(st.sampled_from(_POOL), st.integers(-3, 9).map(sympy.Integer))
int_exprs = st.recursive(
    _int_leaves,
    lambda kids: st.tuples(st.sampled_from(_INT_OPS), kids, kids)
    .map(lambda t: _safe(t[0])(t[1:]))
    .filter(lambda e: isinstance(e, sympy.Expr) and not e.has(sympy.nan, sympy.zoo)),
    max_leaves=12,
)
bool_exprs = st.recursive(
    st.tuples(st.sampled_from(_BOOL_OPS), int_exprs, int_exprs).map(lambda t: _safe(t[0])(t[1:])),
    lambda kids: st.one_of(
        st.tuples(kids, kids).map(_safe(sympy.And)), st.tuples(kids, kids).map(_safe(sympy.Or)),
        kids.map(lambda k: _safe(sympy.Not)((k,))),
    ),
    max_leaves=4,
).filter(lambda e: isinstance(e, sympy.Basic))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow,
                                                              HealthCheck.data_too_large])
@given(st.one_of(int_exprs, bool_exprs))
def test_random_trees_round_trip(e):
    assume(all(type(s) is sympy.Symbol for s in e.free_symbols))
    text = print_expr(e)
    table = {s.name: s for s in _POOL}
    assert parse_expr(text, _lookup(table), where="h") == e, (text, sympy.srepr(e))
    tree = sympy_to_tree(e)
    assert parse_to_tree(text, where="h") == tree
    assert tree_to_str(tree) == text
    assert tree_to_sympy(json.loads(json.dumps(tree)), _lookup(table)) == e
    assert free_symbol_names(text) == {s.name for s in e.free_symbols}
    mapping = {f"s{i}": f"s{3 - i}" for i in range(4)} | {"u0": "u1", "u1": "u0"}
    _assert_rename_agrees(e, e.xreplace({table[o]: table[n] for o, n in mapping.items()}), mapping)


# --- hostile text ------------------------------------------------------------------------------

PAYLOAD = "__import__('pathlib').Path('PWNED').touch()"


def test_payload_runs_under_plain_sympify_but_not_here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sympy.sympify(PAYLOAD)  # proves the string is a live exploit for a naive loader
    assert (tmp_path / "PWNED").exists()
    (tmp_path / "PWNED").unlink()
    for text in (PAYLOAD, "__import__('os').system('touch PWNED')"):
        with pytest.raises(UnsafeArtifactError, match=r"graph\.nodes\[3\]"):
            parse_expr(text, _lookup({}), where="graph.nodes[3]")
        with pytest.raises(UnsafeArtifactError):
            free_symbol_names(text)
    assert not (tmp_path / "PWNED").exists()


HOSTILE = [
    ("Symbol('x').__class__", UnsafeArtifactError, "string literal", 8),
    ("s0.__class__", UnsafeArtifactError, "attribute access", 3),
    ("__import__(os)", UnsafeArtifactError, "double underscore", 1),
    ("s0 + __builtins__", UnsafeArtifactError, "double underscore", 6),
    ("lambda: 1", UnsafeArtifactError, "lambda or slice", 7),
    ("lambda x", UnsafeArtifactError, "keyword 'lambda'", 1),
    ("s0[0]", UnsafeArtifactError, "subscript", 3),
    ("exec(s0)", UnsafeArtifactError, "'exec'", 1),
    ("Symbol(s0)", UnsafeArtifactError, "'Symbol'", 1),
    ("s0 + {1}", UnsafeArtifactError, "dict or set", 6),
    ("s0; s1", UnsafeArtifactError, "statement separator", 3),
    ("s0 = 1", UnsafeArtifactError, "assignment", 4),
    ("s0 if s1 else 2", MalformedArtifactError, "unexpected 'if'", 4),
    ("s0 +", MalformedArtifactError, "end of text", 5),
    ("(s0", MalformedArtifactError, "expected ')'", 4),
    ("2s0", MalformedArtifactError, "unexpected 's0'", 2),
    ("1 < s0 < 3", MalformedArtifactError, "chained", 8),
    ("s0 ^ 2", MalformedArtifactError, "'^'", 4),
    ("s0\n+ 1", MalformedArtifactError, "'\\n'", 3),
    ("FloorDiv(s0)", MalformedArtifactError, "takes 2", 1),
    ("Max", MalformedArtifactError, "without arguments", 1),
    ("(s0, s1)", MalformedArtifactError, "expected ')'", 4),
    ("Piecewise(s0)", MalformedArtifactError, "expected '('", 11),
    ("1/0", MalformedArtifactError, "division by zero", 2),
    ("None", UnsafeArtifactError, "keyword 'None'", 1),
    ("", MalformedArtifactError, "end of text", 1),
    ("1" * 5000, MalformedArtifactError, "too long", 1),
    ("s0 + 1e400", MalformedArtifactError, "overflows a double", 6),
]


@pytest.mark.parametrize(("text", "exc", "fragment", "col"), HOSTILE, ids=[h[0][:30] for h in HOSTILE])
def test_hostile_text_is_rejected_with_location(text, exc, fragment, col):
    with pytest.raises(exc) as info:
        parse_expr(text, _lookup({"s0": s0, "s1": s1}), where="graph.sym_ints[2]")
    msg = str(info.value)
    assert msg.startswith("graph.sym_ints[2]: ")
    assert fragment in msg, msg
    assert f"at column {col}." in msg


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("(" * 1000 + "s0" + ")" * 1000, "nesting"),
        ("-" * 5000 + "s0", "nesting"),
        ("~" * 300 + "(s0 > 1)", "nesting"),
        ("s0**" * 300 + "2", "nesting"),
        ("Max(s0, " * 300 + "s1" + ")" * 300, "nesting"),
        ("s0 + " * 20000 + "1", "limit is"),
        ("9**9**9**9", "bits"),
        ("LShift(s0, 1000000000)", "bits"),
        ("Max(" + ", ".join(f"s{i}" for i in range(300)) + ")", "more than 256 arguments"),
        ("FloorDiv(s0, 0)", "FloorDiv"),
        ("PythonMod(s0, 0)", "PythonMod"),
    ],
    ids=["parens", "unary", "not", "pow", "calls", "length", "power", "shift", "args", "floordiv0", "mod0"],
)
def test_resource_limits(text, fragment):
    table = {f"s{i}": sympy.Symbol(f"s{i}", integer=True, positive=True) for i in range(300)}
    # Huge powers are a limit violation (IntegerTooLargeError), the rest a malformed expression.
    expected = IntegerTooLargeError if fragment == "bits" else MalformedArtifactError
    with pytest.raises(expected, match=fragment):
        parse_expr(text, _lookup(table), where="w")


@pytest.mark.parametrize(("text", "degree"), [
    ("s0*s1*s2*s3*s4*s5*s6*s7*s8*s9", 1),             # a flattened 10-D tensor, every dim dynamic
    ("96*s1*96*s1", 2),
    ("(s0 + 1)**3*s1", 4),
    ("(s0 + s1 + 1)*(s0 + s1 + 2)*(s0 + s1 + 3)", 3),
    ("FloorDiv(s0**5, 2) + s1**3", 5),
    (("Mul", ("Mul", ("Symbol", "s0"), ("Symbol", "s1")), ("Symbol", "s2")), 1),  # a guard's nesting
])
def test_the_degree_counts_what_factoring_costs(text, degree):
    tree = parse_to_tree(text, where="w") if isinstance(text, str) else text
    assert tree_degree(tree) == degree
    table = {f"s{i}": sympy.Symbol(f"s{i}", integer=True, positive=True) for i in range(10)}
    assert tree_to_sympy(tree, _lookup(table), where="w") is not None


@pytest.mark.parametrize("text", [
    "*".join(["96*s1"] * 51),                          # a list edit of a stride 96*s1 (fuzz seed 12)
    "*".join(f"(s0 + {i})" for i in range(1, 17)),   # took torch 19 s to load as a size
    "*".join(f"(s0 + s1 + {i})" for i in range(1, 13)),  # 21 s
    "s0**9",
])
def test_a_degree_past_the_cap_is_refused_before_torch_factors_it(text):
    table = {"s0": s0, "s1": sympy.Symbol("s1", integer=True, positive=True)}
    with pytest.raises(IntegerTooLargeError, match=r"w: the degree of .* more than Limits\.max_degree=8"):
        parse_expr(text, _lookup(table), where="w")
    with pytest.raises(UnsupportedConstructError, match=r"polynomial of degree \d+; pt2serde stores size expressions up "
                                                          r"to degree 8"):
        sympy_to_tree(sympy.sympify(text, locals=table), where="w")


def test_depth_limit_is_reachable_without_recursion_error():
    text = "(" * (MAX_EXPR_DEPTH - 1) + "s0" + ")" * (MAX_EXPR_DEPTH - 1)
    assert parse_expr(text, _lookup({"s0": s0}), where="w") == s0
    assert MAX_EXPR_CHARS == 64 * 1024


@pytest.mark.parametrize(
    "tree",
    [
        ["Symbol", "__class__"], ["Exec", ["Integer", 1]], ["Integer", "5"], ["Integer", True],
        ["Rational", 2, 4], ["Rational", 1, 1], ["Float", "nan"], ["Float", "1e999"], ["Float", "0x10"],
        ["FloorDiv", ["Integer", 1]], ["Piecewise", ["Integer", 1]], ["True", ["Integer", 1]],
        [], "s0", None, ["Add"], ["Symbol", "Max"],
        [["Not"]],
    ],
)
def test_malformed_trees_are_rejected(tree):
    with pytest.raises(MalformedArtifactError, match="tree"):
        tree_to_sympy(tree, _lookup({}), where="t")
    with pytest.raises(MalformedArtifactError, match="tree"):
        tree_to_str(tree, where="t")


def test_deep_tree_is_rejected_without_recursion_error():
    tree: list = ["Symbol", "s0"]
    for _ in range(5000):
        tree = ["Not", tree]
    with pytest.raises(MalformedArtifactError, match="deeper"):
        tree_to_sympy(tree, _lookup({"s0": s0}), where="t")
    with pytest.raises(MalformedArtifactError, match="deeper"):
        tree_to_str(tree, where="t")


# ---------------------------------------------------------------- expressions remembered across loads


def _sym_expr(e):
    from serde.core import schema

    return schema.SymInt(as_expr=schema.SymExpr(expr=e, hint=None))


def _ranges(*names):
    from serde.core import schema

    return [schema.RangeConstraint(expr=schema.Expr(symbol=n), min_val=2, max_val=64) for n in names]


def test_remembered_expressions_are_keyed_by_their_whole_content():
    """Expressions that differ in any part (a constant, a symbol, an op) build different results in
    later loads: a key that left a part out would hand back the first one."""
    from serde.bridge.values import SymbolicContext
    from serde.core import schema

    E = schema.Expr
    variants = [E(mul=[E(symbol="s0"), E(integer=2)]), E(mul=[E(symbol="s0"), E(integer=3)]),
                E(mul=[E(symbol="s1"), E(integer=2)]), E(add=[E(symbol="s0"), E(integer=2)]),
                E(floor_div=[E(symbol="s0"), E(integer=2)])]
    for _ in range(2):  # the second round is served by the remembered expressions
        built = [SymbolicContext(_ranges("s0", "s1")).sym_int(_sym_expr(e), "x").node.expr for e in variants]
        s0, s1 = sympy.Symbol("s0", integer=True, positive=True), sympy.Symbol("s1", integer=True, positive=True)
        assert built[:4] == [2 * s0, 3 * s0, 2 * s1, s0 + 2]
        assert built[4] == tf.FloorDiv(s0, 2)


def test_remembered_expression_still_checks_and_registers_its_symbols():
    """A remembered expression is refused where building it would be (its symbol has no range in
    this program), and its symbols land in each load's own ShapeEnv."""
    from serde.bridge.values import SymbolicContext
    from serde.core import schema

    E = schema.Expr
    e = E(mul=[E(symbol="s5"), E(integer=7)])
    first = SymbolicContext(_ranges("s5"))
    first.sym_int(_sym_expr(e), "x")
    with pytest.raises(MalformedArtifactError, match="range_constraints"):
        SymbolicContext(_ranges("s0")).sym_int(_sym_expr(e), "x")
    again = SymbolicContext(_ranges("s5"))
    v = again.sym_int(_sym_expr(e), "x")
    assert v.node.shape_env is again.shape_env
    assert "s5" in again.symbols and again.symbols["s5"] in again.shape_env.var_to_range
