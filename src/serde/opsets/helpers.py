"""Generic operator upgrader helpers: each builds a pure node rewrite from a few facts.

A rewrite is ``(node, step) -> node``: it returns a new :class:`~serde.core.schema.Node` (or the
same one when nothing changes) and raises :class:`Refusal` with the reason when the node cannot
be expressed in the other release. ``step`` is the :class:`StepContext` of the release step: the
schema of the node's operator on each side, and where the node is.

Calls are re-bound, not patched: the node's inputs are bound to the old schema by position and
name, renamed or converted, and written again in the order of the new schema (positional while
the new schema's positional parameters are given in order, keyword after that), as torch.export
writes a call.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import msgspec

from serde.core import schema

from .schemas import Arg, OpSchema

__all__ = ["Refusal", "StepContext", "Rewrite", "rebind", "rename_argument", "rewrite_target",
           "fill_new_defaults", "drop_new_defaults", "default_argument", "same_argument", "bool_to_choice",
           "retyped_argument"]

_POS, _KW = schema.ArgumentKind.POSITIONAL, schema.ArgumentKind.KEYWORD


class Refusal(Exception):
    """A node that one step cannot rewrite; ``reason`` ends up in the OperatorChangeError."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class StepContext:
    """One node in one release step: its operator's schema before and after (None: absent)."""

    source: OpSchema
    target: OpSchema | None
    where: str


@dataclass(frozen=True)
class Rewrite:
    """A node rewrite of one step; ``new_target`` is the operator it rewrites to (None: the same)."""

    apply: Callable[[schema.Node, StepContext], schema.Node]
    new_target: str | None = None

    def __call__(self, node: schema.Node, step: StepContext) -> schema.Node:
        return self.apply(node, step)

# old value -> new value of one argument (None: leave the argument out, the new default applies)
Convert = Callable[[schema.Argument], schema.Argument | None]


def rebind(node: schema.Node, source: OpSchema, target: OpSchema, new_target: str, *,
           rename: Mapping[str, str] | None = None, convert: Mapping[str, Convert] | None = None) -> schema.Node:
    """``node`` (a call of ``source``) as a call of ``target`` named ``new_target``: arguments
    renamed by ``rename`` (old name -> new name) and converted by ``convert`` (by old name).

    Raises:
        Refusal: an input does not bind to ``source``, or a bound argument has no place in ``target``.
    """
    rename, convert = rename or {}, convert or {}
    bound: dict[str, schema.Argument] = {}
    for j, na in enumerate(node.inputs):
        name = _bound_name(na, j, source)
        value = na.arg
        if name in convert:
            value = convert[name](value)
            if value is None:
                continue
        new = rename.get(name, name)
        if target.arg(new) is None:
            raise Refusal(f"argument {name!r} (inputs[{j}]) has no counterpart in {target.text}")
        bound[new] = value
    inputs, positional = [], True
    for param in target.args:
        if param.name not in bound:
            positional = False
            continue
        kind = _POS if positional and not param.kwarg_only else _KW
        positional = positional and kind is _POS
        inputs.append(schema.NamedArgument(name=param.name, arg=bound[param.name], kind=kind))
    return msgspec.structs.replace(node, target=new_target, inputs=inputs)


def rewrite_target(new_target: str, *, rename: Mapping[str, str] | None = None,
                   convert: Mapping[str, Convert] | None = None) -> Rewrite:
    """A rewrite to another operator (the step's target snapshot must have it)."""

    def rewrite(node: schema.Node, step: StepContext) -> schema.Node:
        if step.target is None:
            raise Refusal(f"{new_target} is not an operator of the target release")
        return rebind(node, step.source, step.target, new_target, rename=rename, convert=convert)

    return Rewrite(rewrite, new_target)


def rename_argument(old: str, new: str) -> Rewrite:
    """The same operator, with argument ``old`` now called ``new``: re-bound by position (a
    positional input at ``old``'s position, whatever name the file gives it) and checked by type."""

    def rewrite(node: schema.Node, step: StepContext) -> schema.Node:
        if step.target is None:
            raise Refusal(f"the target release has no {step.source.key}")
        param = step.source.arg(old)
        if param is None:
            raise Refusal(f"{step.source.key} has no argument {old!r}")
        _check_fits(node, step.source, old, param.type, "the schema takes there")
        return rebind(node, step.source, step.target, node.target, rename={old: new})

    return Rewrite(rewrite)


def fill_new_defaults() -> Rewrite:
    """The same operator, which gained arguments with defaults: the node passes each default."""

    def rewrite(node: schema.Node, step: StepContext) -> schema.Node:
        if step.target is None:
            raise Refusal(f"the target release has no {step.source.key}")
        out = rebind(node, step.source, step.target, node.target)
        passed = {na.name for na in out.inputs}
        extra = [schema.NamedArgument(name=p.name, arg=default_argument(p), kind=_KW)
                 for p in step.target.args if step.source.arg(p.name) is None and p.name not in passed]
        return msgspec.structs.replace(out, inputs=[*out.inputs, *extra])

    return Rewrite(rewrite)


