"""Memory plan: lifetimes, greedy-by-size packing over upper bounds, and the overlap checker."""

from __future__ import annotations

import random

import msgspec
import pytest
import torch
from torch.export import Dim

from native.errors import ArenaTooLargeError, MemoryPlanError, NativeFormatError
from native.format import program as P
from native.format.memory import (
    Lifetimes,
    analyze,
    check_no_overlap,
    outermost_loops,
    plan_memory,
    upper_nbytes,
    verify_plan,
)
from native.format.verify import decode
from tests.native._native_util import (
    CASES,
    FAST,
    UNSUPPORTED,
    assert_runs_like_eager,
    edited,
    emit_ep,
    emitted,
    exported,
)
from tests.tiers import tiered

SUPPORTED = [n for n in CASES if n not in UNSUPPORTED]


def _params(names):
    return tiered(names, [n for n in FAST if n in names])


@pytest.mark.parametrize("name", _params(SUPPORTED))
def test_plan_verifies_on_the_zoo(name):
    p = emitted(name).program
    verify_plan(p)  # the loader ran it too; here a failure names the values
    mp = p.memory_plan
    assert mp.arena_size <= mp.naive_size
    assert all(a.offset % 64 == 0 for a in mp.allocations)


def test_report_planned_arena_against_naive_sum_on_the_zoo(capsys):
    rows = []
    for name in FAST + ("transformer_block", "convnet_bn", "chain_200", "nested_modules"):
        mp = emitted(name).program.memory_plan
        rows.append((name, len(mp.allocations), mp.unplanned, mp.arena_size, mp.naive_size))
    with capsys.disabled():
        print("\nmemory plan: case, planned tensors, left to the allocator, arena bytes, naive bytes, arena/naive")
        for name, n, u, arena, naive in rows:
            print(f"  {name:22} {n:5} {u:5} {arena:10} {naive:10}  {arena / naive if naive else 1:.2f}")
    total_arena = sum(r[3] for r in rows)
    total_naive = sum(r[4] for r in rows)
    assert 0 < total_arena < total_naive


def test_chain_ping_pongs_between_two_slots():
    p = emitted("chain_200").program
    mp = p.memory_plan
    # Every intermediate is f32[4, 8] (128 bytes) and dies right after its single reader.
    assert {a.nbytes for a in mp.allocations} == {128}
    assert mp.arena_size == 2 * 128
    assert mp.naive_size == 128 * len(mp.allocations)


def test_dynamic_sizes_are_planned_at_their_upper_bound():
    p = emitted("mlp").program  # batch s0 in [1, 32]
    bounds = sorted({a.nbytes for a in p.memory_plan.allocations})
    assert bounds == [32 * 32 * 4]  # f32[s0, 32] at s0 = 32


def test_unbounded_dims_are_left_to_the_allocator():
    class M(torch.nn.Module):
        def forward(self, x):
            return (x.sin() * 2).cos() + 1

    ep = torch.export.export(M(), (torch.randn(4, 3),), dynamic_shapes=({0: Dim("n")},))  # no max
    p = emit_ep(ep).program
    assert p.memory_plan.allocations == [] and p.memory_plan.unplanned >= 3
    assert upper_nbytes(p, p.inputs[0].value) is None


@pytest.mark.parametrize("name", ["map", "while_loop"])
def test_nothing_written_inside_a_loop_is_planned(name):
    p = emitted(name).program
    lt = analyze(p)
    assert lt.loops
    for a in p.memory_plan.allocations:
        pos = lt.producers[a.value]
        assert not any(lo <= pos <= hi for lo, hi in lt.loops)


def test_map_output_buffer_is_planned_and_runs_in_the_arena():
    native = emitted("map")
    p = native.program
    allocs = [i.value for i in p.instructions if isinstance(i, P.AllocCall)]
    assert allocs
    # The map output is a user output here, so it must stay out of the arena (it escapes).
    assert not {a.value for a in p.memory_plan.allocations} & set(p.outputs)
    assert_runs_like_eager(exported("map"), native, [((torch.randn(5, 3), torch.randn(3)), {})], arena=True)


def test_checker_catches_overlapping_live_tensors():
    native = emitted("chain_200")
    p = native.program
    lt = analyze(p)
    allocs = p.memory_plan.allocations
    # Two tensors live at the same time (a producer and its reader's output) must not share bytes.
    a, b = next((x, y) for x, y in zip(allocs, allocs[1:], strict=False)
                if lt.interval(x.value)[1] >= lt.interval(y.value)[0] and x.offset != y.offset)
    bad = [msgspec.structs.replace(x, offset=a.offset if x.value == b.value else x.offset) for x in allocs]
    broken = msgspec.structs.replace(p, memory_plan=msgspec.structs.replace(p.memory_plan, allocations=bad))
    with pytest.raises(MemoryPlanError, match=rf"values {a.value} and {b.value} are live together"):
        verify_plan(broken)
    with pytest.raises(NativeFormatError, match=r"memory_plan: values \d+ and \d+ are live together"):
        decode(P.NativeProgram(broken, native.segment).encode())


