"""Render a schema program as stable, readable text: the output of ``pt2serde show``.

The text is made for people and for ``git diff``: one line per node, SSA-like
(``relu: f32[s0, 64] = aten.relu.default(linear)``), no column alignment, no counters,
no addresses, timestamps, paths or debug metadata, so a one-op change is a small hunk.
Symbolic sizes print exactly as stored. Nothing here imports torch.

Layout of the text (each section is omitted when empty)::

    # pt2serde program: schema 1.0, torch 2.13.0
    opset: aten=10
    inputs:          one line per input spec: kind, name: type, where it comes from
    outputs:         one line per output spec
    graph:           one line per node, then `return ...`; subgraphs indented under their node
    range_constraints:
    guards:          input checks ep.module() runs, as torch writes them (L['x'].size()[0] ...)
    module_call_graph:
    state_dict: / constants:   name: type sha256:<12 hex>
    example_inputs:
"""

from __future__ import annotations

import difflib
import functools
import json
import re
from collections.abc import Callable

from serde.core import schema
from serde.core.expr import expr_key, expr_text, ranges_by_text, tree_to_str
from serde.core.expr.guards import guard_texts
from serde.core.walk import EMPTY_STACK_KEY, argument_subgraphs
from serde.errors import MalformedArtifactError

__all__ = [
    "DTYPE_ABBREV",
    "DTYPE_NAME",
    "GraphView",
    "render",
    "render_program",
    "render_weights",
    "render_stored_tensor",
    "render_tensor_meta",
    "render_treespec",
    "input_spec_line",
    "output_spec_line",
    "range_line",
    "guard_lines",
    "module_call_line",
    "count_changed_lines",
    "defined_names",
    "subgraphs",
    "subgraph_lines",
    "sorted_items",
    "render_leaf",
    "contiguous_strides",
    "member",
]

INDENT = "  "
SHA_CHARS = 12

ST = schema.ScalarType
# Short names as torch prints them in graph signatures (f32, i64, b8, ...).
DTYPE_ABBREV: dict[schema.ScalarType, str] = {
    ST.UNKNOWN: "unknown", ST.BYTE: "u8", ST.CHAR: "i8", ST.SHORT: "i16", ST.INT: "i32",
    ST.LONG: "i64", ST.HALF: "f16", ST.FLOAT: "f32", ST.DOUBLE: "f64", ST.COMPLEXHALF: "c32",
    ST.COMPLEXFLOAT: "c64", ST.COMPLEXDOUBLE: "c128", ST.BOOL: "b8", ST.BFLOAT16: "bf16",
    ST.UINT16: "u16", ST.FLOAT8E4M3FN: "f8e4m3fn", ST.FLOAT8E5M2: "f8e5m2",
    ST.FLOAT8E4M3FNUZ: "f8e4m3fnuz", ST.FLOAT8E5M2FNUZ: "f8e5m2fnuz",
    ST.FLOAT8E8M0FNU: "f8e8m0fnu", ST.UINT32: "u32", ST.UINT64: "u64",
}
# torch dtype names, for dtype-valued arguments (`dtype=torch.float32`).
DTYPE_NAME: dict[schema.ScalarType, str] = {
    ST.UNKNOWN: "unknown", ST.BYTE: "torch.uint8", ST.CHAR: "torch.int8", ST.SHORT: "torch.int16",
    ST.INT: "torch.int32", ST.LONG: "torch.int64", ST.HALF: "torch.float16",
    ST.FLOAT: "torch.float32", ST.DOUBLE: "torch.float64", ST.COMPLEXHALF: "torch.complex32",
    ST.COMPLEXFLOAT: "torch.complex64", ST.COMPLEXDOUBLE: "torch.complex128",
    ST.BOOL: "torch.bool", ST.BFLOAT16: "torch.bfloat16", ST.UINT16: "torch.uint16",
    ST.FLOAT8E4M3FN: "torch.float8_e4m3fn", ST.FLOAT8E5M2: "torch.float8_e5m2",
    ST.FLOAT8E4M3FNUZ: "torch.float8_e4m3fnuz", ST.FLOAT8E5M2FNUZ: "torch.float8_e5m2fnuz",
    ST.FLOAT8E8M0FNU: "torch.float8_e8m0fnu", ST.UINT32: "torch.uint32", ST.UINT64: "torch.uint64",
}
_LAYOUT_NAME = {
    schema.Layout.Unknown: "unknown_layout", schema.Layout.SparseCoo: "torch.sparse_coo",
    schema.Layout.SparseCsr: "torch.sparse_csr", schema.Layout.SparseCsc: "torch.sparse_csc",
    schema.Layout.SparseBsr: "torch.sparse_bsr", schema.Layout.SparseBsc: "torch.sparse_bsc",
    schema.Layout._mkldnn: "torch._mkldnn", schema.Layout.Strided: "torch.strided",
}
_MEMORY_FORMAT_NAME = {
    schema.MemoryFormat.Unknown: "unknown_memory_format",
    schema.MemoryFormat.ContiguousFormat: "torch.contiguous_format",
    schema.MemoryFormat.ChannelsLast: "torch.channels_last",
    schema.MemoryFormat.ChannelsLast3d: "torch.channels_last_3d",
    schema.MemoryFormat.PreserveFormat: "torch.preserve_format",
}
for _table, _enum in ((DTYPE_ABBREV, ST), (DTYPE_NAME, ST), (_LAYOUT_NAME, schema.Layout),
                      (_MEMORY_FORMAT_NAME, schema.MemoryFormat)):
    assert set(_table) == set(_enum), f"render table misses {set(_enum) - set(_table)}"

