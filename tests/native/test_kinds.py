"""The value-kind check (``native.format.kinds``, ``native_cpp/kinds.cpp``): a kernel argument of a kind its
parameter does not take is refused when either runtime loads the program, with the same message.

Each rule is exercised on a real exported program (a concatenation, a reduction, dropout, gelu, a
view with a symbolic size, a number times a tensor, a dtype conversion, a ``full`` of symbolic size)
edited so one argument points at a value of another kind. The kinds the emitter writes beyond a
parameter's own (numbers for ``aten::mul.Tensor``, ints for dtypes and floats, symbolic sizes,
trailing defaults left out) load and run alike in both runtimes. A matrix of operators, parameters
and value kinds shows that the two tables are one table. Outputs and moves have rules of their
own: one output per return, each of a kind the return may be written to (calls appended to the
program: a tuple, a list and a symbolic result among them), and a move's destination one that
holds its source's kind (every pair of kinds the emitter moves is among those taken).
"""

from __future__ import annotations

import msgspec
import pytest
import torch
from torch.export import Dim

from native.format import program as P
from native.format.kinds import NUMBERS_AS_TENSORS, kind_name
from native.format.verify import decode
from native.run import cpp_engine
from native.run.runtime import Method
from serde.core import schema
from serde.errors import SerializeError
from tests.native._native_util import edit_outcome, edited, emit_ep, same_outcome

pytestmark = pytest.mark.skipif(not cpp_engine.available(), reason=str(cpp_engine.unavailable_reason()))

_TAIL = "; the file is damaged or was not written by pt2serde"


class _Kinds(torch.nn.Module):
    def forward(self, x, y):
        a = torch.cat([x, y])
        s = a.sum(dim=[0], keepdim=True)
        d = torch.nn.functional.dropout(a, 0.5, False)
        g = torch.nn.functional.gelu(d, approximate="tanh")
        v = g.view(a.shape[0], -1)
        c = (v * 2).to(torch.float64)
        f = torch.full((a.shape[0] * 2,), 1.5)
        return s, c, f


def _args() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(4, 3, generator=g), torch.randn(2, 3, generator=g)


@pytest.fixture(scope="module")
def kinds() -> P.NativeProgram:
    ep = torch.export.export(_Kinds(), _args(), dynamic_shapes={"x": {0: Dim("n", min=1, max=64)}, "y": None})
    return emit_ep(ep)


def _call(native: P.NativeProgram, op: str) -> int:
    """The position of the first call of ``op`` (``aten::sum.dim_IntList``)."""
    p = native.program
    return next(pc for pc, i in enumerate(p.instructions) if isinstance(i, P.KernelCall)
                and f"{p.operators[i.op].name}.{p.operators[i.op].overload}" == op)


def _argument(native: P.NativeProgram, op: str, param: str | int) -> tuple[int, int, list[int]]:
    """(the call of ``op``, the position of its parameter ``param`` (a name, or a position), its arguments)."""
    pc = _call(native, op)
    j = param if isinstance(param, int) else [a.name for a in _params(op)].index(param)
    return pc, j, list(native.program.instructions[pc].args)


def _params(op: str) -> list:
    name, overload = op.split(".")
    s = torch._C._get_schema(name, "" if overload == "default" else overload)
    return [a for a in s.arguments if not a.is_out]


def _live_symint(native: P.NativeProgram, pc: int) -> int:
    """A symbolic size written before instruction ``pc`` and not freed before it."""
    p = native.program
    freed = {i.value for i in p.instructions[:pc] if isinstance(i, P.FreeCall)}
    return [o for i in p.instructions[:pc] if isinstance(i, P.KernelCall) for o in i.outs
            if o >= 0 and isinstance(p.values[o], P.SymInt) and o not in freed][-1]


def _of_kind(native: P.NativeProgram, kind: type, pc: int) -> int:
    """A value of ``kind`` that instruction ``pc`` may read (constants, inputs, live symbolic sizes)."""
    p = native.program
    if kind is P.SymInt:
        return _live_symint(native, pc)
    if kind is P.Tensor:
        return p.inputs[0].value
    return next(i for i, v in enumerate(p.values) if type(v) is kind and (kind is not P.Int or v.v >= 1))


def _with_args(native: P.NativeProgram, pc: int, args: list[int], values: list[P.Value] = (), **changes) -> bytes:
    p = native.program
    ins = list(p.instructions)
    ins[pc] = msgspec.structs.replace(ins[pc], args=args, **changes)
    return edited(native, values=[*p.values, *values], instructions=ins)


