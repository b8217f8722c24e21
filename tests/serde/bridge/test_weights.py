"""serde.bridge.weights: tensors of real exported programs through real archive files, bit for bit."""

from __future__ import annotations

import collections
import ctypes
import gc
import hashlib
import warnings
from pathlib import Path

import pytest
import torch

from serde.archive import payload_name, read_archive, write_archive
from serde.bridge.enums import DTYPE_TO_SCALAR, SCALAR_TO_DTYPE
from serde.bridge.weights import deserialize_weights, serialize_weights
from serde.core import schema, wire
from serde.core.checks import validate_weights
from serde.core.dtypes import ITEMSIZE
from serde.core.errors import (
    InvalidDtypeError,
    InvalidTensorViewError,
    PayloadSizeError,
    StorageIndexError,
    TensorOutOfBoundsError,
)
from serde.errors import MalformedArtifactError, UnsupportedConstructError

ST = schema.ScalarType


def _save_load(tmp_path: Path, state_dict, constants=None, example_inputs=None, *, from_bytes=False):
    """serialize -> real archive file -> read -> deserialize. Returns (weights, payloads, loaded, contents)."""
    w, payloads = serialize_weights(state_dict, constants or {}, example_inputs)
    path = tmp_path / "w.pt2s"
    members = {"program.json": b"{}", "weights.json": wire.encode(w), **payloads}
    write_archive(path, members, schema_version=(1, 0), torch_version="test")
    contents = read_archive(path.read_bytes() if from_bytes else path)
    decoded = wire.decode(contents.member("weights.json"), schema.Weights, where="weights.json")
    assert decoded == w
    return w, payloads, deserialize_weights(decoded, contents.member), contents


def _raw(t: torch.Tensor) -> bytes:
    return bytes(t.contiguous().view(torch.uint8).flatten().tolist())


def _assert_same(a: torch.Tensor, b: torch.Tensor) -> None:
    assert type(b) is torch.Tensor
    assert (a.dtype, a.shape, a.stride(), a.storage_offset()) == (b.dtype, b.shape, b.stride(), b.storage_offset())
    assert a.requires_grad == b.requires_grad
    assert _raw(a) == _raw(b)


def _export(module: torch.nn.Module, *args, **kwargs) -> torch.export.ExportedProgram:
    return torch.export.export(module, args, kwargs or None)


# ---------------------------------------------------------------- dtypes


class _AllDtypes(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        for i, dtype in enumerate(SCALAR_TO_DTYPE.values()):
            if dtype == torch.bool:
                t = torch.randint(0, 2, (37,), generator=g).bool()
            else:  # every bit pattern is fair game: NaN payloads, subnormals, -0.0, inf
                t = torch.randint(0, 256, (37 * dtype.itemsize,), dtype=torch.uint8, generator=g).view(dtype)
            self.register_buffer(f"b{i}_{str(dtype).removeprefix('torch.')}", t)
        self.register_buffer("specials", torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"),
                                                       5e-324, 1.7976931348623157e308], dtype=torch.float64))
        self.lin = torch.nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x)


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
def test_every_dtype_is_bit_exact(tmp_path: Path) -> None:
    ep = _export(_AllDtypes(), torch.ones(1, 3))
    assert {t.dtype for t in ep.state_dict.values()} == set(SCALAR_TO_DTYPE.values())
    w, _, (sd, consts, _), _ = _save_load(tmp_path, ep.state_dict)
    assert set(sd) == set(ep.state_dict) and consts == {}
    for name, t in ep.state_dict.items():
        _assert_same(t.detach().requires_grad_(t.requires_grad), sd[name])
    assert {t.dtype for t in w.state_dict.values()} == set(SCALAR_TO_DTYPE)


def test_itemsize_table_matches_torch() -> None:
    assert set(ITEMSIZE) == set(SCALAR_TO_DTYPE)
    for st, dtype in SCALAR_TO_DTYPE.items():
        assert ITEMSIZE[st] == dtype.itemsize, dtype