Rename = Callable[[str], str]


def _same(name: str) -> str:
    return name


# ---------------------------------------------------------------- public API


def render(program: schema.ExportedProgram, weights: schema.Weights | None = None) -> str:
    """Render a program (and optionally its weights) as the text ``pt2serde show`` prints.

    Args:
        program: any decoded ``schema.ExportedProgram``.
        weights: the artifact's ``schema.Weights``; adds the state_dict/constants summary.

    Returns:
        Newline-terminated text; the same input always gives the same text.

    Raises:
        MalformedArtifactError: a weight points at a storage that does not exist.
    """
    lines = render_program(program)
    if weights is not None:
        lines += render_weights(weights)
    return "\n".join(lines) + "\n"


def render_program(program: schema.ExportedProgram) -> list[str]:
    """Lines of the program part: header, signature, graph, range constraints, call graph."""
    gm = program.graph_module
    view = GraphView(gm.graph)
    v = program.schema_version
    out = [f"# pt2serde program: schema {v.major}.{v.minor}, torch {_text(program.torch_version)}"]
    if program.opset_version:
        out.append("opset: " + ", ".join(f"{_text(k)}={n}" for k, n in sorted_items(program.opset_version)))
    if program.verifiers:
        out.append("verifiers: " + ", ".join(_text(x) for x in program.verifiers))
    sig = gm.signature
    out.append("inputs:")
    out += [INDENT + input_spec_line(s, view) for s in sig.input_specs]
    out.append("outputs:")
    out += [INDENT + output_spec_line(s, view) for s in sig.output_specs]
    out.append("graph:")
    out += view.body_lines(INDENT)
    if program.range_constraints:
        out.append("range_constraints:")
        out += [INDENT + range_line(k, r) for k, r in sorted_items(ranges_by_text(program.range_constraints))]
    if program.guards is not None:
        out.append("guards:")
        out += [INDENT + line for line in guard_lines(program.guards)]
    if gm.module_call_graph:
        out.append("module_call_graph:  # fqn: (inputs) -> (outputs), pytree specs of (args, kwargs) "
                   "and of the result, * = one value")
        out += [INDENT + module_call_line(e) for e in gm.module_call_graph]
    if gm.custom is not None:
        out.append(f"custom: {_quote(gm.custom)}")
    return out


def guard_lines(guards: schema.InputGuards | None, where: str = "guards") -> list[str]:
    """One line per stored guard, outer parentheses dropped."""
    return [t[1:-1] if t.startswith("(") and t.endswith(")") and _balanced(t[1:-1]) else t
            for t in guard_texts(guards, where=where)]


def _balanced(t: str) -> bool:
    depth = 0
    for c in t:
        depth += (c == "(") - (c == ")")
        if depth < 0:
            return False
    return depth == 0


def render_weights(weights: schema.Weights) -> list[str]:
    """Lines of the weights summary: name, dtype, shape and a short sha per tensor."""
    out: list[str] = []
    for title, table in (("state_dict", weights.state_dict), ("constants", weights.constants)):
        if table:
            out.append(f"{title}:")
            out += [
                f"{INDENT}{_text(name)}: {render_stored_tensor(t, weights, f'weights.{title}[{name!r}]')}"
                for name, t in sorted_items(table)
            ]
    ex = weights.example_inputs
    if ex is not None:
        out.append(f"example_inputs: {render_treespec(ex.spec)}")
        for i, leaf in enumerate(ex.leaves):
            out.append(f"{INDENT}[{i}] {render_leaf(leaf, weights, i)}")
    return out


