"""The load-time binding check of operator calls: a call shape the schema matcher accepted once is
remembered, and a call that differs from every accepted shape still reaches the matcher; and each
call stores the outputs its operator returns."""

from __future__ import annotations

import io
import json

import pytest
import torch

import serde
from serde.archive import read_archive
from serde.bridge.errors import InconsistentProgramError
from tests.serde.attacks._attack_kit import FIXTURES, nodes, rewrite_program


def _retyped(arg: dict) -> bytes:
    def change(p: dict) -> None:
        nodes(p)["fc2_linear"]["inputs"][1]["arg"] = arg
    return rewrite_program("mlp", change)


@pytest.mark.parametrize("arg", [{"as_ints": [3, 4]}, {"as_int": 3}, {"as_float": 0.5}, {"as_string": "cpu"},
                                 {"as_tensors": [{"name": "p_fc2_weight"}]}],
                         ids=["int_list", "int", "float", "string", "tensor_list"])
def test_a_call_unlike_the_accepted_ones_is_still_refused(arg):
    intact = (FIXTURES / "mlp" / "model.pt2s").read_bytes()
    bad = _retyped(arg)
    for _ in range(2):  # before and after the intact program's linear calls were accepted
        with pytest.raises(InconsistentProgramError, match=r"nodes\['fc2_linear'\]\.inputs\[1\]: the arguments do not fit"):
            serde.load(io.BytesIO(bad))
        serde.load(io.BytesIO(intact))


def _symbolic_call_changed(change) -> bytes:
    def edit(p: dict) -> None:
        change(nodes(p)["floordiv"]["inputs"])
    return rewrite_program("dynamic_arith", edit)


@pytest.mark.parametrize("change", [lambda inputs: inputs.append(dict(inputs[1])), lambda inputs: inputs.pop(),
                                    lambda inputs: inputs[1].update(name="b", kind=2)],
                         ids=["extra_positional", "missing_positional", "keyword"])
def test_a_symbolic_call_unlike_the_accepted_ones_is_still_refused(change):
    # The signature of operator.floordiv is looked up once per process; binding runs on every call.
    intact = (FIXTURES / "dynamic_arith" / "model.pt2s").read_bytes()
    bad = _symbolic_call_changed(change)
    for _ in range(2):  # before and after the intact program's floordiv was bound
        with pytest.raises(InconsistentProgramError, match=r"nodes\['floordiv'\]: the arguments do not fit _operator\.floordiv"):
            serde.load(io.BytesIO(bad))
        serde.load(io.BytesIO(intact))


def _outputs_changed(change) -> bytes:
    def edit(p: dict) -> None:
        change(nodes(p)["topk"]["outputs"])
    return rewrite_program("multi_output", edit)


@pytest.mark.parametrize(("change", "match"), [
    (lambda outs: outs.pop(), r"nodes\['topk'\]\.outputs: torch\.ops\.aten\.topk\.default returns 2 values .* stores 1"),
    (lambda outs: outs.append(dict(outs[1])), r"returns 2 values .* stores 3"),
    (lambda outs: outs.__setitem__(1, {"as_sym_int": {"as_name": "topk_1"}}),
     r"nodes\['topk'\]\.outputs\[1\]: return 1 of torch\.ops\.aten\.topk\.default is Tensor, the node stores as_sym_int"),
    (lambda outs: outs.__setitem__(0, {"as_tensors": [{"name": "topk_0"}]}), r"outputs\[0\]: .* stores as_tensors"),
], ids=["one_missing", "one_extra", "number_for_tensor", "list_for_tensor"])
def test_outputs_unlike_the_operators_returns_are_refused(change, match):
    with pytest.raises(InconsistentProgramError, match=match):
        serde.load(io.BytesIO(_outputs_changed(change)))


class _GradientOfInputOnly(torch.nn.Module):
    def forward(self, g, x, w, mean, var):
        grads = torch.ops.aten.native_batch_norm_backward.default(g, x, w, mean, var, None, None, False, 1e-5,
                                                                  [True, False, False])
        return grads[0] * 2


