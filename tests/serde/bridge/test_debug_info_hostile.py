"""debug.json is optional: a hostile entry in it never breaks a load (docs/canonical.md, "Debug metadata").

Provenance (``from_node``) goes through a typed, bounded msgspec decoder: text that is not what
torch writes, or nests deeper than ``MAX_PROVENANCE_DEPTH``, is dropped from that node and the
program loads and runs. A debug.json that does not match its schema at all is refused as damaged.
"""

from __future__ import annotations

import io
import json

import pytest
import torch

import serde
from serde.archive import read_archive, write_archive
from serde.bridge.metadata import MAX_PROVENANCE_DEPTH
from serde.errors import MalformedArtifactError


class _Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x).relu()


@pytest.fixture(scope="module")
def saved() -> bytes:
    torch.manual_seed(0)
    # run_decompositions records provenance (from_node) on every node it rewrites
    ep = torch.export.export(_Model(), (torch.randn(2, 3),)).run_decompositions()
    buf = io.BytesIO()
    serde.save(ep, buf, debug_info=True)
    return buf.getvalue()


def _with_debug(data: bytes, edit) -> bytes:
    c = read_archive(data)
    members = {n: bytes(c.member(n)) for n in c.names if n != "manifest.json"}
    debug = json.loads(members["debug.json"])
    edit(debug)
    members["debug.json"] = json.dumps(debug).encode()
    out = io.BytesIO()
    write_archive(out, members, schema_version=c.schema_version, torch_version="test")
    return out.getvalue()


def _nested(depth: int) -> list:
    entry: dict = {"name": "n", "target": "t", "graph_id": 0, "pass_name": "p", "action": "create", "from_node": []}
    for _ in range(depth - 1):
        entry = {**entry, "from_node": [entry]}
    return [entry]


BAD_PROVENANCE = {
    "deep_array": "[" * 100_000 + "]" * 100_000,   # was RecursionError from the stdlib json
    "list_for_dict": "[[1, 2]]",                    # was AssertionError from NodeSource._from_dict
    "wrong_field_type": '[{"name": 1}]',
    "not_json": "x",
    "huge_graph_id": '[{"graph_id": 100000000000000000000000}]',
    "too_deep_entries": json.dumps(_nested(MAX_PROVENANCE_DEPTH + 1)),
}


@pytest.mark.parametrize("case", sorted(BAD_PROVENANCE))
def test_bad_provenance_is_dropped_and_the_program_runs(case: str, saved: bytes) -> None:
    def edit(debug: dict) -> None:
        for entry in debug["nodes"].values():
            entry["from_node"] = BAD_PROVENANCE[case]

    ep = serde.load(_with_debug(saved, edit))
    nodes = [n for n in ep.graph.nodes if n.op == "call_function"]
    assert nodes and all("from_node" not in n.meta for n in nodes)
    assert all("stack_trace" in n.meta for n in nodes)  # the rest of each entry is kept
    (x,) = ep.example_inputs[0]
    torch.testing.assert_close(ep.module()(x), serde.load(saved).module()(x), rtol=0, atol=0)


def test_provenance_at_the_depth_cap_is_kept(saved: bytes) -> None:
    def edit(debug: dict) -> None:
        for entry in debug["nodes"].values():
            entry["from_node"] = json.dumps(_nested(MAX_PROVENANCE_DEPTH))

    ep = serde.load(_with_debug(saved, edit))
    src = next(n for n in ep.graph.nodes if n.op == "call_function").meta["from_node"]
    depth = 0
    while src:
        depth += 1
        src = src[0].from_node
    assert depth == MAX_PROVENANCE_DEPTH


def test_stored_provenance_is_torchs(saved: bytes) -> None:
    torch.manual_seed(0)
    ep = serde.load(saved)
    for n in ep.graph.nodes:
        if n.op == "call_function":
            assert [s.name for s in n.meta["from_node"]], n.name


def test_debug_json_off_its_schema_is_refused_as_damaged(saved: bytes) -> None:
    def edit(debug: dict) -> None:
        debug["nodes"] = [debug["nodes"]]

    with pytest.raises(MalformedArtifactError, match=r"debug\.json: does not match schema DebugInfo"):
        serde.load(_with_debug(saved, edit))
