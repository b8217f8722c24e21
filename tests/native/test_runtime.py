"""The reference runtime against eager ``ep.module()`` on the zoo and breadth zoo."""

from __future__ import annotations

import copy

import pytest
import torch
from torch.export import Dim

from native.errors import InputMismatchError, NativeRuntimeError
from native.format import program as P
from native.run.runtime import Method
from tests.native._native_util import (
    CASES,
    FAST,
    UNSUPPORTED,
    assert_runs_like_eager,
    edited,
    emit_ep,
    emitted,
    exported,
    inputs_of,
)
from tests.tiers import tiered

SUPPORTED = [n for n in CASES if n not in UNSUPPORTED]


def _params(names):
    return tiered(names, [n for n in FAST if n in names])


@pytest.mark.parametrize("arena", [False, True], ids=["heap", "arena"])
@pytest.mark.parametrize("name", _params(SUPPORTED))
def test_zoo_case_runs_like_eager(name, arena):
    ep = exported(name)  # every supported case exports (test_corpus runs all of them)
    assert_runs_like_eager(ep, emitted(name), inputs_of(name), arena=arena)


@pytest.mark.parametrize("name", [n for n in ("mlp", "transformer_block", "dynamic_arith", "cond") if n in CASES])
def test_dynamic_models_run_at_several_sizes(name):
    inputs = inputs_of(name)
    sizes = {tuple(tuple(t.shape) for t in args if isinstance(t, torch.Tensor)) for args, _ in inputs}
    assert len(sizes) >= 2, f"{name} must be exercised at two or more sizes, got {sizes}"
    assert_runs_like_eager(exported(name), emitted(name), inputs)


def _branch_points(p: P.Program) -> list[tuple[int, int]]:
    """(fall-through, jump target) of each conditional forward jump."""
    out = []
    for pc, ins in enumerate(p.instructions):
        if isinstance(ins, P.JumpFalseCall) and ins.target > pc:
            c = p.values[ins.cond]
            if not (isinstance(c, P.Bool) and not c.v):
                out.append((pc + 1, ins.target))
    return out


@pytest.mark.parametrize("name", ["cond", "cond_nested"])
def test_cond_runs_down_both_branches(name):
    native = emitted(name)
    points = _branch_points(native.program)
    assert points, "a cond must become a conditional jump"
    m = assert_runs_like_eager(exported(name), native, inputs_of(name))
    for fall, target in points:
        assert fall in m.executed and target in m.executed, (
            f"branch at {fall - 1}: true side ran={fall in m.executed}, false side ran={target in m.executed}")


def test_cond_on_size_predicate_both_ways():
    class M(torch.nn.Module):
        def forward(self, x):
            return torch.cond(x.shape[0] > 4, lambda x: x * 2, lambda x: x.sum(0, keepdim=True).expand_as(x) + 0,
                              (x,))

    ep = torch.export.export(M(), (torch.randn(6, 3),), dynamic_shapes=({0: Dim("n", min=2, max=20)},))
    native = emit_ep(ep)
    m = assert_runs_like_eager(ep, native, [((torch.randn(6, 3),), {}), ((torch.randn(3, 3),), {})])
    for fall, target in _branch_points(native.program):
        assert fall in m.executed and target in m.executed


def test_buffer_mutations_persist_across_runs_like_eager():
    # signature_kinds_aten adds y.mean(0) to a buffer on every call: three runs accumulate.
    name = "signature_kinds_aten"
    args, kwargs = inputs_of(name)[0]
    m = assert_runs_like_eager(exported(name), emitted(name), [(args, kwargs)] * 3)
    assert m.state_dict()["running"].abs().sum() > 0
    # The program's own constants are untouched: a fresh method starts from the saved values.
    assert torch.equal(Method(emitted(name)).state_dict()["running"], exported(name).state_dict["running"])


def test_user_input_mutation_writes_the_callers_tensor():
    name = "input_mutation_aten"
    (x, acc), _ = inputs_of(name)[0]
    acc = acc.clone()
    before = acc.clone()
    Method(emitted(name)).run(x, acc)
    torch.testing.assert_close(acc, before + x.sum(0))


def test_identical_buffers_share_a_constant_but_not_memory():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("a", torch.ones(4))
            self.register_buffer("b", torch.ones(4))

        def forward(self, x):
            self.a.add_(x)
            return x + self.b

    ep = torch.export.export(M(), (torch.randn(4),))
    native = emit_ep(ep)
    assert len(native.program.constants) == 1, "equal bytes are stored once"
    x = torch.randn(4)
    m = assert_runs_like_eager(ep, native, [((x,), {}), ((x,), {})])
    torch.testing.assert_close(m.state_dict()["a"], 1 + 2 * x)
    torch.testing.assert_close(m.state_dict()["b"], torch.ones(4))


# ---------------------------------------------------------------- input checks


