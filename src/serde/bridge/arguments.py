"""The ``Argument`` union: Python/FX values <-> schema, one exhaustive dispatch per direction.

Writing classifies a value (FX node by its ``meta["val"]``, scalar, list, dtype, ...) into one
union member; reading has a table keyed by every member name, checked at import time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.fx

from serde.core import schema
from serde.errors import UnsupportedConstructError

from .enums import (
    deserialize_dtype,
    deserialize_layout,
    deserialize_memory_format,
    serialize_dtype,
    serialize_layout,
    serialize_memory_format,
)
from .operators import deserialize_target, serialize_target
from .values import deserialize_device, serialize_device

__all__ = ["ArgumentWriter", "ArgumentReader", "value_kind"]

A = schema.Argument


def value_kind(val: Any) -> str:
    """What an FX node produces: "tensor", "sym_int", "sym_float", "sym_bool", "custom_obj", ..."""
    if isinstance(val, torch.Tensor):
        return "tensor"
    if isinstance(val, torch.SymInt):
        return "sym_int"
    if isinstance(val, torch.SymBool):
        return "sym_bool"
    if isinstance(val, torch.SymFloat):
        return "sym_float"
    if isinstance(val, bool):
        return "sym_bool"
    if isinstance(val, int):
        return "sym_int"
    if isinstance(val, float):
        return "sym_float"
    if isinstance(val, (tuple, list)):
        return "multi"
    if val is None:
        return "none"
    if _is_custom_obj(val):
        return "custom_obj"
    return type(val).__name__


def _is_custom_obj(val: Any) -> bool:
    from torch.export.graph_signature import CustomObjArgument

    return isinstance(val, (torch.ScriptObject, CustomObjArgument)) or hasattr(val, "__obj_flatten__")


# ---------------------------------------------------------------- writing


class ArgumentWriter:
    """Serializes argument values of one graph. ``subgraph`` turns a get_attr node into a GraphArgument."""

    def __init__(self, subgraph: Callable[[torch.fx.Node, str], schema.GraphArgument],
                 custom_obj_class: Callable[[torch.fx.Node], str]) -> None:
        self._subgraph = subgraph
        self._custom_obj_class = custom_obj_class

    def write(self, v: Any, where: str, arg_type: Any = None) -> schema.Argument:
        if isinstance(v, torch.fx.Node):
            return self._node(v, where)
        if v is None:
            return A(as_none=True)
        if isinstance(v, bool):
            return A(as_bool=v)
        if isinstance(v, int):
            return A(as_int=v)
        if isinstance(v, float):
            return A(as_float=schema.to_f64(v))
        if isinstance(v, complex):
            return A(as_complex=schema.ComplexValue(real=schema.to_f64(v.real), imag=schema.to_f64(v.imag)))
        if isinstance(v, str):
            return A(as_string=v)
        if isinstance(v, torch.dtype):
            return A(as_scalar_type=serialize_dtype(v, where))
        if isinstance(v, torch.layout):
            return A(as_layout=serialize_layout(v, where))
        if isinstance(v, torch.memory_format):
            return A(as_memory_format=serialize_memory_format(v, where))
        if isinstance(v, torch.device):
            return A(as_device=serialize_device(v))
        if isinstance(v, (torch._ops.OpOverload, torch._ops.HigherOrderOperator)):
            return A(as_operator=serialize_target(v, where=where))
        if isinstance(v, (list, tuple)):
            return self._list(v, where, arg_type)
        if isinstance(v, dict) and all(isinstance(k, str) for k in v):
            return A(as_string_to_argument={k: self.write(x, f"{where}[{k!r}]") for k, x in v.items()})
        raise UnsupportedConstructError(
            f"{where}: cannot store an argument of type {type(v).__qualname__} ({v!r:.80}); "
            "supported are tensors, symbolic and Python scalars, dtypes, devices, layouts, "
            "memory formats, lists of these, str-keyed dicts and subgraphs"
        )

    def _node(self, n: torch.fx.Node, where: str) -> schema.Argument:
        if n.op == "get_attr":
            return A(as_graph=self._subgraph(n, where))
        val = n.meta.get("val")
        kind = value_kind(val)
        if kind == "tensor":
            return schema.tensor_ref(n.name)
        if kind == "sym_int":
            return A(as_sym_int=schema.SymIntArgument(as_name=n.name))
        if kind == "sym_bool":
            return A(as_sym_bool=schema.SymBoolArgument(as_name=n.name))
        if kind == "sym_float":
            return A(as_sym_float=schema.SymFloatArgument(as_name=n.name))
        if kind == "custom_obj":
            return A(as_custom_obj=schema.CustomObjArgument(name=n.name, class_fqn=self._custom_obj_class(n)))
        raise UnsupportedConstructError(
            f"{where}: node {n.name!r} ({n.op} {n.target}) carries a value of kind {kind!r} that cannot be "
            "passed as an argument; only tensors, symbolic scalars and custom objects can"
        )

    def _list(self, v: list | tuple, where: str, arg_type: Any) -> schema.Argument:
        items = list(v)
        if not items:
            return _empty_list(arg_type)
        kinds = {_item_kind(x) for x in items}
        if kinds == {"tensor"}:
            return A(as_tensors=[schema.TensorArgument(name=x.name) for x in items])
        if kinds <= {"tensor", "none"}:
            return A(as_optional_tensors=[
                schema.OptionalTensorArgument(as_none=True) if x is None
                else schema.OptionalTensorArgument(as_tensor=schema.TensorArgument(name=x.name))
                for x in items
            ])
        if kinds == {"bool"}:
            return A(as_bools=items)
        if kinds == {"int"}:
            return A(as_ints=items)
        if kinds <= {"int", "float"}:
            return A(as_floats=[schema.to_f64(float(x)) for x in items])
        if kinds == {"str"}:
            return A(as_strings=items)
        if kinds <= {"int", "sym_int"}:
            return A(as_sym_ints=[
                schema.SymIntArgument(as_name=x.name) if isinstance(x, torch.fx.Node)
                else schema.SymIntArgument(as_int=x) for x in items
            ])
        if kinds <= {"bool", "sym_bool"}:
            return A(as_sym_bools=[
                schema.SymBoolArgument(as_name=x.name) if isinstance(x, torch.fx.Node)
                else schema.SymBoolArgument(as_bool=x) for x in items
            ])
        if kinds <= {"int", "float", "sym_float"}:
            return A(as_sym_floats=[
                schema.SymFloatArgument(as_name=x.name) if isinstance(x, torch.fx.Node)
                else schema.SymFloatArgument(as_float=schema.to_f64(float(x))) for x in items
            ])
        if kinds <= {"tensor", "sym_int", "sym_float", "sym_bool"}:
            # Higher-order op operands mix tensors and symbolic scalars, e.g. cond(p, f, g, (x, n)) with
            # n = x.shape[0]. Like torch's serializer, store them by name; each name's kind is known
            # from the graph's value tables.
            return A(as_tensors=[schema.TensorArgument(name=x.name) for x in items])
        if kinds == {"list"}:
            inner = {_item_kind(y) for x in items for y in x}
            if inner == {"int"} or not inner:
                return A(as_int_lists=[list(x) for x in items])
            if inner <= {"int", "float"}:
                return A(as_float_lists=[[schema.to_f64(float(y)) for y in x] for x in items])
            if inner == {"tensor"}:
                return A(as_nested_tensors=[[schema.TensorArgument(name=y.name) for y in x] for x in items])
        if isinstance(v, tuple):
            # Higher-order op operands such as flex_attention's block mask mix ints, tensors, None
            # and a graph; each item is stored as an Argument of its own.
            return A(as_tuple=[self.write(x, f"{where}[{i}]") for i, x in enumerate(items)])
        raise UnsupportedConstructError(
            f"{where}: cannot store a list mixing {sorted(kinds)}; lists must hold one kind of value "
            "(only tuples, as higher-order ops take them, may mix kinds)"
        )


def _item_kind(x: Any) -> str:
    if isinstance(x, torch.fx.Node):
        k = value_kind(x.meta.get("val"))
        return k if k in ("tensor", "sym_int", "sym_bool", "sym_float") else f"node:{k}"
    if x is None:
        return "none"
    if isinstance(x, bool):
        return "bool"
    if isinstance(x, int):
        return "int"
    if isinstance(x, float):
        return "float"
    if isinstance(x, str):
        return "str"
    if isinstance(x, (list, tuple)):
        return "list"
    return type(x).__name__


def _empty_list(arg_type: Any) -> schema.Argument:
    t = str(arg_type) if arg_type is not None else ""
    if "Tensor?" in t or "Optional[Tensor]" in t:
        return A(as_optional_tensors=[])
    if "Tensor" in t:
        return A(as_tensors=[])
    if "float" in t:
        return A(as_floats=[])
    if "bool" in t:
        return A(as_bools=[])
    if "str" in t:
        return A(as_strings=[])
    if "int" in t.lower() or t == "":
        return A(as_ints=[])
    return A(as_ints=[])


# ---------------------------------------------------------------- reading


class ArgumentReader:
    """Deserializes arguments of one graph; ``node(name)`` finds a value, ``graph(g)`` a subgraph."""

    def __init__(self, node: Callable[[str, str], torch.fx.Node],
                 graph: Callable[[schema.GraphArgument, str], torch.fx.Node]) -> None:
        self._node = node
        self._graph = graph

    def read(self, a: schema.Argument, where: str) -> Any:
        t = a.as_tensor  # the common case, without the union dispatch
        if t is not None:
            return self._node(t.name, where)
        kind = a.kind
        return _READERS[kind](self, getattr(a, kind), where)

    def _n(self, name: str, where: str) -> torch.fx.Node:
        return self._node(name, where)

    def _sym(self, s: Any, scalar: str, where: str) -> Any:
        return self._n(s.as_name, where) if s.as_name is not None else getattr(s, scalar)


def _opt_tensor(r: ArgumentReader, o: schema.OptionalTensorArgument, where: str) -> Any:
    return None if o.as_tensor is None else r._n(o.as_tensor.name, where)


def _sym_float(r: ArgumentReader, s: schema.SymFloatArgument, where: str) -> Any:
    return r._n(s.as_name, where) if s.as_name is not None else schema.from_f64(s.as_float)


_READERS: dict[str, Callable[[ArgumentReader, Any, str], Any]] = {
    "as_none": lambda r, v, w: None,
    "as_tensor": lambda r, v, w: r._n(v.name, w),
    "as_tensors": lambda r, v, w: [r._n(t.name, f"{w}[{i}]") for i, t in enumerate(v)],
    "as_int": lambda r, v, w: v,
    "as_ints": lambda r, v, w: list(v),
    "as_float": lambda r, v, w: schema.from_f64(v),
    "as_floats": lambda r, v, w: [schema.from_f64(x) for x in v],
    "as_string": lambda r, v, w: v,
    "as_strings": lambda r, v, w: list(v),
    "as_sym_int": lambda r, v, w: r._sym(v, "as_int", w),
    "as_sym_ints": lambda r, v, w: [r._sym(x, "as_int", f"{w}[{i}]") for i, x in enumerate(v)],
    "as_scalar_type": lambda r, v, w: deserialize_dtype(v, w),
    "as_memory_format": lambda r, v, w: deserialize_memory_format(v, w),
    "as_layout": lambda r, v, w: deserialize_layout(v, w),
    "as_device": lambda r, v, w: deserialize_device(v),
    "as_bool": lambda r, v, w: v,
    "as_bools": lambda r, v, w: list(v),
    "as_sym_bool": lambda r, v, w: r._sym(v, "as_bool", w),
    "as_sym_bools": lambda r, v, w: [r._sym(x, "as_bool", f"{w}[{i}]") for i, x in enumerate(v)],
    "as_optional_tensors": lambda r, v, w: [_opt_tensor(r, x, f"{w}[{i}]") for i, x in enumerate(v)],
    "as_graph": lambda r, v, w: r._graph(v, w),
    "as_custom_obj": lambda r, v, w: r._n(v.name, w),
    "as_operator": lambda r, v, w: deserialize_target(v, where=w),
    "as_sym_float": _sym_float,
    "as_sym_floats": lambda r, v, w: [_sym_float(r, x, f"{w}[{i}]") for i, x in enumerate(v)],
    "as_optional_tensor": _opt_tensor,
    "as_complex": lambda r, v, w: complex(schema.from_f64(v.real), schema.from_f64(v.imag)),
    "as_nested_tensors": lambda r, v, w: [[r._n(t.name, w) for t in xs] for xs in v],
    "as_int_lists": lambda r, v, w: [list(x) for x in v],
    "as_string_to_argument": lambda r, v, w: {k: r.read(x, f"{w}[{k!r}]") for k, x in v.items()},
    "as_float_lists": lambda r, v, w: [[schema.from_f64(y) for y in x] for x in v],
    "as_tuple": lambda r, v, w: tuple(r.read(x, f"{w}[{i}]") for i, x in enumerate(v)),
}

if set(_READERS) != set(schema.Argument.__struct_fields__):  # exhaustive dispatch, checked at import
    raise AssertionError(
        f"Argument readers out of sync with schema: {set(_READERS) ^ set(schema.Argument.__struct_fields__)}"
    )

