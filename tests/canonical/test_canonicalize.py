"""canonicalize(): order, names, symbols, debug metadata, signature, errors (on hand-built Structs)."""

from __future__ import annotations

import json
import random

import msgspec
import pytest

from canonical.canonicalize import attach_debug, canonicalize
from serde.bridge.effects import op_facts
from serde.core import wire
from serde.errors import MalformedArtifactError, UnknownOperatorError
from tests.canonical._builders import (
    A,
    InputSpecDesc,
    NodeSpec,
    Prog,
    S,
    chain,
    expr_of,
    ranges_of,
    render,
    topo_orders,
)

ADD = "torch.ops.aten.add.Tensor"
MUL = "torch.ops.aten.mul.Tensor"
RELU = "torch.ops.aten.relu.default"
SIG = "torch.ops.aten.sigmoid.default"
FULL = "torch.ops.aten.full.default"
COND = "torch.ops.higher_order.cond"


def canon(p: S.ExportedProgram) -> bytes:
    return wire.encode(canonicalize(p, facts=op_facts)[0])


def nodes_of(p: S.ExportedProgram) -> list[S.Node]:
    return p.graph_module.graph.nodes


def user(name: str, shape=None) -> InputSpecDesc:
    return InputSpecDesc("user", name, shape or [4])


def rich() -> Prog:
    """Two inputs, a parameter, a dynamic dim, a cond with two branches, a list output, a SymInt node."""
    branch_t = Prog([user("a")], [NodeSpec(RELU, [("in", 0)]), NodeSpec(MUL, [("n", 0), ("f", 2.0)])], [("n", 1)])
    branch_f = Prog([user("a")], [NodeSpec(SIG, [("in", 0)])], [("n", 0)])
    nodes = [
        NodeSpec("torch.ops.aten.linear.default", [("in", 0), ("in", 2)], shape=["{s3}", 4],
                 module=[("L__self__", ""), ("L__self__lin", "lin")]),
        NodeSpec("torch.ops.aten.sym_size.int", [("in", 0), ("i", 0)], out="symint", sym_expr="{s3}"),
        NodeSpec(ADD, [("n", 0), ("in", 1)], shape=["{s3}", 4]),
        NodeSpec("torch.ops.aten.split.Tensor", [("n", 2), ("i", 2)], out="list:2", shape=[2, 4]),
        NodeSpec(COND, [("b", True), ("g", branch_t), ("g", branch_f), ("ts", [("n", 3, 0)])]),
        NodeSpec(MUL, [("n", 3, 1), ("sym", ("n", 1))], shape=[2, 4]),
    ]
    return Prog(
        inputs=[user("x", ["{s3}", 4]), user("y", ["{s9}", 4]), InputSpecDesc("param", "lin.weight", [4, 4])],
        nodes=nodes, outputs=[("n", 4), ("n", 5), ("n", 1)], ranges={"{s3}": (2, 64), "{s9}": (1, None)},
    )


# ---------------------------------------------------------------- idempotence and invariance


@pytest.mark.parametrize("make", [lambda: chain(40, 3), rich])
def test_idempotent(make):
    once, _ = canonicalize(render(make()), facts=op_facts)
    twice, _ = canonicalize(once, facts=op_facts)
    assert wire.encode(twice) == wire.encode(once)
    assert twice == once


def test_input_is_not_mutated():
    p = render(rich())
    before = wire.encode(p)
    canonicalize(p, keep_debug=True, facts=op_facts)
    assert wire.encode(p) == before


def test_reordering_and_renaming_give_the_same_bytes():
    prog = rich()
    ref = canon(render(prog))
    for seed in range(8):
        rng = random.Random(seed)
        names: dict[str, str] = {}

        def namer(s, rng=rng, names=names):
            if s in ("x", "y"):
                return s
            return names.setdefault(s, f"v{rng.randrange(10**6)}_{len(names)}")
        syms = {"s3": f"s{rng.randrange(100, 200)}", "s9": f"s{rng.randrange(200, 300)}"}
        assert canon(render(prog, rng=rng, namer=namer, syms=syms)) == ref, seed


def test_names_do_not_depend_on_stored_names():
    c, _ = canonicalize(render(rich()), facts=op_facts)
    names = [n.name for n in nodes_of(c)]
    assert not any(n.startswith("n") and n[1:].isdigit() for n in names), names
    assert "lin_linear" not in names and "linear" in names  # the only linear: bare op name
    assert len(set(names)) == len(names)


# ---------------------------------------------------------------- tie-breaking


