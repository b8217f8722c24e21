"""Differential testing: the program we load behaves like the program that was exported.

The harness (``_differential.differential``) runs ``ep.module()``, torch's own save/load round
trip and ours on the same inputs, seeds and initial state, plus inputs at and past every range
bound and ones that break each relation between input dims; see its docstring. The corpus
(``_diff_corpus``) is every zoo, breadth-zoo, frozen-fixture and ExportDB program and the patterns
people export; ``_diff_programs`` generates random programs with state and randomness.

``EXPECTED`` lists, per corpus case, the kinds of difference that main has today: each one is a
known bug, named in a comment. Each case asserts its exact set, so a new difference fails and so
does a fixed one (then delete its entry). ``make test`` runs the ``FAST`` slice; the whole corpus
and the summary table are ``slow`` (``make test-all``).
"""

from __future__ import annotations

import copy
import time

import pytest
import torch
from hypothesis import event, example, given, settings
from torch.export import Dim

import serde
from tests.serde._diff_corpus import all_cases, pattern_cases, run_case
from tests.serde._diff_programs import StatefulSpec, export_stateful, stateful_specs
from tests.serde._differential import KINDS, Result, differential, dim_variants, same

# ---------------------------------------------------------------- expected differences

# Each entry: a corpus case whose loaded program still behaves differently from torch's own
# save -> load, and how. A case that newly differs fails, and so does a fixed one.
EXPECTED: dict[str, frozenset[str]] = {}

# The slice ``make test`` runs: a few of each source, every pattern.
FAST = (
    "zoo/mlp", "zoo/dynamic_arith", "zoo/signature_kinds", "zoo/input_mutation_aten", "zoo/pytrees",
    "zoo/nested_modules", "zoo/cond", "breadth/cond_size_closure", "breadth/effects_and_mutation",
    "breadth/unbacked", "breadth/classifier_joint", "fixture/v1.0/signature_kinds", "fixture/v2.2/unbacked",
    "exportdb/user_input_mutation/nonstrict", "exportdb/scalar_output/strict", "exportdb/cond_operands/nonstrict",
    "exportdb/dynamic_shape_view/strict-aten",
    *(c.name for c in pattern_cases()),
)

_CASES = {c.name: c for c in all_cases()}
_RESULTS: dict[str, Result] = {}
_TIMES: dict[str, float] = {}


@pytest.fixture(scope="session")
def corpus_result():
    """``name -> Result``: each corpus program is exported and compared once per session."""
    def get(name: str) -> Result:
        if name not in _RESULTS:
            t = time.perf_counter()
            _RESULTS[name] = run_case(_CASES[name])
            _TIMES[name] = time.perf_counter() - t
        return _RESULTS[name]
    return get


def _assert_expected(res: Result) -> None:
    want = EXPECTED.get(res.name, frozenset())
    got = res.kinds()
    assert got == want, (
        f"{res.name}: differences {sorted(got)} but expected {sorted(want)} (update EXPECTED when a "
        f"fix removes one).\n" + "\n".join(f"  {k}: {v}" for k, v in res.diffs.items()))


def test_expected_differences_name_real_cases_and_kinds():
    assert set(FAST) <= set(_CASES)
    assert set(EXPECTED) <= set(_CASES), sorted(set(EXPECTED) - set(_CASES))
    assert all(kinds and kinds <= set(KINDS) for kinds in EXPECTED.values())


@pytest.mark.parametrize("name", FAST)
def test_fast_slice(corpus_result, name):
    _assert_expected(corpus_result(name))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(set(_CASES) - set(FAST)))
def test_corpus(corpus_result, name):
    _assert_expected(corpus_result(name))


def summarize(results: list[Result]) -> str:
    """A table per source (zoo, breadth, fixture, exportdb, pattern): programs run, how many match,
    differ, or could not be exported by torch (``run = match + differ + torch-fails``), and how many
    torch could not save, load or unflatten itself (compared against the exported program only).
    Then one line per difference and per torch failure."""
    cols = ("run", "match", "differ", "torch-fails", "torch-rt-fails")
    rows: dict[str, dict[str, int]] = {}
    for r in results:
        row = rows.setdefault(r.name.split("/")[0], dict.fromkeys(cols, 0))
        row["run"] += 1
        row[r.status] += 1
        row["torch-rt-fails"] += bool(set(r.torch_fails) - {"export"})
    rows["total"] = {k: sum(row[k] for row in rows.values()) for k in cols}
    lines = [f"{'source':10}" + "".join(f"{c:>15}" for c in cols)]
    for name, row in rows.items():
        lines.append(f"{name:10}" + "".join(f"{row[c]:15}" for c in cols))
    for r in results:
        lines += [f"DIFF {r.name} [{k}] {v[:160]}" for k, v in r.diffs.items()]
    for r in results:
        lines += [f"TORCH-FAILS {r.name} [{k}] {v[:160]}" for k, v in r.torch_fails.items()]
        lines += [f"TORCH-DIFFERS {r.name} [{k}] {v[:160]}" for k, v in r.torch_diffs.items()]
    return "\n".join(lines)


