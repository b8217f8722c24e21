"""Higher-order ops round-trip and run: cond, map, while_loop, scan, associative_scan,
invoke_subgraph, the training-IR wrappers, auto_functionalized and with_effects."""

from __future__ import annotations

import io

import pytest
import torch

import serde
from serde.archive.artifact import read_artifact
from serde.testing import assert_programs_equal, assert_roundtrip
from tests import zoo_breadth

# case -> higher-order ops its graph (or a subgraph) must call, before and after the round trip
HOPS = {
    "cond_operands": {"cond"},
    "cond_nested": {"cond"},
    "cond_nested_aten": {"cond"},
    "cond_size_closure": {"cond"},
    "map": {"map_impl"},
    "while_loop": {"while_loop"},
    "scan": {"scan"},
    "invoke_subgraph": {"invoke_subgraph"},
    "set_grad_enabled": {"wrap_with_set_grad_enabled"},
    "autocast": {"wrap_with_autocast"},
    "effects_and_mutation_aten": {"with_effects", "auto_functionalized_v2"},
    "unbacked_in_cond": {"cond"},
    "hints_wrapper": {"hints_wrapper"},
    "flex_attention": {"flex_attention"},
    "flex_attention_aten": {"flex_attention"},
}


def _hops(gm: torch.fx.GraphModule) -> set[str]:
    found = set()
    for m in gm.modules():
        if isinstance(m, torch.fx.GraphModule):
            found |= {n.target.name() for n in m.graph.nodes
                      if isinstance(n.target, torch._ops.HigherOrderOperator)}
    return found


@pytest.mark.parametrize("name", sorted(HOPS))
def test_hop_roundtrips_and_runs(name, breadth_program):
    ep = breadth_program(name)
    assert HOPS[name] <= _hops(ep.graph_module), "the case no longer exercises its higher-order op"
    loaded = assert_roundtrip(ep)
    assert HOPS[name] <= _hops(loaded.graph_module)
    for args, kwargs in zoo_breadth.get(name).other_inputs():
        assert_programs_equal(ep, loaded, inputs=(args, kwargs))


@pytest.mark.parametrize("name", ["cond_operands", "cond_nested", "cond_nested_aten", "cond_size_closure",
                                  "unbacked_in_cond"])
def test_cond_both_branches_taken_after_load(name, breadth_program):
    """The example and other inputs take both branches; the loaded program matches eager on each."""
    case = zoo_breadth.get(name)
    torch.manual_seed(0)
    model, args, kwargs, _ = case.build()
    loaded = serde.load(_saved(breadth_program(name)))
    taken = set()
    for a, k in [(args, kwargs), *case.other_inputs()]:
        taken.add(_outer_predicate(loaded, a))
        torch.testing.assert_close(loaded.module()(*a, **k), model(*a, **k))
    assert taken == {True, False}


def test_cond_operands_mixing_tensors_and_sizes(breadth_program):
    loaded = serde.load(_saved(breadth_program("cond_size_closure")))
    (cond,) = [n for n in loaded.graph.nodes if n.target is torch.ops.higher_order.cond]
    kinds = sorted(type(o.meta["val"]).__name__ for o in cond.args[3])
    assert kinds == ["FakeTensor", "SymInt"]
    for n in (2, 5, 9):
        x = torch.full((n, 2), 0.5)
        torch.testing.assert_close(loaded.module()(x), x * n + 1)


def test_while_loop_iterates_from_the_loaded_program(breadth_program):
    loaded = serde.load(_saved(breadth_program("while_loop")))
    for start in (0, 3, 5):
        i, x = loaded.module()(torch.tensor(start), torch.ones(3))
        assert int(i) == max(start, 5)
        steps = max(5 - start, 0)
        expected = torch.ones(3)
        for k in range(start, start + steps):
            expected = expected * 2 + k
        torch.testing.assert_close(x, expected)


def test_subgraphs_are_stored_inline_in_the_schema(breadth_program):
    """A cond's branches are GraphArguments inside program.json, not side files."""
    art = read_artifact(_saved(breadth_program("cond_nested")))
    assert [n for n in art.contents.names if not n.startswith("data/")] == sorted(
        n for n in art.contents.names if n.endswith(".json"))

    def graphs(g):
        for node in g.nodes:
            for na in node.inputs:
                if na.arg.as_graph is not None:
                    yield na.arg.as_graph.graph
                    yield from graphs(na.arg.as_graph.graph)

    inner = list(graphs(art.program.graph_module.graph))
    assert len(inner) == 4  # two branches of the outer cond, two of the nested one
    assert all(g.nodes for g in inner)


def test_hints_dict_comes_back(breadth_program):
    loaded = serde.load(_saved(breadth_program("hints_wrapper")))
    (node,) = [n for n in loaded.graph.nodes if n.target is torch.ops.higher_order.hints_wrapper]
    assert node.kwargs["hints"] == {"tag": "block", "depth": 3, "fused": True}


