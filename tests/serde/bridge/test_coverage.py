"""Coverage: every ``Argument`` union member and every input/output spec kind appears in
at least one test artifact.

The artifacts are the programs the round-trip tests save: every case of the core zoo
(:mod:`serde.testing.zoo`) and of the breadth zoo (:mod:`tests.zoo_breadth`), as ``serialize_program``
writes them. Two members are never written by pt2serde from a torch.export program, so they are
covered by artifacts this file builds by editing a real one; the reader must still accept them
(torch's own serializer and older tools write them):

- ``as_optional_tensor``: pt2serde stores a ``Tensor?`` argument as ``as_tensor`` / ``as_none``.
- ``as_sym_floats``: torch.export never passes a list of SymFloats (op schemas have no SymFloat[]).
"""

from __future__ import annotations

import io

import msgspec
import pytest
import torch

import serde
from serde.archive.artifact import read_artifact, write_artifact
from serde.bridge.program import serialize_program
from serde.core import schema
from serde.testing import assert_programs_equal, zoo
from tests import zoo_breadth

NEVER_WRITTEN = {"as_optional_tensor", "as_sym_floats"}


def _walk(x, seen: dict[str, set[str]]) -> None:
    """Record the member of every Argument / InputSpec / OutputSpec reachable from ``x``."""
    if isinstance(x, schema.Union):
        for cls, key in ((schema.Argument, "argument"), (schema.InputSpec, "input"),
                         (schema.OutputSpec, "output")):
            if isinstance(x, cls):
                seen[key].add(x.kind)
    if isinstance(x, schema.Struct):
        for f in x.__struct_fields__:
            _walk(getattr(x, f), seen)
    elif isinstance(x, (list, tuple)):
        for v in x:
            _walk(v, seen)
    elif isinstance(x, dict):
        for v in x.values():
            _walk(v, seen)


@pytest.fixture(scope="module")
def seen(breadth_program) -> dict[str, set[str]]:
    seen: dict[str, set[str]] = {"argument": set(), "input": set(), "output": set()}
    for case in zoo.CASES:
        _walk(serialize_program(zoo.export_case(case)), seen)
    for case in zoo_breadth.CASES:
        if case.name.startswith("torchbind") and not zoo_breadth.load_torchbind_test_classes():
            continue
        _walk(serialize_program(breadth_program(case.name)), seen)
    return seen


def test_every_argument_member_is_in_a_test_artifact(seen):
    members = set(schema.Argument.__struct_fields__)
    assert members - seen["argument"] == NEVER_WRITTEN, (
        "update NEVER_WRITTEN (and the cases) so it lists exactly the members no artifact uses")


def test_every_input_and_output_spec_kind_is_in_a_test_artifact(seen):
    assert seen["input"] == set(schema.InputSpec.__struct_fields__)
    assert seen["output"] == set(schema.OutputSpec.__struct_fields__)


@pytest.mark.parametrize("member", sorted(NEVER_WRITTEN))
def test_members_pt2serde_never_writes_still_load(member, breadth_program):
    """An artifact that uses the member (as other writers do) loads and runs like the original."""
    name = "custom_ops" if member == "as_optional_tensor" else "sym_scalars"
    ep = breadth_program(name)
    buf = io.BytesIO()
    serde.save(ep, buf)
    art = read_artifact(buf.getvalue())
    edited = _rewrite(art.program, member)
    assert edited != art.program
    seen = {"argument": set(), "input": set(), "output": set()}
    _walk(edited, seen)
    assert member in seen["argument"]
    out = io.BytesIO()
    write_artifact(out, edited, art.weights, art.payloads(), torch_version=torch.__version__)
    loaded = serde.load(out.getvalue())
    if member == "as_optional_tensor":  # the same program: the reader resolves both forms alike
        assert_programs_equal(ep, loaded, metadata=())
        for args, kwargs in zoo_breadth.get(name).other_inputs():
            assert_programs_equal(ep, loaded, metadata=(), inputs=(args, kwargs))
        return
    (extra,) = [n for n in loaded.graph.nodes if n.target is torch.sym_sum]
    (operands,) = extra.args
    assert isinstance(operands[0], torch.fx.Node) and operands[1] == 0.5
    assert isinstance(extra.meta["val"], torch.SymFloat)
    for args, kwargs in [(ep.example_inputs[0], {}), *zoo_breadth.get(name).other_inputs()]:
        torch.testing.assert_close(loaded.module()(*args, **kwargs), ep.module()(*args, **kwargs))


def _rewrite(program: schema.ExportedProgram, member: str) -> schema.ExportedProgram:
    """Store the optional tensor argument of pt2serde_zoo::blend as as_optional_tensor, or a
    symbolic-float operand list as as_sym_floats (an extra unused sym_float node consuming it)."""
    g = program.graph_module.graph
    nodes = list(g.nodes)
    if member == "as_optional_tensor":
        for i, n in enumerate(nodes):
            if n.target.startswith("torch.ops.pt2serde_zoo.blend"):
                inputs = [msgspec.structs.replace(na, arg=_optional(na.arg)) if na.name == "y" else na
                          for na in n.inputs]
                nodes[i] = msgspec.structs.replace(n, inputs=inputs)
    else:
        (name,) = [k for k, v in g.sym_float_values.items()
                   if v.as_expr is not None and v.as_expr.expr.kind == "float_true_div"]
        # torch.sym_sum takes one list: give it a SymFloat and a float (a dead node; outputs stay).
        out = "sym_sum_of_floats"
        nodes.append(schema.Node(
            target="torch.sym_sum", name=out, metadata=schema.NodeMetadata(),
            inputs=[schema.NamedArgument(name="", kind=schema.ArgumentKind.POSITIONAL, arg=schema.Argument(
                as_sym_floats=[schema.SymFloatArgument(as_name=name), schema.SymFloatArgument(as_float=0.5)]))],
            outputs=[schema.Argument(as_sym_float=schema.SymFloatArgument(as_name=out))],
        ))
        expr = g.sym_float_values[name].as_expr.expr
        g = msgspec.structs.replace(g, sym_float_values={
            **g.sym_float_values,
            out: schema.SymFloat(as_expr=schema.SymExpr(expr=schema.Expr(add=[expr, schema.Expr(floating=0.5)]))),
        })
    g = msgspec.structs.replace(g, nodes=nodes)
    return msgspec.structs.replace(program, graph_module=msgspec.structs.replace(program.graph_module, graph=g))


def _optional(a: schema.Argument) -> schema.Argument:
    if a.as_tensor is not None:
        return schema.Argument(as_optional_tensor=schema.OptionalTensorArgument(as_tensor=a.as_tensor))
    return schema.Argument(as_optional_tensor=schema.OptionalTensorArgument(as_none=True))
