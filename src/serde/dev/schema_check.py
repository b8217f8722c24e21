"""Schema checker: IDL vs Python Structs, and current schema vs the last released snapshot.

``check(root)`` answers three questions and gives one verdict:

1. Do ``schema.thrift`` and the msgspec Structs (``serde.core.schema``) agree, type by type and field by
   field (names, thrift ids, types, optional-ness, defaults, union members, enum values), and does the
   thrift header version equal ``serde.core.version.SCHEMA_VERSION``?
2. What changed since the last *released* schema, recorded in ``src/serde/schema_snapshot.json``
   (checksummed; a hand edit is rejected), and is each change compatible or breaking?
3. Does the version bump match? A compatible change needs at least a minor bump, a breaking one a
   major bump (exactly N -> N+1.0) with ``upgraders/vN_to_vN+1.py``. Every released version
   (the snapshot's) must have frozen artifacts in a non-empty ``fixtures/vN.M/``, and every
   ``// last used: N`` note in the IDL must be at least the highest id its type uses or retired.

Release flow: edit ``schema.thrift`` and ``schema.py``, bump the version (header, history line,
``serde/core/version.py``), make ``pt2serde schema check`` pass, then at release run
``pt2serde schema snapshot`` and commit the new snapshot.

Policy decisions:

* Changing a default, or the optional-ness, of an existing field is breaking: writers omit fields
  equal to their default, so either side would read an omitted field differently.
* A major bump without any breaking IDL change only warns: a field's *meaning* can change while
  its IDL stays the same, and that needs a major bump and an upgrader too. The upgrader and
  fixture requirements still apply.
* Same id with a new name is reported as ``field-renamed`` when the type is unchanged and as
  ``id-reused`` otherwise; ids removed in earlier releases are remembered in the snapshot
  (``retired``) so they are never handed out again.
"""

from __future__ import annotations

import ast
import enum
import hashlib
import importlib
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import msgspec

from serde.errors import SerializeError

from .thrift import NO_DEFAULT, Document, EnumDef, Field, StructDef, ThriftError, Type, parse_file

__all__ = [
    "COMPATIBLE",
    "BREAKING",
    "SchemaCheckError",
    "Finding",
    "Change",
    "Report",
    "check",
    "find_root",
    "python_document",
    "compare_idl_python",
    "compare_type",
    "classify",
    "read_snapshot",
    "write_snapshot",
    "snapshot_path",
]

COMPATIBLE = "compatible"
BREAKING = "breaking"
SNAPSHOT_RELPATH = Path("src/serde/schema_snapshot.json")
_ABOUT = (
    "Schema of the last released pt2serde schema version. Written by `pt2serde schema snapshot` "
    "when a version is released; do not edit by hand (`sha256` covers `released`)."
)


class SchemaCheckError(SerializeError):
    """The checker cannot run (no schema.thrift found, snapshot refused, ...)."""


@dataclass(frozen=True)
class Finding:
    """One problem: a stable ``code``, where it is (``Type.field``) and a readable message."""

    code: str
    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}" if self.where else self.message


@dataclass(frozen=True)
class Change:
    """One schema change since the snapshot, classified ``compatible`` or ``breaking``."""

    cls: str
    code: str
    where: str
    message: str


@dataclass
class Report:
    """Everything ``check`` found. ``ok`` is the verdict; warnings never fail it."""

    current: tuple[int, int] | None = None
    released: tuple[int, int] | None = None
    python_module: str = ""
    type_count: int = 0
    disagreements: list[Finding] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)
    problems: list[Finding] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems and not self.disagreements

    @property
    def required_bump(self) -> str:
        """"none", "minor" or "major": what the changes since the snapshot demand."""
        if any(c.cls == BREAKING for c in self.changes):
            return "major"
        return "minor" if self.changes else "none"

    def codes(self) -> set[str]:
        """Codes of problems and disagreements (what made the verdict fail)."""
        return {f.code for f in self.problems} | {f.code for f in self.disagreements}

    def render(self) -> str:
        out = [f"schema.thrift {_v(self.current)}; last released (snapshot) {_v(self.released)}"]
        if self.disagreements:
            out.append(f"IDL vs Python ({self.python_module}): {len(self.disagreements)} disagreement(s)")
            out += [f"  {d}" for d in self.disagreements]
        elif self.type_count:
            out.append(f"IDL vs Python ({self.python_module}): agree on all {self.type_count} types")
        if self.changes:
            out.append(f"changes since {_v(self.released)} (needs a {self.required_bump} bump):")
            out += [f"  {c.cls:<10}  {c.where}: {c.message}" for c in self.changes]
        elif self.released is not None:
            out.append(f"no schema changes since {_v(self.released)}")
        out += [f"warning: {w}" for w in self.warnings]
        out += [f"problem: {p}" for p in self.problems]
        n = len(self.problems) + len(self.disagreements)
        out.append("verdict: OK" if self.ok else f"verdict: FAIL ({n} problem{'s' if n != 1 else ''})")
        return "\n".join(out)