def _verdicts(data: bytes) -> list[str]:
    """Each runtime's verdict at load (Python: verify, then Method; C++: its loader): 'accepted', or
    the error's class and message."""
    out = []
    for load in (lambda d: Method(decode(d)), cpp_engine.load):
        try:
            load(data)
            out.append("accepted")
        except SerializeError as e:
            out.append(f"{type(e).__name__}: {e}")
    return out


def _assert_both_refuse(data: bytes, message: str) -> None:
    assert _verdicts(data) == [f"NativeFormatError: native program: {message}{_TAIL}"] * 2


def test_the_program_has_the_calls_the_edits_assume(kinds):
    p = kinds.program
    for op in ("aten::cat.default", "aten::sum.dim_IntList", "aten::dropout.default", "aten::gelu.default",
               "aten::view.default", "aten::mul.Tensor", "aten::to.dtype", "aten::full.default",
               "aten::sym_size.int", "symbolic::add.default", "symbolic::mul.default"):
        _call(kinds, op)
    # The emitter's own lenient kinds: a number for a tensor, a symbolic size inside a boxed list.
    mul = p.instructions[_call(kinds, "aten::mul.Tensor")]
    assert isinstance(p.values[mul.args[1]], P.Int)
    view = p.instructions[_call(kinds, "aten::view.default")]
    assert [type(p.values[i]) for i in p.values[view.args[1]].items] == [P.SymInt, P.Int]
    want = _Kinds()(*_args())
    for m in (Method(kinds), cpp_engine.load(kinds)):
        for got, w in zip(m.run(*_args()), want, strict=True):
            torch.testing.assert_close(got, w)


# rule -> (operator, parameter, the kind of the value it is given instead)
_WRONG = {
    "bool <- Int": ("aten::sum.dim_IntList", "keepdim", P.Int),
    "bool <- None": ("aten::sum.dim_IntList", "keepdim", P.NoneValue),
    "bool <- Tensor": ("aten::sum.dim_IntList", "keepdim", P.Tensor),
    "bool <- SymInt": ("aten::to.dtype", "copy", P.SymInt),
    "int <- Float": ("aten::cat.default", "dim", P.Float),
    "int <- Bool": ("aten::sym_size.int", "dim", P.Bool),
    "int[]? <- Int": ("aten::sum.dim_IntList", "dim", P.Int),
    "float <- Bool": ("aten::dropout.default", "p", P.Bool),
    "float <- String": ("aten::dropout.default", "p", P.String),
    "str <- Int": ("aten::gelu.default", "approximate", P.Int),
    "Tensor <- None": ("aten::gelu.default", "self", P.NoneValue),
    "Tensor <- a boxed list": ("aten::gelu.default", "self", P.List),
    "Tensor <- Int, for an operator torch.ops gives no numbers as tensors": ("aten::sum.dim_IntList", "self", P.Int),
    "ScalarType <- Float": ("aten::to.dtype", "dtype", P.Float),
    "ScalarType <- Device": ("aten::to.dtype", "dtype", P.Device),
    "MemoryFormat? <- Layout": ("aten::to.dtype", "memory_format", P.Layout),
    "Device? <- String": ("aten::full.default", "device", P.String),
    "Layout? <- ScalarType": ("aten::full.default", "layout", P.ScalarType),
    "Scalar <- String": ("aten::full.default", "fill_value", P.String),
    "Scalar <- Tensor": ("aten::full.default", "fill_value", P.Tensor),
    "SymInt[] <- BoolList": ("aten::view.default", "size", P.BoolList),
}
# symbolic:: operators: (operator, operand position, kind)
_WRONG_SYMBOLIC = {
    "number <- Tensor": ("symbolic::add.default", 1, P.Tensor),
    "number <- String": ("symbolic::mul.default", 1, P.String),
    "number <- None": ("symbolic::mul.default", 0, P.NoneValue),
}


