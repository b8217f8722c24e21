"""Input guards survive save/load: the loaded program rejects exactly the inputs the exported one does.

Differential against torch: for each program, every input set is run through ``ep.module()`` of
the exported program, of ``torch.export.load(torch.export.save(ep))`` and of
``serde.load(serde.save(ep))``; the outcome (ok, or the exception type) must agree.
"""

from __future__ import annotations

import ast
import copy
import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import msgspec
import pytest
import torch
from torch.export import Dim
from torch.export.passes import move_to_device_pass

import serde
from serde.archive.artifact import read_artifact
from serde.bridge.treespec import serialize_treespec
from serde.core import schema
from serde.core.expr.guards import (
    canonical_guards,
    guards_from_code,
    guards_to_code,
    input_paths,
    source_resolver,
)
from serde.core.memo import Memo
from serde.errors import MalformedArtifactError, UnsupportedConstructError
from serde.testing import ProgramMismatch, assert_programs_equal
from tests import _guard_programs as gp
from tests._guard_programs import Bounded, T, cfg
from tests.tiers import tiered

# ---------------------------------------------------------------- programs under test


@dataclass(frozen=True)
class Case:
    name: str
    export: Callable[[], torch.export.ExportedProgram]
    inputs: list[tuple[tuple, dict]]      # (args, kwargs) sets to try
    min_rejected: int                      # how many of them the exported program itself rejects


CASES = [
    Case("derived_dim", gp.export_derived,
         [((T(4), T(5)), {}), ((T(4), T(7)), {}), ((T(4), T(4)), {}), ((T(2), T(3)), {}),
          ((T(1), T(2)), {}), ((T(9), T(10)), {})], 2),
    Case("two_times_d", gp.export_doubled,
         [((T(2), T(4)), {}), ((T(10), T(20)), {}), ((T(1), T(2)), {}), ((T(11), T(22)), {}),
          ((T(4), T(9)), {}), ((T(4), T(7)), {}), ((T(5), T(10)), {})], 3),
    Case("same_dim", gp.export_same,
         [((T(3, 2), T(3, 2)), {}), ((T(3, 2), T(4, 2)), {}), ((T(64, 2), T(64, 2)), {}),
          ((T(65, 2), T(65, 2)), {}), ((T(5, 2), T(5, 3)), {}), ((T(1, 2), T(1, 2)), {})], 3),
    Case("divisible", gp.export_divisible,
         [((T(8),), {}), ((T(12),), {}), ((T(6),), {}), ((T(4),), {}), ((T(16),), {}), ((T(2),), {})], 3),
    Case("min_max", gp.export_bounded,
         [((T(3),), {}), ((T(6),), {}), ((T(2),), {}), ((T(7),), {})], 2),
    Case("auto_relations", gp.export_auto_relations,
         [((T(2, 3), T(3, 5)), {}), ((T(4, 7), T(7, 5)), {}), ((T(4, 7), T(7, 4)), {}),
          ((T(4, 7), T(7, 3)), {}), ((T(2, 3), T(4, 5)), {}), ((T(2, 2), T(2, 3)), {})], 3),
    Case("kwargs_nested", gp.export_nested,
         [((T(4),), cfg(6, 5)), ((T(3),), cfg(7, 4)), ((T(4),), cfg(6, 4)), ((T(4),), cfg(3, 5)),
          ((T(4),), cfg(4, 9)), ((T(4),), cfg(6, 2))], 3),
    Case("int_input", gp.export_int_input,
         [((T(3), 5), {}), ((T(3), 4), {}), ((T(3), 3), {}), ((T(6), 5), {}), ((T(2), 3), {}),
          ((T(3), 2), {})], 3),
    Case("kwargs_order", gp.export_kwargs_order,
         [((T(3),), {"b": T(4), "a": T(5)}), ((T(3),), {"b": T(4), "a": T(2)}),
          ((T(3),), {"a": T(6), "b": T(2)}), ((T(3),), {"b": T(9), "a": T(1)})], 2),
    # exported again from ep.module(): the call graph names torch's '_guards_fn'
    Case("reexported", gp.export_reexported,
         [((T(3, 2), T(3, 2)), {}), ((T(3, 2), T(4, 2)), {}), ((T(64, 2), T(64, 2)), {}),
          ((T(65, 2), T(65, 2)), {}), ((T(5, 2), T(5, 3)), {})], 3),
    Case("wrapped", gp.export_wrapped,
         [((T(8),), {}), ((T(12),), {}), ((T(6),), {}), ((T(4),), {}), ((T(16),), {}), ((T(2),), {})], 3),
    Case("power", gp.export_squared, [((T(6),), {}), ((T(5),), {}), ((T(4),), {}), ((T(3),), {})], 2),
    Case("not_equal", gp.export_not_five, [((T(6),), {}), ((T(5),), {}), ((T(4),), {})], 1),
    Case("max_min", gp.export_max_min,
         [((T(6), T(3)), {}), ((T(2), T(3)), {}), ((T(6), T(5)), {}), ((T(7), T(2)), {})], 2),
    # torch 2.14 writes max and min of three as nested torch.sym_max/sym_min calls, 2.13 flat
    # (z stays 2: export specializes it, and ep.module() of the exported program, unlike torch's
    # load, does not check a dim specialized that way)
    Case("max_min_of_three", gp.export_max_min_of_three,
         [((T(6), T(3), T(2)), {}), ((T(2), T(3), T(2)), {}), ((T(7), T(4), T(2)), {}), ((T(4), T(8), T(2)), {}),
          ((T(6), T(2), T(2)), {}), ((T(5), T(4), T(2)), {})], 2),
    Case("max_of_constant", gp.export_max_of_constant,
         [((T(6), 5), {}), ((T(5), 5), {}), ((T(8), 9), {}), ((T(8), 3), {}), ((T(9), 7), {})], 3),
    # an input with a wider y fails both checks: the message names the one torch recorded first
    Case("max_is_first", gp.export_max_is_first,
         [((T(2, 5), T(2, 3)), {}), ((T(2, 1), T(2, 3)), {}), ((T(2, 3), T(2, 7)), {}), ((T(2, 5), T(2, 5)), {}),
          ((T(3, 6), T(3, 2)), {})], 3),
    Case("true_div", gp.export_halved, [((T(6),), {}), ((T(4),), {}), ((T(5),), {})], 1),
    Case("sum", gp.export_summed, [((T(4), T(5)), {}), ((T(2), T(3)), {}), ((T(3), T(5)), {})], 1),
]
# The same programs exported with strict=True, whose guards torch writes against
# L['flat_args'][i] (the i-th flattened input, args then kwargs, nested containers included).
CASES += [Case(f"{c.name}_strict", functools.partial(c.export, strict=True), c.inputs, c.min_rejected)
          for c in CASES]
