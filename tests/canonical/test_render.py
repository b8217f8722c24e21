"""canonical.render: the text of `pt2serde show`, on hand-built schema programs and on the
model zoo (real exports saved with serde.save). The CLI and git are in test_git_textconv.py."""

from __future__ import annotations

import io
import random
import subprocess
import sys

import msgspec
import pytest

import serde
from canonical import render as R
from canonical.diff import diff
from serde.archive.artifact import read_artifact
from serde.core import schema as s
from serde.core.expr import expr_from_text
from serde.errors import MalformedArtifactError
from serde.testing.zoo import CASES, export_case
from tests.tiers import tiered

POS, KW = s.ArgumentKind.POSITIONAL, s.ArgumentKind.KEYWORD


# ---------------------------------------------------------------- builders


def si(v):
    return s.SymInt(as_int=v) if isinstance(v, int) else s.SymInt(as_expr=s.SymExpr(expr=expr_from_text(v)))


def ranges_list(ranges: dict[str, tuple[int | None, int | None]]) -> list[s.RangeConstraint]:
    """``{expression text: (min, max)}`` -> the schema's list of RangeConstraint."""
    return [s.RangeConstraint(min_val=lo, max_val=hi, expr=expr_from_text(k)) for k, (lo, hi) in ranges.items()]


def meta(sizes, strides=None, dtype=s.ScalarType.FLOAT, rg=False, offset=0, device="cpu"):
    if strides is None:  # row-major
        strides, acc = [], 1
        for x in reversed(sizes):
            strides.insert(0, acc)
            acc = acc * x if isinstance(x, int) and isinstance(acc, int) else f"{acc}*{x}"
    return s.TensorMeta(dtype=dtype, sizes=[si(x) for x in sizes], requires_grad=rg,
                        device=s.Device(type=device), strides=[si(x) for x in strides],
                        storage_offset=si(offset), layout=s.Layout.Strided)


def T(name):
    return s.Argument(as_tensor=s.TensorArgument(name=name))


def arg(name, a, kind=POS):
    return s.NamedArgument(name=name, arg=a, kind=kind)


def node(name, target, inputs, outputs=None, path=None, custom=None):
    md = s.NodeMetadata(
        nn_module_stack=[s.ModuleStackEntry(key="L__self__", path=""),
                         s.ModuleStackEntry(key="k", path=path)] if path else None,
        custom=custom, stack_trace='File "/home/someone/model.py", line 3')
    return s.Node(target=target, inputs=inputs, outputs=outputs or [T(name)], metadata=md, name=name)


def graph(inputs, nodes, outputs, tensor_values, sym_int_values=None, single=False):
    return s.Graph(inputs=[T(n) for n in inputs], outputs=[T(n) for n in outputs], nodes=nodes,
                   tensor_values=tensor_values, sym_int_values=sym_int_values or {}, sym_bool_values={},
                   is_single_tensor_return=single, custom_obj_values={}, sym_float_values={})


def program(g, input_specs, output_specs, ranges=None, call_graph=None):
    return s.ExportedProgram(
        graph_module=s.GraphModule(graph=g, signature=s.GraphSignature(input_specs=input_specs,
                                                                        output_specs=output_specs),
                                   module_call_graph=call_graph or []),
        opset_version={"aten": 10}, range_constraints=ranges_list(ranges or {}),
        schema_version=s.SchemaVersion(major=2, minor=0), verifiers=[], torch_version="2.13.0")


def user_in(n):
    return s.InputSpec(user_input=s.UserInputSpec(arg=T(n)))


def param(n, target):
    return s.InputSpec(parameter=s.InputToParameterSpec(arg=s.TensorArgument(name=n), parameter_name=target))


def user_out(n):
    return s.OutputSpec(user_output=s.UserOutputSpec(arg=T(n)))


