"""``pt2serde run --compare``: the numeric gap between a native run and the loaded program in eager.

A wrong kernel is planted two ways: a kernel registered for one custom operator only while the
native side runs (the dispatcher then runs it instead of the operator's own), and a program file
whose call of one node names another operator. ``--compare`` must name that node; correct programs
must show no gap.
"""

from __future__ import annotations

import contextlib

import msgspec
import pytest
import torch

import serde
from native.emit.emitter import emit_artifact
from native.format import program as P
from native.format.verify import read_program
from native.run.compare import compare, eager_values, format_comparison
from native.run.runtime import Method
from serde.cli import main
from tests.native._native_util import CASES, UNSUPPORTED, exported, inputs_of
from tests.tiers import tiered

_NS = "pt2serde_cmp"
_DEF = torch.library.Library(_NS, "DEF")
_DEF.define("scale(Tensor x) -> Tensor")
_DEF.impl("scale", lambda x: x * 2, "CompositeExplicitAutograd")
_DEF.impl("scale", lambda x: torch.empty_like(x), "Meta")


@contextlib.contextmanager
def _wrong_scale(delta: float):
    """A CPU kernel for ``scale`` that is off by ``delta``: the dispatcher prefers it to the
    CompositeExplicitAutograd one while the library object lives."""
    lib = torch.library.Library(_NS, "IMPL")
    lib.impl("scale", lambda x: x * 2 + delta, "CPU")
    try:
        yield
    finally:
        del lib  # its finalizer deregisters the kernel


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 16)
        self.out = torch.nn.Linear(16, 8)

    def forward(self, x):
        return x + self.out(torch.ops.pt2serde_cmp.scale(torch.relu(self.fc(x))))


def _saved(tmp_path, model, args, name="m"):
    art = tmp_path / f"{name}.pt2s"
    serde.save(torch.export.export(model, args), art)
    return art


