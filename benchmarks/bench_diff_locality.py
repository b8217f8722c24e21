"""Case: how many lines of ``pt2serde show`` change when one node is inserted mid-chain.

    python benchmarks/bench_diff_locality.py --case diff_locality --size 1000

Exports a chain of ``--size`` ops and the same chain with one extra op (``x * 0.5``) in the
middle, saves both with ``serde.save``, runs ``pt2serde show`` on each (in process, the exact
CLI output) and counts the lines a unified diff marks ``-`` or ``+``. No timing.
"""

from __future__ import annotations

import contextlib
import difflib
import io
import os
import sys
import tempfile

from _harness import base_parser, chain_length_for, export_chain, graph_nodes, main_guard

_SHOWN = 20  # changed lines copied into the JSON line, for reading


def run(size: int) -> dict:
    import serde
    from serde.cli import main as cli

    base, _ = export_chain(size)
    edited, _ = export_chain(size, insert_at=chain_length_for(size) // 2)
    texts = []
    with tempfile.TemporaryDirectory(prefix="pt2serde-bench-") as d:
        for i, ep in enumerate((base, edited)):
            path = os.path.join(d, f"v{i}.pt2s")
            serde.save(ep, path)
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                rc = cli(["show", path])
            if rc != 0:
                raise RuntimeError(f"pt2serde show {path} exited with {rc}")
            texts.append(out.getvalue())
    a, b = (t.splitlines() for t in texts)
    changed = _changed(a, b)
    return {
        "bench": "diff_locality",
        "size": size,
        **graph_nodes(base),
        "changed_lines": len(changed),
        "show_lines": len(a),
        "diff": changed[:_SHOWN],
    }


def _changed(a: list[str], b: list[str]) -> list[str]:
    """Lines a unified diff marks ``-`` or ``+`` (a replaced line counts twice).

    autojunk is off: on a long graph listing, difflib's popularity heuristic would otherwise
    treat repeated lines as junk and report a larger, misaligned change.
    """
    out: list[str] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag != "equal":
            out += [f"-{line}" for line in a[i1:i2]] + [f"+{line}" for line in b[j1:j2]]
    return out


def main() -> int:
    p = base_parser(__doc__.splitlines()[0])
    p.add_argument("--size", type=int, required=True, help="ops in the chain")
    a = p.parse_args()
    return main_guard(a.case, lambda: run(a.size))


if __name__ == "__main__":
    sys.exit(main())