def render_stored_tensor(t: schema.StoredTensor, weights: schema.Weights, where: str = "tensor") -> str:
    """``f32[64, 32] sha256:1a2b3c4d5e6f`` plus strides/offset/requires_grad when not default.

    A tensor saved without data ends in ``fake cpu`` (or ``meta``) instead of a sha; a subclass is
    ``f32[4] TwoTensor(a=f32[4] sha256:..., b=...) context=None``.
    """
    if t.subclass is not None:
        sc = t.subclass
        inner = ", ".join(f"{_text(n)}={render_stored_tensor(it, weights, f'{where}.subclass.inner[{n!r}]')}"
                          for n, it in sorted(sc.inner.items()))
        return (f"{_tensor_header(t)} {_text(sc.class_name.rpartition('.')[2])}({inner}) "
                f"context={render_context(sc.context)}")
    if not 0 <= t.storage < len(weights.storages):
        raise MalformedArtifactError(
            f"{where}: storage index {t.storage} is out of range (weights have "
            f"{len(weights.storages)} storages). The artifact is damaged; re-save it."
        )
    storage = weights.storages[t.storage]
    d = storage.device
    if storage.sha256 == "" and d is not None:
        where_to = "meta" if d.type == "meta" else f"fake {_text(_device(d))}"
        return f"{_tensor_header(t)} {where_to}"
    on = "" if d is None else f" device={_text(_device(d))}"
    return f"{_tensor_header(t)}{on} sha256:{storage.sha256[:SHA_CHARS]}"


def _tensor_header(t: schema.StoredTensor) -> str:
    text = f"{DTYPE_ABBREV.get(t.dtype, '?')}[{', '.join(map(str, t.sizes))}]"
    if list(t.strides) != contiguous_strides(t.sizes):
        text += f" stride=[{', '.join(map(str, t.strides))}]"
    if t.storage_offset:
        text += f" offset={t.storage_offset}"
    if t.requires_grad:
        text += " requires_grad"
    return text


def render_context(v: schema.ContextValue) -> str:
    """A subclass's flatten context as Python-like text (``(2, 'x')``, ``{'k': f32}``)."""
    return _CONTEXT[v.kind](v.value)


def _seq(items: list[schema.ContextValue], open_: str, close: str) -> str:
    text = ", ".join(render_context(x) for x in items)
    return f"{open_}{text}{',' if open_ == '(' and len(items) == 1 else ''}{close}"


_CONTEXT: dict[str, Callable[[object], str]] = {
    "as_none": lambda v: "None",
    "as_int": lambda v: str(v),
    "as_float": lambda v: _float(v),
    "as_string": lambda v: _quote(v),
    "as_bool": lambda v: str(bool(v)),
    "as_list": lambda v: _seq(v, "[", "]"),
    "as_tuple": lambda v: _seq(v, "(", ")"),
    "as_dict": lambda v: "{" + ", ".join(f"{render_context(i.key)}: {render_context(i.value)}" for i in v) + "}",
    "as_dtype": lambda v: DTYPE_ABBREV.get(v, "?"),
    "as_size": lambda v: f"Size([{', '.join(map(str, v))}])",
    "as_device": lambda v: _quote(v.type if v.index is None else f"{v.type}:{v.index}"),
}
assert set(_CONTEXT) == set(schema.ContextValue.__struct_fields__), "render: ContextValue members not covered"


def render_tensor_meta(meta: schema.TensorMeta, *, full: bool = False) -> str:
    """``f32[s0, 64]``; strides, offset, device and layout are added only when not default.

    ``full`` also prints ``requires_grad`` (left out of node lines: it is set on nearly every
    activation of a model with parameters and would only add noise there).
    """
    sizes = [_symint(s) for s in meta.sizes]
    text = f"{DTYPE_ABBREV.get(meta.dtype, '?')}[{', '.join(sizes)}]"
    if not _is_contiguous(meta.sizes, meta.strides):
        text += f" stride=[{', '.join(_symint(s) for s in meta.strides)}]"
    if _symint(meta.storage_offset) != "0":
        text += f" offset={_symint(meta.storage_offset)}"
    dev = meta.device
    if dev.type != "cpu" or dev.index not in (None, 0):
        text += f" device={_device(dev)}"
    if meta.layout != schema.Layout.Strided:
        text += f" layout={_LAYOUT_NAME.get(meta.layout, meta.layout)}"
    if full and meta.requires_grad:
        text += " requires_grad"
    return text