def _v(v: tuple[int, int] | None) -> str:
    return "?" if v is None else f"{v[0]}.{v[1]}"


# ---------------------------------------------------------------- the check


def check(
    root: str | Path,
    *,
    thrift: str | Path | None = None,
    structs_module: ModuleType | None = None,
    version: tuple[int, int] | None = None,
    snapshot: str | Path | None = None,
) -> Report:
    """Run every schema check against the repository at ``root``.

    Args:
        root: repository root; holds ``upgraders/`` and ``fixtures/``.
        thrift: the IDL file (default ``root/schema.thrift``).
        structs_module: the module with the Structs (default ``serde.core.schema``).
        version: the Python-side version (default ``serde.core.version.SCHEMA_VERSION``).
        snapshot: the released snapshot (default ``root/src/serde/schema_snapshot.json``).

    Returns:
        A :class:`Report`; ``report.ok`` is the verdict and ``report.render()`` the readable form.
    """
    root = Path(root)
    thrift_path = Path(thrift) if thrift is not None else root / "schema.thrift"
    snap_path = Path(snapshot) if snapshot is not None else root / SNAPSHOT_RELPATH
    if structs_module is None:
        structs_module = importlib.import_module("serde.core.schema")
    if version is None:
        version = importlib.import_module("serde.core.version").SCHEMA_VERSION
    report = Report(python_module=structs_module.__name__)

    try:
        doc = parse_file(thrift_path)
    except ThriftError as e:
        report.problems.append(Finding("thrift-syntax", "", f"{e} (fix schema.thrift)"))
        return report
    report.current = doc.version
    report.type_count = len(doc.types)
    _check_header(doc, thrift_path, tuple(version), report)

    py_doc, py_problems = python_document(structs_module)
    report.disagreements += py_problems + compare_idl_python(doc, py_doc)

    try:
        released, retired = read_snapshot(snap_path)
    except SchemaCheckError as e:
        code = "no-snapshot" if not snap_path.exists() else "snapshot-invalid"
        report.problems.append(Finding(code, "", str(e)))
        return report
    report.released = released.version
    report.changes = classify(released, doc, retired)
    _check_last_used(doc, thrift_path.read_text(encoding="utf-8"), retired, report)
    if released.version is not None:
        _check_released_fixtures(root, released.version, report)
    if doc.version is not None and released.version is not None:
        _check_bump(root, released.version, doc.version, report)
    return report


_LAST_USED_RE = re.compile(r"^\s*//\s*last used:\s*(\d+)\s*$")


def _check_last_used(doc: Document, text: str, retired: dict[str, list[int]], report: Report) -> None:
    # A `// last used: N` note inside a type tells the next editor which id to take; a stale one
    # invites reusing an id, so it must be at least every id the type uses or has retired.
    starts = sorted((t.line, name) for name, t in doc.types.items())
    for lineno, line in enumerate(text.splitlines(), 1):
        m = _LAST_USED_RE.match(line)
        if m is None:
            continue
        owner = next((name for start, name in reversed(starts) if start <= lineno), None)
        if owner is None:
            continue
        t = doc.types[owner]
        ids = [v for _, v in t.values] if isinstance(t, EnumDef) else [f.id for f in t.fields]
        top = max([*ids, *retired.get(owner, [])], default=0)
        noted = int(m.group(1))
        if noted < top:
            report.problems.append(
                Finding(
                    "stale-last-used", f"{owner}",
                    f"schema.thrift line {lineno} says `last used: {noted}` but {owner} uses or retired "
                    f"{top}; update the comment to {top}",
                )
            )


