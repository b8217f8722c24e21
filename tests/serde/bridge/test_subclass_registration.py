"""Tensor-subclass parameters of classes the loading process has not registered.

torch's pair unpickles such a class by its name; ``serde.load`` never imports what a file names, so
it refuses with an error that offers the exact registration code, and ``serde.testing`` registers
torch's own test subclasses in one call. Differential: after registering, the loaded program
computes what ``ep.module()`` and torch's pair compute.
"""

from __future__ import annotations

import io
import re

import pytest
import torch
from torch.testing._internal.custom_tensor import ConstantExtraMetadataTensor, CustomTensorPlainOut
from torch.testing._internal.subclasses import WrapperSubclass
from torch.testing._internal.two_tensor import TwoTensor

import serde
from serde.bridge.subclasses import registered_tensor_subclasses, registration_lines
from serde.testing import register_torch_test_subclasses
from tests.serde._differential import torch_load, torch_save

TORCH_TEST_CLASSES = (TwoTensor, ConstantExtraMetadataTensor, CustomTensorPlainOut, WrapperSubclass)


@pytest.fixture
def unregistered():
    """No torch test subclass registered during the test, as before it afterwards."""
    before = {n: c for n, c in registered_tensor_subclasses().items() if c in TORCH_TEST_CLASSES}
    for c in TORCH_TEST_CLASSES:
        serde.unregister_tensor_subclass(c)
    yield
    for c in TORCH_TEST_CLASSES:
        serde.unregister_tensor_subclass(c)
    for n, c in before.items():
        serde.register_tensor_subclass(c, name=n)


class Holder(torch.nn.Module):
    def __init__(self, p: torch.Tensor) -> None:
        super().__init__()
        self.p = torch.nn.Parameter(p, requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x + 2 * self.p).sum() + x


def _param(kind: str) -> torch.Tensor:
    a, b = torch.randn(2, 2), torch.randn(2, 2)
    if kind == "two_tensor":
        return TwoTensor(a, b)
    if kind == "nested_plain_out":  # as torch's own export tests nest it
        return CustomTensorPlainOut(CustomTensorPlainOut(a, b), CustomTensorPlainOut(b, a))
    if kind == "wrapper":
        return WrapperSubclass(a)
    if kind == "constant_extra":  # its flatten context is data (an int attribute)
        t = ConstantExtraMetadataTensor(a)
        t.constant_attribute = 7
        return t
    raise AssertionError(kind)


KINDS = ("two_tensor", "nested_plain_out", "wrapper", "constant_extra")


def _export(kind: str) -> torch.export.ExportedProgram:
    torch.manual_seed(0)
    return torch.export.export(Holder(_param(kind)), (torch.randn(2, 2),))


def _save(ep: torch.export.ExportedProgram) -> bytes:
    buf = io.BytesIO()
    serde.save(ep, buf)
    return buf.getvalue()


def test_the_error_offers_the_registration_code_and_that_code_works(unregistered):
    ep = _export("two_tensor")
    data = _save(ep)  # saving needs no registration
    with pytest.raises(serde.UnknownTensorSubclassError) as info:
        serde.load(data)
    message = str(info.value)
    lines = re.search(r"register it before loading:\n((?:    .*\n)+)", message)
    assert lines is not None, message
    assert lines.group(1) == ("    from torch.testing._internal.two_tensor import TwoTensor\n"
                              "    serde.register_tensor_subclass(TwoTensor)\n")
    assert "serde.testing.register_torch_test_subclasses()" in message
    # The offered code, run as the user would run it, is what the load needs.
    namespace = {"serde": serde}
    exec(lines.group(1).replace("    ", ""), namespace)  # our own message's text, in a test
    x = torch.randn(2, 2)
    assert torch.equal(serde.load(data).module()(x), ep.module()(x))


def test_lines_for_names_that_do_not_say_where_the_class_lives():
    local = registration_lines("tests.models.build.<locals>.Scaled")
    assert "from " not in local and "name='tests.models.build.<locals>.Scaled'" in local
    renamed = registration_lines("mylib.Pair")
    assert renamed.startswith("    from mylib import Pair\n    serde.register_tensor_subclass(Pair)\n")
    assert "name='mylib.Pair'" in renamed and "register_torch_test_subclasses" not in renamed
    assert "name='Bare'" in registration_lines("Bare") and "from " not in registration_lines("Bare")


def test_register_torch_test_subclasses_registers_each_by_its_default_name(unregistered):
    names = register_torch_test_subclasses()
    assert names == [f"{c.__module__}.{c.__qualname__}" for c in TORCH_TEST_CLASSES]
    assert all(registered_tensor_subclasses()[n] is c for n, c in zip(names, TORCH_TEST_CLASSES, strict=True))
    assert register_torch_test_subclasses() == names  # idempotent


@pytest.mark.parametrize("kind", KINDS)
def test_torch_test_subclass_parameters_round_trip_once_registered(kind: str, unregistered):
    ep = _export(kind)
    data = _save(ep)
    with pytest.raises(serde.UnknownTensorSubclassError):
        serde.load(data)
    register_torch_test_subclasses()
    ours = serde.load(data)
    theirs = torch_load(torch_save(ep))
    x = torch.randn(2, 2)
    want = ep.module()(x)
    assert torch.equal(ours.module()(x), want)
    assert torch.equal(theirs.module()(x), want)
    p = ours.state_dict["p"]
    assert type(p) is type(ep.state_dict["p"])
    inner = ep.state_dict["p"].__tensor_flatten__()[0]
    assert p.__tensor_flatten__()[0] == inner
    for name in inner:
        assert torch.equal(getattr(p, name), getattr(ep.state_dict["p"], name))
