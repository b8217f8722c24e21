"""The rows shown beside the goals (no bar): load + first call and the durable-write bound, worst case first."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit


def _load_runner():
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "run.py"
    spec = importlib.util.spec_from_file_location("pt2serde_bench_run", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up while the class is built
    spec.loader.exec_module(mod)
    return mod


runner = _load_runner()


def _rec(case: str, speedup: float, vs_floor: float) -> dict:
    return {"case": case, "bench": "save_load", "save_speedup": {"min": 40.0, "median": 40.0},
            "load_speedup": {"min": 7.0, "median": 7.0}, "load_vs_floor": {"min": 1.0, "median": 1.0},
            "load_call_speedup": {"min": speedup, "median": speedup + 1},
            "load_call_vs_floor": {"min": vs_floor, "median": vs_floor + 0.5}}


def test_load_call_lines_name_the_worst_case():
    lines = runner.goal_lines([_rec("chain_5000", 6.5, 0.9), _rec("mlp", 2.5, 1.4), {"case": "x", "error": "boom"}])
    assert "load + first call, every graph program (torch / serde): 2.5 (min), 3.5 (median) (worst: mlp), no bar" in lines
    assert ("load + first call / floor + first call, every graph program: 1.4 (min), 1.9 (median) (worst: mlp), no bar"
            in lines)


def test_records_without_load_call_add_no_line():
    rec = _rec("mlp", 1.0, 1.0)
    del rec["load_call_speedup"], rec["load_call_vs_floor"]
    assert not [ln for ln in runner.goal_lines([rec]) if ln.startswith("load + first call")]


def test_durable_bound_line_names_the_lowest_bound():
    recs = [_rec("mlp", 3.0, 1.0), _rec("mutation", 3.0, 1.0)]
    recs[0]["save_durable_bound"] = {"min": 11.0, "median": 12.0}
    recs[1]["save_durable_bound"] = {"min": 4.5, "median": 6.0}
    (line,) = [ln for ln in runner.goal_lines(recs) if ln.startswith("highest save speedup a durable write allows")]
    assert line.endswith("4.5 (min), 6 (median) (worst: mutation), no bar")


def test_weight_bound_case_gets_a_line_of_its_own():
    recs = [_rec("mlp", 3.0, 1.2), _rec("wide_134mb", 1.1, 3.3)]
    lines = runner.goal_lines(recs)
    assert "load + first call, every graph program (torch / serde): 3 (min), 4 (median) (worst: mlp), no bar" in lines
    assert "    wide_134mb: 1.1 (min), 2.1 (median)" in lines
