"""Pytree specs: every named-result class torch exports (torch.return_types) round-trips and a file
can name no other class; the builtin containers round-trip with every key kind, and a context they
could not have is refused before pytree or torch meets it."""

from __future__ import annotations

import collections
import dataclasses
import io
import json
import sys
import types

import pytest
import torch
import torch.utils._pytree as pytree

import serde
from serde.bridge.treespec import deserialize_treespec, serialize_treespec
from serde.core import schema
from serde.errors import MalformedArtifactError, UnsupportedConstructError


def _return_types() -> list[type]:
    """Every structseq class torch.return_types defines (private ones too: torch.lu returns
    _lu_with_info), found by asking the module, not listed here."""
    found = [v for k, v in vars(torch.return_types).items() if pytree.is_structseq_class(v) and v.__qualname__ == k]
    return sorted(found, key=lambda c: c.__qualname__)


def test_torch_exports_many_named_results():
    # The round-trip below covers what the module holds; a torch that moved them elsewhere must fail here.
    assert len(_return_types()) > 40


@pytest.mark.parametrize("cls", _return_types(), ids=lambda c: c.__name__)
def test_every_named_result_class_round_trips_to_the_same_class(cls):
    value = cls(tuple(torch.full((1,), float(i)) for i in range(cls.n_sequence_fields)))
    spec = pytree.tree_structure({"out": value, "rest": [value]})
    stored = serialize_treespec(spec, "out_spec")
    back = deserialize_treespec(stored, "out_spec")
    assert back == spec
    leaves = pytree.tree_leaves({"out": value, "rest": [value]})
    rebuilt = pytree.tree_unflatten(leaves, back)
    assert type(rebuilt["out"]) is cls and type(rebuilt["rest"][0]) is cls
    assert all(getattr(rebuilt["out"], f) is getattr(value, f) for f in cls.__match_args__)


def _max_spec(context: dict | str, n_children: int = 2) -> schema.TreeSpec:
    text = context if isinstance(context, str) else json.dumps(context)
    return schema.TreeSpec(type="structseq", context=text, children=[schema.TreeSpec(type="*")] * n_children)


@pytest.mark.parametrize(("context", "n_children", "match"), [
    # Exported by torch.return_types, but a function, not a class.
    ({"name": "torch.return_types.pytree_register_structseq", "fields": []}, 0, "is not one of torch's named results"),
    ({"name": "torch.return_types.all_return_types", "fields": []}, 0, "is not one of torch's named results"),
    # A second name torch.return_types binds to one of its classes.
    ({"name": "torch.return_types._attr", "fields": ["solution", "cloned_coefficient"]}, 2,
     "is not one of torch's named results"),
    # Classes elsewhere, structseq or not.
    ({"name": "os.stat_result", "fields": ["st_mode"]}, 1, "is not one of torch's named results"),
    ({"name": "builtins.tuple", "fields": []}, 0, "is not one of torch's named results"),
    ({"name": "torch.return_types.max.__class__", "fields": []}, 0, "is not one of torch's named results"),
    ({"name": "torch.return_types.__builtins__", "fields": []}, 0, "is not one of torch's named results"),
    ({"name": "max", "fields": ["values", "indices"]}, 2, "is not one of torch's named results"),
    # The right class, described otherwise than this torch has it.
    ({"name": "torch.return_types.max", "fields": ["indices", "values"]}, 2, r"has the fields \['values', 'indices'\]"),
    ({"name": "torch.return_types.max", "fields": ["values", "indices"]}, 3, "with 3 children"),
    # Not the context a structseq has.
    ({"name": "torch.return_types.max"}, 2, "expected name and fields"),
    ("[\"values\", \"indices\"]", 2, "expected name and fields"),
    ("{", 2, "invalid JSON"),
])
def test_a_structseq_spec_naming_anything_else_is_refused(context, n_children, match):
    with pytest.raises(MalformedArtifactError, match=r"out_spec\.children\[0\]\.context: .*" + match):
        deserialize_treespec(schema.TreeSpec(type="tuple", children=[_max_spec(context, n_children)]), "out_spec")


class _NamedOutputs(torch.nn.Module):
    def forward(self, x):
        return torch.max(x, 0), torch.linalg.slogdet(x @ x.T + torch.eye(x.shape[0]))


def test_a_program_returning_named_results_loads_returning_the_same_classes():
    x = torch.randn(3, 4)
    ep = torch.export.export(_NamedOutputs(), (x,))
    buf = io.BytesIO()
    serde.save(ep, buf)
    buf.seek(0)
    loaded = serde.load(buf)
    want, got = ep.module()(x), loaded.module()(x)
    assert [type(o) for o in got] == [torch.return_types.max, torch.return_types.linalg_slogdet]
    for w, g in zip(pytree.tree_leaves(want), pytree.tree_leaves(got), strict=True):
        assert torch.equal(w, g)
    assert got[0].values is not None and got[1].logabsdet.shape == ()


