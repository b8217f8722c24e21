"""Guards in the canonical form: kept by canonicalization, listed by show, compared by diff."""

from __future__ import annotations

import io

import msgspec
import pytest
import torch
from torch.export import Dim

import serde
from canonical.canonicalize import canonicalize
from canonical.diff import diff
from canonical.render import render
from serde.archive.artifact import read_artifact
from serde.bridge.effects import op_facts


class _Derived(torch.nn.Module):
    def forward(self, x, y):
        return x + y[1:]


@pytest.fixture(scope="module")
def program():
    dx = Dim("dx")
    ep = torch.export.export(_Derived(), (torch.ones(4), torch.ones(5)),
                             dynamic_shapes={"x": {0: dx}, "y": {0: dx + 1}})
    buf = io.BytesIO()
    serde.save(ep, buf)
    return read_artifact(buf.getvalue()).program


def test_canonicalize_keeps_guards_and_is_idempotent(program) -> None:
    assert program.guards is not None and len(program.guards.checks) == 2
    once, _ = canonicalize(program, facts=op_facts)
    assert once.guards == program.guards  # saved programs are canonical already
    assert canonicalize(once, facts=op_facts)[0] == once
    # Shuffled sources come back in the one canonical order; checks keep theirs (a module reports
    # the first check that fails, so their order is torch's and part of the program).
    g = program.guards
    shuffled = msgspec.structs.replace(program, guards=msgspec.structs.replace(g, sources=list(reversed(g.sources))))
    assert canonicalize(shuffled, facts=op_facts)[0].guards == g
    reordered = msgspec.structs.replace(program, guards=msgspec.structs.replace(
        g, sources=list(reversed(g.sources)), checks=list(reversed(g.checks))))
    got = canonicalize(reordered, facts=op_facts)[0].guards
    assert got.sources == g.sources and got.checks == list(reversed(g.checks))


def test_show_lists_guards_as_torch_writes_them(program) -> None:
    text = render(program)
    section = text.split("guards:\n", 1)[1].split("module_call_graph:", 1)[0]
    assert section.splitlines() == [
        "  ((-1) + L['y'].size()[0]) >= 2",
        "  L['x'].size()[0] == ((-1) + L['y'].size()[0])",
    ]


def test_diff_reports_a_changed_guard(program) -> None:
    g = program.guards
    other = msgspec.structs.replace(program, guards=msgspec.structs.replace(g, checks=g.checks[:1]))
    report = diff(program, other)
    changes = [(c.section, c.kind, c.where) for c in report.changes]
    assert changes == [("guards", "removed", "guards[L['x'].size()[0] == ((-1) + L['y'].size()[0])]")]
    assert diff(program, program).identical
    none = msgspec.structs.replace(program, guards=None)
    assert [c.kind for c in diff(none, program).changes] == ["added", "added"]
