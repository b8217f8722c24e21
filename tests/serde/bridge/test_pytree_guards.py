"""Guards over fields of structured inputs: a registered pytree class (as transformers' DynamicCache
is), a dataclass and a namedtuple, each exported strict and non-strict.

torch writes such guards against the field (``L['cache']['k'][0].size()[0]``, ``L['inputs'].a``);
``ep.module()`` matches them against the key paths of the flattened example inputs. We store them
as paths (dict keys, indices, attributes) and resolve them at load against the inputs as the loading
process flattens them. Differential: the exported program, torch's own pair and ours accept and
reject the same inputs with the same messages. Hostile files naming other fields or unsafe
attributes are refused with a SerializeError.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import io
from typing import Any, NamedTuple

import pytest
import torch
import torch.utils._pytree as pytree
from torch.export import Dim

import serde
from serde.archive.artifact import read_artifact
from serde.core import schema
from serde.errors import SerializeError, UnsafeArtifactError
from serde.testing import assert_programs_equal
from tests.serde.attacks._attack_kit import rewrite_artifact


def T(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


class Cache:
    """A cache class registered with pytree the way transformers registers DynamicCache: its
    children are keyed by name (MappingKey), lists of tensors under each."""

    def __init__(self, k: list[torch.Tensor], v: list[torch.Tensor]) -> None:
        self.k, self.v = k, v


pytree.register_pytree_node(
    Cache,
    lambda c: ([c.k, c.v], None),
    lambda values, _: Cache(*values),
    serialized_type_name=f"{__name__}.Cache",
    flatten_with_keys_fn=lambda c: ([(pytree.MappingKey("k"), c.k), (pytree.MappingKey("v"), c.v)], None),
)


@dataclasses.dataclass
class Inputs:
    a: torch.Tensor
    b: torch.Tensor


torch.export.register_dataclass(Inputs, serialized_type_name=f"{__name__}.Inputs")


class Pair(NamedTuple):
    a: torch.Tensor
    b: torch.Tensor


# torch's save needs a serialized name for a namedtuple input; ours finds it by its module path
pytree._register_namedtuple(Pair, serialized_type_name=f"{__name__}.Pair")


class Attend(torch.nn.Module):
    """A step over a cache of two layers: every layer's keys and values must have one length."""

    def forward(self, x, cache):
        return sum((x @ k.transpose(0, 1)) @ v for k, v in zip(cache.k, cache.v, strict=True))


class Fields(torch.nn.Module):
    def forward(self, inputs):
        return inputs.a[: inputs.b.shape[0]] * 2 + inputs.b.sum()


def _cache(n: int, m: int | None = None, layers: int = 2) -> Cache:
    return Cache([T(n, 4) for _ in range(layers)], [T(n if m is None else m, 3) for _ in range(layers)])


_A = Dim.AUTO
CASES: dict[str, tuple[Any, tuple, Any, list[tuple]]] = {
    # name: (module, example args, dynamic_shapes, other args: accepted and rejected)
    "registered": (Attend(), (T(2, 4), _cache(5)),
                   ({0: _A}, [[{0: _A}, {0: _A}], [{0: _A}, {0: _A}]]),
                   [(T(3, 4), _cache(7)), (T(3, 4), _cache(7, 6)),
                    (T(3, 4), Cache([T(7, 4), T(8, 4)], [T(7, 3), T(8, 3)])),
                    (T(3, 4), Cache([T(7, 4), T(7, 4)], [T(7, 3), T(6, 3)]))]),
    "dataclass": (Fields(), (Inputs(T(6, 3), T(4, 3)),), ([{0: Dim("a")}, {0: Dim("b")}],),
                  [(Inputs(T(9, 3), T(9, 3)),), (Inputs(T(5, 3), T(2, 3)),), (Inputs(T(3, 3), T(4, 3)),)]),
    "namedtuple": (Fields(), (Pair(T(6, 3), T(4, 3)),), (Pair({0: Dim("a")}, {0: Dim("b")}),),
                   [(Pair(T(9, 3), T(9, 3)),), (Pair(T(5, 3), T(2, 3)),), (Pair(T(3, 3), T(4, 3)),)]),
}
# The rejected inputs above (a layer whose values have another length than its keys, b longer
# than a): each case must reject at least this many.
_REJECTED = {"registered": 2, "dataclass": 1, "namedtuple": 1}


@functools.cache
def _export(name: str, strict: bool) -> torch.export.ExportedProgram:
    module, args, shapes, _ = CASES[name]
    torch.manual_seed(0)
    return torch.export.export(module, args, dynamic_shapes=shapes, strict=strict)


def _message(module: torch.nn.Module, args: tuple) -> str:
    try:
        y = module(*copy.deepcopy(args))
    except Exception as e:  # the message is the observable we compare
        return f"{type(e).__name__}: {e}"
    return f"ok {y.sum().item():.6f}"


def _save(ep: torch.export.ExportedProgram) -> bytes:
    buf = io.BytesIO()
    serde.save(ep, buf)
    return buf.getvalue()


@pytest.fixture(scope="module", params=[(n, s) for n in CASES for s in (False, True)],
                ids=lambda p: f"{p[0]}-{'strict' if p[1] else 'nonstrict'}")
def programs(request):
    name, strict = request.param
    ep = _export(name, strict)
    data = _save(ep)
    buf = io.BytesIO()
    torch.export.save(ep, buf)
    buf.seek(0)
    # torch's load unpickles the example inputs: it needs the input classes allowed
    with torch.serialization.safe_globals([Cache, Inputs, Pair]):
        theirs = torch.export.load(buf)
    return name, ep, data, {"exported": ep.module(), "torch": theirs.module(), "ours": serde.load(data).module()}