_LEAVES = [1, 2, 3]
_CONTAINERS = [
    {"a": 1, 7: 2, None: 3},
    collections.OrderedDict([(True, 1), (2.5, 2), ("x", 3)]),
    collections.defaultdict(list, {"k": 1, -1: 2, 0.5: 3}),
    collections.deque(_LEAVES, maxlen=3),
    collections.deque(_LEAVES),
]


@pytest.mark.parametrize("value", _CONTAINERS, ids=lambda v: type(v).__name__)
def test_builtin_containers_round_trip_with_every_key_kind(value):
    spec = pytree.tree_structure(value)
    back = deserialize_treespec(serialize_treespec(spec, "in_spec"), "in_spec")
    assert back == spec
    rebuilt = pytree.tree_unflatten(pytree.tree_leaves(value), back)
    assert type(rebuilt) is type(value) and rebuilt == value


def _container(kind: str, context) -> schema.TreeSpec:
    return schema.TreeSpec(type=kind, context=json.dumps(context, allow_nan=True),
                           children=[schema.TreeSpec(type="*")] * 3)


@pytest.mark.parametrize(("kind", "context", "match"), [
    ("dict", [["a"], "b", "c"], "distinct str, int, float, bool or null keys"),    # unhashable: a list
    ("dict", [{"a": 1}, "b", "c"], "distinct str, int, float, bool or null keys"),
    ("dict", ["a", "b"], "one per child"),
    ("dict", ["a", "a", "b"], "distinct"),                                           # two children, one entry
    ("dict", [1, True, "b"], "distinct"),                                            # 1 and True are one key
    ("OrderedDict", [float("nan"), "b", "c"], "distinct str"),
    ("dict", {"a": 0}, "a list of distinct"),
    ("defaultdict", {"factory": "list"}, "keys: a list"),
    ("defaultdict", {"factory": "list", "keys": ["a", ["b"], "c"]}, "keys: a list"),
    ("defaultdict", {"factory": "os.system", "keys": ["a", "b", "c"]}, "a known factory"),
    ("deque", {"maxlen": 2}, "maxlen: null or an int of at least the number of children"),  # drops one
    ("deque", {"maxlen": -1}, "maxlen"),
    ("deque", {"maxlen": "3"}, "maxlen"),
    ("deque", {"maxlen": True}, "maxlen"),
    ("deque", {}, "maxlen"),
    ("deque", [3], "maxlen"),
])
def test_a_container_context_it_could_not_have_is_refused(kind, context, match):
    with pytest.raises(MalformedArtifactError, match=r"in_spec\.children\[0\]\.context: expected .*" + match):
        deserialize_treespec(schema.TreeSpec(type="tuple", children=[_container(kind, context)]), "in_spec")


@dataclasses.dataclass
class _Unnamed:
    a: torch.Tensor


@dataclasses.dataclass
class _Named:
    a: torch.Tensor
    b: torch.Tensor


torch.export.register_dataclass(_Unnamed)  # as the docs show it: torch records no serialized name
torch.export.register_dataclass(_Named, serialized_type_name="tests.serde.bridge.test_treespec._Named")


class _TakesDataclass(torch.nn.Module):
    def forward(self, d):
        return d.a * 2 + (d.b if hasattr(d, "b") else 0)


def test_a_dataclass_registered_without_a_name_is_refused_with_the_call_that_names_it():
    ep = torch.export.export(_TakesDataclass(), (_Unnamed(torch.ones(2)),))
    with pytest.raises(UnsupportedConstructError) as e:
        serde.save(ep, io.BytesIO())
    assert ("in_spec.children[0].children[0]: pytree type tests.serde.bridge.test_treespec._Unnamed has no serialized name"
            in str(e.value))
    assert "register_dataclass(_Unnamed, serialized_type_name='tests.serde.bridge.test_treespec._Unnamed')" in str(e.value)


def test_a_dataclass_registered_with_a_name_round_trips():
    ep = torch.export.export(_TakesDataclass(), (_Named(torch.ones(2), torch.full((2,), 3.0)),))
    buf = io.BytesIO()
    serde.save(ep, buf)
    buf.seek(0)
    loaded = serde.load(buf)
    x = _Named(torch.arange(2.0), torch.ones(2))
    assert torch.equal(loaded.module()(x), ep.module()(x))


# ---------------------------------------------------------------- namedtuple inputs, found by name