def test_two_identical_full_nodes_in_either_order():
    def prog(swap: bool) -> Prog:
        full = NodeSpec(FULL, [("ints", [4]), ("f", 1.0)])
        nodes = [full, NodeSpec(full.target, list(full.args)),
                 NodeSpec(ADD, [("in", 0), ("n", 0)]), NodeSpec(MUL, [("in", 0), ("n", 1)])]
        if swap:  # the two fulls trade places (and consumers follow them)
            nodes = [nodes[1], nodes[0], NodeSpec(ADD, [("in", 0), ("n", 1)]), NodeSpec(MUL, [("in", 0), ("n", 0)])]
        return Prog([user("x")], nodes, [("n", 2), ("n", 3)])
    a, b = canon(render(prog(False))), canon(render(prog(True)))
    assert a == b
    c, _ = canonicalize(render(prog(False)), facts=op_facts)
    fulls = [n.name for n in nodes_of(c) if n.target == FULL]
    assert len(set(fulls)) == 2


def test_identical_subnetworks_on_different_inputs_in_either_order():
    def sub(src: int, base: int) -> list[NodeSpec]:
        return [NodeSpec(RELU, [("in", src)]), NodeSpec(MUL, [("n", base), ("f", 3.0)]),
                NodeSpec(SIG, [("n", base + 1)])]
    p1 = Prog([user("x"), user("y")], sub(0, 0) + sub(1, 3), [("n", 2), ("n", 5)])
    p2 = Prog([user("x"), user("y")], sub(1, 0) + sub(0, 3), [("n", 5), ("n", 2)])
    assert canon(render(p1)) == canon(render(p2))
    for seed in range(5):
        assert canon(render(p1, rng=random.Random(seed))) == canon(render(p1))


def test_side_nodes_are_placed_early_and_tie_broken_by_structure():
    assert_ = "torch.ops.aten._assert_scalar.default"
    nodes = [
        NodeSpec("torch.ops.aten.sym_size.int", [("in", 0), ("i", 0)], out="symint", sym_expr="{s0}"),
        NodeSpec("_operator.ge", [("sym", ("n", 0)), ("i", 2)], out="symint", sym_expr="{s0}"),
        NodeSpec(assert_, [("sym", ("n", 1)), ("str", "x too small")], out="none"),
        NodeSpec(assert_, [("sym", ("n", 1)), ("str", "other message")], out="none"),
        NodeSpec(RELU, [("in", 0)], shape=["{s0}"]),
        NodeSpec(SIG, [("n", 4)], shape=["{s0}"]),
    ]
    p = Prog([user("x", ["{s0}"])], nodes, [("n", 5)])
    ref = canon(render(p))
    for seed in range(6):
        assert canon(render(p, rng=random.Random(seed))) == ref
    c, _ = canonicalize(render(p), facts=op_facts)
    targets = [n.target for n in nodes_of(c)]
    assert targets.index(assert_) < targets.index(RELU)


_PRE = "torch._functorch.predispatch."


def _vmap_region_program() -> Prog:
    """relu outside; a vmap level (fences) around add_batch_dim -> sin -> remove_batch_dim, plus a
    cos stored inside the level that nothing inside needs: the demand order alone would move it
    past the closing fence, next to its user."""
    nodes = [
        NodeSpec(RELU, [("in", 0)], shape=[2, 4]),                                   # 0
        NodeSpec(_PRE + "lazy_load_decompositions", [], out="none"),                 # 1
        NodeSpec(_PRE + "_vmap_increment_nesting", [("i", 2), ("str", "error")], out="none"),  # 2
        NodeSpec(_PRE + "_add_batch_dim", [("n", 0), ("i", 0), ("i", 1)]),           # 3
        NodeSpec("torch.ops.aten.cos.default", [("in", 0)], shape=[2, 4]),          # 4
        NodeSpec("torch.ops.aten.sin.default", [("n", 3)]),                          # 5
        NodeSpec(_PRE + "_remove_batch_dim", [("n", 5), ("i", 1), ("i", 2), ("i", 0)], shape=[2, 4]),  # 6
        NodeSpec(_PRE + "_vmap_decrement_nesting", [], out="none"),                  # 7
        NodeSpec(ADD, [("n", 6), ("n", 4)], shape=[2, 4]),                           # 8
    ]
    return Prog([user("x", [2, 4])], nodes, [("n", 8)])


