"""canonical.diff and `pt2serde diff`: real exported programs saved with serde.save, plus
hand-built schema programs for alignment corner cases."""

from __future__ import annotations

import argparse
import json
import math
import struct

import msgspec
import pytest
import torch
from torch.export import Dim

import serde
from canonical import render as R
from canonical.diff import diff, max_abs_diff, node_alignment
from serde.archive.artifact import read_artifact
from serde.cli import diff as cmd_diff
from serde.core import schema as s
from serde.errors import SerializeError

# ---------------------------------------------------------------- real models


class Net(torch.nn.Module):
    def __init__(self, act: str = "relu", extra: bool = False, hidden: int = 8, two_inputs: bool = False):
        super().__init__()
        self.fc1 = torch.nn.Linear(4, hidden)
        self.fc2 = torch.nn.Linear(hidden, 2)
        self.act, self.extra, self.two_inputs = act, extra, two_inputs

    def forward(self, x, y=None):
        h = self.fc1(x)
        h = torch.relu(h) if self.act == "relu" else torch.sigmoid(h)
        if self.extra:
            h = h * 3.0
        out = self.fc2(h)
        return out + y if self.two_inputs else out


def save(tmp_path, name, model, *, max_batch=1024, seed=0):
    torch.manual_seed(seed)
    args = (torch.randn(3, 4),) + ((torch.randn(3, 2),) if model.two_inputs else ())
    batch = Dim("batch", min=2, max=max_batch)
    shapes = ({0: batch},) + (({0: batch},) if model.two_inputs else ())
    ep = torch.export.export(model, args, dynamic_shapes=shapes)
    path = tmp_path / f"{name}.pt2s"
    serde.save(ep, path)
    return path


def net(seed=0, **kw):
    torch.manual_seed(seed)
    return Net(**kw)


def report(pa, pb):
    a, b = read_artifact(pa), read_artifact(pb)
    return diff(a.program, b.program, a_weights=a.weights, b_weights=b.weights,
                a_payload=a.payload, b_payload=b.payload)


def run_cli(*argv):
    """`pt2serde diff ...` through the subcommand's own parser and run()."""
    p = argparse.ArgumentParser()
    cmd_diff.add_arguments(p)
    return cmd_diff.run(p.parse_args([str(a) for a in argv]))


def section(rep, name):
    return [c for c in rep.changes if c.section == name]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return save(tmp_path_factory.mktemp("base"), "base", net())


def test_two_exports_of_the_same_model_are_identical(tmp_path, base, capsys):
    again = save(tmp_path, "again", net())
    rep = report(base, again)
    assert rep.identical and rep.changes == []
    assert run_cli(base, again) == 0
    assert capsys.readouterr().out == ""


def test_swapped_op_is_one_changed_node(tmp_path, base, capsys):
    other = save(tmp_path, "sigmoid", net(act="sigmoid"))
    rep = report(base, other)
    assert not rep.identical
    assert [c.section for c in rep.changes] == ["graph"]
    (c,) = rep.changes
    assert c.kind == "changed" and "target" in c.fields and "args" not in c.fields
    assert "aten.relu.default(" in c.a and "aten.sigmoid.default(" in c.b
    # the consumer (fc2's linear) reads the swapped node through the alignment: not changed
    assert run_cli(base, other) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"--- {base}\n+++ {other}\ngraph:\n")
    assert "aten.sigmoid.default" in out


def test_inserted_node_is_added_and_its_consumer_changed(tmp_path, base):
    other = save(tmp_path, "extra", net(extra=True))
    graph = section(report(base, other), "graph")
    added = [c for c in graph if c.kind == "added"]
    changed = [c for c in graph if c.kind == "changed"]
    assert len(added) == 1 and "aten.mul.Tensor(" in added[0].b
    assert len(changed) == 1 and changed[0].fields == ["args"]
    assert "aten.linear.default(" in changed[0].a and "aten.linear.default(" in changed[0].b
    assert not [c for c in graph if c.kind == "removed"]


