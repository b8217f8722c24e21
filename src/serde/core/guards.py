"""torch.export input guards: Python guard text <-> ``schema.InputGuards`` (torch-free).

torch keeps the guards it recorded while tracing as Python source (``ep._guards_code``, e.g.
``"L['x'].size()[0] == ((-1) + L['y'].size()[0])"``) and ``ep.module()`` compiles that text.
An artifact is untrusted, so we never store text that will be compiled: saving parses each guard
with an allow-list over :func:`ast.parse` (which only parses) into an ``Expr`` tree over a table
of input sources, and loading prints the text back from the validated tree with our own printer.
Whatever we print is checked once more by the same allow-list before torch sees it.

Saving refuses a guard it cannot express instead of dropping it: a dropped guard would make the
loaded program accept inputs the exported one rejects, silently, which is the bug this fixes.
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from serde.errors import MalformedArtifactError, UnsafeArtifactError, UnsupportedConstructError

from . import schema, wire
from .exprs import expr_symbols
from .limits import DEFAULT_LIMITS
from .memo import Memo
from .symbolic import MAX_EXPR_DEPTH

__all__ = [
    "MAX_GUARDS", "MAX_GUARD_CHARS", "ATTR", "SPELLINGS", "SourceKey", "guards_from_code", "guards_to_code",
    "canonical_guards", "source_key", "source_text", "guard_texts", "input_paths", "flat_input_paths",
    "STRICT_FLAT_ARGS", "source_resolver", "input_arguments", "input_leaves", "source_problem", "failing_guard",
]

E = schema.Expr
P = schema.GuardProperty

MAX_GUARDS = 10_000
MAX_GUARD_CHARS = 16 * 1024
_MAX_SOURCES = 10_000
_MAX_PATH = 32
_MAX_INDEX = 1 << 31
_INT_LIMIT = 1 << 63

# A source as a hashable, sortable key: (path, property, dim); path items are str (a dict key),
# int (an index) or an attribute as "." + its name (a dataclass or namedtuple field): names never
# hold a ".", so the two cannot be confused.
SourceKey = tuple[tuple[str | int, ...], int, int]
ATTR = "."

# A name key must look like a plain identifier and not a dunder: it is printed inside quotes,
# but keeping it boring means no key can ever reach anything but a dict lookup.
_KEY_RE = re.compile(r"(?!__)[A-Za-z_][A-Za-z0-9_]{0,199}\Z")
# Characters any guard torch prints can contain; everything else is refused before parsing.
_ALLOWED_CHARS = re.compile(r"[A-Za-z0-9_ ()\[\]'.,+\-*/%<>=!&|^]*\Z")
_SYMBOL_RE = re.compile(r"g(0|[1-9][0-9]{0,5})\Z")

_BINOPS: dict[type, str] = {
    ast.Add: "add", ast.Mult: "mul", ast.Div: "float_true_div", ast.FloorDiv: "floor_div",
    ast.Mod: "python_mod", ast.Pow: "pow", ast.BitAnd: "bitwise_and", ast.BitOr: "bitwise_or",
    ast.BitXor: "bitwise_xor",
}
_CMPOPS: dict[type, str] = {
    ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge",
}
# Functions torch's ShapeGuardPythonPrinter emits, with their Expr member and arity (min, max).
# torch 2.13 prints sympy's Max/Min as the builtins, n-ary; 2.14 as torch.sym_max/sym_min, binary
# and nested to the right (max(a, b, c) is torch.sym_max(a, torch.sym_max(b, c))), since the
# builtins fail on unbacked sizes. Both spellings parse to one n-ary tree (nested max/min of the
# same kind are merged), so an artifact's bytes do not depend on the torch that wrote it.
_CALLS: dict[str, tuple[str, int, int]] = {
    "abs": ("abs", 1, 1), "max": ("max", 2, 64), "min": ("min", 2, 64),
    "torch.sym_max": ("max", 2, 2), "torch.sym_min": ("min", 2, 2),
    "math.floor": ("floor_to_int", 1, 1), "math.ceil": ("ceil_to_int", 1, 1),
    "math.trunc": ("trunc_to_int", 1, 1), "torch.sym_float": ("to_float", 1, 1),
    "round": ("round_to_int", 1, 1),
}
_MAX_MIN_ARITY = 64
# How max/min print: "builtin" as torch 2.13 writes them, "sym" as torch 2.14 does. A loaded
# program's guards are printed the way the running torch prints its own, so that its guard
# function compiles there and fails with the message torch's would.
SPELLINGS = ("builtin", "sym")
_MAX_MIN_TEXT = {"builtin": {"max": "max", "min": "min"}, "sym": {"max": "torch.sym_max", "min": "torch.sym_min"}}
_OPAQUE: dict[str, str] = {"torch._sym_sqrt": "sqrt", **{f"math.{f}": f for f in (
    "cos", "cosh", "sin", "sinh", "tan", "tanh", "asin", "acos", "atan", "log2")}}
_OPAQUE_TEXT = {fn: text for text, fn in _OPAQUE.items()}
_CALL_TEXT = {m: text for text, (m, _, _) in _CALLS.items() if m not in ("max", "min")}
_NAMED_CONSTANTS = {"math.inf": schema.ExprConstant.INFINITY, "math.nan": schema.ExprConstant.NAN}
_CONSTANT_TEXT = {
    schema.ExprConstant.TRUE: "True", schema.ExprConstant.FALSE: "False",
    schema.ExprConstant.INFINITY: "math.inf", schema.ExprConstant.NEG_INFINITY: "(-math.inf)",
    schema.ExprConstant.NAN: "math.nan",
}
_PROPERTY_TEXT = {P.SIZE: ".size()[{}]", P.STRIDE: ".stride()[{}]", P.STORAGE_OFFSET: ".storage_offset()"}
_INFIX = {"add": " + ", "mul": " * ", "float_true_div": " / ", "floor_div": " // ", "python_mod": " % ",
          "pow": " ** ", "bitwise_and": " & ", "bitwise_or": " | ", "bitwise_xor": " ^ ",
          "eq": " == ", "ne": " != ", "lt": " < ", "le": " <= ", "gt": " > ", "ge": " >= ",
          "logical_and": " and ", "logical_or": " or "}
_BINARY_ONLY = {"float_true_div", "floor_div", "python_mod", "pow", "eq", "ne", "lt", "le", "gt", "ge"}


def guards_from_code(codes: list[str], *, where: str = "guards",
                     resolve: Callable[[SourceKey], SourceKey] | None = None) -> schema.InputGuards | None:
    """Parse torch guard text into numbered ``InputGuards`` (``None`` when empty), checks in
    torch's order.

    ``resolve`` maps each source to the form to store (and raises when it names no input).

    Raises:
        UnsupportedConstructError: a guard uses something outside the allow-list (names the guard
            and the reason); the program cannot be saved without losing that input check.
    """
    if len(codes) > MAX_GUARDS:
        raise UnsupportedConstructError(f"{where}: {len(codes)} guards, more than the {MAX_GUARDS} we store")
    if not codes:
        return None
    for i, c in enumerate(codes):
        if type(c) is not str:  # cannot key the memo below: the parser refuses it, naming the guard
            _Parser(where).guard(c, f"{where}[{i}]")
    texts = (where, tuple(codes))
    parsed = _PARSED.get(texts)
    if parsed is None:
        parser = _Parser(where)
        trees = [parser.guard(c, f"{where}[{i}]") for i, c in enumerate(codes)]
        parsed = _PARSED.remember(texts, (tuple(parser.sources), tuple(trees)))
    raw, trees = parsed
    stored = raw if resolve is None else tuple(resolve(k) for k in raw)
    key = (texts, stored)
    out = _FROM_CODE.get(key)
    if out is None:
        # Raw source i is symbol g<i>; sources that resolve to one key share its first symbol.
        sources: dict[SourceKey, str] = {}
        rename = {f"g{i}": sources.setdefault(k, f"g{len(sources)}") for i, k in enumerate(stored)}
        if any(old != new for old, new in rename.items()):
            trees = tuple(_rename(t, rename.__getitem__, 0) for t in trees)
        out = _FROM_CODE.remember(key, _number(sources, list(trees)))
    _NUMBERED.remember(id(out), out)
    return out


def guards_to_code(g: schema.InputGuards, *, where: str = "guards", spelling: str = "builtin") -> list[str]:
    """Validated Python text of every check, in stored order, the way torch writes guards.

    ``spelling`` (one of SPELLINGS) says how max and min are written: the loader passes the one
    the running torch prints (``serde.bridge``), torch-free readers keep the default.

    Raises:
        UnsafeArtifactError: a source key is not a plain identifier or index.
        MalformedArtifactError: any other inconsistency (unknown symbol, bad dim, an Expr member
            guards never use, too deep, ...).
    """
    key = (spelling, wire.encode(g))
    done = _PRINTED.get(key)
    if done is not None:
        return list(done)
    out = []
    for w, text in _printed_checks(g, where, spelling):
        # Defence in depth: what torch will compile must pass the same allow-list as saving.
        _revalidate(_Parser(w), text, w)
        out.append(text)
    _PRINTED.remember(key, tuple(out))
    return out


# Printed and re-validated guard sets, shared by every load in the process, keyed by the exact
# encoding of the stored guards (equal bytes: equal sources and checks, so the same text and the
# same verdict; a set that fails is never remembered). A program's guards recur with each load of it.
_PRINTED = Memo(1 << 10, "printed_guards")


def _printed_checks(g: schema.InputGuards, where: str, spelling: str = "builtin") -> Iterator[tuple[str, str]]:
    """(location, printed Python text) of every check, in stored order."""
    names = _source_names(g, where)
    for i, e in enumerate(g.checks):
        w = f"{where}.checks[{i}]"
        yield w, _Printer(names, w, spelling).expr(e, 0)


def _revalidate(parser: _Parser, text: str, where: str) -> schema.Expr:
    """The tree of a printed check, parsed again under the allow-list."""
    try:
        return parser.guard(text, where)
    except UnsupportedConstructError as err:
        raise MalformedArtifactError(f"{where}: printed guard failed re-validation: {err}") from None


def canonical_guards(g: schema.InputGuards | None, *, where: str = "guards") -> schema.InputGuards | None:
    """``g`` with sources renumbered and checks deduplicated, in their order (idempotent)."""
    if g is None:
        return None
    if _is_numbered(g):
        # Built by _number in this process from parsed checks: numbering and deduplicating are what this
        # would redo, and a parsed tree prints to text that parses back to it (the print/parse
        # round trip), so the result would equal ``g``. Its printed checks must still pass the
        # allow-list that loading applies to them (text can outgrow a limit when printed).
        guards_to_code(g, where=where)
        return g
    # guards_from_code(guards_to_code(g)), with one parse of each printed check instead of two:
    # the parse that re-validates the printed text is the one whose tree gets numbered.
    parser = _Parser(where)
    trees = [_revalidate(parser, text, w) for w, text in _printed_checks(g, where)]
    return _number(parser.sources, trees) if trees else None


def guard_texts(g: schema.InputGuards | None, *, where: str = "guards") -> list[str]:
    """Readable lines for ``show``/``diff``: the checks as torch would print them."""
    return [] if g is None else guards_to_code(g, where=where)


def source_key(s: schema.GuardSource) -> SourceKey:
    return (tuple(ATTR + k.attr if k.kind == "attr" else k.value for k in s.path), int(s.property),
            -1 if s.dim is None else s.dim)


def source_text(s: schema.GuardSource | SourceKey) -> str:
    """``L['x'].size()[0]`` for a (validated) source."""
    path, prop, dim = s if isinstance(s, tuple) else source_key(s)
    text = "L" + "".join(_key_text(k) for k in path)
    fmt = _PROPERTY_TEXT.get(P(prop))
    return text if fmt is None else text + fmt.format(dim)


def input_paths(in_spec: schema.TreeSpec, arg_names: list[str], *, where: str = "in_spec") -> list[tuple | None]:
    """Key path of each flat user input, as guards name it: forward parameter name, then keys.

    ``in_spec`` is the (args, kwargs) spec of the root call; ``None`` marks a leaf a guard
    cannot name (inside a namedtuple or registered class, or a positional without a name).
    Torch-free, for readers of the schema (the native emitter).
    """
    out: list[tuple | None] = []
    if in_spec.type != "tuple" or len(in_spec.children) != 2:
        raise MalformedArtifactError(f"{where}: the root input spec must be (args, kwargs)")
    args, kwargs = in_spec.children
    for i, c in enumerate(args.children):
        _walk_paths(c, (arg_names[i],) if i < len(arg_names) else None, out, where, 0)
    for k, c in zip(_dict_keys(kwargs, where), kwargs.children, strict=True):
        _walk_paths(c, (k,) if isinstance(k, str) else None, out, where, 0)
    return out


def flat_input_paths(gm: schema.GraphModule) -> list[tuple | None] | None:
    """:func:`input_paths` of ``gm``'s root call, one per flat user input in flattening order
    (``None`` without a root module call signature)."""
    root = next((e.signature for e in gm.module_call_graph if e.fqn == "" and e.signature), None)
    if root is None:
        return None
    return input_paths(root.in_spec, list(root.forward_arg_names or []),
                       where="graph_module.module_call_graph[<root>].signature.in_spec")


# The parameter of the function strict export traces (torch 2.13): it takes the flattened
# (args, kwargs) as *flat_args, so its guards read L['flat_args'][i], the i-th leaf.
STRICT_FLAT_ARGS = "flat_args"


def source_resolver(flat: list[tuple | None]) -> Callable[[SourceKey], SourceKey]:
    """How saving stores a source torch wrote, given the :func:`flat_input_paths` of the program:
    the path ``ep.module()`` checks it at, so a strict and a non-strict export of one program
    store the same sources. A source that names no input is returned unchanged (the caller says why).

    * ``L['flat_args'][i]`` (strict export) is the i-th flattened input's path, as ep.module() reads
      it (torch.export._unlift maps flat_args[i] to that leaf whatever the tracer).
    * When a forward parameter is itself called flat_args, ``L['flat_args'][i]`` could mean either,
      and the stored path is read as a path (by the native runtime, by loading's checks) while
      ep.module() reads it as an index: it is stored only when both name the same input.
    * ``L['args'][0]`` is ``L['args_0']`` where forward's ``*args`` items are named so, the form
      ep.module() compiles guards with (torch's _force_gm_signature_match).

    Raises:
        UnsupportedConstructError: ``L['flat_args'][i]`` names no flattened input, or one inside
            a namedtuple or registered class, which no guard path can name, or it is ambiguous.
    """
    named = {p for p in flat if p is not None}
    shadowed = any(p[0] == STRICT_FLAT_ARGS for p in named)

    def resolve(k: SourceKey) -> SourceKey:
        path = k[0]
        if path[:1] == (STRICT_FLAT_ARGS,):
            if not shadowed:
                return _flat_leaf_path(k, flat), k[1], k[2]
            i = path[1] if len(path) == 2 and type(path[1]) is int else -1
            if path not in named or not 0 <= i < len(flat) or flat[i] != path:
                raise UnsupportedConstructError(
                    f"guards: a guard reads {source_text(k)}, which is ambiguous: torch names the "
                    f"flattened inputs of a strict export {STRICT_FLAT_ARGS}, and so does a forward "
                    "parameter of this program, and the two readings name different inputs; rename "
                    "that parameter to save this program")
        elif path not in named and len(path) >= 2 and type(path[1]) is int:
            merged = (f"{path[0]}_{path[1]}", *path[2:])
            if merged in named:
                path = merged
        return path, k[1], k[2]

    return resolve


def input_arguments(gm: schema.GraphModule, paths: list[tuple | None] | None = None
                    ) -> dict[tuple, schema.Argument]:
    """Nameable user inputs by guard path -> the graph input they are (empty without a root
    module call signature, so that every guard source is then "not an input").

    ``paths`` are the flat inputs' paths when the caller knows more than the stored spec says
    (the bridge fills in the leaves of registered classes from the live pytree registry);
    default :func:`flat_input_paths` of ``gm``."""
    if paths is None:
        paths = flat_input_paths(gm)
    if paths is None:
        return {}
    user = [arg for spec, arg in zip(gm.signature.input_specs, gm.graph.inputs, strict=False)
            if spec.kind in ("user_input", "constant_input")]
    if len(paths) != len(user):
        raise MalformedArtifactError(f"guards: the input spec has {len(paths)} leaves for {len(user)} user inputs")
    return {path: arg for path, arg in zip(paths, user, strict=True) if path is not None}


def input_leaves(gm: schema.GraphModule, arguments: Mapping[tuple, schema.Argument] | None = None
                 ) -> dict[tuple, int | None]:
    """Nameable user inputs by guard path -> tensor rank, or None for a number (int, float, ...).
    ``arguments`` is :func:`input_arguments` of ``gm`` when the caller has it already."""
    out: dict[tuple, int | None] = {}
    for path, arg in (input_arguments(gm) if arguments is None else arguments).items():
        meta = gm.graph.tensor_values.get(arg.as_tensor.name) if arg.kind == "as_tensor" else None
        out[path] = len(meta.sizes) if meta is not None else None
    return out


def source_problem(path: tuple, prop: int, dim: int, leaves: Mapping[tuple, int | None]) -> str | None:
    """Why a source cannot be read from the inputs ``leaves`` (see input_leaves), or None."""
    if path not in leaves:
        known = ", ".join(source_text((p, int(P.VALUE), -1)) for p in sorted(leaves, key=_sort_key_path))
        return f"is not an input of the program (inputs: {known or 'none'})"
    rank = leaves[path]
    if prop == P.VALUE:
        return None if rank is None else "reads a tensor input as a number"
    if rank is None:
        return "reads a size, stride or offset of an input that is not a tensor"
    if prop != P.STORAGE_OFFSET and not 0 <= dim < rank:
        return f"names dim {dim} of a rank-{rank} tensor"
    return None


def _flat_leaf_path(k: SourceKey, flat: list[tuple | None]) -> tuple:
    """The path of the input a strict-export source ``L['flat_args'][i]`` reads."""
    i = k[0][1] if len(k[0]) == 2 else None
    if type(i) is not int or not 0 <= i < len(flat):
        raise UnsupportedConstructError(
            f"guards: a guard reads {source_text(k)}, which is not one of the program's {len(flat)} "
            "flattened inputs; pt2serde cannot tie it to an input (report the export that made it)")
    path = flat[i]
    if path is None:
        raise UnsupportedConstructError(
            f"guards: a guard reads {source_text(k)}, flattened input {i}, which sits inside a "
            "namedtuple or registered class (or is a positional input without a name), where no "
            "guard can name it; pass that input in a tuple, list or dict to save this program")
    return path


def _key_text(k: str | int) -> str:
    """One path item as torch's pytree keystr prints it: ['k'], [0] or .a."""
    if isinstance(k, str):
        return k if k.startswith(ATTR) else f"['{k}']"
    return f"[{k}]"


def _sort_key_path(path: tuple) -> tuple:
    return _sort_key((path, 0, 0))


def _walk_paths(s: schema.TreeSpec, path: tuple | None, out: list, where: str, depth: int) -> None:
    if depth > MAX_EXPR_DEPTH:
        raise MalformedArtifactError(f"{where}: input spec nested deeper than {MAX_EXPR_DEPTH}")
    if s.type == "*":
        out.append(path)
        return
    if s.type in ("tuple", "list", "deque"):
        keys: list[Any] = list(range(len(s.children)))
    elif s.type in ("dict", "OrderedDict", "defaultdict"):
        keys = _dict_keys(s, where)
    elif s.type == "namedtuple":  # pytree flattens its fields with attribute keys (GetAttrKey)
        keys = [ATTR + f if isinstance(f, str) else None for f in _namedtuple_fields(s, where)]
    else:  # registered classes name their children as they please: the bridge asks its registry
        keys = [None] * len(s.children)
    for k, c in zip(keys, s.children, strict=True):
        ok = path is not None and (type(k) is int or isinstance(k, str))
        _walk_paths(c, (*path, k) if ok else None, out, where, depth + 1)


def _namedtuple_fields(s: schema.TreeSpec, where: str) -> list:
    return _context_list(s, where, "namedtuple", "fields", bare=False)


def _dict_keys(s: schema.TreeSpec, where: str) -> list:
    return _context_list(s, where, "dict", "keys", bare=True)


def _context_list(s: schema.TreeSpec, where: str, kind: str, field: str, bare: bool) -> list:
    """The list under ``field`` of a spec's JSON context, one item per child (``bare``: the context
    may also be the list itself)."""
    try:
        ctx = json.loads(s.context or "null")
    except ValueError:
        raise MalformedArtifactError(f"{where}: {kind} context is not JSON") from None
    items = ctx.get(field) if isinstance(ctx, dict) else (ctx if bare else None)
    if not isinstance(items, list) or len(items) != len(s.children):
        raise MalformedArtifactError(f"{where}: {kind} context must list one {field[:-1]} per child")
    return items


# ---------------------------------------------------------------- parsing (save side)


class _Parser:
    """Allow-list walk over ``ast.parse(..., mode="eval")``; sources get symbols in order of first
    appearance, which :func:`_number` puts in sorted-source order."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.sources: dict[SourceKey, str] = {}

    def guard(self, text: Any, where: str) -> schema.Expr:
        self.at = where
        if not isinstance(text, str):
            self._refuse(repr(text)[:80], f"a guard must be text, got {type(text).__name__}")
        if len(text) > MAX_GUARD_CHARS:
            self._refuse(text[:80] + "...", f"longer than {MAX_GUARD_CHARS} characters")
        if not _ALLOWED_CHARS.match(text):
            bad = sorted({c for c in text if not _ALLOWED_CHARS.match(c)})
            self._refuse(text, f"characters outside the guard grammar: {bad!r}")
        self.text = text
        try:
            tree = ast.parse(text.strip(), mode="eval")
        except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
            self._refuse(text, f"not a Python expression ({type(e).__name__})")
        return self._expr(tree.body, 0)

    def _refuse(self, text: str, why: str) -> Any:
        raise UnsupportedConstructError(
            f"{self.at}: cannot store guard {text!r}: {why}. pt2serde stores guards as expressions "
            "over input sizes, strides and values; export without this guard (e.g. other "
            "dynamic_shapes) or report the guard form."
        )

    def _expr(self, n: ast.AST, depth: int) -> schema.Expr:
        if depth > MAX_EXPR_DEPTH:
            self._refuse(self.text, f"nested deeper than {MAX_EXPR_DEPTH}")
        d = depth + 1
        src = self._source(n)
        if src is not None:
            # In order of first appearance; _number renames them into sorted-source order, which
            # is the identity whenever the two orders agree (one source, or sources met sorted).
            return E(symbol=self.sources.setdefault(src, f"g{len(self.sources)}"))
        if isinstance(n, ast.Constant):
            return self._constant(n.value)
        if isinstance(n, ast.BinOp) and type(n.op) in _BINOPS:
            left, right = self._expr(n.left, d), self._expr(n.right, d)
            if isinstance(n.op, ast.Pow) and not _small_literal(right):
                # torch compiles the guard and runs it on every call: x ** <an input's size> could
                # take any time and memory there.
                self._refuse(self.text, f"the exponent of `{_snippet(n)}` is not a number from "
                                        f"-{_MAX_EXPONENT} to {_MAX_EXPONENT}")
            return E(**{_BINOPS[type(n.op)]: [left, right]})
        if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Sub):
            return E(add=[self._expr(n.left, d), _negate(self._expr(n.right, d))])
        if isinstance(n, ast.UnaryOp):
            if isinstance(n.op, ast.USub):
                return _negate(self._expr(n.operand, d))
            if isinstance(n.op, ast.UAdd):
                return self._expr(n.operand, d)
            if isinstance(n.op, ast.Not):
                return E(logical_not=[self._expr(n.operand, d)])
        if isinstance(n, ast.BoolOp):
            member = "logical_and" if isinstance(n.op, ast.And) else "logical_or"
            return E(**{member: [self._expr(v, d) for v in n.values]})
        if isinstance(n, ast.Compare) and all(type(op) in _CMPOPS for op in n.ops):
            operands = [self._expr(x, d) for x in (n.left, *n.comparators)]
            pairs = [E(**{_CMPOPS[type(op)]: [operands[i], operands[i + 1]]}) for i, op in enumerate(n.ops)]
            return pairs[0] if len(pairs) == 1 else E(logical_and=pairs)
        if isinstance(n, ast.IfExp):
            return E(ite=[self._expr(n.test, d), self._expr(n.body, d), self._expr(n.orelse, d)])
        if isinstance(n, ast.Call):
            return self._call(n, d)
        if isinstance(n, ast.Attribute) and _dotted(n) in _NAMED_CONSTANTS:
            return E(constant=_NAMED_CONSTANTS[_dotted(n)])
        return self._refuse(self.text, f"{type(n).__name__} `{_snippet(n)}` is not allowed in a guard")

    def _constant(self, v: Any) -> schema.Expr:
        if isinstance(v, bool):
            return E(constant=schema.ExprConstant.TRUE if v else schema.ExprConstant.FALSE)
        if isinstance(v, int):
            if abs(v) >= _INT_LIMIT:
                self._refuse(self.text, f"integer {v} does not fit in 64 bits")
            return E(integer=v)
        if isinstance(v, float) and math.isfinite(v):
            return E(floating=v)
        return self._refuse(self.text, f"constant {v!r} of type {type(v).__name__} is not allowed")

    def _call(self, n: ast.Call, d: int) -> schema.Expr:
        name = _dotted(n.func)
        if n.keywords or any(isinstance(a, ast.Starred) for a in n.args):
            self._refuse(self.text, f"call of {name or _snippet(n.func)} with keyword or starred arguments")
        args = [self._expr(a, d) for a in n.args] if name in _CALLS or name in _OPAQUE else []
        if name == "round" and len(args) == 2:
            return E(round_decimal=args)
        if name in _CALLS:
            member, lo, hi = _CALLS[name]
            if not lo <= len(args) <= hi:
                self._refuse(self.text, f"{name} takes {lo}..{hi} arguments, got {len(args)}")
            if member in ("max", "min"):
                # max(a, max(b, c)) is max(a, b, c): torch 2.14 nests what 2.13 writes flat
                args = [x for a in args for x in (getattr(a, member) if a.kind == member else [a])]
                if len(args) > _MAX_MIN_ARITY:
                    self._refuse(self.text, f"{member} of more than {_MAX_MIN_ARITY} arguments")
            return E(**{member: args})
        if name in _OPAQUE and len(args) == 1:
            return E(opaque_unary=schema.OpaqueUnary(fn=_OPAQUE[name], arg=args[0]))
        allowed = sorted([*_CALLS, *_OPAQUE])
        return self._refuse(self.text, f"call of `{_snippet(n.func)}` is not one of {allowed}")

    def _source(self, n: ast.AST) -> SourceKey | None:
        """``L[...]...[k]``, optionally ``.size()[i]``/``.stride()[i]``/``.storage_offset()``."""
        if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Call) and _method(n.value) in ("size", "stride"):
            dim = _int_key(n.slice)
            if dim is None:
                self._refuse(self.text, f"`{_snippet(n)}`: a dimension must be a non-negative integer")
            prop = P.SIZE if _method(n.value) == "size" else P.STRIDE
            return self._path(n.value.func.value), int(prop), dim
        if isinstance(n, ast.Call) and _method(n) == "storage_offset":
            return self._path(n.func.value), int(P.STORAGE_OFFSET), -1
        if isinstance(n, ast.Name) or (isinstance(n, (ast.Subscript, ast.Attribute)) and _rooted_at_l(n)):
            return self._path(n), int(P.VALUE), -1
        return None

    def _path(self, n: ast.AST) -> tuple[str | int, ...]:
        keys: list[str | int] = []
        while isinstance(n, (ast.Subscript, ast.Attribute)) and len(keys) <= _MAX_PATH:
            if isinstance(n, ast.Attribute):  # a field of a dataclass or namedtuple input: .a
                if not _KEY_RE.match(n.attr):
                    self._refuse(self.text, f"input attribute {n.attr!r} is not a plain identifier")
                keys.append(ATTR + n.attr)
                n = n.value
                continue
            k = _int_key(n.slice)
            if k is None and isinstance(n.slice, ast.Constant) and isinstance(n.slice.value, str):
                k = n.slice.value
                if not _KEY_RE.match(k):
                    self._refuse(self.text, f"input key {k!r} is not a plain identifier")
            if k is None:
                self._refuse(self.text, f"`{_snippet(n)}`: an input key must be a name or an index")
            keys.append(k)
            n = n.value
        if not (isinstance(n, ast.Name) and n.id == "L"):
            self._refuse(self.text, f"`{_snippet(n)}` is not an input (inputs are L[<name>]...)")
        keys.reverse()
        if not keys or not isinstance(keys[0], str) or keys[0].startswith(ATTR) or len(keys) > _MAX_PATH:
            self._refuse(self.text, f"an input path starts with a name and has 1..{_MAX_PATH} keys")
        if len(self.sources) >= _MAX_SOURCES:
            self._refuse(self.text, f"more than {_MAX_SOURCES} distinct inputs")
        return tuple(keys)


def _number(sources: Mapping[SourceKey, str], trees: list[schema.Expr]) -> schema.InputGuards:
    """Rename the symbols to g0.. in sorted-source order; dedupe the checks, keeping the first of
    each in place.

    The checks keep torch's order: a module runs its guards in order and reports the first that
    fails, so the order is what ``ep.module()`` says about an input that fails several. torch
    records them in tracing order, which the program's code fixes (the same program gives the
    same order on every export).
    """
    order = sorted(sources, key=_sort_key)
    rename = {sources[k]: f"g{i}" for i, k in enumerate(order)}
    table = [_make_source(f"g{i}", k) for i, k in enumerate(order)]
    names = {s.symbol: source_text(s) for s in table}
    same = all(old == new for old, new in rename.items())
    checks: dict[str, schema.Expr] = {}
    for t in trees:
        if not same:
            t = _rename(t, rename.__getitem__, 0)
        checks.setdefault(_Printer(names, "guards").expr(t, 0), t)
    used = set()
    for t in checks.values():
        used |= expr_symbols(t)
    if used != set(rename.values()):  # unreachable: every source came from a check
        raise AssertionError("guard sources and checks disagree")
    out = schema.InputGuards(sources=table, checks=list(checks.values()))
    _NUMBERED.remember(id(out), out)
    return out


# The InputGuards that _number built lately, by identity. Holding each one keeps its id from being
# reused by another object while it is listed, so `is` on the entry proves it is that very object.
# A save parses torch's guard text into them and then canonicalizes the program: this saves the
# second parse. Anything else (a decoded file, an edited copy) takes the full path.
_NUMBERED = Memo(64, "numbered_guards")

# Saving parses torch's guard text; a program's guards recur with each save of it (checkpoints).
# By the exact texts: each text's tree, sources in order of first appearance (source i is g<i>).
_PARSED = Memo(1 << 10, "parsed_guards")
# By those texts and the keys their sources resolve to: the numbered InputGuards. Only results are
# remembered, so a refused guard is parsed (and refused) again on every save.
_FROM_CODE = Memo(1 << 10, "guards_from_code")


def _is_numbered(g: schema.InputGuards) -> bool:
    return _NUMBERED.get(id(g)) is g


def _sort_key(k: SourceKey) -> tuple:
    path, prop, dim = k
    return tuple((0, x, 0) if isinstance(x, str) else (1, "", x) for x in path), prop, dim


def _make_source(symbol: str, k: SourceKey) -> schema.GuardSource:
    path, prop, dim = k
    keys = [schema.GuardKey(index=x) if not isinstance(x, str) else schema.GuardKey(attr=x[1:])
            if x.startswith(ATTR) else schema.GuardKey(name=x) for x in path]
    return schema.GuardSource(symbol=symbol, path=keys, property=P(prop), dim=None if dim < 0 else dim)


def _rename(e: schema.Expr, f: Callable[[str], str], depth: int) -> schema.Expr:
    if depth > MAX_EXPR_DEPTH:
        raise MalformedArtifactError(f"guards: expression nested deeper than {MAX_EXPR_DEPTH}")
    kind = e.kind
    v = getattr(e, kind)  # (e.value would find the kind again)
    if kind == "symbol":
        return E(symbol=f(v))
    if kind == "opaque_unary":
        return E(opaque_unary=schema.OpaqueUnary(fn=v.fn, arg=_rename(v.arg, f, depth + 1)))
    if isinstance(v, list):
        return E(**{kind: [_rename(x, f, depth + 1) for x in v]})
    return e


_MAX_EXPONENT = DEFAULT_LIMITS.max_exponent  # as for stored size expressions


def _small_literal(e: schema.Expr) -> bool:
    v = e.integer if e.kind == "integer" else schema.from_f64(e.floating) if e.kind == "floating" else None
    return v is not None and abs(v) <= _MAX_EXPONENT


def _negate(e: schema.Expr) -> schema.Expr:
    if e.kind == "integer" and e.integer != -_INT_LIMIT:
        return E(integer=-e.integer)
    if e.kind == "floating":
        return E(floating=-e.floating)
    if e.kind == "constant" and e.constant == schema.ExprConstant.INFINITY:
        return E(constant=schema.ExprConstant.NEG_INFINITY)
    return E(mul=[E(integer=-1), e])


def _dotted(n: ast.AST) -> str | None:
    """``abs`` / ``math.floor`` / ``torch._sym_sqrt`` for a plain (dotted) name, else None."""
    if isinstance(n, ast.Name):
        return n.id
    if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name):
        return f"{n.value.id}.{n.attr}"
    return None


def _method(n: ast.Call) -> str | None:
    if isinstance(n.func, ast.Attribute) and not n.args and not n.keywords:
        return n.func.attr
    return None


def _rooted_at_l(n: ast.AST) -> bool:
    while isinstance(n, (ast.Subscript, ast.Attribute)):
        n = n.value
    return isinstance(n, ast.Name) and n.id == "L"


def _int_key(n: ast.AST) -> int | None:
    if isinstance(n, ast.Constant) and type(n.value) is int and 0 <= n.value < _MAX_INDEX:
        return n.value
    return None


def _snippet(n: ast.AST) -> str:
    try:
        text = ast.unparse(n)
    except Exception:  # unparse of odd trees can fail; the message just gets vaguer
        text = type(n).__name__
    return text if len(text) <= 80 else text[:77] + "..."


# ---------------------------------------------------------------- printing (load side)


def _source_names(g: schema.InputGuards, where: str) -> dict[str, str]:
    if len(g.sources) > _MAX_SOURCES or len(g.checks) > MAX_GUARDS:
        raise MalformedArtifactError(f"{where}: more than {_MAX_SOURCES} sources or {MAX_GUARDS} checks")
    names: dict[str, str] = {}
    for i, s in enumerate(g.sources):
        w = f"{where}.sources[{i}]"
        if not _SYMBOL_RE.match(s.symbol) or s.symbol in names:
            raise MalformedArtifactError(f"{w}.symbol: {s.symbol!r} is not a fresh name g<N>")
        if not s.path or not 1 <= len(s.path) <= _MAX_PATH or s.path[0].kind != "name":
            raise MalformedArtifactError(f"{w}.path: must start with an input name and have 1..{_MAX_PATH} keys")
        for j, k in enumerate(s.path):
            v = k.value
            ok = _KEY_RE.match(v) if k.kind in ("name", "attr") else type(v) is int and 0 <= v < _MAX_INDEX
            if not ok:
                raise UnsafeArtifactError(
                    f"{w}.path[{j}]: key {v!r} is not a plain identifier (not a dunder) or a non-negative "
                    "index; guards are printed as code, so the artifact is refused.")
        sized = s.property in (P.SIZE, P.STRIDE)
        if sized != (s.dim is not None) or (sized and not 0 <= s.dim < _MAX_INDEX):
            raise MalformedArtifactError(f"{w}.dim: {s.dim!r} does not fit property {s.property.name}")
        names[s.symbol] = source_text(s)
    return names


class _Printer:
    """Fully parenthesised Python text; only Expr members the parser produces are accepted.
    ``spelling`` is one of SPELLINGS: how max and min are printed."""

    def __init__(self, names: Mapping[str, str], where: str, spelling: str = "builtin") -> None:
        self.names, self.where = names, where
        self.max_min = _MAX_MIN_TEXT[spelling]
        self.fold = spelling == "sym"

    def expr(self, e: schema.Expr, depth: int) -> str:
        if depth > MAX_EXPR_DEPTH:
            raise MalformedArtifactError(f"{self.where}: expression nested deeper than {MAX_EXPR_DEPTH}")
        d = depth + 1
        kind = e.kind
        v = getattr(e, kind)  # (e.value would find the kind again)
        if kind == "symbol":
            if v not in self.names:
                raise MalformedArtifactError(f"{self.where}: symbol {v!r} is not in guards.sources")
            return self.names[v]
        if kind == "integer":
            return str(v) if v >= 0 else f"({v})"
        if kind == "floating":
            x = schema.from_f64(v)
            if not math.isfinite(x):
                raise MalformedArtifactError(f"{self.where}: non-finite float {v!r}; use a constant")
            return repr(x) if x >= 0 else f"({x!r})"
        if kind == "constant":
            if v not in _CONSTANT_TEXT:
                raise MalformedArtifactError(f"{self.where}: constant {v.name} does not occur in guards")
            return _CONSTANT_TEXT[v]
        if kind == "opaque_unary":
            if v.fn not in _OPAQUE_TEXT:
                raise MalformedArtifactError(f"{self.where}: function {v.fn!r} does not occur in guards")
            return f"{_OPAQUE_TEXT[v.fn]}({self.expr(v.arg, d)})"
        if kind in _INFIX:
            if len(v) < 2 or (kind in _BINARY_ONLY and len(v) != 2):
                raise MalformedArtifactError(f"{self.where}: {kind} with {len(v)} operands")
            if kind == "add":
                return "(" + "".join(self._term(x, i, d) for i, x in enumerate(v)) + ")"
            return "(" + _INFIX[kind].join(self.expr(x, d) for x in v) + ")"
        if kind == "logical_not" and len(v) == 1:
            return f"(not {self.expr(v[0], d)})"
        if kind == "ite" and len(v) == 3:
            return f"({self.expr(v[1], d)} if {self.expr(v[0], d)} else {self.expr(v[2], d)})"
        if kind == "round_decimal" and len(v) == 2:
            return f"round({self.expr(v[0], d)}, {self.expr(v[1], d)})"
        if kind in self.max_min and 2 <= len(v) <= _MAX_MIN_ARITY:
            fn = self.max_min[kind]
            args = [self.expr(x, d) for x in v]
            if not self.fold:
                return f"{fn}({', '.join(args)})"
            text = args[-1]
            for a in reversed(args[:-1]):  # as torch 2.14 folds an n-ary Max into binary calls
                text = f"{fn}({a}, {text})"
            return text
        if kind in _CALL_TEXT:
            _, lo, hi = _CALLS[_CALL_TEXT[kind]]
            if lo <= len(v) <= hi:
                return f"{_CALL_TEXT[kind]}({', '.join(self.expr(x, d) for x in v)})"
        raise MalformedArtifactError(f"{self.where}: expression member {kind!r} (arity {_arity(v)}) "
                                     "does not occur in guards")

    def _term(self, x: schema.Expr, i: int, d: int) -> str:
        """Terms of a sum; ``-1 * t`` prints as ``- t`` so guards read like torch's."""
        if x.mul is not None and len(x.mul) == 2 and x.mul[0].integer == -1:
            return ("-" if i == 0 else " - ") + self.expr(x.mul[1], d)
        return ("" if i == 0 else " + ") + self.expr(x, d)


def _arity(v: Any) -> int | str:
    return len(v) if isinstance(v, list) else "-"


# ---------------------------------------------------------------- the guards at the example values


def failing_guard(g: schema.InputGuards, gm: schema.GraphModule, *, where: str = "guards",
                  arguments: Mapping[tuple, schema.Argument] | None = None) -> str | None:
    """Why a stored check does not hold at the program's own example values, or None when all do.

    torch.export records a guard while tracing the example inputs, so each holds for them; the
    sizes and values the graph stores carry those example values as hints. A check that is false
    there, or that fails to evaluate (a division by zero, a number too large to compute), would make
    the loaded program reject, or raise on, the very inputs it was exported with. Checks naming an
    input without a stored example value (unbacked sizes) are skipped. ``arguments`` is
    :func:`input_arguments` of ``gm`` when the caller has it already.
    """
    values = _example_values(g, gm, input_arguments(gm) if arguments is None else arguments)
    key = (wire.encode(g), tuple((type(v), v) for v in values.values()))  # 1, 1.0 and True differ here
    if key in _HOLDING:
        return None
    names = _source_names(g, where)
    for i, e in enumerate(g.checks):
        ev = _Evaluator(values)
        try:
            ok = ev.value(e, 0)
        except _NoHint:
            continue
        except (ArithmeticError, ValueError, TypeError) as err:  # x / 0, 2.0 ** 5000, math domain, 1 & 0.5
            return f"{where}.checks[{i}] ({_Printer(names, where).expr(e, 0)}) fails at the example values " \
                   f"({_shown(values, names, ev.used)}): {type(err).__name__}: {err}"
        if ok is not True:
            return f"{where}.checks[{i}] ({_Printer(names, where).expr(e, 0)}) is {ok!r} at the example " \
                   f"values ({_shown(values, names, ev.used)}), where torch.export found it true"
    _HOLDING.remember(key)
    return None


# Guard sets that held at a set of example values, shared by every load in the process: the verdict
# depends on the stored checks and those values alone (the key holds both, exactly), and a
# program's guards recur with each load of it. A set that fails is never remembered.
_HOLDING = Memo(1 << 10, "holding_guards")


def _shown(values: Mapping[str, Any], names: Mapping[str, str], used: set[str]) -> str:
    return ", ".join(f"{names[s]} = {values[s]!r}" for s in sorted(used)) or "no inputs"


class _NoHint(Exception):
    pass


_MISSING = object()


def _example_values(g: schema.InputGuards, gm: schema.GraphModule,
                    args: Mapping[tuple, schema.Argument]) -> dict[str, Any]:
    """Symbol -> the example value of its source, or _MISSING where the file stores none."""
    graph = gm.graph
    out: dict[str, Any] = {}
    for s in g.sources:
        path, prop, dim = source_key(s)
        arg = args.get(path)
        v: Any = _MISSING
        if arg is None:
            pass
        elif prop == P.VALUE:
            v = _argument_value(arg, graph)
        elif arg.kind == "as_tensor":
            meta = graph.tensor_values.get(arg.as_tensor.name)
            if meta is not None:
                if prop == P.STORAGE_OFFSET:
                    v = _sym_int_value(meta.storage_offset)
                elif 0 <= dim < len(meta.sizes):
                    v = _sym_int_value((meta.sizes if prop == P.SIZE else meta.strides)[dim])
        out[s.symbol] = v
    return out


def _sym_int_value(s: schema.SymInt) -> Any:
    if s.as_int is not None:
        return s.as_int
    h = s.as_expr.hint
    return h.as_int if h is not None and h.as_int is not None else _MISSING


def _argument_value(arg: schema.Argument, graph: schema.Graph) -> Any:
    kind = arg.kind
    if kind in ("as_int", "as_bool"):
        return getattr(arg, kind)
    if kind == "as_float":
        return schema.from_f64(arg.as_float)
    table = {"as_sym_int": graph.sym_int_values, "as_sym_float": graph.sym_float_values,
             "as_sym_bool": graph.sym_bool_values}.get(kind)
    if table is None:
        return _MISSING
    ref = getattr(arg, kind)
    stored = table.get(ref.as_name) if ref.as_name is not None else None
    if stored is None:
        return _MISSING
    if stored.as_expr is None:
        v = stored.value
        return schema.from_f64(v) if kind == "as_sym_float" else v
    h = stored.as_expr.hint
    if h is None or h.value is None:
        return _MISSING
    return schema.from_f64(h.value) if kind == "as_sym_float" else h.value


# Evaluating hostile checks must stay cheap: an integer power may not grow past this many bits.
_MAX_POW_BITS = 1 << 16


def _power(a: Any, b: Any) -> Any:
    if isinstance(a, int) and isinstance(b, int) and b > 0 and abs(a) > 1 and a.bit_length() * b > _MAX_POW_BITS:
        raise OverflowError(f"{a} ** {b} has more than {_MAX_POW_BITS} bits")
    return a ** b


_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "float_true_div": lambda a, b: a / b, "floor_div": lambda a, b: a // b, "python_mod": lambda a, b: a % b,
    "pow": _power, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b,
    "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b,
}
_FOLDED: dict[str, Callable[[Any, Any], Any]] = {
    "add": lambda a, b: a + b, "mul": lambda a, b: a * b, "bitwise_and": lambda a, b: a & b,
    "bitwise_or": lambda a, b: a | b, "bitwise_xor": lambda a, b: a ^ b,
}
_UNARY: dict[str, Callable[[Any], Any]] = {
    "abs": abs, "floor_to_int": math.floor, "ceil_to_int": math.ceil, "trunc_to_int": math.trunc,
    "to_float": float, "round_to_int": round,
}
_OPAQUE_FN: dict[str, Callable[[Any], Any]] = {"sqrt": math.sqrt, **{f: getattr(math, f) for f in (
    "cos", "cosh", "sin", "sinh", "tan", "tanh", "asin", "acos", "atan", "log2")}}
