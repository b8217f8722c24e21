"""State and module names with segments that are not identifiers (``foo:bar``, ``b-1``,
``slice(2, 3, None)``), which torch allows and torch.fx writes between double quotes
(``getattr(self, "foo:bar")``).

The state dict keeps the real FQN and the loaded program's modules get exactly torch's
attributes: ``state_dict()`` keys, ``named_parameters``, ``named_modules`` and ``unflatten`` match
the exported program and torch's own pair. fx names the node of such an attribute from the FQN
(``foo_bar``) and makes it unique itself; the graph's placeholders are torch's (``p_foo_bar``,
``p_foo_bar_1``). A segment that would end or escape that quoted literal, or that is not ASCII, is
still refused.
"""

from __future__ import annotations

import functools
import io

import pytest
import torch

import serde
from serde.core.checks import check_fqn
from serde.core.errors import UnsafeNameError
from serde.errors import SerializeError
from tests.serde.attacks._attack_kit import rewrite_artifact


class Odd(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_parameter("foo:bar", torch.nn.Parameter(torch.randn(3)))
        self.register_parameter("foo_bar", torch.nn.Parameter(torch.randn(3)))  # same fx node name
        self.register_buffer("b-1", torch.randn(3))
        self.add_module("sub:mod", torch.nn.Linear(3, 3))
        self.layers = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.ReLU(), torch.nn.Linear(3, 3))

    def forward(self, x):
        y = x * getattr(self, "foo:bar") + getattr(self, "b-1") - self.foo_bar
        return self.layers[1:3](getattr(self, "sub:mod")(y))


@functools.cache
def _export(strict: bool) -> torch.export.ExportedProgram:
    torch.manual_seed(0)
    return torch.export.export(Odd(), (torch.randn(2, 3),), strict=strict)


def _save(ep) -> bytes:
    buf = io.BytesIO()
    serde.save(ep, buf)
    return buf.getvalue()


def _torch_pair(ep):
    buf = io.BytesIO()
    torch.export.save(ep, buf)
    buf.seek(0)
    return torch.export.load(buf)


def _names(m: torch.nn.Module) -> tuple:
    return (list(m.state_dict()), [k for k, _ in m.named_parameters()], [k for k, _ in m.named_buffers()],
            [k for k, _ in m.named_modules()])


@pytest.mark.parametrize("strict", [
    False,
    # strict export records the odd submodule's stack path as dynamo's source text, which holds quotes
    pytest.param(True, marks=pytest.mark.xfail(strict=True, raises=SerializeError,
                                               reason="nn_module_stack path getattr(L['self'], 'sub:mod')")),
], ids=["nonstrict", "strict"])
def test_odd_names_behave_like_the_exported_program_and_torchs_pair(strict: bool) -> None:
    ep = _export(strict)
    assert "foo:bar" in ep.state_dict and "sub:mod.weight" in ep.state_dict
    data = _save(ep)
    ours, theirs = serde.load(data), _torch_pair(ep)
    assert sorted(ours.state_dict) == sorted(ep.state_dict)
    assert all(torch.equal(ours.state_dict[k], v) for k, v in ep.state_dict.items())
    x = torch.randn(2, 3)
    want = ep.module()(x)
    for label, other in (("torch", theirs), ("ours", ours)):
        m = other.module()
        assert torch.equal(m(x), want), label
        assert _names(m) == _names(ep.module()), label
        assert 'getattr(self, "foo:bar")' in m.code, label
    # unflatten rebuilds the module tree, with the odd names as attributes
    ref = torch.export.unflatten(ep)
    got = torch.export.unflatten(ours)
    assert torch.equal(got(x), ref(x))
    assert sorted(got.state_dict()) == sorted(ref.state_dict())
    assert [k for k, _ in got.named_modules()] == [k for k, _ in ref.named_modules()]
    # deterministic: saving again, or saving what we loaded, gives the same bytes
    assert _save(ep) == data and _save(ours) == data


def test_strict_exports_source_text_path_is_refused_saying_why() -> None:
    with pytest.raises(SerializeError, match=r"source text strict export \(dynamo\) records.*strict=False"):
        _save(_export(True))


@pytest.mark.parametrize("fqn", ["foo:bar", "layers.slice(2, 3, None)", "b-1", "a.0:1.x y", "layers.01"])
def test_quoted_segments_pass(fqn: str) -> None:
    assert check_fqn(fqn, "where") == fqn


@pytest.mark.parametrize(("fqn", "why"), [
    ('foo"bar', "ends the literal"),
    ("foo\\bar", "escapes its closing quote"),
    ("foo'bar", "a quote of the other kind"),
    ("fo\u00e9:x", "not ASCII"),
    ("\uff46\uff4f\uff52\uff57\uff41\uff52\uff44", "fullwidth 'forward': NFKC makes it forward"),
    ("foo\nbar", "a line break"),
    ("sub@1.weight", "unflatten's call index"),
    ("__x:y", "a dunder"),
    ("a..b", "an empty segment"),
])
def test_segments_that_could_break_out_are_refused(fqn: str, why: str) -> None:
    with pytest.raises(UnsafeNameError, match="FQN"):
        check_fqn(fqn, "where")


def _rename_state(data: bytes, old: str, new: str) -> bytes:
    def edit(p: dict) -> None:
        for spec in p["graph_module"]["signature"]["input_specs"]:
            for v in spec.values():
                if isinstance(v, dict) and v.get("parameter_name") == old:
                    v["parameter_name"] = new
                    return
        raise AssertionError(f"no parameter {old!r}")
    return rewrite_artifact(data, edit)


@pytest.mark.parametrize("name", ['foo"); import os; ("', "foo\\", "fo\u00e9", "forward"])
def test_a_crafted_state_name_is_refused_at_load(name: str) -> None:
    data = _save(_export(False))
    with pytest.raises(SerializeError, match=r"parameter_name"):
        serde.load(_rename_state(data, "foo:bar", name))