def mlp():
    """linear -> relu -> topk (two outputs) plus a sym_size and a transposed (strided) output."""
    tv = {"p_w": meta([8, 4], rg=True), "p_b": meta([8], rg=True), "x": meta(["s0", 4]),
          "linear": meta(["s0", 8]), "relu": meta(["s0", 8]), "v": meta(["s0", 2]),
          "i": meta(["s0", 2], dtype=s.ScalarType.LONG), "t": meta([8, "s0"], [1, 8])}
    nodes = [
        node("linear", "torch.ops.aten.linear.default",
             [arg("input", T("x")), arg("weight", T("p_w")), arg("bias", T("p_b"))], path="fc"),
        node("relu", "torch.ops.aten.relu.default", [arg("self", T("linear"))]),
        node("topk", "torch.ops.aten.topk.default",
             [arg("self", T("relu")), arg("k", s.Argument(as_int=2)),
              arg("largest", s.Argument(as_bool=True), KW)], outputs=[T("v"), T("i")]),
        node("sym_size_int", "torch.ops.aten.sym_size.int", [arg("self", T("x")), arg("dim", s.Argument(as_int=0))],
             outputs=[s.Argument(as_sym_int=s.SymIntArgument(as_name="sym_size_int"))]),
        node("t", "torch.ops.aten.t.default", [arg("self", T("relu"))]),
    ]
    g = graph(["p_w", "p_b", "x"], nodes, ["v", "i", "t"], tv, {"sym_size_int": si("s0")})
    return program(g, [param("p_w", "fc.weight"), param("p_b", "fc.bias"), user_in("x")],
                   [user_out("v"), user_out("i"), user_out("t")],
                   ranges={"s0": (2, 1024)})


def weights():
    return s.Weights(
        storages=[s.Storage(sha256="ab" * 32, nbytes=128), s.Storage(sha256="cd" * 32, nbytes=32)],
        state_dict={
            "fc.weight": s.StoredTensor(dtype=s.ScalarType.FLOAT, sizes=[8, 4], strides=[4, 1],
                                        storage_offset=0, storage=0, requires_grad=True),
            "fc.bias": s.StoredTensor(dtype=s.ScalarType.FLOAT, sizes=[8], strides=[1],
                                      storage_offset=0, storage=1, requires_grad=True)},
        constants={})


def chain(n, insert_at=None):
    """x -> n unary ops (names unique and independent of position) -> out; optionally one extra
    op inserted after op `insert_at`."""
    tv = {"x": meta(["s0", 16])}
    nodes, prev = [], "x"
    ops = [f"op{k}" for k in range(n)]
    if insert_at is not None:
        ops.insert(insert_at + 1, "inserted")
    for name in ops:
        tv[name] = meta(["s0", 16])
        nodes.append(node(name, "torch.ops.aten.sin.default", [arg("self", T(prev))]))
        prev = name
    return program(graph(["x"], nodes, [prev], tv, single=True), [user_in("x")], [user_out(prev)],
                   ranges={"s0": (2, None)})


# ---------------------------------------------------------------- the text


def test_show_text_of_small_program():
    text = R.render(mlp(), weights())
    lines = text.splitlines()
    assert lines[0] == "# pt2serde program: schema 2.0, torch 2.13.0"
    assert "  parameter p_w: f32[8, 4] requires_grad <- fc.weight" in lines
    assert "  user_input x: f32[s0, 4]" in lines
    assert "  user_output i: i64[s0, 2]" in lines
    assert "  linear: f32[s0, 8] = aten.linear.default(x, p_w, p_b)  # fc" in lines
    assert "  relu: f32[s0, 8] = aten.relu.default(linear)" in lines
    assert "  topk -> (v: f32[s0, 2], i: i64[s0, 2]) = aten.topk.default(relu, 2, largest=True)" in lines
    assert "  sym_size_int: Sym(s0) = aten.sym_size.int(x, 0)" in lines
    assert "  t: f32[8, s0] stride=[1, 8] = aten.t.default(relu)" in lines
    assert "  return (v, i, t)" in lines
    assert "  s0: [2, 1024]" in lines
    assert "  fc.weight: f32[8, 4] requires_grad sha256:abababababab" in lines
    # Sections come in a fixed order.
    order = [lines.index(h) for h in ("inputs:", "outputs:", "graph:", "range_constraints:", "state_dict:")]
    assert order == sorted(order)


