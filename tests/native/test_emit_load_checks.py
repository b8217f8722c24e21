"""``native.emit_artifact`` refuses every file ``serde.load`` refuses, for the same reason.

The emitter walks the stored program and trusts that its parts fit each other; only the load's
checks prove that. Each case edits a saved real program so that the load refuses it; without
those checks the edited file emitted, and the native program failed inside a kernel when run.
"""

from __future__ import annotations

import pytest
import torch
from torch.export import Dim

import native
import serde
from serde.errors import SerializeError
from tests.serde.bridge.test_example_inputs_fit import _edit, _saved


class MLP(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 16)
        self.fc2 = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(self.fc1(x).relu())


class Scale(torch.nn.Module):
    def forward(self, x):
        return x * 2


def _keyword_then_positional(p: dict) -> None:
    # fc2's input swapped for x (another meta) and its weight marked a keyword ahead of a
    # positional bias: the load refuses the argument order
    (_, lin) = [n for n in p["graph_module"]["graph"]["nodes"] if n["target"].endswith("linear.default")]
    lin["inputs"][0]["arg"]["as_tensor"]["name"] = "x"
    lin["inputs"][1]["kind"] = 2


def _range_without_the_examples(p: dict) -> None:
    (r,) = p["range_constraints"]
    r["max_val"] = 3


def _weight_strides(p: dict) -> None:
    # fc1's weight placeholder says another stride than the stored weight: a full load compared
    # them, a structure-only load (and so emit) did not
    meta = p["graph_module"]["graph"]["tensor_values"]["p_fc1_weight"]
    meta["strides"][0] = {"as_int": 2**32}


CASES = {
    "argument_order": (lambda: torch.export.export(MLP(), (torch.randn(2, 8),)), _keyword_then_positional),
    "example_inputs": (lambda: torch.export.export(Scale(), (torch.randn(4, 3),),
                                                   dynamic_shapes={"x": {0: Dim("n", min=2, max=64)}}),
                       _range_without_the_examples),
    "weight_strides": (lambda: torch.export.export(MLP(), (torch.randn(2, 8),)), _weight_strides),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_emit_refuses_what_the_load_refuses(name: str) -> None:
    export, change = CASES[name]
    ep = export()
    x = ep.example_inputs[0][0]
    data = _edit(_saved(ep), change)
    with pytest.raises(SerializeError) as loaded:
        serde.load(data)
    with pytest.raises(type(loaded.value)) as structure:
        serde.load(data, weights=None)
    assert str(structure.value) == str(loaded.value)
    with pytest.raises(type(loaded.value)) as emitted:
        native.emit_artifact(data)
    assert str(emitted.value) == str(loaded.value)
    assert native.load(native.emit_artifact(_saved(ep)).encode()).run(x) is not None  # the unedited file emits