def _check_released_fixtures(root: Path, released: tuple[int, int], report: Report) -> None:
    # Artifacts of a released version can only be written by that version's code: freeze them at
    # release, before the schema moves on (a later major bump's upgrader is tested on them).
    fixtures = root / "fixtures" / f"v{_v(released)}"
    if not _has_files(fixtures):
        report.problems.append(
            Finding(
                "missing-fixtures", str(fixtures),
                f"released schema {_v(released)} has no frozen artifacts in fixtures/v{_v(released)}/; "
                "run `python fixtures/freeze.py` with that version's code and commit them",
            )
        )


def _check_header(doc: Document, path: Path, py_version: tuple[int, int], report: Report) -> None:
    if doc.version is None:
        report.problems.append(
            Finding("no-version-header", str(path), "no `// SCHEMA_VERSION X.Y` header line; add one")
        )
        return
    if doc.version != py_version:
        report.problems.append(
            Finding(
                "version-mismatch", "",
                f"schema.thrift says {_v(doc.version)} but serde.core.version.SCHEMA_VERSION is "
                f"{_v(py_version)}; bump both together",
            )
        )
    text = path.read_text(encoding="utf-8")
    maj, mnr = doc.version
    if not re.search(rf"^//\s+{maj}\.{mnr}\s+\d{{4}}-\d{{2}}-\d{{2}}\s+\S", text, re.MULTILINE):
        report.problems.append(
            Finding(
                "no-history", str(path),
                f"the version history has no line for {maj}.{mnr}; add "
                f"`//   {maj}.{mnr}  YYYY-MM-DD  <what changed, compatibility>`",
            )
        )


def _check_bump(root: Path, old: tuple[int, int], new: tuple[int, int], report: Report) -> None:
    need = report.required_bump
    probs, warns = report.problems, report.warnings
    if new < old:
        probs.append(Finding("version-backwards", "", f"version {_v(new)} is older than the released {_v(old)}"))
        return
    if new == old:
        if need != "none":
            target = (old[0] + 1, 0) if need == "major" else (old[0], old[1] + 1)
            probs.append(
                Finding(
                    "unbumped", "",
                    f"the schema changed since {_v(old)} without a version bump; these changes need a "
                    f"{need} bump to {_v(target)}",
                )
            )
        return
    if new[0] == old[0]:
        if need == "major":
            probs.append(
                Finding(
                    "minor-for-breaking", "",
                    f"breaking changes need a major bump to {old[0] + 1}.0, not the minor bump to {_v(new)}",
                )
            )
        elif need == "none":
            warns.append(Finding("bump-without-changes", "", f"bumped to {_v(new)} but the IDL is unchanged"))
        if new[1] > old[1] + 1:
            warns.append(Finding("minor-skip", "", f"{_v(old)} -> {_v(new)} skips minor versions"))
        return
    # Major bump: the upgrader chain has one step per major, so exactly N -> N+1.0.
    if new[0] != old[0] + 1 or new[1] != 0:
        probs.append(
            Finding("major-skip", "", f"a major bump from {_v(old)} must go to {old[0] + 1}.0, not {_v(new)}")
        )
        return
    if need != "major":
        warns.append(
            Finding(
                "major-unneeded", "",
                f"major bump to {_v(new)} but no breaking IDL change (fine only if a field's meaning changed;"
                " otherwise a minor bump keeps forward compatibility)",
            )
        )
    step = f"v{old[0]}_to_v{new[0]}"
    _check_upgrader(root / "upgraders" / f"{step}.py", old, new, report)


_STEP_NAMES = ("FROM", "TO", "DATE", "SUMMARY", "upgrade")


def _check_upgrader(path: Path, old: tuple[int, int], new: tuple[int, int], report: Report) -> None:
    # Read with ast, never import: the checker must not run repository code.
    if not path.is_file():
        report.problems.append(
            Finding(
                "missing-upgrader", str(path),
                f"a major bump {_v(old)} -> {_v(new)} needs the step upgraders/{path.name} "
                f"defining {', '.join(_STEP_NAMES)}",
            )
        )
        return
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (SyntaxError, UnicodeDecodeError) as e:
        report.problems.append(Finding("bad-upgrader", str(path), f"cannot be parsed: {e}"))
        return
    defined: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            defined.add(node.name)
        elif isinstance(node, ast.Assign):
            defined |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            defined.add(node.target.id)
    missing = [n for n in _STEP_NAMES if n not in defined]
    if missing:
        report.problems.append(
            Finding("bad-upgrader", str(path), f"does not define {', '.join(missing)} at module level")
        )