def render_treespec(spec: schema.TreeSpec) -> str:
    """A pytree spec in Python's own notation, a leaf as ``*``: ``((*, *), {'k': *})``.

    Containers print as Python literals (tuples, lists, dicts with their keys, None); namedtuples and
    torch's named results as ``module.Name(field=child, ...)``; any other registered type as
    ``Type(children)``, with its context in ``<...>`` when it is not just keys.
    """
    kind, children = spec.type, [render_treespec(c) for c in spec.children]
    if kind == "*":
        return "*"
    if kind == "None":
        return "None"
    if kind == "tuple":
        return f"({children[0]},)" if len(children) == 1 else f"({', '.join(children)})"
    if kind == "list":
        return f"[{', '.join(children)}]"
    keys = _context_keys(spec.context)
    if kind == "dict" and keys is not None and len(keys) == len(children):
        return "{" + ", ".join(f"{k!r}: {c}" for k, c in zip(keys, children, strict=True)) + "}"
    named = _named_fields(spec.context, len(children)) if kind in ("namedtuple", "structseq") else None
    if named is not None:
        name, fields = named
        return f"{_text(name)}({', '.join(f'{_text(f)}={c}' for f, c in zip(fields, children, strict=True))})"
    ctx = "" if spec.context in (None, "null") else f"<{_text(spec.context)}>"
    return f"{_text(kind)}{ctx}({', '.join(children)})"


def _named_fields(context: str | None, n: int) -> tuple[str, list[str]] | None:
    """A namedtuple's or structseq's class name and its ``n`` field names, or None when the context
    is something else (then it prints raw, as any other type's)."""
    try:
        ctx = json.loads(context) if context else None
    except ValueError:
        return None
    if not isinstance(ctx, dict) or not isinstance(ctx.get("name"), str):
        return None
    fields = ctx.get("fields")
    if not (isinstance(fields, list) and len(fields) == n and all(isinstance(f, str) for f in fields)):
        return None
    return ctx["name"], fields


def _context_keys(context: str | None) -> list | None:
    """A dict spec's keys (its context is their JSON list), or None when it is something else."""
    try:
        keys = json.loads(context) if context else None
    except ValueError:
        return None
    if isinstance(keys, list) and all(isinstance(k, (str, int)) for k in keys):
        return keys
    return None


def range_line(symbol: str, r: schema.RangeConstraint) -> str:
    """``s0: [2, 1024]``; an unset bound prints as ``-int_oo`` / ``int_oo``."""
    lo = "-int_oo" if r.min_val is None else str(r.min_val)
    hi = "int_oo" if r.max_val is None else str(r.max_val)
    return f"{_text(symbol)}: [{lo}, {hi}]"


def module_call_line(entry: schema.ModuleCallEntry, rename: Rename = _same) -> str:
    """One module call graph entry: fqn, then its call signature when it has one."""
    fqn = _text(entry.fqn) if entry.fqn else "<root>"
    s = entry.signature
    if s is None:  # torch keeps the call signature only of modules named in preserve_module_call_signature
        return f"{fqn}: (no call signature kept)"
    view = GraphView(None, rename)
    text = (
        f"{fqn}: ({', '.join(view.arg(a) for a in s.inputs)}) -> "
        f"({', '.join(view.arg(a) for a in s.outputs)}) "
        f"in_spec={render_treespec(s.in_spec)} out_spec={render_treespec(s.out_spec)}"
    )
    if s.forward_arg_names is not None:
        text += f" args=[{', '.join(_text(n) for n in s.forward_arg_names)}]"
    return text


def input_spec_line(spec: schema.InputSpec, view: GraphView) -> str:
    """``parameter p_fc_weight: f32[8, 4] requires_grad <- fc.weight``."""
    return f"{spec.kind} {_INPUT_SPEC[spec.kind](spec.value, view)}"


def output_spec_line(spec: schema.OutputSpec, view: GraphView) -> str:
    """``user_output relu: f32[s0, 8]`` or ``buffer_mutation add: f32[8] -> bn.running_mean``."""
    return f"{spec.kind} {_OUTPUT_SPEC[spec.kind](spec.value, view)}"


