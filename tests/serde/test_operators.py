"""Operator target allow-list: round trips, hostile names, custom ops."""

from __future__ import annotations

import pytest
import torch

from serde.errors import UnknownOperatorError, UnsafeArtifactError, UnsupportedConstructError
from serde.operators import HIGHER_ORDER_OPS, SYMBOLIC_TARGETS, deserialize_target, serialize_target


@pytest.mark.parametrize("name", sorted(SYMBOLIC_TARGETS))
def test_symbolic_targets_round_trip(name):
    fn = deserialize_target(name, where="t")
    assert fn is SYMBOLIC_TARGETS[name]
    assert serialize_target(fn, where="t") == name


@pytest.mark.parametrize("name", sorted(HIGHER_ORDER_OPS))
def test_higher_order_ops_round_trip(name):
    op = deserialize_target(f"torch.ops.higher_order.{name}", where="t")
    assert isinstance(op, torch._ops.HigherOrderOperator)
    assert serialize_target(op, where="t") == f"torch.ops.higher_order.{name}"


@pytest.mark.parametrize(
    "op", [torch.ops.aten.add.Tensor, torch.ops.aten.relu.default, torch.ops.aten.sym_size.int]
)
def test_op_overload_round_trip(op):
    name = serialize_target(op, where="t")
    assert name.startswith("torch.ops.aten.")
    assert deserialize_target(name, where="t") is op


@pytest.mark.parametrize(
    "name",
    ["builtins.eval", "os.system", "torch.load", "subprocess.run", "torch.ops.aten.__class__",
     "torch.ops.aten.add.__class__", "torch.ops.higher_order.print", "torch.ops.aten.add"],
)
def test_hostile_names_rejected(name):
    with pytest.raises(UnsafeArtifactError, match="nodes\\[7\\]"):
        deserialize_target(name, where="graph.nodes[7]")


def test_unregistered_op_is_unknown():
    with pytest.raises(UnknownOperatorError, match="pt2serde_test_absent::nope.default"):
        deserialize_target("torch.ops.pt2serde_test_absent.nope.default", where="n")


def test_unsupported_callable():
    with pytest.raises(UnsupportedConstructError, match="print"):
        serialize_target(print, where="graph.nodes[0]")