def _has_files(d: Path) -> bool:
    if not d.is_dir():
        return False
    return any(p.is_file() and not p.name.startswith(".") for p in d.rglob("*"))


def find_root(start: str | Path | None = None) -> Path:
    """The repository root: the nearest directory at or above ``start`` (default cwd) with
    ``schema.thrift``, else the source checkout this package is installed from."""
    here = Path(start) if start is not None else Path.cwd()
    for d in (here.resolve(), *here.resolve().parents):
        if (d / "schema.thrift").is_file():
            return d
    src = Path(__file__).resolve().parents[3]
    if (src / "schema.thrift").is_file():
        return src
    raise SchemaCheckError(
        f"cannot find schema.thrift at or above {here}; run inside the pt2serde repository or pass --root"
    )


# ---------------------------------------------------------------- Python side


def python_document(module: ModuleType) -> tuple[Document, list[Finding]]:
    """Describe the Structs and IntEnums of ``module`` in the IDL's terms.

    Thrift unions are subclasses of ``module.Union``, structs of ``module.Struct``, enums are IntEnums.
    ``int`` is i64, ``F64`` is double, ``Optional[T] = None`` is ``optional T`` (a union member
    must be exactly that), and a default is compared by its wire (JSON) value.
    """
    base = getattr(module, "Struct", None)
    union_base = getattr(module, "Union", None)
    f64 = getattr(module, "F64", None)
    if f64 is None:
        f64 = importlib.import_module("serde.core.schema").F64
    problems: list[Finding] = []
    classes: dict[str, type] = {}
    for obj in vars(module).values():
        if not isinstance(obj, type) or obj.__module__ != module.__name__ or obj in (base, union_base):
            continue
        if issubclass(obj, msgspec.Struct):
            if base is None or not issubclass(obj, base):
                problems.append(Finding("bad-struct", obj.__name__, f"must subclass {module.__name__}.Struct"))
                continue
        elif issubclass(obj, enum.Enum):
            if not issubclass(obj, enum.IntEnum):
                problems.append(Finding("bad-enum", obj.__name__, "schema enums must be IntEnum"))
                continue
        else:
            continue
        classes[obj.__name__] = obj
    conv = _PyTypes(classes, f64)
    out: dict[str, StructDef | EnumDef] = {}
    for name, cls in classes.items():
        if issubclass(cls, enum.IntEnum):
            out[name] = EnumDef(name, tuple((k, int(m.value)) for k, m in cls.__members__.items()))
            if len(cls.__members__) != len(cls):
                problems.append(Finding("enum-alias", name, "two members share a value; values are unique"))
        else:
            kind = "union" if union_base is not None and issubclass(cls, union_base) else "struct"
            out[name] = StructDef(name, kind, tuple(_py_fields(cls, kind, conv, problems)))
    return Document(types=out, path=module.__name__), problems


class _PyTypes:
    def __init__(self, classes: dict[str, type], f64: Any) -> None:
        self.classes = classes
        self.f64_args = set(typing.get_args(f64))

    def convert(self, ann: Any, where: str) -> tuple[Type, bool]:
        """(IDL type, is Optional) of an annotation; raises ValueError if it has no IDL equivalent."""
        if typing.get_origin(ann) is typing.Annotated:
            ann = typing.get_args(ann)[0]
        if _is_union(ann):
            args = [a for a in typing.get_args(ann) if a is not type(None)]
            optional = len(args) < len(typing.get_args(ann))
            if set(args) == self.f64_args:
                return Type("double"), optional
            if optional and len(args) == 1:
                return self.convert(args[0], where)[0], True
            raise ValueError(f"union type {ann} has no IDL equivalent (use F64 for doubles, a Union Struct otherwise)")
        return self._plain(ann, where), False

    def _plain(self, ann: Any, where: str) -> Type:
        simple = {int: "i64", bool: "bool", str: "string", bytes: "binary"}
        if ann in simple:
            return Type(simple[ann])
        if ann is float:
            raise ValueError("plain `float` cannot carry nan/inf on the wire; use F64")
        origin = typing.get_origin(ann)
        args = typing.get_args(ann)
        if origin is list and len(args) == 1:
            return Type("list", (self._inner(args[0], where),))
        if origin is dict and len(args) == 2:
            if args[0] is not str:
                raise ValueError(f"dict keys must be str (JSON object keys), not {args[0]}")
            return Type("map", (Type("string"), self._inner(args[1], where)))
        if isinstance(ann, type) and self.classes.get(ann.__name__) is ann:
            return Type(ann.__name__)
        raise ValueError(f"type {ann!r} has no IDL equivalent in this schema")

    def _inner(self, ann: Any, where: str) -> Type:
        t, optional = self.convert(ann, where)
        if optional:
            raise ValueError("Optional inside a list or map has no IDL equivalent")
        return t


