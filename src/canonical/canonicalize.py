"""Canonical form of a program: the same program always gives the same Structs (and bytes).

``canonicalize`` is a pure function on schema Structs (no torch). It

1. orders every graph's nodes by structure (:mod:`canonical.order`);
2. renames every value, node and subgraph by structure (:mod:`canonical.names`): graph inputs
   from the signature (``p_<fqn>``, ``b_<fqn>``, ``c_<name>``, ``obj_<name>``, ``token``; user
   inputs keep their names, which come from ``forward``'s arguments; subgraph inputs are
   ``arg<k>``), everything else from the operators and their neighbourhood. The new names are
   applied everywhere: node inputs and outputs, ``Node.name``, graph inputs and outputs, the value
   tables, the signature, the module call graph and subgraphs, recursively;
3. renames symbols by first appearance (:mod:`canonical.symbols`) in every expression and in the
   range constraints;
4. moves debug-only metadata out of the program (:mod:`canonical.debuginfo`).

It is idempotent, and invariant under consistent renaming of nodes and symbols and under any
topological reordering of the stored nodes that keeps their effects in order (writes against the
reads and writes of the same storage, RNG draws, effect tokens: see :mod:`canonical.effects`).
"""

from __future__ import annotations

import hashlib
import operator
import re
from typing import Any

import msgspec

from serde.core import schema
from serde.core.expr import free_symbol_names
from serde.core.expr.guards import canonical_guards
from serde.core.gcpause import paused_gc
from serde.core.opfacts import OPAQUE, FactsFn, OpFacts
from serde.core.walk import (
    DIRECT_LEAF_KINDS,
    argument_names,
    argument_subgraphs,
    is_bare_return,
    rename_argument,
)
from serde.errors import MalformedArtifactError, SerializeError

from .debuginfo import (
    DebugInfo,
    Labels,
    ModuleKeys,
    NodeDebug,
    canonical_metadata,
    debug_info,
    frames_and_scopes,
    with_debug,
)
from .names import Namespace, SubgraphNamer, node_names, sanitize
from .order import GraphIndex, canonical_order, hidden_ref_node_keys, node_key
from .symbols import SymbolRenamer

__all__ = ["canonicalize", "attach_debug", "DebugInfo", "NodeDebug", "ASSERT_MESSAGE"]


def canonicalize(program: schema.ExportedProgram, *, facts: FactsFn, keep_debug: bool = False
                 ) -> tuple[schema.ExportedProgram, DebugInfo | None]:
    """Canonical form of ``program`` and its debug info (see :func:`_canonicalize`)."""
    with paused_gc():  # it allocates many short-lived containers; a full collection costs more than the work
        return _canonicalize(program, facts=facts, keep_debug=keep_debug)


