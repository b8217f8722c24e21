"""Run the pt2serde benchmarks (``make bench``): each case in a fresh subprocess, then a table.

    .venv/bin/python benchmarks/run.py                       # every case, full size
    .venv/bin/python benchmarks/run.py --only chain_5000     # some cases (comma-separated)
    .venv/bin/python benchmarks/run.py --smoke               # every case at a tiny size (no bars)
    .venv/bin/python benchmarks/run.py --check               # exit 1 when a bar is missed

Every case prints one JSON line; this runner echoes those lines as they arrive, then prints a
table of ratios against torch measured in the same run, with the project's bars. A case that
crashes makes the run exit 1; a missed bar only does so with ``--check``, because timings on a
shared machine are noisy.

To add a case (e.g. the native emitter's runtime overhead, emit time and emitted size), write a
script that prints one JSON line with a ``"bench"`` kind, add a ``BenchCase`` to ``CASES`` (with
``requires=`` naming the module it needs, so the case is skipped until that module exists) and,
for a new kind, a row formatter in ``_ROWS``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Bar", "BenchCase", "CASES", "run_case", "rows", "main"]

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Bar:
    """A target for one metric: ``metric`` is a dotted path into the case's JSON line."""

    metric: str
    op: str  # ">=" or "<="
    value: float
    source: str  # where the bar comes from
    unit: str = "x"

    def met(self, record: dict[str, Any]) -> bool:
        v = lookup(record, self.metric)
        return v >= self.value if self.op == ">=" else v <= self.value

    def text(self) -> str:
        return f"{self.op} {_num(self.value)}{self.unit}"


@dataclass(frozen=True)
class BenchCase:
    name: str
    script: str  # file in benchmarks/
    args: tuple[str, ...]  # full size
    smoke_args: tuple[str, ...]  # tiny size, for the smoke test
    bars: tuple[Bar, ...] = ()
    requires: str | None = None  # module that must be importable, else the case is skipped
    timed: bool = True  # takes --repeats
    timeout: float = 3600.0


CASES: list[BenchCase] = [
    BenchCase("chain_5000", "bench_save_load.py", ("--model", "chain", "--size", "5000"),
              ("--model", "chain", "--size", "30"),
              bars=(Bar("save_speedup.min", ">=", 5.0, "save and load speed"),
                    Bar("load_speedup.min", ">=", 2.0, "save and load speed"))),
    BenchCase("transformer", "bench_save_load.py", ("--model", "transformer", "--size", "4"),
              ("--model", "transformer", "--size", "1")),
    # Large weights (8 x 16 MB): payload I/O and the sha256 of every byte dominate.
    BenchCase("wide_134mb", "bench_save_load.py", ("--model", "wide", "--size", "8"),
              ("--model", "wide", "--size", "1")),
    BenchCase("canonicalize_20000", "bench_canonicalize.py", ("--size", "20000"), ("--size", "30"),
              bars=(Bar("cost_fraction.min", "<=", 0.1, "canonicalization cost"),)),
    BenchCase("diff_locality", "bench_diff_locality.py", ("--size", "1000"), ("--size", "30"),
              bars=(Bar("changed_lines", "<=", 10, "diff locality", unit=""),), timed=False),
    # Native emitter.
    BenchCase("native_chain_5000", "bench_native.py", ("--model", "chain", "--size", "5000"),
              ("--model", "chain", "--size", "30"), requires="native.emit"),
    BenchCase("native_transformer", "bench_native.py", ("--model", "transformer", "--size", "4"),
              ("--model", "transformer", "--size", "1"), requires="native.emit"),
    # Every supported zoo program: heap and arena against ep.module(), per program and geomean.
    BenchCase("native_zoo", "bench_native.py", ("--model", "zoo", "--size", "0"),
              ("--model", "zoo", "--size", "3"), requires="native.emit"),
]


def lookup(record: dict[str, Any], dotted: str) -> Any:
    v: Any = record
    for part in dotted.split("."):
        v = v[part]
    return v


# ---------------------------------------------------------------- running


