"""Python callables torch.export leaves in training-IR graphs besides symbolic arithmetic: the
``torch._functorch.predispatch`` vmap calls that associative_scan traces to. They return one
tensor, or nothing (bookkeeping calls); the allow-list names exactly the ones exports produce.
"""

from __future__ import annotations

import io
import operator

import pytest
import torch
import torch._functorch.predispatch as predispatch

import serde
from serde.bridge.operators import PREDISPATCH_TARGETS, STATEFUL_TARGETS, deserialize_target, serialize_target
from serde.errors import UnsafeArtifactError, UnsupportedConstructError
from serde.testing import assert_roundtrip


def _predispatch_nodes(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in gm.graph.nodes if getattr(n.target, "__module__", "") == predispatch.__name__]


def test_allow_list_is_what_exports_produce(breadth_program):
    gm = breadth_program("associative_scan").graph_module
    found = {serialize_target(n.target, where="t") for n in _predispatch_nodes(gm)}
    assert found == set(PREDISPATCH_TARGETS)
    assert STATEFUL_TARGETS < found
    for name, fn in PREDISPATCH_TARGETS.items():
        assert deserialize_target(name, where="t") is fn
        assert name == f"{fn.__module__}.{fn.__name__}"


def test_single_tensor_and_no_result_calls_roundtrip(breadth_program):
    loaded = assert_roundtrip(breadth_program("associative_scan"))
    nodes = _predispatch_nodes(loaded.graph_module)
    batched = [n for n in nodes if n.target is predispatch._add_batch_dim]
    assert batched and all(isinstance(n.meta["val"], torch.Tensor) for n in batched)
    assert all(u.target is not operator.getitem for n in batched for u in n.users)  # used bare
    for n in nodes:
        if n.target in (predispatch._vmap_decrement_nesting, predispatch.lazy_load_decompositions):
            assert n.meta["val"] is None and not n.users


class _M(torch.nn.Module):
    def forward(self, x):
        return x.relu() + 1


def test_unlisted_predispatch_callable_is_refused_at_save_and_load():
    ep = torch.export.export(_M(), (torch.randn(3),))
    g = ep.graph_module.graph
    relu = next(n for n in g.nodes if n.target is torch.ops.aten.relu.default)
    with g.inserting_after(relu):
        unwrap = g.call_function(predispatch._unwrap_for_grad, (relu, 1))
        unwrap.meta["val"] = relu.meta["val"]
    next(n for n in g.nodes if n.target is torch.ops.aten.add.Tensor).replace_input_with(relu, unwrap)
    ep.graph_module.recompile()
    with pytest.raises(UnsupportedConstructError, match="_unwrap_for_grad"):
        serde.save(ep, io.BytesIO())
    with pytest.raises(UnsafeArtifactError, match="_unwrap_for_grad"):
        deserialize_target("torch._functorch.predispatch._unwrap_for_grad", where="graph.nodes[2]")

