"""Control flow in a native program: jumps edited out of the emitter's shape are refused at load.

Every edit starts from a real exported program with a branch and two loops, and both loaders (the
Python validator and the C++ one) must refuse it with the same message. What the shape check lets
through, a loop that restarts the program, is stopped by the run's loop budget instead.
"""

from __future__ import annotations

import random
import re

import msgspec
import pytest
import torch

from native.errors import FlowTooLargeError, InputMismatchError, NativeFormatError, NativeRuntimeError
from native.format import program as P
from native.format.verify import decode
from native.run import cpp_engine
from native.run.runtime import Method
from serde.core.limits import Limits
from tests.native._native_util import edited, emit_ep, emitted


class _Flow(torch.nn.Module):
    """A cond, then a scan over its result, then a while_loop: one branch and two loops in order."""

    def forward(self, x, i):
        from torch._higher_order_ops.scan import scan
        from torch._higher_order_ops.while_loop import while_loop

        y = torch.cond(x.sum() > 0, lambda x: x.cos(), lambda x: x.sin(), (x,))
        c, ys = scan(lambda c, r: (c + r, c * 2), torch.zeros(x.shape[1]), y)
        _, z = while_loop(lambda j, z: j < 3, lambda j, z: (j + 1, z + 1), (i, c))
        return ys, z


_ARGS = (torch.randn(4, 3, generator=torch.Generator().manual_seed(0)), torch.tensor(0))


@pytest.fixture(scope="module")
def flow() -> P.NativeProgram:
    return emit_ep(torch.export.export(_Flow(), _ARGS))


