"""The arena plan is sound for what kernels actually do, not only what their schemas promise.

Composite ops hand back their input unchanged (``dropout`` in eval, ``type_as`` to the same dtype,
``einsum('ij->ij')``, ...) although their schemas declare a fresh result. The property test mixes
them with out= kernels in random programs and compares arena, heap and eager bit for bit, with
and without the runtime's checks; the other tests pin the pieces: the planner, ``verify_plan``,
the runtime's refusal of under-declared files and its run-time alias check, run-time arena sizing.
"""

from __future__ import annotations

import copy

import msgspec
import pytest
import torch
import torch.utils._pytree as pytree
from hypothesis import assume, given
from hypothesis import strategies as st

from native.errors import ArenaAliasError, MemoryPlanError, NativeFormatError, NativeRuntimeError
from native.format import program as P
from native.format.memory import plan_memory, verify_plan
from native.format.verify import decode
from native.run import cpp_engine
from native.run.runtime import OUT_MIN_BYTES, Method
from tests.native._native_util import emit_ep
from tests.native._random_programs import IDENTITY, alias_recipes, build


def _bitwise(got, want, where: str) -> None:
    g, gs = pytree.tree_flatten(got)
    w, ws = pytree.tree_flatten(want)
    assert gs == ws, f"{where}: structure {gs} != {ws}"
    for k, (a, b) in enumerate(zip(g, w, strict=True)):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b.detach()), \
            f"{where}[{k}]: differs by {(a.double() - b.double()).abs().max().item()}"


def _all_engines_agree(ep: torch.export.ExportedProgram, inputs: list[tuple], *,
                       eager_bitwise: bool = True) -> P.NativeProgram:
    """Arena and heap runs, checked and unchecked, give identical bits; eager too unless told.

    (``ep.module()`` may pick another BLAS path for attention than the same kernels called one by
    one, a last-bit difference that has nothing to do with memory planning.)
    """
    native = emit_ep(ep)
    eager = copy.deepcopy(ep).module()
    # Arena runs: the default (small tensors allocated by their kernels), every planned tensor
    # written out= into the arena, and with the runtime's checks (also all out=).
    methods = {(arena, check, m): Method(native, arena=arena, check=check, out_min_bytes=m)
               for arena, check, m in ((False, False, 0), (False, True, 0), (True, False, OUT_MIN_BYTES),
                                       (True, False, 0), (True, True, OUT_MIN_BYTES))}
    if cpp_engine.available():  # the C++ runtime: every planned call out=, same kernels, same bits
        methods.update({(arena, "cpp", 0): cpp_engine.load(native, arena=arena) for arena in (False, True)})
    for i, args in enumerate(inputs):
        with torch.no_grad():
            want = eager(*copy.deepcopy(args))
        heap = methods[False, False, 0].run(*copy.deepcopy(args))
        if eager_bitwise:
            _bitwise(heap, want, f"input set {i}, heap against eager")
        else:
            torch.testing.assert_close(heap, want, rtol=1e-5, atol=1e-5)
        for (arena, check, min_bytes), m in methods.items():
            _bitwise(m.run(*copy.deepcopy(args)), heap,
                     f"input set {i}, arena={arena}, check={check}, out_min_bytes={min_bytes} against heap")
    return native


@given(alias_recipes(), st.booleans())
def test_identity_ops_between_out_kernels_arena_heap_and_eager_agree_bitwise(recipe, decompose):
    model, example, others, dyn = build(recipe)
    try:
        ep = torch.export.export(model, example, dynamic_shapes=dyn, strict=False)
        if decompose:
            ep = ep.run_decompositions()
    except Exception:  # not a subject: torch cannot export this draw
        assume(False)
    _all_engines_agree(ep, [example, *others])


class _DropoutSandwich(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = torch.nn.Linear(16, 16), torch.nn.Linear(16, 16), torch.nn.Linear(16, 16)
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x):
        return self.c(self.b(self.drop(self.a(x))).relu())


@pytest.mark.parametrize("decompose", [False, True])
def test_linear_dropout_eval_linear_in_arena_mode(decompose):
    torch.manual_seed(0)
    ep = torch.export.export(_DropoutSandwich().eval(), (torch.randn(4, 16),))
    ep = ep.run_decompositions() if decompose else ep
    _all_engines_agree(ep, [(torch.randn(4, 16),), (torch.randn(4, 16),)])


@pytest.mark.parametrize("decompose", [False, True])
def test_transformer_encoder_layer_without_dropout_in_arena_mode(decompose):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0,
                                             batch_first=True).eval()
    ep = torch.export.export(layer, (torch.randn(2, 16, 32),))
    ep = ep.run_decompositions() if decompose else ep
    _all_engines_agree(ep, [(torch.randn(2, 16, 32),)], eager_bitwise=False)


