"""The loader fuzzer (fuzzer.py): a short deterministic slice in ``make test``, a long campaign when slow.

Both assert that no mutated artifact makes a loader raise a foreign exception, crash, hang, run
code or load a changed .pt2n file, and that the campaign really reached both outcomes (refusals
and programs that load and run), so that a broken mutator cannot pass by producing nothing but
garbage or nothing but seeds. The test of the fuzzer itself switches one fix off in its workers
(``_worker.REVERTS``) and checks that a focused campaign finds what the fix prevents.
"""

from __future__ import annotations

import os
import re

import pytest

from tests.serde.fuzz._worker import REVERTS
from tests.serde.fuzz.fuzzer import (
    BUGS,
    ENUM_OP,
    HEADER_ENUM_OP,
    HEADER_OP_SWAP_OP,
    HEADER_OVERFLOW_OP,
    HEADER_UNBIND_OP,
    KERNEL_ARG_OP,
    KINDS,
    PAYLOAD_PREFIX,
    RARE_KINDS,
    SEED_DIRS,
    SIZE_ITEM_OP,
    STRATEGIES,
    campaign,
    load_seeds,
    make_case,
    summarize_bugs,
)

FAST_CASES = 400
NEWEST = SEED_DIRS[1].name  # the newest frozen fixtures' version directory, v2.6 ...
SLOW_CASES = 50_000


@pytest.fixture(scope="module")
def seeds():
    return load_seeds()


def _check(report, n: int) -> None:
    counts = report.counts
    assert len(report.results) == n
    assert not report.bugs, f"{len(report.bugs)} bugs\n{summarize_bugs(report)}\n{report.table()}"
    assert counts["rejected"] > n // 4, report.table()
    assert counts["ok"] > 0, report.table()


def test_cases_are_deterministic(seeds) -> None:
    for i in (0, 7, 123):
        a, b = make_case(seeds, 0, i), make_case(seeds, 0, i)
        assert (a.strategy, a.seed.name, a.data) == (b.strategy, b.seed.name, b.data)
    assert make_case(seeds, 0, 5).data != make_case(seeds, 1, 5).data or make_case(seeds, 0, 5).strategy != \
        make_case(seeds, 1, 5).strategy


def test_every_strategy_and_seed_is_used(seeds) -> None:
    cases = [make_case(seeds, 0, i) for i in range(400)]
    assert {c.strategy for c in cases} == {name for name, _ in STRATEGIES}
    assert {c.seed.name for c in cases} == {s.name for s in seeds}
    assert any(s.native is not None for s in seeds)
    assert {c.path for c in cases if c.kind == "pt2s"} == {"plain", "mmap", "emit"}
    # every member of every seed is mutated (debug.json, the extra files and the weight payloads
    # included), and the manifest, whole files and renames across members
    assert _members(c.kinds for c in cases) >= _seed_members(seeds)


def _seed_members(seeds) -> set[str]:
    members = {PAYLOAD_PREFIX + "*" if n.startswith(PAYLOAD_PREFIX) else n for s in seeds for n in s.members}
    return members | {"manifest.json", "pt2n", "pt2n.header", "pt2s", "all"}


def _members(kinds) -> set[str]:
    return {k.split(":", 1)[0] for ks in kinds for k in ks}


def _kinds(kinds) -> set[str]:
    return {k.rsplit(":", 1)[1] for ks in kinds for k in ks}


def test_every_field_kind_is_mutated(seeds) -> None:
    made = _kinds(make_case(seeds, 0, i).kinds for i in range(1500))
    assert made <= KINDS | {"other.kept"}, f"kinds not listed in fuzzer.KINDS: {made - KINDS}"
    assert made >= KINDS - RARE_KINDS, f"never made: {sorted(KINDS - RARE_KINDS - made)}"


def test_fuzz_slice(seeds) -> None:
    report = campaign(FAST_CASES, run_seed=0, jobs=2, seeds=seeds)
    _check(report, FAST_CASES)
    assert report.coverage and "mutation coverage:" in report.coverage_table()


def _seeds(seeds, *names: str) -> list:
    chosen = [s for s in seeds if s.name.split("/", 1)[1] in names and s.name.startswith((f"{NEWEST}/", "seeds/"))]
    assert len(chosen) == len(names), [s.name for s in chosen]
    return chosen


