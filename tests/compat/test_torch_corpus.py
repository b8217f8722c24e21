"""Artifacts written under every supported torch release load under the running one and compute
what the writer computed (outputs, input and buffer updates, random draws, rejected inputs).

The fast suite reads the zoo and breadth cases of every release folder; ``make test-all`` reads all
of them (ExportDB and the patterns too) and compares with torch's own pair as the baseline. Run
under each supported torch (`make test`, `make test-cross`), this covers both directions.
"""

from __future__ import annotations

import copy
import functools
import io
import re
import warnings
from pathlib import Path

import pytest
import torch
from torch.testing._internal.two_tensor import TwoTensor

import serde
from serde.archive.artifact import read_artifact
from serde.bridge.bundle import load_tree
from serde.core import wire
from serde.core.version import SUPPORTED_TORCH
from tests import zoo_breadth
from tests.compat.test_fixtures import as_frozen
from tests.compat.torch_corpus import (
    FAST_PREFIXES,
    ROOT,
    compare_record,
    corpus,
    read_index,
    release_dirs,
    run_one,
    running_release,
    writer_cpu,
)
from tests.serde._differential import isolate

# What the writer registered for its programs, the reader registers too: torch's torchbind test
# classes with their codec, and the tensor subclass of pattern/wrapper_subclass_parameter.
HAVE_TORCHBIND = zoo_breadth.load_torchbind_test_classes()
serde.register_tensor_subclass(TwoTensor)

RELEASES = release_dirs()
CASES = [(d, name) for d in RELEASES for name, entry in sorted(read_index(d).items()) if entry["status"] == "saved"]

# (writer release, case) -> why its records cannot match under another release. Empty: every saved
# case crosses every supported release exactly.
KNOWN_DIFFERENCES: dict[tuple[str, str], str] = {}


def _id(case: tuple[Path, str]) -> str:
    return f"{case[0].name}:{case[1]}"


def _fast(name: str) -> bool:
    return name.startswith(FAST_PREFIXES)


def _params(fast: bool) -> list:
    out = []
    for d, name in CASES:
        if _fast(name) != fast:
            continue
        marks = []
        if name.startswith("breadth/torchbind") and not HAVE_TORCHBIND:
            marks.append(pytest.mark.skip(reason=f"torch {torch.__version__} ships no lib/libtorchbind_test.so, "
                                                 "whose classes these programs hold"))
        why = KNOWN_DIFFERENCES.get((d.name, name))
        if why and d.name != running_release():
            marks.append(pytest.mark.xfail(reason=why, strict=True))
        out.append(pytest.param((d, name), id=_id((d, name)), marks=marks))
    return out


def test_every_supported_release_has_a_corpus():
    have = {d.name for d in RELEASES}
    want = {f"{a}.{b}" for a, b in SUPPORTED_TORCH}
    assert want <= have, f"supported releases without fixtures/torch/<release>/: {sorted(want - have)}"
    for d in RELEASES:
        index = read_index(d)
        saved = [n for n, e in index.items() if e["status"] == "saved"]
        assert len(saved) >= 100, f"{d}: only {len(saved)} saved cases"
        for name in saved:
            assert (d / name / "model.pt2s").is_file() and (d / name / "io.json").is_file(), f"{d}/{name}"


def test_the_makefile_lists_the_supported_releases():
    text = (ROOT.parents[1] / "Makefile").read_text()
    listed = re.search(r"^SUPPORTED_TORCH_VERSIONS := (.+)$", text, re.MULTILINE).group(1).split()
    assert [tuple(int(x) for x in v.split(".")[:2]) for v in listed] == list(SUPPORTED_TORCH)


def _check(d: Path, name: str) -> None:
    case_dir = d / name
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. the writer's torch in a loaded program's metadata
        ep = serde.load(case_dir / "model.pt2s")
    records = load_tree(case_dir / "io.json")
    assert records, f"{case_dir}: no runs"
    cpu = writer_cpu(d)
    problems = [p for r in records if (p := compare_record(lambda ep=ep: isolate(ep.module()), r, cpu))]
    assert not problems, f"written by torch {d.name}, read by {torch.__version__}: {name}: " + "; ".join(problems)


@pytest.mark.parametrize("case", _params(fast=True))
def test_zoo_and_breadth_cross_releases(case):
    _check(*case)


@pytest.mark.slow
@pytest.mark.parametrize("case", _params(fast=False))
def test_exportdb_and_patterns_cross_releases(case):
    _check(*case)


