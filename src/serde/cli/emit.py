"""``pt2serde emit IN OUT``: flatten an artifact into a native program file."""

from __future__ import annotations

import argparse
import os
import time

__all__ = ["HELP", "add_arguments", "run"]

HELP = "emit a native program (instructions + weights) from an artifact, for `pt2serde run`"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("input", help="a pt2serde artifact (.pt2s)")
    p.add_argument("output", help="the native program file to write (.pt2n)")
    p.add_argument("--no-plan", action="store_true", help="skip the memory plan")
    p.add_argument("--listing", action="store_true", help="print the program's instructions")
    p.add_argument("--plan", action="store_true",
                   help="print the memory plan: arena size, peak live bytes, naive size and the largest slots "
                        "with their nodes")
    p.add_argument("--planner", choices=("greedy", "shared-objects", "naive"), default="greedy",
                   help="memory planner: greedy by size for offsets (greedy, the default), greedy by size for "
                        "shared buffers as ExecuTorch's greedy (shared-objects), or no reuse (naive)")


def run(args: argparse.Namespace) -> int:
    from native.emit.emitter import emit_artifact
    from native.format import kernels  # noqa: F401  (imports torch, outside the timed region)
    from native.format.program import write_program
    from native.format.render import render, summary

    t0 = time.perf_counter()
    native = emit_artifact(args.input, plan=not args.no_plan, planner=args.planner)
    elapsed = time.perf_counter() - t0
    write_program(args.output, native)
    if args.listing:
        print(render(native.program), end="")
    print(f"wrote {args.output}: {os.path.getsize(args.output)} bytes "
          f"(artifact {os.path.getsize(args.input)} bytes), emitted in {elapsed * 1000:.1f} ms")
    if not args.listing:  # the listing ends with the summary already
        print(summary(native.program))
    if args.plan:
        from native.emit.plan_report import format_plan, plan_report

        print()
        print(format_plan(plan_report(native.program), planner=args.planner))
    return 0