# fix switched off -> (focused campaign: strategies, .pt2s paths, targeted ops, seeds, cases),
# and what the fuzzer then reports (outcome category, a regex on its detail). Each is one class
# the fuzzer outside this project found before the fix; the budgets are a few times what a
# deterministic campaign needs.
FOCUS = {
    # a parameter renamed `self` (or an input `getattr`) loads and fails in fx's generated code
    "fx_names": (dict(strategies=(("rename", 1),), paths=(("plain", 1),)), ("mlp", "nested_modules"), 40,
                 "run_inconsistent", r"AttributeError|object is not callable"),
    # hostile provenance through the stdlib json and torch's NodeSource._from_dict
    "debug_decoder": (dict(strategies=(("debug", 1),), paths=(("plain", 1),)), ("debug_extra",), 40,
                      "foreign", r"RecursionError|AssertionError"),
    # an integer past int64 reaches msgpack in the emitter
    "int64": (dict(strategies=(("weights", 1),), paths=(("emit", 1),), ops=(13,)), ("mlp", "tied_weights"), 80,
              "foreign", r"OverflowError"),
    # an expression of the wrong arity reaches the native emitter
    "arity": (dict(strategies=(("program", 1),), paths=(("emit", 1),), ops=(14,)), ("dynamic_arith", "unbacked"),
              60, "foreign", r"IndexError"),
    # a boolean at a size position reaches torch's create_symintnode or its fake tensors
    "sort": (dict(strategies=(("program", 1),), paths=(("plain", 1),), ops=(15,)), ("dynamic_arith",), 60,
             "foreign", r"TypeError|AssertionError"),
    # a cond predicate of many elements (or a scan/map operand of another meta) fails at run time
    "hop_operands": (dict(strategies=(("program", 1),), paths=(("plain", 1),), ops=(16,)),
                     ("debug_extra", "scan"), 60, "run_inconsistent", r"ambiguous|size|shape|dimension"),
    # a flip in the padding between blobs of a .pt2n file loads (the Python loader)
    "padding": (dict(strategies=(("pt2n_flip", 1),), cpp=False), ("all_dtypes",), 80, "undetected", r"changed"),
    # Found by the campaigns since. A symbol range near int64 makes a planned tensor's byte bound
    # pass 64 bits, which msgpack cannot write
    "plan_bounds": (dict(strategies=(("program", 1),), paths=(("emit", 1),), ops=(8, 9)), ("signature_kinds",),
                    80, "foreign", r"OverflowError|int too big"),
    # emit checks what the load checks: a tensor of an unknown dtype reaches the memory planner
    "emit_checks": (dict(strategies=(("program", 1),), paths=(("emit", 1),), ops=(ENUM_OP,)), ("mlp",), 40,
                    "foreign", r"KeyError"),
    # a HOP subgraph renamed `self` everywhere: fx names its get_attr node self
    "subgraph_self": (dict(strategies=(("rename", 1),), paths=(("plain", 1),)), ("scan",), 40,
                      "run_inconsistent", r"AttributeError|object is not callable"),
    # a layout of Unknown (0) in a .pt2n header loads in Python and fails when the runtime uses it
    "native_layouts": (dict(strategies=(("pt2n_header", 1),), ops=(HEADER_ENUM_OP,), cpp=False), ("all_dtypes",), 40,
                       "foreign|foreign_run", r"KeyError"),
    # a random call drawing from a lifted torch.Generator is compared by propagation: its size
    # argument edited past what the node stores loads and allocates it
    "generator": (dict(strategies=(("program", 1),), paths=(("plain", 1),), ops=(13,)), ("generators",), 60,
                  "run_oom|run_torch", r"can't allocate|Storage size calculation overflowed"),
    # a call torch's own fake kernel refuses on the stored values (embedding's indices as floats)
    "fake_verdict": (dict(strategies=(("program", 1),), paths=(("plain", 1),), ops=(17,)), ("tied_weights",), 60,
                     "run_inconsistent|run_torch", r"scalar type|Expected tensor for argument|dtype"),
    # Found by the 50,000-case campaign: .pt2n header edits both native loaders let through and the
    # runtimes refused only when run (the Python loader; the C++ one has the same checks)
    # an input dimension over a symbol no input binds
    "unbound_symbols": (dict(strategies=(("pt2n_header", 1),), ops=(HEADER_UNBIND_OP,), cpp=False),
                        ("named_results",), 30, "run_refused", r"depends on a symbol no input binds"),
    # a size expression past int64 over the symbols' ranges
    "size_overflow": (dict(strategies=(("pt2n_header", 1),), ops=(HEADER_OVERFLOW_OP,), cpp=False),
                      ("dynamic_arith",), 40, "run_refused", r"overflows int64"),
    # a call's op swapped for its out= variant: run functionally, it binds no out= argument (the
    # propagation pass of the worker's .pt2n loads refuses it too, as its kernel refuses the call)
    "out_variant_call": (dict(strategies=(("pt2n_header", 1),), ops=(HEADER_OP_SWAP_OP,), cpp=False),
                         ("input_mutation_aten",), 40, "run_refused|run_torch|rejected_propagate",
                         r"missing value for argument 'out'"),
    # Found by the 50,000-case campaigns: calls torch's fake kernels accept and its CPU kernels refuse
    # (serde.bridge.checks.kernels): a masked_select mask of another dtype
    "kernel_masks": (dict(strategies=(("program", 1),), paths=(("plain", 1),), ops=(KERNEL_ARG_OP,)), ("unbacked",),
                     40, "run_torch", r"expected BoolTensor for mask"),
    # an _assert_tensor_metadata whose dtype is not its operand's
    "kernel_asserts": (dict(strategies=(("program", 1),), paths=(("plain", 1),), ops=(KERNEL_ARG_OP,)),
                       ("all_dtypes",), 40, "run_torch", r"Tensor dtype mismatch"),
    # a Scalar past the dtype it is converted to (flex_attention's full)
    "kernel_scalars": (dict(strategies=(("program", 1),), paths=(("plain", 1),), ops=(KERNEL_ARG_OP,)),
                       ("flex_attention_aten",), 60, "run_torch", r"without overflow"),
    # associative_scan's vmap: a level above the open ones (functorch's internal assert), and a batch
    # dim moved under a stored result
    "vmap_levels": (dict(strategies=(("program", 1),), paths=(("plain", 1),), ops=(KERNEL_ARG_OP,)),
                    ("associative_scan",), 40, "run_torch|run_inconsistent", r"INTERNAL ASSERT"),
    "batch_dims": (dict(strategies=(("program", 1),), paths=(("plain", 1),), ops=(KERNEL_ARG_OP,)),
                   ("associative_scan",), 40, "run_torch|run_inconsistent", r"must match the size"),
    # Found by the campaigns: a call's op swapped for another operator of the program that binds
    # the same arguments, which its kernel refuses (the native loaders check kinds, not kernels)
    "native_propagation": (dict(strategies=(("pt2n_header", 1),), ops=(HEADER_OP_SWAP_OP,), cpp=False),
                           ("transformer_block", "convnet_bn"), 60, "run_refused",
                           r"instruction \d+ \(aten::\w+\.\w+, node '\w+'.*\) failed: RuntimeError"),
    # Found by the 50,000-case campaign with native propagation: a range constraint (or a static size,
    # or a constant input) edited so that the program's own example inputs fail its module's input
    # checks, which refused them only when run
    "example_inputs": (dict(strategies=(("program", 1),), paths=(("plain", 1),), ops=(9,)), ("debug_extra",), 40,
                       "run_guard", r"Guard failed: x\.size\(\)\[0\] [<>]="),
    # a file the load refuses (an argument order, here) emitted, and ran when it could
    "emit_load_checks": (dict(strategies=(("program", 1),), paths=(("emit", 1),), ops=(2,)), ("mlp",), 40,
                         "emit_unchecked", r"serde\.load refuses it"),
    # Found by the 50,000-case campaign of seed 11: flex_attention's query swapped for a tensor of
    # another embedding size fails in the kernel at run time
    "flex_operands": (dict(strategies=(("program", 1),), paths=(("plain", 1),), ops=(16,)),
                      ("flex_attention_aten",), 60, "run_inconsistent", r"batch2 tensor|size|shape"),
    # and a structure-only load (emit's checks) skipped the weights' strides, FakeTensors being a
    # tensor subclass: a placeholder's stride edited away from its weight's emitted
    "structure_strides": (dict(strategies=(("program", 1),), paths=(("emit", 1),)), ("mlp",), 300,
                          "emit_unchecked", r"with strides"),
    # a size only conv2d's CPU kernel checks (a negative stride), which the probe takes now
    "kernel_sizes": (dict(strategies=(("program", 1),), paths=(("plain", 1),), ops=(SIZE_ITEM_OP,)),
                     ("convnet_bn",), 60, "run_torch", r"non-positive stride|expected bias"),
    # a tensor batched at a vmap level with another batch size than the level's, or in another
    # vmap call than its own
    "vmap_batches": (dict(strategies=(("program", 1),), paths=(("plain", 1),), ops=(17,)),
                     ("associative_scan",), 150, "run_torch", r"must match the size|stack expects each tensor"),
    # Found by the 50,000-case campaign with native propagation: an operand dtype the CPU kernel
    # refuses and its meta kernel accepts (a bool-valued call swapped to relu or neg)
    "kernel_dtypes": (dict(strategies=(("pt2n_header", 1),), ops=(HEADER_OP_SWAP_OP,), cpp=False),
                      ("debug_extra", "transformer_block"), 150, "run_refused",
                      r"Boolean inputs not supported|bool tensor is not supported|not implemented"),
    # a size list item below -2**62, which c10 keeps symbolic and the kernel refuses as not concrete
    # (the propagation pass refuses it too now, in the meta kernel's words: either shows the
    # default load let it through)
    "concrete_symints": (dict(strategies=(("program", 1),), paths=(("plain", 1),), ops=(SIZE_ITEM_OP,)),
                         ("multi_output",), 60, "run_torch|rejected_propagate",
                         r"expected to contain only concrete integers|-9223372036854775808"),
    # sym_size of another tensor than the stored one: the sizes computed from it fit the stored
    # symbolic ones, and reshape refuses them at the example values
    "number_results": (dict(strategies=(("program", 1),), paths=(("plain", 1),), ops=(17,)), ("dynamic_arith",),
                       60, "run_torch", r"is invalid for input of size"),
}
assert set(FOCUS) == set(REVERTS)


