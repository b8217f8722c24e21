"""Failures are SerializeError subclasses that say where and how to fix."""

from __future__ import annotations

import importlib
import io
import pkgutil
import re
import subprocess
import sys

import pytest
import torch

import serde
from serde.errors import ForeignArtifactError, SerializeError, UnsupportedConstructError
from serde.testing import zoo


def test_unsupported_node_target_at_save_names_node_and_construct():
    ep = zoo.export_case(zoo.get("mlp"))
    relu = [n for n in ep.graph.nodes if n.target == torch.ops.aten.relu.default][0]
    relu.target = print  # not an operator any loader may resolve
    with pytest.raises(UnsupportedConstructError) as e:
        serde.save(ep, io.BytesIO())
    msg = str(e.value)
    assert "relu" in msg and "print" in msg


def test_unsupported_constant_at_save_says_what_to_do():
    ep = zoo.export_case(zoo.get("mlp"))
    ep._constants["weird"] = object()
    with pytest.raises(UnsupportedConstructError, match="weird"):
        serde.save(ep, io.BytesIO())


def test_save_rejects_non_programs():
    with pytest.raises(SerializeError, match="ExportedProgram"):
        serde.save(torch.nn.Linear(2, 2), io.BytesIO())


def test_failed_save_leaves_no_file(tmp_path):
    ep = zoo.export_case(zoo.get("mlp"))
    [n for n in ep.graph.nodes if n.target == torch.ops.aten.relu.default][0].target = print
    target = tmp_path / "model.pt2s"
    with pytest.raises(UnsupportedConstructError):
        serde.save(ep, target)
    assert list(tmp_path.iterdir()) == []


class _Holds(torch.nn.Module):
    def __init__(self, kind: str, t: torch.Tensor) -> None:
        super().__init__()
        if kind == "buffer":
            self.register_buffer("held", t)
        elif kind == "parameter":
            self.held = torch.nn.Parameter(t, requires_grad=False)

    def forward(self, x):
        return x * 2, getattr(self, "held", x)


# Sparse layouts have no strides to read (torch raises when asked): the refusal must still be ours.
@pytest.mark.parametrize("layout", ["sparse_coo", "sparse_csr", "sparse_csc", "sparse_bsr"])
@pytest.mark.parametrize("kind, where", [("input", "graph.inputs['x']"), ("buffer", "graph.inputs['b_held']"),
                                         ("parameter", "graph.inputs['p_held']")])
def test_tensors_of_a_sparse_layout_are_refused_naming_the_input(layout, kind, where):
    convert = {"sparse_coo": lambda t: t.to_sparse(), "sparse_csr": lambda t: t.to_sparse_csr(),
               "sparse_csc": lambda t: t.to_sparse_csc(), "sparse_bsr": lambda t: t.to_sparse_bsr((2, 2))}[layout]
    sparse = convert(torch.randn(4, 4))
    m = _Holds(kind, sparse)
    ep = torch.export.export(m, (sparse if kind == "input" else torch.randn(4, 4),), strict=False)
    with pytest.raises(UnsupportedConstructError, match=rf"{re.escape(where)}: tensors with layout torch.{layout} "
                                                        "are not supported; only strided tensors are"):
        serde.save(ep, io.BytesIO())


def test_torch_export_save_archive_gets_a_clear_message_and_import_converts_it(tmp_path):
    ep = zoo.export_case(zoo.get("mlp"))
    pt2 = tmp_path / "model.pt2"
    torch.export.save(ep, pt2)
    with pytest.raises(ForeignArtifactError) as e:
        serde.load(pt2)
    msg = str(e.value)
    assert "torch.export.save" in msg and "pt2serde import" in msg
    out = tmp_path / "model.pt2s"
    r = subprocess.run([sys.executable, "-m", "serde.cli", "import", str(pt2), str(out)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    from serde.testing import assert_programs_equal
    assert_programs_equal(ep, serde.load(out), metadata=())


def test_not_an_archive(tmp_path):
    p = tmp_path / "x.pt2s"
    p.write_text("hello")
    with pytest.raises(SerializeError):
        serde.load(p)


@pytest.mark.parametrize("layer", ["serde.core", "serde.bridge"])
def test_each_layer_defines_its_errors_in_its_errors_module(layer):
    # One place per layer tells a reader everything that layer can raise: an error class defined in
    # any other module of the layer, or left out of the errors module's __all__, fails here.
    home = importlib.import_module(f"{layer}.errors")
    defined = {}
    for info in pkgutil.walk_packages(importlib.import_module(layer).__path__, f"{layer}."):
        for obj in vars(importlib.import_module(info.name)).values():
            if isinstance(obj, type) and issubclass(obj, SerializeError) and obj.__module__.startswith(f"{layer}."):
                defined[obj.__qualname__] = obj.__module__
    assert {name: module for name, module in defined.items() if module != home.__name__} == {}
    exported = {name for name in home.__all__ if isinstance(getattr(home, name), type)}
    assert exported == set(defined) and len(exported) >= 3
