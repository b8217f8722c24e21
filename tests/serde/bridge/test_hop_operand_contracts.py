"""Higher-order ops' operands are checked against what their subgraphs take, at load.

Each case edits a saved program so that one operand of a cond, scan or map has another meta than
its op requires (the kind of edit a mutated file makes), shows that torch fails with it at run
time, and that the load refuses it naming the operand.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable

import pytest
import torch
import torch.utils._pytree as pytree
from torch._higher_order_ops.map import map as control_flow_map
from torch._higher_order_ops.scan import scan

import serde
from serde.archive import read_archive, write_archive
from serde.bridge.errors import InconsistentProgramError


class CondOnAll(torch.nn.Module):
    def forward(self, x):
        mask = x > 0
        return torch.cond(mask.all(), lambda t: t.relu(), lambda t: t.neg(), (x,)) + mask


class Scan(torch.nn.Module):
    def forward(self, init, xs):
        def step(carry, x):
            nxt = carry * 0.5 + x
            return nxt, nxt.sum()

        return scan(step, init, xs)


class Map(torch.nn.Module):
    def forward(self, xs, y):
        return control_flow_map(lambda x, y: x * y + 1, xs, y)


def _saved(model: torch.nn.Module, args: tuple, dynamic: dict | None = None) -> bytes:
    buf = io.BytesIO()
    serde.save(torch.export.export(model, args, dynamic_shapes=dynamic), buf)
    return buf.getvalue()


def _edit(data: bytes, change: Callable[[dict], None]) -> bytes:
    c = read_archive(data)
    members = {n: bytes(c.member(n)) for n in c.names if n != "manifest.json"}
    program = json.loads(members["program.json"])
    change(program["graph_module"]["graph"])
    members["program.json"] = json.dumps(program).encode()
    out = io.BytesIO()
    write_archive(out, members, schema_version=c.schema_version, torch_version="test")
    return out.getvalue()


def _hop(graph: dict, target: str) -> dict:
    return next(n for n in graph["nodes"] if n["target"] == f"torch.ops.higher_order.{target}")


def _retarget(graph: dict, target: str, pos: int, new: str, item: int | None = None) -> None:
    arg = _hop(graph, target)["inputs"][pos]["arg"]
    if item is None:
        arg["as_tensor"]["name"] = new
    else:
        arg["as_tensors"][item]["name"] = new


def _cond_program() -> tuple[bytes, tuple]:
    torch.manual_seed(0)
    x = torch.randn(5)
    return _saved(CondOnAll(), (x,), {"x": {0: torch.export.Dim("n", min=2, max=64)}}), (x,)


def _scan_program() -> tuple[bytes, tuple]:
    torch.manual_seed(0)
    args = (torch.randn(3), torch.randn(4, 3))
    return _saved(Scan(), args), args


def _map_program() -> tuple[bytes, tuple]:
    torch.manual_seed(0)
    args = (torch.randn(5, 3), torch.randn(3))
    return _saved(Map(), args), args


def _flex_program() -> tuple[bytes, tuple]:
    from tests.zoo_breadth import FlexAttention

    torch.manual_seed(0)
    args = (torch.randn(1, 2, 16, 8), torch.randn(1, 2, 16, 8), torch.randn(1, 2, 16, 4))
    return _saved(FlexAttention(), args), args


def _name_of(graph: dict, shape_rank: int, dtype: int, avoid: str) -> str:
    for name, meta in sorted(graph["tensor_values"].items()):
        if name != avoid and len(meta["sizes"]) == shape_rank and meta["dtype"] == dtype:
            return name
    raise AssertionError("no such tensor")


# name -> (program, edit of the graph, the error's field and reason)
CASES: dict[str, tuple[Callable[[], tuple[bytes, tuple]], Callable[[dict], None], str]] = {
    # the predicate becomes the [n]-element mask: torch's `if pred:` is ambiguous
    "cond_predicate_symbolic_size": (_cond_program, lambda g: _retarget(g, "cond", 0, "gt"),
                                     r"inputs\[0\]: cond's predicate must be a boolean or a one-element tensor, "
                                     r"it has the shape \[s0\]"),
    # the scanned input becomes the [3] carry: its slices are scalars, the body takes [3]
    "scan_xs_wrong_rank": (_scan_program, lambda g: _retarget(g, "scan", 2, "init", item=0),
                           r"inputs\[2\]: scanned input slice 0 is torch.float32 \[\] on one side and "
                           r"torch.float32 \[3\] on the other"),
    # the carry becomes the [4, 3] xs
    "scan_carry_wrong_meta": (_scan_program, lambda g: _retarget(g, "scan", 1, "xs", item=0),
                              r"inputs\[1\]: carried value 0 is torch.float32 \[4, 3\] on one side and "
                              r"torch.float32 \[3\] on the other"),
    # the mapped input becomes y, a [3] vector: map iterates over its elements, the body takes [3]
    "map_xs_wrong_rank": (_map_program, lambda g: _retarget(g, "map_impl", 1, "y", item=0),
                          r"inputs\[1\]: mapped input slice 0 is torch.float32 \[\] on one side and "
                          r"torch.float32 \[3\] on the other"),
    # the query becomes v, whose embedding size (4) is not the key's (8): q @ k.T cannot run
    "flex_query_embedding": (_flex_program, lambda g: _retarget(g, "flex_attention", 0, "v"),
                             r"inputs\[1\]: flex_attention's query's and key's embedding sizes \(dim 3\) "
                             r"differ: 4 and 8"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_hop_operand_of_the_wrong_meta_is_refused_at_load(case: str) -> None:
    make, change, match = CASES[case]
    data, args = make()
    bad = _edit(data, change)
    with pytest.raises(InconsistentProgramError, match=match):
        serde.load(bad)


@pytest.mark.parametrize("case", sorted(CASES))
def test_without_the_check_the_program_fails_or_breaks_its_own_metas(case: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # Proves each edit is real: with the op's check switched off, torch either fails at run time
    # (cond's `if pred:`) or computes results of other shapes than the program stores (a scan over
    # the wrong dim broadcasts), which no program torch.export writes does.
    from serde.bridge.checks import hops

    make, change, _ = CASES[case]
    data, args = make()
    want = pytree.tree_leaves(serde.load(data).module()(*args))
    target = {"map": "map_impl", "flex": "flex_attention"}.get(case.split("_")[0], case.split("_")[0])
    monkeypatch.setitem(hops.HOPS, target, lambda *a: None)
    loaded = serde.load(_edit(data, change))
    try:
        got = pytree.tree_leaves(loaded.module()(*args))
    except Exception as e:  # noqa: BLE001 -- whatever torch raises, as long as it is torch's
        assert case in ("cond_predicate_symbolic_size", "flex_query_embedding"), f"{type(e).__name__}: {e}"
        assert ("more than one value is ambiguous" if case.startswith("cond") else "Expected size for first two dimensions of batch2") in str(e)
        return
    assert [t.shape for t in got] != [t.shape for t in want]


class WhileLoop(torch.nn.Module):
    def forward(self, i, x):
        from torch._higher_order_ops.while_loop import while_loop

        return while_loop(lambda i, x: i < 3, lambda i, x: (i + 1, x * 2), (i, x))


def _while_program() -> tuple[bytes, tuple]:
    args = (torch.tensor(0), torch.ones(3))
    return _saved(WhileLoop(), args), args


def _loop_condition_returns_a_float(graph: dict) -> None:
    cond = _hop(graph, "while_loop")["inputs"][0]["arg"]["as_graph"]["graph"]
    x = cond["inputs"][1]["as_tensor"]["name"]  # the carried [3] float tensor
    cond["outputs"][0]["as_tensor"]["name"] = x


# the same edits through emit (the native runtime): refused there as the load refuses them; before,
# a loop condition that is no boolean ran into the native runtime's loop cap (found by the fuzz
# campaign), and a many-element predicate was emitted into a program the runtime refuses to branch on
EMIT_CASES = {
    "cond_predicate_symbolic_size": (_cond_program, CASES["cond_predicate_symbolic_size"][1],
                                     r"inputs\[0\]: cond's predicate must be a boolean or a one-element tensor, "
                                     r"it has the shape \[(s0|\(symbolic\))\]"),
    "while_condition_not_bool": (_while_program, _loop_condition_returns_a_float,
                                 r"inputs\[0\]: the loop condition must compute a boolean or a 0-dim boolean tensor"),
}


@pytest.mark.parametrize("case", sorted(EMIT_CASES))
def test_hop_operand_contracts_are_checked_by_emit_as_by_load(case: str) -> None:
    import native

    make, change, match = EMIT_CASES[case]
    data, args = make()
    native.load(native.emit_artifact(data).encode()).run(*args)  # the unedited program emits and runs
    bad = _edit(data, change)
    with pytest.raises(InconsistentProgramError, match=match):
        serde.load(bad)
    with pytest.raises(serde.SerializeError, match=match):
        native.emit_artifact(bad)
