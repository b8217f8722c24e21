"""Pytree specs <-> schema.TreeSpec, without pickle or imports driven by the artifact.

Builtin containers get short type names ("tuple", "list", "dict", "namedtuple", "OrderedDict",
"defaultdict", "deque", "None"); a leaf is "*". Other types must be registered with pytree under a
``serialized_type_name`` (``torch.export.register_dataclass`` does this); they are found again
through that registry, never by importing a module named in the artifact.

Namedtuples store ``{"name": "module.QualName", "fields": [...]}``. On load the class is taken
from the pytree registry, else from an already-imported module (``sys.modules``, no import),
else a look-alike namedtuple class is created so that outputs still unflatten. A program's inputs
are matched against its input spec by class, so a look-alike there would make the loaded program
reject the very inputs the exported one accepts: saving refuses an input namedtuple that cannot be
found again by its name (:func:`check_input_classes`). A process that loads one without having its
class (its module not imported, or not registered) gets the look-alike: the program then runs on
its own example inputs, built with that class, but rejects instances of the real one; import the
module before loading.

torch's named results (``torch.return_types.max``, what ``torch.max(x, 0)``, ``topk`` or ``svd``
return) are "structseq" with the same context. torch registers them with pytree without a
serialized name; the loader takes them from the namespace of ``torch.return_types`` only, under
the class's own name, and checks the fields, so a file can name no other class.
"""

from __future__ import annotations

import collections
import json
import math
import sys
from typing import Any

import torch
import torch.utils._pytree as pytree

from serde.core import schema
from serde.errors import MalformedArtifactError, UnsupportedConstructError

__all__ = ["serialize_treespec", "deserialize_treespec", "check_input_classes", "LEAF"]

LEAF = "*"
# Deeper specs would exhaust the interpreter's stack in pytree's own recursive code; real inputs and
# outputs nest a handful of levels.
MAX_DEPTH = 100

_BUILTIN_NAMES: dict[type, str] = {
    tuple: "tuple",
    list: "list",
    dict: "dict",
    collections.OrderedDict: "OrderedDict",
    collections.defaultdict: "defaultdict",
    collections.deque: "deque",
    type(None): "None",
}
_BUILTIN_TYPES = {v: k for k, v in _BUILTIN_NAMES.items()}
_NAMEDTUPLE = "namedtuple"
_STRUCTSEQ = "structseq"
_RETURN_TYPES = "torch.return_types"
# defaultdict factories we are willing to name: constructing them runs no user code.
_FACTORIES: dict[str, Any] = {"list": list, "dict": dict, "int": int, "float": float, "set": set,
                              "str": str, "tuple": tuple, "bool": bool}
_FACTORY_NAMES = {v: k for k, v in _FACTORIES.items()}
# Cache of look-alike namedtuple classes so that repeated loads give the same class.
_SYNTHETIC_NAMEDTUPLES: dict[tuple[str, tuple[str, ...]], type] = {}


def _dump(obj: Any) -> str:
    return json.dumps(obj, sort_keys=False, separators=(",", ":"), allow_nan=False)


def _is_key(k: Any) -> bool:
    return k is None or isinstance(k, (str, int, bool)) or (isinstance(k, float) and math.isfinite(k))


def _check_keys(keys: list, where: str) -> list:
    for k in keys:
        if not _is_key(k):
            raise UnsupportedConstructError(
                f"{where}: dict key {k!r} of type {type(k).__name__} cannot be stored; "
                "use str, int, bool or None keys in inputs and outputs"
            )
    return keys


