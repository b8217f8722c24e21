"""How the graph writer stores an operator call's arguments: each way of passing them (arity and
keywords) is worked out once per operator; every call is still matched against the schema."""

from __future__ import annotations

import pytest
import torch
import torch.fx

from serde.bridge.graph import GraphWriter
from serde.core import schema
from serde.errors import UnsupportedConstructError

ADD = torch.ops.aten.add.Tensor


def _graph(*calls: tuple[tuple, dict]) -> torch.fx.GraphModule:
    """One aten.add per (args, kwargs) entry, ``"x"`` and ``"y"`` naming the two inputs."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    g = torch.fx.Graph()
    with FakeTensorMode() as mode:
        val = mode.from_tensor(torch.zeros(2))
    x, y = g.placeholder("x"), g.placeholder("y")
    x.meta["val"] = y.meta["val"] = val
    env = {"x": x, "y": y}
    outs = []
    for args, kwargs in calls:
        n = g.call_function(ADD, tuple(env.get(a, a) for a in args), {k: env.get(v, v) for k, v in kwargs.items()})
        n.meta["val"] = val
        outs.append(n)
    g.output(tuple(outs))
    return torch.fx.GraphModule(torch.nn.Module(), g)


def _stored(node: schema.Node) -> list[tuple]:
    return [(na.name, na.kind, na.arg.kind, getattr(na.arg, na.arg.kind)) for na in node.inputs]


def test_each_way_of_passing_arguments_is_stored_as_passed():
    nodes = GraphWriter(_graph((("x", "y"), {}), (("x", "y"), {"alpha": 2}), (("x",), {"other": "y"}),
                               (("x", "y"), {}), (("x", "y"), {"alpha": 3}))).write().nodes
    pos, kw = schema.ArgumentKind.POSITIONAL, schema.ArgumentKind.KEYWORD
    x, y = schema.TensorArgument(name="x"), schema.TensorArgument(name="y")
    assert [_stored(n) for n in nodes] == [
        [("self", pos, "as_tensor", x), ("other", pos, "as_tensor", y)],
        [("self", pos, "as_tensor", x), ("other", pos, "as_tensor", y), ("alpha", kw, "as_int", 2)],
        [("self", pos, "as_tensor", x), ("other", kw, "as_tensor", y)],
        [("self", pos, "as_tensor", x), ("other", pos, "as_tensor", y)],
        [("self", pos, "as_tensor", x), ("other", pos, "as_tensor", y), ("alpha", kw, "as_int", 3)],
    ]


@pytest.mark.parametrize("bad", [(("x", "y", 1, 2), {}), (("x", "y"), {"beta": 2}), (("x",), {"other": "y", "beta": 2})])
def test_a_call_that_does_not_match_the_schema_is_refused_after_good_ones(bad):
    with pytest.raises(UnsupportedConstructError, match="do not match its schema"):
        GraphWriter(_graph((("x", "y"), {}), (("x", "y"), {"alpha": 2}), (("x",), {"other": "y"}), bad)).write()