def test_fast_slice_summary(corpus_result):
    results = [corpus_result(n) for n in FAST]
    table = summarize(results)
    print("\n" + table)
    assert f"{'total':10}{len(FAST):15}" in table


@pytest.mark.slow
def test_corpus_summary(corpus_result):
    t = time.perf_counter()
    results = [corpus_result(n) for n in sorted(_CASES)]
    table = summarize(results)
    print(f"\n{table}\nwall time of the programs run by this test: {time.perf_counter() - t:.0f} s")
    assert f"{'total':10}{len(_CASES):15}" in table
    # Only the listed differences: the per-case tests say which case broke the promise.
    assert {r.name: r.kinds() for r in results if r.kinds()} == EXPECTED


# ---------------------------------------------------------------- the harness can fail


class _Scaled(torch.nn.Module):
    def __init__(self, extra_rand: bool = False) -> None:
        super().__init__()
        self.register_buffer("count", torch.zeros(()))
        self.extra_rand = extra_rand

    def forward(self, x, y):
        self.count.add_(1)
        out = x * 2 + y[1:] + torch.rand_like(x)
        if self.extra_rand:
            out = out + torch.rand(()) * 0
        x.add_(1)
        return out


def _export(max_d: int = 16, extra_rand: bool = False):
    d = Dim("d", min=2, max=max_d)
    return torch.export.export(_Scaled(extra_rand), (torch.randn(4), torch.randn(5)),
                               dynamic_shapes=({0: d}, {0: d + 1}), strict=False)


def _good_program():
    return _export()


def test_harness_passes_a_faithful_load():
    ep = _good_program()
    res = differential(ep, name="faithful", load=lambda data: _reexport_like(ep, data))
    assert res.diffs == {}, res.diffs
    assert res.runs > 5  # the dimension variants ran


def _reexport_like(ep, data):
    """A "load" that ignores the bytes and returns the same program again: a faithful one."""
    assert data
    return ep


def _tampered_output(data):
    ep = serde.load(data)
    out = ep.graph.output_node()
    (val,) = out.args[0][-1:]
    with ep.graph.inserting_before(out):
        bumped = ep.graph.call_function(torch.ops.aten.add.Tensor, (val, 1e-6))
    bumped.meta["val"] = val.meta["val"]
    out.args = ((*out.args[0][:-1], bumped),)
    ep.graph_module.recompile()
    return ep


def test_harness_catches_a_modified_output():
    torch.manual_seed(0)
    linear = torch.export.export(torch.nn.Linear(3, 2), (torch.randn(4, 3),))
    res = differential(linear, load=_tampered_output, with_torch=False)
    assert set(res.diffs) == {"outputs", "unflatten"}, res.diffs
    assert res.diffs["outputs"].startswith("input0: outputs [0]: values differ")
    # In a program that draws random numbers, output differences are filed as rng.
    res = differential(_good_program(), load=_tampered_output, with_torch=False, variants=False)
    assert "rng" in res.diffs


def test_harness_catches_an_extra_accepted_input():
    wider = _export(max_d=64)
    res = differential(_good_program(), load=lambda data: wider, with_torch=False, unflatten=False)
    assert set(res.diffs) == {"rejection"}
    assert "d=17" in res.diffs["rejection"] or "upper+1" in res.diffs["rejection"], res.diffs


def test_harness_catches_a_changed_buffer_and_rng_use():
    def changed_state(data):
        ep = serde.load(data)
        ep.state_dict["count"] += 1
        return ep

    res = differential(_good_program(), load=changed_state, with_torch=False, unflatten=False, variants=False)
    assert {"state", "buffers"} <= set(res.diffs)
    res = differential(_good_program(), load=lambda data: _export(extra_rand=True), with_torch=False,
                       unflatten=False, variants=False)
    assert "rng" in res.diffs and "RNG draws" in res.diffs["rng"]