def test_no_debug_metadata_or_paths_in_text():
    text = R.render(mlp(), weights())
    assert "/home/someone" not in text and "model.py" not in text and "L__self__" not in text


def test_symbolic_strides_are_elided_only_when_row_major():
    row_major = meta([2, "s0", "s1"], ["s0*s1", "s1", 1])
    assert R.render_tensor_meta(row_major) == "f32[2, s0, s1]"
    # sympy may print the product in either order, with a coefficient, or as a power
    assert R.render_tensor_meta(meta(["s0", "s1", 4], ["4*s1", 4, 1])) == "f32[s0, s1, 4]"
    assert R.render_tensor_meta(meta(["s0", "s0", 2], ["2*s0", 2, 1])) == "f32[s0, s0, 2]"
    assert R.render_tensor_meta(meta([3, "s0", "s0"], ["s0**2", "s0", 1])) == "f32[3, s0, s0]"
    # sums: sympy distributes a coefficient (2*(s0 + 1) prints as 2*s0 + 2); calls are opaque atoms
    assert R.render_tensor_meta(meta([3, "s0 + 1", 2], ["2*s0 + 2", 2, 1])) == "f32[3, s0 + 1, 2]"
    assert R.render_tensor_meta(meta([3, "s0 - 1", "s1"], ["s0*s1 - s1", "s1", 1])) == "f32[3, s0 - 1, s1]"
    assert R.render_tensor_meta(meta([3, "(s0 + 1)**2"], ["s0**2 + 2*s0 + 1", 1])) == "f32[3, (s0 + 1)**2]"
    fd = "FloorDiv(s0, 2)"
    assert R.render_tensor_meta(meta([3, fd, 2], [f"2*{fd}", 2, 1])) == f"f32[3, {fd}, 2]"
    assert R.render_tensor_meta(meta(["s0 + 1", 4], [4, 1])) == "f32[s0 + 1, 4]"
    # anything else prints the strides as stored
    assert R.render_tensor_meta(meta(["s0", 4], [1, "s0"])) == "f32[s0, 4] stride=[1, s0]"
    assert R.render_tensor_meta(meta([4, "s0 + 1"], [1, 4])) == "f32[4, s0 + 1] stride=[1, 4]"
    assert R.render_tensor_meta(meta([4, "s0 + 1"], ["s0 + 2", 1])) == "f32[4, s0 + 1] stride=[s0 + 2, 1]"
    # row-major over an opaque function term: elided; transposed: printed
    assert R.render_tensor_meta(meta([4, "FloorDiv(s0, 2)"], ["FloorDiv(s0, 2)", 1])) == "f32[4, FloorDiv(s0, 2)]"
    assert R.render_tensor_meta(meta([4, "FloorDiv(s0, 2)"], [1, 4])) == "f32[4, FloorDiv(s0, 2)] stride=[1, 4]"
    # the check reads the expression trees, so a power of a power (or of a call holding one) expands
    nested = "(s0**2 + 1)**2"
    assert R.render_tensor_meta(meta([3, nested, 2], ["2*s0**4 + 4*s0**2 + 2", 2, 1])) == f"f32[3, {nested}, 2]"
    fd2 = "FloorDiv(s0**2, 2)**2"
    assert R.render_tensor_meta(meta([3, fd2], [fd2, 1])) == f"f32[3, {fd2}]"
    # a relation, a fraction or a float is never a size polynomial, even where the text looks like a call
    rel = "Max(2, s0) < FloorDiv(s1, 2)"
    assert R.render_tensor_meta(meta([3, rel], [f"1*({rel})", 1])) == f"f32[3, {rel}] stride=[1*({rel}), 1]"
    half = "1/2*s0"
    assert R.render_tensor_meta(meta([3, half], [half, 1])) == f"f32[3, {half}] stride=[{half}, 1]"
    assert R.render_tensor_meta(meta([3, "2.0*s0"], ["2.0*s0", 1])) == "f32[3, 2.0*s0] stride=[2.0*s0, 1]"
    assert R.render_tensor_meta(meta([4, 4], offset=3)) == "f32[4, 4] offset=3"
    assert R.render_tensor_meta(meta([4], device="cuda")) == "f32[4] device=cuda"
    assert R.render_tensor_meta(meta([], rg=True), full=True) == "f32[] requires_grad"


