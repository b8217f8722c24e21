"""What a kernel checks of its arguments that its fake kernel does not is refused at load.

Each case edits a real saved program the way the fuzzer's mutations did (an operand swapped for
another tensor of the program, an enum or an integer at a bound), shows that with the rule switched
off the program loads (mostly even with ``propagate=True``) and torch refuses it when it runs, and
that the load refuses it, naming the node and the argument.
"""

from __future__ import annotations

import io
from collections.abc import Callable

import pytest
import torch

import serde
from serde.bridge import graph as graph_reader
from serde.bridge.checks import check_kernel, hops, kernels
from serde.bridge.errors import InconsistentProgramError
from tests.serde.attacks._attack_kit import rewrite_artifact, rewrite_program


class Kernels(torch.nn.Module):
    def forward(self, x, n, z, b, w):
        sel = x.masked_select(x > 0)
        w64 = w.double()
        prod = x @ w64.float()  # its operand made from w64, so w64 comes first
        wide = x.to(torch.float64)  # export asserts x's metadata first
        k = torch.add(n, n, alpha=3) + torch.full((2,), 7, dtype=torch.int32)
        r = (torch.empty_like(z).random_(10) * 0 + torch.empty_like(z).uniform_(-1, 1) * 0
             + torch.randint(3, 10, (3,)) * 0 + torch.empty_like(z).normal_(0, 2) * 0)
        return sel, wide, k, r + z, b.logical_not(), prod, w64


def _inputs() -> tuple:
    torch.manual_seed(0)
    return (torch.randn(2, 4), torch.ones(2, dtype=torch.int32), torch.randn(3), torch.tensor([True, False, True]),
            torch.randn(4, 3))


@pytest.fixture(scope="module")
def saved() -> bytes:
    buf = io.BytesIO()
    serde.save(torch.export.export(Kernels(), _inputs()), buf)
    return buf.getvalue()


def _call(program: dict, target: str) -> dict:
    return next(n for n in program["graph_module"]["graph"]["nodes"] if n["target"] == f"torch.ops.aten.{target}")


def _arg(program: dict, target: str, name: str) -> dict:
    return next(na for na in _call(program, target)["inputs"] if na["name"] == name)["arg"]