def _canonicalize(program: schema.ExportedProgram, *, facts: FactsFn, keep_debug: bool = False
                  ) -> tuple[schema.ExportedProgram, DebugInfo | None]:
    """Canonical form of ``program`` (the input is not modified).

    Args:
        program: any decoded program.
        facts: target name, node location -> what the target writes, aliases and draws
            (``serde.bridge.effects.op_facts``); the order keeps every effect where ``program`` has it.
        keep_debug: also return the debug-only metadata removed from the program.

    Returns:
        ``(canonical program, DebugInfo or None)``; DebugInfo only when ``keep_debug``.

    Raises:
        MalformedArtifactError: the program is inconsistent (a value defined twice or never
            defined, a dependency cycle, signature and graph inputs that disagree, a bad
            symbolic expression).
        SerializeError: whatever ``facts`` raises for a target it cannot describe (e.g.
            UnknownOperatorError for an operator not registered in this process).
    """
    gm = program.graph_module
    sig = gm.signature
    where = "graph_module.graph"
    g = gm.graph
    if len(sig.input_specs) != len(g.inputs):
        raise MalformedArtifactError(
            f"graph_module.signature.input_specs: {len(sig.input_specs)} specs for {len(g.inputs)} graph "
            "inputs; there must be one spec per graph input. The artifact is damaged."
        )
    input_names, reserved = _main_input_names(g, sig)
    attrs = {fqn.split(".")[0] for fqn in _state_names(sig)}
    plan = _Plan(g, input_names, reserved, where, attrs, facts)

    syms = SymbolRenamer()
    plan.see_symbols(syms)
    ranges_in = {syms.expr_text(rc.expr, f"range_constraints[{i}]"): rc
                 for i, rc in enumerate(program.range_constraints)}
    syms.see_remaining(ranges_in, "range_constraints")

    debug: dict[str, NodeDebug] | None = {} if keep_debug else None
    graph = plan.rewrite(syms, ModuleKeys(), debug, "")
    vctx = plan.rename_ctx("graph_module.signature")
    signature = schema.GraphSignature(
        input_specs=[_rename_input_spec(s, vctx) for s in sig.input_specs],
        output_specs=[_rename_output_spec(s, vctx) for s in sig.output_specs],
    )
    mcg = []
    for k, e in enumerate(gm.module_call_graph):
        s = e.signature
        if s is not None:
            vctx.where = f"graph_module.module_call_graph[{k}].signature"
            s = schema.ModuleCallSignature(
                inputs=[rename_argument(a, vctx) for a in s.inputs],
                outputs=[rename_argument(a, vctx) for a in s.outputs],
                in_spec=s.in_spec, out_spec=s.out_spec, forward_arg_names=s.forward_arg_names,
            )
        mcg.append(schema.ModuleCallEntry(fqn=e.fqn, signature=s))
    ranges = {syms.text(k, f"range_constraints[{k!r}]"): v for k, v in ranges_in.items()}
    out = schema.ExportedProgram(
        graph_module=schema.GraphModule(graph=graph, custom=gm.custom, signature=signature, module_call_graph=mcg),
        opset_version=dict(sorted(program.opset_version.items())),
        range_constraints=[
            schema.RangeConstraint(min_val=v.min_val, max_val=v.max_val, expr=syms.tree(k))
            for k, v in sorted(ranges.items())
        ],
        schema_version=program.schema_version,
        verifiers=program.verifiers,
        torch_version=program.torch_version,
        # Guards name inputs by forward parameter name and pytree key, which canonicalization
        # never renames, and their own g<N> symbols are separate from the graph's s<N>.
        guards=canonical_guards(program.guards),
    )
    return out, (debug_info(debug) if debug is not None else None)


def attach_debug(program: schema.ExportedProgram, debug: DebugInfo) -> schema.ExportedProgram:
    """``program`` (canonical) with the debug-only metadata from ``canonicalize`` put back.

    Nodes that ``debug`` does not mention are left as they are.
    """
    if not debug.nodes:
        return program
    gm = program.graph_module
    graph = _attach_graph(gm.graph, debug.nodes, "")
    return schema.ExportedProgram(
        graph_module=schema.GraphModule(graph=graph, custom=gm.custom, signature=gm.signature,
                                        module_call_graph=gm.module_call_graph),
        opset_version=program.opset_version, range_constraints=program.range_constraints,
        schema_version=program.schema_version, verifiers=program.verifiers,
        torch_version=program.torch_version, guards=program.guards,
    )


# ---------------------------------------------------------------- graph inputs


def _user_name(spec: Any, arg: schema.Argument) -> None:
    return None


def _prefixed(prefix: str, attr: str) -> Any:
    return lambda spec, arg: prefix + sanitize(getattr(spec.value, attr))


# InputSpec member -> new name of its graph input (None: keep the stored name, it is API).
_INPUT_NAMING = {
    "user_input": _user_name,
    "parameter": _prefixed("p_", "parameter_name"),
    "buffer": _prefixed("b_", "buffer_name"),
    "tensor_constant": _prefixed("c_", "tensor_constant_name"),
    "custom_obj": _prefixed("obj_", "custom_obj_name"),
    "constant_input": _user_name,
    "token": lambda spec, arg: "token",
}
assert set(_INPUT_NAMING) == set(schema.InputSpec.__struct_fields__)