# ---------------------------------------------------------------- aliasing and views


class _Tied(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.emb = torch.nn.Embedding(11, 6)
        self.head = torch.nn.Linear(6, 11, bias=False)
        self.head.weight = self.emb.weight
        base = torch.randn(8, 9)
        self.register_buffer("base", base)
        self.register_buffer("transposed", base.t())            # same storage, other strides
        self.register_buffer("window", base[2:6, 3:7])           # same storage, offset 21
        self.register_buffer("expanded", torch.randn(1, 5).expand(4, 5))  # stride 0
        self.register_buffer("nhwc", torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last))
        self.register_buffer("twin", base.clone())               # equal bytes, its own storage

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.head(self.emb(idx)) + self.window.sum() + self.twin.sum()


def test_tied_weights_and_views_share_storage_after_load(tmp_path: Path) -> None:
    ep = _export(_Tied(), torch.tensor([1, 2, 3]))
    sd_in = ep.state_dict
    w, payloads, (sd, _, _), _ = _save_load(tmp_path, sd_in)
    for name, t in sd_in.items():
        _assert_same(t, sd[name])
    ptr = {n: t.untyped_storage().data_ptr() for n, t in sd.items()}
    assert ptr["emb.weight"] == ptr["head.weight"]
    assert ptr["base"] == ptr["transposed"] == ptr["window"]
    assert ptr["twin"] != ptr["base"]
    assert w.state_dict["window"].storage_offset == 2 * 9 + 3
    assert w.state_dict["expanded"].strides == [0, 1]
    # Aliasing is real: a write through one name is seen through the other.
    with torch.no_grad():
        sd["emb.weight"][0, 0] = 123.0
        sd["base"][2, 3] = -7.0
    assert sd["head.weight"][0, 0].item() == 123.0
    assert sd["window"][0, 0].item() == -7.0 and sd["transposed"][3, 2].item() == -7.0


def test_equal_bytes_in_two_storages_are_stored_once_but_not_aliased(tmp_path: Path) -> None:
    ep = _export(_Tied(), torch.tensor([1]))
    w, payloads, (sd, _, _), _ = _save_load(tmp_path, ep.state_dict)
    base_storage = w.storages[w.state_dict["base"].storage]
    twin_storage = w.storages[w.state_dict["twin"].storage]
    assert w.state_dict["base"].storage != w.state_dict["twin"].storage
    assert base_storage == twin_storage                       # same sha256 and size ...
    assert len(payloads) == len({s.sha256 for s in w.storages})  # ... one payload member
    sd["twin"].add_(1.0)
    assert torch.equal(sd["base"], ep.state_dict["base"])


def test_equal_bytes_from_one_named_tensor_and_a_constant(tmp_path: Path) -> None:
    x = torch.arange(6.0)
    w, payloads, (sd, consts, _), _ = _save_load(tmp_path, {"p": x}, {"c": x.clone()})
    assert len(w.storages) == 2 and len(payloads) == 1
    assert sd["p"].untyped_storage().data_ptr() != consts["c"].untyped_storage().data_ptr()


# ---------------------------------------------------------------- determinism and flags


def test_weights_json_is_deterministic(tmp_path: Path) -> None:
    ep = _export(_Tied(), torch.tensor([4]))
    sd = ep.state_dict
    w1, p1 = serialize_weights(sd, ep.constants, ep.example_inputs)
    w2, p2 = serialize_weights(dict(reversed(list(sd.items()))), ep.constants, ep.example_inputs)
    assert wire.encode(w1) == wire.encode(w2)
    assert list(p1) == list(p2)
    # Storages are numbered by first appearance over sorted names.
    first_seen = []
    for name in sorted(sd):
        s = w1.state_dict[name].storage
        if s not in first_seen:
            first_seen.append(s)
    assert first_seen == list(range(len(first_seen)))


