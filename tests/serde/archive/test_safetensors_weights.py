"""Weights as safetensors files next to the artifact, structure-only loads, attach_weights, and
`pt2serde weights`: round trips on the zoo and breadth corpus, the files read by the safetensors
library alone, and every kind of damaged, swapped or hostile file refused by name."""

from __future__ import annotations

import functools
import json
import os
import struct
import subprocess
import sys

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

import serde
from serde.archive import ChecksumMismatchError
from serde.archive import safetensors as st
from serde.cli import main as cli
from serde.testing import assert_programs_equal, zoo
from tests import zoo_breadth

FAST = ["mlp", "tied_weights", "all_dtypes", "convnet_bn", "transformer_block"]


@functools.cache
def exported(name: str):
    return zoo.export_case(zoo.get(name))


@functools.cache
def exported_breadth(name: str):
    return zoo_breadth.export_case(zoo_breadth.get(name))


def _tensors(ep) -> dict[str, torch.Tensor]:
    return {**ep.state_dict, **{k: v for k, v in ep.constants.items() if isinstance(v, torch.Tensor)}}


def _bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal dtypes, shapes and bytes (nan == nan, -0.0 != 0.0)."""
    a, b = a.detach().contiguous().reshape(-1), b.detach().contiguous().reshape(-1)
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def _same_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr() and a.shape == b.shape
            and a.stride() == b.stride() and a.storage_offset() == b.storage_offset())


def _roundtrip(ep, tmp_path, name: str, others=()):
    """embedded -> external -> embedded: the programs and outputs are the original's, and the
    embedded re-save is byte for byte the direct embedded save."""
    direct = tmp_path / f"{name}-direct.pt2s"
    serde.save(ep, direct)
    ext = tmp_path / f"{name}.pt2s"
    serde.save(serde.load(direct), ext, weights=f"{name}.safetensors")
    loaded = serde.load(ext)
    assert_programs_equal(ep, loaded)
    for inputs in others:
        assert_programs_equal(ep, loaded, inputs=inputs)
    back = tmp_path / f"{name}-back.pt2s"
    serde.save(loaded, back)
    assert back.read_bytes() == direct.read_bytes()
    return loaded


@pytest.mark.parametrize("name", FAST)
def test_roundtrip_through_safetensors(name, tmp_path):
    ep = exported(name)
    _roundtrip(ep, tmp_path, name, zoo.get(name).other_inputs())
    # the written file, read by the safetensors library alone, holds each storage under an FQN
    files = load_file(tmp_path / f"{name}.safetensors")
    tensors = _tensors(ep)
    for key, t in files.items():
        assert _bits_equal(t, tensors[key]), key
    # every state-dict and constant tensor is in the file, or views the memory of one that is
    # (a tied weight: stored once), or stays in the artifact (no FQN covers its storage whole)
    in_file = {k: tensors[k] for k in files}
    for key, t in tensors.items():
        if key in files:
            continue
        assert any(_same_memory(t, u) for u in in_file.values()) or not _covers_whole(t), key


def _covers_whole(t: torch.Tensor) -> bool:
    return (t.storage_offset() == 0 and t.is_contiguous()
            and t.numel() * t.element_size() == t.untyped_storage().nbytes())


def test_tied_weights_stored_once_and_tied_again(tmp_path):
    ep = exported("tied_weights")
    tied = [(a, b) for a in ep.state_dict for b in ep.state_dict
            if a < b and _same_memory(ep.state_dict[a], ep.state_dict[b])]
    assert tied, "the tied_weights case ties no weights"
    serde.save(ep, tmp_path / "t.pt2s", weights="t.safetensors")
    with safe_open(tmp_path / "t.safetensors", "pt") as f:
        keys = set(f.keys())
        assert f.metadata() == {"format": "pt"}
    loaded = serde.load(tmp_path / "t.pt2s")
    for a, b in tied:
        assert (a in keys) != (b in keys), (a, b)   # once, under one of its names
        assert loaded.state_dict[a] is loaded.state_dict[b]


def test_artifact_records_files_and_format(tmp_path):
    ep = exported("mlp")
    serde.save(ep, tmp_path / "m.pt2s", weights="m.safetensors")
    a = serde.archive.artifact.read_artifact(tmp_path / "m.pt2s")
    assert a.manifest.format_version == 4
    (f,) = a.weights.files
    data = (tmp_path / "m.safetensors").read_bytes()
    import hashlib

    assert (f.name, f.size, f.sha256) == ("m.safetensors", len(data), hashlib.sha256(data).hexdigest())
    # inside: only the example inputs' payloads
    inside = {n for n in a.contents.names if n.startswith("data/")}
    examples = {a.weights.storages[leaf.as_tensor.storage].sha256 for leaf in a.weights.example_inputs.leaves
                if leaf.as_tensor is not None}
    assert inside == {f"data/{sha}" for sha in examples}
    assert all(s.external is not None for s in a.weights.storages if s.sha256 not in examples)
    # an artifact without external weights keeps format 1
    serde.save(ep, tmp_path / "e.pt2s")
    assert serde.archive.artifact.read_artifact(tmp_path / "e.pt2s").manifest.format_version == 1


def test_shards_in_hugging_face_layout(tmp_path):
    ep = exported("transformer_block")
    serde.save(ep, tmp_path / "model.pt2s", weights="model.safetensors", max_shard_bytes=4096)
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    n = len(shards)
    assert n > 1 and shards == [f"model-{i:05d}-of-{n:05d}.safetensors" for i in range(1, n + 1)]
    together = {}
    for shard in shards:
        part = load_file(tmp_path / shard)
        assert {k for k, v in index["weight_map"].items() if v == shard} == set(part)
        size = sum(t.numel() * t.element_size() for t in part.values())
        assert size <= 4096 or len(part) == 1
        together.update(part)
    assert index["metadata"]["total_size"] == sum(t.numel() * t.element_size() for t in together.values())
    loaded = serde.load(tmp_path / "model.pt2s")
    assert_programs_equal(ep, loaded)
    # the shards bind to the embedded artifact through their index as well
    serde.save(ep, tmp_path / "e.pt2s")
    assert_programs_equal(ep, serde.load(tmp_path / "e.pt2s", weights=tmp_path / "model.safetensors.index.json"))


def test_mmap_and_verify_false_load_external_weights(tmp_path):
    ep = exported("mlp")
    serde.save(ep, tmp_path / "m.pt2s", weights="m.safetensors")
    assert_programs_equal(ep, serde.load(tmp_path / "m.pt2s", mmap=True))
    assert_programs_equal(ep, serde.load(tmp_path / "m.pt2s", verify=False))


# ---------------------------------------------------------------- damaged and swapped files


@pytest.fixture
def sharded(tmp_path):
    ep = exported("mlp")
    serde.save(ep, tmp_path / "m.pt2s", weights="m.safetensors", max_shard_bytes=2200)
    shards = sorted(p.name for p in tmp_path.glob("m-*.safetensors"))
    assert len(shards) >= 2
    return tmp_path, shards


def _keys(path) -> list[str]:
    with safe_open(path, "pt") as f:
        return sorted(f.keys())


def test_missing_file_named_with_its_tensors(sharded):
    d, shards = sharded
    keys = _keys(d / shards[0])
    (d / shards[0]).unlink()
    with pytest.raises(st.MissingWeightsFileError, match=rf"{shards[0]}.*{keys[0]}"):
        serde.load(d / "m.pt2s")


@pytest.mark.parametrize("change", ["truncate", "grow"])
def test_truncated_or_grown_file(sharded, change):
    d, shards = sharded
    p = d / shards[1]
    data = p.read_bytes()
    p.write_bytes(data[:-5] if change == "truncate" else data + b"\0")
    with pytest.raises(st.WeightsFileSizeError, match=rf"{shards[1]}.*{_keys_text(data)}"):
        serde.load(d / "m.pt2s")


def _keys_text(data: bytes) -> str:
    n = struct.unpack("<Q", data[:8])[0]
    return sorted(k for k in json.loads(data[8:8 + n]) if k != "__metadata__")[0]


def test_swapped_shards(sharded, tmp_path):
    d, shards = sharded
    a, b = d / shards[0], d / shards[1]
    da, db = a.read_bytes(), b.read_bytes()
    a.write_bytes(db)
    b.write_bytes(da)
    with pytest.raises((st.WeightsFileSizeError, st.WeightsFileDigestError), match=shards[0]):
        serde.load(d / "m.pt2s")


def test_edited_tensor_byte_names_the_tensor(tmp_path):
    ep = exported("mlp")
    serde.save(ep, tmp_path / "m.pt2s", weights="m.safetensors")
    p = tmp_path / "m.safetensors"
    data = bytearray(p.read_bytes())
    n = struct.unpack("<Q", data[:8])[0]
    head = json.loads(data[8:8 + n])
    begin, end = head["fc2.weight"]["data_offsets"]
    data[8 + n + (begin + end) // 2] ^= 0x40
    p.write_bytes(bytes(data))
    with pytest.raises(st.WeightsFileDigestError, match=r"m\.safetensors.*'fc2\.weight'.*changed"):
        serde.load(tmp_path / "m.pt2s")
    # the structure still loads (no payload is read); attaching from the damaged files fails
    shell = serde.load(tmp_path / "m.pt2s", weights=None)
    with pytest.raises(st.WeightsFileDigestError, match="fc2.weight"):
        serde.attach_weights(shell, tmp_path / "m.pt2s")


def test_edited_header_is_named(tmp_path):
    ep = exported("mlp")
    serde.save(ep, tmp_path / "m.pt2s", weights="m.safetensors")
    p = tmp_path / "m.safetensors"
    data = p.read_bytes()
    # the same size: two tensors' names swapped in the header
    p.write_bytes(data.replace(b'"fc1.bias"', b'"fc3.bias"', 1).replace(b'"fc3.bias":{"dtype"', b'"fc1.bias":{"dtype"'))
    assert p.read_bytes() != data
    with pytest.raises(st.WeightsFileDigestError, match="header"):
        serde.load(tmp_path / "m.pt2s")


def test_another_models_file_of_the_same_size(tmp_path):
    ep = exported("mlp")
    serde.save(ep, tmp_path / "m.pt2s", weights="m.safetensors")
    other = {k: torch.randn_like(v) for k, v in ep.state_dict.items()}
    save_file(other, tmp_path / "other.safetensors", metadata={"format": "pt"})
    data = (tmp_path / "m.safetensors").read_bytes()
    assert len((tmp_path / "other.safetensors").read_bytes()) == len(data)
    os.replace(tmp_path / "other.safetensors", tmp_path / "m.safetensors")
    with pytest.raises(st.WeightsFileDigestError, match="m.safetensors"):
        serde.load(tmp_path / "m.pt2s")


def test_artifact_from_bytes_needs_the_files_given(tmp_path):
    ep = exported("mlp")
    serde.save(ep, tmp_path / "m.pt2s", weights="m.safetensors")
    data = (tmp_path / "m.pt2s").read_bytes()
    with pytest.raises(st.MissingWeightsFileError, match="m.safetensors"):
        serde.load(data)
    assert_programs_equal(ep, serde.load(data, weights=[tmp_path / "m.safetensors"]))


def _raw_file(path, header: dict, data: bytes, pad: int = 0) -> None:
    text = json.dumps(header).encode()
    text += b" " * pad
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)


HOSTILE = {
    "header_too_big": lambda p: p.write_bytes(struct.pack("<Q", 1 << 40) + b"{}"),
    "header_past_end": lambda p: p.write_bytes(struct.pack("<Q", 100) + b"{}"),
    "not_json": lambda p: p.write_bytes(struct.pack("<Q", 4) + b"{{{{"),
    "short": lambda p: p.write_bytes(b"\x01\x02"),
    "overlap": lambda p: _raw_file(p, {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                       "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, bytes(12)),
    "gap": lambda p: _raw_file(p, {"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, bytes(8)),
    "wrong_length": lambda p: _raw_file(p, {"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, bytes(8)),
    "trailing_bytes": lambda p: _raw_file(p, {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, bytes(9)),
    "offsets_past_end": lambda p: _raw_file(p, {"a": {"dtype": "U8", "shape": [1 << 40],
                                                      "data_offsets": [0, 1 << 40]}}, bytes(8)),
    "unknown_dtype": lambda p: _raw_file(p, {"a": {"dtype": "F128", "shape": [1], "data_offsets": [0, 16]}}, bytes(16)),
    "negative_shape": lambda p: _raw_file(p, {"a": {"dtype": "U8", "shape": [-1], "data_offsets": [0, 0]}}, b""),
    "extra_field": lambda p: _raw_file(p, {"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1], "x": 1}}, b"\0"),
    "bad_metadata": lambda p: _raw_file(p, {"__metadata__": {"k": 1}}, b""),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_files_refused_when_bound(case, tmp_path):
    ep = exported("mlp")
    serde.save(ep, tmp_path / "m.pt2s")
    p = tmp_path / "bad.safetensors"
    HOSTILE[case](p)
    with pytest.raises(st.InvalidWeightsFileError, match="bad.safetensors"):
        serde.load(tmp_path / "m.pt2s", weights=[p])


def test_hostile_header_refused_even_with_the_recorded_digest(tmp_path):
    """A recorded file is hashed first; parse_header still bounds a file whose digest was forged
    along with it (here: checked directly)."""
    for case in sorted(HOSTILE):
        p = tmp_path / f"{case}.safetensors"
        HOSTILE[case](p)
        with pytest.raises(st.InvalidWeightsFileError):
            st.parse_header(memoryview(p.read_bytes()), case)


# ---------------------------------------------------------------- binding other checkpoints


def test_bind_a_fine_tuned_checkpoint(tmp_path):
    case = zoo.get("mlp")
    torch.manual_seed(0)
    model, args, kwargs, dyn = case.build()
    ep = torch.export.export(model.eval(), args, kwargs, dynamic_shapes=dyn)
    serde.save(ep, tmp_path / "m.pt2s", weights="m.safetensors")
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p))
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, tmp_path / "tuned.safetensors")
    tuned = serde.load(tmp_path / "m.pt2s", weights=tmp_path / "tuned.safetensors")
    expect = model(*args, **kwargs)
    assert torch.equal(tuned.module()(*args, **kwargs), expect)
    assert not torch.equal(serde.load(tmp_path / "m.pt2s").module()(*args, **kwargs), expect)


def test_bind_refuses_other_shapes_keys_and_dtypes(tmp_path):
    ep = exported("mlp")
    serde.save(ep, tmp_path / "m.pt2s")
    sd = {k: v.detach().clone() for k, v in ep.state_dict.items()}
    cases = {
        "missing": ({k: v for k, v in sd.items() if k != "fc1.bias"}, "fc1.bias"),
        "extra": ({**sd, "head.weight": torch.zeros(2)}, "head.weight"),
        "shape": ({**sd, "fc1.bias": torch.zeros(3)}, "fc1.bias.*F32\\[3\\]"),
        "dtype": ({**sd, "fc1.bias": sd["fc1.bias"].double()}, "fc1.bias.*F64"),
    }
    for what, (tensors, match) in cases.items():
        p = tmp_path / f"{what}.safetensors"
        save_file(tensors, p)
        with pytest.raises(st.WeightsMismatchError, match=match):
            serde.load(tmp_path / "m.pt2s", weights=[p])
    half = sorted(sd)
    save_file({k: sd[k] for k in half[:2]}, tmp_path / "a.safetensors")
    save_file({k: sd[k] for k in half[1:]}, tmp_path / "b.safetensors")
    with pytest.raises(st.WeightsMismatchError, match="in both"):
        serde.load(tmp_path / "m.pt2s", weights=[tmp_path / "a.safetensors", tmp_path / "b.safetensors"])


# ---------------------------------------------------------------- structure only


def test_structure_only_reads_no_payload(tmp_path):
    ep = exported("convnet_bn")
    path = tmp_path / "c.pt2s"
    serde.save(ep, path)
    full = serde.load(path)
    # damage a payload byte: a structure-only load does not read it, a full one refuses it
    a = serde.archive.artifact.read_artifact(path)
    biggest = max((n for n in a.contents.names if n.startswith("data/")), key=a.contents.size)
    data = bytearray(path.read_bytes())
    at = bytes(data).index(bytes(a.contents.member(biggest)))
    data[at + 3] ^= 0xFF
    damaged = tmp_path / "damaged.pt2s"
    damaged.write_bytes(bytes(data))
    shell = serde.load(damaged, weights=None)
    for k, t in ep.state_dict.items():
        got = shell.state_dict[k]
        assert torch._subclasses.fake_tensor.is_fake(got)
        assert (got.shape, got.dtype, got.stride()) == (t.shape, t.dtype, t.stride())
    assert [n.format_node() for n in shell.graph.nodes] == [n.format_node() for n in full.graph.nodes]
    with pytest.raises(serde.api.StructureOnlyError, match="attach"):
        serde.save(shell, tmp_path / "x.pt2s")
    with pytest.raises(ChecksumMismatchError):
        serde.attach_weights(shell, damaged)
    assert serde.attach_weights(shell, path) is shell
    assert_programs_equal(full, shell)
    with pytest.raises(serde.api.StructureOnlyError):
        serde.attach_weights(shell, path)


def test_structure_only_then_attach_from_files(tmp_path):
    ep = exported("tied_weights")
    serde.save(ep, tmp_path / "t.pt2s", weights="t.safetensors")
    shell = serde.load(tmp_path / "t.pt2s", weights=None)
    serde.attach_weights(shell, tmp_path / "t.safetensors")
    assert_programs_equal(ep, shell)
    other = tmp_path / "other.pt2s"
    serde.save(exported("mlp"), other)
    shell = serde.load(tmp_path / "t.pt2s", weights=None)
    with pytest.raises(st.WeightsMismatchError, match="another program"):
        serde.attach_weights(shell, other)


def test_structure_only_runs_under_its_fake_mode(tmp_path):
    ep = exported("mlp")
    serde.save(ep, tmp_path / "m.pt2s")
    shell = serde.load(tmp_path / "m.pt2s", weights=None)
    mode = next(iter(shell.state_dict.values())).fake_mode
    with mode:
        x = torch.empty(5, 16)
        out = shell.module()(x)
    assert out.shape == (5, 4) and torch._subclasses.fake_tensor.is_fake(out)


def test_structure_only_on_breadth_custom_objects(tmp_path):
    """Custom objects keep their (small) payloads: their codecs need bytes."""
    if not zoo_breadth.load_torchbind_test_classes():
        pytest.skip("this torch build has no torchbind test classes")
    ep = exported_breadth("torchbind")
    serde.save(ep, tmp_path / "t.pt2s", weights="t.safetensors")
    shell = serde.load(tmp_path / "t.pt2s", weights=None)
    serde.attach_weights(shell, tmp_path / "t.pt2s")
    assert_programs_equal(ep, shell)


# ---------------------------------------------------------------- the CLI


def test_cli_writes_the_weights_of_an_artifact(tmp_path):
    ep = exported("transformer_block")
    serde.save(ep, tmp_path / "e.pt2s")
    assert cli(["weights", str(tmp_path / "e.pt2s"), "-o", str(tmp_path / "hf"), "--max-shard-bytes", "4096"]) == 0
    index = json.loads((tmp_path / "hf" / "model.safetensors.index.json").read_text())
    got = {}
    for shard in set(index["weight_map"].values()):
        got.update(load_file(tmp_path / "hf" / shard))
    tensors = _tensors(ep)
    assert got and all(_bits_equal(v, tensors[k]) for k, v in got.items())
    # the same files as a save with weights= writes
    serde.save(ep, tmp_path / "model.pt2s", weights="model.safetensors", max_shard_bytes=4096)
    for shard in set(index["weight_map"].values()):
        assert (tmp_path / "hf" / shard).read_bytes() == (tmp_path / shard).read_bytes()
    # from an artifact with external weights, in a subprocess (real CLI entry point)
    r = subprocess.run([sys.executable, "-m", "serde.cli", "weights", str(tmp_path / "model.pt2s"), "-o",
                        str(tmp_path / "one")], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": "src:."})
    assert r.returncode == 0, r.stderr
    assert set(load_file(tmp_path / "one" / "model.safetensors")) == set(got)


def test_cli_refuses_damaged_external_weights(tmp_path, capsys):
    ep = exported("mlp")
    serde.save(ep, tmp_path / "m.pt2s", weights="m.safetensors")
    (tmp_path / "m.safetensors").unlink()
    assert cli(["weights", str(tmp_path / "m.pt2s"), "-o", str(tmp_path / "out")]) == 2
    assert "m.safetensors" in capsys.readouterr().err


def test_save_argument_errors(tmp_path):
    ep = exported("mlp")
    with pytest.raises(serde.UnsupportedConstructError, match="next to the artifact"):
        serde.save(ep, tmp_path / "m.pt2s", weights=str(tmp_path / "sub" / "m.safetensors"))
    with pytest.raises(serde.UnsupportedConstructError, match="safetensors"):
        serde.save(ep, tmp_path / "m.pt2s", weights="m.bin")
    with pytest.raises(serde.UnsupportedConstructError, match="weights= too"):
        serde.save(ep, tmp_path / "m.pt2s", max_shard_bytes=10)
    with pytest.raises(serde.UnsupportedConstructError, match="path"):
        import io

        serde.save(ep, io.BytesIO(), weights="m.safetensors")
    assert not list(tmp_path.iterdir())


# ---------------------------------------------------------------- the whole corpus (slow)


def _corpus():
    for c in zoo.CASES:
        yield pytest.param("zoo", c.name, id=f"zoo-{c.name}")
    for c in zoo_breadth.CASES:
        yield pytest.param("breadth", c.name, id=f"breadth-{c.name}")


@pytest.mark.slow
@pytest.mark.parametrize("corpus,name", list(_corpus()))
def test_corpus_roundtrip_through_safetensors(corpus, name, tmp_path):
    module = zoo if corpus == "zoo" else zoo_breadth
    if name.startswith("torchbind") and not zoo_breadth.load_torchbind_test_classes():
        pytest.skip("this torch build has no torchbind test classes")
    ep = exported(name) if corpus == "zoo" else exported_breadth(name)
    _roundtrip(ep, tmp_path, name, module.get(name).other_inputs())
    shell = serde.load(tmp_path / f"{name}.pt2s", weights=None)
    serde.attach_weights(shell, tmp_path / f"{name}.pt2s")
    assert_programs_equal(ep, shell)


def test_check_and_diff_read_the_files(tmp_path, capsys):
    ep = exported("mlp")
    serde.save(ep, tmp_path / "a.pt2s", weights="a.safetensors")
    assert cli(["check", "--structure-only", str(tmp_path / "a.pt2s")]) == 0
    tuned = serde.load(tmp_path / "a.pt2s")
    with torch.no_grad():
        tuned.state_dict["fc1.bias"].add_(1.0)
    serde.save(tuned, tmp_path / "b.pt2s", weights="b.safetensors")
    capsys.readouterr()
    assert cli(["diff", str(tmp_path / "a.pt2s"), str(tmp_path / "b.pt2s")]) == 1
    assert "max abs diff 1.0" in capsys.readouterr().out
    p = tmp_path / "a.safetensors"
    data = bytearray(p.read_bytes())
    data[-1] ^= 1
    p.write_bytes(bytes(data))
    assert cli(["check", "--structure-only", str(tmp_path / "a.pt2s")]) == 2
    assert "a.safetensors" in capsys.readouterr().err


_CHILD = r"""
import json, sys, time
import torch, serde, serde.api

