"""The comparison helper must notice differences (a harness that cannot fail proves nothing)."""

from __future__ import annotations

import copy

import pytest
import torch

from serde.testing import ProgramMismatch, assert_programs_equal, zoo


def _ep(name="mlp"):
    return zoo.export_case(zoo.get(name))


def test_identical_programs_compare_equal():
    assert_programs_equal(_ep(), _ep())


def test_notices_changed_weight_bit():
    a, b = _ep(), _ep()
    b.state_dict["fc1.weight"].data[0, 0] = torch.nextafter(
        b.state_dict["fc1.weight"][0, 0], torch.tensor(10.0))
    with pytest.raises(ProgramMismatch, match="fc1.weight"):
        assert_programs_equal(a, b, run=False)


def test_notices_changed_op():
    a, b = _ep(), _ep()
    relu = [n for n in b.graph.nodes if n.target == torch.ops.aten.relu.default][0]
    relu.target = torch.ops.aten.sigmoid.default
    with pytest.raises(ProgramMismatch, match="relu|sigmoid"):
        assert_programs_equal(a, b, run=False)


def test_notices_changed_output():
    a = _ep()
    b = copy.deepcopy(a)
    for n in b.graph.nodes:
        if n.target == torch.ops.aten.gelu.default:
            n.kwargs = {"approximate": "tanh"}
    b.graph_module.recompile()
    with pytest.raises(ProgramMismatch):
        assert_programs_equal(a, b)


def test_notices_changed_range():
    a, b = _ep("dynamic_arith"), _ep("dynamic_arith")
    k = next(iter(b.range_constraints))
    vr = b.range_constraints[k]
    b.range_constraints[k] = type(vr)(vr.lower, vr.upper - 1)
    with pytest.raises(ProgramMismatch, match="range_constraints"):
        assert_programs_equal(a, b, run=False)


def test_notices_broken_tie():
    a, b = _ep("tied_weights"), _ep("tied_weights")
    b.state_dict["head.weight"] = torch.nn.Parameter(b.state_dict["head.weight"].detach().clone())
    with pytest.raises(ProgramMismatch, match="storage sharing"):
        assert_programs_equal(a, b, run=False)


def test_exact_names_mode_notices_renaming():
    a, b = _ep(), _ep()
    n = [n for n in b.graph.nodes if n.target == torch.ops.aten.relu.default][0]
    n.name = "renamed_relu"
    assert_programs_equal(a, b, run=False)  # consistent renaming is allowed by default
    with pytest.raises(ProgramMismatch, match="renamed_relu"):
        assert_programs_equal(a, b, run=False, exact_names=True)