def test_requires_grad_is_kept_and_tensors_are_plain(tmp_path: Path) -> None:
    ep = _export(_Tied(), torch.tensor([0]))
    _, _, (sd, _, _), _ = _save_load(tmp_path, ep.state_dict)
    assert sd["emb.weight"].requires_grad and not sd["base"].requires_grad
    assert all(type(t) is torch.Tensor for t in sd.values())
    assert all(t.is_leaf for t in sd.values())


def test_conjugate_views_are_stored_resolved(tmp_path: Path) -> None:
    z = torch.complex(torch.randn(4, generator=torch.Generator().manual_seed(1)), torch.ones(4)).conj()
    assert z.is_conj()
    _, _, (sd, _, _), _ = _save_load(tmp_path, {"z": z})
    assert not sd["z"].is_conj()
    assert torch.equal(sd["z"], z.resolve_conj())


# ---------------------------------------------------------------- zero copy


def test_loads_from_a_file_are_zero_copy_and_aligned(tmp_path: Path) -> None:
    ep = _export(_Tied(), torch.tensor([2]))
    w, _, (sd, _, _), contents = _save_load(tmp_path, ep.state_dict)
    for name in ("emb.weight", "base", "nhwc"):
        t = sd[name]
        view = contents.member(payload_name(w.storages[w.state_dict[name].storage].sha256))
        assert t.untyped_storage().data_ptr() == ctypes.addressof(ctypes.c_char.from_buffer(view))
        assert t.untyped_storage().data_ptr() % 64 == 0
    # The payload shared by base/twin is wrapped once and copied once.
    assert sd["twin"].untyped_storage().data_ptr() != sd["base"].untyped_storage().data_ptr()


