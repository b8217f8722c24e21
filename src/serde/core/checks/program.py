"""The name and size checks of a whole program: every name, list length, rank and node count.

:func:`check_program` runs before any torch object is built from the program; it applies the grammar of
:mod:`~serde.core.checks.names` and the caps of :mod:`~serde.core.checks.shapes` to the graph and its
subgraphs, the node metadata, the graph signature and the module call graph.
"""

from __future__ import annotations

from serde.core import schema
from serde.core.errors import TooManyNodesError
from serde.core.limits import DEFAULT_LIMITS, Limits, check_limit
from serde.core.walk import argument_subgraphs

from .arguments import Known, argument_ok, check_argument, check_argument_names
from .names import (
    IDENT,
    KEYWORDS,
    check_attr_name,
    check_fqn,
    check_keyword_name,
    check_local_name,
    check_quoted_text,
    check_text,
    show,
    text_ok,
)
from .shapes import check_int64, check_list, check_shape, shape_ok
from .signature import check_module_call_graph_names, check_signature_names

__all__ = ["check_program"]


def check_program(p: schema.ExportedProgram, limits: Limits = DEFAULT_LIMITS) -> None:
    """Check every name, list length, rank and node count in ``p`` (the grammar: :mod:`serde.core.checks.names`).

    Raises:
        UnsafeNameError: a name breaks its grammar or is reserved (the message names the field).
        LimitError subclasses: a cap of ``limits`` is exceeded.
    """
    gm = p.graph_module
    for i, rc in enumerate(p.range_constraints):
        check_int64(rc.min_val, f"range_constraints[{i}].min_val")
        check_int64(rc.max_val, f"range_constraints[{i}].max_val")
    counter = [0]
    _check_graph(gm.graph, "graph", limits, counter)
    if gm.custom is not None:
        check_text(gm.custom, "graph_module.custom", limits)
    check_signature_names(gm.signature, limits)
    for i, a in enumerate(gm.graph.inputs):
        if a.as_string is not None:
            check_quoted_text(a.as_string, f"graph.inputs[{i}].as_string", "constant", limits)
    check_module_call_graph_names(gm.module_call_graph, limits)


def _check_graph(g: schema.Graph, where: str, limits: Limits, counter: list[int]) -> None:
    # Each entry is first checked by a fast predicate that builds no field path; only an entry it
    # does not accept goes through the detailed checks, which raise naming the field.
    counter[0] += len(g.nodes)
    check_limit(counter[0], limits, "max_nodes", f"{where}.nodes", "the number of nodes (so far)",
                TooManyNodesError)
    known = Known()
    for table in ("tensor_values", "sym_int_values", "sym_bool_values", "sym_float_values", "custom_obj_values"):
        values = getattr(g, table)
        if known.all_local_ok(values, limits):
            continue
        for name in values:
            if not known.local_ok(name, limits):
                check_local_name(name, f"{where}.{table}[{show(name)}]", limits)
    shapes_ok: dict[int, schema.TensorMeta] = {}  # metas that passed, by identity (writers share them)
    for name, meta in g.tensor_values.items():
        if id(meta) in shapes_ok:
            continue
        if not shape_ok(meta.sizes, meta.strides, limits):
            check_shape(meta.sizes, meta.strides, f"{where}.tensor_values[{show(name)}]", limits)
        shapes_ok[id(meta)] = meta
    for i, a in enumerate(g.inputs):
        check_argument(a, f"{where}.inputs[{i}]", limits, known)
    for i, a in enumerate(g.outputs):
        check_argument(a, f"{where}.outputs[{i}]", limits, known)
    for i, n in enumerate(g.nodes):
        if _node_ok(n, limits, known):
            continue
        at = f"{where}.nodes[{i}]"
        check_local_name(n.name, f"{at}.name", limits)
        check_list(n.inputs, f"{at}.inputs", limits)
        for j, na in enumerate(n.inputs):
            if na.kind == schema.ArgumentKind.KEYWORD:
                check_keyword_name(na.name, f"{at}.inputs[{j}].name", limits)
            check_argument_names(na.arg, f"{at}.inputs[{j}]", limits)
            for k, ga in enumerate(argument_subgraphs(na.arg)):
                check_attr_name(ga.name, f"{at}.inputs[{j}].subgraph[{k}].name", limits)
                _check_graph(ga.graph, f"{at}.inputs[{j}].graph", limits, counter)
        check_list(n.outputs, f"{at}.outputs", limits)
        for j, o in enumerate(n.outputs):
            check_argument_names(o, f"{at}.outputs[{j}]", limits)
        _check_metadata(n.metadata, f"{at}.metadata", limits)