@pytest.mark.parametrize("rule", list(_WRONG))
def test_a_value_of_a_kind_its_parameter_does_not_take_is_refused_by_both_runtimes(kinds, rule):
    op, name, kind = _WRONG[rule]
    pc, j, args = _argument(kinds, op, name)
    params = _params(op)
    extra = []
    if kind is P.BoolList:  # not in the program: appended
        args[j], extra = len(kinds.program.values), [P.BoolList([True, False])]
    else:
        args[j] = _of_kind(kinds, kind, pc)
    _assert_both_refuse(_with_args(kinds, pc, args, extra),
                        f"instructions[{pc}].args[{j}]: operator {op} parameter '{name}' ({params[j].real_type.str()}) "
                        f"cannot take value {args[j]} (kind {kind_name(kind)})")


@pytest.mark.parametrize("rule", list(_WRONG_SYMBOLIC))
def test_a_symbolic_operand_that_is_not_a_number_is_refused_by_both_runtimes(kinds, rule):
    op, j, kind = _WRONG_SYMBOLIC[rule]
    pc, j, args = _argument(kinds, op, j)
    args[j] = _of_kind(kinds, kind, pc)
    _assert_both_refuse(_with_args(kinds, pc, args),
                        f"instructions[{pc}].args[{j}]: operator {op} parameter '{'ab'[j]}' (number) cannot take "
                        f"value {args[j]} (kind {kind_name(kind)})")


def test_an_item_of_a_boxed_list_is_named_where_it_does_not_fit(kinds):
    p = kinds.program
    pc = _call(kinds, "aten::cat.default")
    x, nv, rest = p.inputs[0].value, len(p.values), list(p.instructions[pc].args[1:])
    zero = next(i for i, v in enumerate(p.values) if v == P.Int(0))
    data = _with_args(kinds, pc, [nv, *rest], [P.List([x, zero])])
    _assert_both_refuse(data, f"instructions[{pc}].args[0]: operator aten::cat.default parameter 'tensors' (Tensor[]) "
                              f"cannot take value {nv} (kind List: its items[1] is value {zero}, kind Int)")
    data = _with_args(kinds, pc, [nv + 1, *rest], [P.List([x]), P.List([x, nv])])
    _assert_both_refuse(data, f"instructions[{pc}].args[0]: operator aten::cat.default parameter 'tensors' (Tensor[]) "
                              f"cannot take value {nv + 1} (kind List: its items[1] is value {nv}, kind List)")
    # A constant int list where tensors belong: the C++ runtime used to find it only when it
    # converted the constant, and Python only when the kernel was called.
    data = _with_args(kinds, pc, [nv, *rest], [P.IntList([1, 2])])
    _assert_both_refuse(data, f"instructions[{pc}].args[0]: operator aten::cat.default parameter 'tensors' (Tensor[]) "
                              f"cannot take value {nv} (kind IntList)")
    # A symbolic size list with a float in it.
    pc = _call(kinds, "aten::view.default")
    size = p.instructions[pc].args[1]
    half = next(i for i, v in enumerate(p.values) if isinstance(v, P.Float))
    data = _with_args(kinds, pc, [p.instructions[pc].args[0], nv], [P.List([p.values[size].items[0], half])])
    _assert_both_refuse(data, f"instructions[{pc}].args[1]: operator aten::view.default parameter 'size' (SymInt[]) "
                              f"cannot take value {nv} (kind List: its items[1] is value {half}, kind Float)")


def test_a_call_with_more_or_fewer_arguments_than_its_schema_takes_is_refused(kinds):
    pc = _call(kinds, "aten::gelu.default")
    args = list(kinds.program.instructions[pc].args)
    _assert_both_refuse(_with_args(kinds, pc, [*args, args[1]]),
                        f"instructions[{pc}]: operator aten::gelu.default takes 2 arguments, the call gives 3")
    pc = _call(kinds, "aten::sum.dim_IntList")
    args = list(kinds.program.instructions[pc].args)
    _assert_both_refuse(_with_args(kinds, pc, args[:1]),
                        f"instructions[{pc}]: operator aten::sum.dim_IntList parameter 'dim' (int[]?) is not given "
                        "and has no default")
    pc = _call(kinds, "symbolic::add.default")
    args = list(kinds.program.instructions[pc].args)
    _assert_both_refuse(_with_args(kinds, pc, args[:1]),
                        f"instructions[{pc}]: operator symbolic::add.default parameter 'b' (number) is not given and "
                        "has no default")
    _assert_both_refuse(_with_args(kinds, pc, [*args, args[0]]),
                        f"instructions[{pc}]: operator symbolic::add.default takes 2 arguments, the call gives 3")