# The class is named other than the variable it is bound to (a common idiom): its recorded name,
# tests.serde.bridge.test_treespec.RenamedT, finds nothing.
_Renamed = collections.namedtuple("RenamedT", ["p", "q"])
_Registered = collections.namedtuple("RegisteredT", ["p", "q"])
pytree._register_namedtuple(_Registered, serialized_type_name="tests.serde.bridge.test_treespec.RegisteredT")


class _TakesPair(torch.nn.Module):
    def forward(self, x, pair):
        return x + pair.p - pair.q


def _pair_program(cls: type) -> torch.export.ExportedProgram:
    return torch.export.export(_TakesPair(), (torch.ones(2), cls(torch.ones(2), torch.zeros(2))))


def test_an_input_namedtuple_named_other_than_its_variable_is_refused_at_save(tmp_path):
    with pytest.raises(UnsupportedConstructError) as e:
        serde.save(_pair_program(_Renamed), tmp_path / "a.pt2s")
    assert str(e.value).startswith(
        "module_call_graph[0] ('').in_spec: input pair is a namedtuple of class tests.serde.bridge.test_treespec.RenamedT, "
        "which loading cannot find by that name (it is bound to tests.serde.bridge.test_treespec._Renamed, another name)")
    assert "_Renamed = namedtuple('_Renamed', ...)" in str(e.value)
    assert "_register_namedtuple(_Renamed, serialized_type_name='tests.serde.bridge.test_treespec.RenamedT')" in str(e.value)
    assert not (tmp_path / "a.pt2s").exists()


def test_an_input_namedtuple_defined_in_a_function_is_refused_at_save(tmp_path):
    local = collections.namedtuple("Local", ["p", "q"])
    with pytest.raises(UnsupportedConstructError, match=r"input pair is a namedtuple of class "
                       r"tests\.serde\.bridge\.test_treespec\.Local, .*has no attribute 'Local', e\.g\. it is defined in a function"):
        serde.save(_pair_program(local), tmp_path / "a.pt2s")


def test_an_input_namedtuple_registered_with_pytree_round_trips(tmp_path):
    ep = _pair_program(_Registered)
    serde.save(ep, tmp_path / "a.pt2s")
    loaded = serde.load(tmp_path / "a.pt2s")
    args = (torch.arange(2.0), _Registered(torch.full((2,), 3.0), torch.ones(2)))
    assert torch.equal(loaded.module()(*args), ep.module()(*args))
    assert torch.equal(loaded.module()(*ep.example_inputs[0]), ep.module()(*ep.example_inputs[0]))


def test_an_input_namedtuple_is_found_again_only_in_a_process_that_has_its_class(tmp_path, monkeypatch):
    # A real module the saving process has and the loading one may not have imported (pt2serde never
    # imports one a file names).
    mod = types.ModuleType("pt2serde_test_pairs")
    mod.Pair = collections.namedtuple("Pair", ["p", "q"], module=mod.__name__)
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    ep = _pair_program(mod.Pair)
    serde.save(ep, tmp_path / "a.pt2s")
    args = (torch.arange(2.0), mod.Pair(torch.full((2,), 3.0), torch.ones(2)))
    # Imported before loading: the very class comes back and the loaded program takes real Pairs.
    loaded = serde.load(tmp_path / "a.pt2s")
    assert loaded.call_spec.in_spec.children()[0].children()[1].context is mod.Pair
    assert torch.equal(loaded.module()(*args), ep.module()(*args))
    # Not imported: a look-alike class stands in. The program runs on its own example inputs (built
    # with it); a real Pair does not match the spec, and torch says so, naming the spec.
    monkeypatch.delitem(sys.modules, mod.__name__)
    stranger = serde.load(tmp_path / "a.pt2s")
    cls = stranger.call_spec.in_spec.children()[0].children()[1].context
    assert cls is not mod.Pair and cls._fields == ("p", "q")
    assert torch.equal(stranger.module()(*stranger.example_inputs[0]), ep.module()(*ep.example_inputs[0]))
    with pytest.raises(ValueError, match="Trying to flatten user inputs with exported input tree spec"):
        stranger.module()(*args)


class _GivesPair(torch.nn.Module):
    def forward(self, x):
        return _Renamed(x + 1, x - 1)


def test_an_output_namedtuple_of_a_class_not_found_still_unflattens(tmp_path):
    # Outputs are built from the spec, not matched against it: a look-alike class still serves.
    ep = torch.export.export(_GivesPair(), (torch.ones(2),))
    serde.save(ep, tmp_path / "a.pt2s")
    out = serde.load(tmp_path / "a.pt2s").module()(torch.ones(2))
    assert out._fields == ("p", "q") and torch.equal(out.p, torch.full((2,), 2.0))