def _main_input_names(g: schema.Graph, sig: schema.GraphSignature) -> tuple[list[list[str]], set[str]]:
    """New names of the top graph's inputs (per input, per name it defines), and reserved names."""
    reserved: set[str] = set()
    for a, spec in zip(g.inputs, sig.input_specs, strict=True):
        if _INPUT_NAMING[spec.kind](spec, a) is None:
            reserved.update(argument_names(a))
        if spec.kind == "constant_input":
            reserved.add(spec.constant_input.name)
    ns = Namespace(reserved)
    out: list[list[str]] = []
    for i, (a, spec) in enumerate(zip(g.inputs, sig.input_specs, strict=True)):
        cand = _INPUT_NAMING[spec.kind](spec, a)
        names = list(argument_names(a))
        if cand is None:
            out.append(names)
        else:
            if len(names) != 1:
                raise MalformedArtifactError(
                    f"graph_module.graph.inputs[{i}]: a {spec.kind} input must name one value, "
                    f"it names {len(names)}. The artifact is damaged."
                )
            out.append([ns.claim(cand)])
    return out, ns.used


def _state_names(sig: schema.GraphSignature) -> list[str]:
    out = []
    for s in sig.input_specs:
        v = s.value
        for attr in ("parameter_name", "buffer_name", "tensor_constant_name", "custom_obj_name"):
            name = getattr(v, attr, None)
            if name:
                out.append(name)
    return out


# ---------------------------------------------------------------- one graph


_first = operator.itemgetter(0)


def _digest(parts: Any) -> bytes:
    return hashlib.blake2b(repr(parts).encode(), digest_size=12).digest()


class _LocalCtx:
    """Key visitor that hides references (their producers are hashed separately)."""

    def __init__(self, plan: _Plan) -> None:
        self.plan = plan

    def value(self, name: str) -> str:
        return "."

    def subgraph(self, ga: schema.GraphArgument) -> bytes:
        return self.plan.sub[ga.name].fingerprint


class _RankCtx:
    """Key visitor that writes references as canonical positions."""

    def __init__(self, plan: _Plan, rank: list[int]) -> None:
        self.plan, self.rank = plan, rank

    def value(self, name: str) -> tuple:
        idx = self.plan.idx
        p = idx.producer[name]
        return ("in", -p - 1) if p < 0 else (self.rank[p], idx.leaf_index[name])

    def subgraph(self, ga: schema.GraphArgument) -> bytes:
        return self.plan.sub[ga.name].fingerprint


class _RenameCtx:
    """Rename visitor: references through the value map, subgraphs to their canonical form."""

    def __init__(self, plan: _Plan, where: str) -> None:
        self.plan, self.where = plan, where
        self.values = plan.value_map

    def value(self, name: str) -> str:
        new = self.values.get(name)
        if new is None:
            raise MalformedArtifactError(
                f"{self.where}: refers to {name!r}, which no node or input of {self.plan.where} defines. "
                "The artifact is damaged or was written by a faulty tool."
            )
        return new

    def subgraph(self, ga: schema.GraphArgument) -> schema.GraphArgument:
        return self.plan.sub_args[ga.name]


class _NodePart:
    """``<graph>.nodes[i].<part>``, formatted only when an error needs it."""

    __slots__ = ("graph", "i", "part")

    def __init__(self, graph: str, i: int, part: str) -> None:
        self.graph, self.i, self.part = graph, i, part

    def __str__(self) -> str:
        return f"{self.graph}.nodes[{self.i}].{self.part}"


