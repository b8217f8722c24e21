"""The IDL parser: our thrift subset, its canonical JSON form, and errors that name file:line:col."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from serde.dev.thrift import (
    Document,
    EnumDef,
    Field,
    StructDef,
    ThriftError,
    Type,
    parse,
    parse_file,
    parse_type,
)
from serde.errors import SerializeError

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]


def test_real_schema_parses():
    from serde.core import schema
    from serde.core.version import SCHEMA_VERSION

    doc = parse_file(REPO / "schema.thrift")
    assert doc.version == SCHEMA_VERSION
    assert doc.namespaces == {"py": schema.__name__}  # the module the IDL mirrors
    arg = doc.types["Argument"]
    assert arg.kind == "union"
    assert arg.by_id()[290] == Field(290, "as_string_to_argument", parse_type("map<string, Argument>"))
    assert dict(doc.types["ScalarType"].values)["UINT64"] == 35
    # GraphArgument refers to Graph, defined later in the file.
    assert doc.types["GraphArgument"].by_name()["graph"].type == Type("Graph")
    assert doc.types["Device"].by_name()["index"].optional


def test_subset_features_and_comments():
    doc = parse(
        """
        # hash comment
        // SCHEMA_VERSION 3.7
        namespace py my.mod
        /* a block comment
           spanning lines */
        struct A {
          1: list<map<string, B>> xs,   // forward reference
          2: optional i32 n;
          3: binary blob
        }
        union B { 10: double d; 20: E e; }
        enum E { X = -1, Y = 0x10 }
        """
    )
    assert doc.version == (3, 7)
    assert doc.namespaces == {"py": "my.mod"}
    a = doc.types["A"]
    assert a == StructDef(
        "A",
        "struct",
        (
            Field(1, "xs", Type("list", (Type("map", (Type("string"), Type("B"))),))),
            Field(2, "n", Type("i32"), optional=True),
            Field(3, "blob", Type("binary")),
        ),
    )
    assert doc.types["E"] == EnumDef("E", (("X", -1), ("Y", 16)))
    assert str(a.fields[0].type) == "list<map<string, B>>"


def test_no_header_means_no_version():
    assert parse("struct A { 1: i64 x; }").version is None


def test_version_header_must_be_its_own_comment():
    assert parse("// the SCHEMA_VERSION 1.0 is in prose here\nstruct A { 1: i64 x; }").version is None


def test_defaults_are_wire_values():
    doc = parse(
        """
        enum K { A = 3, B = 7 }
        struct S {
          1: i64 n = 5;
          2: double d = 2;
          3: string s = "a\\"b";
          4: bool b = true;
          5: list<i64> l = [];
          6: map<string, double> m = {"x": 1};
          7: K k = K.B;
          8: list<K> ks = [K.A, K.B];
          9: optional i64 o;
        }
        """
    )
    got = {f.name: (f.default if f.has_default else "<none>") for f in doc.types["S"].fields}
    assert got == {
        "n": 5, "d": 2.0, "s": 'a"b', "b": True, "l": [], "m": {"x": 1.0}, "k": 7, "ks": [3, 7],
        "o": "<none>",
    }
    assert isinstance(got["d"], float)


@pytest.mark.parametrize(
    ("src", "message"),
    [
        ("struct A { 1: Nope x; }", "t.thrift:1: A.x: unknown type 'Nope'; define it (struct, union or enum) "
                                     "or fix the spelling"),
        ("struct A {\n  1: i64 x;\n  1: i64 y;\n}", "t.thrift:3:3: A.y: field id 1 is already used by A.x"),
        ("struct A {\n  1: i64 x;\n  2: i64 x;\n}", "t.thrift:3:10: A.x: field name is declared twice"),
        ("struct A { 1: i64 x; }\nunion A { 1: i64 y; }", "t.thrift:2:1: type A is defined twice (first at line 1)"),
        ("enum E {\n  A = 1,\n  B = 1,\n}", "t.thrift:3:7: enum E: value 1 is used by both A and B"),
        ("enum E { A = 1, A = 2 }", "t.thrift:1:17: enum E: member A is declared twice"),
        ("enum E { A, B }", "t.thrift:1:11: enum E.A: give an explicit value (`= N`)"),
        ("struct A { 1: map<i64, string> m; }", "t.thrift:1:15: map keys must be string (JSON object keys), not i64"),
        ("struct A { 1: set<i64> s; }", "t.thrift:1:15: type 'set' is outside the IDL subset pt2serde supports"),
        ("typedef i64 Foo", "t.thrift:1:1: 'typedef' is outside the IDL subset pt2serde supports"),
        ("struct A { 1: required i64 x; }",
         "t.thrift:1:15: A: drop `required`: fields are required unless marked `optional`"),
        ("union U { 1: optional i64 x; }", "t.thrift:1:14: union U: members are implicitly optional; drop `optional`"),
        ("union U { 1: i64 x = 3; }", "t.thrift:1:22: union U: members cannot have defaults"),
        ("struct A { 0: i64 x; }", "t.thrift:1:12: A: field id 0 must be a positive integer"),
        ("struct A { x: i64 y; }", "t.thrift:1:12: expected a field id or '}' in struct A (an integer), found 'x'"),
        ("struct A { 1: i64 x; ", "t.thrift:1:22: expected a field id or '}' in struct A (an integer), "
                                   "found end of file"),
        ("struct A { 1: i64 x @ }", "t.thrift:1:21: unexpected character '@'"),
        ("/* never closed\nstruct A {}", "t.thrift:1:1: unterminated /* comment"),
        ("// SCHEMA_VERSION 1.0\n// SCHEMA_VERSION 1.1\n",
         "t.thrift:2:1: second SCHEMA_VERSION header (first at line 1); keep exactly one"),
        ("struct A { 1: K k = K.C; }\nenum K { A = 1 }", "t.thrift:1:21: A.k: unknown enum member K.C"),
        ("42", "t.thrift:1:1: expected a definition (struct, union, enum), found '42'"),
    ],
)
def test_errors_name_file_line_col(src, message):
    with pytest.raises(ThriftError) as ei:
        parse(src, filename="t.thrift")
    assert str(ei.value) == message
    assert isinstance(ei.value, SerializeError)


def test_error_line_counts_block_comments(tmp_path):
    p = tmp_path / "s.thrift"
    p.write_text("/* one\n two\n three */ struct A {\n  1: Missing m;\n}\n")
    with pytest.raises(ThriftError, match=r"s\.thrift:4: A\.m: unknown type 'Missing'"):
        parse_file(p)


def test_missing_file_is_a_thrift_error(tmp_path):
    with pytest.raises(ThriftError, match="cannot read the IDL file"):
        parse_file(tmp_path / "absent.thrift")


def test_parse_type_round_trips_and_rejects_trailing_text():
    for text in ["i64", "list<SymInt>", "map<string, list<list<double>>>"]:
        assert str(parse_type(text)) == text
    with pytest.raises(ThriftError, match="unexpected '>' after the type"):
        parse_type("list<i64>>", where="w")


def test_canonical_json_ignores_declaration_order():
    a = parse("struct S { 2: i64 b; 1: optional string a; }\nenum E { Y = 2, X = 1 }")
    b = parse("enum E { X = 1, Y = 2 }\nstruct S { 1: optional string a; 2: i64 b; }")
    assert a.to_json() == b.to_json()
    assert list(a.to_json()["types"]) == ["E", "S"]
    assert a.to_json()["types"]["S"]["fields"][0] == {"id": 1, "name": "a", "type": "string", "optional": True}


def test_from_json_inverts_to_json_on_the_real_schema():
    doc = parse_file(REPO / "schema.thrift")
    again = Document.from_json(doc.to_json())
    assert again.to_json() == doc.to_json()


def test_from_json_rejects_malformed():
    with pytest.raises(ThriftError, match="snapshot: not a valid schema document"):
        Document.from_json({"version": [1, 0], "types": {"A": {"kind": "blob"}}})


# ---------------------------------------------------------------- property: render -> parse


_names = st.from_regex(r"[A-Z][a-z]{0,6}", fullmatch=True)
_fnames = st.from_regex(r"[a-z][a-z0-9_]{0,8}", fullmatch=True).filter(
    lambda s: s not in {"optional", "required", "list", "map", "set", "true", "false", "const",
                        "typedef", "include", "exception", "service", "byte", "extends", "senum",
                        "cpp_include", "namespace", "struct", "union", "enum", "uuid"}
)


@st.composite
def _documents(draw):
    names = draw(st.lists(_names, min_size=1, max_size=5, unique=True))
    kinds = {n: draw(st.sampled_from(["struct", "union", "enum"])) for n in names}
    named = [Type(n) for n in names]

    def type_(depth=0):
        leaves = [Type(b) for b in ("i32", "i64", "double", "bool", "string", "binary")] + named
        if depth >= 2 or draw(st.booleans()):
            return draw(st.sampled_from(leaves))
        if draw(st.booleans()):
            return Type("list", (type_(depth + 1),))
        return Type("map", (Type("string"), type_(depth + 1)))

    types = {}
    for n in names:
        if kinds[n] == "enum":
            members = draw(st.lists(_names, min_size=1, max_size=4, unique=True))
            values = draw(st.lists(st.integers(-5, 100), min_size=len(members), max_size=len(members), unique=True))
            types[n] = EnumDef(n, tuple(zip(members, values, strict=True)))
        else:
            fnames = draw(st.lists(_fnames, min_size=1, max_size=4, unique=True))
            ids = draw(st.lists(st.integers(1, 400), min_size=len(fnames), max_size=len(fnames), unique=True))
            fields = tuple(
                Field(i, f, type_(), optional=kinds[n] == "struct" and draw(st.booleans()))
                for i, f in zip(ids, fnames, strict=True)
            )
            types[n] = StructDef(n, kinds[n], fields)
    version = draw(st.none() | st.tuples(st.integers(0, 99), st.integers(0, 99)))
    return Document(types=types, version=version)


def _render(doc: Document) -> str:
    out = [] if doc.version is None else [f"// SCHEMA_VERSION {doc.version[0]}.{doc.version[1]}"]
    for t in doc.types.values():
        if isinstance(t, EnumDef):
            out.append(f"enum {t.name} {{ " + ", ".join(f"{k} = {v}" for k, v in t.values) + " }")
        else:
            body = " ".join(f"{f.id}: {'optional ' if f.optional else ''}{f.type} {f.name};" for f in t.fields)
            out.append(f"/* {t.kind} */ {t.kind} {t.name} {{ {body} }}")
    return "\n".join(out)


@settings(max_examples=60, deadline=None)
@given(_documents())
def test_render_then_parse_is_identity(doc):
    again = parse(_render(doc))
    assert again == doc
    assert Document.from_json(again.to_json()).to_json() == doc.to_json()
