"""``serde.load(..., propagate=True)``: every operator runs again on the stored fake values.

Real programs (every zoo and breadth case, exported here) load with it and their stored results
agree with what the operators compute; files whose nodes store results their operators do not
compute load by default and are refused with it, naming the node; and running in-place operators
again leaves the stored values as they were.
"""

from __future__ import annotations

import io
from collections.abc import Callable

import pytest
import torch

import serde
from serde.bridge.errors import InconsistentProgramError
from serde.bridge.operators import SYMBOLIC_TARGETS
from serde.bridge.propagation import check_propagation
from serde.testing import zoo
from tests import zoo_breadth
from tests.serde.attacks._attack_kit import nodes, rewrite_artifact, rewrite_program
from tests.tiers import BREADTH_FAST, tiered

_CASES = [("zoo", c.name) for c in zoo.CASES] + [("breadth", c.name) for c in zoo_breadth.CASES]
# make test: each kind of node the pass re-runs (plain, in-place, dynamic, unbacked, every
# higher-order op family, custom and symbolic ops); the rest under -m slow.
_FAST = [("zoo", n) for n in ("mlp", "transformer_block", "dynamic_arith", "input_mutation_aten", "cond",
                              "while_loop", "unbacked_item", "all_dtypes")] + \
        [("breadth", n) for n in BREADTH_FAST]
HAVE_TORCHBIND = zoo_breadth.load_torchbind_test_classes()


def _case(where: str, name: str) -> zoo.Case:
    return (zoo if where == "zoo" else zoo_breadth).get(name)


@pytest.mark.parametrize(("where", "name"), tiered(_CASES, _FAST, ids=[f"{w}-{n}" for w, n in _CASES]))
def test_real_programs_load_with_propagation(where, name):
    case = _case(where, name)
    if name.startswith("torchbind") and not HAVE_TORCHBIND:  # as test_breadth_custom_objects
        pytest.skip("torch's torchbind test library is missing")
    ep = zoo.export_case(case)
    buf = io.BytesIO()
    serde.save(ep, buf)
    loaded = serde.load(io.BytesIO(buf.getvalue()), propagate=True)
    helpers = set(SYMBOLIC_TARGETS.values())
    calls = sum(1 for m in loaded.graph_module.modules() if isinstance(m, torch.fx.GraphModule)
                for n in m.graph.nodes if n.op == "call_function"
                and (isinstance(n.target, torch._ops.OpOverload) or n.target in helpers))
    # The call compares again, and counts what it compared: at most every operator and helper call.
    assert 0 <= check_propagation(loaded) <= calls


def _split_without_dim(p: dict) -> None:
    nodes(p)["split"]["inputs"].pop()  # split(qkv, 32, -1) becomes split(qkv, 32): along dim 0


def _relu_for_sum(p: dict) -> None:
    nodes(p)["sum_"]["target"] = "torch.ops.aten.relu.default"  # cond's predicate, stored 0-dim


def _add_for_lt(p: dict) -> None:
    loop = nodes(p)["while_loop"]["inputs"][0]["arg"]["as_graph"]["graph"]
    next(n for n in loop["nodes"] if n["name"] == "lt")["target"] = "torch.ops.aten.add.Tensor"


def _cube_for_square(p: dict) -> None:
    nodes(p)["pow_"]["inputs"][1]["arg"] = {"as_int": 3}  # the node still stores s0**2


@pytest.mark.parametrize(("case", "edit", "match"), [
    ("transformer_block", _split_without_dim,
     r"graph\.nodes\['split'\]: aten\.split\.Tensor computes 1 results, the node stores 3"),
    ("cond", _relu_for_sum,
     r"graph\.nodes\['sum_'\]: aten\.relu\.default computes torch\.float32 \[s0, 6\], the node stores torch\.float32 \[\]"),
    ("while_loop", _add_for_lt,
     r"graph\.while_loop_graph0\.nodes\['lt'\]: aten\.add\.Tensor computes torch\.int64 \[\], the node stores torch\.bool \[\]"),
    ("sym_scalars", _cube_for_square,
     r"graph\.nodes\['pow_'\]: pow_ computes the int s0\*\*3 \(example value 125\), the node stores the int "
     r"s0\*\*2 \(example value 25\)"),
], ids=["split_count", "cond_predicate_shape", "loop_condition_dtype", "symbolic_power"])
def test_results_unlike_what_the_operators_compute_are_refused(case, edit, match):
    data = rewrite_program(case, edit)
    serde.load(io.BytesIO(data))  # every part fits the others: the default load takes it
    with pytest.raises(InconsistentProgramError, match=match):
        serde.load(io.BytesIO(data), propagate=True)


