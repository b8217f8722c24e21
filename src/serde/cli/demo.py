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
                   help=f"built-in model to use: {', '.join(MODELS)} (default: transformer_block)")
    p.add_argument("--out", default=None, help="where to write the artifact (default: a temporary file)")


# The demo's own models (the test zoo lives in tests/, outside the package): name -> input shape.
MODELS = {"transformer_block": (2, 8, 32), "mlp": (8, 16)}


class UnknownDemoModelError(SerializeError):
    """``--model`` names no built-in model."""


def run(args: argparse.Namespace) -> int:
    import torch

    import serde
    from canonical.render import render
    from serde.archive.artifact import read_artifact
    from serde.testing import assert_programs_equal

    if args.model not in MODELS:
        raise UnknownDemoModelError(
            f"--model {args.model!r}: no such built-in model; choose one of {', '.join(MODELS)}")
    print(f"1. export   {args.model} with torch.export (with a dynamic batch size)")
    torch.manual_seed(0)
    model, x, dynamic_shapes = _build(args.model)
    ep = torch.export.export(model.eval(), (x,), dynamic_shapes=dynamic_shapes)
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


def _build(name: str):
    """The model, an example input (seeded by the caller) and its dynamic shapes."""
    import torch
    from torch import nn
    from torch.export import Dim

    class Block(nn.Module):
        """Pre-norm transformer block with causal multi-head self-attention."""

        def __init__(self, d: int = 32, heads: int = 4) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
            self.heads = heads

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
            q, k, v = (z.reshape(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
            a = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
            return x + self.mlp(self.ln2(x))

    batch = Dim("batch", min=1, max=32)
    if name == "mlp":
        model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
        return model, torch.randn(*MODELS[name]), ({0: batch},)
    return Block(), torch.randn(*MODELS[name]), ({0: batch, 1: Dim("seq", min=2, max=64)},)
