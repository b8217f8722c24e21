"""Write the fuzzer's own seeds: programs the frozen fixtures lack, saved once.

``generators``: lifted generators. ``debug_extra``: a ``debug.json`` (stack traces, module types and
the provenance ``run_decompositions`` records) and extra files, which no fixture holds, with a
cond whose predicate is reduced from a mask the size of the input (so a mutation can hand cond a
predicate of many elements), dynamic sizes and a submodule.

The fixtures are frozen at each schema version's release; these seeds cover constructs added
since, so that the structure-aware mutations reach their load paths too. Run from the repository
root when adding a seed (the files are checked in so that a case replays byte for byte):

    PYTHONPATH=src:. .venv/bin/python tests/serde/fuzz/make_seeds.py
"""

from __future__ import annotations

from pathlib import Path

import torch

import serde

SEEDS = Path(__file__).resolve().parent / "seeds"


class Generators(torch.nn.Module):
    """Lifted generators (one held, one seeded in forward) next to global draws and a buffer update."""

    def __init__(self) -> None:
        super().__init__()
        self.gen = torch.Generator().manual_seed(7)
        self.register_buffer("count", torch.zeros(3))

    def forward(self, x):
        local = torch.Generator().manual_seed(3)
        self.count.add_(1)
        a = torch.rand(x.shape, generator=self.gen)
        b = torch.randn(x.shape)
        c = torch.randint(0, 10, x.shape, generator=local)
        return x * a + b + c + self.count


class DebugExtra(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        self.register_buffer("scale", torch.full((3,), 0.5))

    def forward(self, x):
        h = self.lin(x) * self.scale
        mask = h.sum(1) > 0
        return torch.cond(mask.all(), lambda t: t.relu(), lambda t: t.neg(), (h,)), mask


def main() -> None:
    torch.manual_seed(0)
    ep = torch.export.export(Generators(), (torch.ones(3),))
    out = SEEDS / "generators"
    out.mkdir(parents=True, exist_ok=True)
    serde.save(ep, out / "model.pt2s")
    print(f"wrote {out / 'model.pt2s'}")

    torch.manual_seed(0)
    x = torch.randn(4, 3)
    ep = torch.export.export(DebugExtra(), (x,), dynamic_shapes={"x": {0: torch.export.Dim("batch", min=2, max=64)}})
    out = SEEDS / "debug_extra"
    out.mkdir(parents=True, exist_ok=True)
    serde.save(ep.run_decompositions(), out / "model.pt2s", debug_info=True,
               extra_files={"notes.txt": "fuzz seed\n", "config.json": '{"batch": [2, 64]}'})
    print(f"wrote {out / 'model.pt2s'}")


if __name__ == "__main__":
    main()
