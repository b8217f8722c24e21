"""``pt2serde demo``: export a built-in model, save, load, compare, show."""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from serde.cli.errors import UnknownDemoModelError

HELP = "export a built-in model, save it, load it back, compare, and show the artifact"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="transformer_block",
                   help=f"built-in model to use: {', '.join(MODELS)} (default: transformer_block)")
    p.add_argument("--out", default=None, help="where to write the artifact (default: a temporary file)")


# Cases of the shared zoo (serde.testing.zoo) taking one tensor whose first dimension is dynamic, so
# the comparison can run a second batch size.
MODELS = ("transformer_block", "mlp")


def run(args: argparse.Namespace) -> int:
    import torch

    import serde
    from canonical.render import render
    from serde.archive.artifact import read_artifact
    from serde.testing import assert_programs_equal, zoo

    if args.model not in MODELS:
        raise UnknownDemoModelError(
            f"--model {args.model!r}: no such built-in model; choose one of {', '.join(MODELS)}")
    print(f"1. export   {args.model} with torch.export (with a dynamic batch size)")
    ep = zoo.export_case(zoo.get(args.model))
    (x,), _ = ep.example_inputs
    with tempfile.TemporaryDirectory() as tmp:
        path = args.out or os.path.join(tmp, f"{args.model}.pt2s")
        t0 = time.perf_counter()
        serde.save(ep, path)
        t1 = time.perf_counter()
        loaded = serde.load(path)
        t2 = time.perf_counter()
        size = os.path.getsize(path)
        print(f"2. save     {path} ({size:,} bytes, {1000 * (t1 - t0):.1f} ms)")
        print(f"3. load     ({1000 * (t2 - t1):.1f} ms)")
        assert_programs_equal(ep, loaded)
        other = torch.randn(3, *x.shape[1:])
        assert_programs_equal(ep, loaded, inputs=((other,), {}))
        print("4. compare  graph, signature, metas, ranges, weights and outputs match (2 input sets)")
        print("5. show\n")
        print(render(read_artifact(path).program))
    torch.manual_seed(0)
    return 0
