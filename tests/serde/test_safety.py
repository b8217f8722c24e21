"""Loading untrusted artifacts never runs code (issue 2 §6, DESIGN §7)."""

from __future__ import annotations

import functools
import io

import msgspec
import pytest
import torch

import serde
from serde import schema, zoo
from serde.artifact import read_artifact, write_artifact
from serde.errors import MalformedArtifactError, UnsafeArtifactError


@functools.cache
def _artifact_bytes(name: str = "dynamic_arith") -> bytes:
    buf = io.BytesIO()
    serde.save(zoo.export_case(zoo.get(name)), buf)
    return buf.getvalue()


def _rewrite(edit, name: str = "dynamic_arith") -> bytes:
    """Re-write a valid artifact with ``edit(program) -> program``, checksums recomputed."""
    a = read_artifact(_artifact_bytes(name))
    payloads = {n: bytes(a.contents.member(n)) for n in a.contents.names if n.startswith("data/")}
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


def _resize(expr: str):
    def edit(p: schema.ExportedProgram) -> schema.ExportedProgram:
        g = p.graph_module.graph
        name = next(iter(g.tensor_values))
        meta = g.tensor_values[name]
        bad = schema.SymInt(as_expr=schema.SymExpr(expr_str=expr))
        tv = dict(g.tensor_values)
        tv[name] = msgspec.structs.replace(meta, sizes=[bad] + list(meta.sizes[1:]))
        return msgspec.structs.replace(
            p, graph_module=msgspec.structs.replace(p.graph_module, graph=msgspec.structs.replace(g, tensor_values=tv)))
    return edit


@pytest.mark.parametrize("expr", [
    "__import__('os').system('touch {marker}')",
    "s0.__class__.__mro__[1].__subclasses__()",
    "(lambda: open('{marker}', 'w'))()",
    "eval('1+1')",
    "Symbol('x').__init__.__globals__",
])
def test_expression_that_would_run_code_under_sympify_is_rejected(expr, tmp_path):
    marker = tmp_path / "PWNED"
    data = _rewrite(_resize(expr.format(marker=marker)))
    with pytest.raises((UnsafeArtifactError, MalformedArtifactError)) as e:
        serde.load(data)
    assert "tensor_values" in str(e.value)
    assert not marker.exists()


def test_plain_sympify_would_have_run_it(tmp_path):
    """The control: the same string really is dangerous under an unrestricted sympify."""
    import sympy

    marker = tmp_path / "PWNED"
    sympy.sympify(f"__import__('pathlib').Path('{marker}').touch()")
    assert marker.exists()


def test_valid_artifact_still_loads_after_rewrite():
    ep = serde.load(_rewrite(lambda p: p))
    assert isinstance(ep, torch.export.ExportedProgram)