def serialize_treespec(spec: pytree.TreeSpec, where: str = "treespec") -> schema.TreeSpec:
    """Convert a pytree spec to the schema form."""
    if spec.is_leaf():
        return schema.TreeSpec(type=LEAF)
    typ = spec.type
    children = [serialize_treespec(c, f"{where}.children[{i}]") for i, c in enumerate(spec.children())]
    ctx = spec.context
    name = _BUILTIN_NAMES.get(typ)
    if name in ("tuple", "list", "None"):
        return schema.TreeSpec(type=name, children=children)
    if name in ("dict", "OrderedDict"):
        return schema.TreeSpec(type=name, context=_dump(_check_keys(list(ctx), where)), children=children)
    if name == "defaultdict":
        factory, keys = ctx[0], ctx[1]
        if factory not in _FACTORY_NAMES:
            raise UnsupportedConstructError(
                f"{where}: defaultdict factory {factory!r} cannot be stored; use a builtin type such as list"
            )
        context = _dump({"factory": _FACTORY_NAMES[factory], "keys": _check_keys(list(keys), where)})
        return schema.TreeSpec(type=name, context=context, children=children)
    if name == "deque":
        return schema.TreeSpec(type=name, context=_dump({"maxlen": ctx}), children=children)
    if typ is collections.namedtuple or pytree.is_namedtuple_class(typ):
        # pytree files every namedtuple under the `namedtuple` factory, the class as context.
        cls = ctx if typ is collections.namedtuple else typ
        qual = f"{cls.__module__}.{cls.__qualname__}"
        return schema.TreeSpec(
            type=_NAMEDTUPLE, context=_dump({"name": qual, "fields": list(cls._fields)}), children=children
        )
    if typ.__module__ == _RETURN_TYPES and _return_type(typ.__qualname__) is typ:
        context = _dump({"name": f"{_RETURN_TYPES}.{typ.__qualname__}", "fields": list(typ.__match_args__)})
        return schema.TreeSpec(type=_STRUCTSEQ, context=context, children=children)
    if isinstance(typ, type) and issubclass(typ, torch.nn.Module):
        raise UnsupportedConstructError(
            f"{where}: an input is an nn.Module ({typ.__module__}.{typ.__qualname__}). torch.export.save "
            "stores it by pickling the module itself into the example inputs, and its load unpickles it "
            "(weights_only refuses the class, then it retries unsafely); pt2serde never pickles, and a "
            "module cannot be rebuilt from its tensors without running its class's code. Pass the "
            "module's parameters and buffers as a dict of tensors instead: export a wrapper whose "
            "forward takes (x, params) and calls torch.func.functional_call(module, params, (x,)), with "
            "params = dict(module.named_parameters()) | dict(module.named_buffers())")
    node_def = pytree.SUPPORTED_SERIALIZED_TYPES.get(typ)
    serialized = getattr(node_def, "serialized_type_name", None)
    if node_def is None or serialized in (None, pytree.NO_SERIALIZED_TYPE_NAME_FOUND):
        raise UnsupportedConstructError(
            f"{where}: pytree type {typ.__module__}.{typ.__qualname__} has no serialized name; give it "
            f"one where it is registered: torch.export.register_dataclass({typ.__qualname__}, "
            f"serialized_type_name={typ.__module__ + '.' + typ.__qualname__!r}) (a plain "
            "register_dataclass(cls) gives none) or torch.utils._pytree.register_pytree_node(..., "
            "serialized_type_name=...)"
        )
    if node_def.to_dumpable_context is not None:
        context = node_def.to_dumpable_context(ctx)
        if not isinstance(context, str):
            context = _dump(context)
    else:
        try:
            context = _dump(ctx)
        except (TypeError, ValueError):
            raise UnsupportedConstructError(
                f"{where}: the pytree context of {serialized} is not JSON; register "
                "to_dumpable_context/from_dumpable_context for it"
            ) from None
    return schema.TreeSpec(type=f"registered:{serialized}", context=context, children=children)


def deserialize_treespec(s: schema.TreeSpec, where: str = "treespec", _depth: int = 0) -> pytree.TreeSpec:
    """Inverse of :func:`serialize_treespec`."""
    if _depth > MAX_DEPTH:
        raise MalformedArtifactError(f"{where}: the pytree spec nests deeper than {MAX_DEPTH} levels; the "
                                     "artifact is damaged or hostile")
    if s.type == LEAF:
        if s.children or s.context is not None:
            raise MalformedArtifactError(f"{where}: a leaf must have no children and no context")
        return pytree.treespec_leaf()
    children = [deserialize_treespec(c, f"{where}.children[{i}]", _depth + 1) for i, c in enumerate(s.children)]
    typ = _BUILTIN_TYPES.get(s.type)
    if s.type in ("tuple", "list", "None"):
        return pytree.TreeSpec(typ, None, children)
    ctx = _load(s, where)
    if s.type in ("dict", "OrderedDict"):
        _expect(_are_keys(ctx, len(children)), where, _KEYS)
        return pytree.TreeSpec(typ, ctx, children)
    if s.type == "defaultdict":
        _expect(isinstance(ctx, dict) and ctx.get("factory") in _FACTORIES, where, "a known factory")
        _expect(_are_keys(ctx.get("keys"), len(children)), where, f"keys: {_KEYS}")
        return pytree.TreeSpec(typ, [_FACTORIES[ctx["factory"]], ctx["keys"]], children)
    if s.type == "deque":
        # A maxlen under the child count would drop values when the spec unflattens them.
        maxlen = ctx.get("maxlen", False) if isinstance(ctx, dict) else False
        _expect(maxlen is None or (type(maxlen) is int and maxlen >= len(children)), where,
                "maxlen: null or an int of at least the number of children")
        return pytree.TreeSpec(typ, maxlen, children)
    if s.type == _NAMEDTUPLE:
        _expect(isinstance(ctx, dict) and isinstance(ctx.get("name"), str)
                and isinstance(ctx.get("fields"), list), where, "name and fields")
        cls = _namedtuple_class(ctx["name"], tuple(ctx["fields"]), where)
        return pytree.TreeSpec(collections.namedtuple, cls, children)
    if s.type == _STRUCTSEQ:
        _expect(isinstance(ctx, dict) and isinstance(ctx.get("name"), str)
                and isinstance(ctx.get("fields"), list), where, "name and fields")
        cls = _structseq_class(ctx["name"], ctx["fields"], len(children), where)
        return pytree.TreeSpec(cls, None, children)
    if s.type.startswith("registered:"):
        name = s.type[len("registered:"):]
        cls = pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE.get(name)
        if cls is None:
            raise MalformedArtifactError(
                f"{where}: pytree type {name!r} is not registered in this process; import the code "
                "that registers it (torch.export.register_dataclass / register_pytree_node) before loading"
            )
        node_def = pytree.SUPPORTED_SERIALIZED_TYPES[cls]
        if node_def.from_dumpable_context is not None:
            context = node_def.from_dumpable_context(s.context)
        else:
            context = ctx
        return pytree.TreeSpec(cls, context, children)
    raise MalformedArtifactError(f"{where}: unknown pytree type {s.type!r}")