def test_every_argument_member_renders_on_one_line():
    t = s.TensorArgument(name="a")
    samples = {
        "as_none": (True, "None"), "as_tensor": (t, "a"), "as_tensors": ([t, t], "[a, a]"),
        "as_int": (-3, "-3"), "as_ints": ([1, 2], "[1, 2]"), "as_float": (0.5, "0.5"),
        "as_floats": ([1.0, "nan", "-inf"], "[1.0, nan, -inf]"),
        "as_string": ('say "hi"\n', '"say \\"hi\\"\\n"'), "as_strings": (["a"], '["a"]'),
        "as_sym_int": (s.SymIntArgument(as_name="n"), "n"),
        "as_sym_ints": ([s.SymIntArgument(as_name="n"), s.SymIntArgument(as_int=4)], "[n, 4]"),
        "as_scalar_type": (s.ScalarType.BFLOAT16, "torch.bfloat16"),
        "as_memory_format": (s.MemoryFormat.ChannelsLast, "torch.channels_last"),
        "as_layout": (s.Layout.Strided, "torch.strided"),
        "as_device": (s.Device(type="cuda", index=1), 'device("cuda:1")'),
        "as_bool": (False, "False"), "as_bools": ([True, False], "[True, False]"),
        "as_sym_bool": (s.SymBoolArgument(as_bool=True), "True"),
        "as_sym_bools": ([s.SymBoolArgument(as_name="b")], "[b]"),
        "as_optional_tensors": ([s.OptionalTensorArgument(as_tensor=t), s.OptionalTensorArgument(as_none=True)],
                                "[a, None]"),
        "as_graph": (s.GraphArgument(name="true_graph_0", graph=graph([], [], [], {})), "true_graph_0"),
        "as_custom_obj": (s.CustomObjArgument(name="obj", class_fqn="m.C"), "obj"),
        "as_operator": ("aten::add", "aten::add"),
        "as_sym_float": (s.SymFloatArgument(as_float="inf"), "inf"),
        "as_sym_floats": ([s.SymFloatArgument(as_name="f"), s.SymFloatArgument(as_float=-0.0)], "[f, -0.0]"),
        "as_optional_tensor": (s.OptionalTensorArgument(as_none=True), "None"),
        "as_complex": (s.ComplexValue(real=1.0, imag="nan"), "complex(1.0, nan)"),
        "as_nested_tensors": ([[t], []], "[[a], []]"),
        "as_int_lists": ([[1], [2, 3]], "[[1], [2, 3]]"),
        "as_string_to_argument": ({"k": s.Argument(as_tensor=t), "b": s.Argument(as_int=1)}, '{"b": 1, "k": a}'),
        "as_float_lists": ([[1.5]], "[[1.5]]"),
        "as_tuple": ([s.Argument(as_int=1), s.Argument(as_none=True), s.Argument(as_tensor=t)], "(1, None, a)"),
    }
    assert set(samples) == set(s.Argument.__struct_fields__)
    view = R.GraphView(None, rename=lambda n: n)
    for member, (value, expected) in samples.items():
        assert view.arg(s.Argument(**{member: value})) == expected, member


