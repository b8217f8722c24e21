"""Guard sources: the inputs a guard reads, and the pytree paths that name them.

A source is an input path (forward parameter name, then keys, indices and attributes, as torch's
pytree ``keystr`` prints them) with a property (its value, a size, a stride, the storage offset).
Here: their key and text forms, the paths of a program's flat inputs read from its stored input
spec, how saving resolves the sources torch wrote, and why a source names no input.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from serde.errors import MalformedArtifactError, UnsafeArtifactError, UnsupportedConstructError

from ... import schema
from ..tree import MAX_EXPR_DEPTH
from .grammar import MAX_GUARDS, MAX_INDEX, MAX_PATH, MAX_SOURCES

__all__ = [
    "SourceKey", "ATTR", "KEY_RE", "source_key", "source_text", "input_paths", "flat_input_paths", "STRICT_FLAT_ARGS",
    "source_resolver", "input_arguments", "input_leaves", "source_problem", "sort_key", "make_source", "source_names",
]

P = schema.GuardProperty


# A source as a hashable, sortable key: (path, property, dim); path items are str (a dict key),
# int (an index) or an attribute as "." + its name (a dataclass or namedtuple field): names never
# hold a ".", so the two cannot be confused.
SourceKey = tuple[tuple[str | int, ...], int, int]
ATTR = "."

# A name key must look like a plain identifier and not a dunder: it is printed inside quotes,
# but keeping it boring means no key can ever reach anything but a dict lookup.
KEY_RE = re.compile(r"(?!__)[A-Za-z_][A-Za-z0-9_]{0,199}\Z")
SYMBOL_RE = re.compile(r"g(0|[1-9][0-9]{0,5})\Z")
PROPERTY_TEXT = {P.SIZE: ".size()[{}]", P.STRIDE: ".stride()[{}]", P.STORAGE_OFFSET: ".storage_offset()"}


def source_key(s: schema.GuardSource) -> SourceKey:
    return (tuple(ATTR + k.attr if k.kind == "attr" else k.value for k in s.path), int(s.property),
            -1 if s.dim is None else s.dim)


def source_text(s: schema.GuardSource | SourceKey) -> str:
    """``L['x'].size()[0]`` for a (validated) source."""
    path, prop, dim = s if isinstance(s, tuple) else source_key(s)
    text = "L" + "".join(_key_text(k) for k in path)
    fmt = PROPERTY_TEXT.get(P(prop))
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
    return sort_key((path, 0, 0))


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


def sort_key(k: SourceKey) -> tuple:
    path, prop, dim = k
    return tuple((0, x, 0) if isinstance(x, str) else (1, "", x) for x in path), prop, dim


def make_source(symbol: str, k: SourceKey) -> schema.GuardSource:
    path, prop, dim = k
    keys = [schema.GuardKey(index=x) if not isinstance(x, str) else schema.GuardKey(attr=x[1:])
            if x.startswith(ATTR) else schema.GuardKey(name=x) for x in path]
    return schema.GuardSource(symbol=symbol, path=keys, property=P(prop), dim=None if dim < 0 else dim)


def source_names(g: schema.InputGuards, where: str) -> dict[str, str]:
    if len(g.sources) > MAX_SOURCES or len(g.checks) > MAX_GUARDS:
        raise MalformedArtifactError(f"{where}: more than {MAX_SOURCES} sources or {MAX_GUARDS} checks")
    names: dict[str, str] = {}
    for i, s in enumerate(g.sources):
        w = f"{where}.sources[{i}]"
        if not SYMBOL_RE.match(s.symbol) or s.symbol in names:
            raise MalformedArtifactError(f"{w}.symbol: {s.symbol!r} is not a fresh name g<N>")
        if not s.path or not 1 <= len(s.path) <= MAX_PATH or s.path[0].kind != "name":
            raise MalformedArtifactError(f"{w}.path: must start with an input name and have 1..{MAX_PATH} keys")
        for j, k in enumerate(s.path):
            v = k.value
            ok = KEY_RE.match(v) if k.kind in ("name", "attr") else type(v) is int and 0 <= v < MAX_INDEX
            if not ok:
                raise UnsafeArtifactError(
                    f"{w}.path[{j}]: key {v!r} is not a plain identifier (not a dunder) or a non-negative "
                    "index; guards are printed as code, so the artifact is refused.")
        sized = s.property in (P.SIZE, P.STRIDE)
        if sized != (s.dim is not None) or (sized and not 0 <= s.dim < MAX_INDEX):
            raise MalformedArtifactError(f"{w}.dim: {s.dim!r} does not fit property {s.property.name}")
        names[s.symbol] = source_text(s)
    return names