def check_input_classes(in_spec: pytree.TreeSpec, arg_names: list[str] | None, where: str = "in_spec") -> None:
    """Refuse an input namedtuple whose class loading would not find again by its recorded name.

    ``in_spec`` is the (args, kwargs) spec of the program's call. torch checks each call's inputs
    against it, class by class; a class found under another name (or made up) on load would reject
    the very inputs this program accepts.

    Raises:
        UnsupportedConstructError: names the input and the class, and says how to make it findable.
    """
    for path, cls in _input_namedtuples(in_spec, arg_names):
        qual = f"{cls.__module__}.{cls.__qualname__}"
        if _find_namedtuple(qual, tuple(cls._fields)) is not cls:
            module = sys.modules.get(cls.__module__)
            bound = [k for k, v in vars(module).items() if v is cls] if module is not None else []
            name = bound[0] if bound else cls.__name__
            why = (f"it is bound to {cls.__module__}.{name}, another name" if bound else
                   f"module {cls.__module__!r} has no attribute {cls.__qualname__!r}, e.g. it is defined in a function")
            raise UnsupportedConstructError(
                f"{where}: input {path} is a namedtuple of class {qual}, which loading cannot find by that "
                f"name ({why}); the loaded program would reject such inputs. Define it at module level "
                f"under the name it is bound to ({name} = namedtuple({name!r}, ...)), or register it with "
                "pytree where it is saved and where it is loaded: "
                f"torch.utils._pytree._register_namedtuple({name}, serialized_type_name={qual!r})"
            )


def _input_namedtuples(in_spec: pytree.TreeSpec, arg_names: list[str] | None) -> list[tuple[str, type]]:
    """(readable path, class) of every namedtuple in an (args, kwargs) spec, outermost first."""
    out: list[tuple[str, type]] = []
    if in_spec.is_leaf() or in_spec.num_children != 2:
        return out
    args, kwargs = in_spec.children()
    names = list(arg_names or [])
    for i, c in enumerate(args.children()):
        _walk_namedtuples(c, names[i] if i < len(names) else f"args[{i}]", out, 0)
    if kwargs.type in (dict, collections.OrderedDict):
        for k, c in zip(kwargs.context, kwargs.children(), strict=True):
            _walk_namedtuples(c, str(k), out, 0)
    return out


def _walk_namedtuples(spec: pytree.TreeSpec, path: str, out: list, depth: int) -> None:
    if spec.is_leaf() or depth > MAX_DEPTH:
        return
    typ, ctx = spec.type, spec.context
    cls = ctx if typ is collections.namedtuple else typ if pytree.is_namedtuple_class(typ) else None
    if isinstance(cls, type):
        out.append((path, cls))
        keys = [f".{f}" for f in cls._fields]
    elif typ in (dict, collections.OrderedDict):
        keys = [f"[{k!r}]" for k in ctx]
    elif typ is collections.defaultdict:
        keys = [f"[{k!r}]" for k in ctx[1]]
    else:
        keys = [f"[{i}]" for i in range(spec.num_children)]
    for k, c in zip(keys, spec.children(), strict=False):
        _walk_namedtuples(c, path + k, out, depth + 1)


