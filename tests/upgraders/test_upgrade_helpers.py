"""upgraders/_helpers.py: small pure helpers for upgrader steps."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from upgraders._helpers import add_default, drop_field, format_path, has_keys, map_values_at, rename_field

from serde.errors import UpgradeError

pytestmark = pytest.mark.unit


def _containers(x) -> list:
    """Every dict and list inside ``x`` (iteratively)."""
    out, stack = [], [x]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            out.append(v)
            stack.extend(v.values())
        elif isinstance(v, list):
            out.append(v)
            stack.extend(v)
    return out


def test_rename_field_keeps_position_and_input():
    obj = {"a": 1, "old": [2], "z": 3}
    out = rename_field(obj, "old", "new")
    assert list(out.items()) == [("a", 1), ("new", [2]), ("z", 3)]
    assert obj == {"a": 1, "old": [2], "z": 3}


def test_rename_field_absent_is_a_copy():
    obj = {"a": 1}
    out = rename_field(obj, "old", "new")
    assert out == obj and out is not obj


def test_rename_field_refuses_to_overwrite():
    with pytest.raises(UpgradeError, match="cannot rename field 'old' to 'new': both are present"):
        rename_field({"old": 1, "new": 2}, "old", "new")


def test_add_default_adds_a_fresh_copy_only_when_absent():
    default = {"xs": []}
    out = add_default({"a": 1}, "b", default)
    assert out == {"a": 1, "b": {"xs": []}}
    out["b"]["xs"].append(1)
    assert default == {"xs": []}
    obj = {"b": 7}
    assert add_default(obj, "b", 0) == {"b": 7}
    assert obj == {"b": 7}


def test_drop_field():
    obj = {"a": 1, "b": 2}
    assert drop_field(obj, "a") == {"b": 2}
    assert drop_field(obj, "missing") == obj
    assert obj == {"a": 1, "b": 2}


def test_map_values_at_maps_every_match_with_paths():
    expr = {"expr_str": "s0 + 1"}
    tree = {
        "graph": {
            "nodes": [
                {"outputs": [{"as_sym_int": expr}]},
                {"inputs": [{"arg": {"as_graph": {"graph": {"nodes": [{"hint": {"expr_str": "s1"}}]}}}}]},
            ],
        },
        "range_constraints": {"s0": {"min_val": 2}},
    }
    before = copy.deepcopy(tree)
    out = map_values_at(tree, has_keys("expr_str"), lambda d, path: {"tree": d["expr_str"], "at": path},
                        with_path=True)
    assert out["graph"]["nodes"][0]["outputs"][0]["as_sym_int"] == {"tree": "s0 + 1",
                                                                    "at": "graph.nodes[0].outputs[0].as_sym_int"}
    inner = out["graph"]["nodes"][1]["inputs"][0]["arg"]["as_graph"]["graph"]["nodes"][0]["hint"]
    assert inner == {"tree": "s1", "at": "graph.nodes[1].inputs[0].arg.as_graph.graph.nodes[0].hint"}
    assert out["range_constraints"] == {"s0": {"min_val": 2}}
    assert tree == before
    assert not {id(c) for c in _containers(out)} & {id(c) for c in _containers(tree)}


def test_map_values_at_walks_into_replacements():
    # A match nested inside another match (a subgraph's node inside a node) is mapped too.
    tree = {"node": {"name": "outer", "sub": [{"node": {"name": "inner"}}]}}
    out = map_values_at(tree, has_keys("name"), lambda d: {**d, "name": d["name"].upper()})
    assert out == {"node": {"name": "OUTER", "sub": [{"node": {"name": "INNER"}}]}}


def test_map_values_at_root_and_non_dicts():
    assert map_values_at({"k": 1}, has_keys("k"), lambda d: {"k": d["k"] + 1}) == {"k": 2}
    assert map_values_at([1, "k", [2]], lambda d: True, lambda d: "never called on non-dicts") == [1, "k", [2]]
    assert map_values_at(5, lambda d: True, lambda d: 0) == 5


def test_map_values_at_is_iterative():
    depth = 50_000  # far past Python's recursion limit
    tree: dict = {"leaf": {"expr_str": "x"}}
    for _ in range(depth):
        tree = {"c": [tree]}
    out = map_values_at(tree, has_keys("expr_str"), lambda d: {"done": True})
    node = out
    for _ in range(depth):
        node = node["c"][0]
    assert node == {"leaf": {"done": True}}


def test_format_path():
    assert format_path(None) == "<root>"
    assert format_path((((None, "graph"), "nodes"), 3)) == "graph.nodes[3]"
    assert format_path(((None, 0), "a")) == "[0].a"


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.sampled_from("abcxyz"), kids, max_size=4),
    max_leaves=30,
)


@settings(max_examples=80, deadline=None)
@given(_json)
def test_identity_map_is_an_unshared_equal_copy(tree):
    before = copy.deepcopy(tree)
    out = map_values_at(tree, lambda d: True, lambda d: d)
    assert out == tree == before
    assert not {id(c) for c in _containers(out)} & {id(c) for c in _containers(tree)}


@settings(max_examples=80, deadline=None)
@given(_json)
def test_map_counts_every_matching_dict(tree):
    seen = []
    map_values_at(tree, has_keys("a"), lambda d: seen.append(1) or d)
    assert len(seen) == sum(1 for c in _containers(tree) if isinstance(c, dict) and "a" in c)
