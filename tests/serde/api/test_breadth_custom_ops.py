"""Custom ops (torch.library.custom_op + register_fake, namespace ``pt2serde_zoo``) round-trip, and
loading one that is not registered names the op and says how to register it."""

from __future__ import annotations

import io
import subprocess
import sys
import textwrap

import pytest
import torch

import serde
from serde.testing import assert_programs_equal, assert_roundtrip
from tests import zoo_breadth

ZOO = torch.ops.pt2serde_zoo


def _calls(ep, op) -> list[torch.fx.Node]:
    return [n for n in ep.graph.nodes if n.target is op]


@pytest.mark.parametrize("name", ["custom_ops", "custom_ops_aten", "kitchen_sink"])
def test_custom_ops_roundtrip_and_run(name, breadth_program):
    ep = breadth_program(name)
    loaded = assert_roundtrip(ep)
    for args, kwargs in zoo_breadth.get(name).other_inputs():
        assert_programs_equal(ep, loaded, inputs=(args, kwargs))


def test_several_returns_list_return_and_optional_return(breadth_program):
    loaded = assert_roundtrip(breadth_program("custom_ops"))
    (split,) = _calls(loaded, ZOO.split3.default)
    assert len(split.meta["val"]) == 3 and {u.args[1] for u in split.users} == {0, 1, 2}
    (copies,) = _calls(loaded, ZOO.scaled_copies.default)
    assert isinstance(copies.meta["val"], list) and len(copies.meta["val"]) == 3
    assert {u.args[1] for u in copies.users} == {0, 2}  # parts[1] is unused
    kept, dropped = sorted(_calls(loaded, ZOO.maybe_copy.default), key=lambda n: not n.args[1])
    assert isinstance(kept.meta["val"], torch.Tensor) and dropped.meta["val"] is None
    out, none = loaded.module()(torch.ones(3), torch.ones(3))
    assert none is None and out.shape == (3,)


def test_kwarg_only_default_and_optional_arguments_are_kept_as_written(breadth_program):
    ep = breadth_program("custom_ops")
    loaded = assert_roundtrip(ep)
    got = sorted(((n.args, n.kwargs) for n in _calls(loaded, ZOO.blend.default)), key=lambda a: len(a[0]))
    want = sorted(((n.args, n.kwargs) for n in _calls(ep, ZOO.blend.default)), key=lambda a: len(a[0]))
    # blend(b, y, alpha=2.0) and blend(c, None, 3.0, center=True): defaults are not filled in
    assert [(len(a), k) for a, k in got] == [(len(a), k) for a, k in want] == [
        (2, {"alpha": 2.0}), (3, {"center": True})]
    assert got[1][0][1] is None


def test_every_list_and_enum_argument_kind_reaches_the_op(breadth_program):
    ep = breadth_program("kitchen_sink")
    loaded = serde.load(_saved(ep))
    (node,) = _calls(loaded, ZOO.kitchen_sink.default)
    (orig,) = _calls(ep, ZOO.kitchen_sink.default)
    constants = (2, 3, 4, 6, 7, 9, 10)  # the other arguments are graph values
    assert [node.args[i] for i in constants] == [orig.args[i] for i in constants] == [
        [[1, 2], [3]], [[0.5], [1.5, -2.0]], ["a", "bc"], [True, False], [0.5, 0.25], 1.5 - 2j, "fast"]
    assert node.kwargs == orig.kwargs == {"dtype": torch.float64, "layout": torch.strided,
                                          "memory_format": torch.contiguous_format,
                                          "device": torch.device("cpu")}
    x, y = torch.randn(5, 2), torch.randn(5, 2)
    torch.testing.assert_close(loaded.module()(x, y), zoo_breadth.KitchenSink()(x, y))


def test_loading_an_unregistered_op_names_it_and_says_how_to_register(breadth_program, tmp_path):
    path = tmp_path / "custom.pt2s"
    serde.save(breadth_program("custom_ops"), path)
    script = textwrap.dedent(f"""
        import sys, serde
        try:
            serde.load({str(path)!r})
        except serde.UnknownOperatorError as e:
            print("UNKNOWN:", e)
            sys.exit(3)
        if "--register" in sys.argv:
            print("LOADED")
    """)
    # A fresh process that never imported the module defining pt2serde_zoo's ops.
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert r.returncode == 3, r.stderr[-2000:]
    msg = r.stdout
    assert "pt2serde_zoo::" in msg and "not registered" in msg
    assert "torch.library.custom_op" in msg and "load_library" in msg
    assert "graph.nodes[" in msg  # where
    # The same artifact loads once the registering module is imported.
    r = subprocess.run([sys.executable, "-c", "import tests.zoo_breadth\n" + script, "--register"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "LOADED" in r.stdout, r.stderr[-2000:]


def _saved(ep) -> bytes:
    buf = io.BytesIO()
    serde.save(ep, buf)
    return buf.getvalue()