def _jumps(p: P.Program) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(backward, conditional forward) jumps as (position, target), in program order."""
    back, forward = [], []
    for pc, ins in enumerate(p.instructions):
        if isinstance(ins, P.JumpFalseCall):
            if ins.target <= pc:
                back.append((pc, ins.target))
            elif not (isinstance(p.values[ins.cond], P.Bool) and not p.values[ins.cond].v):
                forward.append((pc, ins.target))
    return back, forward


def _retarget(native: P.NativeProgram, pc: int, target: int) -> bytes:
    ins = list(native.program.instructions)
    ins[pc] = P.JumpFalseCall(ins[pc].cond, target)
    return edited(native, instructions=ins)


def _assert_both_refuse(data: bytes, message: str) -> None:
    for load in (decode, cpp_engine.load):
        with pytest.raises(NativeFormatError, match=message):
            load(data)


def _edit(native: P.NativeProgram, kind: str) -> tuple[bytes, str]:
    """The edited file and the message both loaders must give."""
    p = native.program
    (scan_end, scan_head), (while_end, while_head) = _jumps(p)[0]
    # The branch's jump comes first; each loop's exit is the conditional jump to just past it.
    (branch, _), *_ = _jumps(p)[1]
    scan_exit = next(pc for pc, t in _jumps(p)[1] if t == scan_end + 1)
    n = len(p.instructions)
    return {
        "conditional backward jump": (_retarget(native, scan_exit, 0),
                                      rf"instructions\[{scan_exit}\]: a backward jump \(to instruction 0\) must be "
                                      "unconditional"),
        "loop without an exit": (_retarget(native, scan_end, scan_end),
                                 rf"instructions\[{scan_end}\]: the loop \[{scan_end}, {scan_end}\] has no "
                                 "conditional jump to its end"),
        "two loops on one head": (_retarget(native, while_end, scan_head),
                                  rf"instructions\[{while_end}\]: a second loop jumps back to instruction {scan_head}"),
        "overlapping loops": (_retarget(native, while_end, scan_head + 1),
                              rf"instructions\[{while_end}\]: the loop \[{scan_head + 1}, {while_end}\] overlaps the "
                              rf"loop \[{scan_head}, {scan_end}\]"),
        "leaving a loop past its end": (_retarget(native, scan_exit, n),
                                        rf"instructions\[{scan_exit}\]: the jump to instruction {n} leaves the loop "
                                        rf"\[{scan_head}, {scan_end}\] past its end"),
        "entering a loop's body": (_retarget(native, branch, while_head + 1),
                                   rf"instructions\[{branch}\]: the jump to instruction {while_head + 1} enters the "
                                   rf"body of the loop \[{while_head}, {while_end}\] from outside"),
    }[kind]


def test_the_program_has_the_shape_the_edits_assume(flow):
    back, forward = _jumps(flow.program)
    assert len(back) == 2 and len(forward) == 3  # the branch, then each loop's exit
    (scan_end, scan_head), (while_end, while_head) = back
    assert forward[0][0] < scan_head < scan_end < while_head < while_end
    for m in (Method(flow), cpp_engine.load(flow)):
        torch.testing.assert_close(m.run(*_ARGS), _Flow()(*_ARGS))


@pytest.mark.parametrize("kind", ["conditional backward jump", "loop without an exit", "two loops on one head",
                                  "overlapping loops", "leaving a loop past its end", "entering a loop's body"])
def test_jumps_out_of_the_emitters_shape_are_refused_by_both_loaders(flow, kind):
    _assert_both_refuse(*_edit(flow, kind))


def test_a_loop_that_restarts_the_program_is_stopped_by_the_instructions_it_ran(flow):
    # The scan's backward jump edited to land one instruction early, on the move that sets its
    # counter to 0: a well-formed loop that never ends. The budget charges every iteration the
    # loop's length, so the run stops within it however long the loop is.
    ((scan_end, scan_head), _), _ = _jumps(flow.program)
    assert isinstance(flow.program.instructions[scan_head - 1], P.MoveCall)
    data = _retarget(flow, scan_end, scan_head - 1)
    budget = 5_000
    method = Method(decode(data), max_loop_instructions=budget)
    timings: list[tuple[int, int]] = []
    with pytest.raises(NativeRuntimeError, match=f"loops ran more than {budget} instructions in this run"):
        method.run_flat(list(_ARGS), timings=timings)
    # Frees that follow a kernel run inside its step, so fewer steps than the budget charged.
    assert 2 * scan_end < len(timings) <= budget + len(flow.program.instructions)
    with pytest.raises(NativeRuntimeError, match=f"loops ran more than {budget} instructions in this run"):
        cpp_engine.load(data, max_loop_instructions=budget).run(*_ARGS)


def _verdict(load, data: bytes) -> str:
    try:
        load(data)
    except NativeFormatError as e:
        return str(e)
    return "accepted"


def _run_outcome(method) -> str:
    try:
        method.run(*_ARGS)
    except (NativeRuntimeError, InputMismatchError) as e:
        return type(e).__name__
    return "ok"


def _random_edit(p: P.Program, rng: random.Random) -> list[P.Instruction]:
    """A jump moved anywhere and maybe made (un)conditional, a value freed in place of an
    instruction, or two non-jump instructions swapped."""
    ins = list(p.instructions)
    jumps = [pc for pc, i in enumerate(ins) if isinstance(i, P.JumpFalseCall)]
    kind = rng.randrange(3)
    if kind == 0:
        conds = sorted({ins[pc].cond for pc in jumps})
        for pc in rng.sample(jumps, rng.randint(1, 2)):
            cond = rng.choice(conds) if rng.random() < 0.3 else ins[pc].cond
            ins[pc] = P.JumpFalseCall(cond, rng.randrange(len(ins) + 1))
    elif kind == 1:
        ins[rng.randrange(len(ins))] = P.FreeCall(rng.randrange(len(p.values)))
    else:
        a, b = rng.sample([pc for pc in range(len(ins)) if pc not in jumps], 2)
        ins[a], ins[b] = ins[b], ins[a]
    return ins


@pytest.mark.parametrize("n", [pytest.param(500, id="fast"), pytest.param(5000, id="thorough",
                                                                            marks=pytest.mark.slow)])
def test_both_loaders_judge_random_edits_alike_and_what_they_accept_runs_alike(flow, n):
    # Both loaders accept the same files and refuse the others with the same message; what they
    # accept reads no value before writing it, so both runtimes, heap and arena, reach the same
    # kind of outcome (the Python runtime ran such reads on None, the C++ one refused them).
    rng = random.Random(0)
    refused: dict[str, int] = {}
    outcomes: dict[str, int] = {}
    for _ in range(n):
        data = edited(flow, instructions=_random_edit(flow.program, rng))
        verdict = _verdict(decode, data)
        assert _verdict(cpp_engine.load, data) == verdict
        if verdict != "accepted":
            rule = re.sub(r"\d+", "#", verdict.split(": ", 2)[2])[:40]
            refused[rule] = refused.get(rule, 0) + 1
            continue
        native = decode(data)
        runs = {_run_outcome(m) for m in (Method(native, max_loop_instructions=10_000),
                                          Method(native, arena=True, max_loop_instructions=10_000),
                                          cpp_engine.load(data, max_loop_instructions=10_000),
                                          cpp_engine.load(data, arena=True, max_loop_instructions=10_000))}
        assert len(runs) == 1, runs
        (outcome,) = runs
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    assert outcomes.get("ok", 0) > n // 20, outcomes
    for rule in ("a backward jump", "value # may be read before it is written", "the loop [#, #] has no",
                 "the jump to instruction # enters"):
        assert any(r.startswith(rule) for r in refused), (rule, refused)


def test_a_read_of_a_value_written_on_one_branch_only_is_refused(flow):
    # The true branch's move of its result into the cond's output, made a move to itself: the
    # output is written on the false path only, and the scan reads it after the branches meet.
    p = flow.program
    ins = list(p.instructions)
    (branch, _), *_ = _jumps(p)[1]
    move = next(pc for pc in range(branch, len(ins)) if isinstance(ins[pc], P.MoveCall))
    out = ins[move].dst
    ins[move] = P.MoveCall(ins[move].src, ins[move].src)
    reader = next(pc for pc in range(move + 1, len(ins)) if isinstance(ins[pc], P.KernelCall) and out in ins[pc].args
                  and pc > next(t for pc2, t in _jumps(p)[1] if pc2 == branch))
    _assert_both_refuse(edited(flow, instructions=ins), rf"instructions\[{reader}\]\.args\[\d\]: value {out} may be read "
                                                       "before it is written or after it is freed")


def test_a_value_freed_inside_a_loop_and_read_on_its_next_iteration_is_refused(flow):
    # The scan's count n is read at the loop's head on every iteration; freeing it at the end of
    # the body is only wrong from the second iteration on, which only the loop's back edge shows.
    p = flow.program
    ((scan_end, scan_head), _), _ = _jumps(p)
    test = p.instructions[scan_head]
    assert isinstance(test, P.KernelCall)
    n = test.args[1]
    ins = list(p.instructions)
    ins[scan_end - 1] = P.FreeCall(n)
    _assert_both_refuse(edited(flow, instructions=ins), rf"instructions\[{scan_head}\]\.args\[1\]: value {n} may be "
                                                       "read before it is written or after it is freed")


def test_an_output_freed_before_the_end_is_refused(flow):
    p = flow.program
    assert not isinstance(p.instructions[-1], P.JumpFalseCall)
    ins = [*p.instructions[:-1], P.FreeCall(p.outputs[1])]
    _assert_both_refuse(edited(flow, instructions=ins), rf"outputs\[1\]: value {p.outputs[1]} may be read before")


@pytest.mark.parametrize("depth", [P.MAX_LIST_DEPTH, P.MAX_LIST_DEPTH + 1, 5_000])
def test_boxed_lists_nest_at_most_max_list_depth_in_both_loaders(depth):
    # Reading a list reads its items, recursively (the Python runtime raised RecursionError on a
    # few thousand levels): both loaders bound the nesting before anything walks it.
    native = emitted("mlp")
    p = native.program
    values = [*p.values, P.List([0])]
    for _ in range(depth - 1):
        values.append(P.List([len(values) - 1]))
    k = next(pc for pc, i in enumerate(p.instructions) if isinstance(i, P.KernelCall))
    ins = list(p.instructions)
    ins[k] = msgspec.structs.replace(ins[k], args=[len(values) - 1, *ins[k].args[1:]])
    data = edited(native, values=values, instructions=ins)
    if depth <= P.MAX_LIST_DEPTH:
        # The nesting is fine; a list where a tensor belongs is the kind check's to refuse, when
        # a runtime loads the program (native.format.kinds), in both runtimes alike.
        decode(data)
        message = (rf"native program: instructions\[{k}\]\.args\[0\]: operator aten::\w+\.\w+ parameter '\w+' "
                   rf"\(Tensor\) cannot take value {len(values) - 1} \(kind List\)")
        for load in (lambda d: Method(decode(d)), cpp_engine.load):
            with pytest.raises(NativeFormatError, match=message):
                load(data)
        return
    _assert_both_refuse(data, rf"values\[{len(p.values) + P.MAX_LIST_DEPTH}\]: lists nest more than "
                              rf"{P.MAX_LIST_DEPTH} deep")


def test_a_file_with_many_jumps_over_many_values_is_refused_before_the_quadratic_work():
    # 2,000 jumps (each to the next instruction) over 100,000 values: checking what each
    # instruction may read would copy or meet 100,000 cells at 4,000 jumps and targets, which
    # the file's size allows but no loader should do. Both loaders refuse it up front, and the
    # same file loads once the limit is raised by a caller who trusts it.
    native = emitted("mlp")
    p = native.program
    values = [*p.values, *([P.Int(0)] * 100_000)]
    false = len(values)
    values.append(P.Bool(False))
    jumps = [P.JumpFalseCall(false, pc + 1) for pc in range(2_000)]
    ins = [*jumps, *(msgspec.structs.replace(i, target=i.target + len(jumps)) if isinstance(i, P.JumpFalseCall)
                     else i for i in p.instructions)]
    data = edited(native, values=values, instructions=ins,
                 instruction_handles=[*[-1] * len(jumps), *p.instruction_handles],
                 memory_plan=msgspec.structs.replace(p.memory_plan, arena_size=0, allocations=[]))
    message = (r"native program: instructions: the data-flow check's work \(4000 jumps and jump targets x 100\d+ "
               r"values x 1 passes\) is \d+, more than Limits.max_flow_cells=268435456")
    for load in (decode, cpp_engine.load):
        with pytest.raises(FlowTooLargeError, match=message):
            load(data)
    roomy = Limits(max_flow_cells=1 << 33)
    decode(data, limits=roomy)
    cpp_engine.load(data, limits=roomy)