class _Plan:
    """Canonical order and names of one graph (and, recursively, of its subgraphs)."""

    def __init__(self, g: schema.Graph, input_names: list[list[str]], reserved: set[str], where: str,
                 attrs: set[str], facts: FactsFn) -> None:
        g, self.assert_exprs = _assert_templates(g, where)
        self.graph, self.where = g, where
        nodes = g.nodes
        # Subgraphs first: the parent's order and names use their fingerprints.
        # (node index -> [(input position, argument name, subgraph)]; most nodes have none)
        self.subs_of: dict[int, list[tuple[int, str, schema.GraphArgument]]] = {}
        self.sub: dict[str, _Plan] = {}
        for i, node in enumerate(nodes):
            for j, na in enumerate(node.inputs):
                a = na.arg
                # fast path: only these members of the walk's Argument table can hold subgraphs
                if a.as_tensor is not None or (
                        a.as_graph is None and a.as_string_to_argument is None and a.as_tuple is None):
                    continue
                for ga in argument_subgraphs(a):
                    self.subs_of.setdefault(i, []).append((j, na.name, ga))
                    if ga.name not in self.sub:
                        sub_inputs = [[f"arg{k}" if m == 0 else f"arg{k}_{m}" for m, _ in enumerate(argument_names(a))]
                                      for k, a in enumerate(ga.graph.inputs)]
                        reserved_sub = {n for ns in sub_inputs for n in ns}
                        self.sub[ga.name] = _Plan(ga.graph, sub_inputs, reserved_sub,
                                                  f"{where}.nodes[{i}].inputs[{j}].graph", set(), facts)
        # One call of ``facts`` per distinct target (a graph has few); the first node of a target
        # is the one an error names, as when it was asked per node.
        by_target: dict[str, OpFacts] = {}
        node_facts = [by_target[t] if (t := node.target) in by_target and i not in self.subs_of
                      else self._node_facts(i, node, facts, by_target) for i, node in enumerate(nodes)]
        #: whether a parent must treat a call of this graph as an effect
        self.has_effects = any(f.has_effect for f in node_facts)
        self.idx = idx = GraphIndex(g, where, node_facts)
        stacks, scopes = frames_and_scopes([n.metadata for n in nodes])
        self.order = order = canonical_order(idx, stacks, lambda ga: self.sub[ga.name].fingerprint)

        # Names: inputs as given, then nodes, then multi-output values, then subgraphs.
        self.value_map: dict[str, str] = {}
        for a, new in zip(g.inputs, input_names, strict=True):
            for old, nn in zip(argument_names(a), new, strict=True):
                self.value_map[old] = nn
        ns = Namespace(reserved)
        local = _LocalCtx(self)
        producer, leaf_index, value_map = idx.producer, idx.leaf_index, self.value_map
        producers = [[(p, leaf_index[r]) if (p := producer[r]) >= 0 else (value_map[r], 0) for r in refs]
                     for refs in idx.refs]
        self.node_names = node_names(
            order, [n.target for n in nodes], scopes,
            hidden_ref_node_keys(nodes, local), producers, ns,
        )
        names, all_leaves = self.node_names, idx.leaves
        # is_bare_return of a one-output node depends on its target, its flag and its output's kind
        bare: dict[tuple, bool] = {}
        for i in order:
            node, name = nodes[i], names[i]
            leaves = all_leaves[i]
            if len(leaves) == 1 and len(node.outputs) == 1 and (kind := leaves[0][1]) in DIRECT_LEAF_KINDS:
                key = (node.target, node.is_hop_single_tensor_return, kind)
                b = bare.get(key)
                if b is None:
                    b = bare[key] = is_bare_return(node)
                if b:
                    value_map[leaves[0][2]] = name
                    continue
            for k, (_, _, old) in enumerate(leaves):
                value_map[old] = ns.claim(f"{name}_{k}")
        sub_ns = Namespace(attrs)
        sub_ns.used |= ns.used
        self.sub_names: dict[str, str] = {}
        namer = SubgraphNamer(sub_ns)
        for i in order:
            if i not in self.subs_of:
                continue
            new: dict[str, tuple[int, str]] = {}
            for k, (_, arg_name, ga) in enumerate(self.subs_of[i]):
                if ga.name not in self.sub_names and ga.name not in new:
                    new[ga.name] = (k, arg_name)
            if new:
                names = namer.claim(nodes[i].target, self.node_names[i], list(new.values()))
                self.sub_names.update(zip(new, names, strict=True))
        self._fingerprint: bytes | None = None
        self.sub_args: dict[str, schema.GraphArgument] = {}

    def _node_facts(self, i: int, node: schema.Node, facts: FactsFn, by_target: dict[str, OpFacts]) -> OpFacts:
        f = by_target.get(node.target)
        if f is None:
            f = by_target[node.target] = facts(node.target, f"{self.where}.nodes[{i}] ({node.name!r})")
        if any(self.sub[ga.name].has_effects for _, _, ga in self.subs_of.get(i, ())):
            # What a subgraph writes is one of the operands handed to it, or state: opaque.
            return OPAQUE
        return f

    @property
    def fingerprint(self) -> bytes:
        """Name-free structural hash of the graph (how a parent tells its subgraphs apart)."""
        if self._fingerprint is None:
            nodes, idx = self.graph.nodes, self.idx
            rank = [0] * len(nodes)
            for r, i in enumerate(self.order):
                rank[i] = r
            rctx = _RankCtx(self, rank)
            self._fingerprint = _digest((
                len(self.graph.inputs),
                tuple(node_key(nodes[i], rctx) for i in self.order),
                tuple(rctx.value(r) for r in idx.output_refs),
            ))
        return self._fingerprint

    def rename_ctx(self, where: str) -> _RenameCtx:
        return _RenameCtx(self, where)

    # -- symbols

    def see_symbols(self, syms: SymbolRenamer) -> None:
        g, idx = self.graph, self.idx
        for a in g.inputs:
            for name in argument_names(a):
                self._see_value(name, syms)
        seen_sub: set[str] = set()
        tensor_values, seen_meta, subs_of = g.tensor_values, syms.seen_meta, self.subs_of
        for i in self.order:
            if i in subs_of:
                for _, _, ga in subs_of[i]:
                    if ga.name not in seen_sub:
                        seen_sub.add(ga.name)
                        self.sub[ga.name].see_symbols(syms)
            for _, _, name in idx.leaves[i]:
                m = tensor_values.get(name)
                if m is None or not seen_meta(m):  # (most values share a meta seen already)
                    self._see_value(name, syms)
            text = self.assert_exprs.get(i)
            if text is not None:
                # A message may name a symbol nothing else holds any more (torch replaced it
                # after the check was written): it is numbered where the message stands.
                syms.see_text(text, f"{self.where}.nodes[{i}].inputs[1]")

    def _see_value(self, name: str, syms: SymbolRenamer) -> None:
        g = self.graph
        m = g.tensor_values.get(name)
        if m is not None:
            if not syms.seen_meta(m):
                syms.see_meta(m, f"{self.where}.tensor_values[{name!r}]")
            return
        for field in ("sym_int_values", "sym_float_values", "sym_bool_values"):
            v = getattr(g, field).get(name)
            if v is not None:
                syms.see_value(v, f"{self.where}.{field}[{name!r}]")
                return

    # -- rewriting

    def rewrite(self, syms: SymbolRenamer, keys: ModuleKeys, debug: dict[str, NodeDebug] | None,
                path: str) -> schema.Graph:
        g, nodes = self.graph, self.graph.nodes
        ctx = _RenameCtx(self, self.where)
        labels = Labels()
        new_nodes: list[schema.Node] = []
        prefix = f"{path}/" if path else ""
        # A value's renamed tensor reference, built once and shared by its definition and every use
        # (Structs are immutable).
        tensor_refs: dict[str, schema.Argument] = {}
        # Any other argument object renames the same wherever it is used (writers share constants).
        others: dict[int, tuple[schema.Argument, schema.Argument]] = {}  # id -> (argument, renamed)

        def rename(a: schema.Argument) -> schema.Argument:
            t = a.as_tensor
            if t is None:
                done = others.get(id(a))
                if done is None:
                    done = others[id(a)] = (a, rename_argument(a, ctx))
                return done[1]
            new = tensor_refs.get(t.name)
            if new is None:
                new = tensor_refs[t.name] = schema.tensor_ref(ctx.value(t.name))
            return new

        at = _NodePart(self.where, 0, "inputs")  # one location object, updated per node and part
        ctx.where = at
        names, subs_of, NamedArgument, tensor_ref = self.node_names, self.subs_of, schema.NamedArgument, schema.tensor_ref
        value_map = self.value_map  # (a name it lacks goes through ctx.value, which raises naming it)
        for i in self.order:
            node, name = nodes[i], names[i]
            # Subgraphs are rewritten (and their symbols renamed) before the node refers to them.
            if i in subs_of:
                for _, _, ga in subs_of[i]:
                    if ga.name not in self.sub_args:
                        sub_name = self.sub_names[ga.name]
                        sub_graph = self.sub[ga.name].rewrite(syms, keys, debug, prefix + sub_name)
                        self.sub_args[ga.name] = schema.GraphArgument(name=sub_name, graph=sub_graph)
                ctx.where = at
            at.i, at.part = i, "inputs"
            inputs = []
            for na in node.inputs:
                a = na.arg
                t = a.as_tensor
                if t is not None:  # most inputs: rename's tensor case, inline
                    arg = tensor_refs.get(t.name)
                    if arg is None:
                        arg = tensor_refs[t.name] = tensor_ref(value_map.get(t.name) or ctx.value(t.name))
                else:
                    arg = rename(a)
                    if arg is a:  # a constant comes back as it is: so can its NamedArgument
                        inputs.append(na)
                        continue
                inputs.append(NamedArgument(name=na.name, arg=arg, kind=na.kind))
            at.part = "outputs"
            outs = node.outputs
            t = outs[0].as_tensor if len(outs) == 1 else None
            if t is not None and t.name not in tensor_refs:  # most nodes: a fresh tensor, inline
                new_ref = tensor_refs[t.name] = tensor_ref(value_map.get(t.name) or ctx.value(t.name))
                outputs = [new_ref]
            else:
                outputs = [rename(o) for o in outs]
            if node.target == _ASSERT_TARGET and _has_template(inputs):
                inputs[1] = self._assert_message(inputs[1], node.inputs[0].arg, syms, self.assert_exprs.get(i))
            meta, dbg = canonical_metadata(node.metadata, name, keys, labels, debug is not None)
            if dbg is not None and debug is not None:
                debug[prefix + name] = dbg
            new_nodes.append(schema.Node(
                target=node.target, inputs=inputs, outputs=outputs, metadata=meta,
                is_hop_single_tensor_return=node.is_hop_single_tensor_return, name=name,
            ))
        ctx.where = f"{self.where}.inputs"
        new_inputs = [rename_argument(a, ctx) for a in g.inputs]
        ctx.where = f"{self.where}.outputs"
        new_outputs = [rename_argument(a, ctx) for a in g.outputs]
        return schema.Graph(
            inputs=new_inputs, outputs=new_outputs, nodes=new_nodes,
            tensor_values=self._table(g.tensor_values, "tensor_values", syms.meta),
            sym_int_values=self._table(g.sym_int_values, "sym_int_values", syms.value),
            sym_bool_values=self._table(g.sym_bool_values, "sym_bool_values", syms.value),
            is_single_tensor_return=g.is_single_tensor_return,
            custom_obj_values=self._table(
                g.custom_obj_values, "custom_obj_values",
                lambda v: schema.CustomObjArgument(name=self.value_map[v.name], class_fqn=v.class_fqn)
                if v.name in self.value_map else v),
            sym_float_values=self._table(g.sym_float_values, "sym_float_values", syms.value),
        )

    def _assert_message(self, na: schema.NamedArgument, cond: schema.Argument, syms: SymbolRenamer,
                        text: str | None) -> schema.NamedArgument:
        """torch's message for an assert of ``cond``, in canonical symbols and names: its own
        expression ``text`` when it had one, else the expression of ``cond``'s value."""
        name = cond.as_sym_bool.as_name
        v = self.graph.sym_bool_values.get(name)
        if text is not None:
            expr = syms.text(text, f"{self.where}.sym_bool_values[{name!r}]")
        elif v is None or v.as_expr is None:
            expr = str(v.as_bool) if v is not None else name
        else:
            expr = syms.text(syms.expr_text(v.as_expr.expr, f"{self.where}.sym_bool_values[{name!r}]"))
        text = _ASSERT_TEMPLATE.format(expr=expr, node=self.value_map.get(name, name))
        return schema.NamedArgument(name=na.name, arg=schema.Argument(as_string=text), kind=na.kind)

    def _table(self, table: dict[str, Any], field: str, f: Any) -> dict[str, Any]:
        value_map = self.value_map
        try:
            renamed = [(value_map[k], v) for k, v in table.items()]
        except KeyError:
            k = next(k for k in table if k not in value_map)
            raise MalformedArtifactError(
                f"{self.where}.{field}[{k!r}]: no node or input of the graph defines {k!r}; "
                "value tables may only describe values of their graph. The artifact is damaged."
            ) from None
        renamed.sort(key=_first)  # by new name (stable: should two share one, the last wins, as in a dict)
        return {new: f(v) for new, v in renamed}


