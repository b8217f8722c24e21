"""Parser for the subset of the Thrift IDL that ``schema.thrift`` uses.

Supported: ``namespace``, ``enum`` (every value explicit), ``struct``, ``union``, fields
``ID: [optional] TYPE name [= CONST];``, the types i32, i64, double, bool, string, binary,
``list<T>``, ``map<string, T>`` and named types (forward references allowed), ``//``, ``#`` and
``/* */`` comments, and the header comment ``// SCHEMA_VERSION X.Y``. Anything else is an error
that names ``file:line:col``. The result is a plain :class:`Document` with a canonical JSON form
(used by the schema snapshot) that round-trips through :meth:`Document.from_json`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from serde.errors import SerializeError

__all__ = [
    "ThriftError",
    "Type",
    "Field",
    "StructDef",
    "EnumDef",
    "Document",
    "BASE_TYPES",
    "NO_DEFAULT",
    "parse",
    "parse_file",
    "parse_type",
]

BASE_TYPES = frozenset({"i32", "i64", "double", "bool", "string", "binary"})
_CONTAINERS = {"list": 1, "map": 2}
# Thrift features outside our subset: named so the error can say so instead of "unexpected token".
_UNSUPPORTED = frozenset(
    {"set", "const", "typedef", "include", "cpp_include", "exception", "service", "required",
     "byte", "i8", "i16", "uuid", "senum", "extends"}
)
_VERSION_RE = re.compile(r"//\s*SCHEMA_VERSION\s+(\d+)\.(\d+)\s*")


class ThriftError(SerializeError):
    """``schema.thrift`` is not valid in our IDL subset (the message names file:line:col)."""


# ---------------------------------------------------------------- data model


@dataclass(frozen=True)
class Type:
    """A field type: a base type, ``list``/``map`` with ``args``, or a named struct/union/enum."""

    name: str
    args: tuple[Type, ...] = ()

    def __str__(self) -> str:
        if not self.args:
            return self.name
        return f"{self.name}<{', '.join(str(a) for a in self.args)}>"

    def named(self) -> list[str]:
        """Every named (non-base, non-container) type this type mentions."""
        out: list[str] = []
        stack = [self]
        while stack:
            t = stack.pop()
            if t.args:
                stack.extend(reversed(t.args))
            elif t.name not in BASE_TYPES:
                out.append(t.name)
        return out


# Field.default when the IDL declares none (None cannot be the marker: it is not a thrift constant).
NO_DEFAULT: Any = object()


@dataclass(frozen=True)
class Field:
    """One struct field or union member. ``default`` is the wire (JSON) value, if declared."""

    id: int
    name: str
    type: Type
    optional: bool = False
    default: Any = NO_DEFAULT
    line: int = field(default=0, compare=False)

    @property
    def has_default(self) -> bool:
        return self.default is not NO_DEFAULT


@dataclass(frozen=True)
class StructDef:
    """A ``struct`` or ``union`` (``kind``); fields in declaration order."""

    name: str
    kind: str
    fields: tuple[Field, ...]
    line: int = field(default=0, compare=False)

    def by_id(self) -> dict[int, Field]:
        return {f.id: f for f in self.fields}

    def by_name(self) -> dict[str, Field]:
        return {f.name: f for f in self.fields}


@dataclass(frozen=True)
class EnumDef:
    """An ``enum``: member name -> explicit integer value, in declaration order."""

    name: str
    values: tuple[tuple[str, int], ...]
    line: int = field(default=0, compare=False)

    kind = "enum"


@dataclass(frozen=True)
class Document:
    """A parsed IDL file."""

    types: dict[str, StructDef | EnumDef]
    version: tuple[int, int] | None = None
    namespaces: dict[str, str] = field(default_factory=dict)
    path: str = field(default="<string>", compare=False)

    def to_json(self) -> dict[str, Any]:
        """Canonical plain-JSON form: types sorted by name, fields by id, no source positions."""
        types: dict[str, Any] = {}
        for name in sorted(self.types):
            t = self.types[name]
            if isinstance(t, EnumDef):
                types[name] = {"kind": "enum", "values": dict(sorted(t.values, key=lambda kv: kv[1]))}
                continue
            fields = []
            for f in sorted(t.fields, key=lambda f: f.id):
                d: dict[str, Any] = {"id": f.id, "name": f.name, "type": str(f.type)}
                if f.optional:
                    d["optional"] = True
                if f.has_default:
                    d["default"] = f.default
                fields.append(d)
            types[name] = {"kind": t.kind, "fields": fields}
        return {
            "version": None if self.version is None else list(self.version),
            "namespaces": dict(sorted(self.namespaces.items())),
            "types": types,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any], *, where: str = "snapshot") -> Document:
        """Inverse of :meth:`to_json`. Raises ThriftError on a malformed document."""
        try:
            version = data["version"]
            types: dict[str, StructDef | EnumDef] = {}
            for name, t in data["types"].items():
                if t["kind"] == "enum":
                    types[name] = EnumDef(name, tuple((k, int(v)) for k, v in t["values"].items()))
                elif t["kind"] in ("struct", "union"):
                    fields = tuple(
                        Field(
                            id=int(f["id"]),
                            name=str(f["name"]),
                            type=parse_type(f["type"], where=f"{where}: {name}.{f['name']}"),
                            optional=bool(f.get("optional", False)),
                            default=f.get("default", NO_DEFAULT),
                        )
                        for f in t["fields"]
                    )
                    types[name] = StructDef(name, t["kind"], fields)
                else:
                    raise ValueError(f"type {name}: unknown kind {t['kind']!r}")
            return cls(
                types=types,
                version=None if version is None else (int(version[0]), int(version[1])),
                namespaces=dict(data.get("namespaces", {})),
                path=where,
            )
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
            raise ThriftError(
                f"{where}: not a valid schema document ({type(e).__name__}: {e}). "
                "Regenerate it with `pt2serde schema snapshot`."
            ) from None


# ---------------------------------------------------------------- public entry points


def parse_file(path: str | Path) -> Document:
    """Parse an IDL file. Raises ThriftError (with file:line:col) on anything outside the subset."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise ThriftError(f"{p}: cannot read the IDL file: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise ThriftError(f"{p}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    return parse(text, filename=str(p))


def parse(text: str, *, filename: str = "<string>") -> Document:
    """Parse IDL source text into a :class:`Document` and check it is self-consistent."""
    tokens, version = _tokenize(text, filename)
    doc = _Parser(tokens, filename).document(version)
    _resolve(doc, filename)
    return doc


def parse_type(text: str, *, where: str = "<type>") -> Type:
    """Parse a type expression such as ``map<string, list<SymInt>>``."""
    tokens, _ = _tokenize(text, where)
    p = _Parser(tokens, where)
    t = p.type_()
    p.expect_end()
    return t


# ---------------------------------------------------------------- tokenizer


@dataclass(frozen=True)
class _Tok:
    kind: str  # "ident", "int", "float", "str", "punct", "end"
    text: str
    line: int
    col: int


_TOKEN_RE = re.compile(
    r"""
    (?P<ws>[ \t\r\n]+)
  | (?P<lcomment>(?://|\#)[^\n]*)
  | (?P<bcomment>/\*.*?\*/)
  | (?P<float>[+-]?(?:\d+\.\d*|\.\d+)(?:[eE][+-]?\d+)?|[+-]?\d+[eE][+-]?\d+)
  | (?P<int>[+-]?(?:0[xX][0-9a-fA-F]+|\d+))
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)
  | (?P<str>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
  | (?P<punct>[{}<>,;:=\[\]()])
    """,
    re.VERBOSE | re.DOTALL,
)


def _tokenize(text: str, filename: str) -> tuple[list[_Tok], tuple[int, int] | None]:
    tokens: list[_Tok] = []
    version: tuple[int, int] | None = None
    version_at: tuple[int, int] | None = None
    pos, line, line_start, n = 0, 1, 0, len(text)
    while pos < n:
        m = _TOKEN_RE.match(text, pos)
        col = pos - line_start + 1
        if m is None:
            if text.startswith("/*", pos):
                raise ThriftError(f"{filename}:{line}:{col}: unterminated /* comment")
            raise ThriftError(f"{filename}:{line}:{col}: unexpected character {text[pos]!r}")
        kind = m.lastgroup
        s = m.group()
        if kind == "lcomment":
            vm = _VERSION_RE.fullmatch(s)
            if vm is not None:
                if version is not None:
                    raise ThriftError(
                        f"{filename}:{line}:{col}: second SCHEMA_VERSION header "
                        f"(first at line {version_at[0]}); keep exactly one"
                    )
                version, version_at = (int(vm.group(1)), int(vm.group(2))), (line, col)
        elif kind not in ("ws", "bcomment"):
            tokens.append(_Tok(kind, s, line, col))
        nl = s.count("\n")
        if nl:
            line += nl
            line_start = pos + s.rindex("\n") + 1
        pos = m.end()
    tokens.append(_Tok("end", "", line, pos - line_start + 1))
    return tokens, version


# ---------------------------------------------------------------- parser


class _Parser:
    def __init__(self, tokens: list[_Tok], filename: str) -> None:
        self.toks = tokens
        self.i = 0
        self.filename = filename

    # -- token helpers

    def peek(self) -> _Tok:
        return self.toks[self.i]

    def next(self) -> _Tok:
        t = self.toks[self.i]
        if t.kind != "end":
            self.i += 1
        return t

    def error(self, tok: _Tok, msg: str) -> ThriftError:
        return ThriftError(f"{self.filename}:{tok.line}:{tok.col}: {msg}")

    def describe(self, tok: _Tok) -> str:
        return "end of file" if tok.kind == "end" else repr(tok.text)

    def expect(self, text: str) -> _Tok:
        t = self.next()
        if t.text != text or t.kind not in ("punct", "ident"):
            raise self.error(t, f"expected {text!r}, found {self.describe(t)}")
        return t

    def accept(self, text: str) -> bool:
        t = self.peek()
        if t.text == text and t.kind in ("punct", "ident"):
            self.i += 1
            return True
        return False

    def ident(self, what: str) -> _Tok:
        t = self.next()
        if t.kind != "ident" or "." in t.text:
            raise self.error(t, f"expected {what}, found {self.describe(t)}")
        if t.text in _UNSUPPORTED:
            raise self.error(t, f"{t.text!r} is outside the IDL subset pt2serde supports")
        return t

    def integer(self, what: str) -> int:
        t = self.next()
        if t.kind != "int":
            raise self.error(t, f"expected {what} (an integer), found {self.describe(t)}")
        return int(t.text, 0)

    def expect_end(self) -> None:
        t = self.peek()
        if t.kind != "end":
            raise self.error(t, f"unexpected {self.describe(t)} after the type")

    # -- grammar

    def document(self, version: tuple[int, int] | None) -> Document:
        types: dict[str, StructDef | EnumDef] = {}
        namespaces: dict[str, str] = {}
        while (t := self.peek()).kind != "end":
            if t.kind != "ident":
                raise self.error(t, f"expected a definition (struct, union, enum), found {self.describe(t)}")
            if t.text == "namespace":
                self.next()
                lang = self.ident("a namespace language").text
                namespaces[lang] = self._dotted("a namespace")
                continue
            if t.text in ("struct", "union"):
                d: StructDef | EnumDef = self.struct()
            elif t.text == "enum":
                d = self.enum()
            elif t.text in _UNSUPPORTED:
                raise self.error(t, f"{t.text!r} is outside the IDL subset pt2serde supports")
            else:
                raise self.error(t, f"expected a definition (struct, union, enum), found {self.describe(t)}")
            if d.name in types:
                raise self.error(t, f"type {d.name} is defined twice (first at line {types[d.name].line})")
            types[d.name] = d
        return Document(types=types, version=version, namespaces=namespaces, path=self.filename)

    def _dotted(self, what: str) -> str:
        t = self.next()
        if t.kind != "ident":
            raise self.error(t, f"expected {what}, found {self.describe(t)}")
        return t.text

    def _sep(self) -> None:
        if not self.accept(","):
            self.accept(";")

    def enum(self) -> EnumDef:
        start = self.next()
        name = self.ident("an enum name").text
        self.expect("{")
        values: list[tuple[str, int]] = []
        names: dict[str, int] = {}
        nums: dict[int, str] = {}
        while not self.accept("}"):
            mt = self.ident(f"an enum member name or '}}' in enum {name}")
            if not self.accept("="):
                raise self.error(self.peek(), f"enum {name}.{mt.text}: give an explicit value (`= N`)")
            vt = self.peek()
            v = self.integer(f"the value of {name}.{mt.text}")
            if mt.text in names:
                raise self.error(mt, f"enum {name}: member {mt.text} is declared twice")
            if v in nums:
                raise self.error(vt, f"enum {name}: value {v} is used by both {nums[v]} and {mt.text}")
            names[mt.text] = v
            nums[v] = mt.text
            values.append((mt.text, v))
            self._sep()
        return EnumDef(name, tuple(values), line=start.line)

    def struct(self) -> StructDef:
        start = self.next()
        kind = start.text
        name = self.ident(f"a {kind} name").text
        self.expect("{")
        fields: list[Field] = []
        ids: dict[int, str] = {}
        names: set[str] = set()
        while not self.accept("}"):
            it = self.peek()
            fid = self.integer(f"a field id or '}}' in {kind} {name}")
            if fid <= 0:
                raise self.error(it, f"{name}: field id {fid} must be a positive integer")
            self.expect(":")
            optional = False
            ot = self.peek()
            if ot.kind == "ident" and ot.text == "required":
                raise self.error(ot, f"{name}: drop `required`: fields are required unless marked `optional`")
            if ot.kind == "ident" and ot.text == "optional":
                self.next()
                if kind == "union":
                    raise self.error(ot, f"union {name}: members are implicitly optional; drop `optional`")
                optional = True
            ftype = self.type_()
            nt = self.ident("a field name")
            where = f"{name}.{nt.text}"
            if fid in ids:
                raise self.error(it, f"{where}: field id {fid} is already used by {name}.{ids[fid]}")
            if nt.text in names:
                raise self.error(nt, f"{where}: field name is declared twice")
            default = NO_DEFAULT
            if self.accept("="):
                if kind == "union":
                    raise self.error(self.peek(), f"union {name}: members cannot have defaults")
                default = self.const(where)
            ids[fid] = nt.text
            names.add(nt.text)
            fields.append(Field(fid, nt.text, ftype, optional, default, line=it.line))
            self._sep()
        return StructDef(name, kind, tuple(fields), line=start.line)

    def type_(self) -> Type:
        t = self.next()
        if t.kind != "ident":
            raise self.error(t, f"expected a type, found {self.describe(t)}")
        if t.text in _UNSUPPORTED:
            raise self.error(t, f"type {t.text!r} is outside the IDL subset pt2serde supports")
        arity = _CONTAINERS.get(t.text)
        if arity is None:
            if "." in t.text:
                raise self.error(t, f"qualified type names ({t.text}) are not supported")
            return Type(t.text)
        self.expect("<")
        args = [self.type_()]
        for _ in range(arity - 1):
            self.expect(",")
            args.append(self.type_())
        self.expect(">")
        if t.text == "map" and args[0] != Type("string"):
            raise self.error(t, f"map keys must be string (JSON object keys), not {args[0]}")
        return Type(t.text, tuple(args))

    def const(self, where: str) -> Any:
        t = self.next()
        if t.kind == "int":
            return int(t.text, 0)
        if t.kind == "float":
            return float(t.text)
        if t.kind == "str":
            return _unquote(t.text)
        if t.kind == "ident":
            if t.text in ("true", "false"):
                return t.text == "true"
            if "." in t.text:
                return _EnumRef(t.text, t.line, t.col)
        if t.text == "[":
            items: list[Any] = []
            while not self.accept("]"):
                items.append(self.const(where))
                self._sep()
            return items
        if t.text == "{":
            out: dict[str, Any] = {}
            while not self.accept("}"):
                kt = self.peek()
                k = self.const(where)
                if not isinstance(k, str):
                    raise self.error(kt, f"{where}: map default keys must be strings")
                self.expect(":")
                out[k] = self.const(where)
                self._sep()
            return out
        raise self.error(t, f"{where}: expected a constant default value, found {self.describe(t)}")


@dataclass(frozen=True)
class _EnumRef:
    """``Enum.MEMBER`` in a default; resolved to its integer (wire) value after parsing."""

    text: str
    line: int
    col: int


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'"}


def _unquote(s: str) -> str:
    body = s[1:-1]
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), body)


