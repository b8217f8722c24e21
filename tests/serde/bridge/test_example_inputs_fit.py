"""A program's stored example inputs pass the input checks its own module runs, at load.

``ep.module()`` checks every call's inputs against the program's static sizes, constant inputs and
range constraints (torch derived all three from the example inputs at export). Each case edits one
of them in a saved real program, shows that torch's module then refuses the program's own example
inputs at run time, and that the load refuses the file instead, naming the input, the dimension
and the check.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable

import pytest
import torch
from torch.export import Dim
from torch.utils._sympy.value_ranges import ValueRanges

import serde
from serde.archive import read_archive, write_archive
from serde.bridge.errors import InconsistentProgramError


class Scale(torch.nn.Module):
    def forward(self, x):
        return x * 2


class Sums(torch.nn.Module):
    def forward(self, x, y):
        return x.sum() + y.sum()


class WithAlpha(torch.nn.Module):
    def forward(self, x, alpha: float):
        return x * alpha


def _dynamic() -> torch.export.ExportedProgram:
    return torch.export.export(Scale(), (torch.randn(4, 3),), dynamic_shapes={"x": {0: Dim("n", min=2, max=64)}})


def _saved(ep: torch.export.ExportedProgram) -> bytes:
    buf = io.BytesIO()
    serde.save(ep, buf)
    return buf.getvalue()


def _edit(data: bytes, change: Callable[[dict], None], member: str = "program.json") -> bytes:
    c = read_archive(data)
    members = {n: bytes(c.member(n)) for n in c.names if n != "manifest.json"}
    doc = json.loads(members[member])
    change(doc)
    members[member] = json.dumps(doc).encode()
    out = io.BytesIO()
    write_archive(out, members, schema_version=c.schema_version, torch_version=c.manifest.torch_version)
    return out.getvalue()


def _range(lo: int, hi: int) -> Callable[[dict], None]:
    def change(p: dict) -> None:
        (r,) = p["range_constraints"]
        r["min_val"], r["max_val"] = lo, hi
    return change


@pytest.mark.parametrize(("lo", "hi", "check"), [(2, 3, "x.size()[0] <= 3"), (7, 64, "x.size()[0] >= 7")])
def test_a_range_its_examples_leave_is_refused(lo: int, hi: int, check: str) -> None:
    ep = _dynamic()
    x = torch.randn(4, 3)
    # torch: the same edit of the exported program, and its module refuses the export's own inputs
    edited = _dynamic()
    (sym,) = edited.range_constraints
    edited.range_constraints[sym] = ValueRanges(lo, hi)
    with pytest.raises(AssertionError, match=f"Guard failed: {re.escape(check)}"):
        edited.module()(x)
    data = _edit(_saved(ep), _range(lo, hi))
    with pytest.raises(InconsistentProgramError, match=r"input 'x', dimension 0\): is 4, but the program "
                                                       f"requires {re.escape(check)}"):
        serde.load(data)
    with pytest.raises(InconsistentProgramError, match="range_constraints"):
        serde.load(data, weights=None)  # the fake example inputs keep their sizes


def test_a_range_that_holds_its_examples_loads() -> None:
    data = _edit(_saved(_dynamic()), _range(4, 4))
    ep = serde.load(data)
    torch.testing.assert_close(ep.module()(*ep.example_inputs[0]), ep.example_inputs[0][0] * 2)


def test_a_static_size_its_example_does_not_have_is_refused() -> None:
    ep = torch.export.export(Sums(), (torch.randn(2, 3), torch.randn(3)))

    def resize(p: dict) -> None:
        p["graph_module"]["graph"]["tensor_values"]["y"]["sizes"] = [{"as_int": 5}]

    # Without the check, the load passed and the module refused the examples it was exported with.
    data = _edit(_saved(ep), resize)
    with pytest.raises(InconsistentProgramError, match=r"\[0\]\[1\]\.size\(\)\[0\] \(input 'y', dimension 0\): is 3, "
                                                       r"but the program requires y\.size\(\)\[0\] == 5, its size"):
        serde.load(data)


def test_a_constant_input_its_example_is_not_is_refused() -> None:
    ep = torch.export.export(WithAlpha(), (torch.randn(3), 0.5))

    def change(p: dict) -> None:
        for a in p["graph_module"]["graph"]["inputs"]:
            if "as_float" in a:
                a["as_float"] = 0.25
        for s in p["graph_module"]["signature"]["input_specs"]:
            if "constant_input" in s:
                s["constant_input"]["value"]["as_float"] = 0.25

    data = _edit(_saved(ep), change)
    with pytest.raises(InconsistentProgramError, match=r"\(input 'alpha'\): is 0\.5, but the program requires "
                                                       r"alpha == 0\.25, the constant it was exported with"):
        serde.load(data)


class Add(torch.nn.Module):
    def forward(self, x, y):
        return x + y


def test_inputs_sharing_a_size_whose_examples_differ_are_refused() -> None:
    n = Dim("n", min=2, max=64)
    ep = torch.export.export(Add(), (torch.randn(4, 3), torch.randn(4, 3)), dynamic_shapes=({0: n}, {0: n}))

    def shrink_y(w: dict) -> None:  # the stored example y: 3 rows of its 4 (its storage still holds them)
        w["example_inputs"]["leaves"][1]["as_tensor"]["sizes"][0] = 3

    data = _edit(_saved(ep), shrink_y, member="weights.json")
    with pytest.raises(InconsistentProgramError, match=r"\(input 'y', dimension 0\): is 3, but the program requires "
                                                       r"y\.size\(\)\[0\] == x\.size\(\)\[0\] \(4\)"):
        serde.load(data)
    # torch's module refuses such inputs the same way
    with pytest.raises(AssertionError, match=re.escape("Guard failed: y.size()[0] == x.size()[0]")):
        ep.module()(torch.randn(4, 3), torch.randn(3, 3))


def test_a_program_without_example_inputs_is_left_alone() -> None:
    ep = _dynamic()
    ep._example_inputs = None
    loaded = serde.load(_edit(_saved(ep), _range(2, 3)))
    assert loaded.example_inputs is None
    torch.testing.assert_close(loaded.module()(torch.ones(3, 3)), torch.full((3, 3), 2.0))
