"""Operators across torch releases: the snapshots, the checker, the operator upgraders in both
directions, and artifacts written by another torch (fixtures/operators/torch-<version>/).

Tests that load an artifact written by the other supported torch run under the torch that reads
it; under the other one they are skipped with the reason listed in ``ONLY_ON`` (run the suite
under both torches to run them all).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
import torch

import serde
from serde.archive.artifact import read_artifact
from serde.cli import check as check_cmd
from serde.cli import main as cli_main
from serde.core import schema
from serde.errors import OperatorChangeError, UnknownOperatorError
from serde.opsets import (
    STEPS,
    UnknownReleaseError,
    convert,
    diff_snapshots,
    load_snapshot,
    release_of,
    snapshot_releases,
    step_handling,
)
from serde.opsets.helpers import Refusal, StepContext, default_argument, drop_new_defaults, fill_new_defaults
from serde.opsets.schemas import OpSchema, parse_schema, parse_snapshot, target_key

REPO = Path(__file__).resolve().parents[3]
FIXTURES = REPO / "fixtures" / "operators"
OPSETS = REPO / "src" / "serde" / "opsets"
RUNNING = release_of(torch.__version__)
AT_213 = FIXTURES / "torch-2.13.0"
AT_214 = FIXTURES / "torch-2.14.1"


def only_on(release: tuple[int, int], why: str):
    return pytest.mark.skipif(RUNNING != release, reason=f"runs under torch {release[0]}.{release[1]}: {why}")


ON_214 = only_on((2, 14), "it loads artifacts written by torch 2.13 with the upgraders")
ON_213 = only_on((2, 13), "it loads artifacts written by torch 2.14 on the older torch")


def _outputs(ep, inputs):
    out = ep.module()(*inputs)
    return list(out) if isinstance(out, tuple) else [out]


def _assert_writer_outputs(path: Path):
    ref = serde.load_tree(path.with_name(path.name.replace(".pt2s", ".outputs.json")))
    got = _outputs(serde.load(path), ref["inputs"])
    assert len(got) == len(ref["outputs"])
    for i, (a, b) in enumerate(zip(got, ref["outputs"], strict=True)):
        # The same LAPACK routines run on both sides (linalg_cholesky / linalg_qr are what cholesky /
        # qr called), so the results are the writer's bit for bit.
        assert torch.equal(a, b), f"output {i}: max abs difference {(a - b).abs().max().item()}"


def _targets(ep) -> list[str]:
    return [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]


# ---------------------------------------------------------------- snapshots


def test_every_schema_of_this_torch_parses_as_torch_reads_it():
    for s in torch._C._jit_get_all_schemas():
        if "..." in str(s):  # varargs (prim::PythonOp, aten::format, ...): torch lists no argument for them
            continue
        p = parse_schema(str(s))
        assert (p.qualname, p.overload) == (s.name, s.overload_name)
        assert [(a.name, a.kwarg_only, a.default is not None) for a in p.args] == \
            [(a.name, a.kwarg_only, a.has_default_value()) for a in s.arguments], str(s)
        writes = [a.alias_info is not None and a.alias_info.is_write for a in s.arguments]
        assert ["!" in a.type for a in p.args] == writes, str(s)
        assert [r.name for r in p.returns] == [r.name for r in s.returns] or str(s).endswith("-> ()"), str(s)


def test_a_snapshot_holds_its_release_and_every_schema_once():
    for release in snapshot_releases():
        text = (OPSETS / f"torch-{release[0]}.{release[1]}.json").read_text()
        snap = parse_snapshot(text)
        assert snap.release == release
        lines = msgspec.json.decode(text)["schemas"]
        assert lines == sorted(set(lines)) and len(snap.ops) == len(lines)
        assert "cond" in snap.higher_order_ops


def test_the_committed_snapshot_of_this_torch_is_what_the_tool_writes():
    snap_file = OPSETS / f"torch-{RUNNING[0]}.{RUNNING[1]}.json"
    assert snap_file.exists(), (f"no operator snapshot for torch {torch.__version__}: write {snap_file.name} with "
                                "python -m serde.dev.opsnapshot, and its upgrader step (see CONTRIBUTING.md, "
                                "\"Adding a torch release\")")
    committed = snap_file.read_text()
    header = msgspec.json.decode(committed)
    if header["torch"] != str(torch.__version__).split("+")[0] or \
            header["build"] != (f"cu{torch.version.cuda.replace('.', '')}" if torch.version.cuda else "cpu"):
        pytest.skip(f"the snapshot was taken from torch {header['torch']} ({header['build']}), this is "
                    f"{torch.__version__}: another build registers other operators")
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}"}
    r = subprocess.run([sys.executable, "-m", "serde.dev.opsnapshot"], capture_output=True, text=True,
                       env=env, timeout=300, check=True)
    assert r.stdout == committed


# ---------------------------------------------------------------- the checker


def _snap(*schemas: str, release=(9, 0)):
    return parse_snapshot(msgspec.json.encode({"torch": f"{release[0]}.{release[1]}.0", "higher_order_ops": [],
                                               "schemas": list(schemas)}).decode())


@pytest.mark.parametrize("old, new, kind", [
    ("t::f(Tensor grad) -> Tensor", "t::f(Tensor grad_output) -> Tensor", "renamed-argument"),
    ("t::f(Tensor a) -> Tensor", "t::f(Tensor a, *, bool b=False) -> Tensor", "new-argument-with-default"),
    ("t::f(Tensor a) -> Tensor", "t::f(Tensor a, int b) -> Tensor", "new-argument-without-default"),
    ("t::f(Tensor a, int b) -> Tensor", "t::f(Tensor a) -> Tensor", "removed-argument"),
    ("t::f(Tensor a) -> Tensor", "t::f(Tensor(a!) a) -> Tensor(a!)", "changed-type-or-alias"),
    ("t::f(Tensor a, int b=1) -> Tensor", "t::f(Tensor a, int b=2) -> Tensor", "changed-default"),
    ("t::f(Tensor a, int b=1) -> Tensor", "t::f(Tensor a, *, int b=1) -> Tensor", "changed-keyword-only"),
    ("t::f(Tensor a, int b) -> Tensor", "t::f(int b, Tensor a) -> Tensor", "reordered-arguments"),
    ("t::f(Tensor a) -> (Tensor x, Tensor y)", "t::f(Tensor a) -> (Tensor x, Tensor z)", "renamed-return"),
    ("t::f(Tensor a) -> (Tensor x, Tensor y)", "t::f(Tensor a) -> Tensor", "changed-type-or-alias"),
])
def test_the_checker_classifies_each_kind_of_change(old, new, kind):
    changes = diff_snapshots(_snap(old), _snap(new, release=(9, 1)))
    assert kind in [c.kind for c in changes], [c.line() for c in changes]
    assert all(c.op == "t::f.default" and c.old == old and c.new == new for c in changes)


def test_the_checker_reports_removed_and_new_operators():
    changes = diff_snapshots(_snap("t::f(Tensor a) -> Tensor"), _snap("t::g(Tensor a) -> Tensor", release=(9, 1)))
    assert [(c.kind, c.op) for c in changes] == [("removed-operator", "t::f.default"), ("new-operator", "t::g.default")]
    assert diff_snapshots(_snap("t::f(Tensor a) -> Tensor"), _snap("t::f(Tensor a) -> Tensor")) == []


def test_the_checker_finds_the_known_changes_from_2_13_to_2_14():
    found = {(c.kind, c.op) for c in diff_snapshots(load_snapshot((2, 13)), load_snapshot((2, 14)))}
    assert {("removed-operator", "aten::cholesky.default"), ("removed-operator", "aten::cholesky.out"),
            ("removed-operator", "aten::qr.default"), ("removed-operator", "aten::qr.Q"),
            ("renamed-argument", "aten::_cdist_backward.default"), ("renamed-argument", "aten::_pdist_backward.out"),
            ("new-operator", "aten::linalg_polar.default"),
            ("new-operator", "aten::linalg_matrix_sqrth.default")} <= found


def test_the_dev_command_lists_every_change_with_its_handling():
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}"}
    r = subprocess.run([sys.executable, "-m", "serde.dev.opchanges"], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "NOT HANDLED" not in r.stdout
    assert "aten::cholesky.default" in r.stdout and "rewritten to aten::linalg_cholesky.default" in r.stdout


# ---------------------------------------------------------------- every change is handled


def test_steps_join_consecutive_releases():
    releases = snapshot_releases()
    assert [(s.OLDER, s.NEWER) for s in STEPS] == list(zip(releases, releases[1:], strict=False))


@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.__name__.rsplit(".", 1)[-1])
def test_every_change_has_an_upgrader_or_a_listed_refusal(step):
    gaps = [f"{h.change.line()} (up: {h.up}, down: {h.down})" for h in step_handling(step)
            if h.up is None or h.down is None]
    assert not gaps, "\n".join(gaps)
    for key, reason in {**step.REFUSED_UP, **step.REFUSED_DOWN}.items():
        assert reason.strip(), f"{key} is refused without a reason"


def _value_for(arg) -> schema.Argument | None:
    t = arg.type.split("(")[0].removesuffix("?")
    if arg.default is not None:
        try:
            return default_argument(arg)
        except Refusal:
            return None
    return {"Tensor": schema.tensor_ref("t0"), "float": schema.Argument(as_float=2.0),
            "int": schema.Argument(as_int=1), "SymInt": schema.Argument(as_int=1),
            "bool": schema.Argument(as_bool=True), "str": schema.Argument(as_string="x"),
            "Tensor[]": schema.Argument(as_tensors=[schema.TensorArgument(name="t0")]),
            "int[]": schema.Argument(as_ints=[1]),
            # what torch writes for an Any argument is a plain value: a string, for the reduce_op that
            # 2.15 widened from str
            "Any": schema.Argument(as_string="sum")}.get(t, schema.Argument(as_none=True))


def _call_of(op: OpSchema, name: str) -> schema.Node:
    """A node calling ``op`` with every argument passed, as torch.export writes a call."""
    inputs = []
    for a in op.args:
        value = _value_for(a)
        if value is not None:
            kind = schema.ArgumentKind.KEYWORD if a.kwarg_only else schema.ArgumentKind.POSITIONAL
            inputs.append(schema.NamedArgument(name=a.name, arg=value, kind=kind))
    ns, rest = op.key.split("::")
    return schema.Node(target=f"torch.ops.{ns}.{rest}", inputs=inputs, name=name,
                       outputs=[schema.tensor_ref(name)], metadata=schema.NodeMetadata())


def _binds(node: schema.Node, op: OpSchema) -> list[str]:
    """What is wrong with ``node`` as a call of ``op`` (empty: it binds)."""
    bad, positional = [], [a for a in op.args if not a.kwarg_only]
    given = set()
    for j, na in enumerate(node.inputs):
        if na.kind == schema.ArgumentKind.POSITIONAL:
            if j >= len(positional) or positional[j].name != na.name:
                bad.append(f"positional inputs[{j}] {na.name!r}")
        elif op.arg(na.name) is None:
            bad.append(f"keyword {na.name!r}")
        given.add(na.name)
    bad += [f"missing {a.name!r}" for a in op.args if a.default is None and a.name not in given]
    return bad


def _program_with(nodes: list[schema.Node], torch_version: str) -> schema.ExportedProgram:
    base = read_artifact(AT_213 / "cholesky.pt2s").program
    g = msgspec.structs.replace(base.graph_module.graph, nodes=nodes)
    return msgspec.structs.replace(base, torch_version=torch_version,
                                   graph_module=msgspec.structs.replace(base.graph_module, graph=g))


@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.__name__.rsplit(".", 1)[-1])
@pytest.mark.parametrize("up", [True, False], ids=["up", "down"])
def test_every_changed_operator_is_rewritten_to_a_binding_call_or_refused_by_name(step, up):
    older, newer = load_snapshot(step.OLDER), load_snapshot(step.NEWER)
    source, target = (older, newer) if up else (newer, older)
    frm, to = source.torch_version, target.torch_version
    keys = sorted({h.change.op for h in step_handling(step) if h.change.op in source.ops})
    assert keys
    for key in keys:
        node = _call_of(source.ops[key], "n")
        done = convert(_program_with([node], frm), frm, to)
        if done.refused:
            assert len(done.refused) == 1 and key in done.refused[0], done.refused
            rewrites = step.UPGRADE if up else step.DOWNGRADE
            assert key not in rewrites, f"{key} has a rewrite, and it refused a plain call: {done.refused}"
            continue
        (new,) = done.program.graph_module.graph.nodes
        new_key = target_key(new.target)
        assert new_key in target.ops, f"{key} -> {new_key}, which torch {to} lacks"
        assert not _binds(new, target.ops[new_key]), (key, _binds(new, target.ops[new_key]))
        assert new.outputs == node.outputs and new.name == node.name


def test_a_removed_operator_without_upgrader_is_refused_naming_both_releases():
    # One release's operator that the other lacks, through the generic rule of every step.
    node = _call_of(load_snapshot((2, 14)).ops["aten::linalg_polar.default"], "polar")
    program = _program_with([node], "2.14.1")
    with pytest.raises(OperatorChangeError) as info:
        serde.opsets.upgrade_operators(program, "2.13.0")
    msg = str(info.value)
    assert "graph.nodes['polar']: aten::linalg_polar.default" in msg
    assert "written by torch 2.14.1" in msg and "this is torch 2.13.0" in msg
    assert "introduced in torch 2.14" in msg
    assert isinstance(info.value, UnknownOperatorError)


def test_nodes_inside_subgraphs_are_upgraded():
    inner = _call_of(load_snapshot((2, 13)).ops["aten::cholesky.default"], "chol")
    base = read_artifact(AT_213 / "cholesky.pt2s").program.graph_module.graph
    sub = msgspec.structs.replace(base, nodes=[inner])
    cond = schema.Node(target="torch.ops.higher_order.cond", name="cond", metadata=schema.NodeMetadata(),
                       outputs=[schema.tensor_ref("cond")],
                       inputs=[schema.NamedArgument(name="", kind=schema.ArgumentKind.POSITIONAL,
                                                    arg=schema.Argument(as_graph=schema.GraphArgument(
                                                        name="true_graph_0", graph=sub)))])
    done = convert(_program_with([cond], "2.13.0"), "2.13.0", "2.14.1")
    assert done.applied == ["graph.nodes['cond'].inputs[0].graph.nodes['chol']: aten::cholesky.default -> "
                            "aten::linalg_cholesky.default (torch 2.13 -> 2.14: removed-operator: torch 2.14 no "
                            "longer has it)"]
    (new,) = done.program.graph_module.graph.nodes[0].inputs[0].arg.as_graph.graph.nodes
    assert new.target == "torch.ops.aten.linalg_cholesky.default"


def test_the_same_release_is_left_alone():
    program = read_artifact(AT_213 / "qr.pt2s").program
    assert serde.opsets.upgrade_operators(program, "2.13.7") is program
    # A release without a snapshot is left to the operator resolution, which names what it lacks.
    assert convert(program, program.torch_version, "2.99.0").program is program
    # A program that uses none of the changed operators comes back as it was.
    plain = _program_with([_call_of(load_snapshot((2, 13)).ops["aten::relu.default"], "relu")], "2.13.0")
    done = convert(plain, "2.13.0", "2.14.1")
    assert done.program is plain and done.applied == done.refused == [] and done.frm == (2, 13)


# ---------------------------------------------------------------- helpers


def _ctx(old: str, new: str | None) -> StepContext:
    return StepContext(parse_schema(old), parse_schema(new) if new else None, "graph.nodes['n']")


def test_qr_some_false_becomes_mode_complete_and_a_symbolic_some_is_refused():
    step = STEPS[0]
    rewrite = step.UPGRADE["aten::qr.default"]
    ctx = StepContext(load_snapshot((2, 13)).ops["aten::qr.default"],
                      load_snapshot((2, 14)).ops["aten::linalg_qr.default"], "n")
    node = _call_of(ctx.source, "qr")
    node = msgspec.structs.replace(node, inputs=[node.inputs[0], schema.NamedArgument(
        name="some", arg=schema.Argument(as_bool=False), kind=schema.ArgumentKind.POSITIONAL)])
    out = rewrite(node, ctx)
    assert [(na.name, na.arg) for na in out.inputs] == [("A", node.inputs[0].arg),
                                                        ("mode", schema.Argument(as_string="complete"))]
    symbolic = msgspec.structs.replace(node, inputs=[node.inputs[0], schema.NamedArgument(
        name="some", arg=schema.Argument(as_sym_bool=schema.SymBoolArgument(as_name="b")),
        kind=schema.ArgumentKind.POSITIONAL)])
    with pytest.raises(Refusal, match="'some' holds as_sym_bool"):
        rewrite(symbolic, ctx)


def test_new_defaults_are_filled_going_up_and_dropped_only_when_default_going_down():
    old, new = "t::f(Tensor a) -> Tensor", "t::f(Tensor a, *, Tensor? b=None, int c=3) -> Tensor"
    node = _call_of(parse_schema(old), "f")
    up = fill_new_defaults()(node, _ctx(old, new))
    assert [(na.name, na.arg, na.kind) for na in up.inputs[1:]] == [
        ("b", schema.Argument(as_none=True), schema.ArgumentKind.KEYWORD),
        ("c", schema.Argument(as_int=3), schema.ArgumentKind.KEYWORD)]
    assert drop_new_defaults()(up, _ctx(new, old)).inputs == node.inputs
    changed = msgspec.structs.replace(up, inputs=[*up.inputs[:2], schema.NamedArgument(
        name="c", arg=schema.Argument(as_int=4), kind=schema.ArgumentKind.KEYWORD)])
    with pytest.raises(Refusal, match="'c'.*other than its default"):
        drop_new_defaults()(changed, _ctx(new, old))


def test_a_renamed_argument_holding_the_wrong_kind_is_refused():
    rename = STEPS[0].UPGRADE["aten::_cdist_backward.default"]
    ctx = StepContext(load_snapshot((2, 13)).ops["aten::_cdist_backward.default"],
                      load_snapshot((2, 14)).ops["aten::_cdist_backward.default"], "n")
    node = _call_of(ctx.source, "cdb")
    bad = msgspec.structs.replace(node, inputs=[msgspec.structs.replace(node.inputs[0], arg=schema.Argument(
        as_int=3)), *node.inputs[1:]])
    with pytest.raises(Refusal, match="'grad'.*as_int"):
        rename(bad, ctx)
    assert [na.name for na in rename(node, ctx).inputs] == ["grad_output", "x1", "x2", "p", "cdist"]


# ---------------------------------------------------------------- artifacts written by another torch


@pytest.mark.parametrize("name", ["cholesky", "qr", "cdist_backward", "pdist_backward"])
def test_a_2_13_artifact_computes_what_it_computed_on_2_13(name):
    # Under 2.13 itself this is the baseline (no upgrader runs); under 2.14 the upgraders run.
    _assert_writer_outputs(AT_213 / f"{name}.pt2s")


@pytest.mark.parametrize("name", [
    pytest.param("linalg_polar", marks=pytest.mark.skipif(
        RUNNING < (2, 14), reason="linalg_polar is new in torch 2.14: test_linalg_polar_is_refused_on_2_13 covers "
                                  "the older torch")),
    "cdist_backward", "pdist_backward", "cdist_backward_for_2_13"])
def test_a_2_14_artifact_computes_what_it_computed_on_2_14(name):
    _assert_writer_outputs(AT_214 / f"{name}.pt2s")


def test_the_output_comparison_catches_a_difference(tmp_path):
    for name in ("qr.pt2s", "qr.outputs.json"):
        (tmp_path / name).write_bytes((AT_213 / name).read_bytes())
    ref = serde.load_tree(tmp_path / "qr.outputs.json")
    ref["outputs"][1] = ref["outputs"][1].clone()
    ref["outputs"][1][0, 0] = torch.nextafter(ref["outputs"][1][0, 0], torch.tensor(10.0, dtype=torch.float64))
    serde.save_tree(ref, tmp_path / "qr.outputs.json")
    with pytest.raises(AssertionError, match="output 1: max abs difference"):
        _assert_writer_outputs(tmp_path / "qr.pt2s")


@ON_214
def test_on_2_14_cholesky_and_qr_are_rewritten_to_linalg():
    assert _targets(serde.load(AT_213 / "cholesky.pt2s")) == ["aten.linalg_cholesky.default"] * 2
    assert [t for t in _targets(serde.load(AT_213 / "qr.pt2s")) if t.startswith("aten")] == \
        ["aten.linalg_qr.default"] * 2
    ep = serde.load(AT_213 / "cdist_backward.pt2s")
    (node,) = [n for n in ep.graph.nodes if n.op == "call_function"]
    assert node.target is torch.ops.aten._cdist_backward.default and len(node.args) == 5


@ON_214
def test_on_2_14_check_lists_the_upgrades_and_passes(capsys):
    assert cli_main(["check", str(AT_213 / "qr.pt2s")]) == 0
    out = capsys.readouterr().out
    assert out.count("aten::qr.default -> aten::linalg_qr.default (torch 2.13 -> 2.14") == 2
    assert out.rstrip().endswith("OK")


@ON_213
def test_linalg_polar_is_refused_on_2_13():
    with pytest.raises(OperatorChangeError) as info:
        serde.load(AT_214 / "linalg_polar.pt2s")
    msg = str(info.value)
    assert "aten::linalg_polar.default" in msg and "introduced in torch 2.14" in msg
    assert "written by torch 2.14.1" in msg and f"this is torch {torch.__version__}" in msg


@ON_213
def test_on_2_13_check_reports_the_refusal(capsys):
    assert cli_main(["check", str(AT_214 / "linalg_polar.pt2s")]) == 1
    out = capsys.readouterr().out
    assert "refused:         graph.nodes['linalg_polar']: aten::linalg_polar.default: it was introduced in " \
           "torch 2.14" in out
    assert "FAILED" in out.splitlines()[-1]
    # the same release's artifacts pass
    assert cli_main(["check", str(AT_213 / "cholesky.pt2s")]) == 0
    assert capsys.readouterr().out.rstrip().endswith("OK")


def test_check_without_torch_says_it_checked_the_structure_only():
    code = ("import sys; sys.modules['torch'] = None\n"
            "from serde.cli import main\n"
            f"sys.exit(main(['check', {str(AT_214 / 'linalg_polar.pt2s')!r}]))")
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "operators:       not checked (torch not imported): this checked the structure only" in r.stdout
    assert r.stdout.rstrip().endswith("OK (structure only)")


def test_check_structure_only_leaves_the_operators_alone(capsys):
    # The artifact that fails the full check under torch 2.13 passes the structural one anywhere.
    assert cli_main(["check", "--structure-only", str(AT_214 / "linalg_polar.pt2s")]) == 0
    out = capsys.readouterr().out
    assert "this checked the structure only" in out and out.rstrip().endswith("OK (structure only)")


# ---------------------------------------------------------------- writing for another torch


class _CdistBackward(torch.nn.Module):
    def forward(self, g, x1, x2, d):
        return torch.ops.aten._cdist_backward(g, x1, x2, 2.0, d)


def _cdist_ep():
    torch.manual_seed(0)
    x1, x2 = torch.randn(3, 4), torch.randn(5, 4)
    return torch.export.export(_CdistBackward(), (torch.randn(3, 5), x1, x2, torch.cdist(x1, x2)))


def test_target_torch_of_this_release_writes_the_same_bytes(tmp_path):
    ep = _cdist_ep()
    serde.save(ep, tmp_path / "plain.pt2s")
    serde.save(ep, tmp_path / "target.pt2s", target_torch=f"{RUNNING[0]}.{RUNNING[1]}")
    assert (tmp_path / "plain.pt2s").read_bytes() == (tmp_path / "target.pt2s").read_bytes()


def test_target_torch_writes_for_the_other_release_and_the_program_records_it(tmp_path):
    other = next(r for r in snapshot_releases() if r != RUNNING)
    ep = _cdist_ep()
    serde.save(ep, tmp_path / "other.pt2s", target_torch=f"{other[0]}.{other[1]}")
    program = read_artifact(tmp_path / "other.pt2s").program
    assert program.torch_version == load_snapshot(other).torch_version
    (node,) = program.graph_module.graph.nodes
    assert node.inputs[0].name == ("grad" if other == (2, 13) else "grad_output")
    assert f"written for:     torch {program.torch_version} (saved with target_torch)" in \
        "\n".join(check_cmd.verify(tmp_path / "other.pt2s").lines())
    # Read back here, the upgraders bring it to this torch again and it computes the same.
    ref = ep.module()(*ep.example_inputs[0])
    assert torch.equal(serde.load(tmp_path / "other.pt2s").module()(*ep.example_inputs[0]), ref)


@only_on((2, 14), "linalg_polar exists only from torch 2.14 on")
def test_target_torch_refuses_an_operator_the_target_lacks(tmp_path):
    class Polar(torch.nn.Module):
        def forward(self, a):
            return torch.ops.aten.linalg_polar(a)

    ep = torch.export.export(Polar(), (torch.randn(3, 3),))
    with pytest.raises(OperatorChangeError, match=r"target_torch='2\.13'.*aten::linalg_polar\.default: it was "
                                                  r"introduced in torch 2\.14"):
        serde.save(ep, tmp_path / "polar.pt2s", target_torch="2.13")
    assert not (tmp_path / "polar.pt2s").exists()


def test_target_torch_without_snapshot_is_refused(tmp_path):
    with pytest.raises(UnknownReleaseError, match=r"target_torch='2\.99'.*torch 2\.13, 2\.14"):
        serde.save(_cdist_ep(), tmp_path / "x.pt2s", target_torch="2.99")


def test_an_aten_operator_this_torch_lacks_is_not_blamed_on_a_missing_import():
    from serde.bridge.operators import deserialize_target

    with pytest.raises(UnknownOperatorError) as info:
        deserialize_target("torch.ops.aten.pt2serde_absent.default", where="graph.nodes['x']")
    msg = str(info.value)
    assert "graph.nodes['x']: operator aten::pt2serde_absent.default is not in this process (torch " in msg
    assert "although namespace 'aten' is" in msg and "Import the Python library" not in msg


def test_a_renamed_argument_from_a_torch_without_snapshot_is_not_called_damaged():
    import dataclasses

    from serde.api import from_artifact
    from serde.bridge.errors import InconsistentProgramError

    # The other release's spelling of _cdist_backward's first argument, from a torch pt2serde has no
    # snapshot of (so no upgrader runs): the binding check says what may have happened.
    other = AT_214 if RUNNING == (2, 13) else AT_213
    a = read_artifact(other / "cdist_backward.pt2s")
    a = dataclasses.replace(a, program=msgspec.structs.replace(a.program, torch_version="2.99.0"))
    with pytest.raises(InconsistentProgramError) as info:
        from_artifact(a)
    msg = str(info.value)
    assert "graph.nodes['_cdist_backward" in msg and "positional argument 0 of torch.ops.aten._cdist_backward" in msg
    assert "written by a torch whose schema of this operator differs" in msg and "damaged" not in msg


def test_a_retyped_argument_is_kept_where_the_value_fits_and_refused_where_it_does_not():
    from serde.opsets import torch_2_14_to_2_15 as step

    key = "_c10d_functional::all_reduce.default"
    newer = load_snapshot(step.NEWER)
    frm, to = newer.torch_version, load_snapshot(step.OLDER).torch_version
    fits = _call_of(newer.ops[key], "n")
    done = convert(_program_with([fits], frm), frm, to)
    assert not done.refused and done.program.graph_module.graph.nodes[0].inputs == fits.inputs
    wrong = msgspec.structs.replace(fits, inputs=[
        msgspec.structs.replace(na, arg=schema.Argument(as_int=3)) if na.name == "reduce_op" else na
        for na in fits.inputs])
    done = convert(_program_with([wrong], frm), frm, to)
    assert len(done.refused) == 1 and "reduce_op" in done.refused[0] and "as_int" in done.refused[0], done.refused