def test_the_comparison_notices_a_wrong_output_and_a_lost_rejection():
    d = next(d for d in RELEASES if (d / "zoo" / "mlp" / "io.json").is_file())
    ep = serde.load(d / "zoo" / "mlp" / "model.pt2s")
    records = load_tree(d / "zoo" / "mlp" / "io.json")
    good = records[0]
    assert compare_record(lambda: isolate(ep.module()), good, writer_cpu(d)) is None
    bad = dict(good, outputs=good["outputs"] + 1e-3)
    assert "outputs differ" in compare_record(lambda: isolate(ep.module()), bad, writer_cpu(d))
    # Written on this machine's CPU, results must agree bit for bit: one ulp is a difference. Written
    # on another or an unrecorded CPU, one ulp is within float32's tolerance, and 1e-3 is not.
    cpu = torch.backends.cpu.get_cpu_capability()
    args, kwargs = good["inputs"]
    here = dict(good, **run_one(lambda: isolate(ep.module()), (tuple(args), kwargs), good["seed"]))
    assert compare_record(lambda: isolate(ep.module()), here, cpu) is None
    ulp = dict(here, outputs=torch.nextafter(here["outputs"], torch.tensor(float("inf"))))
    assert "outputs differ" in compare_record(lambda: isolate(ep.module()), ulp, cpu)
    assert compare_record(lambda: isolate(ep.module()), ulp, None) is None
    assert "outputs differ" in compare_record(lambda: isolate(ep.module()), dict(here, outputs=here["outputs"] + 1e-3), None)
    rejected = next(r for r in records if "error" in r)
    accepted = dict(good, error=rejected["error"])
    assert "the writer raised" in compare_record(lambda: isolate(ep.module()), accepted)


# ---------------------------------------------------------------- the same release: a fresh export


@functools.cache
def _corpus_by_name() -> dict:
    return {c.name: c for c in corpus()}


def _canonical(program) -> dict:
    from canonical.canonicalize import canonicalize
    from serde.bridge.effects import op_facts

    doc = wire.decode_json(wire.encode(canonicalize(program, facts=op_facts)[0]))
    doc.pop("torch_version", None)  # the writer's patch release
    doc.pop("schema_version", None)  # a later pt2serde writes its own, from the same export
    return as_frozen(doc)  # the corpus was frozen before module types and torch's guard order were kept


def _same_release_params() -> list:
    here = ROOT / running_release()
    return [pytest.param(name, id=name) for d, name in CASES if d == here and name.startswith("zoo/")]


@pytest.mark.parametrize("name", _same_release_params())
def test_a_fresh_export_under_the_writers_release_stores_the_same_program(name):
    """Exports may differ legitimately between releases, so this compares within the writer's own."""
    from serde.bridge.program import serialize_program

    stored = read_artifact(ROOT / running_release() / name / "model.pt2s").program
    ep, _ = _corpus_by_name()[name].make()
    assert _canonical(stored) == _canonical(serialize_program(ep))


# ---------------------------------------------------------------- the baseline: torch's own pair


def _torch_pair_result(d: Path, name: str) -> str | None:
    """None when torch's own load of its own save crosses to this release and computes the same."""
    data = d / name / "torch.pt2"
    if not data.is_file():
        return "torch could not save it"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ep = torch.export.load(io.BytesIO(data.read_bytes()))
    except Exception as e:  # the baseline's failure is a data point, not an error of this test
        return f"load raises {type(e).__name__}"
    problems = []
    for r in load_tree(d / name / "io.json"):
        try:
            p = compare_record(lambda ep=ep: isolate(copy.deepcopy(ep).module()), r, writer_cpu(d))
        except Exception as e:  # as above
            p = f"raises {type(e).__name__}"
        if p:
            problems.append(p)
    return "; ".join(problems) or None


@pytest.mark.slow
def test_ours_crosses_releases_wherever_torchs_own_pair_does():
    """The baseline: for every case of every other release, torch.export.load of torch.export.save.
    Ours must cross wherever torch's does (the per-case tests above show it crosses everywhere)."""
    here = running_release()
    table = {"torch crosses": 0, "torch fails": 0}
    for d, name in CASES:
        if d.name == here or (name.startswith("breadth/torchbind") and not HAVE_TORCHBIND):
            continue
        if _torch_pair_result(d, name) is None:
            table["torch crosses"] += 1
        else:
            table["torch fails"] += 1
        _check(d, name)
    print(f"baseline under torch {torch.__version__}: {table}")
