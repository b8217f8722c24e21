"""The 1.x -> 2.0 upgrader step on real frozen v1 artifacts."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from serde.archive import read_archive
from serde.archive.upgrade import load_step, upgrade_documents
from serde.core import schema, wire
from serde.core.expr import expr_text, parse_to_tree, print_expr
from serde.core.version import SCHEMA_VERSION
from serde.errors import MalformedArtifactError, SerializeError, UnsafeArtifactError
from tests.serde.core.test_symbolic import bool_exprs, int_exprs
from upgraders import _v1_text, v1_to_v2

V1 = Path(__file__).resolve().parents[2] / "fixtures" / "v1.0"


def _v1_docs(case: str) -> dict:
    c = read_archive(V1 / case / "model.pt2s")
    return {"program": wire.decode_json(c.member("program.json")),
            "weights": wire.decode_json(c.member("weights.json"))}


def _sym_exprs(tree, out):
    if isinstance(tree, dict):
        if "expr_str" in tree:
            out.append(tree)
        for v in tree.values():
            _sym_exprs(v, out)
    elif isinstance(tree, list):
        for v in tree:
            _sym_exprs(v, out)
    return out


@pytest.mark.parametrize("case", ["dynamic_arith", "transformer_block", "cond", "mlp"])
def test_step_converts_every_expression_and_keeps_its_meaning(case):
    docs = _v1_docs(case)
    before = copy.deepcopy(docs)
    old = _sym_exprs(docs["program"], [])
    assert old, "the fixture has symbolic expressions"
    new_docs = v1_to_v2.upgrade(docs)
    assert docs == before, "the step must not modify its input"
    assert "expr_str" not in wire.encode(new_docs["program"]).decode()
    new_docs["program"]["schema_version"] = {"major": 2, "minor": 0}
    program = wire.decode(wire.encode(new_docs["program"]), schema.ExportedProgram)
    texts_before = sorted(d["expr_str"] for d in old)
    texts_after = sorted(expr_text(s.as_expr.expr) for s in _schema_sym_exprs(program))
    assert texts_before == texts_after
    rc_before = docs["program"]["range_constraints"]
    assert sorted(rc_before) == [expr_text(rc.expr) for rc in program.range_constraints]
    for rc in program.range_constraints:
        old_rc = rc_before[expr_text(rc.expr)]
        assert (rc.min_val, rc.max_val) == (old_rc.get("min_val"), old_rc.get("max_val"))


def _schema_sym_exprs(program):
    out = []

    def graph(g):
        for m in g.tensor_values.values():
            out.extend(s for s in [*m.sizes, *m.strides, m.storage_offset] if s.as_expr is not None)
        for table in (g.sym_int_values, g.sym_bool_values, g.sym_float_values):
            out.extend(s for s in table.values() if s.as_expr is not None)
        for n in g.nodes:
            for a in n.inputs:
                if a.arg.as_graph is not None:
                    graph(a.arg.as_graph.graph)
    graph(program.graph_module.graph)
    return out


def test_runner_finds_and_chains_the_step():
    step = load_step(1)
    assert step.FROM == (1, 0) and step.TO == (2, 0) and step.DATE and step.SUMMARY
    docs = upgrade_documents(_v1_docs("dynamic_arith"), (1, 0))
    assert docs["program"]["schema_version"] == {"major": SCHEMA_VERSION[0], "minor": SCHEMA_VERSION[1]}


def test_hostile_expression_text_is_rejected_not_evaluated(tmp_path):
    docs = _v1_docs("dynamic_arith")
    marker = tmp_path / "PWNED"
    first = _sym_exprs(docs["program"], [])[0]
    first["expr_str"] = f"__import__('os').system('touch {marker}')"
    with pytest.raises(SerializeError):
        v1_to_v2.upgrade(docs)
    assert not marker.exists()


def test_unknown_op_in_tree_is_an_upgrade_error():
    with pytest.raises(SerializeError, match="no 2.0 form"):
        v1_to_v2.tree_to_json(("Frobnicate", ("Integer", 1)))


# --- the frozen 1.x expression grammar -----------------------------------------------------------

@settings(deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow,
                                                              HealthCheck.data_too_large])
@given(st.one_of(int_exprs, bool_exprs))
def test_frozen_grammar_reads_printed_text_as_the_live_parser_does(e):
    """On the text the 1.x writer printed (print_expr of torch's sympy expressions), the frozen copy
    and the live parser give the same tree: the step produces what it produced when it was written."""
    text = print_expr(e)
    assert _v1_text.parse(text, where="t") == parse_to_tree(text, where="t"), text


def test_frozen_grammar_reads_every_v1_fixture_expression_as_the_live_parser_does():
    texts = [d["expr_str"] for case in ("dynamic_arith", "transformer_block", "cond")
             for d in _sym_exprs(_v1_docs(case)["program"], [])]
    assert len(set(texts)) > 3
    for text in texts:
        assert _v1_text.parse(text, where="t") == parse_to_tree(text, where="t"), text


@pytest.mark.parametrize("text, error, words", [
    ("s0 // 2", MalformedArtifactError, "expected a number"),  # the 1.x printer wrote FloorDiv(s0, 2)
    ("s0 % 2", MalformedArtifactError, "'%'"),
    ("s0/s1", MalformedArtifactError, "only between integer literals"),
    ("1/0", MalformedArtifactError, "only between integer literals"),
    ("Eq(s0, 1) == 1", UnsafeArtifactError, "'='"),
    ("1 < s0 < 3", MalformedArtifactError, "chained"),
    ("s0.__class__", UnsafeArtifactError, "'.'"),
    ("__import__(os)", UnsafeArtifactError, "double underscore"),
    ("exec(s0)", UnsafeArtifactError, "not an allow-listed function"),
    ("Max()", MalformedArtifactError, "Max() takes"),
    ("(" * 300 + "s0" + ")" * 300, MalformedArtifactError, "deeper than"),
])
def test_frozen_grammar_refuses_what_the_1x_printer_never_wrote(text, error, words):
    with pytest.raises(error, match=re.escape(words)):
        _v1_text.parse(text, where="program.json: x")
