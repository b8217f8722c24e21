"""Unbacked symbols (.item(), nonzero(), torch._check / _check_is_size, data-dependent output sizes)
load with their bindings and ranges, and run."""

from __future__ import annotations

import io

import pytest
import torch

import serde
from serde.testing import assert_programs_equal, assert_roundtrip
from tests import zoo_breadth

CASES = ["unbacked", "unbacked_aten", "unbacked_in_cond"]


def _bindings(gm: torch.fx.GraphModule) -> list[tuple[str, str, list[str]]]:
    """(graph path, op, bound key paths) of every node with unbacked_bindings, in a stable order."""
    out = []
    for path, m in gm.named_modules():
        if isinstance(m, torch.fx.GraphModule):
            for n in m.graph.nodes:
                b = n.meta.get("unbacked_bindings")
                if b:
                    out.append((path and "sub", str(n.target), sorted(torch.utils._pytree.keystr(p)
                                                                       for p in b.values())))
    return sorted(out)


@pytest.mark.parametrize("name", CASES)
def test_unbacked_roundtrip_and_run(name, breadth_program):
    ep = breadth_program(name)
    loaded = assert_roundtrip(ep)  # compares unbacked_bindings node by node, through symbol renaming
    for args, kwargs in zoo_breadth.get(name).other_inputs():
        assert_programs_equal(ep, loaded, inputs=(args, kwargs))


@pytest.mark.parametrize("name", CASES)
def test_bindings_sit_on_the_nodes_that_create_the_symbols(name, breadth_program):
    ep = breadth_program(name)
    loaded = serde.load(_saved(ep))
    assert _bindings(loaded.graph_module) == _bindings(ep.graph_module)
    ops = {op for _, op, _ in _bindings(loaded.graph_module)}
    assert ops & {"aten.item.default", "aten._local_scalar_dense.default"}
    assert "aten.nonzero.default" in ops


def test_unbacked_ranges_come_back(breadth_program):
    ep = breadth_program("unbacked")
    loaded = serde.load(_saved(ep))

    def ranges(e):
        return sorted((str(k)[0], int(v.lower), int(v.upper)) for k, v in e.range_constraints.items())

    assert ranges(loaded) == ranges(ep)
    assert ("u", 0, 8) in ranges(loaded)  # torch._check_is_size(k); torch._check(k <= 8)
    env = _shape_env(loaded)
    item = next(n for n in loaded.graph.nodes if n.target is torch.ops.aten.item.default)
    vr = env.var_to_range[item.meta["val"].node.expr]
    assert (int(vr.lower), int(vr.upper)) == (0, 8)


def test_runtime_checks_still_fire_after_load(breadth_program):
    loaded = serde.load(_saved(breadth_program("unbacked")))
    m = loaded.module()
    zeros, nz, count, picked = m(torch.tensor([0.0, 3, 0, 4]), torch.tensor(8))
    assert zeros.shape == (8, 2) and nz.tolist() == [[1], [3]] and count == 3 and picked.tolist() == [3.0, 4.0]
    with pytest.raises(RuntimeError, match="u0 <= 8|u\\d+ <= 8"):
        m(torch.tensor([0.0, 3, 0, 4]), torch.tensor(9))


def test_loaded_program_can_be_decomposed_and_reexported(breadth_program):
    ep = breadth_program("unbacked_in_cond")
    loaded = serde.load(_saved(ep))
    # Retracing rebinds unbacked symbols through node.meta["unbacked_bindings"]: they must be right.
    dec = loaded.run_decompositions()
    assert_roundtrip(dec)
    args = (torch.tensor([2.0, 0, 1, 5]), torch.tensor(2))
    torch.testing.assert_close(dec.module()(*args), ep.module()(*args))
    again = torch.export.export(loaded.module(), args)
    torch.testing.assert_close(again.module()(*args), ep.module()(*args))


def _shape_env(ep):
    for n in ep.graph.nodes:
        v = n.meta.get("val")
        if isinstance(v, torch.SymInt):
            return v.node.shape_env
    raise AssertionError("no symbolic value in the graph")


def _saved(ep) -> bytes:
    buf = io.BytesIO()
    serde.save(ep, buf)
    return buf.getvalue()


def test_comparison_notices_missing_or_wrong_bindings(breadth_program):
    from serde.testing import ProgramMismatch

    ep = breadth_program("unbacked")
    loaded = serde.load(_saved(ep))
    node = next(n for n in loaded.graph.nodes if n.target is torch.ops.aten.nonzero.default)
    kept = node.meta.pop("unbacked_bindings")
    with pytest.raises(ProgramMismatch, match="unbacked_bindings"):
        assert_programs_equal(ep, loaded, run=False)
    (sym,) = kept
    node.meta["unbacked_bindings"] = {sym: (torch.fx.experimental.symbolic_shapes.CallMethodKey("size"),
                                            torch.utils._pytree.SequenceKey(1))}
    with pytest.raises(ProgramMismatch, match="unbacked_bindings"):
        assert_programs_equal(ep, loaded, run=False)
    node.meta["unbacked_bindings"] = kept
    assert_programs_equal(ep, loaded, run=False)


@pytest.mark.parametrize("dropped", [["u0"], ["u1"], ["u0", "u1", "u2"]])
def test_unbacked_symbols_without_a_stored_range_are_unbounded(dropped):
    """A file may leave an unbacked symbol's range out (nothing else needs it); the symbol is then
    unbounded, and the size checks that later narrow its range work as for any other symbol."""
    from tests.serde.attacks._attack_kit import FIXTURES, rewrite_program

    def drop(p: dict) -> None:
        p["range_constraints"] = [r for r in p["range_constraints"] if r["expr"].get("symbol") not in dropped]

    full = serde.load(FIXTURES / "unbacked" / "model.pt2s")
    loaded = serde.load(rewrite_program("unbacked", drop))
    kept = {str(k) for k in loaded.range_constraints}
    assert kept.isdisjoint(dropped) and len(kept) == 3 - len(dropped)
    for x, k in ((torch.tensor([0.0, 3, 0, 4]), torch.tensor(8)), (torch.tensor([1.0, 0, 2, 5]), torch.tensor(2))):
        got, want = loaded.module()(x, k), full.module()(x, k)
        assert all(torch.equal(torch.as_tensor(a), torch.as_tensor(b)) for a, b in zip(got, want, strict=True))