# (edit, the node and argument the load names, what torch says when the edited program runs)
EDITS: dict[str, tuple[Callable[[dict], None], str, str]] = {
    "mask_dtype": (lambda p: _arg(p, "masked_select.default", "mask")["as_tensor"].update(name="x"),
                   r"nodes\['masked_select'\]: argument 'mask' .*torch.float32", "expected BoolTensor for mask"),
    "mask_shape": (lambda p: _arg(p, "masked_select.default", "mask")["as_tensor"].update(name="b"),
                   r"nodes\['masked_select'\]: argument 'mask' .*does not broadcast", "must match the size"),
    "asserted_dtype": (lambda p: _arg(p, "_assert_tensor_metadata.default", "dtype").update(as_scalar_type=8),
                       r"argument 'dtype' of aten._assert_tensor_metadata.default: asserts torch.float64",
                       "Tensor dtype mismatch"),
    # an integer where the schema says Layout or ScalarType: the kernel reads c10's numbering
    # (7 is jagged, and float64), which the dispatcher's matcher lets through (fuzz seed 14)
    "asserted_layout_number": (lambda p: _arg(p, "_assert_tensor_metadata.default", "layout").pop("as_layout")
                               and _arg(p, "_assert_tensor_metadata.default", "layout").update(as_int=7),
                               r"argument 'layout' of aten._assert_tensor_metadata.default: asserts torch.jagged, "
                               r"the operand is torch.strided", "Tensor layout mismatch"),
    "asserted_dtype_number": (lambda p: _arg(p, "_assert_tensor_metadata.default", "dtype").pop("as_scalar_type")
                              and _arg(p, "_assert_tensor_metadata.default", "dtype").update(as_int=7),
                              r"argument 'dtype' of aten._assert_tensor_metadata.default: asserts torch.float64, "
                              r"the operand is torch.float32", "Tensor dtype mismatch"),
    "fill_overflow": (lambda p: _arg(p, "full.default", "fill_value").update(as_int=-(2**63)),
                      r"argument 'fill_value' of aten.full.default: -9223372036854775808 does not fit the "
                      r"torch.int32", "without overflow"),
    "alpha_overflow": (lambda p: _arg(p, "add.Tensor", "alpha").update(as_int=2**40),
                       r"argument 'alpha' of aten.add.Tensor: 1099511627776 does not fit", "without overflow"),
    "alpha_bool": (lambda p: _arg(p, "add.Tensor", "alpha").pop("as_int") and _arg(p, "add.Tensor", "alpha").update(
                       as_bool=True), r"argument 'alpha' of aten.add.Tensor: a boolean alpha scales only a boolean "
                   r"result, and this one is torch.int32", "Boolean alpha only supported for Boolean results"),
    "matmul_dtypes": (lambda p: _arg(p, "matmul.default", "other")["as_tensor"].update(name=_double_of_w(p)),
                  r"argument 'other' of aten.matmul.default: it is torch.float64 and 'self' is torch.float32",
                  "expected m1 and m2 to have the same dtype"),
    "random_to": (lambda p: _arg(p, "random_.to", "to").update(as_int=0),
                  r"argument 'to' of aten.random_.to", "expects 'from' to be less than 'to'"),
    "uniform_from": (lambda p: _arg(p, "uniform_.default", "from").update(as_float=2.0),
                     r"argument 'to' of aten.uniform_.default: from=2.0 is not at most to=1.0", "uniform_ expects"),
    "randint_low": (lambda p: _arg(p, "randint.low", "low").update(as_int=10),
                    r"argument 'high' of aten.randint.low: low=10 is not below high=10", "expects 'from'"),
    "normal_std": (lambda p: _arg(p, "normal_.default", "std").update(as_float=-1.0),
                   r"argument 'std' of aten.normal_.default: -1.0 is outside", "std >= 0.0"),
}

def _double_of_w(program: dict) -> str:
    """w.double(): a float64 tensor of the shape matmul's ``other`` has, defined before the matmul."""
    other = _arg(program, "matmul.default", "other")["as_tensor"]["name"]
    node = next(n for n in program["graph_module"]["graph"]["nodes"] if n["target"] == "torch.ops.aten.to.dtype"
                and n["outputs"][0]["as_tensor"]["name"] == other)
    return node["inputs"][0]["arg"]["as_tensor"]["name"]


FAKE_CHECKS = frozenset({"normal_std", "randint_low"})


@pytest.mark.parametrize("edit", sorted(EDITS))
def test_torch_fails_at_run_time_and_the_load_refuses(edit, saved, monkeypatch):
    change, refusal, run_error = EDITS[edit]
    data = rewrite_artifact(saved, change)
    with pytest.raises(InconsistentProgramError, match=refusal):
        serde.load(io.BytesIO(data))
    # Without the rule the program loads, and fails inside torch when it runs. Propagation lets
    # it through too, but where torch's fake kernel makes the same check (its Python reference
    # for normal and randint does): the rule makes the default load refuse it.
    monkeypatch.setattr(kernels, "_RULES", {})
    monkeypatch.setattr(kernels, "_cpu_dtypes", lambda *a: None)  # (the CPU probe refuses matmul's dtypes too)
    if edit in FAKE_CHECKS:
        with pytest.raises(InconsistentProgramError, match="refuses the operands the program stores"):
            serde.load(io.BytesIO(data), propagate=True)
    loaded = serde.load(io.BytesIO(data), propagate=edit not in FAKE_CHECKS)
    with pytest.raises(RuntimeError, match=run_error):
        loaded.module()(*_inputs())


def test_the_unedited_program_loads_and_runs(saved):
    loaded = serde.load(io.BytesIO(saved), propagate=True)
    loaded.module()(*_inputs())


