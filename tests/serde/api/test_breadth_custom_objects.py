"""Custom objects (torchbind ScriptObjects and opaque objects) through an explicit codec registry, no
pickle; an unregistered class fails at save time.

What is tested: the torchbind test class ``_TorchScriptTesting._Foo`` from torch's own
``lib/libtorchbind_test.so`` (shipped in the CPU wheel; its fake classes come from
``torch.testing._internal.torchbind_impls``), passed to an op and called through ``call_torchbind``,
in the training IR and in the ATen IR (where it runs under ``with_effects`` with tokens); and an
opaque reference object (``torch._library.opaque_object.register_opaque_type``) consumed by a
custom op.
"""

from __future__ import annotations

import io

import msgspec
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import serde
import serde.bridge.custom_objects as co
from serde.bridge.errors import InconsistentProgramError
from serde.errors import (
    MalformedArtifactError,
    SerializeError,
    UnknownOperatorError,
    UnsupportedConstructError,
)
from serde.testing import ProgramMismatch, assert_programs_equal, assert_roundtrip
from tests import zoo_breadth
from tests.serde.attacks._attack_kit import nodes, rewrite_artifact

HAVE_TORCHBIND = zoo_breadth.load_torchbind_test_classes()
needs_torchbind = pytest.mark.skipif(not HAVE_TORCHBIND, reason="torch's torchbind test library is missing")


def _foo(x: int = 10, y: int = 20):
    return torch.classes._TorchScriptTesting._Foo(x, y)


@pytest.fixture
def no_codec():
    """Run a test with the _Foo codec unregistered, and put it back afterwards."""
    co.unregister_custom_object(zoo_breadth.TORCHBIND_FOO)
    yield
    zoo_breadth.load_torchbind_test_classes()


# ---------------------------------------------------------------- the registry itself


@needs_torchbind
def test_codec_turns_objects_into_bytes_and_back():
    consts = {"foo": _foo(3, 4), "scaler": zoo_breadth.Scaler(0.5, 2.0), "t": torch.ones(2)}
    enc = co.encode_constants(consts)
    assert enc["t"] is consts["t"]
    assert bytes(enc["foo"].tolist()) == b'{"x":3,"y":4}'          # the JSON codec's text, not pickle
    assert bytes(enc["scaler"].tolist()) == b'{"bias":2.0,"factor":0.5}'
    dec = co.decode_constants(enc, {"foo": zoo_breadth.TORCHBIND_FOO,
                                    "scaler": co.class_fqn_of(consts["scaler"])})
    assert dict(dec["foo"].__obj_flatten__()) == {"x": 3, "y": 4}
    assert (dec["scaler"].factor, dec["scaler"].bias) == (0.5, 2.0)


@needs_torchbind
def test_unregistered_class_is_refused_when_encoding(no_codec):
    with pytest.raises(UnsupportedConstructError) as e:
        co.encode_constants({"foo": _foo()})
    msg = str(e.value)
    assert "constants['foo']" in msg and zoo_breadth.TORCHBIND_FOO in msg and "register_custom_object" in msg


def test_non_object_constant_and_bad_encoder_are_refused():
    with pytest.raises(UnsupportedConstructError, match="constants\\['n'\\].*tensors or custom objects"):
        co.encode_constants({"n": object()})
    co.register_custom_object(zoo_breadth.Scaler, encode=lambda s: [s.factor], decode=lambda b: None)
    try:
        with pytest.raises(UnsupportedConstructError, match="returned list; it must return bytes"):
            co.encode_constants({"s": zoo_breadth.Scaler(1.0, 0.0)})
    finally:
        co.register_json_custom_object(zoo_breadth.Scaler, to_json=lambda s: {"factor": s.factor, "bias": s.bias},
                                       from_json=lambda d: zoo_breadth.Scaler(d["factor"], d["bias"]))


@needs_torchbind
def test_decoding_errors_are_typed_and_located(no_codec):
    data = {"foo": torch.tensor(list(b'{"x":1,"y":2}'), dtype=torch.uint8)}
    with pytest.raises(co.UnknownCustomObjectError, match="constants\\['foo'\\].*no decoder registered") as e:
        co.decode_constants(data, {"foo": zoo_breadth.TORCHBIND_FOO})
    assert isinstance(e.value, UnknownOperatorError)
    with pytest.raises(MalformedArtifactError, match="float32 tensor"):
        co.decode_constants({"foo": torch.ones(3)}, {"foo": zoo_breadth.TORCHBIND_FOO})
    co.register_custom_object(zoo_breadth.TORCHBIND_FOO, encode=bytes, decode=lambda b: zoo_breadth.Scaler(1, 2))
    with pytest.raises(SerializeError, match="must return an object of that class"):
        co.decode_constants(data, {"foo": zoo_breadth.TORCHBIND_FOO})


# ---------------------------------------------------------------- end to end


