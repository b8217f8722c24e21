"""Runtime assertion messages of a loaded program say what torch's say.

torch writes the checked expression into each ``_assert_scalar`` message while tracing; the value the
assert tests may be simplified later (a check that became known, an unbacked symbol replaced by an
input's size), so the message is the only place that still names the expression. Differential:
the same failing input through ``ep.module()``, torch's save/load pair and ours must raise the same
message, up to the program's own symbol and node names (ours are canonical).
"""

from __future__ import annotations

import io
import re

import pytest
import torch
from torch.export import Dim

import serde
from canonical.canonicalize import ASSERT_MESSAGE
from tests.serde._differential import torch_load, torch_save


class Pinned(torch.nn.Module):
    """Two checks pin the unbacked value, so torch simplifies each asserted value to True."""

    def forward(self, x, y):
        b = y.item()
        torch._check(b <= 5)
        torch._check(b >= 5)
        return x + b


class SizeOfInput(torch.nn.Module):
    """The check replaces the unbacked symbol by an input's size: it lives on only in the message."""

    def forward(self, x, y):
        b = y.item()
        torch._check(b == x.shape[0])
        return torch.zeros(b) + x


class Ranged(torch.nn.Module):
    """Plain range checks of an unbacked value (nothing simplified)."""

    def forward(self, x):
        b = x.item()
        torch._check(b >= 2)
        torch._check(b <= 5)
        return torch.zeros(b)


CASES = {
    "pinned": (Pinned, (torch.ones(3), torch.tensor(5)), None, (torch.ones(3), torch.tensor(6))),
    "size_of_input": (SizeOfInput, (torch.ones(4), torch.tensor(4)), ({0: Dim.DYNAMIC}, None),
                      (torch.ones(4), torch.tensor(3))),
    "ranged": (Ranged, (torch.tensor(3),), None, (torch.tensor(6),)),
}


def _export(name: str, strict: bool) -> torch.export.ExportedProgram:
    cls, args, dynamic, _ = CASES[name]
    return torch.export.export(cls(), args, dynamic_shapes=dynamic, strict=strict)


def _ours(ep: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    buf = io.BytesIO()
    serde.save(ep, buf)
    return serde.load(io.BytesIO(buf.getvalue()))


def _message(ep: torch.export.ExportedProgram, args: tuple) -> str:
    with pytest.raises(RuntimeError, match="Runtime assertion failed") as info:
        ep.module()(*args)
    return str(info.value)


def _shape(message: str) -> str:
    """The message without the names a program chooses itself: symbol numbers and the node."""
    m = ASSERT_MESSAGE.fullmatch(message)
    assert m is not None, message
    return re.sub(r"\b([a-z]+)\d+\b", r"\1#", m.group(1))


def _messages(ep: torch.export.ExportedProgram) -> list[str]:
    return [n.args[1] for n in ep.graph.nodes if n.target is torch.ops.aten._assert_scalar.default]


@pytest.mark.parametrize("strict", [False, True], ids=["nonstrict", "strict"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_failing_assert_names_the_expression_torch_names(name: str, strict: bool):
    ep = _export(name, strict)
    bad = CASES[name][3]
    exported = _message(ep, bad)
    theirs = _message(torch_load(torch_save(ep)), bad)
    ours = _message(_ours(ep), bad)
    assert _shape(theirs) == _shape(exported)
    assert _shape(ours) == _shape(exported), (ours, exported)
    assert "expression True " not in ours


def test_every_message_names_its_expression_in_canonical_symbols():
    ep = _export("size_of_input", strict=False)
    loaded = _ours(ep)
    want = sorted(_shape(m) for m in _messages(ep))
    assert sorted(_shape(m) for m in _messages(loaded)) == want
    # The symbol that survives only in a message gets a canonical name of its own, the one it has
    # when the program is saved again; the input size keeps the graph's canonical name.
    sizes = {str(n.meta["val"]) for n in loaded.graph.nodes if n.op == "call_function"
             and isinstance(n.meta.get("val"), torch.SymInt)}
    eq = next(m for m in _messages(loaded) if "Eq(" in m)
    assert re.search(r"Eq\(u0, (s\d+)\)", eq) is not None, eq
    assert re.search(r"Eq\(u0, (s\d+)\)", eq).group(1) in sizes | {"s0"}


@pytest.mark.parametrize("name", sorted(CASES))
def test_messages_are_deterministic_and_idempotent(name: str):
    ep = _export(name, strict=False)
    first, again = io.BytesIO(), io.BytesIO()
    serde.save(ep, first)
    serde.save(_export(name, strict=False), again)
    assert first.getvalue() == again.getvalue()
    loaded = serde.load(io.BytesIO(first.getvalue()))
    # (the messages, not the bytes: a loaded program's placeholder sizes gain hints the first
    # save did not have, a difference of its own)
    assert _messages(_ours(loaded)) == _messages(loaded)


def test_a_message_the_parser_cannot_read_falls_back_to_the_asserted_value():
    """A message whose expression text is not an expression (a hand-edited graph, another writer)
    is printed from the asserted value, as before, instead of failing the save."""
    ep = _export("ranged", strict=False)
    for n in ep.graph.nodes:
        if n.target is torch.ops.aten._assert_scalar.default:
            n.args = (n.args[0], f"Runtime assertion failed for expression u0 <=> 5 on node '{n.args[0].name}'")
    got = _messages(_ours(ep))
    assert sorted(_shape(m) for m in got) == ["u# <= 5", "u# >= 2"]