def test_changed_weights_report_max_abs_diff_like_torch(tmp_path, base):
    model = net()
    with torch.no_grad():
        model.fc1.weight[2, 1] += 0.375
        model.fc1.weight[0, 0] -= 1e-3
        model.fc2.bias.mul_(2.0)
    other = save(tmp_path, "tuned", model)
    rep = report(base, other)
    assert section(rep, "graph") == [] and section(rep, "signature") == []
    weights = {c.where: c for c in section(rep, "weights")}
    assert set(weights) == {"state_dict[fc1.weight]", "state_dict[fc2.bias]"}
    old = net().state_dict()
    for name in ("fc1.weight", "fc2.bias"):
        c = weights[f"state_dict[{name}]"]
        a, b = old[name].double(), model.state_dict()[name].double()
        assert c.fields == ["values"]
        assert c.max_abs_diff == (b - a).abs().max().item()
        assert c.num_different == int((a != b).sum())


def test_shape_change_is_reported_without_values(tmp_path, base):
    other = save(tmp_path, "wide", net(hidden=9))
    rep = report(base, other)
    weights = {c.where: c for c in section(rep, "weights")}
    assert weights["state_dict[fc1.weight]"].fields == ["shape"]
    assert weights["state_dict[fc1.weight]"].max_abs_diff is None
    assert "f32[8, 4]" in weights["state_dict[fc1.weight]"].a
    assert "f32[9, 4]" in weights["state_dict[fc1.weight]"].b
    # the changed metas show up on the graph nodes that produce them
    linear = [c for c in section(rep, "graph") if "fc1" in (c.a or "") or "relu" in (c.a or "")]
    assert linear and all("outputs" in c.fields for c in linear)
    assert all(c.kind == "changed" for c in section(rep, "graph"))


def test_range_constraint_and_signature_changes(tmp_path, base):
    narrow = save(tmp_path, "narrow", net(), max_batch=512)
    rep = report(base, narrow)
    (c,) = rep.changes
    assert c.section == "range_constraints" and c.a.endswith(": [2, 1024]") and c.b.endswith(": [2, 512]")

    two = save(tmp_path, "two", net(two_inputs=True))
    sig = section(report(base, two), "signature")
    added = [c for c in sig if c.kind == "added"]
    assert len(added) == 1 and added[0].where == "inputs[user_input 1]"
    assert added[0].b.startswith("user_input y: f32[")


def test_weight_dtypes_decode_like_torch(tmp_path):
    class Buffers(torch.nn.Module):
        def __init__(self, seed):
            super().__init__()
            g = torch.Generator().manual_seed(seed)
            for name, dt in [("h", torch.float16), ("bf", torch.bfloat16), ("d", torch.float64),
                             ("i8", torch.int8), ("u8", torch.uint8), ("i64", torch.int64),
                             ("bo", torch.bool), ("c", torch.complex64)]:
                v = torch.randn(3, 5, generator=g)
                self.register_buffer(name, (v > 0) if dt == torch.bool else (v * 40).to(dt))
            self.register_buffer("nc", torch.randn(5, 3, generator=g).t())  # non-contiguous

        def forward(self, x):
            return x + self.nc

    m1, m2 = Buffers(1), Buffers(2)
    paths = []
    for i, m in enumerate((m1, m2)):
        ep = torch.export.export(m, (torch.ones(3, 5),))
        paths.append(tmp_path / f"b{i}.pt2s")
        serde.save(ep, paths[-1])
    changes = {c.where: c for c in section(report(*paths), "weights")}
    for name, t1 in m1.state_dict().items():
        c = changes[f"state_dict[{name}]"]
        t2 = m2.state_dict()[name]
        assert c.fields == ["values"], name
        if t1.is_complex():
            assert c.max_abs_diff is None and c.num_different is None  # reported by sha only
            continue
        wide = torch.float64 if t1.is_floating_point() else torch.int64
        a, b = t1.to(wide), t2.to(wide)
        assert c.max_abs_diff == float((b - a).abs().max()), name
        assert c.num_different == int((a != b).sum()), name


def test_json_report_shape(tmp_path, base, capsys):
    other = save(tmp_path, "sigmoid", net(act="sigmoid"), max_batch=64)
    assert run_cli(base, other, "--json") == 1
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) == {"a", "b", "identical", "changes", "notes"}
    assert doc["identical"] is False and doc["a"] == str(base)
    for c in doc["changes"]:
        assert set(c) == {"section", "kind", "where", "a", "b", "fields", "max_abs_diff", "num_different"}
    assert [c["section"] for c in doc["changes"]] == ["graph", "range_constraints"]
    assert run_cli(base, base, "--json") == 0
    assert json.loads(capsys.readouterr().out)["identical"] is True


def test_unreadable_input_is_a_serialize_error(tmp_path, base):
    bad = tmp_path / "bad.pt2s"
    bad.write_bytes(b"not an archive")
    with pytest.raises(SerializeError):
        run_cli(base, bad)