def _node_ok(n: schema.Node, limits: Limits, known: Known) -> bool:
    """Every check ``_check_graph`` makes on node ``n`` passes, and ``n`` has no subgraph."""
    cap = limits.max_list_len
    # (inline: names that passed already, the node's own among them when a value table listed it)
    passed_names = known.locals
    name = n.name
    if not (type(name) is str and name in passed_names) and not known.local_ok(name, limits):
        return False
    if len(n.inputs) > cap or len(n.outputs) > cap:
        return False
    passed = known.args
    for na in n.inputs:
        if na.kind == _KEYWORD and not (
                type(na.name) is str and len(na.name) <= limits.max_name_chars
                and IDENT.match(na.name) is not None and na.name not in KEYWORDS):
            return False
        a = na.arg
        if id(a) not in passed:
            if not argument_ok(a, limits, known):
                return False
            passed[id(a)] = a
    for o in n.outputs:
        if id(o) not in passed:
            t = o.as_tensor  # (inline: argument_ok of a reference to a value whose name passed)
            if not (t is not None and type(t.name) is str and t.name in passed_names) and (
                    not argument_ok(o, limits, known)):
                return False
            passed[id(o)] = o
    return _metadata_ok(n.metadata, limits, known)


_KEYWORD = schema.ArgumentKind.KEYWORD


def _metadata_ok(m: schema.NodeMetadata, limits: Limits, known: Known) -> bool:
    """``_check_metadata`` would accept ``m``."""
    if m.stack_trace is not None and not text_ok(m.stack_trace, limits):
        return False
    if m.custom is not None and not known.text_ok(m.custom, limits):
        return False
    stack = m.nn_module_stack
    if stack is not None and id(stack) not in known.stacks:
        if len(stack) > limits.max_list_len:
            return False
        for e in stack:
            if not (known.text_ok(e.key, limits) and known.fqn_ok(e.path, limits)
                    and (e.type_name is None or known.text_ok(e.type_name, limits))):
                return False
        known.stacks[id(stack)] = stack
    if m.source_fn_stack is not None:
        if len(m.source_fn_stack) > limits.max_list_len:
            return False
        for sf in m.source_fn_stack:
            if not (text_ok(sf.name, limits) and known.text_ok(sf.target, limits)):
                return False
    return m.torch_fn is None or (text_ok(m.torch_fn.name, limits) and known.text_ok(m.torch_fn.target, limits))


def _check_metadata(m: schema.NodeMetadata, where: str, limits: Limits) -> None:
    if m.stack_trace is not None:
        check_text(m.stack_trace, f"{where}.stack_trace", limits)
    if m.custom is not None:
        check_text(m.custom, f"{where}.custom", limits)
    if m.nn_module_stack is not None:
        check_list(m.nn_module_stack, f"{where}.nn_module_stack", limits)
        for j, e in enumerate(m.nn_module_stack):
            at = f"{where}.nn_module_stack[{j}]"
            check_text(e.key, f"{at}.key", limits)
            check_fqn(e.path, f"{at}.path", limits, root=True)
            if e.type_name is not None:
                check_text(e.type_name, f"{at}.type_name", limits)
    if m.source_fn_stack is not None:
        check_list(m.source_fn_stack, f"{where}.source_fn_stack", limits)
        for j, sf in enumerate(m.source_fn_stack):
            check_text(sf.name, f"{where}.source_fn_stack[{j}].name", limits)
            check_text(sf.target, f"{where}.source_fn_stack[{j}].target", limits)
    if m.torch_fn is not None:
        check_text(m.torch_fn.name, f"{where}.torch_fn.name", limits)
        check_text(m.torch_fn.target, f"{where}.torch_fn.target", limits)
