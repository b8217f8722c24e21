"""Emit a native program from a canonical program and its weights.

The emitter walks the canonical schema Structs (never torch.fx): the signature becomes the
program's inputs, state and outputs; every node becomes instructions (:mod:`native.emit.lower` for
higher-order ops); after each node, the values whose last use it was are freed. Anything the
native format cannot run fails here, naming the node and the construct, never at run time.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, BinaryIO

import msgspec

from native.emit.lower import HOP_LOWERINGS, Scope
from native.emit.tables import Binding, ProgramBuilder
from native.format import program as P
from native.format.exprs import affine_in, symbols_of, tree_of
from native.format.memory import frees_after, plan_memory
from native.format.prim import TARGET_TO_PRIM, prim_name
from serde.bridge.operators import PREDISPATCH_TARGETS
from serde.core import schema
from serde.core.checks import validate_weights
from serde.core.dtypes import ITEMSIZE
from serde.core.expr import BOOL, NUM, expr_text, expr_to_tree, ranges_by_text
from serde.core.expr.guards import flat_input_paths, guards_to_code, input_arguments, source_key, source_text
from serde.core.limits import DEFAULT_LIMITS, Limits
from serde.core.walk import argument_names
from serde.errors import MalformedArtifactError, SerializeError, UnsupportedConstructError

__all__ = ["emit", "emit_artifact"]

Payload = Callable[[str], bytes | memoryview]
_HOP_PREFIX = "torch.ops.higher_order."
_OP_PREFIX = "torch.ops."
# Training-IR vmap calls (associative_scan): the core ATen IR has the same program as plain ops.
_PREDISPATCH_HINT = (" (a torch.func vmap call from the training IR: save ep.run_decompositions() "
                     "to emit this program)")
A = schema.Argument


def emit(program: schema.ExportedProgram, weights: schema.Weights, payload: Payload, *,
         plan: bool = True, planner: str = "greedy") -> P.NativeProgram:
    """Flatten a canonical program into a native program.

    Args:
        program: the canonical program (as stored in an artifact).
        weights: its weights (state_dict and constants; example inputs are not used).
        payload: sha256 -> the bytes of that storage (``Artifact.payload``).
        plan: compute the memory plan (on by default).
        planner: the memory planner, one of :data:`native.format.memory.PLANNERS`.

    Returns:
        The program and its constant segment.

    Raises:
        UnsupportedConstructError: a node or value the native runtime cannot execute (names the
            node and the op or construct).
        MalformedArtifactError: the program is inconsistent (undefined values, missing weights).
    """
    em = _Emitter(program, weights, payload)
    p = em.run()
    if plan:
        p = msgspec.structs.replace(p, memory_plan=plan_memory(p, planner))
    return P.NativeProgram(p, em.b.segment.build())


def emit_artifact(src: str | os.PathLike | BinaryIO | bytes, *, plan: bool = True,
                  limits: Limits = DEFAULT_LIMITS, planner: str = "greedy") -> P.NativeProgram:
    """:func:`emit` on an artifact file written by ``serde.save``.

    The artifact passes every check of ``serde.load`` (:func:`serde.api.check_artifact`:
    names, sizes, weights and the consistency of the program's parts, ``limits``) before
    anything is emitted, and the same operator upgraders (:mod:`serde.opsets`).
    """
    import torch

    from serde.api import check_artifact
    from serde.archive.artifact import read_artifact
    from serde.opsets import upgrade_operators

    a = read_artifact(src, limits=limits)
    # Every check of serde.load (names and sizes first), on the program as a load builds it (weights
    # not read): the emitter walks the stored program and trusts that its parts fit each other, which
    # only those checks prove (a call's operands against its operator, the signature against the
    # graph, ...), so a file the load refuses would otherwise emit into a program that fails inside
    # a kernel.
    check_artifact(a, limits=limits)
    # The storages and views as a load checks them: a view past its storage would otherwise be
    # emitted into a program the native loaders then refuse, or its numbers overflow the format.
    validate_weights(a.weights, lambda name: len(a.contents.member(name)))
    # The native program calls this torch's operators: as serde.load, upgrade from the writer's torch.
    program = upgrade_operators(a.program, str(torch.__version__))
    return emit(program, a.weights, a.payload, plan=plan, planner=planner)



class _Emitter:
    """Walks one canonical program into a :class:`~native.emit.tables.ProgramBuilder` (see the module docstring)."""

    def __init__(self, program: schema.ExportedProgram, weights: schema.Weights, payload: Payload) -> None:
        self.ep = program
        self.weights = weights
        self.payload = payload
        gm = program.graph_module
        self.bindings = _bind_symbols(gm.graph, gm.signature)
        ranges = {k: (r.min_val, r.max_val) for k, r in ranges_by_text(program.range_constraints).items()}
        for k, (lo, hi) in ranges.items():  # as the load refuses it: the runtime would refuse every input
            if lo is not None and hi is not None and lo > hi:
                raise MalformedArtifactError(f"range_constraints[{k!r}]: [{lo}, {hi}] is not a valid range: its "
                                             "minimum exceeds its maximum; the artifact is damaged or was edited "
                                             "after saving")
        self.b = ProgramBuilder(self.bindings, ranges)
        self.false = self.b.const(P.Bool(False))
        self.zero = self.b.const(P.Int(0))
        self.one = self.b.const(P.Int(1))
        self.written_state: set[int] = set()  # state values some kernel writes in place

    # ------------------------------------------------------------ program

    def run(self) -> P.Program:
        gm = self.ep.graph_module
        g, sig = gm.graph, gm.signature
        if len(sig.input_specs) != len(g.inputs) or len(sig.output_specs) != len(g.outputs):
            raise MalformedArtifactError("graph_module.signature: the number of specs differs from the number "
                                         "of graph inputs or outputs; the artifact is damaged")
        scope: Scope = {}
        state_by_name: dict[str, int] = {}
        for i, (spec, arg) in enumerate(zip(sig.input_specs, g.inputs, strict=True)):
            _INPUT_SPECS[spec.kind](self, spec.value, arg, scope, state_by_name, f"graph.inputs[{i}]")
        keep = set()
        for o in g.outputs:
            keep.update(argument_names(o))
        defined = self.body(g, scope, "graph", keep)
        mutated: set[int] = set()
        for i, (spec, arg) in enumerate(zip(sig.output_specs, g.outputs, strict=True)):
            _OUTPUT_SPECS[spec.kind](self, spec.value, arg, scope, state_by_name, mutated, f"graph.outputs[{i}]")
        # New buffer values were read by the copies above; only user outputs outlive the program.
        self.free_all({scope[n] for n in keep if n in scope} & defined - set(self.b.outputs))
        state = [P.State(s.name, s.kind, s.value, s.value in mutated or s.value in self.written_state)
                 for s in self.b.state]
        self.b.state = state
        root = next((e.signature for e in gm.module_call_graph if e.fqn == "" and e.signature), None)
        guards, guard_texts = self.guards(root)
        from serde.core import wire

        return self.b.build(
            guards=guards, guard_texts=guard_texts,
            in_spec=wire.encode(root.in_spec).decode() if root else None,
            out_spec=wire.encode(root.out_spec).decode() if root else None,
            torch_version=self.ep.torch_version,
            **_io_keys(root, len(self.b.inputs), len(self.b.outputs)),
        )

    # ------------------------------------------------------------ guards

    def guards(self, root: schema.ModuleCallSignature | None) -> tuple[list[int], list[str]]:
        """Export's input guards as expressions over the input sizes the runtime already checks.

        A source ``L['x'].size()[d]`` becomes the stored size expression of that input dimension:
        the runtime binds symbols from input dimensions and then checks every dimension equals
        its expression, so the substitution is exact. Strides and storage offsets are not bound
        by the runtime: such a guard makes the emitter refuse rather than drop it.
        """
        gs = self.ep.guards
        if gs is None:
            return [], []
        texts = guards_to_code(gs)  # validates the sources' keys and the checks' shape
        if root is None:
            raise MalformedArtifactError("guards: the program has guards but no root module call signature")
        by_path = input_arguments(self.ep.graph_module)
        subst = {s.symbol: self.guard_source(by_path, s, f"guards.sources[{i}]") for i, s in enumerate(gs.sources)}
        exprs = []
        for i, e in enumerate(gs.checks):
            where = f"guards.checks[{i}] ({texts[i]})"
            exprs.append(self.b.expr(_substitute(expr_to_tree(e, where=where), subst), where))
        return exprs, texts

    def guard_source(self, by_path: dict[tuple, schema.Argument], s: schema.GuardSource, where: str) -> tuple:
        path, prop, dim = source_key(s)
        arg = by_path.get(path)
        if arg is None and any(p is None for p in flat_input_paths(self.ep.graph_module) or []):
            # Only a pytree registry names the leaves of a registered class (a dataclass, a cache
            # class); the emitter has none, so the path may well be one of them.
            raise UnsupportedConstructError(
                f"{where}: a guard reads {source_text(source_key(s))}, which may be a field of a registered "
                "pytree class among the inputs; the native runtime cannot name such fields, so it cannot "
                "enforce this guard (load the artifact with serde.load instead)")
        if arg is None:
            raise MalformedArtifactError(f"{where}: {path!r} is not a user input of the program")
        g = self.ep.graph_module.graph
        if prop == schema.GuardProperty.SIZE and arg.kind == "as_tensor":
            meta = g.tensor_values.get(arg.as_tensor.name)
            if meta is None or not 0 <= dim < len(meta.sizes):
                raise MalformedArtifactError(f"{where}: dim {dim} is not a dimension of input {path!r}")
            size = meta.sizes[dim]
            return ("Integer", size.as_int) if size.as_int is not None else tree_of(size.as_expr, where=where)
        if prop == schema.GuardProperty.VALUE and arg.kind == "as_sym_int" and arg.as_sym_int.as_name is not None:
            v = g.sym_int_values.get(arg.as_sym_int.as_name)
            if v is not None and v.as_expr is not None:
                return tree_of(v.as_expr, where=where)
        if prop == schema.GuardProperty.VALUE and arg.kind == "as_int":
            return ("Integer", arg.as_int)
        raise UnsupportedConstructError(
            f"{where}: a guard reads {schema.GuardProperty(prop).name.lower()} of input {path!r} ({arg.kind}); "
            "the native runtime checks only input sizes and integer inputs, so it cannot enforce this guard")

    # ------------------------------------------------------------ graphs

    def body(self, g: schema.Graph, scope: Scope, where: str, keep: set[str]) -> set[int]:
        """Emit ``g``'s nodes into ``scope``; free each value it defines after its last use.

        Returns the values the graph defined (its outputs among them are not freed).
        """
        defined: set[str] = set()
        frees = frees_after(g.nodes, keep)
        for idx, node in enumerate(g.nodes):
            nwhere = f"{where}.nodes[{idx}] ({node.name!r}, {node.target})"
            h = self.node(node, g, scope, nwhere, defined)
            outer, self.b.handle = self.b.handle, h
            for name in frees[idx]:  # a value's last use: its free belongs to that node
                if name in defined:
                    self.b.emit(P.FreeCall(scope[name]))
            self.b.handle = outer
        return {scope[n] for n in defined}

    def subgraph(self, ga: schema.GraphArgument, operands: list[int], where: str) -> tuple[list[int], set[int]]:
        """Emit a subgraph inline with its inputs bound to ``operands``.

        Returns the values of its outputs and those of them it defined (the caller frees them
        after moving them out).
        """
        g = ga.graph
        where = f"{where} subgraph {ga.name!r}"
        if len(g.inputs) != len(operands):
            raise MalformedArtifactError(f"{where}: takes {len(g.inputs)} inputs but is given {len(operands)}")
        scope: Scope = {}
        for inp, v in zip(g.inputs, operands, strict=True):
            for name in argument_names(inp):
                scope[name] = v
        keep = {n for o in g.outputs for n in argument_names(o)}
        defined = self.body(g, scope, where, keep)
        outs = [self.arg(o, scope, f"{where}.outputs[{i}]") for i, o in enumerate(g.outputs)]
        return outs, {o for o in outs if o in defined}

    def free_all(self, values: set[int] | list[int]) -> None:
        for v in sorted(set(values)):
            self.b.emit(P.FreeCall(v))

    # ------------------------------------------------------------ nodes

    def node(self, node: schema.Node, g: schema.Graph, scope: Scope, where: str, defined: set[str]) -> int:
        """Emit ``node``'s instructions under a debug handle of their own; returns the handle."""
        stack = node.metadata.nn_module_stack
        outer = self.b.handle
        h = self.b.handle = self.b.new_handle(P.DebugHandle(node.name, node.target, stack[-1].path if stack else ""))
        try:
            self.node_body(node, g, scope, where, defined)
        finally:
            self.b.handle = outer
        return h

    def node_body(self, node: schema.Node, g: schema.Graph, scope: Scope, where: str, defined: set[str]) -> None:
        t = node.target
        if t.startswith(_HOP_PREFIX):
            hop = t[len(_HOP_PREFIX):]
            lower = HOP_LOWERINGS.get(hop)
            if lower is None:
                raise UnsupportedConstructError(
                    f"{where}: higher-order op {hop!r} is not supported by the native emitter (supported: "
                    f"{', '.join(HOP_LOWERINGS)}); run the model through ep.module() instead")
            lower(self, node, g, scope, where, defined)
        elif t in TARGET_TO_PRIM:
            args = [self.arg(na.arg, scope, f"{where}.inputs[{i}]") for i, na in enumerate(node.inputs)]
            outs = self.define_outputs(node, g, scope, where, defined)
            self.b.emit(P.KernelCall(self.b.op(prim_name(TARGET_TO_PRIM[t]), "default"), args, outs))
        elif t.startswith(_OP_PREFIX):
            self.kernel(node, g, scope, where, defined)
        else:
            raise UnsupportedConstructError(
                f"{where}: call target {t!r} cannot be emitted; only torch.ops operators, symbolic size "
                f"arithmetic and the higher-order ops {', '.join(HOP_LOWERINGS)} are supported"
                + (_PREDISPATCH_HINT if t in PREDISPATCH_TARGETS else ""))

    def kernel(self, node: schema.Node, g: schema.Graph, scope: Scope, where: str, defined: set[str]) -> None:
        info = self.kernel_info(node.target, where)
        keyword: dict[str, int] = {}
        for na in node.inputs:
            if na.name in keyword:
                raise MalformedArtifactError(f"{where}: argument {na.name!r} is given twice")
            keyword[na.name] = self.arg(na.arg, scope, f"{where}.inputs[{na.name!r}]")
        args = self.schema_args(info, [], keyword, where)
        outs = self.define_outputs(node, g, scope, where, defined)
        self.call(info, args, outs, where)

    def kernel_info(self, target: str, where: str) -> Any:
        from native.format.kernels import lookup

        try:
            return lookup(target)
        except SerializeError as e:  # unknown, unsafe or unsupported: keep the kind, add the node
            raise type(e)(f"{where}: {e}") from None

    def schema_args(self, info: Any, positional: list[int], keyword: dict[str, int], where: str) -> list[int]:
        """Every argument of ``info`` in schema order: given positionally, by name, or its default."""
        keyword = dict(keyword)
        args = []
        for k, a in enumerate(info.args):
            if k < len(positional) and not a.kwarg_only:
                v = positional[k]
                if a.name in keyword:
                    raise MalformedArtifactError(f"{where}: argument {a.name!r} of {info} is given twice")
            elif a.name in keyword:
                v = keyword.pop(a.name)
            elif a.has_default:
                v = self.default(a, where)
            else:
                raise MalformedArtifactError(f"{where}: required argument {a.name!r} of {info} is missing")
            if a.is_write:
                self.written_state.add(v)
            args.append(v)
        if keyword or len(positional) > sum(not a.kwarg_only for a in info.args):
            raise MalformedArtifactError(f"{where}: {info} has no argument(s) {sorted(keyword)} or takes fewer "
                                         f"than {len(positional)} positional arguments")
        return args

    def call(self, info: Any, args: list[int], outs: list[int], where: str) -> None:
        if len(outs) != len(info.returns):
            raise MalformedArtifactError(f"{where}: {info} returns {len(info.returns)} values but the node "
                                         f"lists {len(outs)} outputs")
        op = self.b.op(info.name, info.overload, info.returns_alias)
        out_op = self.b.op(info.name, info.out_overload) if info.out_overload else -1
        self.b.emit(P.KernelCall(op, args, outs, out_op))

    def default(self, a: Any, where: str) -> int:
        try:
            return self.b.const(_python_value(a.default))
        except UnsupportedConstructError:
            raise UnsupportedConstructError(
                f"{where}: the default {a.default!r} of argument {a.name!r} ({a.type}) has no native "
                "encoding") from None

    # ------------------------------------------------------------ values

    def ref(self, name: str, scope: Scope, where: str) -> int:
        v = scope.get(name)
        if v is None:
            raise MalformedArtifactError(f"{where}: refers to value {name!r}, which is not defined before it; "
                                         "the artifact is damaged")
        return v

    def arg(self, a: schema.Argument, scope: Scope, where: str) -> int:
        k = a.kind
        return _ARGUMENTS[k](self, getattr(a, k), scope, where)

    def box(self, items: list[int]) -> int:
        return self.b.const(P.List(items))

    def tensor(self, meta: schema.TensorMeta, where: str) -> P.Tensor:
        if meta.layout != schema.Layout.Strided:
            raise UnsupportedConstructError(f"{where}: {meta.layout.name} tensors are not supported natively; "
                                            "only dense (strided) tensors are")
        if meta.device.type != "cpu":
            raise UnsupportedConstructError(f"{where}: a tensor on device {meta.device.type!r}; the reference "
                                            "runtime runs CPU programs only")
        if meta.dtype not in ITEMSIZE:  # as the load refuses it (the planner sizes tensors by it)
            raise MalformedArtifactError(f"{where}: unsupported scalar type {meta.dtype!r}; supported: "
                                         f"{sorted(str(int(d)) for d in ITEMSIZE)}; the artifact is damaged or was "
                                         "edited after saving")
        if len(meta.sizes) != len(meta.strides):  # as the load refuses it (the planner zips them)
            raise MalformedArtifactError(f"{where}: {len(meta.sizes)} sizes but {len(meta.strides)} strides; "
                                         "the artifact is damaged")
        return P.Tensor(
            dtype=int(meta.dtype),
            sizes=[self.dim(s, f"{where}.sizes[{i}]") for i, s in enumerate(meta.sizes)],
            strides=[self.dim(s, f"{where}.strides[{i}]") for i, s in enumerate(meta.strides)],
            storage_offset=self.dim(meta.storage_offset, f"{where}.storage_offset"),
        )

    def dim(self, s: schema.SymInt, where: str) -> P.Dim:
        if s.as_int is not None:
            if s.as_int < 0:
                raise MalformedArtifactError(f"{where}: negative size {s.as_int}")
            return s.as_int
        return self.b.dim(tree_of(s.as_expr, where=where), where)

    def sym_expr(self, v: Any, where: str, sort: str = NUM) -> int:
        """Expression index of a SymInt/SymBool's value (``sort``: a number or a boolean), -1 when
        it has none we can evaluate."""
        if v is None or v.as_expr is None:
            return -1
        try:
            return self.b.expr(tree_of(v.as_expr, where=where, sort=sort), where)
        except UnsupportedConstructError:
            return -1

    def new_value(self, kind: str, name: str, g: schema.Graph, where: str) -> int:
        """A run-time slot for graph value ``name`` of the given Argument kind."""
        if kind == "as_tensor":
            meta = g.tensor_values.get(name)
            if meta is None:
                raise MalformedArtifactError(f"{where}: tensor {name!r} has no entry in tensor_values")
            return self.b.new(self.tensor(meta, f"{where} tensor {name!r}"))
        if kind == "as_sym_int":
            return self.b.new(P.SymInt(self.sym_expr(g.sym_int_values.get(name), where)))
        if kind == "as_sym_bool":
            return self.b.new(P.SymBool(self.sym_expr(g.sym_bool_values.get(name), where, BOOL)))
        if kind == "as_sym_float":
            return self.b.new(P.SymFloat())
        raise UnsupportedConstructError(f"{where}: a value of kind {kind!r} ({name!r}) is not supported natively")

    def define(self, name: str, kind: str, g: schema.Graph, scope: Scope, where: str, defined: set[str]) -> int:
        if name in scope:
            raise MalformedArtifactError(f"{where}: value {name!r} is defined twice")
        v = scope[name] = self.new_value(kind, name, g, where)
        defined.add(name)
        return v

    def define_outputs(self, node: schema.Node, g: schema.Graph, scope: Scope, where: str,
                       defined: set[str]) -> list[int]:
        outs = []
        for i, o in enumerate(node.outputs):
            k = o.kind
            handler = _OUTPUTS.get(k)
            if handler is None:
                raise UnsupportedConstructError(f"{where}.outputs[{i}]: an output of kind {k!r} is not supported")
            outs.append(handler(self, getattr(o, k), g, scope, f"{where}.outputs[{i}]", defined))
        return outs

    # ------------------------------------------------------------ weights

    def state_tensor(self, name: str, kind: str, table: dict[str, schema.StoredTensor], meta: schema.TensorMeta,
                     where: str) -> int:
        st = table.get(name)
        if st is None:
            raise MalformedArtifactError(f"{where}: weight {name!r} is missing from weights.json; the artifact "
                                         "is damaged")
        if st.subclass is not None:
            raise UnsupportedConstructError(
                f"{where}: weight {name!r} is a tensor subclass ({st.subclass.class_name}); the native runtime "
                "runs plain tensors only")
        if not 0 <= st.storage < len(self.weights.storages):
            raise MalformedArtifactError(f"{where}: weight {name!r} names storage {st.storage}, which does not exist")
        if self.weights.storages[st.storage].sha256 == "":
            raise UnsupportedConstructError(
                f"{where}: weight {name!r} was saved without data (a FakeTensor or meta tensor); there is nothing "
                "to run. Save the program with real weights to emit it")
        graph_t = self.tensor(meta, where)
        if st.dtype != meta.dtype or (all(isinstance(d, int) for d in graph_t.sizes)
                                      and list(st.sizes) != graph_t.sizes):
            raise MalformedArtifactError(
                f"{where}: weight {name!r} is stored as {st.dtype.name}{list(st.sizes)} but the graph expects "
                f"{meta.dtype.name}{graph_t.sizes}; the artifact is damaged")
        storage = self.weights.storages[st.storage]
        data = self.payload(storage.sha256)
        if len(data) != storage.nbytes:
            raise MalformedArtifactError(f"{where}: payload of {name!r} has {len(data)} bytes, expected {storage.nbytes}")
        blob = self.b.blob(storage.sha256, data)
        v = self.b.new(P.Tensor(int(st.dtype), list(st.sizes), list(st.strides), st.storage_offset, blob))
        self.b.state.append(P.State(name, kind, v))
        return v


def _substitute(t: tuple, subst: dict[str, tuple]) -> tuple:
    if t[0] == "Symbol":
        return subst[t[1]]  # guards_to_code checked every symbol names a source
    return (t[0], *(_substitute(c, subst) if isinstance(c, tuple) else c for c in t[1:]))


# ---------------------------------------------------------------- symbol binding


def _bind_symbols(g: schema.Graph, sig: schema.GraphSignature) -> dict[str, Binding]:
    """Bind each symbol to an input dimension ``scale * sym + offset`` (simplest form first)."""
    cands: dict[str, list[tuple[int, int, int, int, int]]] = {}
    pos = 0
    for spec, arg in zip(sig.input_specs, g.inputs, strict=False):
        if spec.kind not in ("user_input", "constant_input"):
            continue
        k = arg.kind
        if k == "as_tensor":
            meta = g.tensor_values.get(arg.as_tensor.name)
            for d, s in enumerate(meta.sizes if meta else ()):
                if s.as_expr is not None:
                    aff = affine_in(tree_of(s.as_expr, where=f"graph.inputs[{pos}].sizes[{d}]"))
                    if aff is not None:
                        cands.setdefault(aff[0], []).append((aff[1], aff[2], pos, d, 0))
        elif k == "as_sym_int" and arg.as_sym_int.as_name is not None:
            v = g.sym_int_values.get(arg.as_sym_int.as_name)
            if v is not None and v.as_expr is not None:
                aff = affine_in(tree_of(v.as_expr, where=f"graph.inputs[{pos}]"))
                if aff is not None:
                    cands.setdefault(aff[0], []).append((aff[1], aff[2], pos, -1, 0))
        pos += 1
    return {name: (c[2], c[3], c[0], c[1]) for name, cs in cands.items() for c in [min(cs)]}


# ---------------------------------------------------------------- signature


def _user_input(em: _Emitter, spec: schema.UserInputSpec, arg: schema.Argument, scope: Scope, state: dict,
                where: str) -> None:
    k = arg.kind
    name = next(iter(argument_names(arg)), None)
    if name is None:  # a constant the program was specialized to
        em.b.inputs.append(P.Input(f"input{len(em.b.inputs)}", em.arg(arg, scope, where), constant=True))
        return
    if k in ("as_tensor", "as_sym_int", "as_sym_bool", "as_sym_float"):
        g = em.ep.graph_module.graph
        if k == "as_tensor":
            meta = g.tensor_values.get(name)
            for d, s in enumerate(meta.sizes if meta else ()):
                if s.as_expr is not None:
                    for sym in symbols_of(tree_of(s.as_expr, where=where)):
                        if not em.b.is_bound(sym):
                            raise UnsupportedConstructError(
                                f"{where}: dimension {d} of input {name!r} is {expr_text(s.as_expr.expr)!r}; symbol {sym!r} "
                                "is not a multiple of one input dimension, so the runtime cannot bind it")
        v = scope[name] = em.new_value(k, name, g, where)
        em.b.inputs.append(P.Input(name, v))
        return
    raise UnsupportedConstructError(f"{where}: a user input of kind {k!r} ({name!r}) is not supported natively")


def _constant_input(em: _Emitter, spec: schema.InputToConstantInputSpec, arg: schema.Argument, scope: Scope,
                    state: dict, where: str) -> None:
    v = em.b.const(_CONSTANT_VALUES[spec.value.kind](spec.value.value))
    em.b.inputs.append(P.Input(spec.name, v, constant=True))
    for name in argument_names(arg):
        scope[name] = v


def _weight(kind: str, table: str) -> Callable:
    def handle(em: _Emitter, spec: Any, arg: schema.Argument, scope: Scope, state: dict, where: str) -> None:
        fqn = {"parameter": "parameter_name", "buffer": "buffer_name", "constant": "tensor_constant_name"}[kind]
        name = getattr(spec, fqn)
        tables = [getattr(em.weights, table)]
        if kind == "buffer":  # non-persistent buffers are stored with the constants
            tables.append(em.weights.constants)
        merged = {k: v for t in reversed(tables) for k, v in t.items()}
        meta = em.ep.graph_module.graph.tensor_values.get(spec.arg.name)
        if meta is None:
            raise MalformedArtifactError(f"{where}: {spec.arg.name!r} has no entry in tensor_values")
        v = scope[spec.arg.name] = em.state_tensor(name, kind, merged, meta, where)
        state[name] = v
    return handle


def _unsupported_input(what: str) -> Callable:
    def handle(em: _Emitter, spec: Any, arg: Any, scope: Scope, state: dict, where: str) -> None:
        raise UnsupportedConstructError(f"{where}: {what} inputs are not supported by the native emitter")
    return handle


_INPUT_SPECS: dict[str, Callable] = {
    "user_input": _user_input,
    "parameter": _weight("parameter", "state_dict"),
    "buffer": _weight("buffer", "state_dict"),
    "tensor_constant": _weight("constant", "constants"),
    "custom_obj": _unsupported_input("custom object"),
    "constant_input": _constant_input,
    "token": lambda em, spec, arg, scope, state, where: scope.__setitem__(spec.arg.name, em.b.const(P.NoneValue())),
}


def _user_output(em: _Emitter, spec: Any, arg: schema.Argument, scope: Scope, state: dict, mutated: set,
                 where: str) -> None:
    em.b.outputs.append(em.arg(arg, scope, where))


def _copy_into(target: Callable[[Any, dict, Scope], int | None], what: str) -> Callable:
    """A mutation output: ``aten::copy_`` the new value into the buffer or input at the end."""
    def handle(em: _Emitter, spec: Any, arg: schema.Argument, scope: Scope, state: dict, mutated: set,
               where: str) -> None:
        dst = target(spec, state, scope)
        if dst is None:
            raise MalformedArtifactError(f"{where}: the mutated {what} is not an input of the program")
        src = em.arg(arg, scope, where)
        op = em.b.op("aten::copy_", "default", [[0]])
        em.b.emit(P.KernelCall(op, [dst, src, em.false], [-1]))
        mutated.add(dst)
    return handle


def _unsupported_output(what: str) -> Callable:
    def handle(em: _Emitter, spec: Any, arg: Any, scope: Scope, state: dict, mutated: set, where: str) -> None:
        raise UnsupportedConstructError(f"{where}: {what} outputs (joint or effectful graphs) are not supported by "
                                        "the native emitter")
    return handle


_OUTPUT_SPECS: dict[str, Callable] = {
    "user_output": _user_output,
    "loss_output": _unsupported_output("loss"),
    "buffer_mutation": _copy_into(lambda s, state, scope: state.get(s.buffer_name), "buffer"),
    "gradient_to_parameter": _unsupported_output("gradient"),
    "gradient_to_user_input": _unsupported_output("gradient"),
    "user_input_mutation": _copy_into(lambda s, state, scope: scope.get(s.user_input_name), "user input"),
    "token": lambda em, spec, arg, scope, state, mutated, where: None,  # effects ran in order; nothing to return
    "parameter_mutation": _copy_into(lambda s, state, scope: state.get(s.parameter_name), "parameter"),
}

_CONSTANT_VALUES: dict[str, Callable[[Any], P.Value]] = {
    "as_none": lambda v: P.NoneValue(),
    "as_int": P.Int,
    "as_float": lambda v: P.Float(schema.from_f64(v)),
    "as_string": P.String,
    "as_bool": P.Bool,
}

for _t, _u in ((_INPUT_SPECS, schema.InputSpec), (_OUTPUT_SPECS, schema.OutputSpec),
               (_CONSTANT_VALUES, schema.ConstantValue)):
    assert set(_t) == set(_u.__struct_fields__), f"{_u.__name__} dispatch is incomplete"


# ---------------------------------------------------------------- arguments -> values


def _python_value(x: Any) -> P.Value:
    """A Python default value (from an op schema) as a program constant."""
    import torch

    from serde.bridge.enums import DTYPE_TO_SCALAR, LAYOUT_TO_SCHEMA, MEMORY_FORMAT_TO_SCHEMA

    if x is None:
        return P.NoneValue()
    if isinstance(x, bool):
        return P.Bool(x)
    if isinstance(x, int):
        return P.Int(x)
    if isinstance(x, float):
        return P.Float(x)
    if isinstance(x, str):
        return P.String(x)
    if isinstance(x, complex):
        return P.Complex(x.real, x.imag)
    if isinstance(x, torch.dtype) and x in DTYPE_TO_SCALAR:
        return P.ScalarType(int(DTYPE_TO_SCALAR[x]))
    if isinstance(x, torch.layout) and x in LAYOUT_TO_SCHEMA:
        return P.Layout(int(LAYOUT_TO_SCHEMA[x]))
    if isinstance(x, torch.memory_format) and x in MEMORY_FORMAT_TO_SCHEMA:
        return P.MemoryFormat(int(MEMORY_FORMAT_TO_SCHEMA[x]))
    if isinstance(x, torch.device):
        return P.Device(x.type, x.index)
    if isinstance(x, (list, tuple)):
        if all(isinstance(e, bool) for e in x) and x:
            return P.BoolList(list(x))
        if all(isinstance(e, int) and not isinstance(e, bool) for e in x):
            return P.IntList(list(x))
        if all(isinstance(e, (int, float)) and not isinstance(e, bool) for e in x):
            return P.FloatList([float(e) for e in x])
    raise UnsupportedConstructError(f"no native encoding for {x!r}")


def _sym_arg(const: Callable[[Any], P.Value]) -> Callable:
    def handle(em: _Emitter, v: Any, scope: Scope, where: str) -> int:
        if v.as_name is not None:
            return em.ref(v.as_name, scope, where)
        return em.b.const(const(v.value))
    return handle


def _sym_list(const_list: Callable[[list], P.Value], item: Callable) -> Callable:
    def handle(em: _Emitter, v: list, scope: Scope, where: str) -> int:
        if all(x.as_name is None for x in v):
            return em.b.const(const_list([x.value for x in v]))
        return em.box([item(em, x, scope, f"{where}[{i}]") for i, x in enumerate(v)])
    return handle


def _opt_tensor(em: _Emitter, v: schema.OptionalTensorArgument, scope: Scope, where: str) -> int:
    if v.as_tensor is not None:
        return em.ref(v.as_tensor.name, scope, where)
    return em.b.const(P.NoneValue())


def _no_arg(what: str) -> Callable:
    def handle(em: _Emitter, v: Any, scope: Scope, where: str) -> int:
        raise UnsupportedConstructError(f"{where}: {what} arguments are not supported by the native emitter")
    return handle


_f = schema.from_f64
_sym_int = _sym_arg(P.Int)
_sym_bool = _sym_arg(P.Bool)
_sym_float = _sym_arg(lambda x: P.Float(_f(x)))

def _known(make: Callable[[int], P.Value], what: str) -> Callable[[_Emitter, Any, Scope, str], int]:
    """A dtype, layout or memory format argument; Unknown (0) is no torch value, and the load refuses it."""
    def arg(em: _Emitter, v: Any, s: Scope, w: str) -> int:
        if int(v) == 0:
            raise MalformedArtifactError(f"{w}: {what} {v!r} has no torch value; the artifact is damaged or was "
                                         "edited after saving")
        return em.b.const(make(int(v)))
    return arg


def _layout(em: _Emitter, v: Any, s: Scope, w: str) -> int:
    """A layout argument: the runtimes make dense tensors only, as for the tensors' own metas."""
    if int(v) != 0 and v != schema.Layout.Strided:
        raise UnsupportedConstructError(f"{w}: layout {getattr(v, 'name', v)} is not supported natively; "
                                        "only dense (strided) tensors are")
    return _known(P.Layout, "layout")(em, v, s, w)


_ARGUMENTS: dict[str, Callable[[_Emitter, Any, Scope, str], int]] = {
    "as_none": lambda em, v, s, w: em.b.const(P.NoneValue()),
    "as_tensor": lambda em, v, s, w: em.ref(v.name, s, w),
    "as_tensors": lambda em, v, s, w: em.box([em.ref(t.name, s, f"{w}[{i}]") for i, t in enumerate(v)]),
    "as_int": lambda em, v, s, w: em.b.const(P.Int(v)),
    "as_ints": lambda em, v, s, w: em.b.const(P.IntList(list(v))),
    "as_float": lambda em, v, s, w: em.b.const(P.Float(_f(v))),
    "as_floats": lambda em, v, s, w: em.b.const(P.FloatList([_f(x) for x in v])),
    "as_string": lambda em, v, s, w: em.b.const(P.String(v)),
    "as_strings": lambda em, v, s, w: em.b.const(P.StringList(list(v))),
    "as_sym_int": _sym_int,
    "as_sym_ints": _sym_list(P.IntList, _sym_int),
    "as_scalar_type": _known(P.ScalarType, "scalar type"),
    "as_memory_format": _known(P.MemoryFormat, "memory format"),
    "as_layout": _layout,
    "as_device": lambda em, v, s, w: em.b.const(P.Device(v.type, v.index)),
    "as_bool": lambda em, v, s, w: em.b.const(P.Bool(v)),
    "as_bools": lambda em, v, s, w: em.b.const(P.BoolList(list(v))),
    "as_sym_bool": _sym_bool,
    "as_sym_bools": _sym_list(P.BoolList, _sym_bool),
    "as_optional_tensors": lambda em, v, s, w: em.box([_opt_tensor(em, x, s, f"{w}[{i}]") for i, x in enumerate(v)]),
    "as_graph": _no_arg("subgraph (outside cond/map/while_loop)"),
    "as_custom_obj": _no_arg("custom object"),
    "as_operator": _no_arg("operator"),
    "as_sym_float": _sym_float,
    "as_sym_floats": _sym_list(lambda xs: P.FloatList([_f(x) for x in xs]), _sym_float),
    "as_optional_tensor": _opt_tensor,
    "as_complex": lambda em, v, s, w: em.b.const(P.Complex(_f(v.real), _f(v.imag))),
    "as_nested_tensors": lambda em, v, s, w: em.box(
        [em.box([em.ref(t.name, s, f"{w}[{i}][{j}]") for j, t in enumerate(xs)]) for i, xs in enumerate(v)]),
    "as_int_lists": lambda em, v, s, w: em.box([em.b.const(P.IntList(list(x))) for x in v]),
    "as_string_to_argument": _no_arg("dict"),
    "as_tuple": _no_arg("mixed tuple"),
    "as_float_lists": lambda em, v, s, w: em.box([em.b.const(P.FloatList([_f(y) for y in x])) for x in v]),
}
assert set(_ARGUMENTS) == set(schema.Argument.__struct_fields__), "Argument dispatch is incomplete"


# ---------------------------------------------------------------- node outputs -> values


def _out_named(kind: str) -> Callable:
    def handle(em: _Emitter, v: Any, g: schema.Graph, scope: Scope, where: str, defined: set[str]) -> int:
        name = v.name if kind == "as_tensor" else v.as_name
        if name is None:  # a constant result (specialized): nothing to keep
            return -1
        return em.define(name, kind, g, scope, where, defined)
    return handle


def _out_tensors(em: _Emitter, v: list, g: schema.Graph, scope: Scope, where: str, defined: set[str]) -> int:
    return em.b.new(P.List([em.define(t.name, "as_tensor", g, scope, f"{where}[{i}]", defined)
                            for i, t in enumerate(v)]))


def _out_optional(em: _Emitter, v: schema.OptionalTensorArgument, g: schema.Graph, scope: Scope, where: str,
                  defined: set[str]) -> int:
    if v.as_tensor is None:
        return -1
    return em.define(v.as_tensor.name, "as_tensor", g, scope, where, defined)


_OUTPUTS: dict[str, Callable] = {
    "as_none": lambda em, v, g, s, w, d: -1,
    "as_tensor": _out_named("as_tensor"),
    "as_tensors": _out_tensors,
    "as_sym_int": _out_named("as_sym_int"),
    "as_sym_bool": _out_named("as_sym_bool"),
    "as_sym_float": _out_named("as_sym_float"),
    "as_optional_tensor": _out_optional,
}


def _io_keys(root: schema.ModuleCallSignature | None, n_inputs: int, n_outputs: int) -> dict[str, list[str]]:
    """The safetensors keys of the inputs and outputs (native.format.keys.leaf_keys); a list is left empty
    when its tree does not give one distinct key per leaf."""
    if root is None:
        return {}
    from native.format.keys import leaf_keys
    from serde.bridge.treespec import deserialize_treespec

    ins = leaf_keys(deserialize_treespec(root.in_spec, "module_call_graph[<root>].in_spec"), inputs=True)
    outs = leaf_keys(deserialize_treespec(root.out_spec, "module_call_graph[<root>].out_spec"), inputs=False)
    return {"input_keys": ins if len(ins) == n_inputs else [], "output_keys": outs if len(outs) == n_outputs else []}
