"""The result kinds the loader expects of symbolic helpers, checked against what the helpers really
return: every helper, every combination of int/float/bool operands, on plain Python numbers and on
torch's SymInt/SymFloat/SymBool from a real ShapeEnv. A combination Python or torch refuses must be
one the table refuses too."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch._dynamo.source import ConstantSource
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from serde.bridge.checks import number_kind, symbolic_result_kinds
from serde.bridge.operators import SYMBOLIC_TARGETS

_ARITY = {"_operator.neg": (1,), "_operator.pos": (1,), "_operator.abs": (1,), "math.floor": (1,),
          "math.ceil": (1,), "math.trunc": (1,), "builtins.round": (1, 2), "torch.sym_not": (1,),
          "torch.sym_float": (1,), "torch.sym_int": (1,), "torch._sym_sqrt": (1,), "torch.sym_ite": (3,),
          "torch.sym_sum": (1, 2, 3)}
_TARGETS = sorted(t for t in SYMBOLIC_TARGETS if t != "_operator.getitem")


def _kind(v) -> str:
    return number_kind(v) or pytest.fail(f"not a number: {v!r}")


def _plain(kind: str, i: int):
    return {"int": (3, 2, -1)[i % 3], "float": (2.5, 0.5, -1.5)[i % 3], "bool": True}[kind]


def _symbolic(env: ShapeEnv, kind: str, i: int):
    s = env.create_symintnode(env.create_symbol((3, 2, 5)[i % 3], ConstantSource(f"s{i}")), hint=(3, 2, 5)[i % 3])
    if kind == "int":
        return s
    if kind == "float":
        return torch.sym_float(s) / 2
    return s > 1


def _call(target: str, fn, values: list):
    return fn(values) if target == "torch.sym_sum" else fn(*values)


def _cases():
    for target in _TARGETS:
        for n in _ARITY.get(target, (2,)):
            for kinds in itertools.product(("int", "float", "bool"), repeat=n):
                yield target, kinds


@pytest.mark.parametrize(("target", "kinds"), list(_cases()), ids=lambda v: v if isinstance(v, str) else "-".join(v))
def test_the_result_kind_table_agrees_with_what_the_helpers_return(target, kinds):
    allowed = symbolic_result_kinds(target, list(kinds))
    fn = SYMBOLIC_TARGETS[target]
    env = ShapeEnv()
    outcomes = []
    for make in (lambda k, i: _plain(k, i), lambda k, i: _symbolic(env, k, i)):
        try:
            result = _call(target, fn, [make(k, i) for i, k in enumerate(kinds)])
        except (TypeError, ValueError, AssertionError):  # torch's helpers assert on operand kinds
            outcomes.append(None)
        else:
            outcomes.append(_kind(result))
    plain, symbolic = outcomes
    # A graph runs on plain numbers: what they refuse, a loaded program would fail on when called.
    if plain is None:
        assert not allowed, f"{target}{kinds} is refused by Python, the table allows {sorted(allowed)}"
        return
    assert plain in allowed, f"{target}{kinds} returned {plain}, the table allows {sorted(allowed)}"
    if symbolic is not None:
        assert symbolic in allowed, f"{target}{kinds} traced to {symbolic}, the table allows {sorted(allowed)}"

def test_an_int_pow_may_be_a_float():
    # A negative exponent makes int ** int a float: the table must allow both.
    assert symbolic_result_kinds("_operator.pow", ["int", "int"]) == {"int", "float"}
    assert type(2 ** -1) is float and type(2 ** 3) is int