def _blocks(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Sequential(_Block(), _Block()).eval()
    x = torch.randn(4, 8)
    return _saved(tmp_path, model, (x,)), x


@pytest.mark.parametrize("arena", [False, True])
def test_a_planted_wrong_kernel_is_named_by_its_node_and_module(tmp_path, arena):
    art, x = _blocks(tmp_path)
    ep = serde.load(art)
    method = Method(emit_artifact(art), arena=arena)
    eager = eager_values(ep, (x,), {})
    with _wrong_scale(1e-3):
        res = compare(method, ep, (x,), {}, eager=eager)
    assert torch.equal(torch.ops.pt2serde_cmp.scale(x), x * 2), "the planted kernel outlived the test"
    g = res.first_gap
    assert g is not None and g.node == "_0_scale" and g.module == "0" and g.op == "pt2serde_cmp.scale.default"
    assert g.max_abs == pytest.approx(1e-3, rel=1e-3)
    assert [r.ok for r in res.rows] == [True, True, False], "every node before it was equal; the run stops there"
    assert res.rows[-1] is g
    text = format_comparison(res, method.describe)
    assert "first gap: instruction" in text and "node '_0_scale' in module '0'" in text


def test_tolerances_accept_a_gap_within_them_and_not_beyond(tmp_path):
    art, x = _blocks(tmp_path)
    ep = serde.load(art)
    native = emit_artifact(art)
    eager = eager_values(ep, (x,), {})
    with _wrong_scale(1e-3):
        loose = compare(Method(native), ep, (x,), {}, atol=1e-2, eager=eager)
        tight = compare(Method(native), ep, (x,), {}, atol=1e-4, eager=eager)
        relative = compare(Method(native), ep, (x,), {}, rtol=0.5, eager=eager)
        both = compare(Method(native), ep, (x,), {}, rtol=0.5, atol=2e-3, eager=eager)
    assert loose.ok and both.ok and loose.rows[-1].pc == -1
    assert all(r.ok for r in loose.rows) and max(r.max_abs for r in loose.rows) > 0
    assert tight.first_gap is not None and tight.first_gap.node == "_0_scale"
    # relu's zeros stay zeros in eager: any gap there is infinitely relative
    assert relative.first_gap is not None and relative.first_gap.node == "_0_scale"
    assert relative.first_gap.max_rel == float("inf")


def test_the_cli_names_the_node_whose_call_a_program_file_changed(tmp_path, capsys):
    art, _ = _blocks(tmp_path)
    good, bad = tmp_path / "good.pt2n", tmp_path / "bad.pt2n"
    assert main(["emit", str(art), str(good)]) == 0
    native = read_program(good)
    p = native.program
    # The second block's relu calls sigmoid instead: same schema, so the file loads and runs.
    ops = [msgspec.structs.replace(o, name="aten::sigmoid") if o.name == "aten::relu" else o for o in p.operators]
    relu = [pc for pc, ins in enumerate(p.instructions)
            if isinstance(ins, P.KernelCall) and p.operators[ins.op].name == "aten::relu"]
    assert len(relu) == 2 and len({p.instructions[pc].op for pc in relu}) == 1
    P.write_program(bad, P.NativeProgram(msgspec.structs.replace(p, operators=ops), native.segment))
    capsys.readouterr()
    assert main(["run", str(good), "--inputs", str(art), "--compare", str(art)]) == 0
    out = capsys.readouterr().out
    assert "no gap" in out and "_1_relu (1)" in out
    assert main(["run", str(bad), "--inputs", str(art), "--compare", str(art), "--arena"]) == 1
    out = capsys.readouterr().out
    assert f"first gap: instruction {relu[0]} (aten::sigmoid.default, node '_0_relu' in module '0')" in out
    assert "_0_fc_linear (0.fc)" in out and "_1_relu" not in out, "stops at the first gap"


def test_compare_refuses_the_cpp_engine_with_one_line(tmp_path, capsys):
    art, _ = _blocks(tmp_path)
    prog = tmp_path / "m.pt2n"
    assert main(["emit", str(art), str(prog)]) == 0
    capsys.readouterr()
    assert main(["run", str(prog), "--inputs", str(art), "--compare", str(art), "--engine", "cpp"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--compare runs the python engine" in err


# Modules (mlp, tied_weights), symbolic sizes and scalars, control flow and mutations stay in the
# fast run; the other zoo cases run under -m slow.
_QUICK = ("mlp", "tied_weights", "dynamic_arith", "sym_scalars", "cond", "input_mutation_aten",
          "parameter_mutation_aten")


@pytest.mark.parametrize("name", tiered([n for n in CASES if n not in UNSUPPORTED], _QUICK))
def test_zoo_programs_show_no_gap_and_their_node_names_agree(tmp_path, name):
    art = tmp_path / "m.pt2s"
    serde.save(exported(name), art)
    native = emit_artifact(art)
    p = native.program
    ep = serde.load(art)
    top = {n.name for n in ep.graph.nodes if n.op == "call_function"}
    # Every node the emitter named at the top level is a node of the loaded graph, by the same name.
    kernel_nodes = {p.debug_handles[h].node for h in p.instruction_handles if h >= 0}
    hops = {d.node for d in p.debug_handles if d.op.startswith("torch.ops.higher_order.")}
    if not hops:
        assert kernel_nodes <= top, sorted(kernel_nodes - top)
    assert hops <= top
    if name in ("mlp", "tied_weights"):
        assert {d.module for d in p.debug_handles} - {""}, "a program with modules"
    for arena in (False, True):
        for args, kwargs in inputs_of(name)[:2]:
            res = compare(Method(native, arena=arena), ep, args, kwargs)
            assert res.ok, format_comparison(res)
            assert res.rows[-1].pc == -1, "the outputs are compared last"
            assert len(res.rows) > 1 or hops, "a program without control flow has kernel calls to compare"
            if name == "parameter_mutation_aten":
                assert [r.node for r in res.rows if r.pc < 0] == ["<outputs>", "<state w>"]


def test_inputs_that_do_not_fit_get_one_line_naming_the_input(tmp_path, capsys):
    from native.run.io import write_inputs

    art, _ = _blocks(tmp_path)
    prog, inp = tmp_path / "m.pt2n", tmp_path / "in.json"
    assert main(["emit", str(art), str(prog)]) == 0
    write_inputs(inp, (torch.randn(4, 9),))
    capsys.readouterr()
    assert main(["run", str(prog), "--inputs", str(inp), "--compare", str(art)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "input 'input': dimension 1 is 9" in err, err


def test_another_artifact_matches_no_node_and_its_outputs_differ(tmp_path, capsys):
    art, x = _blocks(tmp_path)
    torch.manual_seed(1)
    other = _saved(tmp_path, torch.nn.Sequential(torch.nn.Tanh()), (x,), name="other")
    prog = tmp_path / "m.pt2n"
    assert main(["emit", str(art), str(prog)]) == 0
    capsys.readouterr()
    assert main(["run", str(prog), "--inputs", str(art), "--compare", str(other)]) == 1
    out = capsys.readouterr().out
    assert "no kernel call was compared" in out and "program was not emitted from this artifact" in out
    assert "gap at the outputs" in out



class _Accumulate(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("total", torch.ones(3))

    def forward(self, x):
        self.total.add_(x)
        return x * 2


def test_a_wrong_buffer_update_no_output_reads_is_named(tmp_path):
    torch.manual_seed(0)
    x = torch.randn(3)
    art = tmp_path / "m.pt2s"
    serde.save(torch.export.export(_Accumulate(), (x,)).run_decompositions(), art)
    ep, native = serde.load(art), emit_artifact(art)
    ok = compare(Method(native), ep, (x,), {})
    assert ok.ok and [r.node for r in ok.rows if r.pc < 0] == ["<outputs>", "<state total>"]
    # The update's copy into the buffer (an instruction of no node) copies the input instead of the sum.
    p = native.program
    (pc,) = [pc for pc, ins in enumerate(p.instructions) if isinstance(ins, P.KernelCall)
             and p.operators[ins.op].name == "aten::copy_" and p.instruction_handles[pc] == -1]
    ins = p.instructions[pc]
    wrong = msgspec.structs.replace(ins, args=[ins.args[0], p.inputs[0].value, *ins.args[2:]])
    bad = msgspec.structs.replace(p, instructions=[*p.instructions[:pc], wrong, *p.instructions[pc + 1:]])
    res = compare(Method(P.NativeProgram(bad, native.segment)), ep, (x,), {})
    assert res.rows[-2].node == "<outputs>" and res.rows[-2].ok
    assert res.first_gap is res.rows[-1] and res.first_gap.node == "<state total>"
    assert res.first_gap.max_abs == pytest.approx(1.0)  # (1 + x) - x, rounded
    assert "gap at state total: max abs 1," in format_comparison(res)
