"""Programs exported without real data: FakeTensor weights and example inputs, meta tensors.

They are stored as metadata only (no payload) and load as FakeTensors of one FakeTensorMode (meta
tensors stay meta). ``torch.export.load`` also gives fake example inputs back as FakeTensors, but
fills fake weights with zeros; these tests pin down where we match torch and where we differ.
"""

from __future__ import annotations

import io
import logging

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

import serde
from serde.archive.artifact import read_artifact
from serde.bridge.weights import deserialize_weights, serialize_weights
from serde.errors import UnsupportedConstructError
from serde.testing import assert_programs_equal


def _meta(t: torch.Tensor) -> tuple:
    return (tuple(t.shape), t.dtype, t.stride(), t.storage_offset(), t.device, t.requires_grad)


def _fake_program() -> tuple[torch.export.ExportedProgram, FakeTensorMode]:
    mode = FakeTensorMode()
    with mode:
        model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3)).eval()
        ep = torch.export.export(model, (torch.randn(2, 4),))
    return ep, mode


def _save_ours(ep: torch.export.ExportedProgram) -> bytes:
    buf = io.BytesIO()
    serde.save(ep, buf)
    return buf.getvalue()


def _torch_roundtrip(ep: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    buf = io.BytesIO()
    torch.export.save(ep, buf)
    buf.seek(0)
    # torch 2.13 unpickles fake example inputs after a weights_only failure and logs a warning whose
    # format string lacks an argument; pytest's log capture raises on that, so mute that logger.
    log = logging.getLogger("torch._export.serde.serialize")
    was, log.disabled = log.disabled, True
    try:
        return torch.export.load(buf)
    finally:
        log.disabled = was


def test_a_program_exported_under_fake_mode_round_trips_as_fake() -> None:
    ep, mode = _fake_program()
    assert all(isinstance(t, FakeTensor) for t in ep.state_dict.values())
    data = _save_ours(ep)
    art = read_artifact(data)
    assert all(s.device is not None and s.sha256 == "" for s in art.weights.storages)
    assert not [n for n in art.contents.names if n.startswith("data/")]  # no payload at all

    ours = serde.load(data)
    theirs = _torch_roundtrip(ep)
    assert_programs_equal(ep, ours, run=False)  # graph, signature, weight metadata, aliasing
    for name, t in ep.state_dict.items():
        mine = ours.state_dict[name]
        assert isinstance(mine, FakeTensor) and _meta(mine) == _meta(t), name
        assert isinstance(mine, torch.nn.Parameter) == isinstance(t, torch.nn.Parameter)
        # torch agrees on the metadata, but materializes zeros, which we deliberately do not do.
        assert (tuple(theirs.state_dict[name].shape), theirs.state_dict[name].dtype) == (tuple(t.shape), t.dtype)
    (x,), _ = ours.example_inputs
    (tx,), _ = theirs.example_inputs
    assert isinstance(x, FakeTensor) and isinstance(tx, FakeTensor)
    assert _meta(x) == _meta(tx) == _meta(ep.example_inputs[0][0])
    # Weights and inputs share one mode, so the loaded program runs on its own inputs as the original does.
    assert x.fake_mode is ours.state_dict["0.weight"].fake_mode
    with x.fake_mode:
        out = ours.module()(x)
    with mode:
        expected = ep.module()(*ep.example_inputs[0])
    assert isinstance(out, FakeTensor) and _meta(out) == _meta(expected)


def test_fake_example_inputs_with_real_weights() -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        fake_x = mode.from_tensor(torch.randn(5, 4))
    ep = torch.export.export(model, (fake_x,))
    assert isinstance(ep.example_inputs[0][0], FakeTensor)
    ours = serde.load(_save_ours(ep))
    theirs = _torch_roundtrip(ep)
    x = torch.randn(5, 4)
    assert_programs_equal(ep, ours, inputs=((x,), {}))  # real weights bit for bit, outputs on real inputs
    (ix,), _ = ours.example_inputs
    assert isinstance(ix, FakeTensor) and _meta(ix) == _meta(theirs.example_inputs[0][0]) == _meta(fake_x)
    torch.testing.assert_close(ours.module()(x), model(x), rtol=0, atol=0)


def test_meta_and_fake_views_keep_shape_device_and_aliasing() -> None:
    base = torch.empty(6, 4, device="meta")
    with FakeTensorMode() as mode:
        fbase = torch.empty(5, 3, dtype=torch.float64)
        fview = fbase.t()[1:]
    weights, payloads = serialize_weights(
        {"base": base, "view": base[2:, ::2], "f": fbase, "fv": fview},
        {}, ((fview, torch.ones(2)), {}))
    assert payloads.keys() == {f"data/{weights.storages[-1].sha256}"}  # only the real example input
    views = {k: memoryview(bytearray(bytes(v))) for k, v in payloads.items()}
    sd, _, ((ex, one), _) = deserialize_weights(weights, views.__getitem__)
    assert sd["base"].device.type == sd["view"].device.type == "meta"
    assert _meta(sd["view"]) == _meta(base[2:, ::2])
    assert sd["view"].untyped_storage()._cdata == sd["base"].untyped_storage()._cdata
    assert all(isinstance(sd[k], FakeTensor) for k in ("f", "fv")) and isinstance(ex, FakeTensor)
    assert _meta(sd["fv"]) == _meta(ex) == _meta(fview) and sd["fv"].fake_mode is ex.fake_mode
    assert sd["fv"].untyped_storage()._cdata == sd["f"].untyped_storage()._cdata
    assert not isinstance(one, FakeTensor) and torch.equal(one, torch.ones(2))
    assert mode is not ex.fake_mode  # a fresh mode per load, never the saving process's


def test_symbolic_fake_tensors_are_refused() -> None:
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    with FakeTensorMode(shape_env=ShapeEnv()) as mode:
        x = mode.from_tensor(torch.randn(3, 4), symbolic_context=None)
    sym = mode.shape_env.create_unbacked_symint()
    with mode:
        y = torch.empty(sym, 4)
    with pytest.raises(UnsupportedConstructError, match=r"constants\['y'\]: size, stride or offset u0 is symbolic"):
        serialize_weights({"x": x}, {"y": y}, None)


def test_a_bundle_keeps_fake_leaves_fake() -> None:
    from serde.bridge.bundle import dumps_tree, loads_tree

    with FakeTensorMode():
        fake = torch.empty(3, 2, dtype=torch.int64).t()
    real = torch.arange(4.0)
    back = loads_tree(dumps_tree({"fake": fake, "real": real}))
    assert isinstance(back["fake"], FakeTensor) and _meta(back["fake"]) == _meta(fake)
    assert not isinstance(back["real"], FakeTensor) and torch.equal(back["real"], real)