class _UnsafeViews(torch.nn.Module):
    """Each unsafe view of an intermediate that dies at the call, then fresh work the plan could
    place in that intermediate's memory while the views are alive."""

    def forward(self, x):
        a, b = torch.ops.aten.unsafe_split.Tensor(x * 2, 2)
        c, d = torch.ops.aten.unsafe_split_with_sizes.default(x * 3, [1, 3])
        e, f = torch.ops.aten.unsafe_chunk.default(x * 4, 2)
        g = torch.ops.aten._unsafe_view.default(x * 5, [12])
        w = ((x + 1) * 3).sin()
        return a + w[:2], b * w[2:], c - w[:1], d + 1, e * f, g.sin()


def test_unsafe_views_declare_their_aliases_and_run_in_arena_mode():
    # Their schemas declare fresh results, but their kernels return views of the input.
    p = _all_engines_agree(torch.export.export(_UnsafeViews(), (torch.randn(4, 3),)),
                           [(torch.randn(4, 3),), (torch.randn(4, 3),)]).program
    unsafe = {op.name: op.returns_alias for op in p.operators if "unsafe" in op.name and op.overload != "out"}
    assert unsafe == {"aten::unsafe_split": [[0]], "aten::unsafe_split_with_sizes": [[0]],
                      "aten::unsafe_chunk": [[0]], "aten::_unsafe_view": [[0]]}


class _Dequantize(torch.nn.Module):
    def forward(self, x):
        return torch.ops.aten.dequantize.self(x * 2).sin()


@pytest.mark.parametrize(("model", "name"), [
    (_UnsafeViews, "aten::unsafe_split"), (_UnsafeViews, "aten::unsafe_split_with_sizes"),
    (_UnsafeViews, "aten::unsafe_chunk"), (_UnsafeViews, "aten::_unsafe_view"), (_Dequantize, "aten::dequantize"),
])
def test_both_runtimes_refuse_a_file_hiding_an_unannotated_view(model, name):
    """Kernels that return views their schemas hide: a file declaring their results fresh is refused
    in arena mode by both loaders alike (one list, serde.bridge.effects.UNANNOTATED_VIEWS, and its
    C++ copy)."""
    native = emit_ep(torch.export.export(model(), (torch.randn(4, 3),)))
    k = next(i for i, op in enumerate(native.program.operators) if op.name == name and op.overload != "out")
    assert native.program.operators[k].returns_alias == [[0]]
    lying = decode(P.NativeProgram(_as_if_fresh(native.program, k), native.segment).encode())
    want = rf"operators\[{k}\] \({name}\.\w+\): return 0 may share storage with arguments \[0\]"
    with pytest.raises(NativeFormatError, match=want):
        Method(lying, arena=True)
    if cpp_engine.available():
        with pytest.raises(NativeFormatError, match=want):
            cpp_engine.load(lying, arena=True)


def _sandwich() -> P.NativeProgram:
    torch.manual_seed(0)
    return emit_ep(torch.export.export(_DropoutSandwich().eval(), (torch.randn(4, 16),)))


def _dropout_op(p: P.Program) -> int:
    return next(i for i, op in enumerate(p.operators) if op.name == "aten::dropout")


def _as_if_fresh(p: P.Program, op: int, name: str | None = None) -> P.Program:
    """``p`` with operator ``op`` declaring fresh results (renamed to ``name``), replanned on that claim."""
    ops = list(p.operators)
    ops[op] = P.Operator(name or ops[op].name, ops[op].overload, [[] for _ in ops[op].returns_alias])
    lying = msgspec.structs.replace(p, operators=ops)
    return msgspec.structs.replace(lying, memory_plan=plan_memory(lying))


def test_dropout_declares_that_it_may_return_its_input():
    p = _sandwich().program
    assert p.operators[_dropout_op(p)].returns_alias == [[0]]


def test_verify_plan_rejects_a_plan_that_trusts_the_schema():
    # The plan a schema-trusting planner makes reuses the dropout input's slot while the dropout
    # result (that same memory) is alive: with the true aliases back, verify_plan refuses it.
    native = _sandwich()
    p = native.program
    k = _dropout_op(p)
    trusting = _as_if_fresh(p, k)
    assert trusting.memory_plan != p.memory_plan
    honest_ops = list(trusting.operators)
    honest_ops[k] = p.operators[k]
    with pytest.raises(MemoryPlanError, match=r"lifetime \d+\.\.\d+ differs from the derived|are live together"):
        verify_plan(msgspec.structs.replace(trusting, operators=honest_ops))