# make test keeps the strict exports whose guards torch words differently (flattened kwargs and
# containers, int inputs, derived dims); the rest of the strict ones run under -m slow.
_FAST = [c.name for c in CASES if not c.name.endswith("_strict")] + \
    ["derived_dim_strict", "kwargs_nested_strict", "int_input_strict", "kwargs_order_strict", "max_min_strict"]


def _outcome(module: torch.nn.Module, args: tuple, kwargs: dict) -> str:
    try:
        module(*args, **kwargs)
    except Exception as e:  # the type is the observable we compare
        return type(e).__name__
    return "ok"


@pytest.fixture(scope="module", params=tiered(CASES, [c for c in CASES if c.name in _FAST],
                                               ids=[c.name for c in CASES]))
def programs(request, tmp_path_factory
             ) -> tuple[Case, dict[str, torch.nn.Module], torch.export.ExportedProgram, torch.export.ExportedProgram]:
    """(case, the modules of each program, our loaded program, the exported program)."""
    case: Case = request.param
    torch.manual_seed(0)
    ep = case.export()
    d = tmp_path_factory.mktemp(case.name)
    torch.export.save(ep, d / "torch.pt2")
    serde.save(ep, d / "ours.pt2s")
    ours = serde.load(d / "ours.pt2s")
    mods = {"exported": ep.module(), "torch": torch.export.load(d / "torch.pt2").module(), "ours": ours.module()}
    return case, mods, ours, ep


def test_loaded_program_rejects_what_the_exported_one_rejects(programs) -> None:
    case, mods, _, _ = programs
    rows = {name: [_outcome(m, a, k) for a, k in case.inputs] for name, m in mods.items()}
    assert rows["ours"] == rows["exported"], rows
    # torch's own round trip is the reference for what a loaded program should do
    assert rows["ours"] == rows["torch"], rows
    # the case must exercise rejection, or it proves nothing
    assert sum(r != "ok" for r in rows["exported"]) >= case.min_rejected, rows


def _message(module: torch.nn.Module, args: tuple, kwargs: dict) -> str:
    try:
        module(*args, **kwargs)
    except Exception as e:  # the message is the observable we compare
        return f"{type(e).__name__}: {e}"
    return "ok"


def test_guard_failure_messages_are_torchs(programs) -> None:
    # The guard function of ep.module() says which guard failed, in the running torch's spelling
    # (max(...) or torch.sym_max(...)); ours must read the same for every input.
    case, mods, _, _ = programs
    if case.name in MESSAGE_MAY_DIFFER:
        pytest.skip(MESSAGE_MAY_DIFFER[case.name])
    want = [_message(mods["exported"], a, k) for a, k in case.inputs]
    assert [_message(mods["ours"], a, k) for a, k in case.inputs] == want
    assert [_message(mods["torch"], a, k) for a, k in case.inputs] == want


# Cases where an input fails several guards: ep.module() reports the first in torch's recording
# order, ours the first in the stored (sorted) order.
MESSAGE_MAY_DIFFER: dict[str, str] = {}


def test_loaded_guards_are_the_exported_ones(programs) -> None:
    case, _, ours, _ = programs
    # Printed by us from the tree, they parse to the same trees as torch's own text, its sources
    # read as ep.module() reads them (a strict export's L['flat_args'][i] as that input's path).
    exported = case.export()
    assert guards_from_code(ours._guards_code) == _stored_guards(exported)


def _stored_guards(ep: torch.export.ExportedProgram) -> schema.InputGuards | None:
    sig = ep.module_call_graph[0].signature
    flat = input_paths(serialize_treespec(sig.in_spec), sig.forward_arg_names)
    return guards_from_code(ep._guards_code, resolve=source_resolver(flat))


# Programs torch records the same guards for under strict=True as without (derived dims differ).
_SAME_GUARDS_STRICT = [gp.export_same, gp.export_doubled, gp.export_divisible, gp.export_auto_relations,
                       gp.export_nested, gp.export_int_input, gp.export_kwargs_order]


