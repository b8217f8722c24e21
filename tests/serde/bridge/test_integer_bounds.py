"""Every integer of an artifact is bounded to int64 where it is decoded, for every path (load,
mmap load, emit), and an in-range offset past its storage is refused by emit as by load.

Before, ``storage_offset = 10**30`` in weights.json passed the load checks far enough that
``emit`` failed with msgpack's ``OverflowError``.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path

import pytest

import native
import serde
from native.errors import NativeFormatError
from serde.archive import read_archive, write_archive
from serde.core.errors import TensorOutOfBoundsError
from serde.errors import MalformedArtifactError

ROOT = Path(__file__).resolve().parents[3]
MLP = ROOT / "fixtures" / "v2.5" / "mlp" / "model.pt2s"


def _edited(edit: Callable[[dict, dict], None]) -> bytes:
    c = read_archive(MLP)
    members = {n: bytes(c.member(n)) for n in c.names if n != "manifest.json"}
    program, weights = json.loads(members["program.json"]), json.loads(members["weights.json"])
    edit(program, weights)
    members["program.json"] = json.dumps(program).encode()
    members["weights.json"] = json.dumps(weights).encode()
    out = io.BytesIO()
    write_archive(out, members, schema_version=c.schema_version, torch_version="test")
    return out.getvalue()


def _first_state(weights: dict) -> dict:
    return weights["state_dict"][sorted(weights["state_dict"])[0]]


def _node_size(program: dict) -> dict:
    return next(iter(program["graph_module"]["graph"]["tensor_values"].values()))["sizes"][1]


# (member, field path as msgspec names it, edit(program, weights, value))
FIELDS = {
    "storage_offset": ("weights.json", r"\$\.state_dict\[\.\.\.\]\.storage_offset",
                       lambda p, w, v: _first_state(w).__setitem__("storage_offset", v)),
    "stored_size": ("weights.json", r"\$\.state_dict\[\.\.\.\]\.sizes\[0\]",
                    lambda p, w, v: _first_state(w)["sizes"].__setitem__(0, v)),
    "storage_nbytes": ("weights.json", r"\$\.storages\[0\]\.nbytes",
                       lambda p, w, v: w["storages"][0].__setitem__("nbytes", v)),
    "tensor_meta_size": ("program.json", r"\$\.graph_module\.graph\.tensor_values\[\.\.\.\]\.sizes\[1\]\.as_int",
                         lambda p, w, v: _node_size(p).__setitem__("as_int", v)),
    "range_max": ("program.json", r"\$\.range_constraints\[0\]\.max_val",
                  lambda p, w, v: p["range_constraints"][0].__setitem__("max_val", v)),
}
OUT_OF_RANGE = (2**63, 2**64, 10**30, -(2**63) - 1, -(10**30))


@pytest.mark.parametrize("value", OUT_OF_RANGE)
@pytest.mark.parametrize("field", sorted(FIELDS))
def test_integers_past_int64_are_refused_naming_the_field(field: str, value: int, tmp_path: Path) -> None:
    member, path, edit = FIELDS[field]
    data = _edited(lambda p, w: edit(p, w, value))
    file = tmp_path / "model.pt2s"
    file.write_bytes(data)
    match = rf"{member}: does not match schema \w+: Expected `int` [<>]= -?\d+ - at `{path}`"
    for load in (lambda: serde.load(data), lambda: serde.load(file, mmap=True), lambda: native.emit_artifact(file)):
        with pytest.raises(MalformedArtifactError, match=match):
            load()


@pytest.mark.parametrize("value", [2**63 - 1, -(2**63)])
def test_integers_at_the_int64_bounds_pass_the_decoder(value: int) -> None:
    # At the bound the decoder lets it through; the size checks behind it refuse the view.
    data = _edited(lambda p, w: _first_state(w).__setitem__("storage_offset", value))
    for load in (lambda: serde.load(data), lambda: native.emit_artifact(data)):
        with pytest.raises(MalformedArtifactError, match=r"weights\.state_dict\['fc1\.bias'\]: the view|offset"):
            load()


def test_emit_refuses_a_view_past_its_storage_as_load_does() -> None:
    data = _edited(lambda p, w: _first_state(w).__setitem__("storage_offset", 10**12))
    with pytest.raises(TensorOutOfBoundsError, match=r"weights\.state_dict\['fc1\.bias'\]: the view .* reaches byte"):
        serde.load(data)
    with pytest.raises(TensorOutOfBoundsError, match=r"weights\.state_dict\['fc1\.bias'\]: the view .* reaches byte"):
        native.emit_artifact(data)


def test_native_header_integers_past_int64_are_refused() -> None:
    import msgspec

    from native.format import container
    from native.format.program import FORMAT_VERSION, MAGIC

    good = native.emit_artifact(MLP).encode()
    _, header, segment = container.unpack(good, MAGIC, range(FORMAT_VERSION, FORMAT_VERSION + 1), "seed")
    doc = msgspec.msgpack.decode(header)
    assert native.load(good) is not None
    doc["constants"][0][2] = 2**64 - 1  # a blob's nbytes: msgpack's unsigned 64 bits, past int64
    bad = container.pack(MAGIC, FORMAT_VERSION, msgspec.msgpack.encode(doc), bytes(segment))
    with pytest.raises(NativeFormatError, match=r"Expected `int` <= 9223372036854775807 - at `\$\.constants\[0\]\[2\]`"):
        native.load(bad)
    from native.run import cpp_engine

    if cpp_engine.available():  # the C++ loader's decoder refuses it too (and did before)
        with pytest.raises(NativeFormatError, match=r"an integer larger than int64 - at `\$\.constants\[0\]\[2\]`"):
            native.load(bad, engine="cpp")


def _run_both(loaded_native, data: bytes):
    import torch

    ep = serde.load(data)
    args, kwargs = ep.example_inputs
    expected = ep.module()(*args, **kwargs)
    torch.testing.assert_close(loaded_native.run(*args, **kwargs), expected, rtol=0, atol=0)


@pytest.mark.parametrize("max_val", [2**40, 2**62, 2**63 - 1])
def test_emit_plans_around_tensors_too_large_for_an_arena(max_val: int) -> None:
    # A dim's range up to near int64 is a valid program: the memory planner's byte bounds over it
    # overflowed msgpack's 64 bits (OverflowError at encode) or the loaders' arena cap; such a
    # tensor is now allocated at run time, as an unbounded one is (found by the fuzz campaign).
    from native.run import cpp_engine

    data = _edited(lambda p, w: p["range_constraints"][0].__setitem__("max_val", max_val))
    emitted = native.emit_artifact(data)
    assert emitted.program.memory_plan.arena_size <= (1 << 36)
    encoded = emitted.encode()
    _run_both(native.load(encoded), data)
    if cpp_engine.available():
        _run_both(native.load(encoded, engine="cpp"), data)


def test_emit_refuses_what_the_load_refuses_before_planning() -> None:
    # An unknown dtype reached the planner's item-size table (KeyError), and a range whose minimum
    # exceeds its maximum was emitted into a program that refuses every input.
    def unknown_dtype(p: dict, w: dict) -> None:
        next(iter(p["graph_module"]["graph"]["tensor_values"].values()))["dtype"] = 0

    def empty_range(p: dict, w: dict) -> None:
        p["range_constraints"][0].update(min_val=100, max_val=64)

    for edit, match in ((unknown_dtype, r"unsupported scalar type <ScalarType\.UNKNOWN: 0>"),
                        (empty_range, r"\[100, 64\] is not a valid range: its minimum exceeds its maximum")):
        data = _edited(edit)
        for load in (serde.load, native.emit_artifact):
            with pytest.raises(MalformedArtifactError, match=match):
                load(data)


def test_emit_refuses_an_unknown_layout_argument_as_load_does() -> None:
    # Layout.Unknown (0) decodes (it is a member of the schema's enum) but is no torch layout;
    # emit wrote it into a program the Python runtime failed on with a KeyError.
    c = read_archive(ROOT / "fixtures" / "v2.5" / "all_dtypes" / "model.pt2s")
    members = {n: bytes(c.member(n)) for n in c.names if n != "manifest.json"}
    program = json.loads(members["program.json"])
    arg = next(na["arg"] for n in program["graph_module"]["graph"]["nodes"] for na in n["inputs"]
               if "as_layout" in na["arg"])
    arg["as_layout"] = 0
    members["program.json"] = json.dumps(program).encode()
    out = io.BytesIO()
    write_archive(out, members, schema_version=c.schema_version, torch_version="test")
    data = out.getvalue()
    with pytest.raises(MalformedArtifactError, match=r"unsupported layout <Layout\.Unknown: 0>") as loaded:
        serde.load(data)
    with pytest.raises(MalformedArtifactError) as emitted:  # emit runs the load's checks first
        native.emit_artifact(data)
    assert str(emitted.value) == str(loaded.value)
    # the emitter's own check, for programs handed to emit() directly
    from native.emit.emitter import emit
    from serde.archive.artifact import read_artifact

    a = read_artifact(data)
    with pytest.raises(MalformedArtifactError, match=r"\.inputs\['layout'\]: layout <Layout\.Unknown: 0> has no torch value"):
        emit(a.program, a.weights, a.payload)