# ---------------------------------------------------------------- assert messages

# torch writes the symbols and the node name an assert had while tracing into its message, so two
# orders of the same independent checks would name them differently. Such a message is a template
# while the graph is ordered and named (its words are fixed, the names are not: it keys nothing),
# and is written again from the canonical expression and name when the node is rewritten.
_ASSERT_TARGET = "torch.ops.aten._assert_scalar.default"
#: torch's message for a failed assert of a symbolic bool (its names are the program's, not fixed).
ASSERT_MESSAGE = re.compile(r"Runtime assertion failed for expression (.+) on node '[^']*'", re.S)
_ASSERT_TEMPLATE = "Runtime assertion failed for expression {expr} on node '{node}'"


def _has_template(inputs: list[schema.NamedArgument]) -> bool:
    return (len(inputs) == 2 and inputs[0].arg.as_sym_bool is not None
            and inputs[0].arg.as_sym_bool.as_name is not None and inputs[1].arg.as_string == _ASSERT_TEMPLATE)


def _assert_templates(g: schema.Graph, where: str) -> tuple[schema.Graph, dict[int, str]]:
    """``g`` with the messages torch wrote for its asserts of named symbolic bools as the template,
    and the expression text of each such message that parses, by node index.

    The expression is kept from the message rather than printed again from the asserted value:
    torch may have simplified that value since (a check that became known, a symbol replaced by
    another), and then only the message still says what was checked.
    """
    if not any(n.target == _ASSERT_TARGET for n in g.nodes):
        return g, {}
    nodes = []
    exprs: dict[int, str] = {}
    for i, n in enumerate(g.nodes):
        ins = n.inputs
        m = None
        if (n.target == _ASSERT_TARGET and len(ins) == 2 and ins[0].arg.as_sym_bool is not None
                and ins[0].arg.as_sym_bool.as_name is not None and ins[1].arg.as_string is not None):
            m = ASSERT_MESSAGE.fullmatch(ins[1].arg.as_string)
        if m is not None:
            msg = schema.NamedArgument(name=ins[1].name, arg=schema.Argument(as_string=_ASSERT_TEMPLATE),
                                       kind=ins[1].kind)
            n = msgspec.structs.replace(n, inputs=[ins[0], msg])
            try:
                free_symbol_names(m.group(1), where=f"{where}.nodes[{i}].inputs[1]")
            except SerializeError:
                pass  # not an expression this parser reads: the message is printed from the value
            else:
                exprs[i] = m.group(1)
        nodes.append(n)
    return msgspec.structs.replace(g, nodes=nodes), exprs


