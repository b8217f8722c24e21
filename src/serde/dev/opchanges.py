"""``python -m serde.dev.opchanges``: the operator changes between consecutive supported torch
releases (the committed snapshots), each with how its upgrader step handles it.

    python -m serde.dev.opchanges              # every step
    python -m serde.dev.opchanges OLD NEW      # two snapshot files (e.g. a new release's, before its step exists)

Exit status 1 when a change has no handling in some direction (a step must rewrite it or list it as
refused with a reason), else 0. Needs no torch.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from serde.opsets import STEPS, diff_snapshots, step_handling
from serde.opsets.schemas import parse_snapshot, release_text

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m serde.dev.opchanges", description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="*", metavar="SNAPSHOT", help="an older and a newer snapshot file")
    args = p.parse_args(argv)
    if args.files:
        if len(args.files) != 2:
            p.error("give two snapshot files (older, newer), or none")
        old, new = (parse_snapshot(Path(f).read_text("utf-8")) for f in args.files)
        for change in diff_snapshots(old, new):
            print(change.line())
        return 0
    gaps = 0
    for step in STEPS:
        print(f"torch {release_text(step.OLDER)} -> {release_text(step.NEWER)} ({step.__name__})")
        for h in step_handling(step):
            print(f"  {h.change.line()}")
            print(f"      up:   {h.up or 'NOT HANDLED'}")
            print(f"      down: {h.down or 'NOT HANDLED'}")
            gaps += (h.up is None) + (h.down is None)
    if gaps:
        print(f"{gaps} change direction(s) not handled: add a rewrite or a listed refusal to the step")
    return 1 if gaps else 0


if __name__ == "__main__":
    raise SystemExit(main())