def test_nodes_keep_their_side_of_stateful_calls():
    c, _ = canonicalize(render(_vmap_region_program()), facts=op_facts)
    targets = [n.target.rpartition(".")[0].rpartition(".")[2] if n.target.startswith("torch.ops")
               else n.target.rpartition(".")[2] for n in nodes_of(c)]
    inc, dec = targets.index("_vmap_increment_nesting"), targets.index("_vmap_decrement_nesting")
    inside = set(targets[inc + 1:dec])
    assert inside == {"_add_batch_dim", "cos", "sin", "_remove_batch_dim"}
    assert targets.index("relu") < targets.index("lazy_load_decompositions") < inc
    assert targets[-1] == "add"
    names = {n: f"v{n[::-1]}" for n in ("n0", "n4", "n5", "n8")}
    assert canon(render(_vmap_region_program(), namer=lambda n: names.get(n, n))) == canon(c)


# ---------------------------------------------------------------- names


def test_names_are_local_op_names_with_module_paths():
    mod_a = [("L__self__", ""), ("L__self__a", "a")]
    mod_b = [("L__self__", ""), ("L__self__b", "b")]
    nodes = [NodeSpec(RELU, [("in", 0)], module=mod_a), NodeSpec(RELU, [("n", 0)], module=mod_b),
             NodeSpec(SIG, [("n", 1)], module=mod_b)]
    c, _ = canonicalize(render(Prog([user("x")], nodes, [("n", 2)])), facts=op_facts)
    assert [n.name for n in nodes_of(c)] == ["a_relu", "b_relu", "sigmoid"]


def test_builtin_and_keyword_names_are_avoided():
    nodes = [NodeSpec("torch.ops.aten.sum.default", [("in", 0)]), NodeSpec("torch.ops.aten.abs.default", [("n", 0)])]
    c, _ = canonicalize(render(Prog([user("x")], nodes, [("n", 1)])), facts=op_facts)
    assert [n.name for n in nodes_of(c)] == ["sum_", "abs_"]


def test_multi_output_values_are_named_after_their_node():
    nodes = [NodeSpec("torch.ops.aten.split.Tensor", [("in", 0), ("i", 2)], out="list:2", shape=[2]),
             NodeSpec("torch.ops.aten.var_mean.correction", [("in", 0)], out="multi:2", shape=[]),
             NodeSpec(ADD, [("n", 0, 1), ("n", 1, 0)])]
    c, _ = canonicalize(render(Prog([user("x")], nodes, [("n", 2)])), facts=op_facts)
    by_target = {n.target: n for n in nodes_of(c)}
    split = by_target["torch.ops.aten.split.Tensor"]
    assert split.name == "split"
    assert [t.name for t in split.outputs[0].as_tensors] == ["split_0", "split_1"]
    vm = by_target["torch.ops.aten.var_mean.correction"]
    assert [o.as_tensor.name for o in vm.outputs] == ["var_mean_0", "var_mean_1"]
    add = by_target[ADD]
    assert [na.arg.as_tensor.name for na in add.inputs] == ["split_1", "var_mean_0"]
    tv = c.graph_module.graph.tensor_values
    assert {"split_0", "split_1", "var_mean_0", "var_mean_1", "add", "x"} == set(tv)


def test_exact_local_ties_get_ordinals():
    nodes = [NodeSpec(FULL, [("ints", [4]), ("f", 0.0)]) for _ in range(3)]
    nodes.append(NodeSpec("torch.ops.aten.stack.default", [("ts", [("n", 0), ("n", 1), ("n", 2)])]))
    c, _ = canonicalize(render(Prog([user("x")], nodes, [("n", 3)])), facts=op_facts)
    names = [n.name for n in nodes_of(c)][:3]
    stem = names[0]
    assert stem.startswith("full_") and names[1:] == [f"{stem}_1", f"{stem}_2"]


def test_signature_names_derive_from_fqns_and_user_names_stay():
    p = Prog([InputSpecDesc("param", "enc.lin.weight"), InputSpecDesc("buffer", "enc.bn.running_mean"),
              InputSpecDesc("const", "lifted_tensor_0"), user("input_ids")],
             [NodeSpec(ADD, [("in", 0), ("in", 1)]), NodeSpec(MUL, [("n", 0), ("in", 2)]),
              NodeSpec(ADD, [("n", 1), ("in", 3)])], [("n", 2)])
    odd = {"p_enc_lin_weight": "w0", "b_enc_bn_running_mean": "weird_name", "c_lifted_tensor_0": "zz"}
    c, _ = canonicalize(render(p, namer=lambda s: odd.get(s, s)), facts=op_facts)
    specs = c.graph_module.signature.input_specs
    assert specs[0].parameter.arg.name == "p_enc_lin_weight"
    assert specs[1].buffer.arg.name == "b_enc_bn_running_mean"
    assert specs[2].tensor_constant.arg.name == "c_lifted_tensor_0"
    assert specs[3].user_input.arg.as_tensor.name == "input_ids"
    assert [a.as_tensor.name for a in c.graph_module.graph.inputs] == [
        "p_enc_lin_weight", "b_enc_bn_running_mean", "c_lifted_tensor_0", "input_ids"]
    out = c.graph_module.signature.output_specs[0].user_output.arg.as_tensor.name
    assert out == c.graph_module.graph.outputs[0].as_tensor.name == nodes_of(c)[-1].name