def test_a_tensor_return_the_operator_leaves_undefined_is_stored_as_none_and_loads():
    torch.manual_seed(0)
    args = (torch.randn(4, 3), torch.randn(4, 3), torch.randn(3), torch.zeros(3), torch.ones(3))
    ep = torch.export.export(_GradientOfInputOnly(), args)
    buf = io.BytesIO()
    serde.save(ep, buf)
    program = json.loads(bytes(read_archive(io.BytesIO(buf.getvalue())).member("program.json")))
    (outs,) = [n["outputs"] for n in program["graph_module"]["graph"]["nodes"] if "backward" in n["target"]]
    assert [next(iter(o)) for o in outs] == ["as_tensor", "as_none", "as_none"]
    loaded = serde.load(io.BytesIO(buf.getvalue()))
    assert torch.equal(loaded.module()(*args), ep.module()(*args))


def test_example_inputs_with_keywords_in_another_order_than_the_in_spec_load():
    # torch's own check reorders keyword arguments by the in_spec before it compares: so do we.
    def reorder(w: dict) -> None:
        ex = w["example_inputs"]
        kwargs = ex["spec"]["children"][1]
        assert json.loads(kwargs["context"]) == ["scale", "pair"]
        kwargs["context"] = json.dumps(["pair", "scale"])
        kwargs["children"].reverse()
        ex["leaves"] = ex["leaves"][:3] + ex["leaves"][4:] + ex["leaves"][3:4]  # scale, then pair's two

    ep = serde.load(io.BytesIO(rewrite_program("pytrees", reorder, member="weights.json")))
    intact = serde.load(FIXTURES / "pytrees" / "model.pt2s")
    assert list(ep.example_inputs[1]) == ["pair", "scale"]
    assert ep.example_inputs[1]["scale"] == intact.example_inputs[1]["scale"]
    args, kwargs = ep.example_inputs
    want = intact.module()(*intact.example_inputs[0], **intact.example_inputs[1])
    for a, b in zip(torch.utils._pytree.tree_leaves(ep.module()(*args, **kwargs)),
                    torch.utils._pytree.tree_leaves(want), strict=True):
        assert torch.equal(a, b)


def _first(p: dict, target_end: str) -> dict:
    """The first node (depth first, subgraphs included) whose target ends with ``target_end``."""
    def walk(g: dict):
        for n in g["nodes"]:
            if n["target"].endswith(target_end):
                return n
            for i in n["inputs"]:
                if "as_graph" in i["arg"]:
                    found = walk(i["arg"]["as_graph"]["graph"])
                    if found is not None:
                        return found
        return None
    return walk(p["graph_module"]["graph"])


def _cond_on_bias(p: dict) -> None:
    nodes(p)["cond"]["inputs"][0]["arg"] = {"as_tensor": {"name": "p_lin_bias"}}


def _loop_condition_of_two(p: dict) -> None:
    body = nodes(p)["while_loop"]["inputs"][0]["arg"]["as_graph"]["graph"]
    body["tensor_values"]["lt"]["sizes"] = [{"as_int": 2}]
    body["tensor_values"]["lt"]["strides"] = [{"as_int": 1}]