def count_changed_lines(a_text: str, b_text: str) -> int:
    """Lines a unified diff of two ``show`` texts marks ``-`` or ``+`` (a replaced line counts 2).

    This is the locality measure of the benchmark and tests: inserting one node into a chain
    should add one line and change its consumer's line, i.e. 3.
    """
    a, b = a_text.splitlines(), b_text.splitlines()
    n = 0
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag != "equal":
            n += (i2 - i1) + (j2 - j1)
    return n


# ---------------------------------------------------------------- graphs


class GraphView:
    """Formats the values and nodes of one graph.

    ``rename`` maps every value name the view prints (``diff`` uses it to print one program's
    names in the other's terms); subgraph names and symbols inside expressions are not renamed.
    """

    def __init__(self, graph: schema.Graph | None, rename: Rename = _same) -> None:
        self.graph = graph
        self.rename = rename

    # -- values

    def type_of(self, name: str, *, full: bool = False) -> str:
        """Type of a value defined in this graph, ``?`` if the graph has no entry for it."""
        g = self.graph
        if g is None:
            return "?"
        if name in g.tensor_values:
            return render_tensor_meta(g.tensor_values[name], full=full)
        if name in g.sym_int_values:
            return f"Sym({_symint(g.sym_int_values[name])})"
        if name in g.sym_float_values:
            return f"SymFloat({_symscalar(g.sym_float_values[name])})"
        if name in g.sym_bool_values:
            return f"SymBool({_symscalar(g.sym_bool_values[name])})"
        if name in g.custom_obj_values:
            return f"Obj({_text(g.custom_obj_values[name].class_fqn)})"
        return "?"

    def arg(self, a: schema.Argument) -> str:
        """An argument where it is used: value names only."""
        kind, value = member(a)
        return _ARG[kind](value, self._ref)

    def defn(self, a: schema.Argument, *, full: bool = False) -> str:
        """An argument where it is defined: each value name with its type."""
        kind, value = member(a)
        return _ARG[kind](value, lambda n: f"{self._ref(n)}: {self.type_of(n, full=full)}")

    def _ref(self, name: str) -> str:
        return _text(self.rename(name))

    # -- nodes

    def target(self, node: schema.Node) -> str:
        t = node.target
        return _text(t[len("torch.ops."):] if t.startswith("torch.ops.") else t)

    def args(self, node: schema.Node) -> str:
        """The call's arguments: positional ones bare, keyword ones as ``name=value``."""
        parts = []
        for na in node.inputs:
            v = self.arg(na.arg)
            parts.append(v if na.kind == schema.ArgumentKind.POSITIONAL else f"{_text(na.name)}={v}")
        return ", ".join(parts)

    def lhs(self, node: schema.Node) -> str:
        """``relu: f32[4]`` when the node defines one value named like itself, else
        ``topk -> (getitem: f32[2], getitem_1: i64[2])``."""
        outs = node.outputs
        if len(outs) == 1 and outs[0].as_tensors is None and defined_names(outs[0]) == [node.name]:
            return self.defn(outs[0])
        if len(outs) == 1:
            defs = self.defn(outs[0])
        else:
            defs = f"({', '.join(self.defn(o) for o in outs)})"
        return f"{self._ref(node.name)} -> {defs}"

    def annotation(self, node: schema.Node) -> str:
        """Trailing ``  # fc.0 custom={...}``: the innermost module path and custom metadata."""
        md = node.metadata
        notes = []
        if md.nn_module_stack:
            path = md.nn_module_stack[-1].path
            if path and path != EMPTY_STACK_KEY:  # torch's marker for "no module": the root
                notes.append(_text(path))
        if md.custom not in (None, "{}"):  # "{}" is what an empty custom dict is stored as
            notes.append(f"custom={_quote(md.custom)}")
        return f"  # {' '.join(notes)}" if notes else ""

    def node_line(self, node: schema.Node) -> str:
        return f"{self.lhs(node)} = {self.target(node)}({self.args(node)}){self.annotation(node)}"

    def returns(self) -> str:
        g = self.graph
        assert g is not None
        outs = [self.arg(o) for o in g.outputs]
        if g.is_single_tensor_return and len(outs) == 1:
            return f"return {outs[0]}"
        return f"return ({outs[0]},)" if len(outs) == 1 else f"return ({', '.join(outs)})"

    def body_lines(self, indent: str) -> list[str]:
        """Node lines and the return line, with subgraphs indented under their node."""
        g = self.graph
        assert g is not None
        out = []
        for node in g.nodes:
            out.append(indent + self.node_line(node))
            for sub in subgraphs(node):
                out += subgraph_lines(sub, indent + INDENT)
        out.append(indent + self.returns())
        return out