# ---------------------------------------------------------------- hand-built graphs


def _meta(n):
    return s.TensorMeta(dtype=s.ScalarType.FLOAT, sizes=[s.SymInt(as_int=n)], requires_grad=False,
                        device=s.Device(type="cpu"), strides=[s.SymInt(as_int=1)],
                        storage_offset=s.SymInt(as_int=0), layout=s.Layout.Strided)


def _T(n):
    return s.Argument(as_tensor=s.TensorArgument(name=n))


def _node(name, op, *ins, outs=None):
    return s.Node(target=f"torch.ops.aten.{op}", name=name, metadata=s.NodeMetadata(),
                  inputs=[s.NamedArgument(name=f"a{i}", arg=_T(x), kind=s.ArgumentKind.POSITIONAL)
                          for i, x in enumerate(ins)],
                  outputs=outs or [_T(name)])


def _prog(nodes, out, extra_values=()):
    names = {"x"} | {o.as_tensor.name for n in nodes for o in n.outputs if o.kind == "as_tensor"} | set(extra_values)
    g = s.Graph(inputs=[_T("x")], outputs=[_T(out)], nodes=nodes, tensor_values={n: _meta(4) for n in names},
                sym_int_values={}, sym_bool_values={}, is_single_tensor_return=False, custom_obj_values={},
                sym_float_values={})
    sig = s.GraphSignature(input_specs=[s.InputSpec(user_input=s.UserInputSpec(arg=_T("x")))],
                           output_specs=[s.OutputSpec(user_output=s.UserOutputSpec(arg=_T(out)))])
    return s.ExportedProgram(
        graph_module=s.GraphModule(graph=g, signature=sig, module_call_graph=[]), opset_version={},
        range_constraints={}, schema_version=s.SchemaVersion(major=1, minor=0), verifiers=[], torch_version="t")


def test_independent_nodes_in_another_order_are_identical():
    a = _prog([_node("sin", "sin.default", "x"), _node("cos", "cos.default", "x"),
               _node("add", "add.Tensor", "sin", "cos")], "add")
    b = _prog([_node("cos", "cos.default", "x"), _node("sin", "sin.default", "x"),
               _node("add", "add.Tensor", "sin", "cos")], "add")
    assert diff(a, b).identical


def test_renamed_nodes_align_by_structure():
    a = _prog([_node("sin", "sin.default", "x"), _node("cos", "cos.default", "sin"),
               _node("add", "add.Tensor", "sin", "cos")], "add")
    b = _prog([_node("v0", "sin.default", "x"), _node("v1", "cos.default", "v0"),
               _node("v2", "add.Tensor", "v0", "v1")], "v2")
    rep = diff(a, b)
    graph = section(rep, "graph")
    # every node is matched to its counterpart: only names differ, and the outputs follow
    assert [(c.kind, c.fields) for c in graph] == [("changed", ["name"])] * 3
    assert [c.where for c in graph] == ["graph.nodes[v0]", "graph.nodes[v1]", "graph.nodes[v2]"]
    assert section(rep, "signature") == []


def test_insertion_aligns_even_when_later_names_shift():
    # A canonicalizer that numbers tie groups (sin_1, sin_2, ...) and gives the neighbours of an
    # insertion other names shifts every later ordinal; matching by name first would then pair
    # the wrong nodes all along the chain. Structure must win.
    def chain(names):
        nodes, prev = [], "x"
        for name in names:
            nodes.append(_node(name, f"{name.split('_')[0]}.default", prev))
            prev = name
        return _prog(nodes, prev)

    a = chain(["sin_0", "neg_0", "sin_1", "neg_1", "sin_2", "neg_2", "sin_3", "neg_3", "sin_4", "neg_4"])
    b = chain(["sin_0", "neg_0", "cos_0", "sin_t", "neg_t", "sin_1", "neg_1", "sin_2", "neg_2", "sin_3", "neg_3"])
    graph = section(diff(a, b), "graph")
    assert [(c.kind, c.where) for c in graph if c.kind != "changed"] == [("added", "graph.nodes[cos_0]")]
    changed = [c for c in graph if c.kind == "changed"]
    assert len(changed) == 8 and all(c.fields == ["name"] for c in changed[1:])
    assert changed[0].fields == ["name", "args"]
    assert changed[0].a == "sin_1: f32[4] = aten.sin.default(neg_0)"
    assert changed[0].b == "sin_t: f32[4] = aten.sin.default(cos_0)"
    # the report carries the pairing it reported (the side-by-side page draws it), A's node 2
    # (sin_1) against B's node 3 (sin_t), B's cos_0 alone
    rep = diff(a, b)
    assert rep.alignment == node_alignment(a, b)
    assert (None, 2) in rep.alignment["graph"] and (2, 3) in rep.alignment["graph"]
    assert "alignment" not in rep.to_json()

    # ... while with stable names, a copy of its neighbours inserted into a run of identical ops
    # is one added node, not a shift of every later node onto its predecessor.
    a = chain([f"sin_{k}" for k in range(8)])
    b = chain([f"sin_{k}" for k in range(4)] + ["sin_new"] + [f"sin_{k}" for k in range(4, 8)])
    graph = section(diff(a, b), "graph")
    assert [(c.kind, c.where, c.fields) for c in graph] == [
        ("added", "graph.nodes[sin_new]", []), ("changed", "graph.nodes[sin_4]", ["args"])]