def test_loaded_program_accepts_and_rejects_what_torch_does(programs) -> None:
    name, ep, _, mods = programs
    inputs = [ep.example_inputs[0], *CASES[name][3]]
    rows = {k: [_message(m, a) for a in inputs] for k, m in mods.items()}
    assert rows["ours"] == rows["exported"], rows
    assert rows["torch"] == rows["exported"], rows
    assert sum(not r.startswith("ok") for r in rows["exported"]) >= _REJECTED[name], rows
    assert any("Guard failed" in r for r in rows["exported"]), rows


def test_guards_are_stored_as_field_paths(programs) -> None:
    name, ep, data, _ = programs
    assert ep._guards_code
    sources = read_artifact(data).program.guards.sources
    kinds = {k.kind for s in sources for k in s.path[1:]}
    # a dataclass's and a namedtuple's fields are attributes, the registered cache's are named
    assert kinds == ({"name", "index"} if name == "registered" else {"attr"}), sources
    # strict export's L['flat_args'][i] is stored as the path ep.module() checks: the same guards
    other = read_artifact(_save(_export(name, not _is_strict(ep)))).program.guards
    assert other == read_artifact(data).program.guards


def _is_strict(ep: torch.export.ExportedProgram) -> bool:
    return any("L['flat_args']" in c for c in ep._guards_code)


def test_second_save_of_a_loaded_program_is_the_same_bytes(programs) -> None:
    _, ep, data, _ = programs
    assert _save(serde.load(data)) == data
    # and serde.testing's comparer reads the exported program's guards as saving stores them
    assert_programs_equal(ep, serde.load(data))


# ---------------------------------------------------------------- hostile files


def _rewrite_source(data: bytes, change) -> bytes:
    def edit(p: dict) -> None:
        for s in p["guards"]["sources"]:
            if len(s["path"]) > 1:
                change(s["path"])
                return
        raise AssertionError("no source with a field path")
    return rewrite_artifact(data, edit)


@pytest.mark.parametrize(("case", "key", "error", "match"), [
    # names a field the inputs do not have
    ("registered", {"name": "z"}, SerializeError, r"not an input of the program"),
    ("dataclass", {"attr": "c"}, SerializeError, r"not an input of the program"),
    # would print as code other than an attribute read
    ("dataclass", {"attr": "__class__"}, UnsafeArtifactError, r"not a plain identifier"),
    ("dataclass", {"attr": "a.size"}, UnsafeArtifactError, r"not a plain identifier"),
    ("dataclass", {"attr": "a'] + L['x"}, UnsafeArtifactError, r"not a plain identifier"),
    ("namedtuple", {"attr": "a(0)"}, UnsafeArtifactError, r"not a plain identifier"),
])
def test_a_crafted_field_path_is_refused(case: str, key: dict, error: type, match: str) -> None:
    data = _save(_export(case, False))
    hostile = _rewrite_source(data, lambda path: path.__setitem__(1, key))
    with pytest.raises(error, match=match):
        serde.load(hostile)


def test_a_path_cannot_start_with_an_attribute() -> None:
    data = _save(_export("dataclass", False))
    hostile = _rewrite_source(data, lambda path: path.__setitem__(0, {"attr": "inputs"}))
    with pytest.raises(SerializeError, match=r"must start with an input name"):
        serde.load(hostile)


def test_an_attribute_key_is_a_schema_member() -> None:
    assert schema.GuardKey(attr="a").kind == "attr"


# ---------------------------------------------------------------- the native runtime


def test_native_runtime_checks_namedtuple_fields_as_the_exported_program_does() -> None:
    from native.emit.emitter import emit_artifact
    from native.run.runtime import run

    ep = _export("namedtuple", False)
    nat = emit_artifact(_save(ep))
    for args in [ep.example_inputs[0], *CASES["namedtuple"][3]]:
        want = _message(ep.module(), args)
        if want.startswith("ok"):
            assert torch.equal(run(nat, *copy.deepcopy(args)), ep.module()(*copy.deepcopy(args)))
        else:
            with pytest.raises(SerializeError, match=r"fail the export guard"):
                run(nat, *copy.deepcopy(args))


@pytest.mark.parametrize("name", ["registered", "dataclass"])
def test_native_runtime_refuses_guards_on_fields_only_a_registry_names(name: str) -> None:
    from native.emit.emitter import emit_artifact
    from serde.errors import UnsupportedConstructError

    with pytest.raises(UnsupportedConstructError, match=r"native runtime cannot name such fields"):
        emit_artifact(_save(_export(name, False)))


@dataclasses.dataclass
class Prefixed:
    a: torch.Tensor
    ab: torch.Tensor


torch.export.register_dataclass(Prefixed, serialized_type_name=f"{__name__}.Prefixed")


class FieldsAB(torch.nn.Module):
    def forward(self, inputs):
        return inputs.a[: inputs.ab.shape[0]] * 2


def test_fields_whose_text_begins_anothers_are_refused_saying_why() -> None:
    # torch's ep.module() replaces L['inputs'].a inside L['inputs'].ab.size()[0] too, and its guard
    # code then does not compile; the exported program's own module fails so.
    ep = torch.export.export(FieldsAB(), (Prefixed(T(6, 3), T(4, 3)),),
                             dynamic_shapes=([{0: Dim("a")}, {0: Dim("b")}],))
    with pytest.raises(SyntaxError):
        ep.module()
    with pytest.raises(SerializeError, match=r"input L\['inputs'\]\.ab begins with the text of input "
                                             r"L\['inputs'\]\.a.*rename one of the two fields"):
        _save(ep)