def subgraphs(node: schema.Node) -> list[schema.GraphArgument]:
    """The subgraphs a node passes to a higher-order op, in argument order."""
    return [ga for na in node.inputs for ga in argument_subgraphs(na.arg)]


def subgraph_lines(sub: schema.GraphArgument, indent: str) -> list[str]:
    """``true_graph_0(x: f32[4]):`` then its body, one level deeper."""
    view = GraphView(sub.graph)
    params = ", ".join(view.defn(a) for a in sub.graph.inputs)
    return [f"{indent}{_text(sub.name)}({params}):", *view.body_lines(indent + INDENT)]


def defined_names(a: schema.Argument) -> list[str]:
    names: list[str] = []
    kind, value = member(a)
    _ARG[kind](value, lambda n: names.append(n) or n)
    return names


# ---------------------------------------------------------------- Argument, one entry per member

Fmt = Callable[[str], str]


def _list(items, f) -> str:
    return f"[{', '.join(f(x) for x in items)}]"


def _opt_tensor(o: schema.OptionalTensorArgument, name: Fmt) -> str:
    return "None" if o.as_tensor is None else name(o.as_tensor.name)


def _sym(s: schema.SymIntArgument | schema.SymFloatArgument | schema.SymBoolArgument, name: Fmt) -> str:
    if s.as_name is not None:
        return name(s.as_name)
    return _scalar(member(s)[1])


_ARG: dict[str, Callable[[object, Fmt], str]] = {
    "as_none": lambda v, name: "None",
    "as_tensor": lambda v, name: name(v.name),
    "as_tensors": lambda v, name: _list(v, lambda t: name(t.name)),
    "as_int": lambda v, name: str(v),
    "as_ints": lambda v, name: _list(v, str),
    "as_float": lambda v, name: _float(v),
    "as_floats": lambda v, name: _list(v, _float),
    "as_string": lambda v, name: _quote(v),
    "as_strings": lambda v, name: _list(v, _quote),
    "as_sym_int": lambda v, name: _sym(v, name),
    "as_sym_ints": lambda v, name: _list(v, lambda s: _sym(s, name)),
    "as_scalar_type": lambda v, name: DTYPE_NAME.get(v, f"scalar_type({int(v)})"),
    "as_memory_format": lambda v, name: _MEMORY_FORMAT_NAME.get(v, f"memory_format({int(v)})"),
    "as_layout": lambda v, name: _LAYOUT_NAME.get(v, f"layout({int(v)})"),
    "as_device": lambda v, name: f"device({_quote(_device(v))})",
    "as_bool": lambda v, name: str(bool(v)),
    "as_bools": lambda v, name: _list(v, lambda b: str(bool(b))),
    "as_sym_bool": lambda v, name: _sym(v, name),
    "as_sym_bools": lambda v, name: _list(v, lambda s: _sym(s, name)),
    "as_optional_tensors": lambda v, name: _list(v, lambda o: _opt_tensor(o, name)),
    "as_graph": lambda v, name: _text(v.name),
    "as_custom_obj": lambda v, name: name(v.name),
    "as_operator": lambda v, name: _text(v),
    "as_sym_float": lambda v, name: _sym(v, name),
    "as_sym_floats": lambda v, name: _list(v, lambda s: _sym(s, name)),
    "as_optional_tensor": lambda v, name: _opt_tensor(v, name),
    "as_complex": lambda v, name: f"complex({_float(v.real)}, {_float(v.imag)})",
    "as_nested_tensors": lambda v, name: _list(v, lambda ts: _list(ts, lambda t: name(t.name))),
    "as_int_lists": lambda v, name: _list(v, lambda xs: _list(xs, str)),
    "as_string_to_argument": lambda v, name: "{" + ", ".join(
        f"{_quote(k)}: {_ARG[member(a)[0]](member(a)[1], name)}" for k, a in sorted_items(v)) + "}",
    "as_float_lists": lambda v, name: _list(v, lambda xs: _list(xs, _float)),
    "as_tuple": lambda v, name: "(" + ", ".join(_ARG[member(a)[0]](member(a)[1], name) for a in v)
                                + ("," if len(v) == 1 else "") + ")",
}
assert set(_ARG) == set(schema.Argument.__struct_fields__), "render: Argument members not covered"


# ---------------------------------------------------------------- signature specs, one entry per member