def test_check_kernel_takes_meta_tensors_and_numbers():
    # As the native loader's propagation calls it: values as they reach the kernel.
    x = torch.empty(2, 4, device="meta")
    check_kernel(torch.ops.aten.masked_select.default, (x, torch.empty(4, dtype=torch.bool, device="meta")), {}, "w")
    with pytest.raises(InconsistentProgramError, match=r"^w: argument 'mask' .*torch.uint8"):
        check_kernel(torch.ops.aten.masked_select.default, (x, torch.empty(4, dtype=torch.uint8, device="meta")), {},
                     "w")
    with pytest.raises(InconsistentProgramError, match=r"argument 'fill_value' .*torch.uint8"):
        check_kernel(torch.ops.aten.full.default, ([2], 256), {"dtype": torch.uint8}, "w")
    check_kernel(torch.ops.aten.full.default, ([2], 255), {"dtype": torch.uint8}, "w")
    # The probe of the CPU kernel's dtypes runs only when asked (the propagation passes ask).
    relu, bools = torch.ops.aten.relu.default, torch.empty(3, dtype=torch.bool, device="meta")
    assert kernels.kernel_refusal(relu, (x,), {}, probe=True) is None  # a dtype its CPU kernel implements
    check_kernel(relu, (bools,), {}, "w")
    assert "aten.relu.default on operands of dtypes bool" in kernels.kernel_refusal(relu, (bools,), {}, probe=True)


def _batch_dims(p: dict) -> list[dict]:
    return [n for n in p["graph_module"]["graph"]["nodes"]
            if n["target"] == "torch._functorch.predispatch._add_batch_dim"]


def _level(p: dict) -> None:
    _batch_dims(p)[0]["inputs"][2]["arg"]["as_int"] = 2**31


def _in_dim(p: dict) -> None:
    _batch_dims(p)[-1]["inputs"][1]["arg"]["as_int"] = -1


@pytest.mark.parametrize(("change", "refusal", "run_error", "switch_off"), [
    (_level, r"inputs\[2\]: vmap level 2147483648, but only 1 level\(s\) are open", "INTERNAL ASSERT",
     "check_vmap_nesting"),
    (_in_dim, r"outputs: _add_batch_dim of a torch.float32 \[2, 3\] tensor at dim -1", "must match the size",
     "check_batch_dim_result"),
], ids=["vmap_level", "batch_dim"])
def test_associative_scan_batch_dims(change, refusal, run_error, switch_off, monkeypatch):
    data = rewrite_program("associative_scan", change)
    with pytest.raises(InconsistentProgramError, match=refusal):
        serde.load(io.BytesIO(data))
    monkeypatch.setattr(graph_reader, switch_off, lambda *a, **k: None)
    # (the batch size check of the vmap levels refuses the moved batch dim too)
    monkeypatch.setattr(hops, "_check_batch_size", lambda *a, **k: None)
    loaded = serde.load(io.BytesIO(data), propagate=True)
    args, kwargs = loaded.example_inputs
    try:
        with pytest.raises(RuntimeError, match=run_error):
            loaded.module()(*args, **kwargs)
    finally:
        # a failure inside a vmap level skips the graph's own decrement
        while torch._C._functorch.maybe_current_level() is not None:
            torch._C._functorch._vmap_decrement_nesting()


# ---------------------------------------------------------------- the dtypes a CPU kernel implements