def test_checker_catches_slots_smaller_than_the_bound_and_planned_outputs():
    p = emitted("mlp").program
    a = p.memory_plan.allocations[0]
    small = [msgspec.structs.replace(a, nbytes=a.nbytes - 4)] + p.memory_plan.allocations[1:]
    with pytest.raises(MemoryPlanError, match=r"cannot hold the tensor's upper bound of 4096 bytes"):
        verify_plan(msgspec.structs.replace(p, memory_plan=msgspec.structs.replace(p.memory_plan, allocations=small)))
    out = [*p.memory_plan.allocations, P.Allocation(p.outputs[0], p.memory_plan.arena_size, 1 << 20)]
    plan = P.MemoryPlan(arena_size=p.memory_plan.arena_size + (1 << 20), allocations=out)
    with pytest.raises(MemoryPlanError, match=r"not a fresh intermediate"):
        verify_plan(msgspec.structs.replace(p, memory_plan=plan))


def test_overlap_checker_itself():
    check_no_overlap([(0, 5, 0, 64, 1), (6, 9, 0, 64, 2)])  # same bytes, disjoint lifetimes
    check_no_overlap([(0, 5, 0, 64, 1), (3, 9, 64, 128, 2)])  # same time, disjoint bytes
    with pytest.raises(MemoryPlanError, match=r"values 1 and 2 are live together"):
        check_no_overlap([(0, 5, 0, 64, 1), (5, 9, 32, 96, 2)])


def test_replanning_is_stable():
    p = emitted("transformer_block").program
    assert plan_memory(p) == p.memory_plan


def test_a_one_tib_arena_is_refused_before_anything_allocates():
    native = emitted("mlp")
    p = native.program
    huge = msgspec.structs.replace(p, memory_plan=msgspec.structs.replace(p.memory_plan, arena_size=1 << 40))
    with pytest.raises(ArenaTooLargeError, match=r"memory_plan\.arena_size: the arena is 1099511627776, more than "
                                                 r"Limits\.max_arena_bytes=68719476736"):
        decode(P.NativeProgram(huge, native.segment).encode())
    # Under the cap, an arena bigger than its slots is refused too: a plan asks for exactly what it uses.
    padded = msgspec.structs.replace(p, memory_plan=msgspec.structs.replace(
        p.memory_plan, arena_size=p.memory_plan.arena_size + 64))
    with pytest.raises(NativeFormatError, match=r"memory_plan\.arena_size: \d+ bytes, but the allocations end at"):
        decode(P.NativeProgram(padded, native.segment).encode())


def test_a_slot_bigger_than_its_tensor_is_refused():
    native = emitted("mlp")
    p = native.program
    a = p.memory_plan.allocations[-1]
    big = [*p.memory_plan.allocations[:-1], msgspec.structs.replace(a, nbytes=a.nbytes + 1)]
    plan = msgspec.structs.replace(p.memory_plan, allocations=big,
                                   arena_size=max(p.memory_plan.arena_size, (a.offset + a.nbytes + 1 + 63) // 64 * 64))
    with pytest.raises(NativeFormatError, match=r"is more than the tensor's upper bound"):
        decode(edited(native, memory_plan=plan))


def _nested_loops(rng: random.Random, lo: int, hi: int, depth: int) -> list[tuple[int, int]]:
    """Random loops inside [lo, hi] that nest or are disjoint, as the loader requires."""
    loops, pos = [], lo
    while depth and pos < hi and rng.random() < 0.7:
        a = rng.randint(pos, hi)
        b = rng.randint(a, min(hi, a + (hi - lo) // 2))
        loops.append((a, b))
        loops += _nested_loops(rng, a + 1, b - 1, depth - 1)
        pos = b + 2
    return loops


def test_lifetimes_stretched_over_outermost_loops_match_the_walk_over_every_loop():
    # interval() bisects the outermost loops instead of walking every loop per value (a file with
    # many loops and many slots made that quadratic): the same lifetimes as the walk, in the
    # order the instructions close the loops, on random nested and disjoint loops.
    rng = random.Random(0)
    for _ in range(300):
        loops = sorted(_nested_loops(rng, 0, 200, 4), key=lambda ab: ab[1])
        nv = 40
        producers = {v: rng.randrange(200) for v in range(nv)}
        end = {v: rng.randint(producers[v], 220) for v in range(nv)}
        lt = Lifetimes(list(range(nv)), {}, end, producers, {}, set(), outermost_loops(loops))
        for v in range(nv):
            lo, hi, want = producers[v], end[v], None
            for a, b in loops:
                if a <= producers[v] <= b:
                    break
                if lo <= b and a <= hi:
                    lo, hi = min(lo, a), max(hi, b)
            else:
                want = (lo, hi)
            assert lt.interval(v) == want, (loops, producers[v], end[v])