# ---------------------------------------------------------------- signature


def _arg_spec(cls: type, *names: str) -> Any:
    """Renamer for a spec struct whose ``arg`` is a Tensor/Token/CustomObj argument."""
    def rename(v: Any, ctx: _RenameCtx) -> Any:
        a = v.arg
        if isinstance(a, schema.CustomObjArgument):
            new_arg = schema.CustomObjArgument(name=ctx.value(a.name), class_fqn=a.class_fqn)
        else:
            new_arg = type(a)(name=ctx.value(a.name))
        fields = {n: getattr(v, n) for n in names}
        return cls(arg=new_arg, **fields)
    return rename


def _user_arg_spec(cls: type, name_field: str | None = None) -> Any:
    def rename(v: Any, ctx: _RenameCtx) -> Any:
        if name_field is None:
            return cls(arg=rename_argument(v.arg, ctx))
        # The user input named here is normally a graph input, renamed like it. torch's joint graphs
        # name it by its tracing-time placeholder ("arg2_1"), no graph value: that name is kept.
        old = getattr(v, name_field)
        return cls(arg=_arg_spec_arg(v.arg, ctx), **{name_field: ctx.values.get(old, old)})
    return rename


def _arg_spec_arg(a: schema.TensorArgument, ctx: _RenameCtx) -> schema.TensorArgument:
    return schema.TensorArgument(name=ctx.value(a.name))


