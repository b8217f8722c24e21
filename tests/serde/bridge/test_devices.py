"""Devices: each storage's device is recorded; load restores it when it exists, else the CPU with a
warning; ``map_location`` moves the program as ``torch.load``'s does (device, string, dict, callable)."""

from __future__ import annotations

import io
import json

import pytest
import torch

import serde
from serde import archive
from serde.archive.artifact import read_artifact
from serde.core import wire
from serde.core.version import SCHEMA_VERSION


class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(4, 3)
        self.register_buffer("b", torch.ones(3))

    def forward(self, x):
        return self.lin(x) + self.b


@pytest.fixture(scope="module")
def saved() -> bytes:
    buf = io.BytesIO()
    serde.save(torch.export.export(M(), (torch.randn(2, 4),)), buf)
    return buf.getvalue()


def _devices(ep) -> tuple[set[str], set[str]]:
    weights = {str(t.device) for t in ep.state_dict.values()}
    graph = {str(n.meta["val"].device) for n in ep.graph.nodes if n.op == "placeholder"}
    return weights, graph


def test_cpu_weights_record_no_device(saved):
    assert all(s.device is None and s.sha256 for s in read_artifact(saved).weights.storages)


@pytest.mark.parametrize("map_location", ["meta", torch.device("meta"), {"cpu": "meta"},
                                          lambda storage, location: "meta"],
                         ids=["str", "device", "dict", "callable"])
def test_map_location_moves_weights_and_graph(saved, map_location):
    ep = serde.load(saved, map_location=map_location)
    assert _devices(ep) == ({"meta"}, {"meta"})
    out = ep.module()(torch.randn(2, 4, device="meta"))
    assert out.device.type == "meta" and out.shape == (2, 3)


def test_map_location_to_the_same_device_changes_nothing(saved):
    x = torch.randn(2, 4)
    a, b = serde.load(saved), serde.load(saved, map_location="cpu")
    assert torch.equal(a.module()(x), b.module()(x)) and _devices(b) == ({"cpu"}, {"cpu"})


def test_dict_entries_for_absent_devices_are_ignored(saved):
    ep = serde.load(saved, map_location={"cuda:3": "meta"})
    assert _devices(ep) == ({"cpu"}, {"cpu"})


def test_callable_returning_a_storage_like_torch_load(saved):
    seen = []

    def to_meta(storage, location):
        seen.append(location)
        return torch.UntypedStorage(0, device="meta")

    ep = serde.load(saved, map_location=to_meta)
    assert seen == ["cpu"] and _devices(ep) == ({"meta"}, {"meta"})


def test_bad_map_location_is_a_clear_error(saved):
    with pytest.raises(serde.SerializeError, match="map_location must be a device"):
        serde.load(saved, map_location=3)


def _saved_on(saved: bytes, device: dict) -> bytes:
    """The artifact as if its weights had been saved from ``device`` (no such device here)."""
    contents = archive.read_archive(saved)
    members = {n: bytes(contents.member(n)) for n in contents.names if n != archive.MANIFEST}
    w = json.loads(members["weights.json"])
    for s in w["storages"]:
        s["device"] = device
    members["weights.json"] = wire.encode(wire.decode_json(json.dumps(w).encode()))
    out = io.BytesIO()
    archive.write_archive(out, members, schema_version=SCHEMA_VERSION, torch_version=torch.__version__)
    return out.getvalue()


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_a_device_this_machine_lacks_loads_on_the_cpu_with_a_warning(saved):
    data = _saved_on(saved, {"type": "cuda", "index": 0})
    with pytest.warns(UserWarning, match=r"saved on cuda:0, which this process does not have"):
        ep = serde.load(data)
    assert _devices(ep) == ({"cpu"}, {"cpu"})
    x = torch.randn(2, 4)
    assert torch.equal(ep.module()(x), serde.load(saved).module()(x))
    from canonical.render import render

    art = read_artifact(data)
    assert "device=cuda:0 sha256:" in render(art.program, art.weights)


def test_an_existing_saved_device_is_restored(saved):
    data = _saved_on(saved, {"type": "meta"})
    # a meta storage *with* bytes: the bytes are verified, then the storage goes to meta
    ep = serde.load(data)
    assert {str(t.device) for t in ep.state_dict.values()} == {"meta"}