def rss():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmRSS:"))

out = {}
for name in sys.argv[1:]:
    serde.load(name, weights=None)  # first load of the process: one-time imports and warm-up
    before = rss()
    t = time.perf_counter()
    ep = serde.load(name, weights=None)
    out[name] = (time.perf_counter() - t, rss() - before)
    del ep
print(json.dumps(out))
"""


@pytest.mark.slow
def test_structure_only_of_1gb_costs_what_a_tiny_one_does(tmp_path):
    def model(width):
        torch.manual_seed(0)
        m = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(16)])
        return torch.export.export(m, (torch.randn(2, width),))

    big, tiny = tmp_path / "big.pt2s", tmp_path / "tiny.pt2s"
    serde.save(model(4096), big, weights="big.safetensors")  # 16 x 64 MiB
    serde.save(model(8), tiny)
    assert (tmp_path / "big.safetensors").stat().st_size > 1 << 30
    r = subprocess.run([sys.executable, "-c", _CHILD, str(big), str(tiny), str(big), str(tiny)],
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": "src:."})
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    (t_big, rss_big), (t_tiny, _) = got[str(big)], got[str(tiny)]
    assert rss_big < 100 << 20
    assert t_big < max(0.2, 2 * t_tiny), (t_big, t_tiny)


def test_a_reader_of_format_3_refuses_external_weights_by_version(tmp_path, monkeypatch):
    ep = exported("mlp")
    serde.save(ep, tmp_path / "m.pt2s", weights="m.safetensors")
    serde.save(ep, tmp_path / "e.pt2s")
    monkeypatch.setattr(serde.archive.reader, "FORMAT_VERSION", 3)  # the reader before external weights
    serde.load(tmp_path / "e.pt2s")
    with pytest.raises(serde.archive.FormatVersionError, match="format version 4"):
        serde.load(tmp_path / "m.pt2s")


def test_structure_only_of_several_programs(tmp_path):
    a, b = exported("mlp"), exported("tied_weights")
    serde.save({"a": a, "b": b}, tmp_path / "m.pt2s")
    shells = serde.load(tmp_path / "m.pt2s", weights=None)
    assert sorted(shells) == ["a", "b"]
    assert all(torch._subclasses.fake_tensor.is_fake(t) for s in shells.values() for t in s.state_dict.values())
    serde.attach_weights(shells["b"], tmp_path / "m.pt2s")
    assert_programs_equal(b, shells["b"])
    with pytest.raises(serde.UnsupportedConstructError, match="several"):
        serde.save({"a": a, "b": b}, tmp_path / "x.pt2s", weights="x.safetensors")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["hf/gpt2", "hf/llama_bf16"])
def test_transformers_model_reads_our_files(name, tmp_path):
    """A transformers model built from the same config with other random weights takes our file
    through its own load_state_dict and computes what the exported program computes."""
    from tests import zoo_models

    case = zoo_models.get(name)
    torch.manual_seed(0)
    model, args, kwargs, dyn = case.build()
    ep = torch.export.export(model.eval(), args, kwargs, dynamic_shapes=dyn, strict=False)
    serde.save(ep, tmp_path / "model.pt2s", weights="model.safetensors", max_shard_bytes=16384)
    loaded = serde.load(tmp_path / "model.pt2s")
    assert_programs_equal(ep, loaded)
    for inputs in case.other_inputs():
        assert_programs_equal(ep, loaded, inputs=inputs)
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    tensors = {}
    for shard in sorted(set(index["weight_map"].values())):
        tensors.update(load_file(tmp_path / shard))
    torch.manual_seed(1)
    other = type(model)(model.config).to(next(model.parameters()).dtype).eval()
    missing, unexpected = other.load_state_dict(tensors, strict=False)
    # the file also holds the program's constants (non-persistent buffers, which a state dict leaves
    # out), and each tied weight once: a name left out is tied to one in the file
    assert set(unexpected) <= set(ep.constants), unexpected
    for k in missing:
        assert any(n in loaded.state_dict and loaded.state_dict[n] is loaded.state_dict[k] for n in tensors), k
    other.tie_weights()
    with torch.no_grad():
        assert torch.equal(other(*args, **kwargs).logits, loaded.module()(*args, **kwargs).logits)


def test_resaving_removes_stale_shards_and_index(tmp_path):
    ep = exported("mlp")
    serde.save(ep, tmp_path / "m.pt2s", weights="m.safetensors", max_shard_bytes=1200)
    many = sorted(p.name for p in tmp_path.iterdir())
    assert "m.safetensors.index.json" in many and len(many) > 3
    serde.save(ep, tmp_path / "m.pt2s", weights="m.safetensors", max_shard_bytes=2200)
    fewer = sorted(p.name for p in tmp_path.iterdir())
    index = json.loads((tmp_path / "m.safetensors.index.json").read_text())
    assert set(fewer) == {"m.pt2s", "m.safetensors.index.json", *index["weight_map"].values()}
    serde.save(ep, tmp_path / "m.pt2s", weights="m.safetensors")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.pt2s", "m.safetensors"]
    assert_programs_equal(ep, serde.load(tmp_path / "m.pt2s"))
    with pytest.raises(serde.UnsupportedConstructError, match="overwrite"):
        serde.save(ep, tmp_path / "w.safetensors", weights="w.safetensors")