# ---------------------------------------------------------------- resolution


def _resolve(doc: Document, filename: str) -> None:
    """Check named types exist; turn enum-member defaults into integers; make double defaults floats."""
    for tname, t in doc.types.items():
        if isinstance(t, EnumDef):
            continue
        fixed: list[Field] = []
        for f in t.fields:
            for ref in f.type.named():
                if ref not in doc.types:
                    raise ThriftError(
                        f"{filename}:{f.line}: {tname}.{f.name}: unknown type {ref!r}; "
                        "define it (struct, union or enum) or fix the spelling"
                    )
            if f.has_default:
                f = Field(f.id, f.name, f.type, f.optional, _resolve_const(doc, f, tname, filename), f.line)
            fixed.append(f)
        doc.types[tname] = StructDef(t.name, t.kind, tuple(fixed), line=t.line)


def _resolve_const(doc: Document, f: Field, tname: str, filename: str) -> Any:
    def fix(v: Any, ty: Type) -> Any:
        if isinstance(v, _EnumRef):
            enum_name, _, member = v.text.rpartition(".")
            e = doc.types.get(enum_name)
            values = dict(e.values) if isinstance(e, EnumDef) else {}
            if member not in values:
                raise ThriftError(f"{filename}:{v.line}:{v.col}: {tname}.{f.name}: unknown enum member {v.text}")
            return values[member]
        if ty.name == "double" and isinstance(v, int) and not isinstance(v, bool):
            return float(v)
        if ty.name == "list" and isinstance(v, list):
            return [fix(x, ty.args[0]) for x in v]
        if ty.name == "map" and isinstance(v, dict):
            return {k: fix(x, ty.args[1]) for k, x in v.items()}
        return v

    return fix(f.default, f.type)