def test_loads_from_read_only_bytes_copy_without_warnings(tmp_path: Path) -> None:
    ep = _export(_Tied(), torch.tensor([2]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, _, (sd, _, _), _ = _save_load(tmp_path, ep.state_dict, from_bytes=True)
    sd["base"].add_(1.0)  # writable, private memory
    assert torch.equal(sd["base"], ep.state_dict["base"] + 1.0)


def test_payload_views_keep_their_tensors_alive() -> None:
    def make():
        return serialize_weights({"t": torch.full((1000,), 3.5)}, {}, None)

    w, payloads = make()
    gc.collect()
    churn = [torch.full((1000,), -1.0) for _ in range(50)]  # reuse freed memory if it was freed
    (name, view), = payloads.items()
    assert hashlib.sha256(view).hexdigest() == w.storages[0].sha256 == name[5:]
    assert bytes(view) == bytes(torch.full((1000,), 3.5).view(torch.uint8).tolist())
    del churn


# ---------------------------------------------------------------- example inputs

Point = collections.namedtuple("Point", ["x", "y"])


class _Kw(torch.nn.Module):
    def forward(self, x, pair, *, opts, scale=1.0, flag=True, tag="a", nothing=None):
        y = x * scale + pair[0] - pair[1].y
        return y + opts["bias"][0] if flag else y


def test_example_inputs_round_trip(tmp_path: Path) -> None:
    g = torch.Generator().manual_seed(3)
    args = (torch.randn(3, generator=g), (torch.randn(3, generator=g), Point(1, torch.randn(3, generator=g))))
    kwargs = {"opts": {"bias": [torch.randn(3, generator=g), None]}, "scale": 2.5, "flag": True, "tag": "t"}
    ep = _export(_Kw(), *args, **kwargs)
    _, _, (_, _, example), _ = _save_load(tmp_path, ep.state_dict, ep.constants, ep.example_inputs)
    got_args, got_kwargs = example
    exp_args, exp_kwargs = ep.example_inputs
    assert torch.utils._pytree.tree_structure(example) == torch.utils._pytree.tree_structure(ep.example_inputs)
    for a, b in zip(torch.utils._pytree.tree_leaves(example), torch.utils._pytree.tree_leaves(ep.example_inputs),
                    strict=True):
        if isinstance(b, torch.Tensor):
            _assert_same(b, a)
        else:
            assert type(a) is type(b) and a == b
    assert type(got_args[1][1]).__name__ == "Point" and got_kwargs["tag"] == "t"
    # The example inputs run the loaded program's original module.
    torch.testing.assert_close(ep.module()(*got_args, **got_kwargs), ep.module()(*exp_args, **exp_kwargs))


def test_example_input_scalars_are_exact(tmp_path: Path) -> None:
    values = (float("nan"), float("-inf"), -0.0, 2**62 + 1, -(2**63), True, False, "", "ü", None)
    _, _, (_, _, example), _ = _save_load(tmp_path, {}, {}, (values, {}))
    got = example[0]
    assert [type(v) for v in got] == [type(v) for v in values]
    assert str(got[0]) == "nan" and got[1] == float("-inf") and str(got[2]) == "-0.0"
    assert got[3:] == values[3:]


def test_unsupported_example_leaf_names_its_path() -> None:
    with pytest.raises(UnsupportedConstructError, match=r"example_inputs\[0\]\[1\]\[0\]: an example input of type builtins.object"):
        serialize_weights({}, {}, ((torch.ones(1), [object()]), {}))
    with pytest.raises(UnsupportedConstructError, match=r"example_inputs\[1\]\['k'\]: integer 18446744073709551616"):
        serialize_weights({}, {}, ((), {"k": 2**64}))
    with pytest.raises(UnsupportedConstructError, match=r"expected \(args: tuple, kwargs: dict\)"):
        serialize_weights({}, {}, [torch.ones(1)])


# ---------------------------------------------------------------- unsupported tensors


class _Sub(torch.Tensor):
    pass


@pytest.mark.parametrize("make, match", [
    (lambda: torch.ones(2, 2).to_sparse(), "sparse_coo tensors cannot be stored"),
    (lambda: torch.empty(3, device="meta").as_subclass(_Sub), "_Sub cannot be stored: it does not implement"),
    (lambda: torch.ones(2).as_subclass(_Sub), "tensor subclass _Sub cannot be stored"),
    (lambda: torch.nested.nested_tensor([torch.ones(2), torch.ones(3)]), "nested tensors cannot be stored"),
    (lambda: torch.quantize_per_tensor(torch.ones(2), 0.1, 0, torch.qint8), "quantized tensors cannot be stored"),
    (lambda: "not a tensor", "builtins.str is not a tensor"),
])
def test_unsupported_values_are_named(make, match: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecation notices of the constructors themselves
        value = make()
    with pytest.raises(UnsupportedConstructError, match=r"constants\['odd'\]: .*" + match):
        serialize_weights({"ok": torch.ones(1)}, {"odd": value}, None)


# ---------------------------------------------------------------- validation


def _weights(t: schema.StoredTensor, nbytes: int = 64) -> tuple[schema.Weights, dict[str, bytes]]:
    data = bytes(range(nbytes))
    sha = hashlib.sha256(data).hexdigest()
    return (schema.Weights(storages=[schema.Storage(sha256=sha, nbytes=nbytes)], state_dict={"t": t}, constants={}),
            {payload_name(sha): data})


def _view(dtype=ST.FLOAT, sizes=(16,), strides=(1,), offset=0, storage=0, grad=False) -> schema.StoredTensor:
    return schema.StoredTensor(dtype=dtype, sizes=list(sizes), strides=list(strides), storage_offset=offset,
                               storage=storage, requires_grad=grad)


@pytest.mark.parametrize("t", [
    _view(), _view(sizes=(1,), offset=15), _view(sizes=(0,), offset=16), _view(sizes=(4, 4), strides=(4, 1)),
    _view(sizes=(1000, 2), strides=(0, 1), offset=14), _view(ST.COMPLEXDOUBLE, sizes=(2, 2), strides=(1, 2)),
    _view(ST.BYTE, sizes=(8, 8), strides=(8, 1)), _view(sizes=(3, 0, 5), strides=(100, 100, 100)),
    _view(grad=True),
])
def test_views_exactly_at_the_bounds_are_accepted_and_load(t: schema.StoredTensor) -> None:
    w, payloads = _weights(t)
    validate_weights(w, lambda n: len(payloads[n]))
    sd, _, _ = deserialize_weights(w, lambda n: memoryview(bytearray(payloads[n])))
    assert list(sd["t"].shape) == t.sizes and list(sd["t"].stride()) == t.strides


@pytest.mark.parametrize("t, error, match", [
    (_view(sizes=(17,)), TensorOutOfBoundsError, r"reaches byte 68 of storage 0, which has only 64 bytes"),
    (_view(sizes=(1,), offset=16), TensorOutOfBoundsError, "reaches byte 68"),
    (_view(sizes=(0,), offset=17), TensorOutOfBoundsError, "reaches byte 68"),
    (_view(sizes=(4, 4), strides=(5, 1)), TensorOutOfBoundsError, "reaches byte 76"),
    (_view(ST.COMPLEXDOUBLE, sizes=(5,)), TensorOutOfBoundsError, "16-byte COMPLEXDOUBLE"),
    (_view(sizes=(-1,)), InvalidTensorViewError, "size -1 is negative"),
    (_view(strides=(-1,)), InvalidTensorViewError, "stride -1 is negative"),
    (_view(offset=-3), InvalidTensorViewError, "storage_offset -3 is negative"),
    (_view(sizes=(2**63,), strides=(0,)), InvalidTensorViewError, "too large"),
    (_view(sizes=(2**40, 2**40), strides=(0, 0)), InvalidTensorViewError, "do not fit in int64"),
    (_view(sizes=(4, 4), strides=(4,)), InvalidTensorViewError, "2 sizes but 1 strides"),
    (_view(storage=1), StorageIndexError, r"storage index 1 is out of range \(there are 1 storages\)"),
    (_view(storage=-1), StorageIndexError, "storage index -1"),
    (_view(ST.UNKNOWN), InvalidDtypeError, "dtype UNKNOWN"),
    (_view(ST.LONG, sizes=(8,), grad=True), InvalidDtypeError, "requires_grad is set on a LONG tensor"),
])
def test_invalid_views_are_rejected_before_torch_sees_them(t, error, match) -> None:
    w, payloads = _weights(t)
    with pytest.raises(error, match=r"weights\.state_dict\['t'\]: .*" + match):
        validate_weights(w)
    with pytest.raises(error, match=match):
        deserialize_weights(w, lambda n: memoryview(bytearray(payloads[n])))


def test_storage_records_are_validated() -> None:
    w, payloads = _weights(_view())
    bad_sha = schema.Weights(storages=[schema.Storage(sha256="../etc", nbytes=64)], state_dict={}, constants={})
    with pytest.raises(MalformedArtifactError, match=r"weights\.storages\[0\]: sha256 '\.\./etc'"):
        validate_weights(bad_sha)
    negative = schema.Weights(storages=[schema.Storage(sha256=w.storages[0].sha256, nbytes=-1)], state_dict={},
                              constants={})
    with pytest.raises(PayloadSizeError, match="nbytes -1 is out of range"):
        validate_weights(negative)
    with pytest.raises(PayloadSizeError, match="has 64 bytes but the storage declares nbytes=65"):
        short = schema.Weights(storages=[schema.Storage(sha256=w.storages[0].sha256, nbytes=65)],
                               state_dict={}, constants={})
        deserialize_weights(short, lambda n: memoryview(payloads[n]))


def test_dtype_maps_cover_the_schema() -> None:
    # Every ScalarType a weight can have is in the torch map and has an item size.
    assert set(DTYPE_TO_SCALAR.values()) == set(ITEMSIZE)