def test_module_call_graph_signatures_are_renamed():
    p = render(Prog([user("x")], [NodeSpec(RELU, [("in", 0)], module=[("L__self__", ""), ("L__self__m", "m")]),
                                  NodeSpec(SIG, [("n", 0)])], [("n", 1)]), namer=lambda s: "q" + s)
    gm = p.graph_module
    entry = S.ModuleCallEntry(fqn="m", signature=S.ModuleCallSignature(
        inputs=[A(as_tensor=S.TensorArgument(name="x"))], outputs=[A(as_tensor=S.TensorArgument(name="qn0"))],
        in_spec=S.TreeSpec(type="tuple"), out_spec=S.TreeSpec(type="tuple"), forward_arg_names=["inp"]))
    p = msgspec.structs.replace(p, graph_module=msgspec.structs.replace(gm, module_call_graph=[entry]))
    c, _ = canonicalize(p, facts=op_facts)
    sig = c.graph_module.module_call_graph[0].signature
    assert sig.outputs[0].as_tensor.name == "relu" and sig.inputs[0].as_tensor.name == "x"
    assert sig.forward_arg_names == ["inp"]


def test_tokens_and_custom_objects_are_renamed_everywhere():
    def tensor(n):
        return A(as_tensor=S.TensorArgument(name=n))
    meta = render(chain(1, 0)).graph_module.graph.tensor_values["x"]
    fqn = "__torch__.torch.classes.mylib.Foo"
    obj = S.CustomObjArgument(name="weird_obj", class_fqn=fqn)
    pos = S.ArgumentKind.POSITIONAL
    node = S.Node(
        target="torch.ops.higher_order.with_effects",
        inputs=[S.NamedArgument(name="", arg=a, kind=pos) for a in (
            tensor("tok_in"), A(as_operator="torch.ops.mylib.foo.default"), A(as_custom_obj=obj), tensor("x"))],
        outputs=[tensor("tok_out"), tensor("res")], metadata=S.NodeMetadata(), name="with_effects_7")
    g = S.Graph(inputs=[tensor("tok_in"), A(as_custom_obj=obj), tensor("x")], outputs=[tensor("tok_out"), tensor("res")],
                nodes=[node], tensor_values={"tok_in": meta, "tok_out": meta, "res": meta, "x": meta},
                sym_int_values={}, sym_bool_values={}, is_single_tensor_return=False,
                custom_obj_values={"weird_obj": obj}, sym_float_values={})
    sig = S.GraphSignature(
        input_specs=[S.InputSpec(token=S.InputTokenSpec(arg=S.TokenArgument(name="tok_in"))),
                     S.InputSpec(custom_obj=S.InputToCustomObjSpec(arg=obj, custom_obj_name="attr")),
                     S.InputSpec(user_input=S.UserInputSpec(arg=tensor("x")))],
        output_specs=[S.OutputSpec(token=S.OutputTokenSpec(arg=S.TokenArgument(name="tok_out"))),
                      S.OutputSpec(user_output=S.UserOutputSpec(arg=tensor("res")))])
    base = render(chain(1, 0))
    p = msgspec.structs.replace(base, graph_module=S.GraphModule(graph=g, signature=sig, module_call_graph=[]))
    c, _ = canonicalize(p, facts=op_facts)
    gc = c.graph_module.graph
    assert [a.value.name for a in gc.inputs] == ["token", "obj_attr", "x"]
    n = gc.nodes[0]
    assert n.name == "with_effects"
    assert [o.as_tensor.name for o in n.outputs] == ["with_effects_0", "with_effects_1"]
    assert n.inputs[2].arg.as_custom_obj == S.CustomObjArgument(name="obj_attr", class_fqn=fqn)
    assert gc.custom_obj_values == {"obj_attr": S.CustomObjArgument(name="obj_attr", class_fqn=fqn)}
    specs = c.graph_module.signature
    assert specs.input_specs[0].token.arg.name == "token"
    assert specs.input_specs[1].custom_obj.arg.name == "obj_attr"
    assert specs.output_specs[0].token.arg.name == "with_effects_0"
    assert set(gc.tensor_values) == {"token", "with_effects_0", "with_effects_1", "x"}
    assert canonicalize(c, facts=op_facts)[0] == c