def _is_union(ann: Any) -> bool:
    return typing.get_origin(ann) is typing.Union or isinstance(ann, types.UnionType)


def _py_fields(cls: type, kind: str, conv: _PyTypes, problems: list[Finding]) -> list[Field]:
    name = cls.__name__
    cfg = cls.__struct_config__
    # These options change the wire format; the IDL cannot express them.
    for opt, want in (("array_like", False), ("forbid_unknown_fields", False), ("omit_defaults", True),
                      ("tag", None)):
        if getattr(cfg, opt) != want:
            problems.append(Finding("struct-config", name, f"struct option {opt}={getattr(cfg, opt)!r}; must be {want!r}"))
    try:
        # FieldInfo.type is typing.get_type_hints(cls, include_extras=True)[name]: Annotated kept.
        infos = msgspec.structs.fields(cls)
    except (NameError, TypeError) as e:
        problems.append(Finding("bad-annotation", name, f"annotations do not resolve: {e}"))
        return []
    out: list[Field] = []
    seen_ids: dict[int, str] = {}
    for info in infos:
        where = f"{name}.{info.encode_name}"
        ann = info.type
        # Matched by class name so scratch schemas may bring their own Id class.
        meta = typing.get_args(ann)[1:] if typing.get_origin(ann) is typing.Annotated else ()
        ids = [m.value for m in meta if type(m).__name__ == "Id"]
        if len(ids) != 1 or not isinstance(ids[0], int):
            problems.append(Finding("no-id", where, "annotate as Annotated[T, Id(n)] with one thrift id"))
            continue
        fid = ids[0]
        if fid in seen_ids:
            problems.append(Finding("duplicate-id", where, f"id {fid} is also used by {name}.{seen_ids[fid]}"))
        seen_ids[fid] = info.encode_name
        try:
            ftype, optional = conv.convert(ann, where)
        except ValueError as e:
            problems.append(Finding("bad-type", where, str(e)))
            continue
        default = _py_default(info)
        if optional:
            if default is not None:
                # Optional without a None default has no IDL spelling.
                problems.append(Finding("optional-default", where, "an Optional field must default to None"))
                continue
            default = NO_DEFAULT
        if kind == "union":
            if not optional:
                problems.append(Finding("union-member", where, "a union member must be Optional[...] = None"))
                continue
            optional = False
        wire_default = default if default is NO_DEFAULT else msgspec.to_builtins(default)
        out.append(Field(fid, info.encode_name, ftype, optional, wire_default))
    return out


def _py_default(info: msgspec.structs.FieldInfo) -> Any:
    if info.default is not msgspec.NODEFAULT:
        return info.default
    if info.default_factory is not msgspec.NODEFAULT:
        return info.default_factory()
    return NO_DEFAULT


# ---------------------------------------------------------------- IDL vs Python


def compare_idl_python(idl: Document, py: Document) -> list[Finding]:
    """Every disagreement between the IDL and the Python description, type by type."""
    out: list[Finding] = []
    for name in sorted(set(idl.types) | set(py.types)):
        t, p = idl.types.get(name), py.types.get(name)
        if p is None:
            out.append(Finding("missing-in-python", name, f"{t.kind} {name} is in schema.thrift but not in {py.path}"))
        elif t is None:
            out.append(Finding("missing-in-thrift", name, f"{p.kind} {name} is in {py.path} but not in schema.thrift"))
        else:
            out += compare_type(t, p)
    return out


