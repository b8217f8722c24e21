"""The schema checker on scratch copies of schema.thrift: each edit gets its exact verdict.

Each scratch repo has a copy of the real schema.thrift, a snapshot of it written by the checker,
and a Struct module generated from the (edited) IDL, so that the IDL and Python agree unless a
test edits one side on purpose.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import re
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from serde.cli import schema as cmd_schema
from serde.dev import schema_check
from serde.dev.schema_check import BREAKING, COMPATIBLE, SchemaCheckError, check, write_snapshot
from serde.dev.thrift import EnumDef, Type, parse_file

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]
BASE_1_0 = Path(__file__).resolve().parents[1] / "data" / "schema_1_0.thrift"
_counter = itertools.count()


# ---------------------------------------------------------------- scratch repo helpers


def _py_type(t: Type) -> str:
    simple = {"i32": "int", "i64": "int", "double": "F64", "bool": "bool", "string": "str", "binary": "bytes"}
    if t.name == "list":
        return f"list[{_py_type(t.args[0])}]"
    if t.name == "map":
        return f"dict[str, {_py_type(t.args[1])}]"
    return simple.get(t.name, t.name)


def generate_module_source(thrift: Path) -> str:
    """Struct module source mirroring ``thrift`` (what a developer writes by hand in schema.py)."""
    doc = parse_file(thrift)
    lines = [
        "from __future__ import annotations",
        "import enum",
        "from typing import Annotated, Optional",
        "from serde.core.schema import F64, Id, Struct, Union",
    ]
    for t in doc.types.values():
        if isinstance(t, EnumDef):
            lines.append(f"class {t.name}(enum.IntEnum):")
            lines += [f"    {k} = {v}" for k, v in t.values]
            continue
        lines.append(f"class {t.name}({'Union' if t.kind == 'union' else 'Struct'}, kw_only=True):")
        for f in t.fields:
            ann = _py_type(f.type)
            if t.kind == "union" or f.optional:
                lines.append(f"    {f.name}: Annotated[Optional[{ann}], Id({f.id})] = None")
            elif f.has_default:
                lines.append(f"    {f.name}: Annotated[{ann}, Id({f.id})] = {f.default!r}")
            else:
                lines.append(f"    {f.name}: Annotated[{ann}, Id({f.id})]")
    return "\n".join(lines) + "\n"


class Scratch:
    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root = root
        self.thrift = root / "schema.thrift"
        self.monkeypatch = monkeypatch
        self.version = (1, 0)
        self.py_source: str | None = None
        self.last_module = ""

    def edit(self, old: str, new: str) -> None:
        text = self.thrift.read_text()
        assert text.count(old) == 1, f"edit anchor {old!r} must occur exactly once"
        self.thrift.write_text(text.replace(old, new))

    def bump(self, major: int, minor: int) -> None:
        self.edit(f"// SCHEMA_VERSION {self.version[0]}.{self.version[1]}", f"// SCHEMA_VERSION {major}.{minor}")
        self.edit("// Rules (enforced", f"//   {major}.{minor}  2027-01-01  Test change.\n//\n// Rules (enforced")
        self.version = (major, minor)

    def module(self):
        src = self.py_source if self.py_source is not None else generate_module_source(self.thrift)
        mod = _load_module(src, self.root)
        self.last_module = mod.__name__
        return mod

    def check(self, **kw):
        kw.setdefault("version", self.version)
        return check(self.root, structs_module=self.module(), **kw)

    def snapshot(self, **kw):
        """Release: snapshot the schema and freeze fixtures of this version (the release flow)."""
        self.add_fixture(*self.version)
        return write_snapshot(self.root, structs_module=self.module(), version=self.version, **kw)

    def add_upgrader(self, old: int, new: int, text: str | None = None) -> None:
        d = self.root / "upgraders"
        d.mkdir(exist_ok=True)
        (d / f"v{old}_to_v{new}.py").write_text(
            text if text is not None else
            f'FROM = ({old}, 0)\nTO = ({new}, 0)\nDATE = "2027-01-01"\nSUMMARY = "test"\n\n'
            "def upgrade(docs):\n    return dict(docs)\n"
        )

    def add_fixture(self, major: int, minor: int) -> None:
        d = self.root / "fixtures" / f"v{major}.{minor}" / "mlp"
        d.mkdir(parents=True, exist_ok=True)
        (d / "NOTE.md").write_text("written by a test\n")


_modules: dict[str, object] = {}
_baseline: dict[str, bytes] = {}


def _load_module(src: str, where: Path):
    """Import generated source once per distinct text (the modules are never modified)."""
    mod = _modules.get(src)
    if mod is None:
        name = f"_scratch_schema_{next(_counter)}"
        path = where / f"{name}.py"
        path.write_text(src)
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod  # get_type_hints resolves names through sys.modules
        spec.loader.exec_module(mod)
        _modules[src] = mod
    return mod


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    # A frozen copy of the released 1.0 IDL: these tests exercise the checker, not today's schema.
    (tmp_path / "schema.thrift").write_text(BASE_1_0.read_text())
    s = Scratch(tmp_path, monkeypatch)
    snap = tmp_path / "src/serde/schema_snapshot.json"
    if "snapshot" not in _baseline:
        s.snapshot()
        _baseline["snapshot"] = snap.read_bytes()
    snap.parent.mkdir(parents=True, exist_ok=True)
    snap.write_bytes(_baseline["snapshot"])
    s.add_fixture(1, 0)  # 1.0 is released: its artifacts are frozen
    return s


def changes(report) -> set[tuple[str, str, str]]:
    return {(c.cls, c.code, c.where) for c in report.changes}


def warnings(report) -> set[str]:
    return {w.code for w in report.warnings}


# ---------------------------------------------------------------- baseline


def test_unchanged_copy_passes(scratch):
    r = scratch.check()
    assert r.ok, r.render()
    assert r.changes == [] and r.codes() == set() and r.required_bump == "none"
    assert r.render().splitlines()[-2:] == ["no schema changes since 1.0", "verdict: OK"]


def test_snapshot_is_checksummed_canonical_json(scratch):
    data = msgspec.json.decode((scratch.root / "src/serde/schema_snapshot.json").read_bytes())
    assert data["released"]["version"] == [1, 0]
    assert data["released"]["types"]["Device"]["fields"][1] == {
        "id": 20, "name": "index", "type": "i64", "optional": True,
    }
    assert re.fullmatch(r"[0-9a-f]{64}", data["sha256"])


# ---------------------------------------------------------------- compatible edits


COMPATIBLE_EDITS = [
    pytest.param("struct Device {\n  10: string type;", "struct Device {\n  10: string type;\n  30: optional i64 flags;",
                 {(COMPATIBLE, "field-added", "Device.flags")}, id="add-optional-field"),
    pytest.param("struct Device {\n  10: string type;", "struct Device {\n  10: string type;\n  30: i64 flags = 0;",
                 {(COMPATIBLE, "field-added", "Device.flags")}, id="add-field-with-default"),
    pytest.param("  300: list<list<double>> as_float_lists;\n  // last used: 300",
                 "  300: list<list<double>> as_float_lists;\n  310: list<bool> as_new_member;\n  // last used: 310",
                 {(COMPATIBLE, "member-added", "Argument.as_new_member")}, id="add-union-member"),
    pytest.param("  UINT64 = 35,\n  // last used: 35", "  UINT64 = 35,\n  UINT128 = 36,\n  // last used: 36",
                 {(COMPATIBLE, "enum-value-added", "ScalarType.UINT128")}, id="add-enum-value"),
    pytest.param("struct Device {", "struct Extra {\n  10: optional Device d;\n}\n\nstruct Device {",
                 {(COMPATIBLE, "type-added", "Extra")}, id="add-type"),
]


@pytest.mark.parametrize(("old", "new", "expected"), COMPATIBLE_EDITS)
def test_compatible_edit_without_bump_fails(scratch, old, new, expected):
    scratch.edit(old, new)
    r = scratch.check()
    assert changes(r) == expected
    assert r.required_bump == "minor"
    assert r.codes() == {"unbumped"}
    assert "these changes need a minor bump to 1.1" in r.render()


@pytest.mark.parametrize(("old", "new", "expected"), COMPATIBLE_EDITS)
def test_compatible_edit_with_minor_bump_passes(scratch, old, new, expected):
    scratch.edit(old, new)
    scratch.bump(1, 1)
    r = scratch.check()
    assert changes(r) == expected
    assert r.ok, r.render()
    assert warnings(r) == set()


def test_compatible_edit_with_major_bump_warns_but_passes(scratch):
    scratch.edit("  UINT64 = 35,\n  // last used: 35", "  UINT64 = 35,\n  UINT128 = 36,\n  // last used: 36")
    scratch.bump(2, 0)
    scratch.add_upgrader(1, 2)
    r = scratch.check()
    assert r.ok, r.render()
    assert warnings(r) == {"major-unneeded"}


# ---------------------------------------------------------------- breaking edits


BREAKING_EDITS = [
    pytest.param("  70: Layout layout;\n}", "}", {(BREAKING, "field-removed", "TensorMeta.layout")},
                 id="remove-field"),
    pytest.param("  10: string type;\n  20: optional i64 index;", "  10: string kind;\n  20: optional i64 index;",
                 {(BREAKING, "field-renamed", "Device.type")}, id="rename-field"),
    pytest.param("  20: optional i64 index;", "  20: optional string index;",
                 {(BREAKING, "type-changed", "Device.index")}, id="change-type"),
    pytest.param("struct Device {\n  10: string type;", "struct Device {\n  10: string type;\n  30: i64 flags;",
                 {(BREAKING, "required-field-added", "Device.flags")}, id="add-required-field"),
    pytest.param("  20: optional i64 index;", "  20: optional string label;",
                 {(BREAKING, "id-reused", "Device.label")}, id="reuse-id"),
    pytest.param("  20: optional i64 index;", "  30: optional i64 index;",
                 {(BREAKING, "id-changed", "Device.index")}, id="change-id"),
    pytest.param("  20: optional i64 index;", "  20: i64 index;",
                 {(BREAKING, "optional-changed", "Device.index")}, id="optional-to-required"),
    pytest.param("  10: string fqn;", "  10: string fqn = \"\";",
                 {(BREAKING, "default-changed", "ModuleCallEntry.fqn")}, id="add-default-to-existing"),
    pytest.param("  UINT64 = 35,\n  // last used: 35", "  UINT64 = 36,\n  // last used: 36", {(BREAKING, "enum-renumbered", "ScalarType.UINT64")},
                 id="change-enum-value"),
    pytest.param("  UINT64 = 35,\n", "", {(BREAKING, "enum-value-removed", "ScalarType.UINT64")},
                 id="remove-enum-value"),
    pytest.param("  UINT64 = 35,", "  UINT64_T = 35,", {(BREAKING, "enum-renamed", "ScalarType.UINT64")},
                 id="rename-enum-member"),
    pytest.param("  300: list<list<double>> as_float_lists;\n", "",
                 {(BREAKING, "member-removed", "Argument.as_float_lists")}, id="remove-union-member"),
    pytest.param("struct ComplexValue {", "union ComplexValue {",
                 {(BREAKING, "kind-changed", "ComplexValue")}, id="struct-to-union"),
]


@pytest.mark.parametrize(("old", "new", "expected"), BREAKING_EDITS)
def test_breaking_edit_without_bump_fails(scratch, old, new, expected):
    scratch.edit(old, new)
    r = scratch.check()
    assert changes(r) == expected
    assert r.required_bump == "major"
    assert r.codes() == {"unbumped"}
    assert "these changes need a major bump to 2.0" in r.render()


@pytest.mark.parametrize(("old", "new", "expected"), BREAKING_EDITS)
def test_breaking_edit_with_minor_bump_fails(scratch, old, new, expected):
    scratch.edit(old, new)
    scratch.bump(1, 1)
    r = scratch.check()
    assert changes(r) == expected
    assert r.codes() == {"minor-for-breaking"}


@pytest.mark.parametrize(("old", "new", "expected"), BREAKING_EDITS)
def test_breaking_edit_with_major_bump_upgrader_and_fixtures_passes(scratch, old, new, expected):
    scratch.edit(old, new)
    scratch.bump(2, 0)
    scratch.add_upgrader(1, 2)
    r = scratch.check()
    assert changes(r) == expected
    assert r.ok, r.render()
    assert warnings(r) == set()


def test_major_bump_without_upgrader_fails(scratch):
    scratch.edit("  70: Layout layout;\n}", "}")
    scratch.bump(2, 0)
    r = scratch.check()
    assert r.codes() == {"missing-upgrader"}
    assert "needs the step upgraders/v1_to_v2.py defining FROM, TO, DATE, SUMMARY, upgrade" in r.render()


@pytest.mark.parametrize("breaking", [False, True])
def test_released_version_without_fixtures_fails(scratch, breaking):
    import shutil

    shutil.rmtree(scratch.root / "fixtures" / "v1.0")
    (scratch.root / "fixtures" / "v1.0").mkdir(parents=True)
    (scratch.root / "fixtures" / "v1.0" / ".gitkeep").write_text("")  # hidden files do not count
    if breaking:
        scratch.edit("  70: Layout layout;\n}", "}")
        scratch.bump(2, 0)
        scratch.add_upgrader(1, 2)
    r = scratch.check()
    assert r.codes() == {"missing-fixtures"}
    assert "run `python fixtures/freeze.py`" in r.render()


def test_major_bump_with_incomplete_upgrader_fails(scratch):
    scratch.edit("  70: Layout layout;\n}", "}")
    scratch.bump(2, 0)
    scratch.add_upgrader(1, 2, 'FROM = (1, 0)\nTO = (2, 0)\nDATE = "2027-01-01"\n\ndef upgrade(docs):\n    return docs\n')
    r = scratch.check()
    assert r.codes() == {"bad-upgrader"}
    assert "does not define SUMMARY at module level" in r.render()


@pytest.mark.parametrize("target", [(3, 0), (2, 1)])
def test_major_bump_must_be_to_next_major_dot_zero(scratch, target):
    scratch.edit("  70: Layout layout;\n}", "}")
    scratch.bump(*target)
    r = scratch.check()
    assert r.codes() == {"major-skip"}


def test_version_going_backwards_fails(scratch):
    scratch.bump(0, 9)
    assert scratch.check().codes() == {"version-backwards"}


def test_minor_bump_without_changes_warns(scratch):
    scratch.bump(1, 1)
    r = scratch.check()
    assert r.ok and warnings(r) == {"bump-without-changes"}


def test_id_of_a_field_removed_in_an_earlier_release_stays_retired(scratch):
    # Release 2.0 removes Device.index (id 20); 2.1 then hands id 20 to a new optional field.
    scratch.edit("  20: optional i64 index;\n", "")
    scratch.bump(2, 0)
    scratch.add_upgrader(1, 2)
    scratch.snapshot()
    snap = msgspec.json.decode((scratch.root / "src/serde/schema_snapshot.json").read_bytes())
    assert snap["released"]["retired"] == {"Device": [20]}
    scratch.edit("  10: string type;\n}", "  10: string type;\n  20: optional i64 ordinal;\n}")
    scratch.bump(2, 1)
    r = scratch.check()
    assert changes(r) == {(BREAKING, "id-reused", "Device.ordinal")}
    assert r.codes() == {"minor-for-breaking"}


def test_retired_enum_values_stay_retired(scratch):
    scratch.edit("  UINT64 = 35,\n", "")
    scratch.bump(2, 0)
    scratch.add_upgrader(1, 2)
    scratch.snapshot()
    scratch.edit("  UINT32 = 34,", "  UINT32 = 34,\n  U64 = 35,")
    scratch.bump(2, 1)
    assert changes(scratch.check()) == {(BREAKING, "enum-value-reused", "ScalarType.U64")}


# ---------------------------------------------------------------- header, history, snapshot integrity


def test_python_version_must_match_thrift_header(scratch):
    r = scratch.check(version=(1, 1))
    assert r.codes() == {"version-mismatch"}
    assert "schema.thrift says 1.0 but serde.core.version.SCHEMA_VERSION is 1.1; bump both together" in r.render()


def test_bump_needs_a_history_line(scratch):
    scratch.edit("// SCHEMA_VERSION 1.0", "// SCHEMA_VERSION 1.1")
    scratch.version = (1, 1)
    r = scratch.check()
    assert r.codes() == {"no-history"}
    assert "the version history has no line for 1.1; add `//   1.1  YYYY-MM-DD" in r.render()


def test_missing_header_fails(scratch):
    scratch.edit("// SCHEMA_VERSION 1.0\n", "")
    assert scratch.check().codes() == {"no-version-header"}


def test_hand_edited_snapshot_is_rejected(scratch):
    path = scratch.root / "src/serde/schema_snapshot.json"
    path.write_text(path.read_text().replace('"UINT64": 35', '"UINT64": 36'))
    r = scratch.check()
    assert r.codes() == {"snapshot-invalid"}
    assert "checksum mismatch: the snapshot was edited by hand" in r.render()


def test_missing_snapshot_fails(scratch):
    (scratch.root / "src/serde/schema_snapshot.json").unlink()
    r = scratch.check()
    assert r.codes() == {"no-snapshot"}
    assert "record the released schema with `pt2serde schema snapshot`" in r.render()


def test_thrift_syntax_error_is_reported(scratch):
    scratch.edit("struct Device {", "struct Device {{")
    r = check(scratch.root, structs_module=importlib.import_module("serde.core.schema"), version=(1, 0))
    assert r.codes() == {"thrift-syntax"}
    assert re.search(r"schema\.thrift:\d+:\d+: expected a field id", r.render())


# ---------------------------------------------------------------- snapshot writing


def test_snapshot_refuses_to_change_a_released_version(scratch):
    scratch.edit("  UINT64 = 35,\n  // last used: 35", "  UINT64 = 35,\n  UINT128 = 36,\n  // last used: 36")
    with pytest.raises(SchemaCheckError, match="refusing to snapshot a schema that fails"):
        scratch.snapshot()
    before = (scratch.root / "src/serde/schema_snapshot.json").read_bytes()
    with pytest.raises(SchemaCheckError, match="the snapshot of 1.0 differs from schema.thrift but the version"):
        _snapshot_ignoring_check(scratch)  # even a passing check may not change a released version
    assert (scratch.root / "src/serde/schema_snapshot.json").read_bytes() == before
    scratch.snapshot(force=True)
    assert scratch.check().ok


def _snapshot_ignoring_check(scratch):
    # Simulate a check that passes, to reach the same-version guard.
    real = schema_check.check

    def lenient(*a, **kw):
        r = real(*a, **kw)
        r.problems.clear()
        return r

    scratch.monkeypatch.setattr(schema_check, "check", lenient)
    try:
        return scratch.snapshot()
    finally:
        scratch.monkeypatch.setattr(schema_check, "check", real)


def test_snapshot_after_a_release_records_the_new_version(scratch):
    scratch.edit("  UINT64 = 35,\n  // last used: 35", "  UINT64 = 35,\n  UINT128 = 36,\n  // last used: 36")
    scratch.bump(1, 1)
    path, report = scratch.snapshot()
    assert report.ok
    r = scratch.check()
    assert r.released == (1, 1) and r.changes == [] and r.ok


def test_snapshot_is_deterministic(scratch):
    path = scratch.root / "src/serde/schema_snapshot.json"
    first = path.read_bytes()
    scratch.snapshot()
    assert path.read_bytes() == first


# ---------------------------------------------------------------- IDL vs Python


def _edit_py(scratch, old: str, new: str) -> None:
    src = scratch.py_source if scratch.py_source is not None else generate_module_source(scratch.thrift)
    assert src.count(old) == 1, old
    scratch.py_source = src.replace(old, new)


PY_EDITS = [
    pytest.param("index: Annotated[Optional[int], Id(20)]", "index: Annotated[Optional[int], Id(21)]",
                 {("id-mismatch", "Device.index")}, id="id"),
    pytest.param("index: Annotated[Optional[int], Id(20)]", "index: Annotated[Optional[int], Id(10)]",
                 {("id-mismatch", "Device.index"), ("duplicate-id", "Device.index")}, id="duplicate-id"),
    pytest.param("index: Annotated[Optional[int], Id(20)]", "index: Annotated[Optional[str], Id(20)]",
                 {("type-mismatch", "Device.index")}, id="type"),
    pytest.param("index: Annotated[Optional[int], Id(20)] = None", "index: Annotated[int, Id(20)]",
                 {("optional-mismatch", "Device.index")}, id="optional"),
    pytest.param("    index: Annotated[Optional[int], Id(20)] = None\n", "",
                 {("missing-in-python", "Device.index")}, id="missing-field"),
    pytest.param("    index: Annotated[Optional[int], Id(20)] = None\n",
                 "    index: Annotated[Optional[int], Id(20)] = None\n    extra: Annotated[Optional[int], Id(30)] = None\n",
                 {("missing-in-thrift", "Device.extra")}, id="extra-field"),
    pytest.param("    UINT64 = 35\n", "    UINT64 = 36\n", {("enum-value-mismatch", "ScalarType.UINT64")},
                 id="enum-value"),
    pytest.param("    UINT64 = 35\n", "", {("missing-in-python", "ScalarType.UINT64")}, id="enum-member"),
    pytest.param("class ComplexValue(Struct", "class ComplexValue(Union",
                 {("kind-mismatch", "ComplexValue"), ("union-member", "ComplexValue.real"),
                  ("union-member", "ComplexValue.imag")}, id="kind"),
    pytest.param("class SymIntArgument(Union, kw_only=True):\n    as_name: Annotated[Optional[str], Id(10)] = None",
                 "class SymIntArgument(Union, kw_only=True):\n    as_name: Annotated[str, Id(10)]",
                 {("union-member", "SymIntArgument.as_name"), ("missing-in-python", "SymIntArgument.as_name")},
                 id="union-member-not-optional"),
    pytest.param("real: Annotated[F64, Id(10)]", "real: Annotated[float, Id(10)]",
                 {("bad-type", "ComplexValue.real"), ("missing-in-python", "ComplexValue.real")},
                 id="plain-float"),
    pytest.param("fqn: Annotated[str, Id(10)]", "fqn: Annotated[str, Id(10)] = ''",
                 {("default-mismatch", "ModuleCallEntry.fqn")}, id="default"),
    pytest.param("fqn: Annotated[str, Id(10)]", "fqn: str",
                 {("no-id", "ModuleCallEntry.fqn"), ("missing-in-python", "ModuleCallEntry.fqn")}, id="no-id"),
    pytest.param("class Member(Struct, kw_only=True):", "class Member(Struct, kw_only=True, forbid_unknown_fields=True):",
                 {("struct-config", "Member")}, id="forbid-unknown-fields"),
    pytest.param("class Manifest(Struct, kw_only=True):", "class Manifesto(Struct, kw_only=True):",
                 {("missing-in-python", "Manifest"), ("missing-in-thrift", "Manifesto")}, id="renamed-type"),
    pytest.param("class Member(Struct, kw_only=True):", "class Mem(Struct, kw_only=True):",
                 {("missing-in-python", "Member"), ("missing-in-thrift", "Mem"), ("bad-annotation", "Manifest"),
                  *{("missing-in-python", f"Manifest.{f}") for f in
                    ("format", "format_version", "schema_version", "torch_version", "members")}},
                 id="dangling-type-reference"),
]


@pytest.mark.parametrize(("old", "new", "expected"), PY_EDITS)
def test_idl_python_disagreement_is_reported(scratch, old, new, expected):
    _edit_py(scratch, old, new)
    r = scratch.check()
    assert {(d.code, d.where) for d in r.disagreements} == expected
    assert not r.ok and r.changes == []
    assert "verdict: FAIL" in r.render()


def test_i32_in_thrift_matches_python_int(scratch):
    scratch.edit("  20: optional i64 index;", "  20: optional i32 index;")  # Python keeps `int`
    r = scratch.check()
    assert r.disagreements == []
    assert changes(r) == {(BREAKING, "type-changed", "Device.index")}


def test_stale_last_used_note_fails(scratch):
    scratch.edit("  300: list<list<double>> as_float_lists;", "  300: list<list<double>> as_float_lists;\n"
                 "  310: list<bool> as_new_member;")
    scratch.bump(1, 1)
    r = scratch.check()
    assert r.codes() == {"stale-last-used"}
    assert "says `last used: 300` but Argument uses or retired 310; update the comment to 310" in r.render()
    scratch.edit("  // last used: 300", "  // last used: 310")
    assert scratch.check().ok


def test_disagreement_render_is_exact(scratch):
    _edit_py(scratch, "index: Annotated[Optional[int], Id(20)]", "index: Annotated[Optional[int], Id(21)]")
    assert scratch.check().render() == (
        "schema.thrift 1.0; last released (snapshot) 1.0\n"
        f"IDL vs Python ({scratch.last_module}): 1 disagreement(s)\n"
        "  Device.index: thrift id 20 in schema.thrift, Id(21) in Python\n"
        "no schema changes since 1.0\n"
        "verdict: FAIL (1 problem)"
    )


# ---------------------------------------------------------------- the real repository


def test_real_repository_passes_schema_check():
    r = check(REPO)
    assert r.ok, r.render()


def test_real_repository_versioning_is_consistent():
    # Header, history, snapshot integrity and bump rules.
    r = check(REPO)
    assert r.released is not None
    assert r.problems == [], r.render()


# ---------------------------------------------------------------- CLI


def _cli(argv):
    parser = argparse.ArgumentParser()
    cmd_schema.add_arguments(parser)
    return cmd_schema.run(parser.parse_args(argv))


def test_cli_check_exit_codes(scratch, capsys, monkeypatch):
    monkeypatch.setattr(schema_check, "check", _with_module(scratch, schema_check.check))
    assert _cli(["check", "--root", str(scratch.root)]) == 0
    assert capsys.readouterr().out.endswith("verdict: OK\n")
    scratch.edit("  UINT64 = 35,\n  // last used: 35", "  UINT64 = 36,\n  // last used: 36")
    assert _cli(["check", "--root", str(scratch.root)]) == 1
    out = capsys.readouterr().out
    assert "breaking    ScalarType.UINT64: value changed from 35 to 36" in out
    assert out.endswith("verdict: FAIL (1 problem)\n")


def test_cli_snapshot_writes_file(scratch, capsys, monkeypatch):
    monkeypatch.setattr(schema_check, "check", _with_module(scratch, schema_check.check))
    (scratch.root / "src/serde/schema_snapshot.json").unlink()
    assert _cli(["snapshot", "--root", str(scratch.root)]) == 0
    assert "wrote" in capsys.readouterr().out
    assert (scratch.root / "src/serde/schema_snapshot.json").is_file()


def _with_module(scratch, real):
    def run(root, **kw):
        kw.setdefault("structs_module", scratch.module())
        kw.setdefault("version", scratch.version)
        return real(root, **kw)

    return run


def test_find_root_walks_up(tmp_path):
    (tmp_path / "schema.thrift").write_text("")
    sub = tmp_path / "a" / "b"
    sub.mkdir(parents=True)
    assert schema_check.find_root(sub) == tmp_path.resolve()


def test_schema_tools_do_not_import_torch():
    code = (
        "import sys, serde.dev.thrift, serde.dev.schema_check, serde.cli.schema, serde.archive.upgrade, upgraders._helpers\n"
        "from serde.dev.schema_check import check, find_root\n"
        "check(find_root())\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, timeout=120)