# ---------------------------------------------------------------- subgraphs


def test_subgraphs_are_renamed_recursively_and_consistently():
    c, _ = canonicalize(render(rich(), namer=lambda s: "zz_" + s if s not in ("x", "y") else s), facts=op_facts)
    cond = [n for n in nodes_of(c) if n.target == COND][0]
    graphs = [na.arg.as_graph for na in cond.inputs if na.arg.as_graph is not None]
    assert [ga.name for ga in graphs] == ["true_graph_0", "false_graph_0"]  # torch's attribute names
    true_g = graphs[0].graph
    assert [a.as_tensor.name for a in true_g.inputs] == ["arg0"]
    assert [n.name for n in true_g.nodes] == ["relu", "mul"]
    assert true_g.nodes[0].inputs[0].arg.as_tensor.name == "arg0"
    assert true_g.outputs[0].as_tensor.name == "mul"
    assert set(true_g.tensor_values) == {"arg0", "relu", "mul"}


def test_shared_subgraph_keeps_one_name():
    body = Prog([user("a")], [NodeSpec(RELU, [("in", 0)])], [("n", 0)])
    p = render(Prog([user("x")], [NodeSpec(COND, [("b", True), ("g", body), ("g", body), ("ts", [("in", 0)])])],
                    [("n", 0)]))
    node = p.graph_module.graph.nodes[0]
    ga = node.inputs[1].arg.as_graph
    shared = [node.inputs[0], node.inputs[1], S.NamedArgument(name="", arg=A(as_graph=ga)), node.inputs[3]]
    g = msgspec.structs.replace(p.graph_module.graph, nodes=[msgspec.structs.replace(node, inputs=shared)])
    p = msgspec.structs.replace(p, graph_module=msgspec.structs.replace(p.graph_module, graph=g))
    c, _ = canonicalize(p, facts=op_facts)
    names = [na.arg.as_graph.name for na in nodes_of(c)[0].inputs if na.arg.as_graph is not None]
    assert names == ["true_graph_0", "true_graph_0"]


def test_subgraph_names_follow_torchs_patterns_and_count_per_family():
    from canonical.names import Namespace, SubgraphNamer

    hop = "torch.ops.higher_order."
    namer = SubgraphNamer(Namespace({"true_graph_1"}))
    assert namer.claim(hop + "cond", "cond", [(0, ""), (1, "")]) == ["true_graph_0", "false_graph_0"]
    # a taken number is skipped for both branches, which keep one number
    assert namer.claim(hop + "cond", "cond_1", [(0, ""), (1, "")]) == ["true_graph_2", "false_graph_2"]
    assert namer.claim(hop + "while_loop", "while_loop", [(0, ""), (1, "")]) == [
        "while_loop_cond_graph_0", "while_loop_body_graph_0"]
    # set_grad and autocast regions share torch's submod_<k>, counted from 1
    assert namer.claim(hop + "wrap_with_autocast", "wrap_with_autocast", [(0, "")]) == ["submod_1"]
    assert namer.claim(hop + "wrap_with_set_grad_enabled", "w", [(0, "")]) == ["submod_2"]
    assert namer.claim(hop + "flex_attention", "flex_attention", [(0, ""), (1, "")]) == [
        "sdpa_score0", "sdpa_mask0"]
    # a higher-order op without a known pattern, and subgraphs past an op's patterns
    assert namer.claim(hop + "new_hop", "new_hop", [(0, ""), (1, "body")]) == ["new_hop_graph0", "new_hop_body"]
    assert namer.claim(hop + "map_impl", "map_impl", [(0, ""), (1, "")]) == ["body_graph_0", "map_impl_graph1"]


# ---------------------------------------------------------------- symbols


