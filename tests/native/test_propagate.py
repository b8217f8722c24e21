"""``native.load(..., propagate=True)``: each kernel call run on meta tensors of its declared operands.

Each edit below is a real header edit of a real emitted program, of the kinds the fuzzer makes (a
call's op swapped, an operator argument, a value's dtype or size, a size expression): the plain
load of both engines accepts it, and most fail only when run. The pass refuses each at load, in
both engines, naming the instruction, node, operator and operand. And it refuses no program the
emitter writes: every zoo and breadth program and every frozen fixture passes it in both engines.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
import torch

import native
from native.errors import NativeRuntimeError, PropagationError
from native.format import program as P
from native.run import cpp_engine
from serde import load
from serde.core import schema
from tests.native._native_util import CASES, FAST, UNSUPPORTED, edited, emitted

_FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "v2.6"
_CPP = pytest.mark.skipif(not cpp_engine.available(),
                          reason=f"the C++ runtime is not built: {cpp_engine.unavailable_reason()}")
_ENGINES = ["python", pytest.param("cpp", marks=_CPP)]
_EDITED = "the file was edited after it was written, or written by another tool"


def _emitted(name: str, plan: bool = True) -> tuple[P.NativeProgram, tuple, dict]:
    path = _FIXTURES / name / "model.pt2s"
    args, kwargs = load(path).example_inputs
    return native.emit_artifact(path, plan=plan), args, kwargs


def _call(p: P.Program, op: str, node: str | None = None) -> tuple[int, P.KernelCall]:
    """The first call of ``op`` (``aten::linear``), of the node ``node`` when given."""
    for pc, ins in enumerate(p.instructions):
        if isinstance(ins, P.KernelCall) and p.operators[ins.op].name == op and (
                node is None or p.debug_handles[p.instruction_handles[pc]].node == node):
            return pc, ins
    raise AssertionError(f"no call of {op}")


def _op(p: P.Program, name: str) -> int:
    return next(k for k, op in enumerate(p.operators) if op.name == name)


def _swapped(good: P.NativeProgram, pc: int, op: int) -> bytes:
    ins = good.program.instructions[pc]
    instructions = list(good.program.instructions)
    instructions[pc] = P.KernelCall(op, ins.args, ins.outs, ins.out_op)
    return edited(good, instructions=instructions)


def _with_value(good: P.NativeProgram, i: int, **changes) -> bytes:
    values = list(good.program.values)
    values[i] = msgspec.structs.replace(values[i], **changes)
    return edited(good, values=values)


def _refused(bad: bytes, engine: str, message: str, *, fails_when_run: tuple | None = None) -> None:
    """The plain load accepts ``bad`` (and, given inputs, its run fails); propagate=True refuses it."""
    method = native.load(bad, engine=engine)
    if fails_when_run is not None:
        args, kwargs = fails_when_run
        with pytest.raises(NativeRuntimeError):
            method.run(*args, **kwargs)
    with pytest.raises(PropagationError, match=message) as e:
        native.load(bad, engine=engine, propagate=True)
    assert _EDITED in str(e.value)


@pytest.mark.parametrize("engine", _ENGINES)
def test_a_call_swapped_to_an_op_whose_kernel_refuses_the_operands_is_refused(engine: str) -> None:
    good, args, kwargs = _emitted("convnet_bn")
    p = good.program
    pc, ins = _call(p, "aten::linear")
    bad = _swapped(good, pc, _op(p, "aten::conv2d"))
    _refused(bad, engine, rf"instructions\[{pc}\] \(aten::conv2d\.default, node 'linear' in module 'head'\): the "
                          rf"kernel refuses the declared operands \(args\[0\] = value {ins.args[0]}, torch\.float32 "
                          r"\[2, 16\]; .*\): Expected 3D \(unbatched\) or 4D \(batched\) input to conv2d",
             fails_when_run=(args, kwargs))


@pytest.mark.parametrize("engine", _ENGINES)
def test_an_operator_argument_edited_so_the_kernel_refuses_is_refused(engine: str) -> None:
    # reshape(x, [s0, 2, 8]) of a [2*s0, 8] tensor, its 8 edited to 3
    good, args, kwargs = _emitted("dynamic_arith")
    p = good.program
    pc, ins = _call(p, "aten::reshape")
    eight = next(item for item in p.values[ins.args[1]].items if p.values[item] == P.Int(8))
    assert sum(eight in c.args for c in p.instructions if isinstance(c, P.KernelCall)) == 0  # only in the list
    bad = _with_value(good, eight, v=3)
    _refused(bad, engine, rf"instructions\[{pc}\] \(aten::reshape\.default, node 'reshape'\): the kernel refuses "
                          r"the declared operands .*: shape '\[2, 2, 3\]' is invalid for input of size 32",
             fails_when_run=(args, kwargs))


@pytest.mark.parametrize("engine", _ENGINES)
def test_a_size_op_computing_another_number_than_declared_is_refused(engine: str) -> None:
    # s0 = (2*s0) // 2 swapped to (2*s0) * 2: the reshape after it fails when run
    good, args, kwargs = _emitted("dynamic_arith")
    p = good.program
    pc, ins = _call(p, "symbolic::floordiv")
    bad = _swapped(good, pc, _op(p, "symbolic::mul"))
    _refused(bad, engine, rf"instructions\[{pc}\] \(symbolic::mul\.default, node 'floordiv'\): it computes 8 from "
                          rf"4, 2, the program declares value {ins.outs[0]} = expression \d+, which is 2 \(at s0=2\)",
             fails_when_run=(args, kwargs))


@pytest.mark.parametrize("engine", _ENGINES)
def test_a_result_dtype_other_than_the_kernels_in_a_cond_branch_is_refused(engine: str) -> None:
    # (without a plan: the plan check refuses an edit of a planned tensor's dtype or sizes already)
    good, _, _ = _emitted("cond", plan=False)
    p = good.program
    pc, ins = _call(p, "aten::relu")
    bad = _with_value(good, ins.outs[0], dtype=int(schema.ScalarType.DOUBLE))
    _refused(bad, engine, rf"instructions\[{pc}\] \(aten::relu\.default, node 'relu'\): the kernel returns a "
                          rf"torch\.float32 \[1, 6\] tensor, the program declares value {ins.outs[0]} torch\.float64 "
                          r"\[e0, 6\]")


@pytest.mark.parametrize("engine", _ENGINES)
def test_a_size_that_agrees_only_at_the_lower_bound_is_refused_at_the_second_point(engine: str) -> None:
    # [s0, 6] edited to [1, 6]: s0's lower bound is 1, so only the point above it tells them apart
    good, _, _ = _emitted("cond", plan=False)
    p = good.program
    assert p.symbols[0].min == 1
    pc, ins = _call(p, "aten::relu")
    bad = _with_value(good, ins.outs[0], sizes=[1, 6])
    _refused(bad, engine, rf"instructions\[{pc}\] \(aten::relu\.default, node 'relu'\): the kernel returns a "
                          rf"torch\.float32 \[4, 6\] tensor, the program declares value {ins.outs[0]} torch\.float32 "
                          r"\[1, 6\], 1 at dimension 0 \(at s0=4\)")


@pytest.mark.parametrize("engine", _ENGINES)
def test_a_result_size_in_a_loop_body_is_refused(engine: str) -> None:
    # scan's body selects row i of xs ([4, 3]); i is the loop counter, which the pass passes as 0
    good, _, _ = _emitted("scan")
    p = good.program
    pc, ins = _call(p, "aten::select")
    assert isinstance(p.values[ins.args[2]], P.SymInt) and p.values[ins.args[2]].expr < 0
    bad = _with_value(good, ins.outs[0], sizes=[4])
    _refused(bad, engine, rf"instructions\[{pc}\] \(aten::select\.int, node 'scan'\): the kernel returns a "
                          rf"torch\.float32 \[3\] tensor, the program declares value {ins.outs[0]} torch\.float32 "
                          r"\[4\], 4 at dimension 0")


@pytest.mark.parametrize("engine", _ENGINES)
@pytest.mark.parametrize(("offset", "at"), [(2, 2), (9, 9)])  # zero at the lower bound, and further up
def test_a_size_expression_dividing_by_zero_within_the_ranges_is_refused(engine: str, offset: int, at: int) -> None:
    good, _, _ = _emitted("dynamic_arith")
    p = good.program
    assert p.symbols[0].min == 2 and p.exprs[2] == [1, 0]  # e2 = s0
    exprs = list(p.exprs)
    exprs[2] = [1, 0, 1, 0, 0, -offset, 2, 2, 4]  # s0 // (s0 - offset)
    _refused(edited(good, exprs=exprs), engine,
             rf"exprs\[2\]: expression 2 divides by zero at s0={at}, which inputs within the symbols' ranges and "
             "guards realize")


@pytest.mark.parametrize("engine", _ENGINES)
def test_a_guard_dividing_by_zero_for_every_input_is_refused(engine: str) -> None:
    # The class of a size_overflow edit the fuzzer made: a guard's divisor (2*s0) // 2 with its 2
    # edited to 2**40, zero for every s0 in range; every run was refused by a division by zero.
    good, args, kwargs = _emitted("dynamic_arith")
    p = good.program
    exprs = list(p.exprs)
    g = p.guards[0]
    exprs[g] = [1, 0, 1, 0, 0, 1 << 40, 4, 5, 0, 0, 9]  # s0 % (s0 // 2**40) == 0
    bad = edited(good, exprs=exprs)
    method = native.load(bad, engine=engine)
    with pytest.raises(NativeRuntimeError, match="divides by zero"):
        method.run(*args, **kwargs)
    _refused(bad, engine, rf"guards\[0\]: expression {g} divides by zero at s0=2")


def test_a_program_object_is_checked_for_the_cpp_engine_too() -> None:
    good, _, _ = _emitted("cond", plan=False)  # (a plan sized for float32 would be refused first)
    _, ins = _call(good.program, "aten::relu")
    bad = P.NativeProgram(msgspec.structs.replace(good.program, values=[
        msgspec.structs.replace(v, dtype=int(schema.ScalarType.DOUBLE)) if i == ins.outs[0] else v
        for i, v in enumerate(good.program.values)]), good.segment)
    with pytest.raises(PropagationError, match="torch.float64"):
        native.load(bad, propagate=True)
    if cpp_engine.available():
        with pytest.raises(PropagationError, match="torch.float64"):
            native.load(bad, engine="cpp", propagate=True)


# ---------------------------------------------------------------- no false refusal


def _supported(names) -> list[str]:
    return [n for n in names if n not in UNSUPPORTED]


@pytest.mark.parametrize("engine", _ENGINES)
@pytest.mark.parametrize("name", _supported(FAST))
def test_zoo_programs_pass(name: str, engine: str) -> None:
    data = emitted(name).encode()
    native.load(data, engine=engine, propagate=True)


@pytest.mark.slow
@pytest.mark.parametrize("engine", _ENGINES)
@pytest.mark.parametrize("name", _supported(n for n in sorted(CASES) if n not in FAST))
def test_every_zoo_and_breadth_program_passes(name: str, engine: str) -> None:
    native.load(emitted(name).encode(), engine=engine, propagate=True)


@pytest.mark.parametrize("engine", _ENGINES)
@pytest.mark.parametrize("name", sorted(p.name for p in _FIXTURES.iterdir() if (p / "model.pt2s").exists()))
def test_every_fixture_program_passes(name: str, engine: str) -> None:
    try:
        good, args, kwargs = _emitted(name)
    except Exception as e:  # noqa: BLE001 -- only the emitter's documented refusals
        assert name in ("associative_scan", "flex_attention_aten"), e
        return
    method = native.load(good.encode(), engine=engine, propagate=True)
    with torch.no_grad():
        method.run(*args, **kwargs)


@pytest.mark.parametrize("engine", _ENGINES)
def test_a_split_into_another_number_of_tensors_than_declared_is_refused(engine: str) -> None:
    # qkv.split(32, -1) of a [.., 96] tensor into 3, its split size edited to the table's 1: 96 tensors
    good, args, kwargs = _emitted("transformer_block")
    p = good.program
    pc, ins = _call(p, "aten::split")
    calls = list(p.instructions)
    calls[pc] = msgspec.structs.replace(ins, args=[ins.args[0], p.values.index(P.Int(1)), *ins.args[2:]])
    bad = edited(good, instructions=calls)
    _refused(bad, engine, rf"instructions\[{pc}\] \(aten::split\.Tensor, node 'split'\): the kernel returns 96 "
                          rf"values, the program declares value {ins.outs[0]} a list of 3",
             fails_when_run=(args, kwargs))


@pytest.mark.parametrize("engine", _ENGINES)
def test_strides_no_storage_can_have_are_no_verdict(engine: str) -> None:
    # A stride near int64 (a hostile int) with an offset: no meta tensor has it, so the call is skipped,
    # never a foreign exception from torch.empty.
    good, _, _ = _emitted("cond", plan=False)
    _, ins = _call(good.program, "aten::relu")
    bad = _with_value(good, ins.args[0], strides=[(1 << 62) + 1, 1], storage_offset=1)
    native.load(bad, engine=engine)
    native.load(bad, engine=engine, propagate=True)


@pytest.mark.parametrize("engine", _ENGINES)
def test_a_kernel_check_the_meta_kernel_does_not_make_is_refused(engine: str) -> None:
    # _assert_tensor_metadata's meta kernel accepts any asserted dtype; its CPU kernel compares it with
    # the operand's (serde.bridge.checks.kernels names what such kernels check)
    good, args, kwargs = _emitted("all_dtypes")
    p = good.program
    pc, ins = _call(p, "aten::_assert_tensor_metadata")
    asserted = ins.args[3]
    assert p.values[asserted] == P.ScalarType(v=7)  # float32, the operand's dtype
    bad = _with_value(good, asserted, v=5)  # int64
    _refused(bad, engine, r"aten::_assert_tensor_metadata.*argument 'dtype'.*asserts torch.int64",
             fails_when_run=(args, kwargs))


# ---------------------------------------------------------------- what the CPU kernels check and meta kernels do not


_SEEDS = Path(__file__).resolve().parents[1] / "serde" / "fuzz" / "seeds"


@pytest.mark.parametrize("engine", _ENGINES)
def test_an_op_swapped_to_one_whose_cpu_kernel_has_no_bool_variant_is_refused(engine: str) -> None:
    # logical_not of a bool tensor swapped to relu: relu's meta kernel returns a bool tensor, its
    # CPU kernel refuses bool inputs
    path = _SEEDS / "debug_extra" / "model.pt2s"
    args, kwargs = load(path).example_inputs
    good = native.emit_artifact(path)
    p = good.program
    pc, ins = _call(p, "aten::logical_not")
    bad = _swapped(good, pc, _op(p, "aten::relu"))
    _refused(bad, engine, rf"instructions\[{pc}\] \(aten::relu\.default, node '\w+'\): the kernel refuses "
                          r"the declared operands \(.*torch\.bool.*\): aten\.relu\.default on operands of dtypes "
                          r"bool: its CPU kernel refuses them \(Boolean inputs not supported for relu\)",
             fails_when_run=(args, kwargs))


@pytest.mark.parametrize("engine", _ENGINES)
def test_a_norm_parameter_of_another_dtype_than_the_cpu_kernel_takes_is_refused(engine: str) -> None:
    # layer_norm's weight declared float16 for a float32 input: the meta kernel computes a float32
    # result, the CPU kernel takes parameters of the input's dtype only
    good, args, kwargs = _emitted("transformer_block")
    p = good.program
    pc, ins = _call(p, "aten::layer_norm")
    weight = ins.args[2]
    assert p.values[weight].dtype == int(schema.ScalarType.FLOAT)
    bad = _with_value(good, weight, dtype=int(schema.ScalarType.HALF))
    _refused(bad, engine, rf"instructions\[{pc}\] \(aten::layer_norm\.default, .*\): .*dtypes float32, float16, "
                          r"float32: its CPU kernel refuses them \(mixed dtype \(CPU\): expect parameter to have "
                          r"scalar type of Float\)",
             fails_when_run=(args, kwargs))


@pytest.mark.parametrize("engine", _ENGINES)
def test_a_size_below_the_least_concrete_symint_is_refused(engine: str) -> None:
    # split_with_sizes([2, 3, 3]) with its 2 edited to -2**63: c10 keeps such an int as a symbolic
    # node, and the kernel asks for concrete sizes
    good, args, kwargs = _emitted("multi_output")
    p = good.program
    pc, ins = _call(p, "aten::split_with_sizes")
    sizes = ins.args[1]
    assert p.values[sizes] == P.IntList(v=[2, 3, 3])
    bad = _with_value(good, sizes, v=[-(2**63), 3, 3])
    _refused(bad, engine, rf"instructions\[{pc}\] \(aten::split_with_sizes\.default, node 'split_with_sizes'\): .*"
                          r"argument 'split_sizes' of aten\.split_with_sizes\.default: -9223372036854775808 is below "
                          r"-2\*\*62",
             fails_when_run=(args, kwargs))