def _from(view: GraphView, arg_name: str, source: str) -> str:
    return f"{view._ref(arg_name)}: {view.type_of(arg_name, full=True)} <- {_text(source)}"


def _to(view: GraphView, arg_name: str, dest: str) -> str:
    return f"{view._ref(arg_name)}: {view.type_of(arg_name, full=True)} -> {_text(dest)}"


_CONSTANT: dict[str, Callable[[object], str]] = {
    "as_none": lambda v: "None",
    "as_int": str,
    "as_float": lambda v: _float(v),
    "as_string": lambda v: _quote(v),
    "as_bool": lambda v: str(bool(v)),
}
assert set(_CONSTANT) == set(schema.ConstantValue.__struct_fields__), "render: ConstantValue not covered"

_INPUT_SPEC: dict[str, Callable[[object, GraphView], str]] = {
    "user_input": lambda s, v: v.defn(s.arg, full=True),
    "parameter": lambda s, v: _from(v, s.arg.name, s.parameter_name),
    "buffer": lambda s, v: _from(v, s.arg.name, s.buffer_name) + ("" if s.persistent else " (non-persistent)"),
    "tensor_constant": lambda s, v: _from(v, s.arg.name, s.tensor_constant_name),
    "custom_obj": lambda s, v: _from(v, s.arg.name, s.custom_obj_name),
    "constant_input": lambda s, v: f"{v._ref(s.name)} = {_CONSTANT[s.value.kind](s.value.value)}",
    "token": lambda s, v: v._ref(s.arg.name),
}
assert set(_INPUT_SPEC) == set(schema.InputSpec.__struct_fields__), "render: InputSpec members not covered"

_OUTPUT_SPEC: dict[str, Callable[[object, GraphView], str]] = {
    "user_output": lambda s, v: v.defn(s.arg, full=True),
    "loss_output": lambda s, v: f"{v._ref(s.arg.name)}: {v.type_of(s.arg.name, full=True)}",
    "buffer_mutation": lambda s, v: _to(v, s.arg.name, s.buffer_name),
    "gradient_to_parameter": lambda s, v: _to(v, s.arg.name, s.parameter_name),
    "gradient_to_user_input": lambda s, v: _to(v, s.arg.name, s.user_input_name),
    "user_input_mutation": lambda s, v: _to(v, s.arg.name, s.user_input_name),
    "token": lambda s, v: v._ref(s.arg.name),
    "parameter_mutation": lambda s, v: _to(v, s.arg.name, s.parameter_name),
}
assert set(_OUTPUT_SPEC) == set(schema.OutputSpec.__struct_fields__), "render: OutputSpec members not covered"


# ---------------------------------------------------------------- example inputs, one entry per member

_LEAF: dict[str, Callable[[object, schema.Weights, int], str]] = {
    "as_none": lambda v, w, i: "None",
    "as_tensor": lambda v, w, i: render_stored_tensor(v, w, f"weights.example_inputs.leaves[{i}]"),
    "as_int": lambda v, w, i: f"int {v}",
    "as_float": lambda v, w, i: f"float {_float(v)}",
    "as_bool": lambda v, w, i: f"bool {bool(v)}",
    "as_string": lambda v, w, i: f"str {_quote(v)}",
}
assert set(_LEAF) == set(schema.ExampleLeaf.__struct_fields__), "render: ExampleLeaf members not covered"


def render_leaf(leaf: schema.ExampleLeaf, weights: schema.Weights, i: int) -> str:
    return _LEAF[leaf.kind](leaf.value, weights, i)


# ---------------------------------------------------------------- scalars and symbols


def member(u: schema.Union) -> tuple[str, object]:
    """(name, value) of the member a union sets, in one scan (``kind`` + ``value`` take two)."""
    for f in u.__struct_fields__:
        v = getattr(u, f)
        if v is not None:
            return f, v
    raise AssertionError("unreachable: unions are validated on construction")


def _text(s: str) -> str:
    """A name or path as is, unless it could break the one-line-per-item layout."""
    return s if s.isprintable() and s.strip() == s and s else _quote(s)


def _quote(s: str) -> str:
    return json.dumps(s, ensure_ascii=True)


def _float(v: schema.F64) -> str:
    return v if isinstance(v, str) else repr(float(v))


def _scalar(v: object) -> str:
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, int):
        return str(v)
    return _float(v)  # type: ignore[arg-type]


def _symint(s: schema.SymInt) -> str:
    return str(s.as_int) if s.as_expr is None else _text(expr_text(s.as_expr.expr))