def test_symbols_renamed_by_first_appearance_in_expressions_and_ranges():
    nodes = [NodeSpec("torch.ops.aten.cat.default", [("ts", [("in", 1), ("in", 0)])], shape=["{s1} + {s0}", 4]),
             NodeSpec("torch.ops.aten.nonzero.default", [("n", 0)], shape=["{u5}", 2]),
             NodeSpec("torch.ops.aten.sym_size.int", [("n", 1), ("i", 0)], out="symint", sym_expr="{u5}"),
             NodeSpec("torch.ops.aten.view.default", [("n", 0), ("sym", ("n", 2))], shape=["2*{s1}", "FloorDiv({s0}, 2)"])]
    p = Prog([user("x", ["{s0}", 4]), user("y", ["{s1}", 4])], nodes, [("n", 3), ("n", 2)],
             ranges={"{s0}": (2, 10), "{s1}": (3, 20), "{u5}": (0, None), "{s7}": (1, 5)})
    c, _ = canonicalize(render(p, syms={"s0": "s77", "s1": "s17", "u5": "u42", "s7": "s5"}), facts=op_facts)
    tv = c.graph_module.graph.tensor_values
    assert expr_of(tv["x"].sizes[0]) == "s0"
    assert expr_of(tv["y"].sizes[0]) == "s1"
    cat = [n.name for n in nodes_of(c) if n.target.endswith("cat.default")][0]
    assert expr_of(tv[cat].sizes[0]) == "s0 + s1"
    assert ranges_of(c) == {
        "s0": (2, 10), "s1": (3, 20), "u0": (0, None), "s2": (1, 5)}
    view = [n.name for n in nodes_of(c) if n.target.endswith("view.default")][0]
    assert [expr_of(s) for s in tv[view].sizes] == ["2*s1", "FloorDiv(s0, 2)"]
    assert expr_of(c.graph_module.graph.sym_int_values["sym_size"]) == "u0"


def test_symbol_renaming_is_simultaneous():
    p = Prog([user("x", ["{s0}"]), user("y", ["{s1}"])], [NodeSpec(ADD, [("in", 0), ("in", 1)], shape=["{s0}"])],
             [("n", 0)], ranges={"{s0}": (2, 8), "{s1}": (3, 9)})
    c, _ = canonicalize(render(p, syms={"s0": "s1", "s1": "s0"}), facts=op_facts)  # swapped names
    tv = c.graph_module.graph.tensor_values
    assert expr_of(tv["x"].sizes[0]) == "s0" and expr_of(tv["y"].sizes[0]) == "s1"
    assert ranges_of(c)["s0"][0] == 2 and ranges_of(c)["s1"][0] == 3


# ---------------------------------------------------------------- metadata


def _with_meta(p: S.ExportedProgram, f) -> S.ExportedProgram:
    g = p.graph_module.graph
    nodes = [msgspec.structs.replace(n, metadata=f(i, n.metadata)) for i, n in enumerate(g.nodes)]
    g = msgspec.structs.replace(g, nodes=nodes)
    return msgspec.structs.replace(p, graph_module=msgspec.structs.replace(p.graph_module, graph=g))


def test_debug_metadata_is_removed_and_can_be_put_back():
    base = render(chain(5, 1))

    def meta(tag, type_name="models.Model"):
        def f(i, m):
            return S.NodeMetadata(
                stack_trace=f'File "/home/{tag}/model.py", line {i}', from_node=f'[{{"graph_id": {id(tag)}}}]',
                nn_module_stack=[S.ModuleStackEntry(key="L__self__", path="", type_name=type_name)],
                custom='{"k":1}')
        return f
    a, b = _with_meta(base, meta("alice")), _with_meta(base, meta("bob"))
    ca, da = canonicalize(a, keep_debug=True, facts=op_facts)
    cb, _ = canonicalize(b, facts=op_facts)
    assert wire.encode(ca) == wire.encode(cb)
    m = nodes_of(ca)[0].metadata
    assert m.stack_trace is None and m.from_node is None
    # the module type holds no path: it is part of the program (pt2e selects nodes by it)
    assert m.nn_module_stack[0].type_name == "models.Model"
    assert m.custom == '{"k":1}' and m.nn_module_stack[0].key == "L__self__"
    assert set(da.nodes) == {n.name for n in nodes_of(ca)}
    assert all(d.module_types is None for d in da.nodes.values())
    other, _ = canonicalize(_with_meta(base, meta("alice", "models.Other")), facts=op_facts)
    assert wire.encode(other) != wire.encode(ca)
    back = attach_debug(ca, da)
    first = nodes_of(back)[0]
    assert first.metadata.stack_trace.startswith('File "/home/alice/model.py"')
    assert first.metadata.nn_module_stack[0].type_name == "models.Model"
    # debug info survives its own encoding (it is stored as debug.json)
    assert wire.decode(wire.encode(da), type(da)) == da