def test_harness_catches_a_lost_input_mutation():
    class NoMutation(torch.nn.Module):
        def forward(self, x, y):
            return x * 2

    class Mutation(torch.nn.Module):
        def forward(self, x, y):
            y.add_(x)
            return x * 2

    args = (torch.randn(3), torch.zeros(3))
    lost = torch.export.export(NoMutation(), copy.deepcopy(args))
    res = differential(torch.export.export(Mutation(), copy.deepcopy(args)), load=lambda data: lost,
                       with_torch=False, variants=False)
    assert set(res.diffs) == {"inputs", "unflatten"}


def test_same_is_bit_exact_and_nan_aware():
    nan = torch.tensor([float("nan"), 1.0])
    assert same(nan, nan.clone()) is None
    assert same(torch.tensor([0.0]), torch.tensor([-0.0])) is not None
    assert same(torch.tensor([1.0]), torch.tensor([1.0], dtype=torch.float64)) is not None
    assert same((1, [2.0]), (1, [2.0])) is None and same((1,), [1]) is not None
    assert same(float("nan"), float("nan")) is None and same(1, True) is not None


def test_dimension_variants_probe_bounds_and_relations():
    ep = _good_program()
    labels = [label for label, _ in dim_variants(ep, ep.example_inputs)]
    sym = [str(s) for s in ep.range_constraints][0]
    assert {f"{sym}=2 (lower)", f"{sym}=1 (lower-1)", f"{sym}=16 (upper)", f"{sym}=17 (upper+1)"} <= set(labels)
    assert {"input0.shape[0]+1", "input1.shape[0]+1"} <= set(labels)
    shapes = dict((label, tuple(t.shape for t in x[0])) for label, x in dim_variants(ep, ep.example_inputs))
    assert shapes[f"{sym}=16 (upper)"] == ((16,), (17,))
    assert shapes["input1.shape[0]+1"] == ((4,), (6,))


# ---------------------------------------------------------------- random programs with state

# Known bugs, by what a generated program does (see EXPECTED for the same bugs on named cases);
# a generated program may show these kinds of difference and no others.
def _allowed(spec: StatefulSpec) -> set[str]:
    """Difference kinds a generated program may show: none, since every known one is fixed."""
    return set()


_PROFILE_EXAMPLES = settings.default.max_examples
# ``fast`` (12 examples elsewhere): a handful; ``thorough`` (200 elsewhere): at least 500 programs.
_GENERATED = 500 if _PROFILE_EXAMPLES >= 200 else 5


@settings(max_examples=_GENERATED)
@given(stateful_specs())
# A step that reads only state appends a value that later steps write through a view of.
@example(StatefulSpec(batch=3, features=2, dynamic=False, derived="same",
                      steps=(("bernoulli", (0,), 0), ("buf_view_mul_", (), 0), ("value_col_mul_", (3,), 0),
                             ("buf_copy_", (3,), 1)),
                      outputs=(5, 3), seed=0))
# Its value goes through a pure op into a cond beside itself (operands must not alias each other).
@example(StatefulSpec(batch=3, features=2, dynamic=False, derived="same",
                      steps=(("buf_view_mul_", (), 0), ("bernoulli", (0,), 0), ("transposed", (2,), 0),
                             ("cond", (2, 4), 0)),
                      outputs=(5,), seed=0))
# Its 0-d value into an op reading its first and last sizes (found by a hunt: the op failed).
@example(StatefulSpec(batch=3, features=2, dynamic=False, derived="same",
                      steps=(("buf_view_mul_", (), 0), ("bernoulli", (0,), 0), ("size_arith", (2,), 0)),
                      outputs=(4,), seed=0))
# Draws from a held generator between global draws and a buffer write, on a dynamic batch.
@example(StatefulSpec(batch=3, features=2, dynamic=True, derived="plus1",
                      steps=(("gen_rand", (0,), 0), ("randn", (2,), 0), ("buf_add_", (3,), 0),
                             ("gen_randn", (1,), 0)),
                      outputs=(5, 2), seed=0))
def test_generated_programs_behave_like_exported(spec):
    ep, runs = export_stateful(spec)
    res = differential(ep, runs, name=repr(spec), max_variants=8)
    # --hypothesis-show-statistics then counts how many generated programs matched or differed how.
    event(f"{res.status} {' '.join(sorted(res.kinds()))}".strip())
    unexpected = res.kinds() - _allowed(spec)
    assert not unexpected, "\n".join(f"{k}: {res.diffs[k]}" for k in sorted(unexpected))