def test_a_missing_trailing_argument_with_a_default_is_taken_and_runs_alike(kinds):
    # gelu without its approximate= (a newer torch may add trailing defaults to a schema): both
    # runtimes fill in 'none' and compute the same (exact, not tanh) gelu.
    pc = _call(kinds, "aten::gelu.default")
    data = _with_args(kinds, pc, list(kinds.program.instructions[pc].args[:1]))
    assert _verdicts(data) == ["accepted", "accepted"]
    outcome = edit_outcome(data, _args(), {})
    assert outcome[0] == "ok"
    eager = _Kinds()(*_args())
    assert not torch.equal(outcome[1][1], eager[1])  # the call really changed


def test_an_out_variant_must_be_a_torch_operator_taking_the_same_arguments(kinds):
    p = kinds.program
    pc = _call(kinds, "aten::gelu.default")
    ins = p.instructions[pc]
    add = p.instructions[_call(kinds, "symbolic::add.default")].op
    _assert_both_refuse(_with_args(kinds, pc, list(ins.args), out_op=add),
                        f"instructions[{pc}]: the out= variant symbolic::add.default is not a torch operator")
    # sum's out= variant named for gelu's call: its dim parameter would be given gelu's 'tanh'.
    sum_out = p.instructions[_call(kinds, "aten::sum.dim_IntList")].out_op
    _assert_both_refuse(_with_args(kinds, pc, list(ins.args), out_op=sum_out),
                        f"instructions[{pc}].args[1]: operator aten::sum.IntList_out parameter 'dim' (int[]?) cannot "
                        f"take value {ins.args[1]} (kind String)")
    # An out= variant whose arguments fit but that has two out= arguments for the call's one output.
    mul = _call(kinds, "aten::mul.Tensor")
    instructions = list(p.instructions)
    instructions[mul] = msgspec.structs.replace(instructions[mul], out_op=len(p.operators))
    _assert_both_refuse(edited(kinds, operators=[*p.operators, P.Operator("aten::sort", "values")],
                               instructions=instructions),
                        f"instructions[{mul}]: the out= variant aten::sort.values has 2 out= arguments for 1 outputs")


# What the emitter writes beyond a value of the parameter's own kind, each on a real call:
# (operator, parameter or symbolic operand position, kind).
_LENIENT = {
    "a number for a Tensor of aten::mul": ("aten::mul.Tensor", "other", P.Float),
    "a symbolic size for a Tensor of aten::mul": ("aten::mul.Tensor", "other", P.SymInt),
    "an int for a float": ("aten::dropout.default", "p", P.Int),
    "an int for a ScalarType? (schema defaults such as randperm's dtype=4)": ("aten::sum.dim_IntList", "dtype", P.Int),
    "an int for a MemoryFormat? (contiguous's default is 0)": ("aten::to.dtype", "memory_format", P.Int),
    "a symbolic size for a Scalar": ("aten::full.default", "fill_value", P.SymInt),
    "a bool for a Scalar": ("aten::full.default", "fill_value", P.Bool),
    "None for an optional": ("aten::sum.dim_IntList", "dim", P.NoneValue),
    "an int for a symbolic operand": ("symbolic::mul.default", 0, P.Int),
    "a float for a symbolic operand": ("symbolic::mul.default", 1, P.Float),
}


@pytest.mark.parametrize("rule", list(_LENIENT))
def test_what_the_emitter_writes_loads_and_runs_alike_in_both_runtimes(kinds, rule):
    op, param, kind = _LENIENT[rule]
    pc, j, args = _argument(kinds, op, param)
    args[j] = _of_kind(kinds, kind, pc)
    data = _with_args(kinds, pc, args)
    assert _verdicts(data) == ["accepted", "accepted"]
    assert edit_outcome(data, _args(), {})[0] in ("ok", "error")


def test_numbers_as_tensors_is_the_list_torch_ops_uses():
    # torch.ops makes a number a tensor only for these aten operators; the C++ runtime would make
    # it for any, so the kind check refuses numbers elsewhere. A torch upgrade that changes the
    # list fails here first (its copy in kinds.cpp is compared with this one below).
    names = {s.name.split("::", 1)[1] for s in torch._C._jit_get_all_schemas() if s.name.startswith("aten::")}
    assert {n for n in names if torch._C._should_allow_numbers_as_tensors(n)} == NUMBERS_AS_TENSORS