def drop_new_defaults() -> Rewrite:
    """The inverse of :func:`fill_new_defaults`: arguments the older schema lacks are dropped when
    they hold their default, and refused otherwise."""

    def rewrite(node: schema.Node, step: StepContext) -> schema.Node:
        if step.target is None:
            raise Refusal(f"the target release has no {step.source.key}")
        kept = []
        for j, na in enumerate(node.inputs):
            name = _bound_name(na, j, step.source)
            if step.target.arg(name) is None:
                param = step.source.arg(name)
                if param is None or param.default is None or not same_argument(na.arg, default_argument(param)):
                    raise Refusal(f"argument {name!r} (inputs[{j}]) is not in {step.target.text}, and the node "
                                  "passes it a value other than its default")
                continue
            kept.append(na)
        return rebind(msgspec.structs.replace(node, inputs=kept), step.source, step.target, node.target)

    return Rewrite(rewrite)


def retyped_argument(name: str) -> Rewrite:
    """The same operator, whose argument ``name`` now has another type: the call is kept when what
    it passes there fits the target release's type (a widening always does), else refused."""

    def rewrite(node: schema.Node, step: StepContext) -> schema.Node:
        if step.target is None:
            raise Refusal(f"the target release has no {step.source.key}")
        param = step.target.arg(name)
        if param is None:
            raise Refusal(f"{step.target.key} has no argument {name!r}")
        _check_fits(node, step.source, name, param.type, "the target release takes there")
        return rebind(node, step.source, step.target, node.target)

    return Rewrite(rewrite)


def bool_to_choice(arg_name: str, if_true: str, if_false: str) -> Convert:
    """A bool argument that became a string choice (``qr(some)`` -> ``linalg_qr(mode)``)."""

    def convert(a: schema.Argument) -> schema.Argument | None:
        if a.as_bool is None:
            raise Refusal(f"argument {arg_name!r} holds {a.kind}; only a constant bool has a fixed "
                          f"{if_true!r}/{if_false!r} counterpart")
        return schema.Argument(as_string=if_true if a.as_bool else if_false)

    return convert


_NUMBER = re.compile(r"-?(\d+\.?\d*(e-?\d+)?|\.\d+|inf)\Z")


def default_argument(param: Arg) -> schema.Argument:
    """The argument a call passes to get ``param``'s default (text as the schema prints it)."""
    text, base = param.default, _base_type(param.type)
    if text is None:
        raise Refusal(f"argument {param.name!r} has no default")
    if text == "None":
        return schema.Argument(as_none=True)
    if text in ("True", "False"):
        return schema.Argument(as_bool=text == "True")
    if text[:1] in "\"'" and text[-1:] == text[:1]:
        return schema.Argument(as_string=text[1:-1])
    if base in ("int", "SymInt") and re.fullmatch(r"-?\d+", text):
        return schema.Argument(as_int=int(text))
    if base == "float" and _NUMBER.match(text):
        return schema.Argument(as_float=schema.to_f64(float(text)))
    if base in ("int[]", "SymInt[]") and text.startswith("[") and text.endswith("]"):
        inner = text[1:-1].strip()
        return schema.Argument(as_ints=[int(x) for x in inner.split(",")] if inner else [])
    raise Refusal(f"the default {text} of argument {param.name!r} ({param.type}) has no fixed stored form")


def same_argument(a: schema.Argument, b: schema.Argument) -> bool:
    return msgspec.json.encode(a) == msgspec.json.encode(b)


# --- helpers ---------------------------------------------------------------------------------


def _bound_name(na: schema.NamedArgument, j: int, source: OpSchema) -> str:
    """The parameter of ``source`` that input ``j`` binds to."""
    if na.kind == _KW:
        if source.arg(na.name) is None:
            raise Refusal(f"keyword argument {na.name!r} (inputs[{j}]) is not in {source.text}")
        return na.name
    positional = [p for p in source.args if not p.kwarg_only]
    if j >= len(positional):
        raise Refusal(f"inputs[{j}] is positional, and {source.text} takes {len(positional)} positional arguments")
    param = positional[j]
    if na.name not in ("", param.name):
        raise Refusal(f"positional inputs[{j}] is named {na.name!r}, where {source.text} has {param.name!r}")
    return param.name


def _check_fits(node: schema.Node, source: OpSchema, name: str, type_: str, where: str) -> None:
    """Refuse ``node`` when what it passes for argument ``name`` is no ``type_``."""
    for j, na in enumerate(node.inputs):
        if _bound_name(na, j, source) == name and not _fits(na.arg, type_):
            raise Refusal(f"argument {name!r} (inputs[{j}]) holds {na.arg.kind}, not the {type_} {where}")


def _base_type(t: str) -> str:
    """``Tensor(a!)?`` -> ``Tensor?`` without the annotation, then without ``?``; ``int[2]`` -> ``int[]``."""
    t = re.sub(r"\([^)]*\)", "", t)
    t = re.sub(r"\[\d+\]", "[]", t)
    return t.removesuffix("?")


# Stored kinds a schema type takes (types not listed here are not checked).
_FITS = {
    "Tensor": ("as_tensor",),
    "Tensor[]": ("as_tensors",),
    "float": ("as_float", "as_sym_float", "as_int", "as_sym_int"),
    "int": ("as_int", "as_sym_int"),
    "SymInt": ("as_int", "as_sym_int"),
    "bool": ("as_bool", "as_sym_bool"),
    "str": ("as_string",),
}


def _fits(a: schema.Argument, t: str) -> bool:
    kinds = _FITS.get(_base_type(t))
    if kinds is None:
        return True
    return a.kind in kinds or (t.endswith("?") and a.kind == "as_none")
