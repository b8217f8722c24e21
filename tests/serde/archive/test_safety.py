"""Loading untrusted artifacts never runs code (DESIGN §7)."""

from __future__ import annotations

import functools
import io
from pathlib import Path

import msgspec
import pytest
import torch

import serde
from serde.archive import read_archive, write_archive
from serde.archive.artifact import read_artifact, write_artifact
from serde.core import schema, wire
from serde.errors import MalformedArtifactError, UnsafeArtifactError
from serde.testing import zoo


@functools.cache
def _artifact_bytes(name: str = "dynamic_arith") -> bytes:
    buf = io.BytesIO()
    serde.save(zoo.export_case(zoo.get(name)), buf)
    return buf.getvalue()


def _rewrite(edit, name: str = "dynamic_arith") -> bytes:
    """Re-write a valid artifact with ``edit(program) -> program``, checksums recomputed."""
    a = read_artifact(_artifact_bytes(name))
    payloads = a.payloads()
    out = io.BytesIO()
    write_artifact(out, edit(a.program), a.weights, payloads, torch_version="test")
    return out.getvalue()


def _retarget(target: str):
    def edit(p: schema.ExportedProgram) -> schema.ExportedProgram:
        g = p.graph_module.graph
        nodes = list(g.nodes)
        nodes[0] = msgspec.structs.replace(nodes[0], target=target)
        return msgspec.structs.replace(
            p, graph_module=msgspec.structs.replace(p.graph_module, graph=msgspec.structs.replace(g, nodes=nodes)))
    return edit


@pytest.mark.parametrize("target", [
    "builtins.eval", "os.system", "torch.load", "builtins.exec", "subprocess.run",
    "torch.ops.aten.__class__", "_operator.__import__", "torch._C._get_tracing_state",
])
def test_unsafe_node_target_rejected_before_anything_runs(target, tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr("os.system", lambda *a: calls.append(a))
    data = _rewrite(_retarget(target))
    with pytest.raises(UnsafeArtifactError) as e:
        serde.load(data)
    assert target in str(e.value)
    assert "graph.nodes[0]" in str(e.value)
    assert calls == []


V1_FIXTURE = Path(__file__).resolve().parents[3] / "fixtures" / "v1.0" / "dynamic_arith" / "model.pt2s"


def _v1_artifact_with_expression(text: str) -> bytes:
    """A schema 1.0 artifact (from the frozen fixture) whose first size expression is ``text``."""
    contents = read_archive(V1_FIXTURE)
    program = wire.decode_json(contents.member("program.json"))
    g = program["graph_module"]["graph"]
    for meta in g["tensor_values"].values():
        for size in meta["sizes"]:
            if "as_expr" in size:
                size["as_expr"]["expr_str"] = text
                break
        else:
            continue
        break
    members = {n: bytes(contents.member(n)) for n in contents.names if n != "manifest.json"}
    members["program.json"] = wire.encode(program)
    out = io.BytesIO()
    write_archive(out, members, schema_version=(1, 0), torch_version="test")
    return out.getvalue()


@pytest.mark.parametrize("expr", [
    "__import__('os').system('touch {marker}')",
    "s0.__class__.__mro__[1].__subclasses__()",
    "(lambda: open('{marker}', 'w'))()",
    "eval('1+1')",
    "Symbol('x').__init__.__globals__",
])
def test_v1_expression_that_would_run_code_under_sympify_is_rejected(expr, tmp_path):
    marker = tmp_path / "PWNED"
    data = _v1_artifact_with_expression(expr.format(marker=marker))
    with pytest.raises((UnsafeArtifactError, MalformedArtifactError)) as e:
        serde.load(data)
    assert "tensor_values" in str(e.value)
    assert not marker.exists()


def _resize(expr: schema.Expr):
    def edit(p: schema.ExportedProgram) -> schema.ExportedProgram:
        g = p.graph_module.graph
        name = next(iter(g.tensor_values))
        meta = g.tensor_values[name]
        bad = schema.SymInt(as_expr=schema.SymExpr(expr=expr))
        tv = dict(g.tensor_values)
        tv[name] = msgspec.structs.replace(meta, sizes=[bad] + list(meta.sizes[1:]))
        return msgspec.structs.replace(
            p, graph_module=msgspec.structs.replace(p.graph_module, graph=msgspec.structs.replace(g, tensor_values=tv)))
    return edit


def _deep(n: int) -> schema.Expr:
    e = schema.Expr(symbol="s0")
    for _ in range(n):
        e = schema.Expr(add=[e, schema.Expr(integer=1)])
    return e


@pytest.mark.parametrize("expr", [
    schema.Expr(symbol="__class__"),
    schema.Expr(symbol="os.system"),
    schema.Expr(opaque_unary=schema.OpaqueUnary(fn="system", arg=schema.Expr(symbol="s0"))),
    schema.Expr(floor_div=[schema.Expr(symbol="s0")]),
    _deep(300),
], ids=["dunder-symbol", "dotted-symbol", "opaque-fn", "arity", "deep"])
def test_hostile_v2_expression_trees_are_rejected(expr):
    data = _rewrite(_resize(expr))
    with pytest.raises((UnsafeArtifactError, MalformedArtifactError)) as e:
        serde.load(data)
    assert "tensor_values" in str(e.value) or "expression" in str(e.value)


@pytest.mark.parametrize("depth", [1000, 100_000])
def test_absurdly_nested_expression_json_is_a_clean_error(depth):
    marker = b'{"symbol":"s0"}'
    data = _rewrite(_resize(schema.Expr(symbol="s0")))
    a = read_archive(data)
    program = bytes(a.member("program.json"))
    deep = b'{"add":[' * depth + marker + b',{"integer":1}]}' * depth
    assert marker in program
    members = {n: bytes(a.member(n)) for n in a.names if n != "manifest.json"}
    members["program.json"] = program.replace(marker, deep, 1)
    out = io.BytesIO()
    write_archive(out, members, schema_version=a.schema_version, torch_version="test")
    with pytest.raises(MalformedArtifactError, match="nested|deeper"):
        serde.load(out.getvalue())


def test_plain_sympify_would_have_run_it(tmp_path):
    """The control: the same string really is dangerous under an unrestricted sympify."""
    import sympy

    marker = tmp_path / "PWNED"
    sympy.sympify(f"__import__('pathlib').Path('{marker}').touch()")
    assert marker.exists()


def test_valid_artifact_still_loads_after_rewrite():
    ep = serde.load(_rewrite(lambda p: p))
    assert isinstance(ep, torch.export.ExportedProgram)
