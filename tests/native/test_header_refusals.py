"""Header edits the native runtimes used to refuse only when run, now refused by both loaders.

Each edit is one the fuzzer made to a real emitted program: the file loaded in both loaders and
then failed at the first run (a kernel call that does not bind its operator's schema, an input
dimension depending on a symbol no input binds, a size expression overflowing int64 over the
symbols' ranges). The structure of the header already says so, so the load refuses it, in both
loaders with the same message.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import native
from native.errors import NativeFormatError
from native.format import program as P
from native.run import cpp_engine
from serde import load
from tests.native._native_util import edited

_FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "v2.6"
_ENGINES = ["python", pytest.param("cpp", marks=pytest.mark.skipif(
    not cpp_engine.available(), reason=f"the C++ runtime is not built: {cpp_engine.unavailable_reason()}"))]


def _emitted(name: str, plan: bool = True) -> tuple[P.NativeProgram, tuple, dict]:
    path = _FIXTURES / name / "model.pt2s"
    args, kwargs = load(path).example_inputs
    return native.emit_artifact(path, plan=plan), args, kwargs


def _assert_runs_then_refused(good: P.NativeProgram, bad: bytes, args: tuple, kwargs: dict, engine: str,
                              message: str) -> None:
    native.load(good.encode(), engine=engine).run(*args, **kwargs)  # the edit, not the program, is refused
    with pytest.raises(NativeFormatError, match=message):
        native.load(bad, engine=engine)


@pytest.mark.parametrize("engine", _ENGINES)
def test_an_input_size_over_a_symbol_no_input_binds_is_refused(engine: str) -> None:
    good, args, kwargs = _emitted("named_results")
    p = good.program
    k = next(k for k, s in enumerate(p.symbols) if s.input >= 0)
    symbols = list(p.symbols)
    symbols[k] = P.Symbol(symbols[k].name, -1, -1)  # an unbacked symbol: no value before the kernels run
    bad = edited(good, symbols=symbols)
    _assert_runs_then_refused(good, bad, args, kwargs, engine,
                              rf"inputs\[0\]: dimension 0 of input 'x' is expression \d+, which reads symbol {k} "
                              rf"\('s0'\) at position \d+; no input binds that symbol")


@pytest.mark.parametrize("engine", _ENGINES)
def test_a_guard_over_a_symbol_no_input_binds_is_refused(engine: str) -> None:
    good, args, kwargs = _emitted("dynamic_arith")
    p = good.program
    assert p.guards, "dynamic_arith has export guards"
    # the input's sizes read e0 (2*s0); a new unbacked symbol read by the first guard alone
    symbols = [*p.symbols, P.Symbol("u9", -1, -1)]
    exprs = list(p.exprs)
    exprs[p.guards[0]] = [1, len(p.symbols), 0, 0, 9]  # u9 == 0
    bad = edited(good, symbols=symbols, exprs=exprs)
    _assert_runs_then_refused(good, bad, args, kwargs, engine,
                              rf"guards\[0\]: the guard is expression {p.guards[0]}, which reads symbol "
                              rf"{len(p.symbols)} \('u9'\) at position 0; no input binds that symbol")


@pytest.mark.parametrize("engine", _ENGINES)
@pytest.mark.parametrize(("code", "op", "pos", "reach"), [
    ([0, 1 << 62, 1, 0, 3, 2], "mul", 4, 1 << 63),  # 2**62 * s0, s0 in [2, 64]: from 2**63 up
    ([0, (1 << 63) - 10, 1, 0, 2, 2], "add", 4, (1 << 63) - 10 + 64),  # past int64 only near s0's maximum
    ([1, 0, 0, 11, 6], "pow", 4, 64 ** 11),  # s0 ** 11 (64 ** 11 = 2 ** 66)
])
def test_a_size_expression_that_overflows_int64_over_the_ranges_is_refused(engine: str, code: list[int], op: str,
                                                                           pos: int, reach: int) -> None:
    good, args, kwargs = _emitted("dynamic_arith")
    p = good.program
    assert p.symbols[0].min == 2 and p.symbols[0].max == 64 and p.exprs[0] == [0, 2, 1, 0, 3, 2]
    exprs = list(p.exprs)
    exprs[0] = code
    bad = edited(good, exprs=exprs)
    _assert_runs_then_refused(good, bad, args, kwargs, engine,
                              rf"exprs\[0\]: the {op} at position {pos} reaches {reach} for some values of s0 "
                              r"within their ranges, past int64")


@pytest.mark.parametrize("engine", _ENGINES)
def test_an_expression_within_int64_over_the_ranges_loads(engine: str) -> None:
    good, args, kwargs = _emitted("dynamic_arith", plan=False)  # (no plan holds such a tensor)
    exprs = list(good.program.exprs)
    exprs[0] = [0, 2, 1, 0, 3, 2, 0, (1 << 63) - 129, 2, 2]  # 2*s0 + 2**63 - 129: at most 2**63 - 1
    native.load(edited(good, exprs=exprs), engine=engine)


@pytest.mark.parametrize("engine", _ENGINES)
def test_a_call_whose_op_is_an_out_variant_is_refused(engine: str) -> None:
    # The op an instruction calls functionally edited to its out= variant: the call binds no out=
    # argument, which torch.ops refused only at the first run ("aten::add() is missing value for
    # argument 'out'").
    good, args, kwargs = _emitted("input_mutation_aten")
    p = good.program
    pc, ins = next((pc, ins) for pc, ins in enumerate(p.instructions)
                   if isinstance(ins, P.KernelCall) and ins.out_op >= 0)
    out = p.operators[ins.out_op]
    instructions = list(p.instructions)
    instructions[pc] = P.KernelCall(ins.out_op, ins.args, ins.outs, ins.out_op)
    bad = edited(good, instructions=instructions)
    _assert_runs_then_refused(good, bad, args, kwargs, engine,
                              rf"instructions\[{pc}\]: operator {out.name}\.{out.overload} has 1 out= arguments, "
                              "which a call's op \\(run functionally\\) never fills")


def _edits() -> dict[str, bytes]:
    """One edited file of each class above."""
    named, _, _ = _emitted("named_results")
    symbols = [P.Symbol(s.name, -1, -1) for s in named.program.symbols]
    arith, _, _ = _emitted("dynamic_arith")
    exprs = list(arith.program.exprs)
    exprs[0] = [0, 1 << 62, 1, 0, 3, 2]
    mutation, _, _ = _emitted("input_mutation_aten")
    calls = list(mutation.program.instructions)
    pc = next(pc for pc, ins in enumerate(calls) if isinstance(ins, P.KernelCall) and ins.out_op >= 0)
    calls[pc] = P.KernelCall(calls[pc].out_op, calls[pc].args, calls[pc].outs, calls[pc].out_op)
    return {"unbound symbol": edited(named, symbols=symbols), "overflow": edited(arith, exprs=exprs),
            "out= variant as op": edited(mutation, instructions=calls)}


@pytest.mark.skipif(not cpp_engine.available(), reason=f"the C++ runtime is not built: {cpp_engine.unavailable_reason()}")
def test_both_loaders_refuse_each_class_with_the_same_message() -> None:
    for name, bad in _edits().items():
        messages = []
        for engine in ("python", "cpp"):
            with pytest.raises(NativeFormatError) as e:
                native.load(bad, engine=engine)
            messages.append(str(e.value))
        assert messages[0] == messages[1], name