_CONSTANT_VALUE = {schema.ExprConstant.TRUE: True, schema.ExprConstant.FALSE: False,
                   schema.ExprConstant.INFINITY: math.inf, schema.ExprConstant.NEG_INFINITY: -math.inf,
                   schema.ExprConstant.NAN: math.nan}


class _Evaluator:
    """What the printed check computes in Python, for the members the printer accepts (the check
    was printed, so validated, before this runs): ``and``/``or`` and ``... if ... else ...``
    evaluate lazily, as the printed text does."""

    def __init__(self, values: Mapping[str, Any]) -> None:
        self.values = values
        self.used: set[str] = set()

    def value(self, e: schema.Expr, depth: int) -> Any:
        d = depth + 1
        kind = e.kind
        v = getattr(e, kind)
        if kind == "symbol":
            x = self.values[v]
            if x is _MISSING:
                raise _NoHint
            self.used.add(v)
            return x
        if kind == "integer":
            return v
        if kind == "floating":
            return schema.from_f64(v)
        if kind == "constant":
            return _CONSTANT_VALUE[v]
        if kind == "opaque_unary":
            return _OPAQUE_FN[v.fn](self.value(v.arg, d))
        if kind in _BINARY:
            return _BINARY[kind](self.value(v[0], d), self.value(v[1], d))
        if kind in _FOLDED:
            acc = self.value(v[0], d)
            for x in v[1:]:
                acc = _FOLDED[kind](acc, self.value(x, d))
            return acc
        if kind == "logical_and":
            acc = True
            for x in v:
                acc = self.value(x, d)
                if not acc:
                    break
            return acc
        if kind == "logical_or":
            acc = False
            for x in v:
                acc = self.value(x, d)
                if acc:
                    break
            return acc
        if kind == "logical_not":
            return not self.value(v[0], d)
        if kind == "ite":
            return self.value(v[1], d) if self.value(v[0], d) else self.value(v[2], d)
        if kind == "round_decimal":
            return round(self.value(v[0], d), self.value(v[1], d))
        if kind in ("max", "min"):
            return (max if kind == "max" else min)(self.value(x, d) for x in v)
        if kind in _UNARY:
            return _UNARY[kind](self.value(v[0], d))
        raise AssertionError(f"guard member {kind!r} was printed but has no evaluation")  # printer refuses others