_INPUT_SPEC_RENAME = {
    "user_input": _user_arg_spec(schema.UserInputSpec),
    "parameter": _arg_spec(schema.InputToParameterSpec, "parameter_name"),
    "buffer": _arg_spec(schema.InputToBufferSpec, "buffer_name", "persistent"),
    "tensor_constant": _arg_spec(schema.InputToTensorConstantSpec, "tensor_constant_name"),
    "custom_obj": _arg_spec(schema.InputToCustomObjSpec, "custom_obj_name"),
    "constant_input": lambda v, ctx: v,
    "token": _arg_spec(schema.InputTokenSpec),
}
_OUTPUT_SPEC_RENAME = {
    "user_output": _user_arg_spec(schema.UserOutputSpec),
    "loss_output": _arg_spec(schema.LossOutputSpec),
    "buffer_mutation": _arg_spec(schema.BufferMutationSpec, "buffer_name"),
    "gradient_to_parameter": _arg_spec(schema.GradientToParameterSpec, "parameter_name"),
    "gradient_to_user_input": _user_arg_spec(schema.GradientToUserInputSpec, "user_input_name"),
    "user_input_mutation": _user_arg_spec(schema.UserInputMutationSpec, "user_input_name"),
    "token": _arg_spec(schema.OutputTokenSpec),
    "parameter_mutation": _arg_spec(schema.ParameterMutationSpec, "parameter_name"),
}
assert set(_INPUT_SPEC_RENAME) == set(schema.InputSpec.__struct_fields__)
assert set(_OUTPUT_SPEC_RENAME) == set(schema.OutputSpec.__struct_fields__)