def test_provenance_graph_ids_become_ordinals():
    # torch's from_node names graphs by id(graph), which differs per process: the ids become
    # ordinals by first appearance (nodes in name order), nodes that shared a graph still share one.
    base = render(chain(4, 1))

    def meta(ids):
        def f(i, m):
            inner = {"action": "create", "from_node": [], "graph_id": ids[1], "name": f"n{i}", "pass_name": "p",
                     "target": "t"}
            outer = {"action": "create", "from_node": [inner], "graph_id": ids[i % 2], "name": f"n{i}",
                     "pass_name": "q", "target": "t"}
            return S.NodeMetadata(from_node=json.dumps([outer], sort_keys=True, separators=(",", ":")))
        return f
    debugs = [canonicalize(_with_meta(base, meta(ids)), keep_debug=True, facts=op_facts)[1]
              for ids in ((140585625513808, 140436011545680), (7, 9))]
    assert wire.encode(debugs[0]) == wire.encode(debugs[1])
    outers = [json.loads(d.from_node)[0] for d in debugs[0].nodes.values()]
    assert {o["graph_id"] for o in outers} == {0, 1}  # two graphs, two ordinals
    assert len({o["from_node"][0]["graph_id"] for o in outers}) == 1
    same = sum(o["graph_id"] == o["from_node"][0]["graph_id"] for o in outers)
    assert same == sum(i % 2 == 1 for i in range(len(outers)))  # the same nodes still share a graph
    # idempotent: ordinals renumber to themselves
    program, debug = canonicalize(_with_meta(base, meta((140585625513808, 140436011545680))), keep_debug=True,
                                  facts=op_facts)
    again = canonicalize(attach_debug(program, debug), keep_debug=True, facts=op_facts)[1]
    assert wire.encode(again) == wire.encode(debug)


def test_strict_module_ids_and_source_fn_counters_are_stabilised():
    def f(ids, counter):
        def g(i, m):
            return S.NodeMetadata(
                nn_module_stack=[S.ModuleStackEntry(key="L__self__", path=""),
                                 S.ModuleStackEntry(key=f"{ids}@1", path="blk")],
                source_fn_stack=[S.SourceFn(name=f"add_{counter + i}", target="_operator.add")],
                torch_fn=S.SourceFn(name=f"add_{counter + 2 * i}", target="method_descriptor.add"))
        return g
    base = render(chain(4, 2))
    a, b = _with_meta(base, f(140001, 1)), _with_meta(base, f(977, 9))
    assert canon(a) == canon(b)
    c, _ = canonicalize(a, facts=op_facts)
    m = nodes_of(c)[1].metadata
    assert m.nn_module_stack[1].key == "L__self__blk@1"
    assert m.source_fn_stack[0].name == nodes_of(c)[1].name == m.torch_fn.name


def test_module_frames_stay_contiguous():
    fa = [("L__self__", ""), ("L__self__a", "a")]
    fb = [("L__self__", ""), ("L__self__b", "b")]
    # a: two independent chains from x; b consumes the first chain only; output needs both.
    nodes = [NodeSpec(RELU, [("in", 0)], module=fa), NodeSpec(SIG, [("in", 0)], module=fa),
             NodeSpec(MUL, [("n", 1), ("f", 2.0)], module=fa),
             NodeSpec(RELU, [("n", 0)], module=fb), NodeSpec(ADD, [("n", 3), ("n", 2)], module=fa[:1])]
    for seed in range(6):
        c, _ = canonicalize(render(Prog([user("x")], nodes, [("n", 4)]), rng=random.Random(seed)), facts=op_facts)
        frames = [tuple(e.key for e in n.metadata.nn_module_stack) for n in nodes_of(c)]
        seen_closed = set()
        for prev, cur in zip(frames, frames[1:], strict=False):
            if prev != cur:
                seen_closed.add(prev)
                assert cur not in seen_closed, frames


def test_frames_that_need_each_other_fall_back_to_node_order():
    fa = [("L__self__", ""), ("L__self__a", "a")]
    fb = [("L__self__", ""), ("L__self__b", "b")]
    nodes = [NodeSpec(RELU, [("in", 0)], module=fa), NodeSpec(SIG, [("n", 0)], module=fb),
             NodeSpec(MUL, [("n", 1), ("f", 2.0)], module=fa)]
    p = Prog([user("x")], nodes, [("n", 2)])
    c, _ = canonicalize(render(p), facts=op_facts)
    assert [n.target for n in nodes_of(c)] == [RELU, SIG, MUL]
    assert canon(render(p)) == canon(render(p, namer=lambda s: "w" + s))


# ---------------------------------------------------------------- errors


def _program_with_graph(p: S.ExportedProgram, **changes) -> S.ExportedProgram:
    g = msgspec.structs.replace(p.graph_module.graph, **changes)
    return msgspec.structs.replace(p, graph_module=msgspec.structs.replace(p.graph_module, graph=g))


