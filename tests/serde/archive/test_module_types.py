"""Module types in ``nn_module_stack`` survive a plain save/load, as they do through torch's pair.

A module type is a qualified class name (``torch.nn.modules.linear.Linear``), no path, so it is
part of the canonical program: pt2e quantizers and partitioners select nodes by it,
``torch.export.unflatten`` reports it (``InterpreterModule.type_name()``), and people read it.
Differential against ``ep`` itself and against ``torch.export.save``/``load``.
"""

from __future__ import annotations

import io
import json

import pytest
import torch

import serde
from serde.archive import read_archive, write_archive
from tests.serde._differential import torch_load, torch_save

LINEAR = "torch.nn.modules.linear.Linear"


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 2, 3, padding=1)
        self.act = torch.nn.ReLU()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.act(self.conv(x)))


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = Block()
        self.head = torch.nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.block(x))


def _export(strict: bool) -> torch.export.ExportedProgram:
    torch.manual_seed(0)
    return torch.export.export(Net(), (torch.randn(1, 2, 8, 8),), strict=strict)


def _save(ep: torch.export.ExportedProgram, **kwargs) -> bytes:
    buf = io.BytesIO()
    serde.save(ep, buf, **kwargs)
    return buf.getvalue()


def _stacks(ep: torch.export.ExportedProgram) -> list[tuple[tuple[str, str], ...]]:
    """Per call, its module stack as (path, type) pairs: keys and node names are the program's own."""
    return sorted(tuple(ep_stack.values()) for n in ep.graph.nodes if n.op == "call_function"
                  and (ep_stack := n.meta.get("nn_module_stack")) is not None)


def _by_module_type(ep: torch.export.ExportedProgram, type_name: str) -> list[str]:
    """The nodes a pt2e-style module-type filter picks: any frame of the node's stack has the type."""
    return sorted(str(n.target) for n in ep.graph.nodes
                  if any(t == type_name for _, t in (n.meta.get("nn_module_stack") or {}).values()))


@pytest.mark.parametrize("strict", [False, True], ids=["nonstrict", "strict"])
def test_module_types_come_back_without_debug_info(strict: bool):
    ep = _export(strict)
    ours = serde.load(_save(ep))
    theirs = torch_load(torch_save(ep))
    assert _stacks(theirs) == _stacks(ep)
    assert _stacks(ours) == _stacks(ep)
    assert ("block.fc", LINEAR) in {e for s in _stacks(ours) for e in s}
    for type_name in (LINEAR, "torch.nn.modules.conv.Conv2d", f"{__name__}.Block"):
        assert _by_module_type(ours, type_name) == _by_module_type(ep, type_name) != []


def test_unflatten_reports_module_types():
    ep = _export(strict=False)
    ours, ref = torch.export.unflatten(serde.load(_save(ep))), torch.export.unflatten(ep)
    for path in ("block", "block.fc", "block.conv", "head"):
        got, want = ours.get_submodule(path).type_name(), ref.get_submodule(path).type_name()
        assert got == want and want is not None, path
    assert ours.get_submodule("head").type_name() == LINEAR


def test_module_types_are_part_of_the_deterministic_bytes():
    a, b = _save(_export(strict=False)), _save(_export(strict=True))
    assert a == _save(_export(strict=False))
    program = json.loads(bytes(read_archive(a).member("program.json")))
    types = {e.get("type_name") for n in program["graph_module"]["graph"]["nodes"]
             for e in n["metadata"].get("nn_module_stack", [])}
    assert LINEAR in types and None not in types
    # strict export keys frames by id(module), which differs per process: its canonical stacks
    # (keys and types) are those of non-strict export
    strict_program = json.loads(bytes(read_archive(b).member("program.json")))
    assert [n["metadata"].get("nn_module_stack") for n in strict_program["graph_module"]["graph"]["nodes"]] == \
        [n["metadata"].get("nn_module_stack") for n in program["graph_module"]["graph"]["nodes"]]
    # debug.json no longer repeats them
    debug = json.loads(bytes(read_archive(_save(_export(strict=False), debug_info=True)).member("debug.json")))
    assert all("module_types" not in d for d in debug["nodes"].values())


def test_an_artifact_with_types_only_in_debug_json_still_gets_them():
    """Artifacts written before module types joined the program kept them in debug.json only."""
    ep = _export(strict=False)
    c = read_archive(_save(ep, debug_info=True))
    members = {n: bytes(c.member(n)) for n in c.names if n != "manifest.json"}
    program, debug = json.loads(members["program.json"]), json.loads(members["debug.json"])
    for n in program["graph_module"]["graph"]["nodes"]:
        types = {}
        for e in n["metadata"].get("nn_module_stack", []):
            types[e["key"]] = e.pop("type_name")
        if types:
            debug["nodes"].setdefault(n["name"], {})["module_types"] = types
    members["program.json"] = json.dumps(program, separators=(",", ":")).encode()
    members["debug.json"] = json.dumps(debug, separators=(",", ":")).encode()
    out = io.BytesIO()
    write_archive(out, members, schema_version=c.schema_version, torch_version="test")
    old = serde.load(out.getvalue())
    assert _stacks(old) == _stacks(ep)
    # without debug.json such an artifact loads with empty types, as it always did
    del members["debug.json"]
    bare = io.BytesIO()
    write_archive(bare, members, schema_version=c.schema_version, torch_version="test")
    assert {t for s in _stacks(serde.load(bare.getvalue())) for _, t in s} == {""}