def _rename_input_spec(s: schema.InputSpec, ctx: _RenameCtx) -> schema.InputSpec:
    k = s.kind
    return schema.InputSpec(**{k: _INPUT_SPEC_RENAME[k](s.value, ctx)})


def _rename_output_spec(s: schema.OutputSpec, ctx: _RenameCtx) -> schema.OutputSpec:
    k = s.kind
    return schema.OutputSpec(**{k: _OUTPUT_SPEC_RENAME[k](s.value, ctx)})


# ---------------------------------------------------------------- debug info


class _AttachCtx:
    def __init__(self, debug: dict[str, NodeDebug], prefix: str) -> None:
        self.debug, self.prefix = debug, prefix

    def value(self, name: str) -> str:
        return name

    def subgraph(self, ga: schema.GraphArgument) -> schema.GraphArgument:
        return schema.GraphArgument(name=ga.name, graph=_attach_graph(ga.graph, self.debug, self.prefix + ga.name))


def _attach_graph(g: schema.Graph, debug: dict[str, NodeDebug], path: str) -> schema.Graph:
    prefix = f"{path}/" if path else ""
    ctx = _AttachCtx(debug, prefix)
    nodes = []
    for n in g.nodes:
        d = debug.get(prefix + n.name)
        meta = with_debug(n.metadata, d) if d is not None else n.metadata
        has_sub = any(argument_subgraphs(na.arg) for na in n.inputs)
        inputs = [schema.NamedArgument(name=na.name, arg=rename_argument(na.arg, ctx), kind=na.kind)
                  for na in n.inputs] if has_sub else n.inputs
        nodes.append(schema.Node(target=n.target, inputs=inputs, outputs=n.outputs, metadata=meta,
                                 is_hop_single_tensor_return=n.is_hop_single_tensor_return, name=n.name))
    return schema.Graph(
        inputs=g.inputs, outputs=g.outputs, nodes=nodes, tensor_values=g.tensor_values,
        sym_int_values=g.sym_int_values, sym_bool_values=g.sym_bool_values,
        is_single_tensor_return=g.is_single_tensor_return, custom_obj_values=g.custom_obj_values,
        sym_float_values=g.sym_float_values,
    )
