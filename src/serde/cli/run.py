"""``pt2serde run PROGRAM --inputs FILE``: execute a native program with the reference runtime."""

from __future__ import annotations

import argparse

__all__ = ["HELP", "add_arguments", "run"]

HELP = "run a native program on inputs (a safetensors file, an inputs bundle or an artifact's example inputs)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("program", help="a native program written by `pt2serde emit`")
    p.add_argument("--inputs", required=True,
                   help="inputs file: safetensors (keys args.0, kwargs.x or input names), an inputs bundle "
                        "(native.run.io.write_inputs) or a .pt2s artifact (its example inputs)")
    p.add_argument("--outputs", help="also write the outputs to this file: safetensors when it ends in "
                                     ".safetensors (keys output, output.0, ...), else a serde.bridge.bundle")
    p.add_argument("--arena", action="store_true", help="place planned tensors in the memory-plan arena")
    p.add_argument("--engine", choices=("python", "cpp"), default="python",
                   help="the reference runtime (python) or the C++ runtime built by `make native` (cpp)")
    p.add_argument("--profile", action="store_true",
                   help="also print the time per node and per module (submodules included), slowest first")
    p.add_argument("--max-loop-instructions", type=int, default=None, metavar="N",
                   help="fail when loops execute more than N instructions in one run (each iteration "
                        "counts its loop's length), instead of hanging (default: native.run.runtime.DEFAULT_MAX_LOOP_INSTRUCTIONS, ten million; 0: no limit)")
    p.add_argument("--compare", metavar="ARTIFACT",
                   help="also run ARTIFACT (the .pt2s the program was emitted from) in eager on the same inputs and "
                        "compare every intermediate value through the debug handles; stops at the first instruction "
                        "beyond tolerance, naming it (exit status 1); python engine only")
    p.add_argument("--atol", type=float, default=0.0, help="--compare: absolute tolerance (default 0: equal values)")
    p.add_argument("--rtol", type=float, default=0.0, help="--compare: relative tolerance (default 0)")


def run(args: argparse.Namespace) -> int:
    if args.compare and (args.engine != "python" or args.profile or args.outputs):
        import sys

        print("pt2serde run: error: --compare runs the python engine alone, without --profile or --outputs (the C++ "
              "runtime does not expose intermediate values)", file=sys.stderr)
        return 2
    import torch
    import torch.utils._pytree as pytree

    from native.run.io import (
        is_safetensors,
        read_inputs,
        read_safetensors_inputs,
        write_outputs,
        write_safetensors_outputs,
    )
    from native.run.runtime import DEFAULT_MAX_LOOP_INSTRUCTIONS, load

    limit = args.max_loop_instructions
    limit = DEFAULT_MAX_LOOP_INSTRUCTIONS if limit is None else (limit if limit > 0 else None)
    method = load(args.program, engine=args.engine, arena=args.arena, max_loop_instructions=limit)
    if is_safetensors(args.inputs):
        inputs, kwargs = read_safetensors_inputs(args.inputs, method.program)
    else:
        inputs, kwargs = read_inputs(args.inputs)
    if args.compare:
        return _compare(args, method, inputs, kwargs)
    timings = None
    if args.profile:
        # One run, no warm-up: a second run would apply buffer mutations twice.
        out, timings = method.run_profiled(*inputs, **kwargs)
    else:
        out = method.run(*inputs, **kwargs)
    leaves, _ = pytree.tree_flatten_with_path(out)
    for path, leaf in leaves:
        key = pytree.keystr(path) or "output"
        if isinstance(leaf, torch.Tensor):
            flat = leaf.detach().reshape(-1)
            head = ", ".join(f"{x:.6g}" if leaf.is_floating_point() else str(x) for x in flat[:6].tolist())
            more = ", ..." if flat.numel() > 6 else ""
            print(f"{key}: {str(leaf.dtype).removeprefix('torch.')}{list(leaf.shape)} [{head}{more}]")
        else:
            print(f"{key}: {leaf!r}")
    if args.outputs and str(args.outputs).endswith(".safetensors"):
        write_safetensors_outputs(args.outputs, method.program, out)
    elif args.outputs:
        write_outputs(args.outputs, out)
    if timings is not None:
        from native.run.profile import format_profile, summarize

        print()
        print(format_profile(summarize(method.program, timings)))
    return 0


def _compare(args: argparse.Namespace, method, inputs: tuple, kwargs: dict) -> int:
    import serde
    from native.run.compare import compare, format_comparison

    ep = serde.load(args.compare)
    res = compare(method, ep, inputs, kwargs, atol=args.atol, rtol=args.rtol)
    print(format_comparison(res, method.describe))
    return 0 if res.ok else 1
