"""The cross-release corpus: programs saved under one torch release, loaded under another.

``fixtures/torch/<major>.<minor>/`` holds, for every program of the differential corpus (the zoo,
the breadth zoo, ExportDB and the patterns people export; the frozen schema fixtures are zoo and
breadth cases too), what the torch release named by the folder wrote:

- ``model.pt2s``: ``serde.save`` of the exported program;
- ``torch.pt2``: ``torch.export.save`` of it, the baseline: does torch's own pair cross releases?
- ``io.json`` (a ``serde.save_tree`` file): one record per input the writer ran, with the seed, and
  either the exported program's results (``outputs``, ``inputs_after``, ``buffers_after`` and four
  random draws made right after the call) or the family of the error it raised (``error``): the
  inputs that probe the guards (:func:`tests.serde._differential.dim_variants`) are there too, so
  a reader must reject what the writer rejected.

``index.json`` lists every case with what happened to it under the writer (saved, or why not).
``fixtures/freeze_torch.py`` writes a release's folder; the tests in ``tests/compat/test_torch_*.py``
read every release's folder under the running torch.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.utils._pytree as pytree

from serde.core.version import torch_release
from tests.serde._diff_corpus import CorpusCase, exportdb_cases, pattern_cases, zoo_cases
from tests.serde._differential import dim_variants, error_family, isolate, same

__all__ = ["ROOT", "release_dirs", "corpus", "run_all", "compare_record", "running_release", "writer_cpu",
           "run_one",
           "FAST_PREFIXES"]

ROOT = Path(__file__).resolve().parents[2] / "fixtures" / "torch"
# The sources whose cases the fast suite reads (the others run under `make test-all`).
FAST_PREFIXES = ("zoo/", "breadth/")
SEED = 1234


def running_release() -> str:
    major, minor = torch_release(str(torch.__version__))
    return f"{major}.{minor}"


def release_dirs() -> list[Path]:
    """Every release folder with an index, oldest first."""
    found = [p.parent for p in ROOT.glob("*/index.json")]
    return sorted(found, key=lambda p: tuple(int(x) for x in p.name.split(".")))


def corpus() -> list[CorpusCase]:
    return zoo_cases() + exportdb_cases() + pattern_cases()


def run_one(factory: Callable[[], Any], inputs: Any, seed: int) -> dict:
    module = factory()
    args, kwargs = copy.deepcopy(inputs)
    torch.manual_seed(seed)
    try:
        with torch.no_grad():
            out = module(*args, **kwargs)
    except Exception as e:  # a rejection is a result to record and compare
        return {"error": error_family(e)}
    return {"outputs": out, "inputs_after": [list(args), kwargs], "draws": torch.rand(4),
            "buffers_after": {k: v.detach().clone() for k, v in module.named_buffers()}}


def run_all(ep: torch.export.ExportedProgram, inputs: list[Any]) -> list[dict]:
    """The records of ``io.json``: each input (and each guard probe of the first) run on a private
    copy of ``ep.module()``'s state, after ``torch.manual_seed`` of a fixed seed."""
    probes = dim_variants(ep, inputs[0]) if inputs else []
    out = []
    for i, (label, x) in enumerate([*((f"input {i}", x) for i, x in enumerate(inputs)), *probes]):
        seed = SEED + i
        record = {"label": label, "seed": seed, "inputs": [list(x[0]), x[1]]}
        record.update(run_one(lambda: isolate(ep.module()), (tuple(x[0]), x[1]), seed))
        out.append(record)
    return out


def compare_record(module_factory: Callable[[], Any], record: dict, writer_cpu: str | None = None) -> str | None:
    """None when the program computes what the writer recorded for this input, else what differs.

    Results are compared bit for bit when the writer's CPU ran the same kernels as this one
    (``writer_cpu``, torch's CPU capability, equals this machine's): then a release that changed a
    kernel's numerics shows up here, to be listed with its reason. torch picks its float kernels by
    the CPU's vector extensions (AVX2, AVX512), whose sums round differently, so against a writer on
    another or an unrecorded CPU a floating-point leaf may differ within ``torch.testing``'s default
    tolerance for its dtype; everything else (shapes, dtypes, integers, booleans, the random draws,
    which inputs are rejected) is still compared bit for bit."""
    args, kwargs = record["inputs"]
    got = run_one(module_factory, (tuple(args), kwargs), record["seed"])
    if "error" in record or "error" in got:
        if record.get("error") != got.get("error"):
            return (f"{record['label']}: the writer {_verdict(record)}, this torch {_verdict(got)}")
        return None
    exact = writer_cpu == torch.backends.cpu.get_cpu_capability()
    for what in ("outputs", "inputs_after", "buffers_after", "draws"):
        d = _same_tree(got[what], record[what], exact=exact or what == "draws")
        if d:
            return f"{record['label']}: {what} differ: {d}"
    return None


def _verdict(r: dict) -> str:
    return f"raised {r['error']}" if "error" in r else "accepted"


def _same_tree(got: Any, want: Any, exact: bool) -> str | None:
    """Leaf by leaf: the stored tree's containers come back as the bundle rebuilds them, so only the
    leaves and their number are compared; bit for bit, or (``exact=False``) floating-point tensors
    within their dtype's default tolerance once their dtype, shape and nan places agree."""
    got, want = pytree.tree_leaves(got), pytree.tree_leaves(want)
    d = same(got, want)
    if d is None or exact or len(got) != len(want):
        return d
    for i, (x, y) in enumerate(zip(got, want, strict=True)):
        floating = isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.is_floating_point()
        if not floating or (x.dtype, x.shape) != (y.dtype, y.shape):
            if (d := same(x, y)) is not None:
                return f"[{i}]: {d}"
            continue
        try:
            torch.testing.assert_close(x.detach(), y.detach(), equal_nan=True)
        except AssertionError as e:
            return f"[{i}]: values differ beyond {x.dtype}'s tolerance ({str(e).splitlines()[1].strip()})"
    return None


def read_index(d: Path) -> dict[str, dict]:
    return json.loads((d / "index.json").read_text())["cases"]


def writer_cpu(d: Path) -> str | None:
    """The CPU capability torch had where the release folder ``d`` was written (None: not recorded)."""
    return json.loads((d / "index.json").read_text())["written_by"].get("cpu_capability")