def test_every_signature_kind_renders():
    tv = {n: meta([2]) for n in ("p", "b", "nb", "c", "x", "o", "m", "l", "g", "gi", "um", "pm")}
    ins = [
        param("p", "w"),
        s.InputSpec(buffer=s.InputToBufferSpec(arg=s.TensorArgument(name="b"), buffer_name="bn.mean", persistent=True)),
        s.InputSpec(buffer=s.InputToBufferSpec(arg=s.TensorArgument(name="nb"), buffer_name="tmp", persistent=False)),
        s.InputSpec(tensor_constant=s.InputToTensorConstantSpec(arg=s.TensorArgument(name="c"),
                                                                 tensor_constant_name="lifted_tensor_0")),
        s.InputSpec(custom_obj=s.InputToCustomObjSpec(arg=s.CustomObjArgument(name="obj", class_fqn="m.C"),
                                                       custom_obj_name="attr")),
        s.InputSpec(constant_input=s.InputToConstantInputSpec(name="flag", value=s.ConstantValue(as_none=True))),
        s.InputSpec(token=s.InputTokenSpec(arg=s.TokenArgument(name="tok"))),
        user_in("x"),
        s.InputSpec(user_input=s.UserInputSpec(arg=s.Argument(as_int=3))),
    ]
    outs = [
        user_out("o"),
        s.OutputSpec(loss_output=s.LossOutputSpec(arg=s.TensorArgument(name="l"))),
        s.OutputSpec(buffer_mutation=s.BufferMutationSpec(arg=s.TensorArgument(name="m"), buffer_name="bn.mean")),
        s.OutputSpec(gradient_to_parameter=s.GradientToParameterSpec(arg=s.TensorArgument(name="g"), parameter_name="w")),
        s.OutputSpec(gradient_to_user_input=s.GradientToUserInputSpec(arg=s.TensorArgument(name="gi"),
                                                                      user_input_name="x")),
        s.OutputSpec(user_input_mutation=s.UserInputMutationSpec(arg=s.TensorArgument(name="um"), user_input_name="x")),
        s.OutputSpec(token=s.OutputTokenSpec(arg=s.TokenArgument(name="tok2"))),
        s.OutputSpec(parameter_mutation=s.ParameterMutationSpec(arg=s.TensorArgument(name="pm"), parameter_name="w")),
    ]
    assert {i.kind for i in ins} == set(s.InputSpec.__struct_fields__)
    assert {o.kind for o in outs} == set(s.OutputSpec.__struct_fields__)
    text = R.render(program(graph([], [], [], tv), ins, outs))
    for line in [
        "buffer b: f32[2] <- bn.mean", "buffer nb: f32[2] <- tmp (non-persistent)",
        "tensor_constant c: f32[2] <- lifted_tensor_0", "custom_obj obj: ? <- attr",
        "constant_input flag = None", "token tok", "user_input 3", "loss_output l: f32[2]",
        "buffer_mutation m: f32[2] -> bn.mean", "gradient_to_parameter g: f32[2] -> w",
        "gradient_to_user_input gi: f32[2] -> x", "user_input_mutation um: f32[2] -> x",
        "token tok2", "parameter_mutation pm: f32[2] -> w",
    ]:
        assert f"  {line}" in text.splitlines(), line


def test_subgraphs_are_indented_under_their_node():
    branch_tv = {"x_1": meta([4]), "sin": meta([4])}
    true_g = graph(["x_1"], [node("sin", "torch.ops.aten.sin.default", [arg("self", T("x_1"))])],
                   ["sin"], branch_tv)
    false_g = graph(["x_1"], [node("cos", "torch.ops.aten.cos.default", [arg("self", T("x_1"))])],
                    ["cos"], {"x_1": meta([4]), "cos": meta([4])})
    cond = node("cond", "torch.ops.higher_order.cond", [
        arg("pred", T("p")),
        arg("true_fn", s.Argument(as_graph=s.GraphArgument(name="true_graph_0", graph=true_g))),
        arg("false_fn", s.Argument(as_graph=s.GraphArgument(name="false_graph_0", graph=false_g))),
        arg("operands", s.Argument(as_tensors=[s.TensorArgument(name="x")]))], outputs=[T("getitem")])
    tv = {"p": meta([], dtype=s.ScalarType.BOOL), "x": meta([4]), "getitem": meta([4])}
    g = graph(["p", "x"], [cond], ["getitem"], tv)
    lines = R.render(program(g, [user_in("p"), user_in("x")], [user_out("getitem")])).splitlines()
    i = lines.index("  cond -> getitem: f32[4] = higher_order.cond(p, true_graph_0, false_graph_0, [x])")
    assert lines[i + 1:i + 8] == [
        "    true_graph_0(x_1: f32[4]):",
        "      sin: f32[4] = aten.sin.default(x_1)",
        "      return (sin,)",
        "    false_graph_0(x_1: f32[4]):",
        "      cos: f32[4] = aten.cos.default(x_1)",
        "      return (cos,)",
        "  return (getitem,)",
    ]