def test_removed_node_is_reported_where_it_was():
    a = _prog([_node("sin", "sin.default", "x"), _node("neg", "neg.default", "sin"),
               _node("cos", "cos.default", "neg")], "cos")
    b = _prog([_node("sin", "sin.default", "x"), _node("cos", "cos.default", "sin")], "cos")
    graph = section(diff(a, b), "graph")
    assert [(c.kind, c.where) for c in graph] == [("removed", "graph.nodes[neg]"), ("changed", "graph.nodes[cos]")]
    assert graph[0].a == "neg: f32[4] = aten.neg.default(sin)" and graph[0].b is None
    assert graph[1].fields == ["args"]


def test_changes_inside_subgraphs_are_found():
    def prog(op):
        sub = s.Graph(inputs=[_T("x_1")], outputs=[_T("y")], nodes=[_node("y", op, "x_1")],
                      tensor_values={"x_1": _meta(4), "y": _meta(4)}, sym_int_values={}, sym_bool_values={},
                      is_single_tensor_return=False, custom_obj_values={}, sym_float_values={})
        call = s.Node(target="torch.ops.higher_order.map_impl", name="m", metadata=s.NodeMetadata(),
                      inputs=[s.NamedArgument(name="f", arg=s.Argument(as_graph=s.GraphArgument(name="body_0", graph=sub))),
                              s.NamedArgument(name="xs", arg=_T("x"))], outputs=[_T("m")])
        return _prog([call], "m")

    assert diff(prog("sin.default"), prog("sin.default")).identical
    (c,) = diff(prog("sin.default"), prog("cos.default")).changes
    assert c.where == "graph.nodes[m].body_0.nodes[y]" and c.fields == ["target"]


def test_max_abs_diff_nan_and_bfloat16():
    def st(dtype, n):
        return s.StoredTensor(dtype=dtype, sizes=[n], strides=[1], storage_offset=0, storage=0, requires_grad=False)

    f = st(s.ScalarType.FLOAT, 3)
    same_nan = struct.pack("<3f", 1.0, math.nan, 2.0)
    assert max_abs_diff(f, same_nan, f, same_nan) == (0.0, 0)
    res = max_abs_diff(f, same_nan, f, struct.pack("<3f", 1.0, 5.0, 2.5))
    assert math.isnan(res[0]) and res[1] == 2
    assert max_abs_diff(f, struct.pack("<3f", 0.0, 1, 2), f, struct.pack("<3f", -0.0, 1, 2)) == (0.0, 0)

    bf = st(s.ScalarType.BFLOAT16, 4)
    ta = torch.tensor([1.5, -2.0, 3.25, 1e30], dtype=torch.bfloat16)
    tb = torch.tensor([1.5, -2.5, 3.0, 1e30], dtype=torch.bfloat16)

    def raw(t):  # little-endian bytes, as payloads are stored
        return bytes(t.view(torch.uint8).tolist())

    expected = float((tb.double() - ta.double()).abs().max())
    assert max_abs_diff(bf, raw(ta), bf, raw(tb)) == (expected, 2)


def test_render_and_diff_agree_on_identity():
    a = _prog([_node("sin", "sin.default", "x")], "sin")
    b = msgspec.structs.replace(a, torch_version="other")
    rep = diff(a, b)
    assert rep.identical and rep.notes == ["written by torch t (a) and other (b)"]
    assert R.count_changed_lines(R.render(a), R.render(b)) == 2  # only the header line
