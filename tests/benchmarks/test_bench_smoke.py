"""Smoke test of ``make bench``: every case runs at a tiny size in its own subprocess.

Checks that each case prints one well-formed JSON line and that the runner prints its table.
Nothing here asserts on timing: the ratios only have to be well-formed numbers.
"""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from tests.tiers import tiered

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"


def _load_runner():
    spec = importlib.util.spec_from_file_location("pt2serde_bench_run", BENCH / "run.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up while the class is built
    spec.loader.exec_module(mod)
    return mod


runner = _load_runner()
CASE_NAMES = [c.name for c in runner.CASES]
# ``make test`` runs the first case of the two headline scripts (programs, weights) through the
# runner's main; every other case runs one by one under ``-m slow``. A case whose smoke size still
# takes minutes (fast_smoke=False) runs only there.
FAST_SCRIPTS = ("bench_save_load.py", "bench_weights.py")
FAST = [c.name for i, c in enumerate(runner.CASES)
        if c.fast_smoke and c.script in FAST_SCRIPTS and c.script not in {d.script for d in runner.CASES[:i]}]


@pytest.fixture(scope="module")
def smoke_run():
    """``benchmarks/run.py --smoke --only FAST``: (exit code, case -> JSON record, table text, stderr)."""
    proc = subprocess.run([sys.executable, str(BENCH / "run.py"), "--smoke", "--only", ",".join(FAST)],
                          capture_output=True, text=True, timeout=900, cwd=BENCH.parent)
    lines = proc.stdout.splitlines()
    records = {}
    for line in lines:
        if line.startswith("{"):
            r = json.loads(line)
            assert r["case"] not in records, f"case {r['case']} printed two JSON lines"
            records[r["case"]] = r
    table = "\n".join(ln for ln in lines if not ln.startswith("{"))
    return proc.returncode, records, table, proc.stderr


def test_runner_succeeds_and_prints_one_line_per_case(smoke_run):
    rc, records, table, stderr = smoke_run
    assert rc == 0, f"run.py --smoke exited {rc}\n{table}\n{stderr[-3000:]}"
    assert list(records) == FAST
    for name in FAST:
        assert name in table, f"{name} missing from the table:\n{table}"
    assert "(smoke)" in table  # bars are shown but not judged at smoke size
    assert "MISS" not in table and "FAIL" not in table


def _ratio_ok(r: dict) -> None:
    assert set(r) == {"min", "median", "cpu"}
    for v in r.values():
        assert isinstance(v, float) and v > 0 and math.isfinite(v)


@pytest.mark.parametrize("name", tiered(CASE_NAMES, FAST))
def test_case_record_is_well_formed(request, name):
    if name in FAST:
        _, records, _, stderr = request.getfixturevalue("smoke_run")
        r = records[name]
    else:  # its own subprocess, as the runner would start it
        r, stderr = runner.run_case(runner.CASES[CASE_NAMES.index(name)], smoke=True, repeats=None), ""
    # Every module a case requires is part of this repository: a skipped case is a regression.
    assert "skipped" not in r, f"{name}: {r['skipped']}"
    assert "error" not in r, f"{name}: {r['error']}\n{stderr[-3000:]}"
    assert r["ops"] > 0 and r["nodes"] > r["ops"]
    assert len(r["loadavg"]) == 2
    kind = r["bench"]
    if kind == "save_load":
        assert r["outputs_match"] is True
        _ratio_ok(r["save_speedup"])
        _ratio_ok(r["save_mem_speedup"])
        _ratio_ok(r["save_durable_bound"])
        _ratio_ok(r["load_speedup"])
        _ratio_ok(r["load_vs_floor"])
        _ratio_ok(r["load_vs_floor_shared"])
        _ratio_ok(r["load_call_speedup"])
        assert r["serde_bytes"] > 0 and r["torch_bytes"] > 0
        assert r["size_ratio"] == pytest.approx(r["serde_bytes"] / r["torch_bytes"], abs=1e-3)
        case = runner.CASES[CASE_NAMES.index(name)]
        if "--cold-repeats" not in case.smoke_args or case.smoke_args[case.smoke_args.index("--cold-repeats") + 1] != "0":
            for key in ("cold_save_speedup", "cold_load_speedup"):
                assert set(r[key]) == {"min", "median"} and all(v > 0 and math.isfinite(v) for v in r[key].values())
        else:
            assert "cold_save_speedup" not in r
    elif kind == "canonicalize":
        for key in ("cost_fraction", "canonicalize_fraction", "encode_fraction"):
            _ratio_ok(r[key])
        assert r["program_json_bytes"] > 0
    elif kind == "diff_locality":
        # The inserted node (x * 0.5) must appear in the diff: a zero count would mean the two
        # artifacts were not different programs and the benchmark measures nothing.
        assert r["changed_lines"] >= 1
        assert any(line.startswith("+") and "0.5" in line for line in r["diff"]), r["diff"]
        assert r["show_lines"] > r["ops"]
    elif kind == "native":
        for key in ("run_vs_eager", "arena_run_vs_eager", "emit_vs_torch_save"):
            _ratio_ok(r[key])
        assert r["instructions"] >= r["kernel_calls"] >= 1
        assert r["emitted_bytes"] > 0 and r["artifact_bytes"] > 0
        assert math.isfinite(r["overhead_per_instruction"])
    elif kind == "weights_load":
        assert r["outputs_match"] is True
        _ratio_ok(r["load_speedup"])
        _ratio_ok(r["load_mmap_speedup"])
        assert r["serde_bytes"] > r["weights_bytes"] > 0
    elif kind == "weights_streams":
        assert r["outputs_match"] is True and r["weights_bytes"] > 0
        sides = {"serde", "serde_bytes", "serde_bytesio", "serde_file", "serde_trusted"}
        assert set(r["vs_path"]) == set(r["vs_torch"]) == sides
        for side in sides:
            _ratio_ok(r["vs_path"][side])
            _ratio_ok(r["vs_torch"][side])
        assert r["vs_path"]["serde"] == {"min": 1.0, "median": 1.0, "cpu": 1.0}  # the path against itself
    elif kind == "weights_tools":
        for key in ("show_seconds", "diff_seconds", "check_seconds", "startup_seconds", "show_small_seconds"):
            assert 0 < r[key]["min"] <= r[key]["median"] and r[key]["cpu"] > 0
    elif kind == "weights_memory":
        assert r["weights_bytes"] > 0
        assert set(r["peak_fraction"]) == {"serde", "serde_mmap", "torch"}
    elif kind == "scaling":
        assert [x["size"] for x in r["sizes"]] == sorted(x["size"] for x in r["sizes"])
        for x in r["sizes"]:
            assert x["nodes"] > x["ops"] >= x["size"]
            for side in ("save", "load"):
                per_node = x[f"{side}_us_per_node"]
                assert 0 < per_node["min"] <= per_node["median"] and math.isfinite(per_node["median"])
        _ratio_ok(r["save_linearity"])
        _ratio_ok(r["load_linearity"])
    elif kind == "floor_instructions":
        assert r["programs"]
        for p in r["programs"].values():
            # a load builds a program of several nodes: millions of instructions, as the floor does
            assert p["load_instructions"] > 10**6 and p["floor_instructions"] > 10**6
            assert p["load_vs_floor"] == round(p["load_instructions"] / p["floor_instructions"], 3)
    elif kind == "scaling_instructions":
        assert [x["size"] for x in r["sizes"]] == sorted(x["size"] for x in r["sizes"])
        for x in r["sizes"]:
            assert x["nodes"] > x["ops"] >= x["size"]
            # a load builds every node's fake tensor and a save writes it: far more than 1,000 each
            assert x["save_instructions_per_node"] > 1000 and x["load_instructions_per_node"] > 1000
        for side in ("save", "load"):
            first, last = r["sizes"][0], r["sizes"][-1]
            assert r[f"{side}_linearity"] == round(last[f"{side}_instructions_per_node"]
                                                   / first[f"{side}_instructions_per_node"], 3)
    elif kind == "native_cpp":
        for key in ("cpp_vs_eager", "cpp_arena_vs_eager", "cpp_vs_python_runtime"):
            _ratio_ok(r[key])
        assert r["instructions"] >= r["kernel_calls"] >= 1
        assert r["us_per_instruction"] > 0 and math.isfinite(r["overhead_us_per_instruction"])
    elif kind == "native_zoo":
        assert r["programs"] and all(p["instructions"] > 0 for p in r["programs"].values())
        for p in r["programs"].values():
            for key in ("run_vs_eager", "arena_run_vs_eager", "arena_vs_heap"):
                assert math.isfinite(p[key]) and p[key] > 0
        assert r["arena_vs_heap_worst"] == max(p["arena_vs_heap"] for p in r["programs"].values())
    elif kind == "native_planners":
        planners = r["planners"]
        assert {"greedy", "shared-objects", "naive"} <= set(planners) and r["programs"]
        for p in r["programs"].values():
            arenas = [p[pl]["arena_bytes"] for pl in planners]
            # no plan beats the peak of live bytes; naive reuses nothing
            assert all(p["peak_live_bytes"] <= a <= p["naive_bytes"] for a in arenas)
            assert p["naive"]["arena_bytes"] == p["naive_bytes"]
            assert all(p[pl]["plan_ms"] > 0 and p[pl]["pack_ms"] >= 0 for pl in planners)
        assert any(p["tensors"] > 1 for p in r["programs"].values())
        for pl in planners:
            assert r["totals"][pl]["arena_bytes"] == sum(p[pl]["arena_bytes"] for p in r["programs"].values())
    elif kind == "large":
        assert r["outputs_match"] is True  # every loaded program computed the exported one's logits
        assert r["graph_twin_nodes"] == r["nodes"]  # the graph's save is timed on the same graph
        assert r["params"] > 0 and r["weights_bytes"] >= 2 * r["params"]  # bf16
        assert all(v > r["weights_bytes"] * 0.9 for v in r["sizes"].values())
        for when in ("cold", "warm"):
            for key, v in r[when].items():
                if key != "seconds":
                    assert v > 0 and math.isfinite(v), (when, key, v)
            assert all(v > 0 for v in r[when]["seconds"].values())
        assert set(r["peak_vs_weights"]) == {"serde", "serde_mmap", "serde_trusted", "torch", "safetensors"}
    elif kind == "corpus":
        assert r["models"] and not r["failed"], r["failed"]
        for m in r["models"].values():
            for key in ("cold_save", "cold_load", "warm_save", "warm_load"):
                assert m[key]["min"] > 0 and math.isfinite(m[key]["median"])
        for v in r["summary"].values():
            assert 0 < v["min"] <= v["geomean"] + 1e-3  # a geometric mean is never below the minimum
    else:
        pytest.fail(f"{name}: unknown bench kind {kind!r}; add checks for it here")


# ---------------------------------------------------------------- runner logic, no torch


def test_bars_and_miss_factor():
    ge = runner.Bar("save_speedup.min", ">=", 5.0, "test")
    le = runner.Bar("changed_lines", "<=", 10, "test", unit="")
    assert ge.met({"save_speedup": {"min": 5.0}}) and not ge.met({"save_speedup": {"min": 4.0}})
    assert le.met({"changed_lines": 10}) and not le.met({"changed_lines": 11})
    assert runner._miss(ge, 4.0) == "1.25x short"
    assert runner._miss(le, 15) == "1.50x over"


def test_every_bar_names_a_row_of_its_case():
    # A bar whose metric no table row shows would never be judged in the table.
    kinds = {"bench_save_load.py": "save_load", "bench_canonicalize.py": "canonicalize",
             "bench_diff_locality.py": "diff_locality", "bench_native.py": "native",
             "bench_scaling.py": "scaling", "bench_native_cpp.py": "native_cpp",
             "bench_large.py": "large", "bench_corpus.py": "corpus", "bench_planners.py": "native_planners"}
    for case in runner.CASES:
        # bench_weights.py: one kind per --goal
        kind = kinds.get(case.script) or f"weights_{case.args[case.args.index('--goal') + 1]}"
        fmt = runner._ROWS[kind]
        shown = {row[-1] for row in fmt(_fake_record(kind))}
        for bar in case.bars:
            assert bar.metric in shown, f"{case.name}: bar on {bar.metric} is not in any row"


def _fake_record(kind: str) -> dict:
    r = {"min": 1.0, "median": 1.0, "cpu": 1.0}
    return {
        "save_load": {"save_speedup": r, "load_speedup": r, "load_vs_floor": r, "load_call_speedup": r,
                      "serde_bytes": 1, "torch_bytes": 1, "size_ratio": 1.0,
                      "cold_save_speedup": {"min": 1.0, "median": 1.0}, "cold_load_speedup": {"min": 1.0, "median": 1.0}},
        "canonicalize": {"cost_fraction": r, "canonicalize_fraction": r, "encode_fraction": r},
        "diff_locality": {"changed_lines": 1, "show_lines": 2},
        "native": {"run_vs_eager": r, "arena_run_vs_eager": r, "emit_vs_torch_save": r,
                   "overhead_per_instruction": 0.1, "instructions": 2, "emitted_bytes": 1,
                   "artifact_bytes": 1, "emitted_vs_artifact_size": 1.0},
        "weights_load": {"load_speedup": r, "load_mmap_speedup": r, "floor_speedup": r, "floor_vs_serde": r},
        "weights_streams": {"weights_bytes": 1, **{k: dict.fromkeys(
            ("serde", "serde_bytes", "serde_bytesio", "serde_file", "serde_trusted"), r)
            for k in ("vs_path", "vs_torch", "cold_vs_path", "cold_vs_torch")}},
        "weights_tools": {"serde_bytes": 1, **dict.fromkeys(
            ("show_seconds", "diff_seconds", "show_small_seconds", "startup_seconds", "check_seconds"), r)},
        "weights_memory": {"weights_bytes": 1, "mmap_touched_fraction": 1.0,
                           "peak_fraction": {"serde": 1.0, "serde_mmap": 0.1, "torch": 1.0}},
        "scaling": {"sizes": [{"nodes": 3, "save_us_per_node": r, "load_us_per_node": r}],
                    "save_linearity": r, "load_linearity": r},
        "large": {"params": 1, "weights_bytes": 2, "sizes": {"serde": 2, "torch": 2, "safetensors": 2},
                  "peak_vs_weights": dict.fromkeys(("serde", "serde_mmap", "serde_trusted", "torch", "safetensors"), 1.0),
                  **{when: {**dict.fromkeys(("save_path_vs_torch", "save_file_vs_torch", "save_file_vs_safetensors",
                                             "save_file_vs_safetensors_plus_graph", "save_path_vs_safetensors",
                                             "load_vs_torch", "load_mmap_vs_torch", "load_trusted_vs_torch",
                                             "load_vs_floor", "load_mmap_vs_floor",
                                             "load_trusted_vs_load_file_plus_graph", "load_vs_safetensors",
                                             "floor_digest_share"), 1.0), "seconds": {"load_serde": 1.0}}
                     for when in ("cold", "warm")}},
        "corpus": {"models": {"m": {"nodes": 3, **{k: {"min": 1.0, "median": 1.0}
                                                    for k in ("cold_save", "cold_load", "warm_save", "warm_load")}}},
                   "summary": {k: {"geomean": 1.0, "min": 1.0, "median": 1.0, "worst": "m"}
                               for k in ("cold_save", "cold_load", "warm_save", "warm_load")}},
        "native_cpp": {"cpp_vs_eager": r, "cpp_arena_vs_eager": r, "cpp_vs_python_runtime": r,
                       "overhead_us_per_instruction": 0.1, "us_per_instruction": 1.0, "instructions": 2},
        "native_planners": {"planners": ["greedy", "naive"], "naive_bytes": 128, "peak_live_bytes": 64,
                            "totals": {"greedy": {"arena_bytes": 64, "plan_ms": 1.0},
                                       "naive": {"arena_bytes": 128, "plan_ms": 1.0}},
                            "programs": {"m": {"tensors": 2, "peak_live_bytes": 64, "naive_bytes": 128,
                                               "greedy": {"arena_bytes": 64, "plan_ms": 1.0},
                                               "naive": {"arena_bytes": 128, "plan_ms": 1.0}}}},
    }[kind]


def test_goal_lines_judge_the_worst_case():
    def rec(case, save, load):
        return {"case": case, "bench": "save_load", "save_speedup": {"min": save, "median": save + 1},
                "load_speedup": {"min": load, "median": load}, "load_vs_floor": {"min": 1.1, "median": 1.2}}

    lines = runner.goal_lines([rec("chain_5000", 31.0, 7.0), rec("mlp", 9.0, 2.5),
                               {"case": "cond", "error": "boom"}])
    assert "goal 1: chain_5000 save: 31 (min), 32 (median) vs bar >= 30x: ok" in lines
    assert "goal 2: every graph program, load: 2.5 (min), 2.5 (median) (worst: mlp) vs bar >= 3x: MISS" in lines
    assert "goal 2: 134 MB of weights (wide_134mb), load: not measured in this run" in lines
    assert "goal 3: load / floor, every graph program: 1.1 (min), 1.2 (median) (worst: chain_5000) vs bar <= 1.3x floor: ok" \
        in lines
    assert "goal 7: save per-node time 20,000 / 1,000 nodes: not measured in this run" in lines
    goals = {g.number for g in runner.GOALS}
    assert goals == {1, 2, 3, 7}
    # The warm "save >= 8x on every program" goal is retired, and the output says so.
    assert lines[0] == runner.RETIRED
    assert not any(g.number == 2 and "save" in g.bar.metric for g in runner.GOALS)
    assert not any("save" in b.metric for b in runner._EVERY_PROGRAM)


def test_cold_goal_lines_name_every_case_they_judge():
    def cold(case, save, load):
        r = {"min": 1.0, "median": 1.0}
        return {"case": case, "bench": "save_load", "save_mem_speedup": r, "load_speedup": r,
                "cold_save_speedup": {"min": save, "median": save}, "cold_load_speedup": {"min": load, "median": load}}

    lines = runner.issue_goal_lines([cold("chain_5000", 31.0, 12.0), cold("mlp", 2.0, 1.5)])
    assert "item 5: chain_5000 cold: chain_5000 cold_save_speedup.median = 31 vs >= 30x: met" in lines
    assert any(ln.startswith("item 5: chain_5000 cold: chain_5000 cold_load_speedup.median = 12 vs >= 15x: MISSED") for ln in lines)
    assert any(ln.startswith("item 5 (bars above): chain_5000 cold save 31x") for ln in lines)
    assert any(ln.startswith("item 5 (no bar): mlp cold save 2x, cold load 1.5x") for ln in lines)
    # The corpus did not run: its cold goals are still named.
    assert "item 5: corpus cold save and load: not measured in this run" in lines


def test_graph_programs_are_the_save_load_cases_but_the_weights():
    # A renamed or added case must not drop out of goals 2 and 3 unnoticed.
    save_load = {c.name for c in runner.CASES if c.script == "bench_save_load.py" and "--instructions" not in c.args}
    assert set(runner.GRAPH_PROGRAMS) == save_load - {"wide_134mb"}
    assert "wide_134mb" in save_load


def test_a_crashing_case_is_reported_not_swallowed(tmp_path):
    script = tmp_path / "crash.py"
    script.write_text("import sys\nprint('not json')\nsys.stderr.write('boom\\n')\nsys.exit(3)\n")
    case = runner.BenchCase("crash", str(script), (), (), timed=False)
    record = runner.run_case(case, smoke=True, repeats=None)
    assert "no JSON line (exit 3)" in record["error"] and "boom" in record["error"]
    table = runner.format_table(runner.rows(case, record, smoke=False))
    assert "ERROR" in table and "FAIL" in table