def compare_type(t: StructDef | EnumDef, p: StructDef | EnumDef) -> list[Finding]:
    """Disagreements between one IDL type ``t`` and its Python description ``p``."""
    name = t.name
    if t.kind != p.kind:
        return [Finding("kind-mismatch", name, f"schema.thrift has a {t.kind}, Python a {p.kind}")]
    out: list[Finding] = []
    if isinstance(t, EnumDef):
        tv, pv = dict(t.values), dict(p.values)
        for m in sorted(set(tv) | set(pv), key=lambda m: (tv.get(m, pv.get(m)), m)):
            where = f"{name}.{m}"
            if m not in pv:
                out.append(Finding("missing-in-python", where, f"enum member {m} = {tv[m]} is not in Python"))
            elif m not in tv:
                out.append(Finding("missing-in-thrift", where, f"enum member {m} = {pv[m]} is not in schema.thrift"))
            elif tv[m] != pv[m]:
                out.append(Finding("enum-value-mismatch", where, f"schema.thrift says {tv[m]}, Python says {pv[m]}"))
        return out
    tf, pf = t.by_name(), p.by_name()
    member = "member" if t.kind == "union" else "field"
    for fname in sorted(set(tf) | set(pf), key=lambda n: ((tf.get(n) or pf[n]).id, n)):
        a, b = tf.get(fname), pf.get(fname)
        where = f"{name}.{fname}"
        if b is None:
            out.append(Finding("missing-in-python", where, f"{member} `{_decl(a)}` is not in Python"))
        elif a is None:
            out.append(Finding("missing-in-thrift", where, f"{member} `{_decl(b)}` is not in schema.thrift"))
        else:
            if a.id != b.id:
                out.append(Finding("id-mismatch", where, f"thrift id {a.id} in schema.thrift, Id({b.id}) in Python"))
            if _widen(a.type) != b.type:
                out.append(Finding("type-mismatch", where, f"schema.thrift says {a.type}, Python says {b.type}"))
            if a.optional != b.optional:
                out.append(
                    Finding("optional-mismatch", where,
                            f"schema.thrift says {'optional' if a.optional else 'required'}, Python says "
                            f"{'Optional[...] = None' if b.optional else 'required'}")
                )
            if not _same_default(a, b):
                out.append(
                    Finding("default-mismatch", where,
                            f"default in schema.thrift is {_dflt(a)}, in Python {_dflt(b)} (writers omit a "
                            "field equal to its default, so both sides must agree)")
                )
    return out


def _widen(t: Type) -> Type:
    # Python has one int type: i32 and i64 both mirror it.
    if t.name == "i32":
        return Type("i64")
    return Type(t.name, tuple(_widen(a) for a in t.args)) if t.args else t


def _same_default(a: Field, b: Field) -> bool:
    if a.has_default != b.has_default:
        return False
    # Compare wire bytes: keeps 1 vs 1.0 vs true distinct, as they are on the wire.
    return not a.has_default or msgspec.json.encode(a.default) == msgspec.json.encode(b.default)


def _dflt(f: Field) -> str:
    return msgspec.json.encode(f.default).decode() if f.has_default else "(none)"


def _decl(f: Field) -> str:
    d = f"{f.id}: {'optional ' if f.optional else ''}{f.type} {f.name}"
    return d + (f" = {_dflt(f)}" if f.has_default else "")


# ---------------------------------------------------------------- current vs released


def classify(old: Document, new: Document, retired: dict[str, list[int]] | None = None) -> list[Change]:
    """Changes from the released ``old`` to the current ``new``, each compatible or breaking.

    ``retired`` maps a type to field ids / enum values removed in earlier releases (never reusable).
    """
    retired = retired or {}
    out: list[Change] = []
    for name in sorted(set(old.types) | set(new.types)):
        o, n = old.types.get(name), new.types.get(name)
        if o is None:
            out.append(Change(COMPATIBLE, "type-added", name, f"new {n.kind} {name}"))
        elif n is None:
            out.append(Change(BREAKING, "type-removed", name, f"{o.kind} {name} was removed"))
        elif o.kind != n.kind:
            out.append(Change(BREAKING, "kind-changed", name, f"was a {o.kind}, now a {n.kind}"))
        elif isinstance(o, EnumDef):
            out += _classify_enum(o, n, set(retired.get(name, ())))
        else:
            out += _classify_struct(o, n, set(retired.get(name, ())))
    return out