class Dtypes(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln = torch.nn.LayerNorm(4)
        self.register_buffer("h16", torch.ones(4, dtype=torch.float16))

    def forward(self, x, b, i):
        first, second = torch.split(x, [1, 1])
        return self.ln(x).relu(), self.h16 * 2, b.logical_not(), i & i, first + second


def _dtype_inputs() -> tuple:
    torch.manual_seed(0)
    return torch.randn(2, 4), torch.rand(2, 4) > 0.5, torch.arange(8, dtype=torch.int32).reshape(2, 4)


@pytest.fixture(scope="module")
def saved_dtypes() -> bytes:
    buf = io.BytesIO()
    serde.save(torch.export.export(Dtypes(), _dtype_inputs()), buf)
    return buf.getvalue()


def _operand(target: str, name: str, to: str) -> Callable[[dict], None]:
    return lambda p: _arg(p, target, name)["as_tensor"].update(name=to)


# An operand swapped for another tensor of the program of the same shape (and so of the same
# stored result shape), which the CPU kernel refuses for its dtype:
# (edit, the load's refusal, what torch says when the edited program runs)
DTYPE_EDITS: dict[str, tuple[Callable[[dict], None], str, str]] = {
    "relu_of_bool": (_operand("relu.default", "self", "b"), r"nodes\['relu'\]: aten.relu.default on operands of "
                     r"dtypes bool: its CPU kernel refuses them \(Boolean inputs not supported for relu\)",
                     "Boolean inputs not supported for relu"),
    "norm_weight_half": (_operand("layer_norm.default", "weight", "b_h16"),
                         r"nodes\['layer_norm'\]: aten.layer_norm.default on operands of dtypes float32, float16, "
                         r"float32: .*mixed dtype", "mixed dtype"),
    "and_of_floats": (_operand("__and__.Tensor", "other", "x"), r"aten.__and__.Tensor on operands of dtypes "
                      r"int32, float32: .*\"bitwise_and_cpu\" not implemented for 'Float'", "not implemented for"),
    "split_size_not_concrete": (lambda p: _arg(p, "split_with_sizes.default", "split_sizes").update(
                                    as_ints=[-(2**63), 1]),
                                r"argument 'split_sizes' of aten.split_with_sizes.default: -9223372036854775808 is "
                                r"below -2\*\*62", "expected to contain only concrete integers"),
}


@pytest.mark.parametrize("edit", sorted(DTYPE_EDITS))
def test_a_dtype_the_cpu_kernel_refuses_is_refused_at_load(edit, saved_dtypes, monkeypatch):
    change, refusal, run_error = DTYPE_EDITS[edit]
    data = rewrite_artifact(saved_dtypes, change)
    with pytest.raises(InconsistentProgramError, match=refusal):
        serde.load(io.BytesIO(data), propagate=True)
    if edit == "split_size_not_concrete":  # the SymInt check is cheap: the default load makes it too
        with pytest.raises(InconsistentProgramError, match=refusal):
            serde.load(io.BytesIO(data))
    # Without the probe (and the SymInt check) the program loads, and its CPU kernel refuses it when it runs.
    monkeypatch.setattr(kernels, "_cpu_dtypes", lambda *a: None)
    monkeypatch.setattr(kernels, "_symint_refusal", lambda *a: None)
    loaded = serde.load(io.BytesIO(data))
    with pytest.raises(RuntimeError, match=run_error):
        loaded.module()(*_dtype_inputs())


def test_the_unedited_dtypes_program_loads_and_runs(saved_dtypes):
    loaded = serde.load(io.BytesIO(saved_dtypes), propagate=True)
    loaded.module()(*_dtype_inputs())


def test_the_sweep_lists_what_the_probe_decides():
    # The sweep's verdict on one call (a float relu made bool): a disagreement of the CPU and meta
    # kernels, which kernel_refusal refuses, and does not without the probe.
    from tests.serde.bridge.kernel_sweep import Call, sweep

    relu = Call(torch.ops.aten.relu.default, (torch.empty(2, 3, device="meta"),), {}, "relu")
    found = {(d.now, d.refused) for d in sweep([relu])}
    assert (torch.bool, True) in found, found
    assert all(refused for _, refused in found), found


@pytest.mark.slow  # exports the corpus and runs about 3,000 calls on CPU and meta: a minute
def test_no_operator_of_the_corpus_has_a_cpu_dtype_refusal_the_load_misses():
    from tests.serde.bridge.kernel_sweep import sweep

    found = sweep()
    assert found, "the sweep found no disagreement at all: it no longer reaches the kernels"
    missed = [d for d in found if not d.refused]
    assert not missed, "\n".join(f"{d.op} {d.argument} {d.was}->{d.now}: {d.message}" for d in missed)


def test_the_probe_leaves_the_callers_random_stream_as_it_was(saved, monkeypatch):
    # Kernels' random_, uniform_ and normal_ are probed on CPU: the default generator is restored.
    monkeypatch.setattr(kernels, "_PROBE_CACHE", {})
    torch.manual_seed(1)
    want = torch.rand(4)
    torch.manual_seed(1)
    serde.load(io.BytesIO(saved), propagate=True)
    assert any(key[0] == torch.ops.aten.uniform_.default for key in kernels._PROBE_CACHE)
    assert torch.equal(torch.rand(4), want)


# ---------------------------------------------------------------- sizes and arguments the CPU kernel checks


def _conv_stride(p: dict) -> None:
    _node(p, "conv1_conv2d")["inputs"][3]["arg"] = {"as_ints": [-129, 1]}


def _conv_bias(p: dict) -> None:
    _node(p, "conv2_conv2d")["inputs"][2]["arg"] = {"as_tensor": {"name": "p_conv1_bias"}}  # 8 for 16 channels


def _node(p: dict, name: str) -> dict:
    return next(n for n in p["graph_module"]["graph"]["nodes"] if n["name"] == name)


@pytest.mark.parametrize(("change", "refusal"), [
    (_conv_stride, r"nodes\['conv1_conv2d'\]: aten\.conv2d\.default on operands of sizes \[2, 3, 16, 16\], "
                   r"\[8, 3, 3, 3\], \[8\]: its CPU kernel refuses them \(non-positive stride is not supported\)"),
    (_conv_bias, r"nodes\['conv2_conv2d'\]: aten\.conv2d\.default on operands of sizes .*: its CPU kernel refuses "
                 r"them \(Given weight of size \[16, 8, 3, 3\], expected bias to be 1-dimensional with 16 elements"),
], ids=["conv_stride", "conv_bias"])
def test_a_size_or_argument_only_the_cpu_kernel_refuses_is_refused_with_propagation(change, refusal):
    # Both fit every stored meta, and the meta kernel of conv2d takes them: the CPU kernel, probed at
    # the call's own sizes on two fillings, refuses them in the same words; so does the program, run.
    data = rewrite_program("convnet_bn", change)
    loaded = serde.load(io.BytesIO(data))
    args, kwargs = loaded.example_inputs
    with pytest.raises(RuntimeError, match=r"non-positive stride|expected bias"):
        loaded.module()(*args, **kwargs)
    with pytest.raises(InconsistentProgramError, match=refusal):
        serde.load(io.BytesIO(data), propagate=True)



@pytest.mark.parametrize("dropout", ["nan", -0.25, 1.5])  # (the format spells non-finite floats as text)
def test_attention_dropout_outside_a_probability_is_refused(dropout):
    # NaN or a negative dropout sends the CPU kernel to its flash path, which refuses it (fuzz
    # seed 14, case 46977); past 1 the kernel refuses it itself (and so does its fake kernel, which
    # propagate=True runs: without the rule, the default load takes all three).
    def change(p: dict) -> None:
        node = next(n for n in p["graph_module"]["graph"]["nodes"] if n["name"] == "scaled_dot_product_attention")
        next(na for na in node["inputs"] if na["name"] == "dropout_p")["arg"] = {"as_float": dropout}

    data = rewrite_program("transformer_block", change)
    with pytest.raises(InconsistentProgramError, match=r"nodes\['scaled_dot_product_attention'\]: argument 'dropout_p' "
                                                       r"of aten.scaled_dot_product_attention.default: .* is outside \[0, 1\]"):
        serde.load(io.BytesIO(data))
    with pytest.MonkeyPatch.context() as m:
        m.setattr(kernels, "_RULES", {})
        loaded = serde.load(io.BytesIO(data))
    args, kwargs = loaded.example_inputs
    with pytest.raises(RuntimeError, match=r"dropout"):
        loaded.module()(*args, **kwargs)