@pytest.mark.parametrize("export", _SAME_GUARDS_STRICT, ids=lambda f: f.__name__)
def test_strict_export_stores_the_guards_of_the_non_strict_one(export, tmp_path: Path) -> None:
    strict, plain = export(strict=True), export()
    assert all("L['flat_args']" in c for c in strict._guards_code), strict._guards_code
    serde.save(strict, tmp_path / "strict.pt2s")
    serde.save(plain, tmp_path / "plain.pt2s")
    stored = [read_artifact(tmp_path / f).program.guards for f in ("strict.pt2s", "plain.pt2s")]
    assert stored[0] is not None
    assert msgspec.json.encode(stored[0]) == msgspec.json.encode(stored[1])


def test_strict_guard_error_names_the_input(tmp_path: Path) -> None:
    # torch's error for the exported program names y; the loaded one's must too, not flat_args.
    serde.save(gp.export_same(strict=True), tmp_path / "a.pt2s")
    with pytest.raises(AssertionError, match=r"Guard failed: y\.size\(\)\[0\] == x\.size\(\)\[0\]"):
        serde.load(tmp_path / "a.pt2s").module()(T(3, 2), T(4, 2))


def test_derived_dim_guard_error_matches_torch(tmp_path: Path) -> None:
    """The motivating bug: after our load, a size-7 y for size-4 x failed inside aten.add."""
    ep = gp.export_derived()
    serde.save(ep, tmp_path / "a.pt2s")
    loaded = serde.load(tmp_path / "a.pt2s")
    with pytest.raises(AssertionError, match=r"Guard failed: x\.size\(\)\[0\] == -1 \+ y\.size\(\)\[0\]"):
        loaded.module()(T(4), T(7))