def _load(s: schema.TreeSpec, where: str) -> Any:
    if s.context is None:
        return None
    try:
        return json.loads(s.context)
    except ValueError as e:
        raise MalformedArtifactError(f"{where}.context: invalid JSON ({e})") from None
    except RecursionError:
        raise MalformedArtifactError(f"{where}.context: JSON nested too deeply to decode") from None


_KEYS = "a list of distinct str, int, float, bool or null keys, one per child"


def _are_keys(ctx: Any, n: int) -> bool:
    # The keys a dict can have and our writer stores; distinct as dict keys (1 and true are one key),
    # or unflattening would build a dict with fewer entries than the spec has children.
    return (isinstance(ctx, list) and len(ctx) == n and all(_is_key(k) for k in ctx)
            and len(set(ctx)) == n)


def _expect(ok: bool, where: str, what: str) -> None:
    if not ok:
        raise MalformedArtifactError(f"{where}.context: expected {what}; the artifact is damaged")


def _return_type(attr: str) -> type | None:
    """The class ``torch.return_types.<attr>`` when that module defines it under that very name and
    pytree flattens it as a structseq; None for any other name (the module's functions, aliases,
    missing names). Private ones count: ``torch.lu`` returns ``_lu_with_info``."""
    module = sys.modules.get(_RETURN_TYPES)
    cls = vars(module).get(attr) if module is not None else None  # no module __getattr__ hook runs
    if not (pytree.is_structseq_class(cls) and cls.__qualname__ == attr and cls in pytree.SUPPORTED_NODES):
        return None
    return cls


def _structseq_class(name: str, fields: list, n_children: int, where: str) -> type:
    prefix, _, attr = name.rpartition(".")
    cls = _return_type(attr) if prefix == _RETURN_TYPES else None
    if cls is None:
        raise MalformedArtifactError(
            f"{where}.context: {name!r} is not one of torch's named results (a structseq class "
            f"torch.return_types defines in torch {torch.__version__}); the artifact is damaged, or was written "
            "with a torch that has it: load it with that torch"
        )
    if list(cls.__match_args__) != fields or cls.n_sequence_fields != n_children:
        raise MalformedArtifactError(
            f"{where}.context: {name} has the fields {list(cls.__match_args__)} in torch {torch.__version__}, "
            f"the artifact says {fields} with {n_children} children; load it with the torch that wrote it"
        )
    return cls


def _namedtuple_class(qualname: str, fields: tuple[str, ...], where: str) -> type:
    found = _find_namedtuple(qualname, fields)
    if found is not None:
        return found
    module, _, attr_path = qualname.rpartition(".")
    key = (qualname, fields)
    cls = _SYNTHETIC_NAMEDTUPLES.get(key)
    if cls is None:
        for f in fields:
            if not (isinstance(f, str) and f.isidentifier() and not f.startswith("_")):
                raise MalformedArtifactError(f"{where}: namedtuple field {f!r} is not a valid name")
        short = attr_path.rsplit(".", 1)[-1] or "NamedTuple"
        cls = collections.namedtuple(short if short.isidentifier() else "NamedTuple", fields)
        cls.__module__ = module or "__main__"
        cls.__qualname__ = attr_path or short
        _SYNTHETIC_NAMEDTUPLES[key] = cls
    return cls


def _find_namedtuple(qualname: str, fields: tuple[str, ...]) -> type | None:
    """The namedtuple class ``qualname`` with these fields: registered with pytree, else an attribute
    path in an already-imported module; None when this process has no such class. Saving asks the
    same question (check_input_classes), so what it accepts, loading finds."""
    for cls in pytree.SUPPORTED_SERIALIZED_TYPES:
        if (isinstance(cls, type) and pytree.is_namedtuple_class(cls)
                and f"{cls.__module__}.{cls.__qualname__}" == qualname and tuple(cls._fields) == fields):
            return cls
    # Longest already-imported module prefix; never import anything named by the artifact.
    parts = qualname.split(".")
    for i in range(len(parts) - 1, 0, -1):
        mod = sys.modules.get(".".join(parts[:i]))
        if mod is None:
            continue
        obj: Any = mod
        for p in parts[i:]:
            obj = getattr(obj, p, None) if "<" not in p else None
            if obj is None:
                break
        if isinstance(obj, type) and pytree.is_namedtuple_class(obj) and tuple(obj._fields) == fields:
            return obj
        break
    return None
