"""``pt2serde demo``: export a built-in model, save, load, compare, show."""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from serde.errors import SerializeError

HELP = "export a built-in model, save it, load it back, compare, and show the artifact"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="transformer_block",
                   help="zoo case to use (default: transformer_block; see tests.zoo)")
    p.add_argument("--out", default=None, help="where to write the artifact (default: a temporary file)")


class UnknownDemoModelError(SerializeError):
    """``--model`` names no built-in model."""


def run(args: argparse.Namespace) -> int:
    import torch
    from tests import zoo

    import serde
    from canonical.render import render
    from serde.archive.artifact import read_artifact
    from serde.testing import assert_programs_equal

    try:
        case = zoo.get(args.model)
    except KeyError:
        raise UnknownDemoModelError(
            f"--model {args.model!r}: no such built-in model; choose one of "
            f"{', '.join(c.name for c in zoo.CASES)}") from None
    print(f"1. export   {case.name} with torch.export (dynamic shapes where the case declares them)")
    ep = zoo.export_case(case)
    with tempfile.TemporaryDirectory() as tmp:
        path = args.out or os.path.join(tmp, f"{case.name}.pt2s")
        t0 = time.perf_counter()
        serde.save(ep, path)
        t1 = time.perf_counter()
        loaded = serde.load(path)
        t2 = time.perf_counter()
        size = os.path.getsize(path)
        print(f"2. save     {path} ({size:,} bytes, {1000 * (t1 - t0):.1f} ms)")
        print(f"3. load     ({1000 * (t2 - t1):.1f} ms)")
        assert_programs_equal(ep, loaded)
        runs = 1
        for inputs in case.other_inputs():
            assert_programs_equal(ep, loaded, inputs=inputs)
            runs += 1
        print(f"4. compare  graph, signature, metas, ranges, weights and outputs match "
              f"({runs} input set{'s' if runs > 1 else ''})")
        print("5. show\n")
        print(render(read_artifact(path).program))
    torch.manual_seed(0)
    return 0
