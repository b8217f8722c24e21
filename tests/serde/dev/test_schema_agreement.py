"""schema.thrift and serde.core.schema agree type by type: names, thrift ids, field types, union members,
optional-ness, defaults and enum values.

Each thrift type is its own test case. Besides the checker's comparison, names, ids and enum values
are read straight off the Python classes here, so a bug in the checker's introspection cannot hide
a disagreement.
"""

from __future__ import annotations

import enum
import typing
from pathlib import Path

import msgspec
import pytest

from serde.core import schema
from serde.core.version import SCHEMA_VERSION
from serde.dev.schema_check import compare_type, python_document
from serde.dev.thrift import EnumDef, parse_file

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]
IDL = parse_file(REPO / "schema.thrift")
PY, PY_PROBLEMS = python_document(schema)

def _case(name: str):
    return name


def _py_ids(cls: type) -> dict[str, int]:
    hints = typing.get_type_hints(cls, include_extras=True)
    out = {}
    for f in msgspec.structs.fields(cls):
        (fid,) = [m.value for m in typing.get_args(hints[f.name])[1:] if isinstance(m, schema.Id)]
        out[f.encode_name] = fid
    return out


def test_same_type_names():
    py_names = {
        n for n, obj in vars(schema).items()
        if isinstance(obj, type) and obj.__module__ == schema.__name__
        and (issubclass(obj, enum.IntEnum) or (issubclass(obj, schema.Struct) and obj not in (schema.Struct, schema.Union)))
    }
    assert py_names == set(IDL.types)
    assert set(IDL.types) <= set(schema.__all__)


def test_python_side_is_expressible_in_the_idl():
    assert PY_PROBLEMS == []


def test_versions_agree():
    assert IDL.version == SCHEMA_VERSION


@pytest.mark.parametrize("name", [_case(n) for n in sorted(IDL.types)])
def test_type_agrees(name):
    t = IDL.types[name]
    cls = getattr(schema, name)
    if isinstance(t, EnumDef):
        assert issubclass(cls, enum.IntEnum)
        assert {m.name: m.value for m in cls} == dict(t.values)
        assert len(cls.__members__) == len(t.values)  # no aliases
    else:
        assert issubclass(cls, schema.Union) == (t.kind == "union")
        assert _py_ids(cls) == {f.name: f.id for f in t.fields}
        if t.kind == "union":
            # Every member optional in Python, exactly one set on the wire.
            assert all(f.default is None for f in msgspec.structs.fields(cls))
    assert compare_type(t, PY.types[name]) == []
