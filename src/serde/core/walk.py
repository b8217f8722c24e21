"""Walk the values inside schema arguments: the names they refer to, renaming, structural keys.

Every union is dispatched here, once per direction, through a table keyed by member name that is
checked at import time to cover the union's fields. Three operations per member:

- ``names(v)``: the graph values ``v`` refers to, in order;
- ``rename(v, ctx)``: ``v`` with every reference renamed by ``ctx.value(name)`` and every subgraph
  replaced by ``ctx.subgraph(graph_argument)``; unchanged constants are returned as they are;
- ``key(v, ctx)``: a name-free description of ``v`` (plain tuples, bytes, str and int) where each
  reference is replaced by ``ctx.value(name)`` and each subgraph by ``ctx.subgraph(ga)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol

from serde.core import schema, wire

__all__ = [
    "EMPTY_STACK_KEY",
    "Visitor", "argument_names", "rename_argument", "argument_key", "argument_subgraphs",
    "output_leaves", "DIRECT_LEAF_KINDS", "SYM_VALUE_KINDS", "sym_value_exprs", "rename_sym_value",
    "HOP_PREFIX", "is_bare_return",
]

# torch marks nodes whose module stack is unknown with this key (torch._export.passes._node_metadata_hook).
EMPTY_STACK_KEY = "_empty_nn_module_stack_from_metadata_hook"


class Visitor(Protocol):
    def value(self, name: str) -> Any: ...

    def subgraph(self, ga: schema.GraphArgument) -> Any: ...


class _Kind:
    """How to walk one kind of value: its references, renaming and structural key."""

    __slots__ = ("names", "rename", "key")

    def __init__(self, names: Callable[[Any], Iterable[str]], rename: Callable[[Any, Visitor], Any],
                 key: Callable[[Any, Visitor], Any]) -> None:
        self.names, self.rename, self.key = names, rename, key


def _no_names(v: Any) -> tuple:
    return ()


def _same(v: Any, ctx: Visitor) -> Any:
    return v


def _const_key(v: Any, ctx: Visitor) -> bytes:
    return wire.encode(v)


CONST = _Kind(_no_names, _same, _const_key)

TENSOR = _Kind(
    lambda v: (v.name,),
    lambda v, ctx: schema.TensorArgument(name=ctx.value(v.name)),
    lambda v, ctx: ("t", ctx.value(v.name)),
)

CUSTOM_OBJ = _Kind(
    lambda v: (v.name,),
    lambda v, ctx: schema.CustomObjArgument(name=ctx.value(v.name), class_fqn=v.class_fqn),
    lambda v, ctx: ("o", ctx.value(v.name), v.class_fqn),
)

NAME = _Kind(lambda v: (v,), lambda v, ctx: ctx.value(v), lambda v, ctx: ("n", ctx.value(v)))

GRAPH = _Kind(_no_names, lambda v, ctx: ctx.subgraph(v), lambda v, ctx: ("g", ctx.subgraph(v)))


def _list_of(h: _Kind) -> _Kind:
    if h is CONST:
        return CONST
    return _Kind(
        lambda v: [n for x in v for n in h.names(x)],
        lambda v, ctx: [h.rename(x, ctx) for x in v],
        lambda v, ctx: tuple(h.key(x, ctx) for x in v),
    )


def _checked(cls: type, table: dict[str, _Kind]) -> dict[str, _Kind]:
    fields = set(cls.__struct_fields__)
    if set(table) != fields:
        raise AssertionError(
            f"walk table for {cls.__name__} is out of date: missing {sorted(fields - set(table))}, "
            f"extra {sorted(set(table) - fields)}"
        )
    return table


def _kind_of(u: schema.Union, order: tuple[str, ...]) -> str:
    for f in order:
        if getattr(u, f) is not None:
            return f
    raise AssertionError("unreachable: a union always has one member set")


def _union(cls: type, table: dict[str, _Kind], common: tuple[str, ...] = ()) -> _Kind:
    """A handler for union ``cls``; ``common`` lists the members to probe first (speed only)."""
    _checked(cls, table)
    order = tuple(common) + tuple(f for f in cls.__struct_fields__ if f not in common)

    def names(u: Any) -> Iterable[str]:
        k = _kind_of(u, order)
        return table[k].names(getattr(u, k))

    def rename(u: Any, ctx: Visitor) -> Any:
        k = _kind_of(u, order)
        h = table[k]
        if h is CONST:
            return u
        return cls(**{k: h.rename(getattr(u, k), ctx)})

    def key(u: Any, ctx: Visitor) -> Any:
        k = _kind_of(u, order)
        return (k, table[k].key(getattr(u, k), ctx))

    return _Kind(names, rename, key)


SYM_INT_ARG = _union(schema.SymIntArgument, {"as_name": NAME, "as_int": CONST}, ("as_name",))
SYM_FLOAT_ARG = _union(schema.SymFloatArgument, {"as_name": NAME, "as_float": CONST}, ("as_name",))
SYM_BOOL_ARG = _union(schema.SymBoolArgument, {"as_name": NAME, "as_bool": CONST}, ("as_name",))
OPT_TENSOR = _union(schema.OptionalTensorArgument, {"as_none": CONST, "as_tensor": TENSOR}, ("as_tensor",))


def _string_to_argument() -> _Kind:
    # Recursive through Argument; ARGUMENT is bound below before any call.
    return _Kind(
        lambda v: [n for x in v.values() for n in ARGUMENT.names(x)],
        lambda v, ctx: {k: ARGUMENT.rename(x, ctx) for k, x in v.items()},
        lambda v, ctx: tuple((k, ARGUMENT.key(x, ctx)) for k, x in sorted(v.items())),
    )


def _tuple() -> _Kind:
    # Recursive through Argument, like _string_to_argument.
    return _Kind(
        lambda v: [n for x in v for n in ARGUMENT.names(x)],
        lambda v, ctx: [ARGUMENT.rename(x, ctx) for x in v],
        lambda v, ctx: tuple(ARGUMENT.key(x, ctx) for x in v),
    )


_ARGUMENT_TABLE: dict[str, _Kind] = {
    "as_none": CONST,
    "as_tensor": TENSOR,
    "as_tensors": _list_of(TENSOR),
    "as_int": CONST,
    "as_ints": CONST,
    "as_float": CONST,
    "as_floats": CONST,
    "as_string": CONST,
    "as_strings": CONST,
    "as_sym_int": SYM_INT_ARG,
    "as_sym_ints": _list_of(SYM_INT_ARG),
    "as_scalar_type": CONST,
    "as_memory_format": CONST,
    "as_layout": CONST,
    "as_device": CONST,
    "as_bool": CONST,
    "as_bools": CONST,
    "as_sym_bool": SYM_BOOL_ARG,
    "as_sym_bools": _list_of(SYM_BOOL_ARG),
    "as_optional_tensors": _list_of(OPT_TENSOR),
    "as_graph": GRAPH,
    "as_custom_obj": CUSTOM_OBJ,
    "as_operator": CONST,
    "as_sym_float": SYM_FLOAT_ARG,
    "as_sym_floats": _list_of(SYM_FLOAT_ARG),
    "as_optional_tensor": OPT_TENSOR,
    "as_complex": CONST,
    "as_nested_tensors": _list_of(_list_of(TENSOR)),
    "as_int_lists": CONST,
    "as_string_to_argument": _string_to_argument(),
    "as_float_lists": CONST,
    "as_tuple": _tuple(),
}
ARGUMENT = _union(
    schema.Argument, _ARGUMENT_TABLE,
    ("as_tensor", "as_int", "as_none", "as_float", "as_ints", "as_sym_int", "as_tensors", "as_bool"),
)

# Output kinds that name exactly one value (the node's own name when it is a node's single output).
DIRECT_LEAF_KINDS = frozenset({"as_tensor", "as_sym_int", "as_sym_float", "as_sym_bool", "as_custom_obj"})
_SYM_KINDS = frozenset({"as_sym_int", "as_sym_float", "as_sym_bool"})

HOP_PREFIX = "torch.ops.higher_order."


def is_bare_return(node: schema.Node) -> bool:
    """Whether the loaded node's value is its only output itself, not a tuple unpacked by getitem.

    Operators say it in their schema. A higher-order op returns a tuple unless
    ``is_hop_single_tensor_return`` says otherwise (the writer sets it for every bare return):
    ``cond`` returning one SymInt is a 1-tuple whose element is used through a getitem. The other
    Python callables an exported program may call (``operator.add`` on sizes, ``torch.sym_*``)
    return a symbolic scalar bare.
    """
    t = node.target
    if t.startswith(HOP_PREFIX):
        return bool(node.is_hop_single_tensor_return)
    if t.startswith("torch.ops."):
        return True
    return bool(node.is_hop_single_tensor_return) or (
        len(node.outputs) == 1 and node.outputs[0].kind in _SYM_KINDS)


def argument_names(a: schema.Argument) -> Iterable[str]:
    """Names of the graph values ``a`` refers to, in order (subgraph internals excluded)."""
    t = a.as_tensor  # the common case, without the dispatch
    if t is not None:
        return (t.name,)
    return ARGUMENT.names(a)


def rename_argument(a: schema.Argument, ctx: Visitor) -> schema.Argument:
    """``a`` with references renamed and subgraphs replaced through ``ctx``."""
    t = a.as_tensor  # the common case, without the dispatch
    if t is not None:
        return schema.tensor_ref(ctx.value(t.name))
    return ARGUMENT.rename(a, ctx)


def argument_key(a: schema.Argument, ctx: Visitor) -> Any:
    """A name-free structural description of ``a`` (see the module docstring)."""
    t = a.as_tensor  # the common case, without the dispatch (same key as the table gives)
    if t is not None:
        return ("as_tensor", ("t", ctx.value(t.name)))
    return ARGUMENT.key(a, ctx)


class _SubgraphCollector:
    def __init__(self) -> None:
        self.found: list[schema.GraphArgument] = []

    def value(self, name: str) -> str:
        return name

    def subgraph(self, ga: schema.GraphArgument) -> None:
        self.found.append(ga)


def argument_subgraphs(a: schema.Argument) -> list[schema.GraphArgument]:
    """The subgraphs inside ``a``, in order."""
    c = _SubgraphCollector()
    ARGUMENT.key(a, c)
    return c.found


def output_leaves(outputs: list[schema.Argument]) -> list[tuple[int, str, str]]:
    """(position in ``outputs``, argument kind, name) of every value a node defines, in order."""
    leaves = []
    for i, o in enumerate(outputs):
        t = o.as_tensor
        if t is not None:
            leaves.append((i, "as_tensor", t.name))
            continue
        k = o.kind
        for n in ARGUMENT.names(o):
            leaves.append((i, k, n))
    return leaves


# ---------------------------------------------------------------- symbolic values (symbol renaming)

# A SymInt/SymFloat/SymBool is an expression or a literal; only expressions hold symbols.
_EXPR = _Kind(lambda v: (v,), lambda v, f: f(v), lambda v, ctx: v)
_SYM_VALUE_TABLES = {
    schema.SymInt: _checked(schema.SymInt, {"as_expr": _EXPR, "as_int": CONST}),
    schema.SymFloat: _checked(schema.SymFloat, {"as_expr": _EXPR, "as_float": CONST}),
    schema.SymBool: _checked(schema.SymBool, {"as_expr": _EXPR, "as_bool": CONST}),
}
SYM_VALUE_KINDS = tuple(_SYM_VALUE_TABLES)


def sym_value_exprs(v: schema.SymInt | schema.SymFloat | schema.SymBool) -> Iterable[schema.SymExpr]:
    """The expressions inside a symbolic value (none for a literal)."""
    k = "as_expr" if v.as_expr is not None else v.kind
    return _SYM_VALUE_TABLES[type(v)][k].names(getattr(v, k))


def rename_sym_value(v: Any, f: Callable[[schema.SymExpr], schema.SymExpr]) -> Any:
    """``v`` with every expression passed through ``f`` (returned as is when unchanged)."""
    k = "as_expr" if v.as_expr is not None else v.kind
    h = _SYM_VALUE_TABLES[type(v)][k]
    if h is CONST:
        return v
    new = h.rename(getattr(v, k), f)
    return v if new is getattr(v, k) else type(v)(**{k: new})
