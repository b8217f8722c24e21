"""Python callables torch.export leaves in training-IR graphs besides symbolic arithmetic: the
``torch._functorch.predispatch`` wrappers that vmap-based ops (associative_scan, flex_attention)
trace to. They return one tensor, or nothing (bookkeeping calls).

The operator allow-list (serde.operators, another module's job) does not list them yet; these tests
add two of them for their duration, the way that table would, to prove the graph reader and writer
handle such targets: a single tensor result stays bare (no 1-tuple), and a call with no result has
no outputs.
"""

from __future__ import annotations

import pytest
import torch
import torch._functorch.predispatch as predispatch

from serde import operators
from serde.testing import assert_roundtrip

_TARGETS = {f"torch._functorch.predispatch.{fn.__name__}": fn
            for fn in (predispatch._unwrap_for_grad, predispatch.lazy_load_decompositions)}


@pytest.fixture
def allow_predispatch(monkeypatch):
    for name, fn in _TARGETS.items():
        monkeypatch.setitem(operators.SYMBOLIC_TARGETS, name, fn)
        monkeypatch.setitem(operators._TARGET_TO_NAME, fn, name)


class _M(torch.nn.Module):
    def forward(self, x):
        return x.relu() + 1


def _program() -> torch.export.ExportedProgram:
    """relu -> _unwrap_for_grad(relu, 1) -> add, plus a lazy_load_decompositions() call, as FX nodes."""
    ep = torch.export.export(_M(), (torch.randn(3),))
    g = ep.graph_module.graph
    relu = next(n for n in g.nodes if n.target is torch.ops.aten.relu.default)
    add = next(n for n in g.nodes if n.target is torch.ops.aten.add.Tensor)
    with g.inserting_after(relu):
        unwrap = g.call_function(predispatch._unwrap_for_grad, (relu, 1))
        unwrap.meta["val"] = relu.meta["val"]
    with g.inserting_before(unwrap):
        g.call_function(predispatch.lazy_load_decompositions, ()).meta["val"] = None
    add.replace_input_with(relu, unwrap)
    ep.graph_module.recompile()
    return ep


def test_single_tensor_and_no_result_callables_roundtrip(allow_predispatch):
    loaded = assert_roundtrip(_program(), metadata=())
    (unwrap,) = [n for n in loaded.graph.nodes if n.target is predispatch._unwrap_for_grad]
    assert isinstance(unwrap.meta["val"], torch.Tensor)
    assert [u.target for u in unwrap.users] == [torch.ops.aten.add.Tensor]  # used bare, no getitem
    (lazy,) = [n for n in loaded.graph.nodes if n.target is predispatch.lazy_load_decompositions]
    assert lazy.meta["val"] is None and not lazy.users
    x = torch.tensor([-1.0, 2.0, -3.0])
    torch.testing.assert_close(loaded.module()(x), x.relu() + 1)


def test_unlisted_callable_is_refused_at_save():
    import io

    import serde
    from serde.errors import UnsupportedConstructError

    with pytest.raises(UnsupportedConstructError, match="predispatch"):
        serde.save(_program(), io.BytesIO())
