"""Build schema programs for canonicalizer tests from an abstract description.

A :class:`Prog` describes a program without names: inputs, nodes whose arguments refer to inputs
or nodes by index, outputs, symbols. :func:`render` turns it into ``schema.ExportedProgram`` with
any node order (a topological permutation), any node names and any symbol names, so tests can
check that the canonical form does not depend on them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from serde.core import schema

S = schema
A = schema.Argument

# Schema 1.x stores expressions as text (SymExpr.expr_str, range_constraints keyed by text);
# 2.x as trees (SymExpr.expr, a list of RangeConstraint with .expr). Tests speak text through these.
_TREES = "expr" in S.SymExpr.__struct_fields__


def sym_expr(text: str) -> S.SymExpr:
    if _TREES:
        from serde.core.expr import expr_from_text
        return S.SymExpr(expr=expr_from_text(text))
    return S.SymExpr(expr_str=text)


def expr_of(v: S.SymInt | S.SymExpr) -> str:
    """Text of a SymInt/SymBool/SymFloat expression (or of a SymExpr)."""
    e = v.as_expr if not isinstance(v, S.SymExpr) else v
    if _TREES:
        from serde.core.expr import expr_text
        return expr_text(e.expr)
    return e.expr_str


def make_ranges(ranges: dict[str, tuple[int | None, int | None]]) -> Any:
    if _TREES:
        from serde.core.expr import expr_from_text
        return [S.RangeConstraint(min_val=lo, max_val=hi, expr=expr_from_text(k)) for k, (lo, hi) in ranges.items()]
    return {k: S.RangeConstraint(min_val=lo, max_val=hi) for k, (lo, hi) in ranges.items()}


def ranges_of(p: S.ExportedProgram) -> dict[str, tuple[int | None, int | None]]:
    rc = p.range_constraints
    if _TREES:
        from serde.core.expr import expr_text
        return {expr_text(r.expr): (r.min_val, r.max_val) for r in rc}
    return {k: (r.min_val, r.max_val) for k, r in rc.items()}

# Argument descriptions (tuples):
#   ("in", k) / ("n", i) / ("n", i, leaf)  tensor reference to input k / node i (output leaf)
#   ("ts", [ref, ...])                     list of tensor references
#   ("sym", ref)                           SymInt reference
#   ("i", 3) ("f", 2.0) ("b", True) ("none",) ("ints", [1, 2]) ("str", "x")   constants
#   ("g", Prog)                            subgraph (its inputs are bound positionally)


@dataclass
class NodeSpec:
    target: str
    args: list[tuple]
    out: str = "tensor"          # "tensor" | "symint" | "multi:<n>" | "list:<n>" | "none"
    shape: list[Any] = field(default_factory=lambda: [4])   # ints or expr templates "{s0}"
    module: list[tuple[str, str]] | None = None             # [(key, path), ...]
    stack_trace: str | None = None
    sym_expr: str | None = None                             # for out == "symint"
    names: list[str] | None = None                          # schema argument names (default a0, a1, ...)
    # What the stored order says about effects (see effect_deps): storage roots it reads and writes
    # (any hashable), whether it is an effect (a write, an RNG draw) or a check (an assert).
    reads: tuple = ()
    writes: tuple = ()
    effect: bool = False
    check: bool = False


@dataclass
class InputSpecDesc:
    kind: str                    # "user" | "param" | "buffer" | "const"
    name: str                    # user input name or state fqn
    shape: list[Any] = field(default_factory=lambda: [4])


@dataclass
class Prog:
    inputs: list[InputSpecDesc]
    nodes: list[NodeSpec]
    outputs: list[tuple]
    ranges: dict[str, tuple[int | None, int | None]] = field(default_factory=dict)  # template -> range


def _meta(shape: list[Any], syms: dict[str, str]) -> S.TensorMeta:
    def si(x: Any) -> S.SymInt:
        if isinstance(x, int):
            return S.SymInt(as_int=x)
        return S.SymInt(as_expr=sym_expr(x.format(**syms)))
    strides = [1] * len(shape)
    return S.TensorMeta(dtype=S.ScalarType.FLOAT, sizes=[si(x) for x in shape], requires_grad=False,
                        device=S.Device(type="cpu"), strides=[S.SymInt(as_int=s) for s in strides],
                        storage_offset=S.SymInt(as_int=0), layout=S.Layout.Strided)


def topo_orders(p: Prog, rng: random.Random) -> list[int]:
    """A random topological order of ``p.nodes`` that keeps every effect where the listed order has it."""
    deps = [_node_deps(n) + e for n, e in zip(p.nodes, effect_deps(p.nodes), strict=True)]
    users: dict[int, list[int]] = {i: [] for i in range(len(p.nodes))}
    indeg = [len(set(d)) for d in deps]
    for i, d in enumerate(deps):
        for j in set(d):
            users[j].append(i)
    ready = [i for i in range(len(p.nodes)) if indeg[i] == 0]
    out = []
    while ready:
        i = ready.pop(rng.randrange(len(ready)))
        out.append(i)
        for u in users[i]:
            indeg[u] -= 1
            if indeg[u] == 0:
                ready.append(u)
    assert len(out) == len(p.nodes)
    return out


def effect_deps(nodes: list[NodeSpec]) -> list[list[int]]:
    """Per node, the earlier nodes (listed order) it must stay after for the program to mean the same:
    effects in a chain, a read after the last write to its storage and before the next one, a check
    between the effects around it. Orders keeping these are the valid schedules of the program."""
    deps: list[list[int]] = [[] for _ in nodes]
    last_effect, checks = -1, []
    last_write: dict = {}
    reads_since: dict = {}
    for i, n in enumerate(nodes):
        deps[i] += [last_write[r] for r in n.reads if r in last_write]
        for r in n.writes:
            deps[i] += reads_since.pop(r, [])
        if n.effect or n.check:
            deps[i] += [last_effect] if last_effect >= 0 else []
        if n.effect:
            deps[i] += checks
            last_effect, checks = i, []
        elif n.check:
            checks.append(i)
        for r in n.writes:
            last_write[r] = i
        for r in n.reads:
            if r not in n.writes:
                reads_since.setdefault(r, []).append(i)
    return deps


def _refs(a: tuple) -> list[tuple]:
    k = a[0]
    if k in ("in", "n"):
        return [a]
    if k == "ts":
        return list(a[1])
    if k == "sym":
        return [a[1]]
    return []


def _node_deps(n: NodeSpec) -> list[int]:
    return [r[1] for a in n.args for r in _refs(a) if r[0] == "n"]


def render(p: Prog, *, order: list[int] | None = None, namer: Any = None,
           syms: dict[str, str] | None = None, top: bool = True, prefix: str = "",
           rng: random.Random | None = None) -> Any:
    """``p`` as a schema program (or graph when ``top`` is False).

    Args:
        order: node order (default: as listed; with ``rng``, a random topological order, also for
            subgraphs).
        namer: default name -> actual name (default: identity). Default names are ``n<i>``,
            ``<node>_o<k>`` for list/multi outputs, ``subgraph_<k>``, ``p_<fqn>`` etc., with a
            ``sub<k>_`` prefix inside subgraphs.
        syms: symbol template key -> symbol name (default ``s<k>`` for key ``s<k>``).
    """
    if order is None:
        order = topo_orders(p, rng) if rng is not None else list(range(len(p.nodes)))
    namer = namer or (lambda s: s)
    syms = syms or {}
    all_keys = {f"s{k}": f"s{k}" for k in range(64)} | {f"u{k}": f"u{k}" for k in range(16)}
    symmap = all_keys | syms

    def node_name(i: int) -> str:
        return namer(f"{prefix}n{i}")

    input_names = []
    for k, d in enumerate(p.inputs):
        if not top:
            input_names.append(namer(f"{prefix}arg{k}_1"))
        elif d.kind == "user":
            input_names.append(d.name)
        else:
            input_names.append(namer({"param": "p_", "buffer": "b_", "const": "c_"}[d.kind]
                                     + d.name.replace(".", "_")))

    def leaf_name(i: int, leaf: int) -> str:
        n = p.nodes[i]
        if n.out.startswith(("multi", "list")):
            return namer(f"{prefix}n{i}_o{leaf}")
        return node_name(i)

    def ref_name(r: tuple) -> str:
        if r[0] == "in":
            return input_names[r[1]]
        return leaf_name(r[1], r[2] if len(r) > 2 else 0)

    sub_counter = [0]

    def arg(a: tuple) -> A:
        k = a[0]
        if k in ("in", "n"):
            return A(as_tensor=S.TensorArgument(name=ref_name(a)))
        if k == "ts":
            return A(as_tensors=[S.TensorArgument(name=ref_name(r)) for r in a[1]])
        if k == "sym":
            return A(as_sym_int=S.SymIntArgument(as_name=ref_name(a[1])))
        if k == "i":
            return A(as_int=a[1])
        if k == "f":
            return A(as_float=a[1])
        if k == "b":
            return A(as_bool=a[1])
        if k == "none":
            return A(as_none=True)
        if k == "ints":
            return A(as_ints=list(a[1]))
        if k == "str":
            return A(as_string=a[1])
        if k == "g":
            sub_counter[0] += 1
            sub_prefix = f"{prefix}sub{sub_counter[0]}_"
            g = render(a[1], namer=namer, syms=syms, top=False, prefix=sub_prefix, rng=rng)
            return A(as_graph=S.GraphArgument(name=namer(f"{prefix}subgraph_{sub_counter[0]}"), graph=g))
        raise AssertionError(k)

    tensor_values: dict[str, S.TensorMeta] = {}
    sym_int_values: dict[str, S.SymInt] = {}
    g_inputs = []
    for k, d in enumerate(p.inputs):
        nm = input_names[k]
        g_inputs.append(A(as_tensor=S.TensorArgument(name=nm)))
        tensor_values[nm] = _meta(d.shape, symmap)
    nodes = []
    for i in order:
        n = p.nodes[i]
        inputs = [S.NamedArgument(name=n.names[j] if n.names else f"a{j}"
                                  if not n.target.startswith("torch.ops.higher_order") else "",
                                  arg=arg(a), kind=S.ArgumentKind.POSITIONAL) for j, a in enumerate(n.args)]
        nm = node_name(i)
        if n.out == "tensor":
            outputs = [A(as_tensor=S.TensorArgument(name=nm))]
            tensor_values[nm] = _meta(n.shape, symmap)
        elif n.out == "symint":
            outputs = [A(as_sym_int=S.SymIntArgument(as_name=nm))]
            sym_int_values[nm] = S.SymInt(as_expr=sym_expr((n.sym_expr or "{s0}").format(**symmap)))
        elif n.out == "none":
            outputs = []
        else:
            kind, cnt = n.out.split(":")
            leaves = [leaf_name(i, j) for j in range(int(cnt))]
            for nl in leaves:
                tensor_values[nl] = _meta(n.shape, symmap)
            if kind == "multi":
                outputs = [A(as_tensor=S.TensorArgument(name=nl)) for nl in leaves]
            else:
                outputs = [A(as_tensors=[S.TensorArgument(name=nl) for nl in leaves])]
        md = S.NodeMetadata(
            stack_trace=n.stack_trace,
            nn_module_stack=None if n.module is None else [S.ModuleStackEntry(key=k, path=pth, type_name="M")
                                                          for k, pth in n.module],
        )
        nodes.append(S.Node(target=n.target, inputs=inputs, outputs=outputs, metadata=md, name=nm,
                            is_hop_single_tensor_return=True if n.target.startswith("torch.ops.higher_order")
                            else None))
    outs = [arg(a) for a in p.outputs]
    g = S.Graph(inputs=g_inputs, outputs=outs, nodes=nodes, tensor_values=tensor_values,
                sym_int_values=sym_int_values, sym_bool_values={}, is_single_tensor_return=False,
                custom_obj_values={}, sym_float_values={})
    if not top:
        return g
    in_specs = []
    for k, d in enumerate(p.inputs):
        ta = S.TensorArgument(name=input_names[k])
        if d.kind == "user":
            in_specs.append(S.InputSpec(user_input=S.UserInputSpec(arg=A(as_tensor=ta))))
        elif d.kind == "param":
            in_specs.append(S.InputSpec(parameter=S.InputToParameterSpec(arg=ta, parameter_name=d.name)))
        elif d.kind == "buffer":
            in_specs.append(S.InputSpec(buffer=S.InputToBufferSpec(arg=ta, buffer_name=d.name, persistent=True)))
        else:
            in_specs.append(S.InputSpec(tensor_constant=S.InputToTensorConstantSpec(
                arg=ta, tensor_constant_name=d.name)))
    out_specs = [S.OutputSpec(user_output=S.UserOutputSpec(arg=o)) for o in outs]
    ranges = make_ranges({k.format(**symmap): v for k, v in p.ranges.items()})
    return S.ExportedProgram(
        graph_module=S.GraphModule(
            graph=g, signature=S.GraphSignature(input_specs=in_specs, output_specs=out_specs),
            module_call_graph=[S.ModuleCallEntry(fqn="", signature=S.ModuleCallSignature(
                inputs=[], outputs=[], in_spec=S.TreeSpec(type="tuple"), out_spec=S.TreeSpec(type="tuple")))],
        ),
        opset_version={"aten": 10}, range_constraints=ranges,
        schema_version=S.SchemaVersion(major=2 if _TREES else 1, minor=0), verifiers=[], torch_version="2.13.0",
    )


POINTWISE = [
    ("torch.ops.aten.add.Tensor", "f"), ("torch.ops.aten.mul.Tensor", "f"), ("torch.ops.aten.sub.Tensor", "f"),
    ("torch.ops.aten.div.Tensor", "f"), ("torch.ops.aten.relu.default", None),
    ("torch.ops.aten.sigmoid.default", None), ("torch.ops.aten.tanh.default", None),
    ("torch.ops.aten.exp.default", None), ("torch.ops.aten.pow.Tensor_Scalar", "f"),
    ("torch.ops.aten.clamp_min.default", "f"),
]
CONSTANTS = [0.5, 1.0, 2.0, 3.0, -1.0, 0.1]


def chain(n: int, seed: int, *, insert_at: int | None = None) -> Prog:
    """A chain of ``n`` varied pointwise ops with scalar constants on one input (optionally with
    one extra node inserted before position ``insert_at``, everything else identical)."""
    rng = random.Random(seed)
    specs = []
    for _ in range(n):
        target, c = POINTWISE[rng.randrange(len(POINTWISE))]
        specs.append((target, None if c is None else rng.choice(CONSTANTS)))
    if insert_at is not None:
        specs.insert(insert_at, ("torch.ops.aten.mul.Tensor", 7.0))
    nodes = []
    for k, (target, c) in enumerate(specs):
        src = ("in", 0) if k == 0 else ("n", k - 1)
        args = [src] + ([("f", c)] if c is not None else [])
        nodes.append(NodeSpec(target, args, shape=["{s0}", 8]))
    return Prog(inputs=[InputSpecDesc("user", "x", ["{s0}", 8])], nodes=nodes,
                outputs=[("n", len(nodes) - 1)], ranges={"{s0}": (2, 1024)})