def test_the_outcome_comparison_tells_results_apart():
    # The edit tests rest on this comparison: it must see a different value, dtype or kind of outcome.
    nan = torch.tensor([1.0, float("nan")])
    a = ("ok", [nan], {})
    assert same_outcome(a, ("ok", [nan.clone()], {}))
    assert not same_outcome(a, ("ok", [torch.tensor([1.0, 2.0])], {}))
    assert not same_outcome(a, ("ok", [nan.double()], {}))
    assert not same_outcome(a, ("ok", [1.0], {}))
    assert not same_outcome(("error", "NativeRuntimeError"), ("refused", "NativeRuntimeError"))
    assert not same_outcome(("refused", "x"), ("refused", "y"))


# ---------------------------------------------------------------- the two tables are one table

# Operators whose parameters cover every torch type kind the table names, and some it does not.
_MATRIX_OPS = [
    ("aten::add", "Tensor"), ("aten::sum", "dim_IntList"), ("aten::to", "dtype_layout"), ("aten::index", "Tensor"),
    ("aten::cat", "default"), ("aten::view", "default"), ("aten::dropout", "default"), ("aten::gelu", "default"),
    ("aten::add", "Scalar"), ("aten::randn", "generator"), ("aten::clamp", "Tensor"), ("aten::empty", "memory_format"),
    ("aten::linalg_vector_norm", "default"), ("aten::split_with_sizes", "default"), ("c10d::allgather_", "default"),
    ("aten::contiguous", "default"), ("aten::sym_size", "int"), ("_c10d_functional::broadcast", "default"),
    ("aten::record_stream", "default"), ("prims::empty", "default"),
    ("symbolic::add", "default"), ("symbolic::ite", "default"), ("symbolic::sum", "default"),
]


def _with_pool(native: P.NativeProgram) -> tuple[P.Program, list[int]]:
    """``native``'s program with a value of every kind appended, and lists of each shape; symbolic
    scalars are inputs, so that a call at the end may read them. Returns it and the pool."""
    p = native.program
    x, base = p.inputs[0].value, len(p.values)
    consts = [P.NoneValue(), P.Int(1), P.Float(0.5), P.Bool(True), P.String("x"), P.IntList([1]), P.IntList([]),
              P.FloatList([0.5]), P.BoolList([True]), P.StringList(["x"]), P.Complex(1.0, 2.0),
              P.ScalarType(int(schema.ScalarType.FLOAT)), P.Layout(int(schema.Layout.Strided)),
              P.MemoryFormat(int(schema.MemoryFormat.ContiguousFormat)), P.Device("cpu"), P.List([x])]
    sym = base + len(consts)
    lists = [P.List([x, sym]), P.List([sym, base + 1]), P.List([x, base]), P.List([base + len(consts) - 1])]
    values = [*p.values, *consts, P.SymInt(), P.SymFloat(), P.SymBool(), *lists]
    inputs = [*p.inputs, *(P.Input(f"s{k}", sym + k) for k in range(3))]
    keys = [*p.input_keys, *(f"s{k}" for k in range(3))] if p.input_keys else []  # one key per input
    return msgspec.structs.replace(p, values=values, inputs=inputs, input_keys=keys), [x, *range(base, len(values))]


def _fitting(op: P.Operator, pool: list[int], program: P.Program) -> tuple[list[int], bool] | None:
    """A pool value each leading parameter takes (by the Python table), and whether every parameter
    after them has a default; None for an operator not known here."""
    from native.format.kinds import _misfit, _signature

    sig = _signature(op)
    if sig is None:
        return None
    good = []
    for param in sig.params:
        fit = next((v for v in pool if _misfit(param.takes, program.values, v) is None), None)
        if fit is None:
            break
        good.append(fit)
    return good, all(param.has_default for param in sig.params[len(good):])


def _call_at_end(base: P.Program, segment, op: P.Operator, args: list[int]) -> bytes:
    """A call of ``op`` at the end of ``base``, its results discarded."""
    from native.format.kinds import _signature

    call = P.KernelCall(len(base.operators), args, [-1] * len(_signature(op).returns))
    p = msgspec.structs.replace(base, operators=[*base.operators, op], instructions=[*base.instructions, call],
                                instruction_handles=[*base.instruction_handles, -1])
    return P.NativeProgram(p, segment).encode()