@pytest.mark.parametrize("name", ["opaque_object", pytest.param("torchbind", marks=needs_torchbind),
                                  pytest.param("torchbind_aten", marks=needs_torchbind)])
def test_programs_with_custom_objects_roundtrip_and_run(name, breadth_program):
    ep = breadth_program(name)
    loaded = assert_roundtrip(ep)  # compares classes and encoded state of the objects too
    kinds = [s.kind.name for s in loaded.graph_signature.input_specs]
    assert "CUSTOM_OBJ" in kinds
    (obj,) = [v for v in loaded.constants.values() if not isinstance(v, torch.Tensor)]
    assert co.class_fqn_of(obj) in co.registered_classes()


@needs_torchbind
def test_loaded_torchbind_program_can_be_decomposed(breadth_program):
    loaded = serde.load(_saved(breadth_program("torchbind")))
    dec = loaded.run_decompositions()  # retracing needs the fake object load attaches
    assert any(n.target is torch.ops.higher_order.with_effects for n in dec.graph.nodes)
    x = torch.randn(2)
    torch.testing.assert_close(dec.module()(x), breadth_program("torchbind").module()(x))


@needs_torchbind
def test_unregistered_class_fails_at_save(breadth_program, no_codec):
    with pytest.raises(UnsupportedConstructError, match="constants\\['foo'\\]"):
        serde.save(breadth_program("torchbind"), io.BytesIO())


@needs_torchbind
def test_loading_without_the_codec_says_how_to_register(breadth_program):
    data = _saved(breadth_program("torchbind"))
    co.unregister_custom_object(zoo_breadth.TORCHBIND_FOO)
    try:
        with pytest.raises(co.UnknownCustomObjectError, match="register_custom_object"):
            serde.load(data)
    finally:
        zoo_breadth.load_torchbind_test_classes()


@needs_torchbind
def test_comparison_notices_different_object_state(breadth_program):
    ep = breadth_program("torchbind")
    other = zoo_breadth.export_case(zoo_breadth.get("torchbind"))
    assert_programs_equal(ep, other, run=False)
    other.constants["foo"] = _foo(1, 2)
    with pytest.raises(ProgramMismatch, match="custom object state differs"):
        assert_programs_equal(ep, other, run=False)


def _saved(ep) -> bytes:
    buf = io.BytesIO()
    serde.save(ep, buf)
    return buf.getvalue()


# ---------------------------------------------------------------- torch.Generator (a built-in codec)


class _Generators(torch.nn.Module):
    """A held generator and one that forward seeds (with an opaque object when ``scaler``), all
    lifted into constants."""

    def __init__(self, scaler: bool) -> None:
        super().__init__()
        self.gen = torch.Generator().manual_seed(11)
        self.scaler = zoo_breadth.Scaler(2.0, 0.5) if scaler else None

    def forward(self, x):
        local = torch.Generator().manual_seed(5)
        noise = torch.rand(x.shape, generator=self.gen) + torch.randn(x.shape, generator=local)
        return (torch.ops.pt2serde_zoo.apply_scaler(self.scaler, x) if self.scaler is not None else x) + noise


def _generator_artifact(scaler: bool = False) -> tuple[torch.export.ExportedProgram, bytes]:
    ep = torch.export.export(_Generators(scaler), (torch.ones(3),))
    buf = io.BytesIO()
    serde.save(ep, buf)
    return ep, buf.getvalue()


def test_generators_roundtrip_with_their_state_and_advance_like_the_originals():
    ep, data = _generator_artifact()
    gens = [c for c in ep.constants.values() if isinstance(c, torch.Generator)]
    assert len(gens) == 2
    saved_states = [g.get_state() for g in gens]
    loaded = serde.load(io.BytesIO(data))
    torch_buf = io.BytesIO()
    torch.export.save(ep, torch_buf)
    torch_buf.seek(0)
    theirs = torch.export.load(torch_buf).module()
    ours, original = loaded.module(), ep.module()
    x = torch.ones(3)
    for _ in range(3):  # each run advances the lifted generators: later runs draw new numbers
        want = original(x)
        assert torch.equal(ours(x), want) and torch.equal(theirs(x), want)
    assert not torch.equal(ours(x), serde.load(io.BytesIO(data)).module()(x))  # ours advanced, a fresh load did not
    assert all(torch.equal(g.get_state(), s) for g, s in zip(
        [c for c in serde.load(io.BytesIO(data)).constants.values() if isinstance(c, torch.Generator)],
        saved_states, strict=True))


def test_generator_bytes_are_its_device_and_state_as_json():
    g = torch.Generator().manual_seed(3)
    enc = co.encode_constants({"g": g})["g"]
    text = bytes(enc.tolist())
    assert text.startswith(b'{"device":"cpu","state":"')  # JSON (state in base64), not pickle
    back = co.decode_constants({"g": enc}, {"g": "torch._C.Generator"})["g"]
    assert back.initial_seed() == 3 and torch.equal(torch.rand(4, generator=back), torch.rand(4, generator=g))