def _classify_struct(o: StructDef, n: StructDef, retired: set[int]) -> list[Change]:
    name, out = o.name, []
    oi, ni, on, nn = o.by_id(), n.by_id(), o.by_name(), n.by_name()
    member = "member" if o.kind == "union" else "field"
    for fid in sorted(set(oi) | set(ni)):
        a, b = oi.get(fid), ni.get(fid)
        if a is not None and b is not None:
            where = f"{name}.{b.name}"
            if a.name != b.name:
                if a.type == b.type:
                    out.append(Change(BREAKING, "field-renamed", f"{name}.{a.name}",
                                      f"renamed to {b.name} (id {fid}); the JSON key changes, old artifacts break"))
                else:
                    out.append(Change(BREAKING, "id-reused", where,
                                      f"id {fid} was `{_decl(a)}`, now `{_decl(b)}`; ids are never reused, "
                                      "take a new id"))
                continue
            if a.type != b.type:
                out.append(Change(BREAKING, "type-changed", where, f"type changed from {a.type} to {b.type}"))
            if a.optional != b.optional:
                how = "became optional" if b.optional else "became required"
                out.append(Change(BREAKING, "optional-changed", where,
                                  f"{how}; readers on the other side of the change disagree on omitted values"))
            if not _same_default(a, b):
                out.append(Change(BREAKING, "default-changed", where,
                                  f"default changed from {_dflt(a)} to {_dflt(b)}; an omitted field now "
                                  "means something else"))
        elif a is not None:
            if a.name in nn:
                out.append(Change(BREAKING, "id-changed", f"{name}.{a.name}",
                                  f"thrift id changed from {a.id} to {nn[a.name].id}; ids are permanent"))
            else:
                out.append(Change(BREAKING, f"{member}-removed", f"{name}.{a.name}",
                                  f"{member} `{_decl(a)}` was removed"))
        else:
            where = f"{name}.{b.name}"
            if b.name in on:
                continue  # reported above as id-changed
            if fid in retired:
                out.append(Change(BREAKING, "id-reused", where,
                                  f"id {fid} belonged to a field removed in an earlier release; take a new id"))
            elif o.kind == "union":
                out.append(Change(COMPATIBLE, "member-added", where, f"new union member `{_decl(b)}`"))
            elif b.optional or b.has_default:
                what = "optional field" if b.optional else "field with a default"
                out.append(Change(COMPATIBLE, "field-added", where, f"new {what} `{_decl(b)}`"))
            else:
                out.append(Change(BREAKING, "required-field-added", where,
                                  f"new required field `{_decl(b)}`; old artifacts lack it (make it optional "
                                  "or give it a default for a minor bump)"))
    return out


def _classify_enum(o: EnumDef, n: EnumDef, retired: set[int]) -> list[Change]:
    name, out = o.name, []
    ov, nv = dict(o.values), dict(n.values)
    old_by_value = {v: k for k, v in o.values}
    new_by_value = {v: k for k, v in n.values}
    for m in sorted(set(ov) | set(nv), key=lambda m: (ov.get(m, nv.get(m)), m)):
        where = f"{name}.{m}"
        if m in ov and m in nv:
            if ov[m] != nv[m]:
                out.append(Change(BREAKING, "enum-renumbered", where, f"value changed from {ov[m]} to {nv[m]}"))
        elif m in ov:
            other = new_by_value.get(ov[m])
            if other is not None and other not in ov:
                out.append(Change(BREAKING, "enum-renamed", where, f"value {ov[m]} is now named {other}"))
            else:
                out.append(Change(BREAKING, "enum-value-removed", where, f"member {m} = {ov[m]} was removed"))
        elif nv[m] in old_by_value:
            continue  # reported as enum-renamed from the old name's side
        elif nv[m] in retired:
            out.append(Change(BREAKING, "enum-value-reused", where,
                              f"value {nv[m]} belonged to a member removed in an earlier release"))
        else:
            out.append(Change(COMPATIBLE, "enum-value-added", where, f"new member {m} = {nv[m]}"))
    return out