def test_both_tables_judge_every_operator_parameter_and_kind_alike(kinds):
    # Each leading parameter of each operator given each value of the pool, the others values
    # they take: both runtimes accept the same calls, and refuse the others with the same message
    # (the C++ runtime also converts every constant it accepts to the parameter's type at load).
    base, pool = _with_pool(kinds)
    judged = {"accepted": 0, "refused": 0}
    for name, overload in _MATRIX_OPS:
        op = P.Operator(name, overload)
        found = _fitting(op, pool, base)
        if found is None:
            continue  # not registered in this process
        good, _ = found
        for j in range(len(good)):
            for v in pool:
                verdicts = _verdicts(_call_at_end(base, kinds.segment, op, [*good[:j], v, *good[j + 1:]]))
                assert verdicts[0] == verdicts[1], (name, overload, j, base.values[v], verdicts)
                judged["accepted" if verdicts[0] == "accepted" else "refused"] += 1
    assert judged["accepted"] > 200 and judged["refused"] > 1000, judged


def test_numbers_for_tensors_are_judged_alike_for_every_overload_of_the_list_and_others(kinds):
    base, pool = _with_pool(kinds)
    one = len(kinds.program.values) + 1  # P.Int(1)
    names = NUMBERS_AS_TENSORS | {"sum", "where", "maximum", "pow", "clamp", "copysign", "addcmul"}
    checked = 0
    for s in torch._C._jit_get_all_schemas():
        ns, name = s.name.split("::", 1)
        if ns != "aten" or name not in names or any(a.is_out for a in s.arguments):
            continue  # (an out= variant is never a call's op: both loaders refuse it before the kinds)
        params = [a for a in s.arguments if not a.is_out]
        tensors = [j for j, a in enumerate(params) if a.real_type.str() == "Tensor"]
        op = P.Operator(s.name, s.overload_name or "default")
        found = _fitting(op, pool, base)
        if not tensors or found is None or not found[1] or tensors[0] >= len(found[0]):
            continue
        args = list(found[0])
        args[tensors[0]] = one
        verdicts = _verdicts(_call_at_end(base, kinds.segment, op, args))
        assert verdicts[0] == verdicts[1], (s.name, s.overload_name, verdicts)
        assert (verdicts[0] == "accepted") == (name in NUMBERS_AS_TENSORS), (s.name, s.overload_name, verdicts)
        checked += 1
    assert checked > 50, checked


@pytest.mark.parametrize("arity", [1, 2, 3])
def test_both_runtimes_know_the_same_symbolic_signatures(kinds, arity):
    # Every symbolic operator called with one, two and three numbers: both runtimes take the calls
    # of the operator's arity and refuse the others alike.
    from native.format.prim import PRIM_OPS

    base, pool = _with_pool(kinds)
    one = len(kinds.program.values) + 1  # P.Int(1)
    xs = len(kinds.program.values) + 5  # P.IntList([1])
    accepted = 0
    for name in sorted(PRIM_OPS):
        args = [xs if name == "sum" else one] * arity
        verdicts = _verdicts(_call_at_end(base, kinds.segment, P.Operator(f"symbolic::{name}", "default"), args))
        assert verdicts[0] == verdicts[1], (name, arity, verdicts)
        accepted += verdicts[0] == "accepted"
    assert accepted == {1: 12, 2: 19, 3: 1}[arity]


# ---------------------------------------------------------------- outputs and moves


def _appended(native: P.NativeProgram, instructions: list, values: list[P.Value] = (),
              operators: list[P.Operator] = ()) -> bytes:
    """``native``'s file with ``instructions`` run at its end (and ``values`` and ``operators``
    appended to its tables)."""
    p = native.program
    return edited(native, values=[*p.values, *values], operators=[*p.operators, *operators],
                  instructions=[*p.instructions, *instructions],
                  instruction_handles=[*p.instruction_handles, *[-1] * len(instructions)])


def _with_outs(native: P.NativeProgram, pc: int, outs: list[int], values: list[P.Value] = ()) -> bytes:
    p = native.program
    ins = list(p.instructions)
    ins[pc] = msgspec.structs.replace(ins[pc], outs=outs)
    return edited(native, values=[*p.values, *values], instructions=ins)


def _const(native: P.NativeProgram, kind: type) -> int:
    return next(i for i, v in enumerate(native.program.values) if type(v) is kind)