def test_input_checks_name_what_is_wrong():
    m = Method(emitted("mlp"))  # x: f32[s0, 16], s0 in [1, 32]
    with pytest.raises(InputMismatchError, match=r"input 'x' dimension 0 is 40, so s0 = 40, outside its allowed "
                                                 r"range \[1, 32\]"):
        m.run(torch.randn(40, 16))
    with pytest.raises(InputMismatchError, match=r"input 'x': dimension 1 is 15 but the program requires 16"):
        m.run(torch.randn(3, 15))
    with pytest.raises(InputMismatchError, match=r"input 'x': expected dtype torch.float32, got torch.float64"):
        m.run(torch.randn(3, 16, dtype=torch.float64))
    with pytest.raises(InputMismatchError, match=r"input 'x': expected 2 dimensions, got 1"):
        m.run(torch.randn(16))
    with pytest.raises(InputMismatchError, match=r"the program takes 1 inputs \(x\), got 2"):
        m.run_flat([torch.randn(3, 16), torch.randn(3, 16)])
    with pytest.raises(InputMismatchError, match=r"the inputs have structure"):
        m.run(torch.randn(3, 16), extra=1)


def test_constant_inputs_must_match_the_exported_value():
    name = "signature_kinds_aten"
    (x, k, flag, alpha, mode), kwargs = inputs_of(name)[0]
    m = Method(emitted(name))
    m.run(x, k, flag, alpha, mode, **kwargs)
    with pytest.raises(InputMismatchError, match=r"input 'k': the program was exported for the constant 3, got 4"):
        m.run(x, 4, flag, alpha, mode, **kwargs)


def test_affine_symbol_binding_checks_divisibility():
    m = Method(emitted("dynamic_arith"))  # x: [2*s0, 8], y: [4*s0, 8]
    with pytest.raises(InputMismatchError, match=r"input 'x' dimension 0 is 7, which is not 2\*s0 \+ 0"):
        m.run(torch.randn(7, 8), torch.randn(14, 8))
    with pytest.raises(InputMismatchError, match=r"input 'y': dimension 0 is 12 but the program requires 20"):
        m.run(torch.randn(10, 8), torch.randn(12, 8))


@pytest.mark.parametrize("dim, msg", [(5, r"input 'x' dimension 5: the input has no such dimension"),
                                      (-1, r"input 'x': expected an int, got Tensor")])
def test_a_symbol_bound_to_a_dimension_the_input_lacks_is_refused_on_every_engine(dim, msg):
    # A file may bind a symbol to any input and dimension; the inputs pass their own checks.
    import msgspec

    from native.format.verify import decode
    from native.run import cpp_engine

    native = emitted("mlp")
    symbols = [msgspec.structs.replace(s, dim=dim) for s in native.program.symbols]
    hostile = decode(edited(native, symbols=symbols))
    x = torch.randn(3, 16)
    for arena in (False, True):
        with pytest.raises(InputMismatchError, match=msg):
            Method(hostile, arena=arena).run(x)
    if cpp_engine.available():
        with pytest.raises(InputMismatchError, match=msg):
            cpp_engine.load(hostile.encode()).run(x)


# ---------------------------------------------------------------- the harness catches mistakes


def _without(p: P.Program, pc: int) -> P.Program:
    ins = list(p.instructions)
    del ins[pc]
    shifted = [P.JumpFalseCall(i.cond, i.target - (i.target > pc)) if isinstance(i, P.JumpFalseCall) else i
               for i in ins]
    return P.Program(**{**{f: getattr(p, f) for f in p.__struct_fields__}, "instructions": shifted,
                        "memory_plan": P.MemoryPlan()})


def test_check_mode_reports_a_missing_free():
    native = emitted("mlp")
    pc = next(i for i, ins in enumerate(native.program.instructions) if isinstance(ins, P.FreeCall))
    broken = P.NativeProgram(_without(native.program, pc), native.segment)
    args, _ = inputs_of("mlp")[0]
    Method(broken).run(*args)  # a leak is harmless without checks
    with pytest.raises(NativeRuntimeError, match=r"is still alive after the last instruction: a FreeCall is missing"):
        Method(broken, check=True).run(*args)


def test_check_mode_reports_a_use_after_free():
    native = emitted("mlp")
    p = native.program
    # Free the first kernel's result right after it is written, before its reader runs.
    first = p.instructions[0]
    early = list(p.instructions)
    early.insert(1, P.FreeCall(first.outs[0]))
    broken = P.Program(**{**{f: getattr(p, f) for f in p.__struct_fields__}, "instructions": early,
                          "memory_plan": P.MemoryPlan()})
    args, _ = inputs_of("mlp")[0]
    with pytest.raises(NativeRuntimeError, match=r"value \d+ is read after it was freed"):
        Method(P.NativeProgram(broken, native.segment), check=True).run(*args)