# ---------------------------------------------------------------- snapshot


def snapshot_path(root: str | Path) -> Path:
    return Path(root) / SNAPSHOT_RELPATH


def read_snapshot(path: str | Path) -> tuple[Document, dict[str, list[int]]]:
    """Load and verify a snapshot: (released schema, retired ids). Raises SchemaCheckError."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise SchemaCheckError(
            f"{path}: no schema snapshot; record the released schema with `pt2serde schema snapshot`"
        ) from None
    except OSError as e:
        raise SchemaCheckError(f"{path}: cannot read: {e.strerror}") from None
    try:
        data = msgspec.json.decode(raw)
        released = data["released"]
        stored = data["sha256"]
    except (msgspec.DecodeError, KeyError, TypeError) as e:
        raise SchemaCheckError(f"{path}: not a schema snapshot ({e}); regenerate with `pt2serde schema snapshot`") from None
    if not isinstance(released, dict) or _digest(released) != stored:
        raise SchemaCheckError(
            f"{path}: checksum mismatch: the snapshot was edited by hand. Restore it from git; it is only "
            "ever written by `pt2serde schema snapshot` when a version is released"
        )
    try:
        doc = Document.from_json(released, where=str(path))
        retired = {str(k): sorted(int(x) for x in v) for k, v in released.get("retired", {}).items()}
    except (ThriftError, TypeError, ValueError, AttributeError) as e:
        raise SchemaCheckError(f"{path}: malformed snapshot: {e}") from None
    return doc, retired


def write_snapshot(root: str | Path, *, force: bool = False, **check_kwargs: Any) -> tuple[Path, Report]:
    """Record the current schema as the released one (run when a version is released).

    Refuses (SchemaCheckError) when the check fails, or when it would change a snapshot of the same
    version (a released schema never changes; pass ``force`` only for a version not yet published).
    Ids and enum values that the release removes are added to ``retired``.
    """
    root = Path(root)
    path = Path(check_kwargs.pop("snapshot", None) or snapshot_path(root))
    thrift_path = Path(check_kwargs.get("thrift") or root / "schema.thrift")
    report = check(root, snapshot=path, **check_kwargs)
    blocking = [p for p in report.problems if p.code not in ("no-snapshot",)] + report.disagreements
    if blocking and not force:
        raise SchemaCheckError(
            "refusing to snapshot a schema that fails `pt2serde schema check`:\n" + report.render()
        )
    doc = parse_file(thrift_path)
    if doc.version is None:
        raise SchemaCheckError(f"{thrift_path}: no `// SCHEMA_VERSION X.Y` header; cannot snapshot")
    retired: dict[str, set[int]] = {}
    if path.exists() and "snapshot-invalid" not in report.codes():
        old, old_retired = read_snapshot(path)
        if old.version == doc.version and report.changes and not force:
            raise SchemaCheckError(
                f"{path}: the snapshot of {_v(old.version)} differs from schema.thrift but the version is the "
                "same; bump the version (a released schema never changes) or pass --force if "
                f"{_v(old.version)} was never published"
            )
        retired = {k: set(v) for k, v in old_retired.items()}
        for name, t in old.types.items():
            ids = _ids(t, t.kind)
            now = _ids(doc.types.get(name), t.kind)
            gone = ids - now
            if gone:
                retired.setdefault(name, set()).update(gone)
    released = doc.to_json()
    released["retired"] = {k: sorted(v) for k, v in sorted(retired.items()) if v}
    body = {"about": _ABOUT, "sha256": _digest(released), "released": released}
    path.parent.mkdir(parents=True, exist_ok=True)
    text = msgspec.json.format(msgspec.json.encode(body, order="deterministic"), indent=2) + b"\n"
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(text)
    tmp.replace(path)
    return path, report


def _ids(t: StructDef | EnumDef | None, kind: str) -> set[int]:
    if t is None or t.kind != kind:
        return set()
    return {v for _, v in t.values} if isinstance(t, EnumDef) else {f.id for f in t.fields}


def _digest(released: dict[str, Any]) -> str:
    return hashlib.sha256(msgspec.json.encode(released, order="deterministic")).hexdigest()