def test_an_output_of_a_kind_its_return_cannot_be_written_to_is_refused_by_both_runtimes(kinds):
    # Calls appended at the end (an edit of a call in place would leave its readers unwritten, which
    # the data-flow check finds first).
    p = kinds.program
    x, one, nv, end = p.inputs[0].value, _const(kinds, P.Int), len(p.values), len(p.instructions)
    gelu = p.instructions[_call(kinds, "aten::gelu.default")]
    _assert_both_refuse(_appended(kinds, [P.KernelCall(gelu.op, [x, gelu.args[1]], [one])]),
                        f"instructions[{end}].outs[0]: operator aten::gelu.default return 0 (Tensor) cannot be "
                        f"written to value {one} (kind Int)")
    # A size written to a tensor, a tensor to a size.
    size = p.instructions[_call(kinds, "aten::sym_size.int")]
    _assert_both_refuse(_appended(kinds, [P.KernelCall(size.op, [x, size.args[1]], [x])]),
                        f"instructions[{end}].outs[0]: operator aten::sym_size.int return 0 (SymInt) cannot be "
                        f"written to value {x} (kind Tensor)")
    _assert_both_refuse(_appended(kinds, [P.KernelCall(gelu.op, [x, gelu.args[1]], [nv])], [P.SymInt()]),
                        f"instructions[{end}].outs[0]: operator aten::gelu.default return 0 (Tensor) cannot be "
                        f"written to value {nv} (kind SymInt)")
    # A symbolic operator's result is a number.
    mul = p.instructions[_call(kinds, "symbolic::mul.default")]
    _assert_both_refuse(_appended(kinds, [P.KernelCall(mul.op, [one, one], [x])]),
                        f"instructions[{end}].outs[0]: operator symbolic::mul.default return 0 (number) cannot be "
                        f"written to value {x} (kind Tensor)")
    data = _appended(kinds, [P.KernelCall(mul.op, [one, one], [nv])], [P.SymInt()])
    assert _verdicts(data) == ["accepted", "accepted"]


def test_a_call_must_list_one_output_per_return(kinds):
    p = kinds.program
    x, one, nv, end = p.inputs[0].value, _const(kinds, P.Int), len(p.values), len(p.instructions)
    gelu = p.instructions[_call(kinds, "aten::gelu.default")]
    t = P.Tensor(int(schema.ScalarType.FLOAT), [4, 3], [3, 1])
    _assert_both_refuse(_appended(kinds, [P.KernelCall(gelu.op, [x, gelu.args[1]], [nv, -1])], [t]),
                        f"instructions[{end}]: operator aten::gelu.default returns 1 values, the call lists 2 outputs")
    add = p.instructions[_call(kinds, "symbolic::add.default")]
    _assert_both_refuse(_appended(kinds, [P.KernelCall(add.op, [one, one], [])]),
                        f"instructions[{end}]: operator symbolic::add.default returns 1 values, the call lists 0 "
                        "outputs")
    # A tuple-returning operator: aten::max.dim gives (values, indices).
    t = P.Tensor(int(schema.ScalarType.FLOAT), [4], [1])
    mx = P.Operator("aten::max", "dim")
    _assert_both_refuse(_appended(kinds, [P.KernelCall(len(p.operators), [x, one], [nv])], [t], [mx]),
                        f"instructions[{end}]: operator aten::max.dim returns 2 values, the call lists 1 outputs")
    _assert_both_refuse(_appended(kinds, [P.KernelCall(len(p.operators), [x, one], [nv, nv + 1])], [t, P.SymInt()],
                                  [mx]),
                        f"instructions[{end}].outs[1]: operator aten::max.dim return 1 (Tensor) cannot be written "
                        f"to value {nv + 1} (kind SymInt)")
    data = _appended(kinds, [P.KernelCall(len(p.operators), [x, one], [-1, nv])], [t], [mx])
    assert _verdicts(data) == ["accepted", "accepted"]


def test_a_list_result_is_written_item_by_item_and_never_to_a_constant(kinds):
    p = kinds.program
    x, one, nv, end = p.inputs[0].value, _const(kinds, P.Int), len(p.values), len(p.instructions)
    row = P.Tensor(int(schema.ScalarType.FLOAT), [3], [1])
    unbind = [P.Operator("aten::unbind", "int", [[0]])]
    call = P.KernelCall(len(p.operators), [x, _const(kinds, P.Int)], [nv + 2])
    _assert_both_refuse(_appended(kinds, [call], [row, P.SymInt(), P.List([nv, nv + 1])], unbind),
                        f"instructions[{end}].outs[0]: operator aten::unbind.int return 0 (Tensor[]) cannot be "
                        f"written to value {nv + 2} (kind List: its items[1] is value {nv + 1}, kind SymInt)")
    # An empty constant list is an argument of any list type, never a result.
    call = P.KernelCall(len(p.operators), [x, one], [nv])
    _assert_both_refuse(_appended(kinds, [call], [P.IntList([])], unbind),
                        f"instructions[{end}].outs[0]: operator aten::unbind.int return 0 (Tensor[]) cannot be "
                        f"written to value {nv} (kind IntList)")


