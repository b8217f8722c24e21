"""The default training IR, the core ATen IR after run_decompositions(), and joint forward-backward
graphs with loss and gradient outputs all round-trip."""

from __future__ import annotations

import io

import torch

import serde
from serde.testing import assert_roundtrip
from tests import zoo_breadth


def _dialects(ep) -> list[str]:
    return [v.dialect for v in ep.verifiers]


def test_training_ir(breadth_program):
    ep = breadth_program("classifier")
    loaded = assert_roundtrip(ep)
    assert _dialects(loaded) == _dialects(ep) == ["TRAINING"]


def test_core_aten_ir(breadth_program):
    ep = breadth_program("classifier_aten")
    loaded = assert_roundtrip(ep)
    assert _dialects(loaded) == _dialects(ep) == ["ATEN"]
    ops = {n.target for n in loaded.graph.nodes if isinstance(n.target, torch._ops.OpOverload)}
    assert ops and all(torch.Tag.core in op.tags or op.namespace != "aten" or op._opname in (
        "sym_size", "_assert_scalar") for op in ops), sorted(map(str, ops))


def test_joint_graph_with_loss_and_gradients(breadth_program):
    ep = breadth_program("classifier_joint")
    loaded = assert_roundtrip(ep)  # runs both joint graphs on the flat inputs and compares
    kinds = [s.kind.name for s in loaded.graph_signature.output_specs]
    assert kinds[0] == "LOSS_OUTPUT" and kinds.count("GRADIENT_TO_PARAMETER") == 2
    grads = {s.target: s.arg.name for s in loaded.graph_signature.output_specs
             if s.kind.name == "GRADIENT_TO_PARAMETER"}
    assert set(grads) == {"lin.weight", "lin.bias"}

    # The loaded joint graph computes what autograd computes.
    torch.manual_seed(0)
    model, (x, target), _, _ = zoo_breadth.get("classifier_joint").build()
    model.load_state_dict({k: v for k, v in loaded.state_dict.items()}, strict=False)
    loss, _ = model(x, target)
    loss.backward()
    flat = loaded._graph_module_flat_inputs((x, target), {})
    outs = loaded.graph_module(*flat)
    names = [s.arg.name for s in loaded.graph_signature.output_specs]
    by_name = dict(zip(names, outs, strict=True))
    torch.testing.assert_close(by_name[names[0]], loss.detach())
    torch.testing.assert_close(by_name[grads["lin.weight"]], model.lin.weight.grad)
    torch.testing.assert_close(by_name[grads["lin.bias"]], model.lin.bias.grad)


def test_joint_graph_with_gradient_to_user_input(breadth_program):
    ep = breadth_program("regressor_joint")
    loaded = assert_roundtrip(ep)
    specs = [s for s in loaded.graph_signature.output_specs if s.kind.name == "GRADIENT_TO_USER_INPUT"]
    # torch names the input by its tracing-time name (not the placeholder's); kept as written
    assert [s.target for s in specs] == [s.target for s in ep.graph_signature.output_specs
                                         if s.kind.name == "GRADIENT_TO_USER_INPUT"]
    assert len(specs) == 1


def test_ir_variants_of_one_model_all_load(breadth_program):
    """One file per IR; each loads to the IR it was saved in."""
    for name, dialect in (("classifier", "TRAINING"), ("classifier_aten", "ATEN"), ("classifier_joint", "ATEN")):
        buf = io.BytesIO()
        serde.save(breadth_program(name), buf)
        assert _dialects(serde.load(buf.getvalue())) == [dialect]


def test_index_with_none_in_the_index_list(breadth_program):
    """x[:, idx] is aten.index.Tensor(x, [None, idx]): a list of optional tensors."""
    ep = breadth_program("indexing")
    loaded = assert_roundtrip(ep)
    (node,) = [n for n in loaded.graph.nodes if n.target is torch.ops.aten.index.Tensor and n.args[1][0] is None]
    assert isinstance(node.args[1][1], torch.fx.Node)


def test_parameter_mutation(breadth_program):
    ep = breadth_program("parameter_mutation_aten")
    loaded = assert_roundtrip(ep)
    assert [s.kind.name for s in loaded.graph_signature.output_specs] == ["PARAMETER_MUTATION", "USER_OUTPUT"]
    m = loaded.module()
    x = torch.ones(3)
    with torch.no_grad():
        torch.testing.assert_close(m(x), x * 0.5)
        torch.testing.assert_close(m(x), x * 0.25)  # the update is written back to the parameter
