"""Traceable wrapper tensor subclasses (``__tensor_flatten__``) as parameters, buffers and inner tensors.

Real ``torch.export`` programs whose weights are ``TwoTensor``\\ s or a subclass defined here whose
flatten context carries data; saved and loaded with pt2serde and with torch, outputs compared.
"""

from __future__ import annotations

import io
import math

import msgspec
import pytest
import torch
from torch.testing._internal.two_tensor import TwoTensor

import serde
from serde.bridge.errors import UnknownTensorSubclassError
from serde.bridge.subclasses import (
    deserialize_context,
    register_tensor_subclass,
    registered_tensor_subclasses,
    serialize_context,
    unregister_tensor_subclass,
)
from serde.bridge.weights import deserialize_weights, serialize_weights
from serde.core import schema
from serde.errors import MalformedArtifactError, UnsupportedConstructError
from serde.testing import assert_roundtrip


class ScaledTensor(torch.Tensor):
    """A weight kept as ``qdata * scale`` (as quantization libraries do); its context is plain data."""

    @staticmethod
    def __new__(cls, qdata: torch.Tensor, scale: float, meta: dict):
        return torch.Tensor._make_wrapper_subclass(
            cls, qdata.shape, strides=qdata.stride(), storage_offset=qdata.storage_offset(),
            dtype=qdata.dtype, device=qdata.device, requires_grad=qdata.requires_grad)

    def __init__(self, qdata: torch.Tensor, scale: float, meta: dict) -> None:
        self.qdata, self.scale, self.meta = qdata, scale, meta

    def __repr__(self) -> str:
        return f"ScaledTensor({self.qdata!r}, {self.scale})"

    def __tensor_flatten__(self):
        return ["qdata"], {"scale": self.scale, "meta": self.meta}

    @staticmethod
    def __tensor_unflatten__(inner, ctx, outer_size, outer_stride):
        return ScaledTensor(inner["qdata"], ctx["scale"], ctx["meta"])

    @classmethod
    def __torch_dispatch__(cls, func, types, args, kwargs=None):
        kwargs = kwargs or {}
        if func in (torch.ops.aten.detach.default, torch.ops.aten.alias.default, torch.ops.aten.clone.default):
            x = args[0]
            return ScaledTensor(func(x.qdata, *args[1:], **kwargs), x.scale, x.meta)

        def dense(x):
            return x.qdata * x.scale if isinstance(x, ScaledTensor) else x

        return func(*torch.utils._pytree.tree_map(dense, args), **torch.utils._pytree.tree_map(dense, kwargs))


CONTEXT_META = {"label": "w8", "axis": 0, "dtype": torch.float32, "shape": torch.Size([3, 4]),
                "tags": ("a", [1, 2.5, None, True]), "device": torch.device("cpu"), 7: -0.0}


class TwoTensorModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.p = torch.nn.Parameter(TwoTensor(torch.randn(3, 4), torch.randn(3, 4)))
        self.register_buffer("b", TwoTensor(torch.randn(4), torch.randn(4)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.p.t() + self.b.sum()


class ScaledModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(ScaledTensor(torch.randn(3, 4), 0.5, CONTEXT_META), requires_grad=False)
        self.register_buffer("s", ScaledTensor(torch.arange(3.0), 2.0, {"label": "bias"}))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.linear(x, self.w) + self.s


@pytest.fixture
def registered():
    """Register the test classes for one test only (the registry is process-wide)."""
    names = [register_tensor_subclass(TwoTensor), register_tensor_subclass(ScaledTensor)]
    yield names
    for n in names:
        unregister_tensor_subclass(n)


def _torch_roundtrip(ep: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    buf = io.BytesIO()
    torch.export.save(ep, buf)
    buf.seek(0)
    return torch.export.load(buf)


def _ours(ep: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    buf = io.BytesIO()
    serde.save(ep, buf)
    return serde.load(buf.getvalue())


@pytest.mark.parametrize("model_cls, subclass", [(TwoTensorModel, TwoTensor), (ScaledModel, ScaledTensor)])
def test_subclass_parameter_and_buffer_round_trip_like_torch(model_cls, subclass, registered) -> None:
    torch.manual_seed(0)
    model = model_cls()
    x = torch.randn(2, 4)
    ep = torch.export.export(model, (x,))
    assert {type(t) for t in ep.state_dict.values()} == {subclass}

    ours = assert_roundtrip(ep)
    theirs = _torch_roundtrip(ep)
    for name, t in ep.state_dict.items():
        mine = ours.state_dict[name]
        assert type(mine) is subclass
        assert isinstance(mine, torch.nn.Parameter) == isinstance(t, torch.nn.Parameter) == isinstance(
            theirs.state_dict[name], torch.nn.Parameter)
        assert mine.__tensor_flatten__() == t.__tensor_flatten__() == theirs.state_dict[name].__tensor_flatten__()
    expected = model(x)
    for loaded in (ours, theirs):
        out = loaded.module()(x)
        assert type(out) is type(expected)
        torch.testing.assert_close(out, expected, rtol=0, atol=0)


def test_flatten_context_data_comes_back_exactly(registered) -> None:
    torch.manual_seed(0)
    ep = torch.export.export(ScaledModel(), (torch.randn(2, 4),))
    w = _ours(ep).state_dict["w"]
    assert w.scale == 0.5 and type(w.scale) is float
    assert w.meta == CONTEXT_META
    assert type(w.meta["tags"]) is tuple and type(w.meta["tags"][1]) is list
    assert type(w.meta["shape"]) is torch.Size and w.meta["dtype"] is torch.float32
    assert math.copysign(1.0, w.meta[7]) == -1.0


class TiedModel(torch.nn.Module):
    """One TwoTensor under two names, and a TwoTensor whose inner tensor views a plain buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.p = torch.nn.Parameter(TwoTensor(torch.randn(4, 4), torch.randn(4, 4)))
        self.q = self.p
        base = torch.randn(6, 4)
        self.register_buffer("base", base)
        self.register_buffer("v", TwoTensor(base[2:], torch.randn(6, 4)[2:]))  # TwoTensor needs equal offsets

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.p + x @ self.q.t() + self.v + self.base[:4]


def test_tied_subclasses_and_inner_tensors_keep_their_aliasing(registered) -> None:
    torch.manual_seed(0)
    model = TiedModel()
    x = torch.randn(4, 4)
    ep = torch.export.export(model, (x,))
    loaded = assert_roundtrip(ep)  # compares storage sharing of inner tensors with the original
    sd = loaded.state_dict
    if "q" in sd:  # export lists a tied parameter once or under both names; either way, one object
        assert sd["q"] is sd["p"]
    assert sd["v"].a.untyped_storage()._cdata == sd["base"].untyped_storage()._cdata
    assert sd["v"].a.storage_offset() == 8
    torch.testing.assert_close(loaded.module()(x), model(x))
    sd["base"][2, 0] = 100.0
    assert sd["v"].a[0, 0].item() == 100.0


def test_nested_subclasses_and_shared_inner_storage_round_trip(registered) -> None:
    torch.manual_seed(0)
    base = torch.randn(2, 8)
    inner = TwoTensor(base[:, 4:], base[:, 4:])  # TwoTensor needs equal offsets: one view twice
    nested = TwoTensor(inner, torch.randn(2, 8)[:, 4:])
    weights, payloads = serialize_weights({"n": nested, "plain": base}, {}, ((nested,), {}))
    assert weights.state_dict["n"].subclass.inner["a"].subclass is not None
    assert len(weights.storages) == 2  # base (under both inner views and "plain") and the second inner tensor
    views = {k: memoryview(bytearray(bytes(v))) for k, v in payloads.items()}
    sd, _, examples = deserialize_weights(weights, views.__getitem__)
    n = sd["n"]
    assert type(n) is TwoTensor and type(n.a) is TwoTensor
    assert sd["n"] is examples[0][0]  # the same stored subclass is one object
    assert n.a.a.untyped_storage()._cdata == n.a.b.untyped_storage()._cdata == sd["plain"].untyped_storage()._cdata
    assert torch.equal(n.a.b, base[:, 4:]) and n.a.b.stride() == (8, 1)


def test_loading_an_unregistered_subclass_names_it_and_says_how_to_register() -> None:
    torch.manual_seed(0)
    assert "torch.testing._internal.two_tensor.TwoTensor" not in registered_tensor_subclasses()
    buf = io.BytesIO()
    serde.save(torch.export.export(TwoTensorModel(), (torch.randn(2, 4),)), buf)  # saving needs no registration
    with pytest.raises(UnknownTensorSubclassError,
                       match=r"weights\.state_dict\['b'\]: the tensor subclass "
                             r"'torch\.testing\._internal\.two_tensor\.TwoTensor' is not registered in this process.*"
                             r"register it before loading:\n"
                             r"    from torch\.testing\._internal\.two_tensor import TwoTensor\n"
                             r"    serde\.register_tensor_subclass\(TwoTensor\)\n.*"
                             r"serde\.register_tensor_subclass\(<the class>, "
                             r"name='torch\.testing\._internal\.two_tensor\.TwoTensor'\)"):
        serde.load(buf.getvalue())


def test_a_registered_name_survives_the_class_moving() -> None:
    torch.manual_seed(0)
    name = register_tensor_subclass(TwoTensor, name="mylib.Pair")
    try:
        buf = io.BytesIO()
        serde.save(torch.export.export(TwoTensorModel(), (torch.randn(2, 4),)), buf)
    finally:
        unregister_tensor_subclass(TwoTensor)
    with pytest.raises(UnknownTensorSubclassError, match=r"(?s)'mylib\.Pair'.*register_tensor_subclass\(<the class>, name='mylib\.Pair'\)"):
        serde.load(buf.getvalue())
    register_tensor_subclass(TwoTensor, name=name)
    try:
        assert type(serde.load(buf.getvalue()).state_dict["p"]) is TwoTensor
    finally:
        unregister_tensor_subclass(name)


def test_a_context_that_is_not_data_is_refused_at_save() -> None:
    w = ScaledTensor(torch.ones(2), 1.0, {"fn": len})
    with pytest.raises(UnsupportedConstructError,
                       match=r"state_dict\['w'\]: the flatten context of ScaledTensor\['meta'\]\['fn'\]: "
                             r"a builtins\.builtin_function_or_method is not representable as data"):
        serialize_weights({"w": w}, {}, None)


def test_unflatten_that_disagrees_with_the_stored_outer_tensor_is_refused(registered) -> None:
    weights, payloads = serialize_weights({"w": TwoTensor(torch.ones(2, 3), torch.ones(2, 3))}, {}, None)
    weights.state_dict["w"] = msgspec.structs.replace(weights.state_dict["w"], dtype=schema.ScalarType.DOUBLE)
    views = {k: memoryview(bytearray(bytes(v))) for k, v in payloads.items()}
    with pytest.raises(MalformedArtifactError, match=r"weights\.state_dict\['w'\]: .*TwoTensor.*not the stored DOUBLE\[2, 3\]"):
        deserialize_weights(weights, views.__getitem__)


@pytest.mark.parametrize("bad, error", [(int, "is not a torch.Tensor subclass"),
                                        (torch.nn.Parameter, "is not a torch.Tensor subclass")])
def test_only_traceable_subclasses_can_be_registered(bad, error) -> None:
    with pytest.raises(TypeError, match=error):
        register_tensor_subclass(bad)
    with pytest.raises(TypeError, match="is not a dotted Python name"):
        register_tensor_subclass(TwoTensor, name="os.system('x')")


def test_context_values_round_trip_with_their_types() -> None:
    value = {"n": None, "i": -(2**63), "f": float("nan"), "s": "x", "b": False, "l": [1, (2, 3)],
             (1, "k"): {"d": torch.bfloat16}, "size": torch.Size([]), "dev": torch.device("meta")}
    back = deserialize_context(serialize_context(value, "ctx"), "ctx")
    assert list(back) == list(value)
    assert back[(1, "k")] == {"d": torch.bfloat16} and back["l"] == [1, (2, 3)] and type(back["l"][1]) is tuple
    assert math.isnan(back["f"]) and back["size"] == torch.Size([]) and back["dev"] == torch.device("meta")
    unhashable_key = schema.ContextValue(as_dict=[schema.ContextItem(key=schema.ContextValue(as_list=[]),
                                                                     value=schema.ContextValue(as_none=True))])
    with pytest.raises(MalformedArtifactError, match=r"ctx\[0\]\.key: a as_list cannot be a dict key"):
        deserialize_context(unhashable_key, "ctx")


def test_show_and_diff_describe_subclass_weights(registered, tmp_path) -> None:
    from canonical.diff import diff
    from canonical.render import render
    from serde.archive.artifact import read_artifact

    torch.manual_seed(0)
    a, b = tmp_path / "a.pt2s", tmp_path / "b.pt2s"
    model = ScaledModel()
    serde.save(torch.export.export(model, (torch.randn(2, 4),)), a)
    with torch.no_grad():
        model.w.qdata.add_(1)
    serde.save(torch.export.export(model, (torch.randn(2, 4),)), b)
    x, y = read_artifact(a), read_artifact(b)
    text = render(x.program, x.weights)
    assert "w: f32[3, 4] ScaledTensor(qdata=f32[3, 4] sha256:" in text
    assert ('context={"scale": 0.5, "meta": {"label": "w8", "axis": 0, "dtype": f32, "shape": Size([3, 4]), '
            '"tags": ("a", [1, 2.5, None, True]), "device": "cpu", 7: -0.0}}') in text
    report = diff(x.program, y.program, a_weights=x.weights, b_weights=y.weights)
    assert [(c.where, c.fields) for c in report.changes if c.section == "weights"] == [("state_dict[w]", ["values"])]