def _decomposed(p: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    return p.run_decompositions()


# torch's ways of making a new program out of one: each builds a new ExportedProgram, whose guards
# torch computes from the graph's ShapeEnv (not from the program it came from).
DERIVATIONS: dict[str, Callable[[torch.export.ExportedProgram], torch.export.ExportedProgram]] = {
    "run_decompositions": _decomposed,
    "run_decompositions_twice": lambda p: p.run_decompositions().run_decompositions(),
    "deepcopy": lambda p: copy.deepcopy(p).run_decompositions(),
    "move_to_device_pass": lambda p: move_to_device_pass(p, "cpu").run_decompositions(),
}


@pytest.fixture(scope="module")
def decomposed(programs) -> tuple[Case, torch.export.ExportedProgram, torch.export.ExportedProgram]:
    """(case, the exported program decomposed, our loaded program decomposed)."""
    case, _, ours, ep = programs
    return case, _decomposed(ep), _decomposed(ours)


def test_decomposed_loaded_program_rejects_what_the_decomposed_exported_one_rejects(decomposed) -> None:
    case, exported, ours = decomposed
    want = [_outcome(exported.module(), a, k) for a, k in case.inputs]
    got = [_outcome(ours.module(), a, k) for a, k in case.inputs]
    assert got == want
    assert sum(r != "ok" for r in want) >= case.min_rejected, want


def test_a_second_load_records_the_same_guards_as_the_first(tmp_path: Path) -> None:
    """What a load records in its ShapeEnv is remembered per process; a load that reuses it (the
    second) must give derived programs the same guards as one that computed it (memos emptied)."""
    from serde.core.memo import forget_all

    serde.save(gp.export_derived(), tmp_path / "m.pt2s")
    forget_all()
    first = _decomposed(serde.load(tmp_path / "m.pt2s"))
    second = _decomposed(serde.load(tmp_path / "m.pt2s"))
    assert first._guards_code and second._guards_code == first._guards_code


@pytest.mark.parametrize("derive", list(DERIVATIONS.values()), ids=list(DERIVATIONS))
def test_every_derivation_keeps_the_guards(derive, tmp_path: Path) -> None:
    ep = gp.export_derived()
    serde.save(ep, tmp_path / "a.pt2s")
    derived = derive(serde.load(tmp_path / "a.pt2s"))
    assert sorted(derived._guards_code) == sorted(derive(ep)._guards_code)
    with pytest.raises(AssertionError, match=r"Guard failed: x\.size\(\)\[0\] == -1 \+ y\.size\(\)\[0\]"):
        derived.module()(T(4), T(7))
    derived.module()(T(4), T(5))


def _commutative_sorted(e: schema.Expr) -> bytes:
    """``e`` with the operands of +, *, max, min, and, or in one order, as bytes."""
    kind = e.kind
    v = getattr(e, kind)
    if isinstance(v, list):
        kids = [_commutative_sorted(x) for x in v]
        if kind in ("add", "mul", "max", "min", "logical_and", "logical_or"):
            kids.sort()
        return kind.encode() + b"[" + b",".join(kids) + b"]"
    return msgspec.json.encode(e)


# Sums and max/min of two inputs' sizes: sympy orders their operands by symbol name, and the loaded
# graph's symbols are not named as torch named the exported one's.
OPERAND_ORDER_MAY_DIFFER = {"max_min", "sum", "max_min_of_three", "max_of_constant"}


def test_saved_derived_program_stores_the_exported_derivations_guards(decomposed, tmp_path: Path) -> None:
    case, exported, ours = decomposed
    serde.save(exported, tmp_path / "exported.pt2s")
    serde.save(ours, tmp_path / "loaded.pt2s")
    want, got = (read_artifact(tmp_path / f"{n}.pt2s").program.guards for n in ("exported", "loaded"))
    assert (got is None) == (want is None)
    if got is not None:
        assert got.sources == want.sources
        assert sorted(map(_commutative_sorted, got.checks)) == sorted(map(_commutative_sorted, want.checks))
    if case.name.removesuffix("_strict") not in OPERAND_ORDER_MAY_DIFFER:
        assert (tmp_path / "loaded.pt2s").read_bytes() == (tmp_path / "exported.pt2s").read_bytes()


# ---------------------------------------------------------------- the text <-> tree layer (torch-free)


def test_guards_are_canonical_whatever_the_input_order() -> None:
    codes = ["(-1) + L['y'].size()[0] >= 2", "L['x'].size()[0] == ((-1) + L['y'].size()[0])",
             "(L['x'].size()[0] % 4) == 0", "L['n'] > 3"]
    a = guards_from_code(codes)
    b = guards_from_code(codes + list(reversed(codes)))  # a repeated check is stored once, where it came first
    assert a == b
    assert [s.symbol for s in a.sources] == [f"g{i}" for i in range(len(a.sources))]
    assert canonical_guards(a) == a
    assert guards_to_code(a) == [
        "(((-1) + L['y'].size()[0]) >= 2)", "(L['x'].size()[0] == ((-1) + L['y'].size()[0]))",
        "((L['x'].size()[0] % 4) == 0)", "(L['n'] > 3)"]
    # The order is torch's: a module reports the first check that fails, so two orders are two
    # programs (sources are still numbered by input, whatever order the checks name them in).
    r = guards_from_code(list(reversed(codes)))
    assert r != a and r.sources == a.sources
    assert guards_to_code(r) == list(reversed(guards_to_code(a)))
    assert canonical_guards(r) == r


# The same guards as torch 2.13 and torch 2.14 write them (from the exports in _guard_programs and
# the conv net of test_guard_ranges): 2.14 spells sympy's Max/Min torch.sym_max/sym_min, binary and
# nested to the right.
SPELLED_BY_EACH_TORCH = [
    ("max(L['y'].size()[0], L['x'].size()[0]) > 5", "torch.sym_max(L['y'].size()[0], L['x'].size()[0]) > 5"),
    ("min(L['y'].size()[0], L['x'].size()[0]) < 4", "torch.sym_min(L['y'].size()[0], L['x'].size()[0]) < 4"),
    ("max(L['y'].size()[0], L['z'].size()[0], L['x'].size()[0]) > 5",
     "torch.sym_max(L['y'].size()[0], torch.sym_max(L['z'].size()[0], L['x'].size()[0])) > 5"),
    ("min(L['flat_args'][1].size()[0], L['flat_args'][2].size()[0], L['flat_args'][0].size()[0]) < 3",
     "torch.sym_min(L['flat_args'][1].size()[0], torch.sym_min(L['flat_args'][2].size()[0], "
     "L['flat_args'][0].size()[0])) < 3"),
    ("max(4, L['x'].size()[0]) > 5", "torch.sym_max(4, L['x'].size()[0]) > 5"),
    ("min(L['x'].size()[0], L['n']) < 7", "torch.sym_min(L['x'].size()[0], L['n']) < 7"),
    ("max(1, L['x'].size()[3] // 8) < max(1, L['x'].size()[3] // 8)*max(1, L['x'].size()[2] // 8)",
     "torch.sym_max(1, L['x'].size()[3] // 8) < torch.sym_max(1, L['x'].size()[3] // 8)*"
     "torch.sym_max(1, L['x'].size()[2] // 8)"),
]


def _same_python(a: str, b: str) -> bool:
    """The same expression once parsed (torch prints fewer parentheses than we do)."""
    return ast.dump(ast.parse(a, mode="eval")) == ast.dump(ast.parse(b, mode="eval"))


@pytest.mark.parametrize("torch_2_13, torch_2_14", SPELLED_BY_EACH_TORCH)
def test_each_torchs_spelling_of_a_guard_is_stored_the_same(torch_2_13: str, torch_2_14: str) -> None:
    stored = [msgspec.json.encode(guards_from_code([c])) for c in (torch_2_13, torch_2_14)]
    assert stored[0] == stored[1]


@pytest.mark.parametrize("torch_2_13, torch_2_14", SPELLED_BY_EACH_TORCH)
def test_guards_print_back_in_each_torchs_spelling(torch_2_13: str, torch_2_14: str) -> None:
    g = guards_from_code([torch_2_13])
    (builtin,), (sym,) = (guards_to_code(g, spelling=s) for s in ("builtin", "sym"))
    assert _same_python(builtin, torch_2_13), builtin
    assert _same_python(sym, torch_2_14), sym
    assert guards_from_code([sym]) == guards_from_code([builtin]) == g


def test_nested_max_and_min_of_one_kind_are_one_call() -> None:
    a, b, c = (f"L['{n}'].size()[0]" for n in "abc")
    flat = guards_from_code([f"max({a}, {b}, {c}) > 5"])
    for nested in (f"max({a}, max({b}, {c})) > 5", f"max(max({a}, {b}), {c}) > 5",
                   f"max({a}, torch.sym_max({b}, {c})) > 5"):
        assert guards_from_code([nested]) == flat
    # a max inside a min is another function, and stays one
    assert guards_from_code([f"min({a}, max({b}, {c})) > 5"]).checks[0].gt[0].min[1].kind == "max"


@pytest.mark.parametrize("code, reason", [
    ("torch.sym_max(L['x'].size()[0]) > 1", r"torch\.sym_max takes 2\.\.2 arguments, got 1"),
    ("torch.sym_min(L['x'].size()[0], 1, 2) > 1", r"torch\.sym_min takes 2\.\.2 arguments, got 3"),
    ("max(" + ", ".join(["L['x'].size()[0]"] * 33) + ", max(" + ", ".join(["1"] * 32) + ")) > 1",
     "max of more than 64 arguments"),
])
def test_max_and_min_beyond_what_torch_writes_are_refused(code: str, reason: str) -> None:
    with pytest.raises(UnsupportedConstructError, match=reason):
        guards_from_code([code])


def test_loaded_guards_are_printed_as_the_running_torch_prints_them(tmp_path: Path) -> None:
    # torch 2.13 writes max(a, b, c), 2.14 torch.sym_max(a, torch.sym_max(b, c)): whichever this
    # torch writes, the loaded program's guards read the same (and compile, as ep.module() shows).
    ep = gp.export_max_min_of_three()
    assert any("max(" in c for c in ep._guards_code), ep._guards_code
    serde.save(ep, tmp_path / "a.pt2s")
    loaded = serde.load(tmp_path / "a.pt2s")._guards_code
    assert len(loaded) == len(ep._guards_code)
    assert all(any(_same_python(ours, theirs) for ours in loaded) for theirs in ep._guards_code), loaded


@pytest.mark.parametrize("code", [
    "torch.sym_max(L['x'].size()[0], torch.sym_max(L['y'].size()[0], 2)) > torch.sym_min(L['n'], 3)",
    "(2*L['x'].size()[0]) == L['w'].size()[0]",
    "L['x'].size()[0] == ((-1) + L['y'].size()[0])",
    "(L['x'].size()[0] // 4) != 1",
    "L['kwargs']['cfg']['a'][1].size()[0] > 2",
    "L['x'].stride()[0] == 1 and L['x'].storage_offset() == 0",
    "not (L['x'].size()[0] <= 2 < L['y'].size()[1])",
    "max(L['x'].size()[0], 2) == min(L['y'].size()[0], 9)",
    "math.floor(L['f'] / 2) >= math.ceil(L['f'] * 0.5) - 1",
    "math.trunc(torch.sym_float(L['n'])) == abs(-L['n'])",
    "(L['n'] if L['n'] > 0 else 0) ** 2 >= 0",
    "torch._sym_sqrt(L['f']) <= math.inf",
    "round(L['f']) == round(L['f'], 0)",
])
def test_print_parse_round_trip(code: str, monkeypatch) -> None:
    # Fresh memos: a full memo forgets everything, and one that filled up between parsing g and
    # canonicalizing it (earlier tests' guards count) would no longer know g as numbered.
    _fresh_guard_memos(monkeypatch)
    g = guards_from_code([code])
    printed = guards_to_code(g)
    assert guards_from_code(printed) == g
    assert guards_to_code(guards_from_code(printed)) == printed
    # canonical_guards returns parsed guards as they are; the full path (taken for an equal copy
    # it did not build) must agree, or a save would store a form that is not canonical.
    copy = msgspec.json.decode(msgspec.json.encode(g), type=type(g))
    assert copy is not g
    assert canonical_guards(copy) == g
    assert canonical_guards(g) is g


def _print_with_smuggled_exec(monkeypatch) -> None:
    """Make the guard printer append a call of exec to every check, as a printer bug could."""
    from serde.core.expr.guards import code, printer

    original = printer.Printer.expr

    def smuggling(self, e, depth):
        text = original(self, e, depth)
        return f"({text} and exec(1))" if depth == 0 else text

    monkeypatch.setattr(printer.Printer, "expr", smuggling)
    # forget remembered printouts: print them again
    monkeypatch.setattr(code, "_PRINTED", Memo(code._PRINTED.cap))


def test_parsed_guards_are_still_checked_when_canonicalized(monkeypatch) -> None:
    # The short path for guards it parsed itself still prints every check and holds the text to
    # the allow-list that loading applies, so a save can never write guards a load refuses.
    g = guards_from_code(["L['x'].size()[0] >= 7", "L['n'] > 5"])
    _print_with_smuggled_exec(monkeypatch)
    with pytest.raises(MalformedArtifactError, match=r"guards\.checks\[0\]: printed guard failed re-validation"):
        canonical_guards(g)


def test_printed_guards_are_revalidated_by_their_text(monkeypatch) -> None:
    # A load remembers a printed guard set only after every text passed the allow-list; printed
    # afresh (here: the same stored checks printed differently, as a printer bug would) it is parsed
    # and refused.
    g = guards_from_code(["L['x'].size()[0] >= 2", "L['n'] > 3"])
    printed = guards_to_code(g)
    assert guards_to_code(g) == printed  # the second time from the remembered verdicts
    _print_with_smuggled_exec(monkeypatch)
    with pytest.raises(MalformedArtifactError, match=r"guards\.checks\[0\]: printed guard failed re-validation: .*call of `exec`"):
        guards_to_code(g)


def test_remembered_guard_sets_are_keyed_by_their_whole_content() -> None:
    # A guard set printed once is remembered by its exact stored content: sets that differ in a
    # constant, a source or an operator print their own text, in any order of first use.
    sets = [["L['x'].size()[0] >= 2"], ["L['x'].size()[0] >= 3"], ["L['y'].size()[0] >= 2"],
            ["L['x'].size()[0] > 2"], ["L['x'].size()[1] >= 2"], ["L['x'].size()[0] >= 2", "L['n'] > 3"]]
    first = [guards_to_code(guards_from_code(c)) for c in sets]
    assert len({tuple(p) for p in first}) == len(sets)
    assert [guards_to_code(guards_from_code(c)) for c in reversed(sets)] == list(reversed(first))
    printed = guards_to_code(guards_from_code(sets[0]))
    printed.append("mutated")  # a caller's list is its own: the remembered printout is unchanged
    assert guards_to_code(guards_from_code(sets[0])) == first[0]


@pytest.mark.parametrize("code, reason", [
    ("__import__('os').system('true')", r"call of `__import__\('os'\)\.system` is not one of"),
    ("L['x'].size()[0] == len(L['y'])", r"call of `len`"),
    ("L['x'].__class__ == 1", "input attribute '__class__' is not a plain identifier"),
    ("(lambda: 1)() == 1", r"characters outside the guard grammar: \[':'\]"),
    ("L['x\\''] == 1", "characters outside the guard grammar"),
    ("L['__globals__'] == 1", "not a plain identifier"),
    ("G['x'].size()[0] == 2", "is not an input"),
    ("L['x'][L['y']] == 2", "an input key must be a name or an index"),
    ("L['x'].size()[-1] == 2", "a dimension must be a non-negative integer"),
    ("L['x'].size()[0] in (1, 2)", "Compare"),
    ("L['x'].size()[0] == 'a'", "constant 'a'"),
    ("L[0] == 2", "starts with a name"),
    ("L['x'].size()[0] ==", r"not a Python expression \(SyntaxError\)"),
    ("max(L['x'], key=abs) == 1", "keyword or starred"),
    ("1" + " + 1" * 5000, "longer than"),
    ("-" * 1000 + "1 == 1", "nested deeper than|not a Python expression"),
    ("L['x'] == 99999999999999999999", "does not fit in 64 bits"),
    ("2 ** L['x'].size()[0] == 4", r"the exponent of `2 \*\* L\['x'\]\.size\(\)\[0\]` is not a number from -64 to 64"),
    ("L['x'].size()[0] ** 65 > 1", "the exponent of"),
])
def test_unparseable_guard_is_refused_at_save(code: str, reason: str) -> None:
    # Refused, not dropped: a dropped guard would silently widen what the loaded program accepts.
    with pytest.raises(UnsupportedConstructError, match=reason) as info:
        guards_from_code(["L['x'].size()[0] >= 2", code])
    assert "guards[1]" in str(info.value)


def test_save_refuses_a_guard_that_names_no_input(tmp_path: Path) -> None:
    ep = gp.export_derived()
    ep._guards_code = [*ep._guards_code, "L['z'].size()[0] == 3"]
    with pytest.raises(UnsupportedConstructError, match=r"L\['z'\]\.size\(\)\[0\], which is not an input"):
        serde.save(ep, tmp_path / "a.pt2s")
    assert not (tmp_path / "a.pt2s").exists()
    ep._guards_code = [*ep._guards_code[:-1], "L['x'].size()[1] == 3"]
    with pytest.raises(UnsupportedConstructError, match=r"names dim 1 of a rank-1 tensor"):
        serde.save(ep, tmp_path / "a.pt2s")


def test_save_refuses_a_strict_guard_on_no_flattened_input(tmp_path: Path) -> None:
    ep = gp.export_same(strict=True)
    ep._guards_code = [*ep._guards_code, "L['flat_args'][2].size()[0] == 3"]
    with pytest.raises(UnsupportedConstructError,
                       match=r"reads L\['flat_args'\]\[2\]\.size\(\)\[0\], which is not one of the "
                             r"program's 2 flattened inputs"):
        serde.save(ep, tmp_path / "a.pt2s")
    assert not (tmp_path / "a.pt2s").exists()


class _Pair(NamedTuple):
    a: torch.Tensor
    b: torch.Tensor


class _TakesPair(torch.nn.Module):
    def forward(self, x, p):
        return x + p.a * p.b


def test_a_strict_guard_on_a_namedtuple_field_is_stored_as_its_attribute(tmp_path: Path) -> None:
    # torch names the field p.a (pytree's GetAttrKey); the loaded program checks it there, as
    # ep.module() does (tests/serde/bridge/test_pytree_guards.py covers the other structured inputs).
    ep = torch.export.export(_TakesPair(), (T(3), _Pair(T(3), T(3))), strict=True,
                             dynamic_shapes=({0: Dim.AUTO}, _Pair({0: Dim.AUTO}, {0: Dim.AUTO})))
    serde.save(ep, tmp_path / "a.pt2s")
    assert any("L['p'].a" in c for c in serde.load(tmp_path / "a.pt2s")._guards_code)
    bad = (T(3), _Pair(T(3), T(4)))
    with pytest.raises(AssertionError, match=r"Guard failed: p\.b\.size\(\)\[0\] == ") as want:
        ep.module()(*bad)
    with pytest.raises(AssertionError) as got:
        serde.load(tmp_path / "a.pt2s").module()(*bad)
    assert str(got.value) == str(want.value)


class _FlatArgsParam(torch.nn.Module):
    """A forward parameter named like the one strict export traces with."""

    def forward(self, flat_args, y):
        if flat_args[1].shape[0] > 2:
            return flat_args[1] * 2 + y
        return flat_args[0].sum() + y


_FLAT_ARGS_INPUTS = ([T(2), T(4)], T(4))
_FLAT_ARGS_SHAPES = ([None, {0: Dim.AUTO}], {0: Dim.AUTO})


def test_a_parameter_named_flat_args_is_stored_when_both_readings_agree(tmp_path: Path) -> None:
    # L['flat_args'][1] is flattened input 1 and the parameter's item 1 alike.
    ep = torch.export.export(_FlatArgsParam(), _FLAT_ARGS_INPUTS, dynamic_shapes=_FLAT_ARGS_SHAPES)
    assert any("L['flat_args'][1]" in c for c in ep._guards_code), ep._guards_code
    serde.save(ep, tmp_path / "a.pt2s")
    torch.export.save(ep, tmp_path / "a.pt2")
    mods = [ep.module(), torch.export.load(tmp_path / "a.pt2").module(), serde.load(tmp_path / "a.pt2s").module()]
    inputs = [([T(2), T(5)], T(5)), ([T(2), T(8)], T(8)), ([T(2), T(2)], T(2)), ([T(2), T(5)], T(4))]
    rows = [[_outcome(m, a, {}) for a in inputs] for m in mods]
    assert rows[0] == rows[1] == rows[2] and rows[0].count("ok") == 2, rows


def test_a_parameter_named_flat_args_is_refused_when_the_readings_differ(tmp_path: Path) -> None:
    # Strict: L['flat_args'][2] is y as a flattened input, but no item of the parameter; ep.module()
    # reads an index and the stored form a path, so storing either would make them disagree.
    ep = torch.export.export(_FlatArgsParam(), _FLAT_ARGS_INPUTS, dynamic_shapes=_FLAT_ARGS_SHAPES, strict=True)
    assert any("L['flat_args'][2]" in c for c in ep._guards_code), ep._guards_code
    with pytest.raises(UnsupportedConstructError, match=r"which is ambiguous: .* rename that parameter"):
        serde.save(ep, tmp_path / "a.pt2s")


@pytest.mark.filterwarnings("ignore:`isinstance\\(treespec, LeafSpec\\)` is deprecated")  # torch's unflatten
@pytest.mark.parametrize("export", [gp.export_reexported, gp.export_wrapped], ids=lambda f: f.__name__)
def test_reexported_program_keeps_the_guard_entry_torch_keeps(export, tmp_path: Path) -> None:
    # The entry for the '_guards_fn' of the re-exported ep.module() survives as in torch's own load:
    # the same call graph, and unflatten builds the same (empty) module there.
    ep = export()
    assert any(e.fqn.split(".")[-1] == "_guards_fn" for e in ep.module_call_graph)
    torch.export.save(ep, tmp_path / "a.pt2")
    serde.save(ep, tmp_path / "a.pt2s")
    theirs, ours = torch.export.load(tmp_path / "a.pt2"), serde.load(tmp_path / "a.pt2s")
    assert [e.fqn for e in ours.module_call_graph] == [e.fqn for e in theirs.module_call_graph]
    assert_programs_equal(ep, ours)
    mods = [dict(torch.export.unflatten(p).named_modules()) for p in (theirs, ours)]
    assert {k: type(m).__name__ for k, m in mods[0].items()} == {k: type(m).__name__ for k, m in mods[1].items()}


def test_program_without_guards_stores_none(tmp_path: Path) -> None:
    ep = torch.export.export(Bounded(), (T(4),))
    assert ep._guards_code == []
    serde.save(ep, tmp_path / "a.pt2s")
    assert read_artifact(tmp_path / "a.pt2s").program.guards is None
    assert serde.load(tmp_path / "a.pt2s")._guards_code == []


def test_schema_source_table_shape() -> None:
    g = guards_from_code(["L['x'].size()[1] == L['n']", "L['x'].storage_offset() == 0"])
    assert g.sources == [
        schema.GuardSource(symbol="g0", path=[schema.GuardKey(name="n")], property=schema.GuardProperty.VALUE),
        schema.GuardSource(symbol="g1", path=[schema.GuardKey(name="x")], property=schema.GuardProperty.SIZE, dim=1),
        schema.GuardSource(symbol="g2", path=[schema.GuardKey(name="x")],
                           property=schema.GuardProperty.STORAGE_OFFSET),
    ]


def test_program_comparer_catches_a_lost_guard(tmp_path: Path) -> None:
    # assert_roundtrip (used across the zoo) compares guards; prove it notices a missing one.
    ep = gp.export_derived()
    serde.save(ep, tmp_path / "a.pt2s")
    loaded = serde.load(tmp_path / "a.pt2s")
    assert_programs_equal(ep, loaded, run=False)
    loaded._guards_code = loaded._guards_code[:1]
    with pytest.raises(ProgramMismatch, match="guards"):
        assert_programs_equal(ep, loaded, run=False)


def test_program_comparer_reads_strict_sources_as_saved(tmp_path: Path) -> None:
    # The exported program's guards read L['flat_args'][i], the loaded one's the inputs' names.
    ep = gp.export_nested(strict=True)
    serde.save(ep, tmp_path / "a.pt2s")
    loaded = serde.load(tmp_path / "a.pt2s")
    assert_programs_equal(ep, loaded, run=False)
    loaded._guards_code = loaded._guards_code[1:]
    with pytest.raises(ProgramMismatch, match="guards"):
        assert_programs_equal(ep, loaded, run=False)


def _fresh_guard_memos(monkeypatch) -> None:
    from serde.core.expr.guards import code

    for name in ("_PARSED", "_FROM_CODE", "_NUMBERED"):
        monkeypatch.setattr(code, name, Memo(getattr(code, name).cap))


def test_remembered_parses_give_what_a_fresh_parse_gives(monkeypatch) -> None:
    # Saving remembers each guard text's parse and each numbered set by the texts and the keys
    # their sources resolve to: a second save of the same texts, with the same or another
    # resolution of its sources, equals a parse in a process that never saw them.
    codes = ["L['b'].size()[0] >= 2", "L['a'].size()[0] * 2 == L['b'].size()[0]", "L['args'][0] > 3",
             "L['args_0'] < 9"]

    def merged(k):  # as serialize_guards stores *args items: L['args'][0] is L['args_0']
        path = (f"{k[0][0]}_{k[0][1]}", *k[0][2:]) if len(k[0]) >= 2 else k[0]
        return path, k[1], k[2]

    def renamed(k):
        return (("c",), *k[1:]) if k[0] == ("a",) else k

    resolutions = [None, merged, renamed, merged]
    warm = [guards_from_code(codes, resolve=r) for r in resolutions]
    assert warm[1] is warm[3]  # the remembered set itself, still known to canonicalization
    assert canonical_guards(warm[1]) is warm[1]
    _fresh_guard_memos(monkeypatch)
    for r, got in zip(resolutions, warm, strict=True):
        cold = guards_from_code(codes, resolve=r)
        _fresh_guard_memos(monkeypatch)
        assert msgspec.json.encode(got) == msgspec.json.encode(cold)
    merged_sources = [s.path for s in warm[1].sources]
    assert len(merged_sources) == 3 and len(warm[0].sources) == 4  # one source for args_0, not two


def test_a_refused_guard_is_refused_on_every_save() -> None:
    codes = ["L['x'].size()[0] >= 2", "L['x'].size()[0] ** L['n'] > 3"]
    for _ in range(2):
        with pytest.raises(UnsupportedConstructError, match=r"guards\[1\]: .*exponent"):
            guards_from_code(codes)

    def nowhere(k):
        raise UnsupportedConstructError(f"guards: a guard reads {k[0]}, which is no input")

    for _ in range(2):  # parsed before, but the resolution refuses it each time
        with pytest.raises(UnsupportedConstructError, match="which is no input"):
            guards_from_code(codes[:1], resolve=nowhere)
    with pytest.raises(UnsupportedConstructError, match=r"guards\[1\]: .*must be text"):
        guards_from_code(["L['x'] > 1", 7])


@pytest.mark.parametrize(("power", "copies", "refused"), [
    # ((x + y + 1) ** 64) ** 64: the degree cap refuses it before sympy would expand it (the per-check
    # term cap stays behind it: two symbols to degree 8 make at most 45 terms)
    (64, 1, "guards.checks[0]: the degree of the check"),
    (3, 600, "too many over all the checks"),
    (2, 1, None),
])
def test_checks_that_expand_past_a_bound_are_refused_at_load(tmp_path: Path, power: int, copies: int,
                                                              refused: str | None) -> None:
    """A load records every check in sympy, which multiplies powers of sums out: a hostile file's
    nested powers would take it hours and many large checks minutes. Bounded, with a typed error."""
    from serde.core.errors import IntegerTooLargeError
    from tests.serde.attacks._attack_kit import rewrite_artifact

    serde.save(gp.export_summed(), tmp_path / "m.pt2s")

    def change(p: dict) -> None:
        (op, (left, right)), = p["guards"]["checks"][0].items()
        base = lambda j: {"add": [left, {"integer": j + 1}]}  # noqa: E731
        term = (lambda j: {"pow": [{"pow": [base(j), {"integer": power}]}, {"integer": power}]}) if copies == 1 \
            else (lambda j: {"pow": [base(j), {"integer": power}]})
        p["guards"]["checks"] = [{op: [term(j), right]} for j in range(copies)]

    data = rewrite_artifact((tmp_path / "m.pt2s").read_bytes(), change)
    if refused is None:
        assert serde.load(data)._guards_code
        return
    with pytest.raises(IntegerTooLargeError) as e:
        serde.load(data)
    assert refused in str(e.value)


def test_a_check_torch_cannot_reason_about_is_refused_with_our_error(tmp_path: Path) -> None:
    """(x > 1) == (y < 100) reads fine and holds at the example values, but sympy cannot simplify a
    comparison of comparisons: a typed error naming the check, not sympy's TypeError."""
    from tests.serde.attacks._attack_kit import rewrite_artifact

    serde.save(gp.export_summed(), tmp_path / "m.pt2s")

    def change(p: dict) -> None:
        g0, g1 = {"symbol": "g0"}, {"symbol": "g1"}
        p["guards"]["checks"] = [{"eq": [{"gt": [g0, {"integer": 1}]}, {"lt": [g1, {"integer": 100}]}]}]

    with pytest.raises(MalformedArtifactError, match=r"guards\.checks\[0\]: torch cannot simplify the check") as e:
        serde.load(rewrite_artifact((tmp_path / "m.pt2s").read_bytes(), change))
    # the file is well formed: its check is one torch itself cannot reason about (nor retrace)
    assert "damaged" not in str(e.value) and "written by another tool" in str(e.value)
