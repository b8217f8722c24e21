"""Profile ``serde.save`` and ``serde.load`` with cProfile (not part of ``make bench``).

    .venv/bin/python benchmarks/profile_save_load.py                    # chain of 5000 ops
    .venv/bin/python benchmarks/profile_save_load.py --model transformer --size 4
    .venv/bin/python benchmarks/profile_save_load.py --top 40 --dump /tmp/prof   # + .prof files

Prints, for each of save and load, the functions with the most own time (tottime) and the most
cumulative time, as ``file:line(function)``, and each stage's share of the total. Shares, not
seconds: absolute times on a shared machine mean little.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import tempfile

from _harness import ZOO_PROGRAMS, export_chain, export_transformer, export_zoo

_MODELS = {"chain": export_chain, "transformer": export_transformer,
           **{name: lambda _size, name=name: export_zoo(name) for name in ZOO_PROGRAMS}}

# Pipeline stages whose cumulative share is worth a line of its own (function name, file suffix).
_STAGES = {
    "save": [("serialize_program", "serde/bridge/program.py"), ("serialize_weights", "serde/bridge/weights.py"),
             ("canonicalize", "canonical/canonicalize.py"), ("encode_members", "serde/archive/artifact.py"),
             ("write_archive", "serde/archive/writer.py")],
    "load": [("read_archive", "serde/archive/reader.py"), ("decode", "serde/core/wire.py"),
             ("deserialize_weights", "serde/bridge/weights.py"), ("attach_debug", "canonical/canonicalize.py"),
             ("deserialize_program", "serde/bridge/program.py")],
}


def profile(fn) -> pstats.Stats:
    prof = cProfile.Profile()
    prof.runcall(fn)
    return pstats.Stats(prof, stream=io.StringIO())


def report(what: str, stats: pstats.Stats, top: int) -> str:
    total = stats.total_tt
    out = [f"== {what}: {stats.total_calls} calls"]
    raw = stats.stats  # type: ignore[attr-defined]  # {(file, line, fn): (cc, nc, tt, ct, callers)}
    for fn_name, suffix in _STAGES[what]:
        for (file, line, name), (_, _, _, ct, _) in raw.items():
            if name == fn_name and file.endswith(suffix):
                out.append(f"   stage {name:22} {100 * ct / total:5.1f}% cumulative  ({_short(file)}:{line})")
    for key, title in ((2, "own time (tottime)"), (3, "cumulative time")):
        out.append(f"-- top {top} by {title}, % of total")
        ranked = sorted(raw.items(), key=lambda kv: kv[1][key], reverse=True)[:top]
        for (file, line, name), (_, nc, tt, ct, _) in ranked:
            out.append(f"   {100 * tt / total:5.1f}% own {100 * ct / total:5.1f}% cum {nc:>9} calls  "
                       f"{_short(file)}:{line}({name})")
    return "\n".join(out)


def _short(file: str) -> str:
    for marker in ("site-packages/", "/src/"):
        if marker in file:
            return file.split(marker, 1)[1]
    return file


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=sorted(_MODELS), default="chain")
    p.add_argument("--size", type=int, default=5000, help="ops (chain) or blocks (transformer)")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--loops", type=int, default=1, help="calls per profile (small programs: 100 or so)")
    p.add_argument("--dump", help="also write <dump>.save.prof and <dump>.load.prof (for snakeviz etc.)")
    a = p.parse_args()

    import serde

    export = _MODELS[a.model]
    ep, _ = export(a.size)
    with tempfile.TemporaryDirectory(prefix="pt2serde-prof-") as d:
        path = os.path.join(d, "model.pt2s")
        small, _ = export(30 if a.model == "chain" else 1)
        serde.save(small, path)  # warm-up: imports and first-call caches
        serde.load(path)
        results = {"save": profile(lambda: [serde.save(ep, path) for _ in range(a.loops)]),
                   "load": profile(lambda: [serde.load(path) for _ in range(a.loops)])}
    for what, stats in results.items():
        print(report(what, stats, a.top))
        if a.dump:
            stats.dump_stats(f"{a.dump}.{what}.prof")
    return 0


if __name__ == "__main__":
    sys.exit(main())
