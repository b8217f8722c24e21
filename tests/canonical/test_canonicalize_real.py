"""canonicalize() on real exports: module frames and unflatten (byte stability of strict-mode
metadata across processes: test_invariance)."""

from __future__ import annotations

import io
import textwrap

import pytest
import torch

import serde
from canonical.canonicalize import canonicalize
from serde.bridge.effects import op_facts
from serde.bridge.program import serialize_program
from serde.core import schema, wire
from serde.core.checks import check_program
from serde.testing import zoo

# A submodule returning two values used far apart: a demand-driven order alone would split its frame.
MODEL = """
import pytest
import torch

class Pair(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 8)

    def forward(self, x):
        return self.a(x).relu(), self.b(x).sigmoid()

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.pair = Pair()
        self.mid = torch.nn.Linear(8, 8)
        self.tail = torch.nn.Linear(8, 8)

    def forward(self, x):
        p, q = self.pair(x)
        h = self.mid(p).tanh()
        return self.tail(h * q) + 1
"""

def _load_model():
    ns: dict = {}
    exec(compile(textwrap.dedent(MODEL), "<model>", "exec"), ns)  # test-local model source, not artifact data
    torch.manual_seed(0)
    return ns["Net"]().eval()


def test_module_call_frames_stay_contiguous_and_unflatten_works():
    model = _load_model()
    x = torch.randn(3, 8)
    for strict in (False, True):
        ep = torch.export.export(model, (x,), strict=strict)
        program, _ = canonicalize(serialize_program(ep), facts=op_facts)
        frames = [tuple(e.key for e in n.metadata.nn_module_stack or ()) for n in program.graph_module.graph.nodes]
        closed: set = set()
        for prev, cur in zip(frames, frames[1:], strict=False):
            # leaving a frame closes it and every frame nested in it; none may be entered again
            for k in range(len(prev)):
                if cur[:k + 1] != prev[:k + 1]:
                    closed.add(prev[:k + 1])
            assert not any(cur[:k + 1] in closed for k in range(len(cur))), (strict, frames)
        buf = io.BytesIO()
        serde.save(ep, buf)
        loaded = serde.load(buf.getvalue())
        torch.testing.assert_close(loaded.module()(x), model(x))
        torch.testing.assert_close(torch.export.unflatten(loaded)(x), model(x))


def test_strict_and_non_strict_module_keys_agree():
    model = _load_model()
    x = torch.randn(3, 8)
    keys = []
    for strict in (False, True):
        program, _ = canonicalize(serialize_program(torch.export.export(model, (x,), strict=strict)), facts=op_facts)
        keys.append({e.key for n in program.graph_module.graph.nodes for e in n.metadata.nn_module_stack or ()})
    assert keys[0] == keys[1]
    assert {"L__self__", "L__self__pair", "L__self__pair.a", "L__self__mid"} <= keys[0]


# The writer shares objects among nodes (a value's reference at its definition and uses, scalar
# arguments, module stacks, tensor metas), and the canonicalizer and the name check memoize by
# identity. A decoded program shares nothing: both must give the same canonical program.
@pytest.mark.parametrize("name", ["nested_modules", "chain_200", "transformer_block", "multi_output", "cond"])
def test_canonical_form_does_not_depend_on_shared_objects(name):
    case = next(c for c in zoo.CASES if c.name == name)
    shared = serialize_program(zoo.export_case(case))
    fresh = wire.decode(wire.encode(shared), schema.ExportedProgram)
    for keep_debug in (False, True):
        a, da = canonicalize(shared, facts=op_facts, keep_debug=keep_debug)
        b, db = canonicalize(fresh, facts=op_facts, keep_debug=keep_debug)
        assert wire.encode(a) == wire.encode(b)
        assert wire.encode(da) == wire.encode(db)
    check_program(a)
    check_program(wire.decode(wire.encode(a), schema.ExportedProgram))


def test_signed_zero_scalars_keep_their_sign(tmp_path):
    """0.0 == -0.0, yet ``x * 0.0`` and ``x * -0.0`` differ for negative x: the writer's shared
    scalar arguments must keep them apart."""
    class M(torch.nn.Module):
        def forward(self, x):
            return x * 0.0, x * -0.0, x + 0.0, x + -0.0

    x = torch.tensor([-1.0, 2.0])
    ep = torch.export.export(M(), (x,), strict=False)
    path = tmp_path / "m.pt2s"
    serde.save(ep, path)
    loaded = serde.load(path)
    for want, got in zip(ep.module()(x), loaded.module()(x), strict=True):
        assert torch.equal(torch.signbit(want), torch.signbit(got))
    scalars = sorted(str(n.args[1]) for n in loaded.graph.nodes if n.op == "call_function")
    assert scalars == ["-0.0", "-0.0", "0.0", "0.0"]


class _TwoChecks(torch.nn.Module):
    def __init__(self, n_first: bool) -> None:
        super().__init__()
        self.n_first = n_first

    def forward(self, x, n, m):
        if self.n_first:
            a = n.item()
            b = m.item()
            torch._check(a >= 0)
            torch._check(b >= 0)
        else:  # the same program, its independent statements the other way round
            b = m.item()
            a = n.item()
            torch._check(b >= 0)
            torch._check(a >= 0)
        return x[:a].sum() + x[:b].sum()


def test_assert_messages_name_canonical_symbols_and_nodes():
    """torch writes the tracing-time symbols and node names into each assert's message; the
    canonical form writes the canonical ones, so the two orders give the same bytes and each
    message names the node it checks."""
    args = (torch.ones(6), torch.tensor(2), torch.tensor(3))
    blobs = []
    for n_first in (True, False):
        buf = io.BytesIO()
        serde.save(torch.export.export(_TwoChecks(n_first), args), buf)
        blobs.append(buf.getvalue())
    assert blobs[0] == blobs[1]
    loaded = serde.load(blobs[0])
    asserts = [n for n in loaded.graph.nodes if n.target is torch.ops.aten._assert_scalar.default]
    assert len(asserts) == 2
    for node in asserts:
        cond, msg = node.args
        assert msg == f"Runtime assertion failed for expression {cond.meta['val'].node.expr} on node '{cond.name}'"
    with pytest.raises(RuntimeError, match=r"Runtime assertion failed for expression u\d >= 0 on node"):
        loaded.module()(torch.ones(6), torch.tensor(-1), torch.tensor(3))