@pytest.mark.parametrize(("data", "error", "match"), [
    (b"not json", MalformedArtifactError, r"constants\['g'\]: the stored torch.Generator is not valid"),
    (b'{"device":"cpu","state":"AAAA","seed":1}', MalformedArtifactError, r"is not valid: Object contains unknown field `seed`"),
    (b'{"device":"cpu","state":"AAAA"}', MalformedArtifactError, r"constants\['g'\]: .* state does not fit a cpu generator"),
    (b'{"device":"no such device","state":""}', MalformedArtifactError, r"device 'no such device' is not a device"),
    (b'{"device":"meta","state":""}', SerializeError, r"constants\['g'\]: the program holds a torch.Generator on meta, "
                                                       r"which this process cannot make .*load it where"),
], ids=["not_json", "unknown_field", "state_size", "bad_device", "unavailable_device"])
def test_damaged_generator_bytes_are_typed_errors_naming_the_constant(data, error, match):
    t = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    with pytest.raises(error, match=match):
        co.decode_constants({"g": t}, {"g": "torch._C.Generator"})


_GOOD_STATE = bytes(torch.Generator().manual_seed(1).get_state().tolist())


@given(device=st.one_of(st.sampled_from(["cpu", "cpu:0", "cpu:-1", "cuda", "meta", "mps", "cpu:99999999999999999999"]),
                        st.text(max_size=12), st.integers(), st.none()),
       state=st.one_of(st.binary(max_size=64), st.just(_GOOD_STATE),
                       st.builds(lambda k, b: _GOOD_STATE[:k] + b, st.integers(0, len(_GOOD_STATE)), st.binary(max_size=8))),
       junk=st.binary(max_size=40), raw=st.booleans())
def test_any_generator_bytes_load_or_fail_with_a_serialize_error(device, state, junk, raw):
    data = junk if raw else msgspec.json.encode({"device": device, "state": state})
    t = torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)
    try:
        g = co.decode_constants({"g": t}, {"g": "torch._C.Generator"})["g"]
    except SerializeError as e:
        assert "constants['g']: " in str(e)
    else:
        torch.rand(2, generator=g)


def test_an_object_of_another_class_where_a_generator_goes_is_refused_at_load():
    _, data = _generator_artifact(scaler=True)

    def swap(p: dict) -> None:
        (rand,) = (n for n in nodes(p).values() if n["target"] == "torch.ops.aten.rand.generator")
        (scaler,) = (n for n in nodes(p).values() if n["target"].endswith("apply_scaler.default"))
        generator = next(a for a in rand["inputs"] if a["name"] == "generator")
        generator["arg"] = scaler["inputs"][0]["arg"]
    with pytest.raises(InconsistentProgramError, match=r"argument 'generator' of .*rand\.generator has type "
                                                       r"Optional\[Generator\], got an object of class .*Scaler"):
        serde.load(io.BytesIO(rewrite_artifact(data, swap)))


@pytest.mark.parametrize("generator", [True, False], ids=["with_generator", "generator_none"])
@pytest.mark.parametrize("size", [{"as_string": "three"}, {"as_floats": [3.0]}], ids=["string", "floats"])
def test_a_call_with_or_without_its_generator_is_still_typed_in_full(generator, size):
    _, data = _generator_artifact()

    def retype(p: dict) -> None:
        (rand,) = (n for n in nodes(p).values() if n["target"] == "torch.ops.aten.rand.generator")
        for a in rand["inputs"]:
            if a["name"] == "generator" and not generator:
                a["arg"] = {"as_none": True}
            if a["name"] == "size":
                a["arg"] = size
    for _ in range(2):  # and once the intact call's shape was accepted
        with pytest.raises(InconsistentProgramError,
                           match=r"inputs\[0\]: the arguments do not fit torch.ops.aten.rand.generator"):
            serde.load(io.BytesIO(rewrite_artifact(data, retype)))
        serde.load(io.BytesIO(data))



@needs_torchbind
def test_the_rest_of_a_call_that_requires_a_torchbind_object_is_typed(breadth_program):
    # takes_foo(Foo foo, Tensor x): the matcher is given the object's fake for the required foo.
    buf = io.BytesIO()
    serde.save(breadth_program("torchbind"), buf)
    data = buf.getvalue()

    def retype(p: dict) -> None:
        (call,) = (n for n in nodes(p).values() if n["target"].endswith("takes_foo.default"))
        call["inputs"][1]["arg"] = {"as_string": "not a tensor"}
    for _ in range(2):  # and once the intact call's shape was accepted
        with pytest.raises(InconsistentProgramError, match=r"inputs\[1\]: the arguments do not fit .*takes_foo"):
            serde.load(io.BytesIO(rewrite_artifact(data, retype)))
        serde.load(io.BytesIO(data))