# (the source's kind, the destination's kind) -> the message's tail, or None: accepted
_MOVES = {
    (P.Tensor, P.SymInt): "(kind SymInt), which holds only Int, SymInt",
    (P.Float, P.SymInt): "(kind SymInt), which holds only Int, SymInt",
    (P.Int, P.Tensor): "(kind Tensor), which holds only None, Tensor",
    (P.Int, P.SymBool): "(kind SymBool), which holds only Bool, SymBool",
    (P.String, P.SymFloat): "(kind SymFloat), which holds only Int, Float, SymInt, SymFloat",
    (P.NoneValue, P.Tensor): None,  # with_effects' token placeholder
    (P.Int, P.SymInt): None,  # a loop counter's start
    (P.Int, P.SymFloat): None,
    (P.Bool, P.SymBool): None,
    (P.Tensor, P.Tensor): None,
}


@pytest.mark.parametrize("kinds_of", list(_MOVES), ids=lambda k: f"{kind_name(k[0])}->{kind_name(k[1])}")
def test_a_move_writes_only_a_value_that_holds_its_source(kinds, kinds_of):
    src_kind, dst_kind = kinds_of
    p = kinds.program
    nv, end = len(p.values), len(p.instructions)
    src = p.inputs[0].value if src_kind is P.Tensor else _const(kinds, src_kind)
    dst = {P.Tensor: P.Tensor(int(schema.ScalarType.FLOAT), [2], [1]), P.SymInt: P.SymInt(),
           P.SymFloat: P.SymFloat(), P.SymBool: P.SymBool()}[dst_kind]
    data = _appended(kinds, [P.MoveCall(src, nv)], [dst])
    tail = _MOVES[kinds_of]
    if tail is None:
        assert _verdicts(data) == ["accepted", "accepted"]
        assert edit_outcome(data, _args(), {})[0] == "ok"
    else:
        _assert_both_refuse(data, f"instructions[{end}]: moves value {src} (kind {kind_name(src_kind)}) into value "
                                  f"{nv} {tail}")


def test_a_move_never_writes_a_constant_or_a_boxed_list(kinds):
    p = kinds.program
    x, end = p.inputs[0].value, len(p.instructions)
    one = _const(kinds, P.Int)
    _assert_both_refuse(_appended(kinds, [P.MoveCall(x, one)]),
                        f"instructions[{end}]: moves value {x} into value {one} (kind Int), which a move never writes "
                        "(only Tensor, SymInt, SymFloat, SymBool values)")
    nv = len(p.values)
    _assert_both_refuse(_appended(kinds, [P.MoveCall(nv, nv + 1)], [P.List([x]), P.List([x])]),
                        f"instructions[{end}]: moves value {nv} into value {nv + 1} (kind List), which a move never "
                        "writes (only Tensor, SymInt, SymFloat, SymBool values)")


def test_the_moves_and_outputs_the_emitter_writes_are_in_the_tables():
    # Branches, loops and effect tokens move values; every (source, destination) pair of kinds the
    # emitter writes for them is one the table holds, and both runtimes load and run the programs.
    from tests.native._native_util import emitted, inputs_of

    pairs = set()
    for name in ("cond", "while_loop", "map", "scan", "cond_nested", "effects_and_mutation_aten", "cond_operands",
                 "sym_scalars", "unbacked_item"):
        native = emitted(name)
        p = native.program
        pairs |= {(kind_name(type(p.values[i.src])), kind_name(type(p.values[i.dst])))
                  for i in p.instructions if isinstance(i, P.MoveCall)}
        (a, kw), *_ = inputs_of(name)
        assert edit_outcome(native.encode(), a, kw)[0] == "ok", name
    assert {("Int", "SymInt"), ("Tensor", "Tensor"), ("None", "Tensor")} <= pairs, pairs
