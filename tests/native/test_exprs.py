"""Size expressions: compile to postfix, evaluate, bound; checked against sympy as the oracle."""

from __future__ import annotations

import pytest
import sympy
from hypothesis import given
from hypothesis import strategies as st

from native.errors import NativeFormatError
from native.format import exprs as E
from native.format.memory import code_bounds
from serde.core.expr import parse_to_tree, tree_to_sympy
from serde.errors import UnsupportedConstructError

pytestmark = pytest.mark.unit

NAMES = ["s0", "s1", "s2"]


def _index(name: str) -> int:
    return NAMES.index(name)


def _leaf() -> st.SearchStrategy:
    return st.one_of(st.builds(lambda n: ("Symbol", n), st.sampled_from(NAMES)),
                     st.builds(lambda k: ("Integer", k), st.integers(0, 9)))


def _tree(children: st.SearchStrategy) -> st.SearchStrategy:
    nary = st.builds(lambda op, xs: (op, *xs), st.sampled_from(["Add", "Mul", "Max", "Min"]),
                     st.lists(children, min_size=2, max_size=3))
    # Divisors are positive by construction (as sizes are): 1 + something non-negative.
    div = st.builds(lambda op, a, b: (op, a, ("Add", ("Integer", 1), b)),
                    st.sampled_from(["FloorDiv", "PythonMod", "CeilDiv"]), children, children)
    return st.one_of(nary, div)


TREES = st.recursive(_leaf(), _tree, max_leaves=8)
ENVS = st.lists(st.integers(0, 50), min_size=3, max_size=3)


def _sympy_value(tree: tuple, env: list[int]) -> int:
    syms = {n: sympy.Symbol(n, integer=True, nonnegative=True) for n in NAMES}
    e = tree_to_sympy(tree, lambda n: syms[n])
    return int(e.subs({syms[n]: v for n, v in zip(NAMES, env, strict=True)}))


@pytest.mark.torch
@given(TREES, ENVS)
def test_evaluation_matches_sympy(tree, env):
    code = E.compile_tree(tree, _index, where="test")
    E.check_code(code, len(NAMES), "test")
    assert E.evaluate(code, env) == _sympy_value(tree, env)


@given(TREES, st.lists(st.tuples(st.integers(0, 20), st.integers(0, 30)), min_size=3, max_size=3), st.data())
def test_bounds_contain_every_value(tree, spans, data):
    ranges = [(lo, lo + width) for lo, width in spans]
    code = E.compile_tree(tree, _index, where="test")
    lo, hi = code_bounds(code, ranges)
    env = [data.draw(st.integers(a, b)) for a, b in ranges]
    v = E.evaluate(code, env)
    assert (lo is None or lo <= v) and (hi is None or v <= hi), (lo, v, hi)


@pytest.mark.parametrize("text, env, want", [
    ("2*s0 + 1", [5], 11),
    ("s0 // 2", [7], 3),
    ("Mod(s0, 3)", [8], 2),
    ("Max(1, s0 - 4)", [2], 1),
    ("Piecewise((s0, s0 > 4), (4, True))", [9], 9),
    ("Piecewise((s0, s0 > 4), (4, True))", [2], 4),
    ("ITE(s0 > 4, s0, 4)", [3], 4),
    ("ModularIndexing(s0, 2, 3)", [11], 2),
    ("s0**2", [6], 36),
    ("CeilDiv(s0, 4)", [9], 3),
    ("Eq(s0, 4) & (s0 >= 1)", [4], 1),
])
def test_printed_torch_expressions(text, env, want):
    code = E.compile_tree(parse_to_tree(text, where="t"), lambda n: 0, where="t")
    assert E.evaluate(code, env) == want


@pytest.mark.parametrize("text, what", [
    ("s0/2", "a power with a negative or non-integer exponent"),
    ("sqrt(s0)", "a power with a negative or non-integer exponent"),
    ("ToFloat(s0)", "'ToFloat'"),
    ("s0 + 0.5", "'Float'"),
    ("Piecewise((s0, s0 > 4))", "Piecewise without a final True branch"),
])
def test_unsupported_expressions_fail_at_emit_time(text, what):
    with pytest.raises(UnsupportedConstructError, match=r"graph.nodes\[2\]") as e:
        E.compile_tree(parse_to_tree(text, where="t"), lambda n: 0, where="graph.nodes[2]")
    assert what in str(e.value)


@pytest.mark.parametrize("code, msg", [
    ([99], "unknown opcode 99 at position 0"),
    ([E.PUSH], "lacks its operand"),
    ([E.PUSH, 1, E.ADD, 2], "pops 2 of 1 values"),
    ([E.PUSH, 1, E.PUSH, 2], "leaves 2 values instead of 1"),
    ([E.SYM, 5], "symbol 5 at position 0 is out of range"),
    ([E.PUSH, 1, E.ADD, 0], "pops 0 of 1 values"),
    ([], "leaves 0 values instead of 1"),
])
def test_malformed_code_is_rejected(code, msg):
    with pytest.raises(NativeFormatError, match=msg):
        E.check_code(code, 2, "exprs[0]")


@pytest.mark.parametrize("text, want", [
    ("s0", ("s0", 1, 0)),
    ("2*s0", ("s0", 2, 0)),
    ("4*s1 + 3", ("s1", 4, 3)),
    ("s0 + 1", ("s0", 1, 1)),
    ("s0*s1", None),
    ("s0 // 2", None),
    ("s0 + s1", None),
])
def test_affine_forms_bind_symbols(text, want):
    assert E.affine_in(parse_to_tree(text, where="t")) == want


def test_hostile_sizes_overflow_cleanly():
    with pytest.raises(ValueError, match="overflows int64"):
        E.evaluate([E.PUSH, 9, E.PUSH, 9, E.PUSH, 9, E.POW, E.POW], [])
    with pytest.raises(ValueError, match="overflows int64"):
        E.evaluate([E.PUSH, 1 << 40, E.PUSH, 1 << 40, E.MUL, 2], [])
    with pytest.raises(E.UnboundSymbolError, match="symbol 0 is not bound"):
        E.evaluate([E.SYM, 0], [None])
