"""Stored expressions of the wrong arity or the wrong sort are refused where they are read: by the
load (bridge) and by the native emitter, naming the field.

Before, an ``ite`` with a missing operand reached the native planner (``IndexError``), and an
expression that simplifies to ``True`` at a size position reached torch's ``create_symintnode``
(``TypeError``); the emitter compiled booleans at size positions as 0 or 1.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path

import pytest

import native
import serde
from serde.archive import read_archive, write_archive
from serde.core.expr import BOOL, NUM, check_sort, parse_to_tree
from serde.errors import MalformedArtifactError

ROOT = Path(__file__).resolve().parents[3]
DYNAMIC = ROOT / "fixtures" / "v2.5" / "dynamic_arith" / "model.pt2s"
S0 = {"symbol": "s0"}
ONE = {"integer": 1}
GT = {"gt": [S0, ONE]}


def _edited(change: Callable[[dict], None]) -> bytes:
    c = read_archive(DYNAMIC)
    members = {n: bytes(c.member(n)) for n in c.names if n != "manifest.json"}
    program = json.loads(members["program.json"])
    change(program["graph_module"]["graph"])
    members["program.json"] = json.dumps(program).encode()
    out = io.BytesIO()
    write_archive(out, members, schema_version=c.schema_version, torch_version="test")
    return out.getvalue()


def _size(expr: dict) -> Callable[[dict], None]:
    def change(g: dict) -> None:
        g["tensor_values"]["sum_"]["sizes"][0]["as_expr"]["expr"] = expr
    return change


def _sym_int(expr: dict) -> Callable[[dict], None]:
    def change(g: dict) -> None:
        g["sym_int_values"]["floordiv"]["as_expr"]["expr"] = expr
    return change


# how the load and the emitter name the field
# emit_artifact runs the load's checks before its own: both refuse with the load's message
SIZE = {"load": r"graph\.tensor_values\['sum_'\]\.sizes\[0\]", "emit": r"graph\.tensor_values\['sum_'\]\.sizes\[0\]"}
ARITY = {
    "ite_missing_operand": ({"ite": [GT, S0]}, r"ite takes 3 operands, got 2"),
    "ite_extra_operand": ({"ite": [GT, S0, S0, S0]}, r"ite takes 3 operands, got 4"),
    "floor_div_one_operand": ({"floor_div": [S0]}, r"floor_div takes 2 operands, got 1"),
    "pow_three_operands": ({"pow": [S0, S0, S0]}, r"pow takes 2 operands, got 3"),
    "not_no_operand": ({"logical_not": []}, r"logical_not takes 1 operand, got 0"),
    "add_no_operand": ({"add": []}, r"add takes 1 or more operands, got 0"),
}
SORT = {
    "true_as_size": ({"constant": 1}, r"'True' is a bool where a number is expected"),
    "eq_as_size": ({"eq": [{"integer": 2}, {"integer": 2}]}, r"'Eq\(2, 2\)' is a bool where a number is expected"),
    "relation_as_size": (GT, r"'s0 > 1' is a bool where a number is expected"),
    "and_of_numbers": ({"logical_and": [S0, S0]}, r"And takes bools, got 's0', a number"),
    "add_of_a_bool": ({"add": [GT, S0]}, r"Add takes numbers, got 's0 > 1', a bool"),
    "ite_number_condition": ({"ite": [S0, S0, S0]}, r"the condition of ITE is a number, not a bool"),
    "ite_mixed_branches": ({"ite": [GT, S0, GT]}, r"the branches of ITE mix bools and numbers"),
    "eq_mixed": ({"eq": [GT, S0]}, r"Eq compares a bool with a number"),
}
CASES = {**ARITY, **SORT}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_size_expression_is_refused_by_load_and_emit(case: str) -> None:
    expr, reason = CASES[case]
    data = _edited(_size(expr))
    for name, read in (("load", serde.load), ("emit", native.emit_artifact)):
        with pytest.raises(MalformedArtifactError, match=rf"{SIZE[name]}: .*{reason}"):
            read(data)


@pytest.mark.parametrize("case", ["true_as_size", "relation_as_size", "ite_missing_operand"])
def test_bad_sym_int_value_is_refused_by_load(case: str) -> None:
    expr, reason = CASES[case]
    with pytest.raises(MalformedArtifactError, match=rf"floordiv.*{reason}"):
        serde.load(_edited(_sym_int(expr)))


def test_the_unedited_program_loads_and_emits() -> None:
    data = _edited(lambda g: None)
    ep = serde.load(data)
    args, kwargs = ep.example_inputs
    ep.module()(*args, **kwargs)
    native.load(native.emit_artifact(data).encode()).run(*args, **kwargs)


@pytest.mark.unit
@pytest.mark.parametrize(("text", "sort"), [
    ("s0 + 1", NUM), ("Max(s0, 2*s1)", NUM), ("Eq(Mod(s0, 2), 0)", BOOL),
    ("(s0 > 2) & (s1 <= 3)", BOOL), ("Piecewise((s0, s1 > 2), (1, True))", NUM),
    ("ITE(s0 > 2, s1, 3)", NUM), ("Ne(s0 > 1, s1 > 2)", BOOL),
])
def test_the_sorts_torch_writes_pass(text: str, sort: str) -> None:
    check_sort(parse_to_tree(text, where="e"), sort, where="e")