@pytest.mark.parametrize(("case", "change", "match"), [
    ("cond", _cond_on_bias, r"nodes\['cond'\]\.inputs\[0\]: cond's predicate must be a boolean or a one-element "
                            r"tensor, it has the shape \[6\]"),
    ("while_loop", _loop_condition_of_two, r"nodes\['while_loop'\]\.inputs\[0\]: the loop condition must compute a "
                                           r"boolean or a 0-dim boolean tensor"),
    ("associative_scan", lambda p: _first(p, "_vmap_increment_nesting")["inputs"][1]["arg"].update(as_string="bogus"),
     r"_vmap_increment_nesting takes one of \['different', 'error', 'same'\] here, got 'bogus'"),
    ("associative_scan", lambda p: _first(p, "_vmap_increment_nesting")["inputs"][0]["arg"].update(as_int=-3),
     r"inputs\[0\]: torch\._functorch\.predispatch\._vmap_increment_nesting takes a batch size here, got -3"),
    ("associative_scan", lambda p: _first(p, "_add_batch_dim")["inputs"][2]["arg"].update(as_int=-1),
     r"inputs\[2\]: vmap level -1; levels count from 1"),
    ("associative_scan", lambda p: _first(p, "_remove_batch_dim")["inputs"][1]["arg"].update(as_int=0),
     r"inputs\[1\]: vmap level 0; levels count from 1"),
    ("associative_scan", lambda p: _first(p, "_add_batch_dim")["inputs"].__setitem__(1, dict(
        _first(p, "_add_batch_dim")["inputs"][0], name="batch_dim")),
     r"inputs\[1\]: torch\._functorch\.predispatch\._add_batch_dim takes an int here, got FakeTensor"),
    ("associative_scan", lambda p: _first(p, "_remove_batch_dim")["inputs"][3]["arg"].update(as_int=3),
     r"inputs\[3\]: _remove_batch_dim names dim 3 of a rank-2 tensor"),
    ("associative_scan", lambda p: _first(p, "_add_batch_dim")["inputs"][1]["arg"].update(as_int=-3),
     r"inputs\[1\]: _add_batch_dim names dim -3 of a rank-\d tensor"),
    # batched with 5 where its level maps over 2: the level's mul then meets batch sizes 5 and 2
    ("associative_scan", lambda p: _first(p, "_add_batch_dim")["inputs"][0]["arg"].update(
        as_tensor={"name": "movedim_tgmwg"}),
     r"inputs\[0\]: 'movedim_tgmwg' has 5 elements at its batch dim 0, but vmap level 1 maps over 2"),
    # a tensor batched in the first vmap call (batch size 2) used in the second (batch size 1)
    ("associative_scan", lambda p: nodes(p)["maximum_jrzpc"]["inputs"][1]["arg"].update(
        as_tensor={"name": "_add_batch_dim_zxqqm"}),
     r"nodes\['maximum_jrzpc'\]: takes '_add_batch_dim_zxqqm', which is batched at a vmap level that is no longer "
     r"open here"),
    ("multi_output", lambda p: nodes(p)["topk"].update(target="torch._functorch.predispatch._add_batch_dim")
     or nodes(p)["topk"]["inputs"][1]["arg"].update(as_int=0),
     r"nodes\['topk'\]: _add_batch_dim outside any vmap level"),
    ("while_loop", lambda p: nodes(p)["while_loop"]["inputs"][0]["arg"]["as_graph"]["graph"].update(
        is_single_tensor_return=False),
     r"nodes\['while_loop'\]\.inputs\[0\]: the loop condition must return its value bare, not in a tuple"),
    ("sym_scalars", lambda p: nodes(p)["truediv"]["inputs"][1]["arg"].update(as_float=0.0),
     r"nodes\['truediv'\]\.inputs\[1\]: _operator\.truediv divides by the constant 0"),
    ("sym_scalars", lambda p: nodes(p)["pow_"]["inputs"][1]["arg"].update(as_int=2 ** 63 - 1),
     r"nodes\['pow_'\]\.inputs\[1\]: _operator\.pow raises a size to 9223372036854775807, beyond the exponent cap of 64"),
], ids=["cond_predicate_of_six", "loop_condition_of_two", "vmap_randomness", "vmap_batch_size", "add_batch_dim_level",
        "remove_batch_dim_level", "add_batch_dim_tensor_dim", "remove_batch_dim_out_of_range",
        "add_batch_dim_out_of_range", "add_batch_dim_batch_size", "batched_in_another_vmap", "batch_dim_outside_vmap", "loop_condition_in_tuple", "divide_by_zero",
        "huge_exponent"])
def test_higher_order_and_vmap_arguments_torch_checks_at_run_time_are_checked_at_load(case, change, match):
    # Each loaded before, and failed when run: a RuntimeError inside torch, or a functorch internal assert.
    with pytest.raises(InconsistentProgramError, match=match):
        serde.load(io.BytesIO(rewrite_program(case, change)))