def _symscalar(s: schema.SymFloat | schema.SymBool) -> str:
    return _scalar(member(s)[1]) if s.as_expr is None else _text(expr_text(s.as_expr.expr))


def _device(d: schema.Device) -> str:
    return d.type if d.index is None else f"{d.type}:{d.index}"


def sorted_items(d: dict):
    return sorted(d.items(), key=lambda kv: _natural(kv[0]))


def _natural(s: str) -> tuple:
    """Sort key putting ``s2`` before ``s10``; ties fall back to the plain string."""
    return (tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", s)), s)


# ---- contiguity: strides are printed only when they differ from row-major ones.
# Symbolic sizes are compared as integer polynomials, built from the stored expression trees, over
# opaque atoms (symbols, constants and calls such as `FloorDiv(s0, 2)`, keyed by their canonical
# text), so `4*s1` == `s1*4` and `2*s0 + 2` == `2*(s0 + 1)`. Anything else (fractions, floats,
# relations, powers other than small naturals) prints the strides rather than guess.

Poly = dict[tuple[str, ...], int]  # sorted atoms of a monomial -> coefficient
_MAX_POWER = 8
_NOT_POLYNOMIAL = frozenset({"Rational", "Float", "Lt", "Le", "Gt", "Ge", "And", "Or", "Not"})
_NEGATIVE_CONSTANTS = {"-oo": "oo", "-int_oo": "int_oo"}


def _poly_of(x: int | tuple) -> Poly | None:
    if isinstance(x, int):
        return {(): max(x, 1)}  # row-major strides treat a size-0 dim as 1
    p = _poly(x)
    return None if p is None else {k: v for k, v in p.items() if v}


def _poly(t: tuple) -> Poly | None:
    """The polynomial of an expression tree (as :func:`serde.core.expr.expr_key` gives it)."""
    op = t[0]
    if op == "Integer":
        return {(): t[1]}
    if op in _NOT_POLYNOMIAL:
        return None
    if op in _NEGATIVE_CONSTANTS:
        return {(_NEGATIVE_CONSTANTS[op],): -1}
    if op in ("Add", "Mul"):
        out: Poly = {} if op == "Add" else {(): 1}
        for child in t[1:]:
            p = _poly(child)
            if p is None:
                return None
            if op == "Mul":
                out = _mul(out, p)
            else:
                for k, v in p.items():
                    out[k] = out.get(k, 0) + v
        return out
    if op == "Pow":
        base, exp = t[1], t[2]
        if exp[0] != "Integer" or not 0 <= exp[1] <= _MAX_POWER:
            return None
        f = _poly(base)
        out = {(): 1}
        for _ in range(exp[1]):
            out = None if f is None or out is None else _mul(out, f)
        return out
    return {(tree_to_str(t),): 1}  # a symbol, constant or call: an opaque atom


def _mul(a: Poly, b: Poly) -> Poly:
    out: Poly = {}
    for ka, va in a.items():
        for kb, vb in b.items():
            k = tuple(sorted(ka + kb))
            out[k] = out.get(k, 0) + va * vb
    return out


def _is_contiguous(sizes: list[schema.SymInt], strides: list[schema.SymInt]) -> bool:
    if len(sizes) != len(strides):
        return False
    return _contiguous_key(tuple(map(_key, sizes)), tuple(map(_key, strides)))


def _key(x: schema.SymInt) -> int | tuple:
    return x.as_int if x.as_expr is None else expr_key(x.as_expr.expr)


@functools.lru_cache(maxsize=4096)  # a graph repeats a handful of shapes many times
def _contiguous_key(sizes: tuple[int | tuple, ...], strides: tuple[int | tuple, ...]) -> bool:
    trees = [x for x in sizes + strides if isinstance(x, tuple)]
    if not trees:
        return list(strides) == contiguous_strides(list(sizes))
    for t in trees:  # a malformed stride is reported even where the strides are not printed
        tree_to_str(t)
    expect: Poly = {(): 1}
    for k in range(len(sizes) - 1, -1, -1):
        if _poly_of(strides[k]) != expect:
            return False
        if k:  # the outermost size never enters a stride
            sz = _poly_of(sizes[k])
            if sz is None:
                return False
            expect = {m: c for m, c in _mul(expect, sz).items() if c}
    return True


def contiguous_strides(sizes: list[int]) -> list[int]:
    out, acc = [], 1
    for s in reversed(sizes):
        out.append(acc)
        acc *= max(s, 1)
    return out[::-1]
