"""The load-time binding check of operator calls: a call shape the schema matcher accepted once is
remembered, and a call that differs from every accepted shape still reaches the matcher."""

from __future__ import annotations

import io

import pytest

import serde
from serde.bridge.consistency import InconsistentProgramError
from tests.serde.attacks._attack_kit import FIXTURES, nodes, rewrite_program


def _retyped(arg: dict) -> bytes:
    def change(p: dict) -> None:
        nodes(p)["fc2_linear"]["inputs"][1]["arg"] = arg
    return rewrite_program("mlp", change)


@pytest.mark.parametrize("arg", [{"as_ints": [3, 4]}, {"as_int": 3}, {"as_float": 0.5}, {"as_string": "cpu"},
                                 {"as_tensors": [{"name": "p_fc2_weight"}]}],
                         ids=["int_list", "int", "float", "string", "tensor_list"])
def test_a_call_unlike_the_accepted_ones_is_still_refused(arg):
    intact = (FIXTURES / "mlp" / "model.pt2s").read_bytes()
    bad = _retyped(arg)
    for _ in range(2):  # before and after the intact program's linear calls were accepted
        with pytest.raises(InconsistentProgramError, match=r"nodes\['fc2_linear'\]\.inputs\[1\]: the arguments do not fit"):
            serde.load(io.BytesIO(bad))
        serde.load(io.BytesIO(intact))


def _symbolic_call_changed(change) -> bytes:
    def edit(p: dict) -> None:
        change(nodes(p)["floordiv"]["inputs"])
    return rewrite_program("dynamic_arith", edit)


@pytest.mark.parametrize("change", [lambda inputs: inputs.append(dict(inputs[1])), lambda inputs: inputs.pop(),
                                    lambda inputs: inputs[1].update(name="b", kind=2)],
                         ids=["extra_positional", "missing_positional", "keyword"])
def test_a_symbolic_call_unlike_the_accepted_ones_is_still_refused(change):
    # The signature of operator.floordiv is looked up once per process; binding runs on every call.
    intact = (FIXTURES / "dynamic_arith" / "model.pt2s").read_bytes()
    bad = _symbolic_call_changed(change)
    for _ in range(2):  # before and after the intact program's floordiv was bound
        with pytest.raises(InconsistentProgramError, match=r"nodes\['floordiv'\]: the arguments do not fit _operator\.floordiv"):
            serde.load(io.BytesIO(bad))
        serde.load(io.BytesIO(intact))