def test_ranges_sort_naturally_and_print_unbounded_ends():
    p = msgspec.structs.replace(mlp(), range_constraints=ranges_list({
        "s10": (0, None), "s2": (None, 8), "s1": (None, None)}))
    lines = R.render(p).splitlines()
    i = lines.index("range_constraints:")
    assert lines[i + 1:i + 4] == ["  s1: [-int_oo, int_oo]", "  s2: [-int_oo, 8]", "  s10: [0, int_oo]"]


def test_text_ignores_map_order():
    p = mlp()
    g = p.graph_module.graph
    rng = random.Random(0)
    items = list(g.tensor_values.items())
    rng.shuffle(items)
    g2 = msgspec.structs.replace(g, tensor_values=dict(items))
    p2 = msgspec.structs.replace(p, graph_module=msgspec.structs.replace(p.graph_module, graph=g2))
    w = weights()
    w2 = msgspec.structs.replace(w, state_dict=dict(reversed(list(w.state_dict.items()))))
    assert R.render(p, w) == R.render(p2, w2)
    # and survives a JSON round trip unchanged
    from serde.core import wire
    assert R.render(wire.decode(wire.encode(p), s.ExportedProgram), w) == R.render(p, w)


def test_hostile_names_cannot_forge_lines():
    p = mlp()
    g = p.graph_module.graph
    evil = "relu\n  injected: f32[1] = aten.evil.default()"
    nodes = [msgspec.structs.replace(n, name=evil) if n.name == "relu" else n for n in g.nodes]
    p2 = msgspec.structs.replace(p, graph_module=msgspec.structs.replace(
        p.graph_module, graph=msgspec.structs.replace(g, nodes=nodes)))
    a, b = R.render(p), R.render(p2)
    assert len(a.splitlines()) == len(b.splitlines())
    assert "\n  injected" not in b


def test_bad_storage_index_is_a_clear_error():
    w = weights()
    bad = msgspec.structs.replace(w.state_dict["fc.bias"], storage=7)
    w2 = msgspec.structs.replace(w, state_dict={**w.state_dict, "fc.bias": bad})
    with pytest.raises(MalformedArtifactError, match=r"weights\.state_dict\['fc\.bias'\]: storage index 7 .* 2 storages"):
        R.render(mlp(), w2)


def test_example_inputs_are_listed():
    w = msgspec.structs.replace(weights(), example_inputs=s.ExampleInputs(
        spec=s.TreeSpec(type="tuple", children=[s.TreeSpec(type="tuple", children=[s.TreeSpec(type="*")] * 2),
                                                s.TreeSpec(type="dict", context="[]")]),
        leaves=[s.ExampleLeaf(as_tensor=s.StoredTensor(dtype=s.ScalarType.FLOAT, sizes=[3, 4], strides=[1, 3],
                                                       storage_offset=0, storage=0, requires_grad=False)),
                s.ExampleLeaf(as_int=5)]))
    lines = R.render(mlp(), w).splitlines()
    i = lines.index("example_inputs: ((*, *), {})")
    assert lines[i + 1:] == ["  [0] f32[3, 4] stride=[1, 3] sha256:abababababab", "  [1] int 5"]


# ---------------------------------------------------------------- the model zoo

# Control flow, unbacked symbols, every signature kind, multi-output ops, size arithmetic.
_FAST = {"multi_output", "dynamic_arith", "signature_kinds", "cond", "while_loop", "unbacked_item"}


def _all_nodes(g: s.Graph):
    for n in g.nodes:
        yield n
        for sub in R.subgraphs(n):
            yield from _all_nodes(sub.graph)


