"""FX graphs <-> ``schema.Graph`` (``GraphWriter`` / ``GraphReader``), including subgraphs.

Multi-output nodes (``split``, ``topk``, higher-order ops) list one output per element; the
``operator.getitem`` nodes that unpack them are folded into those names on write and rebuilt on
read. Outputs nobody uses get the name ``<node>_unused_<i>``, and no getitem is rebuilt for them.
A higher-order op returns a tuple (even of one SymInt) unless ``is_hop_single_tensor_return`` says
it returns its value bare (:func:`serde.core.walk.is_bare_return`).
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Iterable
from typing import Any

import torch
import torch.fx
from torch.fx.experimental import symbolic_shapes

from serde.core import schema
from serde.core.checks import check_attr_name
from serde.core.walk import argument_names, is_bare_return  # the one walk over Argument members
from serde.errors import MalformedArtifactError, UnsupportedConstructError

from .arguments import ArgumentReader, ArgumentWriter, value_kind
from .checks import BATCH_DIM_AT, check_batch_dim_result, check_call, check_op_outputs, check_vmap_nesting
from .metadata import deserialize_node_metadata, serialize_node_metadata
from .operators import deserialize_target, serialize_target
from .values import (
    SymbolicContext,
    serialize_sym_bool,
    serialize_sym_float,
    serialize_sym_int,
    serialize_tensor_meta,
    sym_int_key,
    tensor_meta_of,
)

__all__ = ["GraphWriter", "GraphReader", "lazy_graph_module", "LAZY_CODEGEN"]

try:  # torch's lazy graph module: same module, its Python code is generated on first use
    from torch.fx._lazy_graph_module import _LazyGraphModule as _GraphModuleClass
except ImportError:  # a torch without it: generate the code at once, as a plain GraphModule does
    _GraphModuleClass = torch.fx.GraphModule
# Whether lazy_graph_module defers code generation (it does not on a torch without the lazy class).
LAZY_CODEGEN = _GraphModuleClass is not torch.fx.GraphModule

_CACHEABLE = (torch._ops.OpOverload, torch._ops.HigherOrderOperator)
_POS = schema.ArgumentKind.POSITIONAL
_KW = schema.ArgumentKind.KEYWORD
A = schema.Argument
_NO_TORCH_FUNCTION = torch._C._disabled_torch_function_impl
_SCALARS = frozenset({int, float, bool, str, type(None)})
_FX_NODE = torch.fx.Node


def lazy_graph_module(root: torch.nn.Module, graph: torch.fx.Graph) -> torch.fx.GraphModule:
    """``torch.fx.GraphModule(root, graph)`` that generates and compiles its forward's Python code on
    first use (a call, ``.code``, ``print``) instead of now: a load does not run what it builds, and
    ``ep.module()`` generates code for a module of its own anyway."""
    return _GraphModuleClass(root, graph)


def _custom_obj_class(n: torch.fx.Node) -> str:
    val = n.meta.get("val")
    fqn = getattr(val, "class_fqn", None)
    if fqn is None and isinstance(val, torch.ScriptObject):
        fqn = val._type().qualified_name()  # type: ignore[attr-defined]
    if fqn is None:
        raise UnsupportedConstructError(f"node {n.name!r}: cannot determine the class of custom object {val!r:.80}")
    return fqn


def _is_list_type(t: Any) -> bool:
    return isinstance(t, torch.ListType) or (
        isinstance(t, torch.OptionalType) and isinstance(t.getElementType(), torch.ListType)
    )


# ---------------------------------------------------------------- writing


class _SchemaFacts:
    """What the writer needs of an operator's schema, read once per operator: torch builds new
    Python objects for ``_schema.arguments`` and ``.returns`` on every access."""

    __slots__ = ("arguments", "positional", "returns_list", "_passing")

    def __init__(self, fs: torch.FunctionSchema) -> None:
        self.arguments = tuple((a.name, a.kwarg_only, a.type) for a in fs.arguments)
        self.positional = sum(1 for a in fs.arguments if not a.kwarg_only)
        self.returns_list = tuple(_is_list_type(r.type) for r in fs.returns)  # one flag per return
        self._passing: dict[Any, tuple[tuple, bool]] = {}

    def passing(self, n_args: int, kwargs: dict[str, Any]) -> tuple[tuple, bool]:
        """The stored arguments of a call with ``n_args`` positional arguments and these keywords, in
        schema order: ``(position or keyword, name, kind, type)`` each (defaults are left out), and
        whether the call matches the schema. Calls of one operator pass their arguments a few ways:
        each is worked out once (one per way that matches; the key is the arity and keyword names)."""
        key = (n_args, *kwargs) if kwargs else n_args
        known = self._passing.get(key)
        if known is not None:
            return known
        out = []
        used_kw = 0
        for i, (a_name, kwarg_only, a_type) in enumerate(self.arguments):
            if i < n_args and not kwarg_only:
                out.append((i, a_name, _POS, a_type))
            elif a_name in kwargs:
                out.append((a_name, a_name, _KW, a_type))
                used_kw += 1
            # else a default value: not stored, so the loaded node is identical
        known = (tuple(out), n_args <= self.positional and used_kw == len(kwargs))
        if known[1]:
            self._passing[key] = known
        return known


_FACTS: dict[torch._ops.OpOverload, _SchemaFacts] = {}


def _schema_facts(op: torch._ops.OpOverload) -> _SchemaFacts:
    facts = _FACTS.get(op)
    if facts is None:
        facts = _FACTS[op] = _SchemaFacts(op._schema)
    return facts


class GraphWriter:
    """Serializes one FX graph (and, recursively, the subgraphs its higher-order ops use)."""

    def __init__(self, gm: torch.fx.GraphModule, where: str = "graph") -> None:
        self.gm = gm
        self.where = where
        self.inputs: list[schema.Argument] = []
        self.outputs: list[schema.Argument] = []
        self.nodes: list[schema.Node] = []
        self.tensor_values: dict[str, schema.TensorMeta] = {}
        self.sym_int_values: dict[str, schema.SymInt] = {}
        self.sym_bool_values: dict[str, schema.SymBool] = {}
        self.sym_float_values: dict[str, schema.SymFloat] = {}
        self.custom_obj_values: dict[str, schema.CustomObjArgument] = {}
        self.is_single_tensor_return = False
        self.args = ArgumentWriter(self._subgraph, _custom_obj_class)
        self._names = {n.name for n in gm.graph.nodes}
        self._targets: dict[int, tuple[Any, str, _SchemaFacts | None]] = {}  # id -> (target, name, facts)
        # Concrete tensor metas already written: most nodes of a graph share a few (equal metas
        # give equal Structs, which are frozen, so one object serves them all).
        self._metas: dict[tuple, schema.TensorMeta] = {}
        self._stack_entries: dict[tuple, schema.ModuleStackEntry] = {}
        self._stacks: dict[tuple, list[schema.ModuleStackEntry]] = {}
        # FX node -> the Argument that refers to its value, written once and shared by every use
        self._refs: dict[torch.fx.Node, schema.Argument] = {}
        # (argument name, kind, type, value) -> the NamedArgument passing that scalar
        self._consts: dict[tuple, schema.NamedArgument] = {}

    def write(self) -> schema.Graph:
        handlers = {
            "placeholder": self._placeholder,
            "call_function": self._call_function,
            "get_attr": self._get_attr,
            "output": self._output,
        }
        for node in self.gm.graph.nodes:
            handler = handlers.get(node.op)
            if handler is None:
                raise UnsupportedConstructError(
                    f"{self.where}.nodes[{node.name!r}]: FX op {node.op!r} (target {node.target}) cannot be "
                    "saved; exported programs contain only placeholder, call_function, get_attr and output"
                )
            handler(node)
        # self.args holds a bound method of self: dropping it breaks the cycle, so the graph written
        # here is freed by reference counting once unused, not kept until a full collection.
        self.args = None  # type: ignore[assignment]
        return schema.Graph(
            inputs=self.inputs, outputs=self.outputs, nodes=self.nodes,
            tensor_values=self.tensor_values, sym_int_values=self.sym_int_values,
            sym_bool_values=self.sym_bool_values, is_single_tensor_return=self.is_single_tensor_return,
            custom_obj_values=self.custom_obj_values, sym_float_values=self.sym_float_values,
        )

    # -- values

    def _value(self, name: str, val: Any, where: str, part: str = "") -> schema.Argument:
        """Record the meta of a named value and return the argument that refers to it; ``where + part``
        names it in errors (joined only for a value that is no tensor or fails)."""
        kind = value_kind(val)
        if kind == "tensor":
            self.tensor_values[name] = self._tensor_meta(val, where, part)
            return schema.tensor_ref(name)
        where += part
        if kind == "sym_int":
            self.sym_int_values[name] = serialize_sym_int(val, where)
            return A(as_sym_int=schema.SymIntArgument(as_name=name))
        if kind == "sym_bool":
            self.sym_bool_values[name] = serialize_sym_bool(val, where)
            return A(as_sym_bool=schema.SymBoolArgument(as_name=name))
        if kind == "sym_float":
            self.sym_float_values[name] = serialize_sym_float(val, where)
            return A(as_sym_float=schema.SymFloatArgument(as_name=name))
        if kind == "custom_obj":
            fqn = getattr(val, "class_fqn", None) or val._type().qualified_name()
            obj = schema.CustomObjArgument(name=name, class_fqn=fqn)
            self.custom_obj_values[name] = obj
            return A(as_custom_obj=obj)
        if kind == "none":
            return A(as_none=True)
        raise UnsupportedConstructError(f"{where}: a value of type {type(val).__qualname__} cannot be stored")

    def _tensor_meta(self, t: torch.Tensor, where: str, part: str = "") -> schema.TensorMeta:
        """The meta of ``t``; ``where + part`` names it in errors."""
        # A subclass that does not customize __torch_function__ (FakeTensor) reads the same with it
        # disabled, and each getter skips the subclass check (about half their cost).
        with (torch._C.DisableTorchFunctionSubclass() if type(t).__torch_function__ is _NO_TORCH_FUNCTION
              else contextlib.nullcontext()):
            # (the size and the strides as their tuples, not spread: hashing and comparing them is the same)
            try:
                props = (t.dtype, t.layout, t.device, t.requires_grad, t.storage_offset(), t.shape, t.stride())
            except RuntimeError:  # a layout without strides (sparse CSR...): serialize_tensor_meta refuses it
                return serialize_tensor_meta(t, where + part)
        key: tuple | None = props
        try:
            meta = self._metas.get(key)
        except TypeError:  # a symbolic size, stride or offset: SymInts are not hashable
            key = _symbolic_meta_key(props)
            meta = self._metas.get(key) if key is not None else None
        if meta is None:
            meta = (tensor_meta_of(*props, where + part) if props[1] == torch.strided
                    else serialize_tensor_meta(t, where + part))  # (which refuses the layout)
            if key is not None:
                self._metas[key] = meta
        return meta

    # -- node kinds

    def _placeholder(self, node: torch.fx.Node) -> None:
        where = f"{self.where}.inputs[{node.name!r}]"
        val = node.meta.get("val")
        if isinstance(val, (str, type(None))) or (isinstance(val, (int, float)) and not isinstance(val, bool)
                                                  and not self._is_symbolic_placeholder(node)):
            self.inputs.append(self.args.write(val, where))  # constant input; its name is in the signature
        elif isinstance(val, bool):
            self.inputs.append(A(as_bool=val))
        else:
            self.inputs.append(self._value(node.name, val, where))

    @staticmethod
    def _is_symbolic_placeholder(node: torch.fx.Node) -> bool:
        return isinstance(node.meta.get("val"), (torch.SymInt, torch.SymFloat, torch.SymBool))

    def _get_attr(self, node: torch.fx.Node) -> None:
        attr = getattr(self.gm, node.target, None) if isinstance(node.target, str) else None
        if not isinstance(attr, torch.fx.GraphModule):
            raise UnsupportedConstructError(
                f"{self.where}.nodes[{node.name!r}]: get_attr of {node.target!r} ({type(attr).__name__}) is "
                "not supported; tensors must be lifted to inputs (torch.export does this) and only "
                "subgraphs may be attributes"
            )
        # Subgraphs are stored inline where they are used (see _subgraph).

    def _subgraph(self, node: torch.fx.Node, where: str) -> schema.GraphArgument:
        sub = getattr(self.gm, node.target)
        return schema.GraphArgument(name=node.target, graph=GraphWriter(sub, f"{where}.graph").write())

    def _output(self, node: torch.fx.Node) -> None:
        (out,) = node.args
        where = f"{self.where}.outputs"
        if isinstance(out, torch.fx.Node):
            self.is_single_tensor_return = True
            self.outputs = [self.args.write(out, where)]
        else:
            self.outputs = [self.args.write(x, f"{where}[{i}]") for i, x in enumerate(out)]

    def _call_function(self, node: torch.fx.Node) -> None:
        target = node.target
        if target is operator.getitem and _produces_multi(node.args[0]):
            return  # folded into the producer's outputs
        where = f"{self.where}.nodes[{node.name!r}]"
        # By identity: operators hash in Python, and a graph has few distinct targets (naming one is not free).
        known = self._targets.get(id(target))
        if known is None:
            known = (target, serialize_target(target, where=where),
                     _schema_facts(target) if isinstance(target, torch._ops.OpOverload) else None)
            if isinstance(target, _CACHEABLE):
                self._targets[id(target)] = known  # (holding the target keeps its id its own)
        _, name, facts = known
        if facts is not None:
            inputs = self._schema_inputs(node, facts, where)
            outputs = self._schema_outputs(node, facts, where)
            single = None
        else:
            inputs = [schema.NamedArgument(name="", arg=self.args.write(a, f"{where}.args[{i}]"), kind=_POS)
                      for i, a in enumerate(node.args)]
            inputs += [schema.NamedArgument(name=k, arg=self.args.write(v, f"{where}.kwargs[{k!r}]"), kind=_KW)
                       for k, v in node.kwargs.items()]
            val = node.meta.get("val")
            kind = value_kind(val)
            if kind == "multi":
                outputs, single = self._elements(node, val, where), None
            elif kind == "none" and not isinstance(target, torch._ops.HigherOrderOperator):
                outputs, single = [], None  # a Python callable run for its effect (vmap level bookkeeping)
            else:
                outputs = [self._value(node.name, val, f"{where}.outputs[0]")]
                # HOPs, and Python callables returning one tensor (e.g. torch._functorch.predispatch
                # wrappers), return it bare: without the flag a reader would unpack a 1-tuple.
                single = True if isinstance(target, torch._ops.HigherOrderOperator) or kind == "tensor" else None
        self.nodes.append(schema.Node(
            target=name, inputs=inputs, outputs=outputs,
            metadata=serialize_node_metadata(node.meta, where, self._stack_entries, self._stacks),
            is_hop_single_tensor_return=single, name=node.name,
        ))

    def _schema_inputs(self, node: torch.fx.Node, facts: _SchemaFacts, where: str) -> list[schema.NamedArgument]:
        args, kwargs = node.args, node.kwargs
        out = []
        refs = self._refs
        passing, matches = facts.passing(len(args), kwargs)
        for source, a_name, kind, a_type in passing:
            v = args[source] if kind is _POS else kwargs[source]
            t = type(v)
            if t is _FX_NODE and v.op != "get_attr":
                arg = refs.get(v)
                if arg is None:
                    arg = refs[v] = self.args.write(v, f"{where}.inputs[{a_name!r}]", a_type)
            elif t in _SCALARS:
                # Equal scalars give equal arguments: one frozen NamedArgument serves every node
                # passing it the same way (0.0 == -0.0, but they differ: a zero goes by its repr).
                key = (a_name, kind, t, v) if t is not float or v != 0 else (a_name, kind, t, repr(v))
                na = self._consts.get(key)
                if na is None:
                    na = self._consts[key] = schema.NamedArgument(
                        name=a_name, arg=self.args.write(v, f"{where}.inputs[{a_name!r}]", a_type), kind=kind)
                out.append(na)
                continue
            else:
                arg = self.args.write(v, f"{where}.inputs[{a_name!r}]", a_type)
            out.append(schema.NamedArgument(name=a_name, arg=arg, kind=kind))
        if not matches:
            unknown = sorted(set(kwargs) - {a[0] for a in facts.arguments})
            raise UnsupportedConstructError(
                f"{where}: arguments of {node.target} do not match its schema {node.target._schema} "
                f"({len(args)} positional, unknown keywords {unknown})"
            )
        return out

    def _schema_outputs(self, node: torch.fx.Node, facts: _SchemaFacts, where: str) -> list[schema.Argument]:
        val = node.meta.get("val")
        returns = facts.returns_list
        if not returns:
            return []
        if len(returns) == 1 and not returns[0]:
            if isinstance(val, torch.Tensor):  # most nodes: _value's tensor case, inline
                name = node.name
                self.tensor_values[name] = self._tensor_meta(val, where, ".outputs[0]")
                out = self._refs[node] = schema.tensor_ref(name)  # what a use of the value would write
                return [out]
            out = self._value(node.name, val, where, ".outputs[0]")
            if out.as_tensor is not None:
                self._refs[node] = out  # what a use of the value would write
            return [out]
        if len(returns) == 1:
            return [self._list_element(node, None, val, where)]
        if not isinstance(val, (tuple, list)) or len(val) != len(returns):
            raise UnsupportedConstructError(
                f"{where}: {node.target} declares {len(returns)} returns but its value is {type(val).__name__}"
            )
        return self._elements(node, val, where, list(returns))

    def _elements(self, node: torch.fx.Node, val: Any, where: str,
                  is_list: list[bool] | None = None) -> list[schema.Argument]:
        users = _getitem_users(node)
        out = []
        for i, v in enumerate(val):
            if (is_list and is_list[i]) or (is_list is None and isinstance(v, (list, tuple))):
                out.append(self._list_element(users.get(i), i, v, where))
            elif v is None:
                out.append(A(as_none=True))
            else:
                user = users.get(i)
                name = user.name if user is not None else self._fresh(f"{node.name}_unused_{i}")
                out.append(self._value(name, v, f"{where}.outputs[{i}]"))
        return out

    def _list_element(self, holder: torch.fx.Node | None, index: int | None, val: Any,
                      where: str) -> schema.Argument:
        """A list-typed output (``Tensor[]``): one name per element, from the getitems on ``holder``."""
        if val is None:
            return A(as_none=True)
        users = _getitem_users(holder) if holder is not None else {}
        base = holder.name if holder is not None else f"out{index}"
        names = []
        for j, v in enumerate(val):
            if not isinstance(v, torch.Tensor):
                raise UnsupportedConstructError(
                    f"{where}.outputs: list outputs must hold tensors, element {j} is {type(v).__name__}"
                )
            user = users.get(j)
            name = user.name if user is not None else self._fresh(f"{base}_unused_{j}")
            self._value(name, v, f"{where}.outputs[{j}]")
            names.append(schema.TensorArgument(name=name))
        return A(as_tensors=names)

    def _fresh(self, name: str) -> str:
        base, k = name, 0
        while name in self._names:
            k += 1
            name = f"{base}_{k}"
        self._names.add(name)
        return name


def _symbolic_meta_key(key: tuple) -> tuple | None:
    """``key`` with each size, stride and offset replaced by its ``sym_int_key`` (all its serialized
    form is made of), so that values of equal symbolic metas share one meta as concrete ones do:
    the canonicalizer and the checks then take each distinct meta once. None when a part is neither
    an int nor a SymInt with a hashable expression and hint (then nothing is shared)."""
    dtype, layout, device, requires_grad, offset, shape, stride = key
    try:
        out = (dtype, layout, device, requires_grad, sym_int_key(offset), tuple(map(sym_int_key, shape)),
               tuple(map(sym_int_key, stride)))
        hash(out)
    except (TypeError, AttributeError):
        return None
    return out


def _produces_multi(n: Any) -> bool:
    return isinstance(n, torch.fx.Node) and value_kind(n.meta.get("val")) == "multi"


def _getitem_users(node: torch.fx.Node) -> dict[int, torch.fx.Node]:
    users: dict[int, torch.fx.Node] = {}
    for u in node.users:
        if u.op == "call_function" and u.target is operator.getitem:
            users.setdefault(u.args[1], u)  # duplicates unpack the same element; keep the first
    return users


# ---------------------------------------------------------------- reading


def _referenced(g: schema.Graph, extra: Iterable[str]) -> set[str]:
    refs = set(extra)
    for n in g.nodes:
        for na in n.inputs:
            refs.update(argument_names(na.arg))
    for o in g.outputs:
        refs.update(argument_names(o))
    return refs


def _bind_unbacked(graph: torch.fx.Graph, root: torch.nn.Module, ctx: SymbolicContext) -> None:
    """Recompute ``unbacked_bindings``, which are not stored: they follow from the values.

    In each graph, an unbacked symbol is bound at the first node whose value holds it bare (``u0``,
    not ``u0 + 1``), at the key path where it sits, unless it came in through the graph's inputs (a
    subgraph's operands were bound by its caller). Subgraphs are visited just before the op that
    runs them. This reproduces torch's own bindings, including a symbol that a subgraph and then
    its caller both bind (fake ``nonzero`` of one tensor returns one memoized size symbol).
    """
    pending = set(ctx.unbacked_symbols)
    for node in graph.nodes:
        if node.op == "placeholder":
            pending -= symbolic_shapes.free_unbacked_symbols(node.meta.get("val"))
            continue
        for a in node.args:
            if isinstance(a, torch.fx.Node) and a.op == "get_attr":
                sub = getattr(root, a.target)
                _bind_unbacked(sub.graph, sub, ctx)
        val = node.meta.get("val")
        if val is None or not pending:
            continue
        bindings = symbolic_shapes._free_unbacked_symbols_with_path(
            val, (), shape_env=ctx.shape_env, pending=pending, simplify=True)
        if bindings:
            node.meta["unbacked_bindings"] = bindings


class GraphReader:
    """Rebuilds one FX graph (and its subgraphs) from ``schema.Graph``."""

    def __init__(self, ctx: SymbolicContext, where: str = "graph", object_fakes: dict[str, Any] | None = None) -> None:
        self.ctx = ctx
        self.where = where
        # custom-object input name -> its fake object (top-level graph; None when it has none)
        self.object_fakes = object_fakes or {}
        self.graph = torch.fx.Graph()
        self.root = torch.nn.Module()
        self.values: dict[str, torch.fx.Node] = {}
        self.args = ArgumentReader(self._lookup, self._subgraph)
        self._targets: dict[str, Any] = {}
        self._g: schema.Graph | None = None
        self._subgraphs: dict[str, schema.Graph] = {}
        self._tables: dict[str, dict] = {}

    def read(self, g: schema.Graph, *, constant_input_names: dict[int, str] | None = None,
             extra_refs: Iterable[str] = ()) -> torch.fx.Graph:
        try:
            return self._read(g, constant_input_names, extra_refs)
        finally:
            # The reader and its ArgumentReader refer to each other: break that cycle, so that the
            # reader, its SymbolicContext's tables and the decoded schema objects are freed by their
            # reference counts when the load returns, not left to the cyclic collector (whose next
            # collection they would otherwise bring forward).
            self._g = None
            self._tables = {}
            self._subgraphs.clear()
            self.args = None

    def _read(self, g: schema.Graph, constant_input_names: dict[int, str] | None,
              extra_refs: Iterable[str]) -> torch.fx.Graph:
        self._g = g
        self._tables = {
            "as_tensor": g.tensor_values, "as_sym_int": g.sym_int_values,
            "as_sym_bool": g.sym_bool_values, "as_sym_float": g.sym_float_values,
            "as_custom_obj": g.custom_obj_values,
        }
        refs = _referenced(g, extra_refs)
        for i, inp in enumerate(g.inputs):
            self._placeholder(i, inp, constant_input_names or {})
        for i, sn in enumerate(g.nodes):
            self._node(sn, f"{self.where}.nodes[{i}]", refs)
        check_vmap_nesting(g, self.where, top_level=self.where == "graph")
        outs = [self.args.read(o, f"{self.where}.outputs[{i}]") for i, o in enumerate(g.outputs)]
        if g.is_single_tensor_return:
            if len(outs) != 1:
                raise MalformedArtifactError(f"{self.where}.outputs: single return with {len(outs)} outputs")
            self.graph.output(outs[0])
        else:
            self.graph.output(tuple(outs))
        if self.where == "graph" and self.ctx.unbacked_symbols:
            _bind_unbacked(self.graph, self.root, self.ctx)
        return self.graph

    # -- values

    def _meta(self, name: str, kind: str, where: str) -> Any:
        m = self._tables[kind].get(name)
        if m is None:
            raise MalformedArtifactError(
                f"{where}: value {name!r} has no entry in the graph's {kind[3:]} values table"
            )
        if kind == "as_tensor":
            return self.ctx.tensor_meta(m, f"{self.where}.tensor_values[{name!r}]")
        if kind == "as_sym_int":
            return self.ctx.sym_int(m, f"{self.where}.sym_int_values[{name!r}]")
        if kind == "as_sym_bool":
            return self.ctx.sym_bool(m, f"{self.where}.sym_bool_values[{name!r}]")
        if kind == "as_sym_float":
            return self.ctx.sym_float(m, f"{self.where}.sym_float_values[{name!r}]")
        from torch.export.graph_signature import CustomObjArgument

        return CustomObjArgument(name=name, class_fqn=m.class_fqn, fake_val=self.object_fakes.get(name))

    def _output_name(self, a: schema.Argument, where: str, k: str | None = None) -> str:
        """The name of output ``a`` (whose union member is ``k``, when the caller knows it)."""
        if k is None:
            k = a.kind
        v = getattr(a, k)
        if k in ("as_tensor", "as_custom_obj"):
            return v.name
        if k in ("as_sym_int", "as_sym_bool", "as_sym_float") and v.as_name is not None:
            return v.as_name
        raise MalformedArtifactError(f"{where}: a node output must be a named value, got {k}")

    def _lookup(self, name: str, where: str) -> torch.fx.Node:
        n = self.values.get(name)
        if n is None:
            raise MalformedArtifactError(
                f"{where}: refers to {name!r}, which is not defined before this point in {self.where}"
            )
        return n

    def _define(self, name: str, fx_node: torch.fx.Node, where: str) -> None:
        if name in self.values or name in self._subgraphs:
            raise MalformedArtifactError(f"{where}: value {name!r} is defined twice in {self.where}")
        if fx_node.name != name:
            fx_node.name = name  # fx sanitizes some names (keywords, builtins); the artifact's name wins
        self.values[name] = fx_node

    # -- node kinds

    def _placeholder(self, i: int, inp: schema.Argument, constant_names: dict[int, str]) -> None:
        where = f"{self.where}.inputs[{i}]"
        k = inp.kind
        if k in ("as_tensor", "as_sym_int", "as_sym_bool", "as_sym_float", "as_custom_obj"):
            name = self._output_name(inp, where, k)
            node = self.graph.placeholder(name)
            self._define(name, node, where)
            node.meta["val"] = self._meta(name, k, where)
            return
        name = constant_names.get(i)
        if name is None:
            raise MalformedArtifactError(
                f"{where}: constant graph input ({k}) has no matching constant_input spec in the signature"
            )
        node = self.graph.placeholder(name)
        self._define(name, node, where)
        node.meta["val"] = self.args.read(inp, where)

    def _subgraph(self, ga: schema.GraphArgument, where: str) -> torch.fx.Node:
        """A get_attr node for the subgraph; each use gets its own node, as torch.export makes them.

        A subgraph used by several ops (invoke_subgraph) is stored at each use under one name;
        it becomes one submodule, and every stored copy must be the same graph.
        """
        first = self._subgraphs.get(ga.name)
        if first is None and ga.name in self.values:
            raise MalformedArtifactError(f"{where}: subgraph name {ga.name!r} is also a value of {self.where}; "
                                         "the artifact is damaged or was written by an incompatible tool")
        if first is None:
            check_attr_name(ga.name, f"{where}.name")  # also done by names.check_program; kept for direct readers
            reader = GraphReader(self.ctx, f"{where}.graph")
            graph = reader.read(ga.graph)
            setattr(self.root, ga.name, lazy_graph_module(reader.root, graph))
            self._subgraphs[ga.name] = ga.graph
        elif first != ga.graph:
            raise MalformedArtifactError(
                f"{where}: two different subgraphs are both named {ga.name!r}; the artifact is damaged "
                "or was written by an incompatible tool"
            )
        node = self.graph.get_attr(ga.name)
        if first is None and node.name != ga.name:
            node.name = ga.name
        return node

    def _node(self, sn: schema.Node, where: str, refs: set[str]) -> None:
        target = self._targets.get(sn.target)
        if target is None:
            # A graph has few distinct targets: each is resolved (and checked) once per load.
            target = self._targets[sn.target] = deserialize_target(sn.target, where=f"{where}.target")
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        for j, na in enumerate(sn.inputs):
            v = self.args.read(na.arg, f"{where}.inputs[{j}]")
            if na.kind == _KW:
                kwargs[na.name] = v
            else:
                if kwargs:
                    raise MalformedArtifactError(f"{where}.inputs[{j}]: positional argument after keywords")
                args.append(v)
        is_op = isinstance(target, torch._ops.OpOverload)
        if not is_op:
            args = [tuple(a) if isinstance(a, list) else a for a in args]  # FX records HOP operands as tuples
        at = f"{self.where}.nodes[{sn.name!r}]"
        check_call(target, sn, args, kwargs, at, self.root._modules)
        meta = deserialize_node_metadata(sn.metadata, where)
        fx_node = self.graph.create_node("call_function", target, tuple(args), kwargs, name=sn.name)
        fx_node.meta.update(meta)
        if not is_op:
            # Subgraph get_attr nodes are not stored; they take the metadata of the op that runs the
            # subgraph (as torch's loader does): unflatten places them by their nn_module_stack.
            for inp in fx_node.all_input_nodes:
                if inp.op == "get_attr":
                    inp.meta.update(meta)
        outs = sn.outputs
        if is_op:
            check_op_outputs(target, sn, at)
            returns_list = _schema_facts(target).returns_list  # read once per operator, not per node
            single = returns_list == (False,)
            list_return = returns_list == (True,)
        else:
            single = len(outs) == 1 and is_bare_return(sn)
            list_return = False
        if not outs:
            self._define(sn.name, fx_node, where)
            fx_node.meta["val"] = None
        elif single:  # one output: check_op_outputs counted an operator's, is_bare_return needs one
            k = outs[0].kind
            if k == "as_none" and is_op:  # an optional return (``Tensor?``) that was None
                self._define(sn.name, fx_node, where)
                fx_node.meta["val"] = None
                return
            name = self._output_name(outs[0], f"{where}.outputs[0]", k)
            self._define(name, fx_node, where)
            fx_node.meta["val"] = self._meta(name, k, f"{where}.outputs[0]")
            if sn.target in BATCH_DIM_AT:
                check_batch_dim_result(sn.target, fx_node, at)
        elif list_return:
            self._define(sn.name, fx_node, where)
            fx_node.meta["val"] = self._unpack(fx_node, outs[0], meta, refs, f"{where}.outputs[0]")
        else:
            self._define(sn.name, fx_node, where)
            fx_node.meta["val"] = tuple(
                self._element(fx_node, i, o, meta, refs, f"{where}.outputs[{i}]") for i, o in enumerate(outs)
            )

    def _element(self, fx_node: torch.fx.Node, i: int, o: schema.Argument, meta: dict, refs: set[str],
                 where: str) -> Any:
        k = o.kind
        if k == "as_none":
            return None
        if k == "as_tensors":
            # A list-typed element of a tuple return: unpack it through its own getitem.
            holder = self.graph.create_node("call_function", operator.getitem, (fx_node, i))
            holder.meta.update(meta)
            val = self._unpack(holder, o, meta, refs, where)
            holder.meta["val"] = val
            return val
        name = self._output_name(o, where, k)
        val = self._meta(name, k, where)
        if name in refs:
            g = self.graph.create_node("call_function", operator.getitem, (fx_node, i), name=name)
            self._define(name, g, where)
            g.meta.update(meta)
            g.meta["val"] = val
        return val

    def _unpack(self, fx_node: torch.fx.Node, o: schema.Argument, meta: dict, refs: set[str],
                where: str) -> list:
        if o.kind != "as_tensors":
            raise MalformedArtifactError(f"{where}: a list return must be stored as as_tensors, got {o.kind}")
        vals = []
        for j, t in enumerate(o.as_tensors):
            val = self._meta(t.name, "as_tensor", f"{where}[{j}]")
            vals.append(val)
            if t.name in refs:
                g = self.graph.create_node("call_function", operator.getitem, (fx_node, j), name=t.name)
                self._define(t.name, g, f"{where}[{j}]")
                g.meta.update(meta)
                g.meta["val"] = val
        return vals