def test_runtime_refuses_a_file_declaring_fewer_aliases_than_its_kernels():
    native = _sandwich()
    trusting = decode(P.NativeProgram(_as_if_fresh(native.program, _dropout_op(native.program)),
                                      native.segment).encode())  # consistent with itself: it loads
    with pytest.raises(NativeFormatError, match=r"operators\[\d+\] \(aten::dropout.default\): return 0 may share "
                                                r"storage with arguments \[0\] in this process's kernels, but the "
                                                r"file declares \[\]"):
        Method(trusting, arena=True)
    Method(trusting)  # heap mode does not depend on the declaration
    if cpp_engine.available():
        with pytest.raises(NativeFormatError, match=r"operators\[\d+\] \(aten::dropout.default\): return 0 may "
                                                    r"share storage with arguments \[0\] in this process's kernels, "
                                                    r"but the file declares \[\]"):
            cpp_engine.load(trusting, arena=True)
        cpp_engine.load(trusting)


_lib = torch.library.Library("pt2serde_arena_test", "DEF")  # noqa: TOR901 - a kernel that lies about aliasing
_lib.define("passthrough(Tensor x, float p, bool train) -> Tensor")
_lib.impl("passthrough", lambda x, p, train: x, "CPU")


def test_a_kernel_returning_arena_memory_stops_the_run_naming_the_node():
    # An op this process cannot see through (a CPU kernel that returns its input, schema says
    # fresh): the plan is built on its promise, and the runtime catches the broken promise
    # instead of computing with reused memory.
    native = _sandwich()
    lying = _as_if_fresh(native.program, _dropout_op(native.program), "pt2serde_arena_test::passthrough")
    lying = msgspec.structs.replace(lying, operators=[msgspec.structs.replace(o, overload="default")
                                                     if o.name.startswith("pt2serde_arena_test") else o
                                                     for o in lying.operators])
    nat = decode(P.NativeProgram(lying, native.segment).encode())
    x = torch.randn(4, 16)
    with pytest.raises(ArenaAliasError, match=r"instruction \d+ \(pt2serde_arena_test::passthrough.default, node "
                                              r"'dropout' in module 'drop'\): the kernel returned arena memory"):
        Method(nat, arena=True, out_min_bytes=0).run(x)
    with pytest.raises(ArenaAliasError, match=r"node 'dropout' in module 'drop'\): value \d+ shares storage"):
        Method(nat, check=True).run(x)
    if cpp_engine.available():
        with pytest.raises(ArenaAliasError, match=r"instruction \d+ \(pt2serde_arena_test::passthrough.default, "
                                                  r"node 'dropout' in module 'drop'\): the kernel returned arena memory"):
            cpp_engine.load(nat, arena=True).run(x)