def run_case(case: BenchCase, *, smoke: bool, repeats: int | None) -> dict[str, Any]:
    """Run one case in a fresh interpreter and return its JSON line (or an ``error`` record)."""
    cmd = [sys.executable, str(HERE / case.script), "--case", case.name,
           *(case.smoke_args if smoke else case.args)]
    if case.timed and (repeats or smoke):
        cmd += ["--repeats", str(1 if smoke and not repeats else repeats)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=case.timeout, cwd=HERE.parent)
    except subprocess.TimeoutExpired:
        return {"case": case.name, "error": f"timed out after {case.timeout:.0f}s: {' '.join(cmd)}"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    try:
        record = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        return {"case": case.name, "error": f"no JSON line (exit {proc.returncode}); stderr tail:\n{tail}"}
    if proc.returncode != 0 and "error" not in record:
        record["error"] = f"exit {proc.returncode}"
    if "error" in record:
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        record["error"] += f"\nstderr tail:\n{tail}" if tail else ""
    return record


def _available(case: BenchCase) -> bool:
    if case.requires is None:
        return True
    try:
        return importlib.util.find_spec(case.requires) is not None
    except ModuleNotFoundError:
        return False


# ---------------------------------------------------------------- the table

Row = tuple[str, str, str, str]  # label, value, spread (median / cpu), metric key a bar may judge


def _x(r: dict[str, float]) -> tuple[str, str]:
    return f"{r['min']:.2f}x", f"med {r['median']:.2f}x, cpu {r['cpu']:.2f}x"


def _save_load_rows(r: dict[str, Any]) -> list[Row]:
    size = f"{_mb(r['serde_bytes'])} vs {_mb(r['torch_bytes'])}"
    return [
        ("save speedup (torch.export.save / serde.save)", *_x(r["save_speedup"]), "save_speedup.min"),
        ("load speedup (torch.export.load / serde.load)", *_x(r["load_speedup"]), "load_speedup.min"),
        *([("  the same, serde.load(mmap=True)", *_x(r["load_mmap_speedup"]), "load_mmap_speedup.min")]
          if "load_mmap_speedup" in r else []),
        ("artifact size (serde / torch)", f"{r['size_ratio']:.2f}x", size, "size_ratio"),
    ]


def _canonicalize_rows(r: dict[str, Any]) -> list[Row]:
    return [
        ("canonicalize+encode / torch.export.save", *_x(r["cost_fraction"]), "cost_fraction.min"),
        ("  canonicalize alone / torch.export.save", *_x(r["canonicalize_fraction"]), ""),
        ("  encode alone / torch.export.save", *_x(r["encode_fraction"]), ""),
    ]


def _diff_rows(r: dict[str, Any]) -> list[Row]:
    return [("changed `pt2serde show` lines, 1 node inserted", str(r["changed_lines"]),
             f"of {r['show_lines']} lines", "changed_lines")]


def _native_rows(r: dict[str, Any]) -> list[Row]:
    size = f"{_mb(r['emitted_bytes'])} vs {_mb(r['artifact_bytes'])}"
    return [
        ("native run / ep.module() run", *_x(r["run_vs_eager"]), "run_vs_eager.min"),
        ("  with the arena memory plan", *_x(r["arena_run_vs_eager"]), "arena_run_vs_eager.min"),
        *([("arena run / heap run", *_x(r["arena_vs_heap"]), "arena_vs_heap.min")] if "arena_vs_heap" in r else []),
        ("overhead per instruction / eager time per op", f"{r['overhead_per_instruction']:.3f}",
         f"{r['instructions']} instructions", "overhead_per_instruction"),
        ("emit / torch.export.save", *_x(r["emit_vs_torch_save"]), "emit_vs_torch_save.min"),
        ("emitted size / artifact size", f"{r['emitted_vs_artifact_size']:.2f}x", size,
         "emitted_vs_artifact_size"),
    ]


def _native_zoo_rows(r: dict[str, Any]) -> list[Row]:
    out = [
        ("native run / ep.module() run, geomean", f"{r['run_vs_eager_geomean']:.2f}x",
         f"{len(r['programs'])} programs", "run_vs_eager_geomean"),
        ("  with the arena memory plan, geomean", f"{r['arena_run_vs_eager_geomean']:.2f}x", "",
         "arena_run_vs_eager_geomean"),
        ("arena run / heap run, geomean", f"{r['arena_vs_heap_geomean']:.2f}x",
         f"worst {r['arena_vs_heap_worst']:.2f}x ({r['arena_vs_heap_worst_program']})", "arena_vs_heap_geomean"),
    ]
    for name, p in sorted(r["programs"].items()):
        out.append((f"  {name}: heap / arena vs ep.module()",
                    f"{p['run_vs_eager']:.2f}x / {p['arena_run_vs_eager']:.2f}x",
                    f"{p['instructions']} instructions", ""))
    return out


# bench kind -> rows; the last element of a row names the metric a bar may apply to.
_ROWS: dict[str, Callable[[dict[str, Any]], list[Row]]] = {
    "save_load": _save_load_rows,
    "canonicalize": _canonicalize_rows,
    "diff_locality": _diff_rows,
    "native": _native_rows,
    "native_zoo": _native_zoo_rows,
}


def rows(case: BenchCase, record: dict[str, Any], *, smoke: bool) -> list[list[str]]:
    """Table rows of one case: [case, metric, value, spread, bar, result]."""
    label = f"{case.name} ({record['ops']} ops)" if "ops" in record else case.name
    if "error" in record:
        return [[label, "ERROR", record["error"].splitlines()[0], "", "", "FAIL"]]
    if "skipped" in record:
        return [[label, "skipped", record["skipped"], "", "", ""]]
    fmt = _ROWS.get(record.get("bench", ""))
    if fmt is None:
        return [[label, "(no formatter)", json.dumps(record)[:60], "", "", ""]]
    bars = {b.metric: b for b in case.bars}
    out = []
    for metric, value, spread, key in fmt(record):
        bar = bars.get(key)
        if bar is None:
            result = ""
        elif smoke:
            result = "(smoke)"
        elif bar.met(record):
            result = "ok"
        else:
            result = f"MISS ({_miss(bar, lookup(record, bar.metric))})"
        out.append([label, metric, value, spread, bar.text() if bar else "", result])
        label = ""
    return out


def _miss(bar: Bar, v: float) -> str:
    if v <= 0 or bar.value <= 0:
        return f"{_num(v)} vs {_num(bar.value)}"
    # how far off, as a factor: 3.5x against a >= 5x bar is "1.43x short"
    factor = bar.value / v if bar.op == ">=" else v / bar.value
    return f"{factor:.2f}x short" if bar.op == ">=" else f"{factor:.2f}x over"


def _num(v: float) -> str:
    return f"{v:g}"


def _mb(n: int) -> str:
    return f"{n / 1e6:.2f} MB" if n >= 100_000 else f"{n / 1e3:.1f} kB"


def format_table(table: list[list[str]]) -> str:
    head = ["case", "metric", "value", "spread", "bar", "result"]
    widths = [max(len(r[i]) for r in [head, *table]) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [head, *table]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


# ---------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", help="comma-separated case names (default: all)")
    p.add_argument("--smoke", action="store_true", help="tiny sizes, one repeat; bars are not judged")
    p.add_argument("--repeats", type=int, help="timed repeats per side (default: each script's own, 3)")
    p.add_argument("--check", action="store_true", help="exit 1 when a bar is missed")
    p.add_argument("--list", action="store_true", help="list the cases and exit")
    a = p.parse_args(argv)
    if a.list:
        for c in CASES:
            bars = ", ".join(f"{b.metric} {b.text()} ({b.source})" for b in c.bars) or "no bar"
            print(f"{c.name:20} {c.script} {' '.join(c.args)}\n{'':20} {bars}")
        return 0
    known = {c.name: c for c in CASES}
    names = a.only.split(",") if a.only else list(known)
    unknown = [n for n in names if n not in known]
    if unknown:
        p.error(f"unknown case(s) {unknown}; known: {list(known)}")

    table: list[list[str]] = []
    records: list[dict[str, Any]] = []
    failed = missed = False
    for name in names:
        case = known[name]
        print(f"# running {name} ...", file=sys.stderr, flush=True)
        if _available(case):
            record = run_case(case, smoke=a.smoke, repeats=a.repeats)
        else:
            record = {"case": name, "skipped": f"needs {case.requires}"}
        print(json.dumps(record, sort_keys=True), flush=True)
        records.append(record)
        failed |= "error" in record
        missed |= not a.smoke and "error" not in record and "skipped" not in record and \
            not all(b.met(record) for b in case.bars)
        table += rows(case, record, smoke=a.smoke)
    print()
    print(format_table(table))
    print("\nvalue: ratio of the minimum wall-clock times over the repeats, both sides measured in this "
          "run;\nspread: the same ratio from the median wall time and from the minimum CPU time.")
    loads = [x for r in records for x in r.get("loadavg") or () if x is not None]
    if loads:
        print(f"machine: {records[0].get('cpus')} CPUs, 1-minute load average {min(loads):.1f} to "
              f"{max(loads):.1f} during the cases (above the CPU count, trust the cpu column more).")
    return 1 if failed or (a.check and missed) else 0


if __name__ == "__main__":
    sys.exit(main())