def test_flex_attention_block_mask_is_a_mixed_tuple(breadth_program):
    """The block mask (ints, tensors, None and the mask graph) is one Argument.as_tuple on the wire
    and comes back as a tuple in the same order, its graph a submodule of the loaded program."""
    ep = breadth_program("flex_attention_aten")
    art = read_artifact(_saved(ep))
    (node,) = [n for n in art.program.graph_module.graph.nodes if n.target.endswith(".flex_attention")]
    kinds = [x.kind for x in node.inputs[4].arg.as_tuple]
    assert {"as_int", "as_tensor", "as_none", "as_graph"} <= set(kinds)
    loaded = serde.load(_saved(ep))
    (orig,) = [n for n in ep.graph.nodes if n.target is torch.ops.higher_order.flex_attention]
    (back,) = [n for n in loaded.graph.nodes if n.target is torch.ops.higher_order.flex_attention]
    mask = back.args[4]
    assert isinstance(mask, tuple) and len(mask) == len(orig.args[4])
    assert [type(x).__name__ for x in mask] == [type(x).__name__ for x in orig.args[4]]
    assert mask[-1].op == "get_attr" and isinstance(getattr(loaded.graph_module, mask[-1].target),
                                                    torch.fx.GraphModule)


def test_a_list_of_mixed_kinds_is_still_refused():
    """Only tuples (higher-order op operands) may mix kinds; an op's list argument may not."""
    from serde.bridge.arguments import ArgumentWriter
    from serde.errors import UnsupportedConstructError

    w = ArgumentWriter(subgraph=None, custom_obj_class=None)
    assert w.write((1, None, "a"), "t").kind == "as_tuple"
    with pytest.raises(UnsupportedConstructError, match=r"t: cannot store a list mixing .*only tuples"):
        w.write([1, None, "a"], "t")


def test_effect_tokens_are_in_the_signature(breadth_program):
    ep = breadth_program("effects_and_mutation_aten")
    loaded = assert_roundtrip(ep)
    for e in (ep, loaded):
        kinds_in = [s.kind.name for s in e.graph_signature.input_specs]
        kinds_out = [s.kind.name for s in e.graph_signature.output_specs]
        assert kinds_in.count("TOKEN") == 1 and kinds_out.count("TOKEN") == 1
        assert "BUFFER_MUTATION" in kinds_out and "USER_INPUT_MUTATION" in kinds_out
    effects = [n for n in loaded.graph.nodes if n.target is torch.ops.higher_order.with_effects]
    assert [n.args[1] for n in effects] == [torch.ops.pt2serde_zoo.record.default] * 2


def test_auto_functionalized_mutations_apply_after_load(breadth_program):
    loaded = serde.load(_saved(breadth_program("effects_and_mutation_aten")))
    m = loaded.module()
    x, out = torch.tensor([1.0, 2.0, 3.0]), torch.zeros(3)
    y = m(x, out)
    torch.testing.assert_close(out, 2 * x)          # user input mutated through the custom op
    torch.testing.assert_close(m.acc, x)             # buffer mutated
    torch.testing.assert_close(y, 2 * x)


def _saved(ep) -> bytes:
    buf = io.BytesIO()
    serde.save(ep, buf)
    return buf.getvalue()


def _outer_predicate(ep, args) -> bool:
    """Value of the first cond's predicate on ``args``, by running the graph up to it."""
    cond = next(n for n in ep.graph.nodes if n.target is torch.ops.higher_order.cond)
    env = {}
    interp = torch.fx.Interpreter(ep.graph_module)
    flat = ep._graph_module_flat_inputs(args, {})
    for node, value in zip([n for n in ep.graph.nodes if n.op == "placeholder"], flat, strict=True):
        env[node] = value
    for node in ep.graph.nodes:
        if node is cond:
            pred = node.args[0]
            value = env[pred] if isinstance(pred, torch.fx.Node) else pred
            return bool(value)
        if node.op == "call_function":
            a, k = torch.fx.node.map_arg((node.args, node.kwargs), lambda n: env[n])
            env[node] = node.target(*a, **k)
        elif node.op == "get_attr":
            env[node] = interp.fetch_attr(node.target)
    raise AssertionError("no cond in the graph")


def test_associative_scan_in_the_training_ir(breadth_program):
    """The training IR keeps associative_scan as torch.func vmap calls (torch._functorch.predispatch);
    the canonical order keeps the batched ops inside their vmap level, so the loaded program runs."""
    ep = breadth_program("associative_scan")
    targets = {getattr(n.target, "__name__", "") for n in ep.graph.nodes}
    assert {"_vmap_increment_nesting", "_add_batch_dim"} <= targets, "the case no longer traces vmap"
    loaded = assert_roundtrip(ep)
    torch.manual_seed(0)
    xs, ys = torch.randn(3, 5), torch.randn(3, 5)
    prod, run_max = loaded.module()(xs, ys)
    torch.testing.assert_close(prod, xs.cumprod(1))
    torch.testing.assert_close(run_max, ys.cummax(1).values)


def test_associative_scan_in_the_core_aten_ir(breadth_program):
    """After run_decompositions() associative_scan is plain aten ops."""
    ep = breadth_program("associative_scan_aten")
    loaded = assert_roundtrip(ep)
    xs = torch.randn(4, 3)
    torch.testing.assert_close(loaded.module()(xs), xs.cumsum(0))