class _Dynamic(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = torch.nn.Linear(8, 64), torch.nn.Linear(64, 8)

    def forward(self, x):
        return self.b(torch.nn.functional.dropout(self.a(x).relu(), 0.1, training=False)).sin()


def test_arena_is_sized_for_the_run_and_bounded_by_the_plan():
    torch.manual_seed(0)
    batch = torch.export.Dim("batch", min=2, max=512)
    ep = torch.export.export(_Dynamic().eval(), (torch.randn(4, 8),), dynamic_shapes=({0: batch},))
    native = emit_ep(ep)
    bound = native.program.memory_plan.arena_size
    m = Method(native, arena=True)
    eager = ep.module()
    sizes = {}
    for b in (3, 512, 17, 3):
        x = torch.randn(b, 8)
        _bitwise(m.run(x), eager(x), f"batch {b}")
        sizes[b] = m._plans[(b,)][1]
    assert sizes[3] < sizes[17] < sizes[512] <= bound
    assert sizes[3] * 50 < bound  # a small batch does not pay for the largest one
    if cpp_engine.available():  # the same packing in C++: the arena grows to what the runs need
        cpp = cpp_engine.load(native, arena=True)
        for b, arena in ((3, sizes[3]), (17, sizes[17]), (512, sizes[512]), (3, sizes[512])):
            x = torch.randn(b, 8)
            _bitwise(cpp.run(x), m.run(x), f"C++ batch {b}")
            assert cpp.arena_bytes == arena, f"batch {b}"


def test_every_instruction_carries_its_node_and_module():
    native = _sandwich()
    p = native.program
    assert len(p.instruction_handles) == len(p.instructions)
    kernels = [(p.operators[ins.op].name, p.debug_handles[h])
               for ins, h in zip(p.instructions, p.instruction_handles, strict=True) if isinstance(ins, P.KernelCall)]
    assert [(name, d.node, d.module) for name, d in kernels] == [
        ("aten::linear", "a_linear", "a"), ("aten::dropout", "dropout", "drop"),
        ("aten::linear", "b_linear", "b"), ("aten::relu", "relu", ""), ("aten::linear", "c_linear", "c")]
    assert all(d.op.startswith("torch.ops.aten.") for _, d in kernels)


def test_identity_table_covers_ops_whose_results_really_alias():
    # The generator's identity ops are the subject: each one really returns (a view of) its input.
    x = torch.randn(3, 4)
    for name, f in IDENTITY.items():
        assert f(x).untyped_storage().data_ptr() == x.untyped_storage().data_ptr(), name


# ---------------------------------------------------------------- planned results are what the program declares

_UNDECLARED = ("; in arena mode every planned result must be what the program declares, so the file is damaged or "
               "was not written by pt2serde")


class _AddRelu(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(8, 8))

    def forward(self, x, y):
        return torch.relu(x + y.float()).sin() + self.w.sum()


def _add_relu() -> tuple[P.NativeProgram, int, int]:
    """The program of _AddRelu (fixed sizes: its add and relu have arena slots), the positions of
    its add and its relu."""
    torch.manual_seed(0)
    ep = torch.export.export(_AddRelu(), (torch.randn(4, 8), torch.randn(4, 8, dtype=torch.float64)))
    native = emit_ep(ep)
    p = native.program
    add, relu = (next(pc for pc, i in enumerate(p.instructions) if isinstance(i, P.KernelCall)
                      and p.operators[i.op].name == name) for name in ("aten::add", "aten::relu"))
    from native.format.memory import out_calls

    assert {add, relu} <= out_calls(p)
    return native, add, relu


def _edited_args(native: P.NativeProgram, pc: int, args: list[int]) -> P.NativeProgram:
    ins = list(native.program.instructions)
    ins[pc] = msgspec.structs.replace(ins[pc], args=args)
    return decode(P.NativeProgram(msgspec.structs.replace(native.program, instructions=ins), native.segment).encode())


def _arena_runs(native: P.NativeProgram, *args) -> list:
    """Each arena runtime's outputs or its error (class and message): Python with small results
    computed functionally (the default) and with every planned result written out=, and C++."""
    methods = [lambda: Method(native, arena=True), lambda: Method(native, arena=True, out_min_bytes=0)]
    if cpp_engine.available():
        methods.append(lambda: cpp_engine.load(native, arena=True))
    got = []
    for make in methods:
        try:
            got.append(make().run(*[a.clone() for a in args]))
        except Exception as e:  # noqa: BLE001 - compared below, class and message
            got.append(f"{type(e).__name__}: {e}")
    return got


def test_a_planned_result_of_other_sizes_than_declared_stops_the_run_in_both_runtimes():
    # relu given the [8, 8] weight for its [4, 8] slot: the C++ runtime's out= kernel resized the
    # slot's view over its neighbours' and the runtimes ended differently. Now every arena run
    # stops at the call with the same message; a result computed functionally (Python, small
    # tensors) is computed again out= first, so even the sizes it reports are the same.
    native, _, relu = _add_relu()
    p = native.program
    w = p.state[0].value
    nat = _edited_args(native, relu, [w])
    out = p.instructions[relu].outs[0]
    x, y = torch.randn(4, 8), torch.randn(4, 8, dtype=torch.float64)
    want = (f"NativeRuntimeError: instruction {relu} (aten::relu.default, node 'relu'): value {out} has sizes "
            f"[8, 8], declared [4, 8]{_UNDECLARED}")
    runs = _arena_runs(nat, x, y)
    assert runs == [want] * len(runs)
    # The slot's view has its declared shape again, and the next run stops the same way.
    m = Method(nat, arena=True, out_min_bytes=0)
    for _ in range(2):
        with pytest.raises(NativeRuntimeError, match=r"has sizes \[8, 8\], declared \[4, 8\]"):
            m.run(x, y)
        assert m._arena_view(out).shape == (4, 8)


def test_a_planned_result_of_another_dtype_is_cast_as_its_out_kernel_casts_it_in_both_runtimes():
    # add given the float64 input where the program converted it first: the functional kernel
    # returns float64 for a float32 slot, the out= kernel computes in float64 and casts into the
    # slot. Every arena run now gives the out= kernel's result, bit for bit.
    native, add, _ = _add_relu()
    p = native.program
    x, y = (i.value for i in p.inputs)
    nat = _edited_args(native, add, [x, y, *p.instructions[add].args[2:]])
    x_in, y_in = torch.randn(4, 8), torch.randn(4, 8, dtype=torch.float64)
    runs = _arena_runs(nat, x_in, y_in)
    first = runs[0]
    assert not isinstance(first, str), first
    for got in runs[1:]:
        assert not isinstance(got, str), got
        _bitwise(got, first, "arena runs")
    weight = Method(native).state_dict()["w"]
    _bitwise(first, torch.relu((x_in.double() + y_in).float()).sin() + weight.sum(), "the out= kernel's cast")