@pytest.mark.parametrize("name", tiered([c.name for c in CASES], _FAST))
def test_zoo_program_renders_one_line_per_node(name):
    buf = io.BytesIO()
    serde.save(export_case(next(c for c in CASES if c.name == name)), buf)
    art = read_artifact(buf.getvalue())
    text = R.render(art.program, art.weights)
    lines = text.splitlines()
    assert all(ln.isprintable() and ln == ln.rstrip() for ln in lines)
    nodes = list(_all_nodes(art.program.graph_module.graph))
    start = lines.index("graph:") + 1
    end = next(i for i in range(start, len(lines)) if not lines[i].startswith(" "))
    body = [ln for ln in lines[start:end] if not ln.strip().startswith("return") and not ln.endswith("):")]
    assert len(body) == len(nodes)
    for node, line in zip(nodes, body, strict=True):
        assert f" = {node.target.removeprefix('torch.ops.')}(" in line, (node.name, line)
    for weight in art.weights.state_dict:
        assert any(ln.startswith(f"  {weight}: ") for ln in lines), weight
    assert diff(art.program, art.program, a_weights=art.weights, b_weights=art.weights).identical


# ---------------------------------------------------------------- locality


def test_count_changed_lines():
    assert R.count_changed_lines("a\nb\nc\n", "a\nb\nc\n") == 0
    assert R.count_changed_lines("a\nb\nc\n", "a\nX\nc\n") == 2
    assert R.count_changed_lines("a\nb\nc\n", "a\nb\nnew\nc\n") == 1
    assert R.count_changed_lines("", "a\nb\n") == 2


def test_one_node_inserted_in_a_1000_node_chain_is_a_small_hunk():
    a, b = R.render(chain(1000)), R.render(chain(1000, insert_at=499))
    # the new line, plus its consumer's line (- and +)
    assert R.count_changed_lines(a, b) == 3


def test_a_one_op_change_is_one_line():
    a = chain(50)
    nodes = list(a.graph_module.graph.nodes)
    nodes[25] = msgspec.structs.replace(nodes[25], target="torch.ops.aten.cos.default")
    b = msgspec.structs.replace(a, graph_module=msgspec.structs.replace(
        a.graph_module, graph=msgspec.structs.replace(a.graph_module.graph, nodes=nodes)))
    assert R.count_changed_lines(R.render(a), R.render(b)) == 2


# ---------------------------------------------------------------- no torch


def test_show_and_diff_do_not_import_torch():
    code = ("import sys, canonical.render, canonical.diff, serde.cli.show, serde.cli.diff; "
            "assert 'torch' not in sys.modules, 'torch was imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def _spec(type_: str, context: object = None, n: int = 0) -> s.TreeSpec:
    text = None if context is None else context if isinstance(context, str) else msgspec.json.encode(context).decode()
    return s.TreeSpec(type=type_, context=text, children=[s.TreeSpec(type="*")] * n)


@pytest.mark.parametrize(("spec", "text"), [
    (_spec("structseq", {"name": "torch.return_types.max", "fields": ["values", "indices"]}, 2),
     "torch.return_types.max(values=*, indices=*)"),
    (_spec("namedtuple", {"name": "m.Pair", "fields": ["a", "b"]}, 2), "m.Pair(a=*, b=*)"),
    # A context that does not describe the children prints raw: the reader refuses it, show does not.
    (_spec("structseq", {"name": "torch.return_types.max", "fields": ["values"]}, 2),
     'structseq<{"name":"torch.return_types.max","fields":["values"]}>(*, *)'),
    (_spec("namedtuple", "[1, 2]", 2), "namedtuple<[1, 2]>(*, *)"),
    # Field and class names that could break the line are quoted, as every other name in the text.
    (_spec("namedtuple", {"name": "m.P\nq", "fields": ["a\rb"]}, 1), '"m.P\\nq"("a\\rb"=*)'),
])
def test_named_tuples_and_named_results_print_their_field_names(spec, text):
    assert R.render_treespec(spec) == text