def test_check_mode_reports_wrong_declared_sizes():
    native = emitted("mlp")
    p = native.program
    first = p.instructions[0]
    values = list(p.values)
    t = values[first.outs[0]]
    values[first.outs[0]] = P.Tensor(t.dtype, [t.sizes[0], 31], t.strides, t.storage_offset)
    broken = P.Program(**{**{f: getattr(p, f) for f in p.__struct_fields__}, "values": values,
                          "memory_plan": P.MemoryPlan()})
    args, _ = inputs_of("mlp")[0]
    with pytest.raises(NativeRuntimeError, match=r"instruction 0 \(aten::linear.default, node .fc1_linear. in module .fc1.\): value \d+ has sizes "
                                                 r"\[8, 32\], declared \[8, 31\]"):
        Method(P.NativeProgram(broken, native.segment), check=True).run(*args)


def test_kernel_failures_name_the_instruction():
    native = emitted("mlp")
    p = native.program
    values = list(p.values)
    w = p.state[0].value  # fc1.weight [32, 16] -> view it as [16, 32]
    t = values[w]
    values[w] = P.Tensor(t.dtype, [16, 32], [32, 1], t.storage_offset, t.data)
    broken = P.Program(**{**{f: getattr(p, f) for f in p.__struct_fields__}, "values": values})
    args, _ = inputs_of("mlp")[0]
    with pytest.raises(NativeRuntimeError, match=r"instruction 0 \(aten::linear.default, node 'fc1_linear' in module 'fc1'\) failed: "
                                                 r"RuntimeError"):
        Method(P.NativeProgram(broken, native.segment)).run(*copy.deepcopy(args))


@pytest.mark.parametrize("arena", [False, True], ids=["heap", "arena"])
@pytest.mark.parametrize("name", ["chain_200", "transformer_block", "cond", "map", "signature_kinds_aten"])
def test_fast_paths_without_checks(name, arena):
    # check=False takes the fused closures (frees folded into kernels, static arena views).
    assert_runs_like_eager(exported(name), emitted(name), inputs_of(name) * 2, arena=arena, check=False)


def test_auto_functionalized_v1_and_effect_tokens():
    from unittest import mock

    import torch._export.config as export_config

    from serde.testing import zoo

    name = "effects_and_mutation_aten"
    with mock.patch.object(export_config, "enable_auto_functionalized_v2_for_export", False):
        ep = zoo.export_case(CASES[name])
    targets = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    assert any("auto_functionalized" in t and "v2" not in t for t in targets) and any("with_effects" in t for t in targets)
    assert_runs_like_eager(ep, emit_ep(ep), inputs_of(name) * 2, arena=True)


class _Endless(torch.nn.Module):
    """A while_loop whose condition never becomes false (export traces it without running it)."""

    def forward(self, i, x):
        from torch._higher_order_ops.while_loop import while_loop

        return while_loop(lambda i, x: i >= 0, lambda i, x: (i + 1, x + 1), (i, x))


def test_a_loop_that_never_ends_fails_instead_of_hanging():
    ep = torch.export.export(_Endless(), (torch.tensor(0), torch.zeros(2)))
    method = Method(emit_ep(ep), max_loop_instructions=1000)
    with pytest.raises(NativeRuntimeError, match="loops ran more than 1000 instructions in this run"):
        method.run(torch.tensor(0), torch.zeros(2))


def test_loop_budget_charges_each_iteration_its_loop_length_and_resets_per_run():
    ep = exported("while_loop")  # i < 5: five iterations from i = 0, two from i = 3
    native = emitted("while_loop")
    (length,) = [pc - ins.target + 1 for pc, ins in enumerate(native.program.instructions)
                 if isinstance(ins, P.JumpFalseCall) and ins.target <= pc]
    assert length > 1
    method = Method(native, max_loop_instructions=5 * length)
    x = torch.ones(3)
    for _ in range(2):  # the budget is per run
        torch.testing.assert_close(method.run(torch.tensor(0), x), ep.module()(torch.tensor(0), x))
    with pytest.raises(NativeRuntimeError, match=f"more than {5 * length - 1} instructions"):
        Method(native, max_loop_instructions=5 * length - 1).run(torch.tensor(0), x)
    assert Method(native, max_loop_instructions=None).run(torch.tensor(3), x)[0] == 5


def test_batch_norm_statistics_get_their_own_memory_in_training_mode():
    # A fresh BatchNorm's weight and running_var are equal bytes (ones), as are its bias and
    # running_mean (zeros): one blob each in the segment. batch_norm updates the statistics in place
    # without its schema saying so; they must be private state, or the update lands in the weights.
    torch.manual_seed(0)
    ep = torch.export.export(torch.nn.BatchNorm1d(4).train(), (torch.randn(8, 4),), strict=False)
    native = emit_ep(ep)
    mutable = {s.name for s in native.program.state if s.mutable}
    assert {"running_mean", "running_var", "num_batches_tracked"} <= mutable
    assert not mutable & {"weight", "bias"}
    m = assert_runs_like_eager(ep, native, [((torch.randn(8, 4),), {}), ((torch.randn(8, 4) * 3,), {})])
    assert torch.equal(m.state_dict()["weight"], torch.ones(4))