class _InPlace(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("total", torch.zeros(()))

    def forward(self, x):
        y = x.clone()
        y.add_(1)
        y.t_()  # changes y's sizes and strides, not only its data
        self.total.add_(x.sum())
        return y * 2


def test_in_place_operators_run_on_copies():
    ep = torch.export.export(_InPlace(), (torch.randn(2, 3),))
    buf = io.BytesIO()
    serde.save(ep, buf)
    loaded = serde.load(io.BytesIO(buf.getvalue()))
    before = {n.name: (n.meta["val"].shape, n.meta["val"].stride()) for n in loaded.graph.nodes
              if isinstance(n.meta.get("val"), torch.Tensor)}
    mutable = [n for n in loaded.graph.nodes
               if isinstance(n.target, torch._ops.OpOverload) and n.target._schema.is_mutable]
    assert {str(n.target) for n in mutable} >= {"aten.add_.Tensor", "aten.t_.default"}
    assert check_propagation(loaded) > 0
    after = {n.name: (n.meta["val"].shape, n.meta["val"].stride()) for n in loaded.graph.nodes
             if isinstance(n.meta.get("val"), torch.Tensor)}
    assert after == before


class _Draws(torch.nn.Module):
    """A lifted torch.Generator: the call that draws from it takes a custom object."""

    def __init__(self) -> None:
        super().__init__()
        self.g = torch.Generator().manual_seed(0)

    def forward(self, x):
        return x + torch.rand(3, generator=self.g)


def test_a_random_call_drawing_from_a_lifted_generator_is_compared():
    ep = torch.export.export(_Draws(), (torch.randn(3),))
    buf = io.BytesIO()
    serde.save(ep, buf)
    assert check_propagation(serde.load(io.BytesIO(buf.getvalue()), propagate=True)) == 2  # rand and add

    def draw_more(p: dict) -> None:
        nodes(p)["rand"]["inputs"][0]["arg"] = {"as_ints": [2**32]}  # the node still stores [3]

    data = rewrite_artifact(buf.getvalue(), draw_more)
    serde.load(io.BytesIO(data))  # every part fits the others: the default load takes it
    with pytest.raises(InconsistentProgramError,
                       match=r"graph\.nodes\['rand'\]: aten\.rand\.generator computes torch\.float32 \[4294967296\], "
                             r"the node stores torch\.float32 \[3\]"):
        serde.load(io.BytesIO(data), propagate=True)


def _float_indices(p: dict) -> None:
    # the embedding's indices renamed to a float parameter: every stored meta still fits its node
    nodes(p)["embedding"]["inputs"][1]["arg"] = {"as_tensor": {"name": "p_body_weight"}}


def test_a_call_torchs_own_kernel_refuses_on_the_stored_values_is_refused():
    data = rewrite_program("tied_weights", _float_indices)
    loaded = serde.load(io.BytesIO(data))  # every part fits the others: the default load takes it
    ids = torch.randint(0, 50, (2, 7))
    with pytest.raises(RuntimeError, match=r"scalar types: Long, Int"):  # and it cannot run
        loaded.module()(ids)
    with pytest.raises(InconsistentProgramError,
                       match=r"graph\.nodes\['embedding'\]: aten\.embedding\.default refuses the operands the "
                             r"program stores \(a torch\.float32 \[50, 16\] tensor, a torch\.float32 \[16, 16\] "
                             r"tensor\): Expected tensor for argument .1 'indices'"):
        serde.load(io.BytesIO(data), propagate=True)



def _set_arg(node: str, at: int, arg: dict) -> Callable[[dict], None]:
    def edit(p: dict) -> None:
        nodes(p)[node]["inputs"][at]["arg"] = arg
    return edit


# fixture, edit, what torch raises when the edited program runs, and propagation's refusal. Each
# loads by default (every stored part fits the others) and fails when called.
RUN_TIME_EDITS = {
    # sym_size(x, 0) (x is [2*s0, 8]) edited to read the [8, 8] weight: the sizes computed from it
    # fit the stored symbolic ones (s0 = (2*s0) // 2), and reshape refuses them
    "size_of_another_tensor": (
        "dynamic_arith", _set_arg("sym_size", 0, {"as_tensor": {"name": "p_lin_weight"}}),
        RuntimeError, r"shape '\[4, 2, 8\]' is invalid for input of size 48",
        r"graph\.nodes\['sym_size'\]: aten\.sym_size\.int computes the int 8, the node stores the int 2\*s0 "
        r"\(example value 6\)"),
    # view's size list edited to [128, -5]: its fake and meta kernels refuse it with "invalid shape
    # dimension -5. If this was symbolic, ...", words that once made the failure count as one fake
    # tensors cannot help; the meta kernel's refusal on the example sizes is the verdict
    "symbolic_words": (
        "flex_attention_aten", _set_arg("view_jqqsw", 1, {"as_ints": [128, -5]}),
        RuntimeError, r"invalid shape dimension -5",
        r"graph\.nodes\['view_jqqsw'\]: aten\.view\.default refuses the operands the program stores "
        r".*invalid shape dimension -5"),
    # sym_size(nonzero, 0) edited to dim 7: nonzero's [u1, 1] result has no example size, so the
    # meta re-run takes one from u1's range, and refuses in the fake kernel's very words
    "data_dependent_size": (
        "unbacked", _set_arg("sym_size_hrxmf", 1, {"as_int": 7}),
        IndexError, r"Dimension out of range \(expected to be in range of \[-2, 1\], but got 7\)",
        r"graph\.nodes\['sym_size_hrxmf'\]: aten\.sym_size\.int refuses the operands the program stores "
        r"\(a torch\.int64 \[u\d+, 1\] tensor, 7\): Dimension out of range"),
    # the embedding's table swapped for a bias vector: embedding's meta kernel refuses it with a bare
    # assert ("'weight' must be 2-D"), both on the fake values and on meta tensors of example sizes
    "python_meta_assert": (
        "tied_weights", _set_arg("embedding", 0, {"as_tensor": {"name": "p_body_bias"}}),
        RuntimeError, r"'weight' must be 2-D",
        r"graph\.nodes\['embedding'\]: aten\.embedding\.default refuses the operands the program stores "
        r".*'weight' must be 2-D"),
    # a full's layout argument edited from strided to mkldnn: its node stores a strided tensor, no
    # fake kernel makes an mkldnn one (fuzz seed 13, case 20279), and its CPU kernel refuses int32
    "layout_argument": (
        "flex_attention_aten", _set_arg("full_bskml", 3, {"as_layout": 6}),
        RuntimeError, r"get_mkldnn_dtype: unsupported data type",
        r"graph\.nodes\['full_bskml'\]: aten\.full\.default makes a tensor of layout torch\._mkldnn \(its argument "
        r"'layout'\), the node stores a torch\.strided tensor"),
    # the second convolution's stride edited to [2, 0]: conv2d's Python meta kernel divides by it
    # (a ZeroDivisionError, on fake and on meta tensors alike), its CPU kernel refuses it
    "python_meta_division": (
        "convnet_bn", _set_arg("conv2_conv2d", 3, {"as_ints": [2, 0]}),
        RuntimeError, r"non-positive stride is not supported",
        r"graph\.nodes\['conv2_conv2d'\]: aten\.conv2d\.default refuses the operands the program stores "
        r"\(.*\[2, 0\]\): non-positive stride"),
}


@pytest.mark.parametrize("case", sorted(RUN_TIME_EDITS))
def test_an_edit_that_fails_when_run_is_refused_with_propagation(case):
    fixture, edit, error, run_message, refusal = RUN_TIME_EDITS[case]
    data = rewrite_program(fixture, edit)
    loaded = serde.load(io.BytesIO(data))
    args, kwargs = loaded.example_inputs
    with pytest.raises(error, match=run_message):
        loaded.module()(*args, **kwargs)
    with pytest.raises(InconsistentProgramError, match=refusal):
        serde.load(io.BytesIO(data), propagate=True)
