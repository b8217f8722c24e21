"""``schema.tensor_ref`` builds the same Argument as the checked constructor, every time."""

from __future__ import annotations

import pytest

from serde.core import schema, wire

pytestmark = pytest.mark.unit


def test_tensor_ref_is_the_checked_argument():
    for name in ("x", "add_kqztb", "p_layers_0_weight"):
        ref = schema.tensor_ref(name)
        built = schema.Argument(as_tensor=schema.TensorArgument(name=name))
        assert type(ref) is schema.Argument
        assert ref == built and hash(ref.as_tensor) == hash(built.as_tensor)
        assert ref.kind == "as_tensor" and ref.as_tensor.name == name
        assert wire.encode(ref) == wire.encode(built)


def test_tensor_refs_are_separate_objects():
    a, b = schema.tensor_ref("a"), schema.tensor_ref("b")
    assert a is not b and a.as_tensor is not b.as_tensor
    assert (a.as_tensor.name, b.as_tensor.name) == ("a", "b")  # setting one never touches another
    assert schema.tensor_ref("c").as_tensor.name == "c"
