"""Memory planners (greedy, shared-objects, naive) and ``pt2serde emit --plan``.

Every planner's plan must pass the loaders' verifier on every zoo program (no two tensors live at
the same time share bytes, slots exactly their tensors' bounds, the arena tight), and arena runs
with it must equal eager, in both runtimes.
"""

from __future__ import annotations

import random
import re

import msgspec
import pytest
import torch

import serde
from native.emit.plan_report import plan_report
from native.format import program as P
from native.format.memory import (
    PLANNERS,
    check_no_overlap,
    pack,
    pack_naive,
    pack_shared_objects,
    peak_live_bytes,
    plan_memory,
    verify_plan,
)
from native.format.verify import decode
from native.run import cpp_engine
from serde.cli import main
from tests.native._native_util import (
    CASES,
    FAST,
    UNSUPPORTED,
    assert_runs_like_eager,
    emitted,
    exported,
    inputs_of,
)
from tests.tiers import tiered

SUPPORTED = [n for n in CASES if n not in UNSUPPORTED]


def _planned(native: P.NativeProgram, planner: str) -> P.NativeProgram:
    p = msgspec.structs.replace(native.program, memory_plan=plan_memory(native.program, planner))
    return decode(P.NativeProgram(p, native.segment).encode())  # the loader's checks, tightness included


@pytest.mark.parametrize("name", tiered(SUPPORTED, [n for n in FAST if n in SUPPORTED]))
def test_every_planner_passes_the_verifier_on_the_zoo(name):
    native = emitted(name)
    plans = {}
    for planner in PLANNERS:
        p = _planned(native, planner).program
        verify_plan(p)
        plans[planner] = p.memory_plan
    # The same tensors and lifetimes whatever the packing; only the offsets differ.
    keys = {pl: [(a.value, a.nbytes, a.start, a.end) for a in mp.allocations] for pl, mp in plans.items()}
    assert keys["greedy"] == keys["shared-objects"] == keys["naive"]
    assert plans["greedy"] == native.program.memory_plan, "the default planner writes what emit always wrote"
    peak = peak_live_bytes(plans["greedy"])
    naive = plans["naive"]
    assert naive.arena_size == naive.naive_size
    for mp in plans.values():
        assert peak <= mp.arena_size <= naive.arena_size


@pytest.mark.parametrize("planner", [p for p in PLANNERS if p != "greedy"])
@pytest.mark.parametrize("name", tiered(SUPPORTED, ("mlp", "multi_output", "cond", "dynamic_arith", "input_mutation_aten")))
def test_arena_runs_equal_eager_with_every_planner(name, planner):
    native = _planned(emitted(name), planner)
    assert_runs_like_eager(exported(name), native, inputs_of(name), arena=True)
    if cpp_engine.available():
        from native.run.runtime import load

        m = load(native.encode(), engine="cpp", arena=True)
        ref = load(native, arena=True)
        for args, kwargs in inputs_of(name)[:1]:
            got, want = m.run(*args, **kwargs), ref.run(*args, **kwargs)
            for g, w in zip(torch.utils._pytree.tree_leaves(got), torch.utils._pytree.tree_leaves(want), strict=True):
                assert torch.equal(g, w) if isinstance(w, torch.Tensor) else g == w


def _random_items(rng: random.Random, n: int) -> list[tuple[int, int, int]]:
    items = []
    for _ in range(n):
        s = rng.randrange(200)
        items.append((rng.choice([0, 1, 64, 100, 4096, 70000]) * rng.randrange(1, 4), s, s + rng.randrange(30)))
    items.sort(key=lambda it: (-it[0], it[1]))
    return items


@pytest.mark.parametrize("seed", range(20))
def test_every_packing_keeps_live_tensors_apart_and_its_arena_tight(seed):
    rng = random.Random(seed)
    items = _random_items(rng, rng.randrange(1, 120))
    aligned = [(-(-nb // 64) * 64, s, e) for nb, s, e in items]
    plan = P.MemoryPlan(allocations=[P.Allocation(v, 0, nb, s, e) for v, (nb, s, e) in enumerate(aligned)])
    peak = peak_live_bytes(plan)
    for packer in (pack, pack_shared_objects, pack_naive):
        offsets, arena = packer(items)
        check_no_overlap([(s, e, off, off + nb, v) for v, ((nb, s, e), off) in enumerate(zip(items, offsets,
                                                                                               strict=True))])
        assert all(off % 64 == 0 for off in offsets)
        assert arena == max((off + a[0] for off, a in zip(offsets, aligned, strict=True)), default=0)
        assert peak <= arena <= sum(a[0] for a in aligned)


def test_shared_objects_reuses_the_smallest_free_buffer():
    # The second tensor lives with the first, so it opens a buffer of its own; the third finds
    # both buffers free and takes the one that fits it best (1 KiB), not the first (4 KiB).
    items = [(4096, 0, 1), (1024, 0, 3), (1024, 4, 5)]
    offsets, arena = pack_shared_objects(items)
    assert offsets == [0, 4096, 4096] and arena == 5120
    items = [(4096, 0, 1), (4096, 2, 3), (64, 0, 9)]
    assert pack_shared_objects(items) == ([0, 0, 4096], 4160)


def test_shared_objects_and_offsets_differ_where_buffers_cannot_split():
    # Two 1 KiB tensors fit in the bytes of one 2 KiB tensor that died before them: offsets use
    # them side by side, a shared buffer holds one tensor at a time.
    items = [(2048, 0, 1), (1024, 2, 3), (1024, 2, 3)]
    assert pack(items) == ([0, 0, 1024], 2048)
    assert pack_shared_objects(items) == ([0, 0, 2048], 3072)


def test_emit_plan_prints_the_report(tmp_path, capsys):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                                torch.nn.ReLU(), torch.nn.Linear(256, 8))
    art = tmp_path / "m.pt2s"
    serde.save(torch.export.export(model, (torch.randn(128, 64),)), art)
    got = {}
    for planner in PLANNERS:
        out = tmp_path / f"{planner}.pt2n"
        assert main(["emit", str(art), str(out), "--plan", "--planner", planner]) == 0
        text = capsys.readouterr().out
        prog = decode(out.read_bytes()).program
        r = plan_report(prog)
        assert f"memory plan ({planner}): {r.planned} tensors in the arena" in text
        nums = {k: int(v.replace(",", "")) for k, v in re.findall(r"^  (arena|peak live|naive) +([\d,]+) bytes", text,
                                                                   re.M)}
        assert nums == {"arena": prog.memory_plan.arena_size, "peak live": r.peak_live,
                        "naive": prog.memory_plan.naive_size}
        # Three slots of 128 x 256 floats (the output, 128 x 8, is not planned), named by their nodes.
        rows = [line.split() for line in text.split("node (module)\n")[1].splitlines()]
        assert [(r[0], " ".join(r[4:])) for r in rows] == [
            ("131,072", "_0_linear (0)"), ("131,072", "_1_relu (1)"), ("131,072", "_2_linear (2)")], text
        got[planner] = nums["arena"]
    assert got["naive"] > got["greedy"] and got["greedy"] == r.peak_live