@pytest.mark.slow  # two focused campaigns each, about a minute per class on two cores
@pytest.mark.parametrize("revert", sorted(FOCUS))
def test_the_fuzzer_finds_each_fixed_class_when_its_fix_is_reverted(revert: str, seeds) -> None:
    focus, seed_names, n, category, detail = FOCUS[revert]
    chosen = _seeds(seeds, *seed_names)
    reverted = campaign(n, run_seed=0, jobs=2, seeds=chosen, revert=revert, **focus)
    found = [r for r in reverted.results if re.fullmatch(category, r.category) and re.search(detail, r.detail)]
    assert found, f"{revert}: nothing like {category} /{detail}/ in\n{reverted.table()}\n{summarize_bugs(reverted)}"
    # the same campaign with the fix in place finds none of it
    fixed = campaign(n, run_seed=0, jobs=2, seeds=chosen, **focus)
    again = [r for r in fixed.results if re.fullmatch(category, r.category) and re.search(detail, r.detail)]
    assert not again, f"{revert}: with the fix, still {summarize_bugs(fixed)}"


@pytest.mark.slow
def test_fuzz_campaign(seeds) -> None:
    # The run seed picks the mutations; another one (PT2SERDE_FUZZ_SEED) is a fresh campaign.
    n = int(os.environ.get("PT2SERDE_FUZZ_CASES", SLOW_CASES))
    run_seed = int(os.environ.get("PT2SERDE_FUZZ_SEED", 1))
    report = campaign(n, run_seed=run_seed, jobs=2, seeds=seeds, progress=True)
    print(report.table())
    print(report.coverage_table())
    print(summarize_bugs(report) or "no findings")
    _check(report, n)
    assert set(BUGS).isdisjoint(report.counts)
    if n >= SLOW_CASES:  # every kind of mutation and every member, the rare ones included
        kinds = [r.kinds for r in report.results]
        assert _kinds(kinds) >= KINDS, f"never made: {sorted(KINDS - _kinds(kinds))}"
        assert _members(kinds) >= _seed_members(seeds), sorted(_seed_members(seeds) - _members(kinds))