def test_undefined_reference_is_reported_with_its_location():
    p = render(chain(3, 0))
    nodes = list(nodes_of(p))
    nodes[1] = msgspec.structs.replace(nodes[1], inputs=[S.NamedArgument(
        name="self", arg=A(as_tensor=S.TensorArgument(name="ghost")), kind=S.ArgumentKind.POSITIONAL)])
    with pytest.raises(MalformedArtifactError, match=r"graph_module\.graph\.nodes\[1\]\.inputs\[0\]: refers to 'ghost'"):
        canonicalize(_program_with_graph(p, nodes=nodes), facts=op_facts)


def test_duplicate_definition_and_cycle_are_reported():
    p = render(chain(3, 0))
    nodes = list(nodes_of(p))
    dup = msgspec.structs.replace(nodes[2], outputs=nodes[1].outputs)
    with pytest.raises(MalformedArtifactError, match=r"nodes\[2\]\.outputs: value 'n1' is defined twice"):
        canonicalize(_program_with_graph(p, nodes=nodes[:2] + [dup]), facts=op_facts)
    loop = msgspec.structs.replace(nodes[0], inputs=[S.NamedArgument(
        name="self", arg=A(as_tensor=S.TensorArgument(name="n2")), kind=S.ArgumentKind.POSITIONAL)])
    with pytest.raises(MalformedArtifactError, match="dependency cycle"):
        canonicalize(_program_with_graph(p, nodes=[loop] + nodes[1:]), facts=op_facts)


def test_stale_value_table_entry_and_bad_signature_are_reported():
    p = render(chain(2, 0))
    tv = dict(p.graph_module.graph.tensor_values)
    tv["stale"] = tv["n0"]
    with pytest.raises(MalformedArtifactError, match=r"tensor_values\['stale'\]: no node or input"):
        canonicalize(_program_with_graph(p, tensor_values=tv), facts=op_facts)
    sig = S.GraphSignature(input_specs=[], output_specs=p.graph_module.signature.output_specs)
    bad = msgspec.structs.replace(p, graph_module=msgspec.structs.replace(p.graph_module, signature=sig))
    with pytest.raises(MalformedArtifactError, match="0 specs for 1 graph inputs"):
        canonicalize(bad, facts=op_facts)


def test_random_topological_orders_of_chain_like_graphs_agree():
    p = rich()
    rng = random.Random(0)
    orders = {tuple(topo_orders(p, rng)) for _ in range(20)}
    assert len(orders) > 1  # the property is not vacuous
    assert len({canon(render(p, order=list(o))) for o in orders}) == 1


# ---------------------------------------------------------------- effects


RAND = "torch.ops.aten.rand.default"


def _draw(module=None) -> NodeSpec:
    return NodeSpec(RAND, [("ints", [4])], names=["size"], module=module, effect=True)


def test_a_subgraph_with_an_effect_makes_its_caller_an_effect():
    """A cond whose branch draws from the RNG keeps its place among the other draws: stored
    between two draws, it stays there, although no data edge says so."""
    drawing = Prog([user("a")], [_draw(), NodeSpec(ADD, [("in", 0), ("n", 0)])], [("n", 1)])
    pure = Prog([user("a")], [NodeSpec(RELU, [("in", 0)])], [("n", 0)])
    nodes = [_draw(), NodeSpec(COND, [("b", True), ("g", drawing), ("g", pure), ("ts", [("in", 0)])]), _draw(),
             NodeSpec(ADD, [("n", 2), ("n", 1)]), NodeSpec(ADD, [("n", 3), ("n", 0)])]
    c, _ = canonicalize(render(Prog([user("x")], nodes, [("n", 4)])), facts=op_facts)
    # outputs are demanded as (second draw, cond, first draw): a data-only order would start with the second draw
    assert [n.target for n in nodes_of(c)][:3] == [RAND, COND, RAND]
    first, second = (n.name for n in nodes_of(c) if n.target == RAND)
    assert nodes_of(c)[0].name == first
    # with a pure branch instead, the cond is free to move: it is no effect
    nodes[1] = NodeSpec(COND, [("b", True), ("g", pure), ("g", pure), ("ts", [("in", 0)])])
    c, _ = canonicalize(render(Prog([user("x")], nodes, [("n", 4)])), facts=op_facts)
    assert [n.target for n in nodes_of(c)].index(COND) != 1


def test_an_unregistered_operator_is_reported_with_its_node():
    """Without its schema, what an operator writes is unknown: canonicalizing it would be a guess."""
    nodes = [NodeSpec("torch.ops.pt2serde_nowhere.mystery.default", [("in", 0)])]
    with pytest.raises(UnknownOperatorError, match=r"graph_module\.graph\.nodes\[0\] \('n0'\).*not registered"):
        canonicalize(render(Prog([user("x")], nodes, [("n", 0)])), facts=op_facts)
